/*
 * classifier_bf16_passes.cuh: the building blocks of classifier_bf16.cu's transposed-chunk column passes (softmax
 * statistics per vocabulary range, then dlogits and the loss's log-sum-exp): the ranges, the grid, the loads, the
 * (max, sum) merge and the partial and loss writers. Forge's kernels are classifier_bf16_fast.cuh's; the expf
 * kernels described below, the bitwise reference at every width, are the lab's (lab/classifier/cls16t_exact.cuh).
 */
#ifndef FORGE_CUDA_CLASSIFIER_BF16_PASSES_CUH
#define FORGE_CUDA_CLASSIFIER_BF16_PASSES_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "bf16_io.cuh"
#include "cuda_ops.h"

/* The transposed chunk's two column passes: logits^T (V, rows) bf16 in, dlogits^T written over them.
 * A row's logits are a column. The vocabulary is cut into `splits` ranges of `per_split` ids (cls16t_splits; grid.y).
 * A block has CLS16T_WARPS id streams ("warps"): stream w takes the ids v0 + w, v0 + w + 8, ... of its range in
 * increasing order. A stream is LW lanes (32: a hardware warp; 16: half of one, the other half being the next
 * stream), and lane l owns the RL consecutive rows r0 + RL l .. r0 + RL l + RL - 1, read with one RL * 2-byte access
 * per id (RL = 2, 4, 8: 4, 8, 16 bytes), so a stream reads RL * LW * 2 contiguous bytes of one id and a block covers
 * RB = RL * LW rows. rows % 8 == 0 and the logits are 16-byte aligned, so a lane's rows are all inside or all past
 * the end and its access is aligned. UNROLL ids are loaded before any is used (the passes are bandwidth-bound);
 * AHEAD (the lab's) also loads the next UNROLL ids before using the current ones, so the loads overlap the math.
 * Pass 1 keeps a running (max, sum of exp) per row and stream (cls16t_add in id order), merges the streams in stream
 * order 0..7 (cls16t_merge) and writes one partial per (range, row); pass 2 merges the ranges' partials in range
 * order (every block the same: deterministic), writes M + log S (range 0) and rewrites its range's logits as
 * dlogits. A row sees the same operations in the same order whatever RL, LW, UNROLL and AHEAD: every instantiation
 * gives the same bits. */
#define CLS16T_WARPS 8
/* forge's instantiation (the widths and unrolls timed against each other: lab/notes/classifier.md): 2 rows a lane
 * (4-byte accesses), 32 lanes a stream (64 rows a block), 4 ids ahead; no wider access measured 1.10x faster */
#define CLS16T_LANE_ROWS 2
#define CLS16T_LANES 32
#define CLS16T_UNROLL 4

/* the vocabulary ranges (grid.y) of a V-column chunk and the ids in each */
static inline int cls16t_splits(int V) { return V < 1024 ? 1 : (V + 1023) / 1024 < 16 ? (V + 1023) / 1024 : 16; }
static inline int cls16t_per_split(int V, int splits) { return (V + splits - 1) / splits; }

/* the passes' grid and block for RL rows a lane and LW lanes a stream */
template <int RL, int LW> static inline dim3 cls16t_grid(int rows, int splits) {
    return dim3((unsigned)((rows + RL * LW - 1) / (RL * LW)), (unsigned)splits);
}
template <int LW> static inline dim3 cls16t_block() { return dim3(LW * CLS16T_WARPS); }

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

/* x[0 .. RL / 2) = the RL bf16 at p as RL / 2 words (word j: rows 2j (low half) and 2j + 1), one aligned access;
 * every word `fill` where !in */
template <int RL>
__device__ __forceinline__ void cls16t_load(unsigned (&x)[RL / 2], const uint16_t *p, bool in, unsigned fill) {
    static_assert(RL == 2 || RL == 4 || RL == 8, "2, 4 or 8 rows a lane");
    if constexpr (RL == 2) {
        x[0] = in ? *(const unsigned *)p : fill;
    } else if constexpr (RL == 4) {
        const uint2 q = in ? *(const uint2 *)p : make_uint2(fill, fill);
        x[0] = q.x;
        x[1] = q.y;
    } else {
        const uint4 q = in ? *(const uint4 *)p : make_uint4(fill, fill, fill, fill);
        x[0] = q.x;
        x[1] = q.y;
        x[2] = q.z;
        x[3] = q.w;
    }
}

