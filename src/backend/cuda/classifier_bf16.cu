/*
 * classifier_bf16.cu: the lm head's forward and backward fused, bf16, on the
 * GPU (op_list.h: classifier_bf16; rounding points in docs/mixed-precision.md;
 * CPU reference in cpu/classifier_bf16.c).
 *
 * Rows go in chunks of R = FORGE_CLS_BF16_ROWS(N, V, chunk_rows) (op_list.h),
 * so the (N, V) logits never exist whole. With C % 8 == 0, a chunk's first
 * rows - rows % 8 rows (all of a training batch's) run transposed,
 * cls16t_chunk: the logits are stored as logits^T (V, rows), whose row stride
 * is a 16-byte multiple whatever V, so all three GEMMs take their TMA paths and
 * no vocabulary-tail kernel is needed (the section "the transposed chunk"
 * below). The other rows (C % 8 != 0, or the last rows % 8 < 8 of a chunk) run
 * in the row layout, R / 2 rows at a time (1 when R = 1: the scratch holds two
 * rows' logits then), logits and dlogits side by side in the scratch:
 *   1. logits (rows, V) bf16 = rn(inp . wte^T): forge's NT GEMM with the bf16
 *      epilogue (fp32 accumulate, one rounding);
 *   2. one block per row: max, sum of exp, loss = max + log(sum) - logit[y]
 *      (fp32), dlogits = rn((softmax - onehot) grad_scale) (0 for an ignore row);
 *   3. dinp: the NN GEMM dlogits . wte into an fp32 (rows, C) buffer, then one
 *      pass dinp = rn(dinp + that), or rn(0 + that) when dinp is written (a
 *      fresh gradient: accumulate = 0; each chunk owns its rows);
 *   4. dwte (fp32) += dlogits^T . inp: the TN GEMM, accumulating (unsplit: no
 *      workspace, so no partials).
 * The wgmma GEMMs need 16-byte row strides: K % 8 for the NT (K = C) and
 * N % 8 = C % 8 for the NN and TN, and V % 8 for the NN's K and the TN's M.
 * V is often odd (GPT-2's 50257), so dlogits are stored in two pieces: the
 * first V8 = V - V % 8 columns (rows, V8), which the NN and TN GEMMs take, and
 * the last V % 8 columns (rows, V % 8), which two small kernels fold in: the
 * dinp pass adds their products with wte's last rows, and a dwte pass adds
 * their products with inp into dwte's last rows. Every GEMM the wgmma kernels
 * refuse (C % 8 != 0, a pointer not 16-byte aligned, not an sm_90 device)
 * runs on the SIMT kernel below instead (any shape, strided operands, fp32
 * accumulate in k order).
 *
 * Deterministic: every output element is written by one thread with a fixed
 * summation order (the unsplit TN, the row blocks' fixed-tree reductions; in
 * the transposed chunk the split-K TN's slices reduced in slice order and the
 * vocabulary ranges' partials merged in range order); no atomics. The scratch
 * (FORGE_CLS_BF16_SCRATCH floats, pieces 16-byte aligned): transposed, the
 * logits (R*V bf16) and the dinp product (R*C fp32); in the row layout of Q
 * rows (Q = R / 2, or 1), logits (Q*V bf16), dlogits (Q*V8 bf16), its tail
 * (Q*(V % 8) bf16) and the product (Q*C fp32).
 *
 * A target outside [0, V) that is not ignore_index: the CPU reference returns
 * an error; here (no host sync) the row's loss is NaN, its dlogits are the
 * softmax without the one-hot, and the id is recorded with cuda_report_bad_id
 * (CUDA_BAD_ID_CLASSIFIER), which the step's poll_errors reports.
 *
 * Every kernel here and the GEMMs launch with programmatic dependent launch where the context has it on
 * (pdl.cuh): each waits for the previous kernel (forge_pdl_wait) before its first global access.
 */
#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

#include "cuda_ops.h"
#include "classifier_bf16_fast.cuh"
#include "gemm.h"
#include "pdl.cuh"

#define CLS16_THREADS 512  /* softmax rows */
#define CLS16_EW_THREADS 256
#define CLS16_TILE 64      /* SIMT GEMM tile (M and N) */
#define CLS16_TK 16        /* SIMT GEMM k step */

