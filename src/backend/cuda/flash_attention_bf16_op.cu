/*
 * flash_attention_bf16_op.cu: the backend entries flash_attention_forward_bf16
 * and flash_attention_backward_bf16 (op_list.h; rounding points in
 * docs/mixed-precision.md, CPU reference in cpu/attention_bf16.c).
 *
 * Head sizes 64 and 128 run forge's tensor-core flash kernels
 * (flash_attention_bf16.h: forge_flash_bf16_forward / _backward) on strided
 * q/k/v views of the packed qkv row (stride (NH + 2 NKV) HS elements). The
 * backward's kernels OVERWRITE dense fp32 dq (B,T,NH,HS), dk and dv
 * (B,T,NKV,HS) in the scratch (with the Hopper backward's scratch, FORGE_FLASH_BF16_BWD_SCRATCH
 * floats); one more pass then adds
 * them into the bf16 dqkv with one rounding per element: dqkv = rn(dqkv + d),
 * or, writing a fresh gradient (accumulate = 0), dqkv = rn(0 + d) without
 * reading dqkv (the bits of an add into a zeroed one). The head size picks the
 * path (FORGE_FLASH_BF16_TC, op_list.h), and the scratch is sized for it. Where
 * the Hopper kernels run (forge_flash_bf16_backward_into) they store the bf16
 * dqkv themselves with the same rounding (rn(dqkv + d) or rn(0 + d) per element,
 * d the fp32 value the kernels would have stored), so the fp32 gradients and
 * the add pass are only the mma.sync path's.
 *
 * Everything those kernels refuse (any other head size; a pointer that is not
 * 16-byte aligned; B or NH over 65535) takes the fallback, so every shape
 * runs: the bf16 inputs are widened to fp32 (exact), the fp32 flash kernels
 * run through this backend's own cuda_flash_attention_forward / _backward
 * entries, and the results are rounded once to bf16. The fallback computes P
 * and dS in fp32 without rounding them: it stays inside the entry's
 * tolerances, which bound the effect of that rounding.
 * - Backward fallback: the scratch holds qkv, dqkv, dout and out in fp32 and the
 *   fp32 backward's D (FORGE_FLASH_BF16_SCRATCH_WIDE in op_list.h). dqkv is
 *   widened first (zeroed when written) and the fp32 backward adds each gradient
 *   element to it once, so the final rounding gives exactly rn(dqkv + d). At
 *   head size 64 or 128 (a layout the tensor-core kernels refuse) the caller's
 *   scratch has the tensor-core size, so the fallback takes a buffer of its
 *   own, stream-ordered (cudaMallocAsync: no host synchronisation).
 * - Forward fallback (no scratch argument): the widened qkv and the fp32 out
 *   go through the backend workspace ctx->ws (CUDA_WS_FLOATS floats), in chunks
 *   that fit: several whole batch elements when one fits; else, per batch
 *   element, runs of kv heads with their query heads; else runs of the query
 *   heads of one kv head. A chunk is a packed fp32 problem of its own (its
 *   query heads, then its kv heads' keys and values), its lse lands in place
 *   (a chunk's (b, h) rows are contiguous in (B, NH, T)), and its out is
 *   rounded into its heads' columns. Only when one query head of one batch
 *   element does not fit the workspace (T * 4 HS floats > CUDA_WS_FLOATS) is a
 *   buffer of that size allocated, stream-ordered (cudaMallocAsync: no host
 *   synchronisation).
 * Results do not depend on the chunking: a chunk's rows are computed exactly as
 * the whole problem would compute them.
 *
 * The Hopper kernels take the context's programmatic dependent launch
 * (ctx->pdl, pdl.cuh); the fallbacks' kernels launch plainly.
 */
#include <cuda_bf16.h>
#include <stdint.h>

#include "cuda_ops.h"

extern "C" {
#include "flash_attention_bf16.h"
}

#define FB16_THREADS 256

__device__ __forceinline__ float fb16_ld(const uint16_t *p) { return __bfloat162float(__ushort_as_bfloat16(*p)); }
__device__ __forceinline__ uint16_t fb16_rn(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

/* ---- kernels ------------------------------------------------------------------------------------------------ */

/* dst[i] = src[i] (bf16 -> fp32, exact) */
__global__ void __launch_bounds__(FB16_THREADS)
    fb16_widen_kernel(float *__restrict__ dst, const uint16_t *__restrict__ src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)FB16_THREADS + threadIdx.x; i < n; i += (size_t)gridDim.x * FB16_THREADS)
        dst[i] = fb16_ld(src + i);
}

