/*
 * gemm_mma.h: forge's warp-level tensor-core tf32 GEMM (rung 2 of
 * lab/notes/gemm-ladder.md; notes in lab/notes/gemm-mma.md), plain C: the tf32
 * trainer's dX and dW (--matmul tf32). The kernel template is
 * gemm_mma_kernel.cuh; its bf16 instantiation is the lab's (lab/gemm_mma/).
 *
 *   C (M,N) fp32 [+]= A . B [+ bias (N)]
 *
 * A, B fp32; each element is converted in registers with cvt.rna.tf32.f32
 * (round to nearest, ties AWAY from zero; cuBLAS's FAST_TF32 rounds ties to
 * even: the two differ only on exact ties, by one tf32 ulp = 2^-10 relative
 * of that element), then mma.sync m16n8k8 tf32 x tf32 -> fp32. Inputs already
 * representable in tf32 (low 13 mantissa bits zero) pass through the
 * conversion unchanged.
 *
 * Any M, N, K >= 0 and any alignment: when K * sizeof(element) is a multiple
 * of 16 and A, B are 16-byte aligned, tiles are loaded with 16-byte cp.async
 * (zero-fill outside the matrix); otherwise with bounds-checked scalar loads
 * (slower, same kernel otherwise). C is written with float2 stores when N is
 * even and C is 8-byte aligned, scalar stores otherwise; every store is
 * bounds-checked. bias may be NULL. Pointers are device pointers; stream is a
 * cudaStream_t (NULL = default stream). Nothing synchronises with the host;
 * launch errors are returned, errors of the running kernel surface at the
 * caller's next synchronising CUDA call. Needs sm_80+ (built for sm_90a).
 */
#ifndef FORGE_GEMM_MMA_H
#define FORGE_GEMM_MMA_H

#include <stddef.h>

#include "../../base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tf32 kernel in the three training layouts:
 *   C (M,N) [+]= A . B [+ bias (N)]
 * a_mn = 0: A stored (M,K) (K contiguous); 1: stored (K,M) (M contiguous).
 * b_mn = 0: B stored (N,K) (K contiguous); 1: stored (K,N) (N contiguous).
 * Instantiated: (0,0) forward Y = X W^T, (0,1) dX = dY W, (1,1) dW = dY^T X;
 * (1,0) returns FORGE_ERR_UNSUPPORTED. accumulate != 0: C += A.B (+ bias),
 * else C = A.B (+ bias). MN-major operands are read with 16-byte cp.async when
 * their contiguous dimension is a multiple of 4 (else scalar loads).
 * Deterministic: every element is summed over K in a fixed order by one thread.
 * splits > 1: split-K (for small outputs with a long K, dW): K is cut into
 * at most `splits` ranges of whole 32-wide K tiles; each writes its partial
 * C into work (splits * M * N floats, else FORGE_ERR_ARG), and a second
 * kernel sums the partials in split order, then adds bias / accumulates
 * into C: deterministic, no atomics. work must stay untouched until the
 * stream passes the call. splits <= 1: no workspace, one pass. */
forge_status forge_gemm_mma_tf32(const float *A, int a_mn, const float *B, int b_mn, float *C, const float *bias,
                                 int M, int N, int K, int accumulate, int splits, float *work, size_t work_floats,
                                 void *stream);
/* The split count forge_gemm_mma_tf32 should get: 1 when the 128x128 tiles
 * already give one per SM; else enough splits for two CTAs per SM, at least
 * 4 K tiles (128 of K) per split, at most 16, and within work_floats. A
 * function of the shape, the SM count and the workspace only. */
int forge_gemm_mma_tf32_splits(int M, int N, int K, int num_sms, size_t work_floats);

#ifdef __cplusplus
}
#endif

#endif
