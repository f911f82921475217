/*
 * test_gemm_bf16_variants.c: `forge-lab test gemm-bf16 [--quick]`: parity of the bf16 wgmma GEMM's variants
 * (gemm_bf16_variants.h). Ends with "N passed, N failed"; exit status 1 on any failure.
 *
 * dW (TN) split reductions and tiles (case_tn_modes):
 * exact: values m/8 (|m| <= 8, exact in bf16), so every partial and every sum is a multiple of 2^-6 below 2^17:
 * exact in fp32 in any order; PASS, PASS_TMA (TMA-stored partials where M % 128 == 0, else PASS), PASS_T192
 * (192 x 192 tiles), PASS_C192 (the same tiles, two warpgroups splitting N), DEFAULT, INKERNEL, STREAMK, MODEL192
 * and PASS_TMA at 3 forced splits must all equal the double reference exactly; random: PASS_TMA bit-identical to
 * PASS, PASS_T192, PASS_C192, DEFAULT, MODEL192 and the forced splits within fp32 summation error of it (a wrong
 * slot, a lost split or a read of an unwritten slot shows as a nonzero error); INKERNEL run twice must give the
 * same bits, and equal PASS element for element (both sum splits 0..S-1 in order, then C); STREAMK bit-identical
 * run to run and within fp32 summation error of PASS. accumulate: C starts as 1 + (i % 7) / 8 and the product is
 * added. C is poisoned (NaN) otherwise, and the workspace before every run (a slot read before it is written
 * shows).
 *
 * NT / NN fused epilogues with the store forced (case_epi_store): the same exact values, a bias of k/8; the
 * default entry (forge_gemm_bf16_{nt,nn}_epi, which takes the TMA store at these shapes) must give the bits of
 * the forced TMA store; the forced direct store must equal them exactly without GELU (every value exact), within
 * 1e-6 of max |C| (fp32) or one bf16 ulp (bf16) with GELU / its gradient; no output may stay NaN; and the fp32
 * outputs without GELU equal the double reference exactly. The nt bf16 forms' default entry runs the bf16
 * ping-pong kernel, so "default vs tma" there is the ping-pong kernel bitwise vs the cooperative one.
 *
 * NT bf16 C on random data (case_pp_bits): every bf16 form of forge_gemm_bf16_nt_epi (the ping-pong kernel) must
 * give the bits of the cooperative kernel's TMA store (lab_gemm_bf16_nt_epi_store), C and pre_out.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "../../tests_gpu/gpu_test.h"
#include "gemm_bf16_variants.h"

/* a float that is exact in bf16 (m/8, or the top 16 bits of any float): its bf16 bits */
static uint16_t lt_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static float lt_exact(parity *P) { return (float)((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0f; }
static float lt_uniform(parity *P) { return (float)(forge_rng_u32(&P->rng) >> 8) / 16777216.0f * 2.0f - 1.0f; }

/* max over i of |x[i] - ref[i]| / scale (scale 0: 1); a NaN sticks */
static double lt_max_rel_diff(const float *x, const float *ref, size_t n, double scale) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)x[i] - (double)ref[i]) / (scale > 0.0 ? scale : 1.0);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static void lt_fail(parity *P, const char *op, const char *shape, const char *what) {
    char why[640];
    snprintf(why, sizeof why, "(%s: %s)", what, forge_error_message());
    report(P, 0, op, shape, INFINITY, 0, why);
}

/* ---- dW (TN): every split reduction and tile ---- */

enum { LT_RUNS = 11 };

