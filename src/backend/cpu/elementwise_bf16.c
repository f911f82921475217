/*
 * elementwise_bf16.c: the bf16 accumulate, GELU and SwiGLU on the CPU, the reference of elementwise_bf16.cu
 * (docs/mixed-precision.md). fp32 arithmetic on the exactly widened bf16 inputs, one rounding per stored result;
 * a backward adds into its bf16 gradient in fp32 and rounds once (dinp = rn(dinp + dx)), or, with accumulate = 0,
 * writes it with +0 in place of the old value (dinp = rn(0 + dx): the bits of an add into a zeroed gradient).
 *
 * GELU (the tanh form of elementwise.c), its derivative and the sigmoid come from base/fmath.h, whose exp and tanh
 * are built from basic operations: the CUDA kernels call the same functions and get the same bits, which the
 * C library's tanhf/expf would not give them. SwiGLU's packed form (gate and up the halves of each row of one (N, 2F)
 * buffer) runs the separate form's expressions, so both give the same bits.
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

/* rn(silu(g) u) */
static inline forge_bf16 swiglu_value(forge_bf16 gate, forge_bf16 up) {
    const float g = bf(gate);
    return rn(g * forge_sigmoid(g) * bf(up));
}

/* dgate = rn(old dgate + dout up silu'(g)), dup = rn(old dup + dout silu(g)); silu(g) = g sig(g),
 * silu'(g) = sig (1 + g (1 - sig)) */
static inline void swiglu_grads(forge_bf16 *dgate, forge_bf16 *dup, forge_bf16 dout, forge_bf16 gate, forge_bf16 up,
                                int accumulate) {
    const float g = bf(gate), d = bf(dout);
    const float sig = forge_sigmoid(g);
    const float dsilu = sig * fmaf(g, 1.0f - sig, 1.0f);
    *dgate = rn(fmaf(d * bf(up), dsilu, prev(dgate, 0, accumulate)));
    *dup = rn(fmaf(d, g * sig, prev(dup, 0, accumulate)));
}

forge_status cpu_swiglu_forward_bf16(forge_backend *be, forge_bf16 *out, const forge_bf16 *gate, const forge_bf16 *up,
                                     size_t n) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) out[i] = swiglu_value(gate[i], up[i]);
    return FORGE_OK;
}

forge_status cpu_swiglu_backward_bf16(forge_backend *be, forge_bf16 *dgate, forge_bf16 *dup, const forge_bf16 *dout,
                                      const forge_bf16 *gate, const forge_bf16 *up, size_t n, int accumulate) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) swiglu_grads(&dgate[i], &dup[i], dout[i], gate[i], up[i], accumulate);
    return FORGE_OK;
}

/* gu (N, 2F): row n is gate (F) then up (F) */
forge_status cpu_swiglu_packed_forward_bf16(forge_backend *be, forge_bf16 *out, const forge_bf16 *gu, int N, int F) {
    if (N < 0 || F < 0)
        return forge_error(FORGE_ERR_ARG, "cpu swiglu_packed_forward_bf16: sizes must be >= 0, got N=%d F=%d", N, F);
    int nt = cpu_threads(be);
#pragma omp parallel for collapse(2) num_threads(nt)
    for (int n = 0; n < N; n++)
        for (int i = 0; i < F; i++) {
            const forge_bf16 *g = gu + (size_t)n * 2 * F + i;
            out[(size_t)n * F + i] = swiglu_value(g[0], g[F]);
        }
    return FORGE_OK;
}

forge_status cpu_swiglu_packed_backward_bf16(forge_backend *be, forge_bf16 *dgu, const forge_bf16 *dout,
                                             const forge_bf16 *gu, int N, int F, int accumulate) {
    if (N < 0 || F < 0)
        return forge_error(FORGE_ERR_ARG, "cpu swiglu_packed_backward_bf16: sizes must be >= 0, got N=%d F=%d", N, F);
    int nt = cpu_threads(be);
#pragma omp parallel for collapse(2) num_threads(nt)
    for (int n = 0; n < N; n++)
        for (int i = 0; i < F; i++) {
            const size_t at = (size_t)n * 2 * F + i;
            swiglu_grads(&dgu[at], &dgu[at + F], dout[(size_t)n * F + i], gu[at], gu[at + F], accumulate);
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
