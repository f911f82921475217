/*
 * cuda_backend.cu: builds the CUDA forge_backend table (called by
 * forge_backend_create, backend.c): memory, copies, the stream, the matmul
 * path of the runtime options, and every op of op_list.h bound.
 *
 * The decisions a reader would otherwise get wrong:
 * - mem_alloc is a plain cudaMalloc: the caching allocator (runtime/pool.c)
 *   sits on top, so after the first micro-batch no op allocates. cudaFree may
 *   synchronise the device; the pool calls it only when trimming.
 * - Every op runs on ctx->stream, created non-blocking, so nothing is ever
 *   issued on the legacy default stream and no op waits on the host.
 *   copy_to_host is the one op that synchronises (it must: the caller reads
 *   the buffer when it returns).
 * - The matmul mode comes from the runtime options (options.h), checked
 *   here: fp32 = forge's exact fp32 SIMT kernel (the default: deterministic,
 *   the same bits everywhere), simt64 / simt128 (tile forced, tests), cublas
 *   (pedantic fp32), tf32 (forge's tf32 tensor-core kernels, explicit opt-in:
 *   not exact fp32), auto (per shape, the faster of simt and cuBLAS, both
 *   exact fp32; matmul_table.cu). auto is not the default: its choice comes
 *   from a timing, so two machines (or a first run and a cached one) may
 *   pick different kernels and sum in different orders.
 * - A build without cuBLAS (make cuda CUBLAS=0, FORGE_NO_CUBLAS): cublas is
 *   refused with FORGE_ERR_UNSUPPORTED; auto prints a note and runs fp32.
 * - ctx->pdl (the runtime options' pdl, default on): the bf16 step's kernels
 *   launch with programmatic dependent launch (pdl.cuh), each one's launch and
 *   prologue under the previous kernel's tail; the results are the same bits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../devices.h"
#include "cuda_backend.h"
#include "cuda_ops.h"

static forge_status cuda_mem_alloc(forge_backend *be, void **ptr, size_t bytes) {
    (void)be;
    *ptr = NULL;
    if (bytes == 0) bytes = 256; /* a unique pointer, freed like any other */
    cudaError_t e = cudaMalloc(ptr, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* clear it: the pool may trim and retry */
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        *ptr = NULL;
        return forge_error(FORGE_ERR_OOM,
                           "cudaMalloc of %zu bytes: out of device memory (%.1f of %.1f MiB free)",
                           bytes, free_b / 1048576.0, total_b / 1048576.0);
    }
    if (e != cudaSuccess) {
        *ptr = NULL;
        return forge_error(FORGE_ERR_DEVICE, "cudaMalloc of %zu bytes failed: %s", bytes,
                           cudaGetErrorString(e));
    }
    return FORGE_OK;
}

static void cuda_mem_free(forge_backend *be, void *ptr) {
    (void)be;
    if (ptr) cudaFree(ptr);
}

static forge_status cuda_copy_to_device(forge_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return FORGE_OK;
    /* From pageable memory this returns once src has been staged, so the
     * caller may reuse src at once; the device copy itself is stream-ordered. */
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_get_ctx(be)->stream));
    return FORGE_OK;
}

static forge_status cuda_copy_to_host(forge_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return FORGE_OK;
    cudaStream_t s = cuda_get_ctx(be)->stream;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    CUDA_TRY(cudaStreamSynchronize(s));
    return FORGE_OK;
}

static forge_status cuda_copy_device(forge_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return FORGE_OK;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_get_ctx(be)->stream));
    return FORGE_OK;
}

static forge_status cuda_memset_zero(forge_backend *be, void *dst, size_t bytes) {
    if (bytes == 0) return FORGE_OK;
    CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, cuda_get_ctx(be)->stream));
    return FORGE_OK;
}

static forge_status cuda_synchronize(forge_backend *be) {
    CUDA_TRY(cudaStreamSynchronize(cuda_get_ctx(be)->stream));
    return FORGE_OK;
}

/* The side stream (backend.h): one event each way, re-recorded at every fork and join. A wait takes the event's
 * most recent record at the time it is issued, so reusing the events orders each fork and join with the work
 * issued before it and nothing later; under capture the same calls become the graph's cross-stream edges. */
