/*
 * test_gemm_mma.c: `forge-lab test gemm-mma [--quick]`: the lab's bf16 mma.sync GEMM (lab_gemm_mma_bf16_nt)
 * against a double reference, through the parity case of tests_gpu/gemm_fp8_case.h (exact values m/8, so every
 * product and fp32 sum here is exact: tolerance 1e-5; poison and guards there). forge's tf32 instantiation of the
 * same kernel is checked by tests_gpu (the matmul ops under the tf32 matmul mode). Ends with "N passed, N failed";
 * exit status 1 on any failure. --quick drops the shapes over 2e7 multiply-adds.
 *
 * Shapes: GF8_SHAPES (K a multiple of 16: the 16-byte cp.async loads), and K odd (K * 2 % 16 != 0: the
 * bounds-checked scalar loads); with a bias, and with C 4 bytes off a 16-byte boundary (the scalar stores).
 */

#include "../../tests_gpu/gemm_fp8_case.h"
#include "gemm_mma_lab.h"

static forge_status run_mma_bf16(const gf8_mode *mode, const void *A, const void *B, void *C, const float *bias, int M,
                                 int N, int K, float a_scale, float b_scale) {
    (void)mode, (void)a_scale, (void)b_scale;
    return lab_gemm_mma_bf16_nt(A, B, (float *)C, bias, M, N, K, NULL);
}

static const gf8_mode MODES[] = {
    {"gemm_mma_bf16", 1e-5, GF8_IN_BF16, 0, 0, 0, 0, 0, run_mma_bf16, 0, 0, 0},
    {"gemm_mma_bf16[bias]", 1e-5, GF8_IN_BF16, 0, 0, 1, 0, 0, run_mma_bf16, 0, 0, 0},
    {"gemm_mma_bf16[C+4B]", 1e-5, GF8_IN_BF16, 0, 0, 0, 4, 0, run_mma_bf16, 0, 0, 0},
};
#define N_MODES ((int)(sizeof MODES / sizeof MODES[0]))

int lab_test_gemm_mma(int argc, char **argv) {
    parity P;
    if (gf8_cli_begin(&P, argc, argv, "forge-lab test gemm-mma", "lab gemm-mma bf16") != 0) return 2;
    static const int odd_k[][3] = {{130, 200, 13}, {257, 999, 1001}};
    for (int m = 0; m < N_MODES; m++) {
        for (int i = 0; i < GF8_N_SHAPES; i++)
            if (!gf8_shape_skipped(&P, i))
                gf8_case(&P, &MODES[m], GF8_SHAPES[i][0], GF8_SHAPES[i][1], GF8_SHAPES[i][2]);
        for (size_t i = 0; i < sizeof odd_k / sizeof odd_k[0]; i++)
            if (!P.quick || (long long)odd_k[i][0] * odd_k[i][1] * odd_k[i][2] <= 20000000LL)
                gf8_case(&P, &MODES[m], odd_k[i][0], odd_k[i][1], odd_k[i][2]);
    }
    return gf8_cli_end(&P);
}
