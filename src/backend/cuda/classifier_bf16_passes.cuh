/*
 * classifier_bf16_passes.cuh: the column passes of classifier_bf16.cu's
 * transposed chunk (softmax statistics, then dlogits and the loss's log-sum-exp),
 * templated on how many vocabulary ids a thread loads before using any; the lab
 * (lab/classifier/) times the unrolls against each other.
 */
#ifndef FORGE_CUDA_CLASSIFIER_BF16_PASSES_CUH
#define FORGE_CUDA_CLASSIFIER_BF16_PASSES_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "bf16_io.cuh"
#include "cuda_ops.h"

/* The transposed chunk's two column passes: logits^T (V, rows) bf16 in, dlogits^T written over them.
 * A row's logits are a column. Lane l of a warp takes the row pair (r0 + 2l, r0 + 2l + 1) with one 32-bit load, so
 * a warp reads 64 consecutive rows (128 bytes) of one vocabulary id per access (rows is a multiple of 8, so a pair
 * is either inside or past the end), and UNROLL ids (the template argument) are loaded before any is used, so each
 * thread keeps that many loads in flight (the passes are bandwidth-bound: one outstanding load per thread left the
 * H200's memory half idle). Every UNROLL gives the same bits: a warp still takes its ids in increasing order. The vocabulary is cut into `splits` ranges (grid.y); a block's 8 warps take every 8th id of its
 * range. Pass 1 keeps a running (max, sum of exp) per row and thread, combines the 8 warps in warp order and writes
 * one partial per (range, row); pass 2 combines the ranges' partials in range order (every block the same:
 * deterministic), writes M + log S (range 0) and rewrites its range's logits as dlogits. */
#define CLS16T_ROWS 64
#define CLS16T_WARPS 8

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

__device__ __forceinline__ void cls16t_add(float &m, float &s, float x) {
    if (x > m) {
        s = (m == -INFINITY ? 0.0f : s * expf(m - x)) + 1.0f;
        m = x;
    } else {
        s += expf(x - m);
    }
}

template <int UNROLL>
__global__ void __launch_bounds__(32 * CLS16T_WARPS)
    cls16t_partial_kernel(float *__restrict__ part, const uint16_t *__restrict__ xt, int rows, int V, int per_split) {
    __shared__ float sm[CLS16T_WARPS][CLS16T_ROWS], ss[CLS16T_WARPS][CLS16T_ROWS];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, r = blockIdx.x * CLS16T_ROWS + 2 * lane;
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
    const int t = threadIdx.x, rr = blockIdx.x * CLS16T_ROWS + t;
    if (t < CLS16T_ROWS && rr < rows) {
        float M = sm[0][t], S = ss[0][t];
        for (int k = 1; k < CLS16T_WARPS; k++) cls16t_merge(M, S, sm[k][t], ss[k][t]);
        const size_t at = (size_t)blockIdx.y * rows + rr;
        part[2 * at] = M;
        part[2 * at + 1] = S;
    }
}

/* One row's combined (M, S) from the ranges' partials, in range order. */
__device__ __forceinline__ void cls16t_total(const float *__restrict__ part, int rows, int r, int splits, float &M,
                                             float &S) {
    M = -INFINITY;
    S = 0.0f;
    for (int k = 0; k < splits; k++) cls16t_merge(M, S, part[2 * ((size_t)k * rows + r)], part[2 * ((size_t)k * rows + r) + 1]);
}

__device__ __forceinline__ uint16_t cls16t_grad(float x, float M, float inv, bool target, float grad_scale) {
    const float p = expf(x - M) * inv;
    return f32_to_bf16((p - (target ? 1.0f : 0.0f)) * grad_scale);
}

template <int UNROLL>
__global__ void __launch_bounds__(32 * CLS16T_WARPS)
    cls16t_grad_kernel(float *__restrict__ losses, uint16_t *__restrict__ xt, const float *__restrict__ part,
                       const int32_t *__restrict__ targets, int n0, int rows, int V, int per_split, int splits,
                       int ignore_index, float grad_scale, cuda_input_error *err) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, r = blockIdx.x * CLS16T_ROWS + 2 * lane;
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
