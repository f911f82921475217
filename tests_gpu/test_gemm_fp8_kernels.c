/* test_gemm_fp8_kernels.c: forge's fp8 and tf32 GEMM kernels and the bf16 ping-pong kernel, called directly
 * (not backend ops). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_test.h"
#include "../src/backend/cuda/gemm_fp8.h"

/* ---- forge_gemm_fp8_nt / forge_gemm_tf32_nt (not backend ops: called directly) ----
 * Values m/8 with m uniform in -8..8: exact in e4m3, e5m2, bf16 and tf32, so a double reference of the same
 * values is exact; products and sums are multiples of 2^-6. Compared as relative Frobenius error (printed as
 * maxerr): promoted fp8 <= 1e-3 (QGMMA truncates within a 128-K stage), fast accum and bf16 output <= 1e-2,
 * tf32 <= 1e-5 (exact inputs, fp32 accumulation). C is poisoned first (an unwritten element is a NaN: FAIL). */

static uint8_t fp8_encode(double v, int e5m2) { /* v = m/8, |m| <= 8 */
    if (v == 0.0) return 0;
    const uint8_t sign = v < 0 ? 0x80 : 0;
    int e;
    const double f = frexp(fabs(v), &e); /* |v| = f * 2^e, f in [0.5, 1) */
    const int exp = e - 1, mbits = e5m2 ? 2 : 3;
    const int man = (int)((f * 2.0 - 1.0) * (1 << mbits));
    return (uint8_t)(sign | ((exp + (e5m2 ? 15 : 7)) << mbits) | man);
}

/* case_gemm_fp8's modes: the 2-CTA cluster ones (fp8_mode_cluster) run last */
enum { N_MODES = 36 };
static int fp8_mode_cluster(int mode) { return (mode >= 12 && mode <= 14) || mode == 28 || mode == 29 || mode == 32; }

