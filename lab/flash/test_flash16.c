/*
 * test_flash16.c: `forge-lab test flash16 [--quick]`: the variants of forge's
 * bf16 flash attention (flash16_variants.h) against the float64 reference, at
 * the shapes and with the tolerances of tests_gpu/test_flash16_kernels.c (the
 * fixture tests_gpu/flash16_fixture.h). Per shape, on the same inputs:
 * - flash16_forward_q128.*: the mma.sync forward with 128 query rows;
 * - flash16_forward_wgmma_{ov,pp,ps,pso,pp128,ps128}.*: the wgmma forward's
 *   overlap / pingpong / persist / persist_ov / pingpong_n128 / persist_n128
 *   schedules (base is forge's: tests_gpu's flash16_forward_wgmma.*);
 * - flash16_backward_wgmma_{split,dkp,pq}.*: the wgmma backward with each
 *   dK/dV variant named (split: the unpipelined D = 128 dK/dV kernel; dkp: the
 *   pipelined one, D = 128 only; pq: that and, at D = 64, the pipelined dQ
 *   kernel), on the out and lse of the mma.sync forward. A refusal
 *   (FORGE_ERR_UNSUPPORTED) is a failure: every shape here is one the wgmma
 *   kernels must take on sm_90.
 * And a pingpong call with a head dim that has no tile must be refused. The
 * fused backward, forge's default at D = 64, is tested with the product's kernels
 * (tests_gpu/test_flash16_kernels.c).
 * --quick drops the shapes with Tq > 300. Ends with "N passed, N failed";
 * exit status 1 on any failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tests_gpu/flash16_fixture.h"
#include "flash_lab.h"
#include "flash16_variants.h"


static void case_variants(parity *P, int B, int Tq, int Tk, int H, int Hkv, int D, int packed) {
    fa_case c;
    if (!fa_case_init(P, &c, B, Tq, Tk, H, Hkv, D, packed)) {
        fa_case_free(P, &c);
        return;
    }
    /* the forward variants: the 8-warp mma.sync one (q_rows = 128) and the wgmma one in each schedule but base */
    static const char *const fwd_name[7] = {"flash16_forward_q128",      "flash16_forward_wgmma_ov",
                                            "flash16_forward_wgmma_pp",  "flash16_forward_wgmma_ps",
                                            "flash16_forward_wgmma_pso", "flash16_forward_wgmma_pp128",
                                            "flash16_forward_wgmma_ps128"};
    static const int fwd_sched[7] = {-1,
                                     LAB_FLASH16_SCHED_OVERLAP,
                                     LAB_FLASH16_SCHED_PINGPONG,
                                     LAB_FLASH16_SCHED_PERSIST,
                                     LAB_FLASH16_SCHED_PERSIST_OV,
                                     LAB_FLASH16_SCHED_PINGPONG_N128,
                                     LAB_FLASH16_SCHED_PERSIST_N128};
    for (int var = 0; var < 7; var++) {
        fa_fwd_out o = {0};
        forge_status st = FORGE_ERR_OOM;
        if (fa_case_fwd_out(P, &c, &o))
            st = var == 0 ? lab_flash16_forward_q128(&c.fs, c.q, c.k, c.v, o.out, o.lse, c.stream)
                          : lab_flash16_forward_sched(&c.fs, c.q, c.k, c.v, o.out, o.lse, fwd_sched[var], c.stream);
        fa_case_check_fwd(P, &c, fwd_name[var], st, &o);
    }

    /* the backward variants on the mma.sync forward's out and lse */
    forge_status st = fa_case_forward_mma(P, &c);
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    if (st != FORGE_OK) {
        fa_case_failed(P, &c, "flash16_forward_mma (the backward cases' out, lse)", st);
        fa_case_free(P, &c);
        return;
    }
    static const int bwd_var[3] = {LAB_FLASH16_DKDV_SPLIT, LAB_FLASH16_DKDV_PIPE, LAB_FLASH16_DKDV_PIPE_DQ};
    static const char *const bwd_name[3] = {"flash16_backward_wgmma_split", "flash16_backward_wgmma_dkp",
                                            "flash16_backward_wgmma_pq"};
    for (int var = 0; var < 3; var++) {
        if (var == 1 && D != 128) continue; /* D = 64 has one dK/dV kernel */
        fa_bwd_out o = {0};
        st = fa_case_bwd_out(P, &c, &o) ? lab_flash16_backward_dkdv(&c.fs, c.q, c.k, c.v, c.gout, c.gdo, c.glse,
                                                                    o.delta, o.dq, o.dk, o.dv, bwd_var[var], c.stream)
                                        : FORGE_ERR_OOM;
        fa_case_check_bwd(P, &c, bwd_name[var], st, &o);
    }
    fa_case_free(P, &c);
}

int lab_test_flash16(int argc, char **argv) {
    parity P;
    memset(&P, 0, sizeof P);
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            P.quick = 1;
        } else {
            fprintf(stderr, "usage: forge-lab test flash16 [--quick]\n");
            return 2;
        }
    }
    forge_rng_seed(&P.rng, 1234, 7);
    if (forge_backend_create(&P.gpu, FORGE_DEVICE_CUDA, NULL) != FORGE_OK) {
        printf("cannot create the CUDA backend: %s\n0 passed, 1 failed\n", forge_error_message());
        return 1;
    }
    printf("lab flash16 variants%s\n", P.quick ? " (quick shapes)" : "");
    for (size_t i = 0; i < sizeof FA_CASE_SHAPES / sizeof FA_CASE_SHAPES[0]; i++) {
        const int *s = FA_CASE_SHAPES[i];
        if (P.quick && s[1] > 300) continue;
        case_variants(&P, s[0], s[1], s[2], s[3], s[4], s[5], s[6]);
    }
    forge_flash_shape fs = fa_refuse_shape();
    static __attribute__((aligned(16))) char dummy[16];
    fa_expect_refusal(&P, "flash16_forward_wgmma_pp.refuse",
                      lab_flash16_forward_sched(&fs, dummy, dummy, dummy, dummy, (float *)dummy,
                                                LAB_FLASH16_SCHED_PINGPONG, NULL));
    forge_backend_destroy(P.gpu);
    printf("%d passed, %d failed\n", P.passed, P.failed);
    return P.failed ? 1 : 0;
}
