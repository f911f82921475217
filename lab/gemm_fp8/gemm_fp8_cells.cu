/*
 * gemm_fp8_cells.cu: `forge-lab bench gemm-fp8 [--reps N] [--results DIR] [--order ...] [--c2 all|none|only]`
 * (issue 5, fp8 rung): forge's fp8 and tf32 wgmma GEMMs (gemm_fp8.h) and the lab's variants of them
 * (gemm_fp8_lab.h) against cuBLASLt fp8 and cuBLAS tf32. Results: results/<date>_<commit>/gemm_fp8*.csv.
 *
 *   C (M,N) = s . A (M,K) . B (N,K)^T      A, B fp8 K-major, fp32 (or bf16) C
 *
 * Per shape, one group: cuBLASLt fp8 e4m3 x e4m3 (fp32 out, the same
 * per-tensor scales, FAST_ACCUM off) is the baseline, measured in the same
 * run; forge's cells are fp8 e4m3 x e4m3 and e5m2 x e4m3 (promoted), the
 * lab's variants (pipelined, chunked, 144-wide, 2-CTA cluster promotions; the
 * fast-accum variant, for comparison only), e4m3 with bf16 output, and
 * forge's own bf16 wgmma kernel on the same values (the counterpart of the
 * "accelerated" bar: fp8 must be >= 1.5x it). A second group per shape times
 * forge's tf32 wgmma kernel (the same body, fp32 inputs) against cuBLAS tf32
 * (cublasGemmEx, CUBLAS_COMPUTE_32F_FAST_TF32) on the same values in fp32.
 *
 * The decisions a reader would otherwise get wrong:
 * - One set of VALUES serves every cell, so one float64 reference checks them
 *   all: A is drawn uniform in [-1, 1), rounded to e5m2 (nearest-even) and
 *   flushed to 0 below 2^-6, so every A value is exact in e5m2, e4m3 and bf16
 *   (the e4m3 and e5m2 buffers are two encodings of the same numbers); B is
 *   rounded to e4m3 (nearest-even, subnormals kept: exact in bf16). The bf16
 *   and fp32 buffers hold the same values for the bf16 and tf32 cells.
 * - Scales a_scale = 0.5, b_scale = 0.25 (powers of two: the scaled reference
 *   is exact) for every fp8 cell, cuBLASLt included; the bf16 cell is
 *   unscaled. The gate compares each cell with its own scale times the
 *   reference.
 * - The float64 reference is costly at 8192^3 (a tiled fp64 kernel), so it
 *   covers every row_step-th row of C (row_step odd, so the sampled rows hit
 *   every residue mod 128: both consumer warpgroups and all their warps), with
 *   row_step chosen to keep the reference under ~2e10 flops; the poison count
 *   covers every element of C. row_step is 1 (every row) for the small and
 *   odd shapes.
 * - Tolerance: the harness's fp8 one (5e-2 relative Frobenius). Since the
 *   reference uses the same fp8 values, what remains is the kernel's
 *   accumulation error (promoted: fp32-like, ~1e-6..1e-4; fast accum: larger
 *   at big K) and, for bf16 output, its rounding (~2e-3): the rel_err column
 *   shows which.
 * - A build without cuBLAS (make cuda CUBLAS=0) skips the "cublas..." cells
 *   with a printed line (gemm_cells_common.h's rule); the forge cells run.
 * - cuBLASLt needs 16-byte-aligned leading dimensions for fp8; the odd shapes
 *   (N = 999) have no cuBLASLt cell, and forge's e4m3 cell is their baseline.
 * - Epilogue A/B (rung 4e): every fp8 / tf32 cell takes the default store
 *   (the TMA-store epilogue where C allows it -- here every shape but N = 999;
 *   the _c2 cells too; lab/notes/gemm-fp8.md has the measurements); the
 *   "_direct" cells (forge_fp8_e4m3_direct, forge_fp8_e4m3_bf16out_direct,
 *   forge_wgmma_tf32_direct) force the direct store and forge_fp8_e4m3_tma the
 *   TMA store, through lab_gemm_fp8_nt / lab_gemm_tf32_nt, on the same kernel
 *   choice, so one run compares the two epilogues and the rule.
 * - forge_wgmma_tf32_pp / _coop: tf32 forced onto the ping-pong schedule
 *   (128 x 128 tiles, one per consumer warpgroup, taking turns; only where N
 *   allows its TMA store, N % 4 == 0) / the cooperative one
 *   (lab_gemm_tf32_nt); forge_wgmma_tf32 takes forge's rule.
 * - --c2 none: no 2-CTA cluster cells; --c2 only: those, the baseline and
 *   forge_wgmma_bf16 (their counterpart) only; all (the default): every cell.
 *   A trap in a cluster kernel (mbarrier timeout) takes the CUDA context and
 *   fails every later cell, so a first GPU run can do none, then only.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "../../src/bench/cuda/gemm_cells_common.h"
#if GC_HAVE_CUBLAS
#include <cublasLt.h>
#endif

extern "C" {
#include "../../src/backend/cuda/gemm.h"
#include "../../src/base/rng.h"
#include "bench_opts.h"
#include "gemm_fp8_lab.h"
}
#include "../../src/bench/cuda/check_sums.cuh"

#define F8_SET_TARGET_BYTES ((size_t)256 << 20) /* fp8 A + B bytes over all sets: well past the 50 MB L2 */
#define F8_REF_FLOPS 2e10                         /* budget of the float64 reference per shape */
#define F8_REF_TILE 64
#define F8_REF_BK 16
#define F8_LT_WORKSPACE ((size_t)32 << 20)
#define F8_LT_MAX_ALGOS 8 /* heuristic candidates tried per plan, in cuBLASLt's order, until one runs */
#define F8_A_SCALE 0.5f
#define F8_B_SCALE 0.25f

#if GC_HAVE_CUBLAS
#define F8_LT_TRY(call)                                                                                       \
    do {                                                                                                      \
        cublasStatus_t f8_s_ = (call);                                                                        \
        if (f8_s_ != CUBLAS_STATUS_SUCCESS)                                                                   \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__,         \
                               cublasGetStatusString(f8_s_));                                                 \
    } while (0)
#endif

/* ---- host rounding ---------------------------------------------------------- */

static uint32_t f8_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float f8_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* x in [-1, 1) -> the nearest e5m2 value (2 mantissa bits, nearest-even), 0 if that is below 2^-6 in magnitude;
 * the value and its e5m2, e4m3 and bf16 encodings */
