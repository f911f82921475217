/*
 * norm_bf16.cu: the bf16 LayerNorm and RMSNorm on the GPU; the reference is backend/cpu/norm_bf16.c, whose file
 * comment gives the formulas and rounding points (docs/mixed-precision.md).
 *
 * Bit-identical to the CPU reference, by construction: one warp per row, lane l owning the 8-wide chunks l,
 * l + 32, l + 64, ... of the row and adding its elements in index order into one fp32 partial, then warp_sum's
 * xor butterflies. That is the order the reference's loops spell out, so mean, rstd, the backward's row means
 * and every output agree to the bit (the walker checks ULP(0) and EXACT). Each product that meets a sum is an
 * fmaf here and there, or rounds on its own: __fmul_rn, since nvcc would otherwise contract a*b + c into an fma
 * the reference does not compute. sqrtf and '/' are IEEE (no fast math).
 *
 * Chunks are 16-byte vectors when C % 8 == 0 and every pointer is 16-byte aligned (VEC), element by element
 * otherwise; the order is the same. Each pass re-reads the row (L1/L2-resident: 8 rows per block). The residual
 * forms write res in the first pass and read it back in the next ones (the same lane reads what it wrote), so
 * res may be a or b; hence no __restrict__ on those pointers.
 *
 * dweight/dbias sum over the N rows: one partial row per row chunk in ctx->ws, then an ordered finish (reduce.cu's,
 * or the fused path's norm_fused_finish with the same order and bits; deterministic, no atomics; the order differs
 * from the reference's row loop: the walker's SUM(N)). On the VEC path
 * with C <= NB_FUSED_MAX_C the backward is one fused kernel (norm_bf16_fused.cuh): each block walks a fixed,
 * contiguous range of rows (its warps interleaved over it), computes dinp as the row kernel does from the row's
 * bf16 inputs streamed into shared memory a few rows ahead, and keeps the column sums of dout x-hat and dout in
 * per-lane registers; the block's 8 warps' sums are then added in warp order into the block's partial row. The
 * block count depends on N and the SM count, so the bits of dweight/dbias are fixed for given arguments on a given
 * device. Other shapes run dinp per row, then a column kernel that re-reads dout and inp for the partials.
 *
 * Every kernel here launches with programmatic dependent launch (pdl.cuh): each waits for the previous kernel
 * (forge_pdl_wait) before its first global access.
 */
#include "norm_bf16_fused.cuh"

#define NB_COL_ROWS 8 /* threads along the rows of a parameter-gradient block: 32 columns x 8 */

/* ---- the row pass: chunk c0 (a multiple of 8) of a row ------------------------------------------------------- */

/* W = 8: the whole chunk lies inside the row (VEC: C % 8 == 0); W = 1: element by element, c0 + k < C checked */
template <bool VEC>
__device__ __forceinline__ bool in_row(int c0, int k, int C) {
    return VEC || c0 + k < C;
}

template <bool VEC>
__device__ __forceinline__ void load_row_bf16(float v[8], const forge_bf16 *row, int c0, int C) {
    if (VEC) {
        bf16_load<8>(v, row + c0);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = c0 + k < C ? bf16_to_f32(row[c0 + k]) : 0.0f;
    }
}

template <bool VEC>
__device__ __forceinline__ void load_row_f32(float v[8], const float *row, int c0, int C) {
    if (VEC) {
        f32_load<8>(v, row + c0);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = c0 + k < C ? row[c0 + k] : 0.0f;
    }
}

template <bool VEC>
__device__ __forceinline__ void store_row_bf16(forge_bf16 *row, const float v[8], int c0, int C) {
    if (VEC) {
        bf16_store<8>(row + c0, v);
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (c0 + k < C) row[c0 + k] = f32_to_bf16(v[k]);
    }
}

/* x = the row's input chunk: inp's, or (RES) rn(a + b), written to res first in the first pass, read back after */
template <bool VEC, bool RES, bool FIRST>
__device__ __forceinline__ void load_input(float x[8], forge_bf16 *res, const forge_bf16 *a, const forge_bf16 *b,
                                           int c0, int C) {
    if (RES && FIRST) {
        float y[8];
        load_row_bf16<VEC>(x, a, c0, C);
        load_row_bf16<VEC>(y, b, c0, C);
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = bf16_to_f32(f32_to_bf16(x[k] + y[k]));
        store_row_bf16<VEC>(res, x, c0, C);
    } else {
        load_row_bf16<VEC>(x, RES ? res : a, c0, C);
    }
}

/* ---- forward kernels ------------------------------------------------------------------------------------------ */

