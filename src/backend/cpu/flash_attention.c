/*
 * flash_attention.c: fused causal self-attention on the CPU: the scores are
 * computed one key tile at a time and folded into an online softmax, so the
 * extra memory is O(T) (the lse row statistics), never (B, NH, T, T).
 *
 * Forward, per query row i: m (running max), l (running sum of exp(s - m)) and
 * the output row o = sum_j exp(s_j - m) v_j, kept unnormalised in `out`
 * itself. A key tile with a larger max rescales l and o by exp(m_old - m_new).
 * At the end o /= l and lse = m + log(l).
 *
 * Backward recomputes P_ij = exp(s_ij - lse_i) instead of reading it:
 *   D_i  = dO_i . O_i                       (scratch)
 *   dS_ij = P_ij (dO_i . v_j - D_i)
 *   dq_i += scale sum_j dS_ij k_j           (threads over query rows)
 *   dk_j += scale sum_{h,i} dS_ij q_i,  dv_j += sum_{h,i} P_ij dO_i
 *                                           (threads over key rows, the GQA
 *                                            group's query heads walked in order)
 * Each output element has one writer and a fixed summation order, so results
 * do not depend on the thread count, and no atomics are needed.
 *
 * Causal alignment is bottom-right (query i sees key j <= i + Tk - Tq), the
 * convention of a query block appended after a cache. With Tk < Tq the first
 * rows see nothing: out = 0, lse = -INFINITY, and every loop below simply has
 * an empty range for them, so no exp(-inf - -inf) = NaN can arise.
 */
#include <math.h>

#include "cpu_ops.h"
#include "vexp.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#define FLASH_QROWS 16 /* query rows per OpenMP work item */
#define FLASH_KTILE 64 /* keys per online-softmax step; the score tile lives on the stack */

/* a . b over n elements in 8 interleaved partial sums (lane l takes the
 * elements d = l mod 8, each by fma), added in a fixed tree at the end:
 * ((0+4) + (2+6)) + ((1+5) + (3+7)), the tail after that. A single running
 * sum would be one serial chain of dependent adds (ISO C forbids reassociating
 * it, so it cannot vectorise), and these dot products of a head's HS values
 * were most of a small model's attention time. The AVX2 and the plain-C forms
 * compute the same bits, and the order depends only on n, so results do not
 * depend on the thread count. */
static inline float dot(const float *a, const float *b, int n) {
    int d = 0;
    float s;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    for (; d + 8 <= n; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)); /* l + (l+4) */
    __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));                                      /* t0+t2, t1+t3 */
    s = _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));                                /* (t0+t2) + (t1+t3) */
#else
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (; d + 8 <= n; d += 8)
        for (int l = 0; l < 8; l++) acc[l] = fmaf(a[d + l], b[d + l], acc[l]);
    s = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
#endif
    for (; d < n; d++) s = fmaf(a[d], b[d], s);
    return s;
}

static forge_status flash_check(const char *op, int B, int Tq, int Tk, int NH, int NKV, int HS) {
    if (NH <= 0 || NKV <= 0 || HS <= 0 || NH % NKV != 0)
        return forge_error(FORGE_ERR_ARG,
                           "cpu %s: need NH, NKV, HS > 0 and NH divisible by NKV, got NH=%d NKV=%d "
                           "HS=%d",
                           op, NH, NKV, HS);
    if (B < 0 || Tq < 0 || Tk < 0)
        return forge_error(FORGE_ERR_ARG, "cpu %s: need B, Tq, Tk >= 0, got B=%d Tq=%d Tk=%d", op, B,
                           Tq, Tk);
    return FORGE_OK;
}

