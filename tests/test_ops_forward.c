/*
 * test_ops_forward.c: the CPU backend's ops against known values, and its
 * optimised path against its reference path.
 *
 * Two kinds of case. "values" cases pin each op to numbers worked out by hand
 * (gelu(1), the LayerNorm of [1 2 3 4], loss log V for zero logits, RoPE at
 * t = 0 is the identity, attention over one token returns v, one AdamW step),
 * so a formula error shows up even if both CPU paths share it. "fast vs
 * reference" cases run every op, forward and backward, on the threaded/tiled
 * backend and on the reference one (reference = 1) at shapes that are
 * multiples of nothing, so edge tiles and thread splits get exercised. Their
 * backward outputs start from the same random values, not zeros, so a
 * backward that overwrites instead of accumulating fails. Gradients
 * themselves are checked by finite differences in test_gradcheck.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/backend/cpu/vexp.h"
#include "ops/cpu_fixtures.h"
#include "test.h"

/* relative tolerance between the fast and reference paths: they differ only
 * in summation order and FMA contraction */
#define FAST_TOL 1e-5

static forge_backend *make_backend(int reference) {
    forge_backend *be = NULL;
    /* 2 threads even on a 1-core machine, so thread splits are exercised */
    CHECK_OK(forge_backend_create_cpu(&be, reference ? 1 : 2, reference));
    return be;
}

#define CHECK_CLOSE(a, b, n, tol)                                                         \
    do {                                                                                  \
        double check_err_ = fx_rel_err((a), (b), (n));                                    \
        CHECK_MSG(check_err_ <= (tol), "%s vs %s: rel err %.3g > %.3g", #a, #b, check_err_, \
                  (double)(tol));                                                         \
    } while (0)

/* ---- table and memory ------------------------------------------------------- */

static void test_table(void) {
    TEST_CASE("backend table is complete and memory entries work");
    for (int reference = 0; reference <= 1; reference++) {
        forge_backend *be = make_backend(reference);
        if (!be) return;
        CHECK(be->kind == FORGE_DEVICE_CPU);
        CHECK(be->name != NULL);
        /* every slot of the table is a function pointer after the three header fields */
        const char *first = (const char *)&be->mem_alloc;
        size_t slots = (sizeof *be - (size_t)(first - (const char *)be)) / sizeof(void (*)(void));
        /* the graph entries are the exception: NULL on a backend that only runs ops eagerly */
        const size_t graph_lo = (size_t)((const char *)&be->capture_begin - first) / sizeof(void (*)(void));
        const size_t graph_hi = (size_t)((const char *)&be->graph_destroy - first) / sizeof(void (*)(void));
        for (size_t i = 0; i < slots; i++) {
            void (*fn)(void);
            if (i >= graph_lo && i <= graph_hi) continue;
            memcpy(&fn, first + i * sizeof fn, sizeof fn);
            CHECK_MSG(fn != NULL, "entry %zu of the table is NULL (reference=%d)", i, reference);
        }
        float *d = NULL, host[5] = {1, 2, 3, 4, 5}, back[5] = {0};
        CHECK_OK(be->mem_alloc(be, (void **)&d, sizeof host));
        CHECK(((uintptr_t)d & 63) == 0);
        CHECK_OK(be->copy_to_device(be, d, host, sizeof host));
        CHECK_OK(be->copy_to_host(be, back, d, sizeof back));
        CHECK(memcmp(host, back, sizeof host) == 0);
        CHECK_OK(be->memset_zero(be, d, 2 * sizeof(float)));
        CHECK_OK(be->copy_device(be, back, d, sizeof back));
        CHECK(back[0] == 0.0f && back[1] == 0.0f && back[2] == 3.0f);
        CHECK_OK(be->synchronize(be));
        be->mem_free(be, d);
        forge_backend_destroy(be);
    }

    TEST_CASE("forge_backend_create by kind, from options");
    forge_backend *be = NULL;
    forge_runtime_options rt;
    forge_runtime_options_default(&rt);
    rt.threads = 1;
    CHECK_OK(forge_backend_create(&be, FORGE_DEVICE_CPU, &rt));
    CHECK(be && be->kind == FORGE_DEVICE_CPU && be->options.threads == 1 && be->options.device == FORGE_DEVICE_CPU);
    forge_backend_destroy(be);
    be = NULL;
    CHECK(forge_backend_create(&be, (forge_device_kind)7, &rt) == FORGE_ERR_ARG);
    CHECK(be == NULL);
    forge_device_kind kind;
    int index = -1;
    CHECK(forge_device_parse("--device", "tpu", &kind, &index) == FORGE_ERR_ARG);
    CHECK_MSG(strstr(forge_error_message(), "\"cpu\"") && strstr(forge_error_message(), "\"cuda\""),
              "message should list the valid names: %s", forge_error_message());
    CHECK_OK(forge_device_parse("--device", "cuda:3", &kind, &index));
    CHECK(kind == FORGE_DEVICE_CUDA && index == 3);
    CHECK(forge_device_parse("--device", "cuda:x", &kind, &index) == FORGE_ERR_ARG);
    forge_matmul_mode mm;
    CHECK_OK(forge_matmul_mode_parse("--matmul", "simt", &mm));
    CHECK(mm == FORGE_MATMUL_FP32);
    CHECK_OK(forge_matmul_mode_parse("--matmul", "tf32", &mm));
    CHECK(mm == FORGE_MATMUL_TF32);
    CHECK(forge_matmul_mode_parse("--matmul", "fp16", &mm) == FORGE_ERR_ARG);
    forge_attention_kind ak;
    CHECK_OK(forge_attention_kind_parse("--attention", "materialised", &ak));
    CHECK(ak == FORGE_ATTENTION_MATERIALISED);
    CHECK(forge_attention_kind_parse("--attention", "sparse", &ak) == FORGE_ERR_ARG);
    forge_backend_destroy(NULL);
}

/* ---- values worked out by hand -------------------------------------------- */

static void test_elementwise_values(void) {
    TEST_CASE("elementwise values");
    forge_backend *be = make_backend(1);
    if (!be) return;
    float x[3] = {1.0f, 0.0f, -1.0f}, y[3] = {2.0f, 3.0f, 4.0f}, out[3];
    CHECK_OK(be->gelu_forward(be, out, x, 3));
    CHECK_NEAR(out[0], 0.8411920, 1e-6);
    CHECK_NEAR(out[1], 0.0, 0.0);
    CHECK_NEAR(out[2], -0.1588080, 1e-6);
    CHECK_OK(be->swiglu_forward(be, out, x, y, 3));
    CHECK_NEAR(out[0], 0.7310586 * 2.0, 1e-6); /* silu(1) = 1 / (1 + e^-1) */
    CHECK_NEAR(out[1], 0.0, 0.0);
    CHECK_NEAR(out[2], -0.2689414 * 4.0, 1e-6);
    CHECK_OK(be->add_forward(be, out, x, y, 3));
    CHECK(out[0] == 3.0f && out[1] == 3.0f && out[2] == 3.0f);
    CHECK_OK(be->accumulate(be, out, x, 3));
    CHECK(out[0] == 4.0f && out[1] == 3.0f && out[2] == 2.0f);
    /* swiglu for a very negative gate must be 0, not NaN (exp overflows) */
    float g = -200.0f, u = 1.0f, dg = 0.0f, du = 0.0f, d = 1.0f;
    CHECK_OK(be->swiglu_forward(be, out, &g, &u, 1));
    CHECK(out[0] == 0.0f);
    CHECK_OK(be->swiglu_backward(be, &dg, &du, &d, &g, &u, 1));
    CHECK(dg == 0.0f && du == 0.0f);
    /* gelu backward at 0 is 1/2, and large |x| does not give NaN */
    float xs[2] = {0.0f, 50.0f}, ds[2] = {1.0f, 1.0f}, dx[2] = {0.0f, 0.0f};
    CHECK_OK(be->gelu_backward(be, dx, xs, ds, 2));
    CHECK_NEAR(dx[0], 0.5, 1e-7);
    CHECK_NEAR(dx[1], 1.0, 1e-6);
    forge_backend_destroy(be);
}

