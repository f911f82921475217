/*
 * gemm_mma_cells.cu: the cells of `forge bench gemm-mma` (issue 5, rung 2:
 * the mma.sync kernels of src/backend/cuda/gemm_mma.cu; notes in
 * docs/gemm-mma.md).
 *
 *   C (M,N) fp32 = A (M,K) . B (N,K)^T [+ bias (N)]     A, B K-major
 *
 * Per shape, two groups:
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
 *   conversion is therefore NOT exercised here (see docs/gemm-mma.md).
 * - The gate runs on the GPU: sum (c - ref)^2, sum ref^2 in double, and the
 *   count of elements still carrying the poison pattern 0xFFFFFFFF.
 * - The edge shapes (odd M, N, K; +bias) exercise the bounds-checked paths:
 *   K*elem % 16 != 0 takes the scalar-load variant of the kernel.
 * - Inputs rotate over enough sets that one set's A and B are not all in
 *   the 50 MB L2 (>= ~256 MB in total, at most 8 sets).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "../gemm_mma_bench.h"
#include "../harness.h"
#include "../harness_cuda.h"
#include "../../backend/cuda/gemm_mma.h"
#include "../../util/rng.h"
}

#define GMM_TRY(call)                                                                                \
    do {                                                                                             \
        cudaError_t gmm_e_ = (call);                                                                 \
        if (gmm_e_ != cudaSuccess)                                                                   \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__, \
                               cudaGetErrorString(gmm_e_));                                          \
    } while (0)

#define GMM_CUBLAS_TRY(call)                                                                              \
    do {                                                                                                  \
        cublasStatus_t gmm_cs_ = (call);                                                                  \
        if (gmm_cs_ != CUBLAS_STATUS_SUCCESS)                                                             \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: cuBLAS status %d", #call, __FILE__, \
                               __LINE__, (int)gmm_cs_);                                                   \
    } while (0)

#define GMM_MAX_SETS 8
#define GMM_SET_TARGET_BYTES ((size_t)256 << 20)
#define GMM_POISON 0xFFFFFFFFu
#define GMM_REF_TILE 64
#define GMM_REF_BK 16

/* ---- kernels: float64 reference and the gate ----------------------------- */

template <bool TF32> __device__ __forceinline__ double gmm_load_double(const void *p, size_t i) {
    if (TF32) return (double)((const float *)p)[i];
    return (double)__uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16);
}

/* ref (M,N) = A (M,K) . B (N,K)^T in double: 64x64 tile, 256 threads, a 4x4
 * block each (rows ty + 16i, columns tx + 16j), K slices of 16. */
