/*
 * gemm.h: forge's own GEMM kernels for the matrix units (issue 5), plain C.
 *
 *   forge_gemm_bf16_nt:  C (M,N) fp32 = A (M,K) . B (N,K)^T [+ bias (N)]
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

#ifdef __cplusplus
extern "C" {
#endif

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
