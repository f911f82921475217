/*
 * gemm_bf16_bench.cu: `forge-lab bench gemm-bf16-variants`: the bf16 wgmma GEMM's variants (gemm_bf16_variants.h)
 * timed in the groups of `forge bench gemm` (src/bench/cuda/gemm_bench_cells.h), next to that suite's own cells
 * of the group (cuBLAS and forge's default), so each variant is A/B'd against the default in the same run.
 *
 * - Plain groups: every TN (dW) shape with the split reductions and tiles (forge_wgmma_bf16_<mode>: pass,
 *   fixup (= inkernel), streamk, pass_tma, t192, c192, model192; with --tn-splits S also pass_tma at S splits,
 *   forge_wgmma_bf16_splits<S>), and every plain NT shape whose C takes the TMA store with the cooperative kernel
 *   (forge_wgmma_bf16_coop: forge_gemm_bf16_nt_epi, which the default forge_gemm_bf16_nt_wgmma no longer runs
 *   there: it takes the ping-pong kernel).
 * - Epilogue groups: the fused epilogues with the direct store forced where the library takes the TMA store (the
 *   cell names `forge bench gemm` used for them when the store was a caller's flag: forge_fused_bias_gelu,
 *   forge_bf16_out, forge_nn_fused_gelu_bwd, forge_direct_store, ...), and the dW C += with the in-kernel
 *   reduction and stream-K (forge_wgmma_bf16_acc_fixup, _acc_streamk).
 * Options: --reps N (default 10, raised to 30 by the harness), --quick (only the shapes with M*N <= 2^21),
 * --tn-splits S (1..32), --results DIR, --order sequential|interleaved, --only "pat1|pat2" (the cells whose
 * "name@group" contains a pattern, as `forge bench --only`). Writes
 * <results>/<date>_<commit>/gemm_bf16_variants*.csv.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/bench/cuda/gemm_bench_cells.h"

extern "C" {
#include "gemm_bf16_variants.h"
}

static int g_quick, g_tn_splits;
static char g_splits_name[48];

/* gc_cell.kind of the lab's plain cells: a TN mode (LB_TN + lab_gemm_tn_reduce), the forced splits, or the
 * cooperative NT kernel */
enum { LB_TN = GB_KIND_SUITE, LB_TN_SPLITS = LB_TN + LAB_GEMM_TN_N_MODES, LB_COOP };

static forge_status lb_tn_workspace(int M, int N, int K, size_t *bytes) {
    return lab_gemm_bf16_tn_workspace(M, N, K, g_tn_splits, bytes);
}

static int lb_small(int M, int N) { return (size_t)M * N <= ((size_t)1 << 21); }

/* ---- plain groups ---- */

static forge_status lb_run(void *ctx, int set) {
    gc_cell *c = (gc_cell *)ctx;
    if (c->kind < GB_KIND_SUITE) return gb_run(ctx, set);
    gc_shape *sh = c->sh;
    const void *A = sh->A[set % sh->n_sets], *B = sh->B[set % sh->n_sets];
    if (c->kind == LB_COOP) return forge_gemm_bf16_nt_epi(A, B, sh->C, sh->M, sh->N, sh->K, NULL, sh->stream, 0);
    const int forced = c->kind == LB_TN_SPLITS;
    const lab_gemm_tn_reduce mode = forced ? LAB_GEMM_TN_PASS_TMA : (lab_gemm_tn_reduce)(c->kind - LB_TN);
    return lab_gemm_bf16_tn_reduce(A, B, sh->C, sh->M, sh->N, sh->K, 0, sh->work, sh->work_bytes, mode,
                                   forced ? g_tn_splits : 0, sh->stream);
}

/* an NT product whose C the TMA store takes: the default runs the ping-pong kernel there */
static int lb_nt_coop(const gb_shape_spec *sp) {
    return sp->layout == GB_NT && !sp->bias && !sp->odd && sp->N % 4 == 0;
}

static int lb_plain_wants(const gb_shape_spec *sp) {
    if (g_quick && !lb_small(sp->M, sp->N)) return 0;
    return sp->layout == GB_TN || lb_nt_coop(sp);
}