forge_status cpu_flash_attention_forward_ext(forge_backend *be, float *out, float *lse,
                                             const float *qkv_q, const float *qkv_kv, int B, int Tq,
                                             int Tk, int NH, int NKV, int HS) {
    FORGE_TRY(flash_check("flash_attention_forward", B, Tq, Tk, NH, NKV, HS));
    int nt = cpu_threads(be);
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    int group = NH / NKV;
    int nqb = (Tq + FLASH_QROWS - 1) / FLASH_QROWS;
    int off = Tk - Tq; /* query i sees keys j <= i + off */
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for collapse(3) schedule(dynamic) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int qb = 0; qb < nqb; qb++) {
                int kvh = h / group;
                const float *kbase = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + kvh) * HS;
                const float *vbase = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + NKV + kvh) * HS;
                int iend = (qb + 1) * FLASH_QROWS < Tq ? (qb + 1) * FLASH_QROWS : Tq;
                for (int i = qb * FLASH_QROWS; i < iend; i++) {
                    const float *q = qkv_q + ((size_t)b * Tq + i) * row + (size_t)h * HS;
                    float *o = out + ((size_t)b * Tq + i) * NH * HS + (size_t)h * HS;
                    float *lrow = lse + ((size_t)b * NH + h) * Tq + i;
                    for (int d = 0; d < HS; d++) o[d] = 0.0f;
                    int jlast = i + off < Tk - 1 ? i + off : Tk - 1; /* last visible key */
                    if (jlast < 0) {
                        *lrow = -INFINITY;
                        continue;
                    }
                    float m = -INFINITY, l = 0.0f;
                    for (int j0 = 0; j0 <= jlast; j0 += FLASH_KTILE) {
                        int n = jlast - j0 + 1 < FLASH_KTILE ? jlast - j0 + 1 : FLASH_KTILE;
                        float s[FLASH_KTILE];
                        float tmax = -INFINITY;
                        for (int t = 0; t < n; t++) {
                            const float *k = kbase + (size_t)(j0 + t) * row;
                            s[t] = dot(q, k, HS) * scale;
                            if (s[t] > tmax) tmax = s[t];
                        }
                        float mnew = tmax > m ? tmax : m;
                        float alpha = expf(m - mnew); /* 0 on the first tile (m = -inf) */
                        l *= alpha;
                        for (int d = 0; d < HS; d++) o[d] *= alpha;
                        for (int t = 0; t < n; t++) s[t] = cpu_vexpf(s[t] - mnew); /* vectorises */
                        for (int t = 0; t < n; t++) {
                            float p = s[t];
                            const float *v = vbase + (size_t)(j0 + t) * row;
                            l += p;
                            for (int d = 0; d < HS; d++) o[d] += p * v[d];
                        }
                        m = mnew;
                    }
                    float inv = 1.0f / l; /* l >= 1: the max term contributes exp(0) */
                    for (int d = 0; d < HS; d++) o[d] *= inv;
                    *lrow = m + logf(l);
                }
            }
        }
    }
    return FORGE_OK;
}

forge_status cpu_flash_attention_backward_ext(forge_backend *be, float *dqkv_q, float *dqkv_kv,
                                              float *scratch, const float *dout, const float *qkv_q,
                                              const float *qkv_kv, const float *out, const float *lse,
                                              int B, int Tq, int Tk, int NH, int NKV, int HS) {
    FORGE_TRY(flash_check("flash_attention_backward", B, Tq, Tk, NH, NKV, HS));
    int nt = cpu_threads(be);
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    size_t orow = (size_t)NH * HS;
    int group = NH / NKV;
    int off = Tk - Tq;
    float scale = 1.0f / sqrtf((float)HS);
    float *D = scratch; /* (B, NH, Tq) */

    /* D_i = dO_i . O_i */
#pragma omp parallel for collapse(2) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < Tq; i++) {
                const float *d = dout + ((size_t)b * Tq + i) * orow + (size_t)h * HS;
                const float *o = out + ((size_t)b * Tq + i) * orow + (size_t)h * HS;
                D[((size_t)b * NH + h) * Tq + i] = dot(d, o, HS);
            }
        }
    }

    /* dQ: one writer per query row */
    int nqb = (Tq + FLASH_QROWS - 1) / FLASH_QROWS;
