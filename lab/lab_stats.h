/*
 * lab_stats.h: the statistics of the lab's interleaved A/B benches (C++: the .cu bench files): the median of a
 * sample and a 95% bootstrap CI of it.
 */
#ifndef FORGE_LAB_STATS_H
#define FORGE_LAB_STATS_H

#include <stdint.h>

#include <algorithm>
#include <vector>

static inline double lab_median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* 95% bootstrap CI of the median of v (2000 resamples, a fixed LCG: the same CI every run) */
static inline void lab_median_ci(const std::vector<double> &v, double *lo, double *hi) {
    std::vector<double> meds, s(v.size());
    uint64_t x = 12345;
    for (int b = 0; b < 2000; b++) {
        for (size_t i = 0; i < v.size(); i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            s[i] = v[(x >> 33) % v.size()];
        }
        meds.push_back(lab_median(s));
    }
    std::sort(meds.begin(), meds.end());
    *lo = meds[50];
    *hi = meds[1949];
}

#endif
