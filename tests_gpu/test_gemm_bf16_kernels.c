/* test_gemm_bf16_kernels.c: forge's bf16 wgmma GEMM kernels (gemm.h), called directly (not backend ops). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_test.h"

/* ---- forge_gemm_bf16_tn_wgmma_reduce: the split-K reductions (dW = A (K,M)^T . B (K,N)) ----
 * exact: values m/8 (|m| <= 8, exact in bf16), so every partial and every sum is a multiple of 2^-6 below 2^17:
 * exact in fp32 in any order; PASS, PASS_TMA (TMA-stored partials where M % 128 == 0, else PASS), PASS_T192
 * (192 x 192 tiles), PASS_C192 (the same tiles, two warpgroups splitting N), DEFAULT, INKERNEL and STREAMK must all
 * equal the double reference exactly; random: PASS_TMA bit-identical to PASS, PASS_T192, PASS_C192 and DEFAULT
 * within fp32 summation error of it (a wrong slot, a lost split or a read of an unwritten slot shows as a nonzero
 * error). random: uniform bf16 values, INKERNEL run
 * twice must give the same bits, and equal PASS element for element (both sum splits 0..S-1 in order, then C).
 * accumulate: C starts as 1 + (i % 7) / 8 and the product is added. C is poisoned (NaN) otherwise. */
#include "../src/backend/cuda/gemm.h"

