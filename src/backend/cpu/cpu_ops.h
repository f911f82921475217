/*
 * cpu_ops.h: private header of the CPU backend: its context and every op it
 * puts in the forge_backend table (one .c file per op family).
 *
 * Every op reads two things from the context: how many OpenMP threads to use
 * and whether the reference path is on. The reference path is not a second
 * copy of each op: for most ops it is the same plain loop run on one thread
 * (so the optimised run differs only in threading and, for reductions, in
 * summation order). Only matmul has a genuinely different fast path (packed,
 * cache-blocked, register-tiled), and there reference = 1 selects the plain
 * triple loop, as llm.c keeps matmul_forward_naive next to the tiled one.
 *
 * The backend is not re-entrant: matmul packs into per-thread buffers owned by
 * the context, so one forge_backend must be driven by one host thread at a time.
 */
#ifndef FORGE_CPU_OPS_H
#define FORGE_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "../backend.h"

typedef struct {
    int threads;   /* OpenMP threads every op uses; 1 on the reference path */
    int reference; /* 1: plain single-threaded loops for every op */
    float *pack;   /* matmul packing buffers, cpu_matmul_pack_floats(threads) floats */
} cpu_ctx;

/* Threads an op should use: 1 on the reference path. */
static inline int cpu_threads(const forge_backend *be) {
    const cpu_ctx *ctx = (const cpu_ctx *)be->ctx;
    return ctx->reference ? 1 : ctx->threads;
}

static inline int cpu_is_reference(const forge_backend *be) {
    return ((const cpu_ctx *)be->ctx)->reference;
}

/* Floats of matmul packing buffer the context allocates for `threads` threads (matmul.c). */
size_t cpu_matmul_pack_floats(int threads);

/* RoPE's cos/sin table (T, HS/2, 2), angles in double rounded once to float, and its argument checks (rope.c),
 * shared by the fp32 and bf16 entries. The caller frees the table. */
forge_status cpu_rope_table(float **out, int T, int HS, float theta, const char *op);
forge_status cpu_rope_check_args(const char *op, int n_heads, int n_rot, int HS, float theta);

/* Every op of op_list.h, one file per family: elementwise.c, embedding.c, matmul.c, layernorm.c,
 * rmsnorm.c, rope.c, attention.c, flash_attention.c, classifier.c, adamw.c; the bf16 entries in *_bf16.c. */
FORGE_OP_LIST(FORGE_OP_PROTOTYPE_CPU, FORGE_ARG_DECL, FORGE_OP_NOTHING)

#endif
