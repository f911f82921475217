/*
 * flash_attention.cu: fused causal self-attention in exact fp32 (SIMT FFMA,
 * no TF32) for the fp32 trainer: the (T, T) scores never reach device memory.
 *
 * Layouts are those of backend.h: qkv (B, T, (NH + 2*NKV) * HS) packed, out
 * and dout (B, T, NH*HS), lse and D (B, NH, T). Query head h reads kv head
 * h / (NH/NKV). Queries come from qkv_q (length Tq), keys/values from qkv_kv
 * (length Tk); query i sees key j iff j <= i + Tk - Tq (bottom-right causal).
 *
 * Thread layout shared by all three tiled kernels: 256 threads own 64 "rows"
 * (query rows in fwd and dQ, key rows in dK/dV), a quad of 4 lanes per row.
 * For the score tile the 4 lanes of a quad split the tile's columns (lane ql
 * takes columns c*4 + ql), so each thread keeps a handful of scores in
 * registers; for the second product (P.V, dS.K, P^T.dO, dS^T.Q) the quad
 * splits the head dimension instead (lane ql owns d = c4*16 + ql*4 + e), and
 * every score is broadcast across the quad with a shuffle, so P/dS never go
 * through shared or device memory. Shared rows are padded to HS + 4 floats:
 * the 8 rows a warp reads at once then start 4 banks apart, and float4 reads
 * of 8 rows x 16 bytes fill one 128-byte wavefront without conflicts.
 *
 * forward   grid (ceil(Tq/64), NH, B): Q tile in shared, 64-key K/V tiles
 *           streamed through shared; online softmax (m, l per row, the output
 *           accumulator rescaled by exp(m_old - m_new)); key tiles entirely
 *           above the diagonal are never visited. The heaviest query blocks
 *           (the last ones) are scheduled first.
 * backward  (a) D = rowsum(dO * O), one warp per row.
 *           (b) dQ, grid (ceil(Tq/64), NH, B): 32-key tiles; P recomputed
 *               from lse, dS = P (dP - D), dQ += scale dS K.
 *           (c) dK, dV, grid (ceil(Tk/64), NKV, B): 32-query tiles; the
 *               transposed products come from exchanging operand roles
 *               (S^T = K Q^T, dP^T = V dO^T), and the GQA group's query heads
 *               are walked inside the kernel in order: one writer per dK/dV
 *               element, no atomics, bit-reproducible.
 *
 * Fully-masked rows (Tk < Tq): a score that is masked is -INFINITY and the
 * running max is replaced by 0 while it is still -INFINITY, so exp never sees
 * -inf - -inf; such rows end with l = 0 -> out = 0, lse = -INFINITY, and the
 * backward never computes exp for a masked (row, key) pair at all.
 *
 * HS is a template parameter (tile constants at compile time, register arrays
 * indexed by unrolled constants), instantiated for 16, 32, 64 and 128; 64 and
 * 128 are the sizes the tiles were chosen for. Any other head size hs <= 128
 * runs on the smallest instance with HS >= hs: columns hs..HS-1 are loaded as
 * zeros into shared memory (adding exact zeros to every dot product) and never
 * stored, so the result is the same, at the cost of the padded work (the
 * explicit slower path, e.g. hs = 6 or 8 of the test models). hs > 128 is
 * refused with FORGE_ERR_UNSUPPORTED (--attention materialised runs it).
 *
 * v2: register-blocked forward, dQ and (HS = 64) dK/dV, 128 threads in row
 * groups of 8 lanes with 4-row micro-tiles. They run wherever they apply:
 * exact hs 64 / 128 with 16-byte aligned rows (float4 loads); every other
 * shape or layout falls back to the kernels above. See the "forward v2"
 * comment below and lab/notes/flash-attention.md.
 */
#include "cuda_ops.h"
#include "kernel_attrs.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FA_THREADS 256
#define FA_ROWS 64    /* rows (queries or keys) per block: 4 lanes each */
/* keys per forward tile: 16 scores per thread, 8 at HS = 128 where the
 * 32-float output quarter plus 16 scores spilled at the 128-register cap */
#define FA_FWD_BK(HS) ((HS) >= 128 ? 32 : 64)
#define FA_DQ_BK 32   /* keys per dQ tile: 8 scores and 8 dP per thread */
#define FA_DKV_BQ 32  /* queries per dK/dV tile */
#define FA_D_ROWS 8   /* rows of the D kernel per block: one warp each */

/* Shared-memory floats of each kernel for head size HS. */
#define FA_PAD(HS) ((HS) + 4)
#define FA_FWD_SMEM(HS) ((size_t)(FA_ROWS + 2 * FA_FWD_BK(HS)) * FA_PAD(HS) * sizeof(float))
#define FA_DQ_SMEM(HS) ((size_t)(2 * FA_ROWS + 2 * FA_DQ_BK) * FA_PAD(HS) * sizeof(float))
#define FA_DKV_SMEM(HS) \
    ((size_t)(2 * FA_ROWS + 2 * FA_DKV_BQ) * FA_PAD(HS) * sizeof(float) + 2 * FA_DKV_BQ * sizeof(float))

/* rows [t0, t0 + NR) of one head (hs floats at `src`, rows `stride` apart) ->
 * shared (NR, HS + 4); rows at or past T and columns at or past hs are zero. Consecutive threads read
 * consecutive floats of a row: coalesced. */
template <int HS, int NR>
__device__ __forceinline__ void fa_load_rows(float *__restrict__ dst, const float *__restrict__ src,
                                             size_t stride, int t0, int T, int hs) {
#pragma unroll 4
    for (int idx = threadIdx.x; idx < NR * HS; idx += FA_THREADS) {
        int r = idx / HS, d = idx % HS, t = t0 + r;
        dst[r * FA_PAD(HS) + d] = t < T && d < hs ? src[(size_t)t * stride + d] : 0.0f;
    }
}

/* dot products of shared row `a` against 4*NC shared rows b + (c*4 + ql),
 * over HS: acc[c] += a . b_c */
template <int HS, int NC>
__device__ __forceinline__ void fa_dots(float (&acc)[NC], const float *__restrict__ a,
                                        const float *__restrict__ b, int ql) {
#pragma unroll 1
    for (int d4 = 0; d4 < HS / 4; d4++) {
        float4 x = *reinterpret_cast<const float4 *>(a + d4 * 4);
#pragma unroll
        for (int c = 0; c < NC; c++) {
            float4 y = *reinterpret_cast<const float4 *>(b + (c * 4 + ql) * FA_PAD(HS) + d4 * 4);
            acc[c] = fmaf(x.x, y.x, acc[c]);
            acc[c] = fmaf(x.y, y.y, acc[c]);
            acc[c] = fmaf(x.z, y.z, acc[c]);
            acc[c] = fmaf(x.w, y.w, acc[c]);
        }
    }
}

/* acc[c4*4 + e] += w * row[c4*16 + ql*4 + e]: this lane's quarter of one row */
template <int HS>
__device__ __forceinline__ void fa_axpy(float (&acc)[HS / 4], float w, const float *__restrict__ row,
                                        int ql) {
#pragma unroll
    for (int c4 = 0; c4 < HS / 16; c4++) {
        float4 y = *reinterpret_cast<const float4 *>(row + c4 * 16 + ql * 4);
        acc[c4 * 4 + 0] = fmaf(w, y.x, acc[c4 * 4 + 0]);
        acc[c4 * 4 + 1] = fmaf(w, y.y, acc[c4 * 4 + 1]);
        acc[c4 * 4 + 2] = fmaf(w, y.z, acc[c4 * 4 + 2]);
        acc[c4 * 4 + 3] = fmaf(w, y.w, acc[c4 * 4 + 3]);
    }
}