/* The fp32 GELU computes tanh with its own vectorisable exp (elementwise.c),
 * not the C library's tanhf: against the double formula, GELU and its
 * gradient stay within 1e-6 absolute over [-12, 12] (both measure ~5e-7, the
 * same as with tanhf), and huge, infinite and NaN inputs behave. */
static void test_gelu_accuracy(void) {
    TEST_CASE("gelu: fp32 forward and backward within 1e-6 of double over [-12, 12]");
    forge_backend *be = make_backend(0);
    if (!be) return;
    size_t n = 240001;
    float *x = fx_floats(n), *y = fx_floats(n), *dx = fx_floats(n), *ones = fx_floats(n);
    for (size_t i = 0; i < n; i++) x[i] = -12.0f + 24.0f * (float)i / (float)(n - 1), ones[i] = 1.0f;
    CHECK_OK(be->gelu_forward(be, y, x, n));
    CHECK_OK(be->gelu_backward(be, dx, x, ones, n));
    double worst_f = 0.0, worst_b = 0.0;
    for (size_t i = 0; i < n; i++) {
        double v = x[i], s = 0.7978845608028654, c = 0.044715, t = tanh(s * (v + c * v * v * v));
        double f = 0.5 * v * (1.0 + t), g = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * s * (1.0 + 3.0 * c * v * v);
        if (fabs(y[i] - f) > worst_f) worst_f = fabs(y[i] - f);
        if (fabs(dx[i] - g) > worst_b) worst_b = fabs(dx[i] - g);
    }
    CHECK_MSG(worst_f <= 1e-6, "gelu forward: max abs error %.3g", worst_f);
    CHECK_MSG(worst_b <= 1e-6, "gelu backward: max abs error %.3g", worst_b);
    float big[4] = {1e30f, -1e30f, INFINITY, NAN}, out[4], dbig[4] = {0, 0, 0, 0}, d1[4] = {1, 1, 1, 1};
    CHECK_OK(be->gelu_forward(be, out, big, 4));
    CHECK(out[0] == 1e30f && out[1] == 0.0f && out[2] == INFINITY && isnan(out[3]));
    CHECK_OK(be->gelu_backward(be, dbig, big, d1, 4));
    CHECK(isnan(dbig[3]));
    free(x), free(y), free(dx), free(ones);
    forge_backend_destroy(be);
}

/* The softmax exp of the CPU kernels (backend/cpu/vexp.h): within 1 ulp of
 * double over [-87, 87] (0.88 measured), clamped (not 0 or inf) past that,
 * NaN kept. */
static void test_vexp(void) {
    TEST_CASE("cpu_vexpf: within 1 ulp of exp over [-87, 87]; clamps; NaN stays NaN");
    double worst = 0.0;
    float at = 0.0f;
    for (float x = -87.0f; x <= 87.0f; x += 0.00731f) {
        double e = exp((double)x);
        float f = cpu_vexpf(x), fe = (float)e;
        double ulp = (double)nextafterf(fe, INFINITY) - (double)fe;
        if (fabs(f - e) / ulp > worst) worst = fabs(f - e) / ulp, at = x;
    }
    CHECK_MSG(worst <= 1.0, "cpu_vexpf: %.3f ulp at %.9g", worst, (double)at);
    CHECK(cpu_vexpf(0.0f) == 1.0f);
    CHECK(cpu_vexpf(-INFINITY) > 0.0f && cpu_vexpf(-INFINITY) < 2e-38f && cpu_vexpf(-200.0f) < 2e-38f);
    CHECK(isfinite(cpu_vexpf(200.0f)) && isnan(cpu_vexpf(NAN)));
}

