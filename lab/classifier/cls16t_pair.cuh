/*
 * cls16t_pair.cuh: the bf16 classifier's transposed-chunk column passes with a
 * row pair a lane (one 4-byte access per vocabulary id, 64 rows a block), the
 * baseline that `forge-lab bench cls16t-passes` times forge's passes against
 * (src/backend/cuda/classifier_bf16_passes.cuh, whose cls16t_add, cls16t_merge,
 * cls16t_put_partial, cls16t_total and cls16t_grad these use). The same
 * streams, id order and merge order as forge's, so the same bits.
 */
#ifndef FORGE_LAB_CLS16T_PAIR_CUH
#define FORGE_LAB_CLS16T_PAIR_CUH

#include "../../src/backend/cuda/classifier_bf16_passes.cuh"

/* Lane l of a warp takes the row pair (r0 + 2l, r0 + 2l + 1) with one 32-bit load, so a warp reads 64 consecutive
 * rows (128 bytes) of one vocabulary id per access (rows is a multiple of 8, so a pair is either inside or past the
 * end), and UNROLL ids are loaded before any is used. */
#define CLS16T_PAIR_ROWS 64

template <int UNROLL>
__global__ void __launch_bounds__(32 * CLS16T_WARPS)
    cls16t_pair_partial_kernel(float *__restrict__ part, const uint16_t *__restrict__ xt, int rows, int V, int per_split) {
    __shared__ float sm[CLS16T_WARPS][CLS16T_PAIR_ROWS], ss[CLS16T_WARPS][CLS16T_PAIR_ROWS];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, r = blockIdx.x * CLS16T_PAIR_ROWS + 2 * lane;
    const int v0 = blockIdx.y * per_split, v1 = min(V, v0 + per_split);
    float m0 = -INFINITY, s0 = 0.0f, m1 = -INFINITY, s1 = 0.0f;
    if (r < rows)
        for (int v = v0 + w; v < v1; v += UNROLL * CLS16T_WARPS) {
            unsigned x[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                const int vu = v + u * CLS16T_WARPS;
                x[u] = vu < v1 ? *(const unsigned *)(xt + (size_t)vu * rows + r) : 0xff80ff80u; /* -inf pair */
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                if (v + u * CLS16T_WARPS >= v1) break;
                cls16t_add(m0, s0, __uint_as_float(x[u] << 16));
                cls16t_add(m1, s1, __uint_as_float(x[u] & 0xffff0000u));
            }
        }
    sm[w][2 * lane] = m0, ss[w][2 * lane] = s0;
    sm[w][2 * lane + 1] = m1, ss[w][2 * lane + 1] = s1;
    __syncthreads();
    cls16t_put_partial<CLS16T_PAIR_ROWS>(part, sm, ss, rows);
}

template <int UNROLL>
__global__ void __launch_bounds__(32 * CLS16T_WARPS)
    cls16t_pair_grad_kernel(float *__restrict__ losses, uint16_t *__restrict__ xt, const float *__restrict__ part,
                       const int32_t *__restrict__ targets, int n0, int rows, int V, int per_split, int splits,
                       int ignore_index, float grad_scale, cuda_input_error *err) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, r = blockIdx.x * CLS16T_PAIR_ROWS + 2 * lane;
    if (r >= rows) return;
    const int y0 = targets[n0 + r], y1 = targets[n0 + r + 1];
    const bool ig0 = y0 == ignore_index, ig1 = y1 == ignore_index;
    const int v0 = blockIdx.y * per_split, v1 = min(V, v0 + per_split);
    float M0, S0, M1, S1;
    cls16t_total(part, rows, r, splits, M0, S0);
    cls16t_total(part, rows, r + 1, splits, M1, S1);
    const float inv0 = 1.0f / S0, inv1 = 1.0f / S1;
    for (int v = v0 + w; v < v1; v += UNROLL * CLS16T_WARPS) {
        unsigned x[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int vu = v + u * CLS16T_WARPS;
            x[u] = vu < v1 ? *(const unsigned *)(xt + (size_t)vu * rows + r) : 0u;
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int vu = v + u * CLS16T_WARPS;
            if (vu >= v1) break;
            const uint16_t d0 = ig0 ? 0 : cls16t_grad(__uint_as_float(x[u] << 16), M0, inv0, vu == y0, grad_scale);
            const uint16_t d1 =
                ig1 ? 0 : cls16t_grad(__uint_as_float(x[u] & 0xffff0000u), M1, inv1, vu == y1, grad_scale);
            *(unsigned *)(xt + (size_t)vu * rows + r) = (unsigned)d0 | ((unsigned)d1 << 16);
        }
    }
    if (blockIdx.y == 0 && w == 0) {
        const int ys[2] = {y0, y1};
        const float Ms[2] = {M0, M1}, Ss[2] = {S0, S1};
        for (int k = 0; k < 2; k++) {
            const int n = n0 + r + k, y = ys[k];
            if (y == ignore_index) {
                losses[n] = 0.0f;
            } else if (y >= 0 && y < V) {
                losses[n] = Ms[k] + logf(Ss[k]);
            } else {
                cuda_report_bad_id(err, CUDA_BAD_ID_CLASSIFIER, n, y, V);
                losses[n] = __int_as_float(0x7fc00000);
            }
        }
    }
}

#endif
