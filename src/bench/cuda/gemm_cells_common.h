/*
 * gemm_cells_common.h: what the GEMM bench suites share
 * (gemm_bench_cells.cu: `forge bench gemm`, gemm_mma_cells.cu:
 * `forge bench gemm-mma`); the definitions are in gemm_cells_common.cu.
 *
 *   C (M,N) fp32 = A . B [+ bias (N)]
 *
 * - Inputs: uniform in [-1, 1) from a stateless hash of (seed, set, matrix,
 *   index), rounded ON THE HOST to the input type (bf16 nearest-even, or tf32
 *   nearest-even stored as fp32), so the float64 reference (a tiled fp64 GEMM
 *   on the GPU) reads exactly the values the kernels multiply. Bias (N):
 *   PCG32(seed, stream 999) uniform [-1, 1). Inputs rotate over enough sets
 *   that one set's A and B are not all in the 50 MB L2 (>= ~256 MB in total,
 *   at most GC_MAX_SETS sets).
 * - Layout of the stored operands (the reference and the cuBLAS baseline
 *   read them the same way): a_mn = 0: A stored (M,K) (K contiguous), 1:
 *   stored (K,M); b_mn = 0: B stored (N,K), 1: stored (K,N). NT = (0,0), NN
 *   (dX = dY.W) = (0,1), TN (dW = dY^T.X) = (1,1).
 * - The gate (check) runs on the GPU: sum (c - (ref [+ bias]))^2, sum
 *   (ref [+ bias])^2 in double, and the count of elements still carrying the
 *   poison bit pattern 0xFFFFFFFF (a NaN no kernel produces from finite
 *   inputs). A NaN anywhere makes the error NaN: garbage.
 *
 * Plain C declarations (C linkage); the suite files are the only callers.
 *
 * cuBLAS is optional (`make cuda CUBLAS=0` defines FORGE_NO_CUBLAS and links
 * no cuBLAS). The pattern every suite file follows, so that it builds and
 * runs both ways with no #ifdef of its own:
 * - NAME cuBLAS cells "cublas..." (cublas_bf16, cublas_tf32, cublaslt_fp8,
 *   ...) and only those: in a build without cuBLAS, gc_session_run_cell
 *   skips a cell whose name starts with "cublas" and prints
 *   "skip <cell> [<group>]: built without cuBLAS (make cuda CUBLAS=0)"; the
 *   forge cells of the group still run, with the harness verdict
 *   "no-baseline".
 * - Call cuBLAS only through gc_cublas_gemm, or inside
 *   `#if GC_HAVE_CUBLAS ... #endif` (a new file with its own cuBLAS/cuBLASLt
 *   calls, e.g. an fp8 suite: wrap those calls, and return
 *   FORGE_ERR_UNSUPPORTED with GC_NO_CUBLAS_REASON in the #else branch).
 */
#ifndef FORGE_GEMM_CELLS_COMMON_H
#define FORGE_GEMM_CELLS_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime.h>
#ifndef FORGE_NO_CUBLAS
#include <cublas_v2.h>
#define GC_HAVE_CUBLAS 1
#else
#define GC_HAVE_CUBLAS 0
typedef void *cublasHandle_t; /* always NULL without cuBLAS */
#endif
#define GC_NO_CUBLAS_REASON "built without cuBLAS (make cuda CUBLAS=0)"

#ifdef __cplusplus
extern "C" {
#endif

#include "../harness.h"

#define GC_TRY(call)                                                                                \
    do {                                                                                            \
        cudaError_t gc_e_ = (call);                                                                 \
        if (gc_e_ != cudaSuccess)                                                                   \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__, \
                               cudaGetErrorString(gc_e_));                                          \
    } while (0)

#define GC_MAX_SETS 8

struct gc_sums; /* device accumulator of the gate */

/* One shape in one input type: inputs, reference, output. */
typedef struct {
    const char *who;            /* message prefix: "gemm bench", "gemm-mma bench" */
    int M, N, K, n_sets;
    int tf32;                   /* 0: bf16 inputs (uint16_t), 1: tf32-valued fp32 inputs */
    int a_mn, b_mn;             /* stored layout of A and B (above) */
    void *A[GC_MAX_SETS], *B[GC_MAX_SETS]; /* M*K, N*K elements per input set */
    void *work;                 /* suite workspace of work_bytes (gemm TN: split-K), NULL if 0 */
    size_t work_bytes;
    float *bias;                /* (N) */
    float *C;                   /* (M,N) shared by the shape's cells */
    double *ref;                /* (M,N) float64 A[0] . B[0], no bias */
    struct gc_sums *sums;
    cudaStream_t stream;        /* set by gc_session_open, kept across shapes */
    cublasHandle_t cublas;
} gc_shape;

