/*
 * backend.h: the one table of op entry points every device fills in.
 *
 * The model and trainer never call a kernel directly: they call the ops layer
 * (src/ops/), which calls through this table. The CPU backend (backend/cpu/)
 * is the reference every other backend is checked against; the CUDA backend
 * (backend/cuda/) fills in the same table with device pointers.
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

typedef enum {
    FORGE_DEVICE_CPU = 0,
    FORGE_DEVICE_CUDA,
    FORGE_DEVICE_COUNT
} forge_device_kind;

typedef struct forge_backend forge_backend;

/* Hyper-parameters of one AdamW update, passed by value. */
typedef struct {
    float lr;           /* learning rate for this step */
    float beta1, beta2; /* moment decay rates */
    float eps;          /* added outside the square root: m / (sqrt(v) + eps) */
    float weight_decay; /* decoupled: p -= lr * wd * p; 0 for rank < 2 params */
    float max_grad_norm;/* clip threshold; <= 0 disables clipping */
    int step;           /* 1-based step, for bias correction */
} forge_adamw_params;

struct forge_backend {
    const char *name;
    forge_device_kind kind;
    void *ctx; /* backend-private state: streams, handles, workspaces */

    /* ---- memory ---------------------------------------------------------- */
    forge_status (*mem_alloc)(forge_backend *be, void **ptr, size_t bytes);
    void (*mem_free)(forge_backend *be, void *ptr);
    forge_status (*copy_to_device)(forge_backend *be, void *dst, const void *src, size_t bytes);
    forge_status (*copy_to_host)(forge_backend *be, void *dst, const void *src, size_t bytes);
    forge_status (*copy_device)(forge_backend *be, void *dst, const void *src, size_t bytes);
    forge_status (*memset_zero)(forge_backend *be, void *dst, size_t bytes);
    forge_status (*synchronize)(forge_backend *be);
    void (*destroy)(forge_backend *be);

    /* ---- elementwise ----------------------------------------------------- */
    /* dst[i] += src[i] */
    forge_status (*accumulate)(forge_backend *be, float *dst, const float *src, size_t n);
    /* out[i] = a[i] + b[i] (residual add) */
    forge_status (*add_forward)(forge_backend *be, float *out, const float *a, const float *b, size_t n);
    /* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    forge_status (*gelu_forward)(forge_backend *be, float *out, const float *inp, size_t n);
    forge_status (*gelu_backward)(forge_backend *be, float *dinp, const float *inp, const float *dout, size_t n);
    /* out = silu(gate) * up, silu(x) = x / (1 + exp(-x)); all (n) */
    forge_status (*swiglu_forward)(forge_backend *be, float *out, const float *gate, const float *up, size_t n);
    forge_status (*swiglu_backward)(forge_backend *be, float *dgate, float *dup, const float *dout,
                                    const float *gate, const float *up, size_t n);

    /* ---- embeddings ------------------------------------------------------ */
    /* out (N,C) = table[ids[n]] ; ids (N) int32 in [0, V) */
    forge_status (*embedding_forward)(forge_backend *be, float *out, const int32_t *ids,
                                      const float *table, int N, int C);
    /* dtable[ids[n]] += dout[n] */
    forge_status (*embedding_backward)(forge_backend *be, float *dtable, const float *dout,
                                       const int32_t *ids, int N, int C);
    /* out (B,T,C) = inp + wpe[t] ; wpe (maxT, C) */
    forge_status (*position_forward)(forge_backend *be, float *out, const float *inp,
                                     const float *wpe, int B, int T, int C);
    /* dinp += dout ; dwpe[t] += sum_b dout[b,t] */
    forge_status (*position_backward)(forge_backend *be, float *dinp, float *dwpe,
                                      const float *dout, int B, int T, int C);

    /* ---- matmul: the three training layouts ------------------------------ */
    /* out (N,OC) = inp (N,C) . weight (OC,C)^T + bias (OC); bias may be NULL */
    forge_status (*matmul_forward)(forge_backend *be, float *out, const float *inp,
                                   const float *weight, const float *bias, int N, int C, int OC);
    /* dinp (N,C) += dout (N,OC) . weight (OC,C) */
    forge_status (*matmul_backward_input)(forge_backend *be, float *dinp, const float *dout,
                                          const float *weight, int N, int C, int OC);
    /* dweight (OC,C) += dout^T . inp ; dbias (OC) += sum_n dout (dbias may be NULL) */
    forge_status (*matmul_backward_weight)(forge_backend *be, float *dweight, float *dbias,
                                           const float *dout, const float *inp, int N, int C, int OC);

    /* ---- normalisation --------------------------------------------------- */
    /* LayerNorm over C: out = (x - mean) * rstd * weight + bias; saves mean, rstd (N) */
    forge_status (*layernorm_forward)(forge_backend *be, float *out, float *mean, float *rstd,
                                      const float *inp, const float *weight, const float *bias,
                                      int N, int C, float eps);
    forge_status (*layernorm_backward)(forge_backend *be, float *dinp, float *dweight, float *dbias,
                                       const float *dout, const float *inp, const float *weight,
                                       const float *mean, const float *rstd, int N, int C);
    /* RMSNorm over C: out = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps); saves rstd (N) */
    forge_status (*rmsnorm_forward)(forge_backend *be, float *out, float *rstd, const float *inp,
                                    const float *weight, int N, int C, float eps);
    forge_status (*rmsnorm_backward)(forge_backend *be, float *dinp, float *dweight, const float *dout,
                                     const float *inp, const float *weight, const float *rstd,
                                     int N, int C);

