/*
 * test_ops_bf16_attn.c: the bf16 CPU references (src/backend/cpu/attention_bf16.c,
 * classifier_bf16.c, adamw.c: the oracle of the CUDA bf16 kernels) against
 * independent float64 evaluations that round at the same points
 * (docs/mixed-precision.md), and each backward against the fp32 backward of
 * the same bf16 inputs.
 *
 * Same roundings, different arithmetic: a value the reference computes in fp32
 * and the float64 evaluation in double can round to neighbouring bf16 values
 * when it lies next to a rounding boundary, so bf16 results are compared within
 * one bf16 ulp (plus, where an intermediate bf16 rounding (P, dS, dlogits) can
 * land one ulp apart, that ulp's effect on the sum). fp32 results: absolute
 * bounds of fp32 summation.
 *
 * Against the fp32 backward (the same bf16 inputs widened, the fp32 op, its
 * result rounded where the bf16 op stores): the fp32 op does not round P, dS or
 * dlogits, so a gradient differs by the bf16 rounding of those terms, <= 2^-8
 * of the terms' absolute sum, bounded here by 2^-6 of the largest gradient,
 * plus the output's own ulp.
 *
 * The classifier's inputs are multiples of 1/16 (inp) and 1/256 (wte) with few
 * bits, so every logit's fp32 sum is exact and both evaluations round the same
 * logits (the rounding of the logits is then tested exactly).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "ops/cpu_fixtures.h"
#include "test.h"

static inline float bf(forge_bf16 h) { return forge_bf16_to_f32(h); }
static inline forge_bf16 rnb(double x) { return forge_bf16_from_f32((float)x); }

/* one bf16 ulp at |c| (the smallest normal's ulp at 0) */
static double bulp(double c) {
    int e;
    if (c == 0.0) return ldexp(1.0, -133);
    frexp(fabs(c), &e);
    return ldexp(1.0, e - 8);
}

static forge_bf16 *bx_random(forge_rng *rng, size_t n, float lo, float hi) {
    forge_bf16 *x = malloc((n ? n : 1) * sizeof *x);
    if (x)
        for (size_t i = 0; i < n; i++) x[i] = forge_bf16_from_f32(lo + (hi - lo) * forge_rng_uniform(rng));
    return x;
}

static float *bx_widen(const forge_bf16 *x, size_t n) {
    float *y = fx_floats(n);
    if (y)
        for (size_t i = 0; i < n; i++) y[i] = bf(x[i]);
    return y;
}

static forge_bf16 *bx_copy(const forge_bf16 *x, size_t n) {
    forge_bf16 *y = malloc((n ? n : 1) * sizeof *y);
    if (y && n) memcpy(y, x, n * sizeof *y);
    return y;
}

/* max over i of |a_i - b_i| - (k ulps of b_i + abs): > 0 means a failure; NaN anywhere gives +inf */
static double bx_excess(const forge_bf16 *a, const forge_bf16 *b, size_t n, double k, double abs_tol, size_t *at) {
    double worst = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double x = bf(a[i]), y = bf(b[i]);
        double e = (isnan(x) || isnan(y)) ? INFINITY : fabs(x - y) - (k * bulp(y) + abs_tol);
        if (e > worst) {
            worst = e;
            *at = i;
        }
    }
    return n ? worst : 0.0;
}

/* ---- flash attention ------------------------------------------------------------------------------------------- */

typedef struct {
    int B, T, NH, NKV, HS;
} fshape;

static double fdot(const forge_bf16 *a, const forge_bf16 *b, int n) {
    double s = 0.0;
    for (int e = 0; e < n; e++) s += (double)bf(a[e]) * bf(b[e]);
    return s;
}

