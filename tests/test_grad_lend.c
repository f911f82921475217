/*
 * test_grad_lend.c: the residual add's lent gradient (runtime/tape.h: forge_tape_grad_lend).
 *
 * Small graphs of real ops on the CPU backend, each built twice from the same values, with lending on and off:
 * GPT-2's residual pattern (x -> norm -> matmul -> matmul = y, then x + y fused with the next norm) lends y's
 * gradient (x's block, read-only until y's producer has read it) and gives the bits of the copy; every variant
 * where the block could change while lent, or would not hold y's gradient, falls back to the copy (the same bits
 * again); and while a gradient is lent nothing can write it, hand it over or lend it again from outside a rule.
 */
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/base/rng.h"
#include "../src/ops/ops.h"
#include "../src/runtime/pool.h"
#include "../src/runtime/tape.h"
#include "test.h"

/* Activations (B, T, C); C = (NH + 2 NKV) HS, so an activation is also a packed qkv rope can rotate. */
enum { B = 2, T = 4, C = 24, NH = 1, NKV = 1, HS = 8, N_WEIGHTS = 3 };

typedef enum {
    PATTERN_RESIDUAL,      /* x -> layernorm -> matmul -> matmul = y; x + y: GPT-2's residual: lent */
    PATTERN_B_TWICE,       /* y also feeds a gelu recorded after the add, whose output has a gradient */
    PATTERN_NOT_ADJACENT,  /* y feeds a gelu recorded between its producer and the add */
    PATTERN_NOT_READ_ONLY, /* y's producer is an in-place rope (its rule rewrites its output's gradient) */
    PATTERN_READS_A,       /* y = matmul(x): its producer writes x's gradient, the block it would read */
    PATTERN_A_IS_B,        /* x + x */
    PATTERN_A_TWICE,       /* x also feeds a gelu after the add: x's gradient is not dout's block alone */
    PATTERN_COUNT
} pattern;

static const char *pattern_name[PATTERN_COUNT] = {"residual", "b consumed twice", "b's producer not adjacent",
                                                  "b's producer not read-only", "b's producer reads a", "a == b",
                                                  "a consumed twice"};

typedef struct {
    forge_backend *be;
    forge_pool *pool;
    forge_tape *tape;
    forge_tensor *w[N_WEIGHTS]; /* (C, C): x's producer, the qkv-like matmul, the projection */
    forge_tensor *ln_w[2], *ln_b[2];
} lend_env;

/* What a run's hook saw: the add's and the projection's replays. */
typedef struct {
    forge_tape *tape;
    forge_tensor *x, *y, *res, *spare;
    int add_seen, lent_at_add, guards_ok, returned;
} lend_watch;

static forge_bf16 *bf16_data(const forge_tensor *t) { return (forge_bf16 *)t->data; }

static float value_at(int seed, size_t i) { return 0.5f * sinf(0.37f * (float)i + 1.3f * (float)seed) + 0.01f * seed; }

/* A parameter (fp32 master, bf16 working copy, as a bf16 model's) of 1 or 2 dims, values base + scale * wave. */
static forge_status param(lend_env *E, forge_tensor **out, int ndim, const int64_t *shape, float base, float scale,
                          int seed) {
    FORGE_TRY(forge_pool_tensor(E->pool, out, FORGE_F32, ndim, shape, 1));
    forge_tensor *t = *out;
    t->requires_grad = 1;
    for (size_t i = 0; i < t->numel; i++) forge_f32(t)[i] = base + scale * value_at(seed, i);
    FORGE_TRY(forge_pool_tensor(E->pool, &t->working, FORGE_BF16, ndim, shape, 1));
    for (size_t i = 0; i < t->numel; i++) bf16_data(t->working)[i] = forge_bf16_from_f32(forge_f32(t)[i]);
    return FORGE_OK;
}

