/*
 * sampler.h: picking the next token from a row of logits.
 *
 * Order of operations (the one Hugging Face's generate() uses): divide the
 * logits by the temperature, keep the top_k most likely tokens, keep the
 * smallest set of those whose probabilities (renormalised over the top k) sum
 * to at least top_p, renormalise, and draw one token with a single
 * forge_rng_uniform(). Ties rank the lower token id first, so the result is a
 * pure function of the logits, the settings and the rng state on every
 * platform and qsort implementation.
 */
#ifndef FORGE_SAMPLER_H
#define FORGE_SAMPLER_H

#include <stdint.h>

#include "../base/rng.h"

/* Token ids are carried through scratch as floats, exact up to 2^24. */
#define FORGE_SAMPLE_MAX_VOCAB (1 << 24)

/* logits: (V,). temperature <= 0 is greedy (argmax, lowest id on ties) and
 * draws nothing from rng. top_k <= 0 or >= V disables top-k; top_p >= 1
 * disables the nucleus filter, top_p <= 0 keeps only the most likely token.
 * scratch: at least 2*V floats, overwritten. NaN logits count as -inf; if
 * every logit is NaN the result is 0. Returns -1 only for invalid arguments
 * (NULL logits, V outside [1, FORGE_SAMPLE_MAX_VOCAB], or NULL rng/scratch
 * when a draw is needed). O(V) without filters, O(V log V) with them. */
int32_t forge_sample_token(const float *logits, int V, float temperature, int top_k, float top_p,
                           forge_rng *rng, float *scratch);

#endif