/* float64 forward with the reference's roundings: P = rn(exp(s - m)) for P.V at the final max, out rounded */
static void dref_forward(const fshape *s, const forge_bf16 *qkv, forge_bf16 *out, double *lse) {
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HS = s->HS, g = NH / NKV;
    const size_t row = (size_t)(NH + 2 * NKV) * HS, orow = (size_t)NH * HS;
    const double scale = 1.0 / sqrt((double)HS);
    double *sc = malloc(sizeof(double) * (size_t)T), *o = malloc(sizeof(double) * (size_t)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const forge_bf16 *q = qkv + ((size_t)b * T + i) * row + (size_t)h * HS;
                const forge_bf16 *kb = qkv + (size_t)b * T * row + (size_t)(NH + h / g) * HS;
                const forge_bf16 *vb = qkv + (size_t)b * T * row + (size_t)(NH + NKV + h / g) * HS;
                double m = -INFINITY, l = 0.0;
                for (int j = 0; j <= i; j++) {
                    sc[j] = fdot(q, kb + (size_t)j * row, HS) * scale;
                    if (sc[j] > m) m = sc[j];
                }
                for (int d = 0; d < HS; d++) o[d] = 0.0;
                for (int j = 0; j <= i; j++) {
                    double e = exp(sc[j] - m), p = bf(rnb(e));
                    l += e;
                    for (int d = 0; d < HS; d++) o[d] += p * bf(vb[(size_t)j * row + d]);
                }
                for (int d = 0; d < HS; d++) out[((size_t)b * T + i) * orow + (size_t)h * HS + d] = rnb(o[d] / l);
                lse[((size_t)b * NH + h) * T + i] = m + log(l);
            }
    free(sc);
    free(o);
}

/* float64 gradient d (packed like qkv) with the reference's roundings: rn(P) for dV, rn(P (dP - D)) for dQ, dK */
static void dref_backward(const fshape *s, const forge_bf16 *qkv, const forge_bf16 *dout, const forge_bf16 *out,
                          const float *lse, double *d) {
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, HS = s->HS, g = NH / NKV;
    const size_t row = (size_t)(NH + 2 * NKV) * HS, orow = (size_t)NH * HS;
    const double scale = 1.0 / sqrt((double)HS);
    memset(d, 0, sizeof(double) * (size_t)B * T * row);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const size_t bi = (size_t)b * T + i;
                const forge_bf16 *q = qkv + bi * row + (size_t)h * HS, *dO = dout + bi * orow + (size_t)h * HS;
                const double Di = (float)fdot(dO, out + bi * orow + (size_t)h * HS, HS);
                const double L = lse[((size_t)b * NH + h) * T + i];
                for (int j = 0; j <= i; j++) {
                    const size_t bj = (size_t)b * T + j;
                    const forge_bf16 *k = qkv + bj * row + (size_t)(NH + h / g) * HS;
                    const forge_bf16 *v = qkv + bj * row + (size_t)(NH + NKV + h / g) * HS;
                    const double p = exp(fdot(q, k, HS) * scale - L);
                    const double ds = bf(rnb(p * (fdot(dO, v, HS) - Di))), pr = bf(rnb(p));
                    for (int e = 0; e < HS; e++) {
                        d[bi * row + (size_t)h * HS + e] += scale * ds * bf(k[e]);
                        d[bj * row + (size_t)(NH + h / g) * HS + e] += scale * ds * bf(q[e]);
                        d[bj * row + (size_t)(NH + NKV + h / g) * HS + e] += pr * bf(dO[e]);
                    }
                }
            }
}