    /* ---- rotary position embedding --------------------------------------- */
    /* inp/out (B,T,n_heads,HS). The first n_rot heads are rotated, the rest
     * copied (so packed qkv rotates q and k and passes v through). Rotation is
     * the rotate-half form used by Hugging Face Llama: for i < HS/2, with
     * angle = t * theta^(-2i/HS):
     *   out[i]      = x[i] cos - x[i+HS/2] sin
     *   out[i+HS/2] = x[i+HS/2] cos + x[i] sin                               */
    forge_status (*rope_forward)(forge_backend *be, float *out, const float *inp, int B, int T,
                                 int n_heads, int n_rot, int HS, float theta);
    forge_status (*rope_backward)(forge_backend *be, float *dinp, const float *dout, int B, int T,
                                  int n_heads, int n_rot, int HS, float theta);

    /* ---- causal self-attention (reference: materialised scores) ---------- */
    /* qkv packed (see above); out (B,T,NH*HS); att (B,NH,T,T) saves the
     * softmax probabilities (entries above the diagonal are written as 0).
     * Scores are scaled by 1/sqrt(HS). */
    forge_status (*attention_forward)(forge_backend *be, float *out, float *att, const float *qkv,
                                      int B, int T, int NH, int NKV, int HS);
    /* dqkv += ; scratch (B,NH,T,T) is caller-provided workspace, contents undefined */
    forge_status (*attention_backward)(forge_backend *be, float *dqkv, float *scratch,
                                       const float *dout, const float *qkv, const float *att,
                                       int B, int T, int NH, int NKV, int HS);

    /* ---- fused (flash) causal self-attention ------------------------------ */
    /* Same packed qkv and out as attention_forward, but the scores never reach
     * memory: online softmax over key tiles. lse (B,NH,T) saves the natural-log
     * logsumexp of each query row's scaled scores for the backward. */
    forge_status (*flash_attention_forward)(forge_backend *be, float *out, float *lse, const float *qkv,
                                            int B, int T, int NH, int NKV, int HS);
    /* dqkv += ; scratch >= B*NH*T floats (holds D = rowsum(dout * out)), contents undefined */
    forge_status (*flash_attention_backward)(forge_backend *be, float *dqkv, float *scratch,
                                             const float *dout, const float *qkv, const float *out,
                                             const float *lse, int B, int T, int NH, int NKV, int HS);
    /* The general form behind both (exposed for tests): queries come from the
     * query heads of qkv_q (B,Tq,(NH+2*NKV)*HS), keys/values from the key and
     * value heads of qkv_kv (B,Tk,(NH+2*NKV)*HS); causal alignment is
     * bottom-right: query i sees key j iff j <= i + Tk - Tq. A row with no
     * visible key (Tk < Tq) gets out = 0, lse = -INFINITY and zero gradients.
     * out/dout (B,Tq,NH*HS), lse and scratch (B,NH,Tq). The backward writes dQ
     * into the query heads of dqkv_q and dK/dV into the key/value heads of
     * dqkv_kv (they may be the same buffer). */
    forge_status (*flash_attention_forward_ext)(forge_backend *be, float *out, float *lse,
                                                const float *qkv_q, const float *qkv_kv, int B, int Tq,
                                                int Tk, int NH, int NKV, int HS);
    forge_status (*flash_attention_backward_ext)(forge_backend *be, float *dqkv_q, float *dqkv_kv,
                                                 float *scratch, const float *dout, const float *qkv_q,
                                                 const float *qkv_kv, const float *out, const float *lse,
                                                 int B, int Tq, int Tk, int NH, int NKV, int HS);

    /* ---- fused classifier ------------------------------------------------ */
    /* For each row n of logits (N,V): losses[n] = -log softmax(logits[n])[targets[n]],
     * and logits[n] is OVERWRITTEN by its gradient (softmax - onehot) * grad_scale.
     * Rows whose target == ignore_index get loss 0 and gradient 0. */
    forge_status (*classifier_forward_backward)(forge_backend *be, float *losses, float *logits,
                                                const int32_t *targets, int N, int V,
                                                int ignore_index, float grad_scale);

    /* ---- optimizer ------------------------------------------------------- */
    /* *out_sumsq += sum(x[i]^2), accumulated in the device scalar (no host sync) */
    forge_status (*sumsq_accumulate)(forge_backend *be, float *out_sumsq, const float *x, size_t n);
    /* AdamW on n elements. The clip factor min(1, max_norm / sqrt(*grad_sumsq))
     * is computed from the device scalar and folded into the gradient read. */
    forge_status (*adamw_update)(forge_backend *be, float *param, const float *grad, float *m, float *v,
                                 size_t n, const float *grad_sumsq, forge_adamw_params hp);
};

/* The CPU backend. `threads` <= 0 uses OpenMP's default. `reference` = 1
 * turns off tiling and threading so tests compare against the plain loops. */
forge_status forge_cpu_backend_create(forge_backend **out, int threads, int reference);

/* The CUDA backend (built only with `make cuda`). device_index selects the GPU.
 * Without CUDA support compiled in, returns FORGE_ERR_UNSUPPORTED. */
forge_status forge_cuda_backend_create(forge_backend **out, int device_index);

/* Creates a backend by name: "cpu" or "cuda". */
forge_status forge_backend_create(forge_backend **out, const char *name);
void forge_backend_destroy(forge_backend *be);

#endif