static void f8_round_a(float x, uint8_t *e5, uint8_t *e4, uint16_t *b16) {
    uint32_t u = f8_bits(x);
    const uint32_t sign = u & 0x80000000u;
    uint32_t a = u & 0x7FFFFFFFu;
    a += 0xFFFFFu + ((a >> 21) & 1u);
    a &= ~0x1FFFFFu;
    if (a < 0x3C800000u) { /* below 2^-6 */
        *e5 = 0, *e4 = 0, *b16 = 0;
        return;
    }
    const uint32_t exp = a >> 23, man = (a >> 21) & 3u; /* biased 127; |value| <= 1 so exp <= 127 */
    *e5 = (uint8_t)((sign >> 24) | ((exp - 127u + 15u) << 2) | man);
    *e4 = (uint8_t)((sign >> 24) | ((exp - 127u + 7u) << 3) | (man << 1));
    *b16 = (uint16_t)((sign | a) >> 16);
}

/* x in [-1, 1) -> the nearest e4m3 value (nearest-even; subnormal unit 2^-9): its e4m3 and bf16 encodings */
static void f8_round_b(float x, uint8_t *e4, uint16_t *b16) {
    uint32_t u = f8_bits(x);
    const uint32_t sign = u & 0x80000000u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a < 0x3C800000u) { /* below 2^-6: m * 2^-9, m in 0..8 (8 encodes 2^-6 itself) */
        const uint32_t m = (uint32_t)rintf(f8_float(a) * 512.0f);
        *e4 = m == 0 ? 0 : (uint8_t)((sign >> 24) | m);
        *b16 = m == 0 ? 0 : (uint16_t)((sign | f8_bits((float)m * (1.0f / 512.0f))) >> 16);
        return;
    }
    a += 0x7FFFFu + ((a >> 20) & 1u);
    a &= ~0xFFFFFu;
    const uint32_t exp = a >> 23, man = (a >> 20) & 7u;
    *e4 = (uint8_t)((sign >> 24) | ((exp - 127u + 7u) << 3) | man);
    *b16 = (uint16_t)((sign | a) >> 16);
}

/* ---- kernels: float64 reference of sampled rows, the gate ------------------- */

/* ref (R, N), R = ceil(M / step): ref[r][n] = sum_k A[r*step][k] * B[n][k] in double, from the bf16 copies (exact
 * values). 64x64 tile, 256 threads, a 4x4 block each (rows ty + 16i, columns tx + 16j), K slices of 16. */
__global__ void __launch_bounds__(256) f8_ref_kernel(double *__restrict__ ref, const uint16_t *__restrict__ A,
                                                     const uint16_t *__restrict__ B, int M, int N, int K, int step) {
    __shared__ double As[F8_REF_BK][F8_REF_TILE + 1];
    __shared__ double Bs[F8_REF_BK][F8_REF_TILE + 1];
    const int R = (M + step - 1) / step;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int r0 = blockIdx.y * F8_REF_TILE, n0 = blockIdx.x * F8_REF_TILE;
    double acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0;
    for (int k0 = 0; k0 < K; k0 += F8_REF_BK) {
#pragma unroll
        for (int l = 0; l < F8_REF_TILE * F8_REF_BK / 256; l++) {
            const int e = tid + 256 * l, rr = e / F8_REF_BK, kk = e % F8_REF_BK, k = k0 + kk;
            const int r = r0 + rr, n = n0 + rr;
            As[kk][rr] = (r < R && k < K)
                             ? (double)__uint_as_float((uint32_t)A[(size_t)r * step * K + k] << 16)
                             : 0.0;
            Bs[kk][rr] = (n < N && k < K) ? (double)__uint_as_float((uint32_t)B[(size_t)n * K + k] << 16) : 0.0;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < F8_REF_BK; kk++) {
            double a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int r = r0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (r < R && n < N) ref[(size_t)r * N + n] = acc[i][j];
        }
}

struct f8_sums {
    double d2, r2;
    unsigned long long unwritten;
};

/* sums += (sum over sampled rows of (c - scale*ref)^2, of (scale*ref)^2; count of poisoned elements of all C).
 * Poison: fp32 0xFFFFFFFF, bf16 0xFFFF (NaNs no kernel makes from finite inputs). */
template <bool BF16>
__global__ void __launch_bounds__(256) f8_check_kernel(f8_sums *sums, const void *__restrict__ Cv,
                                                       const double *__restrict__ ref, double scale, int M, int N,
                                                       int step) {
    double d2 = 0.0, r2 = 0.0;
    unsigned long long un = 0;
    const size_t total = (size_t)M * N;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float c;
        if (BF16) {
            const uint16_t h = ((const uint16_t *)Cv)[i];
            if (h == 0xFFFFu) un++;
            c = __uint_as_float((uint32_t)h << 16);
        } else {
            c = ((const float *)Cv)[i];
            if (__float_as_uint(c) == 0xFFFFFFFFu) un++;
        }
        const size_t row = i / (size_t)N, col = i % (size_t)N;
        if (row % (size_t)step == 0) {
            const double r = scale * ref[(row / step) * (size_t)N + col];
            const double d = (double)c - r;
            d2 += d * d;
            r2 += r * r;
        }
    }
    bench_check_commit(sums, d2, r2, un);
}

/* ---- one shape ---------------------------------------------------------------- */

typedef struct {
    int M, N, K, n_sets, step;
    uint8_t *A4[GC_MAX_SETS], *A5[GC_MAX_SETS], *B4[GC_MAX_SETS]; /* fp8: A as e4m3 and as e5m2, B e4m3 */
    uint16_t *A16[GC_MAX_SETS], *B16[GC_MAX_SETS];               /* the same values in bf16 */
    float *A32[GC_MAX_SETS], *B32[GC_MAX_SETS];                  /* and in fp32 (exact in tf32) */
    void *C;                                                     /* M*N*4 bytes (fp32, or bf16 in its first half) */
    double *ref;                                                 /* (ceil(M/step), N) */
    f8_sums *sums;
    cudaStream_t stream;
    cublasHandle_t blas; /* the session's, for the tf32 baseline */
    void *lt_ws;
    float *d_sa, *d_sb, *d_one; /* a_scale, b_scale, 1.0f: one cudaMalloc each (cuBLASLt scale pointers) */
    FILE *out;                  /* where the chosen cuBLASLt plan is reported */
    int lt_ready;
    float lt_alpha;     /* the plan's alpha: 1, or a_scale * b_scale when the scale pointers hold 1 */
    char lt_err[512];   /* !lt_ready: why every plan failed (the F8_LT cell reports it) */
#if GC_HAVE_CUBLAS
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t lt_desc;
    cublasLtMatrixLayout_t lt_a, lt_b, lt_c;
    cublasLtMatmulAlgo_t lt_algo;
#endif
} f8_shape;

