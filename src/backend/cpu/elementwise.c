/*
 * elementwise.c: accumulate, residual add, GELU and SwiGLU on the CPU, and the
 * fp32 -> bf16 cast.
 *
 * GELU is the tanh approximation GPT-2 was trained with (llm.c gelu_forward),
 * not the exact erf form. Its backward uses 1 - tanh^2 for sech^2 rather than
 * llm.c's 1/cosh^2: the two agree, but coshf overflows to inf for |x| > ~10,
 * which only works by the accident of 1/inf = 0. tanh is tanh_fast below, not
 * the C library's tanhf: a call per element that the compiler cannot
 * vectorise, which made GELU a fifth of a tiny-model training step on the CPU.
 * Backward entries accumulate (+=) like every backward in backend.h. SwiGLU
 * has a packed form, gate and up the two halves of each row of one (N, 2F)
 * buffer (the output of the MLP's one GEMM on its stacked weights), computed
 * by the same expressions as the separate form.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../base/fmath.h"
#include "cpu_ops.h"

#define GELU_SCALING_FACTOR 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f

/* tanh(u) = sign(u) (1 - 2 / (e^2|u| + 1)), written without branches or calls
 * so that the GELU loops vectorise. e^x: x = k ln2 + r (Cody-Waite, ln2 in two
 * parts), e^r by its Taylor series to r^7, times 2^k built from its bits.
 * x = 2|u| is clamped to 20, past which tanh rounds to 1 in fp32 (and 2^k
 * stays normal). Working on |u| keeps the error near +-1 at about an ulp,
 * where GELU's 1 + tanh and the backward's 1 - tanh^2 cancel. The absolute
 * error against double is a few 1e-7 (tests/test_ops_forward.c bounds GELU
 * and its gradient); the relative error grows only near u = 0, where GELU
 * adds tanh to 1. */
static inline float tanh_fast(float u) {
    uint32_t ub;
    memcpy(&ub, &u, sizeof ub);
    const uint32_t sign = ub & 0x80000000u;
    float x = 2.0f * fabsf(u);
    /* clamped on its bits (for non-negative floats the integer order is the
     * value order): a float compare here would stop GCC vectorising the loop
     * under -ftrapping-math. A NaN clamps to 20; the x * tanh(...) of GELU
     * keeps it NaN. */
    uint32_t xb;
    memcpy(&xb, &x, sizeof xb);
    xb = xb < 0x41a00000u ? xb : 0x41a00000u; /* 20.0f */
    memcpy(&x, &xb, sizeof x);
    float k; /* nearest integer to x / ln2, in [0, 29] */
    const float p = forge_exp_reduced(x, &k);
    const int32_t bits = ((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float t = 1.0f - 2.0f / fmaf(p, scale, 1.0f);
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    tb |= sign;
    memcpy(&t, &tb, sizeof t);
    return t;
}

forge_status cpu_accumulate(forge_backend *be, float *dst, const float *src, size_t n) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
    return FORGE_OK;
}

forge_status cpu_add_forward(forge_backend *be, float *out, const float *a, const float *b, size_t n) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
    return FORGE_OK;
}

forge_status cpu_gelu_forward(forge_backend *be, float *out, const float *inp, size_t n) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = GELU_CUBIC * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanh_fast(GELU_SCALING_FACTOR * (x + cube)));
    }
    return FORGE_OK;
}

forge_status cpu_gelu_backward(forge_backend *be, float *dinp, const float *inp, const float *dout,
                               size_t n) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = GELU_CUBIC * x * x * x;
        float tanh_out = tanh_fast(GELU_SCALING_FACTOR * (x + cube));
        float sech2 = 1.0f - tanh_out * tanh_out;
        /* d/dx of 0.5 x (1 + tanh(u)), u = s (x + 0.044715 x^3) */
        float local_grad = 0.5f * (1.0f + tanh_out) +
                           x * 0.5f * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * GELU_CUBIC * x * x);
        dinp[i] += local_grad * dout[i];
    }
    return FORGE_OK;
}

/* silu(g) u; expf(-g) may overflow to inf for very negative g: sigmoid is then 0, as it should be */
static inline float swiglu_value(float g, float u) {
    float sig = 1.0f / (1.0f + expf(-g));
    return g * sig * u;
}

/* dgate += dout up silu'(g), dup += dout silu(g); silu'(g) = sig (1 + g (1 - sig)) */
static inline void swiglu_grads(float *dgate, float *dup, float d, float g, float u) {
    float sig = 1.0f / (1.0f + expf(-g));
    float silu = g * sig;
    float dsilu = sig * (1.0f + g * (1.0f - sig));
    *dgate += d * u * dsilu;
    *dup += d * silu;
}

forge_status cpu_swiglu_forward(forge_backend *be, float *out, const float *gate, const float *up,
                                size_t n) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) out[i] = swiglu_value(gate[i], up[i]);
    return FORGE_OK;
}

forge_status cpu_swiglu_backward(forge_backend *be, float *dgate, float *dup, const float *dout,
                                 const float *gate, const float *up, size_t n) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) swiglu_grads(&dgate[i], &dup[i], dout[i], gate[i], up[i]);
    return FORGE_OK;
}

/* gu (N, 2F): row n is gate (F) then up (F) */
forge_status cpu_swiglu_packed_forward(forge_backend *be, float *out, const float *gu, int N, int F) {
    if (N < 0 || F < 0)
        return forge_error(FORGE_ERR_ARG, "cpu swiglu_packed_forward: sizes must be >= 0, got N=%d F=%d", N, F);
    int nt = cpu_threads(be);
#pragma omp parallel for collapse(2) num_threads(nt)
    for (int n = 0; n < N; n++)
        for (int i = 0; i < F; i++) {
            const float *g = gu + (size_t)n * 2 * F + i;
            out[(size_t)n * F + i] = swiglu_value(g[0], g[F]);
        }
    return FORGE_OK;
}

forge_status cpu_swiglu_packed_backward(forge_backend *be, float *dgu, const float *dout, const float *gu, int N,
                                        int F) {
    if (N < 0 || F < 0)
        return forge_error(FORGE_ERR_ARG, "cpu swiglu_packed_backward: sizes must be >= 0, got N=%d F=%d", N, F);
    int nt = cpu_threads(be);
#pragma omp parallel for collapse(2) num_threads(nt)
    for (int n = 0; n < N; n++)
        for (int i = 0; i < F; i++) {
            const size_t at = (size_t)n * 2 * F + i;
            swiglu_grads(&dgu[at], &dgu[at + F], dout[(size_t)n * F + i], gu[at], gu[at + F]);
        }
    return FORGE_OK;
}

forge_status cpu_cast_bf16(forge_backend *be, forge_bf16 *dst, const float *src, size_t n) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) dst[i] = forge_bf16_from_f32(src[i]);
    return FORGE_OK;
}