static void flash_case(forge_backend *be, forge_rng *rng, fshape s) {
    const int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HS = s.HS;
    const size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, no = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    forge_bf16 *qkv = bx_random(rng, nq, -1.5f, 1.5f), *dout = bx_random(rng, no, -1, 1);
    forge_bf16 *dq0 = bx_random(rng, nq, -1, 1), *out = malloc(no * 2 + 2), *rout = malloc(no * 2 + 2);
    forge_bf16 *dqkv = bx_copy(dq0, nq), *rdqkv = malloc(nq * 2 + 2), *fdqkv = malloc(nq * 2 + 2);
    float *lse = fx_floats(nl), *scratch = fx_floats(FORGE_FLASH_BF16_SCRATCH(B, T, NH, NKV, HS));
    double *rlse = malloc(nl * 8 + 8), *d = malloc(nq * 8 + 8);
    float *q32 = bx_widen(qkv, nq), *do32 = NULL, *o32 = NULL, *acc32 = NULL;
    CHECK_OK(be->flash_attention_forward_bf16(be, out, lse, qkv, B, T, NH, NKV, HS));
    dref_forward(&s, qkv, rout, rlse);
    size_t at = 0;
    double ex = bx_excess(out, rout, no, 1.0, 0.0, &at);
    CHECK_MSG(ex <= 0, "B=%d T=%d NH=%d NKV=%d HS=%d: out[%zu] = %g vs float64 %g (beyond one bf16 ulp)", B, T, NH, NKV,
              HS, at, bf(out[at]), bf(rout[at]));
    double le = 0.0;
    for (size_t i = 0; i < nl; i++) le = fmax(le, fabs(lse[i] - rlse[i]));
    CHECK_MSG(le <= 1e-5, "B=%d T=%d HS=%d: lse off by %g", B, T, HS, le);

    /* backward on the forward's own out and lse */
    CHECK_OK(be->flash_attention_backward_bf16(be, dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, HS, 1));
    dref_backward(&s, qkv, dout, out, lse, d);
    double dmax = 0.0;
    for (size_t i = 0; i < nq; i++) {
        dmax = fmax(dmax, fabs(d[i]));
        rdqkv[i] = rnb(bf(dq0[i]) + d[i]);
    }
    /* one ulp of the sum, and an intermediate rounding (of P or dS) landing one ulp apart: 2^-8 of a term */
    ex = bx_excess(dqkv, rdqkv, nq, 1.0, ldexp(dmax, -8), &at);
    CHECK_MSG(ex <= 0, "B=%d T=%d NH=%d NKV=%d HS=%d: dqkv[%zu] = %g vs float64 %g (init %g, max|d| %g)", B, T, NH,
              NKV, HS, at, bf(dqkv[at]), bf(rdqkv[at]), bf(dq0[at]), dmax);

    /* against the fp32 backward of the same bf16 inputs: dqkv widened, the fp32 op adds d, then one rounding */
    do32 = bx_widen(dout, no);
    o32 = bx_widen(out, no);
    acc32 = bx_widen(dq0, nq);
    CHECK_OK(be->flash_attention_backward(be, acc32, scratch, do32, q32, o32, lse, B, T, NH, NKV, HS));
    for (size_t i = 0; i < nq; i++) fdqkv[i] = forge_bf16_from_f32(acc32[i]);
    ex = bx_excess(dqkv, fdqkv, nq, 1.0, ldexp(dmax, -6), &at);
    CHECK_MSG(ex <= 0, "B=%d T=%d NH=%d NKV=%d HS=%d: dqkv[%zu] = %g vs the fp32 backward's %g (max|d| %g)", B, T, NH,
              NKV, HS, at, bf(dqkv[at]), bf(fdqkv[at]), dmax);
    free(qkv), free(dout), free(dq0), free(out), free(rout), free(dqkv), free(rdqkv), free(fdqkv);
    free(lse), free(scratch), free(rlse), free(d), free(q32), free(do32), free(o32), free(acc32);
}

static void test_flash_bf16(void) {
    TEST_CASE("flash attention bf16: reference vs float64 with the same roundings, backward vs the fp32 backward");
    forge_backend *be = NULL;
    forge_rng rng;
    forge_rng_seed(&rng, 17, 3);
    CHECK_OK(forge_backend_create_cpu(&be, 1, 1));
    if (!be) return;
    /* T = 1 (one key), past one 64-key tile, GQA, odd and small head sizes, 64 and 128 */
    const fshape cases[] = {{1, 1, 2, 1, 64}, {2, 70, 4, 2, 16}, {1, 67, 6, 6, 7},
                            {1, 130, 4, 1, 64}, {2, 33, 2, 2, 128}, {1, 40, 6, 2, 6}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) flash_case(be, &rng, cases[c]);
    /* B = 0 and T = 0 are no-ops */
    CHECK_OK(be->flash_attention_forward_bf16(be, NULL, NULL, NULL, 0, 5, 2, 1, 8));
    CHECK_OK(be->flash_attention_backward_bf16(be, NULL, NULL, NULL, NULL, NULL, NULL, 3, 0, 2, 1, 8, 1));
    CHECK(be->flash_attention_forward_bf16(be, NULL, NULL, NULL, 1, 1, 3, 2, 8) == FORGE_ERR_ARG);
    forge_error_clear();
    forge_backend_destroy(be);
}