__device__ __forceinline__ float cls16_ld(const uint16_t *p) { return __bfloat162float(__ushort_as_bfloat16(*p)); }

/* ---- the SIMT GEMM fallback --------------------------------------------------------------------------------------
 * C[m][n] (=, or += with accumulate) sum_k A(m,k) B(k,n), A(m,k) = A[m*a_m + k*a_k], B(k,n) = B[k*b_k + n*b_n],
 * C row-major with row stride ldc; OUT_BF16: C is bf16, rn(sum) (no accumulate). 64 x 64 tiles, 256 threads of
 * 4 x 4 outputs; the k loop runs in order, so every element's sum has one order. One-dimensional grid of tiles
 * (M and N can each exceed a grid.y). */
template <bool OUT_BF16>
__global__ void __launch_bounds__(256)
    cls16_gemm_simt_kernel(void *__restrict__ C, const uint16_t *__restrict__ A, const uint16_t *__restrict__ B, int M,
                           int N, int K, long long a_m, long long a_k, long long b_k, long long b_n, long long ldc,
                           int accumulate) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    __shared__ float As[CLS16_TK][CLS16_TILE], Bs[CLS16_TK][CLS16_TILE];
    const int tiles_n = (N + CLS16_TILE - 1) / CLS16_TILE;
    const int m0 = (int)(blockIdx.x / tiles_n) * CLS16_TILE, n0 = (int)(blockIdx.x % tiles_n) * CLS16_TILE;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += CLS16_TK) {
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int e = tid + 256 * r;
            /* consecutive threads along whichever index is contiguous in memory */
            const int am = a_k == 1 ? e / CLS16_TK : e % CLS16_TILE, ak = a_k == 1 ? e % CLS16_TK : e / CLS16_TILE;
            const int bn = b_k == 1 ? e / CLS16_TK : e % CLS16_TILE, bk = b_k == 1 ? e % CLS16_TK : e / CLS16_TILE;
            const int gm = m0 + am, gka = k0 + ak, gn = n0 + bn, gkb = k0 + bk;
            As[ak][am] = gm < M && gka < K ? cls16_ld(A + gm * a_m + gka * a_k) : 0.0f;
            Bs[bk][bn] = gn < N && gkb < K ? cls16_ld(B + gkb * b_k + gn * b_n) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < CLS16_TK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx * 4 + j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int m = m0 + ty * 4 + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int n = n0 + tx * 4 + j;
            if (n >= N) continue;
            if (OUT_BF16) {
                ((uint16_t *)C)[m * ldc + n] = f32_to_bf16(acc[i][j]);
            } else {
                float *c = (float *)C + m * ldc + n;
                *c = accumulate ? *c + acc[i][j] : acc[i][j];
            }
        }
    }
}

/* ---- softmax cross-entropy over one chunk's bf16 logits ---------------------------------------------------------- */

__global__ void __launch_bounds__(CLS16_THREADS)
    cls16_softmax_kernel(float *__restrict__ losses, uint16_t *__restrict__ dl, uint16_t *__restrict__ dl_tail,
                         const uint16_t *__restrict__ logits, const int32_t *__restrict__ targets, int n0, int V,
                         int V8, int ignore_index, float grad_scale, cuda_input_error *err) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    __shared__ float scratch[32];
    const int r = blockIdx.x, n = n0 + r, VT = V - V8;
    const uint16_t *x = logits + (size_t)r * V;
    uint16_t *d = dl + (size_t)r * V8, *dt = dl_tail + (size_t)r * VT;
    const int y = targets[n];
    if (y == ignore_index) { /* uniform over the block */
        for (int i = threadIdx.x; i < V8; i += CLS16_THREADS) d[i] = 0;
        for (int i = threadIdx.x; i < VT; i += CLS16_THREADS) dt[i] = 0;
        if (threadIdx.x == 0) losses[n] = 0.0f;
        return;
    }
    const bool y_valid = y >= 0 && y < V;
    if (!y_valid && threadIdx.x == 0) cuda_report_bad_id(err, CUDA_BAD_ID_CLASSIFIER, n, y, V);

    float maxval = -INFINITY;
    for (int i = threadIdx.x; i < V; i += CLS16_THREADS) maxval = fmaxf(maxval, cls16_ld(x + i));
    maxval = block_max(maxval, scratch);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += CLS16_THREADS) sum += expf(cls16_ld(x + i) - maxval);
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0)
        losses[n] = y_valid ? maxval + logf(sum) - cls16_ld(x + y) : __int_as_float(0x7fc00000);
    const float inv = 1.0f / sum;
    for (int i = threadIdx.x; i < V; i += CLS16_THREADS) {
        const float p = expf(cls16_ld(x + i) - maxval) * inv;
        const uint16_t g = f32_to_bf16((p - (i == y ? 1.0f : 0.0f)) * grad_scale);
        if (i < V8) d[i] = g;
        else dt[i - V8] = g;
    }
}

