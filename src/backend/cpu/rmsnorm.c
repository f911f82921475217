/*
 * rmsnorm.c: RMSNorm over the last dimension C on the CPU (Llama; Zhang &
 * Sennrich 2019, https://arxiv.org/abs/1910.07467).
 *
 *   out = x * rstd * weight,  rstd = 1 / sqrt(mean(x^2) + eps)
 *
 * No mean is subtracted and there is no bias: only rstd (N) is saved.
 * Backward, with xhat = x * rstd and g = weight * dout:
 *   dx = rstd * (g - xhat * mean(g * xhat)),   dweight += sum_n dout * xhat
 * Threads split rows for dinp and channel slices for dweight (see
 * layernorm.c: the same reason, a sum over rows must not race).
 */
#include <math.h>

#include "cpu_ops.h"

forge_status cpu_rmsnorm_forward(forge_backend *be, float *out, float *rstd, const float *inp,
                                 const float *weight, int N, int C, float eps) {
    if (C <= 0) return forge_error(FORGE_ERR_ARG, "cpu rmsnorm_forward: C must be > 0, got %d", C);
    int nt = cpu_threads(be);
    /* out, inp (N,C) ; rstd (N) ; weight (C) */
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float ss = 0.0f;
        for (int i = 0; i < C; i++) ss += x[i] * x[i];
        float s = 1.0f / sqrtf(ss / C + eps);
        float *o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) o[i] = x[i] * s * weight[i];
        rstd[n] = s;
    }
    return FORGE_OK;
}

forge_status cpu_rmsnorm_backward(forge_backend *be, float *dinp, float *dweight, const float *dout,
                                  const float *inp, const float *weight, const float *rstd, int N,
                                  int C) {
    if (C <= 0) return forge_error(FORGE_ERR_ARG, "cpu rmsnorm_backward: C must be > 0, got %d", C);
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *d = dout + (size_t)n * C;
        float s = rstd[n];
        float dot = 0.0f; /* sum g * xhat */
        for (int i = 0; i < C; i++) dot += weight[i] * d[i] * x[i] * s;
        dot = dot / C;
        float *dx = dinp + (size_t)n * C;
        for (int i = 0; i < C; i++) dx[i] += s * (weight[i] * d[i] - x[i] * s * dot);
    }
    enum { SLICE = 64 };
    int slices = (C + SLICE - 1) / SLICE;
#pragma omp parallel for num_threads(nt)
    for (int sl = 0; sl < slices; sl++) {
        int c0 = sl * SLICE, c1 = c0 + SLICE < C ? c0 + SLICE : C;
        float dw[SLICE];
        for (int i = c0; i < c1; i++) dw[i - c0] = 0.0f;
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            const float *d = dout + (size_t)n * C;
            float s = rstd[n];
            for (int i = c0; i < c1; i++) dw[i - c0] += d[i] * x[i] * s;
        }
        for (int i = c0; i < c1; i++) dweight[i] += dw[i - c0];
    }
    return FORGE_OK;
}
