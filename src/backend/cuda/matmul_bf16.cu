/*
 * matmul_bf16.cu: the bf16 linear layer (docs/mixed-precision.md; the CPU
 * reference is backend/cpu/matmul_bf16.c).
 *
 *   forward          v (N,OC) = inp (N,C) . weight (OC,C)^T + bias (OC)
 *                    pre NULL: out = rn(v); else pre = rn(v), out = rn(gelu(v))
 *   backward_input   dinp (N,C) = rn(dinp + d) (or rn(d): accumulate = 0), d = dout (N,OC) . weight (OC,C)
 *                    [* gelu'(pre)]
 *   backward_weight  dweight (OC,C) += dout^T . inp (fp32);  dbias (OC) += sum_n dout (fp32)
 *
 * Paths. Each op runs forge's Hopper bf16 GEMM (gemm.h) where its rules hold
 * (8 | K and, for the backward layouts, 8 | the output's columns: TMA's
 * 16-byte rows; 16-byte aligned operands), else one SIMT kernel below
 * (mm_bf16_simt_kernel: scalar bounds-checked loads, any shape and alignment,
 * each output summed over k in order by one thread, the epilogue fused).
 * - forward: forge_gemm_bf16_nt_epi with the whole epilogue fused (bias, GELU,
 *   pre_out, bf16 stores); no workspace.
 * - backward_input: forge_gemm_bf16_nn_epi in its bf16 form, one pass: the
 *   epilogue multiplies by gelu'(pre) (bf16 pre read directly) and stores
 *   dinp = rn(dinp + d) (the old dinp loaded chunk by chunk), or rn(d) when it
 *   writes the first gradient, through TMA; no workspace, no second pass.
 * - backward_weight: the TN split-K GEMM accumulates into dweight directly
 *   (its partial slices in ctx->tn_ws, sized to its plan, reduced in a fixed
 *   order). dbias: where the GEMM's plan is the 128 x 256 tile, the GEMM sums
 *   dout's columns from the tiles it stages anyway (one partial row per split
 *   into ctx->ws: forge_gemm_bf16_tn_wgmma_dbias) and reduce.cu's finish adds
 *   the rows in split order (1.13x / 1.18x the op with the separate pass at the
 *   GPT-2 qkv / attention projection dW, H200: lab/notes/gemm-bf16.md). Else
 *   (the C192 plan, where the fused sums measured 0.81x; 128 x 128; the SIMT
 *   path; C = 0) the ordered two-pass column sum (reduce.cu) over the bf16
 *   dout, its first pass 8 columns a thread where dout allows 16-byte loads.
 *   dbias is the same N-long fp32 sums either way, in another order.
 * Deterministic: no atomics; every sum has a fixed order for given arguments.
 * Nothing synchronises with the host. Ops share the workspace because they are
 * serialised on the context's stream (cuda_ops.h). Every kernel, the GEMMs'
 * included, launches with programmatic dependent launch where the context has
 * it on (pdl.cuh): each waits for the previous kernel before it touches memory,
 * so that serialisation holds.
 */
#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

#include "cuda_ops.h"
#include "gemm.h"
#include "pdl.cuh"

#define MMB_TILE 64     /* SIMT: a 64 x 64 tile of the output per block */
#define MMB_BK 16       /* K slice staged in shared memory */
#define MMB_THREADS 256 /* 16 x 16 threads, a 4 x 4 register block each */
#define MMB_MAX_TILES_Y 65535
#define MMB_DBIAS_ROWS 8 /* threads along the rows of a dbias block: 32 columns x 8 */
#define MMB_GELU_SCALING_FACTOR 0.7978845608028654f /* sqrt(2/pi) */
#define MMB_GELU_CUBIC 0.044715f

/* The three layouts, each with its epilogue. */
enum {
    MMB_NT = 0, /* forward: C (M=N, N=OC) = A (M,K) . B (N,K)^T, K = C; bias, GELU, bf16 out and pre */
    MMB_NN = 1, /* backward input: A (M,K) . B (K,N), K = OC; dinp = rn(dinp + d [* gelu'(pre)]) */
    MMB_TN = 2  /* backward weight: A (K,M)^T . B (K,N), K = N rows; fp32 C += */
};

