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
 * tile are the lab's (forge-lab test gemm-bf16).
 *
 * forge_gemm_bf16_nt_epi's bf16 forms (case_nt_epi_bf16; run with the dW cases, --only gemm_tn): bias or not x
 * {plain, GELU + pre_out, GELU}, bf16 C (and pre_out), where the TMA store takes C (N % 8 == 0, 16-byte aligned):
 * the bf16 ping-pong kernel. Random bf16 operands and bias; C and pre_out against the float64 reference (acc +
 * bias, then tanh-GELU) within 1e-2 of max |ref| (the bf16-out tolerance of the fp8 suite; a wrong tile, box or
 * column shows far above it) and, per element, within 2^-7 |ref| + 1e-3 max |ref|; and against the cooperative
 * kernel of the same entry with a C 8 bytes off 16-byte alignment (which the TMA store refuses: the cooperative
 * kernel, register store): equal values element for element (the same fp32 sums in the same K order, the same
 * epilogue arithmetic; the register store adds its zero residual after GELU, so a -0 there is +0: signs of zero
 * are not compared here; forge-lab test gemm-bf16 and bench pp-bf16-epi compare the bits with the cooperative
 * kernel's TMA store). Output buffers start as NaN, so an element never written shows. */
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
                                                     t->dW, t->wbytes, NULL, 0);
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

void case_gemm_tn_default(parity *P, int M, int N, int K, int accumulate) {
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

/* ---- forge_gemm_bf16_nt_epi, bf16 C: the ping-pong kernel's epilogues ---- */

static double ne_gelu(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

static uint16_t ne_bf16_rn(double x) { /* round to nearest even (finite values) */
    const float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static int ne_fetch(float *host, const void *dev, size_t n, uint16_t *tmp) {
    if (cudaMemcpy(tmp, dev, n * 2, cudaMemcpyDeviceToHost) != cudaSuccess) return 0;
    for (size_t i = 0; i < n; i++) host[i] = tn_widen(tmp[i]);
    return 1;
}

/* out vs ref: the norm-relative worst error and the elements beyond 2^-7 |ref| + 1e-3 max |ref| */
static double ne_compare(const float *out, const double *ref, size_t n, size_t *bad) {
    double scale = 0.0, worst = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    if (scale == 0.0) scale = 1.0;
    *bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)out[i] - ref[i]);
        if (!(e / scale <= worst)) worst = e / scale;
        *bad += !(e <= fabs(ref[i]) / 128.0 + 1e-3 * scale);
    }
    return worst;
}

