/*
 * char_gemm.cu: library-GEMM cells of `forge-lab bench characterize` (cuBLAS and
 * cuBLASLt at fp32, tf32, bf16, fp16 and fp8 e4m3), their float64 reference
 * and their check, all on the GPU (declared in char_gemm.h).
 *
 * The decisions a reader would otherwise get wrong:
 * - Inputs are drawn on the host (PCG32, fixed seed), ROUNDED on the host to
 *   the cell's input format with the converters below (round to nearest even;
 *   fp8 saturates to +-448, never reached here), and uploaded. The float64
 *   reference is computed on the GPU from the SAME rounded values, widened
 *   exactly (every bf16/fp16/e4m3/tf32 value is a double), so input
 *   quantisation cancels and the check sees only the kernel's own error. The
 *   tf32 cell therefore gets inputs pre-rounded to tf32: whether cuBLAS rounds
 *   or truncates fp32 data it is handed is a separate question, answered by
 *   forge_char_gemm_probe_tf32, not folded into the tf32 cell's error.
 * - Values are uniform on [-1, -2^-8] u [2^-8, 1) (rejection): never zero in
 *   any format, and |x| >= 2^-8 keeps e4m3 from flushing anything to zero.
 * - One layout for every cell, "TN" (see char_gemm.h): row-major A (M, K),
 *   Bt (N, K), C (M, N) fp32. For cuBLAS (column-major) that is
 *   C^T = op(Bt)^T-view: cublasGemmEx(OP_T, OP_N, m=N, n=M, k=K, Bt, lda=K,
 *   A, ldb=K, C, ldc=N). cuBLASLt's fp8 path on Hopper needs exactly this:
 *   A transposed, B not (its "A" is our Bt, its "B" is our A).
 * - The check never moves a matrix over PCIe: a kernel sums ||out - ref||^2,
 *   ||ref||^2 and the count of elements still holding the poison bit pattern
 *   (0xFFFFFFFF, a NaN no GEMM produces) into per-block partials, a second
 *   one-block kernel adds them in a fixed order (the same rel_err every run),
 *   and 3 doubles come back.
 * - Only input set 0 is checked, so the reference is computed once per (size,
 *   input format); the other sets exist only for L2 rotation.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#ifndef FORGE_NO_CUBLAS
#include <cublasLt.h>
#include <cublas_v2.h>
#endif

#include "../../src/backend/cuda/cuda_check.h" /* CUDA_TRY, CUDA_LAUNCH_CHECK */

extern "C" {
#include "../../src/base/rng.h"
#include "char_gemm.h"
}