__device__ __forceinline__ float mmb_bf(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ uint16_t mmb_rn(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

/* elementwise.cu's tanh GELU and its derivative (1 - tanh^2 for sech^2) */
__device__ __forceinline__ float mmb_gelu(float x) {
    const float cube = MMB_GELU_CUBIC * x * x * x;
    return 0.5f * x * (1.0f + tanhf(MMB_GELU_SCALING_FACTOR * (x + cube)));
}
__device__ __forceinline__ float mmb_gelu_grad(float x) {
    const float cube = MMB_GELU_CUBIC * x * x * x;
    const float t = tanhf(MMB_GELU_SCALING_FACTOR * (x + cube));
    const float sech2 = 1.0f - t * t;
    return 0.5f * (1.0f + t) + x * 0.5f * sech2 * MMB_GELU_SCALING_FACTOR * (1.0f + 3.0f * MMB_GELU_CUBIC * x * x);
}

/* ---- kernels ------------------------------------------------------------- */

/* The SIMT path of every layout: a 64 x 64 tile of C per block (blockIdx.x: rows, blockIdx.y + tile_n0: columns),
 * 256 threads with a 4 x 4 register block each (rows ty + 16i, columns tx + 16j), K in slices of 16 through shared
 * memory. Loads are scalar and bounds-checked (zero outside), the K-contiguous operand read along k, the other
 * along its rows, so a warp's loads are contiguous either way. Each output is summed over k = 0, 1, ... by one
 * thread with fmaf (the product of two bf16 values is exact in fp32, so this is the CPU reference's sum), then:
 * - NT: v = acc + bias[n]; pre_out != NULL: pre_out = rn(v), v = gelu(v); C (bf16) = rn(v)
 * - NN: d = acc [* gelu'(pre_in)]; C (bf16) = rn(C + d), or rn(d) without accumulate
 * - TN: C (fp32) += acc */
template <int L>
__global__ void __launch_bounds__(MMB_THREADS)
    mm_bf16_simt_kernel(const uint16_t *__restrict__ A, const uint16_t *__restrict__ B, void *C,
                        uint16_t *__restrict__ pre_out, const uint16_t *__restrict__ pre_in,
                        const float *__restrict__ bias, int M, int N, int K, int tile_n0, int accumulate) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    __shared__ float As[MMB_BK][MMB_TILE + 1];
    __shared__ float Bs[MMB_BK][MMB_TILE + 1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.x * MMB_TILE, n0 = (blockIdx.y + tile_n0) * MMB_TILE;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += MMB_BK) {
#pragma unroll
        for (int l = 0; l < MMB_TILE * MMB_BK / MMB_THREADS; l++) {
            const int e = tid + MMB_THREADS * l;
            /* A(m, k): NT, NN: A[m*K + k] (k contiguous); TN: A[k*M + m] (m contiguous) */
            {
                const int r = L == MMB_TN ? e % MMB_TILE : e / MMB_BK, kk = L == MMB_TN ? e / MMB_TILE : e % MMB_BK;
                const int m = m0 + r, k = k0 + kk;
                float v = 0.0f;
                if (m < M && k < K) v = mmb_bf(L == MMB_TN ? A[(size_t)k * M + m] : A[(size_t)m * K + k]);
                As[kk][r] = v;
            }
            /* B(k, n): NT: B[n*K + k] (k contiguous); NN, TN: B[k*N + n] (n contiguous) */
            {
                const int r = L == MMB_NT ? e / MMB_BK : e % MMB_TILE, kk = L == MMB_NT ? e % MMB_BK : e / MMB_TILE;
                const int n = n0 + r, k = k0 + kk;
                float v = 0.0f;
                if (n < N && k < K) v = mmb_bf(L == MMB_NT ? B[(size_t)n * K + k] : B[(size_t)k * N + n]);
                Bs[kk][r] = v;
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MMB_BK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int m = m0 + ty + 16 * i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int n = n0 + tx + 16 * j;
            if (m >= M || n >= N) continue;
            const size_t idx = (size_t)m * N + n;
            if constexpr (L == MMB_NT) {
                float v = acc[i][j] + (bias != nullptr ? bias[n] : 0.0f);
                if (pre_out != nullptr) {
                    pre_out[idx] = mmb_rn(v);
                    v = mmb_gelu(v);
                }
                static_cast<uint16_t *>(C)[idx] = mmb_rn(v);
            } else if constexpr (L == MMB_NN) {
                float d = acc[i][j];
                if (pre_in != nullptr) d *= mmb_gelu_grad(mmb_bf(pre_in[idx]));
                uint16_t *c = static_cast<uint16_t *>(C) + idx;
                *c = mmb_rn(accumulate ? mmb_bf(*c) + d : d);
            } else {
                static_cast<float *>(C)[idx] += acc[i][j];
            }
        }
    }
}

/* partial[r][oc] = sum of dout[n][oc] (bf16, widened) over the rows n of chunk r; grid (ceil(OC/32), R), block
 * (32, MMB_DBIAS_ROWS); a fixed order inside the block (matmul.cu's dbias_partial_kernel on bf16 rows) */
__global__ void mm_bf16_dbias_partial_kernel(float *__restrict__ partial, const uint16_t *__restrict__ dout, int N,
                                             int OC, int rows_per_chunk) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    __shared__ float s[MMB_DBIAS_ROWS][33];
    const int oc = blockIdx.x * 32 + threadIdx.x;
    const int n_begin = blockIdx.y * rows_per_chunk, n_end = min(N, n_begin + rows_per_chunk);
    float acc = 0.0f;
    if (oc < OC)
        for (int n = n_begin + threadIdx.y; n < n_end; n += MMB_DBIAS_ROWS) acc += mmb_bf(dout[(size_t)n * OC + oc]);
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && oc < OC) {
        float sum = 0.0f;
#pragma unroll
        for (int r = 0; r < MMB_DBIAS_ROWS; r++) sum += s[r][threadIdx.x];
        partial[(size_t)blockIdx.y * OC + oc] = sum;
    }
}

