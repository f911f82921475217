/*
 * bench_cls16t_passes.cu: `forge-lab bench cls16t-passes [--reps N]`: the bf16
 * classifier's two column passes over one transposed chunk (logits^T (V, rows):
 * softmax statistics, then dlogits written over the logits), by the rows a lane
 * owns (its access width), the lanes of a stream, the ids loaded at once and
 * whether the next ids are loaded before the current ones are used (ahead):
 * the row-pair baseline (cls16t_pair.cuh: 2 rows a lane, 4-byte accesses),
 * forge's instantiation of src/backend/cuda/classifier_bf16_passes.cuh and the
 * lab's other instantiations of it, interleaved round by round on the same
 * logits (restored before each run, outside the timing), at gpt2-124m's chunk
 * (2560 rows, V = 50257), larger chunks of that vocabulary (8192 and 16384
 * rows) and gpt-25m's (4096 rows, V = 8192), after a check-only 1800-row chunk
 * (a last block of 8 rows at every width). Per variant: the median us of the
 * pair of passes, the bandwidth it implies (3 passes of rows * V bf16: read,
 * read, write), the median per-round ratio baseline / variant (> 1: faster)
 * with a 95% bootstrap CI, and PASS when its dlogits, losses and partials are
 * bitwise the baseline's (FAIL otherwise; the command then exits 1).
 * Measurements: lab/notes/classifier.md.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "classifier_lab.h"
#include "cls16t_pair.cuh"

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

#define CPB_GRAD_SCALE (1.0f / 16384.0f)

/* the baseline: a row pair a lane, 4 ids ahead (the passes forge ran before the widths) */
static void cpb_pair(const cpb_chunk &c) {
    const dim3 grid((unsigned)((c.rows + CLS16T_PAIR_ROWS - 1) / CLS16T_PAIR_ROWS), (unsigned)c.splits);
    const dim3 block(32 * CLS16T_WARPS);
    cls16t_pair_partial_kernel<4><<<grid, block>>>(c.part, c.xt, c.rows, c.V, c.per_split);
    cls16t_pair_grad_kernel<4><<<grid, block>>>(c.losses, c.xt, c.part, c.targets, 0, c.rows, c.V, c.per_split,
                                                c.splits, -1, CPB_GRAD_SCALE, c.err);
}

/* classifier_bf16_passes.cuh's passes with RL rows a lane, LW lanes a stream, UNROLL ids ahead */
template <int RL, int LW, int UNROLL, bool AHEAD> static void cpb_passes(const cpb_chunk &c) {
    const dim3 grid = cls16t_grid<RL, LW>(c.rows, c.splits), block = cls16t_block<LW>();
    cls16t_partial_kernel<RL, LW, UNROLL, AHEAD><<<grid, block>>>(c.part, c.xt, c.rows, c.V, c.per_split);
    cls16t_grad_kernel<RL, LW, UNROLL, AHEAD><<<grid, block>>>(c.losses, c.xt, c.part, c.targets, 0, c.rows, c.V,
                                                               c.per_split, c.splits, -1, CPB_GRAD_SCALE, c.err);
}

struct cpb_variant {
    const char *name;
    int rl, lw, unroll, ahead; /* rows a lane, lanes a stream, ids ahead, the next ids loaded before these are used */
    void (*run)(const cpb_chunk &);
};

