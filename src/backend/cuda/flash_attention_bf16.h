/*
 * flash_attention_bf16.h: fused causal attention on the tensor cores
 * (notes in lab/notes/flash-attention.md), plain C.
 *
 * Layout: Q (B, Tq, H, D), K and V (B, Tk, Hkv, D), bf16 (uint16 bit
 * patterns). Element (b, t, h, d) of Q is at q[(b*Tq + t)*q_stride + h*D + d]
 * (likewise K, V with Tk, k_stride, v_stride): with a stride of
 * (H + 2*Hkv)*D, Q/K/V are slices of one packed qkv buffer. O and dO share
 * o_stride (dense: H*D).
 *
 * - Causal with bottom-right alignment: query i sees keys j <= i + Tk - Tq.
 *   A query row that sees no key gets out = 0 and lse = -inf (never NaN);
 *   its gradients are 0.
 * - GQA: query head h reads kv head h / (H / Hkv); Hkv must divide H.
 * - D = 64 or 128 (compile-time tiles); any other D is FORGE_ERR_UNSUPPORTED.
 * - scale = 1/sqrt(D) is folded in; products accumulate in fp32; P and dS
 *   are rounded to bf16 for the second matmuls (the usual flash precision).
 * - lse (B, H, Tq) fp32, natural log: log sum_j exp(scale * q.k_j).
 * - Strides must be multiples of 8 elements and every pointer 16-byte
 *   aligned (16-byte cp.async); otherwise FORGE_ERR_UNSUPPORTED.
 *
 * Backward (no unordered reduction, deterministic):
 *   delta = rowsum(dO * O) (fp32) into the caller's scratch `delta` of
 *   FORGE_FLASH_BF16_BWD_SCRATCH(B, H, Tq, D) floats (op_list.h; the Hopper
 *   kernels keep lse*log2e and delta there packed, at D = 128 also the fused
 *   kernel's turn counters and fp32 dQ accumulator; the mma.sync ones delta
 *   (B,H,Tq)); dQ over query blocks and dK/dV over key blocks (a GQA kv head
 *   loops over its group's query heads inside), or on the Hopper kernels at
 *   D = 128 one fused kernel over key blocks that adds each block's dQ share in
 *   a fixed order. dq (B,Tq,H,D), dk and dv (B,Tk,Hkv,D) are dense fp32 and
 *   OVERWRITTEN (not accumulated).
 *
 * Kernels forge does not run (the mma.sync forward with 128 query rows, the
 * wgmma forward's other consumer schedules, the wgmma backward's other dK/dV
 * and dQ kernels) are the lab's (lab/flash/).
 *
 * Pointers are device pointers; stream is a cudaStream_t (NULL = default).
 * Launch errors are returned; errors of a running kernel surface at the next
 * synchronising call. Where an entry takes pdl, nonzero launches its Hopper
 * kernels with programmatic dependent launch (backend/cuda/pdl.cuh: each may
 * start under the previous kernel's tail and waits for it before touching
 * memory; the same results); the mma.sync kernels always launch plainly.
 */
#ifndef FORGE_FLASH_ATTENTION_BF16_H
#define FORGE_FLASH_ATTENTION_BF16_H

#include "../../base/status.h"
#include "../op_list.h" /* FORGE_FLASH_BF16_ROWSTATS */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int B, Tq, Tk, H, Hkv, D;
    long long q_stride, k_stride, v_stride, o_stride; /* elements between consecutive tokens */
} forge_flash_shape;

/* The forward forge runs: the Hopper (sm_90a) kernel on TMA + wgmma (forge_flash_bf16_forward_wgmma), and where
 * that refuses (FORGE_ERR_UNSUPPORTED: not an sm_90 device, a layout TMA cannot describe) the mma.sync kernel
 * (forge_flash_bf16_forward_mma). */
forge_status forge_flash_bf16_forward(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                      void *out_bf16, float *lse, void *stream, int pdl);

/* The backward forge runs: the Hopper (sm_90a) kernels on TMA + wgmma (forge_flash_bf16_backward_wgmma), and
 * where those refuse (FORGE_ERR_UNSUPPORTED: not an sm_90 device, Tq == 0 or Tk == 0, a layout TMA cannot
 * describe) the mma.sync kernels (forge_flash_bf16_backward_mma). */
forge_status forge_flash_bf16_backward(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                       const void *out_bf16, const void *dout_bf16, const float *lse, float *delta,
                                       float *dq, float *dk, float *dv, void *stream);

/* Where the Hopper backward stores dq, dk, dv: bf16 = 0, fp32 dense (B, Tq, H, D) and (B, Tk, Hkv, D), as the
 * entries above; bf16 = 1, bf16 rows at the given token strides (elements; the packed qkv gradient of a layer, say),
 * written rn(0 + d) or, with accumulate, rn(old + d): the bits of the fp32 result d added into a bf16 gradient with
 * one rounding, without the fp32 round trip. */
