/*
 * bench_cls16t_passes.cu: `forge-lab bench cls16t-passes [--reps N] [--widths]`:
 * the bf16 classifier's two column passes over one transposed chunk (logits^T
 * (V, rows): softmax statistics, then dlogits written over the logits):
 * the row-pair baseline (cls16t_pair.cuh), forge's instantiation of
 * src/backend/cuda/classifier_bf16_passes.cuh, its AHEAD form (the next ids
 * loaded before the current ones are used), and the fast passes of
 * cls16t_fast.cuh (batched statistics, hardware ex2, no per-element branch or
 * target compare): both passes fast, only pass 1, only pass 2, with log2 of
 * grad_scale / S folded into the exponent (fold) and ahead. --widths adds the
 * wider accesses of forge's template (4 and 8 rows a lane, 16 lanes a stream).
 * Interleaved round by round on the same logits (restored before each run,
 * outside the timing), at 2560, 8192 and 16384 rows (gpt2-124m's step: one
 * chunk) x V = 50257 and 4096 rows x gpt-25m's V = 8192, after check-only
 * chunks (1800 x 50257: a last block of 8 rows at every width; 136 x 37 and
 * 136 x 5: one range, partial batches, streams without ids; all three with
 * ignored rows and one id past V). Per variant: the median us of the pair of
 * passes, the bandwidth it implies (3 passes of rows * V bf16: read, read,
 * write), the median per-round ratios baseline / variant and forge / variant
 * (> 1: faster) with 95% bootstrap CIs, and the check: "bits" PASS when its
 * dlogits, losses and partials are bitwise the baseline's (the exact variants),
 * "tol" PASS when they are within the tolerances below (the fast variants, whose
 * exp differs); FAIL otherwise (the command then exits 1).
 * Measurements: lab/notes/classifier.md.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "classifier_lab.h"
#include "../../src/backend/cuda/classifier_bf16_fast.cuh"
#include "cls16t_exact.cuh"
#include "cls16t_pair.cuh"
#include "../lab_stats.h"

#define CPB_TRY(x)                                                                                                 \
    do {                                                                                                           \
        cudaError_t e_ = (x);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "forge-lab bench cls16t-passes: %s: %s\n", #x, cudaGetErrorString(e_));              \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

/* one chunk's buffers and shape */
struct cpb_chunk {
    float *losses, *part;
    uint16_t *xt;
    const int32_t *targets;
    int rows, V, splits, per_split;
    cuda_input_error *err;
};

#define CPB_GRAD_SCALE (1.0f / 16384.0f) /* > 0: the fold variants need it */

/* the fast variants' tolerances against the baseline: losses (M + log S) and partials within 1e-4 + 1e-5 |ref|;
 * dlogits within 1 bf16 ulp of the baseline's, or 1e-6 grad_scale apart (near zero) */
#define CPB_TOL_ABS 1e-4
#define CPB_TOL_REL 1e-5
#define CPB_TOL_ULP 1
#define CPB_TOL_D (1e-6 * CPB_GRAD_SCALE)

/* the baseline: a row pair a lane, 4 ids ahead (the passes forge ran before the widths) */
static void cpb_pair(const cpb_chunk &c) {
    const dim3 grid((unsigned)((c.rows + CLS16T_PAIR_ROWS - 1) / CLS16T_PAIR_ROWS), (unsigned)c.splits);
    const dim3 block(32 * CLS16T_WARPS);
    cls16t_pair_partial_kernel<4><<<grid, block>>>(c.part, c.xt, c.rows, c.V, c.per_split);
    cls16t_pair_grad_kernel<4><<<grid, block>>>(c.losses, c.xt, c.part, c.targets, 0, c.rows, c.V, c.per_split,
                                                c.splits, -1, CPB_GRAD_SCALE, c.err);
}

/* a pass's kernel: forge's (classifier_bf16_passes.cuh), "walk" (cls16t_fast.cuh's loop and addressing with forge's
 * arithmetic: forge's bits) or fast (cls16t_fast.cuh) */
enum { CPB_FORGE, CPB_WALK, CPB_FAST };

/* the passes with RL rows a lane, LW lanes a stream, UNROLL ids a batch, pass 1 and pass 2 each P1 / P2 (above);
 * FOLD: the fast pass 2's exponent takes log2 (grad_scale / S) */
