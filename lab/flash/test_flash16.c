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
 *   kernel), on the out and lse of the mma.sync forward; .bits: bitwise the
 *   three-kernel backward's (lab_flash16_backward_three; forge runs the fused
 *   kernel). A refusal
 *   (FORGE_ERR_UNSUPPORTED) is a failure: every shape here is one the wgmma
 *   kernels must take on sm_90.
 * - flash16_backward_fused_s{0,1,2,3}.*: the fused backward (split rule, S forced
 *   to 1, 2, 3) at its own shapes (FZ_SHAPES) against float64 and against
 *   forge_flash_bf16_backward_wgmma, and bitwise equal over two runs;
 *   flash16_backward_fused2_s{0,1,2,3}.*: the same for its TMA reduce-add
 *   variant (lab_flash16_backward_fused2*).
 * - flash16_forward_1cta.*: the one-CTA-per-SM forward without the softmax /
 *   P.V overlap (lab_flash16_forward_1cta) on every shape above.
 * - flash16_forward_wgmma.*: forge's forward on FW64_SHAPES (a warpgroup or a
 *   CTA with no visible key, GQA with a tail tile, several ring rounds; its
 *   occupancy is checked by forge_gpu_tests --only flash16),
 *   flash16_forward_wgmma.walk: the D = 128 forward's
 *   persistent walk (paired units, then the tail's items one by one) bitwise
 *   the same kernel on one CTA per query tile, at two shapes of 480-512 units.
 * - flash16_backward_2cta_{dq64,dq32}.*: the two-CTA-per-SM backward
 *   (lab_flash16_backward_2cta with fb2_dkdv_kernel and fb2_dq_kernel<64> or
 *   <32>) on every D = 64 shape above (FA_CASE_SHAPES, FZ_SHAPES, FW64_SHAPES)
 *   and its own (BW2_SHAPES: GQA 4:1 packed with odd T, Tq < Tk),
 *   on the mma.sync forward's out and lse: .{dq,dk,dv} against float64,
 *   .{dq,dk,dv}[wgmma] against the three-kernel backward, .determinism
 *   (a second run bitwise equal); at D = 128 flash16_backward_2cta.refuse
 *   (FORGE_ERR_UNSUPPORTED); flash16_backward_2cta_{dq64,dq32,dkdv}.occupancy:
 *   2 CTAs per SM.
 * - flash16_backward_3wg.*: the three-consumer backward (lab_flash16_backward_3wg,
 *   fb3_dq_kernel + fb3_dkdv_kernel) on the same shapes: against float64,
 *   .{dq,dk,dv}[wgmma bits] bitwise the three-kernel backward's, .determinism;
 *   at D = 128 flash16_backward_3wg.refuse.
 * - flash16_backward_fused128_{asc,desc}.*: forge's fused D = 128 backward
 *   with the key blocks' launch order forced (lab_flash16_backward_fused128_order)
 *   on the D = 128 shapes of FA_CASE_SHAPES: against float64, .{dq,dk,dv}[wgmma
 *   bits] bitwise forge's (which picks one of the two), .determinism; at D = 64
 *   flash16_backward_fused128.refuse. flash16_backward_three.*: the three-kernel
 *   backward (the dQ and dK/dV kernels, lab_flash16_backward_three), the fused
 *   one's reference, at D = 64 and 128: against float64, .{dk,dv}[wgmma bits]
 *   bitwise the baseline's.
 * - flash16_backward_fused64_{asc,desc}.*: the fused backward's D = 64 instance
 *   (lab_flash16_backward_fused64, ff_bwd_kernel<64>) with the key blocks' launch
 *   order forced, on every D = 64 shape above: against float64,
 *   .{dk,dv}[wgmma bits] bitwise the three-kernel backward's (the same dK/dV
 *   tile, fb_dkdv_kernel<64, 1>'s), .dq[wgmma] within tolerance, .determinism; at
 *   D = 128 flash16_backward_fused64.refuse.
 * And a pingpong call with a head dim that has no tile must be refused, and
 * both fused backwards at D = 128, and the two-CTA backward asked for both dQ
 * kernels, the three-consumer backward an unknown kernel bit and the fused D = 64
 * backward an unknown order or a short workspace (FORGE_ERR_ARG).
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


/* The one-CTA forward without the softmax / P.V overlap (lab_flash16_forward_1cta: what forge ran before its
 * two-CTA kernel at D = 64 and its scheduled kernel at D = 128) at c's shape: flash16_forward_1cta.{out,lse}
 * against float64 */
static void check_fwd_1cta(parity *P, fa_case *c) {
    fa_fwd_out o = {0};
    forge_status st = FORGE_ERR_OOM;
    if (fa_case_fwd_out(P, c, &o)) st = lab_flash16_forward_1cta(&c->fs, c->q, c->k, c->v, o.out, o.lse, c->stream);
    fa_case_check_fwd(P, c, "flash16_forward_1cta", st, &o);
}

/* forge's wgmma forward (forge_flash_bf16_forward_wgmma; two CTAs per SM at D = 64, the scheduled kernel at
 * D = 128) at c's shape:
 * flash16_forward_wgmma.{out,lse} against float64 */
static void check_fwd_forge(parity *P, fa_case *c) {
    fa_fwd_out o = {0};
    forge_status st = FORGE_ERR_OOM;
    if (fa_case_fwd_out(P, c, &o))
        st = forge_flash_bf16_forward_wgmma(&c->fs, c->q, c->k, c->v, o.out, o.lse, c->stream, 0);
    fa_case_check_fwd(P, c, "flash16_forward_wgmma", st, &o);
}

static void check_bwd_variants(parity *P, fa_case *c);
static void check_dkdv_variants(parity *P, fa_case *c);

/* flash16_forward_wgmma.walk: forge's D = 128 forward (persistent CTAs walking fw_walk's items: paired units to
 * U0, then the tail's items one by one) bitwise the same kernel on one CTA per query tile (the lab's PINGPONG_N128
 * schedule), at shapes with more than two rounds of units, so that both parts of the walk run (no float64
 * reference: the per-item arithmetic is the same, the walk only decides which CTA runs an item). */
static void check_walk_bits(parity *P, int B, int T, int H, int Hkv) {
    char shape[64];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d Hkv=%d D=128", B, T, H, Hkv);
    const int D = 128;
    const size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * Hkv * D, nl = (size_t)B * H * T;
    uint16_t *h = malloc((nq > nk ? nq : nk) * 2);
    void *g[3] = {NULL, NULL, NULL}, *out[2] = {NULL, NULL}, *lse[2] = {NULL, NULL};
    int ok = h != NULL;
    for (int t = 0; ok && t < 3; t++) {
        const size_t n = t == 0 ? nq : nk;
        for (size_t i = 0; i < n; i++) h[i] = f2bf(rand_range(P, -1.5f, 1.5f));
        ok = (g[t] = fa_dev(P, n * 2, h, 0)) != NULL;
    }
    for (int w = 0; ok && w < 2; w++)
        ok = (out[w] = fa_dev(P, nq * 2, NULL, 0xff)) != NULL && (lse[w] = fa_dev(P, nl * 4, NULL, 0xff)) != NULL;
    forge_status st = ok ? FORGE_OK : FORGE_ERR_OOM;
    const forge_flash_shape fs = {B, T, T, H, Hkv, D, (long long)H * D, (long long)Hkv * D, (long long)Hkv * D,
                                  (long long)H * D};
    void *stream = forge_cuda_backend_stream(P->gpu);
    if (st == FORGE_OK) st = forge_flash_bf16_forward_wgmma(&fs, g[0], g[1], g[2], out[0], lse[0], stream, 0);
    if (st == FORGE_OK)
        st = lab_flash16_forward_sched(&fs, g[0], g[1], g[2], out[1], lse[1], LAB_FLASH16_SCHED_PINGPONG_N128,
                                       stream);
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    size_t diff = 0, bad = 0;
    for (int part = 0; st == FORGE_OK && part < 2; part++) {
        const size_t n = part == 0 ? nq : nl;
        size_t gb[2] = {0, 0};
        float *a = fa_fetch(P, part == 0 ? out[0] : lse[0], n, part == 0, &gb[0]);
        float *b = fa_fetch(P, part == 0 ? out[1] : lse[1], n, part == 0, &gb[1]);
        if (!a || !b) st = FORGE_ERR_DEVICE;
        for (size_t i = 0; a && b && i < n; i++)
            if (memcmp(&a[i], &b[i], sizeof(float)) != 0) diff++;
        bad += gb[0] + gb[1];
        free(a);
        free(b);
    }
    char why[160];
    if (st != FORGE_OK)
        snprintf(why, sizeof why, "(%s: %s)", forge_status_name(st), forge_error_message());
    else
        snprintf(why, sizeof why, "(%zu of out and lse differ, %zu guard words overwritten)", diff, bad);
    report(P, st == FORGE_OK && diff == 0 && bad == 0, "flash16_forward_wgmma.walk", shape, (double)diff, 0,
           st == FORGE_OK && diff == 0 && bad == 0 ? NULL : why);
    for (int t = 0; t < 3; t++)
        if (g[t]) P->gpu->mem_free(P->gpu, g[t]);
    for (int w = 0; w < 2; w++) {
        if (out[w]) P->gpu->mem_free(P->gpu, out[w]);
        if (lse[w]) P->gpu->mem_free(P->gpu, lse[w]);
    }
    free(h);
}

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
    check_fwd_1cta(P, &c);

    /* the backward variants on the mma.sync forward's out and lse */
    forge_status st = fa_case_forward_mma(P, &c);
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    if (st != FORGE_OK) {
        fa_case_failed(P, &c, "flash16_forward_mma (the backward cases' out, lse)", st);
        fa_case_free(P, &c);
        return;
    }
    check_dkdv_variants(P, &c);
    check_bwd_variants(P, &c);
    fa_case_free(P, &c);
}

