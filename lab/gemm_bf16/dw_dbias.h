/*
 * dw_dbias.h: the bf16 linear layer's weight gradient with its bias gradient summed inside the dW GEMM (lab
 * variant; lab/notes/gemm-bf16.md, "fused dbias"). Plain C.
 *
 * matmul_backward_weight_bf16 (src/backend/cuda/matmul_bf16.cu) runs dW (OC, C) += dout^T . inp on the TN GEMM, then
 * dbias (OC) += the column sums of dout (N, OC) by a separate pass over dout (mm_bf16_dbias_partial8_kernel, then
 * reduce.cu's ordered finish). The variant's GEMM is the product's kernel instantiated with DBIAS
 * (gemm_wgmma_kernel.cuh, gemm_dbias_helper): the producer warpgroup's idle warps sum the A = dout^T tiles the ring
 * already holds, so each (row block, split) unit of tile column 0 writes one partial row of OC into ctx->ws, and
 * cuda_colsum_finish adds the S partial rows in split order to dbias. dW: the product's plan and consumer code, so
 * the same bits; dbias: the same N-long fp32 sums in another order (op_list.h's SUM(N)).
 */
#ifndef FORGE_LAB_DW_DBIAS_H
#define FORGE_LAB_DW_DBIAS_H

#include <stddef.h>

#include "../../src/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* matmul_backward_weight_bf16's contract (dweight (OC, C) += dout^T . inp, dbias (OC) += sum_n dout, fp32; dbias may
 * be NULL) where the product runs the wgmma TN GEMM on one of the plans the variant has: the 128 x 256 tile (split
 * partials through the TMA store where the product takes it, else from the registers; any split count, the product's)
 * or the C192 kernel (any split count). At the GPT-2 124M shapes (N = 16384) these are 128 x 256 at 2 splits (qkv,
 * 2304 x 768), at 7 (attention projection, 768 x 768) and C192 at 2 (MLP projection, 768 x 3072). Everything else
 * (the 128 x 128 tile, the SIMT path's arguments, C == 0, more splits than ctx->ws holds rows of OC) is
 * FORGE_ERR_UNSUPPORTED before any launch. dbias NULL: the product op itself (nothing to fuse). */
forge_status lab_matmul_backward_weight_bf16_fused_dbias(forge_backend *be, float *dweight, float *dbias,
                                                         const forge_bf16 *dout, const forge_bf16 *inp, int N, int C,
                                                         int OC);

/* The product's dW plan at this shape on the current device, as "128x256 s2", "c192 s2", "128x128 s8" (+ " tma"
 * where split partials go through the TMA store); returns 1 where the fused variant takes it, 0 where it refuses, -1
 * where the product would not run the wgmma GEMM (buf: the reason). */
int lab_dw_dbias_plan(int N, int C, int OC, char *buf, size_t len);

/* Test hook: the CUDA backend's partial-sum workspace (ctx->ws, where the variant's dbias partial rows go) set to
 * NaN on its stream, so a partial row the GEMM fails to write shows in dbias. */
forge_status lab_dw_dbias_poison_ws(forge_backend *be);

/* `forge-lab test dw-dbias [--quick]` (test_dw_dbias.c) and `forge-lab bench dw-dbias [--reps N]`
 * (bench_dw_dbias.cu) */
int lab_test_dw_dbias(int argc, char **argv);
int lab_bench_dw_dbias(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