/* RES: res = rn(a + b) and the norm of res; else the norm of a (= inp). res, a, b row-offset by the kernel. */
template <bool VEC, bool RES>
__global__ void __launch_bounds__(NB_THREADS)
    layernorm_forward_bf16_kernel(forge_bf16 *res, forge_bf16 *out, float *__restrict__ mean,
                                  float *__restrict__ rstd, const forge_bf16 *a, const forge_bf16 *b,
                                  const float *__restrict__ weight, const float *__restrict__ bias, int N, int C,
                                  float eps) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const int n = blockIdx.x * NB_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return; /* uniform over the warp */
    const size_t off = (size_t)n * C;
    forge_bf16 *r = RES ? res + off : nullptr;
    const forge_bf16 *ar = a + off, *br = RES ? b + off : nullptr;
    float sum = 0.0f;
    for (int c0 = lane * 8; c0 < C; c0 += 32 * 8) {
        float x[8];
        load_input<VEC, RES, true>(x, r, ar, br, c0, C);
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (in_row<VEC>(c0, k, C)) sum += x[k];
    }
    const float m = warp_sum(sum) / (float)C;
    float var = 0.0f;
    for (int c0 = lane * 8; c0 < C; c0 += 32 * 8) {
        float x[8];
        load_input<VEC, RES, false>(x, r, ar, br, c0, C);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float d = x[k] - m;
            if (in_row<VEC>(c0, k, C)) var = fmaf(d, d, var);
        }
    }
    const float s = 1.0f / sqrtf(warp_sum(var) / (float)C + eps);
    forge_bf16 *o = out + off;
    for (int c0 = lane * 8; c0 < C; c0 += 32 * 8) {
        float x[8], w[8], bb[8], y[8];
        load_input<VEC, RES, false>(x, r, ar, br, c0, C);
        load_row_f32<VEC>(w, weight, c0, C);
        load_row_f32<VEC>(bb, bias, c0, C);
#pragma unroll
        for (int k = 0; k < 8; k++) y[k] = fmaf((x[k] - m) * s, w[k], bb[k]);
        store_row_bf16<VEC>(o, y, c0, C);
    }
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = s;
    }
}

template <bool VEC, bool RES>
__global__ void __launch_bounds__(NB_THREADS)
    rmsnorm_forward_bf16_kernel(forge_bf16 *res, forge_bf16 *out, float *__restrict__ rstd, const forge_bf16 *a,
                                const forge_bf16 *b, const float *__restrict__ weight, int N, int C, float eps) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const int n = blockIdx.x * NB_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    const size_t off = (size_t)n * C;
    forge_bf16 *r = RES ? res + off : nullptr;
    const forge_bf16 *ar = a + off, *br = RES ? b + off : nullptr;
    float ss = 0.0f;
    for (int c0 = lane * 8; c0 < C; c0 += 32 * 8) {
        float x[8];
        load_input<VEC, RES, true>(x, r, ar, br, c0, C);
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (in_row<VEC>(c0, k, C)) ss = fmaf(x[k], x[k], ss);
    }
    const float s = 1.0f / sqrtf(warp_sum(ss) / (float)C + eps);
    forge_bf16 *o = out + off;
    for (int c0 = lane * 8; c0 < C; c0 += 32 * 8) {
        float x[8], w[8], y[8];
        load_input<VEC, RES, false>(x, r, ar, br, c0, C);
        load_row_f32<VEC>(w, weight, c0, C);
#pragma unroll
        for (int k = 0; k < 8; k++) y[k] = x[k] * s * w[k];
        store_row_bf16<VEC>(o, y, c0, C);
    }
    if (lane == 0) rstd[n] = s;
}

/* ---- backward: dinp per row ----------------------------------------------------------------------------------- */

/* LN: dx = rstd (g - mean(g) - x-hat mean(g x-hat)), x-hat = (x - mean) rstd; !LN (RMSNorm): no mean(g) term and
 * x-hat = x rstd. g = weight dout. ACC: dinp = rn(dinp + dx); else dinp = rn(0 + dx), written without being read
 * (a fresh gradient: the bits of an add into a zeroed one). */
