/*
 * test_gradcheck.c: every backward of the reference CPU backend against
 * central finite differences of its forward.
 *
 * For each op we fix a random R shaped like the op's output and take the
 * scalar L = sum(out * R). Its analytic gradient is the op's backward called
 * with dout = R (into zeroed buffers); its numeric gradient is
 * (L(x + h) - L(x - h)) / 2h per input element, with the forward run in float
 * but L summed in double.
 *
 * The decision a reader would get wrong is the tolerance. The forward is
 * float, so each L carries rounding noise of roughly 1e-7 x |terms the
 * perturbed element touches|; divided by 2h = 2e-3 that is ~1e-4 in the
 * numeric gradient, while a wrong formula (a dropped term, a missing factor
 * 1/C, a sign) is off by 1e-1 or more. So the checks are: every element within
 * 5e-3 * max(1, |numeric|), and the whole vector within 2e-3 relative in the
 * 2-norm. Both pass with a wide margin and neither would accept a real bug.
 * Shapes are small and odd (B=2, T=5, C=13, ...), so edge handling is on the
 * path and the suite runs in well under a second.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "ops/cpu_fixtures.h"
#include "test.h"

#define FD_H 1e-3f
#define FD_ELEM_TOL 5e-3 /* per element, times max(1, |numeric|) */
#define FD_NORM_TOL 2e-3 /* ||analytic - numeric|| / ||numeric|| */
#define FD_MAX_CHECKS 120 /* elements checked per tensor (random subset beyond that) */

typedef enum {
    GC_EMBEDDING,
    GC_POSITION,
    GC_MATMUL,
    GC_LAYERNORM,
    GC_RMSNORM,
    GC_ROPE,
    GC_GELU,
    GC_SWIGLU,
    GC_SWIGLU_PACKED,
    GC_ADD,
    GC_ATTENTION,
    GC_FLASH,
    GC_CLASSIFIER,
} gc_op;

/* Everything one objective evaluation needs: the op, its sizes, its inputs
 * (in[], which the finite differences perturb in place) and its outputs. */
typedef struct {
    forge_backend *be;
    gc_op op;
    int N, C, OC, B, T, V, NH, NKV, HS, n_heads, n_rot;
    float theta, eps;
    float *in[3];
    const int32_t *ids; /* embedding ids or classifier targets */
    float *out, *save0, *save1; /* output; saved stats, att or logits copy */
    const float *R;
    size_t n_out;
} gc_ctx;

