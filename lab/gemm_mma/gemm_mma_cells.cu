/*
 * gemm_mma_cells.cu: `forge-lab bench gemm-mma [--reps N] [--results DIR]
 * [--order sequential|interleaved]` (issue 5, rung 2: the mma.sync kernel of
 * src/backend/cuda/gemm_mma_kernel.cuh, forge's tf32 entry point (gemm_mma.h)
 * and the lab's bf16 instantiation (gemm_mma_lab.h); notes in
 * lab/notes/gemm-mma.md). Results: results/<date>_<commit>/gemm_mma*.csv.
 *
 *   C (M,N) fp32 = A (M,K) . B (N,K)^T [+ bias (N)]     A, B K-major
 *
 * Per NT shape, two groups (per NN / TN shape, the tf32 group only):
 * - "bf16 ...": cuBLAS bf16 (cublasGemmEx, bf16 inputs, CUBLAS_COMPUTE_32F,
 *   fp32 output) is the baseline; forge_mma_bf16 is the cell.
 * - "tf32 ...": cuBLAS tf32 (cublasGemmEx, fp32 inputs,
 *   CUBLAS_COMPUTE_32F_FAST_TF32) is the baseline; forge_mma_tf32 is the cell.
 *
 * The decisions a reader would otherwise get wrong:
 * - cuBLAS is column-major: it computes m=N, n=M, k=K with op(B-buffer) = T
 *   (lda = K), op(A-buffer) = N (ldb = K), ldc = N (as in gemm_bench_cells.cu).
 * - Inputs are uniform in [-1, 1) from a stateless hash of (seed, set,
 *   matrix, index), rounded ON THE HOST to the cell's precision: bf16
 *   nearest-even, or tf32 nearest-even (low 13 mantissa bits cleared). For
 *   tf32 this makes the input exactly representable, so the kernel's
 *   in-register cvt.rna.tf32.f32 and cuBLAS's own fp32->tf32 rounding are
 *   both the identity, and the float64 reference (which reads the same
 *   stored values) sees exactly what both kernels multiplied: only
 *   accumulation error remains (~1e-6 relative), far under the 1e-3 (tf32)
 *   and 1e-2 (bf16) tolerances. The rna-vs-rne difference of the kernel's
 *   conversion is therefore NOT exercised here (see lab/notes/gemm-mma.md).
 * - The gate runs on the GPU: sum (c - ref)^2, sum ref^2 in double, and the
 *   count of elements still carrying the poison pattern 0xFFFFFFFF.
 * - The edge shapes (odd M, N, K; +bias) exercise the bounds-checked paths:
 *   K*elem % 16 != 0 takes the scalar-load variant of the kernel.
 * - Inputs rotate over enough sets that one set's A and B are not all in
 *   the 50 MB L2 (>= ~256 MB in total, at most 8 sets).
 * - NN (dX = dY.W: B stored (K,N)) and TN (dW = dY^T.X: A stored (K,M), B
 *   (K,N)) run forge_gemm_mma_tf32 with the layout flags, the trainer's
 *   --matmul tf32 path; "+acc" shapes add forge_mma_tf32_acc (C starts as
 *   bias rows, accumulate = 1: C = bias + A.B, gated against ref + bias).
 * The inputs, reference, gate, cuBLAS call and session are shared with
 * `forge bench gemm` (src/bench/cuda/gemm_cells_common.cu); this file keeps
 * the shapes and the kernels it times.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../src/bench/cuda/gemm_cells_common.h"

extern "C" {
#include "../../src/backend/cuda/gemm_mma.h"
#include "../gemm_fp8/bench_opts.h"
#include "gemm_mma_lab.h"
}

typedef enum { GMM_CUBLAS = 0, GMM_FORGE, GMM_FORGE_ACC } gmm_kind; /* gc_cell.kind */

/* ---- cell run -------------------------------------------------------------- */

/* split-K count of the current NN/TN shape, as the trainer picks it (forge_gemm_mma_tf32_splits with the backend's
 * 4 Mi-float workspace); the shape's workspace holds that many partial outputs */
static int gmm_splits = 1;
#define GMM_TRAINER_WS_FLOATS ((size_t)4 << 20)

