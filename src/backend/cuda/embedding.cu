/*
 * embedding.cu: token embedding lookup and learned position embedding
 * (GPT-2 wte / wpe) on the GPU.
 *
 * The decision a reader would get wrong: embedding_backward scatters
 * dtable[ids[n]] += dout[n], and one id appears many times in a batch. The
 * usual GPU answer is atomicAdd, whose order (and so whose rounding) changes
 * from run to run. Here each distinct id has ONE owner block: block n owns
 * its id iff no row m < n has the same id. The owner starts from dtable's
 * row and adds every matching dout row in order m = n, n+1, ..., exactly the
 * sequence of the CPU reference, so the result is deterministic and equal
 * to the CPU's bit for bit. The ownership test scans the ids (O(N^2) integer
 * compares in total, spread over N blocks): cheap for N = B*T up to tens of
 * thousands; a sort-based grouping is the upgrade if it ever shows in a
 * profile.
 *
 * An id outside [0, V) is never read through: embedding_forward writes NaN
 * into that row (so the loss turns non-finite rather than silently wrong),
 * the backward skips it, and both record it in ctx->input_error, which the
 * step reads back once (poll_errors) and reports as FORGE_ERR_DATA naming
 * the id. Checking on the host would need a sync per op; the CPU reference
 * refuses such an id when the op runs. decode_embed (the decode step's one
 * row, its id and position read from device memory) follows the same rule
 * for a bad id or position.
 */
#include "cuda_ops.h"

#define EMB_THREADS 256
#define EMB_BWD_COLS_PER_THREAD 4

/* ---- kernels ------------------------------------------------------------ */

/* out (N,C) = table (V,C) [ids (N)] ; grid (ceil(C/256), N) */
__global__ void embedding_forward_kernel(float *__restrict__ out, const int32_t *__restrict__ ids,
                                         const float *__restrict__ table, int C, int V, int row0,
                                         cuda_input_error *err) {
    int n = blockIdx.y;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int id = ids[n];
    const bool valid = id >= 0 && id < V;
    if (!valid && c == 0) cuda_report_bad_id(err, CUDA_BAD_ID_EMBEDDING, row0 + n, id, V);
    out[(size_t)n * C + c] = valid ? table[(size_t)id * C + c] : __int_as_float(0x7fc00000);
}

/* One block per row n; see the file comment for the ownership rule. */
__global__ void __launch_bounds__(EMB_THREADS)
    embedding_backward_kernel(float *__restrict__ dtable, const float *__restrict__ dout,
                              const int32_t *__restrict__ ids, int N, int C, int V, cuda_input_error *err) {
    __shared__ unsigned match_mask[EMB_THREADS / 32];
    const int n = blockIdx.x;
    const int tid = threadIdx.x;
    const int id = ids[n];
    if (id < 0 || id >= V) { /* uniform over the block */
        if (tid == 0) cuda_report_bad_id(err, CUDA_BAD_ID_EMBEDDING, n, id, V);
        return;
    }

    /* 1. does an earlier row carry the same id? then that row's block owns it */
    for (int k0 = 0; k0 < n; k0 += EMB_THREADS) {
        int k = k0 + tid;
        int hit = k < n && ids[k] == id;
        if (__syncthreads_or(hit)) return; /* uniform over the block */
    }

    /* 2. owner: for each column tile, start from dtable and add the matching
     *    rows m >= n in increasing m */
    for (int c0 = 0; c0 < C; c0 += EMB_THREADS * EMB_BWD_COLS_PER_THREAD) {
        float acc[EMB_BWD_COLS_PER_THREAD];
#pragma unroll
        for (int q = 0; q < EMB_BWD_COLS_PER_THREAD; q++) {
            int c = c0 + q * EMB_THREADS + tid;
            acc[q] = c < C ? dtable[(size_t)id * C + c] : 0.0f;
        }
        for (int m0 = n; m0 < N; m0 += EMB_THREADS) {
            int m = m0 + tid;
            unsigned mask = __ballot_sync(0xffffffffu, m < N && ids[m] == id);
            __syncthreads(); /* previous chunk's masks have been read */
            if ((tid & 31) == 0) match_mask[tid >> 5] = mask;
            __syncthreads();
            for (int w = 0; w < EMB_THREADS / 32; w++) {
                unsigned bits = match_mask[w];
                while (bits) {
                    int j = __ffs(bits) - 1;
                    bits &= bits - 1;
                    const float *g = dout + (size_t)(m0 + w * 32 + j) * C;
#pragma unroll
                    for (int q = 0; q < EMB_BWD_COLS_PER_THREAD; q++) {
                        int c = c0 + q * EMB_THREADS + tid;
                        if (c < C) acc[q] += g[c];
                    }
                }
            }
        }
#pragma unroll
        for (int q = 0; q < EMB_BWD_COLS_PER_THREAD; q++) {
            int c = c0 + q * EMB_THREADS + tid;
            if (c < C) dtable[(size_t)id * C + c] = acc[q];
        }
    }
}

