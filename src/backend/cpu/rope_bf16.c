/*
 * rope_bf16.c: the bf16 rotary position embedding on the CPU, the reference of rope_bf16.cu: rope.c's rotate-half
 * form and cos/sin table (angles in double, rounded once to float), the rotation in fp32 on the widened bf16
 * values, one rounding to bf16 (docs/mixed-precision.md):
 *
 *   out[i]      = rn(x[i] cos - x[i+HS/2] sin)       out[i+HS/2] = rn(x[i+HS/2] cos + x[i] sin)
 *
 * each as fmaf(x, cos, +-(x' sin)), the kernel's rounding. The backward rotates by -angle and adds into dinp in
 * fp32 before its one rounding: dinp = rn(dinp + r), or rn(0 + r) when it writes a fresh gradient (accumulate = 0).
 * Heads h >= n_rot are copied (forward) or added (backward) unrotated. out may be inp: each pair is read before it
 * is written.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_ops.h"

static inline float bf(forge_bf16 h) { return forge_bf16_to_f32(h); }

static forge_status rope_rotate_bf16(forge_backend *be, forge_bf16 *out, const forge_bf16 *inp, int B, int T,
                                     int n_heads, int n_rot, int HS, float theta, int backward, int accumulate,
                                     const char *op) {
    FORGE_TRY(cpu_rope_check_args(op, n_heads, n_rot, HS, theta));
    if (B <= 0 || T <= 0 || n_heads <= 0) return FORGE_OK;
    float *cs;
    FORGE_TRY(cpu_rope_table(&cs, T, HS, theta, op));
    const int half = HS / 2, nt = cpu_threads(be);
    const float sin_sign = backward ? -1.0f : 1.0f;
#pragma omp parallel for collapse(2) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *ct = cs + (size_t)t * half * 2;
            for (int h = 0; h < n_heads; h++) {
                const size_t off = (((size_t)b * T + t) * n_heads + h) * HS;
                const forge_bf16 *x = inp + off;
                forge_bf16 *o = out + off;
                for (int i = 0; i < half; i++) {
                    const float x0 = bf(x[i]), x1 = bf(x[i + half]);
                    float r0 = x0, r1 = x1;
                    if (h < n_rot) {
                        const float c = ct[2 * i], s = sin_sign * ct[2 * i + 1];
                        r0 = fmaf(x0, c, -(x1 * s));
                        r1 = fmaf(x1, c, x0 * s);
                    }
                    if (backward) {
                        r0 = (accumulate ? bf(o[i]) : 0.0f) + r0;
                        r1 = (accumulate ? bf(o[i + half]) : 0.0f) + r1;
                    }
                    o[i] = forge_bf16_from_f32(r0);
                    o[i + half] = forge_bf16_from_f32(r1);
                }
            }
        }
    }
    free(cs);
    return FORGE_OK;
}

forge_status cpu_rope_forward_bf16(forge_backend *be, forge_bf16 *out, const forge_bf16 *inp, int B, int T,
                                   int n_heads, int n_rot, int HS, float theta) {
    return rope_rotate_bf16(be, out, inp, B, T, n_heads, n_rot, HS, theta, 0, 0, "rope_forward_bf16");
}

forge_status cpu_rope_backward_bf16(forge_backend *be, forge_bf16 *dinp, const forge_bf16 *dout, int B, int T,
                                    int n_heads, int n_rot, int HS, float theta, int accumulate) {
    return rope_rotate_bf16(be, dinp, dout, B, T, n_heads, n_rot, HS, theta, 1, accumulate, "rope_backward_bf16");
}
