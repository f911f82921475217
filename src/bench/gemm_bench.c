/*
 * gemm_bench.c: the entry of `forge bench gemm`. The suite itself (shapes,
 * inputs, float64 reference, cells) lives in src/bench/cuda/gemm_bench_cells.cu
 * because every cell is a GPU kernel; this file only decides whether the
 * suite can run in this build and on this device.
 */
#include <string.h>

#include "gemm_bench.h"

static forge_status gemm_bench_run(FILE *out, const char *device, int reps, int epi_only, int quick) {
    const char *suite = epi_only ? "gemm-epi" : "gemm";
    if (strcmp(device, "cuda") != 0)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "forge bench %s: the GEMM suite times GPU kernels only; run it with --device cuda "
                           "(got --device %s)",
                           suite, device);
#ifdef FORGE_WITH_CUDA
    return forge_bench_gemm_cuda(out, reps, epi_only, quick);
#else
    (void)out;
    (void)reps;
    (void)quick;
    return forge_error(FORGE_ERR_UNSUPPORTED,
                       "forge bench %s: this is the CPU-only build; build the CUDA one (make cuda) and run "
                       "build/cuda/forge bench %s --device cuda",
                       suite, suite);
#endif
}

forge_status forge_bench_gemm(FILE *out, const char *device, int reps) {
    return gemm_bench_run(out, device, reps, 0, 0);
}

forge_status forge_bench_gemm_epi(FILE *out, const char *device, int reps, int quick) {
    return gemm_bench_run(out, device, reps, 1, quick);
}
