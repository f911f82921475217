/*
 * bench_session.h: what every backend-driven suite does around its cells:
 * provenance (host fields, plus the GPU's on CUDA), the timer (CUDA events on
 * the backend's stream, or the monotonic clock), and at the end the closing
 * clocks, the timer's release and the harness's close.
 */
#ifndef FORGE_BENCH_SESSION_H
#define FORGE_BENCH_SESSION_H

#include "../backend/backend.h"
#include "harness.h"

typedef struct {
    forge_provenance prov;
    forge_bench_timer timer;
    int cuda, timer_is_cuda, device;
} forge_bench_session;

forge_status forge_bench_session_begin(forge_bench_session *bs, forge_backend *be);
/* Records end clocks, releases the timer and, if s is FORGE_OK, closes the
 * harness (writing the CSVs); frees it either way. Returns the first failure. */
forge_status forge_bench_session_end(forge_bench_session *bs, forge_harness *h, forge_status s);

#endif
