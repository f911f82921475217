/*
 * matmul.cu: the three training layouts of the linear layer, and the one
 * tiled fp32 GEMM kernel behind them (attention.cu uses it too).
 *
 *   forward          out (N,OC)     = inp (N,C) . weight (OC,C)^T + bias (OC)
 *   backward_input   dinp (N,C)    += dout (N,OC) . weight (OC,C)
 *   backward_weight  dweight (OC,C) += dout^T (OC,N) . inp (N,C);  dbias += sum_n dout
 *
 * The GEMM is plain SIMT fp32 (FFMA, no tensor cores, no TF32): a block of
 * 256 threads computes a BMxBN tile of C (128x128 or 64x64), each thread an
 * (BM/16)x(BN/16) register block, stepping through K in slices of BK = 8
 * staged in shared memory. Shared memory is double-buffered and the next
 * slice is loaded into registers while the current one is multiplied, so
 * there is one __syncthreads per slice. The thread's rows are ty*4 + 0..3
 * (+64) and its columns tx*4 + 0..3 (+64): each k step reads two float4s of
 * A and two of B from shared memory, broadcast or conflict-free. Tiles are
 * stored k-major with 4 floats of padding per row, which makes the
 * transposing stores from K-contiguous operands conflict-free too.
 * Loads are scalar with bounds checks, so any M, N, K and any alignment work
 * (C = 45 is as valid as C = 768); out-of-range elements are zero-filled.
 *
 * The tile is picked per call: 128x128 when that still gives at least one
 * tile per SM and both M and N exceed 64, else 64x64 (small GEMMs, and
 * attention's HS-wide outputs). The choice never changes a result: each
 * output element is summed over K in the same order by one thread.
 * The runtime options' matmul mode picks the path (options.h): simt64 /
 * simt128 pin the tile (the parity suite tests both); cublas sends the three
 * matmul ops to cublasSgemm in CUBLAS_PEDANTIC_MATH (true fp32, no TF32), the
 * reference path; auto picks SIMT or cuBLAS per (layout, M, N, K) from a
 * table measured once (matmul_table.cu); tf32 sends the forward to forge's
 * wgmma tf32 kernel on Hopper (gemm_wgmma_fp8.cu) and dX / dW (and the
 * forward elsewhere) to its mma.sync tf32 kernel (gemm_mma.cu; dbias stays
 * the exact fp32 column sum below).
 * Every result is deterministic: one thread owns each output element and
 * sums K in a fixed order; dbias uses the ordered two-pass column sum.
 * One exception to the tiles: a forward of one row (N = 1, the decode step of
 * `forge sample`) in the fp32 mode is a GEMV, gemv_nt_kernel: a 64-row tile
 * would leave 63 of its 64 rows idle and few blocks to stream the weights,
 * while the GEMV gives each output a warp (lanes strided over C, float4 loads
 * where aligned, the xor butterfly: also a fixed order).
 */
#include <string.h>

#include "cuda_ops.h"

extern "C" {
#include "gemm_mma.h"
extern "C" {
#include "gemm_fp8.h"
}
}

#define GEMM_BK 8
#define GEMM_THREADS 256
#define GEMM_PAD 4
#define DBIAS_ROWS 8 /* threads along the rows of a dbias block: 32 columns x 8 */

/* ---- kernels ------------------------------------------------------------ */

