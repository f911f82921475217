/* test_flash16_kernels.c: forge's bf16 flash attention kernels, called directly (not backend ops): what forge
 * runs. Per shape (flash16_fixture.h: inputs, reference, tolerances):
 * - flash16_forward.*, flash16_backward.*: the mma.sync kernels by name (forge_flash_bf16_forward_mma /
 *   _backward_mma), the defaults' fallback where the wgmma kernels refuse (never on an sm_90 device at these
 *   shapes, hence by name), also against the CPU reference backend ([cpu] lines);
 * - flash16_forward_wgmma.*, flash16_backward_wgmma.*: the Hopper kernels by name (forge_flash_bf16_forward_wgmma
 *   / _backward_wgmma, on the mma.sync forward's out and lse); a refusal is a failure: every shape here
 *   (D = 64 / 128, Tq, Tk > 0, 16-byte strides) is one they must take on sm_90;
 * - flash16_backward_wgmma.determinism: two runs of the Hopper backward bitwise equal;
 * - flash16_backward_into.*: the Hopper backward storing bf16 gradients at padded strides (written and added),
 *   bitwise rn(old + d) of its fp32 gradients d;
 * - flash16_rowstats.*: the Hopper backward's packed row statistics (lse*log2e, delta, zero padding) bitwise;
 * - flash16_default.*: forge_flash_bf16_forward / _backward as a caller gets them;
 * - flash16_forward_wgmma.rising.*: the Hopper forward on scores that rise along the keys (the D = 64 forward's
 *   fallback from its fixed softmax reference).
 * Head dims without a compiled tile are refused (*.refuse); flash16_forward_wgmma.occupancy: the runtime keeps 2 of
 * the forward's CTAs per SM at D = 64, 1 at D = 128 (the design's premise). flash16_op_fallback.*: the backend entry's backward
 * where the tensor-core kernels refuse a layout at head size 64 (its fallback, in a buffer of its own). The variants (the 128-row mma.sync forward, the
 * wgmma forward's other schedules, the other dK/dV kernels): `forge-lab test flash16`. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flash16_fixture.h"

/* the mma.sync forward and backward by name, against the reference and (Tq == Tk) the CPU backend; 0 if they
 * could not run (reported) */
