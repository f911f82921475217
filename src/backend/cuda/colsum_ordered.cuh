/*
 * colsum_ordered.cuh: the second pass of the deterministic column sums, as a block-level building block:
 * out[c] (+)= sum over r = 0, 1, ..., R-1 of partial[r * stride + c], added in that order from a zero sum.
 *
 * The sum is short (R <= a few hundred partials) and its order is fixed, so one thread has to add a column's
 * partials one after another; what costs is waiting for the loads. A block of COLSUM_COLS columns x
 * COLSUM_GROUPS row groups loads a chunk of COLSUM_CHUNK partials per column into shared memory, every thread
 * issuing its COLSUM_CHUNK / COLSUM_GROUPS loads at once (one memory round trip per chunk instead of one per
 * few rows), then the first group adds the chunk in row order. The bits are those of the plain loop
 * `for (r = 0; r < R; r++) sum += partial[r][c]`.
 */
#ifndef FORGE_COLSUM_ORDERED_CUH
#define FORGE_COLSUM_ORDERED_CUH

#define COLSUM_COLS 64
#define COLSUM_GROUPS 4
#define COLSUM_THREADS (COLSUM_COLS * COLSUM_GROUPS)
#define COLSUM_CHUNK 160 /* >= the partial counts used (<= 128 row chunks, <= an H200's 132 SMs): one round trip */

typedef float colsum_chunk_smem[COLSUM_CHUNK][COLSUM_COLS];

/* Every thread of the block calls this (it synchronises); column lane = threadIdx.x % COLSUM_COLS. col points at
 * the column's first partial (ignored where valid is false); the sum is meaningful in threads with
 * threadIdx.x < COLSUM_COLS. */
__device__ __forceinline__ float colsum_ordered_block(const float *__restrict__ col, size_t stride, int R,
                                                      bool valid, colsum_chunk_smem &s) {
    const int lane = threadIdx.x % COLSUM_COLS, g = threadIdx.x / COLSUM_COLS;
    constexpr int PER = COLSUM_CHUNK / COLSUM_GROUPS;
    float sum = 0.0f;
    for (int r0 = 0; r0 < R; r0 += COLSUM_CHUNK) {
        const int n = min(COLSUM_CHUNK, R - r0);
        float v[PER];
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int r = g + k * COLSUM_GROUPS;
            v[k] = valid && r < n ? col[(size_t)(r0 + r) * stride] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int r = g + k * COLSUM_GROUPS;
            if (r < n) s[r][lane] = v[k];
        }
        __syncthreads();
        if (g == 0)
            for (int r = 0; r < n; r++) sum += s[r][lane];
        __syncthreads();
    }
    return sum;
}

#endif
