/*
 * bench.h: benchmarks the CLI's `bench` subcommand runs.
 *
 * Each benchmark checks its result against the CPU reference path before it
 * times anything, so a fast wrong kernel reports an error, not a number.
 */
#ifndef FORGE_BENCH_H
#define FORGE_BENCH_H

#include <stdio.h>

#include "../base/status.h"

/* Measures one core's peak FMA throughput, then runs the CPU backend's three
 * matmuls at a few GPT-2-sized shapes as harness cells (harness.h: 1-thread
 * baseline vs all threads, float64 check, median + CI of max(reps, 30)),
 * prints the table and % of peak to `out` and writes results/<date>_<commit>/
 * cpu_matmul*.csv. FORGE_ERR_NUMERIC if any cell is garbage. */
forge_status forge_bench_cpu_matmul(FILE *out, int reps);

/* Measured FMA peak of all OpenMP threads running at once, in FLOP/s. */
double forge_bench_cpu_peak_flops(void);

#endif
