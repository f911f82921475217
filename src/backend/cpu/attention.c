/*
 * attention.c: causal self-attention with materialised scores on the CPU
 * (llm.c attention_forward/backward, extended to grouped-query attention).
 *
 * qkv (B, T, (NH + 2*NKV) * HS) is packed: NH query heads, then NKV key heads,
 * then NKV value heads. Query head h reads key/value head h / (NH / NKV).
 * att (B, NH, T, T) keeps the softmax probabilities, 0 above the diagonal,
 * and the backward reads them instead of recomputing the softmax.
 *
 * The decision a reader would get wrong is how the backward is threaded.
 * With GQA several query heads write into the same key/value gradient, so
 * splitting the work by query head would race on dk and dv. Threads split
 * (batch, key/value head) pairs instead, and each walks its whole group of
 * query heads in order: no atomics, and the sums do not depend on the thread
 * count. The caller's scratch (B, NH, T, T) holds d(att) and then d(scores)
 * one row at a time.
 */
#include <math.h>

#include "cpu_ops.h"

static forge_status check_heads(const char *op, int NH, int NKV, int HS) {
    if (NH <= 0 || NKV <= 0 || HS <= 0 || NH % NKV != 0)
        return forge_error(FORGE_ERR_ARG,
                           "cpu %s: need NH, NKV, HS > 0 and NH divisible by NKV, got NH=%d NKV=%d "
                           "HS=%d",
                           op, NH, NKV, HS);
    return FORGE_OK;
}

forge_status cpu_attention_forward(forge_backend *be, float *out, float *att, const float *qkv,
                                   int B, int T, int NH, int NKV, int HS) {
    FORGE_TRY(check_heads("attention_forward", NH, NKV, HS));
    int nt = cpu_threads(be);
    size_t row = (size_t)(NH + 2 * NKV) * HS; /* floats per (b, t) in qkv */
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    /* out (B,T,NH*HS) ; att (B,NH,T,T) */
#pragma omp parallel for collapse(3) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                int kvh = h / group;
                const float *q = qkv + ((size_t)b * T + t) * row + (size_t)h * HS;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;

                /* scores and their max, for a stable softmax */
                float maxval = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * row + (size_t)(NH + kvh) * HS;
                    float s = 0.0f;
                    for (int i = 0; i < HS; i++) s += q[i] * k[i];
                    s *= scale;
                    a[t2] = s;
                    if (s > maxval) maxval = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    float e = expf(a[t2] - maxval);
                    a[t2] = e;
                    sum += e;
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 < T; t2++) a[t2] = t2 <= t ? a[t2] * inv : 0.0f;

                float *o = out + ((size_t)b * T + t) * NH * HS + (size_t)h * HS;
                for (int i = 0; i < HS; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v =
                        qkv + ((size_t)b * T + t2) * row + (size_t)(NH + NKV + kvh) * HS;
                    for (int i = 0; i < HS; i++) o[i] += a[t2] * v[i];
                }
            }
        }
    }
    return FORGE_OK;
}

forge_status cpu_attention_backward(forge_backend *be, float *dqkv, float *scratch,
                                    const float *dout, const float *qkv, const float *att, int B,
                                    int T, int NH, int NKV, int HS) {
    FORGE_TRY(check_heads("attention_backward", NH, NKV, HS));
    int nt = cpu_threads(be);
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    int group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for collapse(2) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int kvh = 0; kvh < NKV; kvh++) {
            for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                for (int t = 0; t < T; t++) {
                    size_t bt = (size_t)b * T + t;
                    const float *q = qkv + bt * row + (size_t)h * HS;
                    float *dq = dqkv + bt * row + (size_t)h * HS;
                    const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                    float *da = scratch + (((size_t)b * NH + h) * T + t) * T;
                    const float *d = dout + bt * NH * HS + (size_t)h * HS;

                    /* out = sum_t2 a[t2] v[t2]:  da[t2] = d . v[t2],  dv[t2] += a[t2] d */
                    for (int t2 = 0; t2 <= t; t2++) {
                        size_t off = ((size_t)b * T + t2) * row + (size_t)(NH + NKV + kvh) * HS;
                        const float *v = qkv + off;
                        float *dv = dqkv + off;
                        float s = 0.0f;
                        for (int i = 0; i < HS; i++) {
                            s += d[i] * v[i];
                            dv[i] += a[t2] * d[i];
                        }
                        da[t2] = s;
                    }
                    /* softmax backward: dscore[t2] = a[t2] (da[t2] - sum_j a[j] da[j]) */
                    float dot = 0.0f;
                    for (int t2 = 0; t2 <= t; t2++) dot += a[t2] * da[t2];
                    for (int t2 = 0; t2 <= t; t2++) da[t2] = a[t2] * (da[t2] - dot);
                    /* score = scale q . k[t2] */
                    for (int t2 = 0; t2 <= t; t2++) {
                        size_t off = ((size_t)b * T + t2) * row + (size_t)(NH + kvh) * HS;
                        const float *k = qkv + off;
                        float *dk = dqkv + off;
                        float g = da[t2] * scale;
                        for (int i = 0; i < HS; i++) {
                            dq[i] += g * k[i];
                            dk[i] += g * q[i];
                        }
                    }
                }
            }
        }
    }
    return FORGE_OK;
}
