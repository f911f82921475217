/*
 * gemm_bench_cells.cu: the cells of `forge bench gemm` (issue 5).
 *
 *   C (M,N) fp32 = A (M,K) . B (N,K)^T [+ bias (N)]     A, B bf16 (K-major)
 *
 * Per shape, one group: cuBLAS bf16 (cublasGemmEx, CUBLAS_COMPUTE_32F, fp32
 * output) is the baseline, measured in the same run, and forge's kernels are
 * the cells (forge_wgmma_bf16 forces the wgmma path: it fails rather than
 * fall back; forge_bf16_auto is the dispatching entry, used on odd shapes).
 *
 * The decisions a reader would otherwise get wrong:
 * - cuBLAS is column-major. Row-major C (M,N) is column-major C^T (N,M), and
 *   C^T = B . A^T; the row-major K-major buffers B (N,K) and A (M,K) are
 *   column-major (K,N) and (K,M). So cuBLAS computes m=N, n=M, k=K with
 *   op(B-buffer) = T (lda = K), op(A-buffer) = N (ldb = K), ldc = N.
 * - Inputs are uniform in [-1, 1), drawn on the host from a stateless hash of
 *   (seed, set, matrix, index) and rounded to bf16 (nearest-even) there. The
 *   reference reads the SAME bf16 values, converted exactly to double, and
 *   accumulates in double (a plain tiled fp64 kernel on the GPU): only the
 *   kernel's own accumulation error remains (~1e-6 relative for fp32
 *   accumulation), far under the bf16 tolerance of 1e-2.
 * - The gate (check) runs on the GPU: sum (c - ref)^2, sum ref^2 in double,
 *   and the count of elements still carrying the poison bit pattern
 *   0xFFFFFFFF (a NaN no kernel produces from finite inputs) after the
 *   output was filled with it. A NaN anywhere makes the error NaN: garbage.
 * - Inputs rotate over enough sets that one set's A and B are not all in
 *   the 50 MB L2 (>= ~256 MB of inputs in total, at most 8 sets).
 * The inputs, reference, gate, cuBLAS call and session are shared with
 * `forge bench gemm-mma` (gemm_cells_common.cu); this file keeps the shapes
 * and the forge kernels it times.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gemm_cells_common.h"

extern "C" {
#include "../gemm_bench.h"
#include "../../backend/cuda/gemm.h"
}

/* NT: C = A (M,K) . B (N,K)^T (forward). NN: C = A (M,K) . B (K,N) (dX = dY.W). TN: C = A (K,M)^T . B (K,N)
 * (dW = dY^T.X, split-K). Same element counts per operand in every layout. Stored as gc_shape's a_mn = (TN),
 * b_mn = (NN or TN); a TN shape carries the split-K workspace (forge_gemm_bf16_tn_workspace) as its work. */
typedef enum { GB_NT = 0, GB_NN, GB_TN } gb_layout;

typedef enum { GB_CUBLAS = 0, GB_WGMMA, GB_AUTO } gb_kind; /* gc_cell.kind */

/* ---- cell run -------------------------------------------------------------- */

/* gc_cell.use_bias: NT: the epilogue adds bias. NN/TN: accumulate cell, C starts as bias rows (acc_init), C += */
static forge_status gb_run(void *ctx, int set) {
    gc_cell *c = (gc_cell *)ctx;
    gc_shape *sh = c->sh;
    if (c->kind == GB_CUBLAS) return gc_cublas_gemm(sh, set); /* op flags of the stored layout */
    const void *A = sh->A[set % sh->n_sets], *B = sh->B[set % sh->n_sets];
    const float *bias = c->use_bias ? sh->bias : NULL;
    if (sh->b_mn) { /* NN or TN */
        const int acc = c->use_bias;
        if (sh->a_mn) /* TN */
            return forge_gemm_bf16_tn_wgmma(A, B, sh->C, sh->M, sh->N, sh->K, acc, sh->work, sh->work_bytes,
                                            sh->stream);
        return forge_gemm_bf16_nn_wgmma(A, B, sh->C, sh->M, sh->N, sh->K, acc, sh->stream);
    }
    switch (c->kind) {
    case GB_WGMMA: return forge_gemm_bf16_nt_wgmma(A, B, sh->C, bias, sh->M, sh->N, sh->K, sh->stream);
    case GB_AUTO: return forge_gemm_bf16_nt(A, B, sh->C, bias, sh->M, sh->N, sh->K, sh->stream);
    }
    return forge_error(FORGE_ERR_ARG, "gemm bench: unknown cell kind %d", (int)c->kind);
}

