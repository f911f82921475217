/*
 * gemm.h: forge's own GEMM kernels for the matrix units, plain C.
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
 * kernel surface at the caller's next synchronising CUDA call. Where an entry
 * takes `pdl`, nonzero launches its kernels with programmatic dependent launch
 * (pdl.cuh): each may start under the tail of the kernel before it on the
 * stream, and waits for that kernel before it touches global memory (the same
 * results); 0 launches them plainly.
 *
 * Paths (definitions in gemm_wgmma.cu, kernels in gemm_wgmma_kernel.cuh):
 * - wgmma: sm_90a warpgroup MMA fed by TMA through a 4-stage shared-memory
 *   ring, persistent grid. Needs K % 8 == 0 (TMA's 16-byte row stride), A and
 *   B 16-byte aligned, C 8-byte aligned, a compute-capability 9.x device.
 *   Any M, N, K >= 1 otherwise (tails are zero-filled by TMA and bounds-checked
 *   in the epilogue). forge_gemm_bf16_nt_wgmma runs a product (+ bias) whose
 *   C allows the TMA store (N % 4 == 0, C 16-byte aligned) on the ping-pong
 *   kernel (forge_gemm_bf16_nt_pp, gemm_fp8.h), the rest on the cooperative
 *   one with the direct store.
 * - simt: a plain tiled fp32-FFMA kernel with scalar, bounds-checked loads;
 *   any shape and alignment. The explicit fallback for what wgmma refuses.
 * forge_gemm_bf16_nt picks wgmma when its conditions hold, else simt;
 * forge_gemm_bf16_nt_path says which it would pick. The _wgmma and _simt
 * entries take one path (the wgmma one returns FORGE_ERR_UNSUPPORTED with a
 * message instead of falling back).
 */
#ifndef FORGE_GEMM_H
#define FORGE_GEMM_H

#include "../../base/status.h"

/*
 * The backward layouts (wgmma only; same kernel template with wgmma's transpose flags, so the same device
 * and alignment rules: compute capability 9.x, A and B 16-byte aligned). All buffers are row-major.
 * accumulate != 0 makes C += the product (the backward's gradient accumulation), else C = the product.
 * - nn: A (M,K) K-contiguous (dY, (B*T, OC)), B (K,N) N-contiguous (W as stored, (OC, C)). Needs
 *   K % 8 == 0 and N % 8 == 0 (TMA's 16-byte row strides); any M. C stores through TMA where it can
 *   (no accumulate, N % 4 == 0, C 16-byte aligned).
 * - tn: A (K,M) M-contiguous (dY as stored, (B*T, OC)), B (K,N) N-contiguous (X, (B*T, C)); K = B*T.
 *   Needs M % 8 == 0 and N % 8 == 0; any K. Split-K: the K range is cut into `splits` slices, each
 *   work unit (tile, slice) writes its fp32 partial sums into its own M*N slice of `workspace`, then a
 *   second kernel adds the slices into C in the fixed order 0, 1, ... (no atomics: bit-reproducible for
 *   the same arguments on the same device). The plan is chosen per call from the shape and the SM count
 *   (chosen by measurement: lab/notes/gemm-bf16.md): 192 x 192 tiles (two consumer warpgroups splitting N)
 *   at the splits that make one wave of units, where that wave keeps >= 90% of the SMs busy with units of
 *   >= 64 K slices (the GPT-2 MLP dW at 16 x 1024 tokens); elsewhere a cost model's tile (128 x 256 or
 *   128 x 128) and splits, the partials stored through TMA where the slices allow it (M % 128 == 0,
 *   N % 4 == 0). forge_gemm_bf16_tn_workspace says how many bytes the plan wants (0 when it does not
 *   split). A smaller workspace (or NULL) caps splits at what fits (workspace_bytes / (M*N*4); < 2 means no
 *   split). The workspace must be 16-byte aligned and not shared with a concurrently running call.
 * Arguments these paths cannot take return FORGE_ERR_UNSUPPORTED with the reason (no SIMT fallback).
 */
#include <stddef.h>

