/*
 * elementwise.cu: accumulate, residual add, GELU and SwiGLU on the GPU, and
 * the fp32 -> bf16 cast (base/dtype.h's rounding, the same code as the CPU).
 *
 * Same formulas as backend/cpu/elementwise.c: GELU is the tanh approximation
 * (GPT-2), and its backward uses 1 - tanh^2 for sech^2 (coshf overflows for
 * |x| > ~10). SwiGLU's packed form reads gate and up from the two halves of
 * each row of one (N, 2F) buffer, with the same expressions (swiglu_value,
 * swiglu_grads). Backward entries accumulate (+=). The kernels are grid-stride
 * loops over size_t n with scalar, coalesced accesses: memory-bound, and
 * correct for any n and any alignment. Results differ from the CPU only by
 * the last-ulp differences of the device tanhf/expf.
 */
#include "cuda_ops.h"

#define ELEMENTWISE_THREADS 256
#define GELU_SCALING_FACTOR 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f

/* ---- kernels ------------------------------------------------------------ */

__global__ void accumulate_kernel(float *__restrict__ dst, const float *__restrict__ src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] += src[i];
}

__global__ void add_forward_kernel(float *__restrict__ out, const float *__restrict__ a,
                                   const float *__restrict__ b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

__global__ void gelu_forward_kernel(float *__restrict__ out, const float *__restrict__ inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        float cube = GELU_CUBIC * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
    }
}

__global__ void gelu_backward_kernel(float *__restrict__ dinp, const float *__restrict__ inp,
                                     const float *__restrict__ dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        float cube = GELU_CUBIC * x * x * x;
        float tanh_out = tanhf(GELU_SCALING_FACTOR * (x + cube));
        float sech2 = 1.0f - tanh_out * tanh_out;
        float local_grad = 0.5f * (1.0f + tanh_out) +
                           x * 0.5f * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * GELU_CUBIC * x * x);
        dinp[i] += local_grad * dout[i];
    }
}

/* silu(g) u; expf(-g) = inf gives sig = 0, as it should */
__device__ __forceinline__ float swiglu_value(float g, float u) {
    float sig = 1.0f / (1.0f + expf(-g));
    return g * sig * u;
}

/* dgate += dout up silu'(g), dup += dout silu(g) */
__device__ __forceinline__ void swiglu_grads(float *dgate, float *dup, float d, float g, float u) {
    float sig = 1.0f / (1.0f + expf(-g));
    float silu = g * sig;
    float dsilu = sig * (1.0f + g * (1.0f - sig)); /* silu'(g) */
    *dgate += d * u * dsilu;
    *dup += d * silu;
}

__global__ void swiglu_forward_kernel(float *__restrict__ out, const float *__restrict__ gate,
                                      const float *__restrict__ up, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = swiglu_value(gate[i], up[i]);
}

__global__ void swiglu_backward_kernel(float *__restrict__ dgate, float *__restrict__ dup,
                                       const float *__restrict__ dout, const float *__restrict__ gate,
                                       const float *__restrict__ up, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        swiglu_grads(&dgate[i], &dup[i], dout[i], gate[i], up[i]);
}

/* gu (N, 2F), row r gate (F) then up (F); element i = r F + c of out (N, F) reads gu[i + r F] and gu[i + r F + F] */
__global__ void swiglu_packed_forward_kernel(float *__restrict__ out, const float *__restrict__ gu, size_t F,
                                             size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t at = i + i / F * F;
        out[i] = swiglu_value(gu[at], gu[at + F]);
    }
}

__global__ void swiglu_packed_backward_kernel(float *__restrict__ dgu, const float *__restrict__ dout,
                                              const float *__restrict__ gu, size_t F, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t at = i + i / F * F;
        swiglu_grads(&dgu[at], &dgu[at + F], dout[i], gu[at], gu[at + F]);
    }
}

/* ---- launchers ---------------------------------------------------------- */