/* dinp (rows, C) = rn(dinp + prod + sum_t dl_tail[r][t] wte[V8 + t]), +0 for dinp unless ACC; prod NULL: no NN
 * product (V8 == 0) */
template <bool ACC>
__global__ void __launch_bounds__(CLS16_EW_THREADS)
    cls16_dinp_kernel(uint16_t *__restrict__ dinp, const float *__restrict__ prod, const uint16_t *__restrict__ dl_tail,
                      const uint16_t *__restrict__ wte, int rows, int C, int V8, int VT) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const size_t n = (size_t)rows * C;
    for (size_t i = blockIdx.x * (size_t)CLS16_EW_THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * CLS16_EW_THREADS) {
        const size_t r = i / (size_t)C, c = i - r * (size_t)C;
        float a = prod ? prod[i] : 0.0f;
        for (int t = 0; t < VT; t++) a += cls16_ld(dl_tail + r * VT + t) * cls16_ld(wte + (size_t)(V8 + t) * C + c);
        dinp[i] = f32_to_bf16((ACC ? cls16_ld(dinp + i) : 0.0f) + a);
    }
}

/* dwte[V8 + t][c] += sum_r dl_tail[r][t] inp[r][c] over the chunk's rows. Block (32 columns, CLS16_TAIL_LANES
 * row lanes) per (column group, t): lane y sums rows y, y + LANES, ... in order, then lane 0 adds the lanes' sums
 * in lane order (a fixed order: deterministic), so the rows are read by many threads at once instead of one
 * thread walking all of them. */
#define CLS16_TAIL_LANES 32
__global__ void __launch_bounds__(32 * CLS16_TAIL_LANES)
    cls16_dwte_tail_kernel(float *__restrict__ dwte, const uint16_t *__restrict__ dl_tail,
                           const uint16_t *__restrict__ inp, int rows, int C, int V8, int VT) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    __shared__ float part[CLS16_TAIL_LANES][33];
    const int c = blockIdx.x * 32 + threadIdx.x, t = blockIdx.y;
    float s = 0.0f;
    if (c < C)
        for (int r = threadIdx.y; r < rows; r += CLS16_TAIL_LANES)
            s += cls16_ld(dl_tail + (size_t)r * VT + t) * cls16_ld(inp + (size_t)r * C + c);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float sum = 0.0f;
#pragma unroll 8
        for (int y = 0; y < CLS16_TAIL_LANES; y++) sum += part[y][threadIdx.x];
        dwte[(V8 + t) * (size_t)C + c] += sum;
    }
}

/* ---- the transposed chunk: logits^T (V, rows), dlogits^T written over them -------------------------------------
 * The two column passes are classifier_bf16_fast.cuh's (hardware ex2, batched statistics; the lab keeps the expf
 * passes as their reference and times both); forge runs CLS16T_LANE_ROWS rows a lane, CLS16T_LANES lanes a stream
 * and CLS16T_UNROLL ids a batch. */

/* tl[r] = the logit of row r's target (0 for an ignored or bad target), read before pass 2 rewrites the logits as
 * dlogits (launched between the passes); cls16t_loss_kernel subtracts it afterwards */