#define CG_BLAS(call)                                                                        \
    do {                                                                                     \
        cublasStatus_t cg_b_ = (call);                                                       \
        if (cg_b_ != CUBLAS_STATUS_SUCCESS)                                                  \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: %s", #call, __FILE__, \
                               __LINE__, cublasGetStatusString(cg_b_));                      \
    } while (0)

#define CG_MAX_SETS 16
#define CG_WORKSPACE_BYTES ((size_t)64 << 20)
#define CG_POISON_BITS 0xFFFFFFFFu
#define CG_CHECK_BLOCKS 1024
#define CG_CHECK_THREADS 256

/* Input formats: the cells that consume the same rounded values share one. */
typedef enum { CG_FAM_FP32 = 0, CG_FAM_TF32, CG_FAM_BF16, CG_FAM_FP16, CG_FAM_FP8, CG_FAM_COUNT } cg_family;

#ifndef FORGE_NO_CUBLAS /* used by the cuBLAS part only */
static const size_t cg_family_bytes[CG_FAM_COUNT] = {4, 4, 2, 2, 1};
#endif

static const char *const cg_kind_names[FORGE_CHAR_GEMM_KIND_COUNT] = {
    "cublas_fp32", "cublas_tf32", "cublas_bf16", "cublas_fp16", "cublaslt_fp8", "cublaslt_fp8_fastacc"};
static const forge_precision cg_kind_prec[FORGE_CHAR_GEMM_KIND_COUNT] = {
    FORGE_PREC_FP32, FORGE_PREC_TF32, FORGE_PREC_BF16, FORGE_PREC_FP16, FORGE_PREC_FP8, FORGE_PREC_FP8};
#ifndef FORGE_NO_CUBLAS
static const cg_family cg_kind_family[FORGE_CHAR_GEMM_KIND_COUNT] = {
    CG_FAM_FP32, CG_FAM_TF32, CG_FAM_BF16, CG_FAM_FP16, CG_FAM_FP8, CG_FAM_FP8};
#endif

extern "C" const char *forge_char_gemm_kind_name(forge_char_gemm_kind kind) {
    return (kind >= 0 && kind < FORGE_CHAR_GEMM_KIND_COUNT) ? cg_kind_names[kind] : "unknown";
}

extern "C" forge_precision forge_char_gemm_kind_precision(forge_char_gemm_kind kind) {
    return (kind >= 0 && kind < FORGE_CHAR_GEMM_KIND_COUNT) ? cg_kind_prec[kind] : FORGE_PREC_FP32;
}

extern "C" const char *forge_char_gemm_recipe(void) {
    return "PCG32 (src/util/rng.c) seeded (seed, stream = forge_hash64(n * 65536 + set * 2 + m)), m = 0 for A "
           "(M, K) row-major, 1 for Bt (N, K) row-major, filled in storage order; x = 2 * forge_rng_uniform - 1 "
           "(24 random bits), redrawn while |x| < 2^-8; then rounded to nearest even on the host to the cell's "
           "input format (fp32: as drawn; tf32: 10 fraction bits kept in fp32 storage; bf16; fp16; fp8 e4m3 "
           "saturating); float64 reference on the GPU from the same rounded values widened exactly, set 0 only";
}

#ifdef FORGE_NO_CUBLAS
/* A build without cuBLAS (make cuda CUBLAS=0): every cell here is a cuBLAS /
 * cuBLASLt cell, so the library-GEMM part does not exist; `forge-lab bench
 * characterize` refuses before it gets here (characterize.c). */
struct forge_char_gemm {
    int unused;
};
#define CG_NO_CUBLAS_MSG "characterize: the library-GEMM cells are cuBLAS/cuBLASLt: built without cuBLAS (make cuda CUBLAS=0)"
extern "C" void forge_char_gemm_free(forge_char_gemm *g) { (void)g; }
extern "C" forge_status forge_char_gemm_create(forge_char_gemm **out, int device, void *cuda_stream, uint64_t seed) {
    (void)device, (void)cuda_stream, (void)seed;
    if (out) *out = NULL;
    return forge_error(FORGE_ERR_UNSUPPORTED, "%s", CG_NO_CUBLAS_MSG);
}
extern "C" forge_status forge_char_gemm_prepare(forge_char_gemm *g, forge_char_gemm_kind kind, int n,
                                                forge_harness_cell *cell) {
    (void)g, (void)kind, (void)n, (void)cell;
    return forge_error(FORGE_ERR_UNSUPPORTED, "%s", CG_NO_CUBLAS_MSG);
}
extern "C" forge_status forge_char_gemm_probe_tf32(forge_char_gemm *g, int n, double rel_err[3]) {
    (void)g, (void)n, (void)rel_err;
    return forge_error(FORGE_ERR_UNSUPPORTED, "%s", CG_NO_CUBLAS_MSG);
}
#else /* the rest of the file: with cuBLAS */

/* ---- format converters: fp32 -> format (host, round to nearest even) and
 * format -> fp32 (host and device, exact) ------------------------------------ */

static __host__ __device__ inline uint32_t cg_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static __host__ __device__ inline float cg_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* tf32: fp32 with the low 13 fraction bits zero (1 + 8 + 10 bits) */
static inline float cg_round_tf32(float x) {
    uint32_t u = cg_bits(x);
    if ((u & 0x7F800000u) == 0x7F800000u) return x; /* inf/nan unchanged */
    u += 0x0FFFu + ((u >> 13) & 1u);
    return cg_float(u & ~0x1FFFu);
}

static inline uint16_t cg_round_bf16(float x) {
    uint32_t u = cg_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet nan */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static __host__ __device__ inline float cg_bf16_to_f32(uint16_t h) { return cg_float((uint32_t)h << 16); }

static inline uint16_t cg_round_fp16(float x) {
    uint32_t u = cg_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u); /* nan */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {                                  /* below 2^-14: subnormal, unit 2^-24 */
        float m = rintf(cg_float(a) * 16777216.0f);          /* exact scaling, RNE (default mode) */
        return (uint16_t)(sign | (uint32_t)m);                /* m == 1024 encodes 2^-14 correctly */
    }
    uint32_t r = a - 0x38000000u; /* rebias 127 -> 15 */
    r += 0x0FFFu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

static __host__ __device__ inline float cg_fp16_to_f32(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16, e = ((uint32_t)h >> 10) & 0x1Fu, m = (uint32_t)h & 0x3FFu;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
        return cg_float(cg_bits(v) | sign);
    }
    if (e == 31) return cg_float(sign | 0x7F800000u | (m << 13));
    return cg_float(sign | ((e + 112u) << 23) | (m << 13));
}

/* e4m3 (OCP "fn"): bias 7, no inf, nan = S.1111.111, max 448, min normal
 * 2^-6, subnormal unit 2^-9. Saturating: |x| >= 448 gives +-448. */
static inline uint8_t cg_round_e4m3(float x) {
    uint32_t u = cg_bits(x);
    uint32_t sign = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint8_t)(sign | 0x7Fu);
    if (a >= 0x43E00000u) return (uint8_t)(sign | 0x7Eu); /* >= 448 saturates */
    if (a < 0x3C800000u) {                                 /* below 2^-6: subnormal, unit 2^-9 */
        float m = rintf(cg_float(a) * 512.0f);
        return (uint8_t)(sign | (uint32_t)m); /* m == 8 encodes 2^-6 correctly */
    }
    uint32_t r = a - 0x3C000000u; /* rebias 127 -> 7 */
    r += 0x7FFFFu + ((r >> 20) & 1u);
    r >>= 20;
    if (r > 0x7Eu) r = 0x7Eu; /* 448 < x < 464 ties/rounds to 448; 0x7F would be nan */
    return (uint8_t)(sign | r);
}

static __host__ __device__ inline float cg_e4m3_to_f32(uint8_t v) {
    uint32_t sign = ((uint32_t)v & 0x80u) << 24, e = ((uint32_t)v >> 3) & 0xFu, m = (uint32_t)v & 7u;
    if (e == 15 && m == 7) return cg_float(sign | 0x7FC00000u);
    if (e == 0) {
        float f = (float)m * 0.001953125f; /* m * 2^-9, exact */
        return cg_float(cg_bits(f) | sign);
    }
    return cg_float(sign | ((e + 120u) << 23) | (m << 20));
}

/* ---- kernels ------------------------------------------------------------------ */

/* Widens n rounded inputs of one family to double, exactly. For the fp32
 * family, tf32_mode 1 rounds to tf32 nearest-even and 2 truncates to tf32 on
 * the way (the tf32 conversion probe); 0 keeps the value. */
