/*
 * flash16_bwd_fused128.cu: the lab's entries around forge's bf16 flash backward at D = 128 (what forge runs there
 * is the fused kernel, src/backend/cuda/flash_attention_bf16_wgmma_bwd_fused.cu):
 * - lab_flash16_backward_fused128_order: the fused backward with the key blocks' launch order forced (ascending
 *   or descending; forge picks by whether they fit on the SMs at once), so the tests can run the descending
 *   order at small shapes: the same bits either way, the add order of dQ being the turns';
 * - lab_flash16_backward_three: the three-kernel backward at D = 64 and 128 (the dQ and dK/dV kernels, forge's
 *   until the fused backward replaced them), the fused backward's parity reference and timing baseline;
 * - the three-kernel backward's launch steps at either D (flash16_bwd_three.cuh), for the lab's variants.
 * Entries and contracts: flash16_variants.h.
 */
#include <stdint.h>

#include "../../src/backend/cuda/flash_attention_bf16_wgmma_bwd.cuh"

#include "flash16_bwd_three.cuh"
#include "flash16_variants.h"

#define LAB_F3_ENTRY "lab_flash16_backward_fused128_order" /* named in errors */
#define LAB_3K_ENTRY "lab_flash16_backward_three"

forge_status fb_launch_dq_default(const fb_call &c) {
    return c.s.D == 64 ? fb_launch_dq<64>(c) : fb_launch_dq<128>(c);
}

forge_status fb_launch_dkdv_default(const fb_call &c) {
    return c.s.D == 64 ? fb_launch_dkdv<64, 1>(c) : fb_launch_dkdv<128, 0>(c);
}

extern "C" forge_status lab_flash16_backward_fused128_order(const forge_flash_shape *s, const void *q, const void *k,
                                                            const void *v, const void *out_bf16,
                                                            const void *dout_bf16, const float *lse, float *delta,
                                                            float *dq, float *dk, float *dv, int order,
                                                            void *stream) {
    if (order != LAB_FLASH16_FUSED128_ASC && order != LAB_FLASH16_FUSED128_DESC)
        return forge_error(FORGE_ERR_ARG, "%s: order %d is not one of 1 (ascending), 2 (descending)", LAB_F3_ENTRY,
                           order);
    int launch = 0;
    FORGE_TRY(fb_backward_begin(LAB_F3_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, &launch));
    if (!launch) return FORGE_OK;
    if (s->D != 128)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: the fused backward is compiled for D = 128 only, got D=%d",
                           LAB_F3_ENTRY, s->D);
    fb_call c;
    FORGE_TRY(fb_backward_prepare(&c, LAB_F3_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream,
                                  0));
    return fb_launch_fused(c, delta, order == LAB_FLASH16_FUSED128_ASC ? FB_FUSED_ASC : FB_FUSED_DESC, LAB_F3_ENTRY);
}

extern "C" forge_status lab_flash16_backward_three(const forge_flash_shape *s, const void *q, const void *k,
                                                   const void *v, const void *out_bf16, const void *dout_bf16,
                                                   const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                   void *stream) {
    int launch = 0;
    FORGE_TRY(fb_backward_begin(LAB_3K_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, &launch));
    if (!launch) return FORGE_OK;
    fb_call c;
    FORGE_TRY(fb_backward_prepare(&c, LAB_3K_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream,
                                  0));
    FORGE_TRY(fb_launch_dq_default(c));
    return fb_launch_dkdv_default(c);
}
