/*
 * dw_dbias.h: the bf16 linear layer's weight gradient with its bias gradient summed inside the dW GEMM, as the
 * product runs it (lab/notes/gemm-bf16.md, "fused dbias"): a test and a bench of the product op against the path
 * it replaced. Plain C.
 *
 * matmul_backward_weight_bf16 (src/backend/cuda/matmul_bf16.cu) runs dW (OC, C) += dout^T . inp on the TN GEMM. Where
 * the GEMM's plan is the 128 x 256 tile, the GEMM also sums dout's columns (forge_gemm_bf16_tn_wgmma_dbias: the
 * producer warpgroup's idle warps sum the staged A = dout^T tiles into one partial row per split in ctx->ws) and
 * reduce.cu's finish adds the rows in split order; elsewhere (the C192 and 128 x 128 plans, the SIMT path, C = 0)
 * dbias is the separate column-sum pass over dout. The unfused baseline is the same op twice: dbias = NULL (the GEMM
 * alone), then C = 0 (the column-sum pass alone).
 */
#ifndef FORGE_LAB_DW_DBIAS_H
#define FORGE_LAB_DW_DBIAS_H

#include <stddef.h>

#include "../../src/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The product's dW plan at this shape on the current device, as "128x256 s2 tma", "c192 s2", "128x128 s8"; returns
 * 1 where the op sums dbias inside the GEMM (the 128 x 256 tile, its split rows within ctx->ws), 0 where it runs the
 * separate pass after the wgmma GEMM, -1 where the op does not run the wgmma GEMM (buf: the reason). */
int lab_dw_dbias_plan(int N, int C, int OC, char *buf, size_t len);

/* Test hook: the CUDA backend's partial-sum workspace (ctx->ws, where the GEMM's dbias partial rows go) set to NaN
 * on its stream, so a partial row the GEMM fails to write shows in dbias. */
forge_status lab_dw_dbias_poison_ws(forge_backend *be);

/* `forge-lab test dw-dbias [--quick]` (test_dw_dbias.c) and `forge-lab bench dw-dbias [--reps N]`
 * (bench_dw_dbias.cu) */
int lab_test_dw_dbias(int argc, char **argv);
int lab_bench_dw_dbias(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
