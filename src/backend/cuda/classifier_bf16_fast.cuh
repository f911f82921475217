/*
 * classifier_bf16_fast.cuh: the bf16 classifier's transposed-chunk column passes
 * that forge runs (classifier_bf16.cu), with fewer instructions per element than
 * the expf passes the lab keeps as the bitwise reference (lab/classifier/
 * cls16t_exact.cuh; `forge-lab bench cls16t-passes` times them). Same grid, blocks,
 * id streams, id order and merge order as forge's passes (and the same partial
 * format: a natural-units (max, sum of exp) per (range, row)), but not the same
 * bits: exp is the hardware ex2 (ex2.approx.ftz.f32, one MUFU.EX2) of one FFMA,
 * so the bench checks them against the baseline with tolerances.
 *
 * Both passes: a lane's address walks from id to id (one IMAD.WIDE an id, not
 * a 64-bit (size_t) v * rows + r each), and the full batches (every id below
 * the range's end) load without the range test; only the last batch tests.
 *
 * Pass 1 (cls16f_partial_kernel): a thread's UNROLL ids are one batch per row:
 * the batch's max first, the running sum rescaled once per batch by
 * ex2((m - m_new) log2 e) (exactly 1 when the max did not grow), then
 * ex2(x log2 e - m_new log2 e) of every id of the batch added as a pairwise sum:
 * no branch per element. An id past the range is loaded as -inf (adds 0). The
 * stream merge and the partial are forge's (cls16t_end_partial).
 *
 * Pass 2 (cls16f_grad_kernel): the block's rows' totals (M, S) are merged once
 * (thread t < RB: row t, ranges in range order with cls16t_merge: the bits of
 * cls16t_total) and shared through shared memory instead of every thread
 * merging its rows' ranges. Each dlogit is rn(ex2(x log2 e - M log2 e) c) with
 * c = grad_scale / S per row (0 for an ignored row), two rows packed by one
 * cvt.rn.bf16x2; FOLD puts log2 c into the exponent too (one FFMA and one ex2
 * per element; needs grad_scale > 0). The one-hot is not compared per element:
 * the thread whose stream holds a row's target reads that logit before the loop
 * and, after its loop, writes the target's dlogit over the one the loop wrote,
 * with forge's formula (cls16t_grad).
 *
 * EXACT (the bench's "walk"): the same kernels with forge's arithmetic per
 * element (cls16t_add in id order; cls16t_grad with its target compare), so
 * forge's bits: what the loops, addressing and shared totals alone are worth.
 */
#ifndef FORGE_CUDA_CLASSIFIER_BF16_FAST_CUH
#define FORGE_CUDA_CLASSIFIER_BF16_FAST_CUH

#include "classifier_bf16_passes.cuh"
#include "pdl.cuh"

#define CLS16F_LOG2E 1.4426950408889634f

/* 2^a, the hardware approximation (one MUFU.EX2; denormal results flushed to 0, ex2(-inf) = 0); compiled for the
 * host (an emulation of the kernels off the GPU), exp2f */
__device__ __forceinline__ float cls16f_ex2(float a) {
#ifdef __CUDA_ARCH__
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(a));
    return y;
#else
    return exp2f(a);
#endif
}

/* x[u] = the lane's RL rows of id v + 8u (u < UNROLL) at p + u st (p: the lane's rows of id v, st: 8 ids apart);
 * CHECK: `fill` for an id at or past v1 (else every id is below v1). The addresses walk from p (one IMAD.WIDE an id)
 * instead of (size_t) vu * rows + r per id. */
template <int RL, int UNROLL, bool CHECK>
__device__ __forceinline__ void cls16f_load_ids(unsigned (&x)[UNROLL][RL / 2], const uint16_t *p, int st, int v,
                                                int v1, unsigned fill) {
#pragma unroll
    for (int u = 0; u < UNROLL; u++)
        cls16t_load<RL>(x[u], p + u * st, CHECK ? v + u * CLS16T_WARPS < v1 : true, fill);
}

/* the bf16 pair of a word widened: row 2j (low half) and 2j + 1 */
__device__ __forceinline__ float cls16f_lo(unsigned x) { return __uint_as_float(x << 16); }
__device__ __forceinline__ float cls16f_hi(unsigned x) { return __uint_as_float(x & 0xffff0000u); }

/* (m, s) += the batch x[0 .. U): the batch's max, the sum rescaled once, the batch's exps summed pairwise. The max is
 * exact (fmaxf); m = -inf before the first id. mc, the new max clamped to a finite value, keeps every exponent
 * finite or -inf: an all -inf batch (ids past the range) on an empty (m, s) adds ex2(-inf) = 0 and leaves m = -inf. */