__device__ __forceinline__ float fa_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float fa_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* ---- forward ------------------------------------------------------------- */

template <int HS>
__global__ void __launch_bounds__(FA_THREADS, 2)
    flash_fwd_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv_q,
                     const float *__restrict__ qkv_kv, int Tq, int Tk, int NH, int NKV, int hs, float scale) {
    constexpr int P = FA_PAD(HS), BK = FA_FWD_BK(HS), NC = BK / 4;
    extern __shared__ float4 fa_smem4[];
    float *sQ = reinterpret_cast<float *>(fa_smem4);
    float *sK = sQ + FA_ROWS * P;
    float *sV = sK + BK * P;

    const int qb = gridDim.x - 1 - blockIdx.x; /* heaviest (last) query blocks first */
    const int h = blockIdx.y, b = blockIdx.z;
    const int kvh = h / (NH / NKV);
    const size_t row = (size_t)(NH + 2 * NKV) * hs;
    const int tid = threadIdx.x, r = tid >> 2, ql = tid & 3, lane = tid & 31;
    const int q0 = qb * FA_ROWS, i = q0 + r;
    const int off = Tk - Tq, ilim = i + off; /* this row sees keys j <= ilim */

    fa_load_rows<HS, FA_ROWS>(sQ, qkv_q + (size_t)b * Tq * row + (size_t)h * hs, row, q0, Tq, hs);
    const float *kg = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + kvh) * hs;
    const float *vg = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + NKV + kvh) * hs;

    float o[HS / 4];
#pragma unroll
    for (int e = 0; e < HS / 4; e++) o[e] = 0.0f;
    float m = -INFINITY, l = 0.0f; /* l: this lane's share of the row sum */

    /* keys past the block's last row's limit are above the diagonal: skipped */
    const int kend = min(Tk, q0 + FA_ROWS + off);
    for (int j0 = 0; j0 < kend; j0 += BK) {
        __syncthreads(); /* the previous tile's readers are done (and sQ is loaded) */
        fa_load_rows<HS, BK>(sK, kg, row, j0, Tk, hs);
        fa_load_rows<HS, BK>(sV, vg, row, j0, Tk, hs);
        __syncthreads();

        float s[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) s[c] = 0.0f;
        fa_dots<HS, NC>(s, sQ + r * P, sK, ql);

        float tmax = -INFINITY;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            int j = j0 + c * 4 + ql;
            s[c] = (j <= ilim && j < Tk) ? s[c] * scale : -INFINITY;
            tmax = fmaxf(tmax, s[c]);
        }
        tmax = fa_quad_max(tmax);
        const float mnew = fmaxf(m, tmax);
        const float mref = mnew == -INFINITY ? 0.0f : mnew; /* no key seen yet: all p are 0 */
        const float alpha = expf(m - mref);                  /* 0 while m = -inf */
        l *= alpha;
#pragma unroll
        for (int e = 0; e < HS / 4; e++) o[e] *= alpha;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            s[c] = expf(s[c] - mref);
            l += s[c];
        }
        m = mnew;
        /* o += P V: key kk's probability lives in lane (kk & 3) of the quad */
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float p = __shfl_sync(0xffffffffu, s[kk >> 2], (lane & ~3) | (kk & 3));
            fa_axpy<HS>(o, p, sV + kk * P, ql);
        }
    }

    l = fa_quad_sum(l);
    if (i < Tq) {
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float *og = out + ((size_t)b * Tq + i) * NH * hs + (size_t)h * hs;
#pragma unroll
        for (int c4 = 0; c4 < HS / 16; c4++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (c4 * 16 + ql * 4 + e < hs) og[c4 * 16 + ql * 4 + e] = o[c4 * 4 + e] * inv;
        if (ql == 0) lse[((size_t)b * NH + h) * Tq + i] = l > 0.0f ? m + logf(l) : -INFINITY;
    }
}

/* ---- forward v2: register-blocked micro-tiles ------------------------------
 *
 * v1 issues one LDS.128 per 4 FFMA in the score product (one query row per
 * lane). v2 blocks like the SIMT GEMM: 128 threads own 64 query rows as 16
 * row groups of 8 consecutive lanes; a lane holds a 4-row x KPT-key score
 * micro-tile (KPT = 8 at HS = 64, 4 at HS = 128) and a 4-row x HS/8 output
 * micro-tile. Q and K sit k-major in shared memory (transposed on load), so
 * one score k-step is 1 LDS.128 of Q (4 rows) + KPT/4 LDS.128 of K for
 * 4*KPT FFMA. For P.V lane g of a row group owns head dims c4*32 + g*4 + e;
 * the probability of (row r, key kk) lives in lane (kk/4) % 8 of the same row
 * group, register s[r][(kk/32)*4 + kk%4], and is fetched with one __shfl_sync
 * per row: 4 SHFL + HS/32 LDS.128 (V row kk) per 4*HS/8 FFMA. P never leaves
 * registers. Only exact hs = HS in {64, 128} with 16-byte aligned rows takes
 * this path (float4 global loads); everything else runs v1. */
#define FA2_THREADS 128
#define FA2_ROWS 64 /* query rows per block: 16 row groups x 4 rows */
#define FA2_BK(HS) ((HS) >= 128 ? 32 : 64)
/* blocks per SM: 3 (168 registers; 4 blocks = 128 registers spilled 20
 * bytes at HS = 64, and 3 x 64 KiB of shared memory is the cap at HS = 128) */
#define FA2_MINB(HS) 3
#define FA2_FWD_SMEM(HS) ((size_t)(HS * FA2_ROWS + HS * FA2_BK(HS) + FA2_BK(HS) * HS) * sizeof(float))

/* rows [t0, t0 + NR) of one head -> shared k-major dst[d * NR + r] (rows at or
 * past T are zero). Lanes run over rows: each reads a float4 of its row and
 * writes 4 consecutive-row-indexed floats, conflict-free (32 lanes = 32
 * consecutive r). */
template <int HS, int NR>
__device__ __forceinline__ void fa2_load_t(float *__restrict__ dst, const float *__restrict__ src,
                                           size_t stride, int t0, int T) {
#pragma unroll 4
    for (int idx = threadIdx.x; idx < NR * HS / 4; idx += FA2_THREADS) {
        int r = idx % NR, d4 = idx / NR, t = t0 + r;
        float4 v = t < T ? *reinterpret_cast<const float4 *>(src + (size_t)t * stride + d4 * 4)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        dst[(d4 * 4 + 0) * NR + r] = v.x;
        dst[(d4 * 4 + 1) * NR + r] = v.y;
        dst[(d4 * 4 + 2) * NR + r] = v.z;
        dst[(d4 * 4 + 3) * NR + r] = v.w;
    }
}

/* rows [t0, t0 + NR) -> shared row-major dst[r * HS + d], float4 per lane,
 * lanes over d: coalesced reads, contiguous writes */
template <int HS, int NR>
__device__ __forceinline__ void fa2_load_rows(float *__restrict__ dst, const float *__restrict__ src,
                                              size_t stride, int t0, int T) {
#pragma unroll 4
    for (int idx = threadIdx.x; idx < NR * HS / 4; idx += FA2_THREADS) {
        int d4 = idx % (HS / 4), r = idx / (HS / 4), t = t0 + r;
        float4 v = t < T ? *reinterpret_cast<const float4 *>(src + (size_t)t * stride + d4 * 4)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        *reinterpret_cast<float4 *>(dst + r * HS + d4 * 4) = v;
    }
}