static forge_status cuda_side_fork(forge_backend *be) {
    cuda_ctx *ctx = cuda_get_ctx(be);
    CUDA_TRY(cudaEventRecord(ctx->fork_event, ctx->stream));
    CUDA_TRY(cudaStreamWaitEvent(ctx->side, ctx->fork_event, 0));
    return FORGE_OK;
}

static forge_status cuda_side_join(forge_backend *be) {
    cuda_ctx *ctx = cuda_get_ctx(be);
    CUDA_TRY(cudaEventRecord(ctx->join_event, ctx->side));
    CUDA_TRY(cudaStreamWaitEvent(ctx->stream, ctx->join_event, 0));
    return FORGE_OK;
}

static forge_status cuda_side_synchronize(forge_backend *be) {
    CUDA_TRY(cudaStreamSynchronize(cuda_get_ctx(be)->side));
    return FORGE_OK;
}

static forge_status cuda_poll_errors(forge_backend *be) {
    cuda_ctx *ctx = cuda_get_ctx(be);
    cuda_input_error err;
    CUDA_TRY(cudaMemcpyAsync(&err, ctx->input_error, sizeof err, cudaMemcpyDeviceToHost, ctx->stream));
    CUDA_TRY(cudaStreamSynchronize(ctx->stream));
    if (err.found == 0) return FORGE_OK;
    CUDA_TRY(cudaMemsetAsync(ctx->input_error, 0, sizeof err, ctx->stream));
    if (err.found == CUDA_BAD_POSITION)
        return forge_error(FORGE_ERR_DATA,
                           "cuda decode: position %d is outside the cache's [0, %d) rows (the step's output is NaN, "
                           "its cache rows untouched)",
                           err.id, err.V);
    const char *op = err.found == CUDA_BAD_ID_EMBEDDING ? "embedding" : "classifier";
    const char *what = err.found == CUDA_BAD_ID_EMBEDDING ? "token id" : "target id";
    return forge_error(FORGE_ERR_DATA,
                       "cuda %s: %s %d at row %d is outside the table's [0, %d): the tokens and the model's "
                       "vocab_size do not match (the row's output is NaN, its gradient skipped)",
                       op, what, err.id, err.row, err.V);
}

forge_status cuda_tn_workspace(cuda_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->tn_ws_bytes) return FORGE_OK;
    if (ctx->tn_ws) {
        CUDA_TRY(cudaFree(ctx->tn_ws)); /* waits for the work queued with the old one */
        ctx->tn_ws = NULL;
        ctx->tn_ws_bytes = 0;
    }
    cudaError_t e = cudaMalloc((void **)&ctx->tn_ws, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        ctx->tn_ws = NULL;
        return forge_error(e == cudaErrorMemoryAllocation ? FORGE_ERR_OOM : FORGE_ERR_DEVICE,
                           "cuda: %.1f MiB of split-K workspace for the dW GEMM: %s", bytes / 1048576.0,
                           cudaGetErrorString(e));
    }
    ctx->tn_ws_bytes = bytes;
    ctx->ws_generation++; /* a recorded graph that used the old one must not run */
    return FORGE_OK;
}

static void cuda_destroy(forge_backend *be) {
    if (!be) return;
    cuda_ctx *ctx = cuda_get_ctx(be);
    if (ctx) {
        if (ctx->stream) cudaStreamSynchronize(ctx->stream);
        if (ctx->side) cudaStreamSynchronize(ctx->side);
#ifndef FORGE_NO_CUBLAS
        if (ctx->cublas) cublasDestroy(ctx->cublas);
#endif
        cuda_mm_table_close(ctx);
        if (ctx->ws) cudaFree(ctx->ws);
        if (ctx->tn_ws) cudaFree(ctx->tn_ws);
        if (ctx->rope_cs) cudaFree(ctx->rope_cs);
        if (ctx->input_error) cudaFree(ctx->input_error);
        if (ctx->reduce_done) cudaFree(ctx->reduce_done);
        if (ctx->gelu_grad_table) cudaFree(ctx->gelu_grad_table);
        if (ctx->fork_event) cudaEventDestroy(ctx->fork_event);
        if (ctx->join_event) cudaEventDestroy(ctx->join_event);
        if (ctx->side) cudaStreamDestroy(ctx->side);
        if (ctx->stream) cudaStreamDestroy(ctx->stream);
        free(ctx);
    }
    free(be);
}