static void test_embedding_values(void) {
    TEST_CASE("embedding and position values");
    forge_backend *be = make_backend(1);
    if (!be) return;
    float table[3 * 2] = {0, 1, 10, 11, 20, 21};
    int32_t ids[4] = {2, 0, 2, 1};
    float out[4 * 2];
    CHECK_OK(be->embedding_forward(be, out, ids, table, 4, 2, 3));
    CHECK(out[0] == 20 && out[1] == 21 && out[2] == 0 && out[3] == 1 && out[4] == 20 &&
          out[7] == 11);
    float dtable[6] = {0}, dout[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK_OK(be->embedding_backward(be, dtable, dout, ids, 4, 2, 3));
    /* row 2 collects ids[0] and ids[2] */
    CHECK(dtable[0] == 3 && dtable[1] == 4 && dtable[2] == 7 && dtable[3] == 8 &&
          dtable[4] == 6 && dtable[5] == 8);
    int32_t bad = -1;
    CHECK(be->embedding_forward(be, out, &bad, table, 1, 2, 3) == FORGE_ERR_ARG);
    int32_t past = 3; /* one past the table's 3 rows */
    CHECK(be->embedding_forward(be, out, &past, table, 1, 2, 3) == FORGE_ERR_ARG);
    CHECK(be->embedding_backward(be, dtable, dout, &past, 1, 2, 3) == FORGE_ERR_ARG);

    /* B=2, T=2, C=1, wpe has maxT = 3 rows */
    float inp[4] = {1, 2, 3, 4}, wpe[3] = {10, 20, 30}, pos[4];
    CHECK_OK(be->position_forward(be, pos, inp, wpe, 2, 2, 1));
    CHECK(pos[0] == 11 && pos[1] == 22 && pos[2] == 13 && pos[3] == 24);
    float dinp[4] = {0}, dwpe[3] = {0}, dpos[4] = {1, 2, 3, 4};
    CHECK_OK(be->position_backward(be, dinp, dwpe, dpos, 2, 2, 1));
    CHECK(dinp[0] == 1 && dinp[3] == 4 && dwpe[0] == 4 && dwpe[1] == 6 && dwpe[2] == 0);
    forge_backend_destroy(be);
}

static void test_matmul_values(void) {
    TEST_CASE("matmul values");
    for (int reference = 0; reference <= 1; reference++) {
        forge_backend *be = make_backend(reference);
        if (!be) return;
        /* inp (2,3), weight (2,3): out = inp . weight^T + bias */
        float inp[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, -1, 2, 1, 0}, bias[2] = {0.5f, -1};
        float out[4];
        CHECK_OK(be->matmul_forward(be, out, inp, w, bias, 2, 3, 2));
        CHECK(out[0] == -1.5f && out[1] == 3.0f && out[2] == -1.5f && out[3] == 12.0f);
        CHECK_OK(be->matmul_forward(be, out, inp, w, NULL, 2, 3, 2));
        CHECK(out[0] == -2.0f && out[3] == 13.0f);
        /* dinp += dout . w ; dw += dout^T . inp ; db += sum dout */
        float dout[4] = {1, 0, 0, 1}, dinp[6] = {1, 1, 1, 1, 1, 1}, dw[6] = {0}, db[2] = {0};
        CHECK_OK(be->matmul_backward_input(be, dinp, dout, w, 2, 3, 2));
        CHECK(dinp[0] == 2 && dinp[1] == 1 && dinp[2] == 0 && dinp[3] == 3 && dinp[4] == 2 &&
              dinp[5] == 1);
        CHECK_OK(be->matmul_backward_weight(be, dw, db, dout, inp, 2, 3, 2));
        CHECK(dw[0] == 1 && dw[2] == 3 && dw[3] == 4 && dw[5] == 6 && db[0] == 1 && db[1] == 1);
        forge_backend_destroy(be);
    }
}

static void test_norm_values(void) {
    TEST_CASE("layernorm values");
    forge_backend *be = make_backend(1);
    if (!be) return;
    /* row 0: [1 2 3 4], mean 2.5, var 1.25; row 1: the same shifted by 1e4,
     * which a one-pass E[x^2] - E[x]^2 would get badly wrong */
    float inp[8] = {1, 2, 3, 4, 10001, 10002, 10003, 10004};
    float w[4] = {1, 2, 1, 2}, b[4] = {0, 0, 1, 1}, out[8], mean[2], rstd[2];
    float eps = 1e-5f;
    CHECK_OK(be->layernorm_forward(be, out, mean, rstd, inp, w, b, 2, 4, eps));
    double s = 1.0 / sqrt(1.25 + eps);
    CHECK_NEAR(mean[0], 2.5, 0);
    CHECK_NEAR(rstd[0], s, 1e-6);
    double expect[4] = {-1.5 * s, -0.5 * s * 2, 0.5 * s + 1, 1.5 * s * 2 + 1};
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(out[i], expect[i], 1e-5);
        CHECK_NEAR(out[4 + i], expect[i], 1e-5);
    }
    CHECK_NEAR(mean[1], 10002.5, 0);
    CHECK_NEAR(rstd[1], s, 1e-6);

    TEST_CASE("rmsnorm values");
    float x[2] = {3, 4}, rw[2] = {1, 2}, rout[2], r;
    CHECK_OK(be->rmsnorm_forward(be, rout, &r, x, rw, 1, 2, eps));
    double rs = 1.0 / sqrt(12.5 + eps);
    CHECK_NEAR(r, rs, 1e-7);
    CHECK_NEAR(rout[0], 3 * rs, 1e-6);
    CHECK_NEAR(rout[1], 8 * rs, 1e-6);
    forge_backend_destroy(be);
}

static void test_rope_values(void) {
    TEST_CASE("rope values");
    forge_backend *be = make_backend(1);
    if (!be) return;
    /* B=1, T=2, 2 heads of HS=4, only head 0 rotated; theta = 100 so the
     * second frequency is 100^(-2/4) = 0.1 */
    enum { T = 2, H = 2, HS = 4 };
    float inp[T * H * HS], out[T * H * HS];
    for (int i = 0; i < T * H * HS; i++) inp[i] = (float)(i + 1);
    CHECK_OK(be->rope_forward(be, out, inp, 1, T, H, 1, HS, 100.0f));
    /* t = 0: identity everywhere */
    for (int i = 0; i < H * HS; i++) CHECK(out[i] == inp[i]);
    /* t = 1, head 0: pairs (0,2) at angle 1 and (1,3) at angle 0.1 */
    const float *x = inp + H * HS;
    const float *o = out + H * HS;
    CHECK_NEAR(o[0], x[0] * cos(1.0) - x[2] * sin(1.0), 1e-5);
    CHECK_NEAR(o[2], x[2] * cos(1.0) + x[0] * sin(1.0), 1e-5);
    CHECK_NEAR(o[1], x[1] * cos(0.1) - x[3] * sin(0.1), 1e-5);
    CHECK_NEAR(o[3], x[3] * cos(0.1) + x[1] * sin(0.1), 1e-5);
    /* t = 1, head 1 is copied */
    for (int i = HS; i < 2 * HS; i++) CHECK(o[i] == x[i]);
    /* in place gives the same */
    float inplace[T * H * HS];
    memcpy(inplace, inp, sizeof inp);
    CHECK_OK(be->rope_forward(be, inplace, inplace, 1, T, H, 1, HS, 100.0f));
    CHECK(memcmp(inplace, out, sizeof out) == 0);
    CHECK(be->rope_forward(be, out, inp, 1, T, H, 1, 3, 100.0f) == FORGE_ERR_ARG);
    forge_backend_destroy(be);
}

static void test_attention_values(void) {
    TEST_CASE("attention values");
    forge_backend *be = make_backend(1);
    if (!be) return;
    /* T = 1: softmax over one key is 1, so out = v. NH=2, NKV=1, HS=2 */
    float qkv1[(2 + 2) * 2] = {1, 2, 3, 4, /* k */ 5, 6, /* v */ 7, 8};
    float out1[4], att1[2];
    CHECK_OK(be->attention_forward(be, out1, att1, qkv1, 1, 1, 2, 1, 2));
    CHECK(out1[0] == 7 && out1[1] == 8 && out1[2] == 7 && out1[3] == 8);
    CHECK(att1[0] == 1.0f && att1[1] == 1.0f);

    /* T = 2, NH = NKV = 1, HS = 2: q1 = (1, 0), k0 = (0, 0), k1 = (2, 0) */
    float qkv[2 * 3 * 2] = {0, 0, 0, 0, 1, -1, /* t=1: */ 1, 0, 2, 0, 3, 5};
    float out[2 * 2], att[2 * 2];
    CHECK_OK(be->attention_forward(be, out, att, qkv, 1, 2, 1, 1, 2));
    double s1 = 2.0 / sqrt(2.0); /* score of k1, scaled by 1/sqrt(HS); k0 scores 0 */
    double p1 = exp(s1) / (1.0 + exp(s1)), p0 = 1.0 - p1;
    CHECK_NEAR(att[0], 1.0, 0);
    CHECK_NEAR(att[1], 0.0, 0); /* above the diagonal */
    CHECK_NEAR(att[2], p0, 1e-6);
    CHECK_NEAR(att[3], p1, 1e-6);
    CHECK_NEAR(out[0], 1.0, 0);
    CHECK_NEAR(out[1], -1.0, 0);
    CHECK_NEAR(out[2], p0 * 1 + p1 * 3, 1e-6);
    CHECK_NEAR(out[3], p0 * -1 + p1 * 5, 1e-6);
    CHECK(be->attention_forward(be, out, att, qkv, 1, 2, 3, 2, 2) == FORGE_ERR_ARG);
    forge_backend_destroy(be);
}