/* The fused backward's outputs of one run, fetched to the host (dq, dk, dv); NULL members on a failed copy. */
typedef struct {
    float *g[3];
} fz_host;

static void fz_host_free(fz_host *h) {
    for (int i = 0; i < 3; i++) free(h->g[i]);
    memset(h, 0, sizeof *h);
}

/* Fetches o's dq, dk, dv into h; 0 (reported under name) on a failed copy or an overwritten guard. */
static int fz_fetch(parity *P, const fa_case *c, const char *name, const fa_bwd_out *o, fz_host *h) {
    const void *g[3] = {o->dq, o->dk, o->dv};
    const size_t n[3] = {c->no, c->nkv, c->nkv};
    memset(h, 0, sizeof *h);
    for (int i = 0; i < 3; i++) {
        size_t bad = 0;
        h->g[i] = fa_fetch(P, g[i], n[i], 0, &bad);
        if (!h->g[i] || bad) {
            report(P, 0, name, c->shape, INFINITY, 0, h->g[i] ? "(guard floats overwritten)" : "(copy back failed)");
            fz_host_free(h);
            return 0;
        }
    }
    return 1;
}

static void fz_free_out(parity *P, fa_bwd_out *o) {
    void *g[4] = {o->dq, o->dk, o->dv, o->delta};
    for (int i = 0; i < 4; i++)
        if (g[i]) P->gpu->mem_free(P->gpu, g[i]);
    memset(o, 0, sizeof *o);
}