/* A matmul mode this build can run, or the error saying why not; auto without cuBLAS degrades to fp32. */
static forge_status cuda_check_matmul_mode(forge_matmul_mode *m) {
    if ((unsigned)*m >= FORGE_MATMUL_COUNT)
        return forge_error(FORGE_ERR_ARG, "cuda backend: matmul mode %d is not one of options.h's", (int)*m);
#ifdef FORGE_NO_CUBLAS
    if (*m == FORGE_MATMUL_CUBLAS)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "--matmul cublas: this forge was built without cuBLAS (make cuda CUBLAS=0); expected "
                           "\"fp32\", \"tf32\" or \"auto\", or rebuild with cuBLAS");
    if (*m == FORGE_MATMUL_AUTO) {
        fprintf(stderr, "matmul auto: this forge was built without cuBLAS (CUBLAS=0): every shape runs forge's "
                        "fp32 SIMT kernel\n");
        *m = FORGE_MATMUL_FP32;
    }
#endif
    return FORGE_OK;
}

/* The backend's name says which GEMM runs, so every log line that names the backend does (cuBLAS is never chosen
 * silently). */
static const char *cuda_backend_name(forge_matmul_mode m) {
    switch (m) {
    case FORGE_MATMUL_FP32: return "cuda (matmul: forge simt)";
    case FORGE_MATMUL_FP32_TILE64: return "cuda (matmul: forge simt64)";
    case FORGE_MATMUL_FP32_TILE128: return "cuda (matmul: forge simt128)";
    case FORGE_MATMUL_CUBLAS: return "cuda (matmul: cuBLAS fp32)";
    case FORGE_MATMUL_TF32: return "cuda (matmul: forge tf32 mma.sync)";
    case FORGE_MATMUL_AUTO: return "cuda (matmul: auto = forge simt or cuBLAS fp32 per shape)";
    default: return "cuda";
    }
}

/* Everything that can fail once the context exists; the caller destroys on error. */
static forge_status cuda_ctx_init(cuda_ctx *ctx, int device_index) {
    int count = 0;
    CUDA_TRY(cudaGetDeviceCount(&count));
    if (device_index < 0 || device_index >= count)
        return forge_error(FORGE_ERR_ARG, "cuda device %d requested, but %d device(s) are visible",
                           device_index, count);
    CUDA_TRY(cudaSetDevice(device_index));
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, device_index));
    if (prop.major != 9)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "cuda device %d is %s (compute capability %d.%d): this forge was built "
                           "for sm_90a (Hopper) only; rebuild with another -gencode",
                           device_index, prop.name, prop.major, prop.minor);
    ctx->device = device_index;
    ctx->num_sms = prop.multiProcessorCount;
    ctx->pdl = ctx->pdl && prop.major >= 9; /* griddepcontrol and the launch attribute: compute capability 9.0 */
    CUDA_TRY(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    /* the side stream carries collectives (NCCL): at the highest priority its kernels are scheduled as soon as
     * SMs free up instead of queueing behind the backward's, which they overlap */
    int prio_least = 0, prio_greatest = 0;
    CUDA_TRY(cudaDeviceGetStreamPriorityRange(&prio_least, &prio_greatest));
    CUDA_TRY(cudaStreamCreateWithPriority(&ctx->side, cudaStreamNonBlocking, prio_greatest));
    CUDA_TRY(cudaEventCreateWithFlags(&ctx->fork_event, cudaEventDisableTiming));
    CUDA_TRY(cudaEventCreateWithFlags(&ctx->join_event, cudaEventDisableTiming));
    CUDA_TRY(cudaMalloc((void **)&ctx->ws, CUDA_WS_FLOATS * sizeof(float)));
    CUDA_TRY(cudaMalloc((void **)&ctx->input_error, sizeof(cuda_input_error)));
    CUDA_TRY(cudaMemsetAsync(ctx->input_error, 0, sizeof(cuda_input_error), ctx->stream));
    CUDA_TRY(cudaMalloc((void **)&ctx->reduce_done, sizeof(unsigned)));
    CUDA_TRY(cudaMemsetAsync(ctx->reduce_done, 0, sizeof(unsigned), ctx->stream));
    FORGE_TRY(cuda_gelu_grad_table_init(ctx));
#ifndef FORGE_NO_CUBLAS
    if (ctx->matmul == FORGE_MATMUL_CUBLAS || ctx->matmul == FORGE_MATMUL_AUTO) {
        cublasStatus_t cs = cublasCreate(&ctx->cublas);
        if (cs != CUBLAS_STATUS_SUCCESS) {
            ctx->cublas = NULL;
            return forge_error(FORGE_ERR_DEVICE, "cublasCreate failed: %s", cublasGetStatusString(cs));
        }
        cs = cublasSetStream(ctx->cublas, ctx->stream);
        /* pedantic: full fp32 everywhere, no TF32 or other reduced-precision tricks */
        if (cs == CUBLAS_STATUS_SUCCESS) cs = cublasSetMathMode(ctx->cublas, CUBLAS_PEDANTIC_MATH);
        if (cs != CUBLAS_STATUS_SUCCESS)
            return forge_error(FORGE_ERR_DEVICE, "cuBLAS stream/math-mode setup failed: %s",
                               cublasGetStatusString(cs));
    }
#endif
    if (ctx->matmul == FORGE_MATMUL_AUTO) FORGE_TRY(cuda_mm_table_open(ctx));
    return FORGE_OK;
}

