/*
 * rope_bf16.cu: the bf16 rotary position embedding on the GPU; the reference is backend/cpu/rope_bf16.c.
 * rope.cu's rotate-half form and cos/sin table (cuda_rope_table: angles in double, rounded once to float, into
 * ctx->ws), the rotation in fp32 on the widened values, one rounding:
 *
 *   out[i] = rn(fmaf(x[i], cos, -(x[i+HS/2] sin)))    out[i+HS/2] = rn(fmaf(x[i+HS/2], cos, x[i] sin))
 *
 * backward with sin negated and dinp = rn(dinp + r), or rn(0 + r) when it writes a fresh gradient (ACC false:
 * dinp is not read); heads h >= n_rot pass unrotated. The expression is the
 * reference's, op for op (the products that meet a sum are the fmaf's and the lone x sin, which the fma takes
 * whole), so the result differs only where the device's double cos/sin/pow round a table entry to another float
 * than glibc's (op_list.h: ULP(1)). One thread per pair (b, t, h, i < HS/2) reads both halves before writing
 * them, so out may be inp.
 */
#include "bf16_io.cuh"

#define ROPE_BF16_THREADS 256

template <bool BACKWARD, bool ACC>
__global__ void __launch_bounds__(ROPE_BF16_THREADS)
    rope_bf16_kernel(forge_bf16 *out, const forge_bf16 *inp, /* may alias: no __restrict__ */
                     const float *__restrict__ cs, int T, int n_heads, int n_rot, int HS, size_t total) {
    const int half = HS / 2;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % half);
        const size_t bth = idx / half; /* (b*T + t)*n_heads + h */
        const int h = (int)(bth % n_heads);
        const int t = (int)((bth / n_heads) % T);
        const size_t off = bth * HS;
        const float x0 = bf16_to_f32(inp[off + i]), x1 = bf16_to_f32(inp[off + i + half]);
        float r0 = x0, r1 = x1;
        if (h < n_rot) {
            const float c = cs[2 * ((size_t)t * half + i)], sn = cs[2 * ((size_t)t * half + i) + 1];
            const float s = BACKWARD ? -sn : sn;
            r0 = fmaf(x0, c, -(x1 * s));
            r1 = fmaf(x1, c, x0 * s);
        }
        if (BACKWARD) {
            r0 = (ACC ? bf16_to_f32(out[off + i]) : 0.0f) + r0;
            r1 = (ACC ? bf16_to_f32(out[off + i + half]) : 0.0f) + r1;
        }
        out[off + i] = f32_to_bf16(r0);
        out[off + i + half] = f32_to_bf16(r1);
    }
}

static forge_status rope_bf16_run(forge_backend *be, forge_bf16 *out, const forge_bf16 *inp, int B, int T,
                                  int n_heads, int n_rot, int HS, float theta, bool backward, bool accumulate) {
    const char *op = backward ? "rope_backward_bf16" : "rope_forward_bf16";
    FORGE_TRY(cuda_rope_check_args(op, n_heads, n_rot, HS, theta));
    if (B <= 0 || T <= 0 || n_heads <= 0) return FORGE_OK;
    const size_t total = (size_t)B * T * n_heads * (HS / 2);
    cuda_ctx *ctx = cuda_get_ctx(be);
    if (n_rot > 0) FORGE_TRY(cuda_rope_table(ctx, T, HS, theta, op));
    const unsigned grid = cuda_grid_for(ctx, total, ROPE_BF16_THREADS);
    if (backward && accumulate)
        rope_bf16_kernel<true, true>
            <<<grid, ROPE_BF16_THREADS, 0, ctx->stream>>>(out, inp, ctx->ws, T, n_heads, n_rot, HS, total);
    else if (backward)
        rope_bf16_kernel<true, false>
            <<<grid, ROPE_BF16_THREADS, 0, ctx->stream>>>(out, inp, ctx->ws, T, n_heads, n_rot, HS, total);
    else
        rope_bf16_kernel<false, false>
            <<<grid, ROPE_BF16_THREADS, 0, ctx->stream>>>(out, inp, ctx->ws, T, n_heads, n_rot, HS, total);
    CUDA_LAUNCH_CHECK(backward ? "rope_bf16_kernel<backward>" : "rope_bf16_kernel<forward>");
    return FORGE_OK;
}

forge_status cuda_rope_forward_bf16(forge_backend *be, forge_bf16 *out, const forge_bf16 *inp, int B, int T,
                                    int n_heads, int n_rot, int HS, float theta) {
    return rope_bf16_run(be, out, inp, B, T, n_heads, n_rot, HS, theta, false, false);
}

forge_status cuda_rope_backward_bf16(forge_backend *be, forge_bf16 *dinp, const forge_bf16 *dout, int B, int T,
                                     int n_heads, int n_rot, int HS, float theta, int accumulate) {
    return rope_bf16_run(be, dinp, dout, B, T, n_heads, n_rot, HS, theta, true, accumulate != 0);
}