/* dst[i] = rn(src[i]) */
__global__ void __launch_bounds__(FB16_THREADS)
    fb16_narrow_kernel(uint16_t *__restrict__ dst, const float *__restrict__ src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)FB16_THREADS + threadIdx.x; i < n; i += (size_t)gridDim.x * FB16_THREADS)
        dst[i] = fb16_rn(src[i]);
}

/* One forward chunk's packed fp32 qkv: rows (b0 .. b0+nb) x T of qkv, and of each row the query heads
 * [h0, h0+nq), the key heads [k0, k0+nk) and the value heads [k0, k0+nk), HS each, in that order. */
__global__ void __launch_bounds__(FB16_THREADS)
    fb16_gather_kernel(float *__restrict__ dst, const uint16_t *__restrict__ qkv, size_t rows, int NH, int NKV,
                       int HS, int h0, int nq, int k0, int nk) {
    const int w = (nq + 2 * nk) * HS;
    const size_t src_row = (size_t)(NH + 2 * NKV) * HS, n = rows * (size_t)w;
    for (size_t i = blockIdx.x * (size_t)FB16_THREADS + threadIdx.x; i < n; i += (size_t)gridDim.x * FB16_THREADS) {
        const size_t r = i / (size_t)w;
        const int c = (int)(i - r * (size_t)w), slot = c / HS, d = c - slot * HS;
        const int head = slot < nq        ? h0 + slot
                         : slot < nq + nk ? NH + k0 + (slot - nq)
                                          : NH + NKV + k0 + (slot - nq - nk);
        dst[i] = fb16_ld(qkv + r * src_row + (size_t)head * HS + d);
    }
}

/* out[(row), h0*HS + c] = rn(src[row, c]) for the chunk's rows and its nq query heads */
__global__ void __launch_bounds__(FB16_THREADS)
    fb16_scatter_out_kernel(uint16_t *__restrict__ out, const float *__restrict__ src, size_t rows, int NH, int HS,
                            int h0, int nq) {
    const int w = nq * HS;
    const size_t n = rows * (size_t)w;
    for (size_t i = blockIdx.x * (size_t)FB16_THREADS + threadIdx.x; i < n; i += (size_t)gridDim.x * FB16_THREADS) {
        const size_t r = i / (size_t)w;
        const int c = (int)(i - r * (size_t)w);
        out[r * (size_t)NH * HS + (size_t)h0 * HS + c] = fb16_rn(src[i]);
    }
}

/* dqkv = rn(dqkv + d) (ACC) or rn(0 + d), d from the dense dq (rows, NH*HS), dk, dv (rows, NKV*HS) */
template <bool ACC>
__global__ void __launch_bounds__(FB16_THREADS)
    fb16_dqkv_add_kernel(uint16_t *__restrict__ dqkv, const float *__restrict__ dq, const float *__restrict__ dk,
                         const float *__restrict__ dv, size_t rows, int qw, int kw) {
    const int w = qw + 2 * kw;
    const size_t n = rows * (size_t)w;
    for (size_t i = blockIdx.x * (size_t)FB16_THREADS + threadIdx.x; i < n; i += (size_t)gridDim.x * FB16_THREADS) {
        const size_t r = i / (size_t)w;
        const int c = (int)(i - r * (size_t)w);
        const float d = c < qw        ? dq[r * qw + c]
                        : c < qw + kw ? dk[r * kw + (c - qw)]
                                      : dv[r * kw + (c - qw - kw)];
        dqkv[i] = fb16_rn((ACC ? fb16_ld(dqkv + i) : 0.0f) + d);
    }
}

/* ---- host ----------------------------------------------------------------------------------------------------- */

static forge_status fb16_check(const char *op, int B, int T, int NH, int NKV, int HS) {
    if (NH <= 0 || NKV <= 0 || HS <= 0 || NH % NKV != 0)
        return forge_error(FORGE_ERR_ARG,
                           "cuda %s: need NH, NKV, HS > 0 and NH divisible by NKV, got NH=%d NKV=%d HS=%d", op, NH,
                           NKV, HS);
    if (B < 0 || T < 0) return forge_error(FORGE_ERR_ARG, "cuda %s: need B, T >= 0, got B=%d T=%d", op, B, T);
    return FORGE_OK;
}