template <int RL, int LW, int UNROLL, bool AHEAD, int P1, int P2, bool FOLD = false>
static void cpb_passes(const cpb_chunk &c) {
    const dim3 grid = cls16t_grid<RL, LW>(c.rows, c.splits), block = cls16t_block<LW>();
    if constexpr (P1 != CPB_FORGE)
        cls16f_partial_kernel<RL, LW, UNROLL, AHEAD, P1 == CPB_WALK>
            <<<grid, block>>>(c.part, c.xt, c.rows, c.V, c.per_split);
    else
        cls16t_partial_kernel<RL, LW, UNROLL, AHEAD><<<grid, block>>>(c.part, c.xt, c.rows, c.V, c.per_split);
    if constexpr (P2 != CPB_FORGE)
        cls16f_grad_kernel<RL, LW, UNROLL, AHEAD, FOLD, P2 == CPB_WALK><<<grid, block>>>(
            c.losses, c.xt, c.part, c.targets, 0, c.rows, c.V, c.per_split, c.splits, -1, CPB_GRAD_SCALE, c.err);
    else
        cls16t_grad_kernel<RL, LW, UNROLL, AHEAD><<<grid, block>>>(c.losses, c.xt, c.part, c.targets, 0, c.rows, c.V,
                                                                   c.per_split, c.splits, -1, CPB_GRAD_SCALE, c.err);
}

struct cpb_variant {
    const char *name;
    int rl, lw, unroll, ahead; /* rows a lane, lanes a stream, ids a batch, the next ids loaded before these are used */
    int fast;                  /* 0: forge's arithmetic (checked bitwise), 1: fast passes (checked with tolerances) */
    int widths;                /* 1: run only with --widths */
    void (*run)(const cpb_chunk &);
};

#define CPB_F CLS16T_LANE_ROWS, CLS16T_LANES, CLS16T_UNROLL /* forge's instantiation */

/* [0] the baseline, [1] forge's passes, [2] their ahead form (cpb_runs); "fast" entries are checked with tolerances,
 * the others bitwise */
static const cpb_variant CPB_VARIANTS[] = {
    {"pair (baseline)", 2, 32, 4, 0, 0, 0, cpb_pair},
    {"forge", CPB_F, 0, 0, 0, cpb_passes<CPB_F, false, CPB_FORGE, CPB_FORGE>},
    {"ahead", CPB_F, 1, 0, 0, cpb_passes<CPB_F, true, CPB_FORGE, CPB_FORGE>},
    {"walk", CPB_F, 0, 0, 0, cpb_passes<CPB_F, false, CPB_WALK, CPB_WALK>}, /* the fast loops, forge's arithmetic */
    {"fast p1", CPB_F, 0, 1, 0, cpb_passes<CPB_F, false, CPB_FAST, CPB_FORGE>}, /* pass 2 forge's */
    {"fast p2", CPB_F, 0, 1, 0, cpb_passes<CPB_F, false, CPB_FORGE, CPB_FAST>}, /* pass 1 forge's */
    {"fast", CPB_F, 0, 1, 0, cpb_passes<CPB_F, false, CPB_FAST, CPB_FAST>},
    {"fast fold", CPB_F, 0, 1, 0, cpb_passes<CPB_F, false, CPB_FAST, CPB_FAST, true>},
    {"fast ahead", CPB_F, 1, 1, 0, cpb_passes<CPB_F, true, CPB_FAST, CPB_FAST>},
    {"fast fold ahead", CPB_F, 1, 1, 0, cpb_passes<CPB_F, true, CPB_FAST, CPB_FAST, true>},
    /* --widths: the access widths (rows a lane x lanes / unroll) of forge's template */
    {"lab", 2, 32, 4, 0, 0, 1, cpb_passes<2, 32, 4, false, CPB_FORGE, CPB_FORGE>},
    {"lab", 4, 32, 4, 0, 0, 1, cpb_passes<4, 32, 4, false, CPB_FORGE, CPB_FORGE>},
    {"lab", 4, 32, 8, 0, 0, 1, cpb_passes<4, 32, 8, false, CPB_FORGE, CPB_FORGE>},
    {"lab", 8, 32, 2, 0, 0, 1, cpb_passes<8, 32, 2, false, CPB_FORGE, CPB_FORGE>},
    {"lab", 8, 32, 4, 0, 0, 1, cpb_passes<8, 32, 4, false, CPB_FORGE, CPB_FORGE>},
    {"lab", 8, 16, 4, 0, 0, 1, cpb_passes<8, 16, 4, false, CPB_FORGE, CPB_FORGE>}, /* 16-byte accesses, two streams a warp */
    {"lab ahead", 2, 32, 4, 1, 0, 1, cpb_passes<2, 32, 4, true, CPB_FORGE, CPB_FORGE>},
    {"lab ahead", 4, 32, 4, 1, 0, 1, cpb_passes<4, 32, 4, true, CPB_FORGE, CPB_FORGE>},
    {"lab ahead", 8, 16, 4, 1, 0, 1, cpb_passes<8, 16, 4, true, CPB_FORGE, CPB_FORGE>},
};
#define CPB_NV ((int)(sizeof CPB_VARIANTS / sizeof CPB_VARIANTS[0]))

