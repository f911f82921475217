/* test_gemm_fp8_kernels.c: forge's fp8 and tf32 wgmma GEMMs and the bf16 ping-pong kernel, called through their
 * entry points (gemm_fp8.h; not backend ops), against a double reference (gemm_fp8_case.h: values, tolerances,
 * guards). The lab's variants of these kernels (other accumulations, forced stores and schedules, 2-CTA clusters)
 * are `forge-lab test gemm-fp8`. */
#include "gemm_fp8_case.h"

static forge_status run_forge(const gf8_mode *mode, const void *A, const void *B, void *C, const float *bias, int M,
                              int N, int K, float a_scale, float b_scale) {
    if (mode->input == GF8_IN_BF16) return forge_gemm_bf16_nt_pp(A, B, (float *)C, bias, M, N, K, NULL);
    if (mode->input == GF8_IN_TF32)
        return forge_gemm_tf32_nt((const float *)A, (const float *)B, (float *)C, M, N, K, NULL);
    return forge_gemm_fp8_nt(A, mode->a_e5m2 ? FORGE_FP8_E5M2 : FORGE_FP8_E4M3, B, FORGE_FP8_E4M3, C,
                             mode->out_bf16 ? FORGE_GEMM_OUT_BF16 : FORGE_GEMM_OUT_F32, a_scale, b_scale, M, N, K,
                             NULL);
}

/* fp8: the promoted kernel forge_gemm_fp8_nt picks per shape (chunk64 at BN 256 where its tiles cover half the SMs,
 * else the serial promotion at 128/192), stored through TMA where C allows it (fp32: N % 4 == 0, bf16: N % 8 == 0,
 * C 16-byte aligned: N = 8, 200, 192, 1408 here; boxes clipped at M and N, boxes wholly outside skipped: M = 1,
 * 130, N = 8, 200), directly elsewhere (N = 999, 1290). tf32: the ping-pong schedule where C takes the TMA store
 * and K <= 1024, else the cooperative one. C+4B: C at a 4-byte offset from a 16-byte boundary (fp32 N % 4 == 0 but
 * C not 16-byte aligned: the direct store, writing exactly C's M x N elements). bf16: the ping-pong kernel (refused
 * where N % 4 != 0), + bias. */
enum { F_E4M3, F_E5M2, F_BF16OUT, F_TF32, F_E4M3_C4, F_TF32_C4, F_BF16PP, F_BF16PP_BIAS, F_N_MODES };
static const gf8_mode MODES[F_N_MODES] = {
    [F_E4M3] = {"gemm_fp8[e4m3]", 1e-3, GF8_IN_FP8, 0, 0, 0, 0, 0, run_forge, 0, 0, 0},
    [F_E5M2] = {"gemm_fp8[e5m2xe4m3]", 1e-3, GF8_IN_FP8, 1, 0, 0, 0, 0, run_forge, 0, 0, 0},
    [F_BF16OUT] = {"gemm_fp8[e4m3,bf16out]", 1e-2, GF8_IN_FP8, 0, 1, 0, 0, 0, run_forge, 0, 0, 0},
    [F_TF32] = {"gemm_tf32", 1e-5, GF8_IN_TF32, 0, 0, 0, 0, 0, run_forge, 0, 0, 0},
    [F_E4M3_C4] = {"gemm_fp8[e4m3,C+4B]", 1e-3, GF8_IN_FP8, 0, 0, 0, 4, 0, run_forge, 0, 0, 0},
    [F_TF32_C4] = {"gemm_tf32[C+4B]", 1e-5, GF8_IN_TF32, 0, 0, 0, 4, 0, run_forge, 0, 0, 0},
    [F_BF16PP] = {"gemm_bf16[pp]", 1e-5, GF8_IN_BF16, 0, 0, 0, 0, 1, run_forge, 0, 0, 0},
    [F_BF16PP_BIAS] = {"gemm_bf16[pp,bias]", 1e-5, GF8_IN_BF16, 0, 0, 1, 0, 1, run_forge, 0, 0, 0},
};

