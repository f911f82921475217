/*
 * flash16_bwd_dkdv.cu: the variants of forge's Hopper (sm_90a) bf16 flash
 * backward (src/backend/cuda/flash_attention_bf16_wgmma_bwd.cu, whose header
 * explains the kernels; templates and launch steps in
 * flash_attention_bf16_wgmma_bwd.cuh): at D = 128 the unpipelined dK/dV kernel
 * (SPLIT: fb_dkdv_split_kernel<128, 0>), at D = 64 the pipelined dQ kernel
 * (PIPE_DQ: fb_dq_kernel<64, 1>). Every other kernel of a call is forge's own
 * (fb_launch_dq_default, fb_launch_dkdv_default), and a (variant, D) pair that
 * names no other kernel is forge_flash_bf16_backward_wgmma itself.
 * Entry: lab_flash16_backward_dkdv (flash16_variants.h); measurements:
 * lab/notes/flash.md.
 */
#include "../../src/backend/cuda/flash_attention_bf16_wgmma_bwd.cuh"

#include "flash16_variants.h"

#define LAB_FB_ENTRY "lab_flash16_backward_dkdv" /* named in errors */

extern "C" forge_status lab_flash16_backward_dkdv(const forge_flash_shape *s, const void *q, const void *k,
                                                  const void *v, const void *out_bf16, const void *dout_bf16,
                                                  const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                  int dkdv, void *stream) {
    if (dkdv != LAB_FLASH16_DKDV_SPLIT && dkdv != LAB_FLASH16_DKDV_PIPE && dkdv != LAB_FLASH16_DKDV_PIPE_DQ)
        return forge_error(FORGE_ERR_ARG,
                           "%s: backward variant %d (expected LAB_FLASH16_DKDV_SPLIT, _PIPE or _PIPE_DQ)",
                           LAB_FB_ENTRY, dkdv);
    const int split128 = s != NULL && s->D == 128 && dkdv == LAB_FLASH16_DKDV_SPLIT;
    const int pipe_dq64 = s != NULL && s->D == 64 && dkdv == LAB_FLASH16_DKDV_PIPE_DQ;
    if (!split128 && !pipe_dq64) /* the kernels forge runs */
        return forge_flash_bf16_backward_wgmma(s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream);
    int launch = 0;
    FORGE_TRY(fb_backward_begin(LAB_FB_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, &launch));
    if (!launch) return FORGE_OK;
    fb_call c;
    FORGE_TRY(
        fb_backward_prepare(&c, LAB_FB_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream, 0));
    if (pipe_dq64) {
        FORGE_TRY((fb_launch_dq<64, 1>(c)));
        return fb_launch_dkdv_default(c);
    }
    FORGE_TRY(fb_launch_dq_default(c));
    return fb_launch_dkdv_split<128, 0>(c);
}