/* out (B,T,C) = inp + wpe[t] ; grid-stride over B*T*C */
__global__ void position_forward_kernel(float *__restrict__ out, const float *__restrict__ inp,
                                        const float *__restrict__ wpe, int T, int C, size_t total) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t tc = i % ((size_t)T * C); /* t*C + c */
        out[i] = inp[i] + wpe[tc];
    }
}

/* out (C) = wte[*id] + wpe[*pos] (wpe NULL: the wte row); grid-stride over C. A bad id or position: a NaN row. */
__global__ void decode_embed_kernel(float *__restrict__ out, const int32_t *__restrict__ id_at,
                                    const int32_t *__restrict__ pos_at, const float *__restrict__ wte,
                                    const float *__restrict__ wpe, int C, int V, int maxT, cuda_input_error *err) {
    const int id = *id_at, pos = wpe ? *pos_at : 0;
    const bool bad_id = id < 0 || id >= V, bad_pos = wpe && (pos < 0 || pos >= maxT);
    const size_t first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (first == 0 && bad_id) cuda_report_bad_id(err, CUDA_BAD_ID_EMBEDDING, 0, id, V);
    else if (first == 0 && bad_pos) cuda_report_bad_id(err, CUDA_BAD_POSITION, 0, pos, maxT);
    for (size_t c = first; c < (size_t)C; c += (size_t)gridDim.x * blockDim.x) {
        if (bad_id || bad_pos) out[c] = __int_as_float(0x7fffffff);
        else if (wpe) out[c] = wte[(size_t)id * C + c] + wpe[(size_t)pos * C + c];
        else out[c] = wte[(size_t)id * C + c];
    }
}

/* thread per (t,c): dinp += dout, dwpe[t,c] += dout[b,t,c] summed in order b */
__global__ void position_backward_kernel(float *__restrict__ dinp, float *__restrict__ dwpe,
                                         const float *__restrict__ dout, int B, int T, int C) {
    size_t TC = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < TC;
         i += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) {
            float g = dout[b * TC + i];
            dinp[b * TC + i] += g;
            acc += g;
        }
        dwpe[i] = acc;
    }
}

/* ---- launchers ---------------------------------------------------------- */

forge_status cuda_embedding_forward(forge_backend *be, float *out, const int32_t *ids,
                                    const float *table, int N, int C, int V) {
    if (N <= 0 || C <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    /* rows on grid.y (limit 65535): fold very tall N into several launches */
    for (int n0 = 0; n0 < N; n0 += 65535) {
        int rows = N - n0 < 65535 ? N - n0 : 65535;
        dim3 grid((C + EMB_THREADS - 1) / EMB_THREADS, rows);
        embedding_forward_kernel<<<grid, EMB_THREADS, 0, ctx->stream>>>(out + (size_t)n0 * C, ids + n0, table, C,
                                                                        V, n0, ctx->input_error);
        CUDA_LAUNCH_CHECK("embedding_forward_kernel");
    }
    return FORGE_OK;
}

forge_status cuda_embedding_backward(forge_backend *be, float *dtable, const float *dout,
                                     const int32_t *ids, int N, int C, int V) {
    if (N <= 0 || C <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    embedding_backward_kernel<<<N, EMB_THREADS, 0, ctx->stream>>>(dtable, dout, ids, N, C, V, ctx->input_error);
    CUDA_LAUNCH_CHECK("embedding_backward_kernel");
    return FORGE_OK;
}

forge_status cuda_position_forward(forge_backend *be, float *out, const float *inp, const float *wpe,
                                   int B, int T, int C) {
    size_t total = (size_t)B * T * C;
    if (total == 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    position_forward_kernel<<<cuda_grid_for(ctx, total, EMB_THREADS), EMB_THREADS, 0, ctx->stream>>>(
        out, inp, wpe, T, C, total);
    CUDA_LAUNCH_CHECK("position_forward_kernel");
    return FORGE_OK;
}

forge_status cuda_decode_embed(forge_backend *be, float *out, const int32_t *id, const int32_t *pos, const float *wte,
                               const float *wpe, int C, int V, int maxT) {
    if (C <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    decode_embed_kernel<<<cuda_grid_for(ctx, (size_t)C, EMB_THREADS), EMB_THREADS, 0, ctx->stream>>>(
        out, id, pos, wte, wpe, C, V, maxT, ctx->input_error);
    CUDA_LAUNCH_CHECK("decode_embed_kernel");
    return FORGE_OK;
}

forge_status cuda_position_backward(forge_backend *be, float *dinp, float *dwpe, const float *dout,
                                    int B, int T, int C) {
    size_t TC = (size_t)T * C;
    if (TC == 0 || B <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    position_backward_kernel<<<cuda_grid_for(ctx, TC, EMB_THREADS), EMB_THREADS, 0, ctx->stream>>>(
        dinp, dwpe, dout, B, T, C);
    CUDA_LAUNCH_CHECK("position_backward_kernel");
    return FORGE_OK;
}