/* Arguments the fp8 / tf32 paths must refuse with FORGE_ERR_UNSUPPORTED (checked before any device work). */
static void case_gemm_fp8_refusals(parity *P) {
    static uint8_t dummy[64] __attribute__((aligned(16)));
    const forge_status k20 = forge_gemm_fp8_nt(dummy, FORGE_FP8_E4M3, dummy, FORGE_FP8_E4M3, dummy,
                                               FORGE_GEMM_OUT_F32, 1.0f, 1.0f, 4, 4, 20, NULL);
    report(P, k20 == FORGE_ERR_UNSUPPORTED, "gemm_fp8[refuse]", "K=20 (K % 16 != 0)", 0, 0, NULL);
    const forge_status b5 = forge_gemm_fp8_nt(dummy, FORGE_FP8_E4M3, dummy, FORGE_FP8_E5M2, dummy,
                                              FORGE_GEMM_OUT_F32, 1.0f, 1.0f, 4, 4, 16, NULL);
    report(P, b5 == FORGE_ERR_UNSUPPORTED, "gemm_fp8[refuse]", "B e5m2 (not built)", 0, 0, NULL);
    const forge_status t6 = forge_gemm_tf32_nt((const float *)dummy, (const float *)dummy, (float *)dummy, 4, 4, 6,
                                               NULL);
    report(P, t6 == FORGE_ERR_UNSUPPORTED, "gemm_tf32[refuse]", "K=6 (K % 4 != 0)", 0, 0, NULL);
}

void run_gemm_fp8_cases(parity *P) {
    case_gemm_fp8_refusals(P);
    for (int i = 0; i < GF8_N_SHAPES; i++) {
        if (gf8_shape_skipped(P, i)) continue;
        for (int m = 0; m < F_N_MODES; m++)
            gf8_case(P, &MODES[m], GF8_SHAPES[i][0], GF8_SHAPES[i][1], GF8_SHAPES[i][2]);
    }
    /* tf32 ping-pong (K <= 1024, TMA store) with several 128 x 128 tiles per warpgroup (512 / 520 tiles on 132 SMs)
     * and ktiles = 4 (not a multiple of the 6 stages): the ring slots and parities each warpgroup computes for its
     * alternate tiles, and the order barriers, over many turns; 4100 rows leave a partial last row-block */
    gf8_case(P, &MODES[F_TF32], 4096, 1024, 100);
    if (!P->quick) gf8_case(P, &MODES[F_TF32], 4100, 1040, 128);
    /* tf32 cooperative with the TMA store (K > 1024, N % 4 == 0): BN 128 (4 tiles of 128, fewer of 256), and BN
     * 256 with a last column tile of 128 (1408 = 5 x 256 + 128: the half-width MMA) */
    gf8_case(P, &MODES[F_TF32], 130, 200, 1040);
    if (!P->quick) gf8_case(P, &MODES[F_TF32], 2944, 1408, 1040);
    /* the same for the bf16 ping-pong kernel (64 bf16 per stage: K = 200 is 4 K-tiles, the last 8 wide; 264 is 5) */
    gf8_case(P, &MODES[F_BF16PP], 4096, 1024, 200);
    if (!P->quick) gf8_case(P, &MODES[F_BF16PP], 4100, 1040, 264);
    if (!P->quick) gf8_case(P, &MODES[F_BF16PP_BIAS], 4100, 1036, 264); /* 1036 = 8 x 128 + 12: a partial column tile */
    /* 45 x 2 = 90 tiles of 128 x 256, at least half of 132 SMs: chunk64, both epilogues (fp32 and bf16 out). The
     * serial promotion at BN 192 (where its cost model takes 192 here) is the lab's case: `forge-lab test gemm-fp8`,
     * gemm_fp8[e4m3,serial] and its bf16-out and direct-store forms at this shape. */
    if (!P->quick) {
        gf8_case(P, &MODES[F_E4M3], 5760, 384, 128);
        gf8_case(P, &MODES[F_BF16OUT], 5760, 384, 128);
    }
}
