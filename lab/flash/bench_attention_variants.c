/*
 * bench_attention_variants.c: `forge-lab bench attention-variants [--quick]
 * [--reps N] [--results DIR] [--only PATTERNS]`: the bf16 flash attention kernels and variants by name, each
 * against forge's unfused fp32 attention, through the machinery of `forge
 * bench attention` (src/bench/cuda/attention_cells.h: same shapes, inputs,
 * float64 gate, harness; results/<date>_<commit>/attention-variants*.csv).
 * Measurements: lab/notes/flash.md.
 *
 * Cells (the names of the suite's earlier CSVs, so runs compare):
 * - "fwd ...": flash_bf16_fwd_mma (the mma.sync forward, 64 query rows = 4
 *   warps per CTA), flash_bf16_fwd_q128 (128 rows = 8 warps sharing each K/V
 *   tile), flash_bf16_fwd_wgmma (the Hopper TMA + wgmma forward forge runs:
 *   two CTAs per SM at D = 64, persist_n128 at D = 128),
 *   flash_bf16_fwd_wgmma_ov / _pp / _ps / _pso / _pp128 / _ps128 (the
 *   overlap / pingpong / persist / persist_ov / pingpong_n128 / persist_n128
 *   schedules), flash_bf16_fwd_wgmma_1cta
 *   (the one-CTA-per-SM forward without the softmax / P.V overlap that forge
 *   ran before, lab_flash16_forward_1cta).
 * - "fwd+bwd ...": flash_bf16_fwdbwd_mma (mma.sync forward + the mma.sync
 *   backward), flash_bf16_fwdbwd_wgmma (the wgmma forward + the mma.sync
 *   backward), flash_bf16_fwdbwd_wgmma2_f (forge's forward and backward,
 *   forge_flash_bf16_backward_wgmma), flash_bf16_fwdbwd_wgmma2 (forge's forward
 *   + the backward variant SPLIT of lab_flash16_backward_dkdv),
 *   flash_bf16_fwdbwd_wgmma2_pp / _ps (SPLIT with the pingpong / persist
 *   forward), flash_bf16_fwdbwd_wgmma2_dkp (D = 128 only: PIPE),
 *   flash_bf16_fwdbwd_wgmma2_rsa (D = 128 only: RSA),
 *   flash_bf16_fwdbwd_wgmma2_fused (D = 64 only: the
 *   wgmma forward + the fused backward, lab_flash16_backward_fused),
 *   flash_bf16_fwdbwd_wgmma2_fused2 (D = 64 only: the same with the fused
 *   backward's TMA reduce-add variant, lab_flash16_backward_fused2).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/bench/cuda/attention_cells.h"
#include "../../src/bench/harness.h"
#include "flash_lab.h"
#include "flash16_variants.h"


#define IO_FWD(io) &(io)->fs, (io)->q, (io)->k, (io)->v, (io)->out, (io)->lse
#define IO_BWD(io)                                                                                                 \
    &(io)->fs, (io)->q, (io)->k, (io)->v, (io)->out, (io)->dO, (io)->lse, (io)->delta, (io)->dq, (io)->dk, (io)->dv

static forge_status fwd_sched(const forge_attention_io *io, int sched) {
    return lab_flash16_forward_sched(IO_FWD(io), sched, io->stream);
}
static forge_status fwdbwd_wgmma2(const forge_attention_io *io, int sched, int dkdv) {
    FORGE_TRY(fwd_sched(io, sched));
    return lab_flash16_backward_dkdv(IO_BWD(io), dkdv, io->stream);
}

static forge_status fwd_mma(const forge_attention_io *io) {
    return forge_flash_bf16_forward_mma(IO_FWD(io), io->stream);
}
static forge_status fwd_q128(const forge_attention_io *io) { return lab_flash16_forward_q128(IO_FWD(io), io->stream); }
static forge_status fwd_wgmma(const forge_attention_io *io) { return fwd_sched(io, LAB_FLASH16_SCHED_BASE); }
static forge_status fwd_ov(const forge_attention_io *io) { return fwd_sched(io, LAB_FLASH16_SCHED_OVERLAP); }
static forge_status fwd_pp(const forge_attention_io *io) { return fwd_sched(io, LAB_FLASH16_SCHED_PINGPONG); }
static forge_status fwd_ps(const forge_attention_io *io) { return fwd_sched(io, LAB_FLASH16_SCHED_PERSIST); }
static forge_status fwd_pso(const forge_attention_io *io) { return fwd_sched(io, LAB_FLASH16_SCHED_PERSIST_OV); }
static forge_status fwd_pp128(const forge_attention_io *io) {
    return fwd_sched(io, LAB_FLASH16_SCHED_PINGPONG_N128);
}
static forge_status fwd_ps128(const forge_attention_io *io) { return fwd_sched(io, LAB_FLASH16_SCHED_PERSIST_N128); }
static forge_status fwd_1cta(const forge_attention_io *io) { return lab_flash16_forward_1cta(IO_FWD(io), io->stream); }

static forge_status fwdbwd_mma(const forge_attention_io *io) {
    FORGE_TRY(fwd_mma(io));
    return forge_flash_bf16_backward_mma(IO_BWD(io), io->stream);
}
static forge_status fwdbwd_wgmma(const forge_attention_io *io) {
    FORGE_TRY(fwd_wgmma(io));
    return forge_flash_bf16_backward_mma(IO_BWD(io), io->stream);
}
static forge_status fwdbwd_w2_f(const forge_attention_io *io) {
    FORGE_TRY(fwd_wgmma(io));
    return forge_flash_bf16_backward_wgmma(IO_BWD(io), io->stream);
}
static forge_status fwdbwd_w2(const forge_attention_io *io) {
    return fwdbwd_wgmma2(io, LAB_FLASH16_SCHED_BASE, LAB_FLASH16_DKDV_SPLIT);
}
static forge_status fwdbwd_w2_pp(const forge_attention_io *io) {
    return fwdbwd_wgmma2(io, LAB_FLASH16_SCHED_PINGPONG, LAB_FLASH16_DKDV_SPLIT);
}
static forge_status fwdbwd_w2_ps(const forge_attention_io *io) {
    return fwdbwd_wgmma2(io, LAB_FLASH16_SCHED_PERSIST, LAB_FLASH16_DKDV_SPLIT);
}
static forge_status fwdbwd_w2_dkp(const forge_attention_io *io) {
    return fwdbwd_wgmma2(io, LAB_FLASH16_SCHED_BASE, LAB_FLASH16_DKDV_PIPE);
}
static forge_status fwdbwd_w2_fused(const forge_attention_io *io) {
    FORGE_TRY(fwd_sched(io, LAB_FLASH16_SCHED_BASE));
    return lab_flash16_backward_fused(IO_BWD(io), io->stream);
}
static forge_status fwdbwd_w2_fused2(const forge_attention_io *io) {
    FORGE_TRY(fwd_sched(io, LAB_FLASH16_SCHED_BASE));
    return lab_flash16_backward_fused2(IO_BWD(io), io->stream);
}
static forge_status fwdbwd_w2_rsa(const forge_attention_io *io) {
    return fwdbwd_wgmma2(io, LAB_FLASH16_SCHED_BASE, LAB_FLASH16_DKDV_RSA);
}

int lab_bench_attention_variants(int argc, char **argv) {
    int quick = 0;
    long reps = 30;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--results") == 0 && i + 1 < argc) {
            forge_harness_set_default_root(argv[++i]);
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            forge_harness_set_cell_filter(argv[++i]);
        } else {
            fprintf(stderr, "usage: forge-lab bench attention-variants [--quick] [--reps N] [--results DIR] "
                            "[--only PATTERNS]\n");
            return 2;
        }
    }
    static const forge_attention_cell cells[] = {
        {"flash_bf16_fwd_mma", 0, 0, fwd_mma},
        {"flash_bf16_fwd_q128", 0, 0, fwd_q128},
        {"flash_bf16_fwd_wgmma", 0, 0, fwd_wgmma},
        {"flash_bf16_fwd_wgmma_ov", 0, 0, fwd_ov},
        {"flash_bf16_fwd_wgmma_pp", 0, 0, fwd_pp},
        {"flash_bf16_fwd_wgmma_ps", 0, 0, fwd_ps},
        {"flash_bf16_fwd_wgmma_pso", 0, 0, fwd_pso},
        {"flash_bf16_fwd_wgmma_pp128", 0, 0, fwd_pp128},
        {"flash_bf16_fwd_wgmma_ps128", 0, 0, fwd_ps128},
        {"flash_bf16_fwd_wgmma_1cta", 0, 0, fwd_1cta}, /* one CTA per SM, no overlap */
        {"flash_bf16_fwdbwd_mma", 1, 0, fwdbwd_mma},
        {"flash_bf16_fwdbwd_wgmma", 1, 0, fwdbwd_wgmma},
        {"flash_bf16_fwdbwd_wgmma2_f", 1, 0, fwdbwd_w2_f},
        {"flash_bf16_fwdbwd_wgmma2", 1, 0, fwdbwd_w2},
        {"flash_bf16_fwdbwd_wgmma2_pp", 1, 0, fwdbwd_w2_pp},
        {"flash_bf16_fwdbwd_wgmma2_ps", 1, 0, fwdbwd_w2_ps},
        {"flash_bf16_fwdbwd_wgmma2_dkp", 1, 128, fwdbwd_w2_dkp}, /* at D = 64 the SPLIT kernels */
        {"flash_bf16_fwdbwd_wgmma2_rsa", 1, 128, fwdbwd_w2_rsa}, /* at D = 64 forge's kernels */
        {"flash_bf16_fwdbwd_wgmma2_fused", 1, 64, fwdbwd_w2_fused}, /* the fused backward: D = 64 only */
        {"flash_bf16_fwdbwd_wgmma2_fused2", 1, 64, fwdbwd_w2_fused2}, /* its TMA reduce-add variant */
    };
    const forge_status s = forge_attention_suite_run(
        stdout, (int)reps, quick, "attention-variants",
        "attention-variants bench: causal, the bf16 flash kernels and variants by name vs forge's unfused fp32 "
        "attention",
        cells, (int)(sizeof cells / sizeof cells[0]));
    if (s != FORGE_OK) {
        fprintf(stderr, "forge-lab bench attention-variants: %s: %s\n", forge_status_name(s), forge_error_message());
        return 1;
    }
    return 0;
}