template <int U> __device__ __forceinline__ void cls16f_add_batch(float &m, float &s, const float (&x)[U]) {
    static_assert(U == 1 || U == 2 || U == 4 || U == 8 || U == 16, "a pairwise sum of a power of 2");
    float bm = x[0];
#pragma unroll
    for (int u = 1; u < U; u++) bm = fmaxf(bm, x[u]);
    const float mn = fmaxf(m, bm), mc = fmaxf(mn, -1.0e38f), nl = -(mc * CLS16F_LOG2E);
    float e[U];
#pragma unroll
    for (int u = 0; u < U; u++) e[u] = cls16f_ex2(fmaf(x[u], CLS16F_LOG2E, nl));
#pragma unroll
    for (int h = U / 2; h >= 1; h /= 2)
#pragma unroll
        for (int u = 0; u < h; u++) e[u] += e[u + h];
    s = fmaf(s, cls16f_ex2((m - mc) * CLS16F_LOG2E), e[0]); /* m == mc: ex2(0) = 1 exactly; m = -inf: 0 */
    m = mn;
}

/* a batch of UNROLL ids (from v) of the lane's RL rows into the running (max, sum) per row; EXACT: forge's
 * cls16t_add per id in id order instead (the ids at or past v1 skipped when CHECK), so forge's bits */
template <int RL, int UNROLL, bool EXACT, bool CHECK>
__device__ __forceinline__ void cls16f_stats_batch(float (&m)[RL], float (&s)[RL], const unsigned (&x)[UNROLL][RL / 2],
                                                   int v, int v1) {
    if constexpr (EXACT) {
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            if (CHECK && v + u * CLS16T_WARPS >= v1) break;
#pragma unroll
            for (int j = 0; j < RL / 2; j++) {
                cls16t_add(m[2 * j], s[2 * j], cls16f_lo(x[u][j]));
                cls16t_add(m[2 * j + 1], s[2 * j + 1], cls16f_hi(x[u][j]));
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < RL / 2; j++) {
            float a[UNROLL], b[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) a[u] = cls16f_lo(x[u][j]), b[u] = cls16f_hi(x[u][j]);
            cls16f_add_batch<UNROLL>(m[2 * j], s[2 * j], a);
            cls16f_add_batch<UNROLL>(m[2 * j + 1], s[2 * j + 1], b);
        }
    }
}

template <int RL, int LW, int UNROLL, bool AHEAD = false, bool EXACT = false>
__global__ void __launch_bounds__(LW * CLS16T_WARPS)
    cls16f_partial_kernel(float *__restrict__ part, const uint16_t *__restrict__ xt, int rows, int V, int per_split) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    static_assert(RL <= CLS16T_WARPS && 32 % LW == 0, "a block's threads cover its rows; streams tile a warp");
    constexpr int RB = RL * LW, NW = RL / 2, STEP = UNROLL * CLS16T_WARPS;
    __shared__ float sm[CLS16T_WARPS][RB], ss[CLS16T_WARPS][RB];
    const int lane = threadIdx.x % LW, w = threadIdx.x / LW, r = blockIdx.x * RB + RL * lane;
    const int v0 = blockIdx.y * per_split, v1 = min(V, v0 + per_split);
    const int vfull = v1 - (UNROLL - 1) * CLS16T_WARPS; /* a batch from v < vfull has all its ids below v1 */
    const int st = CLS16T_WARPS * rows; /* a stream's consecutive ids apart (an int: one IMAD.WIDE an address) */
    float m[RL], s[RL];
#pragma unroll
    for (int i = 0; i < RL; i++) m[i] = -INFINITY, s[i] = 0.0f;
    constexpr unsigned NEG_INF2 = 0xff80ff80u; /* past v1: -inf pairs */
    if (r < rows) {
        int v = v0 + w;
        const uint16_t *p = xt + (size_t)v * rows + r; /* the lane's rows of id v */
        unsigned x[UNROLL][NW];
        if constexpr (AHEAD) { /* the next batch's ids go out before this batch's math */
            unsigned nx[UNROLL][NW];
            if (v < vfull)
                cls16f_load_ids<RL, UNROLL, false>(nx, p, st, v, v1, NEG_INF2);
            else if (v < v1)
                cls16f_load_ids<RL, UNROLL, true>(nx, p, st, v, v1, NEG_INF2);
            for (; v < v1; v += STEP) {
#pragma unroll
                for (int u = 0; u < UNROLL; u++)
#pragma unroll
                    for (int j = 0; j < NW; j++) x[u][j] = nx[u][j];
                p += UNROLL * st;
                if (v + STEP < vfull)
                    cls16f_load_ids<RL, UNROLL, false>(nx, p, st, v + STEP, v1, NEG_INF2);
                else if (v + STEP < v1)
                    cls16f_load_ids<RL, UNROLL, true>(nx, p, st, v + STEP, v1, NEG_INF2);
                if (v < vfull)
                    cls16f_stats_batch<RL, UNROLL, EXACT, false>(m, s, x, v, v1);
                else
                    cls16f_stats_batch<RL, UNROLL, EXACT, true>(m, s, x, v, v1);
            }
        } else {
            for (; v < vfull; v += STEP, p += UNROLL * st) {
                cls16f_load_ids<RL, UNROLL, false>(x, p, st, v, v1, NEG_INF2);
                cls16f_stats_batch<RL, UNROLL, EXACT, false>(m, s, x, v, v1);
            }
            if (v < v1) { /* the last, partial batch */
                cls16f_load_ids<RL, UNROLL, true>(x, p, st, v, v1, NEG_INF2);
                cls16f_stats_batch<RL, UNROLL, EXACT, true>(m, s, x, v, v1);
            }
        }
    }
    cls16t_end_partial<RL, RB>(part, sm, ss, m, s, w, lane, rows);
}