extern "C" forge_status forge_cuda_backend_create(forge_backend **out, const forge_runtime_options *options) {
    if (!out || !options) return forge_error(FORGE_ERR_ARG, "forge_cuda_backend_create: out or options is NULL");
    *out = NULL;
    forge_matmul_mode mode = options->matmul;
    FORGE_TRY(cuda_check_matmul_mode(&mode));

    forge_backend *be = (forge_backend *)calloc(1, sizeof *be);
    cuda_ctx *ctx = (cuda_ctx *)calloc(1, sizeof *ctx);
    if (!be || !ctx) {
        free(be);
        free(ctx);
        return forge_error(FORGE_ERR_OOM, "forge_cuda_backend_create: out of host memory");
    }
    ctx->matmul = mode;
    ctx->cache_dir = options->cache_dir;
    ctx->matmul_cache_path = options->matmul_cache_path;
    ctx->pdl = options->pdl != 0;
    /* a bf16 step's GEMMs are forge's bf16 kernels whatever the matmul mode (which picks the fp32 step's) */
    be->name = options->precision == FORGE_TRAIN_BF16 ? "cuda (bf16: forge wgmma GEMMs, flash attention)"
                                                      : cuda_backend_name(mode);
    be->kind = FORGE_DEVICE_CUDA;
    be->options = *options;
    be->options.matmul = mode; /* what runs */
    be->ctx = ctx;
    forge_status s = cuda_ctx_init(ctx, options->device_index);
    if (s != FORGE_OK) {
        cuda_destroy(be);
        return forge_error_context(s, "creating the cuda backend on device %d: ", options->device_index);
    }

    be->mem_alloc = cuda_mem_alloc;
    be->mem_free = cuda_mem_free;
    be->copy_to_device = cuda_copy_to_device;
    be->copy_to_host = cuda_copy_to_host;
    be->copy_device = cuda_copy_device;
    be->memset_zero = cuda_memset_zero;
    be->synchronize = cuda_synchronize;
    be->poll_errors = cuda_poll_errors;
    be->side_fork = cuda_side_fork;
    be->side_join = cuda_side_join;
    be->side_synchronize = cuda_side_synchronize;
    be->destroy = cuda_destroy;
    be->capture_begin = cuda_capture_begin;
    be->capture_end = cuda_capture_end;
    be->graph_launch = cuda_graph_launch;
    be->graph_destroy = cuda_graph_destroy;

    FORGE_OP_LIST(FORGE_OP_BIND_CUDA, FORGE_OP_NOTHING, FORGE_OP_NOTHING)

    *out = be;
    return FORGE_OK;
}