/* max / sum over the 8 lanes of a row group (lanes differ in bits 0..2) */
__device__ __forceinline__ float fa2_grp_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
}
__device__ __forceinline__ float fa2_grp_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v + __shfl_xor_sync(0xffffffffu, v, 4);
}

template <int HS>
__global__ void __launch_bounds__(FA2_THREADS, FA2_MINB(HS))
    flash_fwd2_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv_q,
                      const float *__restrict__ qkv_kv, int Tq, int Tk, int NH, int NKV, float scale) {
    constexpr int BK = FA2_BK(HS), KPT = BK / 8, DPT = HS / 8, R = 4;
    extern __shared__ float4 fa_smem4[];
    float *sQt = reinterpret_cast<float *>(fa_smem4); /* [HS][FA2_ROWS] */
    float *sKt = sQt + HS * FA2_ROWS;                  /* [HS][BK] */
    float *sV = sKt + HS * BK;                         /* [BK][HS] */

    const int qb = gridDim.x - 1 - blockIdx.x; /* heaviest (last) query blocks first */
    const int h = blockIdx.y, b = blockIdx.z;
    const int kvh = h / (NH / NKV);
    const size_t row = (size_t)(NH + 2 * NKV) * HS;
    const int tid = threadIdx.x, g = tid & 7, rg = tid >> 3, lane = tid & 31, gbase = lane & ~7;
    const int q0 = qb * FA2_ROWS, i0 = q0 + rg * R; /* this lane's rows: i0 .. i0 + 3 */
    const int off = Tk - Tq;

    fa2_load_t<HS, FA2_ROWS>(sQt, qkv_q + (size_t)b * Tq * row + (size_t)h * HS, row, q0, Tq);
    const float *kg = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + kvh) * HS;
    const float *vg = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + NKV + kvh) * HS;

    float o[R][DPT], m[R], l[R]; /* l: this lane's share of the row sum */
#pragma unroll
    for (int r = 0; r < R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < DPT; e++) o[r][e] = 0.0f;
    }

    const int kend = min(Tk, q0 + FA2_ROWS + off);
    for (int j0 = 0; j0 < kend; j0 += BK) {
        __syncthreads(); /* the previous tile's readers are done (and sQt is loaded) */
        fa2_load_t<HS, BK>(sKt, kg, row, j0, Tk);
        fa2_load_rows<HS, BK>(sV, vg, row, j0, Tk);
        __syncthreads();

        /* s[r][c*4 + e] is the score of row i0 + r, key j0 + c*32 + g*4 + e */
        float s[R][KPT];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int c = 0; c < KPT; c++) s[r][c] = 0.0f;
#pragma unroll 2
        for (int d = 0; d < HS; d++) {
            const float4 q = *reinterpret_cast<const float4 *>(sQt + d * FA2_ROWS + rg * R);
            const float qa[R] = {q.x, q.y, q.z, q.w};
            float k[KPT];
#pragma unroll
            for (int c = 0; c < KPT / 4; c++) {
                const float4 kv = *reinterpret_cast<const float4 *>(sKt + d * BK + c * 32 + g * 4);
                k[c * 4 + 0] = kv.x;
                k[c * 4 + 1] = kv.y;
                k[c * 4 + 2] = kv.z;
                k[c * 4 + 3] = kv.w;
            }
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int c = 0; c < KPT; c++) s[r][c] = fmaf(qa[r], k[c], s[r][c]);
        }

#pragma unroll
        for (int r = 0; r < R; r++) {
            const int ilim = i0 + r + off; /* row i0 + r sees keys j <= ilim */
            float tmax = -INFINITY;
#pragma unroll
            for (int c = 0; c < KPT; c++) {
                const int j = j0 + (c >> 2) * 32 + g * 4 + (c & 3);
                s[r][c] = (j <= ilim && j < Tk) ? s[r][c] * scale : -INFINITY;
                tmax = fmaxf(tmax, s[r][c]);
            }
            tmax = fa2_grp_max(tmax);
            const float mnew = fmaxf(m[r], tmax);
            const float mref = mnew == -INFINITY ? 0.0f : mnew; /* no key seen yet: all p are 0 */
            const float alpha = expf(m[r] - mref);               /* 0 while m = -inf */
            l[r] *= alpha;
#pragma unroll
            for (int e = 0; e < DPT; e++) o[r][e] *= alpha;
#pragma unroll
            for (int c = 0; c < KPT; c++) {
                s[r][c] = expf(s[r][c] - mref);
                l[r] += s[r][c];
            }
            m[r] = mnew;
        }

        /* o += P V: key kk's probabilities live in lane (kk/4) % 8 of the row group */
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float p[R];
#pragma unroll
            for (int r = 0; r < R; r++)
                p[r] = __shfl_sync(0xffffffffu, s[r][(kk >> 5) * 4 + (kk & 3)], gbase | ((kk >> 2) & 7));
#pragma unroll
            for (int c4 = 0; c4 < DPT / 4; c4++) {
                const float4 v = *reinterpret_cast<const float4 *>(sV + kk * HS + c4 * 32 + g * 4);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    o[r][c4 * 4 + 0] = fmaf(p[r], v.x, o[r][c4 * 4 + 0]);
                    o[r][c4 * 4 + 1] = fmaf(p[r], v.y, o[r][c4 * 4 + 1]);
                    o[r][c4 * 4 + 2] = fmaf(p[r], v.z, o[r][c4 * 4 + 2]);
                    o[r][c4 * 4 + 3] = fmaf(p[r], v.w, o[r][c4 * 4 + 3]);
                }
            }
        }
    }

#pragma unroll
    for (int r = 0; r < R; r++) {
        const float lr = fa2_grp_sum(l[r]);
        const int i = i0 + r;
        if (i >= Tq) continue;
        const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
        float *og = out + ((size_t)b * Tq + i) * NH * HS + (size_t)h * HS;
#pragma unroll
        for (int c4 = 0; c4 < DPT / 4; c4++)
            *reinterpret_cast<float4 *>(og + c4 * 32 + g * 4) =
                make_float4(o[r][c4 * 4 + 0] * inv, o[r][c4 * 4 + 1] * inv, o[r][c4 * 4 + 2] * inv,
                            o[r][c4 * 4 + 3] * inv);
        if (g == 0) lse[((size_t)b * NH + h) * Tq + i] = lr > 0.0f ? m[r] + logf(lr) : -INFINITY;
    }
}

/* ---- backward (a): D = rowsum(dO * O) ------------------------------------ */

__global__ void __launch_bounds__(FA_D_ROWS * 32)
    flash_bwd_dsum_kernel(float *__restrict__ D, const float *__restrict__ dout,
                          const float *__restrict__ out, int Tq, int NH, int HS, size_t rows) {
    size_t rr = (size_t)blockIdx.x * FA_D_ROWS + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (rr >= rows) return;
    /* rr indexes D (B, NH, Tq); the row of dout/out is (b, i), head h */
    int i = (int)(rr % Tq);
    size_t bh = rr / Tq;
    int h = (int)(bh % NH);
    size_t b = bh / NH;
    size_t base = (b * Tq + i) * (size_t)NH * HS + (size_t)h * HS;
    float acc = 0.0f;
    for (int d = lane; d < HS; d += 32) acc = fmaf(dout[base + d], out[base + d], acc);
    acc = warp_sum(acc);
    if (lane == 0) D[rr] = acc;
}

