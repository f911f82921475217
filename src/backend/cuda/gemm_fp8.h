/*
 * gemm_fp8.h: forge's Hopper fp8 GEMM, plain C, and the tf32 and bf16 ping-pong GEMMs that share its
 * kernel body (gemm_wgmma_fp8_kernel.cuh; the entry points are in gemm_wgmma_fp8.cu).
 *
 *   C (M,N) = (a_scale * b_scale) * A (M,K) . B (N,K)^T      fp32 or bf16 C
 *
 * NT layout only: both operands fp8, K-major (row-major, K contiguous), which
 * is the only layout fp8 wgmma reads; the trainer transposes as needed.
 * Format combinations: e4m3 x e4m3 (forward) and e5m2 x e4m3 (gradient x
 * weight); the other two are refused (wgmma has them, forge does not build
 * them). a_scale and b_scale are the per-tensor dequantisation scales, applied
 * once in the epilogue (C = a_scale * b_scale * sum).
 *
 * Accumulation (lab/notes/hopper-catalog.md: QGMMA keeps only ~14 mantissa bits of
 * its running sum and truncates): every 128 of K, the wgmma partial sum is
 * added in fp32 to a separate accumulator ("promotion"), so the error does not
 * grow with K. The kernel is picked per shape by a measured rule
 * (lab/notes/gemm-fp8.md): the chunked promotion at 256-wide tiles (a stage's
 * MMAs issued per 64-column chunk into two alternating temporaries) where
 * 256-wide tiles cover at least half the SMs, else the serial promotion at
 * 128- or 192-wide tiles. Both do the same fp32 adds in the same K order.
 * The other accumulation schemes that were tried (fast accumulation, pipelined
 * or 144-wide promotion, 2-CTA clusters, ...) are the lab's variants
 * (lab/gemm_fp8/).
 *
 * Epilogue: where C allows it -- fp32 C with N % 4 == 0, bf16 C with N % 8 == 0,
 * C 16-byte aligned -- the kernel stages C in shared memory and stores it with
 * TMA (the consumers go on to the next tile while the stores drain); otherwise
 * it stores from the registers. Both write the same values.
 *
 * Needs: a compute-capability 9.x device, M, N >= 1, K >= 16 and K % 16 == 0
 * (TMA's 16-byte row strides), A and B 16-byte aligned, C aligned to its
 * element. Any M and N (tails are zero-filled by TMA, clipped by the TMA store
 * or bounds-checked by the direct one). Anything else returns FORGE_ERR_UNSUPPORTED with the reason.
 * Pointers are device pointers; stream is a cudaStream_t (NULL = default).
 * Nothing synchronises with the host (errors of the running kernel surface
 * at the caller's next synchronising CUDA call).
 */
#ifndef FORGE_GEMM_FP8_H
#define FORGE_GEMM_FP8_H

#include "../../base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FORGE_FP8_E4M3 = 0, FORGE_FP8_E5M2 = 1 } forge_fp8_format;
typedef enum { FORGE_GEMM_OUT_F32 = 0, FORGE_GEMM_OUT_BF16 = 1 } forge_gemm_out;

forge_status forge_gemm_fp8_nt(const void *A, forge_fp8_format a_fmt, const void *B, forge_fp8_format b_fmt, void *C,
                               forge_gemm_out c_type, float a_scale, float b_scale, int M, int N, int K, void *stream);

/*
 * tf32 on the same kernel body: C (M,N) fp32 = A (M,K) . B (N,K)^T with A, B fp32 K-major, read by wgmma .tf32
 * (k8; the low 13 mantissa bits of each input are ignored: round the inputs to tf32 first for round-to-nearest
 * semantics), fp32 accumulation in the tensor core (no promotion needed). Schedule by a measured rule
 * (lab/notes/gemm-fp8.md): where C takes the TMA store (N % 4 == 0, C 16-byte aligned) and K <= 1024, ping-pong
 * (each consumer warpgroup owns whole 128 x 128 tiles and the two take turns, one's epilogue under the other's
 * MMAs); otherwise the cooperative schedule (both warpgroups on one 128 x 256 or 128 x 128 tile). Needs
 * K % 4 == 0 (16-byte TMA row strides), A and B 16-byte aligned, C 4-byte aligned, compute capability 9.x; any
 * M, N. Otherwise FORGE_ERR_UNSUPPORTED with the reason.
 */
forge_status forge_gemm_tf32_nt(const float *A, const float *B, float *C, int M, int N, int K, void *stream);

/* bf16 C (M,N) fp32 = A (M,K) . B (N,K)^T [+ bias (N)] (A, B bf16, K-major) on the ping-pong schedule: 128 x 128
 * tiles, one per consumer warpgroup, taking turns (the tf32 ping-pong kernel's body), C through the TMA store. What
 * forge_gemm_bf16_nt_wgmma (gemm.h) runs wherever C allows the TMA store; the cooperative kernels of gemm_wgmma.cu
 * keep the other fused epilogues (GELU, pre-activation, residual, bf16 out). bias NULL: none.
 * FORGE_ERR_UNSUPPORTED unless K % 8 == 0, A and B 16-byte aligned, N % 4 == 0 and C 16-byte aligned. */
forge_status forge_gemm_bf16_nt_pp(const void *A, const void *B, float *C, const float *bias, int M, int N, int K,
                                   void *stream);

/* bf16 C (M,N) = epilogue(A (M,K) . B (N,K)^T) (A, B bf16, K-major) on the same ping-pong schedule, with the fused
 * epilogue of gemm.h's forge_gemm_bf16_nt_epi in its bf16 forms, per value exactly that kernel's sequence (so the
 * same bits): v = acc + bias[n] (bias NULL: none); with gelu, pre_out[m][n] = rn(v) (pre_out NULL: not stored) and
 * v = gelu(v); C = rn(v) (round to nearest even). C and pre_out through the TMA store. What forge_gemm_bf16_nt_epi
 * runs for these epilogues wherever its TMA store is allowed. FORGE_ERR_UNSUPPORTED unless K % 8 == 0, A and B
 * 16-byte aligned, N % 8 == 0, C and pre_out 16-byte aligned, bias 4-byte aligned, pre_out only with gelu.
 * pdl != 0: launched with programmatic dependent launch (pdl.cuh; gemm.h). */
forge_status forge_gemm_bf16_nt_pp_bf16(const void *A, const void *B, void *C, const float *bias, void *pre_out,
                                        int gelu, int M, int N, int K, void *stream, int pdl);

#ifdef __cplusplus
}
#endif

#endif
