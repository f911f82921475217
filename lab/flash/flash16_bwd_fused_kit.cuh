/*
 * flash16_bwd_fused_kit.cuh: the dQ pieces the lab's fused bf16 backwards share (flash16_bwd_fused.cu at D = 64,
 * flash16_bwd_fused128.cu at D = 128): a consumer's dS^T into the 128-key dS^T buffer, the dQ product over it
 * (64 queries x 64 columns), the fp32 dQ fragment into a 128B-swizzled staging tile, and the TMA store /
 * reduce-add of a staged 32-column box. Layouts: flash16_bwd_fused.cu's header and fused2 notes.
 */
#ifndef FORGE_LAB_FLASH16_BWD_FUSED_KIT_CUH
#define FORGE_LAB_FLASH16_BWD_FUSED_KIT_CUH

#include <stdint.h>

#include "../../src/backend/cuda/flash_attention_bf16_wgmma_bwd.cuh"

/* dq (64 queries x 64) = dS (the 128-key dS^T buffer at ds, read transposed) . K (the resident 128-row box at
 * k): 8 k16 steps over the keys in order, step kk at kk * 2 KiB in both (16 rows of 128 B), both operands
 * MN-major (fb_wgmma_ss_n64<1>: imm-trans-a, imm-trans-b). */
__device__ __forceinline__ void fz_dq_product(float (&dq)[32], uint32_t ds, uint32_t k) {
#pragma unroll
    for (int kk = 0; kk < FB_BR / 16; kk++) {
        const uint64_t da = wgmma_desc_mn(ds + kk * 2048), db = wgmma_desc_mn(k + kk * 2048);
        if (kk == 0)
            fb_wgmma_ss_n64_first<1>(dq, da, db);
        else
            fb_wgmma_ss_n64<1>(dq, da, db);
    }
}

__device__ __forceinline__ void fz_st_shared(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

/* Generic-proxy shared-memory stores made visible to the async proxy (the wgmma that reads them). */
__device__ __forceinline__ void fz_fence_proxy_async(void) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* A consumer's dS^T (its A fragments sa: rows = its 64 keys, columns = the tile's 64 queries, bf16 pairs) into
 * rows row0.. of the dS^T buffer at ds (1 KiB aligned), in the 128B-swizzled layout (16-byte chunk j of row r
 * at ((j ^ (r & 7)) << 4)): sa[kk][2 jj + h] holds row g + 8h, queries 16kk + 8jj + 2tq, +1 (fw_to_a), i.e.
 * chunk 2kk + jj, bytes 4tq.. of it. The thread's row base has bits 4-6 clear and r & 7 = g, so every address is
 * (base | g << 4) ^ chunk << 4: one xor with an immediate per store (fb_opaque keeps the compiler from hoisting
 * the 8 xors out of the tile loop into 8 live registers). Per store the warp's 32 lanes hit 32 distinct banks. */
__device__ __forceinline__ void fz_store_ds(uint32_t ds, int row0, int g, int tq, const uint32_t (&sa)[4][4]) {
    const uint32_t bt = fb_opaque((ds + (uint32_t)(row0 + g) * 128u + 4u * tq) | ((uint32_t)g << 4));
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int jj = 0; jj < 2; jj++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                fz_st_shared((bt + h * 1024u) ^ ((uint32_t)(2 * kk + jj) << 4), sa[kk][2 * jj + h]);
}

/* The thread's dQ fragment d (rows 16 warp + g + 8 rr, columns 8 nn + 2 tq, +1 at d[4 nn + 2 rr], +1) into the
 * staging tile at stg (1 KiB aligned; see the design notes above for the layout). The row base has bits 4-6
 * clear, so the chunk (2 (nn % 4) + tq / 2) ^ g is (tq / 2 ^ g) folded into the base, then one xor with an
 * immediate per store; fb_opaque keeps the compiler from hoisting the 16 addresses out of the tile loop. */
__device__ __forceinline__ void fz2_store_dq(uint32_t stg, int warp, int g, int tq, const float (&d)[32]) {
    const uint32_t row = stg + (uint32_t)(16 * warp + g) * 128u + 8u * (uint32_t)(tq & 1);
    const uint32_t bt = fb_opaque(row | ((uint32_t)((tq >> 1) ^ g) << 4));
#pragma unroll
    for (int nn = 0; nn < 64 / 8; nn++)
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const uint32_t a = (bt + (uint32_t)(nn >> 2) * 8192u + (uint32_t)rr * 1024u) ^ ((uint32_t)(nn & 3) << 5);
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(a), "f"(d[4 * nn + 2 * rr]),
                         "f"(d[4 * nn + 2 * rr + 1])
                         : "memory");
        }
}

/* TMA store (add false) or fp32 reduce-add (add true) of the 64-row x 32-column box at src (128B-swizzled) into
 * the partial of tm at (column c0, row c1, batch c2), in the issuing thread's current bulk group. */
__device__ __forceinline__ void fz2_tile_out(const CUtensorMap *tm, int c0, int c1, int c2, uint32_t src, bool add) {
    if (add)
        asm volatile(
            "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];" ::"l"(
                (uint64_t)tm),
            "r"(c0), "r"(c1), "r"(c2), "r"(src)
            : "memory");
    else
        asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3}], [%4];" ::"l"(
                         (uint64_t)tm),
                     "r"(c0), "r"(c1), "r"(c2), "r"(src)
                     : "memory");
}

#endif