static int cpb_with_widths = 0;

static bool cpb_same(const cpb_variant &a, const cpb_variant &b) {
    return a.rl == b.rl && a.lw == b.lw && a.unroll == b.unroll && a.ahead == b.ahead;
}

/* the variants run: the defaults, and with --widths the width entries but those with the parameters of forge's [1] or
 * its ahead form [2] */
static bool cpb_runs(int i) {
    const cpb_variant &v = CPB_VARIANTS[i];
    if (!v.widths) return true;
    return cpb_with_widths && !cpb_same(v, CPB_VARIANTS[1]) && !cpb_same(v, CPB_VARIANTS[2]);
}

/* x[i] = bf16 logits uniform in [-8, 8), from a hash of i (the same logits every run and every variant) */
__global__ void cpb_fill(uint16_t *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        x[i] = f32_to_bf16((float)(z >> 40) * (1.0f / 16777216.0f) * 16.0f - 8.0f);
    }
}

/* the dlogits' differences: [0] elements whose bits differ, [1] elements past the tolerance (more than CPB_TOL_ULP
 * bf16 ulps and more than CPB_TOL_D apart; a NaN on one side only), [2] the largest ulp distance, [3] the largest
 * |a - b| as fp32 bits (both NaN: equal) */
__device__ __forceinline__ int cpb_ord(unsigned h) { return h & 0x8000u ? -(int)(h & 0x7fffu) : (int)h; }
__global__ void cpb_diff(unsigned long long *acc, const uint4 *a, const uint4 *b, size_t n) {
    unsigned long long ndiff = 0, nbad = 0;
    unsigned maxulp = 0, maxabs = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 p = a[i], q = b[i];
        if (p.x == q.x && p.y == q.y && p.z == q.z && p.w == q.w) continue;
        const unsigned pw[4] = {p.x, p.y, p.z, p.w}, qw[4] = {q.x, q.y, q.z, q.w};
        for (int k = 0; k < 8; k++) {
            const unsigned ha = (pw[k / 2] >> (16 * (k % 2))) & 0xffffu, hb = (qw[k / 2] >> (16 * (k % 2))) & 0xffffu;
            if (ha == hb) continue;
            ndiff++;
            const float fa = __uint_as_float(ha << 16), fb = __uint_as_float(hb << 16);
            if (isnan(fa) || isnan(fb)) {
                nbad++;
                maxulp = 0xffffffffu;
                maxabs = 0x7f800000u;
                continue;
            }
            const unsigned ulp = (unsigned)abs(cpb_ord(ha) - cpb_ord(hb));
            const float d = fabsf(fa - fb);
            nbad += ulp > CPB_TOL_ULP && d > (float)CPB_TOL_D;
            maxulp = max(maxulp, ulp);
            maxabs = max(maxabs, __float_as_uint(d)); /* d >= 0: the bits order as the values */
        }
    }
    for (int o = 16; o > 0; o /= 2) {
        ndiff += __shfl_down_sync(0xffffffffu, ndiff, o);
        nbad += __shfl_down_sync(0xffffffffu, nbad, o);
        maxulp = max(maxulp, __shfl_down_sync(0xffffffffu, maxulp, o));
        maxabs = max(maxabs, __shfl_down_sync(0xffffffffu, maxabs, o));
    }
    if (threadIdx.x % 32 == 0 && ndiff) {
        atomicAdd(&acc[0], ndiff);
        atomicAdd(&acc[1], nbad);
        atomicMax(&acc[2], (unsigned long long)maxulp);
        atomicMax(&acc[3], (unsigned long long)maxabs);
    }
}

