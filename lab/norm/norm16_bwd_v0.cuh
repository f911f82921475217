/*
 * norm16_bwd_v0.cuh: the bf16 LayerNorm / RMSNorm fused backward with one row per warp loaded ahead into registers
 * (the default before norm_bf16_fused.cuh's ring), the baseline of lab/norm/bench_norm16_bwd.cu.
 */
#ifndef FORGE_LAB_NORM16_BWD_V0_CUH
#define FORGE_LAB_NORM16_BWD_V0_CUH

#include "../../src/backend/cuda/norm_bf16_fused.cuh"

/* The fused backward as norm_bf16.cu had it before the shared-memory ring (norm_bf16_fused.cuh), kept as the
 * baseline of `forge-lab bench norm16-bwd`; the same grid (norm_fused_grid), dinp and partial bits.
 * VEC only, CH = ceil(C / 256) <= NB_FUSED_MAX_CHUNKS chunks per lane. Block b walks the contiguous rows
 * [b rows_per_block, (b + 1) rows_per_block) clipped to N, warp w taking rows begin + w, begin + w + 8, ...; for each
 * row it computes dinp with the row kernel's arithmetic (the same loads, sums and order, so the same bits) and adds
 * dout and x-hat of its columns into per-lane fp32 accumulators: dw = fmaf(g, xh, dw), db += g, the reference's
 * x-hat and raw dout. The next row's bf16 inputs (and ACC: its dinp) are loaded into registers while the current row
 * is processed. At the end the 8 warps' accumulators are added in warp order, ((w0 + w1) + w2) + ... + w7, through
 * one shared row, and warp 7 writes the block's partial row: partial dw (R, C) then (LN) db (R, C), as the scalar
 * partial kernel lays them out for cuda_colsum_finish. A block with no rows writes zeros. */

/* v[j] = the raw 16 bytes of row's chunk lane * 8 + 256 j, zeros past C */
template <int CH>
__device__ __forceinline__ void nb0_load_row_raw(uint4 v[CH], const forge_bf16 *row, int lane, int C) {
#pragma unroll
    for (int j = 0; j < CH; j++) {
        const int c0 = lane * 8 + j * 32 * 8;
        v[j] = c0 < C ? *reinterpret_cast<const uint4 *>(row + c0) : make_uint4(0u, 0u, 0u, 0u);
    }
}

/* warp w's 8 accumulators v of one chunk: run = v (w = 0), run = run + v (0 < w < 7), out = run + v (w = 7) */
__device__ __forceinline__ void nb0_combine(const float v[8], int w, float *run, float *out) {
    float t[8];
    if (w == 0) {
#pragma unroll
        for (int k = 0; k < 8; k++) t[k] = v[k];
    } else {
        f32_load<8>(t, run);
#pragma unroll
        for (int k = 0; k < 8; k++) t[k] = t[k] + v[k];
    }
    const float4 lo = make_float4(t[0], t[1], t[2], t[3]), hi = make_float4(t[4], t[5], t[6], t[7]);
    if (w + 1 < NB_ROWS) {
        reinterpret_cast<float4 *>(run)[0] = lo;
        reinterpret_cast<float4 *>(run)[1] = hi;
    } else {
        reinterpret_cast<float4 *>(out)[0] = lo;
        reinterpret_cast<float4 *>(out)[1] = hi;
    }
}

template <bool LN, bool ACC, int CH>
__global__ void __launch_bounds__(NB_THREADS)
    nb0_fused_kernel(forge_bf16 *__restrict__ dinp, float *__restrict__ partial,
                                    const forge_bf16 *__restrict__ dout, const forge_bf16 *__restrict__ inp,
                                    const float *__restrict__ weight, const float *__restrict__ mean,
                                    const float *__restrict__ rstd, int N, int C, int rows_per_block) {
    constexpr int NP = LN ? 2 : 1; /* partial arrays: dw, (LN) db */
    __shared__ __align__(16) float run[NP][NB_FUSED_MAX_C]; /* the running sum of warps 0..w-1 */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int begin = blockIdx.x * rows_per_block, end = min(N, begin + rows_per_block);
    float dw[CH][8], db[CH][8]; /* db unused (and dropped) for RMSNorm */
#pragma unroll
    for (int j = 0; j < CH; j++)
#pragma unroll
        for (int k = 0; k < 8; k++) {
            dw[j][k] = 0.0f;
            if (LN) db[j][k] = 0.0f;
        }

    /* the next row of this warp, loaded ahead */
    uint4 xq[CH], gq[CH], dq[CH]; /* dq: ACC only */
    float mq = 0.0f, sq = 0.0f;
    int n = begin + warp;
    if (n < end) {
        const size_t off = (size_t)n * C;
        nb0_load_row_raw<CH>(xq, inp + off, lane, C);
        nb0_load_row_raw<CH>(gq, dout + off, lane, C);
        if (ACC) nb0_load_row_raw<CH>(dq, dinp + off, lane, C);
        mq = LN ? mean[n] : 0.0f;
        sq = rstd[n];
    }
    for (; n < end; n += NB_ROWS) {
        uint4 xv[CH], gv[CH], dv[CH];
#pragma unroll
        for (int j = 0; j < CH; j++) {
            xv[j] = xq[j];
            gv[j] = gq[j];
            if (ACC) dv[j] = dq[j];
        }
        const float m = mq, s = sq;
        if (n + NB_ROWS < end) {
            const size_t off = (size_t)(n + NB_ROWS) * C;
            nb0_load_row_raw<CH>(xq, inp + off, lane, C);
            nb0_load_row_raw<CH>(gq, dout + off, lane, C);
            if (ACC) nb0_load_row_raw<CH>(dq, dinp + off, lane, C);
            mq = LN ? mean[n + NB_ROWS] : 0.0f;
            sq = rstd[n + NB_ROWS];
        }
        norm_fused_row<LN, ACC, CH>(
            dinp + (size_t)n * C, xv, gv, [&](int j, float *w) { f32_load<8>(w, weight + lane * 8 + j * 32 * 8); },
            [&](int j, float *d) { bf16x8_unpack(d, dv[j]); }, m, s, lane, C, dw, db);
    }

    /* warp w adds its accumulators to the running sum of warps 0..w-1 in turn; the last one writes the partial */
    float *pw = partial + (size_t)blockIdx.x * C, *pb = partial + ((size_t)gridDim.x + blockIdx.x) * C;
    for (int w = 0; w < NB_ROWS; w++) {
        if (warp == w) {
#pragma unroll
            for (int j = 0; j < CH; j++) {
                const int c0 = lane * 8 + j * 32 * 8;
                if (c0 < C) {
                    nb0_combine(dw[j], w, &run[0][c0], pw + c0);
                    if (LN) nb0_combine(db[j], w, &run[NP - 1][c0], pb + c0);
                }
            }
        }
        if (w + 1 < NB_ROWS) __syncthreads();
    }
}

#endif
