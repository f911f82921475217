/*
 * test_gemm_fp8.c: `forge-lab test gemm-fp8 [--quick]`: the lab's variants of the fp8 and tf32 wgmma GEMMs
 * (gemm_fp8_lab.h) against a double reference, through the parity case of tests_gpu/gemm_fp8_case.h (values,
 * tolerances, poison and guards: there). forge's default entry points are tests_gpu/test_gemm_fp8_kernels.c's.
 * Ends with "N passed, N failed"; exit status 1 on any failure. --quick drops the shapes over 2e7 multiply-adds
 * and the many-tile cases.
 *
 * The modes (shapes: GF8_SHAPES, K/128 = 1, 3, 5, 8 stages and K % 128 = 16):
 * - fastacc: one wgmma accumulator over K (BN 256 or 128); pipe: the pipelined promotion (the shapes' K/128 tile
 *   counts 1, 3, 5 and 8 cover both of its drains); chunk64: forced at every shape (BN 256: N = 8, 200, 192 one
 *   partial column tile, 999 four, the last partial; K/128 = 1 is the tile with no previous chunk 3 to retire);
 *   chunk128; serial: the serial promotion forced at every shape (BN 128/192 by its cost model).
 * - direct: the direct store on the TMA-capable shapes too (forge's promotion choice, chunk64, serial, tf32).
 * - tf32 pp / coop: the ping-pong schedule forced (refused where N % 4 != 0: a refusal, not a fallback) / the
 *   cooperative one (forge takes ping-pong at K <= 1024 where C allows the TMA store).
 * - chunk64ra: chunk64 with A from registers (ldmatrix of the swizzled stage, two buffers: a wrong address or a
 *   buffer read before its load shows as a wrong result; K/128 = 1, 3, 5, 8 cover the odd tail and the unrolled
 *   pair).
 * - pipe144, serial144: the pipelined / rotated serial promotion at BN 144 (a 144-column tile: N = 8, 200, 192 one
 *   or two partial column tiles, 999 = 6 x 144 + 135, 1408 = 9 x 144 + 112; serial144 at K/128 = 1: no loop
 *   iteration); pipe144,tma: the TMA store forced (16-column unswizzled staging boxes, 9 per 144-wide tile; where C
 *   does not allow it, the direct store).
 * - The 2-CTA cluster modes (chunk64c2, fastacc,c2, pipe144c2, serial144c2: B multicast; M = 1, 128, 257 leave the
 *   second CTA of the last pair a phantom row-block) run last: a protocol bug there traps (mbarrier timeout) and
 *   takes the CUDA context, so every case after it fails; this keeps the other modes' verdicts.
 */

#include "../../tests_gpu/gemm_fp8_case.h"
#include "gemm_fp8_lab.h"

static forge_status run_lab(const gf8_mode *mode, const void *A, const void *B, void *C, const float *bias, int M,
                            int N, int K, float a_scale, float b_scale) {
    (void)bias;
    if (mode->input == GF8_IN_TF32)
        return lab_gemm_tf32_nt((const float *)A, (const float *)B, (float *)C, M, N, K, (lab_gemm_store)mode->store,
                                (lab_gemm_sched)mode->sched, NULL);
    return lab_gemm_fp8_nt(A, mode->a_e5m2 ? FORGE_FP8_E5M2 : FORGE_FP8_E4M3, B, FORGE_FP8_E4M3, C,
                           mode->out_bf16 ? FORGE_GEMM_OUT_BF16 : FORGE_GEMM_OUT_F32, a_scale, b_scale, M, N, K,
                           (lab_fp8_accum)mode->accum, (lab_gemm_store)mode->store, NULL);
}

/* FP8: an fp8 mode (A e5m2 or e4m3, C bf16 or fp32, lab_fp8_accum, lab_gemm_store); TF32: a tf32 mode
 * (lab_gemm_sched, lab_gemm_store, refused where N % 4 != 0) */