static void f8_lt_free(f8_shape *sh) {
#if GC_HAVE_CUBLAS
    if (sh->lt_desc) cublasLtMatmulDescDestroy(sh->lt_desc);
    if (sh->lt_a) cublasLtMatrixLayoutDestroy(sh->lt_a);
    if (sh->lt_b) cublasLtMatrixLayoutDestroy(sh->lt_b);
    if (sh->lt_c) cublasLtMatrixLayoutDestroy(sh->lt_c);
    sh->lt_desc = NULL;
    sh->lt_a = sh->lt_b = sh->lt_c = NULL;
#endif
    sh->lt_ready = 0;
}

static void f8_shape_free(f8_shape *sh) {
    for (int i = 0; i < GC_MAX_SETS; i++) {
        cudaFree(sh->A4[i]);
        cudaFree(sh->A5[i]);
        cudaFree(sh->B4[i]);
        cudaFree(sh->A16[i]);
        cudaFree(sh->B16[i]);
        cudaFree(sh->A32[i]);
        cudaFree(sh->B32[i]);
        sh->A4[i] = sh->A5[i] = sh->B4[i] = NULL;
        sh->A16[i] = sh->B16[i] = NULL;
        sh->A32[i] = sh->B32[i] = NULL;
    }
    cudaFree(sh->C);
    cudaFree(sh->ref);
    cudaFree(sh->sums);
    sh->C = NULL;
    sh->ref = NULL;
    sh->sums = NULL;
    f8_lt_free(sh);
}

/* The cuBLASLt fp8 plans, tried in order until one RUNS (a heuristic success alone proves nothing: cublasLtMatmul
 * has returned NOT_SUPPORTED for every algorithm cublasLtMatmulAlgoGetHeuristic offered to a plan where
 * lab/characterize/char_gemm.cu's plan ran). All share char_gemm's working layout: column-major views of our
 * row-major buffers, Lt A = B (N,K) -> (K,N) ld K, op T; Lt B = A (M,K) -> (K,M) ld K, op N; C = D (N,M) ld N =
 * row-major C (M,N); e4m3 x e4m3, CUBLAS_COMPUTE_32F, fp32 scale type, fp32 C/D, FAST_ACCUM off. They differ only
 * in how the 0.125 enters:
 *   0 "scale_ptrs": A/B scale pointers -> a_scale, b_scale (separate allocations), alpha 1;
 *   1 "char_gemm":  both scale pointers -> one device 1.0f (char_gemm.cu exactly), alpha = a_scale * b_scale;
 *   2 "alpha_only": no scale pointers (cuBLASLt's default 1), alpha = a_scale * b_scale.
 * The product is exact either way (powers of two), so the gate and the work are the same. For each plan, up to
 * F8_LT_MAX_ALGOS heuristic algorithms are tried with one synchronised call each. */
#if GC_HAVE_CUBLAS
static const char *const F8_LT_PLAN_NAMES[3] = {"scale_ptrs", "char_gemm", "alpha_only"};

