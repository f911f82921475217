/*
 * norm_bf16_fused.cuh: the bf16 LayerNorm / RMSNorm backward's per-chunk arithmetic (norm_dx8) and its fused
 * kernel (dinp and the block's dweight/dbias partial in one pass over the rows), shared by norm_bf16.cu (the
 * default: its launcher picks STAGES) and the lab's benches of other stage counts. norm_bf16.cu's file comment
 * gives the numerics; this header keeps them: dinp bit-identical to the CPU reference, the partials in a fixed
 * order.
 *
 * The fused kernel: block b walks the contiguous rows [b rows_per_block, (b + 1) rows_per_block) clipped to N,
 * warp w taking rows begin + w, begin + w + 8, ... (NB_ROWS warps). For each row it computes dinp with the row
 * kernel's arithmetic (the same sums in the same order, so the same bits) and adds dout and x-hat of its columns
 * into per-lane fp32 accumulators: dw = fmaf(g, xh, dw), db += g, the reference's x-hat and raw dout.
 *
 * Loads: each lane copies its own 16-byte chunks of a row (inp, dout, ACC: dinp) and the row's mean and rstd into a
 * per-warp ring of STAGES row slots in shared memory with cp.async, STAGES - 1 rows ahead of the row it computes,
 * and reads back only what it copied itself (so cp.async.wait_group orders it; no barrier inside the row loop).
 * That keeps STAGES - 1 rows per warp in flight whatever the row's arithmetic costs. The weight is read once per
 * block into registers.
 *
 * At the end the NB_ROWS warps' accumulators go to shared memory (over the ring) and each column is added in warp
 * order, ((w0 + w1) + w2) + ... + w7, by one thread, which writes the block's partial: dw (R, C) then (LN) db
 * (R, C), the layout of reduce.cu's cuda_colsum_finish. A block with no rows writes zeros. norm_fused_finish then
 * adds the R partials into dweight (and dbias) with cuda_colsum_finish's order and bits, in one launch.
 *
 * Both kernels wait for the previous kernel (forge_pdl_wait, pdl.cuh) before their first global access (the
 * ring's first cp.async included), so their launchers may start them with programmatic dependent launch.
 */
#ifndef FORGE_NORM_BF16_FUSED_CUH
#define FORGE_NORM_BF16_FUSED_CUH

#include "bf16_io.cuh"
#include "colsum_ordered.cuh"
#include "kernel_attrs.h"
#include "pdl.cuh"

#define NB_THREADS 256 /* 8 rows per block, one warp each */
#define NB_ROWS (NB_THREADS / 32)
#define NB_FUSED_MAX_CHUNKS 4 /* 8-wide chunks per lane in the fused kernel: C <= 32 * 8 * 4 = 1024 */
#define NB_FUSED_MAX_C (32 * 8 * NB_FUSED_MAX_CHUNKS)
#define NB_FUSED_MIN_ROWS 16 /* rows per block at least: two per warp */
#define NB_SMEM_MAX (227 * 1024) /* the opt-in dynamic shared memory of one block */

/* d[k] += dx of one 8-wide chunk (norm_bf16.cu's formula), the reference's operations and roundings */
template <bool LN>
__device__ __forceinline__ void norm_dx8(float d[8], const float x[8], const float g[8], const float w[8], float m,
                                         float s, float g_mean, float gx_mean) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float xh = LN ? (x[k] - m) * s : x[k] * s, dn = __fmul_rn(w[k], g[k]);
        const float dx = __fmul_rn(fmaf(-xh, gx_mean, LN ? dn - g_mean : dn), s);
        d[k] = d[k] + dx;
    }
}

/* One row of the fused kernel: its dinp into dr (its chunks' x and dout in xv, gv) and its dout, x-hat added into
 * the lane's accumulators dw, db (LN). The weight of chunk j comes from wf(j, w), ACC: its dinp from df(j, d). */
template <bool LN, bool ACC, int CH, typename WF, typename DF>
__device__ __forceinline__ void norm_fused_row(forge_bf16 *dr, const uint4 xv[CH], const uint4 gv[CH], WF wf, DF df,
                                               float m, float s, int lane, int C, float dw[CH][8], float db[CH][8]) {
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int j = 0; j < CH; j++) {
        const int c0 = lane * 8 + j * 32 * 8;
        if (c0 < C) {
            float x[8], g[8], w[8];
            bf16x8_unpack(x, xv[j]);
            bf16x8_unpack(g, gv[j]);
            wf(j, w);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float xh = LN ? (x[k] - m) * s : x[k] * s, dn = __fmul_rn(w[k], g[k]);
                if (LN) sum_g += dn;
                sum_gx = fmaf(dn, xh, sum_gx);
                dw[j][k] = fmaf(g[k], xh, dw[j][k]);
                if (LN) db[j][k] += g[k];
            }
        }
    }
    const float g_mean = LN ? warp_sum(sum_g) / (float)C : 0.0f;
    const float gx_mean = warp_sum(sum_gx) / (float)C;
