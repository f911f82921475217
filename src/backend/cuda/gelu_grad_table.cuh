/*
 * gelu_grad_table.cuh: the bf16 GELU backward's kernels (elementwise_bf16.cu's aligned paths of gelu_backward_bf16
 * and gelu_backward_dbias_bf16) and the table they read gelu'(x) from; shared with the lab's bench of them
 * (lab/elementwise/bench_gelu16_bwd.cu).
 *
 * x is bf16, so gelu'(x) = forge_gelu_grad(x) (base/fmath.h) takes one value per bit pattern. The table holds
 * those values for a window of patterns, computed on the device by forge_gelu_grad itself (gelu_grad_table_kernel,
 * once per backend context), so a lookup gives the bits that computing it gives; the kernel then does what the
 * reference does with them: dinp = rn(fmaf(gelu'(x), dout, old)) (old = +0 for the written form).
 *
 * The window: both signs, exponent fields [GELU_TAB_E0, GELU_TAB_E0 + 32), every mantissa, i.e. |x| in
 * [2^-24, 2^8): 2 x 32 x 128 fp32 = 32 KB, which every block copies into shared memory before its grid-stride
 * loop. Slot of a pattern b in the window: ((b & 0x7fff) - (GELU_TAB_E0 << 7)) | (sign << 12). The patterns
 * outside it (zero, |x| < 2^-24 and subnormals, |x| >= 256, inf, NaN) compute forge_gelu_grad directly: rare for
 * a pre-activation, a divergent branch when they occur. (The whole table, 65536 floats = 256 KB, does not
 * fit in shared memory; outside the window lie only a tiny fraction of pre-activations.)
 *
 * The loop walks 8-element (16-byte) chunks, two chunks per thread per iteration with all loads issued before
 * any is used (more bytes in flight per thread), then the n % 8 tail element by element. Every pointer must be
 * 16-byte aligned (the caller checks; elementwise_bf16.cu's element-by-element kernel takes the other cases).
 * Both backward kernels wait for the previous kernel (forge_pdl_wait, pdl.cuh) before their first global access,
 * the table's copy included: they are launched with programmatic dependent launch.
 */
#ifndef FORGE_GELU_GRAD_TABLE_CUH
#define FORGE_GELU_GRAD_TABLE_CUH

#include "../../base/fmath.h"
#include "bf16_io.cuh"
#include "pdl.cuh"

#define GELU_TAB_E0 103u        /* the window's first exponent field: 2^-24 */
#define GELU_TAB_SPAN 4096u     /* patterns of one sign in the window: 32 exponents x 128 mantissas */
#define GELU_TAB_FLOATS 8192    /* both signs */
#define GELU_BWD_THREADS 512

/* table[i] = forge_gelu_grad of the pattern of slot i, for i in [0, GELU_TAB_FLOATS) */
static __global__ void gelu_grad_table_kernel(float *table) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= GELU_TAB_FLOATS) return;
    const uint32_t b = ((i >> 12) << 15) | ((i & (GELU_TAB_SPAN - 1)) + (GELU_TAB_E0 << 7));
    table[i] = forge_gelu_grad(__uint_as_float(b << 16));
}

/* gelu'(x) of the bf16 pattern b (the low 16 bits): from the table in the window, computed outside it */
__device__ __forceinline__ float gelu_grad_lookup(const float *table, uint32_t b) {
    const uint32_t slot = (b & 0x7fffu) - (GELU_TAB_E0 << 7);
    if (slot < GELU_TAB_SPAN) return table[slot | ((b >> 15) << 12)];
    return forge_gelu_grad(__uint_as_float(b << 16));
}

/* one chunk: d[0..8) = fmaf(gelu'(x), g, d) for the 8 patterns of xv and the 8 dout of gv. The 8 table reads go
 * out together (a pattern outside the window reads some slot of its sign, discarded), then one branch, rarely
 * taken, computes the patterns outside the window. */
__device__ __forceinline__ void gelu_bwd_chunk(float d[8], const float *table, uint4 xv, uint4 gv) {
    float g[8], f[8];
    uint32_t b[8], outside = 0;
    bf16x8_unpack(g, gv);
    const uint32_t w[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        b[2 * k] = w[k] & 0xffffu; /* little-endian: the lower address is the low half */
        b[2 * k + 1] = w[k] >> 16;
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const uint32_t slot = (b[k] & 0x7fffu) - (GELU_TAB_E0 << 7);
        outside |= (uint32_t)(slot >= GELU_TAB_SPAN) << k;
        f[k] = table[(slot & (GELU_TAB_SPAN - 1)) | ((b[k] >> 15) << 12)];
    }
    if (outside) {
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (outside & (1u << k)) f[k] = forge_gelu_grad(__uint_as_float(b[k] << 16));
    }
#pragma unroll
    for (int k = 0; k < 8; k++) d[k] = fmaf(f[k], g[k], d[k]);
}