/* [0] the baseline, [1] forge's passes; a later entry with forge's parameters is left out (it is [1]) */
static const cpb_variant CPB_VARIANTS[] = {
    {"pair (baseline)", 2, 32, 4, 0, cpb_pair},
    {"forge", CLS16T_LANE_ROWS, CLS16T_LANES, CLS16T_UNROLL, 0,
     cpb_passes<CLS16T_LANE_ROWS, CLS16T_LANES, CLS16T_UNROLL, false>},
    {"lab", 2, 32, 4, 0, cpb_passes<2, 32, 4, false>}, /* the baseline's width: what the generic code costs */
    {"lab", 4, 32, 4, 0, cpb_passes<4, 32, 4, false>},
    {"lab", 4, 32, 8, 0, cpb_passes<4, 32, 8, false>},
    {"lab", 8, 32, 2, 0, cpb_passes<8, 32, 2, false>},
    {"lab", 8, 32, 4, 0, cpb_passes<8, 32, 4, false>},
    {"lab", 8, 16, 4, 0, cpb_passes<8, 16, 4, false>}, /* 16-byte accesses at 128 rows a block: two streams a warp */
    {"lab ahead", 2, 32, 4, 1, cpb_passes<2, 32, 4, true>},
    {"lab ahead", 4, 32, 4, 1, cpb_passes<4, 32, 4, true>},
    {"lab ahead", 8, 16, 4, 1, cpb_passes<8, 16, 4, true>},
};
#define CPB_NV ((int)(sizeof CPB_VARIANTS / sizeof CPB_VARIANTS[0]))

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

/* *bad += the 16-byte vectors where a and b differ */
__global__ void cpb_diff(unsigned long long *bad, const uint4 *a, const uint4 *b, size_t n) {
    unsigned long long k = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 p = a[i], q = b[i];
        k += p.x != q.x || p.y != q.y || p.z != q.z || p.w != q.w;
    }
    if (k) atomicAdd(bad, k);
}

static double cpb_median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* 95% bootstrap CI of the median of v (2000 resamples, a fixed LCG: the same CI every run) */
static void cpb_ci(const std::vector<double> &v, double *lo, double *hi) {
    std::vector<double> meds, s(v.size());
    uint64_t x = 12345;
    for (int b = 0; b < 2000; b++) {
        for (size_t i = 0; i < v.size(); i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            s[i] = v[(x >> 33) % v.size()];
        }
        meds.push_back(cpb_median(s));
    }
    std::sort(meds.begin(), meds.end());
    *lo = meds[50];
    *hi = meds[1949];
}

/* the variants run at this shape: every one but a lab entry with forge's parameters */
static bool cpb_runs(int i) {
    const cpb_variant &v = CPB_VARIANTS[i], &f = CPB_VARIANTS[1];
    return i < 2 || v.rl != f.rl || v.lw != f.lw || v.unroll != f.unroll || v.ahead != f.ahead;
}

/* the variants timed interleaved round by round (2 warm-up rounds, then reps), the logits restored from pristine
 * before each run outside the timing; prints the table, 1 if a variant's pass[] is 0 */
