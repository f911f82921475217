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

/* ---- elementwise.c ------------------------------------------------------- */
forge_status cpu_accumulate(forge_backend *be, float *dst, const float *src, size_t n);
forge_status cpu_add_forward(forge_backend *be, float *out, const float *a, const float *b, size_t n);
forge_status cpu_gelu_forward(forge_backend *be, float *out, const float *inp, size_t n);
forge_status cpu_gelu_backward(forge_backend *be, float *dinp, const float *inp, const float *dout,
                               size_t n);
forge_status cpu_swiglu_forward(forge_backend *be, float *out, const float *gate, const float *up,
                                size_t n);
forge_status cpu_swiglu_backward(forge_backend *be, float *dgate, float *dup, const float *dout,
                                 const float *gate, const float *up, size_t n);

/* ---- embedding.c --------------------------------------------------------- */
forge_status cpu_embedding_forward(forge_backend *be, float *out, const int32_t *ids,
                                   const float *table, int N, int C);
forge_status cpu_embedding_backward(forge_backend *be, float *dtable, const float *dout,
                                    const int32_t *ids, int N, int C);
forge_status cpu_position_forward(forge_backend *be, float *out, const float *inp, const float *wpe,
                                  int B, int T, int C);
forge_status cpu_position_backward(forge_backend *be, float *dinp, float *dwpe, const float *dout,
                                   int B, int T, int C);

/* ---- matmul.c ------------------------------------------------------------ */
/* Floats of matmul packing buffer the context allocates for `threads` threads. */
size_t cpu_matmul_pack_floats(int threads);
forge_status cpu_matmul_forward(forge_backend *be, float *out, const float *inp, const float *weight,
                                const float *bias, int N, int C, int OC);
forge_status cpu_matmul_backward_input(forge_backend *be, float *dinp, const float *dout,
                                       const float *weight, int N, int C, int OC);
forge_status cpu_matmul_backward_weight(forge_backend *be, float *dweight, float *dbias,
                                        const float *dout, const float *inp, int N, int C, int OC);

/* ---- layernorm.c / rmsnorm.c --------------------------------------------- */
forge_status cpu_layernorm_forward(forge_backend *be, float *out, float *mean, float *rstd,
                                   const float *inp, const float *weight, const float *bias, int N,
                                   int C, float eps);
forge_status cpu_layernorm_backward(forge_backend *be, float *dinp, float *dweight, float *dbias,
                                    const float *dout, const float *inp, const float *weight,
                                    const float *mean, const float *rstd, int N, int C);
forge_status cpu_rmsnorm_forward(forge_backend *be, float *out, float *rstd, const float *inp,
                                 const float *weight, int N, int C, float eps);
forge_status cpu_rmsnorm_backward(forge_backend *be, float *dinp, float *dweight, const float *dout,
                                  const float *inp, const float *weight, const float *rstd, int N,
                                  int C);

/* ---- rope.c -------------------------------------------------------------- */
forge_status cpu_rope_forward(forge_backend *be, float *out, const float *inp, int B, int T,
                              int n_heads, int n_rot, int HS, float theta);
forge_status cpu_rope_backward(forge_backend *be, float *dinp, const float *dout, int B, int T,
                               int n_heads, int n_rot, int HS, float theta);

/* ---- attention.c --------------------------------------------------------- */
forge_status cpu_attention_forward(forge_backend *be, float *out, float *att, const float *qkv,
                                   int B, int T, int NH, int NKV, int HS);
forge_status cpu_attention_backward(forge_backend *be, float *dqkv, float *scratch,
                                    const float *dout, const float *qkv, const float *att, int B,
                                    int T, int NH, int NKV, int HS);

/* ---- flash_attention.c --------------------------------------------------- */
forge_status cpu_flash_attention_forward(forge_backend *be, float *out, float *lse, const float *qkv,
                                         int B, int T, int NH, int NKV, int HS);
forge_status cpu_flash_attention_backward(forge_backend *be, float *dqkv, float *scratch,
                                          const float *dout, const float *qkv, const float *out,
                                          const float *lse, int B, int T, int NH, int NKV, int HS);
forge_status cpu_flash_attention_forward_ext(forge_backend *be, float *out, float *lse,
                                             const float *qkv_q, const float *qkv_kv, int B, int Tq,
                                             int Tk, int NH, int NKV, int HS);
forge_status cpu_flash_attention_backward_ext(forge_backend *be, float *dqkv_q, float *dqkv_kv,
                                              float *scratch, const float *dout, const float *qkv_q,
                                              const float *qkv_kv, const float *out, const float *lse,
                                              int B, int Tq, int Tk, int NH, int NKV, int HS);

/* ---- classifier.c -------------------------------------------------------- */
forge_status cpu_classifier_forward_backward(forge_backend *be, float *losses, float *logits,
                                             const int32_t *targets, int N, int V,
                                             int ignore_index, float grad_scale);

/* ---- adamw.c ------------------------------------------------------------- */
forge_status cpu_sumsq_accumulate(forge_backend *be, float *out_sumsq, const float *x, size_t n);
forge_status cpu_adamw_update(forge_backend *be, float *param, const float *grad, float *m,
                              float *v, size_t n, const float *grad_sumsq, forge_adamw_params hp);

#endif