template <int FAM>
__global__ void __launch_bounds__(256) cg_widen_kernel(double *out, const void *in, size_t count, int tf32_mode) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float v;
        if (FAM == CG_FAM_FP32 || FAM == CG_FAM_TF32) {
            uint32_t u = ((const uint32_t *)in)[i];
            if (tf32_mode == 1) u = (u + 0x0FFFu + ((u >> 13) & 1u)) & ~0x1FFFu;
            else if (tf32_mode == 2) u &= ~0x1FFFu;
            v = cg_float(u);
        } else if (FAM == CG_FAM_BF16) {
            v = cg_bf16_to_f32(((const uint16_t *)in)[i]);
        } else if (FAM == CG_FAM_FP16) {
            v = cg_fp16_to_f32(((const uint16_t *)in)[i]);
        } else {
            v = cg_e4m3_to_f32(((const uint8_t *)in)[i]);
        }
        out[i] = (double)v;
    }
}

/* The float64 reference: C[i][j] = sum_k A[i][k] * Bt[j][k] (A (M, K), Bt
 * (N, K), C (M, N), all row-major double), accumulated in double in k order.
 * 64x64 output tile per block of 256 threads, 4x4 per thread, k-steps of 16
 * through shared memory stored k-major so the inner loop reads 16-byte
 * vectors. Needs M, N multiples of 64 and K of 16 (the launcher checks). */
#define RG_BM 64
#define RG_BN 64
#define RG_BK 16
__global__ void __launch_bounds__(256) cg_ref_gemm_kernel(double *C, const double *A, const double *Bt, int M, int N,
                                                          int K) {
    __shared__ __align__(16) double As[RG_BK][RG_BM];
    __shared__ __align__(16) double Bs[RG_BK][RG_BN];
    const int t = threadIdx.x, tx = t & 15, ty = t >> 4;
    const int i0 = blockIdx.y * RG_BM, j0 = blockIdx.x * RG_BN;
    const int lr = t >> 2, lk = (t & 3) * 4; /* this thread loads row lr, k lk..lk+3 of each tile */
    const double *Ap = A + (size_t)(i0 + lr) * K + lk;
    const double *Bp = Bt + (size_t)(j0 + lr) * K + lk;
    double acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[r][c] = 0.0;
    (void)M;
    for (int k0 = 0; k0 < K; k0 += RG_BK) {
        const double2 a01 = *(const double2 *)(Ap + k0), a23 = *(const double2 *)(Ap + k0 + 2);
        const double2 b01 = *(const double2 *)(Bp + k0), b23 = *(const double2 *)(Bp + k0 + 2);
        As[lk + 0][lr] = a01.x;
        As[lk + 1][lr] = a01.y;
        As[lk + 2][lr] = a23.x;
        As[lk + 3][lr] = a23.y;
        Bs[lk + 0][lr] = b01.x;
        Bs[lk + 1][lr] = b01.y;
        Bs[lk + 2][lr] = b23.x;
        Bs[lk + 3][lr] = b23.y;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < RG_BK; kk++) {
            const double2 x0 = *(const double2 *)&As[kk][ty * 4], x1 = *(const double2 *)&As[kk][ty * 4 + 2];
            const double2 y0 = *(const double2 *)&Bs[kk][tx * 4], y1 = *(const double2 *)&Bs[kk][tx * 4 + 2];
            const double a[4] = {x0.x, x0.y, x1.x, x1.y}, b[4] = {y0.x, y0.y, y1.x, y1.y};
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) acc[r][c] = fma(a[r], b[c], acc[r][c]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        double *Cp = C + (size_t)(i0 + ty * 4 + r) * N + j0 + tx * 4;
        *(double2 *)Cp = make_double2(acc[r][0], acc[r][1]);
        *(double2 *)(Cp + 2) = make_double2(acc[r][2], acc[r][3]);
    }
}

/* Sums three per-thread values over a block of CG_CHECK_THREADS threads in a
 * fixed order; the result is valid in thread 0. */
static __device__ inline void cg_block_sum3(double v[3]) {
    __shared__ double part[CG_CHECK_THREADS / 32][3];
#pragma unroll
    for (int q = 0; q < 3; q++)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v[q] += __shfl_down_sync(0xFFFFFFFFu, v[q], o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        part[warp][0] = v[0];
        part[warp][1] = v[1];
        part[warp][2] = v[2];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double s0 = 0, s1 = 0, s2 = 0;
        for (int w = 0; w < CG_CHECK_THREADS / 32; w++) {
            s0 += part[w][0];
            s1 += part[w][1];
            s2 += part[w][2];
        }
        v[0] = s0;
        v[1] = s1;
        v[2] = s2;
    }
}

/* partials[3 * block + {0, 1, 2}] = this block's sum of (out - ref)^2, ref^2
 * and of elements still holding the poison pattern. */
__global__ void __launch_bounds__(CG_CHECK_THREADS) cg_compare_kernel(double *partials, const float *out,
                                                                      const double *ref, size_t count) {
    double v[3] = {0.0, 0.0, 0.0};
    for (size_t i = (size_t)blockIdx.x * CG_CHECK_THREADS + threadIdx.x; i < count;
         i += (size_t)gridDim.x * CG_CHECK_THREADS) {
        const float o = out[i];
        const double r = ref[i], d = (double)o - r;
        v[0] = fma(d, d, v[0]);
        v[1] = fma(r, r, v[1]);
        if (__float_as_uint(o) == CG_POISON_BITS) v[2] += 1.0;
    }
    cg_block_sum3(v);
    if (threadIdx.x == 0) {
        partials[3 * blockIdx.x + 0] = v[0];
        partials[3 * blockIdx.x + 1] = v[1];
        partials[3 * blockIdx.x + 2] = v[2];
    }
}

