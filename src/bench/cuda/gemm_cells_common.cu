/*
 * gemm_cells_common.cu: the pieces the GEMM bench suites share (see
 * gemm_cells_common.h): host rounding and input recipe, the float64
 * reference kernel, the gate (check) kernel, cuBLAS baseline, buffers, cell
 * callbacks and the session (device, stream, cuBLAS, timer, provenance,
 * harness).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gemm_cells_common.h"

extern "C" {
#include "../harness_cuda.h"
#include "../../base/rng.h"
}
#include "check_sums.cuh"

#if GC_HAVE_CUBLAS
#define GC_CUBLAS_TRY(call)                                                                              \
    do {                                                                                                 \
        cublasStatus_t gc_cs_ = (call);                                                                  \
        if (gc_cs_ != CUBLAS_STATUS_SUCCESS)                                                             \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: cuBLAS status %d", #call, __FILE__, \
                               __LINE__, (int)gc_cs_);                                                   \
    } while (0)
#endif

#define GC_SET_TARGET_BYTES ((size_t)256 << 20)
#define GC_POISON 0xFFFFFFFFu
#define GC_REF_TILE 64
#define GC_REF_BK 16

/* ---- kernels: float64 reference and the gate ----------------------------- */

template <bool TF32> __device__ __forceinline__ double gc_load_double(const void *p, size_t i) {
    if (TF32) return (double)((const float *)p)[i];
    return (double)__uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16);
}

/* ref (M,N) = A . B in double over the effective A (M,K) and B^T (N,K), stored as a_mn / b_mn say (header);
 * elements bf16 (TF32 = false) or fp32 (TF32 = true), converted exactly. 64x64 tile, 256 threads, a 4x4 block
 * each (rows ty + 16i, columns tx + 16j), K slices of 16. */