forge_status cuda_accumulate(forge_backend *be, float *dst, const float *src, size_t n) {
    if (n == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    accumulate_kernel<<<cuda_grid_for(ctx, n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0,
                        ctx->stream>>>(dst, src, n);
    CUDA_LAUNCH_CHECK("accumulate_kernel");
    return FORGE_OK;
}

forge_status cuda_add_forward(forge_backend *be, float *out, const float *a, const float *b, size_t n) {
    if (n == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    add_forward_kernel<<<cuda_grid_for(ctx, n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0,
                         ctx->stream>>>(out, a, b, n);
    CUDA_LAUNCH_CHECK("add_forward_kernel");
    return FORGE_OK;
}

forge_status cuda_gelu_forward(forge_backend *be, float *out, const float *inp, size_t n) {
    if (n == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    gelu_forward_kernel<<<cuda_grid_for(ctx, n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0,
                          ctx->stream>>>(out, inp, n);
    CUDA_LAUNCH_CHECK("gelu_forward_kernel");
    return FORGE_OK;
}

forge_status cuda_gelu_backward(forge_backend *be, float *dinp, const float *inp, const float *dout,
                                size_t n) {
    if (n == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    gelu_backward_kernel<<<cuda_grid_for(ctx, n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0,
                           ctx->stream>>>(dinp, inp, dout, n);
    CUDA_LAUNCH_CHECK("gelu_backward_kernel");
    return FORGE_OK;
}

forge_status cuda_swiglu_forward(forge_backend *be, float *out, const float *gate, const float *up,
                                 size_t n) {
    if (n == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    swiglu_forward_kernel<<<cuda_grid_for(ctx, n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0,
                            ctx->stream>>>(out, gate, up, n);
    CUDA_LAUNCH_CHECK("swiglu_forward_kernel");
    return FORGE_OK;
}

forge_status cuda_swiglu_backward(forge_backend *be, float *dgate, float *dup, const float *dout,
                                  const float *gate, const float *up, size_t n) {
    if (n == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    swiglu_backward_kernel<<<cuda_grid_for(ctx, n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0,
                             ctx->stream>>>(dgate, dup, dout, gate, up, n);
    CUDA_LAUNCH_CHECK("swiglu_backward_kernel");
    return FORGE_OK;
}

forge_status cuda_swiglu_packed_forward(forge_backend *be, float *out, const float *gu, int N, int F) {
    if (N < 0 || F < 0)
        return forge_error(FORGE_ERR_ARG, "cuda swiglu_packed_forward: sizes must be >= 0, got N=%d F=%d", N, F);
    const size_t n = (size_t)N * F;
    if (n == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    swiglu_packed_forward_kernel<<<cuda_grid_for(ctx, n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0,
                                   ctx->stream>>>(out, gu, (size_t)F, n);
    CUDA_LAUNCH_CHECK("swiglu_packed_forward_kernel");
    return FORGE_OK;
}

forge_status cuda_swiglu_packed_backward(forge_backend *be, float *dgu, const float *dout, const float *gu, int N,
                                         int F) {
    if (N < 0 || F < 0)
        return forge_error(FORGE_ERR_ARG, "cuda swiglu_packed_backward: sizes must be >= 0, got N=%d F=%d", N, F);
    const size_t n = (size_t)N * F;
    if (n == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    swiglu_packed_backward_kernel<<<cuda_grid_for(ctx, n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0,
                                    ctx->stream>>>(dgu, dout, gu, (size_t)F, n);
    CUDA_LAUNCH_CHECK("swiglu_packed_backward_kernel");
    return FORGE_OK;
}

__global__ void cast_bf16_kernel(forge_bf16 *__restrict__ dst, const float *__restrict__ src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = forge_bf16_from_f32(src[i]);
}

forge_status cuda_cast_bf16(forge_backend *be, forge_bf16 *dst, const float *src, size_t n) {
    if (n == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    cast_bf16_kernel<<<cuda_grid_for(ctx, n, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0, ctx->stream>>>(dst, src, n);
    CUDA_LAUNCH_CHECK("cast_bf16_kernel");
    return FORGE_OK;
}
