/*
 * encoder_bf16.cu: the bf16 token + position embedding on the GPU; the reference is
 * backend/cpu/encoder_bf16.c (docs/mixed-precision.md).
 *
 *   forward   out[b,t] = rn(wte[id] + wpe[t]) (wpe NULL: the wte row, copied), 8-wide chunks where C % 8 == 0
 *             and the pointers are 16-byte aligned, element by element otherwise
 *   backward  dwte[id] += dout[b,t] and dwpe[t] += dout[b,t], fp32 accumulators
 *
 * Bit-identical to the CPU: the forward is one fp32 add and one rounding per element; the backward adds in the
 * CPU's order with no atomics. dwte uses embedding.cu's ownership rule: the block of row n owns its id iff no
 * earlier row has it, starts from dwte's row and adds every row carrying the id in increasing n, the sequence of
 * the CPU's loop. dwpe: one thread per (t, c), starting from dwpe and adding the batch in order b.
 *
 * An id outside [0, V) is never read through (embedding.cu's rule): the forward writes a NaN row, the backward
 * skips the row, and both record it in ctx->input_error for poll_errors, which names it (FORGE_ERR_DATA); the CPU
 * reference refuses such an id when the op runs.
 */
#include "bf16_io.cuh"

#define ENC_THREADS 256
#define ENC_BWD_COLS_PER_THREAD 4

/* ---- kernels ------------------------------------------------------------ */

/* grid-stride over the N * (C / W) chunks of out; W = 8: every chunk one 16-byte vector */
template <int W>
__global__ void __launch_bounds__(ENC_THREADS)
    encoder_forward_bf16_kernel(forge_bf16 *__restrict__ out, const int32_t *__restrict__ ids,
                                const forge_bf16 *__restrict__ wte, const forge_bf16 *__restrict__ wpe, int N, int T,
                                int C, int V, cuda_input_error *err) {
    const int per_row = C / W;
    const size_t total = (size_t)N * per_row;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int n = (int)(i / per_row), c = (int)(i % per_row) * W;
        const int id = ids[n];
        float v[W];
        if (id < 0 || id >= V) {
            if (c == 0) cuda_report_bad_id(err, CUDA_BAD_ID_EMBEDDING, n, id, V);
#pragma unroll
            for (int k = 0; k < W; k++) v[k] = __uint_as_float(BF16_NAN_BITS << 16);
        } else {
            bf16_load<W>(v, wte + (size_t)id * C + c);
            if (wpe) {
                float p[W];
                bf16_load<W>(p, wpe + (size_t)(n % T) * C + c);
#pragma unroll
                for (int k = 0; k < W; k++) v[k] = v[k] + p[k];
            }
        }
        bf16_store<W>(out + (size_t)n * C + c, v);
    }
}

