/*
 * layernorm.cu: LayerNorm over C on the GPU (GPT-2).
 *
 *   forward   out = (x - mean) * rstd * weight + bias, rstd = 1/sqrt(var + eps);
 *             saves mean, rstd (N). var is the biased variance, computed in a
 *             second pass over (x - mean)^2 like the CPU reference (not
 *             E[x^2] - mean^2, which cancels badly).
 *   backward  with norm = (x - mean) * rstd and g = weight * dout:
 *             dinp    += rstd * (g - mean(g) - norm * mean(g * norm))
 *             dweight += sum_n dout * norm ;  dbias += sum_n dout
 *
 * One warp per row for the per-row work (row reductions by xor shuffles).
 * dweight/dbias are column sums over all N rows: the ordered two-pass
 * reduction of reduce.cu, never atomics, so results are deterministic.
 */
#include "cuda_ops.h"

#define LN_THREADS 256 /* 8 rows per block, one warp each */
#define LN_COL_ROWS 8  /* threads along the rows of a dweight block: 32 columns x 8 */

/* ---- kernels ------------------------------------------------------------ */

__global__ void __launch_bounds__(LN_THREADS)
    layernorm_forward_kernel(float *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
                             const float *__restrict__ inp, const float *__restrict__ weight,
                             const float *__restrict__ bias, int N, int C, float eps) {
    int n = blockIdx.x * (LN_THREADS / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (n >= N) return; /* uniform over the warp */
    const float *x = inp + (size_t)n * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += x[i];
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = x[i] - m;
        var += d * d;
    }
    var = warp_sum(var) / C;
    float s = 1.0f / sqrtf(var + eps);
    float *o = out + (size_t)n * C;
    for (int i = lane; i < C; i += 32) o[i] = (x[i] - m) * s * weight[i] + bias[i];
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = s;
    }
}

__global__ void __launch_bounds__(LN_THREADS)
    layernorm_backward_input_kernel(float *__restrict__ dinp, const float *__restrict__ dout,
                                    const float *__restrict__ inp, const float *__restrict__ weight,
                                    const float *__restrict__ mean, const float *__restrict__ rstd,
                                    int N, int C) {
    int n = blockIdx.x * (LN_THREADS / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (n >= N) return;
    const float *x = inp + (size_t)n * C;
    const float *g = dout + (size_t)n * C;
    float m = mean[n], s = rstd[n];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float norm = (x[i] - m) * s;
        float dnorm = weight[i] * g[i];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean = warp_sum(dnorm_mean) / C;
    dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
    float *dx = dinp + (size_t)n * C;
    for (int i = lane; i < C; i += 32) {
        float norm = (x[i] - m) * s;
        float dnorm = weight[i] * g[i];
        dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
}

/* partials: dw (R,C) then db (R,C); grid (ceil(C/32), R), block (32, LN_COL_ROWS) */
__global__ void layernorm_param_partial_kernel(float *__restrict__ partial, const float *__restrict__ dout,
                                               const float *__restrict__ inp,
                                               const float *__restrict__ mean,
                                               const float *__restrict__ rstd, int N, int C,
                                               int rows_per_chunk) {
    __shared__ float sw[LN_COL_ROWS][33], sb[LN_COL_ROWS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int n_begin = blockIdx.y * rows_per_chunk;
    int n_end = min(N, n_begin + rows_per_chunk);
    float dw = 0.0f, db = 0.0f;
    if (c < C) {
        for (int n = n_begin + threadIdx.y; n < n_end; n += LN_COL_ROWS) {
            size_t off = (size_t)n * C + c;
            float g = dout[off];
            dw += (inp[off] - mean[n]) * rstd[n] * g;
            db += g;
        }
    }
    sw[threadIdx.y][threadIdx.x] = dw;
    sb[threadIdx.y][threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
#pragma unroll
        for (int r = 0; r < LN_COL_ROWS; r++) {
            tw += sw[r][threadIdx.x];
            tb += sb[r][threadIdx.x];
        }
        size_t R = gridDim.y;
        partial[(size_t)blockIdx.y * C + c] = tw;
        partial[(R + blockIdx.y) * C + c] = tb;
    }
}

/* ---- launchers ---------------------------------------------------------- */

forge_status cuda_layernorm_forward(forge_backend *be, float *out, float *mean, float *rstd,
                                    const float *inp, const float *weight, const float *bias, int N,
                                    int C, float eps) {
    if (C <= 0) return forge_error(FORGE_ERR_ARG, "cuda layernorm_forward: C must be > 0, got %d", C);
    if (N <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    int rows_per_block = LN_THREADS / 32;
    layernorm_forward_kernel<<<(N + rows_per_block - 1) / rows_per_block, LN_THREADS, 0, ctx->stream>>>(
        out, mean, rstd, inp, weight, bias, N, C, eps);
    CUDA_LAUNCH_CHECK("layernorm_forward_kernel");
    return FORGE_OK;
}

forge_status cuda_layernorm_backward(forge_backend *be, float *dinp, float *dweight, float *dbias,
                                     const float *dout, const float *inp, const float *weight,
                                     const float *mean, const float *rstd, int N, int C) {
    if (C <= 0) return forge_error(FORGE_ERR_ARG, "cuda layernorm_backward: C must be > 0, got %d", C);
    if (N <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    int rows_per_block = LN_THREADS / 32;
    layernorm_backward_input_kernel<<<(N + rows_per_block - 1) / rows_per_block, LN_THREADS, 0,
                                      ctx->stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
    CUDA_LAUNCH_CHECK("layernorm_backward_input_kernel");

    int R = cuda_colsum_chunks(N, C, 2);
    if (R == 0)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "cuda layernorm_backward: C = %d too wide for the reduction workspace", C);
    int rows_per_chunk = (N + R - 1) / R;
    dim3 grid((C + 31) / 32, R), block(32, LN_COL_ROWS);
    layernorm_param_partial_kernel<<<grid, block, 0, ctx->stream>>>(ctx->ws, dout, inp, mean, rstd, N, C,
                                                                    rows_per_chunk);
    CUDA_LAUNCH_CHECK("layernorm_param_partial_kernel");
    FORGE_TRY(cuda_colsum_finish(ctx, dweight, ctx->ws, R, C));
    FORGE_TRY(cuda_colsum_finish(ctx, dbias, ctx->ws + (size_t)R * C, R, C));
    return FORGE_OK;
}