template <bool VEC, bool LN, bool ACC>
__global__ void __launch_bounds__(NB_THREADS)
    norm_backward_input_bf16_kernel(forge_bf16 *__restrict__ dinp, const forge_bf16 *__restrict__ dout,
                                    const forge_bf16 *__restrict__ inp, const float *__restrict__ weight,
                                    const float *__restrict__ mean, const float *__restrict__ rstd, int N, int C) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const int n = blockIdx.x * NB_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (n >= N) return;
    const size_t off = (size_t)n * C;
    const forge_bf16 *xr = inp + off, *gr = dout + off;
    forge_bf16 *dr = dinp + off;
    const float m = LN ? mean[n] : 0.0f, s = rstd[n];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int c0 = lane * 8; c0 < C; c0 += 32 * 8) {
        float x[8], g[8], w[8];
        load_row_bf16<VEC>(x, xr, c0, C);
        load_row_bf16<VEC>(g, gr, c0, C);
        load_row_f32<VEC>(w, weight, c0, C);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float xh = LN ? (x[k] - m) * s : x[k] * s, dn = __fmul_rn(w[k], g[k]);
            if (in_row<VEC>(c0, k, C)) {
                if (LN) sum_g += dn;
                sum_gx = fmaf(dn, xh, sum_gx);
            }
        }
    }
    const float g_mean = LN ? warp_sum(sum_g) / (float)C : 0.0f;
    const float gx_mean = warp_sum(sum_gx) / (float)C;
    for (int c0 = lane * 8; c0 < C; c0 += 32 * 8) {
        float x[8], g[8], w[8], d[8];
        load_row_bf16<VEC>(x, xr, c0, C);
        load_row_bf16<VEC>(g, gr, c0, C);
        load_row_f32<VEC>(w, weight, c0, C);
        if (ACC) {
            load_row_bf16<VEC>(d, dr, c0, C);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) d[k] = 0.0f;
        }
        norm_dx8<LN>(d, x, g, w, m, s, g_mean, gx_mean);
        store_row_bf16<VEC>(dr, d, c0, C);
    }
}

/* ---- backward: dweight (and LN: dbias) partials over row chunks --------------------------------------------------
 * partial: dw (R, C) then (LN) db (R, C); grid (ceil(C/32), R), block (32, NB_COL_ROWS) */
template <bool LN>
__global__ void norm_param_partial_bf16_kernel(float *__restrict__ partial, const forge_bf16 *__restrict__ dout,
                                               const forge_bf16 *__restrict__ inp, const float *__restrict__ mean,
                                               const float *__restrict__ rstd, int N, int C, int rows_per_chunk) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    __shared__ float sw[NB_COL_ROWS][33], sb[NB_COL_ROWS][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const int n_begin = blockIdx.y * rows_per_chunk, n_end = min(N, n_begin + rows_per_chunk);
    float dw = 0.0f, db = 0.0f;
    if (c < C) {
        for (int n = n_begin + threadIdx.y; n < n_end; n += NB_COL_ROWS) {
            const size_t o = (size_t)n * C + c;
            const float g = bf16_to_f32(dout[o]), x = bf16_to_f32(inp[o]);
            const float xh = LN ? (x - mean[n]) * rstd[n] : x * rstd[n];
            dw = fmaf(g, xh, dw);
            db += g;
        }
    }
    sw[threadIdx.y][threadIdx.x] = dw;
    sb[threadIdx.y][threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
#pragma unroll
        for (int r = 0; r < NB_COL_ROWS; r++) {
            tw += sw[r][threadIdx.x];
            tb += sb[r][threadIdx.x];
        }
        partial[(size_t)blockIdx.y * C + c] = tw;
        if (LN) partial[((size_t)gridDim.y + blockIdx.y) * C + c] = tb;
    }
}

/* ---- launchers ------------------------------------------------------------------------------------------------ */

static forge_status check_c(const char *op, int C) {
    return C > 0 ? FORGE_OK : forge_error(FORGE_ERR_ARG, "cuda %s: C must be > 0, got %d", op, C);
}

static unsigned row_blocks(int N) { return (unsigned)((N + NB_ROWS - 1) / NB_ROWS); }

/* 16-byte chunks: C % 8 == 0 and every pointer aligned (NULL counts as aligned) */
static bool use_vec(int C, const void *p0, const void *p1, const void *p2, const void *p3, const void *p4,
                    const void *p5) {
    return C % 8 == 0 && bf16_aligned16(p0) && bf16_aligned16(p1) && bf16_aligned16(p2) && bf16_aligned16(p3) &&
           bf16_aligned16(p4) && bf16_aligned16(p5);
}

