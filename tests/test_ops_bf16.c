/*
 * test_ops_bf16.c: the bf16 CPU references (backend/cpu/..._bf16.c) and base/fmath.h.
 *
 * - fmath: forge_expf / forge_tanhf against double over a sweep of every float in range, and their edges.
 * - forward ops: against an independent double computation with the same rounding points (bf16 inputs widened,
 *   res rounded, outputs rounded): each output within one bf16 ulp of the unrounded double value plus the fp32
 *   error of the reference's arithmetic (stated per op), bit-exact where the fp32 arithmetic is exact (residual
 *   adds, accumulate, the encoder's sum).
 * - backward ops: against the fp32 backward of the same (widened) inputs: equal within the bf16 rounding of the
 *   outputs plus the fp32 slack of a different formula order (a finite difference of a bf16 forward would only
 *   measure the rounding).
 * - the norms' row order: mean and rstd bit-equal to a lane-by-lane fp32 sum written out here the way a warp lane
 *   walks its chunks, the contract with the CUDA kernels (norm_bf16.cu).
 * - ids outside the table refused with FORGE_ERR_ARG naming them; residual norms and rope in place.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/base/fmath.h"
#include "ops/cpu_fixtures.h"
#include "test.h"

/* ---- helpers -------------------------------------------------------------------------------------------------- */

static forge_bf16 *bf_random(forge_rng *rng, size_t n, float lo, float hi) {
    forge_bf16 *h = malloc((n ? n : 1) * sizeof *h);
    if (h)
        for (size_t i = 0; i < n; i++) h[i] = forge_bf16_from_f32(lo + (hi - lo) * forge_rng_uniform(rng));
    return h;
}

static forge_bf16 *bf_copy(const forge_bf16 *x, size_t n) {
    forge_bf16 *h = malloc((n ? n : 1) * sizeof *h);
    if (h && n) memcpy(h, x, n * sizeof *h);
    return h;
}

static float *widen(const forge_bf16 *x, size_t n) {
    float *f = fx_floats(n);
    if (f)
        for (size_t i = 0; i < n; i++) f[i] = forge_bf16_to_f32(x[i]);
    return f;
}

static double bf(forge_bf16 h) { return forge_bf16_to_f32(h); }

/* one bf16 ulp at v: 2^(e - 7) for |v| in [2^e, 2^(e+1)) */
static double ulp_bf16(double v) {
    int e;
    frexp(fabs(v), &e);
    return ldexp(1.0, e - 1 - 7);
}

/* Counts the elements with |got - ref| > ulp_bf16(ref) + slack (slack NULL: 0) and reports the worst. */
static void check_bf16_near(const char *what, const forge_bf16 *got, const double *ref, const double *slack,
                            size_t n) {
    size_t bad = 0, worst = 0;
    double worst_excess = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = bf(got[i]), tol = (ref[i] == 0.0 ? 0.0 : ulp_bf16(ref[i])) + (slack ? slack[i] : 0.0);
        double excess = fabs(g - ref[i]) - tol;
        if (!(excess <= 0.0)) {
            if (bad++ == 0 || !(excess <= worst_excess)) worst = i, worst_excess = excess;
        }
    }
    CHECK_MSG(bad == 0, "%s: %zu of %zu outside 1 bf16 ulp + slack; worst [%zu]: %.9g vs %.9g (slack %.3g)", what,
              bad, n, worst, bf(got[worst]), ref[worst], slack ? slack[worst] : 0.0);
}

/* got, as bf16, bit-equal to want */
static void check_bits(const char *what, const forge_bf16 *got, const forge_bf16 *want, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i] && bad++ == 0) first = i;
    CHECK_MSG(bad == 0, "%s: %zu of %zu differ; first [%zu]: %.9g vs %.9g", what, bad, n, first, bf(got[first]),
              bf(want[first]));
}

/* |got - want| <= rel * max(1, |want|) */
static void check_f32_near(const char *what, const float *got, const double *want, size_t n, double rel) {
    size_t bad = 0, worst = 0;
    double worst_err = 0.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - want[i]) / fmax(1.0, fabs(want[i]));
        if (!(err <= rel) && (bad++ == 0 || err > worst_err)) worst = i, worst_err = err;
    }
    CHECK_MSG(bad == 0, "%s: %zu of %zu off by more than %.3g; worst [%zu]: %.9g vs %.9g", what, bad, n, rel,
              worst, (double)got[worst], want[worst]);
}

static forge_backend *reference_backend(void) {
    forge_backend *be = NULL;
    CHECK_OK(forge_backend_create_cpu(&be, 1, 1));
    return be;
}

/* ---- fmath.h -------------------------------------------------------------------------------------------------- */

static double ulp_f32(double v) {
    int e;
    frexp(fabs(v), &e);
    return ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 23);
}

