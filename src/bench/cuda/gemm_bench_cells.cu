/*
 * gemm_bench_cells.cu: the cells of `forge bench gemm`: forge's default bf16 GEMM in the NT, NN and TN
 * layouts and its fused epilogues, against cuBLAS.
 *
 *   C (M,N) fp32 = A (M,K) . B (N,K)^T [+ bias (N)]     A, B bf16 (K-major)
 *
 * Per shape, one group: cuBLAS bf16 (cublasGemmEx, CUBLAS_COMPUTE_32F, fp32
 * output) is the baseline, measured in the same run, and forge's entry points
 * are the cells (forge_wgmma_bf16 calls the wgmma entry of the layout: it fails
 * rather than fall back; forge_bf16_auto is the dispatching entry, used on odd
 * shapes). Every cell runs what the library runs by default for its arguments;
 * the variants of the same kernels are timed by the lab (forge-lab bench
 * gemm-bf16-variants), which reuses these groups (gemm_bench_cells.h).
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
 * and the forge cells it times.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>

#include "gemm_bench_cells.h"
#if GC_HAVE_CUBLAS
#include <cublasLt.h>
#endif

extern "C" {
#include "../gemm_bench.h"
}
#include "check_sums.cuh"

const char *const GB_LAYOUT_NAME[3] = {"nt", "nn", "tn"};

/* ---- cell run -------------------------------------------------------------- */

/* gc_cell.use_bias: NT: the epilogue adds bias (NN/TN plain groups have no bias cell; their C += cells are in the
 * epilogue groups below) */
extern "C" forge_status gb_run(void *ctx, int set) {
    gc_cell *c = (gc_cell *)ctx;
    gc_shape *sh = c->sh;
    if (c->kind == GB_CUBLAS) return gc_cublas_gemm(sh, set); /* op flags of the stored layout */
    const void *A = sh->A[set % sh->n_sets], *B = sh->B[set % sh->n_sets];
    const float *bias = c->use_bias ? sh->bias : NULL;
    if (sh->b_mn) { /* NN or TN */
        if (sh->a_mn)
            return forge_gemm_bf16_tn_wgmma(A, B, sh->C, sh->M, sh->N, sh->K, 0, sh->work, sh->work_bytes,
                                            sh->stream, 0);
        return forge_gemm_bf16_nn_wgmma(A, B, sh->C, sh->M, sh->N, sh->K, 0, sh->stream, 0);
    }
    switch (c->kind) {
    case GB_WGMMA: return forge_gemm_bf16_nt_wgmma(A, B, sh->C, bias, sh->M, sh->N, sh->K, sh->stream);
    case GB_AUTO: return forge_gemm_bf16_nt(A, B, sh->C, bias, sh->M, sh->N, sh->K, sh->stream);
    }
    return forge_error(FORGE_ERR_ARG, "gemm bench: unknown cell kind %d", c->kind);
}

/* ---- the plain groups -------------------------------------------------------- */

const gb_shape_spec GB_SHAPES[] = {
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
    {GB_NN, 32768, 768, 768, 0, 0, "gpt2 dX attn proj"},
    {GB_NN, 32768, 768, 3072, 0, 0, "gpt2 dX mlp proj"},
    {GB_NN, 32768, 3072, 768, 0, 0, "gpt2 dX mlp fc"},
    /* dW = dY (B*T, OC)^T . X (B*T, C): M = OC, N = C, K = B*T (split-K) */
    {GB_TN, 2304, 768, 32768, 0, 0, "gpt2 dW attn qkv"},
    {GB_TN, 768, 768, 32768, 0, 0, "gpt2 dW attn proj"},
    {GB_TN, 3072, 768, 32768, 0, 0, "gpt2 dW mlp fc"},
    {GB_TN, 768, 3072, 32768, 0, 0, "gpt2 dW mlp proj"},
    {GB_NN, 1000, 776, 520, 0, 0, "edge dX odd M"},
    {GB_TN, 776, 1000, 1001, 0, 0, "edge dW odd K, M%128=8"},
};
const int GB_N_SHAPES = (int)(sizeof GB_SHAPES / sizeof GB_SHAPES[0]);

const char GB_RECIPE[] =
    "A (M,K), B (N,K): uniform [-1,1) from splitmix64(key(seed,2*set[+1]) + index) >> 40 / 2^24, rounded to bf16 "
    "nearest-even on the host; bias (N): PCG32(seed, stream 999) uniform [-1,1); reference: float64 GEMM of the "
    "same bf16 values on the GPU; epilogue groups: residual R (M,N) fp32 uniform [-1,1), GELU-backward input P "
    "(M,N) fp32 uniform [-3,3), both splitmix64(seed*golden + 1 or 2 + i*golden) >> 40 / 2^24 on the GPU";