/* x[u] = the lane's RL rows of id v + 8u (u < UNROLL), `fill` for an id at or past v1 */
template <int RL, int UNROLL>
__device__ __forceinline__ void cls16t_load_ids(unsigned (&x)[UNROLL][RL / 2], const uint16_t *xt, int rows, int r,
                                                int v, int v1, unsigned fill) {
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        const int vu = v + u * CLS16T_WARPS;
        cls16t_load<RL>(x[u], xt + (size_t)vu * rows + r, vu < v1, fill);
    }
}

template <int RL> __device__ __forceinline__ void cls16t_store(uint16_t *p, const unsigned (&x)[RL / 2]) {
    if constexpr (RL == 2) {
        *(unsigned *)p = x[0];
    } else if constexpr (RL == 4) {
        *(uint2 *)p = make_uint2(x[0], x[1]);
    } else {
        *(uint4 *)p = make_uint4(x[0], x[1], x[2], x[3]);
    }
}

/* Pass 1's end, after the block's barrier: thread t < RB merges the streams' (max, sum) of the block's row t in
 * stream order and writes the (range blockIdx.y, row) partial */
template <int RB>
__device__ __forceinline__ void cls16t_put_partial(float *__restrict__ part, const float (&sm)[CLS16T_WARPS][RB],
                                                   const float (&ss)[CLS16T_WARPS][RB], int rows) {
    const int t = threadIdx.x, rr = blockIdx.x * RB + t;
    if (t < RB && rr < rows) {
        float M = sm[0][t], S = ss[0][t];
        for (int k = 1; k < CLS16T_WARPS; k++) cls16t_merge(M, S, sm[k][t], ss[k][t]);
        const size_t at = (size_t)blockIdx.y * rows + rr;
        part[2 * at] = M;
        part[2 * at + 1] = S;
    }
}

/* Pass 1's end: stream w's lane `lane` puts its RL rows' (max, sum) in the block's arrays, then (after the barrier)
 * cls16t_put_partial; RB <= the block's threads (RL <= CLS16T_WARPS) */
template <int RL, int RB>
__device__ __forceinline__ void cls16t_end_partial(float *__restrict__ part, float (&sm)[CLS16T_WARPS][RB],
                                                   float (&ss)[CLS16T_WARPS][RB], const float (&m)[RL],
                                                   const float (&s)[RL], int w, int lane, int rows) {
#pragma unroll
    for (int i = 0; i < RL; i++) sm[w][RL * lane + i] = m[i], ss[w][RL * lane + i] = s[i];
    __syncthreads();
    cls16t_put_partial<RB>(part, sm, ss, rows);
}

/* One row's combined (M, S) from the ranges' partials, in range order. */
__device__ __forceinline__ void cls16t_total(const float *__restrict__ part, int rows, int r, int splits, float &M,
                                             float &S) {
    M = -INFINITY;
    S = 0.0f;
    for (int k = 0; k < splits; k++) cls16t_merge(M, S, part[2 * ((size_t)k * rows + r)], part[2 * ((size_t)k * rows + r) + 1]);
}

/* Pass 2's losses of rows n .. n + RL - 1 (written by one thread of range 0): M + log S, 0 for an ignored row, NaN
 * (and the id reported) for a target outside [0, V) */
template <int RL>
__device__ __forceinline__ void cls16t_put_losses(float *__restrict__ losses, const int (&y)[RL], const float (&M)[RL],
                                                  const float (&S)[RL], int n, int V, int ignore_index,
                                                  cuda_input_error *err) {
#pragma unroll
    for (int k = 0; k < RL; k++) {
        if (y[k] == ignore_index) {
            losses[n + k] = 0.0f;
        } else if (y[k] >= 0 && y[k] < V) {
            losses[n + k] = M[k] + logf(S[k]);
        } else {
            cuda_report_bad_id(err, CUDA_BAD_ID_CLASSIFIER, n + k, y[k], V);
            losses[n + k] = __int_as_float(0x7fc00000);
        }
    }
}

__device__ __forceinline__ uint16_t cls16t_grad(float x, float M, float inv, bool target, float grad_scale) {
    const float p = expf(x - M) * inv;
    return f32_to_bf16((p - (target ? 1.0f : 0.0f)) * grad_scale);
}

#endif