static void test_fmath(void) {
    TEST_CASE("fmath: forge_expf within 1 ulp, forge_tanhf within 1.5 ulp of double; their edges");
    double worst_e = 0.0, worst_t = 0.0;
    float at_e = 0.0f, at_t = 0.0f;
    for (int sign = 0; sign < 2; sign++) {
        for (uint32_t u = 0; u < 0x42b20000u; u += 4099) { /* |x| up to 89 */
            uint32_t bits = u | (sign ? 0x80000000u : 0u);
            float x;
            memcpy(&x, &bits, sizeof x);
            double e = exp((double)x);
            if (x > -104.0f && e < 3.4e38) {
                double err = fabs(forge_expf(x) - e) / ulp_f32(e);
                if (err > worst_e) worst_e = err, at_e = x;
            }
            double t = tanh((double)x);
            if (t != 0.0) {
                double err = fabs(forge_tanhf(x) - t) / ulp_f32(t);
                if (err > worst_t) worst_t = err, at_t = x;
            }
        }
    }
    CHECK_MSG(worst_e <= 1.0, "forge_expf: %.3f ulp at %.9g", worst_e, (double)at_e);
    CHECK_MSG(worst_t <= 1.5, "forge_tanhf: %.3f ulp at %.9g", worst_t, (double)at_t);
    CHECK(forge_expf(0.0f) == 1.0f && forge_expf(-0.0f) == 1.0f);
    CHECK(isinf(forge_expf(88.72283935546875f)) && isinf(forge_expf(INFINITY)));
    CHECK(forge_expf(88.7228317f) < INFINITY && forge_expf(88.7228317f) > 3.4e38f);
    CHECK(forge_expf(-104.0f) == 0.0f && forge_expf(-INFINITY) == 0.0f && isnan(forge_expf(NAN)));
    CHECK(forge_expf(-103.5f) == ldexpf(1.0f, -149)); /* e^-103.5 = 1.1 2^-149: the subnormal rounds once */
    CHECK(forge_tanhf(0.0f) == 0.0f && forge_tanhf(INFINITY) == 1.0f && forge_tanhf(-INFINITY) == -1.0f);
    CHECK(forge_tanhf(20.0f) == 1.0f && forge_tanhf(-1e-30f) == -1e-30f && isnan(forge_tanhf(NAN)));
    CHECK(forge_sigmoid(-200.0f) == 0.0f && forge_sigmoid(200.0f) == 1.0f);
    CHECK(forge_gelu(0.0f) == 0.0f && forge_gelu(-50.0f) == 0.0f && forge_gelu(50.0f) == 50.0f);
    CHECK_NEAR(forge_gelu(1.0f), 0.8411920, 1e-6); /* the fp32 entry's hand value */
    CHECK_NEAR(forge_gelu_grad(0.0f), 0.5, 1e-7);
    CHECK_NEAR(forge_gelu_grad(50.0f), 1.0, 1e-6);
}

/* ---- elementwise -------------------------------------------------------------------------------------------------- */

static double gelu_d(double x) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tanh(u));
}

static void test_elementwise(void) {
    TEST_CASE("bf16 accumulate, gelu, swiglu: forward against double, backward against fp32");
    forge_backend *be = reference_backend();
    forge_rng rng;
    forge_rng_seed(&rng, 11, 3);
    const size_t n = 100003;
    forge_bf16 *x = bf_random(&rng, n, -6, 6), *y = bf_random(&rng, n, -3, 3), *d0 = bf_random(&rng, n, -1, 1),
               *e0 = bf_random(&rng, n, -1, 1), *g = bf_random(&rng, n, -1, 1);
    forge_bf16 *out = malloc(n * sizeof *out), *acc = bf_copy(d0, n), *acc2 = bf_copy(e0, n);
    double *ref = malloc(n * sizeof *ref), *slack = malloc(n * sizeof *slack);
    float *xf = widen(x, n), *yf = widen(y, n), *gf = widen(g, n), *r32 = widen(d0, n), *r32b = widen(e0, n);
    if (!be || !x || !y || !d0 || !e0 || !g || !out || !acc || !acc2 || !ref || !slack || !xf || !yf || !gf ||
        !r32 || !r32b) {
        CHECK_MSG(0, "out of memory");
        goto done;
    }

    /* accumulate: the fp32 sum of two bf16 is one rounding, and its rounding to bf16 the second: bit-exact */
    CHECK_OK(be->accumulate_bf16(be, acc, x, n, 1));
    for (size_t i = 0; i < n; i++) out[i] = forge_bf16_from_f32((float)(bf(d0[i]) + bf(x[i])));
    check_bits("accumulate_bf16", acc, out, n);

    /* gelu: fp32's 0.5 x (1 + t) is off by ~2 fp32 ulps of t (~1.2e-7) times 0.5|x| absolute, which is many bf16
     * ulps only where 1 + t cancels (x < -4): slack 3e-7 (1 + |x|) */
    CHECK_OK(be->gelu_forward_bf16(be, out, x, n));
    for (size_t i = 0; i < n; i++) ref[i] = gelu_d(bf(x[i])), slack[i] = 3e-7 * (1.0 + fabs(bf(x[i])));
    check_bf16_near("gelu_forward_bf16", out, ref, slack, n);

    /* gelu backward: the fp32 entry on the same inputs; the two gelu' differ by a few fp32 ulps (fmath's tanh,
     * fmas): slack 1e-6 (1 + |x|) |dout| */
    memcpy(acc, d0, n * sizeof *acc);
    CHECK_OK(be->gelu_backward_bf16(be, acc, x, g, n, 1));
    CHECK_OK(be->gelu_backward(be, r32, xf, gf, n));
    for (size_t i = 0; i < n; i++) ref[i] = r32[i], slack[i] = 1e-6 * (1.0 + fabs(xf[i])) * fabs(gf[i]);
    check_bf16_near("gelu_backward_bf16", acc, ref, slack, n);

    /* swiglu: products of g, sigmoid(g) (a few fp32 ulps) and up: relative slack 1e-6 */
    CHECK_OK(be->swiglu_forward_bf16(be, out, x, y, n));
    for (size_t i = 0; i < n; i++) {
        double gd = bf(x[i]);
        ref[i] = gd / (1.0 + exp(-gd)) * bf(y[i]);
        slack[i] = 1e-6 * fabs(ref[i]);
    }
    check_bf16_near("swiglu_forward_bf16", out, ref, slack, n);

    /* swiglu backward: the fp32 entry; terms |dout up silu'| <= 3.3, |dout silu| <= 6: slack 1e-6 of them */
    memcpy(acc, d0, n * sizeof *acc);
    memcpy(acc2, e0, n * sizeof *acc2);
    for (size_t i = 0; i < n; i++) r32[i] = (float)bf(d0[i]);
    CHECK_OK(be->swiglu_backward_bf16(be, acc, acc2, g, x, y, n, 1));
    CHECK_OK(be->swiglu_backward(be, r32, r32b, gf, xf, yf, n));
    for (size_t i = 0; i < n; i++) ref[i] = r32[i], slack[i] = 1e-6 * (1.0 + fabs(yf[i])) * (1.0 + fabs(xf[i]));
    check_bf16_near("swiglu_backward_bf16.dgate", acc, ref, slack, n);
    for (size_t i = 0; i < n; i++) ref[i] = r32b[i];
    check_bf16_near("swiglu_backward_bf16.dup", acc2, ref, slack, n);

    /* edges: an exp that overflows gives a zero sigmoid, not NaN */
    forge_bf16 big[2] = {forge_bf16_from_f32(-200.0f), forge_bf16_from_f32(200.0f)}, one[2] = {0x3f80, 0x3f80};
    forge_bf16 o2[2], z2[2] = {0, 0}, z3[2] = {0, 0};
    CHECK_OK(be->swiglu_forward_bf16(be, o2, big, one, 2));
    CHECK(bf(o2[0]) == 0.0 && bf(o2[1]) == 200.0);
    CHECK_OK(be->swiglu_backward_bf16(be, z2, z3, one, big, one, 2, 1));
    CHECK(bf(z2[0]) == 0.0 && bf(z3[0]) == 0.0 && bf(z2[1]) == 1.0 && bf(z3[1]) == 200.0);
done:
    free(x), free(y), free(d0), free(e0), free(g), free(out), free(acc), free(acc2), free(ref), free(slack);
    free(xf), free(yf), free(gf), free(r32), free(r32b);
    forge_backend_destroy(be);
}