/* ---- classifier ------------------------------------------------------------------------------------------------ */

/* few-bit values: k/16, |k| <= 16 (inp) and k/256, |k| <= 25 (wte), so every logit's fp32 sum is exact */
static forge_bf16 *bx_grid(forge_rng *rng, size_t n, int kmax, double step) {
    forge_bf16 *x = malloc((n ? n : 1) * sizeof *x);
    if (x)
        for (size_t i = 0; i < n; i++) x[i] = rnb(((int)forge_rng_below(rng, 2 * kmax + 1) - kmax) * step);
    return x;
}

static void classifier_case(forge_backend *be, forge_rng *rng, int N, int C, int V, int ignore_pct, float gs,
                            int chunk_rows) {
    const int ig = -100;
    forge_bf16 *inp = bx_grid(rng, (size_t)N * C, 16, 1.0 / 16), *wte = bx_grid(rng, (size_t)V * C, 25, 1.0 / 256);
    forge_bf16 *di0 = bx_random(rng, (size_t)N * C, -1, 1), *dinp = bx_copy(di0, (size_t)N * C);
    forge_bf16 *rdinp = malloc((size_t)N * C * 2 + 2);
    float *dw0 = fx_random(rng, (size_t)V * C, -1, 1), *dwte = fx_copy(dw0, (size_t)V * C);
    float *losses = fx_floats(N), *scratch = fx_floats(FORGE_CLS_BF16_SCRATCH(N, C, V, chunk_rows));
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)(N ? N : 1));
    for (int n = 0; n < N; n++)
        tg[n] = forge_rng_below(rng, 100) < (uint64_t)ignore_pct ? ig : (int)forge_rng_below(rng, (uint64_t)V);
    CHECK_OK(be->classifier_bf16(be, losses, dinp, dwte, scratch, inp, wte, tg, N, C, V, ig, gs, 1, chunk_rows));

    /* float64, the same roundings: logits (exact sums) rounded, dlogits rounded, dinp rounded after the add */
    double *x = malloc(sizeof(double) * (size_t)V), *dx = malloc(sizeof(double) * (size_t)C);
    double *dwr = malloc(sizeof(double) * (size_t)V * C), le = 0.0, we = 0.0;
    const int vs_fp32 = N > 0 && (size_t)N * V <= ((size_t)1 << 22); /* the fp32 ops below hold all N x V logits */
    float *lg32 = fx_floats(vs_fp32 ? (size_t)N * V : 0), *dx32 = fx_floats((size_t)N * C);
    float *dw32 = fx_floats((size_t)V * C);
    float *l32 = fx_floats(N), *in32 = bx_widen(inp, (size_t)N * C), *w32 = bx_widen(wte, (size_t)V * C);
    forge_bf16 *dl = malloc((size_t)V * 2 + 2);
    for (size_t i = 0; i < (size_t)V * C; i++) dwr[i] = dw0[i];
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) dx[c] = 0.0;
        if (tg[n] == ig) {
            CHECK(losses[n] == 0.0f);
        } else {
            double m = -INFINITY, S = 0.0;
            for (int v = 0; v < V; v++) {
                x[v] = bf(rnb(fdot(inp + (size_t)n * C, wte + (size_t)v * C, C)));
                m = fmax(m, x[v]);
            }
            for (int v = 0; v < V; v++) S += exp(x[v] - m);
            le = fmax(le, fabs(losses[n] - (m + log(S) - x[tg[n]])));
            for (int v = 0; v < V; v++) {
                dl[v] = rnb((exp(x[v] - m) / S - (v == tg[n])) * gs);
                for (int c = 0; c < C; c++) {
                    dx[c] += (double)bf(dl[v]) * bf(wte[(size_t)v * C + c]);
                    dwr[(size_t)v * C + c] += (double)bf(dl[v]) * bf(inp[(size_t)n * C + c]);
                }
            }
        }
        for (int c = 0; c < C; c++) rdinp[(size_t)n * C + c] = rnb(bf(di0[(size_t)n * C + c]) + dx[c]);
    }
    CHECK_MSG(le <= 1e-4, "N=%d C=%d V=%d: loss off by %g", N, C, V, le);
    size_t at = 0;
    /* one ulp of the sum, one dlogit landing one ulp apart (2^-8 gs |wte| <= 2^-8 gs 0.1), and the reference's
     * fp32 sum over V terms (the worst-case bound V 2^-24 sum |dlogit wte| <= V 2^-24 2 gs 0.1: with V ~ 1e6
     * nearly equal tiny terms added to one large one, the roundings are correlated, so sqrt(V) does not hold) */
    double ex = bx_excess(dinp, rdinp, (size_t)N * C, 1.0, ldexp(gs, -8) * 0.1 + V * ldexp(2.0 * gs * 0.1, -24),
                          &at);
    CHECK_MSG(ex <= 0, "N=%d C=%d V=%d: dinp[%zu] = %g vs float64 %g", N, C, V, at, bf(dinp[at]), bf(rdinp[at]));
    for (size_t i = 0; i < (size_t)V * C; i++) we = fmax(we, fabs(dwte[i] - dwr[i]));
    CHECK_MSG(we <= 1e-5 + ldexp(gs, -8), "N=%d C=%d V=%d: dwte off by %g", N, C, V, we);

    /* against the fp32 ops on the same bf16 inputs: matmul (logits), the fp32 classifier, the two matmul backwards
     * (they hold all N x V logits at once: skipped for the many-chunk case) */
    if (vs_fp32) {
        CHECK_OK(be->matmul_forward(be, lg32, in32, w32, NULL, N, C, V));
        CHECK_OK(be->classifier_forward_backward(be, l32, lg32, tg, N, V, ig, gs));
        CHECK_OK(be->matmul_backward_input(be, dx32, lg32, w32, N, C, V));
        CHECK_OK(be->matmul_backward_weight(be, dw32, NULL, lg32, in32, N, C, V));
        /* the loss moves with the rounding of the logits: <= one ulp of the largest logit (|logit| <= 0.1 C) */
        double e_l = 0.0, gmax = 0.0, e_d = 0.0, wmax = 0.0, e_w = 0.0;
        for (int n = 0; n < N; n++) e_l = fmax(e_l, fabs(losses[n] - l32[n]));
        for (size_t i = 0; i < (size_t)N * C; i++) {
            gmax = fmax(gmax, fabs(dx32[i]));
            e_d = fmax(e_d, fabs(bf(dinp[i]) - (bf(di0[i]) + dx32[i])) - bulp(bf(dinp[i])));
        }
        for (size_t i = 0; i < (size_t)V * C; i++) {
            wmax = fmax(wmax, fabs(dw32[i]));
            e_w = fmax(e_w, fabs((dwte[i] - dw0[i]) - dw32[i]));
        }
        CHECK_MSG(e_l <= 2.0 * bulp(0.1 * C) + 1e-5, "N=%d C=%d V=%d: loss vs the fp32 ops off by %g", N, C, V, e_l);
        CHECK_MSG(e_d <= ldexp(gmax, -6) + 1e-6,
                  "N=%d C=%d V=%d: dinp vs the fp32 ops off by %g beyond its ulp (max %g)", N, C, V, e_d, gmax);
        CHECK_MSG(e_w <= ldexp(wmax, -6) + 1e-5, "N=%d C=%d V=%d: dwte vs the fp32 ops off by %g (max %g)", N, C, V,
                  e_w, wmax);
    }
    free(inp), free(wte), free(di0), free(dinp), free(rdinp), free(dw0), free(dwte), free(losses), free(scratch);
    free(tg), free(x), free(dx), free(dwr), free(lg32), free(dx32), free(dw32), free(l32), free(in32), free(w32);
    free(dl);
}

