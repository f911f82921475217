/*
 * gemm_mma_lab.h: the lab's bf16 instantiation of forge's warp-level tensor-core GEMM (rung 2 of the GEMM ladder,
 * lab/notes/gemm-ladder.md; the kernel: src/backend/cuda/gemm_mma_kernel.cuh), plain C. forge's bf16 GEMM is the
 * wgmma one (gemm.h); this one is timed by `forge-lab bench gemm-mma` and checked by `forge-lab test gemm-mma`.
 *
 *   C (M,N) fp32 = A (M,K) . B (N,K)^T [+ bias (N)]      A, B bf16 (uint16 bit patterns), K-major
 *
 * mma.sync m16n8k16 bf16 x bf16 -> fp32. Any M, N, K >= 0 and any alignment (16-byte cp.async loads where K is a
 * multiple of 8 and A, B are 16-byte aligned, bounds-checked scalar loads otherwise); bias may be NULL. Pointers
 * are device pointers, stream a cudaStream_t (NULL = default); nothing synchronises with the host.
 */
#ifndef FORGE_LAB_GEMM_MMA_LAB_H
#define FORGE_LAB_GEMM_MMA_LAB_H

#include "../../src/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

forge_status lab_gemm_mma_bf16_nt(const void *A_bf16, const void *B_bf16, float *C, const float *bias, int M, int N,
                                  int K, void *stream);

/* The commands (lab/forge_lab.c): `forge-lab bench gemm-mma` (gemm_mma_cells.cu), `forge-lab test gemm-mma`
 * (test_gemm_mma.c). argc/argv: the words after the command's name; the exit status. */
int lab_bench_gemm_mma(int argc, char **argv);
int lab_test_gemm_mma(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
