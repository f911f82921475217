/*
 * test_flash.c: the fused (flash) attention of the CPU backend against a
 * float64 evaluation of the same formulas with the (Tq, Tk) scores written
 * out, and, where Tq = Tk, against the materialised attention op.
 *
 * What each case pins down: out, lse (= log-sum-exp of the scaled, causally
 * masked scores, natural log) and the three gradient blocks (dQ into qkv_q's
 * query heads, dK/dV into qkv_kv's key/value heads), at T = 1, at T past one
 * 64-key tile and not a multiple of it, with GQA (NH=4 over NKV=2 and NKV=1),
 * HS 64/128 and an odd HS, and with Tk < Tq, where the first Tq - Tk rows see
 * no key: their out must be exactly 0, their lse -INFINITY, their gradients
 * exactly 0, and nothing anywhere may be NaN. The gradient buffers start from
 * random values, so an op that overwrites instead of accumulating fails.
 *
 * Tolerance: fp32 against fp64, relative to the largest reference entry
 * (fx_rel_err); the sums are at most a few hundred terms long, so 2e-5 is
 * loose for correct code and far below any formula error.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "ops/attention_memory.h"
#include "ops/cpu_fixtures.h"
#include "test.h"

#define FLASH_TOL 2e-5

typedef struct {
    int B, Tq, Tk, NH, NKV, HS;
} flash_shape;

/* float64 reference: out (B,Tq,NH*HS), lse (B,NH,Tq); dq/dkv accumulate the
 * gradients of sum(out * dout) into the packed layouts of qkv_q / qkv_kv. */
static void ref_flash(const flash_shape *s, const float *qq, const float *qk, const float *dout,
                      double *out, double *lse, double *dq, double *dkv) {
    int B = s->B, Tq = s->Tq, Tk = s->Tk, NH = s->NH, NKV = s->NKV, HS = s->HS;
    size_t row = (size_t)(NH + 2 * NKV) * HS, orow = (size_t)NH * HS;
    int group = NH / NKV, off = Tk - Tq;
    double scale = 1.0 / sqrt((double)HS);
    double *p = malloc(sizeof(double) * (size_t)(Tk > 0 ? Tk : 1));
    double *dp = malloc(sizeof(double) * (size_t)(Tk > 0 ? Tk : 1));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kvh = h / group;
            for (int i = 0; i < Tq; i++) {
                const float *q = qq + ((size_t)b * Tq + i) * row + (size_t)h * HS;
                const float *d = dout + ((size_t)b * Tq + i) * orow + (size_t)h * HS;
                double *o = out + ((size_t)b * Tq + i) * orow + (size_t)h * HS;
                int n = i + off + 1 < Tk ? i + off + 1 : Tk; /* visible keys 0..n-1 */
                for (int e = 0; e < HS; e++) o[e] = 0.0;
                if (n <= 0) {
                    lse[((size_t)b * NH + h) * Tq + i] = -INFINITY;
                    continue;
                }
                double mx = -INFINITY;
                for (int j = 0; j < n; j++) {
                    const float *k = qk + ((size_t)b * Tk + j) * row + (size_t)(NH + kvh) * HS;
                    double acc = 0.0;
                    for (int e = 0; e < HS; e++) acc += (double)q[e] * k[e];
                    p[j] = acc * scale;
                    if (p[j] > mx) mx = p[j];
                }
                double sum = 0.0;
                for (int j = 0; j < n; j++) sum += exp(p[j] - mx);
                lse[((size_t)b * NH + h) * Tq + i] = mx + log(sum);
                double D = 0.0;
                for (int j = 0; j < n; j++) {
                    p[j] = exp(p[j] - mx) / sum;
                    const float *v = qk + ((size_t)b * Tk + j) * row + (size_t)(NH + NKV + kvh) * HS;
                    double acc = 0.0;
                    for (int e = 0; e < HS; e++) {
                        o[e] += p[j] * v[e];
                        acc += (double)d[e] * v[e];
                    }
                    dp[j] = acc;
                    D += p[j] * acc;
                }
                double *dqr = dq + ((size_t)b * Tq + i) * row + (size_t)h * HS;
                for (int j = 0; j < n; j++) {
                    double g = p[j] * (dp[j] - D) * scale;
                    size_t kj = ((size_t)b * Tk + j) * row;
                    const float *k = qk + kj + (size_t)(NH + kvh) * HS;
                    double *dk = dkv + kj + (size_t)(NH + kvh) * HS;
                    double *dv = dkv + kj + (size_t)(NH + NKV + kvh) * HS;
                    for (int e = 0; e < HS; e++) {
                        dqr[e] += g * k[e];
                        dk[e] += g * q[e];
                        dv[e] += p[j] * d[e];
                    }
                }
            }
        }
    free(p);
    free(dp);
}