static void case_gemm_fp8(parity *P, int M, int N, int K, int mode) {
    /* mode 0: e4m3 x e4m3 fp32 out; 1: e5m2 x e4m3; 2: bf16 out; 3: fast accum; 4: tf32; 5, 6: modes 0, 1 with
     * pipelined promotion (the shapes' K/128 tile counts 1, 3, 5 and 8 cover both of its drains); 7, 8, 9: modes
     * 0, 1, 2 with chunk64 promotion (BN 256: N = 8, 200, 192 one partial column tile, 999 four, the last partial;
     * K/128 = 1, 3, 5, 8 stages: 1 is the tile with no previous chunk 3 to retire); 10, 11:
     * modes 0, 1 with chunk128 promotion; 12, 13: modes 0, 1 with chunk64 on 2-CTA clusters (B multicast; M = 1,
     * 128, 257 leave the second CTA of the last pair a phantom row-block); 14: fast accum on 2-CTA clusters.
     * Epilogue (rung 4e): modes 0-11 take the default store, the TMA-store epilogue where C allows it (fp32:
     * N % 4 == 0, bf16: N % 8 == 0, C 16-byte aligned: N = 8, 200, 192 here; boxes clipped at M and N, boxes
     * wholly outside skipped: M = 1, 130, N = 8, 200) and the direct store at N = 999; 15-18: modes 0, 2, 4, 7 with
     * FORGE_GEMM_STORE_DIRECT (the direct store on the TMA-capable shapes too); 19, 20: modes 0 and 4 with C at
     * a 4-byte offset from a 16-byte boundary (fp32 N % 4 == 0 but C not 16-byte aligned: the default must fall
     * back to the direct store, and write exactly C's M x N elements); 21, 22: tf32 on the ping-pong schedule
     * (refused where N % 4 != 0) and on the cooperative one (mode 4 takes ping-pong at K <= 1024 where C allows
     * the TMA store); 23, 24: modes 0, 1 with chunk64 and A from registers (ldmatrix of the swizzled stage, two
     * buffers: a wrong address or a buffer read before its load shows as a wrong result; K/128 = 1, 3, 5, 8 cover
     * the odd tail and the unrolled pair); 25, 26, 27: modes 0, 1, 2 with the pipelined promotion at BN 144 (a
     * 144-column tile: N = 8, 200, 192 one or two partial column tiles, 999 = 6 x 144 + 135, 1408 = 9 x 144 + 112;
     * the direct store always); 28, 29: modes 0, 1 with it on 2-CTA clusters (72-row B halves multicast); 30, 31:
     * modes 0, 1 with the rotated serial promotion at BN 144 (K/128 = 1: no loop iteration); 32: mode 0 with it on
     * 2-CTA clusters; 33: mode 25 with FORGE_GEMM_STORE_TMA (16-column unswizzled staging boxes, 9 per 144-wide
     * tile; refused where C does not allow the TMA store: falls back to direct); 34: bf16 A and B on the ping-pong
     * kernel (forge_gemm_bf16_nt_pp; the same exact values, tolerance as tf32; refused where N % 4 != 0); 35: mode
     * 34 with a bias (N exact values m/8, added in the epilogue; columns past N must not read it). */
    static const char *const names[N_MODES] = {
        "gemm_fp8[e4m3]",           "gemm_fp8[e5m2xe4m3]",         "gemm_fp8[e4m3,bf16out]",
        "gemm_fp8[e4m3,fastacc]",   "gemm_tf32",                   "gemm_fp8[e4m3,pipe]",
        "gemm_fp8[e5m2xe4m3,pipe]", "gemm_fp8[e4m3,chunk64]",      "gemm_fp8[e5m2xe4m3,chunk64]",
        "gemm_fp8[e4m3,bf16out,chunk64]", "gemm_fp8[e4m3,chunk128]", "gemm_fp8[e5m2xe4m3,chunk128]",
        "gemm_fp8[e4m3,chunk64c2]", "gemm_fp8[e5m2xe4m3,chunk64c2]", "gemm_fp8[e4m3,fastacc,c2]",
        "gemm_fp8[e4m3,direct]",    "gemm_fp8[e4m3,bf16out,direct]", "gemm_tf32[direct]",
        "gemm_fp8[e4m3,chunk64,direct]", "gemm_fp8[e4m3,C+4B]",   "gemm_tf32[C+4B]",
        "gemm_tf32[pp]",            "gemm_tf32[coop]",             "gemm_fp8[e4m3,chunk64ra]",
        "gemm_fp8[e5m2xe4m3,chunk64ra]", "gemm_fp8[e4m3,pipe144]", "gemm_fp8[e5m2xe4m3,pipe144]",
        "gemm_fp8[e4m3,bf16out,pipe144]", "gemm_fp8[e4m3,pipe144c2]", "gemm_fp8[e5m2xe4m3,pipe144c2]",
        "gemm_fp8[e4m3,serial144]", "gemm_fp8[e5m2xe4m3,serial144]", "gemm_fp8[e4m3,serial144c2]",
        "gemm_fp8[e4m3,pipe144,tma]", "gemm_bf16[pp]", "gemm_bf16[pp,bias]"};
    static const double tols[N_MODES] = {1e-3, 1e-3, 1e-2, 1e-2, 1e-5, 1e-3, 1e-3, 1e-3, 1e-3, 1e-2, 1e-3,
                                         1e-3, 1e-3, 1e-3, 1e-2, 1e-3, 1e-2, 1e-5, 1e-3, 1e-3, 1e-5,
                                         1e-5, 1e-5, 1e-3, 1e-3, 1e-3, 1e-3, 1e-2, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-5, 1e-5};
    const int a_e5m2 =
        mode == 1 || mode == 6 || mode == 8 || mode == 11 || mode == 13 || mode == 24 || mode == 26 || mode == 29 || mode == 31;
    const int out_bf16 = mode == 2 || mode == 9 || mode == 16 || mode == 27;
    const int tf32 = mode == 4 || mode == 17 || mode == 20 || mode == 21 || mode == 22;
    const int bf16in = mode == 34 || mode == 35, with_bias = mode == 35;
    const forge_gemm_store store = mode >= 15 && mode <= 18 ? FORGE_GEMM_STORE_DIRECT
                                   : mode == 33             ? FORGE_GEMM_STORE_TMA
                                                            : FORGE_GEMM_STORE_AUTO;
    const size_t c_off = mode == 19 || mode == 20 ? 4 : 0; /* bytes: C 4 bytes past cudaMalloc's 256-byte alignment */
    const forge_fp8_accum accum = mode == 3                ? FORGE_FP8_FAST_ACCUM
                                  : mode == 5 || mode == 6 ? FORGE_FP8_PROMOTE_PIPELINED
                                  : (mode >= 7 && mode <= 9) || mode == 18 ? FORGE_FP8_PROMOTE_CHUNK64
                                  : mode == 10 || mode == 11 ? FORGE_FP8_PROMOTE_CHUNK128
                                  : mode == 12 || mode == 13 ? FORGE_FP8_PROMOTE_CHUNK64_C2
                                  : mode == 14               ? FORGE_FP8_FAST_ACCUM_C2
                                  : mode == 23 || mode == 24 ? FORGE_FP8_PROMOTE_CHUNK64_RA
                                  : (mode >= 25 && mode <= 27) || mode == 33 ? FORGE_FP8_PROMOTE_PIPE144
                                  : mode == 28 || mode == 29 ? FORGE_FP8_PROMOTE_PIPE144_C2
                                  : mode == 30 || mode == 31 ? FORGE_FP8_PROMOTE_SERIAL144
                                  : mode == 32               ? FORGE_FP8_PROMOTE_SERIAL144_C2
                                                             : FORGE_FP8_PROMOTE;
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
        a8[i] = fp8_encode(a[i], a_e5m2);
        a32[i] = (float)a[i];
        uint32_t u;
        memcpy(&u, &a32[i], 4);
        a16[i] = (uint16_t)(u >> 16);
    }
    for (size_t i = 0; ok && i < bn; i++) {
        b[i] = ((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0;
        b8[i] = fp8_encode(b[i], 0);
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
        report(P, 0, names[mode], shape, INFINITY, tols[mode], "(host or device allocation failed)");
        goto done;
    }
    const float sa = 0.5f, sb = 0.25f;
    forge_status s;
    void *dCv = (char *)dC + c_off;
    if (bf16in)
        s = forge_gemm_bf16_nt_pp(dA, dB, (float *)dCv, with_bias ? (const float *)dBias : NULL, M, N, K, NULL);
    else if (tf32)
        s = forge_gemm_tf32_nt_sched(dA, dB, (float *)dCv, M, N, K, store,
                                     mode == 21   ? FORGE_GEMM_SCHED_PINGPONG
                                     : mode == 22 ? FORGE_GEMM_SCHED_COOP
                                                  : FORGE_GEMM_SCHED_AUTO,
                                     NULL);
    else
        s = forge_gemm_fp8_nt_store(dA, a_e5m2 ? FORGE_FP8_E5M2 : FORGE_FP8_E4M3, dB, FORGE_FP8_E4M3, dCv,
                                    out_bf16 ? FORGE_GEMM_OUT_BF16 : FORGE_GEMM_OUT_F32, sa, sb, M, N, K, accum, store,
                                    NULL);
    if ((mode == 21 || bf16in) && N % 4 != 0) { /* ping-pong stores through TMA only: a refusal, not a fallback */
        report(P, s == FORGE_ERR_UNSUPPORTED, names[mode], shape, s == FORGE_ERR_UNSUPPORTED ? 0.0 : INFINITY,
               tols[mode], "(expects FORGE_ERR_UNSUPPORTED: N % 4 != 0)");
        goto done;
    }
    if (s != FORGE_OK) {
        char why[512];
        snprintf(why, sizeof why, "(returned %s: %s)", forge_status_name(s), forge_error_message());
        report(P, 0, names[mode], shape, INFINITY, tols[mode], why);
        goto done;
    }
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpy(c, dCv, cn * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
        report(P, 0, names[mode], shape, INFINITY, tols[mode], "(kernel or copy failed)");
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
            report(P, 0, names[mode], shape, INFINITY, tols[mode], "(wrote outside C, or the guard copy failed)");
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
    report(P, rel <= tols[mode], names[mode], shape, rel, tols[mode], NULL);
done:
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cudaFree(dBias);
    free(a), free(b), free(a8), free(b8), free(a32), free(b32), free(c), free(a16), free(b16), free(bias);
}

/* Arguments the fp8 / tf32 paths must refuse with FORGE_ERR_UNSUPPORTED (checked before any device work). */
static void case_gemm_fp8_refusals(parity *P) {
    static uint8_t dummy[64] __attribute__((aligned(16)));
    const forge_status k20 = forge_gemm_fp8_nt(dummy, FORGE_FP8_E4M3, dummy, FORGE_FP8_E4M3, dummy,
                                               FORGE_GEMM_OUT_F32, 1.0f, 1.0f, 4, 4, 20, FORGE_FP8_PROMOTE, NULL);
    report(P, k20 == FORGE_ERR_UNSUPPORTED, "gemm_fp8[refuse]", "K=20 (K % 16 != 0)", 0, 0, NULL);
    const forge_status b5 = forge_gemm_fp8_nt(dummy, FORGE_FP8_E4M3, dummy, FORGE_FP8_E5M2, dummy,
                                              FORGE_GEMM_OUT_F32, 1.0f, 1.0f, 4, 4, 16, FORGE_FP8_PROMOTE, NULL);
    report(P, b5 == FORGE_ERR_UNSUPPORTED, "gemm_fp8[refuse]", "B e5m2 (not built)", 0, 0, NULL);
    const forge_status t6 = forge_gemm_tf32_nt((const float *)dummy, (const float *)dummy, (float *)dummy, 4, 4, 6,
                                               NULL);
    report(P, t6 == FORGE_ERR_UNSUPPORTED, "gemm_tf32[refuse]", "K=6 (K % 4 != 0)", 0, 0, NULL);
}

void run_gemm_fp8_cases(parity *P) {
    case_gemm_fp8_refusals(P);
    /* the last two: >= 132 tiles of 128 x 256, so tf32 and fast accum take BN 256, and a last column tile with at
     * most 128 columns left (1408 = 5 x 256 + 128, TMA store; 1290 = 5 x 256 + 10, direct store): the half-width
     * MMA of fp8_plain_tile */
    static const int shapes[][3] = {{1, 8, 16},        {130, 200, 272},  {257, 999, 528},
                                    {128, 192, 1024},  {2944, 1408, 32}, {2945, 1290, 48}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (P->quick && (long long)shapes[i][0] * shapes[i][1] * shapes[i][2] > 20000000LL) continue;
        for (int mode = 0; mode < N_MODES; mode++)
            if (!fp8_mode_cluster(mode)) case_gemm_fp8(P, shapes[i][0], shapes[i][1], shapes[i][2], mode);
    }
    /* BN 192 (serial promotion only): on a 132-SM H200 fp8_pick_bn takes 192 at M=5760 N=384 (135 tiles of 128
     * = 2 waves, 90 of 192 = 1), but FORGE_FP8_PROMOTE picks chunk64 there unless FORGE_FP8_PROMOTE_VARIANT=serial:
     * run FORGE_FP8_PROMOTE_VARIANT=serial FORGE_GPU_TESTS_ONLY=gemm_fp8 to cover the BN 192 kernels, whose TMA
     * epilogue has 4 stages and, with bf16 out, an odd box count per tile (3). Both epilogues, fp32 and bf16
     * out. */
    /* tf32 ping-pong with several 128 x 128 tiles per warpgroup (512 / 520 tiles on 132 SMs) and ktiles = 4 (not a
     * multiple of the 6 stages): the ring slots and parities each warpgroup computes for its alternate tiles, and the
     * order barriers, over many turns; 4100 rows leave a partial last row-block */
    case_gemm_fp8(P, 4096, 1024, 100, 21);
    if (!P->quick) case_gemm_fp8(P, 4100, 1040, 128, 21);
    /* the same for the bf16 ping-pong kernel (64 bf16 per stage: K = 200 is 4 K-tiles, the last 8 wide; 264 is 5) */
    case_gemm_fp8(P, 4096, 1024, 200, 34);
    if (!P->quick) case_gemm_fp8(P, 4100, 1040, 264, 34);
    if (!P->quick) case_gemm_fp8(P, 4100, 1036, 264, 35); /* + bias; 1036 = 8 x 128 + 12: a partial column tile */
    /* the 144-wide pipelined promotion over many tiles per CTA: 17 x 11 = 187 tiles of 128 x 144 on 132 SMs, 9
     * K-tiles (odd: the tail stage; K % 128 = 16) against 6 stages, so the ring's slots and parities carry across
     * tiles; the last column tile is 60 wide */
    if (!P->quick) case_gemm_fp8(P, 2176, 1500, 1040, 25);
    if (!P->quick) case_gemm_fp8(P, 2176, 1500, 1040, 30);
    if (!P->quick) case_gemm_fp8(P, 2176, 1500, 1040, 33);
    if (!P->quick) {
        static const int modes192[] = {0, 2, 15, 16};
        for (size_t j = 0; j < sizeof modes192 / sizeof modes192[0]; j++) case_gemm_fp8(P, 5760, 384, 128, modes192[j]);
    }
    /* the 2-CTA cluster modes last: a protocol bug there traps (mbarrier timeout) and takes the CUDA context,
     * so every case after it fails; this keeps the other modes' verdicts */
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (P->quick && (long long)shapes[i][0] * shapes[i][1] * shapes[i][2] > 20000000LL) continue;
        for (int mode = 0; mode < N_MODES; mode++)
            if (fp8_mode_cluster(mode)) case_gemm_fp8(P, shapes[i][0], shapes[i][1], shapes[i][2], mode);
    }
    /* the same many-tile shape on 2-CTA clusters: 17 row-blocks, so the last pair's second CTA is a phantom */
    if (!P->quick) case_gemm_fp8(P, 2176, 1500, 1040, 28);
    if (!P->quick) case_gemm_fp8(P, 2176, 1500, 1040, 32);
}
