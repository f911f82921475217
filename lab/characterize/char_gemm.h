/*
 * char_gemm.h: the library-GEMM cells of `forge-lab bench characterize`
 * (cuBLAS / cuBLASLt at one precision and one square size each), as harness
 * cells. Private to characterize.c; defined in char_gemm.cu.
 *
 * Every cell computes C = A . B with M = N = K = n in one layout, "TN": A is
 * row-major (M, K), B is stored transposed as Bt (N, K), so both operands are
 * K-contiguous (the layout cuBLASLt's fp8 path requires on Hopper; using it
 * for every precision keeps layout out of the comparison), and C is row-major
 * (M, N) fp32 for every cell, so the check sees the accumulator, not an
 * output rounding.
 */
#ifndef FORGE_CHAR_GEMM_H
#define FORGE_CHAR_GEMM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "../../src/bench/harness.h"

typedef enum {
    FORGE_CHAR_GEMM_CUBLAS_FP32 = 0,      /* cublasGemmEx fp32, CUBLAS_COMPUTE_32F_PEDANTIC */
    FORGE_CHAR_GEMM_CUBLAS_TF32,          /* cublasGemmEx fp32 data, CUBLAS_COMPUTE_32F_FAST_TF32 */
    FORGE_CHAR_GEMM_CUBLAS_BF16,          /* cublasGemmEx bf16 in, fp32 out, CUBLAS_COMPUTE_32F */
    FORGE_CHAR_GEMM_CUBLAS_FP16,          /* cublasGemmEx fp16 in, fp32 out, CUBLAS_COMPUTE_32F */
    FORGE_CHAR_GEMM_CUBLASLT_FP8,         /* cublasLtMatmul e4m3 in, fp32 out, scales 1, FAST_ACCUM 0 */
    FORGE_CHAR_GEMM_CUBLASLT_FP8_FASTACC, /* the same with CUBLASLT_MATMUL_DESC_FAST_ACCUM = 1 */
    FORGE_CHAR_GEMM_KIND_COUNT
} forge_char_gemm_kind;

/* "cublas_fp32", "cublas_tf32", ... (the harness cell name) */
const char *forge_char_gemm_kind_name(forge_char_gemm_kind kind);
forge_precision forge_char_gemm_kind_precision(forge_char_gemm_kind kind);

typedef struct forge_char_gemm forge_char_gemm;

/* Selects CUDA device `device`, creates the cuBLAS and cuBLASLt handles on
 * cuda_stream (a cudaStream_t; NULL = the legacy default stream) and a 64 MiB
 * workspace. seed drives the input generator (the recipe below). */
forge_status forge_char_gemm_create(forge_char_gemm **out, int device, void *cuda_stream, uint64_t seed);
void forge_char_gemm_free(forge_char_gemm *g);

/* Prepares `kind` at size n (a multiple of 64) and fills cell's name,
 * precision, flops, bytes, n_input_sets, tolerance, ctx and callbacks (the
 * caller sets group, is_baseline and counterpart). The cell stays valid until
 * the next prepare or free. Generates the inputs (cached per size and input
 * format), uploads them and computes the float64 reference of input set 0 on
 * the GPU. A failure here (no fp8 algorithm, out of memory, a device error)
 * does not stop the suite: it is returned as FORGE_OK with a cell whose
 * callbacks return that error, so the harness records the cell as failed
 * with the message. Only bad arguments are returned. */
forge_status forge_char_gemm_prepare(forge_char_gemm *g, forge_char_gemm_kind kind, int n,
                                     forge_harness_cell *cell);

/* The input-generation recipe and the layout, for the harness's provenance
 * hashes (a static string). */
const char *forge_char_gemm_recipe(void);

/* Which fp32 -> tf32 conversion cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32 path
 * applies: runs it once on size-n fp32 data that is NOT pre-rounded and
 * compares the output with three float64 references of the same data taken
 * exactly, rounded to tf32 to nearest-even, and truncated to tf32.
 * rel_err[0..2] receive ||out - ref|| / ||ref|| for each; the model whose
 * error falls to the accumulation level (~1e-6) is the conversion used. */
forge_status forge_char_gemm_probe_tf32(forge_char_gemm *g, int n, double rel_err[3]);

#ifdef __cplusplus
}
#endif

#endif