/* One block: sums[q] = sum over the nblocks partials, in a fixed order. */
__global__ void __launch_bounds__(CG_CHECK_THREADS) cg_finish_kernel(double *sums, const double *partials,
                                                                     int nblocks) {
    double v[3] = {0.0, 0.0, 0.0};
    for (int b = threadIdx.x; b < nblocks; b += CG_CHECK_THREADS) {
        v[0] += partials[3 * b + 0];
        v[1] += partials[3 * b + 1];
        v[2] += partials[3 * b + 2];
    }
    cg_block_sum3(v);
    if (threadIdx.x == 0) {
        sums[0] = v[0];
        sums[1] = v[1];
        sums[2] = v[2];
    }
}

/* ---- the context --------------------------------------------------------------- */

struct forge_char_gemm {
    int device;
    cudaStream_t stream;
    uint64_t seed;
    size_t l2_bytes;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *workspace;   /* CG_WORKSPACE_BYTES, shared by cuBLAS and cuBLASLt (one stream) */
    float *d_one;      /* the fp8 scale factors: 1.0f */
    double *d_partials; /* (CG_CHECK_BLOCKS, 3) */
    double *d_sums;     /* (3) */
    /* host base values (fp32 as drawn) of size host_n, sets 0..host_sets-1 */
    int host_n, host_sets;
    float *hA[CG_MAX_SETS], *hBt[CG_MAX_SETS]; /* (n, n) each */
    /* device inputs of one (size, family) and the reference of set 0 */
    int dev_n, dev_sets;
    cg_family dev_family;
    void *dA[CG_MAX_SETS], *dBt[CG_MAX_SETS]; /* (n, n) of the family's type */
    double *dRef;                             /* (n, n) */
    float *dC;                                /* (n, n), size c_n */
    int c_n;
    /* cuBLASLt fp8 plan for (lt_n, lt_fast) */
    int lt_ready, lt_n, lt_fast;
    cublasLtMatmulDesc_t lt_desc;
    cublasLtMatrixLayout_t lt_a, lt_b, lt_c;
    cublasLtMatmulAlgo_t lt_algo;
    /* the cell currently prepared */
    forge_char_gemm_kind kind;
    int n;
    forge_status deferred; /* a prepare failure, returned by the cell's callbacks */
    char deferred_msg[512];
};

static int cg_sets_for(const forge_char_gemm *g, int n, cg_family fam) {
    const double in_bytes = 2.0 * (double)n * n * (double)cg_family_bytes[fam];
    const double ws = in_bytes + (double)n * n * 4.0;
    if (ws > (double)g->l2_bytes) return 1;
    /* rotate through at least twice the L2 of inputs, so a set is evicted
     * before it comes round again; capped (small sizes stay L2-resident) */
    int sets = (int)ceil(2.0 * (double)g->l2_bytes / in_bytes);
    return sets < 2 ? 2 : sets > CG_MAX_SETS ? CG_MAX_SETS : sets;
}

static void cg_free_host(forge_char_gemm *g) {
    for (int s = 0; s < CG_MAX_SETS; s++) {
        free(g->hA[s]);
        free(g->hBt[s]);
        g->hA[s] = g->hBt[s] = NULL;
    }
    g->host_n = g->host_sets = 0;
}

static void cg_free_dev_inputs(forge_char_gemm *g) {
    for (int s = 0; s < CG_MAX_SETS; s++) {
        if (g->dA[s]) cudaFree(g->dA[s]);
        if (g->dBt[s]) cudaFree(g->dBt[s]);
        g->dA[s] = g->dBt[s] = NULL;
    }
    if (g->dRef) cudaFree(g->dRef);
    g->dRef = NULL;
    g->dev_n = g->dev_sets = 0;
}

static void cg_free_lt(forge_char_gemm *g) {
    if (g->lt_desc) cublasLtMatmulDescDestroy(g->lt_desc);
    if (g->lt_a) cublasLtMatrixLayoutDestroy(g->lt_a);
    if (g->lt_b) cublasLtMatrixLayoutDestroy(g->lt_b);
    if (g->lt_c) cublasLtMatrixLayoutDestroy(g->lt_c);
    g->lt_desc = NULL;
    g->lt_a = g->lt_b = g->lt_c = NULL;
    g->lt_ready = 0;
}

extern "C" void forge_char_gemm_free(forge_char_gemm *g) {
    if (!g) return;
    cg_free_lt(g);
    cg_free_dev_inputs(g);
    cg_free_host(g);
    if (g->dC) cudaFree(g->dC);
    if (g->d_partials) cudaFree(g->d_partials);
    if (g->d_sums) cudaFree(g->d_sums);
    if (g->d_one) cudaFree(g->d_one);
    if (g->workspace) cudaFree(g->workspace);
    if (g->lt) cublasLtDestroy(g->lt);
    if (g->blas) cublasDestroy(g->blas);
    free(g);
}

static forge_status cg_create(forge_char_gemm *g) {
    CUDA_TRY(cudaSetDevice(g->device));
    int l2 = 0;
    CUDA_TRY(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, g->device));
    g->l2_bytes = l2 > 0 ? (size_t)l2 : ((size_t)50 << 20);
    CG_BLAS(cublasCreate(&g->blas));
    CG_BLAS(cublasSetStream(g->blas, g->stream));
    CUDA_TRY(cudaMalloc(&g->workspace, CG_WORKSPACE_BYTES));
    CG_BLAS(cublasSetWorkspace(g->blas, g->workspace, CG_WORKSPACE_BYTES));
    CG_BLAS(cublasLtCreate(&g->lt));
    CUDA_TRY(cudaMalloc(&g->d_one, sizeof(float)));
    const float one = 1.0f;
    CUDA_TRY(cudaMemcpy(g->d_one, &one, sizeof one, cudaMemcpyHostToDevice));
    CUDA_TRY(cudaMalloc(&g->d_partials, (size_t)CG_CHECK_BLOCKS * 3 * sizeof(double)));
    CUDA_TRY(cudaMalloc(&g->d_sums, 3 * sizeof(double)));
    return FORGE_OK;
}

