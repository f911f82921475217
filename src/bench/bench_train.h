/*
 * bench_train.h: end-to-end training throughput (`forge bench train`).
 *
 * Runs full optimizer steps (forward, backward, AdamW) on random tokens, so
 * the number measures the framework, not the data pipeline. Reports the
 * median step time over the timed steps after one warm-up step, tokens/s,
 * peak pool memory, and MFU against a stated peak: for the CPU the measured
 * FMA peak of all threads, for CUDA the H200's dense fp32 (non-tensor) rate.
 */
#ifndef FORGE_BENCH_TRAIN_H
#define FORGE_BENCH_TRAIN_H

#include <stdio.h>

#include "../backend/options.h"
#include "../base/status.h"

forge_status forge_bench_train(FILE *out, const forge_runtime_options *rt, const char *configs_dir, int steps);

/* Model FLOPs per trained token: 6 * params + attention (12 * L * T * C, the
 * PaLM-paper accounting with the causal half not discounted). */
double forge_train_flops_per_token(long long params, int n_layers, int seq_len, int d_model);

#endif