static int env_init(lend_env *E) {
    memset(E, 0, sizeof *E);
    if (forge_backend_create_cpu(&E->be, 1, 1) != FORGE_OK) return 0;
    if (forge_pool_create(&E->pool, E->be) != FORGE_OK) return 0;
    if (forge_tape_create(&E->tape, E->pool) != FORGE_OK) return 0;
    const int64_t wshape[2] = {C, C}, cshape[1] = {C};
    for (int k = 0; k < N_WEIGHTS; k++)
        if (param(E, &E->w[k], 2, wshape, 0.0f, 0.3f, 1 + k) != FORGE_OK) return 0;
    for (int k = 0; k < 2; k++)
        if (param(E, &E->ln_w[k], 1, cshape, 1.0f, 0.1f, 10 + k) != FORGE_OK ||
            param(E, &E->ln_b[k], 1, cshape, 0.0f, 0.1f, 20 + k) != FORGE_OK)
            return 0;
    return 1;
}

static void env_free(lend_env *E) {
    forge_tape_destroy(E->tape);
    forge_pool_destroy(E->pool);
    forge_backend_destroy(E->be);
}

/* An activation of the run's dtype holding seeded values. */
static forge_status activation(lend_env *E, forge_tensor **out, forge_dtype dt, int seed) {
    int64_t shape[3] = {B, T, C};
    FORGE_TRY(forge_pool_tensor(E->pool, out, dt, 3, shape, 0));
    for (size_t i = 0; i < (*out)->numel; i++) {
        if (dt == FORGE_BF16) bf16_data(*out)[i] = forge_bf16_from_f32(value_at(seed, i));
        else forge_f32(*out)[i] = value_at(seed, i);
    }
    return FORGE_OK;
}

/* t's gradient seeded with values (a loss's gradient arriving at an output) */
static forge_status seed_grad(lend_env *E, forge_tensor *t, int seed) {
    forge_tensor *d;
    int fresh;
    if (t->dtype == FORGE_BF16) {
        FORGE_TRY(forge_tape_grad_fresh(E->tape, t, &d, &fresh));
        for (size_t i = 0; i < d->numel; i++) bf16_data(d)[i] = forge_bf16_from_f32(value_at(seed, i));
    } else {
        FORGE_TRY(forge_tape_grad(E->tape, t, &d));
        for (size_t i = 0; i < d->numel; i++) forge_f32(d)[i] = value_at(seed, i);
    }
    return FORGE_OK;
}

static forge_status watch_hook(void *ctx, const forge_tape *tape, size_t i) {
    lend_watch *w = ctx;
    const forge_tape_entry *e = forge_tape_entry_at(tape, i);
    if (w->res && e->out == w->res) { /* the add has run: y's gradient is x's block, lent, or its own */
        w->add_seen = 1;
        w->lent_at_add = w->y && w->y->grad_borrowed && w->y->grad == w->x->grad && w->x->grad && !w->x->grad_borrowed;
        if (w->lent_at_add) {
            forge_tensor *d;
            int fresh, lent = 1;
            w->guards_ok = forge_tape_grad(w->tape, w->y, &d) == FORGE_ERR_ARG &&
                           forge_tape_grad_fresh(w->tape, w->y, &d, &fresh) == FORGE_ERR_ARG &&
                           !forge_tape_grad_move(w->y, w->spare) && w->spare->grad == NULL &&
                           forge_tape_grad_lend(w->tape, e, w->x, w->y, &lent) == FORGE_ERR_ARG && lent == 0 &&
                           w->y->grad == w->x->grad;
            forge_error_clear();
        }
    }
    if (w->y && e->out == w->y && w->lent_at_add) /* the producer has read it: the loan is over, the block x's */
        w->returned = w->y->grad == NULL && !w->y->grad_borrowed && w->x->grad != NULL;
    return FORGE_OK;
}

/* Builds pattern p, seeds its outputs' gradients, replays the tape and copies every parameter's gradient into
 * grads (zeros where none arrived). */