extern "C" forge_status gb_plain_groups(gc_session *ss, const gb_plain_suite *suite) {
    const uint64_t seed = 20260505;
    gc_shape *sh = &ss->sh;
    forge_status s = FORGE_OK;
    for (int i = 0; i < GB_N_SHAPES && s == FORGE_OK; i++) {
        const gb_shape_spec *sp = &GB_SHAPES[i];
        if (suite->wants != NULL && !suite->wants(sp)) continue;
        size_t work_bytes = 0;
        if (sp->layout == GB_TN) s = suite->tn_workspace(sp->M, sp->N, sp->K, &work_bytes);
        if (s == FORGE_OK)
            s = gc_shape_init(sh, sp->M, sp->N, sp->K, 0, sp->layout == GB_TN, sp->layout != GB_NT, work_bytes,
                              seed + (uint64_t)i, NULL);
        if (s != FORGE_OK) break;
        char group[160];
        snprintf(group, sizeof group, "bf16 %s M=%d N=%d K=%d (%s)", GB_LAYOUT_NAME[sp->layout], sp->M, sp->N,
                 sp->K, sp->what);
        const double flops = 2.0 * sp->M * sp->N * (double)sp->K;
        const double bytes = 2.0 * ((double)sp->M * sp->K + (double)sp->N * sp->K) + 4.0 * sp->M * (double)sp->N;
        gb_cell_spec cells[GB_MAX_CELLS];
        const int n = suite->cells(sp, sh, cells);
        for (int v = 0; v < n && s == FORGE_OK; v++)
            s = gc_session_run_cell(ss, &cells[v].cell, suite->run, cells[v].name, group, cells[v].baseline,
                                    FORGE_PREC_BF16, flops, bytes);
        if (s == FORGE_OK) s = gc_session_flush(ss); /* cells points into this iteration */
        gc_shape_free(sh);
    }
    return s;
}

/* `forge bench gemm`'s plain cells: cuBLAS (baseline) and forge's entry; on the square NT shapes cuBLAS against
 * itself too (the A/A control) */
extern "C" int gb_cells_default(const gb_shape_spec *sp, gc_shape *sh, gb_cell_spec *out) {
    int n = 0;
    out[n].cell = gc_cell{sh, GB_CUBLAS, 0, 0}, out[n].name = "cublas_bf16", out[n++].baseline = 1;
    out[n].cell = gc_cell{sh, sp->odd ? GB_AUTO : GB_WGMMA, sp->bias, 0};
    out[n].name = sp->odd ? "forge_bf16_auto" : "forge_wgmma_bf16", out[n++].baseline = 0;
    if (sp->layout == GB_NT && strcmp(sp->what, "square") == 0)
        out[n].cell = gc_cell{sh, GB_CUBLAS, 0, 0}, out[n].name = GC_AA_CONTROL("cublas_bf16"), out[n++].baseline = 0;
    return n;
}

/* ---- fused epilogues ------------------------------------------------------------
 *
 * Groups at the GPT-2 124M shapes (B*T = 32768) plus odd edge shapes. Each cell computes the same result
 * (gemm.h's forge_gemm_epilogue order: v = A.B + bias; pre = v; v = gelu(v); v *= gelu'(P); v += R) either
 * fused into forge's GEMM, or as the GEMM followed by separate element-wise passes (forge's GEMM or cuBLAS's),
 * or through cuBLASLt's own GELU_BIAS epilogue. The gate applies the same operations in float64 to the float64
 * GEMM of the same bf16 inputs (R and P are fp32 buffers the reference reads as they are). The separate passes
 * are vectorised (float4) grid-stride kernels: the strongest unfused baseline, not a straw man. */

/* per-shape buffers of the epilogue groups */
struct ge_bufs {
    float *R;             /* (M,N) residual, uniform [-1, 1) */
    float *P;             /* (M,N) GELU-backward pre-activation, uniform [-3, 3) */
    void *pre;            /* (M,N) pre_out, fp32 or bf16 */
    struct ge_sums *sums;
#if GC_HAVE_CUBLAS
    cublasLtHandle_t lt;  /* the cuBLASLt cell's plan (made on first use, per shape) */
    cublasLtMatmulDesc_t lt_desc;
    cublasLtMatrixLayout_t lt_a, lt_b, lt_c;
    cublasLtMatmulAlgo_t lt_algo;
    void *lt_ws;
    size_t lt_ws_bytes;
#endif
    int lt_ready;
};

struct ge_sums {
    double d2, r2;
    unsigned long long unwritten;
};

#define GE_GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define GE_GELU_C 0.044715

__device__ __forceinline__ double ge_gelu64(double x) {
    return 0.5 * x * (1.0 + tanh(GE_GELU_K * (x + GE_GELU_C * x * x * x)));
}

