/*
 * flash16_fwd_1cta.cu: the Hopper (sm_90a) bf16 flash forward at D = 64 with
 * ONE CTA per SM (lab): fw_fwd_kernel<64> (flash_attention_bf16_wgmma_fwd.cuh),
 * a producer warpgroup and two consumer warpgroups under setmaxnreg 24 / 240,
 * 128-key tiles, 4 stages, 144 KiB of shared memory. forge ran it at D = 64
 * until fw_fwd64_kernel (two CTAs per SM, flash_attention_bf16_wgmma.cu)
 * measured 1.35-1.48x faster (lab/notes/flash.md, 2026-12-03); it stays here as
 * that kernel's baseline (`forge-lab bench flash16-fwd-1cta`, cell
 * flash_bf16_fwd_wgmma_1cta). At D = 128 this kernel is forge's. Entry:
 * lab_flash16_forward_1cta (flash16_variants.h).
 */
#include <cuda_runtime.h>

#include "../../src/backend/cuda/flash_attention_bf16_wgmma_fwd.cuh"

#include "flash16_variants.h"

#define LAB_FW1_ENTRY "lab_flash16_forward_1cta" /* named in errors */

extern "C" forge_status lab_flash16_forward_1cta(const forge_flash_shape *s, const void *q, const void *k,
                                                 const void *v, void *out_bf16, float *lse, void *stream) {
    int launch = 0;
    FORGE_TRY(fw_forward_begin(LAB_FW1_ENTRY, s, q, k, v, out_bf16, lse, stream, &launch));
    if (!launch) return FORGE_OK;
    if (s->D != 64)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: the lab's one-CTA instance is D = 64, got D=%d (at D = 128 it is "
                           "forge_flash_bf16_forward_wgmma's kernel)",
                           LAB_FW1_ENTRY, s->D);
    return fw_forward_1cta<64>(s, q, k, v, out_bf16, lse, (cudaStream_t)stream, 0, LAB_FW1_ENTRY);
}
