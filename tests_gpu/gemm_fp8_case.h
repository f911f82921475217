/*
 * gemm_fp8_case.h: one parity case of an NT GEMM (C = scale . A . B^T [+ bias], A and B K-major fp8, tf32 or bf16)
 * against a double reference: the wgmma fp8 / tf32 / bf16 ping-pong GEMMs in tests_gpu/test_gemm_fp8_kernels.c
 * (forge's default entry points) and lab/gemm_fp8/test_gemm_fp8.c (the lab's variants of the same kernels), the
 * mma.sync bf16 GEMM in lab/gemm_mma/test_gemm_mma.c. A mode names the kernel call (its runner), the input and
 * output types and the tolerance; gf8_case runs it at one shape and reports one PASS/FAIL line.
 *
 * Values m/8 with m uniform in -8..8: exact in e4m3, e5m2, bf16 and tf32, so a double reference of the same
 * values is exact; products and sums are multiples of 2^-6. Compared as relative Frobenius error (printed as
 * maxerr): promoted fp8 <= 1e-3 (QGMMA truncates within a 128-K stage), fast accum and bf16 output <= 1e-2,
 * tf32 and bf16 inputs <= 1e-5 (exact inputs, fp32 accumulation). C is poisoned first (an unwritten element is a
 * NaN: FAIL), and 16 poisoned guard bytes after C (and c_off before it) must stay poisoned.
 *
 * Functions are static inline: each including test file uses what it needs.
 */
#ifndef FORGE_GEMM_FP8_CASE_H
#define FORGE_GEMM_FP8_CASE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_test.h"
#include "../src/backend/cuda/gemm_fp8.h"

typedef enum { GF8_IN_FP8 = 0, GF8_IN_TF32 = 1, GF8_IN_BF16 = 2 } gf8_input;

typedef struct gf8_mode gf8_mode;

/* Runs the mode's GEMM on device buffers: A (M,K) and B (N,K) in the mode's input type (fp8: A e4m3 or e5m2, B
 * e4m3), C (M,N) fp32 or bf16, bias (N) fp32 or NULL; a_scale and b_scale for fp8. */
typedef forge_status (*gf8_run_fn)(const gf8_mode *mode, const void *A, const void *B, void *C, const float *bias,
                                   int M, int N, int K, float a_scale, float b_scale);

struct gf8_mode {
    const char *name; /* the op printed: "gemm_fp8[e4m3]", "gemm_tf32[pp]", ... */
    double tol;       /* relative Frobenius error */
    gf8_input input;
    int a_e5m2;       /* fp8: A e5m2 (else e4m3); B is e4m3 */
    int out_bf16;     /* C bf16 (else fp32) */
    int with_bias;    /* + bias (N exact values m/8, added in the epilogue; columns past N must not read it) */
    size_t c_off;     /* C starts this many bytes past cudaMalloc's 256-byte alignment */
    int tma_only;     /* the call stores C through TMA only: FORGE_ERR_UNSUPPORTED expected where N % 4 != 0 */
    gf8_run_fn run;
    int accum, store, sched; /* the runner's own selectors (the lab's variants), unused by forge's entry points */
};

static inline uint8_t gf8_fp8_encode(double v, int e5m2) { /* v = m/8, |m| <= 8 */
    if (v == 0.0) return 0;
    const uint8_t sign = v < 0 ? 0x80 : 0;
    int e;
    const double f = frexp(fabs(v), &e); /* |v| = f * 2^e, f in [0.5, 1) */
    const int exp = e - 1, mbits = e5m2 ? 2 : 3;
    const int man = (int)((f * 2.0 - 1.0) * (1 << mbits));
    return (uint8_t)(sign | ((exp + (e5m2 ? 15 : 7)) << mbits) | man);
}