/* The chunk size changes no result of the reference: losses, dinp and dwte bitwise equal in one chunk and in
 * chunks of 8 (equal chunks), 13 (a limit that is not a multiple of 8) and 1 row. */
static void classifier_chunks_case(forge_backend *be, forge_rng *rng) {
    const int N = 61, C = 24, V = 517, ig = -100, limits[3] = {8, 13, 1};
    forge_bf16 *inp = bx_random(rng, (size_t)N * C, -1, 1), *wte = bx_random(rng, (size_t)V * C, -0.1, 0.1);
    forge_bf16 *d0 = bx_random(rng, (size_t)N * C, -1, 1), *d1 = bx_copy(d0, (size_t)N * C);
    float *w0 = fx_random(rng, (size_t)V * C, -1, 1), *w1 = fx_copy(w0, (size_t)V * C);
    float *l0 = fx_floats(N), *l1 = fx_floats(N), *scratch = fx_floats(FORGE_CLS_BF16_SCRATCH(N, C, V, 0));
    int32_t tg[61];
    for (int n = 0; n < N; n++) tg[n] = n % 7 == 3 ? ig : (int)forge_rng_below(rng, (uint64_t)V);
    CHECK(FORGE_CLS_BF16_ROWS(N, V, 8) == 8 && FORGE_CLS_BF16_ROWS(N, V, 16) == 16 &&
          FORGE_CLS_BF16_ROWS(N, V, 24) == 24 && FORGE_CLS_BF16_ROWS(N, V, 40) == 32);
    CHECK_OK(be->classifier_bf16(be, l0, d0, w0, scratch, inp, wte, tg, N, C, V, ig, 0.5f, 1, 0));
    for (int k = 0; k < 3; k++) {
        forge_bf16 *dk = bx_copy(d1, (size_t)N * C); /* the inputs d0 and w0 had */
        float *wk = fx_copy(w1, (size_t)V * C);
        CHECK_OK(be->classifier_bf16(be, l1, dk, wk, scratch, inp, wte, tg, N, C, V, ig, 0.5f, 1, limits[k]));
        CHECK_MSG(memcmp(l0, l1, sizeof(float) * N) == 0, "chunk_rows %d: losses differ", limits[k]);
        CHECK_MSG(memcmp(d0, dk, sizeof(forge_bf16) * (size_t)N * C) == 0, "chunk_rows %d: dinp differs", limits[k]);
        CHECK_MSG(memcmp(w0, wk, sizeof(float) * (size_t)V * C) == 0, "chunk_rows %d: dwte differs", limits[k]);
        free(dk), free(wk);
    }
    free(inp), free(wte), free(d0), free(d1), free(w0), free(w1), free(l0), free(l1), free(scratch);
}