#define FP8(name, tol, e5m2, bf16out, accum, store) \
    {name, tol, GF8_IN_FP8, e5m2, bf16out, 0, 0, 0, run_lab, accum, store, 0}
#define TF32(name, sched, store, tma_only) {name, 1e-5, GF8_IN_TF32, 0, 0, 0, 0, tma_only, run_lab, 0, store, sched}
enum { S_AUTO = LAB_GEMM_STORE_AUTO, S_DIRECT = LAB_GEMM_STORE_DIRECT, S_TMA = LAB_GEMM_STORE_TMA };

enum {
    V_FASTACC, V_PIPE, V_PIPE_E5M2, V_CHUNK64, V_CHUNK64_E5M2, V_CHUNK64_BF16OUT, V_CHUNK128, V_CHUNK128_E5M2,
    V_DIRECT, V_BF16OUT_DIRECT, V_TF32_DIRECT, V_CHUNK64_DIRECT, V_TF32_PP, V_TF32_COOP, V_CHUNK64RA,
    V_CHUNK64RA_E5M2, V_PIPE144, V_PIPE144_E5M2, V_PIPE144_BF16OUT, V_SERIAL144, V_SERIAL144_E5M2, V_PIPE144_TMA,
    V_SERIAL, V_SERIAL_E5M2, V_SERIAL_BF16OUT, V_SERIAL_DIRECT, V_SERIAL_BF16OUT_DIRECT,
    /* the 2-CTA cluster modes: last */
    V_CHUNK64C2, V_CHUNK64C2_E5M2, V_FASTACC_C2, V_PIPE144C2, V_PIPE144C2_E5M2, V_SERIAL144C2,
    V_N_MODES
};
#define V_FIRST_CLUSTER V_CHUNK64C2

