/*
 * matmul_bf16.c: the bf16 linear layer on the CPU, the reference of the CUDA
 * kernels (docs/mixed-precision.md, rounding points).
 *
 *   forward          v (N,OC) = inp (N,C) . weight (OC,C)^T + bias (OC)
 *                    pre NULL: out = rn(v); else pre = rn(v), out = rn(gelu(v))
 *   backward_input   dinp (N,C) = rn(dinp + d), d = dout (N,OC) . weight (OC,C)
 *                    [* gelu'(pre) (N,C)]
 *   backward_weight  dweight (OC,C) += dout^T . inp;  dbias (OC) += sum_n dout   (fp32)
 *
 * Plain loops: every bf16 operand is widened to fp32 (exactly), the product of
 * two of them is exact in fp32, and each output element is one fp32 sum in k
 * order, then (+ bias, GELU) rounded once to bf16 where it is stored (rn:
 * forge_bf16_from_f32, nearest even). The loops are arranged so that one pass
 * over a row of the output keeps a row of fp32 accumulators (backward_input,
 * backward_weight) without changing any element's summation order. OpenMP
 * splits rows of the output only, so the result does not depend on the thread
 * count. GELU and its derivative are elementwise.c's formulas (tanh form).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

#define GELU_SCALING_FACTOR 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f

static inline float bf(forge_bf16 h) { return forge_bf16_to_f32(h); }

static inline float gelu_f32(float x) {
    float cube = GELU_CUBIC * x * x * x;
    return 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
}

static inline float gelu_grad_f32(float x) {
    float cube = GELU_CUBIC * x * x * x;
    float tanh_out = tanhf(GELU_SCALING_FACTOR * (x + cube));
    float sech2 = 1.0f - tanh_out * tanh_out;
    return 0.5f * (1.0f + tanh_out) + x * 0.5f * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * GELU_CUBIC * x * x);
}

static forge_status check_sizes(const char *op, int N, int C, int OC) {
    if (N < 0 || C < 0 || OC < 0)
        return forge_error(FORGE_ERR_ARG, "cpu %s: sizes must be >= 0, got N=%d C=%d OC=%d", op, N, C, OC);
    return FORGE_OK;
}

forge_status cpu_matmul_forward_bf16(forge_backend *be, forge_bf16 *out, forge_bf16 *pre, const forge_bf16 *inp,
                                     const forge_bf16 *weight, const float *bias, int N, int C, int OC) {
    FORGE_TRY(check_sizes("matmul_forward_bf16", N, C, OC));
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        const forge_bf16 *x = inp + (size_t)n * C;
        for (int o = 0; o < OC; o++) {
            const forge_bf16 *w = weight + (size_t)o * C;
            float acc = 0.0f;
            for (int k = 0; k < C; k++) acc += bf(x[k]) * bf(w[k]);
            float v = bias ? acc + bias[o] : acc;
            size_t i = (size_t)n * OC + o;
            if (pre) {
                pre[i] = forge_bf16_from_f32(v);
                v = gelu_f32(v);
            }
            out[i] = forge_bf16_from_f32(v);
        }
    }
    return FORGE_OK;
}

forge_status cpu_matmul_backward_input_bf16(forge_backend *be, forge_bf16 *dinp, const forge_bf16 *dout,
                                            const forge_bf16 *weight, const forge_bf16 *pre, int N, int C, int OC,
                                            int accumulate) {
    FORGE_TRY(check_sizes("matmul_backward_input_bf16", N, C, OC));
    if (N == 0 || C == 0) return FORGE_OK;
    int nt = cpu_threads(be), failed = 0;
#pragma omp parallel num_threads(nt) reduction(| : failed)
    {
        /* acc[c] = sum over o, in order, of dout[n][o] * weight[o][c]: row n of dout . weight */
        float *acc = malloc((size_t)C * sizeof *acc);
        if (!acc) failed = 1;
#pragma omp for
        for (int n = 0; n < N; n++) {
            if (!acc) continue;
            for (int c = 0; c < C; c++) acc[c] = 0.0f;
            for (int o = 0; o < OC; o++) {
                const float g = bf(dout[(size_t)n * OC + o]);
                const forge_bf16 *w = weight + (size_t)o * C;
                for (int c = 0; c < C; c++) acc[c] += g * bf(w[c]);
            }
            forge_bf16 *row = dinp + (size_t)n * C;
            for (int c = 0; c < C; c++) {
                float d = acc[c];
                if (pre) d *= gelu_grad_f32(bf(pre[(size_t)n * C + c]));
                row[c] = forge_bf16_from_f32(accumulate ? bf(row[c]) + d : d);
            }
        }
        free(acc);
    }
    if (failed) return forge_error(FORGE_ERR_OOM, "cpu matmul_backward_input_bf16: out of memory (C=%d)", C);
    return FORGE_OK;
}

forge_status cpu_matmul_backward_weight_bf16(forge_backend *be, float *dweight, float *dbias, const forge_bf16 *dout,
                                             const forge_bf16 *inp, int N, int C, int OC) {
    FORGE_TRY(check_sizes("matmul_backward_weight_bf16", N, C, OC));
    if (OC == 0) return FORGE_OK;
    int nt = cpu_threads(be), failed = 0;
#pragma omp parallel num_threads(nt) reduction(| : failed)
    {
        /* acc[c] = sum over n, in order, of dout[n][o] * inp[n][c]: row o of dout^T . inp */
        float *acc = malloc((size_t)(C > 0 ? C : 1) * sizeof *acc);
        if (!acc) failed = 1;
#pragma omp for
        for (int o = 0; o < OC; o++) {
            if (!acc) continue;
            for (int c = 0; c < C; c++) acc[c] = 0.0f;
            float bsum = 0.0f;
            for (int n = 0; n < N; n++) {
                const float g = bf(dout[(size_t)n * OC + o]);
                const forge_bf16 *x = inp + (size_t)n * C;
                for (int c = 0; c < C; c++) acc[c] += g * bf(x[c]);
                bsum += g;
            }
            float *row = dweight + (size_t)o * C;
            for (int c = 0; c < C; c++) row[c] += acc[c];
            if (dbias) dbias[o] += bsum;
        }
        free(acc);
    }
    if (failed) return forge_error(FORGE_ERR_OOM, "cpu matmul_backward_weight_bf16: out of memory (C=%d)", C);
    return FORGE_OK;
}
