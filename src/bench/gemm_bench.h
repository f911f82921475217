/*
 * gemm_bench.h: `forge bench gemm`, the GEMM suite (harness.h
 * cells: cuBLAS measured in the same run as the baseline of every shape).
 */
#ifndef FORGE_GEMM_BENCH_H
#define FORGE_GEMM_BENCH_H

#include <stdio.h>

#include "../base/status.h"

/* Runs the suite on `device` ("cuda" only; the CPU build and --device cpu
 * return FORGE_ERR_UNSUPPORTED with a message). reps < 30 is raised to 30 by
 * the harness. Writes results/<date>_<commit>/gemm*.csv: the plain GEMM
 * groups, then the fused-epilogue groups (bias+GELU, residual, bf16 out,
 * GELU backward in dX, C += against cuBLAS beta = 1). Every forge cell runs
 * the library's default for its arguments (the variants: forge-lab bench
 * gemm-bf16-variants). */
forge_status forge_bench_gemm(FILE *out, const char *device, int reps);
/* `forge bench gemm-epi`: only the fused-epilogue groups (gemm_epi*.csv); quick: only the small edge groups
 * (M*N <= 2^21: every fused load / store path, small enough for compute-sanitizer). */
forge_status forge_bench_gemm_epi(FILE *out, const char *device, int reps, int quick);

#ifdef FORGE_WITH_CUDA
/* The CUDA half (src/bench/cuda/gemm_bench_cells.cu), on CUDA device 0; epi_only: the epilogue groups alone;
 * quick: of those, the edge groups only. */
forge_status forge_bench_gemm_cuda(FILE *out, int reps, int epi_only, int quick);
#endif

#endif
