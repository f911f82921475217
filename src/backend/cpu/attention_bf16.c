/*
 * attention_bf16.c: the bf16 fused causal self-attention on the CPU, the
 * reference of the CUDA entries (docs/mixed-precision.md, rounding points).
 *
 * Inputs are bf16 (exact in fp32); every product and sum is fp32 in a fixed
 * order; a value is rounded to bf16 (rn, round to nearest even) only where
 * the tensor-core kernels round it:
 *
 * Forward, per query row i (two passes over its visible keys j <= i):
 *   s_j = scale * (q_i . k_j),  m = max_j s_j,  l = sum_j exp(s_j - m)
 *   out_i = rn( (sum_j rn(exp(s_j - m)) v_j) / l ),  lse_i = m + log(l)
 * P is rounded for P.V with the FINAL row max; the GPU's online softmax
 * rounds exp(s_j - m_ref) instead, m_ref the running max (the D = 64 Hopper
 * forward: the row's first-tile max while later tiles stay within 2^32 of
 * it), so the two differ by the bf16 rounding of P (bounded in the op_list.h
 * entry), not bit for bit. l sums the unrounded exponentials, as the kernels
 * do.
 *
 * Backward, P recomputed from the saved lse (fp32):
 *   D_i   = dO_i . O_i
 *   P_ij  = exp(scale * (q_i . k_j) - lse_i),  dP_ij = dO_i . v_j
 *   dS_ij = rn(P_ij (dP_ij - D_i))              (dS / scale, as the kernels round it)
 *   dq_i  = scale sum_j dS_ij k_j,  dk_j = scale sum_{h,i} dS_ij q_i,  dv_j = sum_{h,i} rn(P_ij) dO_i
 *   dqkv  = rn(dqkv + d)                        (one rounding per element, after the whole sum)
 * The fp32 gradients are written to the scratch first (one writer per row:
 * dq over query rows, dk/dv over key rows with the GQA group's query heads in
 * order), then one pass adds them to dqkv, so no result depends on the
 * thread count.
 */
#include <math.h>

#include "cpu_ops.h"

#define FLASH_BF16_DBLK 128 /* output columns per stack accumulator */

static forge_status flash_bf16_check(const char *op, int B, int T, int NH, int NKV, int HS) {
    if (NH <= 0 || NKV <= 0 || HS <= 0 || NH % NKV != 0)
        return forge_error(FORGE_ERR_ARG,
                           "cpu %s: need NH, NKV, HS > 0 and NH divisible by NKV, got NH=%d NKV=%d HS=%d", op, NH,
                           NKV, HS);
    if (B < 0 || T < 0) return forge_error(FORGE_ERR_ARG, "cpu %s: need B, T >= 0, got B=%d T=%d", op, B, T);
    return FORGE_OK;
}

static inline float bf(forge_bf16 h) { return forge_bf16_to_f32(h); }

/* fp32 dot product of two bf16 rows, in index order */
static inline float dot_bf16(const forge_bf16 *a, const forge_bf16 *b, int n) {
    float acc = 0.0f;
    for (int e = 0; e < n; e++) acc += bf(a[e]) * bf(b[e]);
    return acc;
}

forge_status cpu_flash_attention_forward_bf16(forge_backend *be, forge_bf16 *out, float *lse, const forge_bf16 *qkv,
                                              int B, int T, int NH, int NKV, int HS) {
    FORGE_TRY(flash_bf16_check("flash_attention_forward_bf16", B, T, NH, NKV, HS));
    const int nt = cpu_threads(be);
    const size_t row = (size_t)(NH + 2 * NKV) * HS, orow = (size_t)NH * HS;
    const int group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for collapse(3) schedule(dynamic, 16) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < T; i++) {
                const int kvh = h / group;
                const forge_bf16 *q = qkv + ((size_t)b * T + i) * row + (size_t)h * HS;
                const forge_bf16 *kbase = qkv + (size_t)b * T * row + (size_t)(NH + kvh) * HS;
                const forge_bf16 *vbase = qkv + (size_t)b * T * row + (size_t)(NH + NKV + kvh) * HS;
                forge_bf16 *o = out + ((size_t)b * T + i) * orow + (size_t)h * HS;
                /* pass 1: the row max */
                float m = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const float s = dot_bf16(q, kbase + (size_t)j * row, HS) * scale;
                    if (s > m) m = s;
                }
                /* pass 2: l and sum_j rn(P_j) v_j, FLASH_BF16_DBLK output columns at a time (the accumulator
                 * lives on the stack; a wider head recomputes the scores per block: same values, same order) */
                float l = 0.0f, inv = 0.0f;
                for (int d0 = 0; d0 < HS; d0 += FLASH_BF16_DBLK) {
                    const int nd = HS - d0 < FLASH_BF16_DBLK ? HS - d0 : FLASH_BF16_DBLK;
                    float acc[FLASH_BF16_DBLK];
                    for (int d = 0; d < nd; d++) acc[d] = 0.0f;
                    for (int j = 0; j <= i; j++) {
                        const float e = expf(dot_bf16(q, kbase + (size_t)j * row, HS) * scale - m);
                        if (d0 == 0) l += e;
                        const float p = forge_round_bf16(e);
                        const forge_bf16 *v = vbase + (size_t)j * row + d0;
                        for (int d = 0; d < nd; d++) acc[d] += p * bf(v[d]);
                    }
                    if (d0 == 0) inv = 1.0f / l; /* l >= 1: the max term contributes exp(0) */
                    for (int d = 0; d < nd; d++) o[d0 + d] = forge_bf16_from_f32(acc[d] * inv);
                }
                lse[((size_t)b * NH + h) * T + i] = m + logf(l);
            }
        }
    }
    return FORGE_OK;
}