#pragma omp parallel for collapse(3) schedule(dynamic) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int qb = 0; qb < nqb; qb++) {
                int kvh = h / group;
                const float *kbase = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + kvh) * HS;
                const float *vbase = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + NKV + kvh) * HS;
                int iend = (qb + 1) * FLASH_QROWS < Tq ? (qb + 1) * FLASH_QROWS : Tq;
                for (int i = qb * FLASH_QROWS; i < iend; i++) {
                    size_t bi = (size_t)b * Tq + i;
                    const float *q = qkv_q + bi * row + (size_t)h * HS;
                    float *dq = dqkv_q + bi * row + (size_t)h * HS;
                    const float *d = dout + bi * orow + (size_t)h * HS;
                    size_t si = ((size_t)b * NH + h) * Tq + i;
                    float L = lse[si], Di = D[si];
                    int jlast = i + off < Tk - 1 ? i + off : Tk - 1;
                    /* a tile of keys at a time: the dot products, then the
                     * exps in one loop that vectorises, then dq in key order */
                    for (int j0 = 0; j0 <= jlast; j0 += FLASH_KTILE) {
                        int n = jlast - j0 + 1 < FLASH_KTILE ? jlast - j0 + 1 : FLASH_KTILE;
                        float p[FLASH_KTILE], dpd[FLASH_KTILE];
                        for (int t = 0; t < n; t++) {
                            const float *k = kbase + (size_t)(j0 + t) * row;
                            const float *v = vbase + (size_t)(j0 + t) * row;
                            p[t] = dot(q, k, HS) * scale - L;
                            dpd[t] = dot(d, v, HS) - Di;
                        }
                        for (int t = 0; t < n; t++) p[t] = cpu_vexpf(p[t]);
                        for (int t = 0; t < n; t++) {
                            const float *k = kbase + (size_t)(j0 + t) * row;
                            float g = p[t] * dpd[t] * scale;
                            for (int e = 0; e < HS; e++) dq[e] += g * k[e];
                        }
                    }
                }
            }
        }
    }

    /* dK, dV: one writer per key row; the group's query heads in order */
#pragma omp parallel for collapse(3) schedule(dynamic) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int kvh = 0; kvh < NKV; kvh++) {
            for (int j = 0; j < Tk; j++) {
                size_t bj = (size_t)b * Tk + j;
                const float *k = qkv_kv + bj * row + (size_t)(NH + kvh) * HS;
                const float *v = qkv_kv + bj * row + (size_t)(NH + NKV + kvh) * HS;
                float *dk = dqkv_kv + bj * row + (size_t)(NH + kvh) * HS;
                float *dv = dqkv_kv + bj * row + (size_t)(NH + NKV + kvh) * HS;
                int ifirst = j - off > 0 ? j - off : 0; /* first query that sees key j */
                for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                    /* a tile of queries at a time, as for dq */
                    for (int i0 = ifirst; i0 < Tq; i0 += FLASH_KTILE) {
                        int n = Tq - i0 < FLASH_KTILE ? Tq - i0 : FLASH_KTILE;
                        float p[FLASH_KTILE], dpd[FLASH_KTILE];
                        for (int t = 0; t < n; t++) {
                            size_t bi = (size_t)b * Tq + i0 + t;
                            size_t si = ((size_t)b * NH + h) * Tq + i0 + t;
                            p[t] = dot(qkv_q + bi * row + (size_t)h * HS, k, HS) * scale - lse[si];
                            dpd[t] = dot(dout + bi * orow + (size_t)h * HS, v, HS) - D[si];
                        }
                        for (int t = 0; t < n; t++) p[t] = cpu_vexpf(p[t]);
                        for (int t = 0; t < n; t++) {
                            size_t bi = (size_t)b * Tq + i0 + t;
                            const float *q = qkv_q + bi * row + (size_t)h * HS;
                            const float *d = dout + bi * orow + (size_t)h * HS;
                            float g = p[t] * dpd[t] * scale;
                            for (int e = 0; e < HS; e++) {
                                dv[e] += p[t] * d[e];
                                dk[e] += g * q[e];
                            }
                        }
                    }
                }
            }
        }
    }
    return FORGE_OK;
}

forge_status cpu_flash_attention_forward(forge_backend *be, float *out, float *lse, const float *qkv,
                                         int B, int T, int NH, int NKV, int HS) {
    return cpu_flash_attention_forward_ext(be, out, lse, qkv, qkv, B, T, T, NH, NKV, HS);
}

forge_status cpu_flash_attention_backward(forge_backend *be, float *dqkv, float *scratch,
                                          const float *dout, const float *qkv, const float *out,
                                          const float *lse, int B, int T, int NH, int NKV, int HS) {
    return cpu_flash_attention_backward_ext(be, dqkv, dqkv, scratch, dout, qkv, qkv, out, lse, B, T,
                                            T, NH, NKV, HS);
}