/* one variant's check against the baseline */
struct cpb_check {
    int pass;
    unsigned long long ndiff, nbad, maxulp; /* dlogits */
    float maxabs;
    double loss_abs, loss_rel; /* the largest |loss - ref| and |loss - ref| / |ref| */
    double part_abs, part_rel; /* the same over the partials' M and S */
    int loss_bad, part_bad;    /* past the tolerance (a NaN on one side only) */
};

/* the largest differences of got from ref and how many are past the tolerance; both NaN (or equal infinities) match */
static void cpb_tol(const float *got, const float *ref, size_t n, double *mabs, double *mrel, int *bad) {
    for (size_t i = 0; i < n; i++) {
        const float a = got[i], b = ref[i];
        if ((isnan(a) && isnan(b)) || a == b) continue;
        const double d = fabs((double)a - (double)b);
        if (isnan(a) || isnan(b) || !(d <= CPB_TOL_ABS + CPB_TOL_REL * fabs((double)b))) {
            (*bad)++;
            if (isnan(d) || isinf(d)) continue;
        }
        *mabs = std::max(*mabs, d);
        if (b != 0) *mrel = std::max(*mrel, d / fabs((double)b));
    }
}


static const char *cpb_verdict(int u, const cpb_check *ck) {
    if (u == 0) return "-";
    return CPB_VARIANTS[u].fast ? (ck[u].pass ? "tol PASS" : "tol FAIL") : (ck[u].pass ? "bits PASS" : "bits FAIL");
}

/* the tolerance checks' numbers, one line a fast variant */
static void cpb_print_checks(const cpb_check *ck) {
    for (int u = 1; u < CPB_NV; u++) {
        if (!cpb_runs(u) || !CPB_VARIANTS[u].fast) continue;
        const cpb_check &k = ck[u];
        printf("    %-15s dlogits: %llu differ, %llu past tol, max %llu ulp, max |d| %.3g (%.3g grad_scale); "
               "losses: max |d| %.3g, rel %.3g (%d past); partials: max |d| %.3g, rel %.3g (%d past): %s\n",
               CPB_VARIANTS[u].name, k.ndiff, k.nbad, k.maxulp, (double)k.maxabs, k.maxabs / CPB_GRAD_SCALE,
               k.loss_abs, k.loss_rel, k.loss_bad, k.part_abs, k.part_rel, k.part_bad, k.pass ? "PASS" : "FAIL");
    }
}

static void cpb_ratio(const std::vector<double> &num, const std::vector<double> &den, int reps, double *med, double *lo,
                      double *hi) {
    std::vector<double> ratio;
    for (int i = 0; i < reps; i++) ratio.push_back(num[i] / den[i]);
    lab_median_ci(ratio, lo, hi);
    *med = lab_median(ratio);
}

/* the variants timed interleaved round by round (2 warm-up rounds, then reps), the logits restored from pristine
 * before each run outside the timing; prints the table, 1 if a variant failed its check */