static double dot_double(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* L(inputs): runs the forward and returns sum(out * R) in double (for the
 * classifier: the mean loss over counted rows). */
static double objective(gc_ctx *g) {
    forge_backend *be = g->be;
    forge_status s = FORGE_OK;
    switch (g->op) {
    case GC_EMBEDDING: s = be->embedding_forward(be, g->out, g->ids, g->in[0], g->N, g->C, g->V); break;
    case GC_POSITION: s = be->position_forward(be, g->out, g->in[0], g->in[1], g->B, g->T, g->C); break;
    case GC_MATMUL:
        s = be->matmul_forward(be, g->out, g->in[0], g->in[1], g->in[2], g->N, g->C, g->OC);
        break;
    case GC_LAYERNORM:
        s = be->layernorm_forward(be, g->out, g->save0, g->save1, g->in[0], g->in[1], g->in[2], g->N,
                                  g->C, g->eps);
        break;
    case GC_RMSNORM:
        s = be->rmsnorm_forward(be, g->out, g->save0, g->in[0], g->in[1], g->N, g->C, g->eps);
        break;
    case GC_ROPE:
        s = be->rope_forward(be, g->out, g->in[0], g->B, g->T, g->n_heads, g->n_rot, g->HS, g->theta);
        break;
    case GC_GELU: s = be->gelu_forward(be, g->out, g->in[0], g->n_out); break;
    case GC_SWIGLU: s = be->swiglu_forward(be, g->out, g->in[0], g->in[1], g->n_out); break;
    case GC_SWIGLU_PACKED: s = be->swiglu_packed_forward(be, g->out, g->in[0], g->N, g->C); break;
    case GC_ADD: s = be->add_forward(be, g->out, g->in[0], g->in[1], g->n_out); break;
    case GC_ATTENTION:
        s = be->attention_forward(be, g->out, g->save0, g->in[0], g->B, g->T, g->NH, g->NKV, g->HS);
        break;
    case GC_FLASH: /* save0 holds lse */
        s = be->flash_attention_forward(be, g->out, g->save0, g->in[0], g->B, g->T, g->NH, g->NKV, g->HS);
        break;
    case GC_CLASSIFIER: {
        /* the op overwrites its logits, so it runs on a copy; out holds losses */
        memcpy(g->save0, g->in[0], (size_t)g->N * g->V * sizeof(float));
        s = be->classifier_forward_backward(be, g->out, g->save0, g->ids, g->N, g->V, -1, 1.0f);
        double sum = 0.0;
        int counted = 0;
        for (int n = 0; n < g->N; n++)
            if (g->ids[n] != -1) sum += g->out[n], counted++;
        if (s != FORGE_OK) test_case_fail(__FILE__, __LINE__, "forward: %s", forge_error_message());
        return sum / counted;
    }
    }
    if (s != FORGE_OK) test_case_fail(__FILE__, __LINE__, "forward: %s", forge_error_message());
    return dot_double(g->out, g->R, g->n_out);
}

/* Central differences of objective() w.r.t. x (n elements, one of g->in[])
 * compared with the analytic gradient. */
static void fd_check(gc_ctx *g, const char *what, float *x, size_t n, const float *analytic,
                     forge_rng *rng) {
    size_t checks = n < FD_MAX_CHECKS ? n : FD_MAX_CHECKS;
    double diff2 = 0.0, num2 = 0.0, worst = 0.0;
    size_t worst_i = 0;
    double worst_a = 0.0, worst_n = 0.0;
    for (size_t c = 0; c < checks; c++) {
        size_t i = n <= FD_MAX_CHECKS ? c : (size_t)forge_rng_below(rng, n);
        float saved = x[i];
        float up = saved + FD_H, down = saved - FD_H;
        x[i] = up;
        double lp = objective(g);
        x[i] = down;
        double lm = objective(g);
        x[i] = saved;
        /* divide by the step actually taken after float rounding */
        double num = (lp - lm) / ((double)up - (double)down);
        double a = analytic[i];
        diff2 += (a - num) * (a - num);
        num2 += num * num;
        double excess = fabs(a - num) / (FD_ELEM_TOL * fmax(1.0, fabs(num)));
        if (excess > worst) worst = excess, worst_i = i, worst_a = a, worst_n = num;
    }
    double norm_err = sqrt(diff2) / fmax(sqrt(num2), 1e-12);
    if (getenv("FORGE_TEST_VERBOSE"))
        printf("     %-8s %zu of %zu checked: norm err %.2e, worst element at %.3f of its tolerance\n",
               what, checks, n, norm_err, worst);
    CHECK_MSG(worst <= 1.0, "%s[%zu]: analytic %.7g vs numeric %.7g", what, worst_i, worst_a, worst_n);
    CHECK_MSG(norm_err <= FD_NORM_TOL || sqrt(num2) < 1e-6, "%s: ||analytic - numeric|| / ||numeric|| = %.3g",
              what, norm_err);
}

static forge_backend *ref_backend(void) {
    forge_backend *be = NULL;
    CHECK_OK(forge_backend_create_cpu(&be, 1, 1));
    return be;
}

static void test_embedding(forge_rng *rng) {
    TEST_CASE("gradcheck embedding");
    forge_backend *be = ref_backend();
    if (!be) return;
    int N = 9, C = 13, V = 7;
    int32_t ids[9] = {3, 0, 3, 6, 1, 3, 0, 5, 6}; /* repeats, and id 2 and 4 unused */
    gc_ctx g = {.be = be, .op = GC_EMBEDDING, .N = N, .C = C, .V = V, .ids = ids, .n_out = (size_t)N * C};
    g.in[0] = fx_random(rng, (size_t)V * C, -1, 1);
    g.out = fx_floats(g.n_out);
    float *R = fx_random(rng, g.n_out, -1, 1), *dtable = fx_floats((size_t)V * C);
    g.R = R;
    CHECK_OK(be->embedding_backward(be, dtable, R, ids, N, C, V));
    fd_check(&g, "dtable", g.in[0], (size_t)V * C, dtable, rng);
    free(g.in[0]), free(g.out), free(R), free(dtable);
    forge_backend_destroy(be);
}

static void test_position(forge_rng *rng) {
    TEST_CASE("gradcheck position");
    forge_backend *be = ref_backend();
    if (!be) return;
    int B = 2, T = 5, C = 13, maxT = 8;
    size_t n = (size_t)B * T * C;
    gc_ctx g = {.be = be, .op = GC_POSITION, .B = B, .T = T, .C = C, .n_out = n};
    g.in[0] = fx_random(rng, n, -1, 1);
    g.in[1] = fx_random(rng, (size_t)maxT * C, -1, 1);
    g.out = fx_floats(n);
    float *R = fx_random(rng, n, -1, 1), *dinp = fx_floats(n), *dwpe = fx_floats((size_t)maxT * C);
    g.R = R;
    CHECK_OK(be->position_backward(be, dinp, dwpe, R, B, T, C));
    fd_check(&g, "dinp", g.in[0], n, dinp, rng);
    fd_check(&g, "dwpe", g.in[1], (size_t)maxT * C, dwpe, rng); /* rows >= T: both 0 */
    free(g.in[0]), free(g.in[1]), free(g.out), free(R), free(dinp), free(dwpe);
    forge_backend_destroy(be);
}

static void test_matmul(forge_rng *rng, int with_bias) {
    TEST_CASE(with_bias ? "gradcheck matmul with bias" : "gradcheck matmul without bias");
    forge_backend *be = ref_backend();
    if (!be) return;
    int N = 7, C = 11, OC = 9;
    size_t nc = (size_t)N * C, occ = (size_t)OC * C, noc = (size_t)N * OC;
    gc_ctx g = {.be = be, .op = GC_MATMUL, .N = N, .C = C, .OC = OC, .n_out = noc};
    g.in[0] = fx_random(rng, nc, -1, 1);
    g.in[1] = fx_random(rng, occ, -1, 1);
    g.in[2] = with_bias ? fx_random(rng, (size_t)OC, -1, 1) : NULL;
    g.out = fx_floats(noc);
    float *R = fx_random(rng, noc, -1, 1);
    float *dinp = fx_floats(nc), *dw = fx_floats(occ), *db = fx_floats((size_t)OC);
    g.R = R;
    CHECK_OK(be->matmul_backward_input(be, dinp, R, g.in[1], N, C, OC));
    CHECK_OK(be->matmul_backward_weight(be, dw, with_bias ? db : NULL, R, g.in[0], N, C, OC));
    fd_check(&g, "dinp", g.in[0], nc, dinp, rng);
    fd_check(&g, "dweight", g.in[1], occ, dw, rng);
    if (with_bias) fd_check(&g, "dbias", g.in[2], (size_t)OC, db, rng);
    free(g.in[0]), free(g.in[1]), free(g.in[2]), free(g.out), free(R), free(dinp), free(dw), free(db);
    forge_backend_destroy(be);
}

static void test_layernorm(forge_rng *rng) {
    TEST_CASE("gradcheck layernorm");
    forge_backend *be = ref_backend();
    if (!be) return;
    int N = 5, C = 13;
    size_t nc = (size_t)N * C;
    gc_ctx g = {.be = be, .op = GC_LAYERNORM, .N = N, .C = C, .eps = 1e-5f, .n_out = nc};
    g.in[0] = fx_random(rng, nc, -2, 2);
    g.in[1] = fx_random(rng, (size_t)C, 0.5f, 1.5f);
    g.in[2] = fx_random(rng, (size_t)C, -1, 1);
    g.out = fx_floats(nc);
    g.save0 = fx_floats((size_t)N);
    g.save1 = fx_floats((size_t)N);
    float *R = fx_random(rng, nc, -1, 1);
    float *dinp = fx_floats(nc), *dw = fx_floats((size_t)C), *db = fx_floats((size_t)C);
    g.R = R;
    objective(&g); /* fills mean, rstd */
    CHECK_OK(be->layernorm_backward(be, dinp, dw, db, R, g.in[0], g.in[1], g.save0, g.save1, N, C));
    fd_check(&g, "dinp", g.in[0], nc, dinp, rng);
    fd_check(&g, "dweight", g.in[1], (size_t)C, dw, rng);
    fd_check(&g, "dbias", g.in[2], (size_t)C, db, rng);
    free(g.in[0]), free(g.in[1]), free(g.in[2]), free(g.out), free(g.save0), free(g.save1);
    free(R), free(dinp), free(dw), free(db);
    forge_backend_destroy(be);
}

static void test_rmsnorm(forge_rng *rng) {
    TEST_CASE("gradcheck rmsnorm");
    forge_backend *be = ref_backend();
    if (!be) return;
    int N = 5, C = 13;
    size_t nc = (size_t)N * C;
    gc_ctx g = {.be = be, .op = GC_RMSNORM, .N = N, .C = C, .eps = 1e-6f, .n_out = nc};
    g.in[0] = fx_random(rng, nc, -2, 2);
    g.in[1] = fx_random(rng, (size_t)C, 0.5f, 1.5f);
    g.out = fx_floats(nc);
    g.save0 = fx_floats((size_t)N);
    float *R = fx_random(rng, nc, -1, 1), *dinp = fx_floats(nc), *dw = fx_floats((size_t)C);
    g.R = R;
    objective(&g); /* fills rstd */
    CHECK_OK(be->rmsnorm_backward(be, dinp, dw, R, g.in[0], g.in[1], g.save0, N, C));
    fd_check(&g, "dinp", g.in[0], nc, dinp, rng);
    fd_check(&g, "dweight", g.in[1], (size_t)C, dw, rng);
    free(g.in[0]), free(g.in[1]), free(g.out), free(g.save0), free(R), free(dinp), free(dw);
    forge_backend_destroy(be);
}

static void test_rope(forge_rng *rng) {
    TEST_CASE("gradcheck rope");
    forge_backend *be = ref_backend();
    if (!be) return;
    /* packed qkv of NH=3, NKV=1: 5 heads, the first 4 rotated, v copied */
    int B = 2, T = 5, H = 5, HS = 6;
    size_t n = (size_t)B * T * H * HS;
    gc_ctx g = {.be = be, .op = GC_ROPE, .B = B, .T = T, .n_heads = H, .n_rot = 4, .HS = HS,
                .theta = 500.0f, .n_out = n};
    g.in[0] = fx_random(rng, n, -1, 1);
    g.out = fx_floats(n);
    float *R = fx_random(rng, n, -1, 1), *dinp = fx_floats(n);
    g.R = R;
    CHECK_OK(be->rope_backward(be, dinp, R, B, T, H, 4, HS, 500.0f));
    fd_check(&g, "dinp", g.in[0], n, dinp, rng);
    free(g.in[0]), free(g.out), free(R), free(dinp);
    forge_backend_destroy(be);
}

static void test_gelu(forge_rng *rng) {
    TEST_CASE("gradcheck gelu");
    forge_backend *be = ref_backend();
    if (!be) return;
    size_t n = 97;
    gc_ctx g = {.be = be, .op = GC_GELU, .n_out = n};
    g.in[0] = fx_random(rng, n, -4, 4);
    g.out = fx_floats(n);
    float *R = fx_random(rng, n, -1, 1), *dinp = fx_floats(n);
    g.R = R;
    CHECK_OK(be->gelu_backward(be, dinp, g.in[0], R, n));
    fd_check(&g, "dinp", g.in[0], n, dinp, rng);
    free(g.in[0]), free(g.out), free(R), free(dinp);
    forge_backend_destroy(be);
}

static void test_swiglu(forge_rng *rng) {
    TEST_CASE("gradcheck swiglu");
    forge_backend *be = ref_backend();
    if (!be) return;
    size_t n = 97;
    gc_ctx g = {.be = be, .op = GC_SWIGLU, .n_out = n};
    g.in[0] = fx_random(rng, n, -5, 5);
    g.in[1] = fx_random(rng, n, -2, 2);
    g.out = fx_floats(n);
    float *R = fx_random(rng, n, -1, 1), *dgate = fx_floats(n), *dup = fx_floats(n);
    g.R = R;
    CHECK_OK(be->swiglu_backward(be, dgate, dup, R, g.in[0], g.in[1], n));
    fd_check(&g, "dgate", g.in[0], n, dgate, rng);
    fd_check(&g, "dup", g.in[1], n, dup, rng);
    free(g.in[0]), free(g.in[1]), free(g.out), free(R), free(dgate), free(dup);
    forge_backend_destroy(be);
}

/* gu (N, 2F): gate then up in each row (F in g.C) */
static void test_swiglu_packed(forge_rng *rng) {
    TEST_CASE("gradcheck swiglu packed");
    forge_backend *be = ref_backend();
    if (!be) return;
    const int N = 7, F = 13;
    const size_t n = (size_t)N * F;
    gc_ctx g = {.be = be, .op = GC_SWIGLU_PACKED, .N = N, .C = F, .n_out = n};
    g.in[0] = fx_random(rng, 2 * n, -4, 4);
    g.out = fx_floats(n);
    float *R = fx_random(rng, n, -1, 1), *dgu = fx_floats(2 * n);
    g.R = R;
    CHECK_OK(be->swiglu_packed_backward(be, dgu, R, g.in[0], N, F));
    fd_check(&g, "dgu", g.in[0], 2 * n, dgu, rng);
    free(g.in[0]), free(g.out), free(R), free(dgu);
    forge_backend_destroy(be);
}

static void test_add(forge_rng *rng) {
    TEST_CASE("gradcheck add (backward is accumulate into both inputs)");
    forge_backend *be = ref_backend();
    if (!be) return;
    size_t n = 31;
    gc_ctx g = {.be = be, .op = GC_ADD, .n_out = n};
    g.in[0] = fx_random(rng, n, -1, 1);
    g.in[1] = fx_random(rng, n, -1, 1);
    g.out = fx_floats(n);
    float *R = fx_random(rng, n, -1, 1), *da = fx_floats(n), *db = fx_floats(n);
    g.R = R;
    CHECK_OK(be->accumulate(be, da, R, n));
    CHECK_OK(be->accumulate(be, db, R, n));
    fd_check(&g, "da", g.in[0], n, da, rng);
    fd_check(&g, "db", g.in[1], n, db, rng);
    free(g.in[0]), free(g.in[1]), free(g.out), free(R), free(da), free(db);
    forge_backend_destroy(be);
}

static void test_attention(forge_rng *rng, int NH, int NKV) {
    char name[96];
    snprintf(name, sizeof name, "gradcheck attention NH=%d NKV=%d (%s)", NH, NKV,
             NKV < NH ? "grouped-query" : "multi-head");
    TEST_CASE(name);
    forge_backend *be = ref_backend();
    if (!be) return;
    int B = 2, T = 5, HS = 6;
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS;
    size_t natt = (size_t)B * NH * T * T;
    gc_ctx g = {.be = be, .op = GC_ATTENTION, .B = B, .T = T, .NH = NH, .NKV = NKV, .HS = HS,
                .n_out = nout};
    g.in[0] = fx_random(rng, nqkv, -1.5f, 1.5f);
    g.out = fx_floats(nout);
    g.save0 = fx_floats(natt);
    float *R = fx_random(rng, nout, -1, 1), *dqkv = fx_floats(nqkv), *scratch = fx_floats(natt);
    g.R = R;
    objective(&g); /* fills att */
    CHECK_OK(be->attention_backward(be, dqkv, scratch, R, g.in[0], g.save0, B, T, NH, NKV, HS));
    /* check q, k and v of the last batch row fully, the rest by sampling */
    fd_check(&g, "dqkv", g.in[0], nqkv, dqkv, rng);
    size_t last = (size_t)(B - 1) * T * (NH + 2 * NKV) * HS;
    fd_check(&g, "dqkv[b=1]", g.in[0] + last, nqkv - last, dqkv + last, rng);
    free(g.in[0]), free(g.out), free(g.save0), free(R), free(dqkv), free(scratch);
    forge_backend_destroy(be);
}

/* The fused op recomputes P from lse in its backward, so its gradient is
 * checked on its own, with a T past one 64-key tile of the online softmax. */
static void test_flash(forge_rng *rng, int NH, int NKV, int T) {
    char name[96];
    snprintf(name, sizeof name, "gradcheck flash attention NH=%d NKV=%d T=%d", NH, NKV, T);
    TEST_CASE(name);
    forge_backend *be = ref_backend();
    if (!be) return;
    int B = 2, HS = 6;
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS;
    size_t nlse = (size_t)B * NH * T;
    gc_ctx g = {.be = be, .op = GC_FLASH, .B = B, .T = T, .NH = NH, .NKV = NKV, .HS = HS, .n_out = nout};
    g.in[0] = fx_random(rng, nqkv, -1.5f, 1.5f);
    g.out = fx_floats(nout);
    g.save0 = fx_floats(nlse);
    float *R = fx_random(rng, nout, -1, 1), *dqkv = fx_floats(nqkv), *scratch = fx_floats(nlse);
    g.R = R;
    objective(&g); /* fills out and lse */
    CHECK_OK(be->flash_attention_backward(be, dqkv, scratch, R, g.in[0], g.out, g.save0, B, T, NH, NKV, HS));
    fd_check(&g, "dqkv", g.in[0], nqkv, dqkv, rng);
    size_t last = (size_t)(B - 1) * T * (NH + 2 * NKV) * HS;
    fd_check(&g, "dqkv[b=1]", g.in[0] + last, nqkv - last, dqkv + last, rng);
    free(g.in[0]), free(g.out), free(g.save0), free(R), free(dqkv), free(scratch);
    forge_backend_destroy(be);
}

static void test_classifier(forge_rng *rng) {
    TEST_CASE("gradcheck classifier (dlogits vs the mean loss)");
    forge_backend *be = ref_backend();
    if (!be) return;
    int N = 6, V = 11;
    int32_t targets[6] = {3, -1, 0, 10, 7, 3}; /* row 1 ignored */
    size_t n = (size_t)N * V;
    gc_ctx g = {.be = be, .op = GC_CLASSIFIER, .N = N, .V = V, .ids = targets};
    g.in[0] = fx_random(rng, n, -3, 3);
    g.out = fx_floats((size_t)N);
    g.save0 = fx_floats(n);
    float *dlogits = fx_copy(g.in[0], n);
    CHECK_OK(be->classifier_forward_backward(be, g.out, dlogits, targets, N, V, -1, 1.0f / 5));
    fd_check(&g, "dlogits", g.in[0], n, dlogits, rng);
    for (int i = 0; i < V; i++) CHECK(dlogits[V + i] == 0.0f);
    free(g.in[0]), free(g.out), free(g.save0), free(dlogits);
    forge_backend_destroy(be);
}

void suite_gradcheck(void) {
    forge_rng rng;
    forge_rng_seed(&rng, 42, 3);
    test_embedding(&rng);
    test_position(&rng);
    test_matmul(&rng, 1);
    test_matmul(&rng, 0);
    test_layernorm(&rng);
    test_rmsnorm(&rng);
    test_rope(&rng);
    test_gelu(&rng);
    test_swiglu(&rng);
    test_swiglu_packed(&rng);
    test_add(&rng);
    test_attention(&rng, 4, 2);
    test_attention(&rng, 3, 3);
    test_attention(&rng, 4, 1);
    test_flash(&rng, 4, 2, 5);
    test_flash(&rng, 2, 1, 70);
    test_classifier(&rng);
}
