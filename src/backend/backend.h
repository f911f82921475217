/*
 * backend.h: the one table of op entry points every device fills in.
 *
 * The model and trainer never call a kernel directly: they call the ops layer
 * (src/ops/), which calls through this table. The CPU backend (backend/cpu/)
 * is the reference every other backend is checked against; the CUDA backend
 * (backend/cuda/) fills in the same table with device pointers. The ops and
 * their arguments are listed once, in op_list.h; this header turns the list
 * into the table's fields. A backend is made by forge_backend_create
 * (backend.c) from the runtime options (options.h), which it keeps.
 *
 * Conventions (read these before adding an op):
 * - Kernels take raw pointers and sizes; all pointers are device pointers of
 *   the backend being called. Tensors are row-major, last dimension contiguous.
 * - Shape legend: N rows (= B*T), B batch, T time, C channels, OC output
 *   channels, V vocabulary, NH query heads, NKV key/value heads, HS head size,
 *   H hidden size of the MLP.
 * - Every *_backward writes gradients by ACCUMULATION (+=), both into
 *   parameter gradients and into activation gradients. The autograd tape
 *   allocates gradients zeroed, so a tensor used by several ops (the residual
 *   stream, tied embeddings) collects every contribution without special cases.
 * - Forward outputs are overwritten (=), never accumulated.
 * - Ops never synchronise with the host; only copy_to_host and synchronize do.
 * - An entry left NULL means "not supported": callers report
 *   FORGE_ERR_UNSUPPORTED naming the op, never fall back silently.
 * - The packed qkv layout is (B, T, (NH + 2*NKV) * HS): NH query heads, then
 *   NKV key heads, then NKV value heads, each HS wide. Query head h reads
 *   key/value head h / (NH / NKV) (grouped-query attention).
 */
#ifndef FORGE_BACKEND_H
#define FORGE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../base/tensor.h"
#include "op_list.h"
#include "options.h"

typedef struct forge_backend forge_backend;

/* The constant hyper-parameters of the AdamW update, passed by value. What changes from step to step (the learning
 * rate, the bias corrections) is read from device memory (the adamw entry of op_list.h), and the weight decay comes
 * with each span. */
typedef struct {
    float beta1, beta2; /* moment decay rates */
    float eps;          /* added outside the square root: m / (sqrt(v) + eps) */
    float max_grad_norm;/* clip threshold; <= 0 disables clipping */
} forge_adamw_params;

/* One tensor (or a piece of one) in the flat parameter buffer the multi-tensor AdamW updates: elements
 * [begin, begin + n), decoupled weight decay weight_decay (0 for biases and norms). 16 bytes. */
typedef struct {
    uint64_t begin;
    uint32_t n;
    float weight_decay;
} forge_adamw_span;

struct forge_backend {
    const char *name; /* names the device and, on CUDA, the matmul path: every log line that names it says which GEMM ran */
    forge_device_kind kind;
    forge_runtime_options options; /* as given to forge_backend_create */
    void *ctx;                     /* backend-private state: streams, handles, workspaces */

    /* ---- memory ---------------------------------------------------------- */
    forge_status (*mem_alloc)(forge_backend *be, void **ptr, size_t bytes);
    void (*mem_free)(forge_backend *be, void *ptr);
    forge_status (*copy_to_device)(forge_backend *be, void *dst, const void *src, size_t bytes);
    forge_status (*copy_to_host)(forge_backend *be, void *dst, const void *src, size_t bytes);
    forge_status (*copy_device)(forge_backend *be, void *dst, const void *src, size_t bytes);
    forge_status (*memset_zero)(forge_backend *be, void *dst, size_t bytes);
    forge_status (*synchronize)(forge_backend *be);
    /* An input error a kernel found since the last call (a token id outside its table): FORGE_ERR_DATA naming the
     * first one, else FORGE_OK. The CPU reference reports such errors from the op itself; a device kernel records
     * them in device memory instead of stopping, so this synchronises: call it once per step, where the step reads
     * its loss anyway. */
    forge_status (*poll_errors)(forge_backend *be);
    void (*destroy)(forge_backend *be);

    /* ---- the side stream: communication beside the ops ----------------------------------------------------
     * A backend runs its ops in order on one stream; collective communication (runtime/comm.h) may run on a
     * second, the side stream, so that it overlaps the ops issued after it. side_fork: work issued on the side
     * stream from now on starts only after everything issued so far on the main stream (an event recorded there,
     * waited for by the side stream). side_join: ops issued on the main stream from now on start only after
     * everything issued so far on the side stream. side_synchronize: the host waits for the side stream. None of
     * these waits on the host except side_synchronize, and fork and join are recordable into a graph (a fork
     * must be joined before the recording ends). A backend with one stream (the CPU, where every op has finished
     * when it returns) fills in no-ops. */
    forge_status (*side_fork)(forge_backend *be);
    forge_status (*side_join)(forge_backend *be);
    forge_status (*side_synchronize)(forge_backend *be);

    /* ---- graphs: NULL where ops only run eagerly (the CPU) -------------------------------------------------
     * The ops issued between capture_begin and capture_end are recorded, not run, and graph_launch replays them
     * with the same pointers, sizes and scalars; what changes between replays must live in device memory the
     * recorded ops read. capture_end fails (and the caller runs eagerly) if an op could not be recorded.
     * graph_launch fails with FORGE_ERR_STALE if the backend has since replaced a workspace the graph uses. */
    forge_status (*capture_begin)(forge_backend *be);
    forge_status (*capture_end)(forge_backend *be, void **graph);
    forge_status (*graph_launch)(forge_backend *be, void *graph);
    void (*graph_destroy)(forge_backend *be, void *graph);

    /* ---- the ops of op_list.h: forge_status (*NAME)(forge_backend *be, ...) */
#define FORGE_OP_FIELD(name, dtype, flags, args, cases) forge_status (*name)(forge_backend * be args);
    FORGE_OP_LIST(FORGE_OP_FIELD, FORGE_ARG_DECL, FORGE_OP_NOTHING)
#undef FORGE_OP_FIELD
};

/* Creates a backend of `kind` configured by `options` (NULL: forge_runtime_options_default; options->device
 * is ignored in favour of `kind`). FORGE_ERR_UNSUPPORTED for CUDA in a build without it. */
forge_status forge_backend_create(forge_backend **out, forge_device_kind kind, const forge_runtime_options *options);
void forge_backend_destroy(forge_backend *be);

/* The op's table entry as an untyped pointer (NULL: unsupported), its name, dtype and flags. */
const void *forge_backend_op(const forge_backend *be, forge_op op);
const char *forge_op_name(forge_op op);
forge_dtype forge_op_dtype(forge_op op);
unsigned forge_op_flags(forge_op op);

/* The CPU backend through forge_backend_create: `threads` (<= 0: OpenMP's default) and, with reference = 1,
 * the plain single-threaded loops every other backend is checked against. */
forge_status forge_backend_create_cpu(forge_backend **out, int threads, int reference);

#endif
