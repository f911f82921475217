/*
 * cpu_fixtures.h: helpers shared by the CPU op tests (test_ops_forward.c,
 * test_gradcheck.c): random fills from forge_rng and array comparisons.
 *
 * Kept as static functions in a header so each test file stays one
 * translation unit; nothing here knows about a particular op.
 */
#ifndef FORGE_TEST_CPU_FIXTURES_H
#define FORGE_TEST_CPU_FIXTURES_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/base/rng.h"

/* zeroed host array of n floats (never NULL for n = 0) */
static inline float *fx_floats(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

/* uniform in [lo, hi) */
static inline void fx_fill(forge_rng *rng, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * forge_rng_uniform(rng);
}

static inline float *fx_random(forge_rng *rng, size_t n, float lo, float hi) {
    float *x = fx_floats(n);
    if (x) fx_fill(rng, x, n, lo, hi);
    return x;
}

static inline float *fx_copy(const float *x, size_t n) {
    float *y = fx_floats(n);
    if (y && n) memcpy(y, x, n * sizeof(float));
    return y;
}

/* max |a - b| / max |b|: an error relative to the scale of the reference b,
 * so entries of b near zero do not blow it up. NaN anywhere gives +inf. */
static inline double fx_rel_err(const float *a, const float *b, size_t n) {
    double diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double d = fabs((double)a[i] - b[i]);
        if (d > diff) diff = d;
        if (fabs(b[i]) > scale) scale = fabs(b[i]);
    }
    return scale > 0.0 ? diff / scale : diff;
}

#endif
