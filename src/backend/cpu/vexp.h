/*
 * vexp.h: e^x for the CPU kernels' softmax loops, written without branches or
 * calls so that a loop over it vectorises (the C library's expf is a call per
 * element, which GCC cannot vectorise). The softmax uses of it (classifier.c,
 * flash_attention.c) take x <= 0 up to rounding.
 *
 * x = k ln2 + r (Cody-Waite, ln2 in two parts), e^r by its Taylor series to
 * r^7 (|r| <= 0.347: the next term is below 6e-9 relative), times 2^k built
 * from its bits: within 1 ulp of e^x for |x| <= 87 (0.88 measured; the test in
 * tests/test_ops_forward.c checks it). |x| is clamped to
 * 87 on its bits (a float compare would stop GCC vectorising under
 * -ftrapping-math), so e^x below e^-87 = 1.6e-38 comes out as 1.6e-38, not as a
 * subnormal or 0 (against a softmax sum >= 1 that is no difference), and a
 * NaN stays NaN.
 */
#ifndef FORGE_CPU_VEXP_H
#define FORGE_CPU_VEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../base/fmath.h"

static inline float cpu_vexpf(float x) {
    uint32_t xb;
    memcpy(&xb, &x, sizeof xb);
    const uint32_t ab = xb & 0x7fffffffu, nan = ab > 0x7f800000u ? 0xffffffffu : 0u;
    uint32_t cb = (ab < 0x42ae0000u ? ab : 0x42ae0000u) | (xb & 0x80000000u); /* |x| <= 87.0f */
    float c;
    memcpy(&c, &cb, sizeof c);
    float k; /* nearest integer to c / ln2, in [-126, 126] */
    const float p = forge_exp_reduced(c, &k);
    const int32_t sb = ((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    float e = p * scale;
    uint32_t eb;
    memcpy(&eb, &e, sizeof eb);
    eb = (eb & ~nan) | (xb & nan);
    memcpy(&e, &eb, sizeof e);
    return e;
}

#endif