static void case_tn_modes(parity *P, int M, int N, int K, int accumulate) {
    char shape[96];
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d%s", M, N, K, accumulate ? " C+=" : "");
    /* run r: mode, forced splits; out[1] / out[2] and out[3] / out[4] are the two runs of INKERNEL / STREAMK */
    static const lab_gemm_tn_reduce modes[LT_RUNS] = {
        LAB_GEMM_TN_PASS,      LAB_GEMM_TN_INKERNEL,  LAB_GEMM_TN_INKERNEL,  LAB_GEMM_TN_STREAMK,
        LAB_GEMM_TN_STREAMK,   LAB_GEMM_TN_PASS_TMA,  LAB_GEMM_TN_PASS_T192, LAB_GEMM_TN_PASS_C192,
        LAB_GEMM_TN_DEFAULT,   LAB_GEMM_TN_MODEL192,  LAB_GEMM_TN_PASS_TMA};
    static const int forced[LT_RUNS] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3};
    const size_t an = (size_t)K * M, bn = (size_t)K * N, cn = (size_t)M * N;
    float *a = malloc(an * 4), *b = malloc(bn * 4), *c0 = malloc(cn * 4), *out[LT_RUNS] = {0};
    uint16_t *a16 = malloc(an * 2), *b16 = malloc(bn * 2);
    void *dA = NULL, *dB = NULL, *dC = NULL, *dW = NULL;
    size_t wbytes = 0, w3 = 0;
    int ok = a && b && c0 && a16 && b16;
    for (int r = 0; r < LT_RUNS && ok; r++) ok = (out[r] = malloc(cn * 4)) != NULL;
    ok = ok && lab_gemm_bf16_tn_workspace(M, N, K, 0, &wbytes) == FORGE_OK &&
         lab_gemm_bf16_tn_workspace(M, N, K, 3, &w3) == FORGE_OK;
    if (w3 > wbytes) wbytes = w3;
    ok = ok && cudaMalloc(&dA, an * 2) == cudaSuccess && cudaMalloc(&dB, bn * 2) == cudaSuccess &&
         cudaMalloc(&dC, cn * 4) == cudaSuccess && cudaMalloc(&dW, wbytes ? wbytes : 16) == cudaSuccess;
    if (!ok) {
        report(P, 0, "gemm_bf16_tn_modes", shape, INFINITY, 0, "(allocation or workspace query failed)");
        goto done;
    }
    for (size_t i = 0; i < cn; i++) c0[i] = accumulate ? 1.0f + (float)(i % 7) / 8.0f : NAN;
    for (int pass = 0; pass < 2 && ok; pass++) { /* 0: exact values, 1: random bf16 */
        for (size_t i = 0; i < an; i++) {
            a[i] = pass == 0 ? lt_exact(P) : lt_uniform(P);
            a16[i] = lt_bf16(a[i]); /* random: truncated to bf16 (the same bits every run sees) */
        }
        for (size_t i = 0; i < bn; i++) {
            b[i] = pass == 0 ? lt_exact(P) : lt_uniform(P);
            b16[i] = lt_bf16(b[i]);
        }
        ok = cudaMemcpy(dA, a16, an * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(dB, b16, bn * 2, cudaMemcpyHostToDevice) == cudaSuccess;
        for (int r = 0; r < LT_RUNS && ok; r++) {
            ok = cudaMemcpy(dC, c0, cn * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
                 cudaMemset(dW, 0xFF, wbytes ? wbytes : 16) == cudaSuccess;
            if (!ok) break;
            if (lab_gemm_bf16_tn_reduce(dA, dB, dC, M, N, K, accumulate, dW, wbytes, modes[r], forced[r], NULL) !=
                FORGE_OK) {
                char what[64];
                snprintf(what, sizeof what, "%s at %d splits returned an error", lab_gemm_tn_reduce_name(modes[r]),
                         forced[r]);
                lt_fail(P, "gemm_bf16_tn_modes", shape, what);
                goto done;
            }
            ok = cudaDeviceSynchronize() == cudaSuccess &&
                 cudaMemcpy(out[r], dC, cn * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
        }
        if (!ok) {
            report(P, 0, "gemm_bf16_tn_modes", shape, INFINITY, 0, "(kernel or copy failed)");
            goto done;
        }
        char sub[224];
        if (pass == 0) {
            double worst = 0.0, *ref = calloc(cn, sizeof *ref);
            if (ref == NULL) {
                report(P, 0, "gemm_bf16_tn_modes", shape, INFINITY, 0, "(host allocation failed)");
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
                for (int run = 0; run < LT_RUNS; run++) {
                    const double e = fabs(out[run][i] - r);
                    if (!(e <= worst)) worst = e; /* NaN sticks */
                }
            }
            free(ref);
            snprintf(sub, sizeof sub,
                     "%s exact pass+inkernel+streamk+pass_tma+pass_t192+pass_c192+default+model192+splits3", shape);
            report(P, worst == 0.0, "gemm_bf16_tn_modes", sub, worst, 0.0, NULL);
        } else {
            const float *cp = out[0], *cf = out[1], *cf2 = out[2], *cs = out[3], *cs2 = out[4], *ct = out[5];
            size_t diff_runs = 0, diff_modes = 0, diff_tma = 0, sk_runs = 0, c192_bits = 0;
            double scale = 0.0;
            for (size_t i = 0; i < cn; i++) {
                if (memcmp(&cf[i], &cf2[i], 4) != 0) diff_runs++;
                if (!(cf[i] == cp[i])) diff_modes++;
                if (memcmp(&ct[i], &cp[i], 4) != 0) diff_tma++;
                if (memcmp(&cs[i], &cs2[i], 4) != 0) sk_runs++;
                if (memcmp(&out[7][i], &out[6][i], 4) != 0) c192_bits++;
                if (fabs(cp[i]) > scale) scale = fabs(cp[i]);
            }
            /* PASS_TMA stores the same partials another way: bit-identical to PASS */
            snprintf(sub, sizeof sub, "%s random: pass_tma vs pass %zu bits differ", shape, diff_tma);
            report(P, diff_tma == 0, "gemm_bf16_tn_modes", sub, (double)diff_tma, 0.0, NULL);
            snprintf(sub, sizeof sub, "%s random: inkernel run-to-run %zu bits differ, vs pass %zu", shape,
                     diff_runs, diff_modes);
            report(P, diff_runs == 0 && diff_modes == 0, "gemm_bf16_tn_modes", sub, (double)(diff_runs + diff_modes),
                   0.0, NULL);
            /* stream-K cuts K elsewhere, so its sums round differently from the pass: bit-reproducible run to
             * run, and within fp32 summation error of the pass (relative to the largest |C|) */
            const double sk_err = lt_max_rel_diff(cs, cp, cn, scale);
            snprintf(sub, sizeof sub, "%s random: streamk run-to-run %zu bits differ, vs pass rel", shape, sk_runs);
            report(P, sk_runs == 0 && sk_err <= 1e-5, "gemm_bf16_tn_modes", sub, sk_err, 1e-5, NULL);
            /* the 192 x 192 tiles (three warpgroups: T192; two splitting N: C192, the same K split), DEFAULT (C192,
             * PASS_TMA or PASS by the shape), MODEL192 and the forced splits cut K elsewhere too: within fp32
             * summation error of the pass; how many bits C192 differs from T192 is printed */
            static const struct {
                int run;
                const char *what;
            } near[] = {{6, "pass_t192"}, {7, "pass_c192"}, {8, "default"}, {9, "model192"}, {10, "pass_tma splits3"}};
            for (size_t j = 0; j < sizeof near / sizeof near[0]; j++) {
                const double err = lt_max_rel_diff(out[near[j].run], cp, cn, scale);
                if (near[j].run == 7)
                    snprintf(sub, sizeof sub, "%s random: %s vs pass rel (%zu bits differ from pass_t192)", shape,
                             near[j].what, c192_bits);
                else
                    snprintf(sub, sizeof sub, "%s random: %s vs pass rel", shape, near[j].what);
                report(P, err <= 1e-5, "gemm_bf16_tn_modes", sub, err, 1e-5, NULL);
            }
        }
    }
done:
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dW);
    for (int r = 0; r < LT_RUNS; r++) free(out[r]);
    free(a), free(b), free(c0), free(a16), free(b16);
}

/* ---- NT / NN: the fused epilogues with the store forced ---- */

typedef struct {
    int nn, bias, gelu, pre, dgelu, bf16, res;
    const char *what;
} lt_epi;

/* C (M,N) (and pre_out) of one run as host fp32 (bf16 outputs widened) */
static int lt_fetch(float *host, const void *dev, size_t n, int bf16, uint16_t *tmp) {
    if (!bf16) return cudaMemcpy(host, dev, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
    if (cudaMemcpy(tmp, dev, n * 2, cudaMemcpyDeviceToHost) != cudaSuccess) return 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)tmp[i] << 16;
        memcpy(&host[i], &u, 4);
    }
    return 1;
}

