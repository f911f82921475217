/*
 * attention_cells.h: the machinery of `forge bench attention`
 * (attention_cells.cu), shared with the lab's attention suite (`forge-lab
 * bench attention-variants`): per shape, the inputs, the float64 reference,
 * forge's unfused fp32 attention as the baseline of every group, the gate and
 * the harness; a suite adds its bf16 flash cells. Plain C (C linkage).
 *
 * Per shape (B, H, T, D), causal, H = Hkv, two groups: "fwd ..." (the
 * baseline unfused_fp32_fwd, then the suite's forward cells; out is checked)
 * and "fwd+bwd ..." (unfused_fp32_fwdbwd, then the suite's forward + backward
 * cells; out, dQ, dK, dV are checked). FLOPs: forward 2*B*H*T^2*D (causal),
 * backward 2.5x that (the convention), so fwd+bwd counts 3.5x.
 */
#ifndef FORGE_ATTENTION_CELLS_H
#define FORGE_ATTENTION_CELLS_H

#include <stdint.h>
#include <stdio.h>

#include "../../backend/cuda/flash_attention_bf16.h"
#include "../../base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a flash cell reads and writes: one shape's dense (B, T, H, D) bf16 inputs and the flash outputs
 * (poisoned before every run), on the CUDA backend's stream (a cudaStream_t), which the timer records on. */
typedef struct {
    forge_flash_shape fs; /* causal, Tq = Tk = T, H = Hkv, strides H*D */
    const uint16_t *q, *k, *v, *dO;
    uint16_t *out;
    float *lse, *delta, *dq, *dk, *dv;
    void *stream;
} forge_attention_io;

typedef struct {
    const char *name; /* forward cells "flash_bf16_fwd_*", forward + backward cells "flash_bf16_fwdbwd_*" (the
                       * names tools/sdpa_bench.py pairs with the PyTorch SDPA baselines) */
    int bwd;          /* 0: a forward cell, 1: a forward + backward cell */
    int only_d;       /* 0: every shape; 64 or 128: only the shapes of that head dim */
    forge_status (*run)(const forge_attention_io *io);
} forge_attention_cell;

/* Runs the suite `suite` (the harness's name: results/<date>_<commit>/<suite>*.csv) over the shapes
 * (quick = 1: the first two, (16, 12, 1024, 64) and (64, 6, 512, 64)): per shape and group the unfused fp32 baseline, then each of `cells`. banner
 * (what the suite compares) is printed once, with the gate, before the first shape. reps < 30 is raised to 30 by the harness. FORGE_ERR_NUMERIC if a
 * cell failed its gate or was garbage. */
forge_status forge_attention_suite_run(FILE *out, int reps, int quick, const char *suite, const char *banner,
                                       const forge_attention_cell *cells, int ncells);

#ifdef __cplusplus
}
#endif

#endif
