/*
 * layernorm.c: LayerNorm over the last dimension C on the CPU, as in llm.c's
 * train_gpt2.c (see https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html).
 *
 *   out = (x - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps)
 *
 * mean and var are two passes in float (sum, then sum of squared deviations),
 * not E[x^2] - E[x]^2 in one pass: the one-pass form cancels catastrophically
 * when |mean| >> std, which a residual stream reaches easily.
 *
 * The decision a reader would get wrong is the backward threading: dinp is
 * per row, but dweight and dbias are sums over all N rows. Threads split rows
 * for dinp and channel slices for dweight/dbias (each thread then walks every
 * row in order), so there is no race and no dependence on the thread count.
 */
#include <math.h>

#include "cpu_ops.h"

forge_status cpu_layernorm_forward(forge_backend *be, float *out, float *mean, float *rstd,
                                   const float *inp, const float *weight, const float *bias, int N,
                                   int C, float eps) {
    if (C <= 0) return forge_error(FORGE_ERR_ARG, "cpu layernorm_forward: C must be > 0, got %d", C);
    int nt = cpu_threads(be);
    /* out, inp (N,C) ; mean, rstd (N) ; weight, bias (C) */
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m = m / C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float d = x[i] - m;
            v += d * d;
        }
        v = v / C;
        float s = 1.0f / sqrtf(v + eps);
        float *o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * weight[i] + bias[i];
        mean[n] = m;
        rstd[n] = s;
    }
    return FORGE_OK;
}

forge_status cpu_layernorm_backward(forge_backend *be, float *dinp, float *dweight, float *dbias,
                                    const float *dout, const float *inp, const float *weight,
                                    const float *mean, const float *rstd, int N, int C) {
    if (C <= 0) return forge_error(FORGE_ERR_ARG, "cpu layernorm_backward: C must be > 0, got %d", C);
    int nt = cpu_threads(be);
    /* dinp: with norm = (x - mean) * rstd and g = weight * dout,
     * dx = rstd * (g - mean(g) - norm * mean(g * norm)) */
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *g = dout + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            float dnorm = weight[i] * g[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean = dnorm_mean / C;
        dnorm_norm_mean = dnorm_norm_mean / C;
        float *dx = dinp + (size_t)n * C;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            float dnorm = weight[i] * g[i];
            dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
    /* dweight += sum_n dout * norm ; dbias += sum_n dout */
    enum { SLICE = 64 };
    int slices = (C + SLICE - 1) / SLICE;
#pragma omp parallel for num_threads(nt)
    for (int sl = 0; sl < slices; sl++) {
        int c0 = sl * SLICE, c1 = c0 + SLICE < C ? c0 + SLICE : C;
        float dw[SLICE], db[SLICE];
        for (int i = c0; i < c1; i++) dw[i - c0] = db[i - c0] = 0.0f;
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            const float *g = dout + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int i = c0; i < c1; i++) {
                dw[i - c0] += (x[i] - m) * s * g[i];
                db[i - c0] += g[i];
            }
        }
        for (int i = c0; i < c1; i++) {
            dweight[i] += dw[i - c0];
            dbias[i] += db[i - c0];
        }
    }
    return FORGE_OK;
}
