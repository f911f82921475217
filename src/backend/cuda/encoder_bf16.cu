/*
 * encoder_bf16.cu: the bf16 token + position embedding on the GPU; the reference is
 * backend/cpu/encoder_bf16.c (docs/mixed-precision.md).
 *
 *   forward   out[b,t] = rn(wte[id] + wpe[t]) (wpe NULL: the wte row, copied), 8-wide chunks where C % 8 == 0
 *             and the pointers are 16-byte aligned, element by element otherwise
 *   backward  dwte[id] += dout[b,t] and dwpe[t] += dout[b,t], fp32 accumulators
 *
 * Bit-identical to the CPU: the forward is one fp32 add and one rounding per element; the backward adds in the
 * CPU's order with no float atomics. dwte: every id's rows are gathered in increasing n (a counting sort: counts
 * and slots by integer atomics, whose results do not depend on timing, then each row's rank among its id's rows),
 * and one block per id starts from dwte's row and adds them in that order, the sequence of the CPU's loop; O(N + V)
 * work. When the sort's index arrays do not fit the workspace, embedding.cu's ownership rule instead (the block of
 * row n owns its id iff no earlier row has it and scans the later rows for it; O(N^2) for a batch of distinct
 * ids). dwpe: one thread per (t, c), starting from dwpe and adding the batch in order b.
 *
 * An id outside [0, V) is never read through (embedding.cu's rule): the forward writes a NaN row, the backward
 * skips the row, and both record it in ctx->input_error for poll_errors, which names it (FORGE_ERR_DATA); the CPU
 * reference refuses such an id when the op runs.
 *
 * Every kernel here launches with programmatic dependent launch (pdl.cuh) and waits for the previous kernel
 * (forge_pdl_wait) before its first global access.
 */
#include "bf16_io.cuh"
#include "pdl.cuh"

#define ENC_THREADS 256
#define ENC_BWD_COLS_PER_THREAD 4

/* ---- kernels ------------------------------------------------------------ */

/* grid-stride over the N * (C / W) chunks of out; W = 8: every chunk one 16-byte vector */
template <int W>
__global__ void __launch_bounds__(ENC_THREADS)
    encoder_forward_bf16_kernel(forge_bf16 *__restrict__ out, const int32_t *__restrict__ ids,
                                const forge_bf16 *__restrict__ wte, const forge_bf16 *__restrict__ wpe, int N, int T,
                                int C, int V, cuda_input_error *err) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
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
    forge_pdl_wait();
    forge_pdl_launch_dependents();
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

/* ---- dwte through a counting sort of the rows by id -------------------------- */

/* count[id] = the rows carrying id (a bad id is recorded and skipped) */
__global__ void __launch_bounds__(ENC_THREADS)
    enc_sort_count_kernel(int *__restrict__ count, const int32_t *__restrict__ ids, int N, int V,
                          cuda_input_error *err) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
        const int id = ids[n];
        if (id < 0 || id >= V) cuda_report_bad_id(err, CUDA_BAD_ID_EMBEDDING, n, id, V);
        else atomicAdd(&count[id], 1);
    }
}

#define ENC_SCAN_THREADS 1024
#define ENC_SCAN_PER 8 /* counts per thread and tile: a tile is ENC_SCAN_THREADS * ENC_SCAN_PER ids */
/* offset[v] = sum of count[0 .. v), one block walking the ids in tiles. A tile is loaded coalesced into shared
 * memory (every thread's loads issued at once: one memory round trip a tile instead of one per id a thread), each
 * thread scans its ENC_SCAN_PER consecutive ids there, the threads' totals are scanned by warp shuffles, and the
 * tile's offsets go back coalesced; `carry` is the sum of the earlier tiles. Integer sums: any order gives the
 * same offsets. */
