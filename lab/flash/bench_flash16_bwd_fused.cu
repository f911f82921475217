/*
 * bench_flash16_bwd_fused.cu: `forge-lab bench flash16-bwd-fused [--reps N]`:
 * the backward alone, the three-kernel wgmma one
 * (lab_flash16_backward_three) next to the lab's older fused one (lab_flash16_backward_fused_ws with the split
 * rule's workspace, flash16_bwd_fused.cu) and its TMA reduce-add variant
 * fused2 (lab_flash16_backward_fused2_ws, same workspace), at gpt2-124m-like
 * causal shapes (B, H = Hkv, T, D) = (16, 12, 1024, 64) and (16, 8, 1024, 64):
 * the three interleaved call by call after a warm-up, CUDA events around each
 * call, the median us per call and TFLOP/s under the 2.5 x forward convention
 * (forward 2 B H T^2 D causal). The inputs are uniform bf16 in [-1, 1), out
 * and lse come from forge's forward; the lines also give max |fused - forge|
 * / max |forge| per gradient for each fused variant as a sanity check (the
 * parity test is `forge-lab test flash16`). Then at issue 18's D = 128 shapes (16, 16, 2048, 128) and
 * (8, 16, 4096, 128): the three-kernel backward (lab_flash16_backward_three) and forge's fused one interleaved
 * the same way; and at the D = 64 shapes of the other flash16 benches, (16, 12, 1024, 64), (64, 6, 512, 64),
 * (64, 8, 1024, 64): the three-kernel backward and forge's (the fused kernel's D = 64 instance). In those pairs
 * forge's backward runs twice: into fp32 gradients (forge_flash_bf16_backward_wgmma) and, as the training step
 * calls it, into bf16 gradients in packed qkv rows (forge_flash_bf16_backward_into, row stride 3 H D, written):
 * the bf16 line's extra time over the fp32 one is what storing bf16 dQ costs.
 * Measurements: lab/notes/flash.md.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#include "../lab.h"
#include "flash_bench_common.h"
#include "flash16_variants.h"
#include "flash_lab.h"

#define FZB_TRY(x) LAB_BENCH_CUDA("flash16-bwd-fused", x)
#define FZB_FORGE(x) LAB_BENCH_FORGE("flash16-bwd-fused", x)

/* The inputs of one shape (B, H = Hkv, T, D), causal: uniform bf16 q, k, v, dO in [-1, 1), forge's forward's out and
 * lse, the backward's scratch; 1 on a failure (reported). */
struct fzb_in {
    void *q, *k, *v, *dO, *out;
    float *lse, *delta;
    forge_flash_shape fs;
    size_t nt; /* elements of q (and of each gradient) */
};

