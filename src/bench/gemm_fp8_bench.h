/*
 * gemm_fp8_bench.h: `forge bench gemm-fp8`, the fp8 rung of issue 5 (harness.h
 * cells: cuBLASLt fp8 measured in the same run as the baseline, forge's bf16
 * kernel as the 1.5x "accelerated" counterpart). Notes: docs/gemm-ladder.md.
 */
#ifndef FORGE_GEMM_FP8_BENCH_H
#define FORGE_GEMM_FP8_BENCH_H

#include <stdio.h>

#include "../base/status.h"

/* Runs the suite on CUDA device 0 (the CPU-only build returns
 * FORGE_ERR_UNSUPPORTED with a message). reps < 30 is raised to 30 by the
 * harness. Writes results/<date>_<commit>/gemm_fp8*.csv. */
forge_status forge_bench_gemm_fp8(FILE *out, int reps);

#ifdef FORGE_WITH_CUDA
/* The CUDA half (src/bench/cuda/gemm_fp8_cells.cu). */
forge_status forge_bench_gemm_fp8_cuda(FILE *out, int reps);
#endif

#endif
