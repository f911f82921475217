/*
 * classifier_bf16_stats.cuh: the softmax statistics' arithmetic of the bf16 classifier's transposed chunk
 * (classifier_bf16.cu), shared by the column passes (classifier_bf16_fast.cuh, classifier_bf16_passes.cuh) and the
 * logits GEMM's statistics epilogue (gemm_wgmma_fp8_kernel.cuh, FP8_EPI_STATS), so a partial is the same kind of
 * number whoever wrote it: natural units, (m, s) with m the max of its values and s = sum exp(x - m) over them
 * ((-inf, 0): no values), merged by cls16t_merge. Compiled for the host too (lab/emulators/emulate_cls16t.cpp,
 * emulate_cls16_epi_stats.cpp: ex2 is exp2f there).
 *
 * The statistics epilogue (cls16s_*) reads back each staging box of the logits GEMM's bf16 C tile after the box is
 * filled (the values as rounded to bf16, the bits the TMA store writes and pass 2 later reads), rather than reducing
 * the fp32 accumulators across lanes and warps: a column's 64 rows of a box are spread over 8 lane groups and 4
 * warps in the wgmma fragment, and the cross-warp step needs 2 KiB of shared memory per warpgroup and box, where the
 * ping-pong kernel at 6 stages leaves 1952 bytes. Read back, a column is 4 lanes of one warp: one shuffle merge pair.
 * A box is 64 rows x 64 bf16 columns, 128-byte rows in the 128-byte swizzle: column cb of row r at byte
 * 128 r + 16 ((cb / 8) ^ (r % 8)) + 2 (cb % 8). Warp w, lane l reads the 4-byte pair of columns
 * cb = 16 w + 2 (l / 4) + {0, 1} in the 16 rows r_k = 8 (k / 2) + 2 (l % 4) + k % 2 (k < 16): the 4 lanes of a pair
 * (l / 4 equal) cover the 64 rows once, and at step k a warp's 4 rows have r % 8 = 2 q + k % 2 (q = 0..3), which
 * send its two 16-byte column chunks (2w, 2w + 1) to 4 disjoint chunk pairs: 32 banks, one wavefront.
 */
#ifndef FORGE_CUDA_CLASSIFIER_BF16_STATS_CUH
#define FORGE_CUDA_CLASSIFIER_BF16_STATS_CUH

#include <math.h>
#include <stdint.h>

#define CLS16F_LOG2E 1.4426950408889634f

/* 2^a, the hardware approximation (one MUFU.EX2; denormal results flushed to 0, ex2(-inf) = 0); compiled for the
 * host (an emulation of the kernels off the GPU), exp2f */
__device__ __forceinline__ float cls16f_ex2(float a) {
#ifdef __CUDA_ARCH__
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(a));
    return y;
#else
    return exp2f(a);
#endif
}

/* (m, s) merged with (m2, s2) (natural units, expf: the accurate exp) */
__device__ __forceinline__ void cls16t_merge(float &m, float &s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) {
        m = m2;
        s = s2;
        return;
    }
    const float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

/* e[0] = the pairwise sum of e[0 .. 2H): e[u] += e[u + H] for u < H, then H / 2, ... 1; one template level a step,
 * so every index is a constant (written as a loop over h, U = 16 kept e in a 64-byte local array) */
template <int H, int U> __device__ __forceinline__ void cls16f_pairwise(float (&e)[U]) {
    if constexpr (H >= 1) {
#pragma unroll
        for (int u = 0; u < H; u++) e[u] += e[u + H];
        cls16f_pairwise<H / 2>(e);
    }
}

/* (m, s) += the batch x[0 .. U): the batch's max, the sum rescaled once, the batch's exps summed pairwise. The max is
 * exact (fmaxf); m = -inf before the first id. mc, the new max clamped to a finite value, keeps every exponent
 * finite or -inf: an all -inf batch (ids past the range) on an empty (m, s) adds ex2(-inf) = 0 and leaves m = -inf. */