static void test_classifier_bf16(void) {
    TEST_CASE("classifier bf16: reference vs float64 with the same roundings and vs the fp32 ops");
    forge_backend *be = NULL;
    forge_rng rng;
    forge_rng_seed(&rng, 23, 5);
    CHECK_OK(forge_backend_create_cpu(&be, 1, 1));
    if (!be) return;
    classifier_case(be, &rng, 37, 45, 300, 25, 0.03f, 0);
    classifier_case(be, &rng, 9, 16, 7, 30, 1.0f, 0);
    classifier_case(be, &rng, 1, 8, 1001, 0, 0.5f, 0);
    /* several chunks: chunk_rows 127 (not a multiple of 8: chunks of 127, 127, 46) */
    CHECK(FORGE_CLS_BF16_ROWS(300, (1 << 20) + 3, 127) == 127);
    classifier_case(be, &rng, 300, 2, (1 << 20) + 3, 10, 0.25f, 127);
    classifier_case(be, &rng, 0, 8, 50, 0, 1.0f, 0);
    /* the chunk rows: the cap (2^30 logits, a multiple of 128 above 128 rows, at most 16384 rows); N above the
     * limit in equal chunks rounded up to 8 rows where the limit is a multiple of 8; chunk_rows only lowers it */
    CHECK(FORGE_CLS_BF16_CAP(50257) == 16384 && FORGE_CLS_BF16_CAP((1 << 20) + 3) == 896);
    CHECK(FORGE_CLS_BF16_ROWS(16384, 50257, 0) == 16384 && FORGE_CLS_BF16_ROWS(32768, 50257, 0) == 16384);
    CHECK(FORGE_CLS_BF16_ROWS(16385, 50257, 0) == 8200 && FORGE_CLS_BF16_ROWS(1803, 131101, 896) == 608);
    CHECK(FORGE_CLS_BF16_ROWS(100, 50257, 1 << 20) == 100 && FORGE_CLS_BF16_ROWS(1 << 20, 50257, 1 << 20) == 16384);
    CHECK(FORGE_CLS_BF16_ROWS(5, (1 << 30) + 1, 0) == 1 && FORGE_CLS_BF16_SCRATCH(5, 4, (1 << 30) + 1, 0) >= (1u << 30));
    classifier_chunks_case(be, &rng);

    /* a target outside [0, V) that is not ignore_index: an error, and nothing written */
    forge_bf16 inp[4] = {0}, wte[8] = {0}, dinp[4] = {0};
    float losses[2] = {7.0f, 7.0f}, dwte[8] = {0}, scratch[64];
    int32_t tg[2] = {1, 4};
    CHECK(be->classifier_bf16(be, losses, dinp, dwte, scratch, inp, wte, tg, 2, 2, 4, -100, 1.0f, 1, 0) == FORGE_ERR_ARG);
    CHECK(losses[0] == 7.0f && losses[1] == 7.0f);
    forge_error_clear();
    forge_backend_destroy(be);
}

