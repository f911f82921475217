/*
 * rng.h: forge's one random number generator (PCG32), so that init, data
 * sampling and text sampling are reproducible from a seed on every platform.
 * The state is a plain struct the caller owns: no global RNG.
 */
#ifndef FORGE_RNG_H
#define FORGE_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t state;
    uint64_t inc;
} forge_rng;

void forge_rng_seed(forge_rng *rng, uint64_t seed, uint64_t stream);
uint32_t forge_rng_u32(forge_rng *rng);
uint64_t forge_rng_u64(forge_rng *rng);
/* uniform in [0, n) without modulo bias; n > 0 */
uint64_t forge_rng_below(forge_rng *rng, uint64_t n);
/* uniform in [0, 1) with 24 random bits */
float forge_rng_uniform(forge_rng *rng);
/* splitmix64's finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mix,
 * for deriving independent streams or decisions from (seed, index). */
uint64_t forge_hash64(uint64_t x);
/* standard normal (Box-Muller, computed in double) */
double forge_rng_normal(forge_rng *rng);

#endif