static int case_flash16_mma(parity *P, fa_case *cs) {
    const int B = cs->B, Tq = cs->Tq, Tk = cs->Tk, H = cs->H, Hkv = cs->Hkv, D = cs->D;
    const long long C = cs->C, qs = cs->qs, ks = cs->ks;
    const size_t no = cs->no, nkv = cs->nkv, nl = cs->nl;
    const char *shape = cs->shape;
    const fa_ref_in in = cs->in;
    const float *fdo = cs->fdo;
    fa_bwd_out g = {0};
    forge_status st = fa_case_forward_mma(P, cs);
    if (st == FORGE_OK) st = fa_case_bwd_out(P, cs, &g) ? FORGE_OK : FORGE_ERR_OOM;
    if (st == FORGE_OK)
        st = forge_flash_bf16_backward_mma(&cs->fs, cs->q, cs->k, cs->v, cs->gout, cs->gdo, cs->glse, g.delta, g.dq,
                                           g.dk, g.dv, cs->stream);
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    if (st != FORGE_OK) {
        fa_case_failed(P, cs, "flash16", st);
        void *gd[4] = {g.dq, g.dk, g.dv, g.delta};
        for (int i = 0; i < 4; i++)
            if (gd[i]) P->gpu->mem_free(P->gpu, gd[i]);
        return 0;
    }
    struct {
        const char *name;
        void *g;
        size_t n;
        int bf;
        const double *ref;
        double tol;
        int scaled;
    } outs[] = {
        {"flash16_forward.out", cs->gout, no, 1, cs->rout, 1.5e-2, 0},
        {"flash16_forward.lse", cs->glse, nl, 0, cs->rlse, 2e-3, 0},
        {"flash16_backward.dq", g.dq, no, 0, cs->rdq, 3e-2, 1},
        {"flash16_backward.dk", g.dk, nkv, 0, cs->rdk, 3e-2, 1},
        {"flash16_backward.dv", g.dv, nkv, 0, cs->rdv, 3e-2, 1},
    };
    float *got[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int i = 0; i < 5; i++) {
        size_t bad = 0;
        got[i] = fa_fetch(P, outs[i].g, outs[i].n, outs[i].bf, &bad);
        if (!got[i]) {
            report(P, 0, outs[i].name, shape, INFINITY, 0, "(copy back failed)");
            continue;
        }
        fa_compare(P, outs[i].name, shape, got[i], outs[i].ref, outs[i].n, bad, outs[i].tol, outs[i].scaled);
    }

    /* the CPU reference backend itself (Tq == Tk): packed fp32 qkv of the same values */
    if (Tq == Tk && Tq > 0 && P->cpu->attention_forward && P->cpu->attention_backward) {
        const int T = Tq;
        float *qkv = malloc((size_t)B * T * C * 4), *o = malloc(no * 4), *att = malloc((size_t)B * H * T * T * 4),
              *scr = malloc((size_t)B * H * T * T * 4), *dqkv = calloc((size_t)B * T * C, 4);
        double *r = malloc(((size_t)B * T * C + no) * 8);
        if (qkv && o && att && scr && dqkv && r) {
            for (size_t bt = 0; bt < (size_t)B * T; bt++)
                for (int c = 0; c < H * D; c++) {
                    qkv[bt * C + c] = in.q[bt * qs + c];
                    if (c < Hkv * D) {
                        qkv[bt * C + H * D + c] = in.k[bt * ks + c];
                        qkv[bt * C + (H + Hkv) * D + c] = in.v[bt * ks + c];
                    }
                }
            if (P->cpu->attention_forward(P->cpu, o, att, qkv, B, T, H, Hkv, D) == FORGE_OK &&
                P->cpu->attention_backward(P->cpu, dqkv, scr, fdo, qkv, att, B, T, H, Hkv, D) == FORGE_OK) {
                for (size_t i = 0; i < no; i++) r[i] = o[i];
                if (got[0]) fa_compare(P, "flash16_forward.out[cpu]", shape, got[0], r, no, 0, 1.5e-2, 0);
                /* dq from the packed gradient, (B,T,H,D) */
                for (size_t bt = 0; bt < (size_t)B * T; bt++)
                    for (int c = 0; c < H * D; c++) r[bt * H * D + c] = dqkv[bt * C + c];
                if (got[2]) fa_compare(P, "flash16_backward.dq[cpu]", shape, got[2], r, no, 0, 3e-2, 1);
                for (int w = 0; w < 2; w++) {
                    for (size_t bt = 0; bt < (size_t)B * T; bt++)
                        for (int c = 0; c < Hkv * D; c++)
                            r[bt * Hkv * D + c] = dqkv[bt * C + (size_t)(H + w * Hkv) * D + c];
                    if (got[3 + w])
                        fa_compare(P, w ? "flash16_backward.dv[cpu]" : "flash16_backward.dk[cpu]", shape,
                                   got[3 + w], r, nkv, 0, 3e-2, 1);
                }
            } else {
                report(P, 0, "flash16[cpu]", shape, INFINITY, 0, forge_error_message());
            }
        }
        free(qkv);
        free(o);
        free(att);
        free(scr);
        free(dqkv);
        free(r);
    }
    for (int i = 0; i < 5; i++) free(got[i]);
    void *gd[4] = {g.dq, g.dk, g.dv, g.delta};
    for (int i = 0; i < 4; i++)
        if (gd[i]) P->gpu->mem_free(P->gpu, gd[i]);
    return 1;
}