static inline void gf8_case(parity *P, const gf8_mode *mode, int M, int N, int K) {
    const int a_e5m2 = mode->a_e5m2, out_bf16 = mode->out_bf16, with_bias = mode->with_bias;
    const int tf32 = mode->input == GF8_IN_TF32, bf16in = mode->input == GF8_IN_BF16;
    const size_t c_off = mode->c_off;
    char shape[64];
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d", M, N, K);
    const size_t an = (size_t)M * K, bn = (size_t)N * K, cn = (size_t)M * N;
    double *a = malloc(an * sizeof *a), *b = malloc(bn * sizeof *b);
    uint8_t *a8 = malloc(an), *b8 = malloc(bn);
    float *a32 = malloc(an * 4), *b32 = malloc(bn * 4), *c = malloc(cn * 4);
    uint16_t *a16 = malloc(an * 2), *b16 = malloc(bn * 2); /* bf16: the top half of the fp32 bits (exact here) */
    float *bias = malloc((size_t)N * 4);
    void *dBias = NULL;
    uint16_t *c16 = (uint16_t *)c;
    void *dA = NULL, *dB = NULL, *dC = NULL;
    int ok = a && b && a8 && b8 && a32 && b32 && c && a16 && b16 && bias;
    for (int n = 0; ok && n < N; n++) bias[n] = (float)(((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0);
    for (size_t i = 0; ok && i < an; i++) {
        a[i] = ((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0;
        a8[i] = gf8_fp8_encode(a[i], a_e5m2);
        a32[i] = (float)a[i];
        uint32_t u;
        memcpy(&u, &a32[i], 4);
        a16[i] = (uint16_t)(u >> 16);
    }
    for (size_t i = 0; ok && i < bn; i++) {
        b[i] = ((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0;
        b8[i] = gf8_fp8_encode(b[i], 0);
        b32[i] = (float)b[i];
        uint32_t u;
        memcpy(&u, &b32[i], 4);
        b16[i] = (uint16_t)(u >> 16);
    }
    const size_t ea = tf32 ? 4 : bf16in ? 2 : 1;
    const void *ha = tf32 ? (const void *)a32 : bf16in ? (const void *)a16 : (const void *)a8;
    const void *hb = tf32 ? (const void *)b32 : bf16in ? (const void *)b16 : (const void *)b8;
    /* C: cn * 4 bytes at c_off into the allocation, plus 16 guard bytes after it (poisoned like C: a write past
     * C's M x N elements shows as a guard byte changed) */
    if (ok) ok = cudaMalloc(&dA, an * ea) == cudaSuccess && cudaMalloc(&dB, bn * ea) == cudaSuccess &&
                 cudaMalloc(&dC, c_off + cn * 4 + 16) == cudaSuccess;
    if (ok) ok = cudaMemcpy(dA, ha, an * ea, cudaMemcpyHostToDevice) == cudaSuccess &&
                 cudaMemcpy(dB, hb, bn * ea, cudaMemcpyHostToDevice) == cudaSuccess &&
                 cudaMemset(dC, 0xFF, c_off + cn * 4 + 16) == cudaSuccess;
    if (ok && with_bias)
        ok = cudaMalloc(&dBias, (size_t)N * 4) == cudaSuccess &&
             cudaMemcpy(dBias, bias, (size_t)N * 4, cudaMemcpyHostToDevice) == cudaSuccess;
    if (!ok) {
        report(P, 0, mode->name, shape, INFINITY, mode->tol, "(host or device allocation failed)");
        goto done;
    }
    const float sa = 0.5f, sb = 0.25f;
    void *dCv = (char *)dC + c_off;
    const forge_status s = mode->run(mode, dA, dB, dCv, with_bias ? (const float *)dBias : NULL, M, N, K, sa, sb);
    if (mode->tma_only && N % 4 != 0) { /* a refusal, not a fallback */
        report(P, s == FORGE_ERR_UNSUPPORTED, mode->name, shape, s == FORGE_ERR_UNSUPPORTED ? 0.0 : INFINITY,
               mode->tol, "(expects FORGE_ERR_UNSUPPORTED: N % 4 != 0)");
        goto done;
    }
    if (s != FORGE_OK) {
        char why[512];
        snprintf(why, sizeof why, "(returned %s: %s)", forge_status_name(s), forge_error_message());
        report(P, 0, mode->name, shape, INFINITY, mode->tol, why);
        goto done;
    }
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpy(c, dCv, cn * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
        report(P, 0, mode->name, shape, INFINITY, mode->tol, "(kernel or copy failed)");
        goto done;
    }
    {
        /* the bytes around C must still be poison: c_off before it, 16 after its M x N elements (4 or 2 bytes) */
        unsigned char guard[32];
        const size_t c_bytes = cn * (out_bf16 ? 2 : 4);
        int intact = cudaMemcpy(guard, (char *)dCv + c_bytes, 16, cudaMemcpyDeviceToHost) == cudaSuccess &&
                     (c_off == 0 || cudaMemcpy(guard + 16, dC, c_off, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (size_t g = 0; intact && g < 16 + c_off; g++) intact = guard[g] == 0xFF;
        if (!intact) {
            report(P, 0, mode->name, shape, INFINITY, mode->tol, "(wrote outside C, or the guard copy failed)");
            goto done;
        }
    }
    const double scale = tf32 || bf16in ? 1.0 : (double)sa * sb;
    double d2 = 0.0, r2 = 0.0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double r = 0.0;
            for (int k = 0; k < K; k++) r += a[(size_t)m * K + k] * b[(size_t)n * K + k];
            r *= scale;
            if (with_bias) r += bias[n];
            double v;
            if (out_bf16) {
                uint32_t u = (uint32_t)c16[(size_t)m * N + n] << 16;
                float f;
                memcpy(&f, &u, 4);
                v = f;
            } else {
                v = c[(size_t)m * N + n];
            }
            d2 += (v - r) * (v - r); /* NaN (poison) propagates: FAIL */
            r2 += r * r;
        }
    const double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    report(P, rel <= mode->tol, mode->name, shape, rel, mode->tol, NULL);
done:
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cudaFree(dBias);
    free(a), free(b), free(a8), free(b8), free(a32), free(b32), free(c), free(a16), free(b16), free(bias);
}

/* The shapes every mode runs at: odd and partial tiles, K/128 = 1, 3, 5, 8 stages (and K % 128 = 16), and the
 * last two with >= 132 tiles of 128 x 256 (so tf32 and fast accum take BN 256) and a last column tile with at most
 * 128 columns left (1408 = 5 x 256 + 128, TMA store; 1290 = 5 x 256 + 10, direct store): the half-width MMA of
 * fp8_plain_tile. quick: only those under 2e7 multiply-adds. */
static const int GF8_SHAPES[][3] = {{1, 8, 16},       {130, 200, 272},  {257, 999, 528},
                                    {128, 192, 1024}, {2944, 1408, 32}, {2945, 1290, 48}};
#define GF8_N_SHAPES ((int)(sizeof GF8_SHAPES / sizeof GF8_SHAPES[0]))
static inline int gf8_shape_skipped(const parity *P, int i) {
    return P->quick && (long long)GF8_SHAPES[i][0] * GF8_SHAPES[i][1] * GF8_SHAPES[i][2] > 20000000LL;
}

/* The start of a command that runs cases on its own (the lab's tests): [--quick] from argv (the words after the
 * command's name), the rng seeded as the GPU parity suite seeds it, a title line. 0, or 2 after a usage message for
 * any other argument. */
static inline int gf8_cli_begin(parity *P, int argc, char **argv, const char *command, const char *title) {
    memset(P, 0, sizeof *P);
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--quick") != 0) {
            fprintf(stderr, "%s: unknown argument \"%s\" (usage: [--quick])\n", command, argv[i]);
            return 2;
        }
        P->quick = 1;
    }
    forge_rng_seed(&P->rng, 1234, 7);
    printf("%s%s\n", title, P->quick ? " (quick shapes)" : "");
    return 0;
}

/* The end of such a command: "N passed, N failed", and its exit status (1 on any failure). */
static inline int gf8_cli_end(const parity *P) {
    printf("%d passed, %d failed\n", P->passed, P->failed);
    return P->failed ? 1 : 0;
}

#endif