forge_status cpu_flash_attention_backward_bf16(forge_backend *be, forge_bf16 *dqkv, float *scratch,
                                               const forge_bf16 *dout, const forge_bf16 *qkv, const forge_bf16 *out,
                                               const float *lse, int B, int T, int NH, int NKV, int HS,
                                               int accumulate) {
    FORGE_TRY(flash_bf16_check("flash_attention_backward_bf16", B, T, NH, NKV, HS));
    const int nt = cpu_threads(be);
    const size_t row = (size_t)(NH + 2 * NKV) * HS, orow = (size_t)NH * HS, kvrow = (size_t)NKV * HS;
    const int group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS);
    /* scratch: D (B,NH,T), then the fp32 gradients dq (B,T,NH,HS), dk and dv (B,T,NKV,HS) */
    float *D = scratch;
    float *dq = D + (size_t)B * NH * T;
    float *dk = dq + (size_t)B * T * orow;
    float *dv = dk + (size_t)B * T * kvrow;

#pragma omp parallel for collapse(2) num_threads(nt)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const size_t o = ((size_t)b * T + i) * orow + (size_t)h * HS;
                D[((size_t)b * NH + h) * T + i] = dot_bf16(dout + o, out + o, HS);
            }

    /* dq: one writer per query row */
#pragma omp parallel for collapse(3) schedule(dynamic, 16) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < T; i++) {
                const int kvh = h / group;
                const size_t bi = (size_t)b * T + i, si = ((size_t)b * NH + h) * T + i;
                const forge_bf16 *q = qkv + bi * row + (size_t)h * HS;
                const forge_bf16 *d = dout + bi * orow + (size_t)h * HS;
                const forge_bf16 *kbase = qkv + (size_t)b * T * row + (size_t)(NH + kvh) * HS;
                const forge_bf16 *vbase = qkv + (size_t)b * T * row + (size_t)(NH + NKV + kvh) * HS;
                float *g = dq + bi * orow + (size_t)h * HS;
                const float L = lse[si], Di = D[si];
                for (int e = 0; e < HS; e++) g[e] = 0.0f;
                for (int j = 0; j <= i; j++) {
                    const forge_bf16 *k = kbase + (size_t)j * row;
                    const float p = expf(dot_bf16(q, k, HS) * scale - L);
                    const float ds = forge_round_bf16(p * (dot_bf16(d, vbase + (size_t)j * row, HS) - Di));
                    for (int e = 0; e < HS; e++) g[e] += ds * bf(k[e]);
                }
                for (int e = 0; e < HS; e++) g[e] *= scale;
            }
        }
    }

    /* dk, dv: one writer per key row; the group's query heads in order, then the queries in order */
#pragma omp parallel for collapse(3) schedule(dynamic, 16) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int kvh = 0; kvh < NKV; kvh++) {
            for (int j = 0; j < T; j++) {
                const size_t bj = (size_t)b * T + j;
                const forge_bf16 *k = qkv + bj * row + (size_t)(NH + kvh) * HS;
                const forge_bf16 *v = qkv + bj * row + (size_t)(NH + NKV + kvh) * HS;
                float *gk = dk + bj * kvrow + (size_t)kvh * HS;
                float *gv = dv + bj * kvrow + (size_t)kvh * HS;
                for (int e = 0; e < HS; e++) gk[e] = gv[e] = 0.0f;
                for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                    for (int i = j; i < T; i++) {
                        const size_t bi = (size_t)b * T + i, si = ((size_t)b * NH + h) * T + i;
                        const forge_bf16 *q = qkv + bi * row + (size_t)h * HS;
                        const forge_bf16 *d = dout + bi * orow + (size_t)h * HS;
                        const float p = expf(dot_bf16(q, k, HS) * scale - lse[si]);
                        const float ds = forge_round_bf16(p * (dot_bf16(d, v, HS) - D[si]));
                        const float pr = forge_round_bf16(p);
                        for (int e = 0; e < HS; e++) {
                            gv[e] += pr * bf(d[e]);
                            gk[e] += ds * bf(q[e]);
                        }
                    }
                }
                for (int e = 0; e < HS; e++) gk[e] *= scale;
            }
        }
    }

    /* dqkv = rn(dqkv + d), or rn(0 + d) when written (accumulate = 0): q heads from dq, k and v heads from dk, dv */
    const size_t nrows = (size_t)B * T;
#pragma omp parallel for num_threads(nt)
    for (size_t r = 0; r < nrows; r++) {
        forge_bf16 *g = dqkv + r * row;
        const float *src[3] = {dq + r * orow, dk + r * kvrow, dv + r * kvrow};
        const size_t len[3] = {orow, kvrow, kvrow};
        for (int part = 0; part < 3; part++) {
            for (size_t c = 0; c < len[part]; c++)
                g[c] = forge_bf16_from_f32((accumulate ? bf(g[c]) : 0.0f) + src[part][c]);
            g += len[part];
        }
    }
    return FORGE_OK;
}