static float *fb16_align16(float *p) { return (float *)(((uintptr_t)p + 15) & ~(uintptr_t)15); }

static forge_flash_shape fb16_shape(int B, int T, int NH, int NKV, int HS) {
    forge_flash_shape s;
    s.B = B;
    s.Tq = s.Tk = T;
    s.H = NH;
    s.Hkv = NKV;
    s.D = HS;
    s.q_stride = s.k_stride = s.v_stride = (long long)(NH + 2 * NKV) * HS;
    s.o_stride = (long long)NH * HS;
    return s;
}

/* One forward fallback chunk (see the top of the file): batch elements [b0, b0+nb), query heads [h0, h0+nq), kv
 * heads [k0, k0+nk) (nq a multiple of nk, the query heads exactly those of the kv heads, or nk = 1), through buf. */
static forge_status fb16_forward_chunk(forge_backend *be, cuda_ctx *ctx, float *buf, forge_bf16 *out, float *lse,
                                       const forge_bf16 *qkv, int T, int NH, int NKV, int HS, int b0, int nb, int h0,
                                       int nq, int k0, int nk) {
    const size_t rows = (size_t)nb * T, w = (size_t)(nq + 2 * nk) * HS;
    float *q32 = buf, *o32 = fb16_align16(buf + rows * w);
    const uint16_t *src = (const uint16_t *)qkv + (size_t)b0 * T * (size_t)(NH + 2 * NKV) * HS;
    fb16_gather_kernel<<<cuda_grid_for(ctx, rows * w, FB16_THREADS), FB16_THREADS, 0, ctx->stream>>>(
        q32, src, rows, NH, NKV, HS, h0, nq, k0, nk);
    CUDA_LAUNCH_CHECK("fb16_gather_kernel");
    FORGE_TRY(cuda_flash_attention_forward(be, o32, lse + ((size_t)b0 * NH + h0) * T, q32, nb, T, nq, nk, HS));
    fb16_scatter_out_kernel<<<cuda_grid_for(ctx, rows * nq * HS, FB16_THREADS), FB16_THREADS, 0, ctx->stream>>>(
        (uint16_t *)out + (size_t)b0 * T * NH * HS, o32, rows, NH, HS, h0, nq);
    CUDA_LAUNCH_CHECK("fb16_scatter_out_kernel");
    return FORGE_OK;
}

static forge_status fb16_forward_fallback(forge_backend *be, cuda_ctx *ctx, forge_bf16 *out, float *lse,
                                          const forge_bf16 *qkv, int B, int T, int NH, int NKV, int HS) {
    const int g = NH / NKV;
    /* floats a chunk of one batch element with nq query and nk kv heads takes: its qkv and its out */
    auto cost = [&](int nq, int nk) { return (size_t)T * ((size_t)(nq + 2 * nk) * HS + (size_t)nq * HS); };
    float *buf = ctx->ws, *own = nullptr;
    size_t cap = CUDA_WS_FLOATS - 4; /* 4: the out piece's 16-byte alignment */
    if (cost(1, 1) > cap) {
        cap = cost(1, 1);
        CUDA_TRY(cudaMallocAsync((void **)&own, (cap + 4) * sizeof(float), ctx->stream));
        buf = own;
    }
    forge_status st = FORGE_OK;
    if (cost(NH, NKV) <= cap) { /* whole batch elements */
        const int nb = (int)(cap / cost(NH, NKV) < (size_t)B ? cap / cost(NH, NKV) : (size_t)B);
        for (int b0 = 0; b0 < B && st == FORGE_OK; b0 += nb)
            st = fb16_forward_chunk(be, ctx, buf, out, lse, qkv, T, NH, NKV, HS, b0, B - b0 < nb ? B - b0 : nb, 0,
                                    NH, 0, NKV);
    } else if (cost(g, 1) <= cap) { /* runs of kv heads with their query heads */
        const int nk = (int)(cap / cost(g, 1)); /* < NKV: NKV of them do not fit */
        for (int b = 0; b < B && st == FORGE_OK; b++)
            for (int k0 = 0; k0 < NKV && st == FORGE_OK; k0 += nk) {
                const int nkc = NKV - k0 < nk ? NKV - k0 : nk;
                st = fb16_forward_chunk(be, ctx, buf, out, lse, qkv, T, NH, NKV, HS, b, 1, k0 * g, nkc * g, k0, nkc);
            }
    } else { /* runs of the query heads of one kv head: cost(nq, 1) = T HS (2 nq + 2) */
        int nq = (int)((cap / ((size_t)T * HS) - 2) / 2);
        if (nq < 1) nq = 1; /* cost(1, 1) <= cap */
        for (int b = 0; b < B && st == FORGE_OK; b++)
            for (int kvh = 0; kvh < NKV && st == FORGE_OK; kvh++)
                for (int q0 = 0; q0 < g && st == FORGE_OK; q0 += nq) {
                    const int nqc = g - q0 < nq ? g - q0 : nq;
                    st = fb16_forward_chunk(be, ctx, buf, out, lse, qkv, T, NH, NKV, HS, b, 1, kvh * g + q0, nqc, kvh,
                                            1);
                }
    }
    if (own) {
        const cudaError_t e = cudaFreeAsync(own, ctx->stream);
        if (st == FORGE_OK && e != cudaSuccess)
            return forge_error(FORGE_ERR_DEVICE, "cudaFreeAsync failed in flash_attention_forward_bf16: %s",
                               cudaGetErrorString(e));
    }
    return st;
}