void case_nt_epi_bf16(parity *P, int M, int N, int K) {
    static const struct {
        int bias, gelu, pre;
        const char *what;
    } forms[] = {{0, 0, 0, "bf16"},          {1, 0, 0, "bias bf16"},      {0, 1, 1, "gelu+pre bf16"},
                 {1, 1, 1, "bias+gelu+pre bf16"}, {0, 1, 0, "gelu bf16"}, {1, 1, 0, "bias+gelu bf16"}};
    const char *op = "gemm_nt_epi_bf16";
    char shape[96], sub[256];
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d", M, N, K);
    const size_t an = (size_t)M * K, bn = (size_t)N * K, cn = (size_t)M * N;
    uint16_t *a16 = malloc(an * 2), *b16 = malloc(bn * 2), *tmp = malloc(cn * 2);
    float *bias = malloc((size_t)N * 4), *c_pp = malloc(cn * 4), *p_pp = malloc(cn * 4), *c_co = malloc(cn * 4),
          *p_co = malloc(cn * 4);
    double *acc = malloc(cn * sizeof *acc), *ref = malloc(cn * sizeof *ref), *rpre = malloc(cn * sizeof *rpre);
    void *dA = NULL, *dB = NULL, *dC = NULL, *dC2 = NULL, *dPre = NULL, *dBias = NULL;
    int ok = a16 && b16 && tmp && bias && c_pp && p_pp && c_co && p_co && acc && ref && rpre;
    /* dC2: a C 8 bytes past a 16-byte boundary (cudaMalloc is 256-byte aligned) */
    ok = ok && cudaMalloc(&dA, an * 2) == cudaSuccess && cudaMalloc(&dB, bn * 2) == cudaSuccess &&
         cudaMalloc(&dC, cn * 2) == cudaSuccess && cudaMalloc(&dC2, cn * 2 + 16) == cudaSuccess &&
         cudaMalloc(&dPre, cn * 2) == cudaSuccess && cudaMalloc(&dBias, (size_t)N * 4) == cudaSuccess;
    if (!ok) {
        report(P, 0, op, shape, INFINITY, 0, "(allocation failed)");
        goto done;
    }
    for (size_t i = 0; i < an; i++) a16[i] = tn_draw(P, 0);
    for (size_t i = 0; i < bn; i++) b16[i] = tn_draw(P, 0);
    for (int j = 0; j < N; j++) bias[j] = tn_widen(tn_draw(P, 0)) * 2.0f;
    if (cudaMemcpy(dA, a16, an * 2, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(dB, b16, bn * 2, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(dBias, bias, (size_t)N * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
        report(P, 0, op, shape, INFINITY, 0, "(upload failed)");
        goto done;
    }
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            const uint16_t *ar = a16 + (size_t)m * K, *br = b16 + (size_t)n * K;
            for (int k = 0; k < K; k++) s += (double)tn_widen(ar[k]) * (double)tn_widen(br[k]);
            acc[(size_t)m * N + n] = s;
        }
    void *dC_co = (char *)dC2 + 8;
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        forge_gemm_epilogue e;
        memset(&e, 0, sizeof e);
        e.bias = forms[f].bias ? dBias : NULL;
        e.gelu = forms[f].gelu;
        e.pre_out = forms[f].pre ? dPre : NULL;
        e.out_bf16 = 1;
        snprintf(sub, sizeof sub, "%s %s", shape, forms[f].what);
        if (strcmp(forge_gemm_bf16_epi_store(0, dC, N, &e), "tma") != 0 ||
            strcmp(forge_gemm_bf16_epi_store(0, dC_co, N, &e), "direct") != 0) {
            report(P, 0, op, sub, INFINITY, 0, "(forge_gemm_bf16_epi_store: expected tma for C, direct for C + 8 B)");
            continue;
        }
        /* run 0: the aligned C (ping-pong), 1: C + 8 bytes (cooperative, register store) */
        for (int r = 0; r < 2; r++) {
            void *c = r == 0 ? dC : dC_co;
            if (cudaMemset(c, 0xFF, cn * 2) != cudaSuccess || cudaMemset(dPre, 0xFF, cn * 2) != cudaSuccess) {
                report(P, 0, op, sub, INFINITY, 0, "(memset failed)");
                goto done;
            }
            const forge_status st = forge_gemm_bf16_nt_epi(dA, dB, c, M, N, K, &e, NULL, 0);
            if (st != FORGE_OK) {
                char why[512];
                snprintf(why, sizeof why, "(%s: returned %s: %s)", r == 0 ? "aligned C" : "C + 8 B",
                         forge_status_name(st), forge_error_message());
                report(P, 0, op, sub, INFINITY, 0, why);
                goto next;
            }
            if (cudaDeviceSynchronize() != cudaSuccess || !ne_fetch(r == 0 ? c_pp : c_co, c, cn, tmp) ||
                (forms[f].pre && !ne_fetch(r == 0 ? p_pp : p_co, dPre, cn, tmp))) {
                report(P, 0, op, sub, INFINITY, 0, "(kernel or copy failed)");
                goto done;
            }
        }
        for (size_t i = 0; i < cn; i++) {
            const double v = acc[i] + (forms[f].bias ? (double)bias[i % (size_t)N] : 0.0);
            /* the kernel's GELU input is v rounded to fp32; pre_out is rn(v) */
            rpre[i] = tn_widen(ne_bf16_rn(v));
            ref[i] = forms[f].gelu ? ne_gelu((double)(float)v) : v;
        }
        {
            size_t bad = 0, badp = 0, diff = 0;
            const double worst = ne_compare(c_pp, ref, cn, &bad);
            double worstp = 0.0;
            if (forms[f].pre) worstp = ne_compare(p_pp, rpre, cn, &badp);
            for (size_t i = 0; i < cn; i++)
                diff += !(c_pp[i] == c_co[i]) || (forms[f].pre && !(p_pp[i] == p_co[i]));
            snprintf(sub, sizeof sub, "%s %s: vs double (%zu C%s elements off), vs cooperative %zu differ", shape,
                     forms[f].what, bad + badp, forms[f].pre ? " + pre_out" : "", diff);
            const double w = worst > worstp ? worst : worstp;
            report(P, w <= 1e-2 && bad + badp == 0 && diff == 0, op, sub, w, 1e-2, NULL);
        }
    next:;
    }
done:
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dC2), cudaFree(dPre), cudaFree(dBias);
    free(a16), free(b16), free(tmp), free(bias), free(c_pp), free(p_pp), free(c_co), free(p_co), free(acc), free(ref),
        free(rpre);
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
    /* forge_gemm_bf16_nt_epi's bf16 forms: {M, N, K}: odd M (a last row-block of 1 and 5 rows, a second 64-row half
     * wholly outside C); N = 8 (one column group), 72 (a 64-column box and 8 of the next), 200 (a tile and 72
     * columns), 3072 (24 tiles); K = 8 (one stage, almost all zero-filled), 136 (a K tail), 768, 3000 */
    static const int nt[][3] = {{257, 8, 8}, {1001, 72, 768}, {517, 200, 136}, {333, 3072, 768}, {129, 72, 3000}};
    for (size_t i = 0; i < sizeof nt / sizeof nt[0]; i++) {
        if (P->quick && (long long)nt[i][0] * nt[i][1] * nt[i][2] > 300000000LL) continue;
        case_nt_epi_bf16(P, nt[i][0], nt[i][1], nt[i][2]);
    }
}