/* ---- backward (b): dQ over query blocks ----------------------------------- */

template <int HS>
__global__ void __launch_bounds__(FA_THREADS, 2)
    flash_bwd_dq_kernel(float *__restrict__ dqkv_q, const float *__restrict__ dout,
                        const float *__restrict__ qkv_q, const float *__restrict__ qkv_kv,
                        const float *__restrict__ lse, const float *__restrict__ D, int Tq, int Tk,
                        int NH, int NKV, int hs, float scale) {
    constexpr int P = FA_PAD(HS), NC = FA_DQ_BK / 4;
    extern __shared__ float4 fa_smem4[];
    float *sQ = reinterpret_cast<float *>(fa_smem4);
    float *sdO = sQ + FA_ROWS * P;
    float *sK = sdO + FA_ROWS * P;
    float *sV = sK + FA_DQ_BK * P;

    const int qb = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z;
    const int kvh = h / (NH / NKV);
    const size_t row = (size_t)(NH + 2 * NKV) * hs, orow = (size_t)NH * hs;
    const int tid = threadIdx.x, r = tid >> 2, ql = tid & 3, lane = tid & 31;
    const int q0 = qb * FA_ROWS, i = q0 + r;
    const int off = Tk - Tq, ilim = i + off;
    const bool live = i < Tq;
    const float L = live ? lse[((size_t)b * NH + h) * Tq + i] : 0.0f;
    const float Di = live ? D[((size_t)b * NH + h) * Tq + i] : 0.0f;

    fa_load_rows<HS, FA_ROWS>(sQ, qkv_q + (size_t)b * Tq * row + (size_t)h * hs, row, q0, Tq, hs);
    fa_load_rows<HS, FA_ROWS>(sdO, dout + (size_t)b * Tq * orow + (size_t)h * hs, orow, q0, Tq, hs);
    const float *kg = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + kvh) * hs;
    const float *vg = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + NKV + kvh) * hs;

    float dq[HS / 4];
#pragma unroll
    for (int e = 0; e < HS / 4; e++) dq[e] = 0.0f;

    const int kend = min(Tk, q0 + FA_ROWS + off);
    for (int j0 = 0; j0 < kend; j0 += FA_DQ_BK) {
        __syncthreads();
        fa_load_rows<HS, FA_DQ_BK>(sK, kg, row, j0, Tk, hs);
        fa_load_rows<HS, FA_DQ_BK>(sV, vg, row, j0, Tk, hs);
        __syncthreads();

        float s[NC], dp[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) s[c] = dp[c] = 0.0f;
        fa_dots<HS, NC>(s, sQ + r * P, sK, ql);
        fa_dots<HS, NC>(dp, sdO + r * P, sV, ql);
#pragma unroll
        for (int c = 0; c < NC; c++) {
            int j = j0 + c * 4 + ql;
            bool vis = live && j <= ilim && j < Tk;
            float p = vis ? expf(s[c] * scale - L) : 0.0f;
            s[c] = p * (dp[c] - Di) * scale; /* scale * dS */
        }
#pragma unroll
        for (int kk = 0; kk < FA_DQ_BK; kk++) {
            float g = __shfl_sync(0xffffffffu, s[kk >> 2], (lane & ~3) | (kk & 3));
            fa_axpy<HS>(dq, g, sK + kk * P, ql);
        }
    }

    if (live) {
        float *dqg = dqkv_q + ((size_t)b * Tq + i) * row + (size_t)h * hs;
#pragma unroll
        for (int c4 = 0; c4 < HS / 16; c4++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (c4 * 16 + ql * 4 + e < hs) dqg[c4 * 16 + ql * 4 + e] += dq[c4 * 4 + e];
    }
}

/* ---- backward (b) v2: dQ with the forward v2 micro-tiles ------------------
 * Same row groups as flash_fwd2_kernel; 32-key tiles (KPT = 4). Per k-step a
 * lane loads Q, dO (4 rows each, k-major) and K, V (4 keys each, k-major):
 * 4 LDS.128 for 32 FFMA (S and dP together). dQ += scale dS K reads K a
 * second time row-major (sK) with dS fetched by the same group shuffle as P
 * in the forward. dS never leaves registers. */
#define FA2_DQ_BK 32
#define FA2_DQ_MINB(HS) ((HS) >= 128 ? 2 : 3)
#define FA2_DQ_SMEM(HS) ((size_t)(2 * HS * FA2_ROWS + 3 * HS * FA2_DQ_BK) * sizeof(float))

template <int HS>
__global__ void __launch_bounds__(FA2_THREADS, FA2_DQ_MINB(HS))
    flash_bwd_dq2_kernel(float *__restrict__ dqkv_q, const float *__restrict__ dout,
                         const float *__restrict__ qkv_q, const float *__restrict__ qkv_kv,
                         const float *__restrict__ lse, const float *__restrict__ D, int Tq, int Tk,
                         int NH, int NKV, float scale) {
    constexpr int BK = FA2_DQ_BK, KPT = BK / 8, DPT = HS / 8, R = 4;
    extern __shared__ float4 fa_smem4[];
    float *sQt = reinterpret_cast<float *>(fa_smem4); /* [HS][FA2_ROWS] */
    float *sdOt = sQt + HS * FA2_ROWS;                 /* [HS][FA2_ROWS] */
    float *sKt = sdOt + HS * FA2_ROWS;                 /* [HS][BK] */
    float *sVt = sKt + HS * BK;                        /* [HS][BK] */
    float *sK = sVt + HS * BK;                         /* [BK][HS] */

    const int qb = gridDim.x - 1 - blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z;
    const int kvh = h / (NH / NKV);
    const size_t row = (size_t)(NH + 2 * NKV) * HS, orow = (size_t)NH * HS;
    const int tid = threadIdx.x, g = tid & 7, rg = tid >> 3, lane = tid & 31, gbase = lane & ~7;
    const int q0 = qb * FA2_ROWS, i0 = q0 + rg * R;
    const int off = Tk - Tq;

    float L[R], Di[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const bool live = i0 + r < Tq;
        L[r] = live ? lse[((size_t)b * NH + h) * Tq + i0 + r] : 0.0f;
        Di[r] = live ? D[((size_t)b * NH + h) * Tq + i0 + r] : 0.0f;
    }
    fa2_load_t<HS, FA2_ROWS>(sQt, qkv_q + (size_t)b * Tq * row + (size_t)h * HS, row, q0, Tq);
    fa2_load_t<HS, FA2_ROWS>(sdOt, dout + (size_t)b * Tq * orow + (size_t)h * HS, orow, q0, Tq);
    const float *kg = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + kvh) * HS;
    const float *vg = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + NKV + kvh) * HS;

    float dq[R][DPT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int e = 0; e < DPT; e++) dq[r][e] = 0.0f;

    const int kend = min(Tk, q0 + FA2_ROWS + off);
    for (int j0 = 0; j0 < kend; j0 += BK) {
        __syncthreads();
        fa2_load_t<HS, BK>(sKt, kg, row, j0, Tk);
        fa2_load_t<HS, BK>(sVt, vg, row, j0, Tk);
        fa2_load_rows<HS, BK>(sK, kg, row, j0, Tk);
        __syncthreads();

        /* s[r][c], dp[r][c]: row i0 + r, key j0 + (c/4)*32 + g*4 + c%4 */
        float s[R][KPT], dp[R][KPT];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int c = 0; c < KPT; c++) s[r][c] = dp[r][c] = 0.0f;