static uint16_t tn_bf16_bits(float f) { /* exact values only (m/8 or already-rounded) */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* max over i of |x[i] - ref[i]| / scale (scale 0: 1); a NaN sticks */
static double tn_max_rel_diff(const float *x, const float *ref, size_t n, double scale) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)x[i] - (double)ref[i]) / (scale > 0.0 ? scale : 1.0);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static void case_gemm_tn_reduce(parity *P, int M, int N, int K, int accumulate) {
    char shape[96];
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d%s", M, N, K, accumulate ? " C+=" : "");
    const size_t an = (size_t)K * M, bn = (size_t)K * N, cn = (size_t)M * N;
    float *a = malloc(an * 4), *b = malloc(bn * 4), *c0 = malloc(cn * 4), *cp = malloc(cn * 4),
          *cf = malloc(cn * 4), *cf2 = malloc(cn * 4), *cs = malloc(cn * 4), *cs2 = malloc(cn * 4),
          *ct = malloc(cn * 4), *c192 = malloc(cn * 4), *cc192 = malloc(cn * 4),
          *cdef = malloc(cn * 4);
    uint16_t *a16 = malloc(an * 2), *b16 = malloc(bn * 2);
    void *dA = NULL, *dB = NULL, *dC = NULL, *dW = NULL;
    size_t wbytes = 0;
    int ok = a && b && c0 && cp && cf && cf2 && cs && cs2 && ct && c192 && cc192 && cdef && a16 && b16 &&
             forge_gemm_bf16_tn_workspace(M, N, K, &wbytes) == FORGE_OK &&
             cudaMalloc(&dA, an * 2) == cudaSuccess && cudaMalloc(&dB, bn * 2) == cudaSuccess &&
             cudaMalloc(&dC, cn * 4) == cudaSuccess && cudaMalloc(&dW, wbytes ? wbytes : 16) == cudaSuccess;
    if (!ok) {
        report(P, 0, "gemm_tn_reduce", shape, INFINITY, 0, "(allocation or workspace query failed)");
        goto done;
    }
    for (size_t i = 0; i < cn; i++) c0[i] = accumulate ? 1.0f + (float)(i % 7) / 8.0f : NAN;
    for (int pass = 0; pass < 2 && ok; pass++) { /* 0: exact values, 1: random bf16 */
        for (size_t i = 0; i < an; i++) {
            a[i] = pass == 0 ? (float)((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0f
                             : (float)(forge_rng_u32(&P->rng) >> 8) / 16777216.0f * 2.0f - 1.0f;
            a16[i] = tn_bf16_bits(a[i]); /* random: truncated to bf16 (the same bits both runs see) */
        }
        for (size_t i = 0; i < bn; i++) {
            b[i] = pass == 0 ? (float)((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0f
                             : (float)(forge_rng_u32(&P->rng) >> 8) / 16777216.0f * 2.0f - 1.0f;
            b16[i] = tn_bf16_bits(b[i]);
        }
        ok = cudaMemcpy(dA, a16, an * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(dB, b16, bn * 2, cudaMemcpyHostToDevice) == cudaSuccess;
        float *outs[9] = {cp, cf, cf2, cs, cs2, ct, c192, cc192, cdef};
        const forge_gemm_tn_reduce modes[9] = {FORGE_GEMM_TN_REDUCE_PASS,      FORGE_GEMM_TN_REDUCE_INKERNEL,
                                               FORGE_GEMM_TN_REDUCE_INKERNEL,  FORGE_GEMM_TN_REDUCE_STREAMK,
                                               FORGE_GEMM_TN_REDUCE_STREAMK,   FORGE_GEMM_TN_REDUCE_PASS_TMA,
                                               FORGE_GEMM_TN_REDUCE_PASS_T192, FORGE_GEMM_TN_REDUCE_PASS_C192,
                                               FORGE_GEMM_TN_REDUCE_DEFAULT};
        for (int r = 0; r < 9 && ok; r++) {
            ok = cudaMemcpy(dC, c0, cn * 4, cudaMemcpyHostToDevice) == cudaSuccess;
            if (!ok) break;
            /* poison the workspace: a slot read before it is written shows (NaN) */
            ok = cudaMemset(dW, 0xFF, wbytes ? wbytes : 16) == cudaSuccess;
            forge_status st = forge_gemm_bf16_tn_wgmma_reduce(dA, dB, dC, M, N, K, accumulate, dW, wbytes, modes[r], NULL);
            if (st != FORGE_OK) {
                char why[512];
                snprintf(why, sizeof why, "(returned %s: %s)", forge_status_name(st), forge_error_message());
                report(P, 0, "gemm_tn_reduce", shape, INFINITY, 0, why);
                goto done;
            }
            ok = cudaDeviceSynchronize() == cudaSuccess &&
                 cudaMemcpy(outs[r], dC, cn * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
        }
        if (!ok) {
            report(P, 0, "gemm_tn_reduce", shape, INFINITY, 0, "(kernel or copy failed)");
            goto done;
        }
        char sub[224];
        if (pass == 0) {
            double worst = 0.0, *ref = calloc(cn, sizeof *ref);
            if (ref == NULL) {
                report(P, 0, "gemm_tn_reduce", shape, INFINITY, 0, "(host allocation failed)");
                goto done;
            }
            for (int k = 0; k < K; k++) /* k outer: both operands are (K, mn) rows */
                for (int m = 0; m < M; m++) {
                    const double am = a[(size_t)k * M + m];
                    double *rr = ref + (size_t)m * N;
                    const float *bk = b + (size_t)k * N;
                    for (int n = 0; n < N; n++) rr[n] += am * (double)bk[n];
                }
            for (size_t i = 0; i < cn; i++) {
                const double r = ref[i] + (accumulate ? (double)c0[i] : 0.0);
                const double e1 = fabs(cp[i] - r), e2 = fabs(cf[i] - r), e3 = fabs(cs[i] - r), e4 = fabs(ct[i] - r),
                             e5 = fabs(c192[i] - r), e6 = fabs(cc192[i] - r), e7 = fabs(cdef[i] - r);
                double e = e1 > e2 ? (e1 > e3 ? e1 : e3) : (e2 > e3 ? e2 : e3);
                if (!(e4 <= e)) e = e4;
                if (!(e5 <= e)) e = e5;
                if (!(e6 <= e)) e = e6;
                if (!(e7 <= e)) e = e7;
                if (!(e <= worst)) worst = e; /* NaN sticks */
            }
            free(ref);
            snprintf(sub, sizeof sub, "%s exact pass+inkernel+streamk+pass_tma+pass_t192+pass_c192+default", shape);
            report(P, worst == 0.0, "gemm_tn_reduce", sub, worst, 0.0, NULL);
        } else {
            size_t diff_runs = 0, diff_modes = 0, diff_tma = 0;
            for (size_t i = 0; i < cn; i++) {
                if (memcmp(&cf[i], &cf2[i], 4) != 0) diff_runs++;
                if (!(cf[i] == cp[i])) diff_modes++;
                if (memcmp(&ct[i], &cp[i], 4) != 0) diff_tma++;
            }
            /* PASS_TMA stores the same partials another way: bit-identical to PASS */
            snprintf(sub, sizeof sub, "%s random: pass_tma vs pass %zu bits differ", shape, diff_tma);
            report(P, diff_tma == 0, "gemm_tn_reduce", sub, (double)diff_tma, 0.0, NULL);
            snprintf(sub, sizeof sub, "%s random: inkernel run-to-run %zu bits differ, vs pass %zu", shape,
                     diff_runs, diff_modes);
            report(P, diff_runs == 0 && diff_modes == 0, "gemm_tn_reduce", sub, (double)(diff_runs + diff_modes),
                   0.0, NULL);
            /* stream-K cuts K elsewhere, so its sums round differently from the pass: bit-reproducible run to
             * run, and within fp32 summation error of the pass (relative to the largest |C|) */
            size_t sk_runs = 0;
            double scale = 0.0, sk_err = 0.0;
            for (size_t i = 0; i < cn; i++) {
                if (memcmp(&cs[i], &cs2[i], 4) != 0) sk_runs++;
                if (fabs(cp[i]) > scale) scale = fabs(cp[i]);
            }
            sk_err = tn_max_rel_diff(cs, cp, cn, scale);
            snprintf(sub, sizeof sub, "%s random: streamk run-to-run %zu bits differ, vs pass rel", shape, sk_runs);
            report(P, sk_runs == 0 && sk_err <= 1e-5, "gemm_tn_reduce", sub, sk_err, 1e-5, NULL);
            /* the 192 x 192 tiles (three warpgroups: T192; two splitting N: C192, the same K split) and DEFAULT (one
             * of C192 / PASS_TMA / PASS by the shape) split K elsewhere too: within fp32 summation error of the pass;
             * how many bits C192 differs from T192 is printed */
            size_t c192_bits = 0;
            for (size_t i = 0; i < cn; i++)
                if (memcmp(&cc192[i], &c192[i], 4) != 0) c192_bits++;
            const double t192_err = tn_max_rel_diff(c192, cp, cn, scale);
            const double c192_err = tn_max_rel_diff(cc192, cp, cn, scale);
            const double def_err = tn_max_rel_diff(cdef, cp, cn, scale);
            snprintf(sub, sizeof sub, "%s random: pass_t192 vs pass rel", shape);
            report(P, t192_err <= 1e-5, "gemm_tn_reduce", sub, t192_err, 1e-5, NULL);
            snprintf(sub, sizeof sub, "%s random: pass_c192 vs pass rel (%zu bits differ from pass_t192)", shape,
                     c192_bits);
            report(P, c192_err <= 1e-5, "gemm_tn_reduce", sub, c192_err, 1e-5, NULL);
            snprintf(sub, sizeof sub, "%s random: default vs pass rel", shape);
            report(P, def_err <= 1e-5, "gemm_tn_reduce", sub, def_err, 1e-5, NULL);
        }
    }
done:
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dW);
    free(a), free(b), free(c0), free(cp), free(cf), free(cf2), free(cs), free(cs2), free(ct), free(c192), free(cc192);
    free(cdef), free(a16), free(b16);
}

void run_gemm_tn_cases(parity *P) {
    /* {M, N, K, accumulate}: 4 tiles with many splits; M % 128 = 8 and N % 256 = 8 (padded slots, skipped
     * boxes) with a K tail; one tile; the GPT-2 dW fc shape (3072 x 768) at K = 1024; 512 tiles of 2 K-tiles
     * (stream-K: ~7.8 iterations per CTA, so whole tiles between the shared ones, both slots of a CTA in use) */
    static const int shapes[][4] = {{256, 512, 8192, 0}, {136, 264, 4104, 1}, {128, 256, 2048, 0},
                                    {3072, 768, 1024, 1}, {4096, 4096, 128, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (P->quick && (long long)shapes[i][0] * shapes[i][1] * shapes[i][2] > 300000000LL) continue;
        case_gemm_tn_reduce(P, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
    }
}