/* forge_flash_bf16_backward_wgmma on c's inputs (three: the three-kernel backward instead,
 * lab_flash16_backward_three), fetched into h (what names it in a failure); 1 when h holds it,
 * else 0 with h empty (fz_host_free is safe either way). */
static int fz_bwd_ref(parity *P, fa_case *c, int three, const char *what, fz_host *h) {
    memset(h, 0, sizeof *h);
    fa_bwd_out o = {0};
    forge_status st = FORGE_ERR_OOM;
    if (fa_case_bwd_out(P, c, &o))
        st = three ? lab_flash16_backward_three(&c->fs, c->q, c->k, c->v, c->gout, c->gdo, c->glse,
                                                               o.delta, o.dq, o.dk, o.dv, c->stream)
                                  : forge_flash_bf16_backward_wgmma(&c->fs, c->q, c->k, c->v, c->gout, c->gdo,
                                                                    c->glse, o.delta, o.dq, o.dk, o.dv, c->stream);
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    if (st != FORGE_OK) fa_case_failed(P, c, what, st);
    const int ok = st == FORGE_OK && fz_fetch(P, c, what, &o, h);
    fz_free_out(P, &o);
    return ok;
}

/* One run of the fused backward (v2 = 0: lab_flash16_backward_fused*, 1: its TMA reduce-add variant
 * lab_flash16_backward_fused2*) with `splits` (0: the entry with forge's signature and the split rule; > 0: the _ws
 * entry with S forced, on a NaN-poisoned workspace, so a partial the reduce reads but no CTA wrote shows as NaN)
 * into fresh NaN-poisoned outputs; synchronised. */
static forge_status fz_run(parity *P, fa_case *c, int v2, int splits, fa_bwd_out *o) {
    if (!fa_case_bwd_out(P, c, o)) return FORGE_ERR_OOM;
    if (splits == 0)
        return (v2 ? lab_flash16_backward_fused2 : lab_flash16_backward_fused)(
            &c->fs, c->q, c->k, c->v, c->gout, c->gdo, c->glse, o->delta, o->dq, o->dk, o->dv, c->stream);
    const size_t wsb =
        (v2 ? lab_flash16_backward_fused2_ws_bytes : lab_flash16_backward_fused_ws_bytes)(&c->fs, splits);
    void *ws = wsb ? fa_dev(P, wsb, NULL, 0xff) : NULL;
    if (wsb && !ws) return FORGE_ERR_OOM;
    forge_status st = (v2 ? lab_flash16_backward_fused2_ws : lab_flash16_backward_fused_ws)(
        &c->fs, c->q, c->k, c->v, c->gout, c->gdo, c->glse, o->delta, o->dq, o->dk, o->dv, splits, ws, wsb, c->stream);
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    if (ws) P->gpu->mem_free(P->gpu, ws);
    return st;
}

/* The lab's backward variants (BWD_VARIANT: at D = 64 the two-CTA backward with each dQ kernel, the
 * three-consumer backward and the fused backward's D = 64 instance with its launch order forced, at D = 128 forge's fused backward with its launch order forced and the three-kernel
 * reference) at c's shape, on the out and lse already in c (the
 * mma.sync forward's): where D is the variant's, NAME.{dq,dk,dv} against float64, against
 * forge_flash_bf16_backward_wgmma (NAME.{dq,dk,dv}[wgmma]: 3e-2 * max|that tensor|, as the fused cases; or
 * [wgmma bits]: bitwise, for a gradient the variant sums over the same tiles in the same order) and
 * NAME.determinism (a second run into fresh NaN-poisoned outputs bitwise equal); elsewhere ENTRY.refuse
 * (FORGE_ERR_UNSUPPORTED). */
typedef forge_status (*bwd_variant_fn)(const forge_flash_shape *, const void *, const void *, const void *,
                                       const void *, const void *, const float *, float *, float *, float *, float *,
                                       int, void *);