static double rel_err_d(const float *a, const double *b, size_t n) {
    double diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        if (isinf(b[i]) || isinf(a[i])) {
            if (a[i] != b[i]) return INFINITY;
            continue;
        }
        double d = fabs((double)a[i] - b[i]);
        if (d > diff) diff = d;
        if (fabs(b[i]) > scale) scale = fabs(b[i]);
    }
    return scale > 0.0 ? diff / scale : diff;
}

#define CHECK_REL(a, b, n, tol)                                                                 \
    do {                                                                                        \
        double e_ = rel_err_d((a), (b), (n));                                                   \
        CHECK_MSG(e_ <= (tol), "%s vs %s: rel err %.3g > %.3g", #a, #b, e_, (double)(tol));     \
    } while (0)

static void run_case(forge_backend *be, forge_rng *rng, flash_shape s) {
    char name[160];
    snprintf(name, sizeof name, "flash vs fp64 reference on %s: B=%d Tq=%d Tk=%d NH=%d NKV=%d HS=%d",
             be->name, s.B, s.Tq, s.Tk, s.NH, s.NKV, s.HS);
    TEST_CASE(name);
    size_t row = (size_t)(s.NH + 2 * s.NKV) * s.HS;
    size_t nq = (size_t)s.B * s.Tq * row, nk = (size_t)s.B * s.Tk * row;
    size_t nout = (size_t)s.B * s.Tq * s.NH * s.HS, nlse = (size_t)s.B * s.NH * s.Tq;
    int same = s.Tq == s.Tk;
    float *qq = fx_random(rng, nq, -1.5f, 1.5f);
    float *qk = same ? qq : fx_random(rng, nk, -1.5f, 1.5f);
    float *dout = fx_random(rng, nout, -1, 1);
    float *out = fx_random(rng, nout, -1, 1), *lse = fx_random(rng, nlse, -1, 1);
    float *base_q = fx_random(rng, nq, -1, 1), *base_k = same ? base_q : fx_random(rng, nk, -1, 1);
    float *dq = fx_copy(base_q, nq), *dk = same ? dq : fx_copy(base_k, nk);
    float *scratch = fx_random(rng, nlse, -1, 1);
    double *rout = calloc(nout, sizeof(double)), *rlse = calloc(nlse ? nlse : 1, sizeof(double));
    double *rdq = calloc(nq, sizeof(double)), *rdk = same ? rdq : calloc(nk ? nk : 1, sizeof(double));

    CHECK_OK(be->flash_attention_forward_ext(be, out, lse, qq, qk, s.B, s.Tq, s.Tk, s.NH, s.NKV, s.HS));
    CHECK_OK(be->flash_attention_backward_ext(be, dq, dk, scratch, dout, qq, qk, out, lse, s.B, s.Tq, s.Tk,
                                              s.NH, s.NKV, s.HS));
    ref_flash(&s, qq, qk, dout, rout, rlse, rdq, rdk);
    /* the gradients the op added */
    for (size_t i = 0; i < nq; i++) dq[i] -= base_q[i];
    if (!same)
        for (size_t i = 0; i < nk; i++) dk[i] -= base_k[i];
    CHECK_REL(out, rout, nout, FLASH_TOL);
    CHECK_REL(lse, rlse, nlse, FLASH_TOL);
    CHECK_REL(dq, rdq, nq, FLASH_TOL);
    if (!same) CHECK_REL(dk, rdk, nk, FLASH_TOL);

    /* rows that see no key: exact zeros and -inf */
    int masked = s.Tq - s.Tk;
    for (int b = 0; b < s.B; b++)
        for (int i = 0; i < masked && i < s.Tq; i++) {
            for (int h = 0; h < s.NH; h++) {
                CHECK(isinf(lse[((size_t)b * s.NH + h) * s.Tq + i]) && lse[((size_t)b * s.NH + h) * s.Tq + i] < 0);
                for (int e = 0; e < s.HS; e++) {
                    CHECK(out[((size_t)b * s.Tq + i) * s.NH * s.HS + (size_t)h * s.HS + e] == 0.0f);
                    CHECK(dq[((size_t)b * s.Tq + i) * row + (size_t)h * s.HS + e] == 0.0f);
                }
            }
        }

    if (same) { /* the materialised op must agree too */
        size_t natt = (size_t)s.B * s.NH * s.Tq * s.Tq;
        float *mout = fx_floats(nout), *att = fx_floats(natt), *mscr = fx_floats(natt);
        float *md = fx_copy(base_q, nq);
        CHECK_OK(be->attention_forward(be, mout, att, qq, s.B, s.Tq, s.NH, s.NKV, s.HS));
        CHECK_OK(be->attention_backward(be, md, mscr, dout, qq, att, s.B, s.Tq, s.NH, s.NKV, s.HS));
        for (size_t i = 0; i < nq; i++) md[i] -= base_q[i];
        CHECK_MSG(fx_rel_err(out, mout, nout) <= FLASH_TOL, "out vs materialised: %.3g",
                  fx_rel_err(out, mout, nout));
        CHECK_MSG(fx_rel_err(dq, md, nq) <= FLASH_TOL, "dqkv vs materialised: %.3g", fx_rel_err(dq, md, nq));
        free(mout), free(att), free(mscr), free(md);
    }
    free(qq), free(dout), free(out), free(lse), free(base_q), free(dq), free(scratch);
    free(rout), free(rlse), free(rdq);
    if (!same) free(qk), free(base_k), free(dk), free(rdk);
}

static const flash_shape cases[] = {
    {1, 1, 1, 2, 2, 64},    /* T = 1 */
    {2, 67, 67, 4, 2, 64},  /* T past one tile, GQA 4/2 */
    {1, 100, 100, 4, 1, 64},/* GQA 4/1 */
    {1, 90, 90, 4, 2, 128}, /* HS 128 */
    {2, 33, 33, 3, 3, 7},   /* odd HS, multi-head */
    {1, 40, 25, 2, 1, 16},  /* Tk < Tq: 15 fully-masked rows */
    {2, 130, 3, 2, 2, 8},   /* Tk << Tq: most rows masked, past two query blocks */
    {1, 20, 45, 2, 2, 8},   /* Tk > Tq: queries appended after 25 earlier keys */
};

static void test_cases(int reference) {
    forge_backend *be = NULL;
    CHECK_OK(forge_backend_create_cpu(&be, reference ? 1 : 2, reference));
    if (!be) return;
    forge_rng rng;
    forge_rng_seed(&rng, 1234, 5);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) run_case(be, &rng, cases[c]);
    forge_backend_destroy(be);
}