/* forge_flash_bf16_backward_into with bf16 gradients at padded token strides (dk | dv rows of 2*Hkv*D + 8 elements;
 * dq rows of H*D + 8 when written, H*D + 2 when added: the dq stores' 16-byte and 4-byte paths), written
 * (accumulate = 0, into NaN) and added (accumulate = 1, into random bf16): bitwise rn(old + d) per element, d the
 * fp32 gradient forge_flash_bf16_backward_wgmma stores (the op's former add pass), the padding and the guards
 * untouched. */
static void case_flash16_into(parity *P, fa_case *c) {
    const size_t qw = (size_t)c->H * c->D, kw = (size_t)c->Hkv * c->D;
    const long long skv = 2 * (long long)kw + 8;
    const size_t rq = (size_t)c->B * c->Tq, rk = (size_t)c->B * c->Tk, nqb_max = rq * (qw + 8), nkvb = rk * skv;
    fa_bwd_out bo = {0};
    forge_status st = fa_case_bwd_out(P, c, &bo) ? forge_flash_bf16_backward_wgmma(&c->fs, c->q, c->k, c->v, c->gout,
                                                                                 c->gdo, c->glse, bo.delta, bo.dq,
                                                                                 bo.dk, bo.dv, c->stream)
                                                 : FORGE_ERR_OOM;
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    float *d[3] = {NULL, NULL, NULL};
    size_t bad = 0, bad2 = 0, bad3 = 0;
    if (st == FORGE_OK) {
        d[0] = fa_fetch(P, bo.dq, c->no, 0, &bad);
        d[1] = fa_fetch(P, bo.dk, c->nkv, 0, &bad2);
        d[2] = fa_fetch(P, bo.dv, c->nkv, 0, &bad3);
    }
    void *gb[3] = {bo.dq, bo.dk, bo.dv};
    for (int i = 0; i < 3; i++)
        if (gb[i]) P->gpu->mem_free(P->gpu, gb[i]);
    uint16_t *hq = malloc(nqb_max * 2), *hkv = malloc(nkvb * 2);
    if (st != FORGE_OK || !d[0] || !d[1] || !d[2] || bad || bad2 || bad3 || !hq || !hkv) {
        report(P, 0, "flash16_backward_into", c->shape, INFINITY, 0,
               st != FORGE_OK ? forge_error_message() : "(the fp32 gradients could not be fetched)");
    } else {
        for (int acc = 0; acc <= 1; acc++) {
            char name[64];
            snprintf(name, sizeof name, "flash16_backward_into.%s", acc ? "accumulate" : "write");
            const long long sq = (long long)qw + (acc ? 2 : 8);
            const size_t nqb = rq * (size_t)sq;
            uint64_t x = 0x2545F4914F6CDD1Dull + (uint64_t)acc;
            for (size_t i = 0; i < nqb; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                hq[i] = acc ? f2bf(((float)(x >> 40) * (1.0f / 16777216.0f)) * 2.0f - 1.0f) : 0xffffu;
            }
            for (size_t i = 0; i < nkvb; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                hkv[i] = acc ? f2bf(((float)(x >> 40) * (1.0f / 16777216.0f)) * 2.0f - 1.0f) : 0xffffu;
            }
            void *gq = fa_dev(P, nqb * 2, hq, 0), *gkv = fa_dev(P, nkvb * 2, hkv, 0);
            void *delta = fa_dev(P, FORGE_FLASH_BF16_BWD_SCRATCH(c->B, c->H, c->Tq, c->D) * 4, NULL, 0xff);
            const forge_flash_grads g = {gq, gkv, gkv ? (uint16_t *)gkv + kw : NULL, sq, skv, skv, 1, acc};
            st = gq && gkv && delta ? forge_flash_bf16_backward_into(&c->fs, c->q, c->k, c->v, c->gout, c->gdo,
                                                                     c->glse, delta, &g, c->stream, 0)
                                    : FORGE_ERR_OOM;
            if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
            float *oq = NULL, *okv = NULL;
            size_t gq_bad = 0, gkv_bad = 0, diff = 0;
            if (st == FORGE_OK) {
                oq = fa_fetch(P, gq, nqb, 1, &gq_bad);
                okv = fa_fetch(P, gkv, nkvb, 1, &gkv_bad);
            }
            if (st != FORGE_OK || !oq || !okv) {
                report(P, 0, name, c->shape, INFINITY, 0,
                       st != FORGE_OK ? forge_error_message() : "(could not fetch the gradients)");
            } else {
                for (size_t r = 0; r < rq; r++)
                    for (long long col = 0; col < sq; col++) {
                        const uint16_t old = hq[r * sq + col];
                        const uint16_t want =
                            (size_t)col < qw ? f2bf((acc ? bf2f(old) : 0.0f) + d[0][r * qw + col]) : old;
                        if (memcmp(&oq[r * sq + col], &(float){bf2f(want)}, 4) != 0) diff++;
                    }
                for (size_t r = 0; r < rk; r++)
                    for (long long col = 0; col < skv; col++) {
                        const uint16_t old = hkv[r * skv + col];
                        const size_t cc = (size_t)col;
                        const uint16_t want = cc < kw       ? f2bf((acc ? bf2f(old) : 0.0f) + d[1][r * kw + cc])
                                              : cc < 2 * kw ? f2bf((acc ? bf2f(old) : 0.0f) + d[2][r * kw + cc - kw])
                                                            : old;
                        if (memcmp(&okv[r * skv + col], &(float){bf2f(want)}, 4) != 0) diff++;
                    }
                char why[128];
                snprintf(why, sizeof why, "(%zu elements differ from rn(old + d); guards %zu, %zu overwritten)", diff,
                         gq_bad, gkv_bad);
                const int ok = diff == 0 && gq_bad == 0 && gkv_bad == 0;
                report(P, ok, name, c->shape, (double)diff, 0, ok ? NULL : why);
            }
            free(oq);
            free(okv);
            void *gs[3] = {gq, gkv, delta};
            for (int i = 0; i < 3; i++)
                if (gs[i]) P->gpu->mem_free(P->gpu, gs[i]);
        }
    }
    free(hq);
    free(hkv);
    for (int i = 0; i < 3; i++) free(d[i]);
    if (bo.delta) P->gpu->mem_free(P->gpu, bo.delta);
}