/* lab_flash16_backward_fused128_order and lab_flash16_backward_three in the table's signature (kernels: the
 * order; unused) */
static forge_status run_fused128(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                 const void *out, const void *dout, const float *lse, float *delta, float *dq,
                                 float *dk, float *dv, int kernels, void *stream) {
    return lab_flash16_backward_fused128_order(s, q, k, v, out, dout, lse, delta, dq, dk, dv, kernels, stream);
}
/* lab_flash16_backward_fused64 in the table's signature (kernels: the order) */
static forge_status run_fused64(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                const void *out, const void *dout, const float *lse, float *delta, float *dq,
                                float *dk, float *dv, int kernels, void *stream) {
    return lab_flash16_backward_fused64(s, q, k, v, out, dout, lse, delta, dq, dk, dv, kernels, stream);
}
static forge_status run_three(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                              const void *out, const void *dout, const float *lse, float *delta, float *dq, float *dk,
                              float *dv, int kernels, void *stream) {
    (void)kernels;
    return lab_flash16_backward_three(s, q, k, v, out, dout, lse, delta, dq, dk, dv, stream);
}

static const struct {
    const char *name, *entry; /* the case names' prefix; the entry's refusal case */
    bwd_variant_fn run;
    int d;       /* the head dim it is compiled for */
    int kernels; /* its kernel choice */
    int bitwise; /* bit i (dq, dk, dv): forge's bits are required (else within the fused cases' tolerance) */
} BWD_VARIANT[] = {
    {"flash16_backward_2cta_dq64", "flash16_backward_2cta", lab_flash16_backward_2cta, 64,
     LAB_FLASH16_BWD2_DQ64 | LAB_FLASH16_BWD2_DKDV, 0},
    {"flash16_backward_2cta_dq32", "flash16_backward_2cta", lab_flash16_backward_2cta, 64,
     LAB_FLASH16_BWD2_DQ32 | LAB_FLASH16_BWD2_DKDV, 0},
    {"flash16_backward_3wg", "flash16_backward_3wg", lab_flash16_backward_3wg, 64,
     LAB_FLASH16_BWD3_DQ | LAB_FLASH16_BWD3_DKDV, 7},
    {"flash16_backward_3wg_bulk", "flash16_backward_3wg", lab_flash16_backward_3wg, 64,
     LAB_FLASH16_BWD3_DQ | LAB_FLASH16_BWD3_DKDV | LAB_FLASH16_BWD3_BULK, 7},
    {"flash16_backward_fused64_asc", "flash16_backward_fused64", run_fused64, 64, LAB_FLASH16_FUSED64_ASC, 6},
    {"flash16_backward_fused64_desc", "flash16_backward_fused64", run_fused64, 64, LAB_FLASH16_FUSED64_DESC, 6},
    {"flash16_backward_fused128_asc", "flash16_backward_fused128", run_fused128, 128, LAB_FLASH16_FUSED128_ASC, 7},
    {"flash16_backward_fused128_desc", "flash16_backward_fused128", run_fused128, 128, LAB_FLASH16_FUSED128_DESC, 7},
    {"flash16_backward_three", "flash16_backward_three", run_three, 64, 0, 6},
    {"flash16_backward_three", "flash16_backward_three", run_three, 128, 0, 6},
};
#define BWD_VARIANTS ((int)(sizeof BWD_VARIANT / sizeof BWD_VARIANT[0]))