template <int BM, int BN, bool A_KMAJOR, bool B_KMAJOR>
__global__ void __launch_bounds__(GEMM_THREADS)
    gemm_kernel(float *__restrict__ Cm, const float *__restrict__ A, const float *__restrict__ B,
                const cuda_gemm_params p) {
    constexpr int TM = BM / 16, TN = BN / 16;       /* register block per thread */
    constexpr int A_LOADS = BM * GEMM_BK / GEMM_THREADS; /* elements per thread per slice */
    constexpr int B_LOADS = BN * GEMM_BK / GEMM_THREADS;
    static_assert(TM % 4 == 0 && TN % 4 == 0, "tiles are multiples of 64");
    static_assert(BM % GEMM_BK == 0, "A_UPPER starts K at the tile row, a multiple of BK");
    __shared__ __align__(16) float As[2][GEMM_BK][BM + GEMM_PAD];
    __shared__ __align__(16) float Bs[2][GEMM_BK][BN + GEMM_PAD];

    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    if (p.tri == GEMM_TRI_C_LOWER && n0 > m0 + BM - 1) return; /* uniform: whole tile */

    const int z = blockIdx.z, zb = z / p.zdiv, zh = z % p.zdiv;
    A += zb * p.a_sb + zh * p.a_sh;
    B += zb * p.b_sb + (zh / p.b_hdiv) * p.b_sh;
    Cm += zb * p.c_sb + zh * p.c_sh;

    int k_begin = 0, k_end = p.K;
    if (p.tri == GEMM_TRI_A_LOWER && m0 + BM < k_end) k_end = m0 + BM;
    if (p.tri == GEMM_TRI_A_UPPER) k_begin = m0 < k_end ? m0 : k_end;
    const int ktiles = (k_end - k_begin + GEMM_BK - 1) / GEMM_BK;
    const int total = ktiles * p.nseg;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;
    float ra[A_LOADS], rb[B_LOADS];

    /* global -> registers for slice t (segment t / ktiles) */
#define GEMM_LOAD_SLICE(t)                                                              \
    do {                                                                                \
        int seg_ = (t) / ktiles;                                                        \
        int k0_ = k_begin + ((t) - seg_ * ktiles) * GEMM_BK;                            \
        const float *a_ = A + seg_ * p.a_seg;                                           \
        const float *b_ = B + seg_ * p.b_seg;                                           \
        _Pragma("unroll") for (int i_ = 0; i_ < A_LOADS; i_++) {                        \
            int idx_ = tid + i_ * GEMM_THREADS;                                         \
            int mm_ = A_KMAJOR ? idx_ / GEMM_BK : idx_ % BM;                            \
            int kk_ = A_KMAJOR ? idx_ % GEMM_BK : idx_ / BM;                            \
            int gm_ = m0 + mm_, gk_ = k0_ + kk_;                                        \
            ra[i_] = (gm_ < p.M && gk_ < k_end)                                         \
                         ? a_[A_KMAJOR ? (size_t)gm_ * p.lda + gk_ : (size_t)gk_ * p.lda + gm_] \
                         : 0.0f;                                                        \
        }                                                                               \
        _Pragma("unroll") for (int i_ = 0; i_ < B_LOADS; i_++) {                        \
            int idx_ = tid + i_ * GEMM_THREADS;                                         \
            int nn_ = B_KMAJOR ? idx_ / GEMM_BK : idx_ % BN;                            \
            int kk_ = B_KMAJOR ? idx_ % GEMM_BK : idx_ / BN;                            \
            int gn_ = n0 + nn_, gk_ = k0_ + kk_;                                        \
            rb[i_] = (gn_ < p.N && gk_ < k_end)                                         \
                         ? b_[B_KMAJOR ? (size_t)gn_ * p.ldb + gk_ : (size_t)gk_ * p.ldb + gn_] \
                         : 0.0f;                                                        \
        }                                                                               \
    } while (0)

    /* registers -> shared buffer buf, k-major */
#define GEMM_STORE_SLICE(buf)                                                           \
    do {                                                                                \
        _Pragma("unroll") for (int i_ = 0; i_ < A_LOADS; i_++) {                        \
            int idx_ = tid + i_ * GEMM_THREADS;                                         \
            int mm_ = A_KMAJOR ? idx_ / GEMM_BK : idx_ % BM;                            \
            int kk_ = A_KMAJOR ? idx_ % GEMM_BK : idx_ / BM;                            \
            As[buf][kk_][mm_] = ra[i_];                                                 \
        }                                                                               \
        _Pragma("unroll") for (int i_ = 0; i_ < B_LOADS; i_++) {                        \
            int idx_ = tid + i_ * GEMM_THREADS;                                         \
            int nn_ = B_KMAJOR ? idx_ / GEMM_BK : idx_ % BN;                            \
            int kk_ = B_KMAJOR ? idx_ % GEMM_BK : idx_ / BN;                            \
            Bs[buf][kk_][nn_] = rb[i_];                                                 \
        }                                                                               \
    } while (0)

    if (total > 0) {
        GEMM_LOAD_SLICE(0);
        GEMM_STORE_SLICE(0);
    }
    __syncthreads();
    for (int t = 0; t < total; t++) {
        const int buf = t & 1;
        if (t + 1 < total) GEMM_LOAD_SLICE(t + 1); /* in flight during the FMAs below */
#pragma unroll
        for (int kk = 0; kk < GEMM_BK; kk++) {
            float a[TM], b[TN];
#pragma unroll
            for (int i4 = 0; i4 < TM / 4; i4++) {
                float4 v = *reinterpret_cast<const float4 *>(&As[buf][kk][i4 * 64 + ty * 4]);
                a[i4 * 4 + 0] = v.x;
                a[i4 * 4 + 1] = v.y;
                a[i4 * 4 + 2] = v.z;
                a[i4 * 4 + 3] = v.w;
            }
#pragma unroll
            for (int j4 = 0; j4 < TN / 4; j4++) {
                float4 v = *reinterpret_cast<const float4 *>(&Bs[buf][kk][j4 * 64 + tx * 4]);
                b[j4 * 4 + 0] = v.x;
                b[j4 * 4 + 1] = v.y;
                b[j4 * 4 + 2] = v.z;
                b[j4 * 4 + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (t + 1 < total) GEMM_STORE_SLICE(buf ^ 1);
        __syncthreads();
    }
#undef GEMM_LOAD_SLICE
#undef GEMM_STORE_SLICE

#pragma unroll
    for (int i = 0; i < TM; i++) {
        int r = m0 + (i / 4) * 64 + ty * 4 + (i % 4);
        if (r >= p.M) continue;
        float *crow = Cm + (size_t)r * p.ldc;
#pragma unroll
        for (int j = 0; j < TN; j++) {
            int c = n0 + (j / 4) * 64 + tx * 4 + (j % 4);
            if (c >= p.N) continue;
            float v = p.alpha * acc[i][j];
            if (p.bias) v += p.bias[c];
            if (p.accumulate) crow[c] += v;
            else crow[c] = v;
        }
    }
}

/* out (N,OC) = bias broadcast; the cuBLAS forward then accumulates (beta = 1) */
/* out (OC) = x (C) . w (OC, C)^T + bias (may be NULL): warp o of the grid owns out[o]; lane l sums elements
 * l, l + 32, ... (float4s with VEC4: C % 4 == 0 and x, w 16-byte aligned), then warp_sum's xor butterfly */
#define GEMV_WARPS 8
template <bool VEC4>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    gemv_nt_kernel(float *__restrict__ out, const float *__restrict__ x, const float *__restrict__ w,
                   const float *__restrict__ bias, int C, int OC) {
    const int o = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= OC) return; /* o is the warp's: whole warps leave */
    const float *row = w + (size_t)o * C;
    float acc = 0.0f;
    if (VEC4) {
        const float4 *r4 = (const float4 *)row, *x4 = (const float4 *)x;
        for (int k = lane; k < C / 4; k += 32) {
            float4 a = r4[k], b = x4[k];
            acc = fmaf(a.x, b.x, acc);
            acc = fmaf(a.y, b.y, acc);
            acc = fmaf(a.z, b.z, acc);
            acc = fmaf(a.w, b.w, acc);
        }
    } else {
        for (int k = lane; k < C; k += 32) acc = fmaf(row[k], x[k], acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) out[o] = bias ? acc + bias[o] : acc;
}

__global__ void bias_broadcast_kernel(float *__restrict__ out, const float *__restrict__ bias, int OC,
                                      size_t total) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias[i % OC];
}

/* out (N,OC) += bias broadcast, after a GEMM without a bias epilogue (the tf32 wgmma forward) */
__global__ void bias_add_kernel(float *__restrict__ out, const float *__restrict__ bias, int OC, size_t total) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] += bias[i % OC];
}

