/*
 * rope.cu: rotary position embedding, rotate-half form (Hugging Face Llama),
 * on the GPU. inp/out (B,T,n_heads,HS); the first n_rot heads are rotated,
 * the rest copied (packed qkv: q and k rotate, v passes through). For
 * i < HS/2, angle = t * theta^(-2i/HS):
 *   out[i]      = x[i] cos - x[i+HS/2] sin
 *   out[i+HS/2] = x[i+HS/2] cos + x[i] sin
 * backward applies the transpose (rotation by -angle) and accumulates.
 *
 * The decision a reader would get wrong: the angle is computed in double and
 * rounded once to float cos/sin, exactly as the CPU reference does, into a
 * (T, HS/2) table; so the GPU's cos/sin are bit-identical to the CPU's and
 * the only differences left are fp32 rounding of the products. (A float
 * angle loses ~1e-4 absolute at t = 2048.) Each thread reads both halves of
 * its pair before writing, so out == inp is allowed.
 *
 * The table is kept in ctx->rope_cs and built once per (HS, theta, longest
 * T), not once per call: a step's 2 x n_layers rope ops read the same table
 * (at gpt-25m that was 16 table launches a step). Rebuilding it bumps
 * ctx->ws_generation, so a recorded step that read the old contents is
 * re-recorded. While a step is being recorded (the first step runs op by op,
 * so this is rare) a missing table is built into the workspace as before,
 * by a kernel that becomes part of the recording.
 *
 * The table kernel, shared with the bf16 entries (rope_bf16.cu), launches with
 * programmatic dependent launch (pdl.cuh): it waits for the previous kernel
 * before it writes the workspace, which that kernel may still be reading.
 */
#include "cuda_ops.h"
#include "pdl.cuh"

#define ROPE_THREADS 256

/* ---- kernels ------------------------------------------------------------ */

/* cs (T, half, 2) = cos, sin of t * theta^(-2i/HS) */
__global__ void rope_table_kernel(float *__restrict__ cs, int T, int HS, float theta) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    int half = HS / 2;
    int total = T * half;
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += gridDim.x * blockDim.x) {
        int t = idx / half, i = idx % half;
        double inv_freq = pow((double)theta, -2.0 * i / HS);
        double angle = t * inv_freq;
        cs[2 * (size_t)idx + 0] = (float)cos(angle);
        cs[2 * (size_t)idx + 1] = (float)sin(angle);
    }
}

/* one thread per (b, t, h, i < half); backward = rotate by -angle and += */
template <bool BACKWARD>
__global__ void rope_kernel(float *out, const float *inp, /* may alias: no __restrict__ */
                            const float *__restrict__ cs, int T, int n_heads, int n_rot, int HS,
                            size_t total) {
    int half = HS / 2;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx % half);
        size_t bth = idx / half;        /* (b*T + t)*n_heads + h */
        int h = (int)(bth % n_heads);
        int t = (int)((bth / n_heads) % T);
        size_t off = bth * HS;
        float x0 = inp[off + i], x1 = inp[off + i + half];
        float y0, y1;
        if (h < n_rot) {
            float c = cs[2 * ((size_t)t * half + i)], s = cs[2 * ((size_t)t * half + i) + 1];
            if (BACKWARD) {
                y0 = x0 * c + x1 * s;
                y1 = x1 * c - x0 * s;
            } else {
                y0 = x0 * c - x1 * s;
                y1 = x1 * c + x0 * s;
            }
        } else {
            y0 = x0;
            y1 = x1;
        }
        if (BACKWARD) {
            out[off + i] += y0;
            out[off + i + half] += y1;
        } else {
            out[off + i] = y0;
            out[off + i + half] = y1;
        }
    }
}

/* ---- launchers ---------------------------------------------------------- */

forge_status cuda_rope_check_args(const char *op, int n_heads, int n_rot, int HS, float theta) {
    if (HS <= 0 || HS % 2 != 0)
        return forge_error(FORGE_ERR_ARG, "cuda %s: head size must be even and > 0, got %d", op, HS);
    if (n_rot < 0 || n_rot > n_heads)
        return forge_error(FORGE_ERR_ARG, "cuda %s: n_rot = %d must be in [0, n_heads = %d]", op, n_rot,
                           n_heads);
    if (!(theta > 0.0f))
        return forge_error(FORGE_ERR_ARG, "cuda %s: theta must be > 0, got %g", op, (double)theta);
    return FORGE_OK;
}

