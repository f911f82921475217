/*
 * flash16_q128.cu: the mma.sync forward of forge's bf16 flash attention with
 * 128 query rows per CTA (8 warps sharing each K/V tile: half the
 * shared-memory fill traffic per FLOP of the 64-row kernel forge falls back
 * to). The kernel template is src/backend/cuda/flash_attention_bf16_mma.cuh;
 * this file is its QR = 128 instance. Measurements: lab/notes/flash.md.
 */
#include "../../src/backend/cuda/flash_attention_bf16_mma.cuh"

#include "flash16_variants.h"

extern "C" forge_status lab_flash16_forward_q128(const forge_flash_shape *s, const void *q, const void *k,
                                                 const void *v, void *out_bf16, float *lse, void *stream) {
    return fa_forward_rows<128>("lab_flash16_forward_q128", s, q, k, v, out_bf16, lse, stream);
}
