/*
 * bench_dw_dbias.cu: `forge-lab bench dw-dbias [--reps N]`: the bf16 linear layer's weight and bias gradient at the
 * GPT-2 124M shapes that have a bias gradient in the step's matmul_backward_weight_bf16 (N = 16384 tokens: qkv
 * OC x C = 2304 x 768, attention projection 768 x 768, MLP projection 768 x 3072), three contenders on the backend's
 * stream, all accumulating (+=) into their own dweight / dbias:
 *   unfused    the path the op ran before the fused dbias: the op with dbias NULL (the TN GEMM and its split
 *              reduction), then the op with C = 0 (the dbias partial pass over dout, mm_bf16_dbias_partial8_kernel,
 *              and reduce.cu's finish); the reference of the ratios
 *   op         the product op (be->matmul_backward_weight_bf16): on the 128 x 256 plans the GEMM sums dbias's
 *              partial rows from its staged dout tiles (forge_gemm_bf16_tn_wgmma_dbias) and the finish adds them;
 *              on the C192 plan the same kernels as unfused
 *   gemm-only  the op with dbias NULL: the floor, so unfused - gemm-only is what the separate pass costs and
 *              op - gemm-only what the fused sums cost
 * Timed interleaved round by round (the order rotating every round; 3 warm-up rounds), every sample the mean of
 * DWB_BACK_TO_BACK calls in a row (the host's per-call work, tensor-map encoding included, then overlaps the previous
 * call's kernels, as it does under the step's CUDA graph). Per contender: the median us, the median per-round ratio
 * unfused / this (> 1: faster than the unfused path) with a 95% bootstrap CI; and, from one first call from
 * dweight = dbias = 0, whether dweight equals the unfused path's bitwise and the largest |dbias - float64 reference|
 * against SUM(N) (op_list.h). Measurements: lab/notes/gemm-bf16.md.
 * Also here (C++: the plan reads gemm_wgmma_kernel.cuh): dw_dbias.h's lab_dw_dbias_plan and the ws poison hook.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include <cuda_runtime.h>

#include "../lab.h"
#include "../../src/backend/cuda/cuda_ops.h"
#include "../../src/backend/cuda/gemm_wgmma_kernel.cuh"
#include "../lab_fill.cuh"
#include "../lab_stats.h"
extern "C" {
#include "dw_dbias.h"
}

#define DWB_TRY(x)                                                                                                 \
    do {                                                                                                           \
        cudaError_t e_ = (x);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "forge-lab bench dw-dbias: %s: %s\n", #x, cudaGetErrorString(e_));                    \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

#define DWB_FTRY(x)                                                                                                \
    do {                                                                                                           \
        forge_status s_ = (x);                                                                                     \
        if (s_ != FORGE_OK) {                                                                                      \
            fprintf(stderr, "forge-lab bench dw-dbias: %s: %s\n", #x, forge_error_message());                     \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

#define DWB_N 16384
#define DWB_BACK_TO_BACK 8
#define DWB_K 3 /* contenders */

struct dwb_shape {
    const char *name;
    int OC, C;
};

static const char *const dwb_names[DWB_K] = {"unfused", "op", "gemm-only"};

/* The product's dW plan (forge_gemm_bf16_tn_wgmma_dbias with accumulate, at the workspace
 * forge_gemm_bf16_tn_workspace sizes, which matmul_backward_weight_bf16 gives it) and whether it fuses dbias */
extern "C" int lab_dw_dbias_plan(int N, int C, int OC, char *buf, size_t len) {
    const char *why = N <= 0 || OC <= 0 || C <= 0 ? "empty"
                      : OC % 8 != 0 || C % 8 != 0 ? "OC and C must be multiples of 8 (the SIMT path)"
                                                   : nullptr;
    int dev = 0, sm_count = 0;
    size_t need = 0;
    if (why == nullptr && (gemm_device_info(&dev, &sm_count) != FORGE_OK ||
                           forge_gemm_bf16_tn_workspace(OC, C, N, &need) != FORGE_OK)) {
        forge_error_clear();
        why = "no Hopper device";
    }
    if (why != nullptr) {
        snprintf(buf, len, "%s", why);
        return -1;
    }
    const gemm_tn_default p =
        gemm_tn_default_plan(OC, C, N, 1, sm_count, (long long)(need / ((size_t)OC * C * sizeof(float))));
    if (p.c192) {
        snprintf(buf, len, "c192 s%d", p.splits);
        return 0;
    }
    /* the TMA-stored partials' rule at an aligned workspace (cuda_tn_workspace's) */
    const int tma = gemm_tn_tma_partials_ok(OC, C, p.splits, nullptr);
    snprintf(buf, len, "%dx%d s%d%s", p.bm, p.bn, p.splits, tma ? " tma" : "");
    return gemm_tn_default_dbias(p, OC, CUDA_WS_FLOATS);
}