static void case_epi_store(parity *P, int M, int N, int K) {
    static const lt_epi cases[] = {
        {0, 0, 0, 0, 0, 0, 0, "nt plain"},           {0, 1, 0, 0, 0, 0, 0, "nt bias"},
        {0, 1, 1, 0, 0, 0, 0, "nt bias+gelu"},       {0, 1, 1, 1, 0, 0, 0, "nt bias+gelu+pre"},
        {0, 0, 0, 0, 0, 1, 0, "nt bf16"},            {0, 1, 0, 0, 0, 1, 0, "nt bias bf16"},
        {0, 1, 1, 1, 0, 1, 0, "nt bias+gelu+pre bf16"}, {0, 0, 1, 1, 0, 1, 0, "nt gelu+pre bf16"},
        {0, 0, 1, 0, 0, 1, 0, "nt gelu bf16"},       {0, 1, 1, 0, 0, 1, 0, "nt bias+gelu bf16"},
        {1, 0, 0, 0, 0, 0, 0, "nn plain"},
        {1, 0, 0, 0, 1, 0, 0, "nn dgelu"},           {1, 0, 0, 0, 0, 1, 1, "nn residual bf16"},
    };
    char shape[96];
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d", M, N, K);
    const size_t an = (size_t)M * K, bn = (size_t)N * K, cn = (size_t)M * N;
    float *a = malloc(an * 4), *b = malloc(bn * 4), *bias = malloc((size_t)N * 4), *pg = malloc(cn * 4);
    float *h[3] = {malloc(cn * 4), malloc(cn * 4), malloc(cn * 4)}, *hp[3] = {malloc(cn * 4), malloc(cn * 4),
                                                                                malloc(cn * 4)};
    double *ref = calloc(cn, sizeof *ref);
    uint16_t *a16 = malloc(an * 2), *b16 = malloc(bn * 2), *tmp = malloc(cn * 2);
    void *dA = NULL, *dB = NULL, *dC = NULL, *dPre = NULL, *dBias = NULL, *dP = NULL, *dP16 = NULL;
    int ok = a && b && bias && pg && ref && a16 && b16 && tmp && h[0] && h[1] && h[2] && hp[0] && hp[1] && hp[2];
    ok = ok && cudaMalloc(&dA, an * 2) == cudaSuccess && cudaMalloc(&dB, bn * 2) == cudaSuccess &&
         cudaMalloc(&dC, cn * 4) == cudaSuccess && cudaMalloc(&dPre, cn * 4) == cudaSuccess &&
         cudaMalloc(&dBias, (size_t)N * 4) == cudaSuccess && cudaMalloc(&dP, cn * 4) == cudaSuccess &&
         cudaMalloc(&dP16, cn * 2) == cudaSuccess;
    if (!ok) {
        report(P, 0, "gemm_bf16_epi_store", shape, INFINITY, 0, "(allocation failed)");
        goto done;
    }
    /* A (M,K) K-contiguous; B: nt (N,K), nn (K,N); the same values serve both (B^T as stored differs, so the
     * reference is made per layout) */
    for (size_t i = 0; i < an; i++) a16[i] = lt_bf16(a[i] = lt_exact(P));
    for (size_t i = 0; i < bn; i++) b16[i] = lt_bf16(b[i] = lt_exact(P));
    for (int j = 0; j < N; j++) bias[j] = lt_exact(P);
    for (size_t i = 0; i < cn; i++) tmp[i] = lt_bf16(pg[i] = 3.0f * lt_uniform(P));
    ok = cudaMemcpy(dA, a16, an * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(dP16, tmp, cn * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(dB, b16, bn * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(dBias, bias, (size_t)N * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(dP, pg, cn * 4, cudaMemcpyHostToDevice) == cudaSuccess;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0] && ok; ci++) {
        const lt_epi *t = &cases[ci];
        char sub[192];
        snprintf(sub, sizeof sub, "%s %s", shape, t->what);
        forge_gemm_epilogue e;
        memset(&e, 0, sizeof e);
        e.bias = t->bias ? dBias : NULL;
        e.pre_out = t->pre ? dPre : NULL;
        e.dgelu_pre = t->dgelu ? dP : NULL;
        e.residual = t->res ? dP16 : NULL; /* the nn bf16 residual (bf16 like C) */
        e.gelu = t->gelu;
        e.out_bf16 = t->bf16;
        if (strcmp(forge_gemm_bf16_epi_store(t->nn, dC, N, &e), "tma") != 0) {
            report(P, 0, "gemm_bf16_epi_store", sub, INFINITY, 0, "(the library does not take the TMA store here)");
            continue;
        }
        /* run 0: the default entry, 1: TMA forced, 2: direct forced */
        for (int r = 0; r < 3 && ok; r++) {
            ok = cudaMemset(dC, 0xFF, cn * 4) == cudaSuccess && cudaMemset(dPre, 0xFF, cn * 4) == cudaSuccess;
            forge_status s = FORGE_OK;
            if (r == 0)
                s = t->nn ? forge_gemm_bf16_nn_epi(dA, dB, dC, M, N, K, &e, NULL, 0)
                          : forge_gemm_bf16_nt_epi(dA, dB, dC, M, N, K, &e, NULL, 0);
            else
                s = t->nn ? lab_gemm_bf16_nn_epi_store(dA, dB, dC, M, N, K, &e, r == 1, NULL)
                          : lab_gemm_bf16_nt_epi_store(dA, dB, dC, M, N, K, &e, r == 1, NULL);
            if (s != FORGE_OK) {
                lt_fail(P, "gemm_bf16_epi_store", sub, r == 0 ? "the default entry" : r == 1 ? "tma" : "direct");
                ok = 0;
                break;
            }
            ok = ok && cudaDeviceSynchronize() == cudaSuccess && lt_fetch(h[r], dC, cn, t->bf16, tmp) &&
                 (!t->pre || lt_fetch(hp[r], dPre, cn, t->bf16, tmp));
        }
        if (!ok) break;
        size_t def_bits = 0, nan = 0, exact_diff = 0;
        double scale = 0.0, near = 0.0;
        for (size_t i = 0; i < cn; i++) {
            def_bits += memcmp(&h[0][i], &h[1][i], 4) != 0 || (t->pre && memcmp(&hp[0][i], &hp[1][i], 4) != 0);
            nan += isnan(h[1][i]) || isnan(h[2][i]) || (t->pre && (isnan(hp[1][i]) || isnan(hp[2][i])));
            if (fabs(h[1][i]) > scale) scale = fabs(h[1][i]);
        }
        for (size_t i = 0; i < cn; i++) {
            for (int pre = 0; pre < 1 + t->pre; pre++) {
                const float x = pre ? hp[2][i] : h[2][i], y = pre ? hp[1][i] : h[1][i];
                if (!t->gelu && !t->dgelu) {
                    exact_diff += !(x == y);
                } else if (t->bf16) { /* one bf16 ulp: 2^-7 of the larger magnitude at most */
                    const double d = fabs((double)x - (double)y), m = fmax(fabs((double)x), fabs((double)y));
                    exact_diff += !(d <= m / 128.0);
                } else {
                    const double d = fabs((double)x - (double)y) / (scale > 0.0 ? scale : 1.0);
                    if (!(d <= near)) near = d;
                }
            }
        }
        snprintf(sub, sizeof sub, "%s %s: default vs tma %zu bits differ, %zu NaN left", shape, t->what, def_bits,
                 nan);
        report(P, def_bits == 0 && nan == 0, "gemm_bf16_epi_store", sub, (double)(def_bits + nan), 0.0, NULL);
        snprintf(sub, sizeof sub, "%s %s: direct vs tma (%zu elements differ)", shape, t->what, exact_diff);
        report(P, exact_diff == 0 && near <= 1e-6, "gemm_bf16_epi_store", sub, near, 1e-6, NULL);
        if (!t->gelu && !t->dgelu && !t->bf16 && !t->res) { /* exact values: C equals the double reference */
            for (size_t i = 0; i < cn; i++) ref[i] = 0.0;
            for (int m = 0; m < M; m++)
                for (int k = 0; k < K; k++) {
                    const double am = a[(size_t)m * K + k];
                    double *rr = ref + (size_t)m * N;
                    for (int n = 0; n < N; n++)
                        rr[n] += am * (double)(t->nn ? b[(size_t)k * N + n] : b[(size_t)n * K + k]);
                }
            double worst = 0.0;
            for (size_t i = 0; i < cn; i++) {
                const double r = ref[i] + (t->bias ? (double)bias[i % (size_t)N] : 0.0);
                const double err = fabs((double)h[1][i] - r);
                if (!(err <= worst)) worst = err;
            }
            snprintf(sub, sizeof sub, "%s %s: tma vs double reference", shape, t->what);
            report(P, worst == 0.0, "gemm_bf16_epi_store", sub, worst, 0.0, NULL);
        }
    }
    if (!ok) report(P, 0, "gemm_bf16_epi_store", shape, INFINITY, 0, "(kernel or copy failed)");
done:
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dPre), cudaFree(dBias), cudaFree(dP), cudaFree(dP16);
    for (int r = 0; r < 3; r++) free(h[r]), free(hp[r]);
    free(a), free(b), free(bias), free(pg), free(ref), free(a16), free(b16), free(tmp);
}

/* ---- NT bf16 C: the default (the bf16 ping-pong kernel) bitwise vs the cooperative kernel's TMA store ---- */

/* Random bf16 operands and bias (uniform, truncated to bf16; B scaled by 1/8 so GELU sees both signs at every
 * magnitude), every bf16 form forge_gemm_bf16_nt_epi runs on the ping-pong kernel: C and pre_out must be the bits
 * of lab_gemm_bf16_nt_epi_store with the TMA store forced (the cooperative kernel). Output buffers start as NaN. */
static void case_pp_bits(parity *P, int M, int N, int K) {
    static const struct {
        int bias, gelu, pre;
        const char *what;
    } forms[] = {{0, 0, 0, "bf16"},          {1, 0, 0, "bias bf16"},      {0, 1, 1, "gelu+pre bf16"},
                 {1, 1, 1, "bias+gelu+pre bf16"}, {0, 1, 0, "gelu bf16"}, {1, 1, 0, "bias+gelu bf16"}};
    const char *op = "gemm_bf16_nt_pp_bits";
    char shape[96], sub[224];
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d", M, N, K);
    const size_t an = (size_t)M * K, bn = (size_t)N * K, cn = (size_t)M * N;
    uint16_t *a16 = malloc(an * 2), *b16 = malloc(bn * 2), *h[2][2] = {{malloc(cn * 2), malloc(cn * 2)},
                                                                        {malloc(cn * 2), malloc(cn * 2)}};
    float *bias = malloc((size_t)N * 4);
    void *dA = NULL, *dB = NULL, *dBias = NULL, *dC[2] = {NULL, NULL}, *dPre[2] = {NULL, NULL};
    int ok = a16 && b16 && bias && h[0][0] && h[0][1] && h[1][0] && h[1][1];
    ok = ok && cudaMalloc(&dA, an * 2) == cudaSuccess && cudaMalloc(&dB, bn * 2) == cudaSuccess &&
         cudaMalloc(&dBias, (size_t)N * 4) == cudaSuccess;
    for (int r = 0; r < 2 && ok; r++)
        ok = cudaMalloc(&dC[r], cn * 2) == cudaSuccess && cudaMalloc(&dPre[r], cn * 2) == cudaSuccess;
    if (!ok) {
        report(P, 0, op, shape, INFINITY, 0, "(allocation failed)");
        goto done;
    }
    for (size_t i = 0; i < an; i++) a16[i] = lt_bf16(lt_uniform(P));
    for (size_t i = 0; i < bn; i++) b16[i] = lt_bf16(lt_uniform(P) * 0.125f);
    for (int j = 0; j < N; j++) bias[j] = lt_uniform(P);
    ok = cudaMemcpy(dA, a16, an * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(dB, b16, bn * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(dBias, bias, (size_t)N * 4, cudaMemcpyHostToDevice) == cudaSuccess;
    for (size_t f = 0; f < sizeof forms / sizeof forms[0] && ok; f++) {
        snprintf(sub, sizeof sub, "%s %s", shape, forms[f].what);
        /* r = 0: the cooperative kernel (TMA store forced), 1: the default entry */
        for (int r = 0; r < 2 && ok; r++) {
            forge_gemm_epilogue e;
            memset(&e, 0, sizeof e);
            e.bias = forms[f].bias ? dBias : NULL;
            e.gelu = forms[f].gelu;
            e.pre_out = forms[f].pre ? dPre[r] : NULL;
            e.out_bf16 = 1;
            ok = cudaMemset(dC[r], 0xFF, cn * 2) == cudaSuccess && cudaMemset(dPre[r], 0xFF, cn * 2) == cudaSuccess;
            const forge_status s = r == 0 ? lab_gemm_bf16_nt_epi_store(dA, dB, dC[r], M, N, K, &e, 1, NULL)
                                          : forge_gemm_bf16_nt_epi(dA, dB, dC[r], M, N, K, &e, NULL, 0);
            if (s != FORGE_OK) {
                lt_fail(P, op, sub, r == 0 ? "cooperative (tma)" : "the default entry");
                ok = 0;
                break;
            }
            ok = ok && cudaDeviceSynchronize() == cudaSuccess &&
                 cudaMemcpy(h[r][0], dC[r], cn * 2, cudaMemcpyDeviceToHost) == cudaSuccess &&
                 cudaMemcpy(h[r][1], dPre[r], cn * 2, cudaMemcpyDeviceToHost) == cudaSuccess;
        }
        if (!ok) break;
        size_t diff = 0, nan = 0;
        for (size_t i = 0; i < cn; i++) {
            diff += h[0][0][i] != h[1][0][i] || (forms[f].pre && h[0][1][i] != h[1][1][i]);
            nan += (h[1][0][i] & 0x7FFFu) > 0x7F80u || (forms[f].pre && (h[1][1][i] & 0x7FFFu) > 0x7F80u);
        }
        snprintf(sub, sizeof sub, "%s %s: default (ping-pong) vs cooperative, %zu elements' bits differ, %zu NaN",
                 shape, forms[f].what, diff, nan);
        report(P, diff == 0 && nan == 0, op, sub, (double)(diff + nan), 0.0, NULL);
    }
    if (!ok) report(P, 0, op, shape, INFINITY, 0, "(kernel or copy failed)");
done:
    cudaFree(dA), cudaFree(dB), cudaFree(dBias);
    for (int r = 0; r < 2; r++) cudaFree(dC[r]), cudaFree(dPre[r]), free(h[r][0]), free(h[r][1]);
    free(a16), free(b16), free(bias);
}

/* ---- the command ---- */

int lab_test_gemm_bf16(int argc, char **argv) {
    parity P;
    memset(&P, 0, sizeof P);
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            P.quick = 1;
        } else {
            fprintf(stderr, "usage: forge-lab test gemm-bf16 [--quick]\n");
            return 2;
        }
    }
    forge_rng_seed(&P.rng, 1234, 7);
    printf("forge-lab test gemm-bf16%s\n", P.quick ? " (quick shapes)" : "");
    /* {M, N, K, accumulate}: 4 tiles with many splits; M % 128 = 8 and N % 256 = 8 (padded slots, skipped
     * boxes) with a K tail; one tile; the GPT-2 dW fc shape (3072 x 768) at K = 1024; 512 tiles of 2 K-tiles
     * (stream-K: ~7.8 iterations per CTA, so whole tiles between the shared ones, both slots of a CTA in use) */
    static const int shapes[][4] = {{256, 512, 8192, 0}, {136, 264, 4104, 1}, {128, 256, 2048, 0},
                                    {3072, 768, 1024, 1}, {4096, 4096, 128, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (P.quick && (long long)shapes[i][0] * shapes[i][1] * shapes[i][2] > 300000000LL) continue;
        case_tn_modes(&P, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
    }
    /* NT / NN epilogue stores: tile edges in M and N (N % 8 == 0, so bf16 C takes the TMA store), a K tail */
    case_epi_store(&P, 300, 264, 200);
    if (!P.quick) case_epi_store(&P, 1000, 1000, 520);
    /* bf16 C on the ping-pong kernel, bitwise vs the cooperative kernel: odd M, N = 8 / 72 / 200 / 3072, K = 8 / 136 /
     * 768 / 3000 */
    static const int pp[][3] = {{257, 8, 8}, {1001, 72, 768}, {517, 200, 136}, {333, 3072, 768}, {129, 72, 3000}};
    for (size_t i = 0; i < sizeof pp / sizeof pp[0]; i++) case_pp_bits(&P, pp[i][0], pp[i][1], pp[i][2]);
    printf("%d passed, %d failed\n", P.passed, P.failed);
    return P.failed ? 1 : 0;
}
