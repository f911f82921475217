/*
 * colsum16_v0.cuh: the bf16 GELU backward with the bias gradient's partials as it was with one row per thread per
 * loop iteration (a thread's next row loaded only after the current one was used), kept as the baseline of
 * `forge-lab bench gelu16-bwd-dbias` (lab/elementwise/bench_gelu16_bwd.cu): gbd0_gelu_backward_dbias_kernel,
 * gelu_grad_table.cuh's gelu_backward_dbias_bf16_kernel before it read several rows of a thread before using any
 * (launched with the product's grid and arguments; its partials go to the caller's buffer). dinp and the partials
 * must be bitwise the same as it gives. (matmul_bf16.cu's mm_bf16_dbias_partial8_kernel still has this loop form:
 * reading 8 rows per loop body measured 1.02x, lab/notes/elementwise.md.)
 */
#ifndef FORGE_LAB_COLSUM16_V0_CUH
#define FORGE_LAB_COLSUM16_V0_CUH

#include "../../src/backend/cuda/gelu_grad_table.cuh"

static __global__ void __launch_bounds__(32 * GELU_DBIAS_ROWS)
    gbd0_gelu_backward_dbias_kernel(forge_bf16 *__restrict__ dinp, float *__restrict__ partial,
                                    const forge_bf16 *__restrict__ inp, const forge_bf16 *__restrict__ dout, int N,
                                    int OC, int R, int rows_per_chunk, const float *__restrict__ table_g) {
    __shared__ __align__(16) float table[GELU_TAB_FLOATS];
    __shared__ float s[GELU_DBIAS_ROWS][256 + 4];
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const int t = threadIdx.y * 32 + threadIdx.x;
    for (int i = t; i < GELU_TAB_FLOATS / 4; i += 32 * GELU_DBIAS_ROWS)
        reinterpret_cast<float4 *>(table)[i] = reinterpret_cast<const float4 *>(table_g)[i];
    __syncthreads();

    const int tiles = (OC + 255) / 256, lc = threadIdx.x * 8;
    for (int item = blockIdx.x; item < tiles * R; item += gridDim.x) {
        const int c0 = (item % tiles) * 256 + lc, r = item / tiles;
        const int n_begin = r * rows_per_chunk, n_end = min(N, n_begin + rows_per_chunk);
        float acc[8];
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] = 0.0f;
        if (c0 < OC)
            for (int n = n_begin + threadIdx.y; n < n_end; n += GELU_DBIAS_ROWS) {
                const size_t i = (size_t)n * OC + c0;
                const uint4 xv = *reinterpret_cast<const uint4 *>(inp + i),
                            gv = *reinterpret_cast<const uint4 *>(dout + i);
                float d[8];
#pragma unroll
                for (int k = 0; k < 8; k++) d[k] = 0.0f;
                gelu_bwd_chunk(d, table, xv, gv);
                bf16_store<8>(dinp + i, d);
#pragma unroll
                for (int k = 0; k < 8; k++) acc[k] += bf16_to_f32(f32_to_bf16(d[k])); /* the stored value */
            }
#pragma unroll
        for (int k = 0; k < 8; k++) s[threadIdx.y][lc + k] = acc[k];
        __syncthreads();
        if (threadIdx.y == 0 && c0 < OC) {
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float sum = 0.0f;
#pragma unroll
                for (int l = 0; l < GELU_DBIAS_ROWS; l++) sum += s[l][lc + k];
                partial[(size_t)r * OC + c0 + k] = sum;
            }
        }
        __syncthreads(); /* s is read before the next item writes it */
    }
}

#endif