template <bool TF32>
__global__ void __launch_bounds__(256)
    gemm_ref64_nt_kernel(double *__restrict__ ref, const void *__restrict__ A, const void *__restrict__ B, int M,
                         int N, int K, int a_mn, int b_mn) {
    __shared__ double As[GC_REF_BK][GC_REF_TILE + 1];
    __shared__ double Bs[GC_REF_BK][GC_REF_TILE + 1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * GC_REF_TILE, n0 = blockIdx.x * GC_REF_TILE;
    double acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0;
    for (int k0 = 0; k0 < K; k0 += GC_REF_BK) {
#pragma unroll
        for (int l = 0; l < GC_REF_TILE * GC_REF_BK / 256; l++) {
            const int e = tid + 256 * l;
            { /* MN-major: consecutive threads along the contiguous MN dimension */
                const int r = a_mn ? e % GC_REF_TILE : e / GC_REF_BK, kk = a_mn ? e / GC_REF_TILE : e % GC_REF_BK;
                const int k = k0 + kk, m = m0 + r;
                As[kk][r] = (m < M && k < K)
                                ? gc_load_double<TF32>(A, a_mn ? (size_t)k * M + m : (size_t)m * K + k)
                                : 0.0;
            }
            {
                const int r = b_mn ? e % GC_REF_TILE : e / GC_REF_BK, kk = b_mn ? e / GC_REF_TILE : e % GC_REF_BK;
                const int k = k0 + kk, n = n0 + r;
                Bs[kk][r] = (n < N && k < K)
                                ? gc_load_double<TF32>(B, b_mn ? (size_t)k * N + n : (size_t)n * K + k)
                                : 0.0;
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GC_REF_BK; kk++) {
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

struct gc_sums {
    double d2, r2;
    unsigned long long unwritten;
};

/* sums[0] += (sum (c - (ref + bias))^2, sum (ref + bias)^2, #poisoned) */
__global__ void __launch_bounds__(256)
    gemm_check_kernel(gc_sums *sums, const float *__restrict__ C, const double *__restrict__ ref,
                      const float *__restrict__ bias, size_t total, int N) {
    double d2 = 0.0, r2 = 0.0;
    unsigned long long un = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const float c = C[i];
        const double r = ref[i] + (bias != nullptr ? (double)bias[i % (size_t)N] : 0.0);
        if (__float_as_uint(c) == GC_POISON) un++;
        const double d = (double)c - r;
        d2 += d * d;
        r2 += r * r;
    }
    bench_check_commit(sums, d2, r2, un);
}

/* C[m][n] = bias[n]: the prior contents of C for an accumulate (C +=) cell, checked against ref + bias */
__global__ void __launch_bounds__(256) gemm_fill_rows_kernel(float *C, const float *__restrict__ bias, size_t total,
                                                             int N) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        C[i] = bias[i % (size_t)N];
}

/* ---- host rounding and inputs ---------------------------------------------- */

static uint16_t gc_float_to_bf16(float f) { /* round to nearest even; inputs are finite */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float gc_float_to_tf32(float f) { /* round to nearest even to 10 mantissa bits; inputs are finite */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0xFFFu + ((u >> 13) & 1u);
    u &= ~0x1FFFu;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* n values uniform in [-1, 1) from hash(seed, stream, index) (24 bits), rounded to bf16 (h16) or tf32 (h32) */
static void gc_fill(uint16_t *h16, float *h32, size_t n, uint64_t seed, uint64_t stream) {
    const uint64_t key = forge_hash64(seed ^ forge_hash64(stream + 0x9E3779B97F4A7C15ull));
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < (long long)n; i++) {
        const uint64_t r = forge_hash64(key + (uint64_t)i);
        const float u = 2.0f * ((float)(r >> 40) * (1.0f / 16777216.0f)) - 1.0f; /* [-1, 1) */
        if (h16)
            h16[i] = gc_float_to_bf16(u);
        else
            h32[i] = gc_float_to_tf32(u);
    }
}

/* ---- one shape: inputs, reference, output ---------------------------------- */

extern "C" void gc_shape_free(gc_shape *sh) {
    for (int i = 0; i < GC_MAX_SETS; i++) {
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

extern "C" forge_status gc_shape_init(gc_shape *sh, int M, int N, int K, int tf32, int a_mn, int b_mn,
                                      size_t work_bytes, uint64_t seed, const char *prec_note) {
    sh->M = M, sh->N = N, sh->K = K, sh->tf32 = tf32;
    sh->a_mn = a_mn, sh->b_mn = b_mn;
    const size_t eb = tf32 ? 4 : 2;
    const size_t a_n = (size_t)M * K, b_n = (size_t)N * K, c_n = (size_t)M * N;
    const size_t set_bytes = (a_n + b_n) * eb;
    size_t sets = (GC_SET_TARGET_BYTES + set_bytes - 1) / set_bytes;
    sh->n_sets = (int)(sets < 1 ? 1 : sets > GC_MAX_SETS ? GC_MAX_SETS : sets);
    const size_t big = a_n > b_n ? a_n : b_n;
    void *host = malloc(big * eb);
    float *hbias = (float *)malloc((size_t)N * sizeof(float));
    if (!host || !hbias) {
        free(host);
        free(hbias);
        return forge_error(FORGE_ERR_OOM, "%s: no host memory for a %d x %d x %d input set", sh->who, M, N, K);
    }
    uint16_t *h16 = tf32 ? NULL : (uint16_t *)host;
    float *h32 = tf32 ? (float *)host : NULL;
    forge_status s = FORGE_OK;
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < sh->n_sets && e == cudaSuccess; i++) {
        e = cudaMalloc(&sh->A[i], a_n * eb);
        if (e == cudaSuccess) e = cudaMalloc(&sh->B[i], b_n * eb);
        if (e == cudaSuccess) {
            gc_fill(h16, h32, a_n, seed, 2 * (uint64_t)i);
            e = cudaMemcpy(sh->A[i], host, a_n * eb, cudaMemcpyHostToDevice);
        }
        if (e == cudaSuccess) {
            gc_fill(h16, h32, b_n, seed, 2 * (uint64_t)i + 1);
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
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->sums, sizeof(gc_sums));
    if (e == cudaSuccess && work_bytes > 0) {
        sh->work_bytes = work_bytes;
        e = cudaMalloc(&sh->work, work_bytes);
    }
    free(host);
    free(hbias);
    if (e != cudaSuccess) {
        s = forge_error(e == cudaErrorMemoryAllocation ? FORGE_ERR_OOM : FORGE_ERR_DEVICE,
                        "%s: buffers of M=%d N=%d K=%d%s%s (%d input sets): %s", sh->who, M, N, K,
                        prec_note ? " " : "", prec_note ? prec_note : "", sh->n_sets, cudaGetErrorString(e));
        gc_shape_free(sh);
        return s;
    }
    const dim3 grid((N + GC_REF_TILE - 1) / GC_REF_TILE, (M + GC_REF_TILE - 1) / GC_REF_TILE);
    if (grid.y > 65535) {
        gc_shape_free(sh);
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: M=%d too large for the reference kernel grid", sh->who, M);
    }
    if (tf32)
        gemm_ref64_nt_kernel<true><<<grid, 256, 0, sh->stream>>>(sh->ref, sh->A[0], sh->B[0], M, N, K, a_mn, b_mn);
    else
        gemm_ref64_nt_kernel<false><<<grid, 256, 0, sh->stream>>>(sh->ref, sh->A[0], sh->B[0], M, N, K, a_mn, b_mn);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaStreamSynchronize(sh->stream);
    if (e != cudaSuccess) {
        gc_shape_free(sh);
        return forge_error(FORGE_ERR_DEVICE, "%s: float64 reference kernel (M=%d N=%d K=%d): %s", sh->who, M, N, K,
                           cudaGetErrorString(e));
    }
    return FORGE_OK;
}

extern "C" int gc_cell_needs_cublas(const char *name) { return name && strncmp(name, "cublas", 6) == 0; }

extern "C" forge_status gc_cublas_gemm_ex(gc_shape *sh, int set, float beta, int c_bf16, void *C) {
#if !GC_HAVE_CUBLAS
    (void)set;
    (void)beta;
    (void)c_bf16;
    (void)C;
    return forge_error(FORGE_ERR_UNSUPPORTED, "%s: a cuBLAS cell: %s", sh->who, GC_NO_CUBLAS_REASON);
#else
    const void *A = sh->A[set % sh->n_sets], *B = sh->B[set % sh->n_sets];
    const float alpha = 1.0f;
    const cudaDataType_t t = sh->tf32 ? CUDA_R_32F : CUDA_R_16BF;
    GC_CUBLAS_TRY(cublasGemmEx(sh->cublas, sh->b_mn ? CUBLAS_OP_N : CUBLAS_OP_T, sh->a_mn ? CUBLAS_OP_T : CUBLAS_OP_N,
                               sh->N, sh->M, sh->K, &alpha, B, t, sh->b_mn ? sh->N : sh->K, A, t,
                               sh->a_mn ? sh->M : sh->K, &beta, C, c_bf16 ? CUDA_R_16BF : CUDA_R_32F, sh->N,
                               sh->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return FORGE_OK;
#endif
}

extern "C" forge_status gc_cublas_gemm(gc_shape *sh, int set) { return gc_cublas_gemm_ex(sh, set, 0.0f, 0, sh->C); }

/* ---- cell callbacks -------------------------------------------------------- */

extern "C" forge_status gc_poison(void *ctx) {
    gc_cell *c = (gc_cell *)ctx;
    if (c->acc_init) { /* accumulate cell: C starts as bias rows */
        gemm_fill_rows_kernel<<<1024, 256, 0, c->sh->stream>>>(c->sh->C, c->sh->bias, (size_t)c->sh->M * c->sh->N,
                                                               c->sh->N);
        GC_TRY(cudaGetLastError());
        return FORGE_OK;
    }
    GC_TRY(cudaMemsetAsync(c->sh->C, 0xFF, (size_t)c->sh->M * c->sh->N * sizeof(float), c->sh->stream));
    return FORGE_OK;
}

extern "C" forge_status gc_check(void *ctx, double *rel_err, int *fully_written) {
    gc_cell *c = (gc_cell *)ctx;
    gc_shape *sh = c->sh;
    GC_TRY(cudaMemsetAsync(sh->sums, 0, sizeof(gc_sums), sh->stream));
    gemm_check_kernel<<<1024, 256, 0, sh->stream>>>(sh->sums, sh->C, sh->ref, c->use_bias ? sh->bias : NULL,
                                                    (size_t)sh->M * sh->N, sh->N);
    GC_TRY(cudaGetLastError());
    gc_sums h;
    GC_TRY(cudaMemcpyAsync(&h, sh->sums, sizeof h, cudaMemcpyDeviceToHost, sh->stream));
    GC_TRY(cudaStreamSynchronize(sh->stream));
    *rel_err = h.r2 > 0 ? sqrt(h.d2 / h.r2) : sqrt(h.d2);
    *fully_written = h.unwritten == 0;
    return FORGE_OK;
}

/* ---- the session ------------------------------------------------------------ */

extern "C" forge_status gc_session_open(gc_session *ss, FILE *out, const char *suite, const char *config_text,
                                        const char *input_recipe, uint64_t seed, int reps, const char *who,
                                        const char *banner) {
    memset(ss, 0, sizeof *ss);
    ss->dev = 0;
    ss->out = out;
    ss->sh.who = who;
    GC_TRY(cudaSetDevice(ss->dev));
    GC_TRY(cudaStreamCreateWithFlags(&ss->sh.stream, cudaStreamNonBlocking));
    forge_status s = FORGE_OK;
#if GC_HAVE_CUBLAS
    if (cublasCreate(&ss->sh.cublas) != CUBLAS_STATUS_SUCCESS)
        s = forge_error(FORGE_ERR_DEVICE, "%s: cublasCreate failed", who);
    if (s == FORGE_OK && cublasSetStream(ss->sh.cublas, ss->sh.stream) != CUBLAS_STATUS_SUCCESS)
        s = forge_error(FORGE_ERR_DEVICE, "%s: cublasSetStream failed", who);
#else
    ss->sh.cublas = NULL;
    if (out) fprintf(out, "%s: %s: the cuBLAS cells are skipped, forge cells have no baseline\n", who,
                     GC_NO_CUBLAS_REASON);
#endif
    if (s == FORGE_OK) s = forge_cuda_bench_timer_create(&ss->timer, ss->sh.stream);
    if (s == FORGE_OK) ss->have_timer = 1;
    if (s == FORGE_OK) s = forge_cuda_provenance(&ss->prov, ss->dev);
    forge_harness_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.suite = suite;
    cfg.results_root = NULL; /* forge_harness_set_default_root, else "results" */
    cfg.config_text = config_text;
    cfg.input_recipe = input_recipe;
    cfg.seed = seed;
    cfg.reps = reps;
    cfg.warmup = 10;
    cfg.out = out;
    cfg.order = FORGE_ORDER_INTERLEAVED;
    if (s == FORGE_OK) s = forge_harness_open(&ss->h, &cfg, &ss->prov, &ss->timer);
    if (s == FORGE_OK) fprintf(out, "%s\n", banner);
    return s;
}

extern "C" forge_status gc_session_run_cell(gc_session *ss, gc_cell *c,
                                            forge_status (*run)(void *ctx, int input_set), const char *name,
                                            const char *group, int is_baseline, forge_precision precision,
                                            double flops, double bytes) {
    if (!GC_HAVE_CUBLAS && gc_cell_needs_cublas(name)) {
        if (ss->out) fprintf(ss->out, "skip %s [%s]: %s\n", name, group, GC_NO_CUBLAS_REASON);
        return FORGE_OK;
    }
    forge_harness_cell cell;
    memset(&cell, 0, sizeof cell);
    cell.name = name;
    cell.group = group;
    cell.is_baseline = is_baseline;
    cell.precision = precision;
    cell.flops = flops;
    cell.bytes = bytes;
    cell.n_input_sets = c->sh->n_sets;
    cell.ctx = c;
    cell.poison = gc_poison;
    cell.run = run;
    cell.check = gc_check;
    forge_cell_result res;
    memset(&res, 0, sizeof res);
    const forge_status s = forge_harness_run(ss->h, &cell, &res);
    if (s == FORGE_OK && forge_cell_bad(&res)) ss->bad++;
    return s;
}

extern "C" forge_status gc_session_flush(gc_session *ss) {
    int bad = 0;
    const forge_status s = forge_harness_flush(ss->h, &bad);
    ss->bad += bad;
    return s;
}

extern "C" forge_status gc_session_close(gc_session *ss, forge_status s) {
    if (ss->sh.stream == NULL) return s; /* cudaSetDevice or the stream failed: nothing else was made */
    if (s == FORGE_OK) s = forge_cuda_provenance_end(forge_harness_provenance(ss->h), ss->dev);
    if (s == FORGE_OK) {
        s = forge_harness_close(ss->h);
        ss->h = NULL;
    }
    forge_harness_free(ss->h);
    ss->h = NULL;
    gc_shape_free(&ss->sh);
    if (ss->have_timer) forge_cuda_bench_timer_destroy(&ss->timer);
    ss->have_timer = 0;
#if GC_HAVE_CUBLAS
    if (ss->sh.cublas) cublasDestroy(ss->sh.cublas);
#endif
    ss->sh.cublas = NULL;
    cudaStreamDestroy(ss->sh.stream);
    ss->sh.stream = NULL;
    if (s == FORGE_OK && ss->bad > 0)
        s = forge_error(FORGE_ERR_NUMERIC, "%s: %d cell(s) failed or were garbage (see the table)", ss->sh.who,
                        ss->bad);
    return s;
}
