/*
 * fmath.h: fp32 exp and tanh, and the GELU and SiLU formulas on them, built from IEEE-754 basic operations only
 * (+, -, *, /, fma, rint, bit moves), so that a C compiler and nvcc compute them to the same bits. The C
 * library's expf/tanhf and CUDA's differ in the last ulp, and one fp32 ulp is enough to move a value's rounding to
 * bf16; the bf16 CPU references (backend/cpu/elementwise_bf16.c) and their CUDA kernels (elementwise_bf16.cu)
 * call these instead, so they agree bit for bit.
 *
 * Agreeing bit for bit also needs the compilers to round where the source says. Every product that meets a sum is
 * written as an explicit fmaf (one rounding, on both sides), or as FORGE_FMUL_RN when the product must round on
 * its own: nvcc contracts a*b + c into an fma unless told not to (__fmul_rn), even across an inlined return;
 * the C side is compiled as ISO C (-std=c11), where gcc does not contract.
 *
 * Accuracy against double over every 7th float: forge_expf within 0.92 ulp over its whole range (subnormal
 * results rounded once), forge_tanhf within 1.36 ulp; tests/test_ops_bf16.c checks a sparser sweep.
 */
#ifndef FORGE_FMATH_H
#define FORGE_FMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define FORGE_FMATH_FN static __host__ __device__ __forceinline__
#else
#define FORGE_FMATH_FN static inline
#endif

/* a * b rounded on its own, never fused into a following add */
#if defined(__CUDA_ARCH__)
#define FORGE_FMUL_RN(a, b) __fmul_rn((a), (b))
#else
#define FORGE_FMUL_RN(a, b) ((a) * (b))
#endif

/* 2^k for k in [-126, 127], built from its bits */
FORGE_FMATH_FN float forge_pow2i(int k) {
    uint32_t u = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The core of every e^x here (this file's and the CPU kernels' branch-free ones, backend/cpu/vexp.h and
 * elementwise.c): x = k ln2 + r (Cody-Waite, ln2 in two parts: k ln2_hi is exact for the k that occur), e^r by its
 * Taylor series to r^7 (|r| <= 0.347: the next term is below 6e-9 relative). Returns e^r; *k is k, the nearest
 * integer to x / ln2. No branch, so loops over it vectorise. */
FORGE_FMATH_FN float forge_exp_reduced(float x, float *k) {
    *k = rintf(x * 1.44269502f);
    float r = fmaf(*k, -0.693145751953125f, x); /* ln2's high part: 15 bits */
    r = fmaf(*k, -1.4286068203094172e-6f, r);   /* ln2's low part */
    float p = 1.0f / 5040.0f;                    /* 1/7!, ..., 1/2!, 1, 1 */
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    return fmaf(p, r, 1.0f);
}

/* e^x: e^r (forge_exp_reduced) times 2^k as two factors, so subnormal results round once and 2^128 never forms. */
FORGE_FMATH_FN float forge_expf(float x) {
    if (!(x < 88.72283935546875f)) return x != x ? x : INFINITY; /* from here up e^x rounds to inf; NaN stays */
    if (!(x > -104.0f)) return 0.0f;                              /* e^x < 2^-150: rounds to 0 */
    float k;
    const float p = forge_exp_reduced(x, &k);
    const int ki = (int)k, k1 = ki / 2, k2 = ki - k1; /* each in [-75, 64] */
    return FORGE_FMUL_RN(FORGE_FMUL_RN(p, forge_pow2i(k1)), forge_pow2i(k2));
}

/* tanh(x): an odd polynomial below |x| = 0.625 (Cephes tanhf's minimax coefficients), 1 - 2 / (e^2|x| + 1) above
 * (e^2|x| = inf gives 1). */
FORGE_FMATH_FN float forge_tanhf(float x) {
    const float a = fabsf(x);
    if (a < 0.625f) {
        const float z = x * x;
        float p = -5.70498872745e-3f;
        p = fmaf(p, z, 2.06390887954e-2f);
        p = fmaf(p, z, -5.37397155531e-2f);
        p = fmaf(p, z, 1.33314422036e-1f);
        p = fmaf(p, z, -3.33332819422e-1f);
        return fmaf(p * z, x, x);
    }
    const float t = 1.0f - 2.0f / (forge_expf(2.0f * a) + 1.0f);
    return copysignf(t, x);
}

/* GPT-2's GELU, the tanh form of the fp32 kernels (backend/cpu/elementwise.c):
 * gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
#define FORGE_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define FORGE_GELU_CUBIC 0.044715f

FORGE_FMATH_FN float forge_gelu_tanh_arg(float x) {
    return FORGE_GELU_SCALE * fmaf(FORGE_GELU_CUBIC * x * x, x, x);
}

FORGE_FMATH_FN float forge_gelu(float x) {
    return 0.5f * x * (1.0f + forge_tanhf(forge_gelu_tanh_arg(x)));
}

/* d gelu / dx = 0.5 (1 + tanh u) + 0.5 x sech^2(u) sqrt(2/pi) (1 + 3 0.044715 x^2), sech^2 = 1 - tanh^2 */
FORGE_FMATH_FN float forge_gelu_grad(float x) {
    const float t = forge_tanhf(forge_gelu_tanh_arg(x));
    const float sech2 = fmaf(-t, t, 1.0f);
    const float du = FORGE_GELU_SCALE * fmaf(3.0f * FORGE_GELU_CUBIC * x, x, 1.0f);
    return fmaf(0.5f * x * sech2, du, 0.5f * (1.0f + t));
}

/* sigmoid(x) = 1 / (1 + e^-x); e^-x = inf gives 0 */
FORGE_FMATH_FN float forge_sigmoid(float x) { return 1.0f / (1.0f + forge_expf(-x)); }

#endif