/*
 * Fused epilogues (wgmma only). What the kernel does with each fp32 accumulator value acc of C[m][n] before the
 * single store, in this order:
 *     v = acc + bias[n]                          bias (N) fp32, or NULL (no bias)
 *     pre_out[m][n] = v                          only with gelu; pre_out (M,N) of C's type, or NULL (no store)
 *     v = gelu(v)                                gelu != 0: the tanh approximation (GPT-2, elementwise.cu)
 *     v = v * gelu'(dgelu_pre[m][n])             dgelu_pre (M,N), or NULL; nn only (dpre = dA . gelu'(pre))
 *     v = v + residual[m][n]                     residual (M,N), or NULL; residual == C is C += the rest
 *     C[m][n] = v                                fp32, or bf16 (round to nearest even) when out_bf16
 * residual and dgelu_pre are fp32, except in the nn bf16 form (out_bf16 on nn), where they are bf16 like C:
 * there residual == C is the bf16 dX accumulation C = rn(C + d), d = dA . W [* gelu'(pre)], in one pass.
 * A zeroed descriptor (or a NULL one) is the plain GEMM. Built combinations (others return
 * FORGE_ERR_UNSUPPORTED naming what is missing): nt: any bias / residual / pre_out with gelu on or off and
 * out_bf16 on or off, no dgelu_pre; nn: any residual with dgelu_pre or without, fp32 or bf16 out (bf16 with a
 * residual: stored from the registers; bf16 with dgelu_pre: through TMA at BN 128), no bias or gelu.
 * Row-major (M,N) buffers with row stride N. C, pre_out, residual and dgelu_pre must be 4-byte aligned (2 for a
 * bf16 C / pre_out); every buffer except residual (which may be C) must not overlap another. 2-element vector
 * accesses are used when N is even and every (M,N) buffer allows them (8-byte aligned fp32, 4-byte bf16).
 * The store: C (and pre_out) are staged in shared memory and stored by TMA wherever that is allowed (no residual
 * except nn's bf16 one without dgelu_pre; fp32 C: N % 4 == 0, bf16 C: N % 8 == 0; C, pre_out, dgelu_pre, residual
 * 16-byte aligned), else stored from the
 * registers; the same results either way (the TMA store overlaps the next tile's mainloop: chosen by
 * measurement, lab/notes/gemm-bf16.md). forge_gemm_bf16_epi_store says which one a call takes.
 * Kernels (nt): a bf16 C without residual that takes the TMA store (bias or not, GELU with pre_out or without, or
 * none) runs on the bf16 ping-pong kernel (forge_gemm_bf16_nt_pp_bf16, gemm_fp8.h: the same bits, one warpgroup's
 * epilogue under the other's MMAs); everything else on the cooperative kernel.
 */
typedef struct {
    const float *bias;      /* (N) */
    const void *residual;   /* (M,N) fp32 (nn bf16: bf16); may be C (nt: fp32 C only): C += the rest */
    void *pre_out;          /* (M,N), C's type: the pre-activation, for the GELU backward */
    const void *dgelu_pre;  /* (M,N) fp32 (nn bf16: bf16) pre-activation: multiplies by gelu'(pre) (nn only) */
    int gelu;               /* apply GELU (tanh approximation) after the bias */
    int out_bf16;           /* C (and pre_out) are bf16 (uint16_t bit patterns), else fp32 */
} forge_gemm_epilogue;

#ifdef __cplusplus
extern "C" {
#endif

/* C = epilogue(A (M,K) . B (N,K)^T): the forward layout with a fused epilogue (epi NULL: plain, fp32 C).
 * Same rules as forge_gemm_bf16_nt_wgmma (no SIMT fallback: refusals are FORGE_ERR_UNSUPPORTED). */
forge_status forge_gemm_bf16_nt_epi(const void *A_bf16, const void *B_bf16, void *C, int M, int N, int K,
                                    const forge_gemm_epilogue *epi, void *stream, int pdl);
/* C = epilogue(A (M,K) . B (K,N)): dX with a fused epilogue; dgelu_pre gives dpre = (dY . W) * gelu'(pre).
 * Same rules as forge_gemm_bf16_nn_wgmma. */
forge_status forge_gemm_bf16_nn_epi(const void *A_bf16, const void *B_bf16, void *C, int M, int N, int K,
                                    const forge_gemm_epilogue *epi, void *stream, int pdl);
/* "tma" or "direct": the store forge_gemm_bf16_nt_epi (nn = 0) / _nn_epi (nn = 1) take for this C, N and
 * epilogue (epi NULL: plain); for arguments the entries accept. */
const char *forge_gemm_bf16_epi_store(int nn, const void *C, int N, const forge_gemm_epilogue *epi);

forge_status forge_gemm_bf16_nn_wgmma(const void *A_bf16, const void *B_bf16, float *C, int M, int N, int K,
                                      int accumulate, void *stream, int pdl);
forge_status forge_gemm_bf16_tn_workspace(int M, int N, int K, size_t *bytes);
forge_status forge_gemm_bf16_tn_wgmma(const void *A_bf16, const void *B_bf16, float *C, int M, int N, int K,
                                      int accumulate, void *workspace, size_t workspace_bytes, void *stream, int pdl);
/* forge_gemm_bf16_tn_wgmma (the same plan, the same C bits) that, where its plan is the 128 x 256 tile (split-K or
 * unsplit) and dbias_ws (16-byte aligned) holds splits x M floats, also writes the bias gradient's partials: row s
 * of dbias_ws (dbias_ws[s*M + m], s < splits) = the sum of A (K,M)'s column m over split s's K range, and sets
 * *dbias_rows = splits; the caller adds the rows in order s = 0, 1, ... Elsewhere (the C192 or 128 x 128 plan, a
 * short dbias_ws) *dbias_rows = 0 and dbias_ws is untouched: the caller sums A's columns itself. The fused sums
 * ride on the producer warpgroup's idle warps (gemm_dbias_unit, gemm_wgmma_kernel.cuh): 1.13x / 1.18x the GEMM +
 * a separate column sum at the GPT-2 124M qkv / attention projection dW, 0.81x on the C192 kernel (H200,
 * lab/notes/gemm-bf16.md), hence the 128 x 256 plans only. The partition follows the plan (the SM count), so the
 * sums' bits can differ between devices like C's. */
forge_status forge_gemm_bf16_tn_wgmma_dbias(const void *A_bf16, const void *B_bf16, float *C, int M, int N, int K,
                                            int accumulate, void *workspace, size_t workspace_bytes, float *dbias_ws,
                                            size_t dbias_ws_floats, int *dbias_rows, void *stream, int pdl);

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
