/*
 * attention.cu: causal self-attention with materialised scores on the GPU,
 * grouped-query heads, the packed qkv layout of backend.h:
 *   qkv (B, T, (NH + 2*NKV) * HS): NH query heads, NKV key heads, NKV value
 *   heads; query head h reads kv head h / (NH/NKV).
 *
 * forward   S = scale * Q K^T            (gemm, tiles above the diagonal skipped)
 *           P = causal softmax(S) -> att (rows: one warp each; zeros above diagonal)
 *           out = P V                    (gemm, K loop stops at the diagonal)
 * backward  dP = dO V^T                  -> scratch (gemm, lower tiles only)
 *           dS = scale * P (dP - rowsum(P dP))  in place in scratch, zeros above
 *           dQ += dS K                   (gemm, accumulate)
 *           dK += sum_{h in group} dS_h^T Q_h   (gemm with one K segment per h)
 *           dV += sum_{h in group} P_h^T dO_h   (same)
 *
 * The decision a reader would get wrong: with GQA several query heads share
 * one kv head, so dK/dV of that head collect contributions from the whole
 * group. Rather than atomics (nondeterministic order) the dK/dV GEMMs run
 * one batch per kv head and concatenate the group's query heads along K
 * (cuda_gemm_params.nseg): one thread sums every contribution to its output
 * element in a fixed order and adds it once. All five products go through
 * the tiled GEMM of matmul.cu (which never uses cuBLAS, whatever the
 * matmul mode).
 *
 * Limits: B*NH and B*NKV must fit grid.z (65535); scores use B*NH*T*T floats
 * of att and scratch, the caller's memory.
 */
#include "cuda_ops.h"

#define SOFTMAX_THREADS 256 /* 8 rows per block, one warp each */

/* ---- kernels ------------------------------------------------------------ */

/* att (rows, T), rows = B*NH*T, row r is query t = r % T; in place; j > t -> 0 */
__global__ void __launch_bounds__(SOFTMAX_THREADS)
    attention_softmax_forward_kernel(float *__restrict__ att, int T, size_t rows) {
    size_t r = blockIdx.x * (size_t)(SOFTMAX_THREADS / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    int t = (int)(r % T);
    float *a = att + r * T;
    float maxval = -INFINITY;
    for (int j = lane; j <= t; j += 32) maxval = fmaxf(maxval, a[j]);
    maxval = warp_max(maxval);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) sum += expf(a[j] - maxval);
    sum = warp_sum(sum);
    float inv = 1.0f / sum;
    for (int j = lane; j < T; j += 32) a[j] = j <= t ? expf(a[j] - maxval) * inv : 0.0f;
}

/* dS = scale * P (dP - sum_j P dP) in place over dP (scratch); j > t -> 0 */
__global__ void __launch_bounds__(SOFTMAX_THREADS)
    attention_softmax_backward_kernel(float *__restrict__ dscore, const float *__restrict__ att, int T,
                                      size_t rows, float scale) {
    size_t r = blockIdx.x * (size_t)(SOFTMAX_THREADS / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    int t = (int)(r % T);
    const float *a = att + r * T;
    float *d = dscore + r * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32) dot += a[j] * d[j];
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32) d[j] = j <= t ? a[j] * (d[j] - dot) * scale : 0.0f;
}

/* ---- launchers ---------------------------------------------------------- */

static forge_status attention_check(const char *op, int B, int T, int NH, int NKV, int HS) {
    if (NH <= 0 || NKV <= 0 || HS <= 0 || NH % NKV != 0)
        return forge_error(FORGE_ERR_ARG,
                           "cuda %s: need NH, NKV, HS > 0 and NH divisible by NKV, got NH=%d NKV=%d "
                           "HS=%d",
                           op, NH, NKV, HS);
    if ((long long)B * NH > 65535)
        return forge_error(FORGE_ERR_UNSUPPORTED, "cuda %s: B*NH = %lld exceeds grid.z (65535)", op,
                           (long long)B * NH);
    (void)T;
    return FORGE_OK;
}

static forge_status softmax_launch_grid(size_t rows, unsigned *grid) {
    size_t rows_per_block = SOFTMAX_THREADS / 32;
    size_t blocks = (rows + rows_per_block - 1) / rows_per_block;
    if (blocks > 0x7fffffffu)
        return forge_error(FORGE_ERR_UNSUPPORTED, "cuda attention: %zu score rows is too many", rows);
    *grid = (unsigned)blocks;
    return FORGE_OK;
}