static void test_classifier_values(void) {
    TEST_CASE("classifier values");
    forge_backend *be = make_backend(1);
    if (!be) return;
    enum { V = 5 };
    float logits[3 * V] = {0};
    /* row 2: one huge wrong logit must give a finite loss of 1000 */
    logits[2 * V + 0] = 1000.0f;
    int32_t targets[3] = {3, -100, 1};
    float losses[3] = {-1, -1, -1}, scale = 0.5f;
    CHECK_OK(be->classifier_forward_backward(be, losses, logits, targets, 3, V, -100, scale));
    CHECK_NEAR(losses[0], log(5.0), 1e-6);
    for (int i = 0; i < V; i++) CHECK_NEAR(logits[i], (0.2 - (i == 3)) * scale, 1e-7);
    CHECK(losses[1] == 0.0f);
    for (int i = 0; i < V; i++) CHECK(logits[V + i] == 0.0f);
    CHECK_NEAR(losses[2], 1000.0, 1e-3);
    CHECK_NEAR(logits[2 * V + 0], 1.0 * scale, 1e-6);
    CHECK_NEAR(logits[2 * V + 1], -1.0 * scale, 1e-6);
    int32_t bad = V;
    CHECK(be->classifier_forward_backward(be, losses, logits, &bad, 1, V, -100, 1.0f) ==
          FORGE_ERR_ARG);
    forge_backend_destroy(be);
}

/* The test's view of one AdamW step: lr, the 1-based step and the weight decay as the optimizer passes them
 * (step scalars in memory, one span over the n elements). */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay, max_grad_norm;
    int step;
} adamw_case;

static forge_status adamw_call(forge_backend *be, float *p, forge_bf16 *pb, const float *g, float *m, float *v,
                               size_t n, const float *sumsq, adamw_case c) {
    const float scalars[3] = {c.lr, 1.0f - powf(c.beta1, (float)c.step), 1.0f - powf(c.beta2, (float)c.step)};
    const forge_adamw_span span = {0, (uint32_t)n, c.weight_decay};
    forge_adamw_params hp = {.beta1 = c.beta1, .beta2 = c.beta2, .eps = c.eps, .max_grad_norm = c.max_grad_norm};
    return be->adamw(be, p, pb, g, m, v, n, &span, 1, sumsq, scalars, hp);
}

/* one AdamW step in double, straight from the formula in cpu/adamw.c */
static double adamw_ref(double p, double g, double *m, double *v, adamw_case hp, double clip) {
    g *= clip;
    *m = hp.beta1 * *m + (1 - hp.beta1) * g;
    *v = hp.beta2 * *v + (1 - hp.beta2) * g * g;
    double mhat = *m / (1 - pow(hp.beta1, hp.step)), vhat = *v / (1 - pow(hp.beta2, hp.step));
    return p - hp.lr * (mhat / (sqrt(vhat) + hp.eps) + hp.weight_decay * p);
}

static void test_adamw_values(void) {
    TEST_CASE("adamw one step by hand");
    forge_backend *be = make_backend(1);
    if (!be) return;
    adamw_case hp = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                     .weight_decay = 0.0f, .max_grad_norm = 0.0f, .step = 1};
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.1f, -0.3f, 0.0f}, m[3] = {0}, v[3] = {0};
    CHECK_OK(adamw_call(be, p, NULL, g, m, v, 3, NULL, hp));
    /* step 1 from zero moments: mhat = g, vhat = g^2, so p -= lr * sign(g) */
    CHECK_NEAR(p[0], 1.0 - 1e-2, 1e-6);
    CHECK_NEAR(p[1], -2.0 + 1e-2, 1e-6);
    CHECK_NEAR(p[2], 0.5, 0);
    CHECK_NEAR(m[0], 0.1 * 0.1, 1e-8);
    CHECK_NEAR(v[1], 0.05 * 0.09, 1e-8);

    /* a later step with non-zero moments, weight decay 0 and 0.1 */
    float decayed[2][3];
    for (int wd = 0; wd <= 1; wd++) {
        TEST_CASE(wd ? "adamw weight decay 0.1" : "adamw weight decay 0");
        adamw_case h2 = hp;
        h2.step = 3;
        h2.weight_decay = wd ? 0.1f : 0.0f;
        float pp[3] = {1.0f, -2.0f, 0.5f}, mm[3] = {0.01f, -0.02f, 0.03f},
              vv[3] = {1e-3f, 2e-3f, 3e-3f};
        double md[3], vd[3], expect[3];
        for (int i = 0; i < 3; i++) {
            md[i] = mm[i];
            vd[i] = vv[i];
            expect[i] = adamw_ref(pp[i], g[i], &md[i], &vd[i], h2, 1.0);
        }
        CHECK_OK(adamw_call(be, pp, NULL, g, mm, vv, 3, NULL, h2));
        for (int i = 0; i < 3; i++) {
            CHECK_NEAR(pp[i], expect[i], 1e-6);
            CHECK_NEAR(mm[i], md[i], 1e-8);
            CHECK_NEAR(vv[i], vd[i], 1e-9);
            decayed[wd][i] = pp[i];
        }
    }
    TEST_CASE("adamw weight decay is decoupled");
    {
        /* the only difference decay makes is -lr * wd * p (p before the step) */
        float before[3] = {1.0f, -2.0f, 0.5f};
        for (int i = 0; i < 3; i++)
            CHECK_NEAR(decayed[1][i] - decayed[0][i], -1e-2 * 0.1 * before[i], 1e-7);
    }

    TEST_CASE("adamw: each span its own weight decay, elements outside every span untouched");
    {
        float pa[6] = {1, 2, 3, 4, 5, 6}, ga[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, ma[6] = {0}, va[6] = {0};
        const forge_adamw_span spans[2] = {{0, 2, 0.0f}, {3, 3, 0.5f}};
        const float scalars[3] = {0.1f, 1.0f - 0.9f, 1.0f - 0.95f};
        forge_adamw_params h = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .max_grad_norm = 0.0f};
        CHECK_OK(be->adamw(be, pa, NULL, ga, ma, va, 6, spans, 2, NULL, scalars, h));
        /* step 1: p -= lr (sign(g) + wd p) */
        CHECK_NEAR(pa[0], 1 - 0.1, 1e-6);
        CHECK_NEAR(pa[1], 2 - 0.1, 1e-6);
        CHECK(pa[2] == 3 && ma[2] == 0 && va[2] == 0);
        for (int i = 3; i < 6; i++) CHECK_NEAR(pa[i], (i + 1) - 0.1 * (1 + 0.5 * (i + 1)), 1e-5);
        const forge_adamw_span outside = {5, 2, 0.0f};
        CHECK(be->adamw(be, pa, NULL, ga, ma, va, 6, &outside, 1, NULL, scalars, h) == FORGE_ERR_ARG);
    }

    TEST_CASE("adamw folds the clip factor into the gradient");
    {
        /* sumsq says the norm is 2 x max_grad_norm, so the update must equal an
         * unclipped update with the gradients halved */
        float gg[4] = {0.3f, -0.4f, 1.2f, 0.05f}, half[4];
        for (int i = 0; i < 4; i++) half[i] = gg[i] * 0.5f;
        float sumsq = 123.0f; /* overwritten, not added to */
        CHECK_OK(be->sumsq(be, &sumsq, gg, 4));
        double exact = 0.09 + 0.16 + 1.44 + 0.0025;
        CHECK_NEAR(sumsq, exact, 1e-6);
        adamw_case hc = hp;
        hc.step = 2;
        hc.weight_decay = 0.1f;
        hc.max_grad_norm = (float)(sqrt(sumsq) / 2.0);
        float pa[4] = {1, 2, 3, 4}, ma[4] = {0.1f, 0.1f, 0.1f, 0.1f}, va[4] = {0.01f, 0.01f, 0.01f, 0.01f};
        float pb[4], mb[4], vb[4];
        memcpy(pb, pa, sizeof pa);
        memcpy(mb, ma, sizeof ma);
        memcpy(vb, va, sizeof va);
        CHECK_OK(adamw_call(be, pa, NULL, gg, ma, va, 4, &sumsq, hc));
        adamw_case hn = hc;
        hn.max_grad_norm = 0.0f;
        CHECK_OK(adamw_call(be, pb, NULL, half, mb, vb, 4, &sumsq, hn));
        for (int i = 0; i < 4; i++) {
            CHECK_NEAR(pa[i], pb[i], 1e-6);
            CHECK_NEAR(ma[i], mb[i], 1e-7);
            CHECK_NEAR(va[i], vb[i], 1e-8);
        }
        /* a norm below the threshold is not clipped, and NULL means no clip */
        float pc[4] = {1, 2, 3, 4}, mc[4] = {0}, vc[4] = {0}, pd[4] = {1, 2, 3, 4}, md2[4] = {0},
              vd2[4] = {0};
        hc.max_grad_norm = 100.0f;
        CHECK_OK(adamw_call(be, pc, NULL, gg, mc, vc, 4, &sumsq, hc));
        hc.max_grad_norm = 1e-3f;
        CHECK_OK(adamw_call(be, pd, NULL, gg, md2, vd2, 4, NULL, hc));
        for (int i = 0; i < 4; i++) CHECK(pc[i] == pd[i] && mc[i] == md2[i]);
        TEST_CASE("adamw skips the whole update when the norm is not finite");
        float inf_sumsq = INFINITY, nan_sumsq = NAN;
        CHECK_OK(adamw_call(be, pc, NULL, gg, mc, vc, 4, &inf_sumsq, hc));
        CHECK_OK(adamw_call(be, pc, NULL, gg, mc, vc, 4, &nan_sumsq, hc));
        for (int i = 0; i < 4; i++) CHECK(pc[i] == pd[i] && mc[i] == md2[i] && vc[i] == vd2[i]);
    }
    TEST_CASE("sum_accumulate adds the sum to the scalar");
    {
        float x[5] = {1.5f, -2.0f, 0.25f, 4.0f, 0.0f}, acc = 10.0f;
        CHECK_OK(be->sum_accumulate(be, &acc, x, 5));
        CHECK_NEAR(acc, 13.75, 0);
    }
    forge_backend_destroy(be);
}