/* Allocates and fills the n_sets input sets, bias, C, ref, sums and a workspace of work_bytes (none if 0), and
 * computes ref on sh->stream (synchronised). prec_note (NULL: none) is added to the buffer-failure message. On
 * failure everything is freed. */
forge_status gc_shape_init(gc_shape *sh, int M, int N, int K, int tf32, int a_mn, int b_mn, size_t work_bytes,
                           uint64_t seed, const char *prec_note);
/* Frees the buffers (idempotent); keeps stream and cublas. */
void gc_shape_free(gc_shape *sh);

/* 1 when the cell `name` runs cuBLAS (its name starts with "cublas"; see the top of the file). */
int gc_cell_needs_cublas(const char *name);

/* C = A[set] . B[set] through cublasGemmEx (beta = 0) with the op flags of the stored layout: bf16 inputs with
 * CUBLAS_COMPUTE_32F, tf32 inputs (fp32 type) with CUBLAS_COMPUTE_32F_FAST_TF32, fp32 output. cuBLAS is
 * column-major: row-major C (M,N) is column-major C^T (N,M) = B'^T . A'^T, so m=N, n=M, k=K; a K-major buffer
 * (N,K) / (M,K) is column-major (K,N) / (K,M): B op T, ld K; A op N, ld K. An MN-major B (K,N) is column-major
 * (N,K): op N, ld N; an MN-major A (K,M) is column-major (M,K): op T, ld M. Without cuBLAS:
 * FORGE_ERR_UNSUPPORTED (never reached through gc_session_run_cell, which skips "cublas" cells). */
forge_status gc_cublas_gemm(gc_shape *sh, int set);
/* The same with C = A.B + beta C (beta = 1: the accumulate baseline) into C (fp32, or bf16 when c_bf16). */
forge_status gc_cublas_gemm_ex(gc_shape *sh, int set, float beta, int c_bf16, void *C);

/* A cell of a shape; ctx of the harness cell. */
typedef struct {
    gc_shape *sh;
    int kind;      /* suite-defined; 0 is the cuBLAS baseline in both suites */
    int use_bias;  /* the run adds (or accumulates onto) the bias; the check compares with ref + bias */
    int acc_init;  /* poison: C starts as bias rows (an accumulate cell, C +=) instead of the poison pattern */
} gc_cell;

/* The harness callbacks shared by every cell (run is the suite's). */
forge_status gc_poison(void *ctx);
forge_status gc_check(void *ctx, double *rel_err, int *fully_written);

/* One suite run: device 0, a non-blocking stream with a cuBLAS handle on it, the CUDA timer, provenance and the
 * harness. */
typedef struct {
    int dev;
    gc_shape sh;               /* the current shape (one at a time) */
    forge_bench_timer timer;
    int have_timer;
    forge_provenance prov;
    forge_harness *h;
    int bad;                   /* cells that failed or were garbage */
    FILE *out;                 /* the suite's output (skip lines) */
} gc_session;

/* Opens the session of `suite` (results/<date>_<commit>/<suite>*.csv, warmup 10) with its config text, input
 * recipe, seed and reps, and prints banner on out. who prefixes messages. Call gc_session_close whatever it
 * returns. The GEMM suites time INTERLEAVED by default (`forge bench --order` overrides): a cell is checked
 * when it is run and timed at gc_session_flush, which a suite calls before freeing the group's inputs. */
forge_status gc_session_open(gc_session *ss, FILE *out, const char *suite, const char *config_text,
                             const char *input_recipe, uint64_t seed, int reps, const char *who, const char *banner);
/* Checks and times one cell of ss->sh in the given group; a failed or garbage cell counts in ss->bad. A "cublas"
 * cell in a build without cuBLAS is skipped (a printed line, FORGE_OK). */
forge_status gc_session_run_cell(gc_session *ss, gc_cell *c, forge_status (*run)(void *ctx, int input_set),
                                 const char *name, const char *group, int is_baseline, forge_precision precision,
                                 double flops, double bytes);
/* Times the cells queued since the last flush (interleaved; nothing to do when sequential); cells that fail
 * while being timed count in ss->bad. */
forge_status gc_session_flush(gc_session *ss);
/* The A/A control's name: the group's baseline timed again as an ordinary cell. Its ratio (and paired ratio) to
 * the baseline is what the timing method reads for two identical kernels; a reader takes a forge cell's margin
 * over the baseline seriously only where it clearly exceeds the control's distance from 1. */
#define GC_AA_CONTROL(baseline) baseline "_aa_control"
/* Ends the session (provenance end clocks, CSVs, frees everything); returns s, or FORGE_ERR_NUMERIC when s is
 * FORGE_OK and a cell failed. */
forge_status gc_session_close(gc_session *ss, forge_status s);

#ifdef __cplusplus
}
#endif

#endif
