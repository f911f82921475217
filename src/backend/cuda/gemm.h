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
 *   in the epilogue). forge_gemm_bf16_nt_wgmma runs a product (+ bias) whose
 *   C allows the TMA store (N % 4 == 0, C 16-byte aligned) on the ping-pong
 *   kernel (forge_gemm_bf16_nt_pp, gemm_fp8.h), the rest on the cooperative
 *   one; FORGE_BF16_SCHED=coop keeps every product on the cooperative kernel.
 * - simt: a plain tiled fp32-FFMA kernel with scalar, bounds-checked loads;
 *   any shape and alignment. The explicit fallback for what wgmma refuses.
 * forge_gemm_bf16_nt picks wgmma when its conditions hold, else simt;
 * forge_gemm_bf16_nt_path says which it would pick. The _wgmma and _simt
 * entries force one path (the wgmma one returns FORGE_ERR_UNSUPPORTED with a
 * message instead of falling back), for benchmarks and tests.
 */
#ifndef FORGE_GEMM_H
#define FORGE_GEMM_H

#include "../../base/status.h"

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

/*
 * Fused epilogues (wgmma only). What the kernel does with each fp32 accumulator value acc of C[m][n] before the
 * single store, in this order:
 *     v = acc + bias[n]                          bias (N) fp32, or NULL (no bias)
 *     pre_out[m][n] = v                          only with gelu; pre_out (M,N) of C's type, or NULL (no store)
 *     v = gelu(v)                                gelu != 0: the tanh approximation (GPT-2, elementwise.cu)
 *     v = v * gelu'(dgelu_pre[m][n])             dgelu_pre (M,N) fp32, or NULL; nn only (dpre = dA . gelu'(pre))
 *     v = v + residual[m][n]                     residual (M,N) fp32, or NULL; residual == C is C += (fp32 C)
 *     C[m][n] = v                                fp32, or bf16 (round to nearest even) when out_bf16
 * A zeroed descriptor (or a NULL one) is the plain GEMM. Built combinations (others return
 * FORGE_ERR_UNSUPPORTED naming what is missing): nt: any bias / residual / pre_out with gelu on or off and
 * out_bf16 on or off, no dgelu_pre; nn: any residual with dgelu_pre or without, fp32 out, no bias or gelu.
 * Row-major (M,N) buffers with row stride N. C, pre_out, residual and dgelu_pre must be 4-byte aligned (2 for a
 * bf16 C / pre_out); every buffer except residual (which may be C) must not overlap another. 2-element vector
 * accesses are used when N is even and every (M,N) buffer allows them (8-byte aligned fp32, 4-byte bf16).
 */
typedef struct {
    const float *bias;      /* (N) */
    const float *residual;  /* (M,N) fp32; may be C (fp32 C only): C += the rest */
    void *pre_out;          /* (M,N), C's type: the pre-activation, for the GELU backward */
    const float *dgelu_pre; /* (M,N) fp32 pre-activation: multiplies by gelu'(pre) (nn only) */
    int gelu;               /* apply GELU (tanh approximation) after the bias */
    int out_bf16;           /* C (and pre_out) are bf16 (uint16_t bit patterns), else fp32 */
    int store_tma;          /* stage C in shared memory and store it with TMA: the default of
                             * forge_gemm_bf16_nt_wgmma and forge_gemm_bf16_nn_wgmma (no accumulate);
                             * measured 0.97-1.02x cuBLAS at K=768 forward vs 0.83-0.89x direct; bias+GELU
                             * 2.06x the three passes (direct: 1.59x), GELU backward 1.16x (direct: 0.46x).
                             * Recommended wherever it is accepted. nt: with bias,
                             * gelu, pre_out and / or out_bf16; nn: plain or dgelu_pre (tile width 128). No
                             * residual. fp32 C: N % 4 == 0; bf16 C: N % 8 == 0; C, pre_out, dgelu_pre 16-byte
                             * aligned; else refused. Same results as the direct store. */
} forge_gemm_epilogue;

