/*
 * bench_flash16_fwd_1cta.cu: `forge-lab bench flash16-fwd-1cta [--reps N]`:
 * the forward alone, forge's (forge_flash_bf16_forward_wgmma: fw_fwd64_kernel, two CTAs per SM) next to the
 * one-CTA-per-SM kernel it replaced (lab_flash16_forward_1cta, flash16_fwd_1cta.cu), at the issue-18 causal shapes
 * with D = 64:
 * (B, H = Hkv, T, D) = (16, 12, 1024, 64) (gpt2-124m's training shape), (64, 6, 512, 64), (64, 8, 1024, 64). The
 * two are interleaved call by call after a warm-up, CUDA events around each call, the median us per call and
 * TFLOP/s (forward 2 B H T^2 D, causal). Inputs uniform bf16 in [-1, 1); each line also gives max |out_1cta -
 * out_forge| and max |lse_1cta - lse_forge| as a sanity check (the parity test is `forge-lab test flash16`), and the
 * first line the CTAs per SM the runtime keeps resident (the design: 2). Measurements: lab/notes/flash.md.
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

#define F2B_TRY(x) LAB_BENCH_CUDA("flash16-fwd-1cta", x)
#define F2B_FORGE(x) LAB_BENCH_FORGE("flash16-fwd-1cta", x)

typedef forge_status (*f2b_forward)(const forge_flash_shape *, const void *, const void *, const void *, void *, float *,
                                    void *);

/* forge's forward against `variant` (printed as `name`) at one shape, interleaved call by call */
static int f2b_shape(int B, int H, int T, int D, int reps, f2b_forward variant, const char *name) {
    const size_t nt = (size_t)B * T * H * D, nl = (size_t)B * H * T;
    std::vector<uint16_t> h(nt);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    void *in[3], *out[2];
    float *lse[2];
    for (int t = 0; t < 3; t++) {
        for (size_t i = 0; i < nt; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            h[i] = lab_bench_bf16((float)((x >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f);
        }
        F2B_TRY(cudaMalloc(&in[t], nt * 2));
        F2B_TRY(cudaMemcpy(in[t], h.data(), nt * 2, cudaMemcpyHostToDevice));
    }
    for (int w = 0; w < 2; w++) {
        F2B_TRY(cudaMalloc(&out[w], nt * 2));
        F2B_TRY(cudaMalloc((void **)&lse[w], nl * 4));
    }
    const forge_flash_shape fs = {B, T, T, H, H, D, (long long)H * D, (long long)H * D, (long long)H * D,
                                  (long long)H * D};
    const double flops = 2.0 * B * H * (double)T * T * D;
    std::vector<float> tm[2];
    cudaEvent_t ev[3];
    for (int i = 0; i < 3; i++) F2B_TRY(cudaEventCreate(&ev[i]));
    for (int r = -5; r < reps; r++) {
        F2B_TRY(cudaEventRecord(ev[0], NULL));
        F2B_FORGE(forge_flash_bf16_forward_wgmma(&fs, in[0], in[1], in[2], out[0], lse[0], NULL, 0));
        F2B_TRY(cudaEventRecord(ev[1], NULL));
        F2B_FORGE(variant(&fs, in[0], in[1], in[2], out[1], lse[1], NULL));
        F2B_TRY(cudaEventRecord(ev[2], NULL));
        F2B_TRY(cudaEventSynchronize(ev[2]));
        if (r < 0) continue;
        for (int w = 0; w < 2; w++) {
            float ms = 0;
            F2B_TRY(cudaEventElapsedTime(&ms, ev[w], ev[w + 1]));
            tm[w].push_back(ms);
        }
    }
    for (int i = 0; i < 3; i++) cudaEventDestroy(ev[i]);
    const double us0 = 1e3 * lab_bench_median(tm[0]), us1 = 1e3 * lab_bench_median(tm[1]);
    /* sanity: the two outputs of the last call */
    std::vector<uint16_t> o0(nt), o1(nt);
    std::vector<float> l0(nl), l1(nl);
    F2B_TRY(cudaMemcpy(o0.data(), out[0], nt * 2, cudaMemcpyDeviceToHost));
    F2B_TRY(cudaMemcpy(o1.data(), out[1], nt * 2, cudaMemcpyDeviceToHost));
    F2B_TRY(cudaMemcpy(l0.data(), lse[0], nl * 4, cudaMemcpyDeviceToHost));
    F2B_TRY(cudaMemcpy(l1.data(), lse[1], nl * 4, cudaMemcpyDeviceToHost));
    double dout = 0.0, dlse = 0.0;
    for (size_t i = 0; i < nt; i++) {
        const double e = fabs((double)lab_bench_float(o1[i]) - lab_bench_float(o0[i]));
        dout = e > dout || isnan(e) ? e : dout;
    }
    for (size_t i = 0; i < nl; i++) {
        const double e = fabs((double)l1[i] - l0[i]);
        dlse = e > dlse || isnan(e) ? e : dlse;
    }
    printf("B=%d H=%d T=%d D=%d causal, median of %d interleaved: forge fwd %.1f us (%.1f TFLOP/s), %s fwd %.1f us "
           "(%.1f TFLOP/s); forge's speed-up %.3fx; max|dout| %.2e max|dlse| %.2e\n",
           B, H, T, D, reps, us0, flops / us0 * 1e-6, name, us1, flops / us1 * 1e-6, us1 / us0, dout, dlse);
    for (int t = 0; t < 3; t++) cudaFree(in[t]);
    for (int w = 0; w < 2; w++) {
        cudaFree(out[w]);
        cudaFree(lse[w]);
    }
    return 0;
}

static const int F2B_SHAPES[][4] = {{16, 12, 1024, 64}, {64, 6, 512, 64}, {64, 8, 1024, 64}};

extern "C" int lab_bench_flash16_fwd_1cta(int argc, char **argv) {
    int reps = 0;
    if (lab_reps_args(argc, argv, "flash16-fwd-1cta", 50, 1, &reps)) return 2;
    int ctas = 0;
    F2B_FORGE(forge_flash_bf16_forward_wgmma_occupancy(64, &ctas));
    printf("forge's forward at D = 64: %d CTAs per SM resident (cudaOccupancyMaxActiveBlocksPerMultiprocessor; the design: 2)\n",
           ctas);
    for (const auto &s : F2B_SHAPES)
        if (f2b_shape(s[0], s[1], s[2], s[3], reps, lab_flash16_forward_1cta, "1cta")) return 1;
    return 0;
}
