/*
 * reduce.cu: the second pass of forge's deterministic column sums (dbias,
 * the norms' dweight/dbias): out[c] += sum over r of partial[r][c], r in
 * order. The first pass is op-specific (each op knows what it sums) and
 * lives with the op; see cuda_ops.h for why nothing here uses atomics.
 * The finish launches with programmatic dependent launch (pdl.cuh): it waits
 * for the first pass (forge_pdl_wait) before it reads a partial.
 */
#include "colsum_ordered.cuh"
#include "cuda_ops.h"
#include "pdl.cuh"

#define COLSUM_MIN_ROWS 64 /* rows per chunk at least: below that a chunk is too little work */
#define COLSUM_MAX_CHUNKS 128

int cuda_colsum_chunks(int N, int C, int n_out) {
    if (N <= 0 || C <= 0 || n_out <= 0) return 1;
    long long R = (N + COLSUM_MIN_ROWS - 1) / COLSUM_MIN_ROWS;
    if (R > COLSUM_MAX_CHUNKS) R = COLSUM_MAX_CHUNKS;
    long long fit = (long long)(CUDA_WS_FLOATS / ((size_t)n_out * (size_t)C));
    if (R > fit) R = fit;
    return (int)R;
}

__global__ void __launch_bounds__(COLSUM_THREADS)
    colsum_finish_kernel(float *__restrict__ out, const float *__restrict__ partials, int R, int C) {
    __shared__ colsum_chunk_smem s;
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const int c = blockIdx.x * COLSUM_COLS + threadIdx.x % COLSUM_COLS;
    const float sum = colsum_ordered_block(partials + (c < C ? c : 0), (size_t)C, R, c < C, s);
    if (threadIdx.x < COLSUM_COLS && c < C) out[c] += sum;
}

forge_status cuda_colsum_finish(cuda_ctx *ctx, float *out, const float *partials, int R, int C) {
    if (C <= 0 || R <= 0) return FORGE_OK;
    CUDA_LAUNCH_TRY(forge_pdl_launch(colsum_finish_kernel, (C + COLSUM_COLS - 1) / COLSUM_COLS, COLSUM_THREADS, 0,
                                     ctx->stream, ctx->pdl, out, partials, R, C),
                    "colsum_finish_kernel");
    return FORGE_OK;
}
