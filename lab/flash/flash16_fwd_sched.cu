/*
 * flash16_fwd_sched.cu: the consumer schedules of forge's Hopper (sm_90a) bf16
 * flash forward by name (lab): fw_fwd_ov_kernel<D, BN, PP>
 * (src/backend/cuda/flash_attention_bf16_wgmma_fwd_sched.cuh, whose header
 * explains the schedules) in the instances forge does not run. Entry:
 * lab_flash16_forward_sched (flash16_variants.h); measurements:
 * lab/notes/flash.md. BASE is forge's forward (the two-CTA kernel at D = 64,
 * PERSIST_N128 at D = 128); the one-CTA kernel without the overlap is
 * lab_flash16_forward_1cta (flash16_fwd_1cta.cu).
 *
 *   OVERLAP, PERSIST_OV:    the softmax under P.V, one CTA per query tile / persistent; BN = 64 at D = 128
 *   PINGPONG, PERSIST:      the same with the warpgroups' ping-pong; BN = 64 at D = 128
 *   PINGPONG_N128, PERSIST_N128: ping-pong with 128-key tiles at D = 128 too (3 stages; PERSIST_N128 is forge's)
 * At D = 64 every schedule has 128-key tiles.
 */
#include <cuda_runtime.h>

#include "../../src/backend/cuda/flash_attention_bf16_wgmma_fwd_sched.cuh"

#include "flash16_variants.h"

#define LAB_FW_ENTRY "lab_flash16_forward_sched" /* named in errors */

extern "C" forge_status lab_flash16_forward_sched(const forge_flash_shape *s, const void *q, const void *k,
                                                  const void *v, void *out_bf16, float *lse, int sched,
                                                  void *stream) {
    if (sched < LAB_FLASH16_SCHED_BASE || sched > LAB_FLASH16_SCHED_PERSIST_N128)
        return forge_error(FORGE_ERR_ARG, "%s: unknown schedule %d", LAB_FW_ENTRY, sched);
    if (sched == LAB_FLASH16_SCHED_BASE) return forge_flash_bf16_forward_wgmma(s, q, k, v, out_bf16, lse, stream, 0);
    int launch = 0;
    FORGE_TRY(fw_forward_begin(LAB_FW_ENTRY, s, q, k, v, out_bf16, lse, stream, &launch));
    if (!launch) return FORGE_OK;
    cudaStream_t st = (cudaStream_t)stream;
    switch (sched) {
    case LAB_FLASH16_SCHED_OVERLAP:
    case LAB_FLASH16_SCHED_PERSIST_OV: {
        const bool persist = sched == LAB_FLASH16_SCHED_PERSIST_OV;
        return s->D == 64 ? fw_forward_sched<64, 128, false>(s, q, k, v, out_bf16, lse, persist, st, 0, LAB_FW_ENTRY)
                          : fw_forward_sched<128, 64, false>(s, q, k, v, out_bf16, lse, persist, st, 0, LAB_FW_ENTRY);
    }
    case LAB_FLASH16_SCHED_PINGPONG:
    case LAB_FLASH16_SCHED_PERSIST: {
        const bool persist = sched == LAB_FLASH16_SCHED_PERSIST;
        return s->D == 64 ? fw_forward_sched<64, 128, true>(s, q, k, v, out_bf16, lse, persist, st, 0, LAB_FW_ENTRY)
                          : fw_forward_sched<128, 64, true>(s, q, k, v, out_bf16, lse, persist, st, 0, LAB_FW_ENTRY);
    }
    default: { /* PINGPONG_N128, PERSIST_N128: 128-key tiles at D = 128 too (3 stages) */
        const bool persist = sched == LAB_FLASH16_SCHED_PERSIST_N128;
        return s->D == 64 ? fw_forward_sched<64, 128, true>(s, q, k, v, out_bf16, lse, persist, st, 0, LAB_FW_ENTRY)
                          : fw_forward_sched<128, 128, true>(s, q, k, v, out_bf16, lse, persist, st, 0, LAB_FW_ENTRY);
    }
    }
}