/* ---- optimised vs reference ----------------------------------------------- */

typedef struct {
    forge_backend *fast, *ref;
    forge_rng rng;
} pair;

static int pair_init(pair *p, uint64_t seed) {
    p->fast = make_backend(0);
    p->ref = make_backend(1);
    forge_rng_seed(&p->rng, seed, 7);
    return p->fast && p->ref;
}

static void pair_free(pair *p) {
    forge_backend_destroy(p->fast);
    forge_backend_destroy(p->ref);
}

static void test_fast_elementwise(void) {
    TEST_CASE("fast vs reference: elementwise");
    pair p;
    if (!pair_init(&p, 1)) return;
    size_t n = 1237;
    float *x = fx_random(&p.rng, n, -4, 4), *y = fx_random(&p.rng, n, -4, 4);
    float *d = fx_random(&p.rng, n, -1, 1);
    float *a0 = fx_random(&p.rng, n, -1, 1), *a1 = fx_copy(a0, n);
    float *b0 = fx_random(&p.rng, n, -1, 1), *b1 = fx_copy(b0, n);
    float *o0 = fx_floats(n), *o1 = fx_floats(n);
    CHECK_OK(p.fast->gelu_forward(p.fast, o0, x, n));
    CHECK_OK(p.ref->gelu_forward(p.ref, o1, x, n));
    CHECK_CLOSE(o0, o1, n, FAST_TOL);
    CHECK_OK(p.fast->gelu_backward(p.fast, a0, x, d, n));
    CHECK_OK(p.ref->gelu_backward(p.ref, a1, x, d, n));
    CHECK_CLOSE(a0, a1, n, FAST_TOL);
    CHECK_OK(p.fast->swiglu_forward(p.fast, o0, x, y, n));
    CHECK_OK(p.ref->swiglu_forward(p.ref, o1, x, y, n));
    CHECK_CLOSE(o0, o1, n, FAST_TOL);
    CHECK_OK(p.fast->swiglu_backward(p.fast, a0, b0, d, x, y, n));
    CHECK_OK(p.ref->swiglu_backward(p.ref, a1, b1, d, x, y, n));
    CHECK_CLOSE(a0, a1, n, FAST_TOL);
    CHECK_CLOSE(b0, b1, n, FAST_TOL);
    CHECK_OK(p.fast->add_forward(p.fast, o0, x, y, n));
    CHECK_OK(p.ref->add_forward(p.ref, o1, x, y, n));
    CHECK_CLOSE(o0, o1, n, 0);
    CHECK_OK(p.fast->accumulate(p.fast, o0, d, n));
    CHECK_OK(p.ref->accumulate(p.ref, o1, d, n));
    CHECK_CLOSE(o0, o1, n, 0);
    free(x), free(y), free(d), free(a0), free(a1), free(b0), free(b1), free(o0), free(o1);
    pair_free(&p);
}

/* The packed SwiGLU (gu (N, 2F): gate then up in each row) is swiglu_forward/backward on the rows' halves, bit for
 * bit, on the reference and the threaded backends; F odd and even, one row and several. */