/* dinp = rn(dinp + gelu'(inp) dout) (ACC) or rn(0 + gelu'(inp) dout); table_g: gelu_grad_table_kernel's output */
template <bool ACC>
__global__ void __launch_bounds__(GELU_BWD_THREADS)
    gelu_backward_bf16_table_kernel(forge_bf16 *__restrict__ dinp, const forge_bf16 *__restrict__ inp,
                                    const forge_bf16 *__restrict__ dout, size_t n,
                                    const float *__restrict__ table_g) {
    __shared__ __align__(16) float table[GELU_TAB_FLOATS];
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    for (int i = threadIdx.x; i < GELU_TAB_FLOATS / 4; i += GELU_BWD_THREADS)
        reinterpret_cast<float4 *>(table)[i] = reinterpret_cast<const float4 *>(table_g)[i];
    __syncthreads();

    const size_t chunks = n / 8, stride = (size_t)gridDim.x * GELU_BWD_THREADS;
    const size_t tid = (size_t)blockIdx.x * GELU_BWD_THREADS + threadIdx.x;
    const uint4 *x4 = reinterpret_cast<const uint4 *>(inp), *g4 = reinterpret_cast<const uint4 *>(dout);
    uint4 *d4 = reinterpret_cast<uint4 *>(dinp);
    size_t c = tid;
    for (; c + stride < chunks; c += 2 * stride) { /* chunks c and c + stride */
        const uint4 xa = x4[c], ga = g4[c], xb = x4[c + stride], gb = g4[c + stride];
        float da[8], db[8];
        if (ACC) {
            bf16x8_unpack(da, d4[c]);
            bf16x8_unpack(db, d4[c + stride]);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) da[k] = db[k] = 0.0f;
        }
        gelu_bwd_chunk(da, table, xa, ga);
        gelu_bwd_chunk(db, table, xb, gb);
        bf16_store<8>(dinp + c * 8, da);
        bf16_store<8>(dinp + (c + stride) * 8, db);
    }
    if (c < chunks) {
        const uint4 xa = x4[c], ga = g4[c];
        float da[8];
        if (ACC) {
            bf16x8_unpack(da, d4[c]);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) da[k] = 0.0f;
        }
        gelu_bwd_chunk(da, table, xa, ga);
        bf16_store<8>(dinp + c * 8, da);
    }
    for (size_t i = chunks * 8 + tid; i < n; i += stride) {
        const float d = ACC ? bf16_to_f32(dinp[i]) : 0.0f;
        dinp[i] = f32_to_bf16(fmaf(gelu_grad_lookup(table, inp[i]), bf16_to_f32(dout[i]), d));
    }
}

/* ---- with the bias gradient ---------------------------------------------------------------------------------------
 * dinp (N, OC) = rn(0 + gelu'(inp) dout) as above, and partial[r][oc] = the fp32 sum of the ROUNDED dinp[n][oc] over
 * the rows n of chunk r (rows_per_chunk rows each): the partials matmul_bf16.cu's mm_bf16_dbias_partial8_kernel
 * computes from the stored dinp, bit for bit, because the partition and the order are the same: a work item
 * (column tile of 256, row chunk r) is a (32, GELU_DBIAS_ROWS) block's, thread (x, y) sums columns [8x, 8x + 8) of
 * the tile over the rows r rows_per_chunk + y, + GELU_DBIAS_ROWS, ... in order, and the row lanes are combined in
 * lane order. The blocks loop over the work items (tile fastest), so each copies the table once.
 * The loop body of a thread takes U of its rows (y, y + GELU_DBIAS_ROWS, ...): it reads all of them (2 x 16 bytes a
 * row), then computes, stores and adds them one after another in row order: the same operations in the same order as
 * one row at a time, with more of the thread's loads in flight (ptxas places the loads; the first row's index math
 * may go between them). The rows left over (fewer than U) go one at a time. The product runs
 * U = GELU_DBIAS_UNROLL with at least GELU_DBIAS_MIN_BLOCKS blocks per SM (__launch_bounds__: at most 64 registers,
 * so the grid keeps 4 blocks of 256 per SM; U = 4 takes 72 and 3 blocks); the lab times other U (MIN_BLOCKS = 0: no
 * minimum; lab/notes/elementwise.md).
 * OC % 8 == 0 and 16-byte aligned pointers (the caller checks). */