static forge_status gmm_run(void *ctx, int set) {
    gc_cell *c = (gc_cell *)ctx;
    gc_shape *sh = c->sh;
    if (c->kind == GMM_CUBLAS) return gc_cublas_gemm(sh, set); /* bf16: COMPUTE_32F, tf32: COMPUTE_32F_FAST_TF32 */
    const void *A = sh->A[set % sh->n_sets], *B = sh->B[set % sh->n_sets];
    const float *bias = c->use_bias ? sh->bias : NULL;
    if (sh->tf32)
        /* NT, and the trainer's layouts (NN: B stored (K,N); TN: A (K,M) too); the accumulate cell starts from bias
         * rows (gc_poison) and adds the product: C = bias + A.B, gated against ref + bias */
        return forge_gemm_mma_tf32((const float *)A, sh->a_mn, (const float *)B, sh->b_mn, sh->C,
                                   c->kind == GMM_FORGE_ACC ? NULL : bias, sh->M, sh->N, sh->K,
                                   c->kind == GMM_FORGE_ACC, gmm_splits, (float *)sh->work,
                                   sh->work_bytes / sizeof(float), sh->stream);
    return lab_gemm_mma_bf16_nt(A, B, sh->C, bias, sh->M, sh->N, sh->K, sh->stream);
}

/* ---- the suite ------------------------------------------------------------- */

typedef enum { GMM_NT = 0, GMM_NN, GMM_TN } gmm_layout;

typedef struct {
    int M, N, K;
    int bias; /* forge cells add the bias (cuBLAS does not: it is the plain-GEMM baseline); NN/TN: also run the
               * accumulate cell forge_mma_tf32_acc (C starts as bias rows, C += A.B) */
    const char *what;
    int layout; /* NT: bf16 and tf32 groups; NN (dX = dY.W, B stored (K,N)) and TN (dW = dY^T.X, A stored (K,M),
                 * B (K,N)): tf32 only, the trainer's --matmul tf32 layouts */
} gmm_shape_spec;

static const gmm_shape_spec GMM_SHAPES[] = {
    {4096, 4096, 4096, 0, "square", GMM_NT},
    {8192, 8192, 8192, 0, "square", GMM_NT},
    {32768, 3072, 768, 0, "gpt2 mlp fc", GMM_NT},
    {1000, 1000, 1000, 1, "edge +bias", GMM_NT},
    {777, 999, 520, 1, "edge odd N +bias", GMM_NT},
    {1000, 999, 1001, 0, "edge K odd (scalar loads)", GMM_NT},
    {32768, 768, 3072, 0, "gpt2 dX mlp proj", GMM_NN},
    {4096, 384, 1536, 1, "gpt-10m dX mlp proj +acc", GMM_NN},
    {1000, 999, 1001, 1, "edge odd N, K (scalar loads) +acc", GMM_NN},
    {768, 3072, 32768, 0, "gpt2 dW mlp fc", GMM_TN},
    {1152, 384, 4096, 1, "gpt-10m dW qkv +acc", GMM_TN},
    {777, 1000, 1001, 1, "edge odd M, K (scalar loads) +acc", GMM_TN},
};
enum { GMM_N_SHAPES = sizeof GMM_SHAPES / sizeof GMM_SHAPES[0] };

static const char *GMM_RECIPE =
    "A (M,K), B (N,K): uniform [-1,1) from splitmix64(key(seed,2*set[+1]) + index) >> 40 / 2^24, rounded on the "
    "host to bf16 (nearest-even) for bf16 groups or to tf32 (nearest-even, low 13 mantissa bits cleared, stored as "
    "fp32) for tf32 groups; bias (N): PCG32(seed, stream 999) uniform [-1,1); reference: float64 GEMM of the same "
    "stored values on the GPU";