static const gf8_mode MODES[V_N_MODES] = {
    [V_FASTACC] = FP8("gemm_fp8[e4m3,fastacc]", 1e-2, 0, 0, LAB_FP8_FAST_ACCUM, S_AUTO),
    [V_PIPE] = FP8("gemm_fp8[e4m3,pipe]", 1e-3, 0, 0, LAB_FP8_PROMOTE_PIPELINED, S_AUTO),
    [V_PIPE_E5M2] = FP8("gemm_fp8[e5m2xe4m3,pipe]", 1e-3, 1, 0, LAB_FP8_PROMOTE_PIPELINED, S_AUTO),
    [V_CHUNK64] = FP8("gemm_fp8[e4m3,chunk64]", 1e-3, 0, 0, LAB_FP8_PROMOTE_CHUNK64, S_AUTO),
    [V_CHUNK64_E5M2] = FP8("gemm_fp8[e5m2xe4m3,chunk64]", 1e-3, 1, 0, LAB_FP8_PROMOTE_CHUNK64, S_AUTO),
    [V_CHUNK64_BF16OUT] = FP8("gemm_fp8[e4m3,bf16out,chunk64]", 1e-2, 0, 1, LAB_FP8_PROMOTE_CHUNK64, S_AUTO),
    [V_CHUNK128] = FP8("gemm_fp8[e4m3,chunk128]", 1e-3, 0, 0, LAB_FP8_PROMOTE_CHUNK128, S_AUTO),
    [V_CHUNK128_E5M2] = FP8("gemm_fp8[e5m2xe4m3,chunk128]", 1e-3, 1, 0, LAB_FP8_PROMOTE_CHUNK128, S_AUTO),
    [V_DIRECT] = FP8("gemm_fp8[e4m3,direct]", 1e-3, 0, 0, LAB_FP8_PROMOTE, S_DIRECT),
    [V_BF16OUT_DIRECT] = FP8("gemm_fp8[e4m3,bf16out,direct]", 1e-2, 0, 1, LAB_FP8_PROMOTE, S_DIRECT),
    [V_TF32_DIRECT] = TF32("gemm_tf32[direct]", LAB_GEMM_SCHED_AUTO, S_DIRECT, 0),
    [V_CHUNK64_DIRECT] = FP8("gemm_fp8[e4m3,chunk64,direct]", 1e-3, 0, 0, LAB_FP8_PROMOTE_CHUNK64, S_DIRECT),
    [V_TF32_PP] = TF32("gemm_tf32[pp]", LAB_GEMM_SCHED_PINGPONG, S_AUTO, 1),
    [V_TF32_COOP] = TF32("gemm_tf32[coop]", LAB_GEMM_SCHED_COOP, S_AUTO, 0),
    [V_CHUNK64RA] = FP8("gemm_fp8[e4m3,chunk64ra]", 1e-3, 0, 0, LAB_FP8_PROMOTE_CHUNK64_RA, S_AUTO),
    [V_CHUNK64RA_E5M2] = FP8("gemm_fp8[e5m2xe4m3,chunk64ra]", 1e-3, 1, 0, LAB_FP8_PROMOTE_CHUNK64_RA, S_AUTO),
    [V_PIPE144] = FP8("gemm_fp8[e4m3,pipe144]", 1e-3, 0, 0, LAB_FP8_PROMOTE_PIPE144, S_AUTO),
    [V_PIPE144_E5M2] = FP8("gemm_fp8[e5m2xe4m3,pipe144]", 1e-3, 1, 0, LAB_FP8_PROMOTE_PIPE144, S_AUTO),
    [V_PIPE144_BF16OUT] = FP8("gemm_fp8[e4m3,bf16out,pipe144]", 1e-2, 0, 1, LAB_FP8_PROMOTE_PIPE144, S_AUTO),
    [V_SERIAL144] = FP8("gemm_fp8[e4m3,serial144]", 1e-3, 0, 0, LAB_FP8_PROMOTE_SERIAL144, S_AUTO),
    [V_SERIAL144_E5M2] = FP8("gemm_fp8[e5m2xe4m3,serial144]", 1e-3, 1, 0, LAB_FP8_PROMOTE_SERIAL144, S_AUTO),
    [V_PIPE144_TMA] = FP8("gemm_fp8[e4m3,pipe144,tma]", 1e-3, 0, 0, LAB_FP8_PROMOTE_PIPE144, S_TMA),
    [V_SERIAL] = FP8("gemm_fp8[e4m3,serial]", 1e-3, 0, 0, LAB_FP8_PROMOTE_SERIAL, S_AUTO),
    [V_SERIAL_E5M2] = FP8("gemm_fp8[e5m2xe4m3,serial]", 1e-3, 1, 0, LAB_FP8_PROMOTE_SERIAL, S_AUTO),
    [V_SERIAL_BF16OUT] = FP8("gemm_fp8[e4m3,bf16out,serial]", 1e-2, 0, 1, LAB_FP8_PROMOTE_SERIAL, S_AUTO),
    [V_SERIAL_DIRECT] = FP8("gemm_fp8[e4m3,serial,direct]", 1e-3, 0, 0, LAB_FP8_PROMOTE_SERIAL, S_DIRECT),
    [V_SERIAL_BF16OUT_DIRECT] = FP8("gemm_fp8[e4m3,bf16out,serial,direct]", 1e-2, 0, 1, LAB_FP8_PROMOTE_SERIAL,
                                    S_DIRECT),
    [V_CHUNK64C2] = FP8("gemm_fp8[e4m3,chunk64c2]", 1e-3, 0, 0, LAB_FP8_PROMOTE_CHUNK64_C2, S_AUTO),
    [V_CHUNK64C2_E5M2] = FP8("gemm_fp8[e5m2xe4m3,chunk64c2]", 1e-3, 1, 0, LAB_FP8_PROMOTE_CHUNK64_C2, S_AUTO),
    [V_FASTACC_C2] = FP8("gemm_fp8[e4m3,fastacc,c2]", 1e-2, 0, 0, LAB_FP8_FAST_ACCUM_C2, S_AUTO),
    [V_PIPE144C2] = FP8("gemm_fp8[e4m3,pipe144c2]", 1e-3, 0, 0, LAB_FP8_PROMOTE_PIPE144_C2, S_AUTO),
    [V_PIPE144C2_E5M2] = FP8("gemm_fp8[e5m2xe4m3,pipe144c2]", 1e-3, 1, 0, LAB_FP8_PROMOTE_PIPE144_C2, S_AUTO),
    [V_SERIAL144C2] = FP8("gemm_fp8[e4m3,serial144c2]", 1e-3, 0, 0, LAB_FP8_PROMOTE_SERIAL144_C2, S_AUTO),
};