static void check_bwd_variants(parity *P, fa_case *c) {
    int any = 0; /* a variant compiled for c's head dim */
    for (int var = 0; var < BWD_VARIANTS; var++) {
        if (BWD_VARIANT[var].d == c->D) {
            any = 1;
            continue;
        }
        if (var > 0 && strcmp(BWD_VARIANT[var].entry, BWD_VARIANT[var - 1].entry) == 0) continue; /* one per entry */
        int takes = 0; /* another row of the same entry compiled for c's head dim */
        for (int w = 0; w < BWD_VARIANTS; w++)
            if (BWD_VARIANT[w].d == c->D && strcmp(BWD_VARIANT[w].entry, BWD_VARIANT[var].entry) == 0) takes = 1;
        if (takes) continue;
        fa_bwd_out o = {0};
        const forge_status st = fa_case_bwd_out(P, c, &o)
                                    ? BWD_VARIANT[var].run(&c->fs, c->q, c->k, c->v, c->gout, c->gdo, c->glse,
                                                           o.delta, o.dq, o.dk, o.dv, BWD_VARIANT[var].kernels,
                                                           c->stream)
                                    : FORGE_ERR_OOM;
        char sub[96];
        snprintf(sub, sizeof sub, "%s.refuse", BWD_VARIANT[var].entry);
        report(P, st == FORGE_ERR_UNSUPPORTED, sub, c->shape, 0, 0,
               st == FORGE_ERR_UNSUPPORTED ? NULL : "(expected FORGE_ERR_UNSUPPORTED)");
        fz_free_out(P, &o);
    }
    if (!any) return;
    /* the variants' baseline on the same inputs: at D = 64 the three-kernel backward (the lab variants there share
     * its dK/dV tile, and the D = 64 ones its dQ kernel too), at D = 128 forge's fused backward */
    fz_host wh;
    const int have_w = fz_bwd_ref(P, c, c->D == 64, "the variants' baseline (three-kernel at D = 64, forge at 128)", &wh);
    forge_status st;
    double *wd[3] = {NULL, NULL, NULL};
    const size_t n[3] = {c->no, c->nkv, c->nkv};
    static const char *const part[3] = {"dq", "dk", "dv"};
    for (int i = 0; have_w && i < 3; i++) {
        wd[i] = malloc((n[i] ? n[i] : 1) * sizeof *wd[i]);
        if (wd[i])
            for (size_t e = 0; e < n[i]; e++) wd[i][e] = wh.g[i][e];
    }
    for (int var = 0; var < BWD_VARIANTS; var++) {
        if (BWD_VARIANT[var].d != c->D) continue;
        fz_host h[2];
        int have[2] = {0, 0};
        for (int run = 0; run < 2; run++) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s%s", BWD_VARIANT[var].name, run ? ".determinism" : "");
            fa_bwd_out o = {0};
            st = fa_case_bwd_out(P, c, &o) ? BWD_VARIANT[var].run(&c->fs, c->q, c->k, c->v, c->gout, c->gdo,
                                                                  c->glse, o.delta, o.dq, o.dk, o.dv,
                                                                  BWD_VARIANT[var].kernels, c->stream)
                                           : FORGE_ERR_OOM;
            if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
            if (st != FORGE_OK)
                fa_case_failed(P, c, sub, st);
            else
                have[run] = fz_fetch(P, c, sub, &o, &h[run]);
            fz_free_out(P, &o);
        }
        const double *ref[3] = {c->rdq, c->rdk, c->rdv};
        for (int i = 0; have[0] && i < 3; i++) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s.%s", BWD_VARIANT[var].name, part[i]);
            fa_compare(P, sub, c->shape, h[0].g[i], ref[i], n[i], 0, 3e-2, 1);
            const int bits = (BWD_VARIANT[var].bitwise >> i) & 1;
            if (wd[i] && !bits) {
                snprintf(sub, sizeof sub, "%s.%s[wgmma]", BWD_VARIANT[var].name, part[i]);
                fa_compare(P, sub, c->shape, h[0].g[i], wd[i], n[i], 0, 3e-2, 1);
            }
            if (wd[i] && bits) { /* the same tiles in the same order: forge's bits */
                size_t diff = 0;
                for (size_t e = 0; e < n[i]; e++)
                    if ((double)h[0].g[i][e] != wd[i][e]) diff++;
                char why[96];
                snprintf(sub, sizeof sub, "%s.%s[wgmma bits]", BWD_VARIANT[var].name, part[i]);
                snprintf(why, sizeof why, "(%zu elements differ from forge_flash_bf16_backward_wgmma's)", diff);
                report(P, diff == 0, sub, c->shape, (double)diff, 0, diff ? why : NULL);
            }
        }
        if (have[0] && have[1]) {
            size_t diff = 0;
            for (int i = 0; i < 3; i++)
                for (size_t e = 0; e < n[i]; e++)
                    if (memcmp(&h[0].g[i][e], &h[1].g[i][e], sizeof(float)) != 0) diff++;
            char sub[96], why[96];
            snprintf(sub, sizeof sub, "%s.determinism", BWD_VARIANT[var].name);
            snprintf(why, sizeof why, "(%zu elements of dq, dk, dv differ between two runs)", diff);
            report(P, diff == 0, sub, c->shape, (double)diff, 0, diff ? why : NULL);
        }
        for (int run = 0; run < 2; run++)
            if (have[run]) fz_host_free(&h[run]);
    }
    for (int i = 0; i < 3; i++) free(wd[i]);
    fz_host_free(&wh);
}

/* Both fused backwards (lab_flash16_backward_fused* as flash16_backward_fused_sN, lab_flash16_backward_fused2* as
 * flash16_backward_fused2_sN) at one shape, on the mma.sync forward's out and lse, for the split rule and S forced
 * to 1, 2, 3 (capped at the key blocks by the entry):
 * - NAME.{dq,dk,dv}: against the float64 reference (the fixture's tolerance);
 * - NAME.{dq,dk,dv}[wgmma]: against forge_flash_bf16_backward_wgmma on the same inputs, within the same
 *   3e-2 * max|that tensor| (both are within that of float64; a layout, mask or split bug is an O(1) error);
 * - NAME.determinism: a second run bitwise equal. */
