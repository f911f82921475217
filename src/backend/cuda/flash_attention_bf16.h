/*
 * flash_attention_bf16.h: fused causal attention on the tensor cores
 * (issue 6; notes in docs/flash-attention.md), plain C.
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
 * Backward (three kernels, no atomics, deterministic):
 *   delta = rowsum(dO * O) (fp32, into the caller's scratch delta (B,H,Tq));
 *   dQ over query blocks; dK/dV over key blocks (a GQA kv head loops over
 *   its group's query heads inside). dq (B,Tq,H,D), dk and dv (B,Tk,Hkv,D)
 *   are dense fp32 and OVERWRITTEN (not accumulated).
 *
 * Pointers are device pointers; stream is a cudaStream_t (NULL = default).
 * Launch errors are returned; errors of a running kernel surface at the next
 * synchronising call.
 */
#ifndef FORGE_FLASH_ATTENTION_BF16_H
#define FORGE_FLASH_ATTENTION_BF16_H

#include "../../base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int B, Tq, Tk, H, Hkv, D;
    long long q_stride, k_stride, v_stride, o_stride; /* elements between consecutive tokens */
} forge_flash_shape;

forge_status forge_flash_bf16_forward(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                      void *out_bf16, float *lse, void *stream);

/* The forward with q_rows = 64 (the default above: 4 warps per CTA) or 128
 * (8 warps sharing each K/V tile) query rows per CTA; the bench times both
 * until one is measured better everywhere. */
forge_status forge_flash_bf16_forward_rows(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                           void *out_bf16, float *lse, int q_rows, void *stream);

/* The Hopper (sm_90a) forward on TMA + wgmma (FA3-style: a producer warpgroup, two consumer warpgroups of
 * 64 query rows, P kept in registers as the A operand of P.V); same contract and results as above up to
 * summation order. FORGE_ERR_UNSUPPORTED on a non-Hopper device or a layout TMA cannot describe.
 * forge_flash_bf16_forward runs it by default (FORGE_FLASH16_FWD=mma, read once, selects the mma.sync kernel),
 * falling back to mma.sync where it is refused. */
forge_status forge_flash_bf16_forward_wgmma(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                            void *out_bf16, float *lse, void *stream);

/* Consumer schedules of the wgmma forward (docs/flash-attention.md, "Overlapped schedules"): BASE waits for
 * S = Q.K^T, does the softmax, then O += P.V (the measured kernel); OVERLAP issues S_{t+1} with P_t.V_t and
 * runs the softmax of S_{t+1} while P_t.V_t is on the tensor cores; PINGPONG adds named-barrier turns so the
 * two consumer warpgroups' softmaxes run under each other's GEMMs; PERSIST is PINGPONG on a grid of one CTA
 * per SM walking the (query tile, head, batch) items, the next item's K/V and Q loading under the current
 * one's tail; PERSIST_OV is OVERLAP made persistent the same way; PINGPONG_N128 / PERSIST_N128 are
 * PINGPONG / PERSIST with 128-key tiles at D = 128 too (3 stages; D = 64 unchanged).
 * forge_flash_bf16_forward_wgmma uses FORGE_FLASH16_FWD_SCHED (read once: base | overlap | pingpong |
 * persist | persist_ov | pingpong_n128 | persist_n128; default base); this entry takes the schedule explicitly
 * (FORGE_ERR_ARG for another value). Same contract and refusals as forge_flash_bf16_forward_wgmma. */
#define FORGE_FLASH16_SCHED_BASE 0
#define FORGE_FLASH16_SCHED_OVERLAP 1
#define FORGE_FLASH16_SCHED_PINGPONG 2
#define FORGE_FLASH16_SCHED_PERSIST 3
#define FORGE_FLASH16_SCHED_PERSIST_OV 4
#define FORGE_FLASH16_SCHED_PINGPONG_N128 5
#define FORGE_FLASH16_SCHED_PERSIST_N128 6
forge_status forge_flash_bf16_forward_wgmma_sched(const forge_flash_shape *s, const void *q, const void *k,
                                                  const void *v, void *out_bf16, float *lse, int sched,
                                                  void *stream);

/* The argument check every entry above runs (shared by the mma.sync and wgmma files). */
forge_status forge_flash_check_shape(const char *what, const forge_flash_shape *s, const void *const *ptrs,
                                     int nptrs);

forge_status forge_flash_bf16_backward(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                       const void *out_bf16, const void *dout_bf16, const float *lse, float *delta,
                                       float *dq, float *dk, float *dv, void *stream);

/* The Hopper (sm_90a) backward on TMA + wgmma (same three kernels, same contract and results as above up to
 * summation order; flash_attention_bf16_wgmma_bwd.cu). FORGE_ERR_UNSUPPORTED on a non-Hopper device, Tq == 0
 * or Tk == 0, or a layout TMA cannot describe. forge_flash_bf16_backward runs it by default
 * (FORGE_FLASH16_BWD=mma, read once, selects the mma.sync kernels), falling back to mma.sync where it is
 * refused. */
forge_status forge_flash_bf16_backward_wgmma(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                             const void *out_bf16, const void *dout_bf16, const float *lse,
                                             float *delta, float *dq, float *dk, float *dv, void *stream);

/* forge_flash_bf16_backward_wgmma with its D = 128 dK/dV kernel named: FORGE_FLASH16_DKDV_PIPE (the default:
 * each consumer issues tile it's S-like product, then tile it-1's accumulation, and does tile it's exp / dS
 * arithmetic while that runs; P^T handed over through two buffers) or FORGE_FLASH16_DKDV_SPLIT (the same roles
 * unpipelined). forge_flash_bf16_backward_wgmma takes the variant from FORGE_FLASH16_BWD_DKDV (read once: unset /
 * "pipe", "split", "pipe+dq"). D = 64 has one dK/dV kernel (PIPE is SPLIT there; PIPE_DQ pipelines its dQ
 * kernel, which at D = 128 would spill). All give the same values (the same products and fp32 arithmetic per
 * element). */
#define FORGE_FLASH16_DKDV_SPLIT 0
#define FORGE_FLASH16_DKDV_PIPE 1
#define FORGE_FLASH16_DKDV_PIPE_DQ 2 /* PIPE, and at D = 64 the dQ kernel pipelined the same way */
forge_status forge_flash_bf16_backward_wgmma_dkdv(const forge_flash_shape *s, const void *q, const void *k,
                                                  const void *v, const void *out_bf16, const void *dout_bf16,
                                                  const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                  int dkdv, void *stream);

/* The mma.sync (m16n8k16) backward by name: what forge_flash_bf16_backward runs with FORGE_FLASH16_BWD=mma or
 * where the wgmma backward refuses. */
forge_status forge_flash_bf16_backward_mma(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                           const void *out_bf16, const void *dout_bf16, const float *lse,
                                           float *delta, float *dq, float *dk, float *dv, void *stream);

/* delta = rowsum(dO * O) into delta (B, H, Tq) fp32: the first backward kernel, shared by the mma.sync and
 * the wgmma backward. Arguments as checked by forge_flash_check_shape (D = 64 or 128); stream a cudaStream_t. */
forge_status forge_flash_bf16_backward_delta(const forge_flash_shape *s, const void *out_bf16, const void *dout_bf16,
                                             float *delta, void *stream);

#ifdef __cplusplus
}
#endif

#endif
