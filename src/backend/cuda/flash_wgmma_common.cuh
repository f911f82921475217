/*
 * flash_wgmma_common.cuh: the device helpers the Hopper (sm_90a) bf16 flash
 * attention kernels share: the 3D TMA load of a (column, token, batch) tensor
 * map, the wgmma wrappers they use (S = A.B^T with both operands K-major in
 * shared memory, N = 64 or 128; O += A.B with A bf16 fragments in registers
 * and B MN-major, N = 64 or 128), the bf16 pair packing that turns an
 * accumulator into an A fragment (fw_pack, fw_to_a) and the store that keeps
 * overlapped work ahead of a wgmma wait (fw_pin_before_wait). Shared so that the
 * forward (flash_attention_bf16_wgmma.cu) and the backward
 * (flash_attention_bf16_wgmma_bwd.cu) issue exactly the same instructions;
 * fragment layouts are documented at the top of the forward.
 */
#ifndef FORGE_FLASH_WGMMA_COMMON_CUH
#define FORGE_FLASH_WGMMA_COMMON_CUH

#include <stdint.h>

#include <cuda.h>
#include <cuda_bf16.h>

#include "wgmma_common.cuh" /* WG_ACC / WG_REGS operand lists */
#include "flash_key_tiles.cuh"

/* 2^x as one MUFU.EX2 (ex2.approx.ftz.f32). exp2f without fast-math is the same instruction wrapped in a
 * 3-instruction fixup for subnormal results; a probability below 2^-126 flushed to 0 changes nothing a bf16 P or
 * an fp32 row sum can hold, and the fixup is ~15% of the forward softmax's instructions. */
__device__ __forceinline__ float fw_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void fw_tma_load_3d(uint32_t dst, const CUtensorMap *tmap, int c0, int c1, int c2,
                                               uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];" ::"r"(dst),
        "l"((uint64_t)tmap), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}

/* 3D tiled TMA store of the box at (c0, c1, c2) of tmap from shared memory at src (rows past the tensor are not
 * written); completion tracked by the issuing thread's bulk groups (tma_store_commit / _wait_read / _wait_all) */
__device__ __forceinline__ void fw_tma_store_3d(const CUtensorMap *tmap, int c0, int c1, int c2, uint32_t src) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];" ::"l"(
                     (uint64_t)tmap),
                 "r"(c0), "r"(c1), "r"(c2), "r"(src)
                 : "memory");
}

/* S (64 x 128 fp32) (+)= A (64x16, smem desc, K-major) . B (128x16, smem desc, K-major)^T */
__device__ __forceinline__ void fw_wgmma_ss_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        WG_REGS64
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : WG_ACC64
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* S (64 x 64 fp32) (+)= A (64x16, smem desc, K-major) . B (64x16, smem desc, K-major)^T */
__device__ __forceinline__ void fw_wgmma_ss_n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        WG_REGS32
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : WG_ACC32
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* O (64 x 64 fp32) += A (64x16 bf16 in registers) . B (smem desc, MN-major: imm-trans-b 1) */
__device__ __forceinline__ void fw_wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        WG_REGS32
        "}, {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
        : WG_ACC32
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

/* O (64 x 128 fp32) += A (64x16 bf16 in registers) . B (smem desc, MN-major: imm-trans-b 1) */
__device__ __forceinline__ void fw_wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        WG_REGS64
        "}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
        : WG_ACC64
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

template <int BN> __device__ __forceinline__ void fw_qk(float (&d)[BN / 2], uint64_t desc_a, uint64_t desc_b, int sc) {
    if constexpr (BN == 64)
        fw_wgmma_ss_n64(d, desc_a, desc_b, sc);
    else
        fw_wgmma_ss_n128(d, desc_a, desc_b, sc);
}

template <int D> __device__ __forceinline__ void fw_pv(float (&o)[D / 2], const uint32_t (&a)[4], uint64_t desc_b) {
    if constexpr (D == 64)
        fw_wgmma_rs_n64(o, a, desc_b);
    else
        fw_wgmma_rs_n128(o, a, desc_b);
}

/* Keeps the work that v depends on above the next wgmma.wait_group: a wgmma wait issued after the work a
 * kernel means to overlap with the products in flight. ptxas places WARPGROUP.DEPBAR as early as its operands
 * allow, which for a wait is right after the previous one, so the work between wait_group 1 and wait_group 0
 * otherwise runs after both (seen in the SASS of the overlapped forward and of a test kernel, CUDA 13.0). A
 * wait does not move across a shared-memory store, and this store needs v (pass a value that needs all of the
 * work, e.g. the softmax's row sums). The stored value is never read; slot is the thread's own word. */
__device__ __forceinline__ void fw_pin_before_wait(uint32_t slot, float v) {
    asm volatile("st.shared.f32 [%0], %1;" ::"r"(slot), "f"(v) : "memory");
}

/* lo goes to the low half (the lower column / k index), round to nearest even */
__device__ __forceinline__ uint32_t fw_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* accumulator chunks 2kk, 2kk+1 (16 columns) of a 64 x N fp32 wgmma tile, packed to bf16: the register A
 * fragment of k16 step kk (the fragment identity at the top of flash_attention_bf16_wgmma.cu) */
template <int N> __device__ __forceinline__ void fw_to_a(uint32_t (&a)[N / 16][4], const float (&c)[N / 2]) {
#pragma unroll
    for (int kk = 0; kk < N / 16; kk++) {
        a[kk][0] = fw_pack(c[8 * kk + 0], c[8 * kk + 1]);
        a[kk][1] = fw_pack(c[8 * kk + 2], c[8 * kk + 3]);
        a[kk][2] = fw_pack(c[8 * kk + 4], c[8 * kk + 5]);
        a[kk][3] = fw_pack(c[8 * kk + 6], c[8 * kk + 7]);
    }
}

#endif