static int cpb_time(const char *name, const cpb_chunk &c, const uint16_t *pristine, const cpb_check *ck, int reps) {
    const size_t n = (size_t)c.rows * c.V;
    int rc = 0;
    cudaEvent_t e0, e1;
    CPB_TRY(cudaEventCreate(&e0));
    CPB_TRY(cudaEventCreate(&e1));
    std::vector<double> t[CPB_NV];
    for (int r = -2; r < reps; r++)
        for (int u = 0; u < CPB_NV; u++) {
            if (!cpb_runs(u)) continue;
            CPB_TRY(cudaMemcpy(c.xt, pristine, n * 2, cudaMemcpyDeviceToDevice));
            CPB_TRY(cudaEventRecord(e0));
            CPB_VARIANTS[u].run(c);
            CPB_TRY(cudaGetLastError());
            CPB_TRY(cudaEventRecord(e1));
            CPB_TRY(cudaEventSynchronize(e1));
            float ms = 0;
            CPB_TRY(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0) t[u].push_back(1e3 * ms);
        }
    printf("%s (rows %d, V %d, %d ranges of %d ids), median of %d interleaved rounds:\n", name, c.rows, c.V,
           c.splits, c.per_split, reps);
    printf("  %-15s %4s %5s %6s %6s %9s %7s %24s %24s %s\n", "variant", "rl", "lanes", "unroll", "blocks", "us", "GB/s",
           "baseline/this [95% CI]", "forge/this [95% CI]", "check");
    for (int u = 0; u < CPB_NV; u++) {
        if (!cpb_runs(u)) continue;
        const cpb_variant &v = CPB_VARIANTS[u];
        double rb, rb_lo, rb_hi, rf, rf_lo, rf_hi;
        cpb_ratio(t[0], t[u], reps, &rb, &rb_lo, &rb_hi);
        cpb_ratio(t[1], t[u], reps, &rf, &rf_lo, &rf_hi);
        const double us = lab_median(t[u]);
        const int rows_b = v.rl * v.lw;
        printf("  %-15s %4d %5d %6d %6d %9.1f %7.0f %8.3fx [%.3f, %.3f] %8.3fx [%.3f, %.3f] %s\n", v.name, v.rl, v.lw,
               v.unroll, (c.rows + rows_b - 1) / rows_b * c.splits, us, 3.0 * n * 2 / us * 1e-3, rb, rb_lo, rb_hi, rf,
               rf_lo, rf_hi, cpb_verdict(u, ck));
        if (!ck[u].pass) rc = 1;
    }
    cpb_print_checks(ck);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return rc;
}