/* The base shapes for modes [first, last) */
static void run_shapes(parity *P, int first, int last) {
    for (int i = 0; i < GF8_N_SHAPES; i++) {
        if (gf8_shape_skipped(P, i)) continue;
        for (int m = first; m < last; m++)
            gf8_case(P, &MODES[m], GF8_SHAPES[i][0], GF8_SHAPES[i][1], GF8_SHAPES[i][2]);
    }
}

int lab_test_gemm_fp8(int argc, char **argv) {
    parity P;
    if (gf8_cli_begin(&P, argc, argv, "forge-lab test gemm-fp8", "lab gemm-fp8 variants") != 0) return 2;
    run_shapes(&P, 0, V_FIRST_CLUSTER);
    /* tf32 ping-pong forced, several 128 x 128 tiles per warpgroup (512 / 520 tiles on 132 SMs) and ktiles = 4 (not
     * a multiple of the 6 stages): the ring slots and parities each warpgroup computes for its alternate tiles, and
     * the order barriers, over many turns; 4100 rows leave a partial last row-block */
    gf8_case(&P, &MODES[V_TF32_PP], 4096, 1024, 100);
    if (!P.quick) gf8_case(&P, &MODES[V_TF32_PP], 4100, 1040, 128);
    /* the 144-wide promotions over many tiles per CTA: 17 x 11 = 187 tiles of 128 x 144 on 132 SMs, 9 K-tiles (odd:
     * the tail stage; K % 128 = 16) against 6 stages, so the ring's slots and parities carry across tiles; the last
     * column tile is 60 wide */
    if (!P.quick) {
        gf8_case(&P, &MODES[V_PIPE144], 2176, 1500, 1040);
        gf8_case(&P, &MODES[V_SERIAL144], 2176, 1500, 1040);
        gf8_case(&P, &MODES[V_PIPE144_TMA], 2176, 1500, 1040);
    }
    /* BN 192: the serial promotion's cost model takes 192 at M=5760 N=384 with 132 SMs (135 tiles of 128 = 2
     * waves, 90 of 192 = 1), whose TMA epilogue has 4 stages and, with bf16 out, an odd box count per tile (3); both
     * epilogues, both stores; and forge's choice (chunk64 there) with the direct store */
    if (!P.quick) {
        static const int modes192[] = {V_SERIAL, V_SERIAL_BF16OUT, V_SERIAL_DIRECT, V_SERIAL_BF16OUT_DIRECT, V_DIRECT,
                                       V_BF16OUT_DIRECT};
        for (size_t j = 0; j < sizeof modes192 / sizeof modes192[0]; j++)
            gf8_case(&P, &MODES[modes192[j]], 5760, 384, 128);
    }
    /* the 2-CTA cluster modes last (see the top of the file) */
    run_shapes(&P, V_FIRST_CLUSTER, V_N_MODES);
    /* the same many-tile shape on 2-CTA clusters: 17 row-blocks, so the last pair's second CTA is a phantom */
    if (!P.quick) {
        gf8_case(&P, &MODES[V_PIPE144C2], 2176, 1500, 1040);
        gf8_case(&P, &MODES[V_SERIAL144C2], 2176, 1500, 1040);
    }
    return gf8_cli_end(&P);
}