#pragma unroll
    for (int j = 0; j < CH; j++) {
        const int c0 = lane * 8 + j * 32 * 8;
        if (c0 < C) {
            float x[8], g[8], w[8], d[8];
            bf16x8_unpack(x, xv[j]);
            bf16x8_unpack(g, gv[j]);
            wf(j, w);
            if (ACC) {
                df(j, d);
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) d[k] = 0.0f;
            }
            norm_dx8<LN>(d, x, g, w, m, s, g_mean, gx_mean);
            bf16_store<8>(dr + c0, d);
        }
    }
}

/* The fused kernel's grid: one block per SM (one wave), each with at least NB_FUSED_MIN_ROWS rows, and n_out R C
 * floats fitting the workspace; then the rows split evenly, so no block is empty. Returns R. */
static inline int norm_fused_grid(int N, int C, int n_out, int num_sms, int *rows_per_block) {
    long long R = (N + NB_FUSED_MIN_ROWS - 1) / NB_FUSED_MIN_ROWS;
    const long long fit = (long long)(CUDA_WS_FLOATS / ((size_t)n_out * (size_t)C));
    if (R > num_sms) R = num_sms;
    if (R > fit) R = fit;
    if (R < 1) R = 1;
    *rows_per_block = (int)((N + R - 1) / R);
    return (int)((N + *rows_per_block - 1) / *rows_per_block);
}

/* ---- the ring of row slots: per warp STAGES slots, each NOPS operands x CH chunks x 32 lanes x 16 bytes, then
 * 32 lanes x (mean, rstd). Lane l's chunk j of an operand at (j * 32 + l) * 16: a warp's 16-byte reads of one
 * chunk are 512 contiguous bytes (no bank conflicts). */
template <bool ACC, int CH>
struct norm_fused_slot {
    static constexpr int NOPS = ACC ? 3 : 2; /* inp, dout, (ACC) dinp */
    static constexpr int OP_BYTES = CH * 32 * 16;
    static constexpr int MS_OFF = NOPS * OP_BYTES;
    static constexpr int BYTES = MS_OFF + 32 * 8;
};

/* dynamic shared memory of the fused kernel: the ring, or the final warp-order combine if larger */
template <bool LN, bool ACC, int CH, int STAGES>
constexpr int norm_fused_smem() {
    constexpr int ring = NB_ROWS * STAGES * norm_fused_slot<ACC, CH>::BYTES;
    constexpr int combine = NB_ROWS * (LN ? 2 : 1) * CH * 32 * 8 * 4;
    return ring > combine ? ring : combine;
}

/* the stage count of the default (norm_bf16.cu's launcher): about 3 rows' chunks per warp in flight at C = 768 */
template <int CH>
constexpr int norm_fused_stages() {
    return CH == 1 ? 8 : CH == 2 ? 6 : 4;
}

__device__ __forceinline__ void nb_cp_async16(uint32_t dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void nb_cp_async4(uint32_t dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void nb_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int K>
__device__ __forceinline__ void nb_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(K) : "memory");
}

/* lane's copies of row n into the slot at shared address slot */
template <bool LN, bool ACC, int CH>
__device__ __forceinline__ void norm_fused_issue(uint32_t slot, const forge_bf16 *dinp, const forge_bf16 *dout,
                                                 const forge_bf16 *inp, const float *mean, const float *rstd, int n,
                                                 int lane, int C) {
    using SL = norm_fused_slot<ACC, CH>;
    const size_t off = (size_t)n * C;
#pragma unroll
    for (int j = 0; j < CH; j++) {
        const int c0 = lane * 8 + j * 32 * 8;
        if (c0 < C) {
            const uint32_t at = slot + (uint32_t)((j * 32 + lane) * 16);
            nb_cp_async16(at, inp + off + c0);
            nb_cp_async16(at + SL::OP_BYTES, dout + off + c0);
            if (ACC) nb_cp_async16(at + 2 * SL::OP_BYTES, dinp + off + c0);
        }
    }
    const uint32_t ms = slot + (uint32_t)(SL::MS_OFF + lane * 8);
    if (LN) nb_cp_async4(ms, mean + n);
    nb_cp_async4(ms + 4, rstd + n);
}