extern "C" forge_status lab_dw_dbias_poison_ws(forge_backend *be) {
    cuda_ctx *ctx = cuda_get_ctx(be);
    CUDA_TRY(cudaMemsetAsync(ctx->ws, 0xFF, CUDA_WS_FLOATS * sizeof(float), ctx->stream));
    return FORGE_OK;
}

static int dwb_run(forge_backend *be, int k, float *dw, float *db, const uint16_t *dout, const uint16_t *inp,
                   const dwb_shape &s) {
    const forge_bf16 *d = (const forge_bf16 *)dout, *x = (const forge_bf16 *)inp;
    DWB_FTRY(be->matmul_backward_weight_bf16(be, dw, k == 1 ? db : NULL, d, x, DWB_N, s.C, s.OC));
    if (k == 0) DWB_FTRY(be->matmul_backward_weight_bf16(be, NULL, db, d, NULL, DWB_N, 0, s.OC)); /* the pass */
    return 0;
}

static int dwb_shape_run(forge_backend *be, const dwb_shape &s, int reps) {
    cuda_ctx *ctx = cuda_get_ctx(be);
    const cudaStream_t st = ctx->stream;
    char plan[96];
    const int kind = lab_dw_dbias_plan(DWB_N, s.C, s.OC, plan, sizeof plan);
    if (kind < 0) {
        printf("  %-16s %5d x %5d  %s: skipped\n", s.name, s.OC, s.C, plan);
        return 0;
    }
    snprintf(plan + strlen(plan), sizeof plan - strlen(plan), kind ? " fused" : "");
    const size_t dn = (size_t)DWB_N * s.OC, xn = (size_t)DWB_N * s.C, wn = (size_t)s.OC * s.C;
    uint16_t *dout, *inp;
    float *dw[DWB_K], *db[DWB_K];
    DWB_TRY(cudaMalloc(&dout, dn * 2));
    DWB_TRY(cudaMalloc(&inp, xn * 2));
    for (int k = 0; k < DWB_K; k++) {
        DWB_TRY(cudaMalloc(&dw[k], wn * 4));
        DWB_TRY(cudaMalloc(&db[k], (size_t)s.OC * 4));
        DWB_TRY(cudaMemset(dw[k], 0, wn * 4));
        DWB_TRY(cudaMemset(db[k], 0, (size_t)s.OC * 4));
    }
    lab_fill_bf16<<<1024, 256>>>(dout, dn, 11, 1.0f);
    lab_fill_bf16<<<1024, 256>>>(inp, xn, 12, 1.0f);
    DWB_TRY(cudaGetLastError());
    DWB_TRY(cudaDeviceSynchronize());
    /* one call each from zero: dweight bits against the unfused path's, dbias against the float64 column sums */
    for (int k = 0; k < DWB_K; k++)
        if (dwb_run(be, k, dw[k], db[k], dout, inp, s)) return 1;
    DWB_TRY(cudaStreamSynchronize(st));
    std::vector<float> w0(wn), wk(wn), b(s.OC);
    std::vector<uint16_t> hd(dn);
    std::vector<double> ref(s.OC, 0.0);
    DWB_TRY(cudaMemcpy(hd.data(), dout, dn * 2, cudaMemcpyDeviceToHost));
    for (size_t n = 0; n < (size_t)DWB_N; n++)
        for (int o = 0; o < s.OC; o++) {
            const uint32_t u = (uint32_t)hd[n * s.OC + o] << 16;
            float f;
            memcpy(&f, &u, 4);
            ref[o] += f;
        }
    const double tol = 1e-4 * fmax(1.0, sqrt((double)DWB_N) / 8.0); /* SUM(N) */
    DWB_TRY(cudaMemcpy(w0.data(), dw[0], wn * 4, cudaMemcpyDeviceToHost));
    int w_same[DWB_K];
    double b_err[DWB_K];
    for (int k = 0; k < DWB_K; k++) {
        DWB_TRY(cudaMemcpy(wk.data(), dw[k], wn * 4, cudaMemcpyDeviceToHost));
        DWB_TRY(cudaMemcpy(b.data(), db[k], (size_t)s.OC * 4, cudaMemcpyDeviceToHost));
        w_same[k] = memcmp(wk.data(), w0.data(), wn * 4) == 0;
        b_err[k] = 0.0;
        for (int o = 0; o < s.OC; o++) {
            const double e = fabs((double)b[o] - ref[o]);
            if (!(e <= b_err[k])) b_err[k] = e;
        }
    }
    cudaEvent_t e0, e1;
    DWB_TRY(cudaEventCreate(&e0));
    DWB_TRY(cudaEventCreate(&e1));
    std::vector<double> t[DWB_K];
    for (int r = -3; r < reps; r++)
        for (int j = 0; j < DWB_K; j++) {
            const int k = (j + r + 3) % DWB_K; /* rotate the order every round */
            DWB_TRY(cudaEventRecord(e0, st));
            for (int i = 0; i < DWB_BACK_TO_BACK; i++)
                if (dwb_run(be, k, dw[k], db[k], dout, inp, s)) return 1;
            DWB_TRY(cudaEventRecord(e1, st));
            DWB_TRY(cudaEventSynchronize(e1));
            float ms = 0;
            DWB_TRY(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0) t[k].push_back(1e3 * ms / DWB_BACK_TO_BACK);
        }
    for (int k = 0; k < DWB_K; k++) {
        std::vector<double> ratio;
        for (int i = 0; i < reps; i++) ratio.push_back(t[0][(size_t)i] / t[k][(size_t)i]);
        double lo, hi;
        lab_median_ci(ratio, &lo, &hi);
        char berr[48];
        if (k == 2) snprintf(berr, sizeof berr, "-");
        else snprintf(berr, sizeof berr, "%.2e %s", b_err[k], b_err[k] <= tol ? "ok" : "FAIL");
        printf("  %-16s %5d x %5d  %-20s %-10s %8.1f %11.3fx [%.3f, %.3f]  %-4s  %s\n", s.name, s.OC, s.C, plan,
               dwb_names[k], lab_median(t[k]), lab_median(ratio), lo, hi, w_same[k] ? "same" : "DIFF", berr);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(dout), cudaFree(inp);
    for (int k = 0; k < DWB_K; k++) cudaFree(dw[k]), cudaFree(db[k]);
    int bad = !w_same[1] || !w_same[2];
    for (int k = 0; k < 2; k++) bad |= !(b_err[k] <= tol);
    return bad;
}

extern "C" int lab_bench_dw_dbias(int argc, char **argv) {
    int reps = 0;
    if (lab_reps_args(argc, argv, "dw-dbias", 30, 3, &reps)) return 2;
    forge_backend *be = NULL;
    forge_runtime_options rt;
    forge_runtime_options_default(&rt);
    DWB_FTRY(forge_backend_create(&be, FORGE_DEVICE_CUDA, &rt));
    static const dwb_shape shapes[] = {
        {"gpt2-124m qkv", 2304, 768}, {"gpt2-124m attn", 768, 768}, {"gpt2-124m proj", 768, 3072}};
    printf("forge-lab bench dw-dbias: dW (OC, C) += dout^T x, dbias += colsum(dout), N = %d, %d SMs, pdl %d, %d "
           "rounds of %d calls\n",
           DWB_N, cuda_get_ctx(be)->num_sms, cuda_get_ctx(be)->pdl, reps, DWB_BACK_TO_BACK);
    printf("  %-16s %13s  %-20s %-10s %8s %12s %16s  %-4s  %s\n", "shape", "OC x C", "plan", "contender", "us",
           "unfused/this", "[95% CI]", "dW", "|dbias - f64| (SUM(N))");
    int rc = 0;
    for (const dwb_shape &s : shapes) rc |= dwb_shape_run(be, s, reps);
    forge_backend_destroy(be);
    return rc;
}