/* forge_flash_bf16_backward_rowstats (the Hopper backward's first kernel) into a NaN-poisoned buffer of
 * FORGE_FLASH_BF16_ROWSTATS floats: bitwise lse*log2e in fp32 (-inf -> 0) of the forward's lse and the delta that
 * forge_flash_bf16_backward_delta computes, each (b, h) row padded with zeros to FORGE_FLASH_BF16_ROWS_PAD, and
 * nothing written past the buffer (guards). */
static void case_flash16_rowstats(parity *P, fa_case *c) {
    const size_t tpad = FORGE_FLASH_BF16_ROWS_TPAD(c->Tq);
    const size_t nrows = (size_t)c->B * c->H, plane = nrows * tpad;
    void *gdelta = fa_dev(P, c->nl * 4, NULL, 0xff);
    void *grows = fa_dev(P, FORGE_FLASH_BF16_ROWSTATS(c->B, c->H, c->Tq) * 4, NULL, 0xff);
    forge_status st = gdelta && grows ? forge_flash_bf16_backward_delta(&c->fs, c->gout, c->gdo, gdelta, c->stream, 0)
                                      : FORGE_ERR_OOM;
    if (st == FORGE_OK)
        st = forge_flash_bf16_backward_rowstats(&c->fs, c->gout, c->gdo, c->glse, grows, c->stream, 0);
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    size_t bad = 0, bad_rows = 0;
    float *lse = NULL, *delta = NULL, *rows = NULL;
    if (st == FORGE_OK) {
        lse = fa_fetch(P, c->glse, c->nl, 0, &bad);
        delta = fa_fetch(P, gdelta, c->nl, 0, &bad);
        rows = fa_fetch(P, grows, 2 * plane, 0, &bad_rows);
    }
    if (st != FORGE_OK || !lse || !delta || !rows) {
        report(P, 0, "flash16_rowstats", c->shape, INFINITY, 0,
               st != FORGE_OK ? forge_error_message() : "(could not fetch the row statistics)");
    } else {
        size_t diff = 0;
        for (size_t r = 0; r < nrows; r++)
            for (size_t t = 0; t < tpad; t++) {
                float want_l = 0.0f, want_d = 0.0f;
                if (t < (size_t)c->Tq) {
                    const float lv = lse[r * c->Tq + t];
                    want_l = lv == -INFINITY ? 0.0f : lv * 1.4426950408889634f;
                    want_d = delta[r * c->Tq + t];
                }
                diff += memcmp(&rows[r * tpad + t], &want_l, 4) != 0;
                diff += memcmp(&rows[plane + r * tpad + t], &want_d, 4) != 0;
            }
        char why[128];
        snprintf(why, sizeof why, "(%zu values differ; %zu guards overwritten)", diff, bad_rows);
        const int ok = diff == 0 && bad_rows == 0;
        report(P, ok, "flash16_rowstats", c->shape, (double)diff, 0, ok ? NULL : why);
    }
    free(lse);
    free(delta);
    free(rows);
    if (gdelta) P->gpu->mem_free(P->gpu, gdelta);
    if (grows) P->gpu->mem_free(P->gpu, grows);
}

