/*
 * elementwise_bf16.cu: the bf16 accumulate, GELU and SwiGLU on the GPU; the reference is
 * backend/cpu/elementwise_bf16.c (docs/mixed-precision.md).
 *
 * Bit-identical to the CPU: each element is the reference's expression, op for op, on the same base/fmath.h
 * functions (GELU, its derivative, the sigmoid: exp and tanh from basic operations, not the device's expf/tanhf),
 * with one rounding per stored result; products that meet a sum are explicit fmaf's on both sides. A backward's
 * ACC = false form writes its gradient without reading it: +0 stands for the old value (rn(0 + dx), the bits of an
 * add into a zeroed gradient).
 *
 * One grid-stride kernel per op over 8-wide chunks (one 16-byte vector per operand) when every pointer is 16-byte
 * aligned, then the n % 8 tail element by element; element by element throughout otherwise. The op's body is
 * written once, for W elements (W = 8 or 1). The packed SwiGLU (gate and up side by side in each row of the MLP's
 * one GEMM output) runs SwiGLU's bodies at its own offsets, 8-wide only when 8 divides the row's half F. The GELU
 * backward's aligned form is its own kernel instead (gelu_grad_table.cuh): gelu' from a table of its bf16 inputs'
 * values, built at context creation (cuda_gelu_grad_table_init), with the same bits as computing it.
 *
 * The step's kernels here launch through forge_pdl_launch (pdl.cuh) and wait for the previous kernel before they
 * touch memory; the table's one-time build at context creation is a plain launch.
 */
#include "../../base/fmath.h"
#include "bf16_io.cuh"
#include "gelu_grad_table.cuh"
#include "pdl.cuh"

#define EW_THREADS 256

/* ---- the ops: run<W>(i) does elements [i, i + W) --------------------------------------------------------------- */

/* the old value of a gradient (ACC), or +0 */
template <bool ACC, int W>
__device__ __forceinline__ void grad_load(float d[W], const forge_bf16 *p) {
    if (ACC) {
        bf16_load<W>(d, p);
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) d[k] = 0.0f;
    }
}

template <bool ACC>
struct accumulate_op { /* dst = rn(dst + src) */
    forge_bf16 *dst;
    const forge_bf16 *src;
    template <int W>
    __device__ __forceinline__ void run(size_t i) const {
        float d[W], s[W];
        grad_load<ACC, W>(d, dst + i);
        bf16_load<W>(s, src + i);
#pragma unroll
        for (int k = 0; k < W; k++) d[k] = d[k] + s[k];
        bf16_store<W>(dst + i, d);
    }
};

struct gelu_forward_op { /* out = rn(gelu(inp)) */
    forge_bf16 *out;
    const forge_bf16 *inp;
    template <int W>
    __device__ __forceinline__ void run(size_t i) const {
        float x[W];
        bf16_load<W>(x, inp + i);
#pragma unroll
        for (int k = 0; k < W; k++) x[k] = forge_gelu(x[k]);
        bf16_store<W>(out + i, x);
    }
};

template <bool ACC>
struct gelu_backward_op { /* dinp = rn(dinp + gelu'(inp) dout), the old dinp +0 when !ACC (written) */
    forge_bf16 *dinp;
    const forge_bf16 *inp, *dout;
    template <int W>
    __device__ __forceinline__ void run(size_t i) const {
        float d[W], x[W], g[W];
        grad_load<ACC, W>(d, dinp + i);
        bf16_load<W>(x, inp + i);
        bf16_load<W>(g, dout + i);
#pragma unroll
        for (int k = 0; k < W; k++) d[k] = fmaf(forge_gelu_grad(x[k]), g[k], d[k]);
        bf16_store<W>(dinp + i, d);
    }
};

/* SwiGLU's bodies on W elements, shared by the two layouts: out = rn(gate sig(gate) up); dgate = rn(dgate + dout up
 * silu'(gate)), dup = rn(dup + dout silu(gate)), the old values +0 when !ACC (written) */
template <int W>
__device__ __forceinline__ void swiglu_forward_w(forge_bf16 *out, const forge_bf16 *gate, const forge_bf16 *up) {
    float g[W], u[W];
    bf16_load<W>(g, gate);
    bf16_load<W>(u, up);
#pragma unroll
    for (int k = 0; k < W; k++) g[k] = g[k] * forge_sigmoid(g[k]) * u[k];
    bf16_store<W>(out, g);
}