forge_status cuda_flash_attention_forward_bf16(forge_backend *be, forge_bf16 *out, float *lse, const forge_bf16 *qkv,
                                               int B, int T, int NH, int NKV, int HS) {
    FORGE_TRY(fb16_check("flash_attention_forward_bf16", B, T, NH, NKV, HS));
    if (B == 0 || T == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    if (FORGE_FLASH_BF16_TC(HS)) {
        const forge_flash_shape s = fb16_shape(B, T, NH, NKV, HS);
        const forge_status st = forge_flash_bf16_forward(&s, qkv, qkv + (size_t)NH * HS, qkv + (size_t)(NH + NKV) * HS,
                                                         out, lse, ctx->stream, ctx->pdl);
        if (st != FORGE_ERR_UNSUPPORTED) return st;
        forge_error_clear(); /* a layout the kernels refuse (checked before any launch): the fallback takes it */
    }
    return fb16_forward_fallback(be, ctx, out, lse, qkv, B, T, NH, NKV, HS);
}

/* The backward fallback (top of the file) in buf (FORGE_FLASH_BF16_SCRATCH_WIDE floats, 16-byte aligned): qkv |
 * dqkv | dout | out in fp32, then the fp32 backward's D (B*NH*T). dqkv32 holds the widened dqkv, or zeros when
 * dqkv is written, and the fp32 backward adds each gradient element to it once. */
static forge_status fb16_backward_fallback(forge_backend *be, cuda_ctx *ctx, float *buf, forge_bf16 *dqkv,
                                           const forge_bf16 *dout, const forge_bf16 *qkv, const forge_bf16 *out,
                                           const float *lse, int B, int T, int NH, int NKV, int HS, int accumulate) {
    const size_t rows = (size_t)B * T, qw = (size_t)NH * HS, kw = (size_t)NKV * HS, nqkv = rows * (qw + 2 * kw);
    float *q32 = buf, *dqkv32 = q32 + nqkv, *do32 = dqkv32 + nqkv, *o32 = do32 + rows * qw, *D = o32 + rows * qw;
    const struct {
        float *dst;
        const forge_bf16 *src;
        size_t n;
    } widen[4] = {{q32, qkv, nqkv}, {dqkv32, accumulate ? dqkv : NULL, nqkv}, {do32, dout, rows * qw},
                  {o32, out, rows * qw}};
    for (int i = 0; i < 4; i++) {
        if (!widen[i].src) {
            CUDA_TRY(cudaMemsetAsync(widen[i].dst, 0, widen[i].n * sizeof(float), ctx->stream));
            continue;
        }
        fb16_widen_kernel<<<cuda_grid_for(ctx, widen[i].n, FB16_THREADS), FB16_THREADS, 0, ctx->stream>>>(
            widen[i].dst, (const uint16_t *)widen[i].src, widen[i].n);
        CUDA_LAUNCH_CHECK("fb16_widen_kernel");
    }
    FORGE_TRY(cuda_flash_attention_backward(be, dqkv32, D, do32, q32, o32, lse, B, T, NH, NKV, HS));
    fb16_narrow_kernel<<<cuda_grid_for(ctx, nqkv, FB16_THREADS), FB16_THREADS, 0, ctx->stream>>>((uint16_t *)dqkv,
                                                                                                 dqkv32, nqkv);
    CUDA_LAUNCH_CHECK("fb16_narrow_kernel");
    return FORGE_OK;
}

forge_status cuda_flash_attention_backward_bf16(forge_backend *be, forge_bf16 *dqkv, float *scratch,
                                                const forge_bf16 *dout, const forge_bf16 *qkv, const forge_bf16 *out,
                                                const float *lse, int B, int T, int NH, int NKV, int HS,
                                                int accumulate) {
    FORGE_TRY(fb16_check("flash_attention_backward_bf16", B, T, NH, NKV, HS));
    if (B == 0 || T == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    const size_t rows = (size_t)B * T, qw = (size_t)NH * HS, kw = (size_t)NKV * HS, nqkv = rows * (qw + 2 * kw);
    float *base = fb16_align16(scratch);
    if (FORGE_FLASH_BF16_TC(HS)) {
        /* dq | dk | dv | row statistics: every piece a multiple of 4 floats (HS), so each stays 16-byte aligned */
        float *dq = base, *dk = dq + rows * qw, *dv = dk + rows * kw, *delta = dv + rows * kw;
        const forge_flash_shape s = fb16_shape(B, T, NH, NKV, HS);
        /* the Hopper kernels store straight into dqkv (bf16, the row stride of qkv): no fp32 round trip */
        const long long w = (long long)(qw + 2 * kw);
        const forge_flash_grads g = {dqkv, dqkv + qw, dqkv + qw + kw, w, w, w, 1, accumulate != 0};
        forge_status st = forge_flash_bf16_backward_into(&s, qkv, qkv + qw, qkv + qw + kw, out, dout, lse, delta, &g,
                                                         ctx->stream, ctx->pdl);
        if (st != FORGE_ERR_UNSUPPORTED) return st;
        forge_error_clear(); /* refused before any launch: the fp32 gradients and the add pass below */
        st = forge_flash_bf16_backward(&s, qkv, qkv + qw, qkv + qw + kw, out, dout, lse, delta, dq, dk, dv, ctx->stream);
        if (st == FORGE_OK) {
            const unsigned grid = cuda_grid_for(ctx, nqkv, FB16_THREADS);
            if (accumulate)
                fb16_dqkv_add_kernel<true><<<grid, FB16_THREADS, 0, ctx->stream>>>((uint16_t *)dqkv, dq, dk, dv, rows,
                                                                                  (int)qw, (int)kw);
            else
                fb16_dqkv_add_kernel<false><<<grid, FB16_THREADS, 0, ctx->stream>>>((uint16_t *)dqkv, dq, dk, dv, rows,
                                                                                   (int)qw, (int)kw);
            CUDA_LAUNCH_CHECK("fb16_dqkv_add_kernel");
            return FORGE_OK;
        }
        if (st != FORGE_ERR_UNSUPPORTED) return st;
        forge_error_clear(); /* a layout the kernels refuse (checked before any launch): the fallback takes it */
    }
    /* the fallback, in the caller's scratch or (the scratch sized for the tensor-core path) a buffer of its own */
    if (!FORGE_FLASH_BF16_TC(HS)) return fb16_backward_fallback(be, ctx, base, dqkv, dout, qkv, out, lse, B, T, NH, NKV,
                                                                HS, accumulate);
    float *own = nullptr;
    CUDA_TRY(cudaMallocAsync((void **)&own, FORGE_FLASH_BF16_SCRATCH_WIDE(B, T, NH, NKV, HS) * sizeof(float),
                             ctx->stream));
    const forge_status st =
        fb16_backward_fallback(be, ctx, fb16_align16(own), dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, accumulate);
    const cudaError_t e = cudaFreeAsync(own, ctx->stream);
    if (st == FORGE_OK && e != cudaSuccess)
        return forge_error(FORGE_ERR_DEVICE, "cudaFreeAsync failed in flash_attention_backward_bf16: %s",
                           cudaGetErrorString(e));
    return st;
}
