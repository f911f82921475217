/*
 * flash16_variants.h: the lab's variants of forge's bf16 flash attention
 * (src/backend/cuda/flash_attention_bf16.h: same layouts, contract and
 * results up to summation order), by name, for `forge-lab test flash16` and
 * `forge-lab bench attention-variants`. What forge runs is not here:
 * forge_flash_bf16_forward / _backward (the wgmma kernels, mma.sync where
 * those refuse). Measurements: lab/notes/flash.md. Plain C.
 */
#ifndef FORGE_LAB_FLASH16_VARIANTS_H
#define FORGE_LAB_FLASH16_VARIANTS_H

#include <stddef.h>

#include "../../src/backend/cuda/flash_attention_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The mma.sync forward with 128 query rows per CTA (8 warps sharing each K/V tile; forge_flash_bf16_forward_mma
 * has 64 rows, 4 warps). lab/flash/flash16_q128.cu. */
forge_status lab_flash16_forward_q128(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                      void *out_bf16, float *lse, void *stream);

/* Consumer schedules of the wgmma forward (lab/flash/flash16_fwd_sched.cu): BASE is forge_flash_bf16_forward_wgmma
 * (the two-CTA kernel at D = 64, PERSIST_N128 at D = 128), which this entry calls for it; OVERLAP issues S_{t+1}
 * with P_t.V_t and runs the softmax of S_{t+1} while P_t.V_t is on the tensor cores; PINGPONG adds named-barrier
 * turns so the two consumer warpgroups' softmaxes run under each other's GEMMs; PERSIST is PINGPONG on a grid of
 * one CTA per SM walking the (query tile, head, batch) items, the next item's K/V and Q loading under the
 * current one's tail; PERSIST_OV is OVERLAP made persistent the same way; PINGPONG_N128 / PERSIST_N128 are
 * PINGPONG / PERSIST with 128-key tiles at D = 128 too (3 stages; D = 64 unchanged). Another value is
 * FORGE_ERR_ARG; the refusals are those of forge_flash_bf16_forward_wgmma. */
#define LAB_FLASH16_SCHED_BASE 0
#define LAB_FLASH16_SCHED_OVERLAP 1
#define LAB_FLASH16_SCHED_PINGPONG 2
#define LAB_FLASH16_SCHED_PERSIST 3
#define LAB_FLASH16_SCHED_PERSIST_OV 4
#define LAB_FLASH16_SCHED_PINGPONG_N128 5
#define LAB_FLASH16_SCHED_PERSIST_N128 6
forge_status lab_flash16_forward_sched(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                       void *out_bf16, float *lse, int sched, void *stream);

/* The wgmma forward with ONE CTA per SM and no softmax / P.V overlap (lab/flash/flash16_fwd_1cta.cu):
 * fw_fwd_kernel<D>, what forge ran before its two-CTA kernel (D = 64) and its scheduled kernel (D = 128); the
 * baseline those are timed against. The refusals and results contract of forge_flash_bf16_forward_wgmma. */
forge_status lab_flash16_forward_1cta(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                      void *out_bf16, float *lse, void *stream);

/* The wgmma backward with its dK/dV kernel named (lab/flash/flash16_bwd_dkdv.cu, whose header lists the
 * kernels; forge's dQ kernel with each): SPLIT (D = 128: the dK/dV kernel that splits the products between its
 * warpgroups, P^T handed over through shared memory; D = 64: forge's dK/dV kernel with its S-like products'
 * resident operand in shared memory), PIPE (the split kernel pipelined: each consumer issues tile it's S-like
 * product, then tile it-1's accumulation; forge's D = 128 dK/dV kernel until the thirteenth session; at D = 64 as
 * SPLIT) or RSA (D = 128: the pipelined split kernel with K and V as register A fragments; D = 64: forge's
 * kernels). All give the same values (the same products and fp32 arithmetic per element). Another value is
 * FORGE_ERR_ARG; the refusals are those of forge_flash_bf16_backward_wgmma. */
#define LAB_FLASH16_DKDV_SPLIT 0
#define LAB_FLASH16_DKDV_PIPE 1
#define LAB_FLASH16_DKDV_RSA 2
forge_status lab_flash16_backward_dkdv(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                       const void *out_bf16, const void *dout_bf16, const float *lse, float *delta,
                                       float *dq, float *dk, float *dv, int dkdv, void *stream);