template <bool ACC, int W>
__device__ __forceinline__ void swiglu_backward_w(forge_bf16 *dgate, forge_bf16 *dup, const forge_bf16 *dout,
                                                  const forge_bf16 *gate, const forge_bf16 *up) {
    float dg[W], du[W], d[W], g[W], u[W];
    grad_load<ACC, W>(dg, dgate);
    grad_load<ACC, W>(du, dup);
    bf16_load<W>(d, dout);
    bf16_load<W>(g, gate);
    bf16_load<W>(u, up);
#pragma unroll
    for (int k = 0; k < W; k++) {
        const float sig = forge_sigmoid(g[k]);
        const float dsilu = sig * fmaf(g[k], 1.0f - sig, 1.0f); /* silu'(g) = sig (1 + g (1 - sig)) */
        dg[k] = fmaf(d[k] * u[k], dsilu, dg[k]);
        du[k] = fmaf(d[k], g[k] * sig, du[k]);
    }
    bf16_store<W>(dgate, dg);
    bf16_store<W>(dup, du);
}

struct swiglu_forward_op {
    forge_bf16 *out;
    const forge_bf16 *gate, *up;
    template <int W>
    __device__ __forceinline__ void run(size_t i) const {
        swiglu_forward_w<W>(out + i, gate + i, up + i);
    }
};

template <bool ACC>
struct swiglu_backward_op {
    forge_bf16 *dgate, *dup;
    const forge_bf16 *dout, *gate, *up;
    template <int W>
    __device__ __forceinline__ void run(size_t i) const {
        swiglu_backward_w<ACC, W>(dgate + i, dup + i, dout + i, gate + i, up + i);
    }
};

/* The packed layout: gu (N, 2F), row r gate (F) then up (F). Element i = r F + c of out and dout (N, F) pairs with
 * gu[i + r F] and gu[i + r F + F]; W = 8 only when 8 | F (a chunk stays in its row, and every operand of it is
 * 16-byte aligned when gu and out are). */
__device__ __forceinline__ size_t packed_at(size_t i, size_t F) {
    /* the row by a 32-bit division wherever the index fits (every training shape): a 64-bit one is a long software
     * sequence, paid once per chunk of this memory-bound pass */
    const size_t r = (i >> 32) == 0 && (F >> 32) == 0 ? (size_t)((uint32_t)i / (uint32_t)F) : i / F;
    return i + r * F;
}

struct swiglu_packed_forward_op {
    forge_bf16 *out;
    const forge_bf16 *gu;
    size_t F;
    template <int W>
    __device__ __forceinline__ void run(size_t i) const {
        const size_t at = packed_at(i, F);
        swiglu_forward_w<W>(out + i, gu + at, gu + at + F);
    }
};

template <bool ACC>
struct swiglu_packed_backward_op {
    forge_bf16 *dgu;
    const forge_bf16 *dout, *gu;
    size_t F;
    template <int W>
    __device__ __forceinline__ void run(size_t i) const {
        const size_t at = packed_at(i, F);
        swiglu_backward_w<ACC, W>(dgu + at, dgu + at + F, dout + i, gu + at, gu + at + F);
    }
};

/* ---- the kernel and its launch ----------------------------------------------------------------------------------- */

template <class Op, bool VEC>
__global__ void __launch_bounds__(EW_THREADS) elementwise_bf16_kernel(Op op, size_t n) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const size_t stride = (size_t)gridDim.x * blockDim.x, tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t head = 0;
    if (VEC) {
        head = n / 8 * 8;
        for (size_t i = tid * 8; i < head; i += stride * 8) op.template run<8>(i);
    }
    for (size_t i = head + tid; i < n; i += stride) op.template run<1>(i);
}