#define GELU_DBIAS_ROWS 8       /* matmul_bf16.cu's MMB_DBIAS_ROWS: the partition of its partials */
#define GELU_DBIAS_UNROLL 2     /* rows of a thread read before any is used */
#define GELU_DBIAS_MIN_BLOCKS 4 /* the product's __launch_bounds__ minimum of resident blocks per SM */

/* The U rows of a thread at element i of the first, GELU_DBIAS_ROWS rows apart (step elements): dinp written,
 * acc[k] += the stored value of column k, row after row. */
template <int U>
__device__ __forceinline__ void gelu_dbias_rows(float acc[8], forge_bf16 *__restrict__ dinp,
                                                const forge_bf16 *__restrict__ inp,
                                                const forge_bf16 *__restrict__ dout, const float *table, size_t i,
                                                size_t step) {
    uint4 xv[U], gv[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        xv[u] = *reinterpret_cast<const uint4 *>(inp + i + u * step);
        gv[u] = *reinterpret_cast<const uint4 *>(dout + i + u * step);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        float d[8];
#pragma unroll
        for (int k = 0; k < 8; k++) d[k] = 0.0f;
        gelu_bwd_chunk(d, table, xv[u], gv[u]);
        bf16_store<8>(dinp + i + u * step, d);
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] += bf16_to_f32(f32_to_bf16(d[k])); /* the stored value */
    }
}

template <int U, int MIN_BLOCKS>
static __global__ void __launch_bounds__(32 * GELU_DBIAS_ROWS, MIN_BLOCKS)
    gelu_backward_dbias_bf16_kernel(forge_bf16 *__restrict__ dinp, float *__restrict__ partial,
                                    const forge_bf16 *__restrict__ inp, const forge_bf16 *__restrict__ dout, int N,
                                    int OC, int R, int rows_per_chunk, const float *__restrict__ table_g) {
    __shared__ __align__(16) float table[GELU_TAB_FLOATS];
    __shared__ float s[GELU_DBIAS_ROWS][256 + 4];
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const int t = threadIdx.y * 32 + threadIdx.x;
    for (int i = t; i < GELU_TAB_FLOATS / 4; i += 32 * GELU_DBIAS_ROWS)
        reinterpret_cast<float4 *>(table)[i] = reinterpret_cast<const float4 *>(table_g)[i];
    __syncthreads();

    const int tiles = (OC + 255) / 256, lc = threadIdx.x * 8;
    const size_t step = (size_t)GELU_DBIAS_ROWS * OC;
    for (int item = blockIdx.x; item < tiles * R; item += gridDim.x) {
        const int c0 = (item % tiles) * 256 + lc, r = item / tiles;
        const int n_begin = r * rows_per_chunk, n_end = min(N, n_begin + rows_per_chunk);
        float acc[8];
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] = 0.0f;
        if (c0 < OC) {
            int n = n_begin + threadIdx.y;
            for (; n + (U - 1) * GELU_DBIAS_ROWS < n_end; n += U * GELU_DBIAS_ROWS)
                gelu_dbias_rows<U>(acc, dinp, inp, dout, table, (size_t)n * OC + c0, step);
            for (; n < n_end; n += GELU_DBIAS_ROWS)
                gelu_dbias_rows<1>(acc, dinp, inp, dout, table, (size_t)n * OC + c0, step);
        }
#pragma unroll
        for (int k = 0; k < 8; k++) s[threadIdx.y][lc + k] = acc[k];
        __syncthreads();
        if (threadIdx.y == 0 && c0 < OC) {
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float sum = 0.0f;
#pragma unroll
                for (int l = 0; l < GELU_DBIAS_ROWS; l++) sum += s[l][lc + k];
                partial[(size_t)r * OC + c0 + k] = sum;
            }
        }
        __syncthreads(); /* s is read before the next item writes it */
    }
}

/* The grid: blocks_per_sm blocks on each of num_sms SMs (the copy of the table is amortised over a long loop),
 * fewer when n has fewer chunks than that many threads. */
static inline unsigned gelu_bwd_grid(int num_sms, int blocks_per_sm, size_t n) {
    const size_t need = (n / 8 + GELU_BWD_THREADS - 1) / GELU_BWD_THREADS;
    size_t blocks = (size_t)num_sms * (size_t)(blocks_per_sm > 0 ? blocks_per_sm : 1);
    if (need < blocks) blocks = need;
    return blocks < 1 ? 1u : (unsigned)blocks;
}

#endif