static int fzb_inputs(fzb_in *in, int B, int H, int T, int D) {
    const size_t nt = (size_t)B * T * H * D, nl = (size_t)B * H * T;
    std::vector<uint16_t> h(nt);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    void **dst[4] = {&in->q, &in->k, &in->v, &in->dO};
    for (int t = 0; t < 4; t++) {
        for (size_t i = 0; i < nt; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            h[i] = lab_bench_bf16((float)((x >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f);
        }
        FZB_TRY(cudaMalloc(dst[t], nt * 2));
        FZB_TRY(cudaMemcpy(*dst[t], h.data(), nt * 2, cudaMemcpyHostToDevice));
    }
    FZB_TRY(cudaMalloc(&in->out, nt * 2));
    FZB_TRY(cudaMalloc((void **)&in->lse, nl * 4));
    FZB_TRY(cudaMalloc((void **)&in->delta, FORGE_FLASH_BF16_BWD_SCRATCH(B, H, T, D) * 4));
    in->fs = {B, T, T, H, H, D, (long long)H * D, (long long)H * D, (long long)H * D, (long long)H * D};
    in->nt = nt;
    FZB_FORGE(forge_flash_bf16_forward_wgmma(&in->fs, in->q, in->k, in->v, in->out, in->lse, NULL, 0));
    return 0;
}

static void fzb_inputs_free(fzb_in *in) {
    void *all[] = {in->q, in->k, in->v, in->dO, in->out, in->lse, in->delta};
    for (void *p : all) cudaFree(p);
}

static int fzb_shape(int B, int H, int T, int D, int reps) {
    fzb_in in;
    if (fzb_inputs(&in, B, H, T, D)) return 1;
    void *q = in.q, *k = in.k, *v = in.v, *dO = in.dO, *out = in.out;
    float *lse = in.lse, *delta = in.delta, *g[3][3]; /* dq, dk, dv of: three-kernel, fused, fused2 */
    const size_t nt = in.nt;
    const forge_flash_shape fs = in.fs;
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < 3; i++) FZB_TRY(cudaMalloc((void **)&g[w][i], nt * 4));
    const double flops = 2.5 * 2.0 * B * H * (double)T * T * D;
    const size_t wsb = lab_flash16_backward_fused_ws_bytes(&fs, 0);
    void *ws = NULL;
    if (wsb) FZB_TRY(cudaMalloc(&ws, wsb));
    std::vector<float> t[3];
    cudaEvent_t ev[4];
    for (int i = 0; i < 4; i++) FZB_TRY(cudaEventCreate(&ev[i]));
    for (int r = -3; r < reps; r++) {
        FZB_TRY(cudaEventRecord(ev[0], NULL));
        FZB_FORGE(lab_flash16_backward_three(&fs, q, k, v, out, dO, lse, delta, g[0][0], g[0][1], g[0][2], NULL));
        FZB_TRY(cudaEventRecord(ev[1], NULL));
        FZB_FORGE(lab_flash16_backward_fused_ws(&fs, q, k, v, out, dO, lse, delta, g[1][0], g[1][1], g[1][2], 0, ws,
                                                wsb, NULL));
        FZB_TRY(cudaEventRecord(ev[2], NULL));
        FZB_FORGE(lab_flash16_backward_fused2_ws(&fs, q, k, v, out, dO, lse, delta, g[2][0], g[2][1], g[2][2], 0, ws,
                                                 wsb, NULL));
        FZB_TRY(cudaEventRecord(ev[3], NULL));
        FZB_TRY(cudaEventSynchronize(ev[3]));
        if (r < 0) continue;
        for (int w = 0; w < 3; w++) {
            float ms = 0;
            FZB_TRY(cudaEventElapsedTime(&ms, ev[w], ev[w + 1]));
            t[w].push_back(ms);
        }
    }
    for (int i = 0; i < 4; i++) cudaEventDestroy(ev[i]);
    double us[3];
    for (int w = 0; w < 3; w++) us[w] = 1e3 * lab_bench_median(t[w]);
    printf("B=%d H=%d T=%d D=%d causal, median of %d interleaved: three-kernel bwd %.1f us (%.1f TFLOP/s), fused bwd "
           "%.1f us (%.1f TFLOP/s, workspace %zu B), fused2 bwd %.1f us (%.1f TFLOP/s); speed-up over three-kernel: "
           "fused %.3fx, fused2 %.3fx; fused2 / fused time %.3f\n",
           B, H, T, D, reps, us[0], flops / us[0] * 1e-6, us[1], flops / us[1] * 1e-6, wsb, us[2],
           flops / us[2] * 1e-6, us[0] / us[1], us[0] / us[2], us[2] / us[1]);
    for (int w = 1; w < 3; w++)
        printf("  %s: max|x-three|/max|three| dq %.2e dk %.2e dv %.2e\n", w == 1 ? "fused " : "fused2",
               lab_bench_rel(g[w][0], g[0][0], nt), lab_bench_rel(g[w][1], g[0][1], nt), lab_bench_rel(g[w][2], g[0][2], nt));
    if (ws) cudaFree(ws);
    fzb_inputs_free(&in);
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < 3; i++) cudaFree(g[w][i]);
    return 0;
}

/* The three-kernel backward (lab_flash16_backward_three) against forge's (forge_flash_bf16_backward_wgmma, the fused
 * kernel) at (B, H, T, D), interleaved call by call. */