__global__ void cls16t_target_kernel(float *__restrict__ tl, const uint16_t *__restrict__ xt,
                                     const int32_t *__restrict__ targets, int n0, int rows, int V) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const int y = targets[n0 + r];
    tl[r] = y >= 0 && y < V ? cls16_ld(xt + (size_t)y * rows + r) : 0.0f;
}

/* losses[n] = (M + log S) - logit[target] for the valid rows (pass 2 wrote M + log S) */
__global__ void cls16t_loss_kernel(float *__restrict__ losses, const float *__restrict__ tl,
                                   const int32_t *__restrict__ targets, int n0, int rows, int V, int ignore_index) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const int y = targets[n0 + r];
    if (y != ignore_index && y >= 0 && y < V) losses[n0 + r] -= tl[r];
}

/* ---- host ----------------------------------------------------------------------------------------------------- */

static void *cls16_align16(void *p) { return (void *)(((uintptr_t)p + 15) & ~(uintptr_t)15); }

template <bool OUT_BF16>
static forge_status cls16_gemm_simt(cuda_ctx *ctx, void *C, const forge_bf16 *A, const forge_bf16 *B, int M, int N,
                                    int K, long long a_m, long long a_k, long long b_k, long long b_n, long long ldc,
                                    int accumulate) {
    const long long tiles =
        (long long)((M + CLS16_TILE - 1) / CLS16_TILE) * (long long)((N + CLS16_TILE - 1) / CLS16_TILE);
    if (tiles > 0x7fffffffLL)
        return forge_error(FORGE_ERR_UNSUPPORTED, "cuda classifier_bf16: a %d x %d GEMM has too many tiles", M, N);
    CUDA_LAUNCH_TRY(forge_pdl_launch(cls16_gemm_simt_kernel<OUT_BF16>, (unsigned)tiles, 256, 0, ctx->stream, ctx->pdl,
                                     C, (const uint16_t *)A, (const uint16_t *)B, M, N, K, a_m, a_k, b_k, b_n, ldc,
                                     accumulate),
                    "cls16_gemm_simt_kernel");
    return FORGE_OK;
}

/* a wgmma GEMM's status: FORGE_ERR_UNSUPPORTED (refused before any launch) clears the message, and the caller runs
 * the SIMT kernel */
static int cls16_refused(forge_status st) {
    if (st != FORGE_ERR_UNSUPPORTED) return 0;
    forge_error_clear();
    return 1;
}

/* One chunk in the transposed layout (the header of the kernels above): logits^T = rn(wte . in^T) (NT, M = V, TMA
 * store: rows % 8 == 0), the two passes, dinp += dlogits . wte as the TN product dlogits^T^T . wte (K = V, split-K)
 * and dwte += dlogits^T . in as the NN product (K = rows). V needs no 16-byte alignment anywhere. */
