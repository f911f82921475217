/*
 * attention_decode.cu: one decoding step of causal self-attention against a
 * KV cache (the attention_decode entry; backend/cpu/attention_decode.c is the
 * reference).
 *
 * One block per query head h, kv head h / (NH / NKV). The block first builds
 * its query, the new key and the new value in shared memory (RoPE at position
 * pos when theta > 0: angles in double, cos/sin rounded once to float, as
 * rope.cu's table); the first query head of each group writes the new key and
 * value into row pos of the caches. No block reads row pos from the caches:
 * every block takes the new key and value from its shared copy, so the write
 * and the reads of other blocks never race, and the rows it does read (< pos)
 * are not written by this launch.
 *
 * Then three passes over the pos + 1 keys, the scores parked in the
 * workspace (ctx->ws, NH * (pos + 1) floats):
 *   1. warp w takes keys w, w + nwarps, ...: the dot product lane-strided over
 *      HS with FMAs, reduced by xor butterflies; the block's max.
 *   2. p_j = exp(s_j - max) in place; l = sum_j p_j (per-thread sums, then the
 *      block's fixed tree).
 *   3. thread (g, d) of G = max(1, threads / HS) groups sums p_j v_j[d] over
 *      keys j = g, g + G, ...; the G partials are added in order g.
 * Every sum has a fixed order (no atomics), so two runs give the same bits.
 *
 * attention_decode_at runs the same kernel with the position read from device
 * memory by every block (a recorded decode step replays at any position): the
 * workspace is checked for the cache's maxT rows instead of pos + 1, and a
 * position outside the cache writes a NaN out (caches untouched) and is
 * recorded for poll_errors.
 */
#include "cuda_ops.h"

#define DECODE_THREADS 256

__global__ void __launch_bounds__(DECODE_THREADS)
    attention_decode_kernel(float *__restrict__ out, float *__restrict__ k_cache, float *__restrict__ v_cache,
                            float *__restrict__ scores, const float *__restrict__ qkv, int pos,
                            const int32_t *__restrict__ pos_at, int maxT, int NH, int NKV, int HS, float theta,
                            float scale, cuda_input_error *err) {
    extern __shared__ float sm[];
    __shared__ float red[32];
    const int tid = threadIdx.x, nthreads = blockDim.x, lane = tid & 31, warp = tid >> 5, nwarps = nthreads >> 5;
    const int h = blockIdx.x, group = NH / NKV, kh = h / group;
    if (pos_at) { /* attention_decode_at: the position from device memory, checked here (the launch cannot) */
        pos = *pos_at;
        if (pos < 0 || pos >= maxT) {
            if (h == 0 && tid == 0) cuda_report_bad_id(err, CUDA_BAD_POSITION, 0, pos, maxT);
            for (int d = tid; d < HS; d += nthreads) out[(size_t)h * HS + d] = __int_as_float(0x7fffffff);
            return;
        }
    }
    const int n = pos + 1;
    float *q = sm, *kn = sm + HS, *vn = sm + 2 * HS, *part = sm + 3 * HS;
    const float *qrow = qkv + (size_t)h * HS, *krow = qkv + (size_t)(NH + kh) * HS;
    const float *vrow = qkv + (size_t)(NH + NKV + kh) * HS;
    if (theta > 0.0f) {
        const int half = HS / 2;
        for (int i = tid; i < half; i += nthreads) {
            double inv_freq = pow((double)theta, -2.0 * i / HS);
            double angle = pos * inv_freq;
            float c = (float)cos(angle), s = (float)sin(angle);
            float q0 = qrow[i], q1 = qrow[i + half], k0 = krow[i], k1 = krow[i + half];
            q[i] = q0 * c - q1 * s;
            q[i + half] = q1 * c + q0 * s;
            kn[i] = k0 * c - k1 * s;
            kn[i + half] = k1 * c + k0 * s;
        }
    } else {
        for (int i = tid; i < HS; i += nthreads) {
            q[i] = qrow[i];
            kn[i] = krow[i];
        }
    }
    for (int i = tid; i < HS; i += nthreads) vn[i] = vrow[i];
    __syncthreads();
    if (h % group == 0) {
        float *kc = k_cache + ((size_t)pos * NKV + kh) * HS, *vc = v_cache + ((size_t)pos * NKV + kh) * HS;
        for (int i = tid; i < HS; i += nthreads) {
            kc[i] = kn[i];
            vc[i] = vn[i];
        }
    }

    /* 1: scores and their max */
    float *sc = scores + (size_t)h * n;
    float m = -INFINITY;
    for (int j = warp; j < n; j += nwarps) {
        const float *k = j == pos ? kn : k_cache + ((size_t)j * NKV + kh) * HS;
        float dot = 0.0f;
        for (int d = lane; d < HS; d += 32) dot = fmaf(q[d], k[d], dot);
        dot = warp_sum(dot) * scale;
        if (lane == 0) sc[j] = dot;
        m = fmaxf(m, dot);
    }
    m = block_max(m, red);
    __syncthreads(); /* sc written by lane 0 of each warp, read below by other threads */

    /* 2: probabilities (unnormalised) and their sum */
    float l = 0.0f;
    for (int j = tid; j < n; j += nthreads) {
        float p = expf(sc[j] - m);
        sc[j] = p;
        l += p;
    }
    l = block_sum(l, red);
    __syncthreads();

    /* 3: out = sum_j p_j v_j / l */
    const int G = HS >= nthreads ? 1 : nthreads / HS;
    for (int e = tid; e < G * HS; e += nthreads) {
        const int g = e / HS, d = e % HS;
        float acc = 0.0f;
        for (int j = g; j < n; j += G) {
            float v = j == pos ? vn[d] : v_cache[((size_t)j * NKV + kh) * HS + d];
            acc = fmaf(sc[j], v, acc);
        }
        part[e] = acc;
    }
    __syncthreads();
    const float inv = 1.0f / l;
    for (int d = tid; d < HS; d += nthreads) {
        float acc = 0.0f;
        for (int g = 0; g < G; g++) acc += part[g * HS + d];
        out[(size_t)h * HS + d] = acc * inv;
    }
}