/* element by element: any alignment */
template <class Op>
static forge_status elementwise_launch_scalar(forge_backend *be, const Op &op, size_t n, const char *name) {
    if (n == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    CUDA_LAUNCH_TRY(forge_pdl_launch(elementwise_bf16_kernel<Op, false>, cuda_grid_for(ctx, n, EW_THREADS), EW_THREADS,
                                     0, ctx->stream, ctx->pdl, op, n),
                    name);
    return FORGE_OK;
}

template <class Op>
static forge_status elementwise_launch(forge_backend *be, const Op &op, size_t n, bool aligned, const char *name) {
    if (!(aligned && n >= 8)) return elementwise_launch_scalar(be, op, n, name);
    cuda_ctx *ctx = cuda_get_ctx(be);
    CUDA_LAUNCH_TRY(forge_pdl_launch(elementwise_bf16_kernel<Op, true>, cuda_grid_for(ctx, n / 8, EW_THREADS),
                                     EW_THREADS, 0, ctx->stream, ctx->pdl, op, n),
                    name);
    return FORGE_OK;
}

static bool aligned(const void *a, const void *b, const void *c = NULL, const void *d = NULL,
                    const void *e = NULL) {
    return bf16_aligned16(a) && bf16_aligned16(b) && bf16_aligned16(c) && bf16_aligned16(d) && bf16_aligned16(e);
}

forge_status cuda_accumulate_bf16(forge_backend *be, forge_bf16 *dst, const forge_bf16 *src, size_t n,
                                  int accumulate) {
    if (accumulate)
        return elementwise_launch(be, accumulate_op<true>{dst, src}, n, aligned(dst, src), "accumulate_bf16");
    return elementwise_launch(be, accumulate_op<false>{dst, src}, n, aligned(dst, src), "accumulate_bf16");
}

forge_status cuda_gelu_forward_bf16(forge_backend *be, forge_bf16 *out, const forge_bf16 *inp, size_t n) {
    return elementwise_launch(be, gelu_forward_op{out, inp}, n, aligned(out, inp), "gelu_forward_bf16");
}

forge_status cuda_gelu_grad_table_init(cuda_ctx *ctx) {
    CUDA_TRY(cudaMalloc((void **)&ctx->gelu_grad_table, GELU_TAB_FLOATS * sizeof(float)));
    gelu_grad_table_kernel<<<GELU_TAB_FLOATS / 256, 256, 0, ctx->stream>>>(ctx->gelu_grad_table);
    CUDA_LAUNCH_CHECK("gelu_grad_table_kernel");
    int k0 = 0, k1 = 0;
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&k0, gelu_backward_bf16_table_kernel<false>,
                                                           GELU_BWD_THREADS, 0));
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&k1, gelu_backward_bf16_table_kernel<true>,
                                                           GELU_BWD_THREADS, 0));
    ctx->gelu_bwd_blocks_per_sm = k0 < k1 ? k0 : k1;
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &ctx->gelu_dbias_blocks_per_sm, gelu_backward_dbias_bf16_kernel<GELU_DBIAS_UNROLL, GELU_DBIAS_MIN_BLOCKS>,
        32 * GELU_DBIAS_ROWS, 0));
    return FORGE_OK;
}

forge_status cuda_gelu_backward_bf16(forge_backend *be, forge_bf16 *dinp, const forge_bf16 *inp,
                                     const forge_bf16 *dout, size_t n, int accumulate) {
    if (n >= 8 && aligned(dinp, inp, dout)) {
        cuda_ctx *ctx = cuda_get_ctx(be);
        const unsigned grid = gelu_bwd_grid(ctx->num_sms, ctx->gelu_bwd_blocks_per_sm, n);
        CUDA_LAUNCH_TRY(forge_pdl_launch(accumulate ? gelu_backward_bf16_table_kernel<true>
                                                    : gelu_backward_bf16_table_kernel<false>,
                                         grid, GELU_BWD_THREADS, 0, ctx->stream, ctx->pdl, dinp, inp, dout, n,
                                         ctx->gelu_grad_table),
                        "gelu_backward_bf16");
        return FORGE_OK;
    }
    /* not 16-byte aligned, or under one chunk: element by element, computing gelu' */
    if (accumulate)
        return elementwise_launch_scalar(be, gelu_backward_op<true>{dinp, inp, dout}, n, "gelu_backward_bf16");
    return elementwise_launch_scalar(be, gelu_backward_op<false>{dinp, inp, dout}, n, "gelu_backward_bf16");
}

/* The fused kernel where it applies (OC % 8 == 0, aligned, a dbias the workspace holds); otherwise the two passes
 * it fuses, gelu_backward_bf16 then matmul_backward_weight_bf16's dbias (C = 0: no weight gradient), which give the
 * same bits. */