/* ---- adamw ----------------------------------------------------------------------------------------------------- */

static void test_adamw_bf16(void) {
    TEST_CASE("adamw with param_bf16: the fp32 update bit for bit, and param_bf16 = rn(param)");
    forge_backend *be = NULL;
    forge_rng rng;
    forge_rng_seed(&rng, 31, 1);
    CHECK_OK(forge_backend_create_cpu(&be, 2, 0));
    if (!be) return;
    const size_t n = 4099;
    float *p = fx_random(&rng, n, -1, 1), *g = fx_random(&rng, n, -1, 1), *m = fx_random(&rng, n, -0.1f, 0.1f);
    float *v = fx_random(&rng, n, 1e-4f, 1e-2f);
    float *p2 = fx_copy(p, n), *m2 = fx_copy(m, n), *v2 = fx_copy(v, n), sumsq = 50.0f;
    forge_bf16 *pb = malloc(n * sizeof *pb);
    forge_adamw_params hp = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .max_grad_norm = 1.0f};
    const forge_adamw_span spans[2] = {{0, 1000, 0.0f}, {1000, (uint32_t)n - 1000, 0.1f}};
    const float scalars[3] = {1e-2f, 1.0f - powf(0.9f, 3.0f), 1.0f - powf(0.95f, 3.0f)};
    CHECK_OK(be->adamw(be, p, NULL, g, m, v, n, spans, 2, &sumsq, scalars, hp));
    CHECK_OK(be->adamw(be, p2, pb, g, m2, v2, n, spans, 2, &sumsq, scalars, hp));
    CHECK(memcmp(p, p2, n * 4) == 0 && memcmp(m, m2, n * 4) == 0 && memcmp(v, v2, n * 4) == 0);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += pb[i] != forge_bf16_from_f32(p2[i]);
    CHECK_MSG(bad == 0, "%zu of %zu bf16 copies are not rn(param)", bad, n);
    free(p), free(g), free(m), free(v), free(p2), free(m2), free(v2), free(pb);
    forge_backend_destroy(be);
}

void suite_ops_bf16_attn(void) {
    test_flash_bf16();
    test_classifier_bf16();
    test_adamw_bf16();
}
