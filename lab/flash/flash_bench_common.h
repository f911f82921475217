/*
 * flash_bench_common.h: what the lab's flash benches (bench_flash16_*.cu) share: the error checks that print the
 * bench's name and return 1, bf16 round-to-nearest-even on the host, the largest relative difference of two device
 * arrays, and the median of a sample.
 */
#ifndef FORGE_LAB_FLASH_BENCH_COMMON_H
#define FORGE_LAB_FLASH_BENCH_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

extern "C" {
#include "../../src/base/status.h" /* a C header without C++ guards */
}

/* x, a CUDA runtime call: on failure print "forge-lab bench NAME: x: error" and return 1 */
#define LAB_BENCH_CUDA(name, x)                                                                                    \
    do {                                                                                                           \
        cudaError_t e_ = (x);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "forge-lab bench %s: %s: %s\n", name, #x, cudaGetErrorString(e_));                     \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)
/* x, a forge call: on failure print "forge-lab bench NAME: x: message" and return 1 */
#define LAB_BENCH_FORGE(name, x)                                                                                   \
    do {                                                                                                           \
        forge_status s_ = (x);                                                                                     \
        if (s_ != FORGE_OK) {                                                                                      \
            fprintf(stderr, "forge-lab bench %s: %s: %s\n", name, #x, forge_error_message());                      \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

/* f rounded to bf16, nearest even */
static inline uint16_t lab_bench_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float lab_bench_float(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* max |a - b| / max |b| over n floats on the device (INFINITY if a copy fails) */
static inline double lab_bench_rel(const float *a, const float *b, size_t n) {
    std::vector<float> ha(n), hb(n);
    if (cudaMemcpy(ha.data(), a, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(hb.data(), b, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess)
        return INFINITY;
    double mx = 0.0, err = 0.0;
    for (size_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs((double)hb[i]));
        const double e = fabs((double)ha[i] - hb[i]);
        err = e > err || isnan(e) ? e : err;
    }
    return err / (mx > 0 ? mx : 1);
}

/* the median of t (sorted in place), in t's unit */
static inline double lab_bench_median(std::vector<float> &t) {
    std::sort(t.begin(), t.end());
    const size_t n = t.size();
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

#endif