__device__ __forceinline__ double ge_gelu_grad64(double x) {
    const double t = tanh(GE_GELU_K * (x + GE_GELU_C * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GE_GELU_K * (1.0 + 3.0 * GE_GELU_C * x * x);
}

/* the trainer's fp32 formulas (elementwise.cu), for the separate passes */
__device__ __forceinline__ float ge_gelu32(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float ge_gelu_grad32(float x) {
    const float t = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}

/* sums[0] += (sum (out - expect)^2, sum expect^2, #poisoned) with expect = ref + bias, then (final only) gelu,
 * * gelu'(P), + R, each when given. out is fp32 or bf16 (poison: all bits set in either). */
__global__ void __launch_bounds__(256)
    ge_check_kernel(ge_sums *sums, const void *__restrict__ out, int out_bf16, const double *__restrict__ ref,
                    const float *__restrict__ bias, const float *__restrict__ R, const float *__restrict__ P,
                    int gelu, int final_value, size_t total, int N) {
    double d2 = 0.0, r2 = 0.0;
    unsigned long long un = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        double r = ref[i] + (bias != nullptr ? (double)bias[i % (size_t)N] : 0.0);
        if (final_value) {
            if (gelu) r = ge_gelu64(r);
            if (P != nullptr) r *= ge_gelu_grad64((double)P[i]);
            if (R != nullptr) r += (double)R[i];
        }
        float c;
        if (out_bf16) {
            const uint32_t u = ((const uint16_t *)out)[i];
            if (u == 0xFFFFu) un++;
            c = __uint_as_float(u << 16);
        } else {
            c = ((const float *)out)[i];
            if (__float_as_uint(c) == 0xFFFFFFFFu) un++;
        }
        const double d = (double)c - r;
        d2 += d * d;
        r2 += r * r;
    }
    bench_check_commit(sums, d2, r2, un);
}

/* p[i] = scale * uniform [-1, 1) from splitmix64(key + i) (24 bits): the R and P inputs */
__global__ void __launch_bounds__(256) ge_fill_kernel(float *p, size_t n, uint64_t key, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = key + (uint64_t)i * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        p[i] = scale * (2.0f * ((float)(z >> 40) * (1.0f / 16777216.0f)) - 1.0f);
    }
}

/* The separate passes (X may be C: in place, each element read then written by one thread, hence no
 * __restrict__). op: 0 C += bias (row broadcast), 1 C = gelu(X), 2 C *= gelu'(X), 3 C += X. float4 when
 * n % 4 == 0 and (op 0) N % 4 == 0: every buffer is a cudaMalloc base, so 16-byte aligned. */
template <int OP> __device__ __forceinline__ float ge_pass_op(float c, float x) {
    if constexpr (OP == 0 || OP == 3) return c + x;
    else if constexpr (OP == 1) return ge_gelu32(x);
    else return c * ge_gelu_grad32(x);
}

template <int OP>
__global__ void __launch_bounds__(256)
    ge_pass_kernel(float *C, const float *X, size_t n, int N, int vec4) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    if (vec4) {
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n / 4; i += stride) {
            const float4 x = OP == 0 ? *reinterpret_cast<const float4 *>(X + (4 * i) % (size_t)N)
                                     : reinterpret_cast<const float4 *>(X)[i];
            float4 c = make_float4(0.f, 0.f, 0.f, 0.f);
            if (OP != 1) c = reinterpret_cast<const float4 *>(C)[i];
            c.x = ge_pass_op<OP>(c.x, x.x);
            c.y = ge_pass_op<OP>(c.y, x.y);
            c.z = ge_pass_op<OP>(c.z, x.z);
            c.w = ge_pass_op<OP>(c.w, x.w);
            reinterpret_cast<float4 *>(C)[i] = c;
        }
    } else {
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
            const float x = OP == 0 ? X[i % (size_t)N] : X[i];
            C[i] = ge_pass_op<OP>(OP == 1 ? 0.0f : C[i], x);
        }
    }
}

template <int OP> static forge_status ge_pass(gc_shape *sh, float *C, const float *X) {
    const size_t n = (size_t)sh->M * sh->N;
    const int vec4 = n % 4 == 0 && (OP != 0 || sh->N % 4 == 0);
    ge_pass_kernel<OP><<<132 * 8, 256, 0, sh->stream>>>(C, X, n, sh->N, vec4);
    GC_TRY(cudaGetLastError());
    return FORGE_OK;
}

/* ---- cuBLASLt GELU_BIAS (reference cell) ---- */