static int cpb_time(const char *name, const cpb_chunk &c, const uint16_t *pristine, const int *pass, int reps) {
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
    printf("  %-15s %9s %5s %6s %6s %6s %9s %7s %24s %s\n", "variant", "rows/lane", "lanes", "unroll", "rows/b",
           "blocks", "us", "GB/s", "baseline/this [95% CI]", "bits");
    for (int u = 0; u < CPB_NV; u++) {
        if (!cpb_runs(u)) continue;
        const cpb_variant &v = CPB_VARIANTS[u];
        std::vector<double> ratio;
        for (int i = 0; i < reps; i++) ratio.push_back(t[0][i] / t[u][i]);
        double lo, hi;
        cpb_ci(ratio, &lo, &hi);
        const double us = cpb_median(t[u]);
        const int rb = v.rl * v.lw;
        printf("  %-15s %9d %5d %6d %6d %6d %9.1f %7.0f %8.3fx [%.3f, %.3f] %s\n", v.name, v.rl, v.lw, v.unroll, rb,
               (c.rows + rb - 1) / rb * c.splits, us, 3.0 * n * 2 / us * 1e-3, cpb_median(ratio), lo, hi,
               u == 0 ? "-" : pass[u] ? "PASS" : "FAIL");
        if (!pass[u]) rc = 1;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return rc;
}

/* rows % 8 == 0 (the transposed chunk's); reps 0: the bitwise check alone, with ignored rows and a bad id */
static int cpb_shape(const char *name, int rows, int V, int reps) {
    const size_t n = (size_t)rows * V;
    const int splits = cls16t_splits(V), per_split = cls16t_per_split(V, splits);
    const size_t np = (size_t)2 * splits * rows;
    std::vector<int32_t> ht(rows);
    for (int r = 0; r < rows; r++) ht[r] = (int32_t)(((uint64_t)r * 2654435761u) % (uint64_t)V);
    if (reps == 0) { /* the check alone: ignored rows (ignore_index -1) and one id past V too */
        for (int r = 3; r < rows; r += 7) ht[r] = -1;
        ht[5] = V + 5;
    }
    uint16_t *pristine, *xt, *ref;
    float *losses, *part;
    int32_t *targets;
    cuda_input_error *err;
    unsigned long long *bad;
    CPB_TRY(cudaMalloc(&pristine, n * 2));
    CPB_TRY(cudaMalloc(&xt, n * 2));
    CPB_TRY(cudaMalloc(&ref, n * 2));
    CPB_TRY(cudaMalloc(&losses, rows * 4));
    CPB_TRY(cudaMalloc(&part, np * 4));
    CPB_TRY(cudaMalloc(&targets, rows * 4));
    CPB_TRY(cudaMalloc(&err, sizeof *err));
    CPB_TRY(cudaMalloc(&bad, sizeof *bad));
    CPB_TRY(cudaMemset(err, 0, sizeof *err));
    cpb_fill<<<1024, 256>>>(pristine, n);
    CPB_TRY(cudaGetLastError());
    CPB_TRY(cudaMemcpy(targets, ht.data(), rows * 4, cudaMemcpyHostToDevice));
    const cpb_chunk c = {losses, part, xt, targets, rows, V, splits, per_split, err};
    /* the baseline's outputs, then each variant's compared bitwise (dlogits on the device) */
    std::vector<float> ref_l(rows), ref_p(np), got_l(rows), got_p(np);
    int pass[CPB_NV];
    for (int u = 0; u < CPB_NV; u++) {
        pass[u] = 1;
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
        unsigned long long nbad = 0;
        CPB_TRY(cudaMemset(bad, 0, sizeof *bad));
        cpb_diff<<<1024, 256>>>(bad, (const uint4 *)xt, (const uint4 *)ref, n / 8); /* n * 2 % 16 == 0 */
        CPB_TRY(cudaGetLastError());
        CPB_TRY(cudaMemcpy(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost));
        pass[u] = nbad == 0 && memcmp(got_l.data(), ref_l.data(), rows * 4) == 0 &&
                  memcmp(got_p.data(), ref_p.data(), np * 4) == 0;
    }
    int rc = 0;
    if (reps == 0) {
        printf("%s (rows %d, V %d, %d ranges of %d ids), bits vs the baseline:", name, rows, V, splits, per_split);
        for (int u = 1; u < CPB_NV; u++)
            if (cpb_runs(u)) {
                printf(" %s %dx%d/%d %s", CPB_VARIANTS[u].name, CPB_VARIANTS[u].rl, CPB_VARIANTS[u].lw,
                       CPB_VARIANTS[u].unroll, pass[u] ? "PASS" : "FAIL");
                if (!pass[u]) rc = 1;
            }
        printf("\n");
    } else {
        rc = cpb_time(name, c, pristine, pass, reps);
    }
    void *all[] = {pristine, xt, ref, losses, part, targets, err, bad};
    for (void *p : all) cudaFree(p);
    return rc;
}

extern "C" int lab_bench_cls16t_passes(int argc, char **argv) {
    int reps = 30;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: forge-lab bench cls16t-passes [--reps N]\n");
            return 2;
        }
    }
    if (reps < 3) reps = 3;
    /* 1800 rows: a last block of 8 rows at every width (1800 % 64 == 1800 % 128 == 1800 % 256 == 8) */
    int rc = cpb_shape("tail check", 1800, 50257, 0);
    rc |= cpb_shape("gpt2-124m chunk", 2560, 50257, reps);
    rc |= cpb_shape("larger chunk", 8192, 50257, reps);
    rc |= cpb_shape("larger chunk", 16384, 50257, reps);
    rc |= cpb_shape("gpt-25m chunk", 4096, 8192, reps);
    return rc;
}