__global__ void __launch_bounds__(ENC_SCAN_THREADS)
    enc_sort_scan_kernel(int *__restrict__ offset, const int *__restrict__ count, int V) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    constexpr int TILE = ENC_SCAN_THREADS * ENC_SCAN_PER, WARPS = ENC_SCAN_THREADS / 32;
    /* thread t's ids at t * (PER + 1): the stride is odd, so a warp's reads of its runs hit distinct banks */
    __shared__ int tile[ENC_SCAN_THREADS * (ENC_SCAN_PER + 1)];
    __shared__ int warp_sum[WARPS];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    int carry = 0;
    for (int v0 = 0; v0 < V; v0 += TILE) {
#pragma unroll
        for (int k = 0; k < ENC_SCAN_PER; k++) {
            const int i = k * ENC_SCAN_THREADS + tid; /* coalesced: consecutive threads, consecutive ids */
            tile[i / ENC_SCAN_PER * (ENC_SCAN_PER + 1) + i % ENC_SCAN_PER] = v0 + i < V ? count[v0 + i] : 0;
        }
        __syncthreads();
        int *run = tile + tid * (ENC_SCAN_PER + 1);
        int sum = 0;
#pragma unroll
        for (int k = 0; k < ENC_SCAN_PER; k++) sum += run[k];
        int incl = sum; /* inclusive scan of the threads' sums: within the warp, then over the warps */
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int up = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d) incl += up;
        }
        if (lane == 31) warp_sum[warp] = incl;
        __syncthreads();
        if (warp == 0) {
            int w = lane < WARPS ? warp_sum[lane] : 0;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const int up = __shfl_up_sync(0xffffffffu, w, d);
                if (lane >= d) w += up;
            }
            if (lane < WARPS) warp_sum[lane] = w; /* inclusive over the warps */
        }
        __syncthreads();
        int excl = carry + incl - sum + (warp > 0 ? warp_sum[warp - 1] : 0);
        const int tile_total = warp_sum[WARPS - 1];
#pragma unroll
        for (int k = 0; k < ENC_SCAN_PER; k++) {
            const int c = run[k];
            run[k] = excl;
            excl += c;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < ENC_SCAN_PER; k++) {
            const int i = k * ENC_SCAN_THREADS + tid;
            if (v0 + i < V) offset[v0 + i] = tile[i / ENC_SCAN_PER * (ENC_SCAN_PER + 1) + i % ENC_SCAN_PER];
        }
        carry += tile_total;
        __syncthreads(); /* the next tile overwrites tile[] and warp_sum[] */
    }
}

/* rows[offset[id] ..) = the rows of id, in no particular order */
__global__ void __launch_bounds__(ENC_THREADS)
    enc_sort_scatter_kernel(int *__restrict__ rows, int *__restrict__ fill, const int *__restrict__ offset,
                            const int32_t *__restrict__ ids, int N, int V) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
        const int id = ids[n];
        if (id >= 0 && id < V) rows[offset[id] + atomicAdd(&fill[id], 1)] = n;
    }
}

/* sorted[offset[id] + r] = n, r = how many of id's rows come before n: each id's rows in increasing n */
__global__ void __launch_bounds__(ENC_THREADS)
    enc_sort_rank_kernel(int *__restrict__ sorted, const int *__restrict__ rows, const int *__restrict__ offset,
                         const int *__restrict__ count, const int32_t *__restrict__ ids, int N, int V) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
        const int id = ids[n];
        if (id < 0 || id >= V) continue;
        const int o = offset[id], k = count[id];
        int r = 0;
        for (int j = 0; j < k; j++) r += rows[o + j] < n;
        sorted[o + r] = n;
    }
}

/* the block of row n, when n is its id's first row: dwte[id] += its rows in increasing n */
__global__ void __launch_bounds__(ENC_THREADS)
    enc_sort_sum_kernel(float *__restrict__ dwte, const forge_bf16 *__restrict__ dout, const int *__restrict__ sorted,
                        const int *__restrict__ offset, const int *__restrict__ count,
                        const int32_t *__restrict__ ids, int C, int V) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const int n = blockIdx.x;
    const int id = ids[n];
    if (id < 0 || id >= V) return;
    const int o = offset[id], k = count[id];
    if (sorted[o] != n) return; /* uniform over the block */
    for (int c = threadIdx.x; c < C; c += ENC_THREADS) {
        float acc = dwte[(size_t)id * C + c];
#pragma unroll 8
        for (int j = 0; j < k; j++) acc += bf16_to_f32(dout[(size_t)sorted[o + j] * C + c]);
        dwte[(size_t)id * C + c] = acc;
    }
}