static void test_swiglu_packed(void) {
    TEST_CASE("swiglu packed: the unpacked entries' bits on each row's halves (gate, up)");
    static const int shapes[][2] = {{1, 1}, {1, 1031}, {5, 7}, {9, 16}, {3, 200}};
    forge_rng rng;
    forge_rng_seed(&rng, 21, 5);
    for (int reference = 0; reference < 2; reference++) {
        forge_backend *be = make_backend(reference);
        if (!be) return;
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
            const int N = shapes[k][0], F = shapes[k][1];
            const size_t n = (size_t)N * F;
            float *gu = fx_random(&rng, 2 * n, -4, 4), *d = fx_random(&rng, n, -1, 1);
            float *dgu = fx_random(&rng, 2 * n, -1, 1), *out = fx_floats(n), *want = fx_floats(n);
            float *gate = fx_floats(n), *up = fx_floats(n), *dgate = fx_floats(n), *dup = fx_floats(n);
            for (int r = 0; r < N; r++) {
                memcpy(gate + (size_t)r * F, gu + (size_t)r * 2 * F, F * sizeof(float));
                memcpy(up + (size_t)r * F, gu + (size_t)r * 2 * F + F, F * sizeof(float));
                memcpy(dgate + (size_t)r * F, dgu + (size_t)r * 2 * F, F * sizeof(float));
                memcpy(dup + (size_t)r * F, dgu + (size_t)r * 2 * F + F, F * sizeof(float));
            }
            CHECK_OK(be->swiglu_packed_forward(be, out, gu, N, F));
            CHECK_OK(be->swiglu_forward(be, want, gate, up, n));
            CHECK_MSG(memcmp(out, want, n * sizeof(float)) == 0, "forward N=%d F=%d differs", N, F);
            CHECK_OK(be->swiglu_packed_backward(be, dgu, d, gu, N, F));
            CHECK_OK(be->swiglu_backward(be, dgate, dup, d, gate, up, n));
            int same = 1;
            for (int r = 0; r < N; r++)
                same &= memcmp(dgu + (size_t)r * 2 * F, dgate + (size_t)r * F, F * sizeof(float)) == 0 &&
                        memcmp(dgu + (size_t)r * 2 * F + F, dup + (size_t)r * F, F * sizeof(float)) == 0;
            CHECK_MSG(same, "backward N=%d F=%d (reference %d) differs", N, F, reference);
            free(gu), free(d), free(dgu), free(out), free(want), free(gate), free(up), free(dgate), free(dup);
        }
        /* negative sizes are refused */
        float one = 1.0f;
        CHECK(be->swiglu_packed_forward(be, &one, &one, -1, 1) == FORGE_ERR_ARG);
        forge_error_clear();
        forge_backend_destroy(be);
    }
}

static void test_fast_embedding(void) {
    TEST_CASE("fast vs reference: embedding and position");
    pair p;
    if (!pair_init(&p, 2)) return;
    int B = 3, T = 7, C = 45, V = 11, maxT = 9, N = B * T;
    int32_t ids[21];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)forge_rng_below(&p.rng, (uint64_t)V);
    float *table = fx_random(&p.rng, (size_t)V * C, -1, 1), *wpe = fx_random(&p.rng, (size_t)maxT * C, -1, 1);
    float *o0 = fx_floats((size_t)N * C), *o1 = fx_floats((size_t)N * C);
    float *q0 = fx_floats((size_t)N * C), *q1 = fx_floats((size_t)N * C);
    CHECK_OK(p.fast->embedding_forward(p.fast, o0, ids, table, N, C, V));
    CHECK_OK(p.ref->embedding_forward(p.ref, o1, ids, table, N, C, V));
    CHECK_CLOSE(o0, o1, (size_t)N * C, 0);
    CHECK_OK(p.fast->position_forward(p.fast, q0, o0, wpe, B, T, C));
    CHECK_OK(p.ref->position_forward(p.ref, q1, o1, wpe, B, T, C));
    CHECK_CLOSE(q0, q1, (size_t)N * C, 0);
    float *dout = fx_random(&p.rng, (size_t)N * C, -1, 1);
    float *dt0 = fx_random(&p.rng, (size_t)V * C, -1, 1), *dt1 = fx_copy(dt0, (size_t)V * C);
    float *dw0 = fx_random(&p.rng, (size_t)maxT * C, -1, 1), *dw1 = fx_copy(dw0, (size_t)maxT * C);
    CHECK_OK(p.fast->embedding_backward(p.fast, dt0, dout, ids, N, C, V));
    CHECK_OK(p.ref->embedding_backward(p.ref, dt1, dout, ids, N, C, V));
    CHECK_CLOSE(dt0, dt1, (size_t)V * C, FAST_TOL);
    CHECK_OK(p.fast->position_backward(p.fast, q0, dw0, dout, B, T, C));
    CHECK_OK(p.ref->position_backward(p.ref, q1, dw1, dout, B, T, C));
    CHECK_CLOSE(q0, q1, (size_t)N * C, FAST_TOL);
    CHECK_CLOSE(dw0, dw1, (size_t)maxT * C, FAST_TOL);
    free(table), free(wpe), free(o0), free(o1), free(q0), free(q1), free(dout);
    free(dt0), free(dt1), free(dw0), free(dw1);
    pair_free(&p);
}

static void matmul_case(pair *p, int N, int C, int OC, int with_bias) {
    size_t nc = (size_t)N * C, noc = (size_t)N * OC, occ = (size_t)OC * C;
    float *inp = fx_random(&p->rng, nc, -1, 1), *w = fx_random(&p->rng, occ, -1, 1);
    float *bias = with_bias ? fx_random(&p->rng, (size_t)OC, -1, 1) : NULL;
    float *o0 = fx_floats(noc), *o1 = fx_floats(noc);
    fx_fill(&p->rng, o0, noc, -9, 9); /* forward must overwrite */
    CHECK_OK(p->fast->matmul_forward(p->fast, o0, inp, w, bias, N, C, OC));
    CHECK_OK(p->ref->matmul_forward(p->ref, o1, inp, w, bias, N, C, OC));
    CHECK_MSG(fx_rel_err(o0, o1, noc) <= FAST_TOL, "forward N=%d C=%d OC=%d bias=%d: rel err %.3g",
              N, C, OC, with_bias, fx_rel_err(o0, o1, noc));
    float *dout = fx_random(&p->rng, noc, -1, 1);
    float *di0 = fx_random(&p->rng, nc, -1, 1), *di1 = fx_copy(di0, nc);
    float *dw0 = fx_random(&p->rng, occ, -1, 1), *dw1 = fx_copy(dw0, occ);
    float *db0 = fx_random(&p->rng, (size_t)OC, -1, 1), *db1 = fx_copy(db0, (size_t)OC);
    CHECK_OK(p->fast->matmul_backward_input(p->fast, di0, dout, w, N, C, OC));
    CHECK_OK(p->ref->matmul_backward_input(p->ref, di1, dout, w, N, C, OC));
    CHECK_MSG(fx_rel_err(di0, di1, nc) <= FAST_TOL, "backward_input N=%d C=%d OC=%d: rel err %.3g",
              N, C, OC, fx_rel_err(di0, di1, nc));
    CHECK_OK(p->fast->matmul_backward_weight(p->fast, dw0, with_bias ? db0 : NULL, dout, inp, N, C, OC));
    CHECK_OK(p->ref->matmul_backward_weight(p->ref, dw1, with_bias ? db1 : NULL, dout, inp, N, C, OC));
    CHECK_MSG(fx_rel_err(dw0, dw1, occ) <= FAST_TOL, "backward_weight N=%d C=%d OC=%d: rel err %.3g",
              N, C, OC, fx_rel_err(dw0, dw1, occ));
    CHECK_MSG(fx_rel_err(db0, db1, (size_t)OC) <= FAST_TOL, "dbias N=%d C=%d OC=%d: rel err %.3g", N,
              C, OC, fx_rel_err(db0, db1, (size_t)OC));
    free(inp), free(w), free(bias), free(o0), free(o1), free(dout);
    free(di0), free(di1), free(dw0), free(dw1), free(db0), free(db1);
}