static forge_status cls16t_chunk(cuda_ctx *ctx, float *losses, forge_bf16 *di, float *dwte, uint16_t *xt,
                                 float *prod, const forge_bf16 *in, const forge_bf16 *wte, const int32_t *targets,
                                 int n0, int rows, int C, int V, int ignore_index, float grad_scale, int accumulate) {
    forge_gemm_epilogue epi;
    memset(&epi, 0, sizeof epi);
    epi.out_bf16 = 1;
    if (cls16_refused(forge_gemm_bf16_nt_epi(wte, in, xt, V, rows, C, &epi, ctx->stream, ctx->pdl)))
        FORGE_TRY(cls16_gemm_simt<true>(ctx, xt, wte, in, V, rows, C, C, 1, 1, C, rows, 0));
    const int splits = cls16t_splits(V), per_split = cls16t_per_split(V, splits);
    float *part = ctx->ws, *tl = ctx->ws + 2 * (size_t)splits * rows; /* 33 * 16384 floats at most */
    const dim3 grid = cls16t_grid<CLS16T_LANE_ROWS, CLS16T_LANES>(rows, splits), block = cls16t_block<CLS16T_LANES>();
    /* a lane's CLS16T_LANE_ROWS * 2-byte accesses: rows % 8 == 0, and the logits 16-byte aligned (the scratch is) */
    CUDA_LAUNCH_TRY(forge_pdl_launch(cls16f_partial_kernel<CLS16T_LANE_ROWS, CLS16T_LANES, CLS16T_UNROLL>, grid, block,
                                     0, ctx->stream, ctx->pdl, part, xt, rows, V, per_split),
                    "cls16f_partial_kernel");
    CUDA_LAUNCH_TRY(forge_pdl_launch(cls16t_target_kernel, (rows + 255) / 256, 256, 0, ctx->stream, ctx->pdl, tl, xt,
                                     targets, n0, rows, V),
                    "cls16t_target_kernel");
    CUDA_LAUNCH_TRY(forge_pdl_launch(cls16f_grad_kernel<CLS16T_LANE_ROWS, CLS16T_LANES, CLS16T_UNROLL>, grid, block, 0,
                                     ctx->stream, ctx->pdl, losses, xt, part, targets, n0, rows, V, per_split, splits,
                                     ignore_index, grad_scale, ctx->input_error),
                    "cls16f_grad_kernel");
    CUDA_LAUNCH_TRY(forge_pdl_launch(cls16t_loss_kernel, (rows + 255) / 256, 256, 0, ctx->stream, ctx->pdl, losses, tl,
                                     targets, n0, rows, V, ignore_index),
                    "cls16t_loss_kernel");
    const forge_bf16 *dlt = (const forge_bf16 *)xt;
    if (di) {
        size_t need = 0;
        forge_status st = forge_gemm_bf16_tn_workspace(rows, C, V, &need);
        if (st == FORGE_OK) st = cuda_tn_workspace(ctx, need);
        if (st == FORGE_OK)
            st = forge_gemm_bf16_tn_wgmma(dlt, wte, prod, rows, C, V, 0, ctx->tn_ws, ctx->tn_ws_bytes, ctx->stream,
                                          ctx->pdl);
        if (cls16_refused(st)) st = cls16_gemm_simt<false>(ctx, prod, dlt, wte, rows, C, V, 1, rows, C, 1, C, 0);
        FORGE_TRY(st);
        const size_t nd = (size_t)rows * C;
        const unsigned grid = cuda_grid_for(ctx, nd, CLS16_EW_THREADS);
        CUDA_LAUNCH_TRY(forge_pdl_launch(accumulate ? cls16_dinp_kernel<true> : cls16_dinp_kernel<false>, grid,
                                         CLS16_EW_THREADS, 0, ctx->stream, ctx->pdl, (uint16_t *)di, prod, nullptr,
                                         (const uint16_t *)wte, rows, C, V, 0),
                        "cls16_dinp_kernel");
    }
    if (dwte) {
        forge_status st = forge_gemm_bf16_nn_wgmma(dlt, in, dwte, V, C, rows, 1, ctx->stream, ctx->pdl);
        if (cls16_refused(st)) st = cls16_gemm_simt<false>(ctx, dwte, dlt, in, V, C, rows, rows, 1, C, 1, C, 1);
        FORGE_TRY(st);
    }
    return FORGE_OK;
}