/* Results do not depend on the thread count: one writer per output element,
 * sums in a fixed order. */
static void test_thread_invariance(void) {
    TEST_CASE("flash: 1 thread and 2 threads give identical bits");
    forge_backend *b1 = NULL, *b2 = NULL;
    CHECK_OK(forge_backend_create_cpu(&b1, 1, 0));
    CHECK_OK(forge_backend_create_cpu(&b2, 2, 0));
    if (!b1 || !b2) return;
    forge_rng rng;
    forge_rng_seed(&rng, 99, 1);
    int B = 2, T = 83, NH = 4, NKV = 2, HS = 16;
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    float *qkv = fx_random(&rng, nqkv, -2, 2), *dout = fx_random(&rng, nout, -1, 1);
    float *o1 = fx_floats(nout), *o2 = fx_floats(nout), *l1 = fx_floats(nl), *l2 = fx_floats(nl);
    float *d1 = fx_floats(nqkv), *d2 = fx_floats(nqkv), *s = fx_floats(nl);
    CHECK_OK(b1->flash_attention_forward(b1, o1, l1, qkv, B, T, NH, NKV, HS));
    CHECK_OK(b2->flash_attention_forward(b2, o2, l2, qkv, B, T, NH, NKV, HS));
    CHECK_OK(b1->flash_attention_backward(b1, d1, s, dout, qkv, o1, l1, B, T, NH, NKV, HS));
    CHECK_OK(b2->flash_attention_backward(b2, d2, s, dout, qkv, o2, l2, B, T, NH, NKV, HS));
    CHECK(memcmp(o1, o2, nout * sizeof(float)) == 0);
    CHECK(memcmp(l1, l2, nl * sizeof(float)) == 0);
    CHECK(memcmp(d1, d2, nqkv * sizeof(float)) == 0);
    free(qkv), free(dout), free(o1), free(o2), free(l1), free(l2), free(d1), free(d2), free(s);
    forge_backend_destroy(b1);
    forge_backend_destroy(b2);
}