#ifdef __cplusplus
extern "C" {
#endif

/* C = epilogue(A (M,K) . B (N,K)^T): the forward layout with a fused epilogue (epi NULL: plain, fp32 C).
 * Same rules as forge_gemm_bf16_nt_wgmma (no SIMT fallback: refusals are FORGE_ERR_UNSUPPORTED). */
forge_status forge_gemm_bf16_nt_epi(const void *A_bf16, const void *B_bf16, void *C, int M, int N, int K,
                                    const forge_gemm_epilogue *epi, void *stream);
/* C = epilogue(A (M,K) . B (K,N)): dX with a fused epilogue; dgelu_pre gives dpre = (dY . W) * gelu'(pre).
 * Same rules as forge_gemm_bf16_nn_wgmma. */
forge_status forge_gemm_bf16_nn_epi(const void *A_bf16, const void *B_bf16, void *C, int M, int N, int K,
                                    const forge_gemm_epilogue *epi, void *stream);

forge_status forge_gemm_bf16_nn_wgmma(const void *A_bf16, const void *B_bf16, float *C, int M, int N, int K,
                                      int accumulate, void *stream);
forge_status forge_gemm_bf16_tn_workspace(int M, int N, int K, size_t *bytes);
/* How a split TN call reduces its splits (both deterministic, fixed order 0..S-1, no atomics on the data):
 * - PASS: every split writes an M*N fp32 slice, then a second kernel sums the slices into C.
 * - INKERNEL: every split writes its tile's partial to a per-(tile, split) slot and arrives on a per-tile counter
 *   in the workspace (zeroed by a cudaMemsetAsync on the stream before the launch); the CTA that arrives last
 *   sums the slots in order 0..S-1 while they are still in L2 and stores C. Same plan (tile width, splits) as
 *   PASS unless the workspace holds fewer padded slots. Experimental until measured on the H200.
 * - STREAMK: not split-K at all: the tiles x K-tiles iterations are cut into one contiguous range per SM, so every
 *   SM does the same work; a tile shared by consecutive CTAs is reduced as in INKERNEL (fixed order of the CTAs,
 *   bit-reproducible on one device model; a different SM count cuts K differently). Needs the workspace.
 * - PASS_TMA: PASS with each split's partial tile staged in shared memory and stored by TMA (the consumers go on
 *   to their next unit while the store drains, as the NT / NN TMA-store epilogue); the same sums in the same
 *   order (bit-identical to PASS). Needs M % 128 == 0 (a box never crosses into the next split's slice), N % 4
 *   == 0 and a 16-byte aligned workspace; elsewhere it is PASS.
 * - PASS_T192: PASS on 192 x 192 tiles (three consumer warpgroups, 512 threads) at the splits that fill one wave
 *   (the GPT-2 MLP dW: 64 tiles x 2 splits = 128 units on 132 SMs, where 128 x 256 tiles need 72 x 5 = 360).
 *   Sums split at other K boundaries than PASS: equal within fp32 rounding, not bit for bit.
 * - PASS_C192: PASS_T192's plan on a kernel with two consumer warpgroups that split the tile's N (each 192 rows
 *   x 96 columns, three wgmma m64n96k16 per k16 step; B staged as 32-wide boxes with the 64-byte swizzle), the
 *   layout of cuBLAS's dW kernel. Same K split as PASS_T192 (measured bit-identical to it).
 * - DEFAULT (what forge_gemm_bf16_tn_wgmma uses): PASS_C192 where its one-wave plan keeps >= 90% of the SMs busy
 *   with units of >= 32 K slices (the GPT-2 MLP and attention-projection dW), otherwise the cost model's tile
 *   (128 x 256 or 128 x 128) and splits with the partials through the TMA store where allowed (PASS_TMA), else
 *   PASS. Measured on the H200 (session 5) against cuBLAS: 0.98x / 1.00x (MLP fc / proj), 0.98x (qkv), 1.00x
 *   (attn proj). FORGE_GEMM_TN_TILE=c192 / 128 forces / rules out C192, =192 lets the cost model take the
 *   192 x 192 three-warpgroup tile; FORGE_GEMM_TN_STORE=direct stores the partials from the registers (read once
 *   per process).
 * forge_gemm_bf16_tn_workspace's size is enough for any of them. */
typedef enum {
    FORGE_GEMM_TN_REDUCE_DEFAULT = 0,
    FORGE_GEMM_TN_REDUCE_PASS = 1,
    FORGE_GEMM_TN_REDUCE_INKERNEL = 2,
    FORGE_GEMM_TN_REDUCE_STREAMK = 3,
    FORGE_GEMM_TN_REDUCE_PASS_TMA = 4,
    FORGE_GEMM_TN_REDUCE_PASS_T192 = 5,
    FORGE_GEMM_TN_REDUCE_PASS_C192 = 6
} forge_gemm_tn_reduce;
forge_status forge_gemm_bf16_tn_wgmma_reduce(const void *A_bf16, const void *B_bf16, float *C, int M, int N, int K,
                                             int accumulate, void *workspace, size_t workspace_bytes,
                                             forge_gemm_tn_reduce reduce, void *stream);
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
