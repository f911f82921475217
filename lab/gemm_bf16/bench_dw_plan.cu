/*
 * bench_dw_plan.cu: `forge-lab bench dw-plan [--reps N]`: the weight-gradient GEMMs of a bf16 training step
 * (TN, dW (OC, C) += dout^T . x over K = 16384 token rows, fp32 C accumulated) at the shapes of gpt2-124m, gpt-25m
 * and gpt-10m, on the default plan (forge_gemm_bf16_tn_wgmma: C192 where its one-wave plan fills the SMs, else the
 * cost model's 128-row tile and splits) and on explicit (tile, splits) plans (lab_gemm_bf16_tn_plan): per tile
 * (128 x 128, 128 x 256, 192 x 192) the splits whose units fill at least 70% of their waves, up to 6 waves. All
 * plans of a shape are timed interleaved, round by round (the order rotating every round; 3 warm-up rounds), on the
 * same operands, each from the same C, every sample the mean of DWP_BACK_TO_BACK launches in a row. Per plan: the median us, TFLOP/s (2 M N K), the median per-round ratio
 * default / plan (> 1: the plan is faster) with a 95% bootstrap CI, and the largest |C - C_default| relative to
 * max |C_default| (plans split K elsewhere: equal within fp32 rounding, not bit for bit).
 * Measurements: lab/notes/gemm-bf16.md.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include <cuda_runtime.h>

#include "../lab.h"
#include "../lab_fill.cuh"
#include "../lab_stats.h"
extern "C" {
#include "gemm_bf16_variants.h"
}

#define DWP_TRY(x)                                                                                                 \
    do {                                                                                                           \
        cudaError_t e_ = (x);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "forge-lab bench dw-plan: %s: %s\n", #x, cudaGetErrorString(e_));                     \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

#define DWP_FTRY(x)                                                                                                \
    do {                                                                                                           \
        forge_status s_ = (x);                                                                                     \
        if (s_ != FORGE_OK) {                                                                                      \
            fprintf(stderr, "forge-lab bench dw-plan: %s: %s\n", #x, forge_error_message());                      \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

struct dwp_shape {
    const char *name;
    int M, N; /* OC, C */
};

struct dwp_plan {
    int bn, splits; /* bn 0: the default entry */
};

#define DWP_K 16384
/* launches per timed sample: the host's launch work for one call (~4 us) overlaps the previous call's kernels, as
 * in the step's CUDA graph, instead of showing up as idle device time */
#define DWP_BACK_TO_BACK 8

/* out[0] = max |a - b|, out[1] = max |b| (non-negative floats compare as their bits) */
__global__ void dwp_diff(unsigned *out, const float *a, const float *b, size_t n) {
    float d = 0.0f, m = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        d = fmaxf(d, fabsf(a[i] - b[i]));
        m = fmaxf(m, fabsf(b[i]));
    }
    atomicMax(out, __float_as_uint(d));
    atomicMax(out + 1, __float_as_uint(m));
}

static forge_status dwp_run(const dwp_plan &p, const uint16_t *A, const uint16_t *B, float *C, const dwp_shape &s,
                            void *ws, size_t ws_bytes) {
    if (p.bn == 0) return forge_gemm_bf16_tn_wgmma(A, B, C, s.M, s.N, DWP_K, 1, ws, ws_bytes, NULL, 0);
    return lab_gemm_bf16_tn_plan(A, B, C, s.M, s.N, DWP_K, 1, ws, ws_bytes, p.bn, p.splits, NULL);
}

/* the default first, then per tile the splits that keep >= 70% of their (<= 6) waves busy with >= 8 K slices */
static std::vector<dwp_plan> dwp_plans(const dwp_shape &s, int sms) {
    std::vector<dwp_plan> v;
    v.push_back({0, 0});
    const int tiles_bn[3] = {128, 256, 192};
    const int ktiles = (DWP_K + 63) / 64;
    for (int t = 0; t < 3; t++) {
        const int bn = tiles_bn[t], bm = bn == 192 ? 192 : 128;
        const long long tiles = (long long)((s.M + bm - 1) / bm) * ((s.N + bn - 1) / bn);
        for (int sp = 1; sp <= 32; sp++) {
            const int kps = (ktiles + sp - 1) / sp;
            if ((ktiles + kps - 1) / kps != sp || kps < 8) continue;
            const long long units = tiles * sp, waves = (units + sms - 1) / sms;
            if (waves > 6 || units * 10 < waves * sms * 7) continue;
            v.push_back({bn, sp});
        }
    }
    return v;
}