/* thread per (t, c): dwpe[t,c] += dout[b,t,c], in order b */
__global__ void __launch_bounds__(ENC_THREADS)
    encoder_backward_dwpe_bf16_kernel(float *__restrict__ dwpe, const forge_bf16 *__restrict__ dout, int B, int T,
                                      int C) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
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
    CUDA_LAUNCH_TRY(forge_pdl_launch(vec ? encoder_forward_bf16_kernel<8> : encoder_forward_bf16_kernel<1>, grid,
                                     ENC_THREADS, 0, ctx->stream, ctx->pdl, out, ids, wte, wpe, N, T, C, V,
                                     ctx->input_error),
                    "encoder_forward_bf16_kernel");
    return FORGE_OK;
}

forge_status cuda_encoder_backward_bf16(forge_backend *be, float *dwte, float *dwpe, const forge_bf16 *dout,
                                        const int32_t *ids, int B, int T, int C, int V) {
    if (B <= 0 || T <= 0 || C <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    const int N = B * T;
    if (3 * (size_t)V + 2 * (size_t)N <= CUDA_WS_FLOATS) { /* the sort's int arrays in the workspace */
        int *count = (int *)ctx->ws, *fill = count + V, *offset = fill + V, *rows = offset + V, *sorted = rows + N;
        const unsigned grid = cuda_grid_for(ctx, (size_t)N, ENC_THREADS);
        CUDA_TRY(cudaMemsetAsync(count, 0, 2 * (size_t)V * sizeof(int), ctx->stream)); /* count and fill */
        CUDA_LAUNCH_TRY(forge_pdl_launch(enc_sort_count_kernel, grid, ENC_THREADS, 0, ctx->stream, ctx->pdl, count,
                                         ids, N, V, ctx->input_error),
                        "enc_sort_count_kernel");
        CUDA_LAUNCH_TRY(forge_pdl_launch(enc_sort_scan_kernel, 1, ENC_SCAN_THREADS, 0, ctx->stream, ctx->pdl, offset,
                                         count, V),
                        "enc_sort_scan_kernel");
        CUDA_LAUNCH_TRY(forge_pdl_launch(enc_sort_scatter_kernel, grid, ENC_THREADS, 0, ctx->stream, ctx->pdl, rows,
                                         fill, offset, ids, N, V),
                        "enc_sort_scatter_kernel");
        CUDA_LAUNCH_TRY(forge_pdl_launch(enc_sort_rank_kernel, grid, ENC_THREADS, 0, ctx->stream, ctx->pdl, sorted,
                                         rows, offset, count, ids, N, V),
                        "enc_sort_rank_kernel");
        CUDA_LAUNCH_TRY(forge_pdl_launch(enc_sort_sum_kernel, N, ENC_THREADS, 0, ctx->stream, ctx->pdl, dwte, dout,
                                         sorted, offset, count, ids, C, V),
                        "enc_sort_sum_kernel");
    } else {
        CUDA_LAUNCH_TRY(forge_pdl_launch(encoder_backward_dwte_bf16_kernel, N, ENC_THREADS, 0, ctx->stream, ctx->pdl,
                                         dwte, dout, ids, N, C, V, ctx->input_error),
                        "encoder_backward_dwte_bf16_kernel");
    }
    if (dwpe) {
        const size_t TC = (size_t)T * C;
        CUDA_LAUNCH_TRY(forge_pdl_launch(encoder_backward_dwpe_bf16_kernel, cuda_grid_for(ctx, TC, ENC_THREADS),
                                         ENC_THREADS, 0, ctx->stream, ctx->pdl, dwpe, dout, B, T, C),
                        "encoder_backward_dwpe_bf16_kernel");
    }
    return FORGE_OK;
}