/* partial[r][oc] = sum of dout[n][oc] over the rows n of chunk r; grid
 * (ceil(OC/32), R), block (32, DBIAS_ROWS); fixed order inside the block */
__global__ void dbias_partial_kernel(float *__restrict__ partial, const float *__restrict__ dout,
                                     int N, int OC, int rows_per_chunk) {
    __shared__ float s[DBIAS_ROWS][33];
    int oc = blockIdx.x * 32 + threadIdx.x;
    int n_begin = blockIdx.y * rows_per_chunk;
    int n_end = min(N, n_begin + rows_per_chunk);
    float acc = 0.0f;
    if (oc < OC)
        for (int n = n_begin + threadIdx.y; n < n_end; n += DBIAS_ROWS) acc += dout[(size_t)n * OC + oc];
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && oc < OC) {
        float sum = 0.0f;
#pragma unroll
        for (int r = 0; r < DBIAS_ROWS; r++) sum += s[r][threadIdx.x];
        partial[(size_t)blockIdx.y * OC + oc] = sum;
    }
}

/* ---- the shared GEMM launcher --------------------------------------------- */

cuda_gemm_params cuda_gemm_plain(int M, int N, int K, int a_kmajor, int lda, int b_kmajor, int ldb,
                                 int ldc, int accumulate) {
    cuda_gemm_params p;
    memset(&p, 0, sizeof p);
    p.M = M;
    p.N = N;
    p.K = K;
    p.lda = lda;
    p.ldb = ldb;
    p.ldc = ldc;
    p.a_kmajor = a_kmajor;
    p.b_kmajor = b_kmajor;
    p.batch = 1;
    p.zdiv = 1;
    p.b_hdiv = 1;
    p.nseg = 1;
    p.tri = GEMM_TRI_NONE;
    p.accumulate = accumulate;
    p.alpha = 1.0f;
    p.bias = NULL;
    return p;
}

