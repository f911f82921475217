/*
 * rmsnorm.cu: RMSNorm over C on the GPU (Llama).
 *
 *   forward   out = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps); saves rstd (N)
 *   backward  with xhat = x * rstd and g = weight * dout:
 *             dinp    += rstd * (g - xhat * mean(g * xhat))
 *             dweight += sum_n dout * xhat
 *
 * No mean, no bias. One warp per row; dweight through the ordered two-pass
 * column sum of reduce.cu (deterministic, no atomics).
 */
#include "cuda_ops.h"

#define RMS_THREADS 256 /* 8 rows per block, one warp each */
#define RMS_COL_ROWS 8

/* ---- kernels ------------------------------------------------------------ */

__global__ void __launch_bounds__(RMS_THREADS)
    rmsnorm_forward_kernel(float *__restrict__ out, float *__restrict__ rstd, const float *__restrict__ inp,
                           const float *__restrict__ weight, int N, int C, float eps) {
    int n = blockIdx.x * (RMS_THREADS / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (n >= N) return;
    const float *x = inp + (size_t)n * C;
    float ss = 0.0f;
    for (int i = lane; i < C; i += 32) ss += x[i] * x[i];
    ss = warp_sum(ss);
    float s = 1.0f / sqrtf(ss / C + eps);
    float *o = out + (size_t)n * C;
    for (int i = lane; i < C; i += 32) o[i] = x[i] * s * weight[i];
    if (lane == 0) rstd[n] = s;
}

__global__ void __launch_bounds__(RMS_THREADS)
    rmsnorm_backward_input_kernel(float *__restrict__ dinp, const float *__restrict__ dout,
                                  const float *__restrict__ inp, const float *__restrict__ weight,
                                  const float *__restrict__ rstd, int N, int C) {
    int n = blockIdx.x * (RMS_THREADS / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (n >= N) return;
    const float *x = inp + (size_t)n * C;
    const float *g = dout + (size_t)n * C;
    float s = rstd[n];
    float gx = 0.0f;
    for (int i = lane; i < C; i += 32) gx += weight[i] * g[i] * (x[i] * s);
    gx = warp_sum(gx) / C;
    float *dx = dinp + (size_t)n * C;
    for (int i = lane; i < C; i += 32) dx[i] += (weight[i] * g[i] - x[i] * s * gx) * s;
}

/* partial dw (R,C); grid (ceil(C/32), R), block (32, RMS_COL_ROWS) */
__global__ void rmsnorm_param_partial_kernel(float *__restrict__ partial, const float *__restrict__ dout,
                                             const float *__restrict__ inp,
                                             const float *__restrict__ rstd, int N, int C,
                                             int rows_per_chunk) {
    __shared__ float sw[RMS_COL_ROWS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int n_begin = blockIdx.y * rows_per_chunk;
    int n_end = min(N, n_begin + rows_per_chunk);
    float dw = 0.0f;
    if (c < C) {
        for (int n = n_begin + threadIdx.y; n < n_end; n += RMS_COL_ROWS) {
            size_t off = (size_t)n * C + c;
            dw += inp[off] * rstd[n] * dout[off];
        }
    }
    sw[threadIdx.y][threadIdx.x] = dw;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f;
#pragma unroll
        for (int r = 0; r < RMS_COL_ROWS; r++) tw += sw[r][threadIdx.x];
        partial[(size_t)blockIdx.y * C + c] = tw;
    }
}

/* ---- launchers ---------------------------------------------------------- */

forge_status cuda_rmsnorm_forward(forge_backend *be, float *out, float *rstd, const float *inp,
                                  const float *weight, int N, int C, float eps) {
    if (C <= 0) return forge_error(FORGE_ERR_ARG, "cuda rmsnorm_forward: C must be > 0, got %d", C);
    if (N <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    int rows_per_block = RMS_THREADS / 32;
    rmsnorm_forward_kernel<<<(N + rows_per_block - 1) / rows_per_block, RMS_THREADS, 0, ctx->stream>>>(
        out, rstd, inp, weight, N, C, eps);
    CUDA_LAUNCH_CHECK("rmsnorm_forward_kernel");
    return FORGE_OK;
}

forge_status cuda_rmsnorm_backward(forge_backend *be, float *dinp, float *dweight, const float *dout,
                                   const float *inp, const float *weight, const float *rstd, int N,
                                   int C) {
    if (C <= 0) return forge_error(FORGE_ERR_ARG, "cuda rmsnorm_backward: C must be > 0, got %d", C);
    if (N <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    int rows_per_block = RMS_THREADS / 32;
    rmsnorm_backward_input_kernel<<<(N + rows_per_block - 1) / rows_per_block, RMS_THREADS, 0,
                                    ctx->stream>>>(dinp, dout, inp, weight, rstd, N, C);
    CUDA_LAUNCH_CHECK("rmsnorm_backward_input_kernel");

    int R = cuda_colsum_chunks(N, C, 1);
    if (R == 0)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "cuda rmsnorm_backward: C = %d too wide for the reduction workspace", C);
    int rows_per_chunk = (N + R - 1) / R;
    dim3 grid((C + 31) / 32, R), block(32, RMS_COL_ROWS);
    rmsnorm_param_partial_kernel<<<grid, block, 0, ctx->stream>>>(ctx->ws, dout, inp, rstd, N, C,
                                                                  rows_per_chunk);
    CUDA_LAUNCH_CHECK("rmsnorm_param_partial_kernel");
    return cuda_colsum_finish(ctx, dweight, ctx->ws, R, C);
}