/* The fused backward (lab/flash/flash16_bwd_fused.cu, whose header explains it): one kernel per call computes
 * dK, dV and per-split dQ partials from a single S^T / dP^T per (key block of 128, query tile of 64), grid
 * (S splits, Hkv, B), then a small pass sums the S partials in split order and scales. D = 64 only (D = 128 is
 * FORGE_ERR_UNSUPPORTED); otherwise the refusals and results contract of forge_flash_bf16_backward_wgmma (dq,
 * dk, dv overwritten; same values up to summation order), deterministic.
 * lab_flash16_backward_fused_ws: splits = 0 picks S by the rule (B * Hkv * S >= 2 x the SMs), splits > 0 forces S
 * (capped at the key blocks ceil(Tk / 128)); ws: the caller's workspace of at least
 * lab_flash16_backward_fused_ws_bytes(s, splits) = (S - 1) * B * Tq * H * 64 * 4 bytes (0 when S = 1; dq holds
 * split 0's partial), else FORGE_ERR_ARG. lab_flash16_backward_fused: forge's backward signature, S by the rule,
 * the workspace a grow-only buffer the file keeps (not thread-safe). */
size_t lab_flash16_backward_fused_ws_bytes(const forge_flash_shape *s, int splits);
forge_status lab_flash16_backward_fused_ws(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                           const void *out_bf16, const void *dout_bf16, const float *lse,
                                           float *delta, float *dq, float *dk, float *dv, int splits, void *ws,
                                           size_t ws_bytes, void *stream);
forge_status lab_flash16_backward_fused(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                        const void *out_bf16, const void *dout_bf16, const float *lse, float *delta,
                                        float *dq, float *dk, float *dv, void *stream);

/* fused2: the fused backward with the dQ partial tiles written by TMA (flash16_bwd_fused.cu, fz_bwd2_kernel: the
 * issuer stages its fp32 dQ tile in shared memory and one thread issues a bulk tensor store on the CTA's first key
 * block, a bulk fp32 reduce-add on later ones, instead of a plain read-modify-write). Same splits, workspace size
 * (lab_flash16_backward_fused2_ws_bytes = lab_flash16_backward_fused_ws_bytes), contract, refusals and results up
 * to fp32 rounding of the partial sums as the entries above, deterministic; dq and ws must also be 16-byte
 * aligned (FORGE_ERR_ARG otherwise; cudaMalloc'd buffers are). */
size_t lab_flash16_backward_fused2_ws_bytes(const forge_flash_shape *s, int splits);
forge_status lab_flash16_backward_fused2_ws(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                            const void *out_bf16, const void *dout_bf16, const float *lse,
                                            float *delta, float *dq, float *dk, float *dv, int splits, void *ws,
                                            size_t ws_bytes, void *stream);
forge_status lab_flash16_backward_fused2(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                         const void *out_bf16, const void *dout_bf16, const float *lse, float *delta,
                                         float *dq, float *dk, float *dv, void *stream);

/* Around forge's D = 128 backward (lab/flash/flash16_bwd_fused128.cu; forge runs the fused kernel there):
 * lab_flash16_backward_fused128_order runs it with the key blocks' launch order forced, ASC or DESC (forge picks
 * ascending when they fit on the SMs at once): the same bits either way; another order is FORGE_ERR_ARG, D != 128
 * FORGE_ERR_UNSUPPORTED. lab_flash16_backward_three: the three-kernel backward at D = 64 and 128 (the dQ and dK/dV
 * kernels, forge's until the fused kernel replaced them), the fused kernel's parity reference and timing baseline. Both: the refusals
 * and results contract of forge_flash_bf16_backward_wgmma (delta: FORGE_FLASH_BF16_BWD_SCRATCH floats). */
#define LAB_FLASH16_FUSED128_ASC 1
#define LAB_FLASH16_FUSED128_DESC 2
forge_status lab_flash16_backward_fused128_order(const forge_flash_shape *s, const void *q, const void *k,
                                                 const void *v, const void *out_bf16, const void *dout_bf16,
                                                 const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                 int order, void *stream);
forge_status lab_flash16_backward_three(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                        const void *out_bf16, const void *dout_bf16, const float *lse, float *delta,
                                        float *dq, float *dk, float *dv, void *stream);

/* The fused backward at D = 64 (lab/flash/flash16_bwd_fused64.cu: ff_bwd_kernel<64>, the kernel forge runs at
 * D = 64) with its own workspace and the launch order chosen. order: the key blocks' launch
 * order, RULE (what forge's backward does: ascending when they fit on the SMs at once, else descending),
 * ASC or DESC: the same bits every way; another value is FORGE_ERR_ARG. D != 64 is FORGE_ERR_UNSUPPORTED;
 * otherwise the refusals and results contract of forge_flash_bf16_backward_wgmma (delta: FORGE_FLASH_BF16_BWD_SCRATCH
 * floats; dq, dk, dv fp32, overwritten; dk and dv bitwise forge's, dq up to fp32 summation order), deterministic.
 * lab_flash16_backward_fused64_ws: ws holds the dQ hand-off's turn counters, at least
 * lab_flash16_backward_fused64_ws_bytes(s) bytes, 4-byte aligned (FORGE_ERR_ARG otherwise; zeroed by every call).
 * lab_flash16_backward_fused64: the same with a grow-only workspace the file keeps (not thread-safe). */