#pragma unroll 2
        for (int d = 0; d < HS; d++) {
            const float4 q = *reinterpret_cast<const float4 *>(sQt + d * FA2_ROWS + rg * R);
            const float4 o = *reinterpret_cast<const float4 *>(sdOt + d * FA2_ROWS + rg * R);
            const float qa[R] = {q.x, q.y, q.z, q.w}, oa[R] = {o.x, o.y, o.z, o.w};
            float k[KPT], v[KPT];
#pragma unroll
            for (int c = 0; c < KPT / 4; c++) {
                const float4 kv = *reinterpret_cast<const float4 *>(sKt + d * BK + c * 32 + g * 4);
                const float4 vv = *reinterpret_cast<const float4 *>(sVt + d * BK + c * 32 + g * 4);
                k[c * 4 + 0] = kv.x;
                k[c * 4 + 1] = kv.y;
                k[c * 4 + 2] = kv.z;
                k[c * 4 + 3] = kv.w;
                v[c * 4 + 0] = vv.x;
                v[c * 4 + 1] = vv.y;
                v[c * 4 + 2] = vv.z;
                v[c * 4 + 3] = vv.w;
            }
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int c = 0; c < KPT; c++) {
                    s[r][c] = fmaf(qa[r], k[c], s[r][c]);
                    dp[r][c] = fmaf(oa[r], v[c], dp[r][c]);
                }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = i0 + r, ilim = i + off;
#pragma unroll
            for (int c = 0; c < KPT; c++) {
                const int j = j0 + (c >> 2) * 32 + g * 4 + (c & 3);
                const bool vis = i < Tq && j <= ilim && j < Tk;
                const float p = vis ? expf(s[r][c] * scale - L[r]) : 0.0f;
                s[r][c] = p * (dp[r][c] - Di[r]) * scale; /* scale * dS */
            }
        }
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float w[R];
#pragma unroll
            for (int r = 0; r < R; r++)
                w[r] = __shfl_sync(0xffffffffu, s[r][(kk >> 5) * 4 + (kk & 3)], gbase | ((kk >> 2) & 7));
#pragma unroll
            for (int c4 = 0; c4 < DPT / 4; c4++) {
                const float4 y = *reinterpret_cast<const float4 *>(sK + kk * HS + c4 * 32 + g * 4);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    dq[r][c4 * 4 + 0] = fmaf(w[r], y.x, dq[r][c4 * 4 + 0]);
                    dq[r][c4 * 4 + 1] = fmaf(w[r], y.y, dq[r][c4 * 4 + 1]);
                    dq[r][c4 * 4 + 2] = fmaf(w[r], y.z, dq[r][c4 * 4 + 2]);
                    dq[r][c4 * 4 + 3] = fmaf(w[r], y.w, dq[r][c4 * 4 + 3]);
                }
            }
        }
    }

#pragma unroll
    for (int r = 0; r < R; r++) {
        const int i = i0 + r;
        if (i >= Tq) continue;
        float *dqg = dqkv_q + ((size_t)b * Tq + i) * row + (size_t)h * HS;
#pragma unroll
        for (int c4 = 0; c4 < DPT / 4; c4++) {
            float4 *p = reinterpret_cast<float4 *>(dqg + c4 * 32 + g * 4);
            float4 a = *p;
            a.x += dq[r][c4 * 4 + 0];
            a.y += dq[r][c4 * 4 + 1];
            a.z += dq[r][c4 * 4 + 2];
            a.w += dq[r][c4 * 4 + 3];
            *p = a;
        }
    }
}

/* ---- backward (c): dK, dV over key blocks --------------------------------- */

template <int HS>
__global__ void __launch_bounds__(FA_THREADS, 1)
    flash_bwd_dkv_kernel(float *__restrict__ dqkv_kv, const float *__restrict__ dout,
                         const float *__restrict__ qkv_q, const float *__restrict__ qkv_kv,
                         const float *__restrict__ lse, const float *__restrict__ D, int Tq, int Tk,
                         int NH, int NKV, int hs, float scale) {
    constexpr int P = FA_PAD(HS), NC = FA_DKV_BQ / 4;
    extern __shared__ float4 fa_smem4[];
    float *sK = reinterpret_cast<float *>(fa_smem4);
    float *sV = sK + FA_ROWS * P;
    float *sQ = sV + FA_ROWS * P;
    float *sdO = sQ + FA_DKV_BQ * P;
    float *sL = sdO + FA_DKV_BQ * P;
    float *sD = sL + FA_DKV_BQ;

    /* the first key blocks are seen by the most queries: schedule them first */
    const int kb = blockIdx.x;
    const int kvh = blockIdx.y, b = blockIdx.z;
    const int group = NH / NKV;
    const size_t row = (size_t)(NH + 2 * NKV) * hs, orow = (size_t)NH * hs;
    const int tid = threadIdx.x, r = tid >> 2, ql = tid & 3, lane = tid & 31;
    const int k0 = kb * FA_ROWS, j = k0 + r;
    const int off = Tk - Tq;

    const float *kg = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + kvh) * hs;
    const float *vg = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + NKV + kvh) * hs;
    fa_load_rows<HS, FA_ROWS>(sK, kg, row, k0, Tk, hs);
    fa_load_rows<HS, FA_ROWS>(sV, vg, row, k0, Tk, hs);

    float dk[HS / 4], dv[HS / 4];
#pragma unroll
    for (int e = 0; e < HS / 4; e++) dk[e] = dv[e] = 0.0f;

    /* queries before i0 see none of this block's keys */
    const int i0 = max(0, k0 - off);
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
        const float *qg = qkv_q + (size_t)b * Tq * row + (size_t)h * hs;
        const float *dog = dout + (size_t)b * Tq * orow + (size_t)h * hs;
        const float *lg = lse + ((size_t)b * NH + h) * Tq;
        const float *Dg = D + ((size_t)b * NH + h) * Tq;
        for (int it = i0; it < Tq; it += FA_DKV_BQ) {
            __syncthreads(); /* previous tile's readers done (and sK/sV loaded) */
            fa_load_rows<HS, FA_DKV_BQ>(sQ, qg, row, it, Tq, hs);
            fa_load_rows<HS, FA_DKV_BQ>(sdO, dog, orow, it, Tq, hs);
            if (tid < FA_DKV_BQ) {
                int t = it + tid;
                sL[tid] = t < Tq ? lg[t] : 0.0f;
                sD[tid] = t < Tq ? Dg[t] : 0.0f;
            }
            __syncthreads();

            float s[NC], dp[NC];
#pragma unroll
            for (int c = 0; c < NC; c++) s[c] = dp[c] = 0.0f;
            fa_dots<HS, NC>(s, sK + r * P, sQ, ql);   /* S^T = K Q^T */
            fa_dots<HS, NC>(dp, sV + r * P, sdO, ql); /* dP^T = V dO^T */
#pragma unroll
            for (int c = 0; c < NC; c++) {
                int ii = c * 4 + ql, i = it + ii;
                bool vis = i < Tq && j < Tk && j <= i + off;
                float p = vis ? expf(s[c] * scale - sL[ii]) : 0.0f;
                s[c] = p * (dp[c] - sD[ii]) * scale; /* scale * dS */
                dp[c] = p;
            }
#pragma unroll
            for (int ii = 0; ii < FA_DKV_BQ; ii++) {
                int src = (lane & ~3) | (ii & 3);
                float p = __shfl_sync(0xffffffffu, dp[ii >> 2], src);
                float g = __shfl_sync(0xffffffffu, s[ii >> 2], src);
                fa_axpy<HS>(dv, p, sdO + ii * P, ql);
                fa_axpy<HS>(dk, g, sQ + ii * P, ql);
            }
        }
    }

    if (j < Tk) {
        float *dkg = dqkv_kv + ((size_t)b * Tk + j) * row + (size_t)(NH + kvh) * hs;
        float *dvg = dqkv_kv + ((size_t)b * Tk + j) * row + (size_t)(NH + NKV + kvh) * hs;
#pragma unroll
        for (int c4 = 0; c4 < HS / 16; c4++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (c4 * 16 + ql * 4 + e >= hs) continue;
                dkg[c4 * 16 + ql * 4 + e] += dk[c4 * 4 + e];
                dvg[c4 * 16 + ql * 4 + e] += dv[c4 * 4 + e];
            }
    }
}