/* forge_flash_bf16_backward_wgmma twice on the same inputs into fresh NaN-poisoned outputs:
 * flash16_backward_wgmma.determinism, dq, dk, dv bitwise equal (at D = 128 dq's contributions are added in one
 * key-block order by the fused kernel's turns, whatever the timing). */
static void case_flash16_determinism(parity *P, fa_case *c) {
    float *h[2][3] = {{NULL, NULL, NULL}, {NULL, NULL, NULL}};
    const size_t n[3] = {c->no, c->nkv, c->nkv};
    forge_status st = FORGE_OK;
    size_t bad = 0;
    for (int run = 0; run < 2 && st == FORGE_OK; run++) {
        fa_bwd_out o = {0};
        st = fa_case_bwd_out(P, c, &o) ? forge_flash_bf16_backward_wgmma(&c->fs, c->q, c->k, c->v, c->gout, c->gdo,
                                                                         c->glse, o.delta, o.dq, o.dk, o.dv, c->stream)
                                       : FORGE_ERR_OOM;
        if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
        const void *g[3] = {o.dq, o.dk, o.dv};
        for (int i = 0; i < 3 && st == FORGE_OK; i++) {
            size_t b = 0;
            h[run][i] = fa_fetch(P, g[i], n[i], 0, &b);
            bad += b;
            if (!h[run][i]) st = FORGE_ERR_DEVICE;
        }
        void *all[4] = {o.dq, o.dk, o.dv, o.delta};
        for (int i = 0; i < 4; i++)
            if (all[i]) P->gpu->mem_free(P->gpu, all[i]);
    }
    if (st != FORGE_OK) {
        fa_case_failed(P, c, "flash16_backward_wgmma.determinism", st);
    } else {
        size_t diff = 0;
        for (int i = 0; i < 3; i++)
            for (size_t e = 0; e < n[i]; e++)
                if (memcmp(&h[0][i][e], &h[1][i][e], sizeof(float)) != 0) diff++;
        char why[96];
        snprintf(why, sizeof why, "(%zu elements of dq, dk, dv differ between two runs; guards %zu)", diff, bad);
        report(P, diff == 0 && bad == 0, "flash16_backward_wgmma.determinism", c->shape, (double)diff, 0,
               diff == 0 && bad == 0 ? NULL : why);
    }
    for (int run = 0; run < 2; run++)
        for (int i = 0; i < 3; i++) free(h[run][i]);
}

