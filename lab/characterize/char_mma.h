/*
 * char_mma.h: the matrix-unit part of `forge-lab bench characterize` (issue 4):
 * throughput ceilings of mma.sync (bf16, fp16, tf32, fp8 e4m3), wgmma (bf16,
 * fp8 e4m3) and plain FFMA, each a harness cell, plus accumulator probes
 * (hostile K-reductions, mantissa bits kept by the accumulation) reported as
 * findings. Plain C; the definitions are in char_mma.cu (the lab is CUDA-only).
 *
 * The decision a caller would otherwise get wrong: the harness's timer
 * records CUDA events on some stream the suite chose. forge_char_mma_run
 * launches on a stream of its own and synchronises after every run, so the
 * timing is right whichever stream the timer uses (the price: one launch
 * latency, a few microseconds, inside each millisecond-scale sample). A
 * driver that knows the timer's stream passes it to
 * forge_char_mma_run_on_stream, which then launches there without the
 * synchronisation.
 */
#ifndef FORGE_CHAR_MMA_H
#define FORGE_CHAR_MMA_H

#include <stdio.h>

#include "../../src/bench/harness.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One probe result. expected: the exact (float64) value of the probed sum;
 * got: what the hardware returned; kept_bits: for the mantissa-bits probes,
 * the significant bits the accumulation kept relative to its largest term
 * (24 = fp32-exact as far as an fp32 output can show), -1 for probes that are
 * not bit counts. note: how to read it (e.g. truncates vs rounds). */
typedef struct {
    char name[64];
    double expected, got;
    int kept_bits;
    char note[160];
} forge_char_finding;

/* Adds the throughput cells to h (group "matrix-unit peaks", char_ffma the
 * baseline), prints the probe findings to `out` as lines starting with
 * "FINDING:", and keeps them for forge_char_mma_findings. Needs a compute
 * capability 9.0 device (the kernels are built for sm_90a only). Returns
 * FORGE_OK unless a device call failed (a cell whose check fails is marked
 * garbage by the harness, not an error here). */
forge_status forge_char_mma_run(forge_harness *h, FILE *out);
/* The same, launching every kernel on cuda_stream (a cudaStream_t: the one the
 * harness's timer records on), without synchronising after each run. */
forge_status forge_char_mma_run_on_stream(forge_harness *h, FILE *out, void *cuda_stream);

/* Copies up to cap findings of the last run into out; returns how many the
 * last run produced (which may exceed cap). The findings live in this module
 * until the next run. */
int forge_char_mma_findings(forge_char_finding *out, int cap);

#ifdef __cplusplus
}
#endif

#endif