/* One row's combined (M, S) from the ranges' partials in range order: cls16t_total's merges and bits, the partials
 * loaded 4 ranges at a time before their merges (an absent range merges as (-inf, 0): cls16t_merge returns at once) */
__device__ __forceinline__ void cls16f_total(const float *__restrict__ part, int rows, int r, int splits, float &M,
                                             float &S) {
    M = -INFINITY;
    S = 0.0f;
    for (int k0 = 0; k0 < splits; k0 += 4) {
        float2 p[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            p[k] = k0 + k < splits ? *(const float2 *)(part + 2 * ((size_t)(k0 + k) * rows + r))
                                   : make_float2(-INFINITY, 0.0f);
#pragma unroll
        for (int k = 0; k < 4; k++) cls16t_merge(M, S, p[k].x, p[k].y);
    }
}

/* pass 2's per-row values of the lane's RL rows */
template <int RL> struct cls16f_rows {
    float nl[RL], c[RL]; /* the fast dlogit rn(ex2(x log2 e + nl) c) (FOLD: c folded into nl, c unused) */
    float M[RL], inv[RL]; /* M: every form's; inv = 1 / S: EXACT's */
    int y[RL];
    bool ig[RL];
};

/* the dlogits of a batch's ids (ids from v, the lane's rows of id v at p, st apart) for the lane's RL rows; CHECK:
 * only the ids below v1 are stored. EXACT: forge's cls16t_grad per element (with its target compare), so forge's
 * bits. */
template <int RL, int UNROLL, bool FOLD, bool EXACT, bool CHECK>
__device__ __forceinline__ void cls16f_grad_batch(uint16_t *p, int st, const unsigned (&x)[UNROLL][RL / 2],
                                                  const cls16f_rows<RL> &q, float grad_scale, int v, int v1) {
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        const int vu = v + u * CLS16T_WARPS;
        if (CHECK && vu >= v1) break;
        unsigned d[RL / 2];
#pragma unroll
        for (int j = 0; j < RL / 2; j++) {
            const int a = 2 * j, b = 2 * j + 1;
            if constexpr (EXACT) {
                const uint16_t d0 = q.ig[a] ? 0 : cls16t_grad(cls16f_lo(x[u][j]), q.M[a], q.inv[a], vu == q.y[a], grad_scale);
                const uint16_t d1 = q.ig[b] ? 0 : cls16t_grad(cls16f_hi(x[u][j]), q.M[b], q.inv[b], vu == q.y[b], grad_scale);
                d[j] = (unsigned)d0 | ((unsigned)d1 << 16);
            } else {
                float p0 = cls16f_ex2(fmaf(cls16f_lo(x[u][j]), CLS16F_LOG2E, q.nl[a]));
                float p1 = cls16f_ex2(fmaf(cls16f_hi(x[u][j]), CLS16F_LOG2E, q.nl[b]));
                if constexpr (!FOLD) p0 *= q.c[a], p1 *= q.c[b];
                const __nv_bfloat162 h = __floats2bfloat162_rn(p0, p1); /* .x: the low half, row 2j */
                d[j] = *(const unsigned *)&h;
            }
        }
        cls16t_store<RL>(p + u * st, d);
    }
}