template <int U> __device__ __forceinline__ void cls16f_add_batch(float &m, float &s, const float (&x)[U]) {
    static_assert(U == 1 || U == 2 || U == 4 || U == 8 || U == 16, "a pairwise sum of a power of 2");
    float bm = x[0];
#pragma unroll
    for (int u = 1; u < U; u++) bm = fmaxf(bm, x[u]);
    const float mn = fmaxf(m, bm), mc = fmaxf(mn, -1.0e38f), nl = -(mc * CLS16F_LOG2E);
    float e[U];
#pragma unroll
    for (int u = 0; u < U; u++) e[u] = cls16f_ex2(fmaf(x[u], CLS16F_LOG2E, nl));
    cls16f_pairwise<U / 2>(e);
    s = fmaf(s, cls16f_ex2((m - mc) * CLS16F_LOG2E), e[0]); /* m == mc: ex2(0) = 1 exactly; m = -inf: 0 */
    m = mn;
}

/* ---- the logits GEMM's statistics epilogue: indexing of a box's read-back (header comment) ---- */
#define CLS16S_ROWS 16 /* rows of a box a thread reads */

/* box row of a thread's k-th read; box column of the first of its pair */
__device__ __forceinline__ int cls16s_row(int lane, int k) { return 8 * (k / 2) + 2 * (lane % 4) + k % 2; }
__device__ __forceinline__ int cls16s_col(int warp, int lane) { return 16 * warp + 2 * (lane / 4); }

/* the byte offset in the box of the k-th read: the 128-byte swizzle of (cls16s_row, cls16s_col) */
__device__ __forceinline__ uint32_t cls16s_off(int warp, int lane, int k) {
    const int r = cls16s_row(lane, k), cb = cls16s_col(warp, lane);
    return 128u * (uint32_t)r + ((uint32_t)((cb / 8) ^ (r % 8)) << 4) + 2u * (uint32_t)(cb % 8);
}

/* (m0, s0), (m1, s1) += the thread's column pair in the box's rows below `valid` (the rows at or past it are the
 * tile's rows past M: zero-filled operands, no logits), read as 4-byte bf16 pairs by ld(byte offset) (the low half is
 * the even column); one cls16f_add_batch of 16 values a column: the fast pass 1's arithmetic */
template <class LD>
__device__ __forceinline__ void cls16s_add_box(float &m0, float &s0, float &m1, float &s1, LD ld, int warp, int lane,
                                               int valid) {
    float a[CLS16S_ROWS], b[CLS16S_ROWS];
    uint32_t w[CLS16S_ROWS];
#pragma unroll
    for (int k = 0; k < CLS16S_ROWS; k++) w[k] = ld(cls16s_off(warp, lane, k)); /* all loads before any use */
#pragma unroll
    for (int k = 0; k < CLS16S_ROWS; k++) {
        const bool in = cls16s_row(lane, k) < valid;
        a[k] = in ? __uint_as_float(w[k] << 16) : -INFINITY;
        b[k] = in ? __uint_as_float(w[k] & 0xffff0000u) : -INFINITY;
    }
    cls16f_add_batch<CLS16S_ROWS>(m0, s0, a);
    cls16f_add_batch<CLS16S_ROWS>(m1, s1, b);
}

/* one step of the merge of a pair's 4 lanes (xor 1, then xor 2): (m, s) and the partner lane's (pm, ps) in lane
 * order, the lower lane's first, so both lanes get the same bits and after both steps all 4 hold the pair's partial
 * (which lane writes it does not matter) */
__device__ __forceinline__ void cls16s_merge_lanes(float &m, float &s, float pm, float ps, bool upper) {
    if (upper) {
        const float m2 = m, s2 = s;
        m = pm;
        s = ps;
        cls16t_merge(m, s, m2, s2);
    } else {
        cls16t_merge(m, s, pm, ps);
    }
}

#endif
