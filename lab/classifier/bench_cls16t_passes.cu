/*
 * bench_cls16t_passes.cu: `forge-lab bench cls16t-passes [--reps N]`: the bf16
 * classifier's two column passes over one transposed chunk (logits^T (V, rows):
 * softmax statistics, then dlogits written over the logits;
 * src/backend/cuda/classifier_bf16_passes.cuh) with UNROLL = 4, 8 and 16 ids
 * loaded per thread before any is used, interleaved round by round on the
 * same inputs (the logits restored before each run, outside the timing), at
 * gpt2-124m's chunk (2560 rows, V = 50257) and gpt-25m's (4096 rows, V = 8192).
 * Per UNROLL: the median us of the pair, the bandwidth it implies (3 passes of
 * rows * V bf16: read, read, write), and the median per-round ratio to UNROLL = 4
 * with a 95% bootstrap CI; the outputs (dlogits, losses, partials) must be
 * bitwise equal to UNROLL = 4's. Measurements: lab/notes/classifier.md.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "../../src/backend/cuda/classifier_bf16_passes.cuh"
#include "../lab_stats.h"
#include "classifier_lab.h"

#define CPB_TRY(x)                                                                                                 \
    do {                                                                                                           \
        cudaError_t e_ = (x);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "forge-lab bench cls16t-passes: %s: %s\n", #x, cudaGetErrorString(e_));              \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

static const int CPB_UNROLLS[3] = {4, 8, 16};

/* the pair of passes with unroll index u (0, 1, 2) over xt in place */
static int cpb_run(int u, float *losses, uint16_t *xt, float *part, const int32_t *targets, int rows, int V,
                   int splits, int per_split, cuda_input_error *err) {
    const dim3 grid((unsigned)((rows + CLS16T_ROWS - 1) / CLS16T_ROWS), (unsigned)splits), block(32 * CLS16T_WARPS);
    const float gs = 1.0f / 16384.0f;
    switch (u) {
    case 0:
        cls16t_partial_kernel<4><<<grid, block>>>(part, xt, rows, V, per_split);
        cls16t_grad_kernel<4><<<grid, block>>>(losses, xt, part, targets, 0, rows, V, per_split, splits, -1, gs, err);
        break;
    case 1:
        cls16t_partial_kernel<8><<<grid, block>>>(part, xt, rows, V, per_split);
        cls16t_grad_kernel<8><<<grid, block>>>(losses, xt, part, targets, 0, rows, V, per_split, splits, -1, gs, err);
        break;
    default:
        cls16t_partial_kernel<16><<<grid, block>>>(part, xt, rows, V, per_split);
        cls16t_grad_kernel<16><<<grid, block>>>(losses, xt, part, targets, 0, rows, V, per_split, splits, -1, gs, err);
        break;
    }
    CPB_TRY(cudaGetLastError());
    return 0;
}

static int cpb_shape(const char *name, int rows, int V, int reps) {
    const size_t n = (size_t)rows * V;
    const int splits = V < 1024 ? 1 : (V + 1023) / 1024 < 16 ? (V + 1023) / 1024 : 16; /* classifier_bf16.cu's */
    const int per_split = (V + splits - 1) / splits;
    std::vector<uint16_t> h(n);
    std::vector<int32_t> ht(rows);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const float f = (float)((x >> 40) * (1.0 / 16777216.0)) * 16.0f - 8.0f; /* logits in [-8, 8) */
        uint32_t u;
        memcpy(&u, &f, 4);
        h[i] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    }
    for (int r = 0; r < rows; r++) ht[r] = (int32_t)(((uint64_t)r * 2654435761u) % (uint64_t)V);
    uint16_t *pristine, *xt;
    float *losses, *part;
    int32_t *targets;
    cuda_input_error *err;
    CPB_TRY(cudaMalloc(&pristine, n * 2));
    CPB_TRY(cudaMalloc(&xt, n * 2));
    CPB_TRY(cudaMalloc(&losses, rows * 4));
    CPB_TRY(cudaMalloc(&part, (size_t)2 * splits * rows * 4));
    CPB_TRY(cudaMalloc(&targets, rows * 4));
    CPB_TRY(cudaMalloc(&err, sizeof *err));
    CPB_TRY(cudaMemset(err, 0, sizeof *err));
    CPB_TRY(cudaMemcpy(pristine, h.data(), n * 2, cudaMemcpyHostToDevice));
    CPB_TRY(cudaMemcpy(targets, ht.data(), rows * 4, cudaMemcpyHostToDevice));
    /* UNROLL = 4's outputs, then each other's compared bitwise */
    std::vector<uint16_t> ref_x(n), got_x(n);
    std::vector<float> ref_l(rows), got_l(rows);
    int same[3] = {1, 1, 1};
    for (int u = 0; u < 3; u++) {
        CPB_TRY(cudaMemcpy(xt, pristine, n * 2, cudaMemcpyDeviceToDevice));
        if (cpb_run(u, losses, xt, part, targets, rows, V, splits, per_split, err)) return 1;
        CPB_TRY(cudaMemcpy(u ? got_x.data() : ref_x.data(), xt, n * 2, cudaMemcpyDeviceToHost));
        CPB_TRY(cudaMemcpy(u ? got_l.data() : ref_l.data(), losses, rows * 4, cudaMemcpyDeviceToHost));
        if (u) same[u] = memcmp(got_x.data(), ref_x.data(), n * 2) == 0 && memcmp(got_l.data(), ref_l.data(), rows * 4) == 0;
    }
    cudaEvent_t e0, e1;
    CPB_TRY(cudaEventCreate(&e0));
    CPB_TRY(cudaEventCreate(&e1));
    std::vector<double> t[3];
    for (int r = -2; r < reps; r++)
        for (int u = 0; u < 3; u++) {
            CPB_TRY(cudaMemcpy(xt, pristine, n * 2, cudaMemcpyDeviceToDevice));
            CPB_TRY(cudaEventRecord(e0));
            if (cpb_run(u, losses, xt, part, targets, rows, V, splits, per_split, err)) return 1;
            CPB_TRY(cudaEventRecord(e1));
            CPB_TRY(cudaEventSynchronize(e1));
            float ms = 0;
            CPB_TRY(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0) t[u].push_back(1e3 * ms);
        }
    printf("%s (rows %d, V %d, %d ranges), median of %d interleaved rounds:\n", name, rows, V, splits, reps);
    printf("  %-7s %10s %9s %22s %s\n", "unroll", "us", "GB/s", "vs unroll 4 [95% CI]", "bits vs unroll 4");
    for (int u = 0; u < 3; u++) {
        std::vector<double> ratio;
        for (int i = 0; i < reps; i++) ratio.push_back(t[0][i] / t[u][i]);
        double lo, hi;
        lab_median_ci(ratio, &lo, &hi);
        const double us = lab_median(t[u]);
        printf("  %-7d %10.1f %9.0f %8.3fx [%.3f, %.3f] %s\n", CPB_UNROLLS[u], us, 3.0 * n * 2 / us * 1e-3,
               lab_median(ratio), lo, hi, u == 0 ? "-" : same[u] ? "equal" : "DIFFERENT");
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    void *all[] = {pristine, xt, losses, part, targets, err};
    for (void *p : all) cudaFree(p);
    return same[1] && same[2] ? 0 : 1;
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
    int rc = cpb_shape("gpt2-124m chunk", 2560, 50257, reps);
    rc |= cpb_shape("gpt-25m chunk", 4096, 8192, reps);
    return rc;
}
