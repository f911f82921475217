/*
 * rope.c: rotary position embedding (Su et al., https://arxiv.org/abs/2104.09864)
 * in the rotate-half layout of Hugging Face's Llama (apply_rotary_pos_emb):
 * pairs are (i, i + HS/2), not interleaved (2i, 2i+1) as in the paper and
 * Meta's reference code. Checkpoints converted for HF use this layout.
 *
 *   angle(t, i) = t * theta^(-2i/HS),  i < HS/2
 *   out[i]        = x[i] cos - x[i+HS/2] sin
 *   out[i+HS/2]   = x[i+HS/2] cos + x[i] sin
 *
 * Angles are computed in double and then rounded once to float cos/sin (one
 * T x HS/2 table per call, shared by forward and backward), so the only float
 * error is the final rounding: at t ~ 4096 a float angle would already be off
 * by ~1e-4 rad. Backward is the transpose rotation (angle -> -angle).
 * Only the first n_rot of n_heads heads rotate; the rest are copied (forward)
 * or pass their gradient through (backward), so packed qkv rotates q and k and
 * leaves v alone.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_ops.h"

/* cs (T, HS/2, 2): cos, sin of angle(t, i); the caller frees it (also rope_bf16.c's table) */
forge_status cpu_rope_table(float **out, int T, int HS, float theta, const char *op) {
    int half = HS / 2;
    float *cs = malloc((size_t)T * half * 2 * sizeof(float) + 1);
    if (!cs)
        return forge_error(FORGE_ERR_OOM, "cpu %s: no memory for a %d x %d cos/sin table", op, T, half);
    for (int i = 0; i < half; i++) {
        double inv_freq = pow((double)theta, -2.0 * i / HS);
        for (int t = 0; t < T; t++) {
            double angle = t * inv_freq;
            cs[((size_t)t * half + i) * 2 + 0] = (float)cos(angle);
            cs[((size_t)t * half + i) * 2 + 1] = (float)sin(angle);
        }
    }
    *out = cs;
    return FORGE_OK;
}

forge_status cpu_rope_check_args(const char *op, int n_heads, int n_rot, int HS, float theta) {
    if (HS <= 0 || HS % 2 != 0)
        return forge_error(FORGE_ERR_ARG, "cpu %s: head size must be even and > 0, got %d", op, HS);
    if (n_rot < 0 || n_rot > n_heads)
        return forge_error(FORGE_ERR_ARG, "cpu %s: n_rot = %d must be in [0, n_heads = %d]", op,
                           n_rot, n_heads);
    if (!(theta > 0.0f))
        return forge_error(FORGE_ERR_ARG, "cpu %s: theta must be > 0, got %g", op, (double)theta);
    return FORGE_OK;
}

/* The backward pass is the inverse rotation (sin negated), accumulated into
 * dinp; the forward pass overwrites out. One loop serves both. */
static forge_status rope_rotate(forge_backend *be, float *out, const float *inp, int B, int T, int n_heads,
                                int n_rot, int HS, float theta, float sin_sign, int accumulate,
                                const char *op) {
    FORGE_TRY(cpu_rope_check_args(op, n_heads, n_rot, HS, theta));
    float *cs;
    FORGE_TRY(cpu_rope_table(&cs, T, HS, theta, op));
    int half = HS / 2, nt = cpu_threads(be);
    /* out, inp (B,T,n_heads,HS); for the forward pass out may equal inp */
#pragma omp parallel for collapse(2) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *c = cs + (size_t)t * half * 2;
            for (int h = 0; h < n_heads; h++) {
                size_t off = (((size_t)b * T + t) * n_heads + h) * HS;
                const float *x = inp + off;
                float *o = out + off;
                if (h >= n_rot) {
                    for (int i = 0; i < HS; i++) o[i] = accumulate ? o[i] + x[i] : x[i];
                    continue;
                }
                for (int i = 0; i < half; i++) {
                    float x0 = x[i], x1 = x[i + half];
                    float cosv = c[2 * i], sinv = sin_sign * c[2 * i + 1];
                    float r0 = x0 * cosv - x1 * sinv, r1 = x1 * cosv + x0 * sinv;
                    o[i] = accumulate ? o[i] + r0 : r0;
                    o[i + half] = accumulate ? o[i + half] + r1 : r1;
                }
            }
        }
    }
    free(cs);
    return FORGE_OK;
}

forge_status cpu_rope_forward(forge_backend *be, float *out, const float *inp, int B, int T,
                              int n_heads, int n_rot, int HS, float theta) {
    return rope_rotate(be, out, inp, B, T, n_heads, n_rot, HS, theta, 1.0f, 0, "rope_forward");
}

forge_status cpu_rope_backward(forge_backend *be, float *dinp, const float *dout, int B, int T,
                               int n_heads, int n_rot, int HS, float theta) {
    return rope_rotate(be, dinp, dout, B, T, n_heads, n_rot, HS, theta, -1.0f, 1, "rope_backward");
}
