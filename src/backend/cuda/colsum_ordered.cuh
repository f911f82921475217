/*
 * colsum_ordered.cuh: the second pass of the deterministic column sums, as block-level building blocks:
 * out[c] (+)= sum over r = 0, 1, ..., R-1 of partial[r * stride + c], added in that order from a zero sum.
 *
 * The sum is short (R <= a few hundred partials) and its order is fixed, so one thread has to add a column's
 * partials one after another; what costs is waiting for the loads. A block of COLSUM_COLS columns x
 * COLSUM_GROUPS row groups loads a chunk of CHUNK partials per column into shared memory, every thread issuing
 * its CHUNK / COLSUM_GROUPS loads at once (one memory round trip per chunk instead of one per few rows), then the
 * first group adds the chunk in row order. The bits are those of the plain loop
 * `for (r = 0; r < R; r++) sum += partial[r][c]`, whatever CHUNK is.
 *
 * Two ways to run it:
 * - a kernel of its own after the first pass (reduce.cu's cuda_colsum_finish: the fp32 ops);
 * - "the last arrivals finish" (colsum_last_finish): the first-pass kernel finishes its own sums, which saves the
 *   bf16 step a launch, its gap and its ramp per column sum. Every block writes its partials, fences, and takes a
 *   ticket from a device counter; the last F blocks to arrive become finishers: each waits until the counter says
 *   every block has written (spinning on an acquire load), then sums units of COLSUM_COLS columns with the loop
 *   above, loading the partials past L1 (__ldcg: other blocks of the same grid wrote them). The last finisher to
 *   finish puts the counter back to 0, so the next launch (or a graph's replay) starts from 0; launches on the
 *   context's stream run one after another (a PDL launch waits in forge_pdl_wait before it touches the counter),
 *   so one counter serves every call site.
 *   Why the wait cannot deadlock: a finisher waits only for blocks that took no ticket yet, and there are fewer
 *   than F of those; at most F - 1 finishers wait at once, each holding one block's resources, and F <= half the
 *   SM count (colsum_last_plan), so at least half the SMs hold no waiting finisher and run the outstanding blocks
 *   (half, not all but one: room to spare for another stream's kernels, the side stream's collectives, which may
 *   hold SMs meanwhile). A kernel launched with PDL lets the next kernel be scheduled only once all of its own
 *   blocks have started (pdl.cuh), so a dependent grid never takes the slots an outstanding block needs.
 */
#ifndef FORGE_COLSUM_ORDERED_CUH
#define FORGE_COLSUM_ORDERED_CUH

#include "cuda_ops.h"

#define COLSUM_COLS 64
#define COLSUM_GROUPS 4
#define COLSUM_THREADS (COLSUM_COLS * COLSUM_GROUPS)
#define COLSUM_CHUNK 160 /* >= the partial counts used (<= 128 row chunks, <= an H200's 132 SMs): one round trip */

typedef float colsum_chunk_smem[COLSUM_CHUNK][COLSUM_COLS];

/* Every thread of a block of COLSUM_THREADS threads calls this (it synchronises); t = the thread's index in the
 * block, column lane = t % COLSUM_COLS; s: CHUNK rows of COLSUM_COLS floats of shared memory. col points at the
 * column's first partial (ignored where valid is false); the sum is meaningful in threads with t < COLSUM_COLS. */
template <int CHUNK>
__device__ __forceinline__ float colsum_ordered_rows(const float *__restrict__ col, size_t stride, int R, bool valid,
                                                     float (*s)[COLSUM_COLS], int t) {
    static_assert(CHUNK % COLSUM_GROUPS == 0, "every group loads the same number of rows of a chunk");
    const int lane = t % COLSUM_COLS, g = t / COLSUM_COLS;
    constexpr int PER = CHUNK / COLSUM_GROUPS;
    float sum = 0.0f;
    for (int r0 = 0; r0 < R; r0 += CHUNK) {
        const int n = min(CHUNK, R - r0);
        float v[PER];
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int r = g + k * COLSUM_GROUPS;
            v[k] = valid && r < n ? __ldcg(col + (size_t)(r0 + r) * stride) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int r = g + k * COLSUM_GROUPS;
            if (r < n) s[r][lane] = v[k];
        }
        __syncthreads();
        if (g == 0)
            for (int r = 0; r < n; r++) sum += s[r][lane];
        __syncthreads();
    }
    return sum;
}

/* ---- the last arrivals finish ------------------------------------------------------------------------------------ */