#if GC_HAVE_CUBLAS
#define GE_LT_TRY(call)                                                                                      \
    do {                                                                                                     \
        cublasStatus_t ge_st_ = (call);                                                                      \
        if (ge_st_ != CUBLAS_STATUS_SUCCESS)                                                                 \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: cuBLAS status %d", #call, __FILE__, \
                               __LINE__, (int)ge_st_);                                                       \
    } while (0)

static void ge_lt_free(ge_bufs *b) {
    if (b->lt_a) cublasLtMatrixLayoutDestroy(b->lt_a);
    if (b->lt_b) cublasLtMatrixLayoutDestroy(b->lt_b);
    if (b->lt_c) cublasLtMatrixLayoutDestroy(b->lt_c);
    if (b->lt_desc) cublasLtMatmulDescDestroy(b->lt_desc);
    if (b->lt) cublasLtDestroy(b->lt);
    cudaFree(b->lt_ws);
    b->lt_a = b->lt_b = b->lt_c = NULL;
    b->lt_desc = NULL;
    b->lt = NULL;
    b->lt_ws = NULL;
    b->lt_ready = 0;
}

/* Column-major view as in gc_cublas_gemm: D^T (N,M) = B'(N,K) . A'^T: Lt's A = the B buffer (K,N) col-major with
 * op T, Lt's B = the A buffer (K,M) col-major with op N; the bias runs along Lt's rows, i.e. our N. */
static forge_status ge_lt_plan(ge_bufs *b, gc_shape *sh) {
    const int M = sh->M, N = sh->N, K = sh->K;
    GE_LT_TRY(cublasLtCreate(&b->lt));
    GE_LT_TRY(cublasLtMatmulDescCreate(&b->lt_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    GE_LT_TRY(cublasLtMatmulDescSetAttribute(b->lt_desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    GE_LT_TRY(cublasLtMatmulDescSetAttribute(b->lt_desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_GELU_BIAS;
    GE_LT_TRY(cublasLtMatmulDescSetAttribute(b->lt_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    const void *bias = sh->bias;
    GE_LT_TRY(cublasLtMatmulDescSetAttribute(b->lt_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    GE_LT_TRY(cublasLtMatrixLayoutCreate(&b->lt_a, CUDA_R_16BF, K, N, K));
    GE_LT_TRY(cublasLtMatrixLayoutCreate(&b->lt_b, CUDA_R_16BF, K, M, K));
    GE_LT_TRY(cublasLtMatrixLayoutCreate(&b->lt_c, CUDA_R_32F, N, M, N));
    b->lt_ws_bytes = (size_t)32 << 20;
    GC_TRY(cudaMalloc(&b->lt_ws, b->lt_ws_bytes));
    cublasLtMatmulPreference_t pref = NULL;
    GE_LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &b->lt_ws_bytes, sizeof b->lt_ws_bytes);
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(b->lt, b->lt_desc, b->lt_a, b->lt_b, b->lt_c, b->lt_c, pref, 1, &heur,
                                            &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1)
        return forge_error(FORGE_ERR_DEVICE,
                           "gemm bench: cuBLASLt has no GELU_BIAS algorithm for M=%d N=%d K=%d (status %d, %d found)",
                           M, N, K, (int)st, found);
    b->lt_algo = heur.algo;
    b->lt_ready = 1;
    return FORGE_OK;
}

static forge_status ge_lt_gelu_bias(ge_bufs *b, gc_shape *sh, int set) {
    if (!b->lt_ready) FORGE_TRY(ge_lt_plan(b, sh));
    const float alpha = 1.0f, beta = 0.0f;
    GE_LT_TRY(cublasLtMatmul(b->lt, b->lt_desc, &alpha, sh->B[set % sh->n_sets], b->lt_a, sh->A[set % sh->n_sets],
                             b->lt_b, &beta, sh->C, b->lt_c, sh->C, b->lt_c, &b->lt_algo, b->lt_ws, b->lt_ws_bytes,
                             sh->stream));
    return FORGE_OK;
}
#else
static void ge_lt_free(ge_bufs *b) { b->lt_ready = 0; }
static forge_status ge_lt_gelu_bias(ge_bufs *b, gc_shape *sh, int set) {
    (void)b;
    (void)set;
    return forge_error(FORGE_ERR_UNSUPPORTED, "%s: a cuBLASLt cell: %s", sh->who, GC_NO_CUBLAS_REASON);
}
#endif

/* ---- cell callbacks ---- */

extern "C" forge_gemm_epilogue ge_epilogue(const ge_cell *c) {
    forge_gemm_epilogue e;
    memset(&e, 0, sizeof e);
    e.bias = c->bias ? c->sh->bias : NULL;
    e.residual = c->res ? c->b->R : NULL;
    e.pre_out = c->pre ? c->b->pre : NULL;
    e.dgelu_pre = c->dgelu ? c->b->P : NULL;
    e.gelu = c->gelu;
    e.out_bf16 = c->bf16;
    return e;
}

extern "C" int ge_cell_store_matches(const ge_cell *c) {
    if (c->kind != GE_FUSED) return 1;
    const forge_gemm_epilogue e = ge_epilogue(c);
    return (strcmp(forge_gemm_bf16_epi_store(c->sh->b_mn, c->sh->C, c->sh->N, &e), "tma") == 0) == (c->tma != 0);
}

static forge_status ge_run(void *ctx, int set) {
    ge_cell *c = (ge_cell *)ctx;
    gc_shape *sh = c->sh;
    ge_bufs *b = c->b;
    const void *A = sh->A[set % sh->n_sets], *B = sh->B[set % sh->n_sets];
    const int M = sh->M, N = sh->N, K = sh->K;
    switch ((ge_kind)c->kind) {
    case GE_FUSED: { /* the library picks the store (ge_cell_store_matches: the one c->tma names) */
        const forge_gemm_epilogue e = ge_epilogue(c);
        if (sh->b_mn) return forge_gemm_bf16_nn_epi(A, B, sh->C, M, N, K, &e, sh->stream, 0);
        return forge_gemm_bf16_nt_epi(A, B, sh->C, M, N, K, &e, sh->stream, 0);
    }
    case GE_SUITE: return c->suite_run(c, set);
    case GE_FORGE_ACC:
        if (sh->a_mn)
            return forge_gemm_bf16_tn_wgmma(A, B, sh->C, M, N, K, 1, sh->work, sh->work_bytes, sh->stream, 0);
        return forge_gemm_bf16_nn_wgmma(A, B, sh->C, M, N, K, 1, sh->stream, 0);
    case GE_CUBLAS_BETA1: return gc_cublas_gemm_ex(sh, set, 1.0f, 0, sh->C);
    case GE_CUBLAS_BF16: return gc_cublas_gemm_ex(sh, set, 0.0f, 1, sh->C);
    case GE_CUBLASLT_GELU_BIAS: return ge_lt_gelu_bias(b, sh, set);
    case GE_FORGE_PASSES:
    case GE_CUBLAS_PASSES: {
        /* with pre, the GEMM (+ bias) result is the pre-activation buffer and GELU writes C from it */
        float *g = c->gelu && c->pre ? (float *)b->pre : sh->C;
        if (c->kind == GE_CUBLAS_PASSES)
            FORGE_TRY(gc_cublas_gemm_ex(sh, set, 0.0f, 0, g));
        else if (sh->b_mn)
            FORGE_TRY(forge_gemm_bf16_nn_wgmma(A, B, g, M, N, K, 0, sh->stream, 0));
        else
            FORGE_TRY(forge_gemm_bf16_nt_wgmma(A, B, g, c->bias_in_gemm ? sh->bias : NULL, M, N, K, sh->stream));
        if (c->bias && !c->bias_in_gemm) FORGE_TRY(ge_pass<0>(sh, g, sh->bias));
        if (c->gelu) FORGE_TRY(ge_pass<1>(sh, sh->C, g));
        if (c->dgelu) FORGE_TRY(ge_pass<2>(sh, sh->C, b->P));
        if (c->res) FORGE_TRY(ge_pass<3>(sh, sh->C, b->R));
        return FORGE_OK;
    }
    }
    return forge_error(FORGE_ERR_ARG, "gemm bench: unknown epilogue cell kind %d", c->kind);
}

static forge_status ge_poison(void *ctx) {
    ge_cell *c = (ge_cell *)ctx;
    gc_shape *sh = c->sh;
    if (c->acc) { /* C starts as bias rows */
        gc_cell g = {sh, 0, 1, 1};
        return gc_poison(&g);
    }
    const size_t bytes = (size_t)sh->M * sh->N * sizeof(float);
    GC_TRY(cudaMemsetAsync(sh->C, 0xFF, bytes, sh->stream));
    if (c->pre) GC_TRY(cudaMemsetAsync(c->b->pre, 0xFF, bytes, sh->stream));
    return FORGE_OK;
}

/* one output against its float64 expectation */
static forge_status ge_check_one(ge_cell *c, const void *out, int out_bf16, int final_value, double *rel,
                                 int *written) {
    gc_shape *sh = c->sh;
    ge_bufs *b = c->b;
    GC_TRY(cudaMemsetAsync(b->sums, 0, sizeof(ge_sums), sh->stream));
    ge_check_kernel<<<1024, 256, 0, sh->stream>>>(b->sums, out, out_bf16, sh->ref, c->bias || c->acc ? sh->bias : NULL,
                                                  c->res ? b->R : NULL, c->dgelu ? b->P : NULL, c->gelu, final_value,
                                                  (size_t)sh->M * sh->N, sh->N);
    GC_TRY(cudaGetLastError());
    ge_sums h;
    GC_TRY(cudaMemcpyAsync(&h, b->sums, sizeof h, cudaMemcpyDeviceToHost, sh->stream));
    GC_TRY(cudaStreamSynchronize(sh->stream));
    *rel = h.r2 > 0 ? sqrt(h.d2 / h.r2) : sqrt(h.d2);
    *written = h.unwritten == 0;
    return FORGE_OK;
}

/* C against the full epilogue; with pre also pre_out against ref + bias (the larger error, both written) */
static forge_status ge_check(void *ctx, double *rel_err, int *fully_written) {
    ge_cell *c = (ge_cell *)ctx;
    const int out_bf16 = c->bf16 || c->kind == GE_CUBLAS_BF16;
    FORGE_TRY(ge_check_one(c, c->sh->C, out_bf16, 1, rel_err, fully_written));
    if (c->pre) {
        double r2 = 0.0;
        int w2 = 0;
        /* the separate-passes baseline keeps the pre-activation in fp32; a fused pre_out has C's type */
        const int pre_bf16 = c->kind == GE_FORGE_PASSES || c->kind == GE_CUBLAS_PASSES ? 0 : c->bf16;
        FORGE_TRY(ge_check_one(c, c->b->pre, pre_bf16, 0, &r2, &w2));
        if (!(r2 <= *rel_err)) *rel_err = r2; /* NaN propagates */
        *fully_written = *fully_written && w2;
    }
    return FORGE_OK;
}

/* ---- the groups ---- */

const ge_group_spec GE_GROUPS[] = {
    {GB_NT, 32768, 3072, 768, GE_G_BIAS_GELU, "gpt2 mlp fc: bias+GELU"},
    {GB_NT, 32768, 768, 3072, GE_G_RESID, "gpt2 mlp proj: bias+residual"},
    {GB_NT, 32768, 768, 768, GE_G_RESID, "gpt2 attn proj: bias+residual"},
    {GB_NT, 32768, 2304, 768, GE_G_BF16, "gpt2 attn qkv: bf16 out"},
    /* dA (B*T, 3072) = dY (B*T, 768) . W_proj (768, 3072), then dpre = dA * gelu'(pre) */
    {GB_NN, 32768, 3072, 768, GE_G_DGELU, "gpt2 mlp: GELU backward in dX"},
    {GB_NN, 32768, 768, 768, GE_G_ACC, "gpt2 dX attn proj: C +="},
    {GB_NN, 32768, 3072, 768, GE_G_ACC, "gpt2 dX N=3072: C +="},
    /* the bf16 classifier's dwte (V, C) += dlogits^T . inp over one chunk of 2560 rows */
    {GB_NN, 50304, 768, 2560, GE_G_ACC, "gpt2 lm head dwte, one chunk: C +="},
    {GB_TN, 768, 768, 32768, GE_G_ACC, "gpt2 dW attn proj (split-K): C +="},
    {GB_NN, 1000, 776, 520, GE_G_ACC, "edge dX odd M: C +="},
    {GB_TN, 776, 1000, 1001, GE_G_ACC, "edge dW odd K (unsplit or split): C +="},
    {GB_NT, 777, 999, 520, GE_G_EDGE, "edge odd N: epilogues"},
    {GB_NT, 1000, 1000, 1000, GE_G_EDGE, "edge even N: epilogues"},
    {GB_NN, 1000, 776, 520, GE_G_EDGE, "edge dX odd M: GELU backward"},
    /* the TMA-store epilogue (fp32 / bf16, + bias, + GELU) against the direct one at the short-K shapes, and edges */
    {GB_NT, 32768, 2304, 768, GE_G_STORE, "gpt2 attn qkv: epilogue store"},
    {GB_NT, 32768, 3072, 768, GE_G_STORE, "gpt2 mlp fc: epilogue store"},
    {GB_NT, 32768, 50304, 768, GE_G_STORE, "gpt2 lm head: epilogue store"},
    {GB_NT, 1000, 1000, 1000, GE_G_STORE, "edge: epilogue store"},
    {GB_NT, 777, 996, 520, GE_G_STORE, "edge odd M, N%4=0: epilogue store"},
    {GB_NT, 777, 1000, 520, GE_G_STORE, "edge odd M, N%8=0: epilogue store"},
};
const int GE_N_GROUPS = (int)(sizeof GE_GROUPS / sizeof GE_GROUPS[0]);

/* The cells of one group kind; returns how many. A fused cell's last flag (tma) is the store it stands for: it is
 * run where the library takes that store (ge_cells_default); forcing the other store is the lab's. */
static int ge_cells_of(const ge_group_spec *g, gc_shape *sh, ge_bufs *b, ge_cell_spec *out) {
    int n = 0;
#define GE_ADD(nm, base, ...)                                                  \
    do {                                                                       \
        ge_cell c_ = {sh, b, __VA_ARGS__, NULL};                               \
        out[n].cell = c_;                                                      \
        out[n].name = (nm);                                                    \
        out[n].baseline = (base);                                              \
        n++;                                                                   \
    } while (0)
    /*                                   kind, bias, gelu, pre, res, dgelu, bf16, bias_in_gemm, acc[, tma] */
    switch (g->kind) {
    case GE_G_BIAS_GELU:
        GE_ADD("forge_gemm_then_bias_then_gelu", 1, GE_FORGE_PASSES, 1, 1, 0, 0, 0, 0, 0, 0, 0);
        GE_ADD("forge_gemm+bias_then_gelu", 0, GE_FORGE_PASSES, 1, 1, 0, 0, 0, 0, 1, 0, 0);
        GE_ADD("forge_gemm+bias_then_gelu_keep_pre", 0, GE_FORGE_PASSES, 1, 1, 1, 0, 0, 0, 1, 0, 0);
        GE_ADD("cublas_then_bias_then_gelu", 0, GE_CUBLAS_PASSES, 1, 1, 0, 0, 0, 0, 0, 0, 0);
        GE_ADD("cublaslt_gelu_bias", 0, GE_CUBLASLT_GELU_BIAS, 1, 1, 0, 0, 0, 0, 0, 0, 0);
        /* fused, through the TMA store (shared bias, staging boxes) */
        GE_ADD("forge_fused_bias_gelu_tma", 0, GE_FUSED, 1, 1, 0, 0, 0, 0, 0, 0, 1);
        GE_ADD("forge_fused_bias_gelu_bf16_tma", 0, GE_FUSED, 1, 1, 0, 0, 0, 1, 0, 0, 1);
        GE_ADD("forge_fused_bias_gelu_pre_tma", 0, GE_FUSED, 1, 1, 1, 0, 0, 0, 0, 0, 1);
        GE_ADD("forge_fused_bias_gelu_pre_bf16_tma", 0, GE_FUSED, 1, 1, 1, 0, 0, 1, 0, 0, 1);
        break;
    case GE_G_RESID:
        GE_ADD("forge_gemm+bias_then_residual", 1, GE_FORGE_PASSES, 1, 0, 0, 1, 0, 0, 1, 0, 0);
        GE_ADD("cublas_then_bias_then_residual", 0, GE_CUBLAS_PASSES, 1, 0, 0, 1, 0, 0, 0, 0, 0);
        GE_ADD("forge_fused_bias_residual", 0, GE_FUSED, 1, 0, 0, 1, 0, 0, 0, 0, 0);
        GE_ADD("forge_fused_bias_residual_bf16", 0, GE_FUSED, 1, 0, 0, 1, 0, 1, 0, 0, 0);
        break;
    case GE_G_BF16:
        GE_ADD("cublas_bf16_out", 1, GE_CUBLAS_BF16, 0, 0, 0, 0, 0, 1, 0, 0, 0);
        GE_ADD("cublas_fp32_out", 0, GE_CUBLAS_PASSES, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        GE_ADD("forge_bf16_out_tma", 0, GE_FUSED, 0, 0, 0, 0, 0, 1, 0, 0, 1);
        GE_ADD("forge_bf16_out_bias_tma", 0, GE_FUSED, 1, 0, 0, 0, 0, 1, 0, 0, 1);
        break;
    case GE_G_DGELU:
        GE_ADD("forge_nn_then_gelu_bwd", 1, GE_FORGE_PASSES, 0, 0, 0, 0, 1, 0, 0, 0, 0);
        GE_ADD("cublas_nn_then_gelu_bwd", 0, GE_CUBLAS_PASSES, 0, 0, 0, 0, 1, 0, 0, 0, 0);
        GE_ADD("forge_nn_fused_gelu_bwd_tma", 0, GE_FUSED, 0, 0, 0, 0, 1, 0, 0, 0, 1);
        break;
    case GE_G_ACC:
        GE_ADD("cublas_bf16_beta1", 1, GE_CUBLAS_BETA1, 0, 0, 0, 0, 0, 0, 0, 1, 0);
        GE_ADD("forge_wgmma_bf16_acc", 0, GE_FORGE_ACC, 0, 0, 0, 0, 0, 0, 0, 1, 0);
        break;
    case GE_G_STORE:
        GE_ADD("cublas_bf16", 1, GE_CUBLAS_PASSES, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        GE_ADD("forge_tma_store", 0, GE_FUSED, 0, 0, 0, 0, 0, 0, 0, 0, 1);
        GE_ADD("forge_tma_store_bias", 0, GE_FUSED, 1, 0, 0, 0, 0, 0, 0, 0, 1);
        GE_ADD("forge_tma_store_bias_gelu", 0, GE_FUSED, 1, 1, 0, 0, 0, 0, 0, 0, 1);
        GE_ADD("forge_tma_store_bias_gelu_pre", 0, GE_FUSED, 1, 1, 1, 0, 0, 0, 0, 0, 1);
        if (g->N % 8 == 0) { /* a bf16 C needs 16-byte row strides for TMA */
            GE_ADD("forge_tma_store_bf16", 0, GE_FUSED, 0, 0, 0, 0, 0, 1, 0, 0, 1);
            GE_ADD("forge_tma_store_bias_gelu_bf16", 0, GE_FUSED, 1, 1, 0, 0, 0, 1, 0, 0, 1);
            GE_ADD("forge_tma_store_bias_gelu_pre_bf16", 0, GE_FUSED, 1, 1, 1, 0, 0, 1, 0, 0, 1);
        }
        break;
    case GE_G_EDGE:
        if (g->layout == GB_NN) {
            GE_ADD("forge_nn_fused_gelu_bwd_residual", 0, GE_FUSED, 0, 0, 0, 1, 1, 0, 0, 0, 0);
            GE_ADD("forge_nn_fused_gelu_bwd_tma", 0, GE_FUSED, 0, 0, 0, 0, 1, 0, 0, 0, 1); /* N=776: N%4 == 0 */
        } else {
            GE_ADD("forge_fused_bias_gelu_pre_residual", 0, GE_FUSED, 1, 1, 1, 1, 0, 0, 0, 0, 0);
            GE_ADD("forge_fused_bias_gelu_pre_residual_bf16", 0, GE_FUSED, 1, 1, 1, 1, 0, 1, 0, 0, 0);
            GE_ADD("forge_fused_residual_bf16", 0, GE_FUSED, 0, 0, 0, 1, 0, 1, 0, 0, 0);
            GE_ADD("forge_fused_bias_gelu", 0, GE_FUSED, 1, 1, 0, 0, 0, 0, 0, 0, 0); /* direct where N is odd */
        }
        break;
    }
#undef GE_ADD
    return n;
}

/* `forge bench gemm`'s cells of a group: the rows whose store is the library's */
extern "C" int ge_cells_default(const ge_group_spec *g, gc_shape *sh, ge_bufs *b, ge_cell_spec *out) {
    ge_cell_spec all[GE_MAX_CELLS];
    const int n_all = ge_cells_of(g, sh, b, all);
    int n = 0;
    for (int i = 0; i < n_all; i++)
        if (ge_cell_store_matches(&all[i].cell)) out[n++] = all[i];
    return n;
}

static void ge_bufs_free(ge_bufs *b) {
    ge_lt_free(b);
    cudaFree(b->R);
    cudaFree(b->P);
    cudaFree(b->pre);
    cudaFree(b->sums);
    memset(b, 0, sizeof *b);
}

static forge_status ge_bufs_init(ge_bufs *b, gc_shape *sh, uint64_t seed) {
    memset(b, 0, sizeof *b);
    const size_t mn = (size_t)sh->M * sh->N;
    cudaError_t e = cudaMalloc((void **)&b->R, mn * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc((void **)&b->P, mn * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc(&b->pre, mn * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc((void **)&b->sums, sizeof(ge_sums));
    if (e != cudaSuccess) {
        ge_bufs_free(b);
        return forge_error(e == cudaErrorMemoryAllocation ? FORGE_ERR_OOM : FORGE_ERR_DEVICE,
                           "gemm bench: epilogue buffers (3 x %d x %d fp32): %s", sh->M, sh->N, cudaGetErrorString(e));
    }
    ge_fill_kernel<<<1024, 256, 0, sh->stream>>>(b->R, mn, seed * 0x9E3779B97F4A7C15ull + 1, 1.0f);
    ge_fill_kernel<<<1024, 256, 0, sh->stream>>>(b->P, mn, seed * 0x9E3779B97F4A7C15ull + 2, 3.0f);
    e = cudaGetLastError();
    if (e != cudaSuccess) {
        ge_bufs_free(b);
        return forge_error(FORGE_ERR_DEVICE, "gemm bench: ge_fill_kernel: %s", cudaGetErrorString(e));
    }
    return FORGE_OK;
}

extern "C" forge_status ge_epi_groups(gc_session *ss, int quick, const ge_suite *suite) {
    const uint64_t seed = 20261130;
    gc_shape *sh = &ss->sh;
    forge_status s = FORGE_OK;
    for (int i = 0; i < GE_N_GROUPS && s == FORGE_OK; i++) {
        const ge_group_spec *g = &GE_GROUPS[i];
        /* quick: the edge groups only (for compute-sanitizer: every fused load/store path, small) */
        if (quick && (size_t)g->M * g->N > ((size_t)1 << 21)) continue;
        if (suite->wants != NULL && !suite->wants(g)) continue;
        size_t work_bytes = 0;
        if (g->layout == GB_TN) s = suite->tn_workspace(g->M, g->N, g->K, &work_bytes);
        if (s == FORGE_OK)
            s = gc_shape_init(sh, g->M, g->N, g->K, 0, g->layout == GB_TN, g->layout != GB_NT, work_bytes,
                              seed + (uint64_t)i, NULL);
        if (s != FORGE_OK) break;
        ge_bufs b;
        s = ge_bufs_init(&b, sh, seed + (uint64_t)i);
        if (s != FORGE_OK) {
            gc_shape_free(sh);
            break;
        }
        ge_cell_spec cells[GE_MAX_CELLS];
        const int n = suite->cells(g, sh, &b, cells);
        char group[160];
        snprintf(group, sizeof group, "epi bf16 %s M=%d N=%d K=%d (%s)", GB_LAYOUT_NAME[g->layout], g->M, g->N,
                 g->K, g->what);
        const double flops = 2.0 * g->M * g->N * (double)g->K;
        /* bytes of the fused form: operands once, C written once (read too for C +=) */
        const double c_bytes = 4.0 * g->M * (double)g->N * (g->kind == GE_G_ACC ? 2.0 : 1.0);
        const double bytes = 2.0 * ((double)g->M * g->K + (double)g->N * g->K) + c_bytes;
        for (int v = 0; v < n && s == FORGE_OK; v++) {
            forge_harness_cell cell;
            memset(&cell, 0, sizeof cell);
            cell.name = cells[v].name;
            cell.group = group;
            cell.is_baseline = cells[v].baseline;
            cell.precision = FORGE_PREC_BF16;
            cell.flops = flops;
            cell.bytes = bytes;
            cell.n_input_sets = sh->n_sets;
            cell.ctx = &cells[v].cell;
            cell.poison = ge_poison;
            cell.run = ge_run;
            cell.check = ge_check;
            forge_cell_result res;
            memset(&res, 0, sizeof res);
            s = forge_harness_run(ss->h, &cell, &res);
            if (s == FORGE_OK && forge_cell_bad(&res)) ss->bad++;
        }
        if (s == FORGE_OK) s = gc_session_flush(ss); /* before b and sh go */
        ge_bufs_free(&b);
        gc_shape_free(sh);
    }
    return s;
}

extern "C" void gb_config_text(char *config, size_t size, const char *head, int with_plain) {
    int len = snprintf(config, size, "%s", head);
    if (with_plain) {
        if (len < (int)size) len += snprintf(config + len, size - (size_t)len, "shapes=");
        for (int i = 0; i < GB_N_SHAPES && len < (int)size; i++)
            len += snprintf(config + len, size - (size_t)len, "%s:%dx%dx%d%s;", GB_LAYOUT_NAME[GB_SHAPES[i].layout],
                            GB_SHAPES[i].M, GB_SHAPES[i].N, GB_SHAPES[i].K, GB_SHAPES[i].bias ? "+bias" : "");
    }
    if (len < (int)size) len += snprintf(config + len, size - (size_t)len, " epilogue groups=");
    for (int i = 0; i < GE_N_GROUPS && len < (int)size; i++)
        len += snprintf(config + len, size - (size_t)len, "%s:%dx%dx%d:%d;", GB_LAYOUT_NAME[GE_GROUPS[i].layout],
                        GE_GROUPS[i].M, GE_GROUPS[i].N, GE_GROUPS[i].K, (int)GE_GROUPS[i].kind);
}

extern "C" forge_status forge_bench_gemm_cuda(FILE *out, int reps, int epi_only, int quick) {
    const uint64_t seed = 20260505;
    char config[4096];
    gb_config_text(config, sizeof config,
                   epi_only ? "gemm-epi (fused epilogues only) "
                            : "gemm bf16 nt/nn/tn (C = A.B^T, dY.W, dY^T.X; fp32 out) cells=cublas_bf16,forge; ",
                   !epi_only);
    gc_session ss;
    forge_status s = gc_session_open(
        &ss, out, epi_only ? "gemm_epi" : "gemm", config, GB_RECIPE, seed, reps, "gemm bench",
        "gemm: C (M,N) fp32 = A (M,K) . B (N,K)^T (nt), dY (M,K) . W (K,N) (nn), dY (K,M)^T . X (K,N) (tn, "
        "split-K), bf16 inputs, fp32 accumulation; baseline cuBLAS with the matching op flags "
        "(cublasGemmEx, CUBLAS_COMPUTE_32F); gate: relative Frobenius error vs a float64 GEMM of the same "
        "bf16 inputs + poison count. Epilogue groups (\"epi ...\"): fused bias / GELU / pre-activation / "
        "residual / bf16 out / GELU backward / C += vs the GEMM then separate passes, cuBLASLt GELU_BIAS, "
        "cuBLAS bf16 out and beta = 1; gate in float64 on the same inputs");
    const gb_plain_suite plain = {forge_gemm_bf16_tn_workspace, NULL, gb_cells_default, gb_run};
    const ge_suite epi = {forge_gemm_bf16_tn_workspace, NULL, ge_cells_default};
    if (s == FORGE_OK && !epi_only) s = gb_plain_groups(&ss, &plain);
    if (s == FORGE_OK) s = ge_epi_groups(&ss, quick, &epi);
    return gc_session_close(&ss, s);
}