#define LAB_FLASH16_FUSED64_RULE 0
#define LAB_FLASH16_FUSED64_ASC 1
#define LAB_FLASH16_FUSED64_DESC 2
size_t lab_flash16_backward_fused64_ws_bytes(const forge_flash_shape *s);
forge_status lab_flash16_backward_fused64_ws(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                             const void *out_bf16, const void *dout_bf16, const float *lse,
                                             float *delta, float *dq, float *dk, float *dv, int order, void *ws,
                                             size_t ws_bytes, void *stream);
forge_status lab_flash16_backward_fused64(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                          const void *out_bf16, const void *dout_bf16, const float *lse, float *delta,
                                          float *dq, float *dk, float *dv, int order, void *stream);

/* The wgmma backward at D = 64 with its dQ and / or dK/dV kernel run TWO CTAs per SM (lab/flash/flash16_bwd_2cta.cu,
 * whose header explains them; no setmaxnreg, four consumer warpgroups per SM). kernels, a bit set:
 * LAB_FLASH16_BWD2_DQ64 (fb2_dq_kernel<64>: 256 threads, 64-key tiles, no producer warp) or LAB_FLASH16_BWD2_DQ32
 * (fb2_dq_kernel<32>: 288 threads with a producer warp, 32-key tiles); with neither, forge's dQ kernel.
 * LAB_FLASH16_BWD2_DKDV (fb2_dkdv_kernel: 256 threads, 32-query tiles, no producer warp); without it, forge's
 * dK/dV kernel. Timing only: LAB_FLASH16_BWD2_NO_DQ / _NO_DKDV skip that kernel (its outputs are left unwritten),
 * so a bench can time each kernel (plus the delta pass every call runs). Both dQ bits, or an unknown bit, are
 * FORGE_ERR_ARG; D != 64 is FORGE_ERR_UNSUPPORTED; otherwise the refusals and results contract of
 * forge_flash_bf16_backward_wgmma (dq, dk, dv fp32, overwritten; same values up to fp32 summation order),
 * deterministic. lab_flash16_backward_2cta_occupancy: the CTAs per SM the runtime keeps resident for the kernel
 * named by one of DQ64, DQ32, DKDV (cudaOccupancyMaxActiveBlocksPerMultiprocessor; 2 is the design). */
#define LAB_FLASH16_BWD2_DQ64 1
#define LAB_FLASH16_BWD2_DQ32 2
#define LAB_FLASH16_BWD2_DKDV 4
#define LAB_FLASH16_BWD2_NO_DQ 8
#define LAB_FLASH16_BWD2_NO_DKDV 16
forge_status lab_flash16_backward_2cta(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                       const void *out_bf16, const void *dout_bf16, const float *lse, float *delta,
                                       float *dq, float *dk, float *dv, int kernels, void *stream);
forge_status lab_flash16_backward_2cta_occupancy(int kernel, int *ctas_per_sm);

/* The wgmma backward at D = 64 with its dQ and / or dK/dV kernel run with THREE consumer warpgroups in one CTA
 * (lab/flash/flash16_bwd_3wg.cu, whose header explains them; 512 threads, setmaxnreg 24 / 160, 192 resident rows).
 * kernels, a bit set: LAB_FLASH16_BWD3_DQ (fb3_dq_kernel; without it forge's dQ kernel), LAB_FLASH16_BWD3_DKDV
 * (fb3_dkdv_kernel; without it forge's dK/dV kernel); timing only: _NO_DQ / _NO_DKDV skip that kernel (its outputs
 * are left unwritten). An unknown bit is FORGE_ERR_ARG; D != 64 is FORGE_ERR_UNSUPPORTED; otherwise the refusals and
 * results contract of forge_flash_bf16_backward_wgmma, and the same bits (each row summed over the same tiles in the
 * same order). */
#define LAB_FLASH16_BWD3_DQ 1
#define LAB_FLASH16_BWD3_DKDV 2
#define LAB_FLASH16_BWD3_NO_DQ 4
#define LAB_FLASH16_BWD3_NO_DKDV 8
#define LAB_FLASH16_BWD3_BULK 16 /* fb3_dkdv_kernel<1>: thread 0 refills, lse / delta by bulk copy from a packed copy */
forge_status lab_flash16_backward_3wg(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                      const void *out_bf16, const void *dout_bf16, const float *lse, float *delta,
                                      float *dq, float *dk, float *dv, int kernels, void *stream);

#ifdef __cplusplus
}
#endif

#endif
