/*
 * elementwise_bf16.c: the bf16 accumulate, GELU and SwiGLU on the CPU, the reference of elementwise_bf16.cu
 * (docs/mixed-precision.md). fp32 arithmetic on the exactly widened bf16 inputs, one rounding per stored result;
 * a backward adds into its bf16 gradient in fp32 and rounds once (dinp = rn(dinp + dx)), or, with accumulate = 0,
 * writes it with +0 in place of the old value (dinp = rn(0 + dx): the bits of an add into a zeroed gradient).
 *
 * GELU (the tanh form of elementwise.c), its derivative and the sigmoid come from base/fmath.h, whose exp and tanh
 * are built from basic operations: the CUDA kernels call the same functions and get the same bits, which the
 * C library's tanhf/expf would not give them.
 */
#include "../../base/fmath.h"
#include "cpu_ops.h"

static inline float bf(forge_bf16 h) { return forge_bf16_to_f32(h); }
static inline forge_bf16 rn(float f) { return forge_bf16_from_f32(f); }

/* the old value of a gradient a backward adds into: +0 when it writes (accumulate = 0) */
static inline float prev(const forge_bf16 *d, size_t i, int accumulate) { return accumulate ? bf(d[i]) : 0.0f; }

forge_status cpu_accumulate_bf16(forge_backend *be, forge_bf16 *dst, const forge_bf16 *src, size_t n, int accumulate) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) dst[i] = rn(prev(dst, i, accumulate) + bf(src[i]));
    return FORGE_OK;
}

forge_status cpu_gelu_forward_bf16(forge_backend *be, forge_bf16 *out, const forge_bf16 *inp, size_t n) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) out[i] = rn(forge_gelu(bf(inp[i])));
    return FORGE_OK;
}

forge_status cpu_gelu_backward_bf16(forge_backend *be, forge_bf16 *dinp, const forge_bf16 *inp, const forge_bf16 *dout,
                                    size_t n, int accumulate) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++)
        dinp[i] = rn(fmaf(forge_gelu_grad(bf(inp[i])), bf(dout[i]), prev(dinp, i, accumulate)));
    return FORGE_OK;
}

forge_status cpu_swiglu_forward_bf16(forge_backend *be, forge_bf16 *out, const forge_bf16 *gate, const forge_bf16 *up,
                                     size_t n) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) {
        const float g = bf(gate[i]);
        out[i] = rn(g * forge_sigmoid(g) * bf(up[i]));
    }
    return FORGE_OK;
}

/* silu(g) = g sig(g), silu'(g) = sig (1 + g (1 - sig)) */
forge_status cpu_swiglu_backward_bf16(forge_backend *be, forge_bf16 *dgate, forge_bf16 *dup, const forge_bf16 *dout,
                                      const forge_bf16 *gate, const forge_bf16 *up, size_t n, int accumulate) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) {
        const float g = bf(gate[i]), d = bf(dout[i]);
        const float sig = forge_sigmoid(g);
        const float dsilu = sig * fmaf(g, 1.0f - sig, 1.0f);
        dgate[i] = rn(fmaf(d * bf(up[i]), dsilu, prev(dgate, i, accumulate)));
        dup[i] = rn(fmaf(d, g * sig, prev(dup, i, accumulate)));
    }
    return FORGE_OK;
}

/* gelu_backward_bf16 written, then dbias[o] += the fp32 sum over rows, in order, of the rounded dinp[n][o]: the
 * bits matmul_backward_weight_bf16's dbias gives for dout = dinp */
forge_status cpu_gelu_backward_dbias_bf16(forge_backend *be, forge_bf16 *dinp, float *dbias, const forge_bf16 *inp,
                                          const forge_bf16 *dout, int N, int OC) {
    if (N < 0 || OC < 0)
        return forge_error(FORGE_ERR_ARG, "cpu gelu_backward_dbias_bf16: sizes must be >= 0, got N=%d OC=%d", N, OC);
    FORGE_TRY(cpu_gelu_backward_bf16(be, dinp, inp, dout, (size_t)N * OC, 0));
    if (!dbias) return FORGE_OK;
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (int o = 0; o < OC; o++) {
        float bsum = 0.0f;
        for (int n = 0; n < N; n++) bsum += bf(dinp[(size_t)n * OC + o]);
        dbias[o] += bsum;
    }
    return FORGE_OK;
}