extern "C" forge_status forge_char_gemm_create(forge_char_gemm **out, int device, void *cuda_stream, uint64_t seed) {
    if (!out) return forge_error(FORGE_ERR_ARG, "forge_char_gemm_create: out is NULL");
    *out = NULL;
    forge_char_gemm *g = (forge_char_gemm *)calloc(1, sizeof *g);
    if (!g) return forge_error(FORGE_ERR_OOM, "forge_char_gemm_create: out of host memory");
    g->device = device;
    g->stream = (cudaStream_t)cuda_stream;
    g->seed = seed;
    forge_status s = cg_create(g);
    if (s != FORGE_OK) {
        forge_char_gemm_free(g);
        return s;
    }
    *out = g;
    return FORGE_OK;
}

/* ---- inputs and reference ------------------------------------------------------ */

static void cg_fill(float *x, size_t count, uint64_t seed, uint64_t stream) {
    forge_rng rng;
    forge_rng_seed(&rng, seed, stream);
    for (size_t i = 0; i < count; i++) {
        float v;
        do {
            v = 2.0f * forge_rng_uniform(&rng) - 1.0f; /* exact: 24-bit u, |v| >= 2^-8 */
        } while (fabsf(v) < 0.00390625f);
        x[i] = v;
    }
}

/* Host base values for size n, sets 0..sets-1 (generated once per size). */
static forge_status cg_host_inputs(forge_char_gemm *g, int n, int sets) {
    if (g->host_n != n) cg_free_host(g);
    g->host_n = n;
    const size_t count = (size_t)n * n;
    for (int s = g->host_sets; s < sets; s++) {
        g->hA[s] = (float *)malloc(count * sizeof(float));
        g->hBt[s] = (float *)malloc(count * sizeof(float));
        if (!g->hA[s] || !g->hBt[s])
            return forge_error(FORGE_ERR_OOM, "char_gemm: out of host memory for input set %d at n=%d (%zu bytes)",
                               s, n, 2 * count * sizeof(float));
        cg_fill(g->hA[s], count, g->seed, forge_hash64((uint64_t)n * 65536u + (uint64_t)s * 2u + 0u));
        cg_fill(g->hBt[s], count, g->seed, forge_hash64((uint64_t)n * 65536u + (uint64_t)s * 2u + 1u));
        g->host_sets = s + 1;
    }
    return FORGE_OK;
}

/* Rounds count base values into dst, in the family's storage type. */
static void cg_round(void *dst, const float *src, size_t count, cg_family fam) {
    switch (fam) {
    case CG_FAM_FP32: memcpy(dst, src, count * sizeof(float)); break;
    case CG_FAM_TF32:
        for (size_t i = 0; i < count; i++) ((float *)dst)[i] = cg_round_tf32(src[i]);
        break;
    case CG_FAM_BF16:
        for (size_t i = 0; i < count; i++) ((uint16_t *)dst)[i] = cg_round_bf16(src[i]);
        break;
    case CG_FAM_FP16:
        for (size_t i = 0; i < count; i++) ((uint16_t *)dst)[i] = cg_round_fp16(src[i]);
        break;
    default:
        for (size_t i = 0; i < count; i++) ((uint8_t *)dst)[i] = cg_round_e4m3(src[i]);
        break;
    }
}

static forge_status cg_widen(double *out, const void *in, size_t count, cg_family fam, int tf32_mode,
                             cudaStream_t stream) {
    const int threads = 256, blocks = 4096;
    switch (fam) {
    case CG_FAM_FP32: cg_widen_kernel<CG_FAM_FP32><<<blocks, threads, 0, stream>>>(out, in, count, tf32_mode); break;
    case CG_FAM_TF32: cg_widen_kernel<CG_FAM_TF32><<<blocks, threads, 0, stream>>>(out, in, count, tf32_mode); break;
    case CG_FAM_BF16: cg_widen_kernel<CG_FAM_BF16><<<blocks, threads, 0, stream>>>(out, in, count, tf32_mode); break;
    case CG_FAM_FP16: cg_widen_kernel<CG_FAM_FP16><<<blocks, threads, 0, stream>>>(out, in, count, tf32_mode); break;
    default: cg_widen_kernel<CG_FAM_FP8><<<blocks, threads, 0, stream>>>(out, in, count, tf32_mode); break;
    }
    CUDA_LAUNCH_CHECK("cg_widen_kernel");
    return FORGE_OK;
}

static forge_status cg_ref_gemm(double *C, const double *A, const double *Bt, int M, int N, int K,
                                cudaStream_t stream) {
    if (M % RG_BM || N % RG_BN || K % RG_BK)
        return forge_error(FORGE_ERR_UNSUPPORTED, "cg_ref_gemm: M=%d, N=%d must be multiples of %d and K=%d of %d",
                           M, N, RG_BM, K, RG_BK);
    dim3 grid(N / RG_BN, M / RG_BM);
    cg_ref_gemm_kernel<<<grid, 256, 0, stream>>>(C, A, Bt, M, N, K);
    CUDA_LAUNCH_CHECK("cg_ref_gemm_kernel");
    return FORGE_OK;
}

/* ref (n, n) = the float64 product of set 0's inputs (device, family fam),
 * widened with tf32_mode (0 exact). Scratch: two (n, n) double buffers. */