static double cpb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* rows % 8 == 0 (the transposed chunk's); reps 0: the checks alone, with ignored rows and a bad id */
static int cpb_shape(const char *name, int rows, int V, int reps) {
    const double t0 = cpb_now();
    const size_t n = (size_t)rows * V;
    const int splits = cls16t_splits(V), per_split = cls16t_per_split(V, splits);
    const size_t np = (size_t)2 * splits * rows;
    std::vector<int32_t> ht(rows);
    for (int r = 0; r < rows; r++) ht[r] = (int32_t)(((uint64_t)r * 2654435761u) % (uint64_t)V);
    if (reps == 0) { /* the checks alone: ignored rows (ignore_index -1) and one id past V too */
        for (int r = 3; r < rows; r += 7) ht[r] = -1;
        ht[5] = V + 5;
    }
    uint16_t *pristine, *xt, *ref;
    float *losses, *part;
    int32_t *targets;
    cuda_input_error *err;
    unsigned long long *acc;
    CPB_TRY(cudaMalloc(&pristine, n * 2));
    CPB_TRY(cudaMalloc(&xt, n * 2));
    CPB_TRY(cudaMalloc(&ref, n * 2));
    CPB_TRY(cudaMalloc(&losses, rows * 4));
    CPB_TRY(cudaMalloc(&part, np * 4));
    CPB_TRY(cudaMalloc(&targets, rows * 4));
    CPB_TRY(cudaMalloc(&err, sizeof *err));
    CPB_TRY(cudaMalloc(&acc, 4 * sizeof *acc));
    CPB_TRY(cudaMemset(err, 0, sizeof *err));
    cpb_fill<<<1024, 256>>>(pristine, n);
    CPB_TRY(cudaGetLastError());
    CPB_TRY(cudaMemcpy(targets, ht.data(), rows * 4, cudaMemcpyHostToDevice));
    const cpb_chunk c = {losses, part, xt, targets, rows, V, splits, per_split, err};
    /* the baseline's outputs, then each variant's compared (dlogits on the device) */
    std::vector<float> ref_l(rows), ref_p(np), got_l(rows), got_p(np);
    cpb_check ck[CPB_NV];
    memset(ck, 0, sizeof ck);
    for (int u = 0; u < CPB_NV; u++) {
        ck[u].pass = 1;
        if (!cpb_runs(u)) continue;
        CPB_TRY(cudaMemcpy(xt, pristine, n * 2, cudaMemcpyDeviceToDevice));
        CPB_TRY(cudaMemset(losses, 0xff, rows * 4));
        CPB_TRY(cudaMemset(part, 0xff, np * 4));
        CPB_VARIANTS[u].run(c);
        CPB_TRY(cudaGetLastError());
        CPB_TRY(cudaMemcpy(u ? got_l.data() : ref_l.data(), losses, rows * 4, cudaMemcpyDeviceToHost));
        CPB_TRY(cudaMemcpy(u ? got_p.data() : ref_p.data(), part, np * 4, cudaMemcpyDeviceToHost));
        if (u == 0) {
            CPB_TRY(cudaMemcpy(ref, xt, n * 2, cudaMemcpyDeviceToDevice));
            continue;
        }
        unsigned long long a[4];
        CPB_TRY(cudaMemset(acc, 0, sizeof a));
        cpb_diff<<<1024, 256>>>(acc, (const uint4 *)xt, (const uint4 *)ref, n / 8); /* n * 2 % 16 == 0 */
        CPB_TRY(cudaGetLastError());
        CPB_TRY(cudaMemcpy(a, acc, sizeof a, cudaMemcpyDeviceToHost));
        cpb_check &k = ck[u];
        k.ndiff = a[0], k.nbad = a[1], k.maxulp = a[2];
        const unsigned mb = (unsigned)a[3];
        memcpy(&k.maxabs, &mb, sizeof mb);
        if (CPB_VARIANTS[u].fast) {
            cpb_tol(got_l.data(), ref_l.data(), rows, &k.loss_abs, &k.loss_rel, &k.loss_bad);
            cpb_tol(got_p.data(), ref_p.data(), np, &k.part_abs, &k.part_rel, &k.part_bad);
            k.pass = k.nbad == 0 && k.loss_bad == 0 && k.part_bad == 0;
        } else {
            k.pass = k.ndiff == 0 && memcmp(got_l.data(), ref_l.data(), rows * 4) == 0 &&
                     memcmp(got_p.data(), ref_p.data(), np * 4) == 0;
        }
    }
    int rc = 0;
    if (reps == 0) {
        printf("%s (rows %d, V %d, %d ranges of %d ids) vs the baseline:", name, rows, V, splits, per_split);
        for (int u = 1; u < CPB_NV; u++)
            if (cpb_runs(u)) {
                printf(" %s %dx%d/%d %s;", CPB_VARIANTS[u].name, CPB_VARIANTS[u].rl, CPB_VARIANTS[u].lw,
                       CPB_VARIANTS[u].unroll, cpb_verdict(u, ck));
                if (!ck[u].pass) rc = 1;
            }
        printf("\n");
        cpb_print_checks(ck);
    } else {
        rc = cpb_time(name, c, pristine, ck, reps);
    }
    void *all[] = {pristine, xt, ref, losses, part, targets, err, acc};
    for (void *p : all) cudaFree(p);
    printf("  (%.1f s)\n", cpb_now() - t0);
    fflush(stdout); /* a run cut by a time limit keeps the shapes it finished */
    return rc;
}

extern "C" int lab_bench_cls16t_passes(int argc, char **argv) {
    int reps = 30;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--widths") == 0) {
            cpb_with_widths = 1;
        } else {
            fprintf(stderr, "usage: forge-lab bench cls16t-passes [--reps N] [--widths]\n");
            return 2;
        }
    }
    if (reps < 3) reps = 3;
    /* 1800 rows: a last block of 8 rows at every width (1800 % 64 == 1800 % 128 == 1800 % 256 == 8) */
    int rc = cpb_shape("tail check", 1800, 50257, 0);
    /* one range and 136 rows (a last block of 8 rows): V 37, 4 or 5 ids a stream (a full batch and a partial one);
     * V 5, streams 5..7 without ids */
    rc |= cpb_shape("small-V check", 136, 37, 0);
    rc |= cpb_shape("tiny-V check", 136, 5, 0);
    /* forge runs a batch's rows as one chunk up to 2^30 logits: gpt2-124m's 16 x 1024 rows are the 16384-row one */
    rc |= cpb_shape("2560-row chunk", 2560, 50257, reps);
    rc |= cpb_shape("8192-row chunk", 8192, 50257, reps);
    rc |= cpb_shape("gpt2-124m step", 16384, 50257, reps);
    rc |= cpb_shape("V 8192 (gpt-25m's)", 4096, 8192, reps);
    return rc;
}