static int lb_plain_cells(const gb_shape_spec *sp, gc_shape *sh, gb_cell_spec *out) {
    static const struct {
        lab_gemm_tn_reduce mode;
        const char *name;
    } tn[] = {{LAB_GEMM_TN_INKERNEL, "forge_wgmma_bf16_fixup"},   {LAB_GEMM_TN_STREAMK, "forge_wgmma_bf16_streamk"},
              {LAB_GEMM_TN_PASS_TMA, "forge_wgmma_bf16_pass_tma"}, {LAB_GEMM_TN_PASS_T192, "forge_wgmma_bf16_t192"},
              {LAB_GEMM_TN_PASS_C192, "forge_wgmma_bf16_c192"},   {LAB_GEMM_TN_PASS, "forge_wgmma_bf16_pass"},
              {LAB_GEMM_TN_MODEL192, "forge_wgmma_bf16_model192"}};
    int n = gb_cells_default(sp, sh, out);
    if (sp->layout == GB_TN) {
        for (size_t i = 0; i < sizeof tn / sizeof tn[0]; i++)
            out[n].cell = gc_cell{sh, LB_TN + (int)tn[i].mode, 0, 0}, out[n].name = tn[i].name, out[n++].baseline = 0;
        if (g_tn_splits > 0)
            out[n].cell = gc_cell{sh, LB_TN_SPLITS, 0, 0}, out[n].name = g_splits_name, out[n++].baseline = 0;
    } else {
        out[n].cell = gc_cell{sh, LB_COOP, 0, 0}, out[n].name = "forge_wgmma_bf16_coop", out[n++].baseline = 0;
    }
    return n;
}

/* ---- epilogue groups ---- */

/* the fused epilogue with the direct store forced */
static forge_status lb_ge_direct(const ge_cell *c, int set) {
    gc_shape *sh = c->sh;
    const void *A = sh->A[set % sh->n_sets], *B = sh->B[set % sh->n_sets];
    const forge_gemm_epilogue e = ge_epilogue(c);
    if (sh->b_mn) return lab_gemm_bf16_nn_epi_store(A, B, sh->C, sh->M, sh->N, sh->K, &e, 0, sh->stream);
    return lab_gemm_bf16_nt_epi_store(A, B, sh->C, sh->M, sh->N, sh->K, &e, 0, sh->stream);
}

/* dW C += with the reduction c->tma (a lab_gemm_tn_reduce) */
static forge_status lb_ge_tn_acc(const ge_cell *c, int set) {
    gc_shape *sh = c->sh;
    const void *A = sh->A[set % sh->n_sets], *B = sh->B[set % sh->n_sets];
    return lab_gemm_bf16_tn_reduce(A, B, sh->C, sh->M, sh->N, sh->K, 1, sh->work, sh->work_bytes,
                                   (lab_gemm_tn_reduce)c->tma, 0, sh->stream);
}

/* The lab's epilogue cells by group kind (layout -1: either). Direct-store rows: added where the library takes the
 * TMA store for the row's epilogue (elsewhere the direct store is the default, which `forge bench gemm` times). */
typedef struct {
    ge_group_kind kind;
    int layout;
    const char *name;
    int bias, gelu, pre, dgelu, bf16;
    int tn_mode; /* > 0: the dW C += cell of that reduction instead */
} lb_epi_row;

static const lb_epi_row LB_EPI_ROWS[] = {
    {GE_G_BIAS_GELU, -1, "forge_fused_bias_gelu", 1, 1, 0, 0, 0, 0},
    {GE_G_BIAS_GELU, -1, "forge_fused_bias_gelu_pre", 1, 1, 1, 0, 0, 0},
    {GE_G_BIAS_GELU, -1, "forge_fused_bias_gelu_bf16", 1, 1, 0, 0, 1, 0},
    {GE_G_BIAS_GELU, -1, "forge_fused_bias_gelu_pre_bf16", 1, 1, 1, 0, 1, 0},
    {GE_G_BF16, -1, "forge_fp32_out", 0, 0, 0, 0, 0, 0},
    {GE_G_BF16, -1, "forge_bf16_out", 0, 0, 0, 0, 1, 0},
    {GE_G_BF16, -1, "forge_bf16_out_bias", 1, 0, 0, 0, 1, 0},
    {GE_G_DGELU, -1, "forge_nn_fused_gelu_bwd", 0, 0, 0, 1, 0, 0},
    {GE_G_STORE, -1, "forge_direct_store", 0, 0, 0, 0, 0, 0},
    {GE_G_EDGE, GB_NN, "forge_nn_fused_gelu_bwd", 0, 0, 0, 1, 0, 0},
    {GE_G_EDGE, GB_NT, "forge_fused_bias_gelu", 1, 1, 0, 0, 0, 0},
    {GE_G_ACC, GB_TN, "forge_wgmma_bf16_acc_fixup", 0, 0, 0, 0, 0, LAB_GEMM_TN_INKERNEL},
    {GE_G_ACC, GB_TN, "forge_wgmma_bf16_acc_streamk", 0, 0, 0, 0, 0, LAB_GEMM_TN_STREAMK},
};

static int lb_epi_wants(const ge_group_spec *g) {
    for (size_t i = 0; i < sizeof LB_EPI_ROWS / sizeof LB_EPI_ROWS[0]; i++)
        if (LB_EPI_ROWS[i].kind == g->kind && (LB_EPI_ROWS[i].layout < 0 || LB_EPI_ROWS[i].layout == (int)g->layout))
            return 1;
    return 0;
}

