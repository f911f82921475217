/*
 * test_ops_bf16.c: the CPU references of the bf16 ops (the _bf16.c files of
 * backend/cpu) against independent computations.
 *
 * Forward ops: a double-precision computation of the same formula, rounded to
 * bf16 at the same points by its own round-to-nearest-even (rn_bf16_d below,
 * not forge_bf16_from_f32). On inputs whose fp32 sums are exact (multiples of
 * 1/8, short rows) the reference must match bit for bit, ties included; on
 * random inputs it may differ by the fp32 summation error D (bounded by
 * K 2^-24 sum |a b|), i.e. by at most 1 bf16 ulp + 2 D (op_list.h says why).
 * Backward ops: a finite-difference check is not meaningful after bf16
 * rounding, so each is checked against the fp32 backward ops of the CPU
 * reference backend on the same (widened) bf16 inputs: a bf16 output must be
 * that fp32 result within its own rounding (half a bf16 ulp), an fp32 output
 * equal to it up to fp32 summation order.
 */
#include <fenv.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/base/dtype.h"
#include "../src/base/rng.h"
#include "test.h"

#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_C 0.044715

/* x rounded to 8 significant bits, nearest, ties to even, in double (independent of dtype.h) */
static double rn_bf16_d(double x) {
    if (x == 0.0 || !isfinite(x)) return x;
    int e;
    double m = frexp(x, &e); /* |m| in [0.5, 1): 8 significant bits are m * 2^8 rounded to an integer */
    return ldexp(nearbyint(ldexp(m, 8)), e - 8);
}

/* one bf16 ulp at c: 2^(e-7) for |c| in [2^e, 2^(e+1)) */
static double ulp_bf16(double c) {
    if (c == 0.0) return ldexp(1.0, -133);
    int e;
    frexp(fabs(c), &e);
    return ldexp(1.0, e - 1 - 7);
}

static double gelu_d(double x) { return 0.5 * x * (1.0 + tanh(GELU_K * (x + GELU_C * x * x * x))); }

static forge_backend *cpu_backend(int reference) {
    forge_backend *be = NULL;
    CHECK_OK(forge_backend_create_cpu(&be, reference ? 1 : 2, reference));
    return be;
}

static float rand_unit(forge_rng *r, float lo, float hi) { return lo + (hi - lo) * forge_rng_uniform(r); }

/* n bf16 values: uniform in [lo, hi) rounded to bf16, or (eighths) k/8 for an integer k in [8 lo, 8 hi] */
static forge_bf16 *bf16_rand(forge_rng *r, size_t n, float lo, float hi, int eighths) {
    forge_bf16 *p = malloc(n * sizeof *p);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        float v = rand_unit(r, lo, hi);
        if (eighths) v = floorf(8.0f * v + 0.5f) / 8.0f;
        p[i] = forge_bf16_from_f32(v);
    }
    return p;
}

static float *widen(const forge_bf16 *p, size_t n) {
    float *f = malloc(n * sizeof *f);
    if (!f) return NULL;
    for (size_t i = 0; i < n; i++) f[i] = forge_bf16_to_f32(p[i]);
    return f;
}

/* ---- matmul_forward_bf16 ------------------------------------------------------------------------------------- */

/* One forward run (gelu: with pre) against the double computation; exact: inputs in eighths, so every fp32 sum is
 * exact and out / pre must be the double result's rounding bit for bit (GELU: within its fp32 evaluation). */