static int fzb_pair(int B, int H, int T, int D, int reps) {
    enum { NV = 3 }; /* three-kernel, fused (fp32 gradients), fused (bf16 gradients, not in g) */
    const char *const name[NV] = {"three-kernel", "forge (fused)", "forge (fused, bf16 qkv grads)"};
    fzb_in in;
    if (fzb_inputs(&in, B, H, T, D)) return 1;
    void *q = in.q, *k = in.k, *v = in.v, *dO = in.dO, *out = in.out;
    float *lse = in.lse, *delta = in.delta, *g[NV][3]; /* dq, dk, dv of each */
    const size_t nt = in.nt;
    const forge_flash_shape fs = in.fs;
    for (int w = 0; w < NV - 1; w++)
        for (int i = 0; i < 3; i++) FZB_TRY(cudaMalloc((void **)&g[w][i], nt * 4));
    const long long qw = (long long)H * D; /* the step's packed dqkv: rows of q | k | v gradients (H = Hkv) */
    uint16_t *dqkv = NULL;
    FZB_TRY(cudaMalloc((void **)&dqkv, nt * 3 * 2));
    const forge_flash_grads gb = {dqkv, dqkv + qw, dqkv + 2 * qw, 3 * qw, 3 * qw, 3 * qw, 1, 0};
    const double flops = 2.5 * 2.0 * B * H * (double)T * T * D;
    std::vector<float> t[NV];
    cudaEvent_t ev[NV + 1];
    for (int i = 0; i <= NV; i++) FZB_TRY(cudaEventCreate(&ev[i]));
    for (int r = -3; r < reps; r++) {
        FZB_TRY(cudaEventRecord(ev[0], NULL));
        FZB_FORGE(lab_flash16_backward_three(&fs, q, k, v, out, dO, lse, delta, g[0][0], g[0][1], g[0][2], NULL));
        FZB_TRY(cudaEventRecord(ev[1], NULL));
        FZB_FORGE(forge_flash_bf16_backward_wgmma(&fs, q, k, v, out, dO, lse, delta, g[1][0], g[1][1], g[1][2], NULL));
        FZB_TRY(cudaEventRecord(ev[2], NULL));
        FZB_FORGE(forge_flash_bf16_backward_into(&fs, q, k, v, out, dO, lse, delta, &gb, NULL, 0));
        FZB_TRY(cudaEventRecord(ev[3], NULL));
        FZB_TRY(cudaEventSynchronize(ev[NV]));
        if (r < 0) continue;
        for (int w = 0; w < NV; w++) {
            float ms = 0;
            FZB_TRY(cudaEventElapsedTime(&ms, ev[w], ev[w + 1]));
            t[w].push_back(ms);
        }
    }
    for (int i = 0; i <= NV; i++) cudaEventDestroy(ev[i]);
    const double us0 = 1e3 * lab_bench_median(t[0]);
    printf("B=%d H=%d T=%d D=%d causal, median of %d interleaved: %s bwd %.1f us (%.1f TFLOP/s)\n", B, H, T, D, reps,
           name[0], us0, flops / us0 * 1e-6);
    for (int w = 1; w < NV - 1; w++) {
        const double us = 1e3 * lab_bench_median(t[w]);
        printf("  %s bwd %.1f us (%.1f TFLOP/s), speed-up over three-kernel %.3fx; max|x-three|/max|three| dq %.2e dk "
               "%.2e dv %.2e\n",
               name[w], us, flops / us * 1e-6, us0 / us, lab_bench_rel(g[w][0], g[0][0], nt),
               lab_bench_rel(g[w][1], g[0][1], nt), lab_bench_rel(g[w][2], g[0][2], nt));
    }
    const double us32 = 1e3 * lab_bench_median(t[NV - 2]), usb = 1e3 * lab_bench_median(t[NV - 1]);
    printf("  %s bwd %.1f us (%.1f TFLOP/s), speed-up over three-kernel %.3fx, %+.1f us over fp32 gradients\n",
           name[NV - 1], usb, flops / usb * 1e-6, us0 / usb, usb - us32);
    fzb_inputs_free(&in);
    cudaFree(dqkv);
    for (int w = 0; w < NV - 1; w++)
        for (int i = 0; i < 3; i++) cudaFree(g[w][i]);
    return 0;
}

extern "C" int lab_bench_flash16_bwd_fused(int argc, char **argv) {
    int reps = 0;
    if (lab_reps_args(argc, argv, "flash16-bwd-fused", 50, 1, &reps)) return 2;
    static const int shapes[][4] = {{16, 12, 1024, 64}, {16, 8, 1024, 64}};
    for (const auto &s : shapes)
        if (fzb_shape(s[0], s[1], s[2], s[3], reps)) return 1;
    static const int pairs[][4] = {{16, 16, 2048, 128}, {8, 16, 4096, 128},
                                   {16, 12, 1024, 64},  {64, 6, 512, 64},   {64, 8, 1024, 64}};
    for (const auto &s : pairs)
        if (fzb_pair(s[0], s[1], s[2], s[3], reps)) return 1;
    return 0;
}
