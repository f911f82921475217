/*
 * bench_flash16_bwd_2cta.cu: `forge-lab bench flash16-bwd-2cta [--reps N]`:
 * the backward alone, forge's (forge_flash_bf16_backward_wgmma: delta, fb_dq_kernel<64>, fb_dkdv_kernel<64>, one
 * CTA per SM) next to the two-CTA-per-SM kernels (lab_flash16_backward_2cta, flash16_bwd_2cta.cu) at the issue-18
 * causal shapes with D = 64: (B, H = Hkv, T, D) = (16, 12, 1024, 64) (gpt2-124m's training shape), (64, 6, 512, 64),
 * (64, 8, 1024, 64). Per repetition, interleaved call by call after a warm-up (CUDA events around each call):
 * - whole calls: forge; 2cta with fb2_dq_kernel<64> + fb2_dkdv_kernel ("dq64"); 2cta with fb2_dq_kernel<32> +
 *   fb2_dkdv_kernel ("dq32"); the three-consumer kernels (lab_flash16_backward_3wg, flash16_bwd_3wg.cu: "3wg");
 * - one kernel each (the entries' timing-only _NO_DQ / _NO_DKDV bits; every call also runs the ~same delta pass):
 *   forge's dQ, fb2_dq_kernel<64>, fb2_dq_kernel<32>, fb3_dq_kernel; forge's dK/dV, fb2_dkdv_kernel,
 *   fb3_dkdv_kernel.
 * Median us per call, TFLOP/s of whole calls under the 2.5 x forward convention (forward 2 B H T^2 D, causal), the
 * speed-ups, and max |2cta - forge| / max |forge| for dq, dk, dv of both whole 2cta calls as a sanity check (the
 * parity test is `forge-lab test flash16`). Inputs uniform bf16 in [-1, 1); out and lse from forge's forward. The
 * first lines are the CTAs per SM the runtime keeps resident for each new kernel (the design: 2).
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

#define B2B_TRY(x) LAB_BENCH_CUDA("flash16-bwd-2cta", x)
#define B2B_FORGE(x) LAB_BENCH_FORGE("flash16-bwd-2cta", x)

/* the timed calls of one repetition: fn -1 is forge_flash_bf16_backward_wgmma, 0 lab_flash16_backward_2cta, 1
 * lab_flash16_backward_3wg, with kernels bits; out: which gradient set (0 forge, 1 dq64, 2 dq32, 3 3wg, 4 the
 * one-kernel calls' scratch, 5 3wg bulk) */
#define B2B_CALLS 13
static const struct {
    int fn, kernels, out;
} B2B_CALL[B2B_CALLS] = {
    {-1, 0, 0},
    {0, LAB_FLASH16_BWD2_DQ64 | LAB_FLASH16_BWD2_DKDV, 1},
    {0, LAB_FLASH16_BWD2_DQ32 | LAB_FLASH16_BWD2_DKDV, 2},
    {1, LAB_FLASH16_BWD3_DQ | LAB_FLASH16_BWD3_DKDV, 3},
    {0, LAB_FLASH16_BWD2_NO_DKDV, 4},
    {0, LAB_FLASH16_BWD2_DQ64 | LAB_FLASH16_BWD2_NO_DKDV, 4},
    {0, LAB_FLASH16_BWD2_DQ32 | LAB_FLASH16_BWD2_NO_DKDV, 4},
    {1, LAB_FLASH16_BWD3_DQ | LAB_FLASH16_BWD3_NO_DKDV, 4},
    {0, LAB_FLASH16_BWD2_NO_DQ, 4},
    {0, LAB_FLASH16_BWD2_DKDV | LAB_FLASH16_BWD2_NO_DQ, 4},
    {1, LAB_FLASH16_BWD3_DKDV | LAB_FLASH16_BWD3_NO_DQ, 4},
    {1, LAB_FLASH16_BWD3_DQ | LAB_FLASH16_BWD3_DKDV | LAB_FLASH16_BWD3_BULK, 5},
    {1, LAB_FLASH16_BWD3_DKDV | LAB_FLASH16_BWD3_BULK | LAB_FLASH16_BWD3_NO_DQ, 4},
};
#define B2B_SETS 6