static void check_forward(forge_backend *be, int N, int C, int OC, int gelu, int with_bias, int exact,
                          uint64_t seed) {
    forge_rng r;
    forge_rng_seed(&r, seed, 3);
    forge_bf16 *inp = bf16_rand(&r, (size_t)N * C, -1, 1, exact), *w = bf16_rand(&r, (size_t)OC * C, -1, 1, exact);
    forge_bf16 *out = malloc((size_t)N * OC * sizeof *out), *pre = malloc((size_t)N * OC * sizeof *pre);
    float *bias = malloc((size_t)OC * sizeof *bias);
    if (!inp || !w || !out || !pre || !bias) {
        CHECK_MSG(0, "out of memory");
        goto done;
    }
    for (int o = 0; o < OC; o++) {
        float b = rand_unit(&r, -1, 1);
        bias[o] = exact ? floorf(8.0f * b + 0.5f) / 8.0f : b;
    }
    memset(out, 0xff, (size_t)N * OC * sizeof *out);
    memset(pre, 0xff, (size_t)N * OC * sizeof *pre);
    CHECK_OK(be->matmul_forward_bf16(be, out, gelu ? pre : NULL, inp, w, with_bias ? bias : NULL, N, C, OC));
    int bad = 0;
    for (int n = 0; n < N && !bad; n++) {
        for (int o = 0; o < OC && !bad; o++) {
            double v = 0.0, mag = 0.0;
            for (int k = 0; k < C; k++) {
                double p = (double)forge_bf16_to_f32(inp[(size_t)n * C + k]) * forge_bf16_to_f32(w[(size_t)o * C + k]);
                v += p;
                mag += fabs(p);
            }
            if (with_bias) v += bias[o];
            /* the fp32 recursive sum's worst-case error (C - 1 additions, one more for the bias) */
            const double D = exact ? 0.0 : ldexp((double)C + 1.0, -24) * (mag + fabs(v));
            const size_t i = (size_t)n * OC + o;
            const double got_pre = forge_bf16_to_f32(pre[i]), got = forge_bf16_to_f32(out[i]);
            /* exact sums: the bits of the double result's rounding; else got = rn(y) for some y within D of v, so
             * |got - v| <= half a bf16 ulp of got + D */
            const double want_v = rn_bf16_d(v);
            const int v_ok_pre = exact ? got_pre == want_v : fabs(got_pre - v) <= 0.5 * ulp_bf16(got_pre) + D;
            const int v_ok_out = exact ? got == want_v : fabs(got - v) <= 0.5 * ulp_bf16(got) + D;
            if (gelu) {
                /* gelu(v) itself rounded: fp32 tanh GELU within 2e-7 max(1, |v|) of the exact function, plus
                 * 1.13 D carried from v (rounding v first, or GELU of the bf16 pre, fails this) */
                const double g = gelu_d(v), Dg = 1.13 * D + 2e-7 * fmax(1.0, fabs(v));
                bad |= !v_ok_pre || !(fabs(got - g) <= 0.5 * ulp_bf16(got) + Dg);
                if (bad)
                    CHECK_MSG(0, "N=%d C=%d OC=%d gelu [%d,%d]: pre %.9g out %.9g; v %.9g, gelu(v) %.9g", N, C, OC,
                              n, o, got_pre, got, v, g);
            } else {
                bad |= !v_ok_out;
                if (bad) CHECK_MSG(0, "N=%d C=%d OC=%d [%d,%d]: out %.9g; v %.9g", N, C, OC, n, o, got, v);
            }
        }
    }
    if (!gelu) /* pre NULL: not written */
        for (size_t i = 0; i < (size_t)N * OC; i++) bad |= pre[i] != 0xffffu;
    CHECK_MSG(!bad, "matmul_forward_bf16 N=%d C=%d OC=%d gelu=%d bias=%d exact=%d", N, C, OC, gelu, with_bias, exact);
done:
    free(inp);
    free(w);
    free(out);
    free(pre);
    free(bias);
}

static void test_forward_values(void) {
    TEST_CASE("matmul_forward_bf16: double computation, same rounding points (exact sums: bit for bit)");
    if (fegetround() != FE_TONEAREST) fesetround(FE_TONEAREST); /* rn_bf16_d's nearbyint */
    for (int reference = 1; reference >= 0; reference--) {
        forge_backend *be = cpu_backend(reference);
        if (!be) return;
        for (int gelu = 0; gelu <= 1; gelu++) {
            for (int with_bias = 0; with_bias <= 1; with_bias++) {
                /* eighths: |v| <= C + 1 in steps of 1/64 needs up to 13 bits, so bf16 rounds, ties included */
                check_forward(be, 5, 24, 7, gelu, with_bias, 1, 11);
                check_forward(be, 8, 64, 16, gelu, with_bias, 1, 14);
                check_forward(be, 17, 300, 33, gelu, with_bias, 0, 12);
                check_forward(be, 3, 1, 1, gelu, with_bias, 0, 13);
            }
        }
        forge_backend_destroy(be);
    }
}