/* The packed SwiGLU (gu (N, 2F): gate then up in each row) is swiglu_forward_bf16/swiglu_backward_bf16 on the rows'
 * halves, bit for bit, adding and writing, on the reference and the threaded backends; F odd, F % 8 = 4 and 0. */
static void test_swiglu_packed(void) {
    TEST_CASE("bf16 swiglu packed: the unpacked entries' bits on each row's halves, adding and writing");
    static const int shapes[][2] = {{1, 1}, {1, 1031}, {5, 7}, {9, 16}, {3, 1412}};
    forge_rng rng;
    forge_rng_seed(&rng, 22, 5);
    for (int threads = 1; threads <= 2; threads++) {
        forge_backend *be = NULL;
        CHECK_OK(forge_backend_create_cpu(&be, threads, threads == 1));
        if (!be) return;
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
            const int N = shapes[k][0], F = shapes[k][1];
            const size_t n = (size_t)N * F, row = (size_t)F * sizeof(forge_bf16);
            forge_bf16 *gu = bf_random(&rng, 2 * n, -6, 6), *d = bf_random(&rng, n, -1, 1);
            forge_bf16 *dgu0 = bf_random(&rng, 2 * n, -1, 1), *dgu = bf_copy(dgu0, 2 * n);
            forge_bf16 *out = malloc(n * sizeof *out), *want = malloc(n * sizeof *want);
            forge_bf16 *gate = malloc(n * sizeof *gate), *up = malloc(n * sizeof *up);
            forge_bf16 *dgate = malloc(n * sizeof *dgate), *dup = malloc(n * sizeof *dup);
            forge_bf16 *half = malloc(n * sizeof *half);
            const int ok = gu && d && dgu0 && dgu && out && want && gate && up && dgate && dup && half;
            if (!ok) {
                CHECK_MSG(0, "out of memory");
            } else {
                for (int r = 0; r < N; r++) {
                    memcpy(gate + (size_t)r * F, gu + (size_t)r * 2 * F, row);
                    memcpy(up + (size_t)r * F, gu + (size_t)r * 2 * F + F, row);
                }
                CHECK_OK(be->swiglu_packed_forward_bf16(be, out, gu, N, F));
                CHECK_OK(be->swiglu_forward_bf16(be, want, gate, up, n));
                check_bits("swiglu_packed_forward_bf16", out, want, n);
                for (int accumulate = 1; accumulate >= 0; accumulate--) {
                    memcpy(dgu, dgu0, 2 * n * sizeof *dgu);
                    for (int r = 0; r < N; r++) {
                        memcpy(dgate + (size_t)r * F, dgu0 + (size_t)r * 2 * F, row);
                        memcpy(dup + (size_t)r * F, dgu0 + (size_t)r * 2 * F + F, row);
                    }
                    CHECK_OK(be->swiglu_packed_backward_bf16(be, dgu, d, gu, N, F, accumulate));
                    CHECK_OK(be->swiglu_backward_bf16(be, dgate, dup, d, gate, up, n, accumulate));
                    for (int r = 0; r < N; r++) memcpy(half + (size_t)r * F, dgu + (size_t)r * 2 * F, row);
                    check_bits(accumulate ? "swiglu_packed_backward_bf16 dgate, adding"
                                          : "swiglu_packed_backward_bf16 dgate, writing",
                               half, dgate, n);
                    for (int r = 0; r < N; r++) memcpy(half + (size_t)r * F, dgu + (size_t)r * 2 * F + F, row);
                    check_bits(accumulate ? "swiglu_packed_backward_bf16 dup, adding"
                                          : "swiglu_packed_backward_bf16 dup, writing",
                               half, dup, n);
                }
            }
            free(gu), free(d), free(dgu0), free(dgu), free(out), free(want), free(gate), free(up), free(dgate);
            free(dup), free(half);
            if (!ok) break;
        }
        forge_backend_destroy(be);
    }
}

/* ---- encoder -------------------------------------------------------------------------------------------------- */