static forge_status run_pattern(lend_env *E, pattern p, int bf16, int lending, float *grads, lend_watch *w) {
    const forge_dtype dt = bf16 ? FORGE_BF16 : FORGE_F32;
    forge_tape *tape = E->tape;
    forge_tape_set_grad_lending(tape, lending);
    memset(w, 0, sizeof *w);
    w->tape = tape;
    forge_tensor *in, *x, *n1, *h, *y = NULL, *res, *o, *g = NULL, *z = NULL;
    FORGE_TRY(activation(E, &in, dt, 5));
    FORGE_TRY(activation(E, &w->spare, dt, 6));
    w->spare->requires_grad = 1;
    FORGE_TRY(forge_op_matmul(tape, &x, in, E->w[0], NULL));
    FORGE_TRY(forge_op_layernorm(tape, &n1, x, E->ln_w[0], E->ln_b[0], 1e-5f));
    FORGE_TRY(forge_op_matmul(tape, &h, n1, E->w[1], NULL));
    if (p != PATTERN_A_IS_B) FORGE_TRY(forge_op_matmul(tape, &y, p == PATTERN_READS_A ? x : h, E->w[2], NULL));
    if (p == PATTERN_NOT_ADJACENT) FORGE_TRY(forge_op_gelu(tape, &g, y));
    if (p == PATTERN_NOT_READ_ONLY) FORGE_TRY(forge_op_rope(tape, &y, y, NH, NKV, HS, 10000.0f));
    FORGE_TRY(forge_op_residual_norm(tape, &res, &o, x, p == PATTERN_A_IS_B ? x : y, E->ln_w[1], E->ln_b[1], 1e-5f));
    if (p == PATTERN_B_TWICE) FORGE_TRY(forge_op_gelu(tape, &g, y));
    if (p == PATTERN_A_TWICE) FORGE_TRY(forge_op_gelu(tape, &z, x));
    FORGE_TRY(seed_grad(E, o, 7));
    if (g) FORGE_TRY(seed_grad(E, g, 8));
    if (z) FORGE_TRY(seed_grad(E, z, 9));
    w->x = x;
    w->y = y;
    w->res = res;
    FORGE_TRY(forge_tape_backward_hooked(tape, watch_hook, w));
    float *at = grads;
    forge_tensor *params[N_WEIGHTS + 4] = {E->w[0], E->w[1], E->w[2], E->ln_w[0], E->ln_b[0], E->ln_w[1], E->ln_b[1]};
    for (int k = 0; k < N_WEIGHTS + 4; k++) {
        forge_tensor *t = params[k];
        if (t->grad) memcpy(at, t->grad->data, t->numel * sizeof(float));
        else memset(at, 0, t->numel * sizeof(float));
        at += t->numel;
    }
    forge_tape_reset(tape);
    return FORGE_OK;
}

enum { GRAD_FLOATS = N_WEIGHTS * C * C + 4 * C };

static void test_lend_patterns(void) {
    for (int bf16 = 1; bf16 >= 0; bf16--)
        for (int p = 0; p < PATTERN_COUNT; p++) {
            if (!bf16 && p != PATTERN_RESIDUAL) continue;
            char name[160];
            const int expect = bf16 && p == PATTERN_RESIDUAL;
            snprintf(name, sizeof name, "residual add, %s, %s: b's gradient %s, the copy's bits", pattern_name[p],
                     bf16 ? "bf16" : "fp32", expect ? "lent" : "copied");
            TEST_CASE(name);
            lend_env E;
            CHECK(env_init(&E));
            static float lent_grads[GRAD_FLOATS], copied_grads[GRAD_FLOATS];
            lend_watch w;
            if (!test_case_failed()) {
                const size_t before = forge_tape_grads_lent(E.tape);
                CHECK_OK(run_pattern(&E, (pattern)p, bf16, 1, lent_grads, &w));
                const size_t lent = forge_tape_grads_lent(E.tape) - before;
                CHECK_MSG(lent == (size_t)expect, "%zu gradients lent, expected %d", lent, expect);
                CHECK(w.add_seen);
                CHECK_MSG(w.lent_at_add == expect, "at the add's hook y's gradient %s x's block",
                          w.lent_at_add ? "is" : "is not");
                if (expect) {
                    CHECK_MSG(w.guards_ok, "a lent gradient could be written, handed over or lent from a hook");
                    CHECK_MSG(w.returned, "after y's producer the loan did not end with x's block in place");
                }
                CHECK_OK(run_pattern(&E, (pattern)p, bf16, 0, copied_grads, &w));
                CHECK(forge_tape_grads_lent(E.tape) - before == lent);
                CHECK(!w.lent_at_add);
                CHECK_MSG(memcmp(lent_grads, copied_grads, sizeof lent_grads) == 0,
                          "the parameters' gradients differ with lending on and off");
            }
            env_free(&E);
        }
}