/* ---- backward (c) v2: dK, dV with the v2 micro-tiles (HS = 64 only) -------
 * Rows are keys: a lane holds S^T and dP^T for 4 keys x 4 queries of a
 * 32-query tile (K, V k-major for the block, Q, dO k-major per tile: 4
 * LDS.128 per 32 FFMA), then dV += P^T dO and dK += scale dS^T Q over the
 * tile's queries with P / dS fetched by group shuffles (2 x 4 SHFL + 2 x 2
 * LDS.128 per 64 FFMA). Q and dO are staged twice (k-major for the scores,
 * row-major for the second products). At HS = 128 the dk + dv accumulators
 * alone would be 128 registers per lane: that size keeps the v1 kernel. */
#define FA2_DKV_BQ 32
#define FA2_DKV_SMEM(HS) \
    ((size_t)(2 * HS * FA2_ROWS + 4 * HS * FA2_DKV_BQ) * sizeof(float) + 2 * FA2_DKV_BQ * sizeof(float))

template <int HS>
__global__ void __launch_bounds__(FA2_THREADS, 3)
    flash_bwd_dkv2_kernel(float *__restrict__ dqkv_kv, const float *__restrict__ dout,
                          const float *__restrict__ qkv_q, const float *__restrict__ qkv_kv,
                          const float *__restrict__ lse, const float *__restrict__ D, int Tq, int Tk,
                          int NH, int NKV, float scale) {
    constexpr int BQ = FA2_DKV_BQ, QPT = BQ / 8, DPT = HS / 8, R = 4;
    extern __shared__ float4 fa_smem4[];
    float *sKt = reinterpret_cast<float *>(fa_smem4); /* [HS][FA2_ROWS] */
    float *sVt = sKt + HS * FA2_ROWS;                  /* [HS][FA2_ROWS] */
    float *sQt = sVt + HS * FA2_ROWS;                  /* [HS][BQ] */
    float *sdOt = sQt + HS * BQ;                       /* [HS][BQ] */
    float *sQ = sdOt + HS * BQ;                        /* [BQ][HS] */
    float *sdO = sQ + BQ * HS;                         /* [BQ][HS] */
    float *sL = sdO + BQ * HS;
    float *sD = sL + BQ;

    const int kb = blockIdx.x;
    const int kvh = blockIdx.y, b = blockIdx.z;
    const int group = NH / NKV;
    const size_t row = (size_t)(NH + 2 * NKV) * HS, orow = (size_t)NH * HS;
    const int tid = threadIdx.x, g = tid & 7, rg = tid >> 3, lane = tid & 31, gbase = lane & ~7;
    const int k0 = kb * FA2_ROWS, j0 = k0 + rg * R; /* this lane's keys: j0 .. j0 + 3 */
    const int off = Tk - Tq;

    const float *kg = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + kvh) * HS;
    const float *vg = qkv_kv + (size_t)b * Tk * row + (size_t)(NH + NKV + kvh) * HS;
    fa2_load_t<HS, FA2_ROWS>(sKt, kg, row, k0, Tk);
    fa2_load_t<HS, FA2_ROWS>(sVt, vg, row, k0, Tk);

    float dk[R][DPT], dv[R][DPT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int e = 0; e < DPT; e++) dk[r][e] = dv[r][e] = 0.0f;

    const int i0 = max(0, k0 - off); /* queries before i0 see none of this block's keys */
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
        const float *qg = qkv_q + (size_t)b * Tq * row + (size_t)h * HS;
        const float *dog = dout + (size_t)b * Tq * orow + (size_t)h * HS;
        const float *lg = lse + ((size_t)b * NH + h) * Tq;
        const float *Dg = D + ((size_t)b * NH + h) * Tq;
        for (int it = i0; it < Tq; it += BQ) {
            __syncthreads(); /* previous tile's readers done (and sKt/sVt loaded) */
            fa2_load_t<HS, BQ>(sQt, qg, row, it, Tq);
            fa2_load_t<HS, BQ>(sdOt, dog, orow, it, Tq);
            fa2_load_rows<HS, BQ>(sQ, qg, row, it, Tq);
            fa2_load_rows<HS, BQ>(sdO, dog, orow, it, Tq);
            if (tid < BQ) {
                int t = it + tid;
                sL[tid] = t < Tq ? lg[t] : 0.0f;
                sD[tid] = t < Tq ? Dg[t] : 0.0f;
            }
            __syncthreads();

            /* s[r][c], dp[r][c]: key j0 + r, query it + (c/4)*32 + g*4 + c%4 */
            float s[R][QPT], dp[R][QPT];
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int c = 0; c < QPT; c++) s[r][c] = dp[r][c] = 0.0f;
#pragma unroll 2
            for (int d = 0; d < HS; d++) {
                const float4 k4 = *reinterpret_cast<const float4 *>(sKt + d * FA2_ROWS + rg * R);
                const float4 v4 = *reinterpret_cast<const float4 *>(sVt + d * FA2_ROWS + rg * R);
                const float ka[R] = {k4.x, k4.y, k4.z, k4.w}, va[R] = {v4.x, v4.y, v4.z, v4.w};
                float qv[QPT], ov[QPT];
#pragma unroll
                for (int c = 0; c < QPT / 4; c++) {
                    const float4 a = *reinterpret_cast<const float4 *>(sQt + d * BQ + c * 32 + g * 4);
                    const float4 o = *reinterpret_cast<const float4 *>(sdOt + d * BQ + c * 32 + g * 4);
                    qv[c * 4 + 0] = a.x;
                    qv[c * 4 + 1] = a.y;
                    qv[c * 4 + 2] = a.z;
                    qv[c * 4 + 3] = a.w;
                    ov[c * 4 + 0] = o.x;
                    ov[c * 4 + 1] = o.y;
                    ov[c * 4 + 2] = o.z;
                    ov[c * 4 + 3] = o.w;
                }
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int c = 0; c < QPT; c++) {
                        s[r][c] = fmaf(ka[r], qv[c], s[r][c]);   /* S^T = K Q^T */
                        dp[r][c] = fmaf(va[r], ov[c], dp[r][c]); /* dP^T = V dO^T */
                    }
            }