static forge_status cg_reference(forge_char_gemm *g, double *ref, const void *dA, const void *dBt, int n,
                                 cg_family fam, int tf32_mode) {
    const size_t count = (size_t)n * n;
    double *a64 = NULL, *b64 = NULL;
    forge_status s = FORGE_OK;
    cudaError_t e = cudaMalloc(&a64, count * sizeof(double));
    if (e == cudaSuccess) e = cudaMalloc(&b64, count * sizeof(double));
    if (e != cudaSuccess)
        s = forge_error(FORGE_ERR_OOM, "char_gemm: cudaMalloc of the float64 reference inputs (2 x %zu bytes) at "
                        "n=%d failed: %s", count * sizeof(double), n, cudaGetErrorString(e));
    if (s == FORGE_OK) s = cg_widen(a64, dA, count, fam, tf32_mode, g->stream);
    if (s == FORGE_OK) s = cg_widen(b64, dBt, count, fam, tf32_mode, g->stream);
    if (s == FORGE_OK) s = cg_ref_gemm(ref, a64, b64, n, n, n, g->stream);
    if (s == FORGE_OK) {
        e = cudaStreamSynchronize(g->stream);
        if (e != cudaSuccess)
            s = forge_error(FORGE_ERR_DEVICE, "char_gemm: float64 reference at n=%d failed: %s", n,
                            cudaGetErrorString(e));
    }
    if (a64) cudaFree(a64);
    if (b64) cudaFree(b64);
    return s;
}

/* Device inputs (all sets) and the reference of set 0 for (n, fam). */
static forge_status cg_dev_inputs_try(forge_char_gemm *g, int n, cg_family fam) {
    const int sets = cg_sets_for(g, n, fam);
    const size_t count = (size_t)n * n, bytes = count * cg_family_bytes[fam];
    FORGE_TRY(cg_host_inputs(g, n, sets));
    void *stage = malloc(bytes);
    if (!stage) return forge_error(FORGE_ERR_OOM, "char_gemm: out of host memory for %zu staging bytes", bytes);
    forge_status s = FORGE_OK;
    for (int i = 0; i < sets && s == FORGE_OK; i++) {
        cudaError_t e = cudaMalloc(&g->dA[i], bytes);
        if (e == cudaSuccess) e = cudaMalloc(&g->dBt[i], bytes);
        if (e != cudaSuccess) {
            s = forge_error(FORGE_ERR_OOM, "char_gemm: cudaMalloc of input set %d (2 x %zu bytes) failed: %s", i,
                            bytes, cudaGetErrorString(e));
            break;
        }
        cg_round(stage, g->hA[i], count, fam);
        e = cudaMemcpy(g->dA[i], stage, bytes, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) {
            cg_round(stage, g->hBt[i], count, fam);
            e = cudaMemcpy(g->dBt[i], stage, bytes, cudaMemcpyHostToDevice);
        }
        if (e != cudaSuccess)
            s = forge_error(FORGE_ERR_DEVICE, "char_gemm: upload of input set %d failed: %s", i,
                            cudaGetErrorString(e));
    }
    free(stage);
    FORGE_TRY(s);
    g->dev_sets = sets;
    cudaError_t e = cudaMalloc(&g->dRef, count * sizeof(double));
    if (e != cudaSuccess)
        return forge_error(FORGE_ERR_OOM, "char_gemm: cudaMalloc of the reference (%zu bytes) failed: %s",
                           count * sizeof(double), cudaGetErrorString(e));
    FORGE_TRY(cg_reference(g, g->dRef, g->dA[0], g->dBt[0], n, fam, 0));
    g->dev_n = n;
    g->dev_family = fam;
    return FORGE_OK;
}

static forge_status cg_dev_inputs(forge_char_gemm *g, int n, cg_family fam) {
    if (g->dev_n == n && g->dev_family == fam && g->dRef) return FORGE_OK;
    cg_free_dev_inputs(g);
    forge_status s = cg_dev_inputs_try(g, n, fam);
    if (s != FORGE_OK) cg_free_dev_inputs(g); /* a later prepare starts clean */
    return s;
}

static forge_status cg_output(forge_char_gemm *g, int n) {
    if (g->dC && g->c_n == n) return FORGE_OK;
    if (g->dC) cudaFree(g->dC);
    g->dC = NULL;
    g->c_n = 0;
    CUDA_TRY(cudaMalloc(&g->dC, (size_t)n * n * sizeof(float)));
    g->c_n = n;
    return FORGE_OK;
}

/* The cuBLASLt fp8 plan at n: TN (A = our Bt transposed, B = our A), e4m3
 * inputs, fp32 C/D, fp32 compute and scale type, A/B scale pointers -> 1.0f,
 * FAST_ACCUM = fast, best heuristic algorithm within the workspace. */
