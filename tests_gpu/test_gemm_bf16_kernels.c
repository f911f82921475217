/* test_gemm_bf16_kernels.c: forge's bf16 wgmma GEMM kernels (gemm.h), called directly (not backend ops).
 *
 * forge_gemm_bf16_tn_wgmma (dW = A (K,M)^T . B (K,N), split-K, the default plan: C192 where its one-wave plan
 * applies, else the cost model's tile and splits with the partials through the TMA store where allowed):
 * exact: values m/8 (|m| <= 8, exact in bf16), so every partial and every sum is a multiple of 2^-6 below 2^17:
 * exact in fp32 in any order, and C must equal the double reference exactly; random: uniform values truncated to
 * bf16, C within fp32 summation error of the double reference of the same bf16 values (1e-5 of the largest |C|:
 * a wrong slot, a lost split or a read of an unwritten slot shows as a far larger error) and bit-identical when
 * run again (the splits are summed in a fixed order). accumulate: C starts as 1 + (i % 7) / 8 and the product is
 * added. C is poisoned (NaN) otherwise, and the workspace before every run. The variants of the reduction and
 * tile are the lab's (forge-lab test gemm-bf16). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_test.h"
#include "../src/backend/cuda/gemm.h"

/* one dW problem on the device and its host mirror: operands as bf16 bits, C's starting values */
typedef struct {
    int M, N, K, accumulate;
    uint16_t *a16, *b16; /* host (K,M), (K,N) */
    float *c0;           /* host (M,N): C before the call */
    void *dA, *dB, *dC, *dW;
    size_t wbytes;
} tn_problem;

