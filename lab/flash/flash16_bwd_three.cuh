/*
 * flash16_bwd_three.cuh: the three-kernel wgmma backward's launch steps at either head dim, for the lab's
 * variants and references (defined in flash16_bwd_fused128.cu): fb_launch_dq_default (fb_dq_kernel<D>) and
 * fb_launch_dkdv_default (fb_dkdv_kernel<64, 1> or fb_dkdv_kernel<128, 0>), after fb_backward_prepare. At D = 64
 * they are what forge runs (flash_attention_bf16_wgmma_bwd.cu); at D = 128 forge runs the fused kernel and these
 * are its reference.
 */
#ifndef FORGE_LAB_FLASH16_BWD_THREE_CUH
#define FORGE_LAB_FLASH16_BWD_THREE_CUH

#include "../../src/backend/cuda/flash_attention_bf16_wgmma_bwd.cuh"

forge_status fb_launch_dq_default(const fb_call &c);
forge_status fb_launch_dkdv_default(const fb_call &c);

#endif
