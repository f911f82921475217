/*
 * attention_decode.c: one decoding step of causal self-attention against a
 * KV cache, on the CPU (the reference of the attention_decode entry).
 *
 * The new token's packed qkv row comes in; with theta > 0 its query and key
 * heads are rotated by RoPE at position pos with rope.c's own cos/sin and
 * expression (so a cached key is bit-identical to the key the training
 * forward rotates at that position); its key and value are written into row
 * pos of the caches (maxT, NKV, HS); then each query head attends over rows
 * 0..pos of its kv head: scores s_j = q . k_j / sqrt(HS), p_j = exp(s_j - max),
 * out = sum_j p_j v_j / sum_j p_j. Plain loops in index order; the heads run
 * in parallel after the cache write, each with its own slice of the score
 * buffer, so results do not depend on the thread count. attention_decode_at
 * is the same step with the position read from (host) memory.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_ops.h"

/* Rotates x (HS) into out by one row of the cos/sin table (HS/2 pairs), rope_rotate's forward expression. */
static void rotate(float *out, const float *x, const float *cs, int HS) {
    int half = HS / 2;
    for (int i = 0; i < half; i++) {
        float x0 = x[i], x1 = x[i + half];
        float cosv = cs[2 * i], sinv = cs[2 * i + 1];
        out[i] = x0 * cosv - x1 * sinv;
        out[i + half] = x1 * cosv + x0 * sinv;
    }
}

forge_status cpu_attention_decode(forge_backend *be, float *out, float *k_cache, float *v_cache, const float *qkv,
                                  int pos, int maxT, int NH, int NKV, int HS, float theta) {
    if (NH <= 0 || NKV <= 0 || HS <= 0 || NH % NKV != 0)
        return forge_error(FORGE_ERR_ARG,
                           "cpu attention_decode: need NH, NKV, HS > 0 and NH divisible by NKV, got NH=%d NKV=%d "
                           "HS=%d",
                           NH, NKV, HS);
    if (pos < 0 || pos >= maxT)
        return forge_error(FORGE_ERR_ARG, "cpu attention_decode: position %d outside the cache's %d rows", pos, maxT);
    if (theta < 0.0f || (theta > 0.0f && HS % 2 != 0))
        return forge_error(FORGE_ERR_ARG, "cpu attention_decode: theta %g with head size %d (RoPE needs an even one)",
                           (double)theta, HS);
    const int rope = theta > 0.0f, group = NH / NKV, n = pos + 1, nt = cpu_threads(be);
    float *buf = malloc(((size_t)NH * n + (size_t)NH * HS + (size_t)(HS / 2) * 2) * sizeof(float));
    if (!buf) return forge_error(FORGE_ERR_OOM, "cpu attention_decode: no memory for %d x %d scores", NH, n);
    float *scores = buf, *qrot = buf + (size_t)NH * n, *cs_pos = qrot + (size_t)NH * HS;
    /* row pos of rope.c's cos/sin table, computed as cpu_rope_table computes it */
    for (int i = 0; rope && i < HS / 2; i++) {
        double inv_freq = pow((double)theta, -2.0 * i / HS);
        double angle = pos * inv_freq;
        cs_pos[2 * i + 0] = (float)cos(angle);
        cs_pos[2 * i + 1] = (float)sin(angle);
    }
    /* the new key (rotated) and value into row pos */
    for (int kh = 0; kh < NKV; kh++) {
        const float *k = qkv + (size_t)(NH + kh) * HS, *v = qkv + (size_t)(NH + NKV + kh) * HS;
        float *kc = k_cache + ((size_t)pos * NKV + kh) * HS, *vc = v_cache + ((size_t)pos * NKV + kh) * HS;
        if (rope) rotate(kc, k, cs_pos, HS);
        else
            for (int d = 0; d < HS; d++) kc[d] = k[d];
        for (int d = 0; d < HS; d++) vc[d] = v[d];
    }
    const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for num_threads(nt)
    for (int h = 0; h < NH; h++) {
        const int kh = h / group;
        float *q = qrot + (size_t)h * HS, *s = scores + (size_t)h * n, *o = out + (size_t)h * HS;
        if (rope) rotate(q, qkv + (size_t)h * HS, cs_pos, HS);
        else
            for (int d = 0; d < HS; d++) q[d] = qkv[(size_t)h * HS + d];
        float m = -INFINITY;
        for (int j = 0; j < n; j++) {
            const float *k = k_cache + ((size_t)j * NKV + kh) * HS;
            float dot = 0.0f;
            for (int d = 0; d < HS; d++) dot += q[d] * k[d];
            s[j] = dot * scale;
            if (s[j] > m) m = s[j];
        }
        float l = 0.0f;
        for (int j = 0; j < n; j++) {
            s[j] = expf(s[j] - m);
            l += s[j];
        }
        for (int d = 0; d < HS; d++) o[d] = 0.0f;
        for (int j = 0; j < n; j++) {
            const float *v = v_cache + ((size_t)j * NKV + kh) * HS;
            for (int d = 0; d < HS; d++) o[d] += s[j] * v[d];
        }
        const float inv = 1.0f / l; /* l >= 1: the max term is exp(0) */
        for (int d = 0; d < HS; d++) o[d] *= inv;
    }
    free(buf);
    return FORGE_OK;
}

forge_status cpu_attention_decode_at(forge_backend *be, float *out, float *k_cache, float *v_cache, const float *qkv,
                                     const int32_t *pos, int maxT, int NH, int NKV, int HS, float theta) {
    if (*pos < 0 || *pos >= maxT)
        return forge_error(FORGE_ERR_ARG, "cpu attention_decode_at: position %d outside the cache's %d rows",
                           (int)*pos, maxT);
    return cpu_attention_decode(be, out, k_cache, v_cache, qkv, (int)*pos, maxT, NH, NKV, HS, theta);
}