static float tn_widen(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* exact: m/8 with |m| <= 8; else uniform [-1, 1) truncated to bf16 */
static uint16_t tn_draw(parity *P, int exact) {
    const float f = exact ? (float)((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0f
                          : (float)(forge_rng_u32(&P->rng) >> 8) / 16777216.0f * 2.0f - 1.0f;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* C = (starting C) + A^T . B in double, from the bf16 operands */
static void tn_reference(const tn_problem *t, double *ref) {
    const size_t cn = (size_t)t->M * t->N;
    for (size_t i = 0; i < cn; i++) ref[i] = t->accumulate ? (double)t->c0[i] : 0.0;
    for (int k = 0; k < t->K; k++) /* k outer: both operands are (K, mn) rows */
        for (int m = 0; m < t->M; m++) {
            const double am = tn_widen(t->a16[(size_t)k * t->M + m]);
            double *row = ref + (size_t)m * t->N;
            for (int n = 0; n < t->N; n++) row[n] += am * (double)tn_widen(t->b16[(size_t)k * t->N + n]);
        }
}

/* C reset to c0, the workspace poisoned, forge_gemm_bf16_tn_wgmma, C back into out; 0 on any failure */
static int tn_call(parity *P, const tn_problem *t, float *out, const char *shape) {
    const size_t cn = (size_t)t->M * t->N;
    if (cudaMemcpy(t->dC, t->c0, cn * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemset(t->dW, 0xFF, t->wbytes ? t->wbytes : 16) != cudaSuccess) {
        report(P, 0, "gemm_tn_default", shape, INFINITY, 0, "(upload failed)");
        return 0;
    }
    const forge_status st = forge_gemm_bf16_tn_wgmma(t->dA, t->dB, (float *)t->dC, t->M, t->N, t->K, t->accumulate,
                                                     t->dW, t->wbytes, NULL);
    if (st != FORGE_OK) {
        char why[512];
        snprintf(why, sizeof why, "(returned %s: %s)", forge_status_name(st), forge_error_message());
        report(P, 0, "gemm_tn_default", shape, INFINITY, 0, why);
        return 0;
    }
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(out, t->dC, cn * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
        report(P, 0, "gemm_tn_default", shape, INFINITY, 0, "(kernel or copy failed)");
        return 0;
    }
    return 1;
}

static void case_gemm_tn_default(parity *P, int M, int N, int K, int accumulate) {
    char shape[96], sub[224];
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d%s", M, N, K, accumulate ? " C+=" : "");
    tn_problem t = {M, N, K, accumulate, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
    const size_t an = (size_t)K * M, bn = (size_t)K * N, cn = (size_t)M * N;
    t.a16 = malloc(an * 2), t.b16 = malloc(bn * 2), t.c0 = malloc(cn * 4);
    float *c1 = malloc(cn * 4), *c2 = malloc(cn * 4);
    double *ref = malloc(cn * sizeof *ref);
    if (!t.a16 || !t.b16 || !t.c0 || !c1 || !c2 || !ref ||
        forge_gemm_bf16_tn_workspace(M, N, K, &t.wbytes) != FORGE_OK ||
        cudaMalloc(&t.dA, an * 2) != cudaSuccess || cudaMalloc(&t.dB, bn * 2) != cudaSuccess ||
        cudaMalloc(&t.dC, cn * 4) != cudaSuccess || cudaMalloc(&t.dW, t.wbytes ? t.wbytes : 16) != cudaSuccess) {
        report(P, 0, "gemm_tn_default", shape, INFINITY, 0, "(allocation or workspace query failed)");
        goto done;
    }
    for (size_t i = 0; i < cn; i++) t.c0[i] = accumulate ? 1.0f + (float)(i % 7) / 8.0f : NAN;
    for (int exact = 1; exact >= 0; exact--) {
        for (size_t i = 0; i < an; i++) t.a16[i] = tn_draw(P, exact);
        for (size_t i = 0; i < bn; i++) t.b16[i] = tn_draw(P, exact);
        if (cudaMemcpy(t.dA, t.a16, an * 2, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(t.dB, t.b16, bn * 2, cudaMemcpyHostToDevice) != cudaSuccess) {
            report(P, 0, "gemm_tn_default", shape, INFINITY, 0, "(upload failed)");
            goto done;
        }
        if (!tn_call(P, &t, c1, shape) || (!exact && !tn_call(P, &t, c2, shape))) goto done;
        tn_reference(&t, ref);
        double worst = 0.0, scale = 0.0;
        for (size_t i = 0; i < cn; i++)
            if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
        if (exact || scale == 0.0) scale = 1.0;
        for (size_t i = 0; i < cn; i++) {
            const double e = fabs((double)c1[i] - ref[i]) / scale;
            if (!(e <= worst)) worst = e; /* NaN sticks */
        }
        if (exact) {
            snprintf(sub, sizeof sub, "%s exact", shape);
            report(P, worst == 0.0, "gemm_tn_default", sub, worst, 0.0, NULL);
        } else {
            size_t reruns = 0;
            for (size_t i = 0; i < cn; i++) reruns += memcmp(&c1[i], &c2[i], 4) != 0;
            snprintf(sub, sizeof sub, "%s random: vs double rel, run-to-run %zu bits differ", shape, reruns);
            report(P, worst <= 1e-5 && reruns == 0, "gemm_tn_default", sub, worst, 1e-5, NULL);
        }
    }
done:
    cudaFree(t.dA), cudaFree(t.dB), cudaFree(t.dC), cudaFree(t.dW);
    free(t.a16), free(t.b16), free(t.c0), free(c1), free(c2), free(ref);
}

void run_gemm_tn_cases(parity *P) {
    /* {M, N, K, accumulate}: 4 tiles with many splits; M % 128 = 8 and N % 256 = 8 (padded tiles, skipped boxes)
     * with a K tail; one tile; the GPT-2 dW fc shape (3072 x 768) at K = 1024; 512 tiles of 2 K-tiles */
    static const int shapes[][4] = {{256, 512, 8192, 0}, {136, 264, 4104, 1}, {128, 256, 2048, 0},
                                    {3072, 768, 1024, 1}, {4096, 4096, 128, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (P->quick && (long long)shapes[i][0] * shapes[i][1] * shapes[i][2] > 300000000LL) continue;
        case_gemm_tn_default(P, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
    }
}