void case_flash16(parity *P, int B, int Tq, int Tk, int H, int Hkv, int D, int packed) {
    fa_case c;
    if (!fa_case_init(P, &c, B, Tq, Tk, H, Hkv, D, packed)) {
        fa_case_free(P, &c);
        return;
    }
    if (!case_flash16_mma(P, &c)) {
        fa_case_free(P, &c);
        return;
    }

    /* the Hopper kernels by name; the backward on the mma.sync forward's out and lse (fa_case_forward_mma, run by
     * case_flash16_mma above) */
    fa_fwd_out fo = {0};
    forge_status st = fa_case_fwd_out(P, &c, &fo)
                          ? forge_flash_bf16_forward_wgmma(&c.fs, c.q, c.k, c.v, fo.out, fo.lse, c.stream, 0)
                          : FORGE_ERR_OOM;
    fa_case_check_fwd(P, &c, "flash16_forward_wgmma", st, &fo);
    fa_bwd_out bo = {0};
    st = fa_case_bwd_out(P, &c, &bo) ? forge_flash_bf16_backward_wgmma(&c.fs, c.q, c.k, c.v, c.gout, c.gdo, c.glse,
                                                                       bo.delta, bo.dq, bo.dk, bo.dv, c.stream)
                                     : FORGE_ERR_OOM;
    fa_case_check_bwd(P, &c, "flash16_backward_wgmma", st, &bo);
    case_flash16_determinism(P, &c);
    case_flash16_into(P, &c);
    case_flash16_rowstats(P, &c);

    /* the default entries (forge_flash_bf16_forward / _backward: wgmma, mma.sync where wgmma refuses), as a
     * caller gets them */
    {
        fa_fwd_out d = {0};
        fa_bwd_out db = {0};
        st = fa_case_fwd_out(P, &c, &d) && fa_case_bwd_out(P, &c, &db)
                 ? forge_flash_bf16_forward(&c.fs, c.q, c.k, c.v, d.out, d.lse, c.stream, 0)
                 : FORGE_ERR_OOM;
        if (st == FORGE_OK)
            st = forge_flash_bf16_backward(&c.fs, c.q, c.k, c.v, d.out, c.gdo, d.lse, db.delta, db.dq, db.dk, db.dv,
                                           c.stream);
        if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
        if (st != FORGE_OK) {
            report(P, 0, "flash16_default", c.shape, INFINITY, 0, forge_error_message());
        } else {
            fa_check_dev(P, "flash16_default.out", c.shape, d.out, c.no, 1, c.rout, 1.5e-2, 0);
            fa_check_dev(P, "flash16_default.dq", c.shape, db.dq, c.no, 0, c.rdq, 3e-2, 1);
            fa_check_dev(P, "flash16_default.dk", c.shape, db.dk, c.nkv, 0, c.rdk, 3e-2, 1);
            fa_check_dev(P, "flash16_default.dv", c.shape, db.dv, c.nkv, 0, c.rdv, 3e-2, 1);
        }
        void *gd[6] = {d.out, d.lse, db.dq, db.dk, db.dv, db.delta};
        for (int i = 0; i < 6; i++)
            if (gd[i]) P->gpu->mem_free(P->gpu, gd[i]);
    }
    fa_case_free(P, &c);
}

/* Scores that rise along the keys: q's first column 1 and k's first column RISE * key, so a row's scores climb by
 * RISE * 64 * log2(e) / sqrt(D) log2 units a 64-key tile. The D = 64 forward exponentiates a row's later tiles
 * against its first tile's max while they stay below 2^32 of it (fw_tile_ref): RISE 4 (46 log2 units a tile at
 * D = 64) passes that bound every tile; 0.48 (5.5 a tile) in the seventh tile, after five tiles on the fast path
 * with P up to 2^28, and an eighth tile on the fast path again against the raised max. */
