/*
 * flash16_bwd_dkdv.cu: the variants of forge's Hopper (sm_90a) bf16 flash
 * backward (src/backend/cuda/flash_attention_bf16_wgmma_bwd.cu, whose header
 * explains the kernels; templates and launch steps in
 * flash_attention_bf16_wgmma_bwd.cuh), each with one dK/dV and one dQ kernel:
 * SPLIT (at D = 128 the dK/dV kernel that splits the four products between
 * its two warpgroups, fb_dkdv_split_kernel<128, 0>; at D = 64 fb_dkdv_kernel<64,
 * 0>, its S-like products' resident operand read from shared memory), PIPE (the
 * split kernel pipelined, fb_dkdv_split_kernel<128, 1>: forge's D = 128 dK/dV
 * kernel until the thirteenth session; at D = 64 as SPLIT), PIPE_DQ (the
 * pipelined dQ kernel fb_dq_kernel<D, 1> with forge's dK/dV kernel),
 * PIPE_DQ_PIN (the same with P and dS pinned before the next wait,
 * fb_dq_kernel<D, 2>) and RSA
 * (the dQ kernel with Q and dO read once into register A fragments,
 * fb_dq_kernel<D, 0, 1>, with forge's dK/dV kernel at D = 64 and the pipelined
 * split kernel doing the same with K and V at D = 128). Entry:
 * lab_flash16_backward_dkdv (flash16_variants.h); measurements:
 * lab/notes/flash.md.
 */
#include "../../src/backend/cuda/flash_attention_bf16_wgmma_bwd.cuh"

#include "flash16_variants.h"

#define LAB_FB_ENTRY "lab_flash16_backward_dkdv" /* named in errors */

extern "C" forge_status lab_flash16_backward_dkdv(const forge_flash_shape *s, const void *q, const void *k,
                                                  const void *v, const void *out_bf16, const void *dout_bf16,
                                                  const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                  int dkdv, void *stream) {
    if (dkdv < LAB_FLASH16_DKDV_SPLIT || dkdv > LAB_FLASH16_DKDV_PIPE_DQ_PIN)
        return forge_error(FORGE_ERR_ARG,
                           "%s: backward variant %d (expected LAB_FLASH16_DKDV_SPLIT, _PIPE, _PIPE_DQ, _RSA or "
                           "_PIPE_DQ_PIN)",
                           LAB_FB_ENTRY, dkdv);
    int launch = 0;
    FORGE_TRY(fb_backward_begin(LAB_FB_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, &launch));
    if (!launch) return FORGE_OK;
    fb_call c;
    FORGE_TRY(
        fb_backward_prepare(&c, LAB_FB_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream, 0));
    const int d128 = c.s.D == 128;
    switch (dkdv) {
    case LAB_FLASH16_DKDV_SPLIT:
        FORGE_TRY(fb_launch_dq_default(c));
        return d128 ? fb_launch_dkdv_split<128, 0>(c) : fb_launch_dkdv<64, 0>(c);
    case LAB_FLASH16_DKDV_PIPE:
        FORGE_TRY(fb_launch_dq_default(c));
        return d128 ? fb_launch_dkdv_split<128, 1>(c) : fb_launch_dkdv<64, 0>(c);
    case LAB_FLASH16_DKDV_PIPE_DQ:
        FORGE_TRY(d128 ? (fb_launch_dq<128, 1>(c)) : (fb_launch_dq<64, 1>(c)));
        return fb_launch_dkdv_default(c);
    case LAB_FLASH16_DKDV_PIPE_DQ_PIN:
        FORGE_TRY(d128 ? (fb_launch_dq<128, 2>(c)) : (fb_launch_dq<64, 2>(c)));
        return fb_launch_dkdv_default(c);
    default: /* LAB_FLASH16_DKDV_RSA */
        FORGE_TRY(d128 ? (fb_launch_dq<128, 0, 1>(c)) : (fb_launch_dq<64, 0, 1>(c)));
        return d128 ? fb_launch_dkdv_split<128, 1, 1>(c) : fb_launch_dkdv_default(c);
    }
}
