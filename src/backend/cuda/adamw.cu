/*
 * adamw.cu: multi-tensor AdamW with global-norm gradient clipping on the GPU,
 * and the one-launch reductions the step needs (the squared gradient norm,
 * the loss sum).
 *
 *   sumsq:          *out = sum x[i]^2
 *   sum_accumulate: *out += sum x[i]
 *   adamw:          for each span (a tensor of the flat buffer, its weight decay wd):
 *                   g = grad * clip, clip = max_norm / sqrt(*grad_sumsq) if that norm
 *                   exceeds max_norm (and max_norm > 0), else 1
 *                   m = b1 m + (1-b1) g ; v = b2 v + (1-b2) g^2
 *                   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p),  mhat = m / bc1, vhat = v / bc2
 *
 * The decisions a reader would get wrong:
 * - The reductions are deterministic and take one launch. A fixed grid of
 *   CUDA_SUMSQ_BLOCKS blocks writes one partial each into the workspace; the
 *   block that finishes last (a device counter, reset by that block) sums the
 *   partials in a fixed tree. Neither the grid nor the order depends on the GPU
 *   or on timing, so the bits are the same on every run and every device.
 * - AdamW is one launch for every tensor: one block per span (the optimizer
 *   cuts tensors into spans of at most FORGE_ADAMW_SPAN elements so the blocks
 *   are balanced). lr and the bias corrections come from device memory
 *   (step[3]) so a recorded step replays with the new ones; the clip factor
 *   and the skip of a non-finite norm are decided per block from the device
 *   scalar, never on the host.
 * - With param_bf16 the same pass writes the bf16 working copy rn(param)
 *   (docs/mixed-precision.md).
 * - Every kernel here launches with programmatic dependent launch (pdl.cuh)
 *   and waits for the previous kernel (forge_pdl_wait) before it touches
 *   memory: the workspace and the done counter included, which the previous
 *   reduction may still be using.
 * - Each element's update is one expression (the lambda in adamw_kernel) used
 *   by both of its loops, rounded op by op like the CPU reference: the same
 *   bits on both (a contracted fma had put values of ~50, which the walker's
 *   extreme bias corrections produce, 3 ulps from the CPU's).
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "cuda_ops.h"
#include "pdl.cuh"

#define REDUCE_THREADS 256
#define ADAMW_THREADS 256

/* ---- kernels ------------------------------------------------------------ */

/* SQUARE: sum of squares (sumsq) or of values (sum_accumulate); ACCUMULATE: *out += total or *out = total. */
template <bool SQUARE, bool ACCUMULATE>
__global__ void __launch_bounds__(REDUCE_THREADS)
    reduce_kernel(float *__restrict__ out, float *__restrict__ partial, unsigned *__restrict__ done,
                  const float *__restrict__ x, size_t n) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    __shared__ float scratch[32];
    __shared__ bool last;
    float acc = 0.0f;
    /* 16-byte loads where x allows them (the flat gradient buffer does): enough bytes in flight to stream at the
     * memory's rate; the fixed grid and per-thread order keep the sum's bits independent of timing */
    const size_t stride = (size_t)gridDim.x * REDUCE_THREADS;
    const size_t n4 = ((uintptr_t)x % 16 == 0) ? n / 4 : 0;
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    for (size_t i = blockIdx.x * (size_t)REDUCE_THREADS + threadIdx.x; i < n4; i += stride) {
        const float4 v = x4[i];
        if (SQUARE) {
            acc = fmaf(v.x, v.x, acc);
            acc = fmaf(v.y, v.y, acc);
            acc = fmaf(v.z, v.z, acc);
            acc = fmaf(v.w, v.w, acc);
        } else {
            acc = acc + v.x + v.y + v.z + v.w;
        }
    }
    for (size_t i = 4 * n4 + blockIdx.x * (size_t)REDUCE_THREADS + threadIdx.x; i < n; i += stride)
        acc = SQUARE ? fmaf(x[i], x[i], acc) : acc + x[i];
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = acc;
        __threadfence(); /* the partial is visible before the count says so */
        last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    float total = 0.0f;
    for (unsigned i = threadIdx.x; i < gridDim.x; i += REDUCE_THREADS) total += ((volatile float *)partial)[i];
    total = block_sum(total, scratch);
    if (threadIdx.x == 0) {
        *out = ACCUMULATE ? *out + total : total;
        *done = 0u; /* ready for the next launch (stream order) */
    }
}