static void test_encoder(void) {
    TEST_CASE("bf16 encoder: forward bit-exact, backward against double, bad ids refused");
    forge_backend *be = reference_backend();
    forge_rng rng;
    forge_rng_seed(&rng, 12, 3);
    enum { B = 3, T = 37, C = 45, V = 11, MAXT = 40 };
    int32_t ids[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (int32_t)(forge_rng_uniform(&rng) * V) % V;
    forge_bf16 *wte = bf_random(&rng, (size_t)V * C, -1, 1), *wpe = bf_random(&rng, (size_t)MAXT * C, -1, 1);
    forge_bf16 *dout = bf_random(&rng, (size_t)B * T * C, -1, 1);
    forge_bf16 *out = malloc((size_t)B * T * C * sizeof *out), *want = malloc((size_t)B * T * C * sizeof *want);
    float *dwte = fx_random(&rng, (size_t)V * C, -1, 1), *dwpe = fx_random(&rng, (size_t)MAXT * C, -1, 1);
    double *rte = malloc((size_t)V * C * sizeof *rte), *rpe = malloc((size_t)MAXT * C * sizeof *rpe);
    if (!be || !wte || !wpe || !dout || !out || !want || !dwte || !dwpe || !rte || !rpe) {
        CHECK_MSG(0, "out of memory");
        goto done;
    }
    CHECK_OK(be->encoder_forward_bf16(be, out, ids, wte, wpe, B, T, C, V));
    for (int n = 0; n < B * T; n++)
        for (int c = 0; c < C; c++)
            want[(size_t)n * C + c] =
                forge_bf16_from_f32((float)(bf(wte[(size_t)ids[n] * C + c]) + bf(wpe[(size_t)(n % T) * C + c])));
    check_bits("encoder_forward_bf16", out, want, (size_t)B * T * C);
    CHECK_OK(be->encoder_forward_bf16(be, out, ids, wte, NULL, B, T, C, V));
    for (int n = 0; n < B * T; n++) memcpy(want + (size_t)n * C, wte + (size_t)ids[n] * C, C * sizeof *want);
    check_bits("encoder_forward_bf16 (no wpe)", out, want, (size_t)B * T * C);

    /* backward: fp32 running sums of a few (<= B*T) terms in [-1, 1] against double: 1e-5 */
    for (size_t i = 0; i < (size_t)V * C; i++) rte[i] = dwte[i];
    for (size_t i = 0; i < (size_t)MAXT * C; i++) rpe[i] = dwpe[i];
    for (int n = 0; n < B * T; n++)
        for (int c = 0; c < C; c++) {
            rte[(size_t)ids[n] * C + c] += bf(dout[(size_t)n * C + c]);
            rpe[(size_t)(n % T) * C + c] += bf(dout[(size_t)n * C + c]);
        }
    CHECK_OK(be->encoder_backward_bf16(be, dwte, dwpe, dout, ids, B, T, C, V));
    check_f32_near("encoder_backward_bf16.dwte", dwte, rte, (size_t)V * C, 1e-5);
    check_f32_near("encoder_backward_bf16.dwpe", dwpe, rpe, (size_t)MAXT * C, 1e-5);
    CHECK_OK(be->encoder_backward_bf16(be, dwte, NULL, dout, ids, B, T, C, V)); /* dwpe NULL: dwte only */

    int32_t bad[2] = {3, V};
    CHECK(be->encoder_forward_bf16(be, out, bad, wte, wpe, 1, 2, C, V) == FORGE_ERR_ARG);
    CHECK_MSG(strstr(forge_error_message(), "ids[1] = 11"), "message: %s", forge_error_message());
    bad[1] = -1;
    CHECK(be->encoder_backward_bf16(be, dwte, dwpe, dout, bad, 2, 1, C, V) == FORGE_ERR_ARG);
    CHECK_MSG(strstr(forge_error_message(), "ids[1] = -1"), "message: %s", forge_error_message());
done:
    free(wte), free(wpe), free(dout), free(out), free(want), free(dwte), free(dwpe), free(rte), free(rpe);
    forge_backend_destroy(be);
}

/* ---- norms -------------------------------------------------------------------------------------------------------- */

/* The documented row order, written the way warp lane l walks it: its chunks l, l + 32, ... of 8 in order, then
 * the xor butterflies 16, 8, 4, 2, 1 across the 32 lane partials. */
static float lane_order_sum(const float *terms, int C) {
    float p[32];
    for (int l = 0; l < 32; l++) {
        p[l] = 0.0f;
        for (int c0 = l * 8; c0 < C; c0 += 256)
            for (int k = 0; k < 8 && c0 + k < C; k++) p[l] += terms[c0 + k];
    }
    for (int o = 16; o > 0; o >>= 1) {
        float q[32];
        for (int l = 0; l < 32; l++) q[l] = p[l] + p[l ^ o];
        memcpy(p, q, sizeof p);
    }
    return p[0];
}

static void test_norm_row_order(void) {
    TEST_CASE("bf16 norms: mean and rstd bit-equal to the warp's lane order");
    forge_backend *be = reference_backend();
    forge_rng rng;
    forge_rng_seed(&rng, 13, 3);
    enum { N = 5 };
    static const int Cs[] = {1, 45, 256, 300, 768, 1031};
    for (size_t k = 0; k < sizeof Cs / sizeof Cs[0]; k++) {
        const int C = Cs[k];
        forge_bf16 *x = bf_random(&rng, (size_t)N * C, -2, 3), *out = malloc((size_t)N * C * sizeof *out);
        float *w = fx_random(&rng, C, -1, 1), *b = fx_random(&rng, C, -1, 1), *t = fx_floats(C);
        float mean[N], rstd[N], rstd2[N];
        if (!be || !x || !out || !w || !b || !t) {
            CHECK_MSG(0, "out of memory");
        } else {
            CHECK_OK(be->layernorm_forward_bf16(be, out, mean, rstd, x, w, b, N, C, 1e-5f));
            CHECK_OK(be->rmsnorm_forward_bf16(be, out, rstd2, x, w, N, C, 1e-5f));
            for (int n = 0; n < N; n++) {
                const forge_bf16 *xr = x + (size_t)n * C;
                for (int c = 0; c < C; c++) t[c] = (float)bf(xr[c]);
                const float m = lane_order_sum(t, C) / C;
                /* the reference accumulates fmaf(d, d, p): the lane order of products rounded inside the fma */
                float p[32] = {0};
                for (int c = 0; c < C; c++) {
                    float d = (float)bf(xr[c]) - m;
                    p[(c / 8) % 32] = fmaf(d, d, p[(c / 8) % 32]);
                }
                for (int o = 16; o > 0; o >>= 1) {
                    float q[32];
                    for (int l = 0; l < 32; l++) q[l] = p[l] + p[l ^ o];
                    memcpy(p, q, sizeof p);
                }
                const float s = 1.0f / sqrtf(p[0] / C + 1e-5f);
                CHECK_MSG(mean[n] == m && rstd[n] == s, "C=%d row %d: mean %.9g vs %.9g, rstd %.9g vs %.9g", C, n,
                          (double)mean[n], (double)m, (double)rstd[n], (double)s);
                memset(p, 0, sizeof p);
                for (int c = 0; c < C; c++) p[(c / 8) % 32] = fmaf((float)bf(xr[c]), (float)bf(xr[c]), p[(c / 8) % 32]);
                for (int o = 16; o > 0; o >>= 1) {
                    float q[32];
                    for (int l = 0; l < 32; l++) q[l] = p[l] + p[l ^ o];
                    memcpy(p, q, sizeof p);
                }
                const float s2 = 1.0f / sqrtf(p[0] / C + 1e-5f);
                CHECK_MSG(rstd2[n] == s2, "rmsnorm C=%d row %d: rstd %.9g vs %.9g", C, n, (double)rstd2[n], (double)s2);
            }
        }
        free(x), free(out), free(w), free(b), free(t);
    }
    forge_backend_destroy(be);
}

/* LayerNorm (mean_on) or RMSNorm of rows of bf16 values in double: out before its rounding, mean, rstd */
static void norm_double(const forge_bf16 *x, const float *w, const float *b, int N, int C, double eps, int mean_on,
                        double *out, double *slack, double *mean, double *rstd) {
    for (int n = 0; n < N; n++) {
        const forge_bf16 *xr = x + (size_t)n * C;
        double m = 0.0, v = 0.0;
        if (mean_on) {
            for (int c = 0; c < C; c++) m += bf(xr[c]);
            m /= C;
        }
        for (int c = 0; c < C; c++) v += (bf(xr[c]) - m) * (bf(xr[c]) - m);
        const double s = 1.0 / sqrt(v / C + eps);
        for (int c = 0; c < C; c++) {
            const double xh = (bf(xr[c]) - m) * s;
            out[(size_t)n * C + c] = xh * w[c] + (b ? b[c] : 0.0);
            /* fp32 stats and x-hat are off by ~sqrt(C) + a few fp32 ulps relative: 1e-6 (1 + sqrt(C) / 8)
             * of |x-hat w| absolute (bias cancellation makes it absolute) */
            slack[(size_t)n * C + c] = 1e-6 * (1.0 + sqrt((double)C) / 8.0) * (fabs(xh * w[c]) + 1e-3);
        }
        mean[n] = m;
        rstd[n] = s;
    }
}

static void test_norm_forward(void) {
    TEST_CASE("bf16 layernorm/rmsnorm forward (and residual forms, in place) against double");
    forge_backend *be = reference_backend();
    forge_rng rng;
    forge_rng_seed(&rng, 14, 3);
    enum { N = 37 };
    static const int Cs[] = {45, 768, 1031};
    for (size_t k = 0; k < sizeof Cs / sizeof Cs[0]; k++) {
        const int C = Cs[k];
        const size_t NC = (size_t)N * C;
        forge_bf16 *a = bf_random(&rng, NC, -2, 2), *b = bf_random(&rng, NC, -1, 1);
        forge_bf16 *res = malloc(NC * sizeof *res), *out = malloc(NC * sizeof *out), *out2 = malloc(NC * sizeof *out2);
        forge_bf16 *want = malloc(NC * sizeof *want), *inplace = bf_copy(a, NC);
        float *w = fx_random(&rng, C, -1, 1), *bias = fx_random(&rng, C, -1, 1), mean[N], rstd[N], m2[N], r2[N];
        double *ref = malloc(NC * sizeof *ref), *slack = malloc(NC * sizeof *slack), dm[N], dr[N];
        if (!be || !a || !b || !res || !out || !out2 || !want || !inplace || !w || !bias || !ref || !slack) {
            CHECK_MSG(0, "out of memory");
            goto next;
        }
        CHECK_OK(be->layernorm_forward_bf16(be, out, mean, rstd, a, w, bias, N, C, 1e-5f));
        norm_double(a, w, bias, N, C, 1e-5, 1, ref, slack, dm, dr);
        check_bf16_near("layernorm_forward_bf16.out", out, ref, slack, NC);
        for (int n = 0; n < N; n++) {
            CHECK_NEAR(mean[n], dm[n], 1e-6);
            CHECK_NEAR(rstd[n], dr[n], 1e-6 * dr[n]);
        }
        CHECK_OK(be->rmsnorm_forward_bf16(be, out, rstd, a, w, N, C, 1e-5f));
        norm_double(a, w, NULL, N, C, 1e-5, 0, ref, slack, dm, dr);
        check_bf16_near("rmsnorm_forward_bf16.out", out, ref, slack, NC);
        for (int n = 0; n < N; n++) CHECK_NEAR(rstd[n], dr[n], 1e-6 * dr[n]);

        /* residual: res bit-exact, then the norm of res; in place (res = a) the same bits */
        for (size_t i = 0; i < NC; i++) want[i] = forge_bf16_from_f32((float)(bf(a[i]) + bf(b[i])));
        CHECK_OK(be->residual_layernorm_forward_bf16(be, res, out, mean, rstd, a, b, w, bias, N, C, 1e-5f));
        check_bits("residual_layernorm_forward_bf16.res", res, want, NC);
        CHECK_OK(be->layernorm_forward_bf16(be, out2, m2, r2, res, w, bias, N, C, 1e-5f));
        check_bits("residual_layernorm_forward_bf16.out", out, out2, NC);
        CHECK(memcmp(mean, m2, sizeof mean) == 0 && memcmp(rstd, r2, sizeof rstd) == 0);
        CHECK_OK(be->residual_layernorm_forward_bf16(be, inplace, out2, m2, r2, inplace, b, w, bias, N, C, 1e-5f));
        check_bits("residual_layernorm_forward_bf16 in place.res", inplace, res, NC);
        check_bits("residual_layernorm_forward_bf16 in place.out", out2, out, NC);

        CHECK_OK(be->residual_rmsnorm_forward_bf16(be, res, out, rstd, a, b, w, N, C, 1e-5f));
        check_bits("residual_rmsnorm_forward_bf16.res", res, want, NC);
        CHECK_OK(be->rmsnorm_forward_bf16(be, out2, r2, res, w, N, C, 1e-5f));
        check_bits("residual_rmsnorm_forward_bf16.out", out, out2, NC);
        CHECK(memcmp(rstd, r2, sizeof rstd) == 0);
        memcpy(inplace, b, NC * sizeof *inplace);
        CHECK_OK(be->residual_rmsnorm_forward_bf16(be, inplace, out2, r2, a, inplace, w, N, C, 1e-5f));
        check_bits("residual_rmsnorm_forward_bf16 in place (res = b).res", inplace, res, NC);
        check_bits("residual_rmsnorm_forward_bf16 in place (res = b).out", out2, out, NC);
    next:
        free(a), free(b), free(res), free(out), free(out2), free(want), free(inplace), free(w), free(bias);
        free(ref), free(slack);
    }
    CHECK(be && be->layernorm_forward_bf16(be, NULL, NULL, NULL, NULL, NULL, NULL, 1, 0, 1e-5f) == FORGE_ERR_ARG);
    forge_backend_destroy(be);
}

static void test_norm_backward(void) {
    TEST_CASE("bf16 layernorm/rmsnorm backward against the fp32 backward of the same inputs");
    forge_backend *be = reference_backend();
    forge_rng rng;
    forge_rng_seed(&rng, 15, 3);
    enum { N = 37 };
    static const int Cs[] = {45, 768, 1031};
    for (size_t k = 0; k < sizeof Cs / sizeof Cs[0]; k++) {
        const int C = Cs[k];
        const size_t NC = (size_t)N * C;
        forge_bf16 *x = bf_random(&rng, NC, -2, 2), *g = bf_random(&rng, NC, -1, 1), *d0 = bf_random(&rng, NC, -1, 1);
        forge_bf16 *dinp = bf_copy(d0, NC);
        float *xf = widen(x, NC), *gf = widen(g, NC), *d32 = widen(d0, NC);
        float *w = fx_random(&rng, C, -1, 1), *mean = fx_random(&rng, N, -0.5, 0.5), *rstd = fx_random(&rng, N, 0.5, 2);
        float *dw = fx_random(&rng, C, -1, 1), *db = fx_random(&rng, C, -1, 1), *dw32 = fx_copy(dw, C),
              *db32 = fx_copy(db, C);
        double *ref = malloc(NC * sizeof *ref), *slack = malloc(NC * sizeof *slack), *r = malloc(C * sizeof *r);
        if (!be || !x || !g || !d0 || !dinp || !xf || !gf || !d32 || !w || !mean || !rstd || !dw || !db || !dw32 ||
            !db32 || !ref || !slack || !r) {
            CHECK_MSG(0, "out of memory");
            goto next;
        }
        /* dx: row means of C terms |w g x-hat| <= 5 summed in another order, with fmas: slack 5e-6 (1 + sqrt(C))
         * rstd */
        CHECK_OK(be->layernorm_backward_bf16(be, dinp, dw, db, g, x, w, mean, rstd, N, C, 1));
        CHECK_OK(be->layernorm_backward(be, d32, dw32, db32, gf, xf, w, mean, rstd, N, C));
        for (size_t i = 0; i < NC; i++)
            ref[i] = d32[i], slack[i] = 5e-6 * (1.0 + sqrt((double)C)) * rstd[i / C];
        check_bf16_near("layernorm_backward_bf16.dinp", dinp, ref, slack, NC);
        for (int c = 0; c < C; c++) r[c] = dw32[c];
        check_f32_near("layernorm_backward_bf16.dweight", dw, r, C, 1e-5);
        for (int c = 0; c < C; c++) r[c] = db32[c];
        check_f32_near("layernorm_backward_bf16.dbias", db, r, C, 1e-5);

        memcpy(dinp, d0, NC * sizeof *dinp);
        for (size_t i = 0; i < NC; i++) d32[i] = (float)bf(d0[i]);
        memcpy(dw32, dw, C * sizeof *dw);
        CHECK_OK(be->rmsnorm_backward_bf16(be, dinp, dw, g, x, w, rstd, N, C, 1));
        CHECK_OK(be->rmsnorm_backward(be, d32, dw32, gf, xf, w, rstd, N, C));
        for (size_t i = 0; i < NC; i++) ref[i] = d32[i];
        check_bf16_near("rmsnorm_backward_bf16.dinp", dinp, ref, slack, NC);
        for (int c = 0; c < C; c++) r[c] = dw32[c];
        check_f32_near("rmsnorm_backward_bf16.dweight", dw, r, C, 1e-5);
    next:
        free(x), free(g), free(d0), free(dinp), free(xf), free(gf), free(d32), free(w), free(mean), free(rstd);
        free(dw), free(db), free(dw32), free(db32), free(ref), free(slack), free(r);
    }
    forge_backend_destroy(be);
}

/* ---- rope ----------------------------------------------------------------------------------------------------- */

static void test_rope(void) {
    TEST_CASE("bf16 rope: forward against double, backward against fp32, in place");
    forge_backend *be = reference_backend();
    forge_rng rng;
    forge_rng_seed(&rng, 16, 3);
    enum { B = 2, T = 67, NHEADS = 5, NROT = 4, HS = 64 };
    const float theta = 10000.0f;
    const size_t n = (size_t)B * T * NHEADS * HS;
    forge_bf16 *x = bf_random(&rng, n, -1, 1), *out = malloc(n * sizeof *out), *d0 = bf_random(&rng, n, -1, 1);
    forge_bf16 *dinp = bf_copy(d0, n), *inplace = bf_copy(x, n);
    float *xf = widen(x, n), *d32 = widen(d0, n);
    double *ref = malloc(n * sizeof *ref), *slack = malloc(n * sizeof *slack);
    if (!be || !x || !out || !d0 || !dinp || !inplace || !xf || !d32 || !ref || !slack) {
        CHECK_MSG(0, "out of memory");
        goto done;
    }
    CHECK_OK(be->rope_forward_bf16(be, out, x, B, T, NHEADS, NROT, HS, theta));
    for (size_t bth = 0; bth < n / HS; bth++) {
        const int h = (int)(bth % NHEADS), t = (int)(bth / NHEADS % T);
        for (int i = 0; i < HS / 2; i++) {
            const size_t o = bth * HS + i;
            const double x0 = bf(x[o]), x1 = bf(x[o + HS / 2]);
            const double angle = t * pow((double)theta, -2.0 * i / HS);
            const double c = h < NROT ? (float)cos(angle) : 1.0, s = h < NROT ? (float)sin(angle) : 0.0;
            ref[o] = x0 * c - x1 * s;
            ref[o + HS / 2] = x1 * c + x0 * s;
            slack[o] = slack[o + HS / 2] = 1.2e-7 * (fabs(x0) + fabs(x1)); /* x sin rounded, then the fma */
        }
    }
    check_bf16_near("rope_forward_bf16", out, ref, slack, n);
    CHECK_OK(be->rope_forward_bf16(be, inplace, inplace, B, T, NHEADS, NROT, HS, theta));
    check_bits("rope_forward_bf16 in place", inplace, out, n);

    CHECK_OK(be->rope_backward_bf16(be, dinp, x, B, T, NHEADS, NROT, HS, theta, 1));
    CHECK_OK(be->rope_backward(be, d32, xf, B, T, NHEADS, NROT, HS, theta));
    for (size_t i = 0; i < n; i++) ref[i] = d32[i], slack[i] = 5e-7; /* fp32's rounded products vs the fma */
    check_bf16_near("rope_backward_bf16", dinp, ref, slack, n);
    CHECK(be->rope_forward_bf16(be, out, x, B, T, NHEADS, NROT, 7, theta) == FORGE_ERR_ARG);
done:
    free(x), free(out), free(d0), free(dinp), free(inplace), free(xf), free(d32), free(ref), free(slack);
    forge_backend_destroy(be);
}

/* ---- fresh gradients ------------------------------------------------------------------------------------------ */

#define BF16_NAN 0x7fc0
#define BF16_NEG_ZERO 0x8000

static forge_bf16 *bf_fill(size_t n, forge_bf16 v) {
    forge_bf16 *h = malloc((n ? n : 1) * sizeof *h);
    if (h)
        for (size_t i = 0; i < n; i++) h[i] = v;
    return h;
}

/* a gradient with -0 at every 5th element and in every 4th row of C (whole rows: a norm's dx comes out -0 there) */
static forge_bf16 *bf_grad_with_neg_zeros(forge_rng *rng, size_t n, int C) {
    forge_bf16 *g = bf_random(rng, n, -1, 1);
    if (g)
        for (size_t i = 0; i < n; i++)
            if (i % 5 == 0 || (i / (size_t)C) % 4 == 1) g[i] = BF16_NEG_ZERO;
    return g;
}

/* Each backward that writes a fresh gradient (accumulate = 0) into a NaN-filled buffer gives the bits an add into a
 * zeroed one (accumulate = 1) gives, -0 results included (they land as +0), on the reference and on the threaded
 * backend. */
static void test_fresh_writes(void) {
    TEST_CASE("bf16 backward with accumulate = 0: the bits of an add into zeros (NaN before, -0 as +0)");
    forge_rng rng;
    forge_rng_seed(&rng, 23, 5);
    enum { N = 37, C = 96, B = 2, T = 19, NH = 4, NKV = 2, HS = 64, V = 131, NROT = NH + NKV };
    const size_t nc = (size_t)N * C, nq = (size_t)B * T * FORGE_QKV(NH, NKV, HS), no = (size_t)B * T * NH * HS;
    const size_t nl = (size_t)B * NH * T, nmax = nq > nc ? nq : nc;
    forge_bf16 *x = bf_random(&rng, nmax, -2, 2), *y = bf_random(&rng, nmax, -3, 3);
    forge_bf16 *g = bf_grad_with_neg_zeros(&rng, nmax, C), *qkv = bf_random(&rng, nq, -1.5f, 1.5f);
    forge_bf16 *dout = bf_grad_with_neg_zeros(&rng, no, NH * HS), *out = bf_fill(no, 0);
    forge_bf16 *want = bf_fill(nmax, 0), *got = bf_fill(nmax, BF16_NAN), *want2 = bf_fill(nmax, 0);
    forge_bf16 *got2 = bf_fill(nmax, BF16_NAN), *yo = bf_fill(nc, 0);
    float *w = fx_floats(C), *bias = fx_floats(C), *mean = fx_floats(N), *rstd = fx_floats(N);
    float *dw = fx_floats((size_t)V * C), *db = fx_floats(C), *lse = fx_floats(nl), *losses = fx_floats(N);
    float *fscratch = fx_floats(FORGE_FLASH_BF16_SCRATCH(B, T, NH, NKV, HS));
    float *cscratch = fx_floats(FORGE_CLS_BF16_SCRATCH(N, C, V, 0));
    forge_bf16 *wte = bf_random(&rng, (size_t)V * C, -0.1f, 0.1f);
    int32_t *tg = malloc(N * sizeof *tg);
    if (!x || !y || !g || !qkv || !dout || !out || !want || !got || !want2 || !got2 || !yo || !w || !bias || !mean ||
        !rstd || !dw || !db || !lse || !losses || !fscratch || !cscratch || !wte || !tg) {
        CHECK_MSG(0, "out of memory");
        goto done;
    }
    for (int c = 0; c < C; c++) w[c] = 0.25f + (float)c / C, bias[c] = 0.1f;
    for (int n = 0; n < N; n++) tg[n] = n % 3 == 0 ? -100 : (int)forge_rng_below(&rng, V);
    for (int threaded = 0; threaded < 2; threaded++) {
        forge_backend *be = NULL;
        CHECK_OK(forge_backend_create_cpu(&be, threaded ? 2 : 1, threaded ? 0 : 1));
        if (!be) break;
/* reset want/got (and want2/got2) to zeros and NaN over n elements */
#define FRESH_RESET(n)                                                                                             \
    do {                                                                                                           \
        for (size_t i_ = 0; i_ < (n); i_++) want[i_] = want2[i_] = 0, got[i_] = got2[i_] = BF16_NAN;               \
    } while (0)
        FRESH_RESET(nc);
        CHECK_OK(be->accumulate_bf16(be, want, g, nc, 1));
        CHECK_OK(be->accumulate_bf16(be, got, g, nc, 0));
        check_bits("accumulate_bf16 written", got, want, nc);

        FRESH_RESET(nc);
        CHECK_OK(be->gelu_backward_bf16(be, want, x, g, nc, 1));
        CHECK_OK(be->gelu_backward_bf16(be, got, x, g, nc, 0));
        check_bits("gelu_backward_bf16 written", got, want, nc);

        /* the fused bias gradient: dinp = the written gelu_backward_bf16, dbias += the bits of
         * matmul_backward_weight_bf16's dbias of dout = dinp (its C = 1 weight gradient into dw, unused) */
        {
            float *db_want = fx_floats(C), *db_got = fx_floats(C);
            if (db_want && db_got) {
                FRESH_RESET(nc);
                for (int c = 0; c < C; c++) db_want[c] = db_got[c] = 0.5f - (float)c / C;
                CHECK_OK(be->gelu_backward_bf16(be, want, x, g, nc, 0));
                CHECK_OK(be->matmul_backward_weight_bf16(be, dw, db_want, want, x, N, 1, C));
                CHECK_OK(be->gelu_backward_dbias_bf16(be, got, db_got, x, g, N, C));
                check_bits("gelu_backward_dbias_bf16: dinp", got, want, nc);
                CHECK_MSG(memcmp(db_want, db_got, C * sizeof(float)) == 0,
                          "gelu_backward_dbias_bf16: dbias differs from matmul_backward_weight_bf16's");
            } else {
                CHECK_MSG(0, "out of memory");
            }
            free(db_want);
            free(db_got);
        }

        FRESH_RESET(nc);
        CHECK_OK(be->swiglu_backward_bf16(be, want, want2, g, x, y, nc, 1));
        CHECK_OK(be->swiglu_backward_bf16(be, got, got2, g, x, y, nc, 0));
        check_bits("swiglu_backward_bf16 written: dgate", got, want, nc);
        check_bits("swiglu_backward_bf16 written: dup", got2, want2, nc);

        CHECK_OK(be->layernorm_forward_bf16(be, yo, mean, rstd, x, w, bias, N, C, 1e-5f));
        FRESH_RESET(nc);
        CHECK_OK(be->layernorm_backward_bf16(be, want, dw, db, g, x, w, mean, rstd, N, C, 1));
        CHECK_OK(be->layernorm_backward_bf16(be, got, dw, db, g, x, w, mean, rstd, N, C, 0));
        check_bits("layernorm_backward_bf16 written", got, want, nc);

        CHECK_OK(be->rmsnorm_forward_bf16(be, yo, rstd, x, w, N, C, 1e-5f));
        FRESH_RESET(nc);
        CHECK_OK(be->rmsnorm_backward_bf16(be, want, dw, g, x, w, rstd, N, C, 1));
        CHECK_OK(be->rmsnorm_backward_bf16(be, got, dw, g, x, w, rstd, N, C, 0));
        check_bits("rmsnorm_backward_bf16 written", got, want, nc);

        FRESH_RESET(nq);
        CHECK_OK(be->rope_backward_bf16(be, want, g, B, T, NH + 2 * NKV, NROT, HS, 10000.0f, 1));
        CHECK_OK(be->rope_backward_bf16(be, got, g, B, T, NH + 2 * NKV, NROT, HS, 10000.0f, 0));
        check_bits("rope_backward_bf16 written", got, want, nq);

        CHECK_OK(be->flash_attention_forward_bf16(be, out, lse, qkv, B, T, NH, NKV, HS));
        FRESH_RESET(nq);
        CHECK_OK(be->flash_attention_backward_bf16(be, want, fscratch, dout, qkv, out, lse, B, T, NH, NKV, HS, 1));
        CHECK_OK(be->flash_attention_backward_bf16(be, got, fscratch, dout, qkv, out, lse, B, T, NH, NKV, HS, 0));
        check_bits("flash_attention_backward_bf16 written", got, want, nq);

        FRESH_RESET(nc);
        CHECK_OK(be->classifier_bf16(be, losses, want, dw, cscratch, x, wte, tg, N, C, V, -100, 0.5f, 1, 0));
        CHECK_OK(be->classifier_bf16(be, losses, got, dw, cscratch, x, wte, tg, N, C, V, -100, 0.5f, 0, 0));
        check_bits("classifier_bf16 written", got, want, nc);
#undef FRESH_RESET
        forge_backend_destroy(be);
    }
    /* the -0 cases are there: a -0 gradient written is +0 */
    CHECK(g[0] == BF16_NEG_ZERO);
done:
    free(x), free(y), free(g), free(qkv), free(dout), free(out), free(want), free(got), free(want2), free(got2);
    free(yo), free(w), free(bias), free(mean), free(rstd), free(dw), free(db), free(lse), free(losses);
    free(fscratch), free(cscratch), free(wte), free(tg);
}

void suite_ops_bf16(void) {
    test_fmath();
    test_elementwise();
    test_swiglu_packed();
    test_encoder();
    test_norm_row_order();
    test_norm_forward();
    test_norm_backward();
    test_rope();
    test_fresh_writes();
}