static forge_status cg_prepare_lt_try(forge_char_gemm *g, int n, int fast) {
    CG_BLAS(cublasLtMatmulDescCreate(&g->lt_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CG_BLAS(cublasLtMatmulDescSetAttribute(g->lt_desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CG_BLAS(cublasLtMatmulDescSetAttribute(g->lt_desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const float *one = g->d_one;
    CG_BLAS(cublasLtMatmulDescSetAttribute(g->lt_desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &one, sizeof one));
    CG_BLAS(cublasLtMatmulDescSetAttribute(g->lt_desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &one, sizeof one));
    const int8_t fast_accum = fast ? 1 : 0;
    CG_BLAS(cublasLtMatmulDescSetAttribute(g->lt_desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                           sizeof fast_accum));
    /* column-major views: Lt A = Bt stored (K, N) ld K, op T -> (N, K); Lt B =
     * A stored (K, M) ld K; D (N, M) ld N = our row-major C (M, N) */
    const uint64_t nn = (uint64_t)n;
    CG_BLAS(cublasLtMatrixLayoutCreate(&g->lt_a, CUDA_R_8F_E4M3, nn, nn, (int64_t)n));
    CG_BLAS(cublasLtMatrixLayoutCreate(&g->lt_b, CUDA_R_8F_E4M3, nn, nn, (int64_t)n));
    CG_BLAS(cublasLtMatrixLayoutCreate(&g->lt_c, CUDA_R_32F, nn, nn, (int64_t)n));
    cublasLtMatmulPreference_t pref = NULL;
    CG_BLAS(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = CG_WORKSPACE_BYTES;
    cublasStatus_t bs =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t heur;
    memset(&heur, 0, sizeof heur);
    int found = 0;
    if (bs == CUBLAS_STATUS_SUCCESS)
        bs = cublasLtMatmulAlgoGetHeuristic(g->lt, g->lt_desc, g->lt_a, g->lt_b, g->lt_c, g->lt_c, pref, 1, &heur,
                                            &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return forge_error(FORGE_ERR_DEVICE, "cublasLtMatmulAlgoGetHeuristic (fp8 e4m3 TN, fp32 out, n=%d) failed: %s",
                           n, cublasGetStatusString(bs));
    if (found < 1 || heur.state != CUBLAS_STATUS_SUCCESS)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "cublasLtMatmulAlgoGetHeuristic found no fp8 e4m3 TN algorithm with fp32 output at n=%d "
                           "within %zu workspace bytes (state %s)",
                           n, CG_WORKSPACE_BYTES, cublasGetStatusString(heur.state));
    if (heur.workspaceSize > CG_WORKSPACE_BYTES)
        return forge_error(FORGE_ERR_UNSUPPORTED, "cuBLASLt fp8 algorithm wants %zu workspace bytes (have %zu)",
                           heur.workspaceSize, CG_WORKSPACE_BYTES);
    g->lt_algo = heur.algo;
    g->lt_n = n;
    g->lt_fast = fast;
    g->lt_ready = 1;
    return FORGE_OK;
}

static forge_status cg_prepare_lt(forge_char_gemm *g, int n, int fast) {
    if (g->lt_ready && g->lt_n == n && g->lt_fast == fast) return FORGE_OK;
    cg_free_lt(g);
    forge_status s = cg_prepare_lt_try(g, n, fast);
    if (s != FORGE_OK) cg_free_lt(g);
    return s;
}

/* ---- one GEMM ------------------------------------------------------------------- */

/* C (n, n) fp32 = A . B for `kind` on device inputs dA (n, n), dBt (n, n). */
static forge_status cg_gemm(forge_char_gemm *g, forge_char_gemm_kind kind, const void *dA, const void *dBt,
                            float *dC, int n) {
    const float alpha = 1.0f, beta = 0.0f;
    cudaDataType_t t;
    cublasComputeType_t ct;
    switch (kind) {
    case FORGE_CHAR_GEMM_CUBLAS_FP32: t = CUDA_R_32F, ct = CUBLAS_COMPUTE_32F_PEDANTIC; break;
    case FORGE_CHAR_GEMM_CUBLAS_TF32: t = CUDA_R_32F, ct = CUBLAS_COMPUTE_32F_FAST_TF32; break;
    case FORGE_CHAR_GEMM_CUBLAS_BF16: t = CUDA_R_16BF, ct = CUBLAS_COMPUTE_32F; break;
    case FORGE_CHAR_GEMM_CUBLAS_FP16: t = CUDA_R_16F, ct = CUBLAS_COMPUTE_32F; break;
    case FORGE_CHAR_GEMM_CUBLASLT_FP8:
    case FORGE_CHAR_GEMM_CUBLASLT_FP8_FASTACC:
        if (!g->lt_ready || g->lt_n != n)
            return forge_error(FORGE_ERR_ARG, "char_gemm: the cuBLASLt fp8 plan is not prepared for n=%d", n);
        CG_BLAS(cublasLtMatmul(g->lt, g->lt_desc, &alpha, dBt, g->lt_a, dA, g->lt_b, &beta, dC, g->lt_c, dC, g->lt_c,
                               &g->lt_algo, g->workspace, CG_WORKSPACE_BYTES, g->stream));
        return FORGE_OK;
    default: return forge_error(FORGE_ERR_ARG, "char_gemm: unknown kind %d", (int)kind);
    }
    CG_BLAS(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &alpha, dBt, t, n, dA, t, n, &beta, dC,
                         CUDA_R_32F, n, ct, CUBLAS_GEMM_DEFAULT));
    return FORGE_OK;
}

/* rel_err = ||out - ref|| / ||ref||, *unwritten = elements still poisoned */
static forge_status cg_compare(forge_char_gemm *g, const float *out, const double *ref, size_t count, double *rel_err,
                               double *unwritten) {
    cg_compare_kernel<<<CG_CHECK_BLOCKS, CG_CHECK_THREADS, 0, g->stream>>>(g->d_partials, out, ref, count);
    CUDA_LAUNCH_CHECK("cg_compare_kernel");
    cg_finish_kernel<<<1, CG_CHECK_THREADS, 0, g->stream>>>(g->d_sums, g->d_partials, CG_CHECK_BLOCKS);
    CUDA_LAUNCH_CHECK("cg_finish_kernel");
    double sums[3] = {0, 0, 0};
    CUDA_TRY(cudaMemcpyAsync(sums, g->d_sums, sizeof sums, cudaMemcpyDeviceToHost, g->stream));
    CUDA_TRY(cudaStreamSynchronize(g->stream));
    *rel_err = sqrt(sums[0] / sums[1]); /* NaN (garbage) when out holds NaN */
    *unwritten = sums[2];
    return FORGE_OK;
}

/* ---- harness callbacks ------------------------------------------------------------ */

static forge_status cg_deferred(const forge_char_gemm *g) {
    return forge_error(g->deferred, "%s", g->deferred_msg);
}

static forge_status cg_cell_poison(void *ctx) {
    forge_char_gemm *g = (forge_char_gemm *)ctx;
    if (g->deferred != FORGE_OK) return cg_deferred(g);
    CUDA_TRY(cudaMemsetAsync(g->dC, 0xFF, (size_t)g->n * g->n * sizeof(float), g->stream));
    return FORGE_OK;
}

static forge_status cg_cell_run(void *ctx, int input_set) {
    forge_char_gemm *g = (forge_char_gemm *)ctx;
    if (g->deferred != FORGE_OK) return cg_deferred(g);
    const int s = (input_set < 0 ? -input_set : input_set) % g->dev_sets;
    return cg_gemm(g, g->kind, g->dA[s], g->dBt[s], g->dC, g->n);
}

static forge_status cg_cell_check(void *ctx, double *rel_err, int *fully_written) {
    forge_char_gemm *g = (forge_char_gemm *)ctx;
    if (g->deferred != FORGE_OK) return cg_deferred(g);
    double unwritten = 0;
    CUDA_TRY(cudaStreamSynchronize(g->stream));
    FORGE_TRY(cg_compare(g, g->dC, g->dRef, (size_t)g->n * g->n, rel_err, &unwritten));
    *fully_written = unwritten == 0.0;
    return FORGE_OK;
}

static forge_status cg_prepare_state(forge_char_gemm *g, forge_char_gemm_kind kind, int n) {
    FORGE_TRY(cg_dev_inputs(g, n, cg_kind_family[kind]));
    FORGE_TRY(cg_output(g, n));
    if (kind == FORGE_CHAR_GEMM_CUBLASLT_FP8 || kind == FORGE_CHAR_GEMM_CUBLASLT_FP8_FASTACC)
        FORGE_TRY(cg_prepare_lt(g, n, kind == FORGE_CHAR_GEMM_CUBLASLT_FP8_FASTACC));
    return FORGE_OK;
}

extern "C" forge_status forge_char_gemm_prepare(forge_char_gemm *g, forge_char_gemm_kind kind, int n,
                                                forge_harness_cell *cell) {
    if (!g || !cell) return forge_error(FORGE_ERR_ARG, "forge_char_gemm_prepare: g and cell are required");
    if (kind < 0 || kind >= FORGE_CHAR_GEMM_KIND_COUNT)
        return forge_error(FORGE_ERR_ARG, "forge_char_gemm_prepare: unknown kind %d", (int)kind);
    if (n <= 0 || n % 64 != 0)
        return forge_error(FORGE_ERR_ARG, "forge_char_gemm_prepare: n=%d must be a positive multiple of 64", n);
    g->kind = kind;
    g->n = n;
    g->deferred = cg_prepare_state(g, kind, n);
    if (g->deferred != FORGE_OK) {
        snprintf(g->deferred_msg, sizeof g->deferred_msg, "preparing %s at n=%d: %s", cg_kind_names[kind], n,
                 forge_error_message());
        forge_error_clear();
    }
    const double nn = (double)n;
    memset(cell, 0, sizeof *cell);
    cell->name = cg_kind_names[kind];
    cell->precision = cg_kind_prec[kind];
    cell->flops = 2.0 * nn * nn * nn;
    cell->bytes = nn * nn * (2.0 * (double)cg_family_bytes[cg_kind_family[kind]] + 4.0);
    cell->n_input_sets = g->deferred == FORGE_OK ? g->dev_sets : 1;
    cell->ctx = g;
    cell->poison = cg_cell_poison;
    cell->run = cg_cell_run;
    cell->check = cg_cell_check;
    cell->tolerance = 0; /* the precision's default (harness.c) */
    return FORGE_OK;
}

/* ---- the tf32 conversion probe ------------------------------------------------------ */

extern "C" forge_status forge_char_gemm_probe_tf32(forge_char_gemm *g, int n, double rel_err[3]) {
    if (!g || !rel_err || n <= 0 || n % 64 != 0)
        return forge_error(FORGE_ERR_ARG, "forge_char_gemm_probe_tf32: bad arguments (n=%d)", n);
    rel_err[0] = rel_err[1] = rel_err[2] = NAN;
    g->deferred = FORGE_OK;
    FORGE_TRY(cg_dev_inputs(g, n, CG_FAM_FP32)); /* the reference of raw fp32 set 0 (mode 0) */
    FORGE_TRY(cg_output(g, n));
    const size_t count = (size_t)n * n;
    double unwritten = 0;
    CUDA_TRY(cudaMemsetAsync(g->dC, 0xFF, count * sizeof(float), g->stream));
    FORGE_TRY(cg_gemm(g, FORGE_CHAR_GEMM_CUBLAS_TF32, g->dA[0], g->dBt[0], g->dC, n));
    FORGE_TRY(cg_compare(g, g->dC, g->dRef, count, &rel_err[0], &unwritten));
    if (unwritten != 0)
        return forge_error(FORGE_ERR_DEVICE, "tf32 probe: cuBLAS left %.0f of %zu outputs unwritten", unwritten,
                           count);
    double *ref = NULL;
    CUDA_TRY(cudaMalloc(&ref, count * sizeof(double)));
    forge_status s = FORGE_OK;
    for (int mode = 1; mode <= 2 && s == FORGE_OK; mode++) {
        s = cg_reference(g, ref, g->dA[0], g->dBt[0], n, CG_FAM_FP32, mode);
        if (s == FORGE_OK) s = cg_compare(g, g->dC, ref, count, &rel_err[mode], &unwritten);
    }
    cudaFree(ref);
    return s;
}

#endif /* FORGE_NO_CUBLAS */