template <bool TF32>
static __global__ void __launch_bounds__(256)
    gmm_ref64_kernel(double *__restrict__ ref, const void *__restrict__ A, const void *__restrict__ B, int M, int N,
                     int K) {
    __shared__ double As[GMM_REF_BK][GMM_REF_TILE + 1];
    __shared__ double Bs[GMM_REF_BK][GMM_REF_TILE + 1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * GMM_REF_TILE, n0 = blockIdx.x * GMM_REF_TILE;
    double acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0;
    for (int k0 = 0; k0 < K; k0 += GMM_REF_BK) {
#pragma unroll
        for (int l = 0; l < GMM_REF_TILE * GMM_REF_BK / 256; l++) {
            const int e = tid + 256 * l, r = e / GMM_REF_BK, kk = e % GMM_REF_BK, k = k0 + kk;
            As[kk][r] = (m0 + r < M && k < K) ? gmm_load_double<TF32>(A, (size_t)(m0 + r) * K + k) : 0.0;
            Bs[kk][r] = (n0 + r < N && k < K) ? gmm_load_double<TF32>(B, (size_t)(n0 + r) * K + k) : 0.0;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GMM_REF_BK; kk++) {
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

struct gmm_sums {
    double d2, r2;
    unsigned long long unwritten;
};

/* sums[0] += (sum (c - (ref + bias))^2, sum (ref + bias)^2, #poisoned) */
static __global__ void __launch_bounds__(256)
    gmm_check_kernel(gmm_sums *sums, const float *__restrict__ C, const double *__restrict__ ref,
                     const float *__restrict__ bias, size_t total, int N) {
    __shared__ double sd[256], sr[256];
    __shared__ unsigned long long su[256];
    double d2 = 0.0, r2 = 0.0;
    unsigned long long un = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const float c = C[i];
        const double r = ref[i] + (bias != nullptr ? (double)bias[i % (size_t)N] : 0.0);
        if (__float_as_uint(c) == GMM_POISON) un++;
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

/* ---- one shape in one precision: inputs, reference, output ---------------- */

typedef struct {
    int M, N, K, n_sets, tf32;
    void *A[GMM_MAX_SETS], *B[GMM_MAX_SETS]; /* (M,K), (N,K): bf16 or tf32-valued fp32, per input set */
    float *bias;                             /* (N) */
    float *C;                                /* (M,N) shared by the cells */
    double *ref;                             /* (M,N) float64 A[0] . B[0]^T, no bias */
    gmm_sums *sums;
    cudaStream_t stream;
    cublasHandle_t cublas;
} gmm_shape;

typedef enum { GMM_CUBLAS = 0, GMM_FORGE } gmm_kind;

typedef struct {
    gmm_shape *sh;
    gmm_kind kind;
    int use_bias;
} gmm_cell;

static uint16_t gmm_float_to_bf16(float f) { /* round to nearest even; inputs are finite */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float gmm_float_to_tf32(float f) { /* round to nearest even to 10 mantissa bits; inputs are finite */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0xFFFu + ((u >> 13) & 1u);
    u &= ~0x1FFFu;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* n values uniform in [-1, 1) from hash(seed, stream, index), rounded to
 * bf16 (h16) or tf32 (h32) */
static void gmm_fill(uint16_t *h16, float *h32, size_t n, uint64_t seed, uint64_t stream) {
    const uint64_t key = forge_hash64(seed ^ forge_hash64(stream + 0x9E3779B97F4A7C15ull));
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < (long long)n; i++) {
        const uint64_t r = forge_hash64(key + (uint64_t)i);
        const float u = 2.0f * ((float)(r >> 40) * (1.0f / 16777216.0f)) - 1.0f; /* [-1, 1) */
        if (h16)
            h16[i] = gmm_float_to_bf16(u);
        else
            h32[i] = gmm_float_to_tf32(u);
    }
}

static void gmm_shape_free(gmm_shape *sh) {
    for (int i = 0; i < GMM_MAX_SETS; i++) {
        cudaFree(sh->A[i]);
        cudaFree(sh->B[i]);
    }
    cudaFree(sh->bias);
    cudaFree(sh->C);
    cudaFree(sh->ref);
    cudaFree(sh->sums);
    memset(sh->A, 0, sizeof sh->A);
    memset(sh->B, 0, sizeof sh->B);
    sh->bias = sh->C = NULL;
    sh->ref = NULL;
    sh->sums = NULL;
}

static forge_status gmm_shape_init(gmm_shape *sh, int M, int N, int K, int tf32, uint64_t seed) {
    sh->M = M, sh->N = N, sh->K = K, sh->tf32 = tf32;
    const size_t eb = tf32 ? 4 : 2;
    const size_t a_n = (size_t)M * K, b_n = (size_t)N * K, c_n = (size_t)M * N;
    const size_t set_bytes = (a_n + b_n) * eb;
    size_t sets = (GMM_SET_TARGET_BYTES + set_bytes - 1) / set_bytes;
    sh->n_sets = (int)(sets < 1 ? 1 : sets > GMM_MAX_SETS ? GMM_MAX_SETS : sets);
    const size_t big = a_n > b_n ? a_n : b_n;
    void *host = malloc(big * eb);
    float *hbias = (float *)malloc((size_t)N * sizeof(float));
    if (!host || !hbias) {
        free(host);
        free(hbias);
        return forge_error(FORGE_ERR_OOM, "gemm-mma bench: no host memory for a %d x %d x %d input set", M, N, K);
    }
    uint16_t *h16 = tf32 ? NULL : (uint16_t *)host;
    float *h32 = tf32 ? (float *)host : NULL;
    forge_status s = FORGE_OK;
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < sh->n_sets && e == cudaSuccess; i++) {
        e = cudaMalloc(&sh->A[i], a_n * eb);
        if (e == cudaSuccess) e = cudaMalloc(&sh->B[i], b_n * eb);
        if (e == cudaSuccess) {
            gmm_fill(h16, h32, a_n, seed, 2 * (uint64_t)i);
            e = cudaMemcpy(sh->A[i], host, a_n * eb, cudaMemcpyHostToDevice);
        }
        if (e == cudaSuccess) {
            gmm_fill(h16, h32, b_n, seed, 2 * (uint64_t)i + 1);
            e = cudaMemcpy(sh->B[i], host, b_n * eb, cudaMemcpyHostToDevice);
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
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->sums, sizeof(gmm_sums));
    free(host);
    free(hbias);
    if (e != cudaSuccess) {
        s = forge_error(e == cudaErrorMemoryAllocation ? FORGE_ERR_OOM : FORGE_ERR_DEVICE,
                        "gemm-mma bench: buffers of M=%d N=%d K=%d %s (%d input sets): %s", M, N, K,
                        tf32 ? "tf32" : "bf16", sh->n_sets, cudaGetErrorString(e));
        gmm_shape_free(sh);
        return s;
    }
    const dim3 grid((N + GMM_REF_TILE - 1) / GMM_REF_TILE, (M + GMM_REF_TILE - 1) / GMM_REF_TILE);
    if (grid.y > 65535) {
        gmm_shape_free(sh);
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm-mma bench: M=%d too large for the reference kernel grid", M);
    }
    if (tf32)
        gmm_ref64_kernel<true><<<grid, 256, 0, sh->stream>>>(sh->ref, sh->A[0], sh->B[0], M, N, K);
    else
        gmm_ref64_kernel<false><<<grid, 256, 0, sh->stream>>>(sh->ref, sh->A[0], sh->B[0], M, N, K);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaStreamSynchronize(sh->stream);
    if (e != cudaSuccess) {
        gmm_shape_free(sh);
        return forge_error(FORGE_ERR_DEVICE, "gemm-mma bench: float64 reference kernel (M=%d N=%d K=%d): %s", M, N,
                           K, cudaGetErrorString(e));
    }
    return FORGE_OK;
}

/* ---- cell callbacks -------------------------------------------------------- */

static forge_status gmm_poison(void *ctx) {
    gmm_cell *c = (gmm_cell *)ctx;
    GMM_TRY(cudaMemsetAsync(c->sh->C, 0xFF, (size_t)c->sh->M * c->sh->N * sizeof(float), c->sh->stream));
    return FORGE_OK;
}

static forge_status gmm_run(void *ctx, int set) {
    gmm_cell *c = (gmm_cell *)ctx;
    gmm_shape *sh = c->sh;
    const void *A = sh->A[set % sh->n_sets], *B = sh->B[set % sh->n_sets];
    const float *bias = c->use_bias ? sh->bias : NULL;
    if (c->kind == GMM_CUBLAS) {
        const float alpha = 1.0f, beta = 0.0f;
        const cudaDataType_t t = sh->tf32 ? CUDA_R_32F : CUDA_R_16BF;
        GMM_CUBLAS_TRY(cublasGemmEx(sh->cublas, CUBLAS_OP_T, CUBLAS_OP_N, sh->N, sh->M, sh->K, &alpha, B, t, sh->K,
                                    A, t, sh->K, &beta, sh->C, CUDA_R_32F, sh->N,
                                    sh->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
        return FORGE_OK;
    }
    if (sh->tf32)
        return forge_gemm_mma_tf32_nt((const float *)A, (const float *)B, sh->C, bias, sh->M, sh->N, sh->K,
                                      sh->stream);
    return forge_gemm_mma_bf16_nt(A, B, sh->C, bias, sh->M, sh->N, sh->K, sh->stream);
}

static forge_status gmm_check(void *ctx, double *rel_err, int *fully_written) {
    gmm_cell *c = (gmm_cell *)ctx;
    gmm_shape *sh = c->sh;
    GMM_TRY(cudaMemsetAsync(sh->sums, 0, sizeof(gmm_sums), sh->stream));
    gmm_check_kernel<<<1024, 256, 0, sh->stream>>>(sh->sums, sh->C, sh->ref, c->use_bias ? sh->bias : NULL,
                                                   (size_t)sh->M * sh->N, sh->N);
    GMM_TRY(cudaGetLastError());
    gmm_sums h;
    GMM_TRY(cudaMemcpyAsync(&h, sh->sums, sizeof h, cudaMemcpyDeviceToHost, sh->stream));
    GMM_TRY(cudaStreamSynchronize(sh->stream));
    *rel_err = h.r2 > 0 ? sqrt(h.d2 / h.r2) : sqrt(h.d2);
    *fully_written = h.unwritten == 0;
    return FORGE_OK;
}

/* ---- the suite ------------------------------------------------------------- */

typedef struct {
    int M, N, K;
    int bias; /* forge cells add the bias (cuBLAS does not: it is the plain-GEMM baseline) */
    const char *what;
} gmm_shape_spec;

static const gmm_shape_spec GMM_SHAPES[] = {
    {4096, 4096, 4096, 0, "square"},
    {8192, 8192, 8192, 0, "square"},
    {32768, 3072, 768, 0, "gpt2 mlp fc"},
    {1000, 1000, 1000, 1, "edge +bias"},
    {777, 999, 520, 1, "edge odd N +bias"},
    {1000, 999, 1001, 0, "edge K odd (scalar loads)"},
};
enum { GMM_N_SHAPES = sizeof GMM_SHAPES / sizeof GMM_SHAPES[0] };

static const char *GMM_RECIPE =
    "A (M,K), B (N,K): uniform [-1,1) from splitmix64(key(seed,2*set[+1]) + index) >> 40 / 2^24, rounded on the "
    "host to bf16 (nearest-even) for bf16 groups or to tf32 (nearest-even, low 13 mantissa bits cleared, stored as "
    "fp32) for tf32 groups; bias (N): PCG32(seed, stream 999) uniform [-1,1); reference: float64 GEMM of the same "
    "stored values on the GPU";

extern "C" forge_status forge_bench_gemm_mma_cuda(FILE *out, int reps) {
    const int dev = 0;
    const uint64_t seed = 20260506;
    GMM_TRY(cudaSetDevice(dev));
    char config[2048];
    int len = snprintf(config, sizeof config,
                       "gemm-mma nt (C = A.B^T, fp32 out) cells=cublas_bf16,forge_mma_bf16,cublas_tf32,"
                       "forge_mma_tf32; shapes=");
    for (int i = 0; i < GMM_N_SHAPES && len < (int)sizeof config; i++)
        len += snprintf(config + len, sizeof config - (size_t)len, "%dx%dx%d%s;", GMM_SHAPES[i].M, GMM_SHAPES[i].N,
                        GMM_SHAPES[i].K, GMM_SHAPES[i].bias ? "+bias" : "");

    gmm_shape sh;
    memset(&sh, 0, sizeof sh);
    GMM_TRY(cudaStreamCreateWithFlags(&sh.stream, cudaStreamNonBlocking));
    forge_bench_timer timer;
    memset(&timer, 0, sizeof timer);
    forge_harness *h = NULL;
    forge_status s = FORGE_OK;
    if (cublasCreate(&sh.cublas) != CUBLAS_STATUS_SUCCESS)
        s = forge_error(FORGE_ERR_DEVICE, "gemm-mma bench: cublasCreate failed");
    if (s == FORGE_OK && cublasSetStream(sh.cublas, sh.stream) != CUBLAS_STATUS_SUCCESS)
        s = forge_error(FORGE_ERR_DEVICE, "gemm-mma bench: cublasSetStream failed");
    int have_timer = 0;
    if (s == FORGE_OK) s = forge_cuda_bench_timer_create(&timer, sh.stream);
    if (s == FORGE_OK) have_timer = 1;
    forge_provenance prov;
    memset(&prov, 0, sizeof prov);
    if (s == FORGE_OK) s = forge_cuda_provenance(&prov, dev);
    forge_harness_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.suite = "gemm_mma";
    cfg.results_root = "results";
    cfg.config_text = config;
    cfg.input_recipe = GMM_RECIPE;
    cfg.seed = seed;
    cfg.reps = reps;
    cfg.warmup = 10;
    cfg.out = out;
    if (s == FORGE_OK) s = forge_harness_open(&h, &cfg, &prov, &timer);
    if (s == FORGE_OK)
        fprintf(out,
                "gemm_mma: C (M,N) fp32 = A (M,K) . B (N,K)^T, mma.sync kernels, fp32 accumulation; baselines cuBLAS "
                "bf16 (CUBLAS_COMPUTE_32F) and tf32 (CUBLAS_COMPUTE_32F_FAST_TF32); inputs pre-rounded to the "
                "cell precision; gate: relative Frobenius error vs a float64 GEMM of the same inputs + poison "
                "count\n");
    int bad = 0;
    for (int i = 0; i < GMM_N_SHAPES && s == FORGE_OK; i++) {
        const gmm_shape_spec *sp = &GMM_SHAPES[i];
        for (int tf32 = 0; tf32 < 2 && s == FORGE_OK; tf32++) {
            s = gmm_shape_init(&sh, sp->M, sp->N, sp->K, tf32, seed + (uint64_t)(2 * i + tf32));
            if (s != FORGE_OK) break;
            char group[160];
            snprintf(group, sizeof group, "%s M=%d N=%d K=%d (%s)", tf32 ? "tf32" : "bf16", sp->M, sp->N, sp->K,
                     sp->what);
            const double eb = tf32 ? 4.0 : 2.0;
            const double flops = 2.0 * sp->M * sp->N * (double)sp->K;
            const double bytes = eb * ((double)sp->M * sp->K + (double)sp->N * sp->K) + 4.0 * sp->M * (double)sp->N;
            gmm_cell cells[2] = {{&sh, GMM_CUBLAS, 0}, {&sh, GMM_FORGE, sp->bias}};
            const char *names[2][2] = {{"cublas_bf16", "forge_mma_bf16"}, {"cublas_tf32", "forge_mma_tf32"}};
            for (int v = 0; v < 2 && s == FORGE_OK; v++) {
                forge_harness_cell cell;
                memset(&cell, 0, sizeof cell);
                cell.name = names[tf32][v];
                cell.group = group;
                cell.is_baseline = v == 0;
                cell.precision = tf32 ? FORGE_PREC_TF32 : FORGE_PREC_BF16;
                cell.flops = flops;
                cell.bytes = bytes;
                cell.n_input_sets = sh.n_sets;
                cell.ctx = &cells[v];
                cell.poison = gmm_poison;
                cell.run = gmm_run;
                cell.check = gmm_check;
                forge_cell_result res;
                memset(&res, 0, sizeof res);
                s = forge_harness_run(h, &cell, &res);
                if (s == FORGE_OK && res.status != FORGE_CELL_OK) bad++;
            }
            gmm_shape_free(&sh);
        }
    }
    if (s == FORGE_OK) s = forge_cuda_provenance_end(forge_harness_provenance(h), dev);
    if (s == FORGE_OK) {
        s = forge_harness_close(h);
        h = NULL;
    }
    forge_harness_free(h);
    gmm_shape_free(&sh);
    if (have_timer) forge_cuda_bench_timer_destroy(&timer);
    if (sh.cublas) cublasDestroy(sh.cublas);
    cudaStreamDestroy(sh.stream);
    if (s == FORGE_OK && bad > 0)
        s = forge_error(FORGE_ERR_NUMERIC, "gemm-mma bench: %d cell(s) failed or were garbage (see the table)", bad);
    return s;
}