#pragma unroll
            for (int c = 0; c < QPT; c++) {
                const int ii = (c >> 2) * 32 + g * 4 + (c & 3), i = it + ii;
                const float Li = sL[ii], Dq = sD[ii];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const int j = j0 + r;
                    const bool vis = i < Tq && j < Tk && j <= i + off;
                    const float p = vis ? expf(s[r][c] * scale - Li) : 0.0f;
                    s[r][c] = p * (dp[r][c] - Dq) * scale; /* scale * dS */
                    dp[r][c] = p;
                }
            }
#pragma unroll
            for (int ii = 0; ii < BQ; ii++) {
                const int src = gbase | ((ii >> 2) & 7), reg = (ii >> 5) * 4 + (ii & 3);
                float pw[R], gw[R];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    pw[r] = __shfl_sync(0xffffffffu, dp[r][reg], src);
                    gw[r] = __shfl_sync(0xffffffffu, s[r][reg], src);
                }
#pragma unroll
                for (int c4 = 0; c4 < DPT / 4; c4++) {
                    const float4 o = *reinterpret_cast<const float4 *>(sdO + ii * HS + c4 * 32 + g * 4);
                    const float4 a = *reinterpret_cast<const float4 *>(sQ + ii * HS + c4 * 32 + g * 4);
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        dv[r][c4 * 4 + 0] = fmaf(pw[r], o.x, dv[r][c4 * 4 + 0]);
                        dv[r][c4 * 4 + 1] = fmaf(pw[r], o.y, dv[r][c4 * 4 + 1]);
                        dv[r][c4 * 4 + 2] = fmaf(pw[r], o.z, dv[r][c4 * 4 + 2]);
                        dv[r][c4 * 4 + 3] = fmaf(pw[r], o.w, dv[r][c4 * 4 + 3]);
                        dk[r][c4 * 4 + 0] = fmaf(gw[r], a.x, dk[r][c4 * 4 + 0]);
                        dk[r][c4 * 4 + 1] = fmaf(gw[r], a.y, dk[r][c4 * 4 + 1]);
                        dk[r][c4 * 4 + 2] = fmaf(gw[r], a.z, dk[r][c4 * 4 + 2]);
                        dk[r][c4 * 4 + 3] = fmaf(gw[r], a.w, dk[r][c4 * 4 + 3]);
                    }
                }
            }
        }
    }

#pragma unroll
    for (int r = 0; r < R; r++) {
        const int j = j0 + r;
        if (j >= Tk) continue;
        float *dkg = dqkv_kv + ((size_t)b * Tk + j) * row + (size_t)(NH + kvh) * HS;
        float *dvg = dqkv_kv + ((size_t)b * Tk + j) * row + (size_t)(NH + NKV + kvh) * HS;
#pragma unroll
        for (int c4 = 0; c4 < DPT / 4; c4++) {
            float4 *pk = reinterpret_cast<float4 *>(dkg + c4 * 32 + g * 4);
            float4 *pv = reinterpret_cast<float4 *>(dvg + c4 * 32 + g * 4);
            float4 a = *pk, c = *pv;
            a.x += dk[r][c4 * 4 + 0];
            a.y += dk[r][c4 * 4 + 1];
            a.z += dk[r][c4 * 4 + 2];
            a.w += dk[r][c4 * 4 + 3];
            c.x += dv[r][c4 * 4 + 0];
            c.y += dv[r][c4 * 4 + 1];
            c.z += dv[r][c4 * 4 + 2];
            c.w += dv[r][c4 * 4 + 3];
            *pk = a;
            *pv = c;
        }
    }
}

/* ---- launchers ----------------------------------------------------------- */

static forge_status flash_check(const char *op, int B, int Tq, int Tk, int NH, int NKV, int HS) {
    if (NH <= 0 || NKV <= 0 || HS <= 0 || NH % NKV != 0)
        return forge_error(FORGE_ERR_ARG,
                           "cuda %s: need NH, NKV, HS > 0 and NH divisible by NKV, got NH=%d NKV=%d "
                           "HS=%d",
                           op, NH, NKV, HS);
    if (B < 0 || Tq < 0 || Tk < 0)
        return forge_error(FORGE_ERR_ARG, "cuda %s: need B, Tq, Tk >= 0, got B=%d Tq=%d Tk=%d", op, B,
                           Tq, Tk);
    if (HS > 128)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "cuda %s: head size %d is above the largest fused fp32 kernel (128); use "
                           "--attention materialised",
                           op, HS);
    if (B > 65535 || NH > 65535)
        return forge_error(FORGE_ERR_UNSUPPORTED, "cuda %s: B=%d and NH=%d must fit grid.z/y (65535)",
                           op, B, NH);
    return FORGE_OK;
}

/* HS is the kernel's capacity (16, 32, 64 or 128), hs <= HS the real head size */
template <int HS>
static forge_status flash_forward_hs(cuda_ctx *ctx, float *out, float *lse, const float *qkv_q,
                                     const float *qkv_kv, int B, int Tq, int Tk, int NH, int NKV, int hs) {
    size_t smem = FA_FWD_SMEM(HS);
    static kernel_attrs_once once_fwd;
    CUDA_TRY(kernel_attrs_set(&once_fwd, (const void *)flash_fwd_kernel<HS>, (int)smem, 0));
    dim3 grid((unsigned)((Tq + FA_ROWS - 1) / FA_ROWS), (unsigned)NH, (unsigned)B);
    flash_fwd_kernel<HS><<<grid, FA_THREADS, smem, ctx->stream>>>(out, lse, qkv_q, qkv_kv, Tq, Tk, NH,
                                                                   NKV, hs, 1.0f / sqrtf((float)hs));
    CUDA_LAUNCH_CHECK("flash_fwd_kernel");
    return FORGE_OK;
}

template <int HS>
static forge_status flash_backward_hs(cuda_ctx *ctx, float *dqkv_q, float *dqkv_kv, const float *D,
                                      const float *dout, const float *qkv_q, const float *qkv_kv,
                                      const float *lse, int B, int Tq, int Tk, int NH, int NKV, int hs,
                                      bool v2) {
    const float scale = 1.0f / sqrtf((float)hs);
    size_t smem;
    dim3 grid;
    if constexpr (HS >= 64) {
        if (v2) { /* the caller checked hs == HS and 16-byte alignment */
            smem = FA2_DQ_SMEM(HS);
            static kernel_attrs_once once_dq2;
            CUDA_TRY(kernel_attrs_set(&once_dq2, (const void *)flash_bwd_dq2_kernel<HS>, (int)smem, 0));
            grid = dim3((unsigned)((Tq + FA2_ROWS - 1) / FA2_ROWS), (unsigned)NH, (unsigned)B);
            flash_bwd_dq2_kernel<HS><<<grid, FA2_THREADS, smem, ctx->stream>>>(
                dqkv_q, dout, qkv_q, qkv_kv, lse, D, Tq, Tk, NH, NKV, scale);
            CUDA_LAUNCH_CHECK("flash_bwd_dq2_kernel");
        }
    }
    if (!v2) {
        smem = FA_DQ_SMEM(HS);
        static kernel_attrs_once once_dq;
        CUDA_TRY(kernel_attrs_set(&once_dq, (const void *)flash_bwd_dq_kernel<HS>, (int)smem, 0));
        grid = dim3((unsigned)((Tq + FA_ROWS - 1) / FA_ROWS), (unsigned)NH, (unsigned)B);
        flash_bwd_dq_kernel<HS><<<grid, FA_THREADS, smem, ctx->stream>>>(dqkv_q, dout, qkv_q, qkv_kv, lse,
                                                                          D, Tq, Tk, NH, NKV, hs, scale);
        CUDA_LAUNCH_CHECK("flash_bwd_dq_kernel");
    }
    if (Tk == 0) return FORGE_OK;
    if constexpr (HS == 64) {
        if (v2) {
            smem = FA2_DKV_SMEM(HS);
            static kernel_attrs_once once_dkv2;
            CUDA_TRY(kernel_attrs_set(&once_dkv2, (const void *)flash_bwd_dkv2_kernel<HS>, (int)smem, 0));
            grid = dim3((unsigned)((Tk + FA2_ROWS - 1) / FA2_ROWS), (unsigned)NKV, (unsigned)B);
            flash_bwd_dkv2_kernel<HS><<<grid, FA2_THREADS, smem, ctx->stream>>>(
                dqkv_kv, dout, qkv_q, qkv_kv, lse, D, Tq, Tk, NH, NKV, scale);
            CUDA_LAUNCH_CHECK("flash_bwd_dkv2_kernel");
            return FORGE_OK;
        }
    }
    smem = FA_DKV_SMEM(HS);
    static kernel_attrs_once once_dkv;
    CUDA_TRY(kernel_attrs_set(&once_dkv, (const void *)flash_bwd_dkv_kernel<HS>, (int)smem, 0));
    grid = dim3((unsigned)((Tk + FA_ROWS - 1) / FA_ROWS), (unsigned)NKV, (unsigned)B);
    flash_bwd_dkv_kernel<HS><<<grid, FA_THREADS, smem, ctx->stream>>>(dqkv_kv, dout, qkv_q, qkv_kv,
                                                                       lse, D, Tq, Tk, NH, NKV, hs, scale);
    CUDA_LAUNCH_CHECK("flash_bwd_dkv_kernel");
    return FORGE_OK;
}

