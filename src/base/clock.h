/* clock.h: wall-clock seconds from the monotonic clock, for progress lines and
 * CPU timings (GPU work is timed with CUDA events, see src/bench/harness.h). */
#ifndef FORGE_CLOCK_H
#define FORGE_CLOCK_H

#include <time.h>

static inline double forge_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