typedef struct {
    void *dq, *dk, *dv;
    long long dq_stride, dk_stride, dv_stride;
    int bf16, accumulate;
} forge_flash_grads;

/* The backward with its gradients stored as g says, on the Hopper kernels only (forge_flash_bf16_backward_wgmma's
 * refusals, and FORGE_ERR_UNSUPPORTED for bf16 gradients with a pointer not 16-byte aligned or an odd stride: the
 * caller then runs forge_flash_bf16_backward into fp32 and adds). */
forge_status forge_flash_bf16_backward_into(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                            const void *out_bf16, const void *dout_bf16, const float *lse,
                                            float *delta, const forge_flash_grads *g, void *stream, int pdl);

/* The two kernels of each default above, by name (same contract and results up to summation order), so that
 * each can be tested and timed on its own: a wgmma entry returns its refusal instead of falling back.
 *
 * forge_flash_bf16_forward_wgmma (flash_attention_bf16_wgmma.cu): FA3-style, a producer (warp at D = 64,
 * warpgroup at D = 128) and two consumer warpgroups of 64 query rows, P kept in registers as the A operand of
 * P.V; two CTAs per SM at D = 64; at D = 128 one persistent CTA per SM whose warpgroups run each tile's softmax
 * under the previous tile's P.V and take turns issuing their products. FORGE_ERR_UNSUPPORTED on a non-Hopper
 * device or a layout TMA cannot describe; Tk == 0 runs the mma.sync forward.
 * forge_flash_bf16_forward_wgmma_occupancy: the CTAs per SM the runtime keeps resident for its kernel at head
 * dim D (64 or 128; cudaOccupancyMaxActiveBlocksPerMultiprocessor): 2 and 1 by design.
 * forge_flash_bf16_forward_mma (flash_attention_bf16.cu): mma.sync m16n8k16, 64 query rows (4 warps) per CTA.
 * forge_flash_bf16_backward_wgmma (flash_attention_bf16_wgmma_bwd.cu): at D = 64 the same three kernels as the
 * mma.sync backward on TMA + wgmma, at D = 128 the row statistics and one fused dK/dV/dQ kernel
 * (flash_attention_bf16_wgmma_bwd_fused.cu). FORGE_ERR_UNSUPPORTED on a non-Hopper device, Tq == 0 or Tk == 0, or
 * a layout TMA cannot describe.
 * forge_flash_bf16_backward_mma (flash_attention_bf16.cu): mma.sync m16n8k16. */
forge_status forge_flash_bf16_forward_wgmma(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                            void *out_bf16, float *lse, void *stream, int pdl);
forge_status forge_flash_bf16_forward_wgmma_occupancy(int D, int *ctas_per_sm);
forge_status forge_flash_bf16_forward_mma(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                          void *out_bf16, float *lse, void *stream);
forge_status forge_flash_bf16_backward_wgmma(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                             const void *out_bf16, const void *dout_bf16, const float *lse,
                                             float *delta, float *dq, float *dk, float *dv, void *stream);
forge_status forge_flash_bf16_backward_mma(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                           const void *out_bf16, const void *dout_bf16, const float *lse,
                                           float *delta, float *dq, float *dk, float *dv, void *stream);

/* The argument check every entry above runs (shared by the mma.sync and wgmma files). */
forge_status forge_flash_check_shape(const char *what, const forge_flash_shape *s, const void *const *ptrs,
                                     int nptrs);

/* The first backward kernel, in two layouts. forge_flash_bf16_backward_delta (the mma.sync backward): delta =
 * rowsum(dO * O) into delta (B, H, Tq) fp32. forge_flash_bf16_backward_rowstats (the wgmma backward): into rows
 * (FORGE_FLASH_BF16_ROWSTATS(B, H, Tq) floats) the plane of lse*log2e (-inf -> 0) and then the plane of delta,
 * each (B, H) rows of Tq padded with zeros to FORGE_FLASH_BF16_ROWS_PAD. Arguments as checked by
 * forge_flash_check_shape (D = 64 or 128); stream a cudaStream_t. */
forge_status forge_flash_bf16_backward_delta(const forge_flash_shape *s, const void *out_bf16, const void *dout_bf16,
                                             float *delta, void *stream, int pdl);
forge_status forge_flash_bf16_backward_rowstats(const forge_flash_shape *s, const void *out_bf16,
                                                const void *dout_bf16, const float *lse, float *rows, void *stream,
                                                int pdl);

#ifdef __cplusplus
}
#endif

#endif
