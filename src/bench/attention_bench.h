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
 * harness. quick = 1 runs only the first two shapes ((16, 12, 1024, 64), (64, 6, 512, 64)). Writes
 * results/<date>_<commit>/attention*.csv. */
forge_status forge_bench_attention(FILE *out, const char *device, int reps, int quick);

/* `forge bench attention --baseline CMD`: instead of the suite, forge's defaults at the issue-18 shapes (gpt2-124m's
 * (16, 12, 1024, 64), (64, 6, 512, 64), (64, 8, 1024, 64), (16, 16, 2048, 128), (8, 16, 4096, 128)), forward and
 * forward + backward, each checked against float64, paired round by round with CMD --serve (tools/sdpa_bench.py:
 * PyTorch SDPA on cuDNN): `rounds` rounds (at least 5) of `per_round` calls on each side; prints per case both
 * medians, TFLOP/s and forge's speed-up (baseline ms / forge ms per round) with its bootstrap 95% CI. The line
 * protocol is in attention_cells.cu. FORGE_ERR_NUMERIC if a check failed (every case still runs). */
forge_status forge_bench_attention_paired(FILE *out, const char *device, const char *command, int rounds,
                                          int per_round);

#ifdef FORGE_WITH_CUDA
/* The CUDA halves (src/bench/cuda/attention_cells.cu). */
forge_status forge_bench_attention_cuda(FILE *out, int reps, int quick);
forge_status forge_bench_attention_paired_cuda(FILE *out, const char *command, int rounds, int per_round);
#endif

#endif