forge_status cuda_attention_forward(forge_backend *be, float *out, float *att, const float *qkv,
                                    int B, int T, int NH, int NKV, int HS) {
    FORGE_TRY(attention_check("attention_forward", B, T, NH, NKV, HS));
    if (B <= 0 || T <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    const int group = NH / NKV;
    const int QKVC = (NH + 2 * NKV) * HS; /* floats per (b, t) of qkv */
    const long long TT = (long long)T * T;
    const float scale = 1.0f / sqrtf((float)HS);

    /* S (B,NH,T,T) = scale Q K^T: A = Q (T,HS) K-major, B = K (T,HS) as (N,K) K-major */
    cuda_gemm_params p = cuda_gemm_plain(T, T, HS, 1, QKVC, 1, QKVC, T, 0);
    p.batch = B * NH;
    p.zdiv = NH;
    p.a_sb = (long long)T * QKVC;
    p.a_sh = HS;
    p.b_sb = (long long)T * QKVC;
    p.b_sh = HS;
    p.b_hdiv = group;
    p.c_sb = NH * TT;
    p.c_sh = TT;
    p.alpha = scale;
    p.tri = GEMM_TRI_C_LOWER;
    FORGE_TRY(cuda_gemm(ctx, att, qkv, qkv + (size_t)NH * HS, &p, "attention scores"));

    size_t rows = (size_t)B * NH * T;
    unsigned grid = 0;
    FORGE_TRY(softmax_launch_grid(rows, &grid));
    attention_softmax_forward_kernel<<<grid, SOFTMAX_THREADS, 0, ctx->stream>>>(att, T, rows);
    CUDA_LAUNCH_CHECK("attention_softmax_forward_kernel");

    /* out (B,T,NH*HS) = P V: A = P (T,T) K-major, B = V (T,HS) N-major */
    p = cuda_gemm_plain(T, HS, T, 1, T, 0, QKVC, NH * HS, 0);
    p.batch = B * NH;
    p.zdiv = NH;
    p.a_sb = NH * TT;
    p.a_sh = TT;
    p.b_sb = (long long)T * QKVC;
    p.b_sh = HS;
    p.b_hdiv = group;
    p.c_sb = (long long)T * NH * HS;
    p.c_sh = HS;
    p.tri = GEMM_TRI_A_LOWER;
    return cuda_gemm(ctx, out, att, qkv + (size_t)(NH + NKV) * HS, &p, "attention P.V");
}

forge_status cuda_attention_backward(forge_backend *be, float *dqkv, float *scratch,
                                     const float *dout, const float *qkv, const float *att, int B,
                                     int T, int NH, int NKV, int HS) {
    FORGE_TRY(attention_check("attention_backward", B, T, NH, NKV, HS));
    if (B <= 0 || T <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    const int group = NH / NKV;
    const int QKVC = (NH + 2 * NKV) * HS;
    const int OUTC = NH * HS; /* floats per (b, t) of dout */
    const long long TT = (long long)T * T;
    const float scale = 1.0f / sqrtf((float)HS);
    const float *q = qkv, *k = qkv + (size_t)NH * HS, *v = qkv + (size_t)(NH + NKV) * HS;
    float *dq = dqkv, *dk = dqkv + (size_t)NH * HS, *dv = dqkv + (size_t)(NH + NKV) * HS;

    /* dP (B,NH,T,T) = dO V^T -> scratch: A = dO (T,HS) K-major, B = V as (N=T,K=HS) K-major */
    cuda_gemm_params p = cuda_gemm_plain(T, T, HS, 1, OUTC, 1, QKVC, T, 0);
    p.batch = B * NH;
    p.zdiv = NH;
    p.a_sb = (long long)T * OUTC;
    p.a_sh = HS;
    p.b_sb = (long long)T * QKVC;
    p.b_sh = HS;
    p.b_hdiv = group;
    p.c_sb = NH * TT;
    p.c_sh = TT;
    p.tri = GEMM_TRI_C_LOWER;
    FORGE_TRY(cuda_gemm(ctx, scratch, dout, v, &p, "attention dP"));

    size_t rows = (size_t)B * NH * T;
    unsigned grid = 0;
    FORGE_TRY(softmax_launch_grid(rows, &grid));
    attention_softmax_backward_kernel<<<grid, SOFTMAX_THREADS, 0, ctx->stream>>>(scratch, att, T, rows,
                                                                                 scale);
    CUDA_LAUNCH_CHECK("attention_softmax_backward_kernel");

    /* dQ += dS K: A = dS (T,T) K-major, B = K (T,HS) N-major */
    p = cuda_gemm_plain(T, HS, T, 1, T, 0, QKVC, QKVC, 1);
    p.batch = B * NH;
    p.zdiv = NH;
    p.a_sb = NH * TT;
    p.a_sh = TT;
    p.b_sb = (long long)T * QKVC;
    p.b_sh = HS;
    p.b_hdiv = group;
    p.c_sb = (long long)T * QKVC;
    p.c_sh = HS;
    p.tri = GEMM_TRI_A_LOWER;
    FORGE_TRY(cuda_gemm(ctx, dq, scratch, k, &p, "attention dQ"));

    /* dK_g += sum_s dS_{g*group+s}^T Q_{g*group+s}: one batch per (b, kv head),
     * A[m=t2][k=t1] = dS[t1][t2] (M-major), B = Q_h (T,HS) N-major, the
     * group's heads concatenated along K as segments */
    p = cuda_gemm_plain(T, HS, T, 0, T, 0, QKVC, QKVC, 1);
    p.batch = B * NKV;
    p.zdiv = NKV;
    p.a_sb = NH * TT;
    p.a_sh = group * TT;
    p.b_sb = (long long)T * QKVC;
    p.b_sh = (long long)group * HS;
    p.b_hdiv = 1;
    p.c_sb = (long long)T * QKVC;
    p.c_sh = HS;
    p.nseg = group;
    p.a_seg = TT;
    p.b_seg = HS;
    p.tri = GEMM_TRI_A_UPPER;
    FORGE_TRY(cuda_gemm(ctx, dk, scratch, q, &p, "attention dK"));

    /* dV_g += sum_s P_h^T dO_h: A = P^T (M-major), B = dO_h (T,HS) N-major */
    p = cuda_gemm_plain(T, HS, T, 0, T, 0, OUTC, QKVC, 1);
    p.batch = B * NKV;
    p.zdiv = NKV;
    p.a_sb = NH * TT;
    p.a_sh = group * TT;
    p.b_sb = (long long)T * OUTC;
    p.b_sh = (long long)group * HS;
    p.b_hdiv = 1;
    p.c_sb = (long long)T * QKVC;
    p.c_sh = HS;
    p.nseg = group;
    p.a_seg = TT;
    p.b_seg = HS;
    p.tri = GEMM_TRI_A_UPPER;
    return cuda_gemm(ctx, dv, att, dout, &p, "attention dV");
}
