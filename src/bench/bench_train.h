/*
 * bench_train.h: end-to-end training throughput (`forge bench train`).
 *
 * Runs full optimizer steps (forward, backward, AdamW) on random tokens, so
 * the number measures the framework, not the data pipeline. Reports the
 * median step time over the timed steps after the warm-up steps, tokens/s,
 * peak pool memory, and MFU against a stated peak: for the CPU the measured
 * FMA peak of all threads, for CUDA the H200's dense bf16 tensor rate (bf16
 * step) or dense fp32 rate. Optionally one step op by op (op_profile.h) and
 * a baseline process stepped in turn with forge (coprocess.h).
 */
#ifndef FORGE_BENCH_TRAIN_H
#define FORGE_BENCH_TRAIN_H

#include <stdio.h>

#include "../backend/options.h"
#include "../base/status.h"

typedef struct {
    int steps;           /* timed steps per case */
    const char *cases;   /* "CONFIG:BxT[,CONFIG:BxT...]" (at most 4); NULL: the device's two defaults */
    int breakdown;       /* after the timed steps, one more step op by op (op_profile.h) */
    /* A command that runs the PyTorch baseline (tools/torch_train_bench.py) in the same call, e.g.
     * "python3 tools/torch_train_bench.py": it is given --config PATH --batch B --seq T and prints JSON on its
     * last line; NULL: none. */
    const char *baseline;
} forge_bench_train_options;

forge_status forge_bench_train(FILE *out, const forge_runtime_options *rt, const char *configs_dir,
                               const forge_bench_train_options *o);

/* Model FLOPs per trained token: 6 * params + attention (12 * L * T * C, the
 * PaLM-paper accounting with the causal half not discounted). */
double forge_train_flops_per_token(long long params, int n_layers, int seq_len, int d_model);

#endif