static forge_status gmm_suite(FILE *out, int reps) {
    const uint64_t seed = 20260506;
    char config[2048];
    int len = snprintf(config, sizeof config,
                       "gemm-mma nt (C = A.B^T, fp32 out) cells=cublas_bf16,forge_mma_bf16,cublas_tf32,"
                       "forge_mma_tf32; nn/tn (tf32 only) cells=cublas_tf32,forge_mma_tf32[,forge_mma_tf32_acc]; "
                       "shapes=");
    static const char *const lay[3] = {"nt", "nn", "tn"};
    for (int i = 0; i < GMM_N_SHAPES && len < (int)sizeof config; i++)
        len += snprintf(config + len, sizeof config - (size_t)len, "%s:%dx%dx%d%s;", lay[GMM_SHAPES[i].layout],
                        GMM_SHAPES[i].M, GMM_SHAPES[i].N, GMM_SHAPES[i].K, GMM_SHAPES[i].bias ? "+bias" : "");

    gc_session ss;
    forge_status s = gc_session_open(
        &ss, out, "gemm_mma", config, GMM_RECIPE, seed, reps, "gemm-mma bench",
        "gemm_mma: C (M,N) fp32 = A (M,K) . B (N,K)^T, mma.sync kernels, fp32 accumulation; baselines cuBLAS "
        "bf16 (CUBLAS_COMPUTE_32F) and tf32 (CUBLAS_COMPUTE_32F_FAST_TF32); inputs pre-rounded to the "
        "cell precision; gate: relative Frobenius error vs a float64 GEMM of the same inputs + poison "
        "count");
    gc_shape *sh = &ss.sh;
    int sms = 0;
    if (s == FORGE_OK && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ss.dev) != cudaSuccess)
        s = forge_error(FORGE_ERR_DEVICE, "gemm-mma bench: cudaDeviceGetAttribute(multiProcessorCount) failed");
    for (int i = 0; i < GMM_N_SHAPES && s == FORGE_OK; i++) {
        const gmm_shape_spec *sp = &GMM_SHAPES[i];
        for (int tf32 = 0; tf32 < 2 && s == FORGE_OK; tf32++) {
            if (sp->layout != GMM_NT && !tf32) continue; /* bf16 NN/TN are the wgmma suite's (forge bench gemm) */
            gmm_splits = sp->layout == GMM_NT ? 1
                                               : forge_gemm_mma_tf32_splits(sp->M, sp->N, sp->K, sms,
                                                                            GMM_TRAINER_WS_FLOATS);
            const size_t work_bytes = gmm_splits > 1 ? (size_t)gmm_splits * sp->M * sp->N * sizeof(float) : 0;
            s = gc_shape_init(sh, sp->M, sp->N, sp->K, tf32, sp->layout == GMM_TN, sp->layout != GMM_NT, work_bytes,
                              seed + (uint64_t)(2 * i + tf32), tf32 ? "tf32" : "bf16");
            if (s != FORGE_OK) break;
            char group[160];
            if (sp->layout == GMM_NT) /* the group names of the committed results */
                snprintf(group, sizeof group, "%s M=%d N=%d K=%d (%s)", tf32 ? "tf32" : "bf16", sp->M, sp->N, sp->K,
                         sp->what);
            else
                snprintf(group, sizeof group, "tf32 %s M=%d N=%d K=%d (%s, split-K %d)", lay[sp->layout], sp->M,
                         sp->N, sp->K, sp->what, gmm_splits);
            const double eb = tf32 ? 4.0 : 2.0;
            const double flops = 2.0 * sp->M * sp->N * (double)sp->K;
            const double bytes = eb * ((double)sp->M * sp->K + (double)sp->N * sp->K) + 4.0 * sp->M * (double)sp->N;
            const int bwd = sp->layout != GMM_NT;
            gc_cell cells[3] = {
                {sh, GMM_CUBLAS, 0, 0}, {sh, GMM_FORGE, bwd ? 0 : sp->bias, 0}, {sh, GMM_FORGE_ACC, 1, 1}};
            const char *names[2][3] = {{"cublas_bf16", "forge_mma_bf16", ""},
                                       {"cublas_tf32", "forge_mma_tf32", "forge_mma_tf32_acc"}};
            const int n_cells = bwd && sp->bias ? 3 : 2;
            for (int v = 0; v < n_cells && s == FORGE_OK; v++)
                s = gc_session_run_cell(&ss, &cells[v], gmm_run, names[tf32][v], group, v == 0,
                                        tf32 ? FORGE_PREC_TF32 : FORGE_PREC_BF16, flops, bytes);
            if (s == FORGE_OK) s = gc_session_flush(&ss); /* cells and gmm_splits belong to this iteration */
            gc_shape_free(sh);
        }
    }
    return gc_session_close(&ss, s);
}

extern "C" int lab_bench_gemm_mma(int argc, char **argv) {
    lab_fp8_bench_opts o;
    if (lab_fp8_bench_opts_parse(&o, argc, argv, "bench gemm-mma",
                                 "[--reps N] [--results DIR] [--order sequential|interleaved] [--only PATTERNS]", NULL) != 0)
        return 2;
    return lab_fp8_bench_exit("bench gemm-mma", gmm_suite(stdout, o.reps > 0 ? o.reps : 10));
}