/* One block per row n; see the file comment for the ownership rule (embedding_backward_kernel's, on bf16 dout). */
__global__ void __launch_bounds__(ENC_THREADS)
    encoder_backward_dwte_bf16_kernel(float *__restrict__ dwte, const forge_bf16 *__restrict__ dout,
                                      const int32_t *__restrict__ ids, int N, int C, int V, cuda_input_error *err) {
    __shared__ unsigned match_mask[ENC_THREADS / 32];
    const int n = blockIdx.x;
    const int tid = threadIdx.x;
    const int id = ids[n];
    if (id < 0 || id >= V) { /* uniform over the block */
        if (tid == 0) cuda_report_bad_id(err, CUDA_BAD_ID_EMBEDDING, n, id, V);
        return;
    }

    /* 1. does an earlier row carry the same id? then that row's block owns it */
    for (int k0 = 0; k0 < n; k0 += ENC_THREADS) {
        const int k = k0 + tid;
        const int hit = k < n && ids[k] == id;
        if (__syncthreads_or(hit)) return; /* uniform over the block */
    }

    /* 2. owner: for each column tile, start from dwte and add the matching rows m >= n in increasing m */
    for (int c0 = 0; c0 < C; c0 += ENC_THREADS * ENC_BWD_COLS_PER_THREAD) {
        float acc[ENC_BWD_COLS_PER_THREAD];
#pragma unroll
        for (int q = 0; q < ENC_BWD_COLS_PER_THREAD; q++) {
            const int c = c0 + q * ENC_THREADS + tid;
            acc[q] = c < C ? dwte[(size_t)id * C + c] : 0.0f;
        }
        for (int m0 = n; m0 < N; m0 += ENC_THREADS) {
            const int m = m0 + tid;
            const unsigned mask = __ballot_sync(0xffffffffu, m < N && ids[m] == id);
            __syncthreads(); /* previous chunk's masks have been read */
            if ((tid & 31) == 0) match_mask[tid >> 5] = mask;
            __syncthreads();
            for (int w = 0; w < ENC_THREADS / 32; w++) {
                unsigned bits = match_mask[w];
                while (bits) {
                    const int j = __ffs(bits) - 1;
                    bits &= bits - 1;
                    const forge_bf16 *g = dout + (size_t)(m0 + w * 32 + j) * C;
#pragma unroll
                    for (int q = 0; q < ENC_BWD_COLS_PER_THREAD; q++) {
                        const int c = c0 + q * ENC_THREADS + tid;
                        if (c < C) acc[q] += bf16_to_f32(g[c]);
                    }
                }
            }
        }
#pragma unroll
        for (int q = 0; q < ENC_BWD_COLS_PER_THREAD; q++) {
            const int c = c0 + q * ENC_THREADS + tid;
            if (c < C) dwte[(size_t)id * C + c] = acc[q];
        }
    }
}

/* thread per (t, c): dwpe[t,c] += dout[b,t,c], in order b */
__global__ void __launch_bounds__(ENC_THREADS)
    encoder_backward_dwpe_bf16_kernel(float *__restrict__ dwpe, const forge_bf16 *__restrict__ dout, int B, int T,
                                      int C) {
    const size_t TC = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < TC; i += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) acc += bf16_to_f32(dout[b * TC + i]);
        dwpe[i] = acc;
    }
}

/* ---- launchers ---------------------------------------------------------- */

forge_status cuda_encoder_forward_bf16(forge_backend *be, forge_bf16 *out, const int32_t *ids, const forge_bf16 *wte,
                                       const forge_bf16 *wpe, int B, int T, int C, int V) {
    if (B <= 0 || T <= 0 || C <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    const int N = B * T;
    const bool vec = C % 8 == 0 && bf16_aligned16(out) && bf16_aligned16(wte) && bf16_aligned16(wpe);
    const size_t chunks = (size_t)N * (vec ? C / 8 : C);
    const unsigned grid = cuda_grid_for(ctx, chunks, ENC_THREADS);
    if (vec)
        encoder_forward_bf16_kernel<8>
            <<<grid, ENC_THREADS, 0, ctx->stream>>>(out, ids, wte, wpe, N, T, C, V, ctx->input_error);
    else
        encoder_forward_bf16_kernel<1>
            <<<grid, ENC_THREADS, 0, ctx->stream>>>(out, ids, wte, wpe, N, T, C, V, ctx->input_error);
    CUDA_LAUNCH_CHECK("encoder_forward_bf16_kernel");
    return FORGE_OK;
}

forge_status cuda_encoder_backward_bf16(forge_backend *be, float *dwte, float *dwpe, const forge_bf16 *dout,
                                        const int32_t *ids, int B, int T, int C, int V) {
    if (B <= 0 || T <= 0 || C <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    encoder_backward_dwte_bf16_kernel<<<B * T, ENC_THREADS, 0, ctx->stream>>>(dwte, dout, ids, B * T, C, V,
                                                                               ctx->input_error);
    CUDA_LAUNCH_CHECK("encoder_backward_dwte_bf16_kernel");
    if (dwpe) {
        const size_t TC = (size_t)T * C;
        encoder_backward_dwpe_bf16_kernel<<<cuda_grid_for(ctx, TC, ENC_THREADS), ENC_THREADS, 0, ctx->stream>>>(
            dwpe, dout, B, T, C);
        CUDA_LAUNCH_CHECK("encoder_backward_dwpe_bf16_kernel");
    }
    return FORGE_OK;
}
