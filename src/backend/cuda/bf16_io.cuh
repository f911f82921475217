/*
 * bf16_io.cuh: bf16 <-> fp32 on the device and the 8-wide (16-byte) chunk loads and stores of the bf16 op
 * kernels (elementwise_bf16.cu, encoder_bf16.cu, norm_bf16.cu, rope_bf16.cu).
 *
 * Widening is exact (the bf16 bits are the top half of the fp32); narrowing is cvt.rn.bf16.f32, round to nearest
 * even, the same bits as base/dtype.h's forge_bf16_from_f32 for every non-NaN value. A chunk of W = 8 elements
 * is one 16-byte access (the caller has checked the alignment); W = 1 is the scalar form of the same code.
 */
#ifndef FORGE_BF16_IO_CUH
#define FORGE_BF16_IO_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "cuda_ops.h"

#define BF16_NAN_BITS 0x7fc0u /* the quiet NaN a kernel writes for a row it refuses */

__device__ __forceinline__ float bf16_to_f32(forge_bf16 h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ forge_bf16 f32_to_bf16(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

/* v[0..8) = the 8 bf16 of a 16-byte vector u widened, in address order */
__device__ __forceinline__ void bf16x8_unpack(float *v, uint4 u) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        v[2 * k] = __uint_as_float(w[k] << 16); /* little-endian: the lower address is the low half */
        v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
}

/* v[0..W) = p[0..W) widened; W = 8 reads one aligned 16-byte vector */
template <int W>
__device__ __forceinline__ void bf16_load(float *v, const forge_bf16 *p) {
    if constexpr (W == 8) {
        bf16x8_unpack(v, *reinterpret_cast<const uint4 *>(p));
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) v[k] = bf16_to_f32(p[k]);
    }
}

/* p[0..W) = rn(v[0..W)); W = 8 writes one aligned 16-byte vector */
template <int W>
__device__ __forceinline__ void bf16_store(forge_bf16 *p, const float *v) {
    if constexpr (W == 8) {
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = (uint32_t)f32_to_bf16(v[2 * k]) | ((uint32_t)f32_to_bf16(v[2 * k + 1]) << 16);
        *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) p[k] = f32_to_bf16(v[k]);
    }
}

/* v[0..W) = p[0..W) of fp32; W = 8 reads two aligned 16-byte vectors */
template <int W>
__device__ __forceinline__ void f32_load(float *v, const float *p) {
    if constexpr (W == 8) {
        const float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) v[k] = p[k];
    }
}

static inline bool bf16_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

#endif