forge_status cuda_classifier_bf16(forge_backend *be, float *losses, forge_bf16 *dinp, float *dwte, float *scratch,
                                  const forge_bf16 *inp, const forge_bf16 *wte, const int32_t *targets, int N, int C,
                                  int V, int ignore_index, float grad_scale, int accumulate, int chunk_rows) {
    if (N < 0 || C <= 0 || V <= 0)
        return forge_error(FORGE_ERR_ARG, "cuda classifier_bf16: need N >= 0, C > 0, V > 0, got N=%d C=%d V=%d", N,
                           C, V);
    if (N == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    const int R = FORGE_CLS_BF16_ROWS(N, V, chunk_rows), Q = R > 1 ? R / 2 : 1, V8 = V - V % 8, VT = V % 8;
    /* transposed: logits^T (R*V), the product (R*C) */
    uint16_t *xt = (uint16_t *)cls16_align16(scratch);
    float *prod_t = (float *)cls16_align16(xt + (size_t)R * V);
    /* row layout, Q rows: logits (Q*V), dlogits (Q*V8), their tail (Q*VT), the product (Q*C) */
    uint16_t *logits = xt;
    uint16_t *dl = (uint16_t *)cls16_align16(logits + (size_t)Q * V);
    uint16_t *dl_tail = dl + (size_t)Q * V8; /* Q*V8*2 bytes: a multiple of 16 */
    float *prod = (float *)cls16_align16(dl_tail + (size_t)Q * VT);
    forge_gemm_epilogue epi;
    memset(&epi, 0, sizeof epi);
    epi.out_bf16 = 1;

    for (int n0 = 0, rows = 0; n0 < N; n0 += rows) {
        rows = N - n0 < R ? N - n0 : R;
        const forge_bf16 *in = inp + (size_t)n0 * C;
        forge_bf16 *di = dinp ? dinp + (size_t)n0 * C : nullptr;
        if (rows >= 8 && C % 8 == 0) { /* every GEMM on the wgmma path with a 16-byte row stride */
            rows -= rows % 8;
            FORGE_TRY(cls16t_chunk(ctx, losses, di, dwte, xt, prod_t, in, wte, targets, n0, rows, C, V, ignore_index,
                                   grad_scale, accumulate));
            continue;
        }
        if (rows > Q) rows = Q;
        /* 1. logits = rn(in . wte^T) */
        if (cls16_refused(forge_gemm_bf16_nt_epi(in, wte, logits, rows, V, C, &epi, ctx->stream, ctx->pdl)))
            FORGE_TRY(cls16_gemm_simt<true>(ctx, logits, in, wte, rows, V, C, C, 1, 1, C, V, 0));
        /* 2. losses and dlogits */
        CUDA_LAUNCH_TRY(forge_pdl_launch(cls16_softmax_kernel, rows, CLS16_THREADS, 0, ctx->stream, ctx->pdl, losses,
                                         dl, dl_tail, logits, targets, n0, V, V8, ignore_index, grad_scale,
                                         ctx->input_error),
                        "cls16_softmax_kernel");
        /* 3. dinp = rn(dinp + dl . wte): the first V8 columns by GEMM, the tail in the rounding pass */
        if (dinp && V8 > 0) {
            forge_status st = forge_gemm_bf16_nn_wgmma(dl, wte, prod, rows, C, V8, 0, ctx->stream, ctx->pdl);
            if (cls16_refused(st)) st = cls16_gemm_simt<false>(ctx, prod, (const forge_bf16 *)dl, wte, rows, C, V8, V8,
                                                               1, C, 1, C, 0);
            FORGE_TRY(st);
        }
        const size_t nd = dinp ? (size_t)rows * C : 0;
        if (nd) {
            const unsigned grid = cuda_grid_for(ctx, nd, CLS16_EW_THREADS);
            CUDA_LAUNCH_TRY(forge_pdl_launch(accumulate ? cls16_dinp_kernel<true> : cls16_dinp_kernel<false>, grid,
                                             CLS16_EW_THREADS, 0, ctx->stream, ctx->pdl, (uint16_t *)di,
                                             V8 > 0 ? prod : nullptr, dl_tail, (const uint16_t *)wte, rows, C, V8, VT),
                            "cls16_dinp_kernel");
        }
        /* 4. dwte += dl^T . in: the first V8 rows by GEMM, the tail rows by their own pass */
        if (dwte && V8 > 0) {
            forge_status st =
                forge_gemm_bf16_tn_wgmma(dl, in, dwte, V8, C, rows, 1, nullptr, 0, ctx->stream, ctx->pdl);
            if (cls16_refused(st)) st = cls16_gemm_simt<false>(ctx, dwte, (const forge_bf16 *)dl, in, V8, C, rows, 1,
                                                               V8, C, 1, C, 1);
            FORGE_TRY(st);
        }
        if (dwte && VT > 0) {
            const dim3 grid((unsigned)((C + 31) / 32), (unsigned)VT), block(32, CLS16_TAIL_LANES);
            CUDA_LAUNCH_TRY(forge_pdl_launch(cls16_dwte_tail_kernel, grid, block, 0, ctx->stream, ctx->pdl, dwte,
                                             dl_tail, (const uint16_t *)in, rows, C, V8, VT),
                            "cls16_dwte_tail_kernel");
        }
    }
    return FORGE_OK;
}