template <int BM, int BN>
static forge_status gemm_launch_tile(cuda_ctx *ctx, float *C, const float *A, const float *B,
                                     const cuda_gemm_params *p, const char *what) {
    dim3 grid((p->N + BN - 1) / BN, (p->M + BM - 1) / BM, p->batch);
    if (grid.y > 65535 || grid.z > 65535)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "cuda gemm for %s: M = %d rows or batch = %d is beyond the grid limit",
                           what, p->M, p->batch);
    if (p->a_kmajor && p->b_kmajor)
        gemm_kernel<BM, BN, true, true><<<grid, GEMM_THREADS, 0, ctx->stream>>>(C, A, B, *p);
    else if (p->a_kmajor && !p->b_kmajor)
        gemm_kernel<BM, BN, true, false><<<grid, GEMM_THREADS, 0, ctx->stream>>>(C, A, B, *p);
    else if (!p->a_kmajor && !p->b_kmajor)
        gemm_kernel<BM, BN, false, false><<<grid, GEMM_THREADS, 0, ctx->stream>>>(C, A, B, *p);
    else
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "cuda gemm for %s: A M-major with B K-major is not instantiated", what);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return forge_error(FORGE_ERR_DEVICE, "kernel gemm_kernel<%d,%d,%d,%d> (%s) failed to launch: %s",
                           BM, BN, p->a_kmajor, p->b_kmajor, what, cudaGetErrorString(e));
    return FORGE_OK;
}

forge_status cuda_gemm(cuda_ctx *ctx, float *C, const float *A, const float *B,
                       const cuda_gemm_params *p, const char *what) {
    if (p->M <= 0 || p->N <= 0 || p->batch <= 0) return FORGE_OK;
    int big;
    if (ctx->matmul == FORGE_MATMUL_FP32_TILE64) big = 0;
    else if (ctx->matmul == FORGE_MATMUL_FP32_TILE128) big = 1;
    else {
        /* 128x128 only when it still fills every SM and neither side is so
         * narrow (attention's HS = 64 outputs) that half of each tile idles */
        long long tiles128 = (long long)((p->M + 127) / 128) * ((p->N + 127) / 128) * p->batch;
        big = tiles128 >= ctx->num_sms && p->M > 64 && p->N > 64;
    }
    return big ? gemm_launch_tile<128, 128>(ctx, C, A, B, p, what)
               : gemm_launch_tile<64, 64>(ctx, C, A, B, p, what);
}

/* ---- cuBLAS reference path -------------------------------------------------
 * cuBLAS is column-major: a row-major (R, Ccols) matrix is its transpose
 * (Ccols x R, ld Ccols). So row-major Y = X W^T is column-major
 * Y^T = W X^T, and so on for the other two layouts. A build with CUBLAS=0
 * (FORGE_NO_CUBLAS) has no such path: the backend refuses the cublas matmul
 * mode at creation, so reaching it here is a bug, reported as one. */

#ifndef FORGE_NO_CUBLAS
#define CUBLAS_TRY(call, what)                                                                  \
    do {                                                                                        \
        cublasStatus_t cublas_e_ = (call);                                                      \
        if (cublas_e_ != CUBLAS_STATUS_SUCCESS)                                                 \
            return forge_error(FORGE_ERR_DEVICE, "%s (%s) failed at %s:%d: %s", #call, (what),   \
                               __FILE__, __LINE__, cublasGetStatusString(cublas_e_));           \
    } while (0)
#endif