template <bool RES>
static forge_status layernorm_forward_launch(forge_backend *be, forge_bf16 *res, forge_bf16 *out, float *mean,
                                             float *rstd, const forge_bf16 *a, const forge_bf16 *b,
                                             const float *weight, const float *bias, int N, int C, float eps,
                                             const char *op) {
    FORGE_TRY(check_c(op, C));
    if (N <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    const auto kern = use_vec(C, res, out, a, b, weight, bias) ? layernorm_forward_bf16_kernel<true, RES>
                                                                : layernorm_forward_bf16_kernel<false, RES>;
    CUDA_LAUNCH_TRY(forge_pdl_launch(kern, row_blocks(N), NB_THREADS, 0, ctx->stream, ctx->pdl, res, out, mean, rstd, a,
                                     b, weight, bias, N, C, eps),
                    "layernorm_forward_bf16_kernel");
    return FORGE_OK;
}

template <bool RES>
static forge_status rmsnorm_forward_launch(forge_backend *be, forge_bf16 *res, forge_bf16 *out, float *rstd,
                                           const forge_bf16 *a, const forge_bf16 *b, const float *weight, int N,
                                           int C, float eps, const char *op) {
    FORGE_TRY(check_c(op, C));
    if (N <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    const auto kern = use_vec(C, res, out, a, b, weight, NULL) ? rmsnorm_forward_bf16_kernel<true, RES>
                                                                : rmsnorm_forward_bf16_kernel<false, RES>;
    CUDA_LAUNCH_TRY(forge_pdl_launch(kern, row_blocks(N), NB_THREADS, 0, ctx->stream, ctx->pdl, res, out, rstd, a, b,
                                     weight, N, C, eps),
                    "rmsnorm_forward_bf16_kernel");
    return FORGE_OK;
}

/* the fused kernel for CH = ceil(C / 256) chunks per lane, with its default stage count */
template <bool LN, bool ACC>
static cudaError_t norm_backward_fused_launch(cuda_ctx *ctx, unsigned R, forge_bf16 *dinp, const forge_bf16 *dout,
                                              const forge_bf16 *inp, const float *weight, const float *mean,
                                              const float *rstd, int N, int C, int rows_per_block) {
    switch ((C + 32 * 8 - 1) / (32 * 8)) {
    case 1:
        return norm_fused_launch<LN, ACC, 1, norm_fused_stages<1>()>(ctx->stream, ctx->pdl, R, dinp, ctx->ws, dout,
                                                                     inp, weight, mean, rstd, N, C, rows_per_block);
    case 2:
        return norm_fused_launch<LN, ACC, 2, norm_fused_stages<2>()>(ctx->stream, ctx->pdl, R, dinp, ctx->ws, dout,
                                                                     inp, weight, mean, rstd, N, C, rows_per_block);
    case 3:
        return norm_fused_launch<LN, ACC, 3, norm_fused_stages<3>()>(ctx->stream, ctx->pdl, R, dinp, ctx->ws, dout,
                                                                     inp, weight, mean, rstd, N, C, rows_per_block);
    default:
        return norm_fused_launch<LN, ACC, NB_FUSED_MAX_CHUNKS, norm_fused_stages<NB_FUSED_MAX_CHUNKS>()>(
            ctx->stream, ctx->pdl, R, dinp, ctx->ws, dout, inp, weight, mean, rstd, N, C, rows_per_block);
    }
}

/* VEC and C <= NB_FUSED_MAX_C: the fused kernel, dinp and R block partials in one pass over the rows, then
 * norm_fused_finish. Otherwise dinp per row, then R row-chunk partials from the scalar column kernel, then reduce.cu's
 * cuda_colsum_finish. Either finish adds the partials into dweight (and dbias) in row-chunk order. */
template <bool LN>
static forge_status norm_backward_launch(forge_backend *be, forge_bf16 *dinp, float *dweight, float *dbias,
                                         const forge_bf16 *dout, const forge_bf16 *inp, const float *weight,
                                         const float *mean, const float *rstd, int N, int C, int accumulate,
                                         const char *op) {
    FORGE_TRY(check_c(op, C));
    if (N <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    const int n_out = LN ? 2 : 1;
    const bool vec = use_vec(C, dinp, dout, inp, weight, NULL, NULL);
    if (vec && C <= NB_FUSED_MAX_C) {
        int rows_per_block;
        const int R = norm_fused_grid(N, C, n_out, ctx->num_sms, &rows_per_block);
        const cudaError_t e =
            accumulate ? norm_backward_fused_launch<LN, true>(ctx, (unsigned)R, dinp, dout, inp, weight, mean, rstd,
                                                              N, C, rows_per_block)
                       : norm_backward_fused_launch<LN, false>(ctx, (unsigned)R, dinp, dout, inp, weight, mean, rstd,
                                                               N, C, rows_per_block);
        if (e != cudaSuccess)
            return forge_error(FORGE_ERR_DEVICE, "cuda %s: norm_backward_fused_bf16_kernel: %s", op,
                               cudaGetErrorString(e));
        const cudaError_t ef = norm_fused_finish(ctx->stream, ctx->pdl, LN, dweight, dbias, ctx->ws, R, C);
        if (ef != cudaSuccess)
            return forge_error(FORGE_ERR_DEVICE, "cuda %s: norm_fused_finish_kernel: %s", op, cudaGetErrorString(ef));
        return FORGE_OK;
    }

    auto input_kernel = vec && accumulate ? norm_backward_input_bf16_kernel<true, LN, true>
                        : vec             ? norm_backward_input_bf16_kernel<true, LN, false>
                        : accumulate      ? norm_backward_input_bf16_kernel<false, LN, true>
                                          : norm_backward_input_bf16_kernel<false, LN, false>;
    CUDA_LAUNCH_TRY(forge_pdl_launch(input_kernel, row_blocks(N), NB_THREADS, 0, ctx->stream, ctx->pdl, dinp, dout, inp,
                                     weight, mean, rstd, N, C),
                    "norm_backward_input_bf16_kernel");

    const int R = cuda_colsum_chunks(N, C, n_out);
    if (R == 0)
        return forge_error(FORGE_ERR_UNSUPPORTED, "cuda %s: C = %d too wide for the reduction workspace", op, C);
    const int rows_per_chunk = (N + R - 1) / R;
    dim3 grid((C + 31) / 32, R), block(32, NB_COL_ROWS);
    CUDA_LAUNCH_TRY(forge_pdl_launch(norm_param_partial_bf16_kernel<LN>, grid, block, 0, ctx->stream, ctx->pdl, ctx->ws,
                                     dout, inp, mean, rstd, N, C, rows_per_chunk),
                    "norm_param_partial_bf16_kernel");
    FORGE_TRY(cuda_colsum_finish(ctx, dweight, ctx->ws, R, C));
    if (LN) FORGE_TRY(cuda_colsum_finish(ctx, dbias, ctx->ws + (size_t)R * C, R, C));
    return FORGE_OK;
}

forge_status cuda_layernorm_forward_bf16(forge_backend *be, forge_bf16 *out, float *mean, float *rstd,
                                         const forge_bf16 *inp, const float *weight, const float *bias, int N, int C,
                                         float eps) {
    return layernorm_forward_launch<false>(be, NULL, out, mean, rstd, inp, NULL, weight, bias, N, C, eps,
                                           "layernorm_forward_bf16");
}

forge_status cuda_residual_layernorm_forward_bf16(forge_backend *be, forge_bf16 *res, forge_bf16 *out, float *mean,
                                                  float *rstd, const forge_bf16 *a, const forge_bf16 *b,
                                                  const float *weight, const float *bias, int N, int C, float eps) {
    return layernorm_forward_launch<true>(be, res, out, mean, rstd, a, b, weight, bias, N, C, eps,
                                          "residual_layernorm_forward_bf16");
}

forge_status cuda_layernorm_backward_bf16(forge_backend *be, forge_bf16 *dinp, float *dweight, float *dbias,
                                          const forge_bf16 *dout, const forge_bf16 *inp, const float *weight,
                                          const float *mean, const float *rstd, int N, int C, int accumulate) {
    return norm_backward_launch<true>(be, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate,
                                      "layernorm_backward_bf16");
}

forge_status cuda_rmsnorm_forward_bf16(forge_backend *be, forge_bf16 *out, float *rstd, const forge_bf16 *inp,
                                       const float *weight, int N, int C, float eps) {
    return rmsnorm_forward_launch<false>(be, NULL, out, rstd, inp, NULL, weight, N, C, eps, "rmsnorm_forward_bf16");
}

forge_status cuda_residual_rmsnorm_forward_bf16(forge_backend *be, forge_bf16 *res, forge_bf16 *out, float *rstd,
                                                const forge_bf16 *a, const forge_bf16 *b, const float *weight, int N,
                                                int C, float eps) {
    return rmsnorm_forward_launch<true>(be, res, out, rstd, a, b, weight, N, C, eps,
                                        "residual_rmsnorm_forward_bf16");
}

forge_status cuda_rmsnorm_backward_bf16(forge_backend *be, forge_bf16 *dinp, float *dweight, const forge_bf16 *dout,
                                        const forge_bf16 *inp, const float *weight, const float *rstd, int N, int C,
                                        int accumulate) {
    return norm_backward_launch<false>(be, dinp, dweight, NULL, dout, inp, weight, NULL, rstd, N, C, accumulate,
                                       "rmsnorm_backward_bf16");
}