__global__ void __launch_bounds__(ADAMW_THREADS)
    adamw_kernel(float *__restrict__ param, uint16_t *__restrict__ param_bf16, const float *__restrict__ grad,
                 float *__restrict__ m, float *__restrict__ v, const forge_adamw_span *__restrict__ spans,
                 const float *__restrict__ grad_sumsq, const float *__restrict__ step, forge_adamw_params hp,
                 int vec) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    float clip = 1.0f;
    if (grad_sumsq) {
        const float sumsq = *grad_sumsq;
        if (!isfinite(sumsq)) return; /* an overflowed step is skipped */
        if (hp.max_grad_norm > 0.0f) {
            const float norm = sqrtf(sumsq);
            if (norm > hp.max_grad_norm) clip = hp.max_grad_norm / norm;
        }
    }
    const forge_adamw_span sp = spans[blockIdx.x];
    const float lr = step[0], bc1 = step[1], bc2 = step[2], b1 = hp.beta1, b2 = hp.beta2;
    const size_t begin = sp.begin, end = begin + sp.n;
    /* the CPU reference's operations (cpu/adamw.c), each rounded on its own as there (ISO C: no contraction):
     * the _rn intrinsics keep nvcc from fusing a product into the following add, so the bits are the CPU's;
     * '/' and sqrtf are IEEE-rounded on both */
    auto update = [&](float g, float &mi, float &vi, float &p) {
        g = __fmul_rn(g, clip);
        mi = __fadd_rn(__fmul_rn(b1, mi), __fmul_rn(1.0f - b1, g));
        vi = __fadd_rn(__fmul_rn(b2, vi), __fmul_rn(__fmul_rn(1.0f - b2, g), g));
        const float mhat = mi / bc1;
        const float vhat = vi / bc2;
        const float t = __fadd_rn(mhat / __fadd_rn(sqrtf(vhat), hp.eps), __fmul_rn(sp.weight_decay, p));
        p = __fsub_rn(p, __fmul_rn(lr, t));
    };
    /* vec: 16-byte accesses over the span's 4-aligned middle (4 elements a thread: the loads of all five arrays in
     * flight at once), its head and tail one element a thread */
    size_t a0 = end, a1 = end;
    if (vec) {
        a0 = (begin + 3) / 4 * 4;
        if (a0 > end) a0 = end;
        a1 = a0 + (end - a0) / 4 * 4;
    }
    for (size_t i = a0 / 4 + threadIdx.x; i < a1 / 4; i += ADAMW_THREADS) {
        const float4 g4 = reinterpret_cast<const float4 *>(grad)[i];
        float4 m4 = reinterpret_cast<float4 *>(m)[i], v4 = reinterpret_cast<float4 *>(v)[i];
        float4 p4 = reinterpret_cast<float4 *>(param)[i];
        update(g4.x, m4.x, v4.x, p4.x);
        update(g4.y, m4.y, v4.y, p4.y);
        update(g4.z, m4.z, v4.z, p4.z);
        update(g4.w, m4.w, v4.w, p4.w);
        reinterpret_cast<float4 *>(m)[i] = m4;
        reinterpret_cast<float4 *>(v)[i] = v4;
        reinterpret_cast<float4 *>(param)[i] = p4;
        if (param_bf16) {
            const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(p4.x)) |
                                ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(p4.y)) << 16);
            const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(p4.z)) |
                                ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(p4.w)) << 16);
            reinterpret_cast<uint2 *>(param_bf16)[i] = make_uint2(lo, hi);
        }
    }
    for (size_t i = begin + threadIdx.x; i < end; i += ADAMW_THREADS) {
        if (i >= a0 && i < a1) continue; /* the vector loop's */
        float mi = m[i], vi = v[i], p = param[i];
        update(grad[i], mi, vi, p);
        m[i] = mi;
        v[i] = vi;
        param[i] = p;
        if (param_bf16) param_bf16[i] = __bfloat16_as_ushort(__float2bfloat16_rn(p));
    }
}

/* ---- launchers ---------------------------------------------------------- */

forge_status cuda_sumsq(forge_backend *be, float *out_sumsq, const float *x, size_t n) {
    cuda_ctx *ctx = cuda_get_ctx(be);
    CUDA_LAUNCH_TRY(forge_pdl_launch(reduce_kernel<true, false>, CUDA_SUMSQ_BLOCKS, REDUCE_THREADS, 0, ctx->stream,
                                     ctx->pdl, out_sumsq, ctx->ws, ctx->reduce_done, x, n),
                    "reduce_kernel<sumsq>");
    return FORGE_OK;
}

forge_status cuda_sum_accumulate(forge_backend *be, float *out_sum, const float *x, size_t n) {
    if (n == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    CUDA_LAUNCH_TRY(forge_pdl_launch(reduce_kernel<false, true>, CUDA_SUMSQ_BLOCKS, REDUCE_THREADS, 0, ctx->stream,
                                     ctx->pdl, out_sum, ctx->ws, ctx->reduce_done, x, n),
                    "reduce_kernel<sum_accumulate>");
    return FORGE_OK;
}

forge_status cuda_adamw(forge_backend *be, float *param, forge_bf16 *param_bf16, const float *grad, float *m,
                        float *v, size_t n, const forge_adamw_span *spans, int n_spans, const float *grad_sumsq,
                        const float *step, forge_adamw_params hp) {
    (void)n; /* the spans say what to update; the CPU reference checks them against n */
    if (n_spans <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    /* 16-byte param, grad, m, v and an 8-byte bf16 copy: a 4-aligned index is then a vector of each */
    const int vec = (uintptr_t)param % 16 == 0 && (uintptr_t)grad % 16 == 0 && (uintptr_t)m % 16 == 0 &&
                    (uintptr_t)v % 16 == 0 && (uintptr_t)param_bf16 % 8 == 0;
    CUDA_LAUNCH_TRY(forge_pdl_launch(adamw_kernel, (unsigned)n_spans, ADAMW_THREADS, 0, ctx->stream, ctx->pdl, param,
                                     (uint16_t *)param_bf16, grad, m, v, spans, grad_sumsq, step, hp, vec),
                    "adamw_kernel");
    return FORGE_OK;
}