/* The tiled matmul hands out its work items dynamically, so which thread
 * computes an element varies from run to run; each element's summation order
 * must not. 1, 2 and 3 threads, shapes with edge tiles, K across KC blocks,
 * Nc across NC blocks and few row blocks (where the B panels are split too):
 * every output bit must agree. */
static void matmul_threads_case(forge_backend **bes, int n_be, forge_rng *rng, int N, int C, int OC) {
    size_t nc = (size_t)N * C, noc = (size_t)N * OC, occ = (size_t)OC * C;
    float *inp = fx_random(rng, nc, -1, 1), *w = fx_random(rng, occ, -1, 1), *bias = fx_random(rng, (size_t)OC, -1, 1);
    float *dout = fx_random(rng, noc, -1, 1), *di_init = fx_random(rng, nc, -1, 1), *dw_init = fx_random(rng, occ, -1, 1);
    float *db_init = fx_random(rng, (size_t)OC, -1, 1);
    float *out[3], *di[3], *dw[3], *db[3];
    for (int t = 0; t < n_be; t++) {
        out[t] = fx_floats(noc), di[t] = fx_copy(di_init, nc), dw[t] = fx_copy(dw_init, occ);
        db[t] = fx_copy(db_init, (size_t)OC);
        fx_fill(rng, out[t], noc, -9, 9); /* forward must overwrite */
        CHECK_OK(bes[t]->matmul_forward(bes[t], out[t], inp, w, bias, N, C, OC));
        CHECK_OK(bes[t]->matmul_backward_input(bes[t], di[t], dout, w, N, C, OC));
        CHECK_OK(bes[t]->matmul_backward_weight(bes[t], dw[t], db[t], dout, inp, N, C, OC));
    }
    for (int t = 1; t < n_be; t++) {
        CHECK_MSG(memcmp(out[0], out[t], noc * sizeof(float)) == 0, "forward N=%d C=%d OC=%d: thread count %d differs",
                  N, C, OC, t + 1);
        CHECK_MSG(memcmp(di[0], di[t], nc * sizeof(float)) == 0,
                  "backward_input N=%d C=%d OC=%d: thread count %d differs", N, C, OC, t + 1);
        CHECK_MSG(memcmp(dw[0], dw[t], occ * sizeof(float)) == 0,
                  "backward_weight N=%d C=%d OC=%d: thread count %d differs", N, C, OC, t + 1);
        CHECK_MSG(memcmp(db[0], db[t], (size_t)OC * sizeof(float)) == 0,
                  "dbias N=%d C=%d OC=%d: thread count %d differs", N, C, OC, t + 1);
    }
    for (int t = 0; t < n_be; t++) free(out[t]), free(di[t]), free(dw[t]), free(db[t]);
    free(inp), free(w), free(bias), free(dout), free(di_init), free(dw_init), free(db_init);
}

static void test_matmul_thread_counts(void) {
    TEST_CASE("fast matmul: 1, 2 and 3 threads give identical bits");
    forge_backend *bes[3] = {NULL, NULL, NULL};
    for (int t = 0; t < 3; t++) CHECK_OK(forge_backend_create_cpu(&bes[t], t + 1, 0));
    if (bes[0] && bes[1] && bes[2]) {
        forge_rng rng;
        forge_rng_seed(&rng, 77, 1);
        static const int shapes[][3] = {{37, 45, 29}, {1, 1, 1}, {5, 3, 700}, {401, 45, 29},
                                        {37, 530, 1050}, {300, 1000, 77}, {13, 0, 7}};
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            matmul_threads_case(bes, 3, &rng, shapes[i][0], shapes[i][1], shapes[i][2]);
    }
    for (int t = 0; t < 3; t++) forge_backend_destroy(bes[t]);
}

static void test_fast_matmul(void) {
    TEST_CASE("fast vs reference: matmul at odd shapes");
    pair p;
    if (!pair_init(&p, 3)) return;
    matmul_case(&p, 37, 45, 29, 1);
    matmul_case(&p, 37, 45, 29, 0);
    matmul_case(&p, 1, 1, 1, 1);
    matmul_case(&p, 3, 17, 1, 1);
    TEST_CASE("fast vs reference: matmul across cache blocks");
    /* K > KC in backward_input, M > MC in backward_weight, Nc > NC in forward,
     * and M > MC in the forward of the second shape */
    matmul_case(&p, 37, 530, 1050, 1);
    matmul_case(&p, 401, 45, 29, 1);
    pair_free(&p);
}

static void test_fast_norms(void) {
    TEST_CASE("fast vs reference: layernorm");
    pair p;
    if (!pair_init(&p, 4)) return;
    int N = 37, C = 131;
    size_t nc = (size_t)N * C;
    float *inp = fx_random(&p.rng, nc, -2, 3), *w = fx_random(&p.rng, (size_t)C, 0.5f, 1.5f);
    float *b = fx_random(&p.rng, (size_t)C, -1, 1), *dout = fx_random(&p.rng, nc, -1, 1);
    float *o0 = fx_floats(nc), *o1 = fx_floats(nc), *m0 = fx_floats(N), *m1 = fx_floats(N);
    float *r0 = fx_floats(N), *r1 = fx_floats(N);
    CHECK_OK(p.fast->layernorm_forward(p.fast, o0, m0, r0, inp, w, b, N, C, 1e-5f));
    CHECK_OK(p.ref->layernorm_forward(p.ref, o1, m1, r1, inp, w, b, N, C, 1e-5f));
    CHECK_CLOSE(o0, o1, nc, FAST_TOL);
    CHECK_CLOSE(m0, m1, (size_t)N, FAST_TOL);
    CHECK_CLOSE(r0, r1, (size_t)N, FAST_TOL);
    float *di0 = fx_random(&p.rng, nc, -1, 1), *di1 = fx_copy(di0, nc);
    float *dw0 = fx_random(&p.rng, (size_t)C, -1, 1), *dw1 = fx_copy(dw0, (size_t)C);
    float *db0 = fx_random(&p.rng, (size_t)C, -1, 1), *db1 = fx_copy(db0, (size_t)C);
    CHECK_OK(p.fast->layernorm_backward(p.fast, di0, dw0, db0, dout, inp, w, m1, r1, N, C));
    CHECK_OK(p.ref->layernorm_backward(p.ref, di1, dw1, db1, dout, inp, w, m1, r1, N, C));
    CHECK_CLOSE(di0, di1, nc, FAST_TOL);
    CHECK_CLOSE(dw0, dw1, (size_t)C, FAST_TOL);
    CHECK_CLOSE(db0, db1, (size_t)C, FAST_TOL);

    TEST_CASE("fast vs reference: rmsnorm");
    CHECK_OK(p.fast->rmsnorm_forward(p.fast, o0, r0, inp, w, N, C, 1e-6f));
    CHECK_OK(p.ref->rmsnorm_forward(p.ref, o1, r1, inp, w, N, C, 1e-6f));
    CHECK_CLOSE(o0, o1, nc, FAST_TOL);
    CHECK_CLOSE(r0, r1, (size_t)N, FAST_TOL);
    CHECK_OK(p.fast->rmsnorm_backward(p.fast, di0, dw0, dout, inp, w, r1, N, C));
    CHECK_OK(p.ref->rmsnorm_backward(p.ref, di1, dw1, dout, inp, w, r1, N, C));
    CHECK_CLOSE(di0, di1, nc, FAST_TOL);
    CHECK_CLOSE(dw0, dw1, (size_t)C, FAST_TOL);
    free(inp), free(w), free(b), free(dout), free(o0), free(o1), free(m0), free(m1), free(r0), free(r1);
    free(di0), free(di1), free(dw0), free(dw1), free(db0), free(db1);
    pair_free(&p);
}