/* at 2 rows a lane, 6 blocks an SM (40 registers; ptxas picks 46 unbounded), 5 with AHEAD (48, not 56) */
template <int RL, int LW, int UNROLL, bool AHEAD = false, bool FOLD = false, bool EXACT = false>
__global__ void __launch_bounds__(LW * CLS16T_WARPS, RL == 2 ? (AHEAD ? 5 : 6) : 1)
    cls16f_grad_kernel(float *__restrict__ losses, uint16_t *__restrict__ xt, const float *__restrict__ part,
                       const int32_t *__restrict__ targets, int n0, int rows, int V, int per_split, int splits,
                       int ignore_index, float grad_scale, cuda_input_error *err) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    constexpr int RB = RL * LW, NW = RL / 2, STEP = UNROLL * CLS16T_WARPS;
    __shared__ float tm[RB], ts[RB];
    {   /* the block's rows' totals, once: thread t < RB merges row blockIdx.x RB + t's ranges */
        const int t = threadIdx.x, rr = blockIdx.x * RB + t;
        if (t < RB && rr < rows) cls16f_total(part, rows, rr, splits, tm[t], ts[t]);
    }
    __syncthreads();
    const int lane = threadIdx.x % LW, w = threadIdx.x / LW, r = blockIdx.x * RB + RL * lane;
    if (r >= rows) return;
    const int v0 = blockIdx.y * per_split, v1 = min(V, v0 + per_split);
    const int vfull = v1 - (UNROLL - 1) * CLS16T_WARPS;
    const int st = CLS16T_WARPS * rows;
    cls16f_rows<RL> q;
    bool own[RL]; /* (not EXACT) this thread's stream holds row r + i's target id (in this range) */
    float S[RL], xy[RL];
#pragma unroll
    for (int i = 0; i < RL; i++) {
        const int y = q.y[i] = targets[n0 + r + i];
        q.M[i] = tm[RL * lane + i];
        S[i] = ts[RL * lane + i];
        q.inv[i] = 1.0f / S[i];
        const bool ig = q.ig[i] = y == ignore_index;
        q.c[i] = ig ? 0.0f : grad_scale * q.inv[i];
        q.nl[i] = FOLD ? fmaf(-q.M[i], CLS16F_LOG2E, log2f(q.c[i])) : -(q.M[i] * CLS16F_LOG2E); /* log2 0: -inf */
        own[i] = !EXACT && !ig && y >= v0 && y < v1 && (y - v0) % CLS16T_WARPS == w;
        xy[i] = own[i] ? bf16_to_f32(xt[(size_t)y * rows + r + i]) : 0.0f; /* before the loop overwrites it */
    }
    int v = v0 + w;
    uint16_t *p = xt + (size_t)v * rows + r; /* the lane's rows of id v */
    unsigned x[UNROLL][NW];
    if constexpr (AHEAD) { /* the next batch's ids are other addresses than this batch's stores */
        unsigned nx[UNROLL][NW];
        if (v < vfull)
            cls16f_load_ids<RL, UNROLL, false>(nx, p, st, v, v1, 0u);
        else if (v < v1)
            cls16f_load_ids<RL, UNROLL, true>(nx, p, st, v, v1, 0u);
        for (; v < v1; v += STEP, p += UNROLL * st) {
#pragma unroll
            for (int u = 0; u < UNROLL; u++)
#pragma unroll
                for (int j = 0; j < NW; j++) x[u][j] = nx[u][j];
            if (v + STEP < vfull)
                cls16f_load_ids<RL, UNROLL, false>(nx, p + UNROLL * st, st, v + STEP, v1, 0u);
            else if (v + STEP < v1)
                cls16f_load_ids<RL, UNROLL, true>(nx, p + UNROLL * st, st, v + STEP, v1, 0u);
            if (v < vfull)
                cls16f_grad_batch<RL, UNROLL, FOLD, EXACT, false>(p, st, x, q, grad_scale, v, v1);
            else
                cls16f_grad_batch<RL, UNROLL, FOLD, EXACT, true>(p, st, x, q, grad_scale, v, v1);
        }
    } else {
#pragma unroll 1 /* one batch an iteration: its loads all go out before its stores */
        for (; v < vfull; v += STEP, p += UNROLL * st) {
            cls16f_load_ids<RL, UNROLL, false>(x, p, st, v, v1, 0u);
            cls16f_grad_batch<RL, UNROLL, FOLD, EXACT, false>(p, st, x, q, grad_scale, v, v1);
        }
        if (v < v1) {
            cls16f_load_ids<RL, UNROLL, true>(x, p, st, v, v1, 0u);
            cls16f_grad_batch<RL, UNROLL, FOLD, EXACT, true>(p, st, x, q, grad_scale, v, v1);
        }
    }
#pragma unroll
    for (int i = 0; i < RL; i++) /* the target's dlogit, written after (same thread) the loop's store of its pair */
        if (own[i]) xt[(size_t)q.y[i] * rows + r + i] = cls16t_grad(xy[i], q.M[i], 1.0f / S[i], true, grad_scale);
    if (blockIdx.y == 0 && w == 0) cls16t_put_losses<RL>(losses, q.y, q.M, S, n0 + r, V, ignore_index, err);
}

#endif