/* ---- the suite ------------------------------------------------------------- */

typedef struct {
    gb_layout layout;
    int M, N, K;
    int bias; /* NT: forge cells add the bias (cuBLAS does not: it is the plain-GEMM baseline). NN/TN: also run
               * a forge accumulate cell (C starts as bias rows, C += A.B, checked against ref + bias) */
    int odd;  /* an edge-case shape: the dispatching entry instead of the forced wgmma path */
    const char *what;
} gb_shape_spec;

static const gb_shape_spec GB_SHAPES[] = {
    {GB_NT, 2048, 2048, 2048, 0, 0, "square"},
    {GB_NT, 4096, 4096, 4096, 0, 0, "square"},
    {GB_NT, 8192, 8192, 8192, 0, 0, "square"},
    {GB_NT, 65536, 1408, 512, 0, 0, "tall"},
    {GB_NT, 32768, 2304, 768, 0, 0, "gpt2 attn qkv"},
    {GB_NT, 32768, 768, 768, 0, 0, "gpt2 attn proj"},
    {GB_NT, 32768, 3072, 768, 0, 0, "gpt2 mlp fc"},
    {GB_NT, 32768, 768, 3072, 0, 0, "gpt2 mlp proj"},
    {GB_NT, 32768, 50304, 768, 0, 0, "gpt2 lm head"},
    {GB_NT, 1000, 1000, 1000, 1, 0, "edge +bias"},
    {GB_NT, 777, 999, 520, 1, 0, "edge odd N +bias"},
    {GB_NT, 1000, 999, 1001, 0, 1, "edge K%8!=0 (simt fallback)"},
    /* dX = dY (B*T, OC) . W (OC, C): M = B*T, N = C, K = OC */
    {GB_NN, 32768, 768, 2304, 0, 0, "gpt2 dX attn qkv"},
    {GB_NN, 32768, 768, 768, 1, 0, "gpt2 dX attn proj"},
    {GB_NN, 32768, 768, 3072, 0, 0, "gpt2 dX mlp proj"},
    {GB_NN, 32768, 3072, 768, 0, 0, "gpt2 dX mlp fc"},
    /* dW = dY (B*T, OC)^T . X (B*T, C): M = OC, N = C, K = B*T (split-K) */
    {GB_TN, 2304, 768, 32768, 0, 0, "gpt2 dW attn qkv"},
    {GB_TN, 768, 768, 32768, 1, 0, "gpt2 dW attn proj"},
    {GB_TN, 3072, 768, 32768, 0, 0, "gpt2 dW mlp fc"},
    {GB_TN, 768, 3072, 32768, 0, 0, "gpt2 dW mlp proj"},
    {GB_NN, 1000, 776, 520, 1, 0, "edge dX odd M"},
    {GB_TN, 776, 1000, 1001, 1, 0, "edge dW odd K, M%128=8"},
};
enum { GB_N_SHAPES = sizeof GB_SHAPES / sizeof GB_SHAPES[0] };

static const char *GB_RECIPE =
    "A (M,K), B (N,K): uniform [-1,1) from splitmix64(key(seed,2*set[+1]) + index) >> 40 / 2^24, rounded to bf16 "
    "nearest-even on the host; bias (N): PCG32(seed, stream 999) uniform [-1,1); reference: float64 GEMM of the "
    "same bf16 values on the GPU";