static float fa_rise;
static void fa_shape_rising(fa_case *c) {
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->Tq; t++)
            for (int h = 0; h < c->H; h++) {
                const size_t i = ((size_t)b * c->Tq + t) * (size_t)c->qs + (size_t)h * c->D;
                c->fq[i] = bf2f(c->hq[i] = f2bf(1.0f));
            }
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->Tk; t++)
            for (int h = 0; h < c->Hkv; h++) {
                const size_t i = ((size_t)b * c->Tk + t) * (size_t)c->ks + (size_t)h * c->D;
                c->fk[i] = bf2f(c->hk[i] = f2bf(fa_rise * (float)t));
            }
}

static void case_flash16_rising(parity *P, int D, float rise) {
    fa_case c;
    fa_rise = rise;
    if (!fa_case_init_shaped(P, &c, 1, 450, 450, 2, 2, D, 0, fa_shape_rising)) {
        fa_case_free(P, &c);
        return;
    }
    const size_t used = strlen(c.shape);
    snprintf(c.shape + used, sizeof c.shape - used, ", scores rising %g a key", (double)rise);
    fa_fwd_out fo = {0};
    const forge_status st = fa_case_fwd_out(P, &c, &fo)
                                ? forge_flash_bf16_forward_wgmma(&c.fs, c.q, c.k, c.v, fo.out, fo.lse, c.stream, 0)
                                : FORGE_ERR_OOM;
    fa_case_check_fwd(P, &c, "flash16_forward_wgmma.rising", st, &fo);
    fa_case_free(P, &c);
}

/* head dims without a compiled tile are refused with FORGE_ERR_UNSUPPORTED */
static void case_flash16_refuse(parity *P) {
    forge_flash_shape fs = fa_refuse_shape();
    static __attribute__((aligned(16))) char dummy[16];
    float *fd = (float *)dummy;
    fa_expect_refusal(P, "flash16_forward.refuse",
                      forge_flash_bf16_forward(&fs, dummy, dummy, dummy, dummy, fd, NULL, 0));
    fa_expect_refusal(P, "flash16_forward_wgmma.refuse",
                      forge_flash_bf16_forward_wgmma(&fs, dummy, dummy, dummy, dummy, fd, NULL, 0));
    fa_expect_refusal(P, "flash16_backward_wgmma.refuse",
                      forge_flash_bf16_backward_wgmma(&fs, dummy, dummy, dummy, dummy, dummy, fd, fd, fd, fd, fd, NULL));
    /* bf16 gradients at an odd token stride cannot take the pair stores: refused before any launch */
    const forge_flash_shape f64 = {1, 16, 16, 2, 2, 64, 6 * 64, 6 * 64, 6 * 64, 2 * 64};
    const forge_flash_grads odd = {dummy, dummy, dummy, 6 * 64 + 1, 6 * 64, 6 * 64, 1, 0};
    fa_expect_refusal(P, "flash16_backward_into.refuse",
                      forge_flash_bf16_backward_into(&f64, dummy, dummy, dummy, dummy, dummy, fd, fd, &odd, NULL, 0));
}

/* forge's forwards resident as designed: two CTAs per SM at D = 64 (the shared-memory carveout kernel_attrs sets
 * once per context, and the registers __launch_bounds__(FW64_THREADS, 2) caps), one at D = 128 */
static void case_flash16_occupancy(parity *P) {
    for (int d = 64; d <= 128; d += 64) {
        int ctas = 0;
        const forge_status os = forge_flash_bf16_forward_wgmma_occupancy(d, &ctas);
        const int want = d == 64 ? 2 : 1;
        char why[96], shape[32];
        snprintf(why, sizeof why, "(%d CTAs per SM, status %s; the design needs %d)", ctas, forge_status_name(os),
                 want);
        snprintf(shape, sizeof shape, "D=%d", d);
        report(P, os == FORGE_OK && ctas == want, "flash16_forward_wgmma.occupancy", shape, (double)ctas, 0,
               os == FORGE_OK && ctas == want ? NULL : why);
    }
}

