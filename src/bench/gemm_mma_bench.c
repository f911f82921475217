/*
 * gemm_mma_bench.c: the entry of `forge bench gemm-mma`. The cells live in
 * src/bench/cuda/gemm_mma_cells.cu (every cell is a GPU kernel); this file
 * only decides whether the suite can run in this build.
 */
#include "gemm_mma_bench.h"

forge_status forge_bench_gemm_mma(FILE *out, int reps) {
#ifdef FORGE_WITH_CUDA
    return forge_bench_gemm_mma_cuda(out, reps);
#else
    (void)out;
    (void)reps;
    return forge_error(FORGE_ERR_UNSUPPORTED,
                       "forge bench gemm-mma: this is the CPU-only build; the suite times GPU kernels only. Build "
                       "the CUDA one (make cuda) and run build/cuda/forge bench gemm-mma");
#endif
}