extern "C" forge_status forge_bench_gemm_cuda(FILE *out, int reps) {
    const uint64_t seed = 20260505;
    char config[2048];
    static const char *const lay[3] = {"nt", "nn", "tn"};
    int len = snprintf(config, sizeof config,
                       "gemm bf16 nt/nn/tn (C = A.B^T, dY.W, dY^T.X; fp32 out) cells=cublas_bf16,forge[,forge_acc]; "
                       "shapes=");
    for (int i = 0; i < GB_N_SHAPES && len < (int)sizeof config; i++)
        len += snprintf(config + len, sizeof config - (size_t)len, "%s:%dx%dx%d%s;", lay[GB_SHAPES[i].layout],
                        GB_SHAPES[i].M, GB_SHAPES[i].N, GB_SHAPES[i].K,
                        GB_SHAPES[i].bias ? (GB_SHAPES[i].layout == GB_NT ? "+bias" : "+acc") : "");

    gc_session ss;
    forge_status s = gc_session_open(
        &ss, out, "gemm", config, GB_RECIPE, seed, reps, "gemm bench",
        "gemm: C (M,N) fp32 = A (M,K) . B (N,K)^T (nt), dY (M,K) . W (K,N) (nn), dY (K,M)^T . X (K,N) (tn, "
        "split-K), bf16 inputs, fp32 accumulation; baseline cuBLAS with the matching op flags "
        "(cublasGemmEx, CUBLAS_COMPUTE_32F); gate: relative Frobenius error vs a float64 GEMM of the same "
        "bf16 inputs + poison count");
    gc_shape *sh = &ss.sh;
    for (int i = 0; i < GB_N_SHAPES && s == FORGE_OK; i++) {
        const gb_shape_spec *sp = &GB_SHAPES[i];
        size_t work_bytes = 0;
        if (sp->layout == GB_TN) s = forge_gemm_bf16_tn_workspace(sp->M, sp->N, sp->K, &work_bytes);
        if (s == FORGE_OK)
            s = gc_shape_init(sh, sp->M, sp->N, sp->K, 0, sp->layout == GB_TN, sp->layout != GB_NT, work_bytes,
                              seed + (uint64_t)i, NULL);
        if (s != FORGE_OK) break;
        char group[160];
        snprintf(group, sizeof group, "bf16 %s M=%d N=%d K=%d (%s)", lay[sp->layout], sp->M, sp->N, sp->K, sp->what);
        const double flops = 2.0 * sp->M * sp->N * (double)sp->K;
        const double bytes = 2.0 * ((double)sp->M * sp->K + (double)sp->N * sp->K) + 4.0 * sp->M * (double)sp->N;
        const int bwd = sp->layout != GB_NT;
        /* NT: cuBLAS, forge (+bias when asked). NN/TN: cuBLAS, forge (C =), and forge accumulate (C +=, C starts
         * as bias rows) */
        gc_cell cells[3] = {{sh, GB_CUBLAS, 0, 0},
                            {sh, sp->odd ? GB_AUTO : GB_WGMMA, bwd ? 0 : sp->bias, 0},
                            {sh, GB_WGMMA, 1, bwd}};
        const char *names[3] = {"cublas_bf16", sp->odd ? "forge_bf16_auto" : "forge_wgmma_bf16",
                                "forge_wgmma_bf16_acc"};
        const int n_cells = bwd && sp->bias ? 3 : 2;
        for (int v = 0; v < n_cells && s == FORGE_OK; v++)
            s = gc_session_run_cell(&ss, &cells[v], gb_run, names[v], group, v == 0, FORGE_PREC_BF16, flops, bytes);
        gc_shape_free(sh);
    }
    return gc_session_close(&ss, s);
}
