/*
 * harness_cuda.h: the CUDA pieces of the benchmark harness (harness.h):
 * a CUDA-event timer and the GPU provenance fields. Plain C; the definitions
 * are in src/bench/cuda/harness_cuda.cu and exist only in the CUDA build, so
 * callers guard their use with #ifdef FORGE_WITH_CUDA.
 */
#ifndef FORGE_HARNESS_CUDA_H
#define FORGE_HARNESS_CUDA_H

#include "../backend/cuda/cuda_backend.h"
#include "harness.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A timer recording CUDA events on cuda_stream (a cudaStream_t; NULL = the
 * default stream). stop() waits for the stop event, then reads
 * cudaEventElapsedTime. Free with forge_cuda_bench_timer_destroy. */
forge_status forge_cuda_bench_timer_create(forge_bench_timer *out, void *cuda_stream);
void forge_cuda_bench_timer_destroy(forge_bench_timer *timer);

/* forge_bench_marks of `capacity` CUDA events recorded on cuda_stream (created with timing, never waited on
 * until elapsed()). Free with marks.destroy(marks.ctx). */
forge_status forge_cuda_bench_marks_create(forge_bench_marks *out, void *cuda_stream, int capacity);

/* Fills the GPU fields of p for CUDA device `device`: gpu_name, sm_count,
 * driver ("13.0" from cudaDriverGetVersion, plus the NVML driver string in
 * parentheses when libnvidia-ml.so.1 loads), toolkit ("CUDA 13.0" from
 * cudaRuntimeGetVersion) and the start clocks (NVML SM and memory clocks in
 * MHz; -1 when NVML is unavailable). The end clocks are set to -1. If
 * p->commit is empty the host fields are filled first
 * (forge_provenance_init_host). */
forge_status forge_cuda_provenance(forge_provenance *p, int device);
/* Records the end clocks (call just before forge_harness_close, e.g. on
 * forge_harness_provenance(h)). */
forge_status forge_cuda_provenance_end(forge_provenance *p, int device);

#ifdef __cplusplus
}
#endif

#endif