static bool fa2_aligned(const void *p) { return ((uintptr_t)p & 15u) == 0; }

template <int HS>
static forge_status flash_forward2_hs(cuda_ctx *ctx, float *out, float *lse, const float *qkv_q,
                                      const float *qkv_kv, int B, int Tq, int Tk, int NH, int NKV) {
    size_t smem = FA2_FWD_SMEM(HS);
    static kernel_attrs_once once_fwd2;
    CUDA_TRY(kernel_attrs_set(&once_fwd2, (const void *)flash_fwd2_kernel<HS>, (int)smem, 0));
    dim3 grid((unsigned)((Tq + FA2_ROWS - 1) / FA2_ROWS), (unsigned)NH, (unsigned)B);
    flash_fwd2_kernel<HS><<<grid, FA2_THREADS, smem, ctx->stream>>>(out, lse, qkv_q, qkv_kv, Tq, Tk, NH,
                                                                     NKV, 1.0f / sqrtf((float)HS));
    CUDA_LAUNCH_CHECK("flash_fwd2_kernel");
    return FORGE_OK;
}

forge_status cuda_flash_attention_forward_ext(forge_backend *be, float *out, float *lse,
                                              const float *qkv_q, const float *qkv_kv, int B, int Tq,
                                              int Tk, int NH, int NKV, int HS) {
    FORGE_TRY(flash_check("flash_attention_forward", B, Tq, Tk, NH, NKV, HS));
    if (B == 0 || Tq == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    /* v2 reads float4 rows: exact head sizes 64 / 128 and 16-byte aligned bases */
    if ((HS == 64 || HS == 128) && fa2_aligned(qkv_q) && fa2_aligned(qkv_kv) &&
        fa2_aligned(out)) {
        if (HS == 64) return flash_forward2_hs<64>(ctx, out, lse, qkv_q, qkv_kv, B, Tq, Tk, NH, NKV);
        return flash_forward2_hs<128>(ctx, out, lse, qkv_q, qkv_kv, B, Tq, Tk, NH, NKV);
    }
    /* the smallest kernel that holds HS; the padding columns are zeros */
    if (HS <= 16) return flash_forward_hs<16>(ctx, out, lse, qkv_q, qkv_kv, B, Tq, Tk, NH, NKV, HS);
    if (HS <= 32) return flash_forward_hs<32>(ctx, out, lse, qkv_q, qkv_kv, B, Tq, Tk, NH, NKV, HS);
    if (HS <= 64) return flash_forward_hs<64>(ctx, out, lse, qkv_q, qkv_kv, B, Tq, Tk, NH, NKV, HS);
    return flash_forward_hs<128>(ctx, out, lse, qkv_q, qkv_kv, B, Tq, Tk, NH, NKV, HS);
}

forge_status cuda_flash_attention_backward_ext(forge_backend *be, float *dqkv_q, float *dqkv_kv,
                                               float *scratch, const float *dout, const float *qkv_q,
                                               const float *qkv_kv, const float *out, const float *lse,
                                               int B, int Tq, int Tk, int NH, int NKV, int HS) {
    FORGE_TRY(flash_check("flash_attention_backward", B, Tq, Tk, NH, NKV, HS));
    if (B == 0 || Tq == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    size_t rows = (size_t)B * NH * Tq;
    size_t blocks = (rows + FA_D_ROWS - 1) / FA_D_ROWS;
    if (blocks > 0x7fffffffu)
        return forge_error(FORGE_ERR_UNSUPPORTED, "cuda flash_attention_backward: %zu rows is too many",
                           rows);
    flash_bwd_dsum_kernel<<<(unsigned)blocks, FA_D_ROWS * 32, 0, ctx->stream>>>(scratch, dout, out, Tq,
                                                                                NH, HS, rows);
    CUDA_LAUNCH_CHECK("flash_bwd_dsum_kernel");
    /* v2 dQ (float4 rows): exact head sizes 64 / 128 and 16-byte aligned bases */
    const bool v2 = (HS == 64 || HS == 128) && fa2_aligned(qkv_q) && fa2_aligned(qkv_kv) &&
                    fa2_aligned(dout) && fa2_aligned(dqkv_q) && fa2_aligned(dqkv_kv);
    if (HS <= 16)
        return flash_backward_hs<16>(ctx, dqkv_q, dqkv_kv, scratch, dout, qkv_q, qkv_kv, lse, B, Tq, Tk, NH,
                                     NKV, HS, v2);
    if (HS <= 32)
        return flash_backward_hs<32>(ctx, dqkv_q, dqkv_kv, scratch, dout, qkv_q, qkv_kv, lse, B, Tq, Tk, NH,
                                     NKV, HS, v2);
    if (HS <= 64)
        return flash_backward_hs<64>(ctx, dqkv_q, dqkv_kv, scratch, dout, qkv_q, qkv_kv, lse, B, Tq, Tk, NH,
                                     NKV, HS, v2);
    return flash_backward_hs<128>(ctx, dqkv_q, dqkv_kv, scratch, dout, qkv_q, qkv_kv, lse, B, Tq, Tk, NH,
                                  NKV, HS, v2);
}

forge_status cuda_flash_attention_forward(forge_backend *be, float *out, float *lse, const float *qkv,
                                          int B, int T, int NH, int NKV, int HS) {
    return cuda_flash_attention_forward_ext(be, out, lse, qkv, qkv, B, T, T, NH, NKV, HS);
}

forge_status cuda_flash_attention_backward(forge_backend *be, float *dqkv, float *scratch,
                                           const float *dout, const float *qkv, const float *out,
                                           const float *lse, int B, int T, int NH, int NKV, int HS) {
    return cuda_flash_attention_backward_ext(be, dqkv, dqkv, scratch, dout, qkv, qkv, out, lse, B, T, T,
                                             NH, NKV, HS);
}