/* The same partials 8 columns a thread (16-byte loads; OC % 8 == 0, dout 16-byte aligned): grid
 * (ceil(OC/256), R), block (32, MMB_DBIAS_ROWS); each column is summed over the same rows in the same order as
 * in mm_bf16_dbias_partial_kernel, and the row lanes combined in the same order: the same bits. */
__global__ void mm_bf16_dbias_partial8_kernel(float *__restrict__ partial, const uint16_t *__restrict__ dout, int N,
                                              int OC, int rows_per_chunk) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    __shared__ float s[MMB_DBIAS_ROWS][256 + 4];
    const int c0 = blockIdx.x * 256 + threadIdx.x * 8, lc = threadIdx.x * 8;
    const int n_begin = blockIdx.y * rows_per_chunk, n_end = min(N, n_begin + rows_per_chunk);
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
    if (c0 < OC)
        for (int n = n_begin + threadIdx.y; n < n_end; n += MMB_DBIAS_ROWS) {
            const uint4 u = *reinterpret_cast<const uint4 *>(dout + (size_t)n * OC + c0);
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                acc[2 * k] += __uint_as_float(w[k] << 16); /* the lower address is the low half */
                acc[2 * k + 1] += __uint_as_float(w[k] & 0xffff0000u);
            }
        }
#pragma unroll
    for (int k = 0; k < 8; k++) s[threadIdx.y][lc + k] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && c0 < OC) {
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float sum = 0.0f;
#pragma unroll
            for (int r = 0; r < MMB_DBIAS_ROWS; r++) sum += s[r][lc + k];
            partial[(size_t)blockIdx.y * OC + c0 + k] = sum;
        }
    }
}

/* ---- launchers ------------------------------------------------------------- */

static bool aligned(const void *p, uintptr_t bytes) { return (uintptr_t)p % bytes == 0; }

/* The SIMT kernel over the whole output, column tiles in launches of at most MMB_MAX_TILES_Y. */
template <int L>
static forge_status mm_bf16_simt(cuda_ctx *ctx, const void *A, const void *B, void *C, uint16_t *pre_out,
                                 const uint16_t *pre_in, const float *bias, int M, int N, int K, const char *what,
                                 int accumulate = 1) {
    if (M <= 0 || N <= 0) return FORGE_OK;
    const long long tiles_m = (M + MMB_TILE - 1) / MMB_TILE, tiles_n = (N + MMB_TILE - 1) / MMB_TILE;
    for (long long t0 = 0; t0 < tiles_n; t0 += MMB_MAX_TILES_Y) {
        const long long tn = tiles_n - t0 < MMB_MAX_TILES_Y ? tiles_n - t0 : MMB_MAX_TILES_Y;
        const dim3 grid((unsigned)tiles_m, (unsigned)tn);
        CUDA_LAUNCH_TRY(forge_pdl_launch(mm_bf16_simt_kernel<L>, grid, MMB_THREADS, 0, ctx->stream, ctx->pdl,
                                         (const uint16_t *)A, (const uint16_t *)B, C, pre_out, pre_in, bias, M, N, K,
                                         (int)t0, accumulate),
                        what);
    }
    return FORGE_OK;
}