static void test_forward_ties(void) {
    TEST_CASE("matmul_forward_bf16: rounds v once, to nearest even (hand-picked ties)");
    forge_backend *be = cpu_backend(1);
    if (!be) return;
    /* C = 1: v = x w + bias. 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to 1 (even);
     * 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to 1 + 2^-6 (even) */
    const forge_bf16 x[2] = {forge_bf16_from_f32(1.0f), forge_bf16_from_f32(1.0f)};
    const forge_bf16 w[2] = {forge_bf16_from_f32(1.0f), forge_bf16_from_f32(1.0f)};
    const float bias[2] = {0x1p-8f, 0x3p-8f};
    forge_bf16 out[4];
    CHECK_OK(be->matmul_forward_bf16(be, out, NULL, x, w, bias, 2, 1, 2));
    CHECK(forge_bf16_to_f32(out[0]) == 1.0f);
    CHECK(forge_bf16_to_f32(out[1]) == 1.0f + 0x1p-6f);
    CHECK(forge_bf16_to_f32(out[2]) == 1.0f);
    CHECK(forge_bf16_to_f32(out[3]) == 1.0f + 0x1p-6f);
    forge_backend_destroy(be);
}

/* ---- backward: against the fp32 ops on the same inputs -------------------------------------------------------- */

static void check_backward_input(forge_backend *be, forge_backend *ref32, int N, int C, int OC, int with_pre,
                                 uint64_t seed, int accumulate) {
    forge_rng r;
    forge_rng_seed(&r, seed, 5);
    const size_t nc = (size_t)N * C;
    forge_bf16 *dout = bf16_rand(&r, (size_t)N * OC, -1, 1, 0), *w = bf16_rand(&r, (size_t)OC * C, -1, 1, 0);
    forge_bf16 *pre = bf16_rand(&r, nc, -3, 3, 0), *dinp = bf16_rand(&r, nc, -1, 1, 0);
    float *dout32 = dout ? widen(dout, (size_t)N * OC) : NULL, *w32 = w ? widen(w, (size_t)OC * C) : NULL;
    float *pre32 = pre ? widen(pre, nc) : NULL, *dinp32 = dinp ? widen(dinp, nc) : NULL;
    float *tmp = calloc(nc, sizeof *tmp);
    if (!dout || !w || !pre || !dinp || !dout32 || !w32 || !pre32 || !dinp32 || !tmp) {
        CHECK_MSG(0, "out of memory");
        goto done;
    }
    if (!accumulate) /* written, not added: what was there (NaN here) must not matter */
        for (size_t i = 0; i < nc; i++) {
            dinp[i] = (forge_bf16)0x7fc0;
            dinp32[i] = 0.0f;
        }
    CHECK_OK(be->matmul_backward_input_bf16(be, dinp, dout, w, with_pre ? pre : NULL, N, C, OC, accumulate));
    /* fp32: tmp = dout . W; dinp32 += tmp (times gelu'(pre)) */
    CHECK_OK(ref32->matmul_backward_input(ref32, tmp, dout32, w32, N, C, OC));
    if (with_pre) CHECK_OK(ref32->gelu_backward(ref32, dinp32, pre32, tmp, nc));
    else CHECK_OK(ref32->accumulate(ref32, dinp32, tmp, nc));
    size_t bad = 0, worst = 0;
    for (size_t i = 0; i < nc; i++) {
        const double got = forge_bf16_to_f32(dinp[i]), want = dinp32[i];
        if (!(fabs(got - want) <= 0.5 * ulp_bf16(got))) {
            if (!bad) worst = i;
            bad++;
        }
    }
    CHECK_MSG(!bad, "matmul_backward_input_bf16 N=%d C=%d OC=%d pre=%d: %zu outputs not the fp32 result's rounding "
              "(first [%zu]: %.9g vs fp32 %.9g)", N, C, OC, with_pre, bad, worst,
              (double)forge_bf16_to_f32(dinp[worst]), (double)dinp32[worst]);
done:
    free(dout), free(w), free(pre), free(dinp);
    free(dout32), free(w32), free(pre32), free(dinp32), free(tmp);
}