static void test_fast_rope(void) {
    TEST_CASE("fast vs reference: rope");
    pair p;
    if (!pair_init(&p, 5)) return;
    int B = 3, T = 7, H = 8, n_rot = 6, HS = 6; /* packed qkv: NH=4, NKV=2 */
    size_t n = (size_t)B * T * H * HS;
    float *x = fx_random(&p.rng, n, -1, 1), *o0 = fx_floats(n), *o1 = fx_floats(n);
    CHECK_OK(p.fast->rope_forward(p.fast, o0, x, B, T, H, n_rot, HS, 10000.0f));
    CHECK_OK(p.ref->rope_forward(p.ref, o1, x, B, T, H, n_rot, HS, 10000.0f));
    CHECK_CLOSE(o0, o1, n, FAST_TOL);
    float *d0 = fx_random(&p.rng, n, -1, 1), *d1 = fx_copy(d0, n);
    CHECK_OK(p.fast->rope_backward(p.fast, d0, x, B, T, H, n_rot, HS, 10000.0f));
    CHECK_OK(p.ref->rope_backward(p.ref, d1, x, B, T, H, n_rot, HS, 10000.0f));
    CHECK_CLOSE(d0, d1, n, FAST_TOL);
    free(x), free(o0), free(o1), free(d0), free(d1);
    pair_free(&p);
}

static void test_fast_attention(void) {
    TEST_CASE("fast vs reference: attention (GQA)");
    pair p;
    if (!pair_init(&p, 6)) return;
    int B = 3, T = 7, NH = 4, NKV = 2, HS = 6;
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS;
    size_t natt = (size_t)B * NH * T * T;
    float *qkv = fx_random(&p.rng, nqkv, -1.5f, 1.5f);
    float *o0 = fx_floats(nout), *o1 = fx_floats(nout);
    float *a0 = fx_random(&p.rng, natt, -1, 1), *a1 = fx_floats(natt);
    CHECK_OK(p.fast->attention_forward(p.fast, o0, a0, qkv, B, T, NH, NKV, HS));
    CHECK_OK(p.ref->attention_forward(p.ref, o1, a1, qkv, B, T, NH, NKV, HS));
    CHECK_CLOSE(o0, o1, nout, FAST_TOL);
    CHECK_CLOSE(a0, a1, natt, FAST_TOL);
    /* rows of att sum to 1 and are 0 above the diagonal */
    for (int r = 0; r < B * NH * T; r++) {
        int t = r % T;
        double s = 0.0;
        for (int t2 = 0; t2 < T; t2++) {
            s += a1[(size_t)r * T + t2];
            if (t2 > t) CHECK(a1[(size_t)r * T + t2] == 0.0f);
        }
        CHECK_NEAR(s, 1.0, 1e-6);
    }
    float *dout = fx_random(&p.rng, nout, -1, 1);
    float *d0 = fx_random(&p.rng, nqkv, -1, 1), *d1 = fx_copy(d0, nqkv);
    float *scratch = fx_random(&p.rng, natt, -1, 1);
    CHECK_OK(p.fast->attention_backward(p.fast, d0, scratch, dout, qkv, a1, B, T, NH, NKV, HS));
    CHECK_OK(p.ref->attention_backward(p.ref, d1, scratch, dout, qkv, a1, B, T, NH, NKV, HS));
    CHECK_CLOSE(d0, d1, nqkv, FAST_TOL);
    free(qkv), free(o0), free(o1), free(a0), free(a1), free(dout), free(d0), free(d1), free(scratch);
    pair_free(&p);
}

static void test_fast_classifier(void) {
    TEST_CASE("fast vs reference: classifier");
    pair p;
    if (!pair_init(&p, 7)) return;
    int N = 21, V = 97;
    size_t n = (size_t)N * V;
    int32_t targets[21];
    for (int i = 0; i < N; i++) targets[i] = i % 5 == 2 ? -1 : (int32_t)forge_rng_below(&p.rng, V);
    float *l0 = fx_random(&p.rng, n, -5, 5), *l1 = fx_copy(l0, n);
    float *s0 = fx_floats(N), *s1 = fx_floats(N);
    CHECK_OK(p.fast->classifier_forward_backward(p.fast, s0, l0, targets, N, V, -1, 1.0f / 17));
    CHECK_OK(p.ref->classifier_forward_backward(p.ref, s1, l1, targets, N, V, -1, 1.0f / 17));
    CHECK_CLOSE(s0, s1, (size_t)N, FAST_TOL);
    CHECK_CLOSE(l0, l1, n, FAST_TOL);
    free(l0), free(l1), free(s0), free(s1);
    pair_free(&p);
}

static void test_fast_adamw(void) {
    TEST_CASE("fast vs reference: adamw and sumsq");
    pair p;
    if (!pair_init(&p, 8)) return;
    size_t n = 1001;
    float *g = fx_random(&p.rng, n, -1, 1);
    float *p0 = fx_random(&p.rng, n, -1, 1), *p1 = fx_copy(p0, n);
    float *m0 = fx_random(&p.rng, n, -0.1f, 0.1f), *m1 = fx_copy(m0, n);
    float *v0 = fx_random(&p.rng, n, 0, 0.01f), *v1 = fx_copy(v0, n);
    float ss0 = 1.0f, ss1 = 1.0f;
    CHECK_OK(p.fast->sumsq(p.fast, &ss0, g, n));
    CHECK_OK(p.ref->sumsq(p.ref, &ss1, g, n));
    CHECK_NEAR(ss0, ss1, 1e-5 * ss1);
    adamw_case hp = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                     .weight_decay = 0.1f, .max_grad_norm = 1.0f, .step = 7};
    CHECK_OK(adamw_call(p.fast, p0, NULL, g, m0, v0, n, &ss1, hp));
    CHECK_OK(adamw_call(p.ref, p1, NULL, g, m1, v1, n, &ss1, hp));
    CHECK_CLOSE(p0, p1, n, 0);
    CHECK_CLOSE(m0, m1, n, 0);
    CHECK_CLOSE(v0, v1, n, 0);
    free(g), free(p0), free(p1), free(m0), free(m1), free(v0), free(v1);
    pair_free(&p);
}

void suite_ops_forward(void) {
    test_table();
    test_elementwise_values();
    test_gelu_accuracy();
    test_vexp();
    test_embedding_values();
    test_matmul_values();
    test_norm_values();
    test_rope_values();
    test_attention_values();
    test_classifier_values();
    test_adamw_values();
    test_fast_elementwise();
    test_swiglu_packed();
    test_fast_embedding();
    test_fast_matmul();
    test_matmul_thread_counts();
    test_fast_norms();
    test_fast_rope();
    test_fast_attention();
    test_fast_classifier();
    test_fast_adamw();
}