/* VEC only (C % 8 == 0, 16-byte aligned pointers), CH = ceil(C / 256) <= NB_FUSED_MAX_CHUNKS; dynamic shared
 * memory norm_fused_smem<LN, ACC, CH, STAGES>() */
template <bool LN, bool ACC, int CH, int STAGES>
__global__ void __launch_bounds__(NB_THREADS)
    norm_backward_fused_bf16_kernel(forge_bf16 *__restrict__ dinp, float *__restrict__ partial,
                                    const forge_bf16 *__restrict__ dout, const forge_bf16 *__restrict__ inp,
                                    const float *__restrict__ weight, const float *__restrict__ mean,
                                    const float *__restrict__ rstd, int N, int C, int rows_per_block) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    static_assert(STAGES >= 2, "one row computed while the next ones load");
    using SL = norm_fused_slot<ACC, CH>;
    constexpr int NP = LN ? 2 : 1; /* partial arrays: dw, (LN) db */
    constexpr int CW = CH * 32 * 8; /* columns of a lane's chunks */
    extern __shared__ __align__(16) unsigned char nb_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int begin = blockIdx.x * rows_per_block, end = min(N, begin + rows_per_block);
    const int first = begin + warp, rows = first < end ? (end - first + NB_ROWS - 1) / NB_ROWS : 0;
    unsigned char *ring = nb_smem + (size_t)warp * STAGES * SL::BYTES;
    const uint32_t ring_s = (uint32_t)__cvta_generic_to_shared(ring);

    /* rows 0 .. STAGES - 2 of this warp into slots 0 .. STAGES - 2; one commit group per row (empty past the end) */
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) {
        if (i < rows)
            norm_fused_issue<LN, ACC, CH>(ring_s + i * SL::BYTES, dinp, dout, inp, mean, rstd, first + i * NB_ROWS,
                                          lane, C);
        nb_cp_commit();
    }

    float w[CH][8], dw[CH][8], db[CH][8]; /* db unused (and dropped) for RMSNorm */
#pragma unroll
    for (int j = 0; j < CH; j++) {
        const int c0 = lane * 8 + j * 32 * 8;
        if (c0 < C) {
            f32_load<8>(w[j], weight + c0);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) w[j][k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            dw[j][k] = 0.0f;
            if (LN) db[j][k] = 0.0f;
        }
    }

    int cur = 0; /* slot of row i; row i + STAGES - 1 goes to the slot before it, read in the previous iteration */
    for (int i = 0; i < rows; i++) {
        const int prev = cur == 0 ? STAGES - 1 : cur - 1;
        if (i + STAGES - 1 < rows)
            norm_fused_issue<LN, ACC, CH>(ring_s + prev * SL::BYTES, dinp, dout, inp, mean, rstd,
                                          first + (i + STAGES - 1) * NB_ROWS, lane, C);
        nb_cp_commit();
        nb_cp_wait<STAGES - 1>(); /* row i's group complete */
        const unsigned char *slot = ring + cur * SL::BYTES;
        cur = cur + 1 == STAGES ? 0 : cur + 1;

        const float *ms = reinterpret_cast<const float *>(slot + SL::MS_OFF + lane * 8);
        const float m = LN ? ms[0] : 0.0f, s = ms[1];
        uint4 xv[CH], gv[CH]; /* zeros past C (never copied, never used) */
#pragma unroll
        for (int j = 0; j < CH; j++) {
            const int o = (j * 32 + lane) * 16;
            const bool in = lane * 8 + j * 32 * 8 < C;
            xv[j] = in ? *reinterpret_cast<const uint4 *>(slot + o) : make_uint4(0u, 0u, 0u, 0u);
            gv[j] = in ? *reinterpret_cast<const uint4 *>(slot + SL::OP_BYTES + o) : make_uint4(0u, 0u, 0u, 0u);
        }
        const unsigned char *dslot = slot + 2 * SL::OP_BYTES; /* ACC: the row's dinp */
        norm_fused_row<LN, ACC, CH>(
            dinp + (size_t)(first + i * NB_ROWS) * C, xv, gv,
            [&](int j, float *wj) {
#pragma unroll
                for (int k = 0; k < 8; k++) wj[k] = w[j][k];
            },
            [&](int j, float *d) {
                bf16x8_unpack(d, *reinterpret_cast<const uint4 *>(dslot + (j * 32 + lane) * 16));
            },
            m, s, lane, C, dw, db);
    }

    /* every warp's accumulators into red[warp][p][CW] (over the ring: no copy in flight, every warp done with it);
     * then column by column, warps in order */
    nb_cp_wait<0>();
    __syncthreads();
    float *red = reinterpret_cast<float *>(nb_smem);
