/*
 * characterize.h: `forge-lab bench characterize [--reps N] [--results DIR] [--order ...]`, the Hopper
 * characterization suite (issue 4): library GEMM throughput and accuracy per precision and size (cuBLAS /
 * cuBLASLt), the matrix-unit microbenchmarks and accumulator probes (char_mma.h), and clock-state behaviour
 * (per-rep distributions at small vs large sizes), all as benchmark-harness cells (src/bench/harness.h).
 */
#ifndef FORGE_LAB_CHARACTERIZE_H
#define FORGE_LAB_CHARACTERIZE_H

#include <stdio.h>

#include "../../src/base/status.h"

/* Runs the suite on CUDA device 0 (a build without cuBLAS returns FORGE_ERR_UNSUPPORTED: its GEMM cells are the
 * libraries'). reps <= 0 means the default, 100 (the harness raises anything below 30 to 30); the clock-state
 * cells always run at least 300. Writes under <results_root>/<YYYY-MM-DD>_<commit>[-dirty]/ (results_root NULL or
 * "" = "results"): characterize.csv + _samples.csv + _provenance.json, the same three for characterize_clock, and
 * characterize_findings.csv (name, expected, got, kept_bits, note). Prints the harness tables, FINDING: lines and a
 * summary table to `out`. Returns FORGE_ERR_NUMERIC (after writing everything) when a GEMM cell is garbage or
 * failed (except fp8 with fast accumulation over its tolerance: that is a finding), and the matrix-unit part's
 * error if it failed. */
forge_status lab_characterize_run(FILE *out, int reps, const char *results_root);

/* The command: parses the options (--reps, --results, --order), runs the suite on stdout; the exit status. */
int lab_bench_characterize(int argc, char **argv);

#endif
