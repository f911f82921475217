/*
 * gemm_fp8_bench.c: the entry of `forge bench gemm-fp8`. The cells live in
 * src/bench/cuda/gemm_fp8_cells.cu (every cell is a GPU kernel); this file
 * only decides whether the suite can run in this build.
 */
#include "gemm_fp8_bench.h"

forge_status forge_bench_gemm_fp8(FILE *out, int reps) {
#ifdef FORGE_WITH_CUDA
    return forge_bench_gemm_fp8_cuda(out, reps);
#else
    (void)out;
    (void)reps;
    return forge_error(FORGE_ERR_UNSUPPORTED,
                       "forge bench gemm-fp8: this is the CPU-only build; the suite times GPU kernels only. Build "
                       "the CUDA one (make cuda) and run build/cuda/forge bench gemm-fp8");
#endif
}
