/*
 * flash16_bwd_fused64.cu: the fused bf16 flash backward at D = 64 (ff_bwd_kernel<64>, forge's at D = 64;
 * src/backend/cuda/flash_attention_bf16_wgmma_bwd_fused.cuh says what differs from D = 128,
 * flash_attention_bf16_wgmma_bwd_fused.cu explains the design) with its launch order chosen and the turn counters
 * in a workspace of its own (lab_flash16_backward_fused64_ws_bytes), as it was measured against the three kernels
 * before it replaced them. Entries and contract: flash16_variants.h. The gradients are fp32, so the fp32 dQ
 * accumulator is dq itself.
 */
#include <stdint.h>

#include "../../src/backend/cuda/flash_attention_bf16_wgmma_bwd_fused.cuh"

#include "flash16_variants.h"

#define LAB_F64_ENTRY "lab_flash16_backward_fused64" /* named in errors */

extern "C" size_t lab_flash16_backward_fused64_ws_bytes(const forge_flash_shape *s) {
    if (s == NULL || s->B <= 0 || s->H <= 0 || s->Tq <= 0) return 0; /* nothing to launch, or refused later */
    return FORGE_FLASH_BF16_TURNS(s->B, s->H, s->Tq) * sizeof(uint32_t);
}

extern "C" forge_status lab_flash16_backward_fused64_ws(const forge_flash_shape *s, const void *q, const void *k,
                                                        const void *v, const void *out_bf16, const void *dout_bf16,
                                                        const float *lse, float *delta, float *dq, float *dk,
                                                        float *dv, int order, void *ws, size_t ws_bytes,
                                                        void *stream) {
    if (order != LAB_FLASH16_FUSED64_RULE && order != LAB_FLASH16_FUSED64_ASC && order != LAB_FLASH16_FUSED64_DESC)
        return forge_error(FORGE_ERR_ARG, "%s: order %d is not one of 0 (by rule), 1 (ascending), 2 (descending)",
                           LAB_F64_ENTRY, order);
    const size_t need = lab_flash16_backward_fused64_ws_bytes(s);
    if ((need > 0 && ws == NULL) || ws_bytes < need || (uintptr_t)ws % sizeof(uint32_t) != 0)
        return forge_error(FORGE_ERR_ARG, "%s: the workspace needs %zu bytes, 4-byte aligned; got %zu at %p",
                           LAB_F64_ENTRY, need, ws_bytes, ws);
    int launch = 0;
    FORGE_TRY(fb_backward_begin(LAB_F64_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, &launch));
    if (!launch) return FORGE_OK;
    if (s->D != 64)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: the fused backward's lab instance is compiled for D = 64, got D=%d",
                           LAB_F64_ENTRY, s->D);
    fb_call c;
    FORGE_TRY(fb_backward_prepare(&c, LAB_F64_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream,
                                  0));
    static const int fb_order[3] = {FB_FUSED_BY_RULE, FB_FUSED_ASC, FB_FUSED_DESC};
    return ff_launch<64>(c, (uint32_t *)ws, dq, fb_order[order], LAB_F64_ENTRY);
}

/* The grow-only workspace of lab_flash16_backward_fused64 (not thread-safe; kept until the process exits). */
static void *lab_f64_ws = NULL;
static size_t lab_f64_ws_cap = 0;

extern "C" forge_status lab_flash16_backward_fused64(const forge_flash_shape *s, const void *q, const void *k,
                                                     const void *v, const void *out_bf16, const void *dout_bf16,
                                                     const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                     int order, void *stream) {
    const size_t need = lab_flash16_backward_fused64_ws_bytes(s);
    if (need > lab_f64_ws_cap) {
        if (lab_f64_ws) CUDA_TRY(cudaFree(lab_f64_ws));
        lab_f64_ws = NULL;
        lab_f64_ws_cap = 0;
        CUDA_TRY(cudaMalloc(&lab_f64_ws, need));
        lab_f64_ws_cap = need;
    }
    return lab_flash16_backward_fused64_ws(s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, order, lab_f64_ws,
                                           lab_f64_ws_cap, stream);
}
