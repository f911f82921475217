/*
 * gemm.h: forge's own GEMM kernels for the matrix units (issue 5), plain C.
 *
 *   forge_gemm_bf16_nt:  C (M,N) fp32 = A (M,K) . B (N,K)^T [+ bias (N)]
 *   forge_gemm_bf16_nn_wgmma:  C (M,N) fp32 (+)= A (M,K) . B (K,N)       dX = dY . W
 *   forge_gemm_bf16_tn_wgmma:  C (M,N) fp32 (+)= A (K,M)^T . B (K,N)     dW = dY^T . X  (split-K)
 *
 * Both operands are bf16 and K-major (row-major, K contiguous): the forward
 * layout of a linear layer, Y = X . W^T with X (B*T, C) and W (OC, C).
 * Accumulation is fp32. Pointers are device pointers; `stream` is a
 * cudaStream_t (NULL = the default stream). Nothing here synchronises with
 * the host; errors of the launch itself are returned, errors of the running
 * kernel surface at the caller's next synchronising CUDA call.
 *
 * Paths (definitions in gemm_wgmma.cu):
 * - wgmma: sm_90a warpgroup MMA fed by TMA through a 4-stage shared-memory
 *   ring, persistent grid. Needs K % 8 == 0 (TMA's 16-byte row stride), A and
 *   B 16-byte aligned, C 8-byte aligned, a compute-capability 9.x device.
 *   Any M, N, K >= 1 otherwise (tails are zero-filled by TMA and bounds-checked
 *   in the epilogue).
 * - simt: a plain tiled fp32-FFMA kernel with scalar, bounds-checked loads;
 *   any shape and alignment. The explicit fallback for what wgmma refuses.
 * forge_gemm_bf16_nt picks wgmma when its conditions hold, else simt;
 * forge_gemm_bf16_nt_path says which it would pick. The _wgmma and _simt
 * entries force one path (the wgmma one returns FORGE_ERR_UNSUPPORTED with a
 * message instead of falling back), for benchmarks and tests.
 */
#ifndef FORGE_GEMM_H
#define FORGE_GEMM_H

#include "../../core/status.h"

/*
 * The backward layouts (wgmma only; same kernel template with wgmma's transpose flags, so the same device
 * and alignment rules: compute capability 9.x, A and B 16-byte aligned). All buffers are row-major.
 * accumulate != 0 makes C += the product (the backward's gradient accumulation), else C = the product.
 * - nn: A (M,K) K-contiguous (dY, (B*T, OC)), B (K,N) N-contiguous (W as stored, (OC, C)). Needs
 *   K % 8 == 0 and N % 8 == 0 (TMA's 16-byte row strides); any M.
 * - tn: A (K,M) M-contiguous (dY as stored, (B*T, OC)), B (K,N) N-contiguous (X, (B*T, C)); K = B*T.
 *   Needs M % 8 == 0 and N % 8 == 0; any K. Split-K: the K range is cut into `splits` slices, each
 *   work unit (tile, slice) writes its fp32 partial sums into its own M*N slice of `workspace`, then a
 *   second kernel adds the slices into C in the fixed order 0, 1, ... (no atomics: bit-reproducible for
 *   the same arguments on the same device). splits is chosen per call from a cost model and the SM count;
 *   forge_gemm_bf16_tn_workspace says how many bytes that plan wants (0 when it does not split). A smaller
 *   workspace (or NULL) caps splits at what fits (workspace_bytes / (M*N*4); < 2 means no split). The
 *   workspace must be 16-byte aligned and not shared with a concurrently running call.
 * Arguments these paths cannot take return FORGE_ERR_UNSUPPORTED with the reason (no SIMT fallback).
 */
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

forge_status forge_gemm_bf16_nn_wgmma(const void *A_bf16, const void *B_bf16, float *C, int M, int N, int K,
                                      int accumulate, void *stream);
forge_status forge_gemm_bf16_tn_workspace(int M, int N, int K, size_t *bytes);
forge_status forge_gemm_bf16_tn_wgmma(const void *A_bf16, const void *B_bf16, float *C, int M, int N, int K,
                                      int accumulate, void *workspace, size_t workspace_bytes, void *stream);

forge_status forge_gemm_bf16_nt(const void *A_bf16, const void *B_bf16, float *C, const float *bias, int M, int N,
                                int K, void *stream);
forge_status forge_gemm_bf16_nt_wgmma(const void *A_bf16, const void *B_bf16, float *C, const float *bias, int M,
                                      int N, int K, void *stream);
forge_status forge_gemm_bf16_nt_simt(const void *A_bf16, const void *B_bf16, float *C, const float *bias, int M,
                                     int N, int K, void *stream);
/* "wgmma" or "simt": the path forge_gemm_bf16_nt takes for these arguments
 * (device capability not included: a non-Hopper device fails in wgmma). */
const char *forge_gemm_bf16_nt_path(const void *A_bf16, const void *B_bf16, const float *C, int M, int N, int K);

#ifdef __cplusplus
}
#endif

#endif