static void test_bad_args(void) {
    TEST_CASE("flash: bad head counts are refused");
    forge_backend *be = NULL;
    CHECK_OK(forge_backend_create_cpu(&be, 1, 1));
    if (!be) return;
    float x[64] = {0}, o[64], l[8];
    CHECK(be->flash_attention_forward(be, o, l, x, 1, 2, 3, 2, 2) == FORGE_ERR_ARG);
    CHECK(be->flash_attention_forward_ext(be, o, l, x, x, 1, -1, 2, 2, 2, 2) == FORGE_ERR_ARG);
    forge_backend_destroy(be);
}

/* The op path's extra memory is O(T): at T = 512 the materialised op needs
 * two (B,NH,T,T) buffers (4 MiB each), the fused one a few (B,T,C) tensors. */
static void test_memory(void) {
    TEST_CASE("flash: op-path peak memory is O(T), materialised O(T^2)");
    forge_backend *be = NULL;
    CHECK_OK(forge_backend_create_cpu(&be, 2, 0));
    if (!be) return;
    int B = 1, T = 512, NH = 4, NKV = 4, HS = 16;
    size_t flash = 0, mat = 0, tt = (size_t)B * NH * T * T * sizeof(float);
    size_t act = (size_t)B * T * (NH + 2 * NKV) * HS * sizeof(float); /* one qkv-sized tensor */
    CHECK_OK(attention_peak_bytes(be, 1, B, T, NH, NKV, HS, &flash));
    CHECK_OK(attention_peak_bytes(be, 0, B, T, NH, NKV, HS, &mat));
    if (getenv("FORGE_TEST_VERBOSE"))
        printf("     peak: flash %zu bytes, materialised %zu bytes (T x T buffer %zu)\n", flash, mat, tt);
    CHECK_MSG(flash <= 3 * act, "flash peak %zu bytes > 3 qkv-sized tensors (%zu)", flash, 3 * act);
    CHECK_MSG(mat >= 2 * tt, "materialised peak %zu bytes < two T x T buffers (%zu)", mat, 2 * tt);
    forge_backend_destroy(be);
}

void suite_flash(void) {
    test_cases(0);
    test_cases(1);
    test_thread_invariance();
    test_bad_args();
    test_memory();
}