/* The checks and the launch both entries share; pos_at NULL: the position is pos (checked here), else *pos_at (read
 * and checked by the kernel, the workspace sized for every row of the cache). */
static forge_status decode_launch(forge_backend *be, const char *op, float *out, float *k_cache, float *v_cache,
                                  const float *qkv, int pos, const int32_t *pos_at, int maxT, int NH, int NKV, int HS,
                                  float theta) {
    if (NH <= 0 || NKV <= 0 || HS <= 0 || NH % NKV != 0)
        return forge_error(FORGE_ERR_ARG,
                           "cuda %s: need NH, NKV, HS > 0 and NH divisible by NKV, got NH=%d NKV=%d HS=%d", op, NH,
                           NKV, HS);
    if (!pos_at && (pos < 0 || pos >= maxT))
        return forge_error(FORGE_ERR_ARG, "cuda %s: position %d outside the cache's %d rows", op, pos, maxT);
    if (theta < 0.0f || (theta > 0.0f && HS % 2 != 0))
        return forge_error(FORGE_ERR_ARG, "cuda %s: theta %g with head size %d (RoPE needs an even one)", op,
                           (double)theta, HS);
    const int rows = pos_at ? maxT : pos + 1; /* the most positions a launch may attend over */
    if ((size_t)NH * rows > CUDA_WS_FLOATS)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "cuda %s: %d heads x %d positions of scores exceed the %zu-float workspace", op, NH, rows,
                           CUDA_WS_FLOATS);
    const int G = HS >= DECODE_THREADS ? 1 : DECODE_THREADS / HS;
    const size_t smem = (3 * (size_t)HS + (size_t)G * HS) * sizeof(float);
    if (smem > 48 * 1024)
        return forge_error(FORGE_ERR_UNSUPPORTED, "cuda %s: head size %d needs %zu bytes of shared memory", op, HS,
                           smem);
    cuda_ctx *ctx = cuda_get_ctx(be);
    attention_decode_kernel<<<NH, DECODE_THREADS, smem, ctx->stream>>>(out, k_cache, v_cache, ctx->ws, qkv, pos,
                                                                      pos_at, maxT, NH, NKV, HS, theta,
                                                                      1.0f / sqrtf((float)HS), ctx->input_error);
    CUDA_LAUNCH_CHECK("attention_decode_kernel");
    return FORGE_OK;
}

forge_status cuda_attention_decode(forge_backend *be, float *out, float *k_cache, float *v_cache, const float *qkv,
                                   int pos, int maxT, int NH, int NKV, int HS, float theta) {
    return decode_launch(be, "attention_decode", out, k_cache, v_cache, qkv, pos, NULL, maxT, NH, NKV, HS, theta);
}

forge_status cuda_attention_decode_at(forge_backend *be, float *out, float *k_cache, float *v_cache, const float *qkv,
                                      const int32_t *pos, int maxT, int NH, int NKV, int HS, float theta) {
    return decode_launch(be, "attention_decode_at", out, k_cache, v_cache, qkv, 0, pos, maxT, NH, NKV, HS, theta);
}
