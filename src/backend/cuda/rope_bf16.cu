/*
 * rope_bf16.cu: the bf16 rotary position embedding on the GPU; the reference is backend/cpu/rope_bf16.c.
 * rope.cu's rotate-half form and cos/sin table (cuda_rope_table: angles in double, rounded once to float, kept in
 * ctx->rope_cs), the rotation in fp32 on the widened values, one rounding:
 *
 *   out[i] = rn(fmaf(x[i], cos, -(x[i+HS/2] sin)))    out[i+HS/2] = rn(fmaf(x[i+HS/2], cos, x[i] sin))
 *
 * backward with sin negated and dinp = rn(dinp + r), or rn(0 + r) when it writes a fresh gradient (ACC false:
 * dinp is not read); heads h >= n_rot pass unrotated. The expression is the
 * reference's, op for op (the products that meet a sum are the fmaf's and the lone x sin, which the fma takes
 * whole), so the result differs only where the device's double cos/sin/pow round a table entry to another float
 * than glibc's (op_list.h: ULP(1)). A thread reads both halves of its pairs before writing them, so out may be
 * inp.
 *
 * Two kernels, the same arithmetic: where HS % 16 == 0 and the pointers are 16-byte aligned, a thread takes 8
 * pairs (b*T + t, h, i0..i0+7): one 16-byte load per half, the 8 (cos, sin) pairs as four float4, index math in
 * 32 bits over (row, head, chunk) units; a rotation in place (the forward, and the backward that writes) then skips
 * the unrotated heads (h >= n_rot: out = inp already, a -0 of the backward kept as -0). Elsewhere one thread per
 * pair (b, t, h, i < HS/2) with scalar accesses.
 * Both, and the table's kernel, launch with programmatic dependent launch (pdl.cuh): each waits for the previous
 * kernel before its first global access.
 */
#include "bf16_io.cuh"
#include "pdl.cuh"

#define ROPE_BF16_THREADS 256

template <bool BACKWARD, bool ACC>
__global__ void __launch_bounds__(ROPE_BF16_THREADS)
    rope_bf16_kernel(forge_bf16 *out, const forge_bf16 *inp, /* may alias: no __restrict__ */
                     const float *__restrict__ cs, int T, int n_heads, int n_rot, int HS, size_t total) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
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

/* 8 pairs per thread: unit u = (row, head hh < heads, chunk c < half / 8), head h = hh (heads = n_heads, or
 * n_rot for the forward in place); units < 2^30 (the host checks), so u plus the grid's stride stays an int */
template <bool BACKWARD, bool ACC>
__global__ void __launch_bounds__(ROPE_BF16_THREADS)
    rope_bf16_vec_kernel(forge_bf16 *out, const forge_bf16 *inp, /* may alias: no __restrict__ */
                         const float *__restrict__ cs, int T, int n_heads, int heads, int n_rot, int HS, int units) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const int half = HS / 2, chunks = half / 8;
    for (int u = blockIdx.x * blockDim.x + threadIdx.x; u < units; u += gridDim.x * blockDim.x) {
        const int c = u % chunks, rh = u / chunks, h = rh % heads, row = rh / heads, t = row % T, i0 = 8 * c;
        const size_t off = ((size_t)row * n_heads + h) * HS + i0;
        float x0[8], x1[8], r0[8], r1[8];
        bf16_load<8>(x0, inp + off);
        bf16_load<8>(x1, inp + off + half);
        if (h < n_rot) {
            float csv[16];
            const float4 *p = reinterpret_cast<const float4 *>(cs + 2 * ((size_t)t * half + i0));
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float4 v = p[q];
                csv[4 * q] = v.x, csv[4 * q + 1] = v.y, csv[4 * q + 2] = v.z, csv[4 * q + 3] = v.w;
            }
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float co = csv[2 * k], s = BACKWARD ? -csv[2 * k + 1] : csv[2 * k + 1];
                r0[k] = fmaf(x0[k], co, -(x1[k] * s));
                r1[k] = fmaf(x1[k], co, x0[k] * s);
            }
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) r0[k] = x0[k], r1[k] = x1[k];
        }
        if (BACKWARD) {
            float d0[8], d1[8];
            if (ACC) {
                bf16_load<8>(d0, out + off);
                bf16_load<8>(d1, out + off + half);
            }
#pragma unroll
            for (int k = 0; k < 8; k++) {
                r0[k] = (ACC ? d0[k] : 0.0f) + r0[k];
                r1[k] = (ACC ? d1[k] : 0.0f) + r1[k];
            }
        }
        bf16_store<8>(out + off, r0);
        bf16_store<8>(out + off + half, r1);
    }
}

static forge_status rope_bf16_run(forge_backend *be, forge_bf16 *out, const forge_bf16 *inp, int B, int T,
                                  int n_heads, int n_rot, int HS, float theta, bool backward, bool accumulate) {
    const char *op = backward ? "rope_backward_bf16" : "rope_forward_bf16";
    FORGE_TRY(cuda_rope_check_args(op, n_heads, n_rot, HS, theta));
    if (B <= 0 || T <= 0 || n_heads <= 0) return FORGE_OK;
    const size_t total = (size_t)B * T * n_heads * (HS / 2);
    cuda_ctx *ctx = cuda_get_ctx(be);
    const float *cs = ctx->ws;
    if (n_rot > 0) FORGE_TRY(cuda_rope_table(ctx, T, HS, theta, op, &cs));
    /* in place, the unrotated heads are left as they are: only the first n_rot are visited. The forward's out = inp
     * there already; so is the written backward's rn(0 + dout) but for a -0 (kept, where the pass writes +0), which
     * no sum that reads the gradient can tell from +0 unless every term is a zero (the trainer's dqkv, rotated
     * back where it lies) */
    const int heads = out == inp && (!backward || !accumulate) ? n_rot : n_heads;
    const size_t units = (size_t)B * T * heads * (HS / 16);
    if (HS % 16 == 0 && bf16_aligned16(out) && bf16_aligned16(inp) && bf16_aligned16(cs) &&
        units < ((size_t)1 << 30)) {
        if (units == 0) return FORGE_OK;
        const unsigned g = cuda_grid_for(ctx, units, ROPE_BF16_THREADS);
        const auto kern = backward && accumulate ? rope_bf16_vec_kernel<true, true>
                          : backward             ? rope_bf16_vec_kernel<true, false>
                                                 : rope_bf16_vec_kernel<false, false>;
        CUDA_LAUNCH_TRY(forge_pdl_launch(kern, g, ROPE_BF16_THREADS, 0, ctx->stream, ctx->pdl, out, inp, cs, T,
                                         n_heads, heads, n_rot, HS, (int)units),
                        backward ? "rope_bf16_vec_kernel<backward>" : "rope_bf16_vec_kernel<forward>");
        return FORGE_OK;
    }
    const unsigned grid = cuda_grid_for(ctx, total, ROPE_BF16_THREADS);
    const auto kern = backward && accumulate ? rope_bf16_kernel<true, true>
                      : backward             ? rope_bf16_kernel<true, false>
                                             : rope_bf16_kernel<false, false>;
    CUDA_LAUNCH_TRY(forge_pdl_launch(kern, grid, ROPE_BF16_THREADS, 0, ctx->stream, ctx->pdl, out, inp, cs, T,
                                     n_heads, n_rot, HS, total),
                    backward ? "rope_bf16_kernel<backward>" : "rope_bf16_kernel<forward>");
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
