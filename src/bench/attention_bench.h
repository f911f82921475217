/*
 * attention_bench.h: `forge bench attention --device cuda`: forge's
 * bf16 flash attention as forge runs it (forge_flash_bf16_forward and
 * forge_flash_bf16_backward, flash_attention_bf16.h), forward and forward +
 * backward, against forge's unfused fp32 attention (the CUDA backend's
 * materialised attention_forward/backward) measured in the same run, at the
 * issue's causal shapes. The PyTorch SDPA baselines (cuDNN, flash) come from
 * tools/sdpa_bench.py, which also prints forge/cuDNN ratios from this suite's
 * CSV. Notes: lab/notes/flash-attention.md; the kernel variants' suite is the lab's
 * (`forge-lab bench attention-variants`).
 */
#ifndef FORGE_ATTENTION_BENCH_H
#define FORGE_ATTENTION_BENCH_H

#include <stdio.h>

#include "../base/status.h"

/* device must be "cuda" (anything else, or the CPU-only build, is
 * FORGE_ERR_UNSUPPORTED with a message). reps < 30 is raised to 30 by the
 * harness. quick = 1 runs only the two smaller shapes. Writes
 * results/<date>_<commit>/attention*.csv. */
forge_status forge_bench_attention(FILE *out, const char *device, int reps, int quick);

#ifdef FORGE_WITH_CUDA
/* The CUDA half (src/bench/cuda/attention_cells.cu). */
forge_status forge_bench_attention_cuda(FILE *out, int reps, int quick);
#endif

#endif