/* The backend entry flash_attention_backward_bf16 at head size 64 with the scratch op_list.h sizes for it (the
 * tensor-core path's) and 2-byte-aligned pointers, which the tensor-core kernels refuse: the fallback runs in a
 * buffer of its own. dqkv added into (accumulate = 1) and written into NaN (0), against the CPU reference. */
static void case_flash16_op_fallback(parity *P) {
    const int B = 2, T = 67, NH = 4, NKV = 2, HS = 64;
    const size_t nq = (size_t)B * T * FORGE_QKV(NH, NKV, HS), no = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    const double lse_lo = log((double)T + 1.0);
    for (int accumulate = 1; accumulate >= 0; accumulate--) {
        char op[64], shape[96];
        snprintf(op, sizeof op, "flash16_op_fallback.dqkv");
        snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HS=%d misaligned accumulate=%d", B, T, NH, NKV, HS,
                 accumulate);
        bbuf qkv = {0}, dout = {0}, out = {0}, dqkv = {0};
        fbuf lse = {0}, scratch = {0};
        /* one element more than needed: the views start at element 1 */
        int ok = bbuf_rand(P, &qkv, nq + 1, -1.5f, 1.5f) && bbuf_rand(P, &dout, no + 1, -1, 1) &&
                 bbuf_rand(P, &out, no + 1, -1, 1) && fbuf_rand(P, &lse, nl, (float)lse_lo, (float)lse_lo + 1.0f) &&
                 fbuf_poison(P, &scratch, FORGE_FLASH_BF16_SCRATCH(B, T, NH, NKV, HS)) &&
                 (accumulate ? bbuf_rand(P, &dqkv, nq + 1, -1, 1) : bbuf_poison(P, &dqkv, nq + 1));
        if (!ok) {
            report(P, 0, op, shape, INFINITY, 0, "(could not set up the buffers)");
        } else {
            const forge_status sc = P->cpu->flash_attention_backward_bf16(
                P->cpu, dqkv.c + 1, scratch.c, dout.c + 1, qkv.c + 1, out.c + 1, lse.c, B, T, NH, NKV, HS, accumulate);
            const forge_status sg = P->gpu->flash_attention_backward_bf16(
                P->gpu, dqkv.g + 1, scratch.g, dout.g + 1, qkv.g + 1, out.g + 1, lse.g, B, T, NH, NKV, HS, accumulate);
            if (ran_ok(P, op, shape, sc, sg)) {
                const bbuf view = {nq, dqkv.c + 1, dqkv.g + 1}; /* its GUARD elements are dqkv's guard */
                check_bf16_tol(P, op, shape, &view, FORGE_FLASH_BF16_DQKV_TOL, 0, 0.0);
            }
        }
        bbuf_free(P, &qkv), bbuf_free(P, &dout), bbuf_free(P, &out), bbuf_free(P, &dqkv);
        fbuf_free(P, &lse), fbuf_free(P, &scratch);
    }
}

void run_flash16_cases(parity *P) {
    for (size_t i = 0; i < sizeof FA_CASE_SHAPES / sizeof FA_CASE_SHAPES[0]; i++) {
        const int *s = FA_CASE_SHAPES[i];
        if (P->quick && s[1] > 300) continue;
        case_flash16(P, s[0], s[1], s[2], s[3], s[4], s[5], s[6]);
    }
    for (int d = 64; d <= 128; d += 64) {
        case_flash16_rising(P, d, 4.0f);
        case_flash16_rising(P, d, 0.48f);
    }
    case_flash16_refuse(P);
    case_flash16_occupancy(P);
    case_flash16_op_fallback(P);
}