static forge_status cublas_layout(cuda_ctx *ctx, cuda_mm_layout layout, float *C, const float *A, const float *B,
                                  int M, int N, int K, float beta) {
#ifdef FORGE_NO_CUBLAS
    (void)ctx, (void)layout, (void)C, (void)A, (void)B, (void)M, (void)N, (void)K, (void)beta;
    return forge_error(FORGE_ERR_UNSUPPORTED, "cuda matmul: the cuBLAS path was asked for in a build without cuBLAS "
                                              "(CUBLAS=0); expected the backend to refuse it at creation");
#else
    const float alpha = 1.0f;
    switch (layout) {
    case CUDA_MM_NT: /* out (M,N) = inp (M,K) . W (N,K)^T */
        CUBLAS_TRY(cublasSgemm(ctx->cublas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, B, K, A, K, &beta, C, N),
                   "matmul_forward");
        break;
    case CUDA_MM_NN: /* dinp (M,N) += dout (M,K) . W (K,N) */
        CUBLAS_TRY(cublasSgemm(ctx->cublas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, N, A, K, &beta, C, N),
                   "matmul_backward_input");
        break;
    case CUDA_MM_TN: /* dW (M,N) += dout (K,M)^T . inp (K,N) */
        CUBLAS_TRY(cublasSgemm(ctx->cublas, CUBLAS_OP_N, CUBLAS_OP_T, N, M, K, &alpha, B, N, A, M, &beta, C, N),
                   "matmul_backward_weight");
        break;
    }
    return FORGE_OK;
#endif
}

/* The SIMT kernel in the three layouts; see the top of the file for the operand layouts. */
static forge_status simt_layout(cuda_ctx *ctx, cuda_mm_layout layout, float *C, const float *A, const float *B,
                                const float *bias, int M, int N, int K) {
    cuda_gemm_params p;
    switch (layout) {
    case CUDA_MM_NT: /* A = inp (M,K) K-major, B = weight (N,K) K-major */
        p = cuda_gemm_plain(M, N, K, 1, K, 1, K, N, 0);
        p.bias = bias;
        return cuda_gemm(ctx, C, A, B, &p, "matmul_forward");
    case CUDA_MM_NN: /* A = dout (M,K) K-major, B[k=oc][n=c] = weight[oc*C + c] N-major */
        p = cuda_gemm_plain(M, N, K, 1, K, 0, N, N, 1);
        return cuda_gemm(ctx, C, A, B, &p, "matmul_backward_input");
    case CUDA_MM_TN: /* A[m=oc][k=n] = dout[n*OC + oc] M-major, B[k=n][c] = inp[n*C + c] N-major */
        p = cuda_gemm_plain(M, N, K, 0, M, 0, N, N, 1);
        return cuda_gemm(ctx, C, A, B, &p, "matmul_backward_weight");
    }
    return forge_error(FORGE_ERR_ARG, "cuda matmul: layout %d, expected NT, NN or TN", (int)layout);
}

/* forge's tf32 mma.sync kernel: NT (A, B K-major), NN (B = weight stored (K,N)), TN (both stored (K, .)).
 * Small outputs with a long K (dW: OC x C with K = B*T) are split over K into ctx->ws (free here: ops are
 * serialised on the stream, and dbias uses ws only after this GEMM). */
static forge_status tf32_layout(cuda_ctx *ctx, cuda_mm_layout layout, float *C, const float *A, const float *B,
                                const float *bias, int M, int N, int K) {
    /* The forward on Hopper: the wgmma tf32 kernel (gemm_wgmma_fp8.cu; measured against cuBLAS tf32 and the
     * mma.sync kernel in docs/results.md), then the bias in a second pass. tf32 wgmma
     * takes K-major operands only, so dX and dW (an MN-major operand each) stay on mma.sync. Refused (not
     * Hopper, K % 4, alignment): the mma.sync kernel below. */
    if (layout == CUDA_MM_NT && K > 0) {
        const forge_status s = forge_gemm_tf32_nt(A, B, C, M, N, K, (void *)ctx->stream);
        if (s == FORGE_OK) {
            if (bias) {
                const size_t total = (size_t)M * N;
                bias_add_kernel<<<cuda_grid_for(ctx, total, 256), 256, 0, ctx->stream>>>(C, bias, N, total);
                CUDA_LAUNCH_CHECK("bias_add_kernel");
            }
            return FORGE_OK;
        }
        if (s != FORGE_ERR_UNSUPPORTED) return s;
        forge_error_clear();
    }
    const int a_mn = layout == CUDA_MM_TN, b_mn = layout != CUDA_MM_NT, acc = layout != CUDA_MM_NT;
    const int splits = forge_gemm_mma_tf32_splits(M, N, K, ctx->num_sms, CUDA_WS_FLOATS);
    return forge_gemm_mma_tf32(A, a_mn, B, b_mn, C, bias, M, N, K, acc, splits, ctx->ws, CUDA_WS_FLOATS,
                               (void *)ctx->stream);
}