static forge_status f8_lt_plan(f8_shape *sh, int plan, char *tried, size_t tried_len, int *sticky) {
    F8_LT_TRY(cublasLtMatmulDescCreate(&sh->lt_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    F8_LT_TRY(cublasLtMatmulDescSetAttribute(sh->lt_desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    F8_LT_TRY(cublasLtMatmulDescSetAttribute(sh->lt_desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (plan != 2) {
        /* Lt's A is our B */
        const float *sa_lt = plan == 0 ? sh->d_sb : sh->d_one, *sb_lt = plan == 0 ? sh->d_sa : sh->d_one;
        F8_LT_TRY(cublasLtMatmulDescSetAttribute(sh->lt_desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa_lt,
                                                 sizeof sa_lt));
        F8_LT_TRY(cublasLtMatmulDescSetAttribute(sh->lt_desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb_lt,
                                                 sizeof sb_lt));
    }
    sh->lt_alpha = plan == 0 ? 1.0f : F8_A_SCALE * F8_B_SCALE;
    const int8_t fast = 0;
    F8_LT_TRY(cublasLtMatmulDescSetAttribute(sh->lt_desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    F8_LT_TRY(cublasLtMatrixLayoutCreate(&sh->lt_a, CUDA_R_8F_E4M3, (uint64_t)sh->K, (uint64_t)sh->N, sh->K));
    F8_LT_TRY(cublasLtMatrixLayoutCreate(&sh->lt_b, CUDA_R_8F_E4M3, (uint64_t)sh->K, (uint64_t)sh->M, sh->K));
    F8_LT_TRY(cublasLtMatrixLayoutCreate(&sh->lt_c, CUDA_R_32F, (uint64_t)sh->N, (uint64_t)sh->M, sh->N));
    cublasLtMatmulPreference_t pref = NULL;
    F8_LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = F8_LT_WORKSPACE;
    cublasStatus_t bs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                             sizeof ws);
    cublasLtMatmulHeuristicResult_t heur[F8_LT_MAX_ALGOS];
    memset(heur, 0, sizeof heur);
    int found = 0;
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasLtMatmulAlgoGetHeuristic(sh->lt, sh->lt_desc, sh->lt_a, sh->lt_b, sh->lt_c, sh->lt_c, pref,
                                            F8_LT_MAX_ALGOS, heur, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    const size_t used = strlen(tried);
    if (bs != CUBLAS_STATUS_SUCCESS || found < 1) {
        snprintf(tried + used, tried_len - used, "%s%s: heuristic %s (%d found)", used ? "; " : "",
                 F8_LT_PLAN_NAMES[plan], cublasGetStatusString(bs), found);
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm-fp8 bench: cuBLASLt plan %s: no algorithm",
                           F8_LT_PLAN_NAMES[plan]);
    }
    snprintf(tried + used, tried_len - used, "%s%s:", used ? "; " : "", F8_LT_PLAN_NAMES[plan]);
    const float beta = 0.0f;
    for (int a = 0; a < found; a++) {
        const size_t u2 = strlen(tried);
        if (heur[a].state != CUBLAS_STATUS_SUCCESS || heur[a].workspaceSize > F8_LT_WORKSPACE) {
            snprintf(tried + u2, tried_len - u2, " algo%d %s/ws %zu", a, cublasGetStatusString(heur[a].state),
                     heur[a].workspaceSize);
            continue;
        }
        cublasStatus_t ms = cublasLtMatmul(sh->lt, sh->lt_desc, &sh->lt_alpha, sh->B4[0], sh->lt_a, sh->A4[0],
                                           sh->lt_b, &beta, sh->C, sh->lt_c, sh->C, sh->lt_c, &heur[a].algo,
                                           sh->lt_ws, F8_LT_WORKSPACE, sh->stream);
        cudaError_t ce = ms == CUBLAS_STATUS_SUCCESS ? cudaStreamSynchronize(sh->stream) : cudaSuccess;
        if (ce != cudaSuccess) { /* a device fault is sticky: no later plan can run either */
            *sticky = 1;
            return forge_error(FORGE_ERR_DEVICE, "gemm-fp8 bench: cuBLASLt plan %s algo %d: %s",
                               F8_LT_PLAN_NAMES[plan], a, cudaGetErrorString(ce));
        }
        if (ms == CUBLAS_STATUS_SUCCESS) {
            snprintf(tried + u2, tried_len - u2, " algo%d ran", a);
            sh->lt_algo = heur[a].algo;
            sh->lt_ready = 1;
            return FORGE_OK;
        }
        snprintf(tried + u2, tried_len - u2, " algo%d %s", a, cublasGetStatusString(ms));
    }
    return forge_error(FORGE_ERR_UNSUPPORTED, "gemm-fp8 bench: cuBLASLt plan %s: no algorithm ran",
                       F8_LT_PLAN_NAMES[plan]);
}
#endif

/* Never fails the suite: without a running plan the F8_LT cell reports sh->lt_err (the statuses of every try). */
static void f8_lt_prepare(f8_shape *sh) {
    sh->lt_ready = 0;
    sh->lt_err[0] = 0;
#if !GC_HAVE_CUBLAS
    snprintf(sh->lt_err, sizeof sh->lt_err, "%s", GC_NO_CUBLAS_REASON);
#else
    char tried[sizeof sh->lt_err];
    tried[0] = 0;
    for (int plan = 0; plan < 3; plan++) {
        int sticky = 0;
        forge_status s = f8_lt_plan(sh, plan, tried, sizeof tried, &sticky);
        if (s == FORGE_OK) {
            if (sh->out)
                fprintf(sh->out, "cublaslt_fp8_e4m3 M=%d N=%d K=%d: plan %s (alpha %g) [%s]\n", sh->M, sh->N, sh->K,
                        F8_LT_PLAN_NAMES[plan], (double)sh->lt_alpha, tried);
            return;
        }
        if (strstr(tried, F8_LT_PLAN_NAMES[plan]) == NULL) { /* failed before the heuristic: say where */
            const size_t used = strlen(tried);
            snprintf(tried + used, sizeof tried - used, "%s%s: %s", used ? "; " : "", F8_LT_PLAN_NAMES[plan],
                     forge_error_message());
        }
        f8_lt_free(sh);
        if (sticky) {
            const size_t used = strlen(tried);
            snprintf(tried + used, sizeof tried - used, "; stopped: %s", forge_error_message());
            break;
        }
    }
    snprintf(sh->lt_err, sizeof sh->lt_err, "no cuBLASLt fp8 plan ran for M=%d N=%d K=%d: %s", sh->M, sh->N, sh->K,
             tried);
    if (sh->out) fprintf(sh->out, "cublaslt_fp8_e4m3: %s\n", sh->lt_err);
#endif
}

/* Every step-th row of C is checked against float64 (odd, so both row parities are sampled) */
static int f8_ref_step(int M, int N, int K) {
    const double flops = 2.0 * M * (double)N * K;
    int step = (int)ceil(flops / F8_REF_FLOPS);
    if (step > 1 && step % 2 == 0) step++;
    return step < 1 ? 1 : step;
}

static forge_status f8_shape_init(f8_shape *sh, int M, int N, int K, int with_lt, uint64_t seed) {
    sh->M = M, sh->N = N, sh->K = K;
    sh->step = f8_ref_step(M, N, K);
    const size_t a_n = (size_t)M * K, b_n = (size_t)N * K, c_n = (size_t)M * N;
    size_t sets = (F8_SET_TARGET_BYTES + a_n + b_n - 1) / (a_n + b_n);
    sh->n_sets = (int)(sets < 1 ? 1 : sets > GC_MAX_SETS ? GC_MAX_SETS : sets);
    const size_t big = a_n > b_n ? a_n : b_n;
    uint8_t *h4 = (uint8_t *)malloc(big), *h5 = (uint8_t *)malloc(big);
    uint16_t *h16 = (uint16_t *)malloc(big * 2);
    float *h32 = (float *)malloc(big * 4);
    cudaError_t e = (h4 && h5 && h16 && h32) ? cudaSuccess : cudaErrorMemoryAllocation;
    for (int s = 0; s < sh->n_sets && e == cudaSuccess; s++) {
        for (int m = 0; m < 2 && e == cudaSuccess; m++) { /* m 0: A, 1: B */
            const size_t n = m == 0 ? a_n : b_n;
            const uint64_t key = forge_hash64(seed ^ forge_hash64(2 * (uint64_t)s + m + 0x9E3779B97F4A7C15ull));
#pragma omp parallel for schedule(static)
            for (long long i = 0; i < (long long)n; i++) {
                const uint64_t r = forge_hash64(key + (uint64_t)i);
                const float u = 2.0f * ((float)(r >> 40) * (1.0f / 16777216.0f)) - 1.0f; /* [-1, 1) */
                if (m == 0)
                    f8_round_a(u, &h5[i], &h4[i], &h16[i]);
                else
                    f8_round_b(u, &h4[i], &h16[i]);
                h32[i] = f8_float((uint32_t)h16[i] << 16);
            }
            if (m == 0) {
                e = cudaMalloc((void **)&sh->A4[s], n);
                if (e == cudaSuccess) e = cudaMalloc((void **)&sh->A5[s], n);
                if (e == cudaSuccess) e = cudaMalloc((void **)&sh->A16[s], n * 2);
                if (e == cudaSuccess) e = cudaMemcpy(sh->A4[s], h4, n, cudaMemcpyHostToDevice);
                if (e == cudaSuccess) e = cudaMemcpy(sh->A5[s], h5, n, cudaMemcpyHostToDevice);
                if (e == cudaSuccess) e = cudaMemcpy(sh->A16[s], h16, n * 2, cudaMemcpyHostToDevice);
                if (e == cudaSuccess) e = cudaMalloc((void **)&sh->A32[s], n * 4);
                if (e == cudaSuccess) e = cudaMemcpy(sh->A32[s], h32, n * 4, cudaMemcpyHostToDevice);
            } else {
                e = cudaMalloc((void **)&sh->B4[s], n);
                if (e == cudaSuccess) e = cudaMalloc((void **)&sh->B16[s], n * 2);
                if (e == cudaSuccess) e = cudaMemcpy(sh->B4[s], h4, n, cudaMemcpyHostToDevice);
                if (e == cudaSuccess) e = cudaMemcpy(sh->B16[s], h16, n * 2, cudaMemcpyHostToDevice);
                if (e == cudaSuccess) e = cudaMalloc((void **)&sh->B32[s], n * 4);
                if (e == cudaSuccess) e = cudaMemcpy(sh->B32[s], h32, n * 4, cudaMemcpyHostToDevice);
            }
        }
    }
    free(h4);
    free(h5);
    free(h16);
    free(h32);
    const size_t R = (size_t)(M + sh->step - 1) / sh->step;
    if (e == cudaSuccess) e = cudaMalloc(&sh->C, c_n * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->ref, R * N * sizeof(double));
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->sums, sizeof(f8_sums));
    if (e != cudaSuccess) {
        f8_shape_free(sh);
        return forge_error(e == cudaErrorMemoryAllocation ? FORGE_ERR_OOM : FORGE_ERR_DEVICE,
                           "gemm-fp8 bench: buffers of M=%d N=%d K=%d (%d input sets): %s", M, N, K, sh->n_sets,
                           cudaGetErrorString(e));
    }
    const dim3 grid((N + F8_REF_TILE - 1) / F8_REF_TILE, (unsigned)((R + F8_REF_TILE - 1) / F8_REF_TILE));
    f8_ref_kernel<<<grid, 256, 0, sh->stream>>>(sh->ref, sh->A16[0], sh->B16[0], M, N, K, sh->step);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaStreamSynchronize(sh->stream);
    if (e != cudaSuccess) {
        f8_shape_free(sh);
        return forge_error(FORGE_ERR_DEVICE, "gemm-fp8 bench: float64 reference (M=%d N=%d K=%d): %s", M, N, K,
                           cudaGetErrorString(e));
    }
    if (with_lt) f8_lt_prepare(sh);
    return FORGE_OK;
}

/* ---- cells -------------------------------------------------------------------- */

typedef enum {
    F8_LT = 0,
    F8_E4M3,
    F8_E4M3_PIPE,
    F8_E4M3_CHUNK64,
    F8_E4M3_CHUNK128,
    F8_E4M3_CHUNK64_C2,
    F8_E4M3_CHUNK64_RA,
    F8_E4M3_FAST_C2,
    F8_E4M3_PIPE144,    /* pipelined promotion at 144-wide tiles */
    F8_E4M3_PIPE144_C2, /* the same on 2-CTA clusters (B multicast) */
    F8_E4M3_SERIAL144,    /* the rotated serial promotion at 144-wide tiles */
    F8_E4M3_SERIAL144_C2, /* the same on 2-CTA clusters */
    F8_E5M2,
    F8_E4M3_FAST,
    F8_E4M3_BF16OUT,
    F8_BF16,
    F8_CUBLAS_TF32,
    F8_TF32,
    F8_E4M3_DIRECT,         /* F8_E4M3 with the direct store (LAB_GEMM_STORE_DIRECT) */
    F8_E4M3_BF16OUT_DIRECT, /* F8_E4M3_BF16OUT, direct store */
    F8_TF32_DIRECT,         /* F8_TF32, direct store */
    F8_E4M3_TMA,            /* F8_E4M3 with the TMA store (LAB_GEMM_STORE_TMA) wherever C allows it */
    F8_TF32_PP,             /* F8_TF32 on the ping-pong schedule (LAB_GEMM_SCHED_PINGPONG; N % 4 == 0 only) */
    F8_TF32_COOP            /* F8_TF32 on the cooperative schedule (LAB_GEMM_SCHED_COOP) */
} f8_kind;

typedef struct {
    f8_shape *sh;
    f8_kind kind;
} f8_cell;
#define F8_MAX_CELLS 48 /* cells per shape (the table in forge_bench_gemm_fp8_cuda) */

static double f8_cell_scale(const f8_cell *c) {
    return (c->kind == F8_BF16 || c->kind == F8_CUBLAS_TF32 || c->kind == F8_TF32 || c->kind == F8_TF32_DIRECT ||
            c->kind == F8_TF32_PP || c->kind == F8_TF32_COOP)
               ? 1.0
               : (double)F8_A_SCALE * (double)F8_B_SCALE;
}

/* The accumulation mode of the cells that name one variant explicitly: e4m3 x e4m3, fp32 out, the default store. */
static lab_fp8_accum f8_variant_accum(f8_kind k) {
    switch (k) {
    case F8_E4M3_FAST: return LAB_FP8_FAST_ACCUM;
    case F8_E4M3_PIPE: return LAB_FP8_PROMOTE_PIPELINED;
    case F8_E4M3_CHUNK64: return LAB_FP8_PROMOTE_CHUNK64;
    case F8_E4M3_CHUNK64_RA: return LAB_FP8_PROMOTE_CHUNK64_RA;
    case F8_E4M3_CHUNK128: return LAB_FP8_PROMOTE_CHUNK128;
    case F8_E4M3_CHUNK64_C2: return LAB_FP8_PROMOTE_CHUNK64_C2;
    case F8_E4M3_FAST_C2: return LAB_FP8_FAST_ACCUM_C2;
    case F8_E4M3_PIPE144: return LAB_FP8_PROMOTE_PIPE144;
    case F8_E4M3_PIPE144_C2: return LAB_FP8_PROMOTE_PIPE144_C2;
    case F8_E4M3_SERIAL144: return LAB_FP8_PROMOTE_SERIAL144;
    case F8_E4M3_SERIAL144_C2: return LAB_FP8_PROMOTE_SERIAL144_C2;
    default: return LAB_FP8_PROMOTE;
    }
}

static forge_status f8_poison(void *ctx) {
    f8_shape *sh = ((f8_cell *)ctx)->sh;
    GC_TRY(cudaMemsetAsync(sh->C, 0xFF, (size_t)sh->M * sh->N * sizeof(float), sh->stream));
    return FORGE_OK;
}

static forge_status f8_run(void *ctx, int set) {
    f8_cell *c = (f8_cell *)ctx;
    f8_shape *sh = c->sh;
    const int s = set % sh->n_sets;
    switch (c->kind) {
    case F8_E4M3_FAST:
    case F8_E4M3_PIPE:
    case F8_E4M3_CHUNK64:
    case F8_E4M3_CHUNK64_RA:
    case F8_E4M3_CHUNK128:
    case F8_E4M3_CHUNK64_C2:
    case F8_E4M3_FAST_C2:
    case F8_E4M3_PIPE144:
    case F8_E4M3_PIPE144_C2:
    case F8_E4M3_SERIAL144:
    case F8_E4M3_SERIAL144_C2:
        return lab_gemm_fp8_nt(sh->A4[s], FORGE_FP8_E4M3, sh->B4[s], FORGE_FP8_E4M3, sh->C, FORGE_GEMM_OUT_F32,
                               F8_A_SCALE, F8_B_SCALE, sh->M, sh->N, sh->K, f8_variant_accum(c->kind),
                               LAB_GEMM_STORE_AUTO, sh->stream);
    case F8_E4M3:
    case F8_E4M3_BF16OUT:
        return forge_gemm_fp8_nt(sh->A4[s], FORGE_FP8_E4M3, sh->B4[s], FORGE_FP8_E4M3, sh->C,
                                 c->kind == F8_E4M3_BF16OUT ? FORGE_GEMM_OUT_BF16 : FORGE_GEMM_OUT_F32, F8_A_SCALE,
                                 F8_B_SCALE, sh->M, sh->N, sh->K, sh->stream);
    case F8_E4M3_DIRECT:
    case F8_E4M3_BF16OUT_DIRECT:
    case F8_E4M3_TMA:
        return lab_gemm_fp8_nt(sh->A4[s], FORGE_FP8_E4M3, sh->B4[s], FORGE_FP8_E4M3, sh->C,
                               c->kind == F8_E4M3_BF16OUT_DIRECT ? FORGE_GEMM_OUT_BF16 : FORGE_GEMM_OUT_F32,
                               F8_A_SCALE, F8_B_SCALE, sh->M, sh->N, sh->K, LAB_FP8_PROMOTE,
                               c->kind == F8_E4M3_TMA ? LAB_GEMM_STORE_TMA : LAB_GEMM_STORE_DIRECT, sh->stream);
    case F8_TF32_DIRECT:
        return lab_gemm_tf32_nt(sh->A32[s], sh->B32[s], (float *)sh->C, sh->M, sh->N, sh->K, LAB_GEMM_STORE_DIRECT,
                                LAB_GEMM_SCHED_AUTO, sh->stream);
    case F8_TF32_PP:
    case F8_TF32_COOP:
        return lab_gemm_tf32_nt(sh->A32[s], sh->B32[s], (float *)sh->C, sh->M, sh->N, sh->K, LAB_GEMM_STORE_AUTO,
                                c->kind == F8_TF32_PP ? LAB_GEMM_SCHED_PINGPONG : LAB_GEMM_SCHED_COOP, sh->stream);
    case F8_E5M2:
        return forge_gemm_fp8_nt(sh->A5[s], FORGE_FP8_E5M2, sh->B4[s], FORGE_FP8_E4M3, sh->C, FORGE_GEMM_OUT_F32,
                                 F8_A_SCALE, F8_B_SCALE, sh->M, sh->N, sh->K, sh->stream);
    case F8_BF16:
        return forge_gemm_bf16_nt_wgmma(sh->A16[s], sh->B16[s], (float *)sh->C, NULL, sh->M, sh->N, sh->K,
                                        sh->stream);
    case F8_TF32: return forge_gemm_tf32_nt(sh->A32[s], sh->B32[s], (float *)sh->C, sh->M, sh->N, sh->K, sh->stream);
#if GC_HAVE_CUBLAS
    case F8_LT: {
        if (!sh->lt_ready) return forge_error(FORGE_ERR_UNSUPPORTED, "gemm-fp8 bench: %s", sh->lt_err);
        const float beta = 0.0f;
        F8_LT_TRY(cublasLtMatmul(sh->lt, sh->lt_desc, &sh->lt_alpha, sh->B4[s], sh->lt_a, sh->A4[s], sh->lt_b, &beta,
                                 sh->C, sh->lt_c, sh->C, sh->lt_c, &sh->lt_algo, sh->lt_ws, F8_LT_WORKSPACE,
                                 sh->stream));
        return FORGE_OK;
    }
    case F8_CUBLAS_TF32: {
        /* row-major C (M,N) = column-major C^T: m = N, n = M; B (N,K) row-major is (K,N) col-major: op T */
        const float alpha = 1.0f, beta = 0.0f;
        if (cublasGemmEx(sh->blas, CUBLAS_OP_T, CUBLAS_OP_N, sh->N, sh->M, sh->K, &alpha, sh->B32[s], CUDA_R_32F,
                         sh->K, sh->A32[s], CUDA_R_32F, sh->K, &beta, sh->C, CUDA_R_32F, sh->N,
                         CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
            return forge_error(FORGE_ERR_DEVICE, "gemm-fp8 bench: cublasGemmEx tf32 (M=%d N=%d K=%d) failed", sh->M,
                               sh->N, sh->K);
        return FORGE_OK;
    }
#else
    case F8_LT:
    case F8_CUBLAS_TF32:
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm-fp8 bench: cuBLAS cell: %s", GC_NO_CUBLAS_REASON);
#endif
    }
    return forge_error(FORGE_ERR_ARG, "gemm-fp8 bench: unknown cell kind %d", (int)c->kind);
}

static forge_status f8_check(void *ctx, double *rel_err, int *fully_written) {
    f8_cell *c = (f8_cell *)ctx;
    f8_shape *sh = c->sh;
    GC_TRY(cudaMemsetAsync(sh->sums, 0, sizeof(f8_sums), sh->stream));
    if (c->kind == F8_E4M3_BF16OUT || c->kind == F8_E4M3_BF16OUT_DIRECT)
        f8_check_kernel<true><<<1024, 256, 0, sh->stream>>>(sh->sums, sh->C, sh->ref, f8_cell_scale(c), sh->M, sh->N,
                                                            sh->step);
    else
        f8_check_kernel<false><<<1024, 256, 0, sh->stream>>>(sh->sums, sh->C, sh->ref, f8_cell_scale(c), sh->M,
                                                             sh->N, sh->step);
    GC_TRY(cudaGetLastError());
    f8_sums h;
    GC_TRY(cudaMemcpyAsync(&h, sh->sums, sizeof h, cudaMemcpyDeviceToHost, sh->stream));
    GC_TRY(cudaStreamSynchronize(sh->stream));
    *rel_err = h.r2 > 0 ? sqrt(h.d2 / h.r2) : sqrt(h.d2);
    *fully_written = h.unwritten == 0;
    return FORGE_OK;
}

/* ---- the suite ------------------------------------------------------------------ */

typedef struct {
    int M, N, K;
    int odd; /* no cuBLASLt cell (its fp8 path wants 16-byte leading dimensions); forge e4m3 is the baseline */
    const char *what;
} f8_shape_spec;

static const f8_shape_spec F8_SHAPES[] = {
    {2048, 2048, 2048, 0, "square"},
    {4096, 4096, 4096, 0, "square"},
    {8192, 8192, 8192, 0, "square"},
    {65536, 1408, 512, 0, "tall"},
    {1000, 999, 528, 1, "edge: M, N not tile multiples, K%128=16"},
    {129, 200, 16, 1, "edge: K=16, one row past a tile"},
};
enum { F8_N_SHAPES = sizeof F8_SHAPES / sizeof F8_SHAPES[0] };

static const char *F8_RECIPE =
    "A (M,K): uniform [-1,1) from splitmix64(key(seed,2*set)+index)>>40 / 2^24, rounded to e5m2 nearest-even, "
    "|a| < 2^-6 -> 0 (exact in e4m3, e5m2, bf16); B (N,K): key(seed,2*set+1), rounded to e4m3 nearest-even "
    "(subnormals kept); a_scale 0.5, b_scale 0.25 on the fp8 cells; reference: float64 GEMM of the same values on "
    "the GPU over every row_step-th row (row_step odd, reference <= 2e10 flops), poison count over all of C";

/* c2_sel: 1 every cell, 0 no 2-CTA cluster cells, 2 those, the baseline and forge_wgmma_bf16 only (--c2) */
static forge_status f8_suite(FILE *out, int reps, int c2_sel) {
    const uint64_t seed = 20261130;
    char config[1024];
    int len = snprintf(config, sizeof config,
                       "gemm fp8 nt (C = s.A.B^T, fp32|bf16 out) cells=cublaslt_fp8_e4m3,forge_fp8_e4m3,"
                       "forge_fp8_e4m3_pipe,forge_fp8_e4m3_chunk64,forge_fp8_e4m3_chunk128,forge_fp8_e4m3_chunk64_c2,"
                       "forge_fp8_e4m3_chunk64_ra,"
                       "forge_fp8_e4m3_fastacc_c2,"
                       "forge_fp8_e5m2xe4m3,forge_fp8_e4m3_fastacc,forge_fp8_e4m3_bf16out,forge_wgmma_bf16,"
                       "forge_fp8_e4m3_direct,forge_fp8_e4m3_tma,forge_fp8_e4m3_bf16out_direct; tf32 nt "
                       "cells=cublas_tf32,forge_wgmma_tf32,forge_wgmma_tf32_direct,forge_wgmma_tf32_pp,"
                       "forge_wgmma_tf32_coop; shapes=");
    for (int i = 0; i < F8_N_SHAPES && len < (int)sizeof config; i++)
        len += snprintf(config + len, sizeof config - (size_t)len, "%dx%dx%d;", F8_SHAPES[i].M, F8_SHAPES[i].N,
                        F8_SHAPES[i].K);
    gc_session ss;
    forge_status s = gc_session_open(
        &ss, out, "gemm_fp8", config, F8_RECIPE, seed, reps, "gemm-fp8 bench",
        "gemm-fp8: C (M,N) = 0.125 . A (M,K) . B (N,K)^T, fp8 K-major inputs (e4m3 x e4m3, e5m2 x e4m3), fp32 "
        "accumulation promoted every 128 of K (pipe: the same promotion, two alternating temporaries, "
        "wait_group 1; chunk64 / chunk128: the same promotion at BN 256, a stage's MMAs per 64-column chunk into "
        "two alternating temporaries / per 128-column chunk into one; _c2: 2-CTA clusters, B multicast; fastacc: not "
        "promoted; pipe144 / serial144: pipelined / serial promotion at 144-wide tiles), fp32 out (bf16out: bf16); C "
        "stored by the TMA-store epilogue where N allows it (_direct cells: always from the registers, the pre-rung-4e "
        "epilogue; _tma: always TMA); baseline "
        "cuBLASLt fp8 e4m3 (FAST_ACCUM off); forge_wgmma_bf16 = forge's bf16 kernel on the same values (the "
        "1.5x 'accelerated' counterpart); tf32 groups: forge_wgmma_tf32 vs cublas_tf32 on the same values; gate: relative Frobenius error vs float64 on sampled rows + poison count");
    f8_shape sh;
    memset(&sh, 0, sizeof sh);
    if (s == FORGE_OK) {
        sh.stream = ss.sh.stream;
        sh.blas = ss.sh.cublas;
#if GC_HAVE_CUBLAS
        if (cublasLtCreate(&sh.lt) != CUBLAS_STATUS_SUCCESS)
            s = forge_error(FORGE_ERR_DEVICE, "gemm-fp8 bench: cublasLtCreate failed");
#endif
    }
    if (s == FORGE_OK) {
        const float hs[3] = {F8_A_SCALE, F8_B_SCALE, 1.0f};
        float **dst[3] = {&sh.d_sa, &sh.d_sb, &sh.d_one};
        sh.out = out;
        cudaError_t e = cudaMalloc(&sh.lt_ws, F8_LT_WORKSPACE);
        for (int i = 0; i < 3 && e == cudaSuccess; i++) {
            e = cudaMalloc((void **)dst[i], sizeof(float));
            if (e == cudaSuccess) e = cudaMemcpy(*dst[i], &hs[i], sizeof(float), cudaMemcpyHostToDevice);
        }
        if (e != cudaSuccess)
            s = forge_error(FORGE_ERR_DEVICE, "gemm-fp8 bench: cuBLASLt workspace / scales: %s", cudaGetErrorString(e));
    }
    for (int i = 0; i < F8_N_SHAPES && s == FORGE_OK; i++) {
        const f8_shape_spec *sp = &F8_SHAPES[i];
        const int step = f8_ref_step(sp->M, sp->N, sp->K);
        char group[160], group32[160];
        snprintf(group, sizeof group, "fp8 nt M=%d N=%d K=%d (%s; ref rows 1/%d)", sp->M, sp->N, sp->K, sp->what,
                 step);
        snprintf(group32, sizeof group32, "tf32 nt M=%d N=%d K=%d (%s; ref rows 1/%d)", sp->M, sp->N, sp->K,
                 sp->what, step);
        /* the cuBLASLt plan (its probe launches a kernel) only where the baseline cell will run */
        const int with_lt = !sp->odd && GC_HAVE_CUBLAS && forge_harness_cell_selected("cublaslt_fp8_e4m3", group);
        s = f8_shape_init(&sh, sp->M, sp->N, sp->K, with_lt, seed + (uint64_t)i);
        if (s != FORGE_OK) break;
        const double flops = 2.0 * sp->M * sp->N * (double)sp->K;
        const double mk_nk = (double)sp->M * sp->K + (double)sp->N * sp->K, mn = (double)sp->M * sp->N;
        static const struct {
            f8_kind kind;
            const char *name;
            forge_precision prec;
            double in_bytes, out_bytes; /* per element of A/B, of C */
        } cells[] = {{F8_LT, "cublaslt_fp8_e4m3", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3, "forge_fp8_e4m3", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_PIPE, "forge_fp8_e4m3_pipe", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_CHUNK64, "forge_fp8_e4m3_chunk64", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_CHUNK128, "forge_fp8_e4m3_chunk128", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_CHUNK64_C2, "forge_fp8_e4m3_chunk64_c2", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_CHUNK64_RA, "forge_fp8_e4m3_chunk64_ra", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_FAST_C2, "forge_fp8_e4m3_fastacc_c2", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_PIPE144, "forge_fp8_e4m3_pipe144", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_PIPE144_C2, "forge_fp8_e4m3_pipe144_c2", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_SERIAL144, "forge_fp8_e4m3_serial144", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_SERIAL144_C2, "forge_fp8_e4m3_serial144_c2", FORGE_PREC_FP8, 1, 4},
                     {F8_E5M2, "forge_fp8_e5m2xe4m3", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_FAST, "forge_fp8_e4m3_fastacc", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_BF16OUT, "forge_fp8_e4m3_bf16out", FORGE_PREC_FP8, 1, 2},
                     {F8_BF16, "forge_wgmma_bf16", FORGE_PREC_BF16, 2, 4},
                     {F8_E4M3_DIRECT, "forge_fp8_e4m3_direct", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_TMA, "forge_fp8_e4m3_tma", FORGE_PREC_FP8, 1, 4},
                     {F8_E4M3_BF16OUT_DIRECT, "forge_fp8_e4m3_bf16out_direct", FORGE_PREC_FP8, 1, 2},
                     {F8_CUBLAS_TF32, "cublas_tf32", FORGE_PREC_TF32, 4, 4},
                     {F8_TF32, "forge_wgmma_tf32", FORGE_PREC_TF32, 4, 4},
                     {F8_TF32_DIRECT, "forge_wgmma_tf32_direct", FORGE_PREC_TF32, 4, 4},
                     {F8_TF32_PP, "forge_wgmma_tf32_pp", FORGE_PREC_TF32, 4, 4},
                     {F8_TF32_COOP, "forge_wgmma_tf32_coop", FORGE_PREC_TF32, 4, 4},
                     /* the A/A controls: each baseline again, as an ordinary cell of its group */
                     {F8_LT, GC_AA_CONTROL("cublaslt_fp8_e4m3"), FORGE_PREC_FP8, 1, 4},
                     {F8_CUBLAS_TF32, GC_AA_CONTROL("cublas_tf32"), FORGE_PREC_TF32, 4, 4}};
        /* live until the flush below times them (nvcc's host pass rejects sizeof(cells) in an array bound) */
        f8_cell ctxs[F8_MAX_CELLS];
        const int n_cells = (int)(sizeof cells / sizeof cells[0]);
        if (n_cells > F8_MAX_CELLS) s = forge_error(FORGE_ERR_ARG, "gemm-fp8 bench: raise F8_MAX_CELLS to %d", n_cells);
        for (int v = 0; v < n_cells && s == FORGE_OK; v++) {
            const f8_kind k = cells[v].kind;
            if (k == F8_LT && sp->odd) continue;
            if (k == F8_TF32_PP && sp->N % 4 != 0) continue; /* ping-pong stores through TMA only */
            /* --c2 (the top of the file) */
            const int is_c2 = k == F8_E4M3_CHUNK64_C2 || k == F8_E4M3_FAST_C2 || k == F8_E4M3_PIPE144_C2 ||
                                 k == F8_E4M3_SERIAL144_C2;
            if (c2_sel == 0 && is_c2) continue;
            if (c2_sel == 2 && !is_c2 && k != F8_LT && k != F8_BF16 && !(sp->odd && k == F8_E4M3)) continue;
            if (!GC_HAVE_CUBLAS && gc_cell_needs_cublas(cells[v].name)) {
                fprintf(out, "skip %s [%s]: %s\n", cells[v].name, k == F8_CUBLAS_TF32 ? group32 : group,
                        GC_NO_CUBLAS_REASON);
                continue;
            }
            ctxs[v].sh = &sh;
            ctxs[v].kind = k;
            forge_harness_cell cell;
            memset(&cell, 0, sizeof cell);
            cell.name = cells[v].name;
            const int tf32 = k == F8_CUBLAS_TF32 || k == F8_TF32 || k == F8_TF32_DIRECT || k == F8_TF32_PP ||
                             k == F8_TF32_COOP;
            /* tf32 cells in their own group, against cuBLAS tf32 */
            cell.group = tf32 ? group32 : group;
            const int aa_control = strstr(cells[v].name, "_aa_control") != NULL;
            cell.is_baseline = !aa_control && (k == F8_CUBLAS_TF32 || k == (sp->odd ? F8_E4M3 : F8_LT));
            /* the acceleration bar: forge's promoted fp8 cells against forge's bf16 kernel on the same values */
            cell.counterpart = (k == F8_E4M3 || k == F8_E4M3_PIPE || k == F8_E4M3_CHUNK64 || k == F8_E4M3_CHUNK128 ||
                                k == F8_E4M3_CHUNK64_C2 || k == F8_E4M3_CHUNK64_RA || k == F8_E4M3_PIPE144 ||
                                k == F8_E4M3_PIPE144_C2 || k == F8_E4M3_SERIAL144 || k == F8_E4M3_SERIAL144_C2 ||
                                k == F8_E5M2 || k == F8_E4M3_DIRECT)
                                   ? "forge_wgmma_bf16"
                                   : NULL;
            cell.precision = cells[v].prec;
            cell.flops = flops;
            cell.bytes = cells[v].in_bytes * mk_nk + cells[v].out_bytes * mn;
            cell.n_input_sets = sh.n_sets;
            cell.ctx = &ctxs[v];
            cell.poison = f8_poison;
            cell.run = f8_run;
            cell.check = f8_check;
            forge_cell_result res;
            memset(&res, 0, sizeof res);
            s = forge_harness_run(ss.h, &cell, &res);
            if (s == FORGE_OK && forge_cell_bad(&res)) ss.bad++;
        }
        if (s == FORGE_OK) s = gc_session_flush(&ss); /* before sh's buffers go */
        f8_shape_free(&sh);
    }
    f8_shape_free(&sh);
#if GC_HAVE_CUBLAS
    if (sh.lt) cublasLtDestroy(sh.lt);
#endif
    cudaFree(sh.lt_ws);
    cudaFree(sh.d_sa);
    cudaFree(sh.d_sb);
    cudaFree(sh.d_one);
    return gc_session_close(&ss, s);
}

extern "C" int lab_bench_gemm_fp8(int argc, char **argv) {
    lab_fp8_bench_opts o;
    const char *usage = "[--reps N] [--results DIR] [--order sequential|interleaved] [--only PATTERNS] [--c2 all|none|only]";
    if (lab_fp8_bench_opts_parse(&o, argc, argv, "bench gemm-fp8", usage, "--c2") != 0) return 2;
    int c2_sel = 1;
    if (o.own != NULL && strcmp(o.own, "all") != 0) {
        if (strcmp(o.own, "none") == 0) c2_sel = 0;
        else if (strcmp(o.own, "only") == 0) c2_sel = 2;
        else {
            fprintf(stderr, "forge-lab bench gemm-fp8: --c2 is all, none or only, got \"%s\"\nusage: forge-lab bench "
                            "gemm-fp8 %s\n", o.own, usage);
            return 2;
        }
    }
    return lab_fp8_bench_exit("bench gemm-fp8", f8_suite(stdout, o.reps > 0 ? o.reps : 10, c2_sel));
}