static void case_fused(parity *P, int B, int Tq, int Tk, int H, int Hkv, int D, int packed) {
    fa_case c;
    if (!fa_case_init(P, &c, B, Tq, Tk, H, Hkv, D, packed)) {
        fa_case_free(P, &c);
        return;
    }
    check_fwd_1cta(P, &c); /* its shapes are D = 64 ones too */
    forge_status st = fa_case_forward_mma(P, &c);
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    if (st != FORGE_OK) {
        fa_case_failed(P, &c, "flash16_forward_mma (the fused cases' out, lse)", st);
        fa_case_free(P, &c);
        return;
    }
    check_bwd_variants(P, &c);
    /* forge's wgmma backward on the same inputs */
    fa_bwd_out wo = {0};
    fz_host wh = {{NULL, NULL, NULL}};
    st = fa_case_bwd_out(P, &c, &wo) ? forge_flash_bf16_backward_wgmma(&c.fs, c.q, c.k, c.v, c.gout, c.gdo, c.glse,
                                                                       wo.delta, wo.dq, wo.dk, wo.dv, c.stream)
                                     : FORGE_ERR_OOM;
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    if (st != FORGE_OK) fa_case_failed(P, &c, "flash16_backward_wgmma (the fused cases' baseline)", st);
    const int have_w = st == FORGE_OK && fz_fetch(P, &c, "flash16_backward_wgmma (fetch)", &wo, &wh);
    fz_free_out(P, &wo);
    double *wd[3] = {NULL, NULL, NULL};
    const size_t n[3] = {c.no, c.nkv, c.nkv};
    static const char *const part[3] = {"dq", "dk", "dv"};
    for (int i = 0; have_w && i < 3; i++) {
        wd[i] = malloc((n[i] ? n[i] : 1) * sizeof *wd[i]);
        if (wd[i])
            for (size_t e = 0; e < n[i]; e++) wd[i][e] = wh.g[i][e];
    }

    static const int splits[4] = {0, 1, 2, 3};
    for (int vi = 0; vi < 8; vi++) {
        const int v2 = vi / 4, si = vi % 4;
        char name[64], sub[96];
        snprintf(name, sizeof name, "flash16_backward_fused%s_s%d", v2 ? "2" : "", splits[si]);
        fa_bwd_out o1 = {0}, o2 = {0};
        st = fz_run(P, &c, v2, splits[si], &o1);
        if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
        if (st != FORGE_OK) {
            fa_case_failed(P, &c, name, st);
            fz_free_out(P, &o1);
            continue;
        }
        fz_host h1, h2;
        if (!fz_fetch(P, &c, name, &o1, &h1)) {
            fz_free_out(P, &o1);
            continue;
        }
        fz_free_out(P, &o1);
        const double *ref[3] = {c.rdq, c.rdk, c.rdv};
        for (int i = 0; i < 3; i++) {
            snprintf(sub, sizeof sub, "%s.%s", name, part[i]);
            fa_compare(P, sub, c.shape, h1.g[i], ref[i], n[i], 0, 3e-2, 1);
            if (wd[i]) {
                snprintf(sub, sizeof sub, "%s.%s[wgmma]", name, part[i]);
                fa_compare(P, sub, c.shape, h1.g[i], wd[i], n[i], 0, 3e-2, 1);
            }
        }
        snprintf(sub, sizeof sub, "%s.determinism", name);
        st = fz_run(P, &c, v2, splits[si], &o2);
        if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
        if (st != FORGE_OK) {
            fa_case_failed(P, &c, sub, st);
        } else if (fz_fetch(P, &c, sub, &o2, &h2)) {
            size_t diff = 0;
            for (int i = 0; i < 3; i++)
                for (size_t e = 0; e < n[i]; e++)
                    if (memcmp(&h1.g[i][e], &h2.g[i][e], sizeof(float)) != 0) diff++;
            char why[96];
            snprintf(why, sizeof why, "(%zu elements of dq, dk, dv differ between two runs)", diff);
            report(P, diff == 0, sub, c.shape, (double)diff, 0, diff ? why : NULL);
            fz_host_free(&h2);
        }
        fz_free_out(P, &o2);
        fz_host_free(&h1);
    }
    for (int i = 0; i < 3; i++) free(wd[i]);
    fz_host_free(&wh);
    fa_case_free(P, &c);
}

/* The fused backward's shapes (B, Tq, Tk, H, Hkv, D, packed; every case causal, bottom-right when Tq != Tk):
 * T = 1; odd T with GQA; several key blocks with GQA; H = Hkv; a strided (separate q, k, v with padded token
 * strides) GQA case; gpt2-124m's per-layer shape at B = 2; Tq != Tk both ways. Quick runs skip Tq > 300. */
static const int FZ_SHAPES[][7] = {
    {1, 1, 1, 2, 2, 64, 1},     {1, 67, 67, 4, 2, 64, 1},   {2, 200, 200, 6, 2, 64, 1},
    {1, 130, 130, 4, 4, 64, 1}, {2, 333, 333, 4, 2, 64, 0}, {2, 1024, 1024, 12, 12, 64, 1},
    {1, 100, 37, 4, 2, 64, 0},  {1, 37, 100, 4, 2, 64, 0},
};

/* More shapes for forge's two-CTA forward at D = 64 (B, Tq, Tk, H, Hkv, D, packed), where a whole consumer
 * warpgroup or a whole CTA sees no key (Tq > Tk: warpgroup 0 of the first CTA of 200 x 100, the first two CTAs of
 * 300 x 40), several CTAs of one head with GQA 2:1 and a tail tile (640 + 5), and the rest of the ring's rounds
 * (1000 keys: 16 tiles of 64, 3 rounds of 5 stages and a part); the one-CTA kernel runs on them too. */
