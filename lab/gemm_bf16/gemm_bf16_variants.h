/*
 * gemm_bf16_variants.h: the bf16 wgmma GEMM's variants that are not defaults (lab/notes/gemm-bf16.md), plain C.
 * The kernels are src's (src/backend/cuda/gemm_wgmma_kernel.cuh); what is here picks, plans and launches them
 * another way than the entry points of gemm.h do.
 *
 * dW (TN, C (M,N) (+)= A (K,M)^T . B (K,N), the layout and argument rules of forge_gemm_bf16_tn_wgmma) with
 * the split reduction and tile chosen by the caller. All are deterministic (fixed summation order 0..S-1, no
 * atomics on the data):
 * - DEFAULT: forge_gemm_bf16_tn_wgmma itself (the comparison point).
 * - PASS: the cost model's tile and splits (gemm_plan_tn); every split writes an M*N fp32 slice from the
 *   registers, then a second kernel sums the slices into C.
 * - PASS_TMA: PASS with each split's partial tile staged in shared memory and stored by TMA where the slices
 *   allow it (M % 128 == 0, N % 4 == 0, 16-byte aligned workspace), else PASS: the same sums in the same order
 *   (bit-identical to PASS). What DEFAULT runs where it does not take C192.
 * - INKERNEL: every split writes its tile's partial to a per-(tile, split) slot and arrives on a per-tile counter
 *   in the workspace (zeroed by a cudaMemsetAsync on the stream before the launch); the CTA that arrives last sums
 *   the slots in order 0..S-1 while they are still in L2 and stores C. Same plan as PASS unless the workspace
 *   holds fewer padded slots.
 * - STREAMK: not split-K: the tiles x K-tiles iterations are cut into one contiguous range per SM, so every SM
 *   does the same work; a tile shared by consecutive CTAs is reduced as in INKERNEL (fixed order of the CTAs,
 *   bit-reproducible on one device model; a different SM count cuts K differently).
 * - PASS_T192: PASS on 192 x 192 tiles (three consumer warpgroups, 512 threads) at the splits that fill one wave.
 *   Sums split at other K boundaries than PASS: equal within fp32 rounding, not bit for bit.
 * - PASS_C192: PASS_T192's plan on the kernel with two consumer warpgroups that split the tile's N (what DEFAULT
 *   runs at the GPT-2 MLP and attention-projection dW, forced here at any shape). Same K split as PASS_T192.
 * - MODEL192: DEFAULT with the 192 x 192 three-warpgroup tile among the cost model's candidates (one-wave plans
 *   only): C192 where DEFAULT takes it, else the model's tile, the partials through the TMA store where allowed.
 * splits > 0 replaces the split count of the mode's plan (capped at 32, the K slices and what the workspace holds;
 * renormalised so that no split is empty), the tile stays the mode's; DEFAULT and STREAMK take none (0).
 * lab_gemm_bf16_tn_workspace's size is enough for every mode at that splits.
 *
 * NT / NN fused epilogues with the store forced: tma_store != 0 the TMA store (refused where the arguments do not
 * allow it), 0 the direct store from the registers wherever the entries would take the TMA store.
 */
#ifndef FORGE_LAB_GEMM_BF16_VARIANTS_H
#define FORGE_LAB_GEMM_BF16_VARIANTS_H

#include <stddef.h>

#include "../../src/backend/cuda/gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LAB_GEMM_TN_DEFAULT = 0,
    LAB_GEMM_TN_PASS,
    LAB_GEMM_TN_INKERNEL,
    LAB_GEMM_TN_STREAMK,
    LAB_GEMM_TN_PASS_TMA,
    LAB_GEMM_TN_PASS_T192,
    LAB_GEMM_TN_PASS_C192,
    LAB_GEMM_TN_MODEL192,
    LAB_GEMM_TN_N_MODES
} lab_gemm_tn_reduce;

/* "default", "pass", "inkernel", "streamk", "pass_tma", "t192", "c192", "model192" ("?" otherwise). */
const char *lab_gemm_tn_reduce_name(lab_gemm_tn_reduce reduce);

/* Bytes of workspace every mode wants at this shape with `splits` (0: the plans' own). */
forge_status lab_gemm_bf16_tn_workspace(int M, int N, int K, int splits, size_t *bytes);

forge_status lab_gemm_bf16_tn_reduce(const void *A_bf16, const void *B_bf16, float *C, int M, int N, int K,
                                     int accumulate, void *workspace, size_t workspace_bytes,
                                     lab_gemm_tn_reduce reduce, int splits, void *stream);

/* dW on an explicit plan: tile width bn (128 or 256: the 128-row kernel, split partials through the TMA store where
 * allowed; 192: the C192 kernel) and splits (1..32, renormalised so that no split is empty); the workspace must
 * hold splits * M * N floats when splits > 1. */
forge_status lab_gemm_bf16_tn_plan(const void *A_bf16, const void *B_bf16, float *C, int M, int N, int K,
                                   int accumulate, void *workspace, size_t workspace_bytes, int bn, int splits,
                                   void *stream);

forge_status lab_gemm_bf16_nt_epi_store(const void *A_bf16, const void *B_bf16, void *C, int M, int N, int K,
                                        const forge_gemm_epilogue *epi, int tma_store, void *stream);
forge_status lab_gemm_bf16_nn_epi_store(const void *A_bf16, const void *B_bf16, void *C, int M, int N, int K,
                                        const forge_gemm_epilogue *epi, int tma_store, void *stream);

/* The lab commands (lab/forge_lab.c): `forge-lab bench gemm-bf16-variants`, `forge-lab test gemm-bf16`. */
int lab_bench_gemm_bf16_variants(int argc, char **argv);
int lab_test_gemm_bf16(int argc, char **argv);
/* `forge-lab bench pp-bf16-epi` (bench_pp_bf16_epi.cu): forge_gemm_bf16_nt_epi's bf16 forms on the cooperative
 * kernel (TMA store forced) vs the default (the bf16 ping-pong kernel), interleaved, with a bitwise check. */
int lab_bench_pp_bf16_epi(int argc, char **argv);
/* `forge-lab bench dw-plan` (bench_dw_plan.cu): the training step's dW shapes on the default plan and on explicit
 * (tile, splits) plans, interleaved. */
int lab_bench_dw_plan(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
