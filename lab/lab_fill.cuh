/*
 * lab_fill.cuh: the lab benches' operand filler (CUDA): x[i] = a bf16 uniform in [-lim, lim) from a hash of i and
 * seed, so every bench fills the same operands the same way without a host copy.
 */
#ifndef FORGE_LAB_FILL_CUH
#define FORGE_LAB_FILL_CUH

#include <stddef.h>
#include <stdint.h>

static __global__ void lab_fill_bf16(uint16_t *x, size_t n, uint64_t seed, float lim) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + 1 + (seed << 40)) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        const float f = ((float)(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * lim;
        x[i] = (uint16_t)(__float_as_uint(f) >> 16);
    }
}

#endif