forge_status cuda_matmul_run_layout(cuda_ctx *ctx, cuda_mm_layout layout, int use_cublas, float *C, const float *A,
                                    const float *B, int M, int N, int K) {
    if (use_cublas) return cublas_layout(ctx, layout, C, A, B, M, N, K, layout == CUDA_MM_NT ? 0.0f : 1.0f);
    return simt_layout(ctx, layout, C, A, B, NULL, M, N, K);
}

/* One layout through the path of the runtime options' matmul mode (auto: through the per-shape table). */
static forge_status matmul_dispatch(cuda_ctx *ctx, cuda_mm_layout layout, float *C, const float *A, const float *B,
                                    const float *bias, int M, int N, int K) {
    if (ctx->matmul == FORGE_MATMUL_TF32) return tf32_layout(ctx, layout, C, A, B, bias, M, N, K);
    int use_cublas = ctx->matmul == FORGE_MATMUL_CUBLAS;
    if (ctx->matmul == FORGE_MATMUL_AUTO && K > 0) FORGE_TRY(cuda_mm_choose(ctx, layout, M, N, K, &use_cublas));
    if (!use_cublas) return simt_layout(ctx, layout, C, A, B, bias, M, N, K);
    float beta = layout == CUDA_MM_NT ? 0.0f : 1.0f;
    if (layout == CUDA_MM_NT && bias) {
        size_t total = (size_t)M * N;
        bias_broadcast_kernel<<<cuda_grid_for(ctx, total, 256), 256, 0, ctx->stream>>>(C, bias, N, total);
        CUDA_LAUNCH_CHECK("bias_broadcast_kernel");
        beta = 1.0f;
    }
    if (K <= 0) {
        if (layout == CUDA_MM_NT && !bias) CUDA_TRY(cudaMemsetAsync(C, 0, (size_t)M * N * sizeof(float), ctx->stream));
        return FORGE_OK;
    }
    return cublas_layout(ctx, layout, C, A, B, M, N, K, beta);
}

/* ---- launchers -------------------------------------------------------------- */

forge_status cuda_matmul_forward(forge_backend *be, float *out, const float *inp, const float *weight,
                                 const float *bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    if (N == 1 && C > 0 && ctx->matmul == FORGE_MATMUL_FP32) {
        const unsigned grid = (unsigned)((OC + GEMV_WARPS - 1) / GEMV_WARPS);
        if (C % 4 == 0 && (((uintptr_t)inp | (uintptr_t)weight) & 15) == 0)
            gemv_nt_kernel<true><<<grid, GEMV_WARPS * 32, 0, ctx->stream>>>(out, inp, weight, bias, C, OC);
        else
            gemv_nt_kernel<false><<<grid, GEMV_WARPS * 32, 0, ctx->stream>>>(out, inp, weight, bias, C, OC);
        CUDA_LAUNCH_CHECK("gemv_nt_kernel");
        return FORGE_OK;
    }
    return matmul_dispatch(ctx, CUDA_MM_NT, out, inp, weight, bias, N, OC, C);
}

forge_status cuda_matmul_backward_input(forge_backend *be, float *dinp, const float *dout,
                                        const float *weight, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) return FORGE_OK;
    return matmul_dispatch(cuda_get_ctx(be), CUDA_MM_NN, dinp, dout, weight, NULL, N, C, OC);
}

forge_status cuda_matmul_backward_weight(forge_backend *be, float *dweight, float *dbias,
                                         const float *dout, const float *inp, int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    if (C > 0) FORGE_TRY(matmul_dispatch(ctx, CUDA_MM_TN, dweight, dout, inp, NULL, OC, C, N));
    if (dbias) {
        int R = cuda_colsum_chunks(N, OC, 1);
        if (R == 0)
            return forge_error(FORGE_ERR_UNSUPPORTED,
                               "cuda matmul_backward_weight: OC = %d too wide for the dbias workspace",
                               OC);
        int rows_per_chunk = (N + R - 1) / R;
        dim3 grid((OC + 31) / 32, R), block(32, DBIAS_ROWS);
        dbias_partial_kernel<<<grid, block, 0, ctx->stream>>>(ctx->ws, dout, N, OC, rows_per_chunk);
        CUDA_LAUNCH_CHECK("dbias_partial_kernel");
        FORGE_TRY(cuda_colsum_finish(ctx, dbias, ctx->ws, R, OC));
    }
    return FORGE_OK;
}