/* A wgmma entry's status: FORGE_ERR_UNSUPPORTED (arguments or device it refuses, before any launch) becomes
 * "take the SIMT path" (*fallback = 1, message cleared); anything else is the op's status. */
static forge_status mm_bf16_take(forge_status s, int *fallback) {
    *fallback = 0;
    if (s == FORGE_ERR_UNSUPPORTED) {
        forge_error_clear();
        *fallback = 1;
        return FORGE_OK;
    }
    return s;
}

forge_status cuda_matmul_forward_bf16(forge_backend *be, forge_bf16 *out, forge_bf16 *pre, const forge_bf16 *inp,
                                      const forge_bf16 *weight, const float *bias, int N, int C, int OC) {
    if (N < 0 || C < 0 || OC < 0)
        return forge_error(FORGE_ERR_ARG, "cuda matmul_forward_bf16: sizes must be >= 0, got N=%d C=%d OC=%d", N,
                           C, OC);
    if (N == 0 || OC == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    /* gemm.h's nt rules (K % 8, 16-byte operands, element-aligned bf16 C and pre_out, 4-byte bias) */
    if (C > 0 && C % 8 == 0 && aligned(inp, 16) && aligned(weight, 16) && aligned(out, 2) && aligned(pre, 2) &&
        aligned(bias, 4)) {
        forge_gemm_epilogue e;
        memset(&e, 0, sizeof e);
        e.bias = bias;
        e.gelu = pre != NULL;
        e.pre_out = pre;
        e.out_bf16 = 1;
        int fallback = 0;
        FORGE_TRY(mm_bf16_take(forge_gemm_bf16_nt_epi(inp, weight, out, N, OC, C, &e, (void *)ctx->stream, ctx->pdl),
                               &fallback));
        if (!fallback) return FORGE_OK;
    }
    return mm_bf16_simt<MMB_NT>(ctx, inp, weight, out, pre, NULL, bias, N, OC, C, "mm_bf16_simt_kernel<NT>");
}

forge_status cuda_matmul_backward_input_bf16(forge_backend *be, forge_bf16 *dinp, const forge_bf16 *dout,
                                             const forge_bf16 *weight, const forge_bf16 *pre, int N, int C, int OC,
                                             int accumulate) {
    if (N < 0 || C < 0 || OC < 0)
        return forge_error(FORGE_ERR_ARG,
                           "cuda matmul_backward_input_bf16: sizes must be >= 0, got N=%d C=%d OC=%d", N, C, OC);
    if (N == 0 || C == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    if (OC == 0) { /* d = 0: rn(dinp + 0) = dinp, rn(0) = 0 */
        if (!accumulate) CUDA_TRY(cudaMemsetAsync(dinp, 0, (size_t)N * C * sizeof *dinp, ctx->stream));
        return FORGE_OK;
    }
    /* gemm.h's nn rules (K = OC and the output's C multiples of 8, 16-byte operands, element-aligned bf16
     * dinp and pre). The store goes through TMA (writing, or adding to the old dinp that the epilogue loads
     * chunk by chunk) wherever gemm.h allows it (16-byte aligned dinp), else from the registers. */
    if (OC % 8 == 0 && C % 8 == 0 && aligned(dout, 16) && aligned(weight, 16) && aligned(dinp, 2) &&
        aligned(pre, 2)) {
        forge_gemm_epilogue e;
        memset(&e, 0, sizeof e);
        e.residual = accumulate ? dinp : NULL; /* dinp = rn(dinp + d), else rn(d) */
        e.dgelu_pre = pre;
        e.out_bf16 = 1;
        int fallback = 0;
        FORGE_TRY(mm_bf16_take(forge_gemm_bf16_nn_epi(dout, weight, dinp, N, C, OC, &e, (void *)ctx->stream, ctx->pdl),
                               &fallback));
        if (!fallback) return FORGE_OK;
    }
    return mm_bf16_simt<MMB_NN>(ctx, dout, weight, dinp, NULL, pre, NULL, N, C, OC, "mm_bf16_simt_kernel<NN>",
                                accumulate);
}

forge_status cuda_matmul_backward_weight_bf16(forge_backend *be, float *dweight, float *dbias, const forge_bf16 *dout,
                                              const forge_bf16 *inp, int N, int C, int OC) {
    if (N < 0 || C < 0 || OC < 0)
        return forge_error(FORGE_ERR_ARG,
                           "cuda matmul_backward_weight_bf16: sizes must be >= 0, got N=%d C=%d OC=%d", N, C, OC);
    if (N == 0 || OC == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    int dbias_rows = 0; /* > 0: the GEMM wrote dbias's partial rows into ctx->ws */
    if (C > 0) {
        int fallback = 1;
        /* gemm.h's tn rules (M = OC and N = C multiples of 8, 16-byte operands, 4-byte C); split-K partials in
         * the workspace, reduced in slice order */
        if (OC % 8 == 0 && C % 8 == 0 && aligned(dout, 16) && aligned(inp, 16) && aligned(dweight, 4)) {
            /* the workspace the plan wants (its split-K slices), so the plan is never cut down to what a fixed
             * buffer holds */
            size_t need = 0;
            FORGE_TRY(forge_gemm_bf16_tn_workspace(OC, C, N, &need));
            FORGE_TRY(cuda_tn_workspace(ctx, need));
            /* with dbias, the GEMM sums dout's columns too where its plan is the 128 x 256 tile (one partial row
             * per split into ctx->ws, which the split-K slices do not use) */
            FORGE_TRY(mm_bf16_take(forge_gemm_bf16_tn_wgmma_dbias(dout, inp, dweight, OC, C, N, 1, ctx->tn_ws,
                                                                  ctx->tn_ws_bytes, dbias ? ctx->ws : NULL,
                                                                  CUDA_WS_FLOATS, &dbias_rows, (void *)ctx->stream,
                                                                  ctx->pdl),
                                   &fallback));
        }
        if (fallback)
            FORGE_TRY(mm_bf16_simt<MMB_TN>(ctx, dout, inp, dweight, NULL, NULL, NULL, OC, C, N,
                                           "mm_bf16_simt_kernel<TN>"));
    }
    if (dbias && dbias_rows > 0) /* after the GEMM and its split pass on the stream: the rows in split order */
        return cuda_colsum_finish(ctx, dbias, ctx->ws, dbias_rows, OC);
    if (dbias) {
        /* after the GEMM on the stream: its split-K partials in the workspace are dead */
        const int R = cuda_colsum_chunks(N, OC, 1);
        if (R == 0)
            return forge_error(FORGE_ERR_UNSUPPORTED,
                               "cuda matmul_backward_weight_bf16: OC = %d too wide for the dbias workspace", OC);
        const int rows_per_chunk = (N + R - 1) / R;
        if (OC % 8 == 0 && aligned(dout, 16)) {
            const dim3 grid((OC + 255) / 256, R), block(32, MMB_DBIAS_ROWS);
            CUDA_LAUNCH_TRY(forge_pdl_launch(mm_bf16_dbias_partial8_kernel, grid, block, 0, ctx->stream, ctx->pdl,
                                             ctx->ws, (const uint16_t *)dout, N, OC, rows_per_chunk),
                            "mm_bf16_dbias_partial8_kernel");
        } else {
            const dim3 grid((OC + 31) / 32, R), block(32, MMB_DBIAS_ROWS);
            CUDA_LAUNCH_TRY(forge_pdl_launch(mm_bf16_dbias_partial_kernel, grid, block, 0, ctx->stream, ctx->pdl,
                                             ctx->ws, dout, N, OC, rows_per_chunk),
                            "mm_bf16_dbias_partial_kernel");
        }
        FORGE_TRY(cuda_colsum_finish(ctx, dbias, ctx->ws, R, OC));
    }
    return FORGE_OK;
}