static const int FW64_SHAPES[][7] = {
    {1, 200, 100, 4, 2, 64, 0}, {1, 300, 40, 2, 1, 64, 0}, {2, 645, 645, 6, 3, 64, 1}, {1, 1000, 1000, 3, 1, 64, 0},
};

/* More shapes for the two-CTA backward (case_fwd64 runs it on FW64_SHAPES too): GQA 4:1 at D = 64, packed with an
 * odd T over several 32-query tiles and ring rounds, and Tq < Tk strided with a tail tile. */
static const int BW2_SHAPES[][7] = {
    {2, 161, 161, 4, 1, 64, 1},
    {1, 70, 300, 4, 1, 64, 0},
};

static void case_fwd64(parity *P, int B, int Tq, int Tk, int H, int Hkv, int D, int packed) {
    fa_case c;
    if (fa_case_init(P, &c, B, Tq, Tk, H, Hkv, D, packed)) {
        check_fwd_forge(P, &c);
        check_fwd_1cta(P, &c);
        forge_status st = fa_case_forward_mma(P, &c);
        if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
        if (st == FORGE_OK)
            check_bwd_variants(P, &c);
        else
            fa_case_failed(P, &c, "flash16_forward_mma (the 2cta backward cases' out, lse)", st);
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
    for (size_t i = 0; i < sizeof FZ_SHAPES / sizeof FZ_SHAPES[0]; i++) {
        const int *s = FZ_SHAPES[i];
        if (P.quick && s[1] > 300) continue;
        case_fused(&P, s[0], s[1], s[2], s[3], s[4], s[5], s[6]);
    }
    for (size_t i = 0; i < sizeof FW64_SHAPES / sizeof FW64_SHAPES[0]; i++) {
        const int *s = FW64_SHAPES[i];
        if (P.quick && s[1] > 300) continue;
        case_fwd64(&P, s[0], s[1], s[2], s[3], s[4], s[5], s[6]);
    }
    /* fw_walk at 512 / 480 units (>= 2 rounds on 132 SMs: bulk and tail), the second odd nqt with GQA */
    check_walk_bits(&P, 2, 2048, 32, 32);
    check_walk_bits(&P, 3, 1900, 20, 5);
    for (size_t i = 0; i < sizeof BW2_SHAPES / sizeof BW2_SHAPES[0]; i++) {
        const int *s = BW2_SHAPES[i];
        case_fwd64(&P, s[0], s[1], s[2], s[3], s[4], s[5], s[6]);
    }
    static const int bwd2_kernel[3] = {LAB_FLASH16_BWD2_DQ64, LAB_FLASH16_BWD2_DQ32, LAB_FLASH16_BWD2_DKDV};
    static const char *const bwd2_occ[3] = {"flash16_backward_2cta_dq64.occupancy",
                                            "flash16_backward_2cta_dq32.occupancy",
                                            "flash16_backward_2cta_dkdv.occupancy"};
    static const char *const bwd2_threads[3] = {"256 threads", "288 threads", "256 threads"};
    for (int i = 0; i < 3; i++) {
        int ctas = 0;
        char why[96];
        const forge_status bs = lab_flash16_backward_2cta_occupancy(bwd2_kernel[i], &ctas);
        snprintf(why, sizeof why, "(%d CTAs per SM, status %s; the design needs 2)", ctas, forge_status_name(bs));
        report(&P, bs == FORGE_OK && ctas == 2, bwd2_occ[i], bwd2_threads[i], (double)ctas, 0,
               bs == FORGE_OK && ctas == 2 ? NULL : why);
    }
    forge_flash_shape fs = fa_refuse_shape();
    static __attribute__((aligned(16))) char dummy[16];
    fa_expect_refusal(&P, "flash16_forward_wgmma_pp.refuse",
                      lab_flash16_forward_sched(&fs, dummy, dummy, dummy, dummy, (float *)dummy,
                                                LAB_FLASH16_SCHED_PINGPONG, NULL));
    /* the fused backwards are compiled for D = 64 only: D = 128 must be refused, not run */
    for (int v2 = 0; v2 < 2; v2++) {
        forge_flash_shape f128 = {1, 16, 16, 2, 2, 128, 2 * 128, 2 * 128, 2 * 128, 2 * 128};
        const forge_status rs = (v2 ? lab_flash16_backward_fused2 : lab_flash16_backward_fused)(
            &f128, dummy, dummy, dummy, dummy, dummy, (float *)dummy, (float *)dummy, (float *)dummy, (float *)dummy,
            (float *)dummy, NULL);
        report(&P, rs == FORGE_ERR_UNSUPPORTED, v2 ? "flash16_backward_fused2.refuse" : "flash16_backward_fused.refuse",
               "D=128", 0, 0, rs == FORGE_ERR_UNSUPPORTED ? NULL : "(expected FORGE_ERR_UNSUPPORTED)");
    }
    {
        forge_flash_shape f64 = {1, 16, 16, 2, 2, 64, 2 * 64, 2 * 64, 2 * 64, 2 * 64};
        const forge_status rs = lab_flash16_backward_2cta(
            &f64, dummy, dummy, dummy, dummy, dummy, (float *)dummy, (float *)dummy, (float *)dummy, (float *)dummy,
            (float *)dummy, LAB_FLASH16_BWD2_DQ64 | LAB_FLASH16_BWD2_DQ32, NULL);
        report(&P, rs == FORGE_ERR_ARG, "flash16_backward_2cta.refuse_args", "DQ64|DQ32", 0, 0,
               rs == FORGE_ERR_ARG ? NULL : "(expected FORGE_ERR_ARG)");
    }
    {
        forge_flash_shape f64 = {1, 16, 16, 2, 2, 64, 2 * 64, 2 * 64, 2 * 64, 2 * 64};
        const forge_status rs = lab_flash16_backward_3wg(&f64, dummy, dummy, dummy, dummy, dummy, (float *)dummy,
                                                         (float *)dummy, (float *)dummy, (float *)dummy,
                                                         (float *)dummy, 0x100, NULL);
        report(&P, rs == FORGE_ERR_ARG, "flash16_backward_3wg.refuse_args", "0x100", 0, 0,
               rs == FORGE_ERR_ARG ? NULL : "(expected FORGE_ERR_ARG)");
    }
    {
        forge_flash_shape f64 = {1, 16, 16, 2, 2, 64, 2 * 64, 2 * 64, 2 * 64, 2 * 64};
        forge_status rs = lab_flash16_backward_fused64(&f64, dummy, dummy, dummy, dummy, dummy, (float *)dummy,
                                                       (float *)dummy, (float *)dummy, (float *)dummy, (float *)dummy,
                                                       3, NULL);
        report(&P, rs == FORGE_ERR_ARG, "flash16_backward_fused64.refuse_args", "order 3", 0, 0,
               rs == FORGE_ERR_ARG ? NULL : "(expected FORGE_ERR_ARG)");
        rs = lab_flash16_backward_fused64_ws(&f64, dummy, dummy, dummy, dummy, dummy, (float *)dummy, (float *)dummy,
                                             (float *)dummy, (float *)dummy, (float *)dummy, LAB_FLASH16_FUSED64_ASC,
                                             dummy, lab_flash16_backward_fused64_ws_bytes(&f64) - 4, NULL);
        report(&P, rs == FORGE_ERR_ARG, "flash16_backward_fused64.refuse_args", "workspace 4 bytes short", 0, 0,
               rs == FORGE_ERR_ARG ? NULL : "(expected FORGE_ERR_ARG)");
    }
    forge_backend_destroy(P.gpu);
    printf("%d passed, %d failed\n", P.passed, P.failed);
    return P.failed ? 1 : 0;
}

/* The backward variants of lab_flash16_backward_dkdv at c's shape, on the out and lse already in c: NAME.{dq,dk,dv}
 * against float64 and NAME.bits (bit for bit the three-kernel backward's, fz_bwd_ref: every variant computes the
 * same products of the same tiles in the same order with the same fp32 arithmetic per element). */
static void check_dkdv_variants(parity *P, fa_case *c) {
    fz_host wh;
    const int have_w = fz_bwd_ref(P, c, 1, "flash16_backward_three (the variants' bits)", &wh);
    forge_status st;
    static const int var_id[3] = {LAB_FLASH16_DKDV_SPLIT, LAB_FLASH16_DKDV_PIPE, LAB_FLASH16_DKDV_RSA};
    static const char *const var_name[3] = {"flash16_backward_wgmma_split", "flash16_backward_wgmma_dkp",
                                            "flash16_backward_wgmma_rsa"};
    const size_t n[3] = {c->no, c->nkv, c->nkv};
    for (int var = 0; var < 3; var++) {
        /* at D = 64 PIPE is SPLIT and RSA is forge's pair */
        if (var_id[var] != LAB_FLASH16_DKDV_SPLIT && c->D != 128) continue;
        fa_bwd_out o = {0};
        st = fa_case_bwd_out(P, c, &o) ? lab_flash16_backward_dkdv(&c->fs, c->q, c->k, c->v, c->gout, c->gdo, c->glse,
                                                                   o.delta, o.dq, o.dk, o.dv, var_id[var], c->stream)
                                       : FORGE_ERR_OOM;
        if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
        fz_host h;
        if (st == FORGE_OK && have_w && fz_fetch(P, c, var_name[var], &o, &h)) {
            size_t diff = 0;
            for (int i = 0; i < 3; i++)
                for (size_t e = 0; e < n[i]; e++)
                    if (memcmp(&h.g[i][e], &wh.g[i][e], sizeof(float)) != 0) diff++;
            char sub[96], why[96];
            snprintf(sub, sizeof sub, "%s.bits", var_name[var]);
            snprintf(why, sizeof why, "(%zu elements of dq, dk, dv differ from the three-kernel backward's)", diff);
            report(P, diff == 0, sub, c->shape, (double)diff, 0, diff ? why : NULL);
            fz_host_free(&h);
        }
        fa_case_check_bwd(P, c, var_name[var], st, &o);
    }
    fz_host_free(&wh);
}
