/*
 * dtype.h: the element types forge stores, and bf16's conversions.
 *
 * bf16 is the top half of an IEEE fp32 (sign, 8 exponent bits, 7 mantissa
 * bits), stored as its 16-bit pattern (forge_bf16). fp32 -> bf16 rounds to
 * nearest, ties to even, as the GPU's cvt.rn.bf16.f32 does, so a CPU reference
 * that rounds at the same points as a kernel gets the same bits; NaN stays NaN
 * (quiet), infinities stay infinite. bf16 -> fp32 is exact.
 */
#ifndef FORGE_DTYPE_H
#define FORGE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    FORGE_F32 = 0,
    FORGE_I32,
    FORGE_U16,
    FORGE_BF16,
    FORGE_DTYPE_COUNT
} forge_dtype;

size_t forge_dtype_size(forge_dtype dtype);
const char *forge_dtype_name(forge_dtype dtype);

typedef uint16_t forge_bf16;

/* The conversions are shared by the CPU references and the CUDA kernels, so both round with the same code. */
#ifdef __CUDACC__
#define FORGE_HOST_DEVICE __host__ __device__
#else
#define FORGE_HOST_DEVICE
#endif

FORGE_HOST_DEVICE static inline forge_bf16 forge_bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (forge_bf16)((u >> 16) | 0x0040u); /* NaN: keep it quiet */
    u += 0x7fffu + ((u >> 16) & 1u);                                                  /* nearest, ties to even */
    return (forge_bf16)(u >> 16);
}

FORGE_HOST_DEVICE static inline float forge_bf16_to_f32(forge_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* fp32 rounded to the nearest bf16, kept as fp32: where a kernel rounds an intermediate. */
FORGE_HOST_DEVICE static inline float forge_round_bf16(float f) { return forge_bf16_to_f32(forge_bf16_from_f32(f)); }

#endif