static void test_backward_input(void) {
    TEST_CASE("matmul_backward_input_bf16: the fp32 backward (and gelu_backward) of the same inputs, rounded; "
              "accumulate = 0 writes");
    forge_backend *ref32 = cpu_backend(1);
    if (!ref32) return;
    for (int reference = 1; reference >= 0; reference--) {
        forge_backend *be = cpu_backend(reference);
        if (!be) break;
        for (int with_pre = 0; with_pre <= 1; with_pre++)
            for (int acc = 0; acc <= 1; acc++) {
                check_backward_input(be, ref32, 13, 40, 300, with_pre, 21, acc);
                check_backward_input(be, ref32, 1, 7, 3, with_pre, 22, acc);
                check_backward_input(be, ref32, 37, 129, 45, with_pre, 23, acc);
            }
        forge_backend_destroy(be);
    }
    forge_backend_destroy(ref32);
}

static void check_backward_weight(forge_backend *be, forge_backend *ref32, int N, int C, int OC, int with_dbias,
                                  uint64_t seed) {
    forge_rng r;
    forge_rng_seed(&r, seed, 7);
    const size_t oc_c = (size_t)OC * C;
    forge_bf16 *dout = bf16_rand(&r, (size_t)N * OC, -1, 1, 0), *inp = bf16_rand(&r, (size_t)N * C, -1, 1, 0);
    float *dout32 = dout ? widen(dout, (size_t)N * OC) : NULL, *inp32 = inp ? widen(inp, (size_t)N * C) : NULL;
    float *dw = malloc(oc_c * sizeof *dw), *dw32 = malloc(oc_c * sizeof *dw32);
    float *db = malloc((size_t)OC * sizeof *db), *db32 = malloc((size_t)OC * sizeof *db32);
    if (!dout || !inp || !dout32 || !inp32 || !dw || !dw32 || !db || !db32) {
        CHECK_MSG(0, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < oc_c; i++) dw[i] = dw32[i] = rand_unit(&r, -1, 1);
    for (int o = 0; o < OC; o++) db[o] = db32[o] = rand_unit(&r, -1, 1);
    CHECK_OK(be->matmul_backward_weight_bf16(be, dw, with_dbias ? db : NULL, dout, inp, N, C, OC));
    CHECK_OK(ref32->matmul_backward_weight(ref32, dw32, with_dbias ? db32 : NULL, dout32, inp32, N, C, OC));
    /* the same N-long fp32 sums of exact products: equal up to summation order (the reference sums in order too) */
    double err = 0.0, err_b = 0.0;
    for (size_t i = 0; i < oc_c; i++) err = fmax(err, fabs((double)dw[i] - dw32[i]));
    for (int o = 0; o < OC; o++) err_b = fmax(err_b, fabs((double)db[o] - db32[o]));
    CHECK_MSG(err <= 1e-6 && err_b <= 1e-6, "matmul_backward_weight_bf16 N=%d C=%d OC=%d: dweight off by %.3g, "
              "dbias by %.3g", N, C, OC, err, err_b);
done:
    free(dout), free(inp), free(dout32), free(inp32), free(dw), free(dw32), free(db), free(db32);
}

static void test_backward_weight(void) {
    TEST_CASE("matmul_backward_weight_bf16: the fp32 backward of the same inputs");
    forge_backend *ref32 = cpu_backend(1);
    if (!ref32) return;
    for (int reference = 1; reference >= 0; reference--) {
        forge_backend *be = cpu_backend(reference);
        if (!be) break;
        for (int with_dbias = 0; with_dbias <= 1; with_dbias++) {
            check_backward_weight(be, ref32, 300, 40, 13, with_dbias, 31);
            check_backward_weight(be, ref32, 1, 7, 3, with_dbias, 32);
            check_backward_weight(be, ref32, 45, 129, 37, with_dbias, 33);
        }
        forge_backend_destroy(be);
    }
    forge_backend_destroy(ref32);
}

void suite_ops_bf16_matmul(void) {
    test_forward_values();
    test_forward_ties();
    test_backward_input();
    test_backward_weight();
}