/* the group's cells of `forge bench gemm`, then the lab's; none (the group is skipped) if no lab cell applies */
static int lb_epi_cells(const ge_group_spec *g, gc_shape *sh, struct ge_bufs *b, ge_cell_spec *out) {
    int n = ge_cells_default(g, sh, b, out);
    const int n_default = n;
    for (size_t i = 0; i < sizeof LB_EPI_ROWS / sizeof LB_EPI_ROWS[0] && n < GE_MAX_CELLS; i++) {
        const lb_epi_row *r = &LB_EPI_ROWS[i];
        if (r->kind != g->kind || (r->layout >= 0 && r->layout != (int)g->layout)) continue;
        ge_cell c;
        memset(&c, 0, sizeof c);
        c.sh = sh, c.b = b, c.kind = GE_SUITE;
        if (r->tn_mode > 0) {
            c.acc = 1, c.tma = r->tn_mode, c.suite_run = lb_ge_tn_acc;
        } else {
            c.bias = r->bias, c.gelu = r->gelu, c.pre = r->pre, c.dgelu = r->dgelu, c.bf16 = r->bf16;
            c.suite_run = lb_ge_direct;
            const forge_gemm_epilogue e = ge_epilogue(&c);
            if (strcmp(forge_gemm_bf16_epi_store(sh->b_mn, sh->C, sh->N, &e), "tma") != 0) continue; /* direct: the default */
        }
        out[n].cell = c, out[n].name = r->name, out[n++].baseline = 0;
    }
    return n > n_default ? n : 0;
}

/* ---- the command ---- */

static int lb_usage(void) {
    fputs("usage: forge-lab bench gemm-bf16-variants [--reps N] [--quick] [--tn-splits S] [--results DIR]\n"
          "                                          [--order sequential|interleaved] [--only PATTERNS]\n",
          stderr);
    return 2;
}

extern "C" int lab_bench_gemm_bf16_variants(int argc, char **argv) {
    int reps = 10;
    g_quick = 0, g_tn_splits = 0;
    const char *order = NULL;
    for (int i = 0; i < argc; i++) {
        const int has = i + 1 < argc;
        if (strcmp(argv[i], "--quick") == 0) {
            g_quick = 1;
        } else if (strcmp(argv[i], "--reps") == 0 && has) {
            reps = atoi(argv[++i]);
            if (reps < 1) return lb_usage();
        } else if (strcmp(argv[i], "--tn-splits") == 0 && has) {
            g_tn_splits = atoi(argv[++i]);
            if (g_tn_splits < 1 || g_tn_splits > 32) return lb_usage();
        } else if (strcmp(argv[i], "--results") == 0 && has) {
            forge_harness_set_default_root(argv[++i]);
        } else if (strcmp(argv[i], "--order") == 0 && has) {
            order = argv[++i];
        } else if (strcmp(argv[i], "--only") == 0 && has) {
            forge_harness_set_cell_filter(argv[++i]);
        } else {
            return lb_usage();
        }
    }
    if (order != NULL) {
        forge_timing_order o;
        const forge_status s = forge_timing_order_parse(order, &o);
        if (s != FORGE_OK) {
            fprintf(stderr, "forge-lab: %s\n", forge_error_message());
            return 2;
        }
        forge_harness_set_default_order(o);
    }
    snprintf(g_splits_name, sizeof g_splits_name, "forge_wgmma_bf16_splits%d", g_tn_splits);
    char head[160], config[4096];
    snprintf(head, sizeof head, "gemm bf16 variants (lab) tn_splits=%d quick=%d; ", g_tn_splits, g_quick);
    gb_config_text(config, sizeof config, head, 1);
    gc_session ss;
    forge_status s = gc_session_open(
        &ss, stdout, "gemm_bf16_variants", config, GB_RECIPE, 20260505, reps, "gemm-bf16-variants",
        "gemm-bf16-variants: the bf16 wgmma GEMM's variants (dW split reductions and tiles, the cooperative NT "
        "kernel, fused epilogues with the direct store forced) next to `forge bench gemm`'s cells of the same "
        "groups; gate: relative Frobenius error vs a float64 GEMM of the same bf16 inputs + poison count");
    const gb_plain_suite plain = {lb_tn_workspace, lb_plain_wants, lb_plain_cells, lb_run};
    const ge_suite epi = {lb_tn_workspace, lb_epi_wants, lb_epi_cells};
    if (s == FORGE_OK) s = gb_plain_groups(&ss, &plain);
    if (s == FORGE_OK) s = ge_epi_groups(&ss, g_quick, &epi);
    s = gc_session_close(&ss, s);
    if (s != FORGE_OK) {
        fprintf(stderr, "forge-lab bench gemm-bf16-variants: %s\n", forge_error_message());
        return 1;
    }
    return 0;
}