static int b2b_shape(int B, int H, int T, int D, int reps) {
    const size_t nt = (size_t)B * T * H * D, nl = (size_t)B * H * T;
    std::vector<uint16_t> h(nt);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    void *q, *k, *v, *dO, *out;
    float *lse, *delta, *g[B2B_SETS][3];
    void **in[4] = {&q, &k, &v, &dO};
    for (int t = 0; t < 4; t++) {
        for (size_t i = 0; i < nt; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            h[i] = lab_bench_bf16((float)((x >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f);
        }
        B2B_TRY(cudaMalloc(in[t], nt * 2));
        B2B_TRY(cudaMemcpy(*in[t], h.data(), nt * 2, cudaMemcpyHostToDevice));
    }
    B2B_TRY(cudaMalloc(&out, nt * 2));
    B2B_TRY(cudaMalloc((void **)&lse, nl * 4));
    B2B_TRY(cudaMalloc((void **)&delta, FORGE_FLASH_BF16_BWD_SCRATCH(B, H, T, D) * 4));
    for (int w = 0; w < B2B_SETS; w++)
        for (int i = 0; i < 3; i++) B2B_TRY(cudaMalloc((void **)&g[w][i], nt * 4));
    const forge_flash_shape fs = {B, T, T, H, H, D, (long long)H * D, (long long)H * D, (long long)H * D,
                                  (long long)H * D};
    B2B_FORGE(forge_flash_bf16_forward_wgmma(&fs, q, k, v, out, lse, NULL, 0));
    const double flops = 2.5 * 2.0 * B * H * (double)T * T * D;
    std::vector<float> tm[B2B_CALLS];
    cudaEvent_t ev[B2B_CALLS + 1];
    for (int i = 0; i <= B2B_CALLS; i++) B2B_TRY(cudaEventCreate(&ev[i]));
    for (int r = -3; r < reps; r++) {
        B2B_TRY(cudaEventRecord(ev[0], NULL));
        for (int c = 0; c < B2B_CALLS; c++) {
            float **o = g[B2B_CALL[c].out];
            if (B2B_CALL[c].fn < 0)
                B2B_FORGE(forge_flash_bf16_backward_wgmma(&fs, q, k, v, out, dO, lse, delta, o[0], o[1], o[2], NULL));
            else
                B2B_FORGE((B2B_CALL[c].fn ? lab_flash16_backward_3wg : lab_flash16_backward_2cta)(
                    &fs, q, k, v, out, dO, lse, delta, o[0], o[1], o[2], B2B_CALL[c].kernels, NULL));
            B2B_TRY(cudaEventRecord(ev[c + 1], NULL));
        }
        B2B_TRY(cudaEventSynchronize(ev[B2B_CALLS]));
        if (r < 0) continue;
        for (int c = 0; c < B2B_CALLS; c++) {
            float ms = 0;
            B2B_TRY(cudaEventElapsedTime(&ms, ev[c], ev[c + 1]));
            tm[c].push_back(ms);
        }
    }
    for (int i = 0; i <= B2B_CALLS; i++) cudaEventDestroy(ev[i]);
    double us[B2B_CALLS];
    for (int c = 0; c < B2B_CALLS; c++) us[c] = 1e3 * lab_bench_median(tm[c]); /* us */
    printf("B=%d H=%d T=%d D=%d causal, median of %d interleaved: forge bwd %.1f us (%.1f TFLOP/s), 2cta dq64 bwd "
           "%.1f us (%.1f TFLOP/s, %.3fx), 2cta dq32 bwd %.1f us (%.1f TFLOP/s, %.3fx), 3wg bwd %.1f us (%.1f "
           "TFLOP/s, %.3fx)\n",
           B, H, T, D, reps, us[0], flops / us[0] * 1e-6, us[1], flops / us[1] * 1e-6, us[0] / us[1], us[2],
           flops / us[2] * 1e-6, us[0] / us[2], us[3], flops / us[3] * 1e-6, us[0] / us[3]);
    printf("  delta + one kernel: dQ forge %.1f us, fb2 dq64 %.1f us (%.3fx), fb2 dq32 %.1f us (%.3fx), fb3 dq %.1f us "
           "(%.3fx); dK/dV forge %.1f us, fb2 dkdv %.1f us (%.3fx), fb3 dkdv %.1f us (%.3fx)\n",
           us[4], us[5], us[4] / us[5], us[6], us[4] / us[6], us[7], us[4] / us[7], us[8], us[9], us[8] / us[9],
           us[10], us[8] / us[10]);
    printf("  3wg bulk (thread-0 refill, lse / delta by bulk copy): whole %.1f us (%.3fx forge), fb3 dkdv bulk %.1f us "
           "(%.3fx forge's dK/dV)\n",
           us[11], us[0] / us[11], us[12], us[8] / us[12]);
    static const char *const wname[B2B_SETS] = {"", "2cta dq64", "2cta dq32", "3wg", "", "3wg bulk"};
    for (int w = 1; w < B2B_SETS; w++) {
        if (w == 4) continue; /* the one-kernel calls' scratch */
        printf("  %s: max|x-forge|/max|forge| dq %.2e dk %.2e dv %.2e\n", wname[w], lab_bench_rel(g[w][0], g[0][0], nt),
               lab_bench_rel(g[w][1], g[0][1], nt), lab_bench_rel(g[w][2], g[0][2], nt));
    }
    void *all[] = {q, k, v, dO, out, lse, delta};
    for (void *p : all) cudaFree(p);
    for (int w = 0; w < B2B_SETS; w++)
        for (int i = 0; i < 3; i++) cudaFree(g[w][i]);
    return 0;
}

extern "C" int lab_bench_flash16_bwd_2cta(int argc, char **argv) {
    int reps = 0;
    if (lab_reps_args(argc, argv, "flash16-bwd-2cta", 50, 1, &reps)) return 2;
    static const int kern[3] = {LAB_FLASH16_BWD2_DQ64, LAB_FLASH16_BWD2_DQ32, LAB_FLASH16_BWD2_DKDV};
    static const char *const kname[3] = {"fb2_dq_kernel<64> (256 threads)", "fb2_dq_kernel<32> (288 threads)",
                                         "fb2_dkdv_kernel (256 threads)"};
    for (int i = 0; i < 3; i++) {
        int ctas = 0;
        B2B_FORGE(lab_flash16_backward_2cta_occupancy(kern[i], &ctas));
        printf("%s: %d CTAs per SM resident (cudaOccupancyMaxActiveBlocksPerMultiprocessor; the design: 2)\n",
               kname[i], ctas);
    }
    static const int shapes[][4] = {{16, 12, 1024, 64}, {64, 6, 512, 64}, {64, 8, 1024, 64}};
    for (const auto &s : shapes)
        if (b2b_shape(s[0], s[1], s[2], s[3], reps)) return 1;
    return 0;
}
