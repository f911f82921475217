/* rng.c: PCG32 (O'Neill, pcg-random.org, "pcg32_random_r"). */
#include "rng.h"

#include <math.h>

uint32_t forge_rng_u32(forge_rng *rng) {
    uint64_t old = rng->state;
    rng->state = old * 6364136223846793005ULL + rng->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

void forge_rng_seed(forge_rng *rng, uint64_t seed, uint64_t stream) {
    rng->state = 0;
    rng->inc = (stream << 1u) | 1u;
    forge_rng_u32(rng);
    rng->state += seed;
    forge_rng_u32(rng);
}

uint64_t forge_rng_u64(forge_rng *rng) {
    uint64_t hi = forge_rng_u32(rng);
    return (hi << 32) | forge_rng_u32(rng);
}

uint64_t forge_rng_below(forge_rng *rng, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = forge_rng_u64(rng);
    } while (x >= limit);
    return x % n;
}

float forge_rng_uniform(forge_rng *rng) { return (forge_rng_u32(rng) >> 8) * (1.0f / 16777216.0f); }

double forge_rng_normal(forge_rng *rng) {
    /* u1 in (0, 1] so log never sees 0 */
    double u1 = ((forge_rng_u64(rng) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (forge_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t forge_hash64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
