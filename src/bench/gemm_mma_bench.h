/*
 * gemm_mma_bench.h: `forge bench gemm-mma`, the mma.sync rung of issue 5
 * (harness.h cells; cuBLAS bf16 and cuBLAS tf32 measured in the same run as
 * the baselines). Notes: docs/gemm-mma.md.
 */
#ifndef FORGE_GEMM_MMA_BENCH_H
#define FORGE_GEMM_MMA_BENCH_H

#include <stdio.h>

#include "../base/status.h"

/* Runs the suite on CUDA device 0 (the CPU-only build returns
 * FORGE_ERR_UNSUPPORTED with a message). reps < 30 is raised to 30 by the
 * harness. Writes results/<date>_<commit>/gemm_mma*.csv. */
forge_status forge_bench_gemm_mma(FILE *out, int reps);

#ifdef FORGE_WITH_CUDA
/* The CUDA half (src/bench/cuda/gemm_mma_cells.cu). */
forge_status forge_bench_gemm_mma_cuda(FILE *out, int reps);
#endif

#endif