forge_status cuda_rope_table(cuda_ctx *ctx, int T, int HS, float theta, const char *op, const float **cs) {
    size_t table = (size_t)T * HS; /* T * half * 2 floats */
    if (table > CUDA_WS_FLOATS)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "cuda %s: T * HS = %zu exceeds the %zu-float cos/sin workspace", op, table,
                           CUDA_WS_FLOATS);
    size_t pairs = (size_t)T * (HS / 2);
    *cs = ctx->ws;
    if (pairs == 0) return FORGE_OK;
    /* the table depends on (t, i, HS, theta) only: rows [0, T) of a longer table are this one */
    if (ctx->rope_cs && ctx->rope_T >= T && ctx->rope_HS == HS && ctx->rope_theta == theta) {
        *cs = ctx->rope_cs;
        return FORGE_OK;
    }
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    CUDA_TRY(cudaStreamIsCapturing(ctx->stream, &capturing));
    float *dst = ctx->ws; /* while a step is recorded, nothing is allocated: the table goes to the workspace */
    if (capturing == cudaStreamCaptureStatusNone) {
        if (ctx->rope_cs_floats < table) {
            if (ctx->rope_cs) CUDA_TRY(cudaFree(ctx->rope_cs)); /* waits for the work queued with it */
            ctx->rope_cs = NULL;
            ctx->rope_cs_floats = 0;
            cudaError_t e = cudaMalloc((void **)&ctx->rope_cs, table * sizeof(float));
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                ctx->rope_cs = NULL;
                return forge_error(e == cudaErrorMemoryAllocation ? FORGE_ERR_OOM : FORGE_ERR_DEVICE,
                                   "cuda %s: %.1f KiB for the cos/sin table: %s", op, table * 4 / 1024.0,
                                   cudaGetErrorString(e));
            }
            ctx->rope_cs_floats = table;
        }
        ctx->rope_T = T, ctx->rope_HS = HS, ctx->rope_theta = theta;
        ctx->ws_generation++; /* a recorded graph that read the table's old contents must not run */
        dst = ctx->rope_cs;
    }
    CUDA_LAUNCH_TRY(forge_pdl_launch(rope_table_kernel, cuda_grid_for(ctx, pairs, ROPE_THREADS), ROPE_THREADS, 0,
                                     ctx->stream, ctx->pdl, dst, T, HS, theta),
                    "rope_table_kernel");
    *cs = dst;
    return FORGE_OK;
}

static forge_status rope_run(forge_backend *be, float *out, const float *inp, int B, int T, int n_heads,
                             int n_rot, int HS, float theta, int backward) {
    const char *op = backward ? "rope_backward" : "rope_forward";
    FORGE_TRY(cuda_rope_check_args(op, n_heads, n_rot, HS, theta));
    size_t total = (size_t)B * T * n_heads * (HS / 2);
    if (total == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    const float *cs = ctx->ws;
    if (n_rot > 0) FORGE_TRY(cuda_rope_table(ctx, T, HS, theta, op, &cs));
    unsigned grid = cuda_grid_for(ctx, total, ROPE_THREADS);
    if (backward)
        rope_kernel<true><<<grid, ROPE_THREADS, 0, ctx->stream>>>(out, inp, cs, T, n_heads, n_rot, HS, total);
    else
        rope_kernel<false><<<grid, ROPE_THREADS, 0, ctx->stream>>>(out, inp, cs, T, n_heads, n_rot, HS, total);
    CUDA_LAUNCH_CHECK(backward ? "rope_kernel<backward>" : "rope_kernel<forward>");
    return FORGE_OK;
}

forge_status cuda_rope_forward(forge_backend *be, float *out, const float *inp, int B, int T,
                               int n_heads, int n_rot, int HS, float theta) {
    return rope_run(be, out, inp, B, T, n_heads, n_rot, HS, theta, 0);
}

forge_status cuda_rope_backward(forge_backend *be, float *dinp, const float *dout, int B, int T,
                                int n_heads, int n_rot, int HS, float theta) {
    return rope_run(be, dinp, dout, B, T, n_heads, n_rot, HS, theta, 1);
}
