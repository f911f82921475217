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
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "../gemm_bench.h"
#include "../harness.h"
#include "../harness_cuda.h"
#include "../../backend/cuda/gemm.h"
#include "../../util/rng.h"
}

#define GB_TRY(call)                                                                                \
    do {                                                                                            \
        cudaError_t gb_e_ = (call);                                                                 \
        if (gb_e_ != cudaSuccess)                                                                   \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__, \
                               cudaGetErrorString(gb_e_));                                          \
    } while (0)

#define GB_CUBLAS_TRY(call)                                                                              \
    do {                                                                                                 \
        cublasStatus_t gb_cs_ = (call);                                                                  \
        if (gb_cs_ != CUBLAS_STATUS_SUCCESS)                                                             \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: cuBLAS status %d", #call, __FILE__, \
                               __LINE__, (int)gb_cs_);                                                   \
    } while (0)

#define GB_MAX_SETS 8
#define GB_SET_TARGET_BYTES ((size_t)256 << 20)
#define GB_POISON 0xFFFFFFFFu
#define GB_REF_TILE 64
#define GB_REF_BK 16

/* ---- kernels: float64 reference and the gate ----------------------------- */

__device__ __forceinline__ double gb_bf16_to_double(uint16_t v) {
    return (double)__uint_as_float((uint32_t)v << 16);
}

/* ref (M,N) = A . B in double over the effective A (M,K) and B^T (N,K): a_mn = 0: A stored (M,K) (K
 * contiguous), 1: stored (K,M) (M contiguous); b_mn = 0: B stored (N,K), 1: stored (K,N). NT = (0,0),
 * NN (dX = dY.W) = (0,1), TN (dW = dY^T.X) = (1,1). 64x64 tile, 256 threads, a 4x4 block each (rows
 * ty + 16i, columns tx + 16j), K slices of 16. */
__global__ void __launch_bounds__(256)
    gemm_ref64_nt_kernel(double *__restrict__ ref, const uint16_t *__restrict__ A, const uint16_t *__restrict__ B,
                         int M, int N, int K, int a_mn, int b_mn) {
    __shared__ double As[GB_REF_BK][GB_REF_TILE + 1];
    __shared__ double Bs[GB_REF_BK][GB_REF_TILE + 1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * GB_REF_TILE, n0 = blockIdx.x * GB_REF_TILE;
    double acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0;
    for (int k0 = 0; k0 < K; k0 += GB_REF_BK) {
#pragma unroll
        for (int l = 0; l < GB_REF_TILE * GB_REF_BK / 256; l++) {
            const int e = tid + 256 * l;
            { /* MN-major: consecutive threads along the contiguous MN dimension */
                const int r = a_mn ? e % GB_REF_TILE : e / GB_REF_BK, kk = a_mn ? e / GB_REF_TILE : e % GB_REF_BK;
                const int k = k0 + kk, m = m0 + r;
                As[kk][r] = (m < M && k < K)
                                ? gb_bf16_to_double(a_mn ? A[(size_t)k * M + m] : A[(size_t)m * K + k])
                                : 0.0;
            }
            {
                const int r = b_mn ? e % GB_REF_TILE : e / GB_REF_BK, kk = b_mn ? e / GB_REF_TILE : e % GB_REF_BK;
                const int k = k0 + kk, n = n0 + r;
                Bs[kk][r] = (n < N && k < K)
                                ? gb_bf16_to_double(b_mn ? B[(size_t)k * N + n] : B[(size_t)n * K + k])
                                : 0.0;
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GB_REF_BK; kk++) {
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
            const int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (m < M && n < N) ref[(size_t)m * N + n] = acc[i][j];
        }
}

struct gb_sums {
    double d2, r2;
    unsigned long long unwritten;
};

/* sums[0] += (sum (c - (ref + bias))^2, sum (ref + bias)^2, #poisoned) */
__global__ void __launch_bounds__(256)
    gemm_check_kernel(gb_sums *sums, const float *__restrict__ C, const double *__restrict__ ref,
                      const float *__restrict__ bias, size_t total, int N) {
    __shared__ double sd[256], sr[256];
    __shared__ unsigned long long su[256];
    double d2 = 0.0, r2 = 0.0;
    unsigned long long un = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const float c = C[i];
        const double r = ref[i] + (bias != nullptr ? (double)bias[i % (size_t)N] : 0.0);
        if (__float_as_uint(c) == GB_POISON) un++;
        const double d = (double)c - r;
        d2 += d * d;
        r2 += r * r;
    }
    sd[threadIdx.x] = d2;
    sr[threadIdx.x] = r2;
    su[threadIdx.x] = un;
    __syncthreads();
    for (int s = 128; s > 0; s /= 2) {
        if ((int)threadIdx.x < s) {
            sd[threadIdx.x] += sd[threadIdx.x + s];
            sr[threadIdx.x] += sr[threadIdx.x + s];
            su[threadIdx.x] += su[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(&sums->d2, sd[0]);
        atomicAdd(&sums->r2, sr[0]);
        atomicAdd(&sums->unwritten, su[0]);
    }
}

/* C[m][n] = bias[n]: the prior contents of C for an accumulate (C +=) cell, checked against ref + bias */
__global__ void __launch_bounds__(256) gemm_fill_rows_kernel(float *C, const float *__restrict__ bias, size_t total,
                                                             int N) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        C[i] = bias[i % (size_t)N];
}

/* ---- one shape: inputs, reference, output -------------------------------- */

/* NT: C = A (M,K) . B (N,K)^T (forward). NN: C = A (M,K) . B (K,N) (dX = dY.W). TN: C = A (K,M)^T . B (K,N)
 * (dW = dY^T.X, split-K). Same element counts per operand in every layout. */
typedef enum { GB_NT = 0, GB_NN, GB_TN } gb_layout;

typedef struct {
    int M, N, K, n_sets;
    gb_layout layout;
    uint16_t *A[GB_MAX_SETS], *B[GB_MAX_SETS]; /* M*K, N*K bf16 per input set, stored as the layout says */
    void *work;                                /* TN split-K workspace (forge_gemm_bf16_tn_workspace) */
    size_t work_bytes;
    float *bias;                               /* (N) */
    float *C;                                  /* (M,N) shared by the shape's cells */
    double *ref;                               /* (M,N) float64 A[0] . B[0]^T, no bias */
    gb_sums *sums;                             /* device accumulator of the gate */
    cudaStream_t stream;
    cublasHandle_t cublas;
} gb_shape;

typedef enum { GB_CUBLAS = 0, GB_WGMMA, GB_AUTO } gb_kind;

typedef struct {
    gb_shape *sh;
    gb_kind kind;
    int use_bias;   /* NT: the epilogue adds bias. NN/TN: accumulate cell, C starts as bias rows, C += */
} gb_cell;

static uint16_t gb_float_to_bf16(float f) { /* round to nearest even; inputs are finite */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* n values uniform in [-1, 1) from hash(seed, stream, index), rounded to bf16 */
static void gb_fill_bf16(uint16_t *h, size_t n, uint64_t seed, uint64_t stream) {
    const uint64_t key = forge_hash64(seed ^ forge_hash64(stream + 0x9E3779B97F4A7C15ull));
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < (long long)n; i++) {
        const uint64_t r = forge_hash64(key + (uint64_t)i);
        const float u = (float)(r >> 40) * (1.0f / 16777216.0f); /* [0, 1), 24 bits */
        h[i] = gb_float_to_bf16(2.0f * u - 1.0f);
    }
}

static void gb_shape_free(gb_shape *sh) {
    for (int i = 0; i < GB_MAX_SETS; i++) {
        cudaFree(sh->A[i]);
        cudaFree(sh->B[i]);
    }
    cudaFree(sh->bias);
    cudaFree(sh->C);
    cudaFree(sh->ref);
    cudaFree(sh->sums);
    cudaFree(sh->work);
    sh->work = NULL;
    sh->work_bytes = 0;
    memset(sh->A, 0, sizeof sh->A);
    memset(sh->B, 0, sizeof sh->B);
    sh->bias = sh->C = NULL;
    sh->ref = NULL;
    sh->sums = NULL;
}

static forge_status gb_shape_init(gb_shape *sh, gb_layout layout, int M, int N, int K, uint64_t seed) {
    sh->M = M, sh->N = N, sh->K = K;
    sh->layout = layout;
    const size_t a_n = (size_t)M * K, b_n = (size_t)N * K, c_n = (size_t)M * N;
    const size_t set_bytes = (a_n + b_n) * 2;
    size_t sets = (GB_SET_TARGET_BYTES + set_bytes - 1) / set_bytes;
    sh->n_sets = (int)(sets < 1 ? 1 : sets > GB_MAX_SETS ? GB_MAX_SETS : sets);
    uint16_t *host = (uint16_t *)malloc((a_n > b_n ? a_n : b_n) * sizeof(uint16_t));
    float *hbias = (float *)malloc((size_t)N * sizeof(float));
    if (!host || !hbias) {
        free(host);
        free(hbias);
        return forge_error(FORGE_ERR_OOM, "gemm bench: no host memory for a %d x %d x %d input set", M, N, K);
    }
    forge_status s = FORGE_OK;
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < sh->n_sets && e == cudaSuccess; i++) {
        e = cudaMalloc((void **)&sh->A[i], a_n * 2);
        if (e == cudaSuccess) e = cudaMalloc((void **)&sh->B[i], b_n * 2);
        if (e == cudaSuccess) {
            gb_fill_bf16(host, a_n, seed, 2 * (uint64_t)i);
            e = cudaMemcpy(sh->A[i], host, a_n * 2, cudaMemcpyHostToDevice);
        }
        if (e == cudaSuccess) {
            gb_fill_bf16(host, b_n, seed, 2 * (uint64_t)i + 1);
            e = cudaMemcpy(sh->B[i], host, b_n * 2, cudaMemcpyHostToDevice);
        }
    }
    if (e == cudaSuccess) {
        forge_rng rng;
        forge_rng_seed(&rng, seed, 999);
        for (int j = 0; j < N; j++) hbias[j] = 2.0f * forge_rng_uniform(&rng) - 1.0f;
        e = cudaMalloc((void **)&sh->bias, (size_t)N * sizeof(float));
        if (e == cudaSuccess) e = cudaMemcpy(sh->bias, hbias, (size_t)N * sizeof(float), cudaMemcpyHostToDevice);
    }
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->C, c_n * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->ref, c_n * sizeof(double));
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->sums, sizeof(gb_sums));
    if (e == cudaSuccess && layout == GB_TN) {
        s = forge_gemm_bf16_tn_workspace(M, N, K, &sh->work_bytes);
        if (s == FORGE_OK && sh->work_bytes > 0) e = cudaMalloc(&sh->work, sh->work_bytes);
        if (s != FORGE_OK) {
            free(host);
            free(hbias);
            gb_shape_free(sh);
            return s;
        }
    }
    free(host);
    free(hbias);
    if (e != cudaSuccess) {
        s = forge_error(e == cudaErrorMemoryAllocation ? FORGE_ERR_OOM : FORGE_ERR_DEVICE,
                        "gemm bench: buffers of M=%d N=%d K=%d (%d input sets): %s", M, N, K, sh->n_sets,
                        cudaGetErrorString(e));
        gb_shape_free(sh);
        return s;
    }
    const dim3 grid((N + GB_REF_TILE - 1) / GB_REF_TILE, (M + GB_REF_TILE - 1) / GB_REF_TILE);
    if (grid.y > 65535) {
        gb_shape_free(sh);
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm bench: M=%d too large for the reference kernel grid", M);
    }
    gemm_ref64_nt_kernel<<<grid, 256, 0, sh->stream>>>(sh->ref, sh->A[0], sh->B[0], M, N, K, layout == GB_TN,
                                                       layout != GB_NT);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaStreamSynchronize(sh->stream);
    if (e != cudaSuccess) {
        gb_shape_free(sh);
        return forge_error(FORGE_ERR_DEVICE, "gemm bench: float64 reference kernel (M=%d N=%d K=%d): %s", M, N, K,
                           cudaGetErrorString(e));
    }
    return FORGE_OK;
}

/* ---- cell callbacks -------------------------------------------------------- */

static forge_status gb_poison(void *ctx) {
    gb_cell *c = (gb_cell *)ctx;
    if (c->sh->layout != GB_NT && c->use_bias && c->kind != GB_CUBLAS) { /* accumulate cell: C starts as bias rows */
        gemm_fill_rows_kernel<<<1024, 256, 0, c->sh->stream>>>(c->sh->C, c->sh->bias, (size_t)c->sh->M * c->sh->N,
                                                               c->sh->N);
        GB_TRY(cudaGetLastError());
        return FORGE_OK;
    }
    GB_TRY(cudaMemsetAsync(c->sh->C, 0xFF, (size_t)c->sh->M * c->sh->N * sizeof(float), c->sh->stream));
    return FORGE_OK;
}

static forge_status gb_run(void *ctx, int set) {
    gb_cell *c = (gb_cell *)ctx;
    gb_shape *sh = c->sh;
    const void *A = sh->A[set % sh->n_sets], *B = sh->B[set % sh->n_sets];
    const float *bias = c->use_bias ? sh->bias : NULL;
    if (sh->layout != GB_NT) {
        /* row-major C (M,N) is column-major C^T (N,M) = B'^T . A'^T for the effective A' (M,K), B' (K,N).
         * NN: W (K,N) row-major = column-major (N,K): op N, ld N; dY (M,K) = column-major (K,M): op N, ld K.
         * TN: X (K,N): op N, ld N; dY (K,M) row-major = column-major (M,K), need (K,M): op T, ld M. */
        const int tn = sh->layout == GB_TN;
        if (c->kind == GB_CUBLAS) {
            const float alpha = 1.0f, beta = 0.0f;
            GB_CUBLAS_TRY(cublasGemmEx(sh->cublas, CUBLAS_OP_N, tn ? CUBLAS_OP_T : CUBLAS_OP_N, sh->N, sh->M, sh->K,
                                       &alpha, B, CUDA_R_16BF, sh->N, A, CUDA_R_16BF, tn ? sh->M : sh->K, &beta,
                                       sh->C, CUDA_R_32F, sh->N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            return FORGE_OK;
        }
        const int acc = c->use_bias;
        if (tn)
            return forge_gemm_bf16_tn_wgmma(A, B, sh->C, sh->M, sh->N, sh->K, acc, sh->work, sh->work_bytes,
                                            sh->stream);
        return forge_gemm_bf16_nn_wgmma(A, B, sh->C, sh->M, sh->N, sh->K, acc, sh->stream);
    }
    switch (c->kind) {
    case GB_CUBLAS: {
        const float alpha = 1.0f, beta = 0.0f;
        GB_CUBLAS_TRY(cublasGemmEx(sh->cublas, CUBLAS_OP_T, CUBLAS_OP_N, sh->N, sh->M, sh->K, &alpha, B,
                                   CUDA_R_16BF, sh->K, A, CUDA_R_16BF, sh->K, &beta, sh->C, CUDA_R_32F, sh->N,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return FORGE_OK;
    }
    case GB_WGMMA: return forge_gemm_bf16_nt_wgmma(A, B, sh->C, bias, sh->M, sh->N, sh->K, sh->stream);
    case GB_AUTO: return forge_gemm_bf16_nt(A, B, sh->C, bias, sh->M, sh->N, sh->K, sh->stream);
    }
    return forge_error(FORGE_ERR_ARG, "gemm bench: unknown cell kind %d", (int)c->kind);
}

static forge_status gb_check(void *ctx, double *rel_err, int *fully_written) {
    gb_cell *c = (gb_cell *)ctx;
    gb_shape *sh = c->sh;
    GB_TRY(cudaMemsetAsync(sh->sums, 0, sizeof(gb_sums), sh->stream));
    gemm_check_kernel<<<1024, 256, 0, sh->stream>>>(sh->sums, sh->C, sh->ref, c->use_bias ? sh->bias : NULL,
                                                    (size_t)sh->M * sh->N, sh->N);
    GB_TRY(cudaGetLastError());
    gb_sums h;
    GB_TRY(cudaMemcpyAsync(&h, sh->sums, sizeof h, cudaMemcpyDeviceToHost, sh->stream));
    GB_TRY(cudaStreamSynchronize(sh->stream));
    *rel_err = h.r2 > 0 ? sqrt(h.d2 / h.r2) : sqrt(h.d2);
    *fully_written = h.unwritten == 0;
    return FORGE_OK;
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
    const int dev = 0;
    const uint64_t seed = 20260505;
    GB_TRY(cudaSetDevice(dev));
    char config[2048];
    static const char *const lay[3] = {"nt", "nn", "tn"};
    int len = snprintf(config, sizeof config,
                       "gemm bf16 nt/nn/tn (C = A.B^T, dY.W, dY^T.X; fp32 out) cells=cublas_bf16,forge[,forge_acc]; "
                       "shapes=");
    for (int i = 0; i < GB_N_SHAPES && len < (int)sizeof config; i++)
        len += snprintf(config + len, sizeof config - (size_t)len, "%s:%dx%dx%d%s;", lay[GB_SHAPES[i].layout],
                        GB_SHAPES[i].M, GB_SHAPES[i].N, GB_SHAPES[i].K,
                        GB_SHAPES[i].bias ? (GB_SHAPES[i].layout == GB_NT ? "+bias" : "+acc") : "");

    gb_shape sh;
    memset(&sh, 0, sizeof sh);
    GB_TRY(cudaStreamCreateWithFlags(&sh.stream, cudaStreamNonBlocking));
    forge_bench_timer timer;
    memset(&timer, 0, sizeof timer);
    forge_harness *h = NULL;
    forge_status s = FORGE_OK;
    if (cublasCreate(&sh.cublas) != CUBLAS_STATUS_SUCCESS)
        s = forge_error(FORGE_ERR_DEVICE, "gemm bench: cublasCreate failed");
    if (s == FORGE_OK && cublasSetStream(sh.cublas, sh.stream) != CUBLAS_STATUS_SUCCESS)
        s = forge_error(FORGE_ERR_DEVICE, "gemm bench: cublasSetStream failed");
    int have_timer = 0;
    if (s == FORGE_OK) s = forge_cuda_bench_timer_create(&timer, sh.stream);
    if (s == FORGE_OK) have_timer = 1;
    forge_provenance prov;
    memset(&prov, 0, sizeof prov);
    if (s == FORGE_OK) s = forge_cuda_provenance(&prov, dev);
    forge_harness_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.suite = "gemm";
    cfg.results_root = "results";
    cfg.config_text = config;
    cfg.input_recipe = GB_RECIPE;
    cfg.seed = seed;
    cfg.reps = reps;
    cfg.warmup = 10;
    cfg.out = out;
    if (s == FORGE_OK) s = forge_harness_open(&h, &cfg, &prov, &timer);
    if (s == FORGE_OK)
        fprintf(out,
                "gemm: C (M,N) fp32 = A (M,K) . B (N,K)^T (nt), dY (M,K) . W (K,N) (nn), dY (K,M)^T . X (K,N) (tn, "
                "split-K), bf16 inputs, fp32 accumulation; baseline cuBLAS with the matching op flags "
                "(cublasGemmEx, CUBLAS_COMPUTE_32F); gate: relative Frobenius error vs a float64 GEMM of the same "
                "bf16 inputs + poison count\n");
    int bad = 0;
    for (int i = 0; i < GB_N_SHAPES && s == FORGE_OK; i++) {
        const gb_shape_spec *sp = &GB_SHAPES[i];
        s = gb_shape_init(&sh, sp->layout, sp->M, sp->N, sp->K, seed + (uint64_t)i);
        if (s != FORGE_OK) break;
        char group[160];
        snprintf(group, sizeof group, "bf16 %s M=%d N=%d K=%d (%s)", lay[sp->layout], sp->M, sp->N, sp->K, sp->what);
        const double flops = 2.0 * sp->M * sp->N * (double)sp->K;
        const double bytes = 2.0 * ((double)sp->M * sp->K + (double)sp->N * sp->K) + 4.0 * sp->M * (double)sp->N;
        const int bwd = sp->layout != GB_NT;
        /* NT: cuBLAS, forge (+bias when asked). NN/TN: cuBLAS, forge (C =), and forge accumulate (C +=) */
        gb_cell cells[3] = {{&sh, GB_CUBLAS, 0},
                            {&sh, sp->odd ? GB_AUTO : GB_WGMMA, bwd ? 0 : sp->bias},
                            {&sh, GB_WGMMA, 1}};
        const char *names[3] = {"cublas_bf16", sp->odd ? "forge_bf16_auto" : "forge_wgmma_bf16",
                                "forge_wgmma_bf16_acc"};
        const int n_cells = bwd && sp->bias ? 3 : 2;
        for (int v = 0; v < n_cells && s == FORGE_OK; v++) {
            forge_harness_cell cell;
            memset(&cell, 0, sizeof cell);
            cell.name = names[v];
            cell.group = group;
            cell.is_baseline = v == 0;
            cell.precision = FORGE_PREC_BF16;
            cell.flops = flops;
            cell.bytes = bytes;
            cell.n_input_sets = sh.n_sets;
            cell.ctx = &cells[v];
            cell.poison = gb_poison;
            cell.run = gb_run;
            cell.check = gb_check;
            forge_cell_result res;
            memset(&res, 0, sizeof res);
            s = forge_harness_run(h, &cell, &res);
            if (s == FORGE_OK && res.status != FORGE_CELL_OK) bad++;
        }
        gb_shape_free(&sh);
    }
    if (s == FORGE_OK) s = forge_cuda_provenance_end(forge_harness_provenance(h), dev);
    if (s == FORGE_OK) {
        s = forge_harness_close(h);
        h = NULL;
    }
    forge_harness_free(h);
    gb_shape_free(&sh);
    if (have_timer) forge_cuda_bench_timer_destroy(&timer);
    if (sh.cublas) cublasDestroy(sh.cublas);
    cudaStreamDestroy(sh.stream);
    if (s == FORGE_OK && bad > 0)
        s = forge_error(FORGE_ERR_NUMERIC, "gemm bench: %d cell(s) failed or were garbage (see the table)", bad);
    return s;
}