forge_status cuda_gelu_backward_dbias_bf16(forge_backend *be, forge_bf16 *dinp, float *dbias, const forge_bf16 *inp,
                                           const forge_bf16 *dout, int N, int OC) {
    if (N < 0 || OC < 0)
        return forge_error(FORGE_ERR_ARG, "cuda gelu_backward_dbias_bf16: sizes must be >= 0, got N=%d OC=%d", N, OC);
    const size_t n = (size_t)N * OC;
    if (n == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    const int R = dbias ? cuda_colsum_chunks(N, OC, 1) : 0;
    if (R == 0 || OC % 8 != 0 || !aligned(dinp, inp, dout)) {
        FORGE_TRY(cuda_gelu_backward_bf16(be, dinp, inp, dout, n, 0));
        return dbias ? cuda_matmul_backward_weight_bf16(be, NULL, dbias, dinp, NULL, N, 0, OC) : FORGE_OK;
    }
    const int rows_per_chunk = (N + R - 1) / R, items = (OC + 255) / 256 * R;
    int grid = ctx->num_sms * (ctx->gelu_dbias_blocks_per_sm > 0 ? ctx->gelu_dbias_blocks_per_sm : 1);
    if (grid > items) grid = items;
    CUDA_LAUNCH_TRY(forge_pdl_launch(gelu_backward_dbias_bf16_kernel<GELU_DBIAS_UNROLL, GELU_DBIAS_MIN_BLOCKS>, grid,
                                     dim3(32, GELU_DBIAS_ROWS), 0, ctx->stream, ctx->pdl, dinp, ctx->ws, inp, dout,
                                     N, OC, R, rows_per_chunk, ctx->gelu_grad_table),
                    "gelu_backward_dbias_bf16_kernel");
    return cuda_colsum_finish(ctx, dbias, ctx->ws, R, OC);
}

forge_status cuda_swiglu_forward_bf16(forge_backend *be, forge_bf16 *out, const forge_bf16 *gate,
                                      const forge_bf16 *up, size_t n) {
    return elementwise_launch(be, swiglu_forward_op{out, gate, up}, n, aligned(out, gate, up),
                              "swiglu_forward_bf16");
}

forge_status cuda_swiglu_backward_bf16(forge_backend *be, forge_bf16 *dgate, forge_bf16 *dup,
                                       const forge_bf16 *dout, const forge_bf16 *gate, const forge_bf16 *up,
                                       size_t n, int accumulate) {
    if (accumulate)
        return elementwise_launch(be, swiglu_backward_op<true>{dgate, dup, dout, gate, up}, n,
                                  aligned(dgate, dup, dout, gate, up), "swiglu_backward_bf16");
    return elementwise_launch(be, swiglu_backward_op<false>{dgate, dup, dout, gate, up}, n,
                              aligned(dgate, dup, dout, gate, up), "swiglu_backward_bf16");
}

forge_status cuda_swiglu_packed_forward_bf16(forge_backend *be, forge_bf16 *out, const forge_bf16 *gu, int N, int F) {
    if (N < 0 || F < 0)
        return forge_error(FORGE_ERR_ARG, "cuda swiglu_packed_forward_bf16: sizes must be >= 0, got N=%d F=%d", N, F);
    return elementwise_launch(be, swiglu_packed_forward_op{out, gu, (size_t)F}, (size_t)N * F,
                              F % 8 == 0 && aligned(out, gu), "swiglu_packed_forward_bf16");
}

forge_status cuda_swiglu_packed_backward_bf16(forge_backend *be, forge_bf16 *dgu, const forge_bf16 *dout,
                                              const forge_bf16 *gu, int N, int F, int accumulate) {
    if (N < 0 || F < 0)
        return forge_error(FORGE_ERR_ARG, "cuda swiglu_packed_backward_bf16: sizes must be >= 0, got N=%d F=%d", N,
                           F);
    const size_t n = (size_t)N * F;
    const bool vec = F % 8 == 0 && aligned(dgu, dout, gu);
    if (accumulate)
        return elementwise_launch(be, swiglu_packed_backward_op<true>{dgu, dout, gu, (size_t)F}, n, vec,
                                  "swiglu_packed_backward_bf16");
    return elementwise_launch(be, swiglu_packed_backward_op<false>{dgu, dout, gu, (size_t)F}, n, vec,
                              "swiglu_packed_backward_bf16");
}