/* A rule that lends between its input and a tensor that is not one (probe_other) */
static forge_tensor *probe_other;
static forge_status probe_backward(forge_tape *tape, const forge_tape_entry *e) {
    int lent = 1;
    forge_status s = forge_tape_grad_lend(tape, e, e->in[0], probe_other, &lent);
    return lent ? forge_error(FORGE_ERR_ARG, "lend_probe: lent to a tensor that is not an input") : s;
}

/* The guards of forge_tape_grad_lend against callers rather than data: outside the rule being replayed, or
 * between tensors that are not both the entry's inputs, it is an error; a borrower released by the pool leaves
 * the owner's block alone (ASan would see it freed twice at the reset). */
static void test_lend_misuse(void) {
    TEST_CASE("tape: lending outside a rule or between non-inputs is an error; releasing a borrower frees nothing");
    lend_env E;
    CHECK(env_init(&E));
    if (!test_case_failed()) {
        forge_tensor *in, *x, *y, *res, *o;
        CHECK_OK(activation(&E, &in, FORGE_BF16, 3));
        CHECK_OK(forge_op_matmul(E.tape, &x, in, E.w[0], NULL));
        CHECK_OK(forge_op_matmul(E.tape, &y, in, E.w[1], NULL));
        CHECK_OK(forge_op_residual_norm(E.tape, &res, &o, x, y, E.ln_w[1], E.ln_b[1], 1e-5f));
        const forge_tape_entry *add = forge_tape_entry_at(E.tape, 2);
        CHECK(add->out == res && (forge_tape_entry_at(E.tape, 1)->flags & FORGE_TAPE_OUT_GRAD_READ_ONLY));
        int lent = 1;
        CHECK_ERR_MSG(forge_tape_grad_lend(E.tape, add, x, y, &lent), FORGE_ERR_ARG, "outside the rule", NULL);
        CHECK(lent == 0);
        forge_error_clear();
        /* a loan as forge_tape_grad_lend makes one: the pool drops the borrower's reference, never the block */
        forge_tensor *dx;
        CHECK_OK(forge_tape_grad(E.tape, x, &dx));
        y->grad = dx;
        y->grad_borrowed = 1;
        forge_pool_release_grad(E.pool, y);
        CHECK(y->grad == NULL && !y->grad_borrowed && x->grad == dx);
        y->grad = dx;
        y->grad_borrowed = 1;
        forge_tensor *z;
        CHECK_OK(forge_op_gelu(E.tape, &z, x)); /* the probe's output, for an entry of its own */
        forge_tape_entry e = {.op = "lend_probe", .backward = probe_backward, .out = z, .in = {x}};
        CHECK_OK(forge_tape_push(E.tape, &e, NULL, 0));
        probe_other = in;
        CHECK_OK(seed_grad(&E, z, 4));
        CHECK_ERR_MSG(forge_tape_backward(E.tape), FORGE_ERR_ARG, "lend_probe", "not both its inputs");
        forge_error_clear();
        forge_tape_reset(E.tape); /* y and its borrowed reference go; x's gradient block is freed once */
        CHECK(forge_pool_get_stats(E.pool).bytes_in_use > 0); /* the persistent weights */
    }
    env_free(&E);
}

void suite_grad_lend(void) {
    test_lend_patterns();
    test_lend_misuse();
}