#pragma unroll
    for (int j = 0; j < CH; j++) {
        const int c0 = lane * 8 + j * 32 * 8;
        float4 *rw = reinterpret_cast<float4 *>(red + (size_t)(warp * NP) * CW + c0);
        rw[0] = make_float4(dw[j][0], dw[j][1], dw[j][2], dw[j][3]);
        rw[1] = make_float4(dw[j][4], dw[j][5], dw[j][6], dw[j][7]);
        if (LN) {
            float4 *rb = reinterpret_cast<float4 *>(red + (size_t)(warp * NP + 1) * CW + c0);
            rb[0] = make_float4(db[j][0], db[j][1], db[j][2], db[j][3]);
            rb[1] = make_float4(db[j][4], db[j][5], db[j][6], db[j][7]);
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < NP * C; i += NB_THREADS) {
        const int p = LN && i >= C ? 1 : 0, c = i - p * C;
        float t = red[p * CW + c];
#pragma unroll
        for (int v = 1; v < NB_ROWS; v++) t = t + red[(size_t)(v * NP + p) * CW + c];
        partial[((size_t)p * gridDim.x + blockIdx.x) * C + c] = t;
    }
}

/* dweight[c] += sum_r partial[r][c] and (LN) dbias[c] += sum_r partial[R + r][c], r in order from a zero sum: the
 * bits of reduce.cu's cuda_colsum_finish, one launch for both (colsum_ordered.cuh: a block of COLSUM_COLS output
 * columns, LN's dbias columns numbered after dweight's). */
template <bool LN>
__global__ void __launch_bounds__(COLSUM_THREADS)
    norm_fused_finish_kernel(float *__restrict__ dweight, float *__restrict__ dbias,
                             const float *__restrict__ partial, int R, int C) {
    __shared__ colsum_chunk_smem s;
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const int i = blockIdx.x * COLSUM_COLS + threadIdx.x % COLSUM_COLS;
    const bool valid = i < (LN ? 2 : 1) * C;
    const int p = LN && i >= C ? 1 : 0, c = i - p * C;
    const float sum = colsum_ordered_block(partial + (valid ? (size_t)p * R * C + c : 0), (size_t)C, R, valid, s);
    if (threadIdx.x < COLSUM_COLS && valid) {
        float *out = p ? dbias : dweight;
        out[c] += sum;
    }
}

/* pdl: launched with programmatic dependent launch (pdl.cuh), else plainly */
static cudaError_t norm_fused_finish(cudaStream_t st, int pdl, bool ln, float *dweight, float *dbias,
                                     const float *partial, int R, int C) {
    const unsigned blocks = (unsigned)(((ln ? 2 : 1) * C + COLSUM_COLS - 1) / COLSUM_COLS);
    return forge_pdl_launch(ln ? norm_fused_finish_kernel<true> : norm_fused_finish_kernel<false>, blocks,
                            COLSUM_THREADS, 0, st, pdl, dweight, dbias, partial, R, C);
}

/* launches the fused kernel with STAGES slots per warp on stream st (R blocks from norm_fused_grid); the partials
 * go to partial (n_out R C floats); pdl as for norm_fused_finish */
template <bool LN, bool ACC, int CH, int STAGES>
static cudaError_t norm_fused_launch(cudaStream_t st, int pdl, unsigned R, forge_bf16 *dinp, float *partial,
                                     const forge_bf16 *dout, const forge_bf16 *inp, const float *weight,
                                     const float *mean, const float *rstd, int N, int C, int rows_per_block) {
    constexpr int smem = norm_fused_smem<LN, ACC, CH, STAGES>();
    static_assert(smem <= NB_SMEM_MAX, "the ring must fit one block's shared memory");
    static kernel_attrs_once once;
    const cudaError_t e =
        kernel_attrs_set(&once, (const void *)norm_backward_fused_bf16_kernel<LN, ACC, CH, STAGES>, smem, 0);
    if (e != cudaSuccess) return e;
    return forge_pdl_launch(norm_backward_fused_bf16_kernel<LN, ACC, CH, STAGES>, R, NB_THREADS, smem, st, pdl, dinp,
                            partial, dout, inp, weight, mean, rstd, N, C, rows_per_block);
}

#endif