/* A first-pass kernel's finish (a kernel parameter): out[p][c] += sum over r of partial[(p R + r) C + c], r in
 * order, for p < n_out. ticket: the context's counter (0 between launches), or NULL: the kernel writes its
 * partials only and a separate finish sums them (the lab's A/B of the two forms). */
typedef struct {
    float *out0, *out1; /* out1: n_out == 2 only */
    float *partial;     /* (n_out, R, C) */
    unsigned *ticket;
    int R, C, n_out;
    int finishers; /* F: the last F blocks to arrive finish; unit u of COLSUM_COLS columns goes to finisher u % F */
} colsum_last;

/* The finish of a first pass of `blocks` blocks of COLSUM_THREADS threads (R, C, n_out as in colsum_last): one
 * finisher per unit of COLSUM_COLS columns, but no more than the grid's blocks and no more than half the SMs (the
 * bound the wait's progress rests on, see the file comment; the step's sums have at most 48 units); a finisher
 * takes every F-th unit. */
static inline forge_status colsum_last_plan(const cuda_ctx *ctx, colsum_last *f, float *out0, float *out1,
                                            float *partial, int n_out, int R, int C, long long blocks) {
    const long long units = ((long long)n_out * C + COLSUM_COLS - 1) / COLSUM_COLS;
    const long long most = ctx->num_sms / 2 > 1 ? ctx->num_sms / 2 : 1;
    long long F = units < blocks ? units : blocks;
    if (F > most) F = most;
    if (F < 1 || F > most || !ctx->colsum_ticket)
        return forge_error(FORGE_ERR_DEVICE,
                           "cuda column sum: %lld finishers for %lld units, %lld blocks, %d SMs (needs 1 <= F <= "
                           "max(1, SMs / 2) and the context's counter)",
                           F, units, blocks, ctx->num_sms);
    f->out0 = out0;
    f->out1 = out1;
    f->partial = partial;
    f->ticket = ctx->colsum_ticket;
    f->R = R;
    f->C = C;
    f->n_out = n_out;
    f->finishers = (int)F;
    return FORGE_OK;
}

__device__ __forceinline__ unsigned colsum_load_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Called by every thread of every block of the first pass (t: the thread's index in its block of COLSUM_THREADS)
 * after the block's partial stores, as its last action; s: CHUNK rows of COLSUM_COLS floats of shared memory the
 * block no longer needs. */
template <int CHUNK>
__device__ __forceinline__ void colsum_last_finish(const colsum_last &f, float (*s)[COLSUM_COLS], int t) {
    __shared__ unsigned arrival;
    if (!f.ticket) return; /* uniform: partials only */
    const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
    __threadfence(); /* this thread's partial stores are visible device-wide before the block counts itself in */
    __syncthreads(); /* and every thread's, before thread 0 takes the ticket; s is free from here */
    if (t == 0) arrival = atomicAdd(f.ticket, 1u);
    __syncthreads();
    const unsigned first = blocks - (unsigned)f.finishers;
    const unsigned ticket = arrival;
    if (ticket < first) return; /* uniform over the block */
    if (t == 0) {
        unsigned ns = 32;
        while (colsum_load_acquire(f.ticket) < blocks) { /* >= blocks: all arrived (finishers done count on) */
            __nanosleep(ns);
            if (ns < 256) ns *= 2;
        }
    }
    __syncthreads(); /* every partial is visible to the whole block (thread 0's acquire, then the barrier) */
    const int cols = f.n_out * f.C, units = (cols + COLSUM_COLS - 1) / COLSUM_COLS;
    for (int u = (int)(ticket - first); u < units; u += f.finishers) {
        const int i = u * COLSUM_COLS + t % COLSUM_COLS;
        const bool valid = i < cols;
        const int p = valid ? i / f.C : 0, c = valid ? i - p * f.C : 0;
        const float sum =
            colsum_ordered_rows<CHUNK>(f.partial + ((size_t)p * f.R) * f.C + c, (size_t)f.C, f.R, valid, s, t);
        if (t < COLSUM_COLS && valid) (p ? f.out1 : f.out0)[c] += sum;
    }
    /* every finisher counts on once more; the last one has seen all of them past their wait, so nothing reads the
     * counter any more in this launch: back to 0 for the next */
    if (t == 0 && atomicAdd(f.ticket, 1u) == blocks + (unsigned)f.finishers - 1u) atomicExch(f.ticket, 0u);
}

#endif