static int dwp_shape_run(const dwp_shape &s, int reps, int sms) {
    const std::vector<dwp_plan> plans = dwp_plans(s, sms);
    const size_t P = plans.size();
    const size_t an = (size_t)DWP_K * s.M, bn = (size_t)DWP_K * s.N, cn = (size_t)s.M * s.N;
    uint16_t *A, *B;
    float *C0, *Cp;
    unsigned *d;
    void *ws;
    size_t ws_bytes = 0;
    for (const dwp_plan &p : plans) {
        size_t need = 0;
        if (p.bn == 0) DWP_FTRY(forge_gemm_bf16_tn_workspace(s.M, s.N, DWP_K, &need));
        else need = p.splits > 1 ? (size_t)p.splits * cn * sizeof(float) : 0;
        if (need > ws_bytes) ws_bytes = need;
    }
    DWP_TRY(cudaMalloc(&A, an * 2));
    DWP_TRY(cudaMalloc(&B, bn * 2));
    DWP_TRY(cudaMalloc(&C0, cn * 4));
    DWP_TRY(cudaMalloc(&Cp, P * cn * 4));
    DWP_TRY(cudaMalloc(&d, 2 * sizeof(unsigned)));
    DWP_TRY(cudaMalloc(&ws, ws_bytes > 0 ? ws_bytes : 16));
    lab_fill_bf16<<<1024, 256>>>(A, an, 1, 1.0f);
    lab_fill_bf16<<<1024, 256>>>(B, bn, 2, 1.0f);
    DWP_TRY(cudaMemset(C0, 0, cn * 4));
    DWP_TRY(cudaGetLastError());
    /* C_p = C0 + the product: every plan from the same C, checked against the default's */
    for (size_t i = 0; i < P; i++) {
        DWP_TRY(cudaMemcpy(Cp + i * cn, C0, cn * 4, cudaMemcpyDeviceToDevice));
        DWP_FTRY(dwp_run(plans[i], A, B, Cp + i * cn, s, ws, ws_bytes));
    }
    std::vector<double> rel(P, 0.0);
    for (size_t i = 1; i < P; i++) {
        unsigned h[2] = {0, 0};
        DWP_TRY(cudaMemset(d, 0, 2 * sizeof(unsigned)));
        dwp_diff<<<256, 256>>>(d, Cp + i * cn, Cp, cn);
        DWP_TRY(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
        float fd, fm;
        memcpy(&fd, &h[0], 4);
        memcpy(&fm, &h[1], 4);
        rel[i] = fm > 0.0f ? fd / fm : fd;
    }
    cudaEvent_t e0, e1;
    DWP_TRY(cudaEventCreate(&e0));
    DWP_TRY(cudaEventCreate(&e1));
    std::vector<std::vector<double>> t(P);
    for (int r = -3; r < reps; r++)
        for (size_t j = 0; j < P; j++) {
            const size_t k = (j + (size_t)(r + 3)) % P; /* rotate the order every round */
            DWP_TRY(cudaEventRecord(e0));
            for (int b = 0; b < DWP_BACK_TO_BACK; b++) DWP_FTRY(dwp_run(plans[k], A, B, Cp + k * cn, s, ws, ws_bytes));
            DWP_TRY(cudaEventRecord(e1));
            DWP_TRY(cudaEventSynchronize(e1));
            float ms = 0;
            DWP_TRY(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0) t[k].push_back(1e3 * ms / DWP_BACK_TO_BACK);
        }
    const double flop = 2.0 * s.M * s.N * DWP_K;
    int best = 0;
    for (size_t k = 1; k < P; k++)
        if (lab_median(t[k]) < lab_median(t[(size_t)best])) best = (int)k;
    for (size_t k = 0; k < P; k++) {
        std::vector<double> ratio;
        for (int i = 0; i < reps; i++) ratio.push_back(t[0][(size_t)i] / t[k][(size_t)i]);
        double lo, hi;
        lab_median_ci(ratio, &lo, &hi);
        char plan[32];
        if (plans[k].bn == 0) snprintf(plan, sizeof plan, "default");
        else snprintf(plan, sizeof plan, "%dx%d s%d", plans[k].bn == 192 ? 192 : 128, plans[k].bn, plans[k].splits);
        const double us = lab_median(t[k]);
        printf("  %-16s %5d x %5d  %-14s %8.1f %7.1f %8.3fx [%.3f, %.3f]  %.1e%s\n", s.name, s.M, s.N, plan, us,
               flop / us * 1e-6, lab_median(ratio), lo, hi, rel[k], (int)k == best ? "  <- fastest" : "");
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(A), cudaFree(B), cudaFree(C0), cudaFree(Cp), cudaFree(d), cudaFree(ws);
    return 0;
}

extern "C" int lab_bench_dw_plan(int argc, char **argv) {
    int reps = 0;
    if (lab_reps_args(argc, argv, "dw-plan", 20, 3, &reps)) return 2;
    int dev = 0, sms = 0;
    DWP_TRY(cudaGetDevice(&dev));
    DWP_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    static const dwp_shape shapes[] = {
        {"gpt2-124m qkv", 2304, 768},  {"gpt2-124m attn", 768, 768}, {"gpt2-124m fc", 3072, 768},
        {"gpt2-124m proj", 768, 3072}, {"gpt-25m qkv", 1536, 512},   {"gpt-25m up", 1408, 512},
        {"gpt-25m down", 512, 1408},   {"gpt-25m attn", 512, 512},   {"gpt-10m qkv", 1152, 384},
        {"gpt-10m attn", 384, 384},    {"gpt-10m fc", 1536, 384},    {"gpt-10m proj", 384, 1536},
    };
    printf("forge-lab bench dw-plan: dW += dout^T x, K = %d, %d SMs, %d rounds\n", DWP_K, sms, reps);
    printf("  %-16s %13s  %-14s %8s %7s %9s %16s  %s\n", "shape", "OC x C", "plan", "us", "TFLOP/s", "def/plan",
           "[95% CI]", "rel diff");
    for (const dwp_shape &s : shapes)
        if (dwp_shape_run(s, reps, sms)) return 1;
    return 0;
}
