/* test_model.c: layout and names, init statistics, a whole-model gradient
 * check, a tiny model overfitting one batch, the packed SwiGLU MLP against
 * its two-GEMM reference, and the gradient buckets' launch rule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/model/model.h"
#include "../src/train/buckets.h"
#include "../src/train/optimizer.h"
#include "../src/base/rng.h"
#include "test.h"

typedef struct {
    forge_backend *be;
    forge_pool *pool;
    forge_tape *tape;
    forge_model *m;
    forge_tensor *ids, *targets;
} fixture;

static int fixture_init_with(fixture *f, const forge_model_config *cfg, int B, int T, const forge_runtime_options *o) {
    memset(f, 0, sizeof *f);
    if (forge_backend_create(&f->be, FORGE_DEVICE_CPU, o) != FORGE_OK) return 0;
    if (forge_pool_create(&f->pool, f->be) != FORGE_OK) return 0;
    if (forge_tape_create(&f->tape, f->pool) != FORGE_OK) return 0;
    if (forge_model_create(&f->m, cfg, f->pool, 42) != FORGE_OK) return 0;
    int64_t shape[2] = {B, T};
    if (forge_pool_tensor(f->pool, &f->ids, FORGE_I32, 2, shape, 1) != FORGE_OK) return 0;
    if (forge_pool_tensor(f->pool, &f->targets, FORGE_I32, 2, shape, 1) != FORGE_OK) return 0;
    forge_rng rng;
    forge_rng_seed(&rng, 3, 0);
    for (int i = 0; i < B * T; i++) {
        forge_i32(f->ids)[i] = (int32_t)forge_rng_below(&rng, (uint64_t)cfg->vocab_size);
        forge_i32(f->targets)[i] = (int32_t)forge_rng_below(&rng, (uint64_t)cfg->vocab_size);
    }
    return 1;
}

static int fixture_init(fixture *f, const forge_model_config *cfg, int B, int T, int reference) {
    forge_runtime_options o;
    forge_runtime_options_default(&o);
    o.threads = 0;
    o.cpu_reference = reference;
    return fixture_init_with(f, cfg, B, T, &o);
}

static void fixture_free(fixture *f) {
    forge_model_free(f->m);
    forge_tape_destroy(f->tape);
    forge_pool_destroy(f->pool);
    forge_backend_destroy(f->be);
}


static void test_layout(void) {
    const char *names[] = {"tiny", "tiny-llama", "gpt-10m", "gpt-25m"};
    for (int i = 0; i < 4; i++) {
        TEST_CASE(names[i]);
        forge_model_config cfg;
        CHECK_OK(forge_config_resolve(&cfg, names[i], "configs"));
        if (test_case_failed()) continue;
        fixture f;
        CHECK(fixture_init(&f, &cfg, 1, 4, 0));
        if (!test_case_failed()) {
            CHECK_MSG((int64_t)f.m->n_elements == forge_config_param_count(&cfg), "%zu params vs config's %lld",
                      f.m->n_elements, (long long)forge_config_param_count(&cfg));
            if (cfg.family == FORGE_FAMILY_GPT2) {
                CHECK(forge_model_find_param(f.m, "transformer.wte.weight") != NULL);
                CHECK(forge_model_find_param(f.m, "transformer.h.0.attn.c_attn.weight") != NULL);
            } else {
                CHECK(forge_model_find_param(f.m, "model.layers.0.self_attn.q_proj.weight") != NULL);
                CHECK(forge_model_find_param(f.m, "lm_head.weight") != NULL);
            }
        }
        fixture_free(&f);
    }
}

static void test_init_and_initial_loss(void) {
    TEST_CASE("init: std 0.02, residual projections scaled, loss near log(V)");
    forge_model_config cfg = test_small_config(0);
    cfg.vocab_size = 512;
    cfg.d_model = 64;
    cfg.n_layers = 4;
    cfg.ffn_hidden = 256;
    fixture f;
    CHECK(fixture_init(&f, &cfg, 2, 16, 0));
    if (test_case_failed()) return;
    const forge_param *wte = forge_model_find_param(f.m, "transformer.wte.weight");
    const forge_param *proj = forge_model_find_param(f.m, "transformer.h.0.attn.c_proj.weight");
    const forge_param *ln = forge_model_find_param(f.m, "transformer.h.0.ln_1.weight");
    double s = 0, s2 = 0;
    for (size_t i = 0; i < wte->t->numel; i++) s2 += (double)forge_f32(wte->t)[i] * forge_f32(wte->t)[i];
    CHECK_NEAR(sqrt(s2 / wte->t->numel), 0.02, 0.001);
    s2 = 0;
    for (size_t i = 0; i < proj->t->numel; i++) s2 += (double)forge_f32(proj->t)[i] * forge_f32(proj->t)[i];
    CHECK_NEAR(sqrt(s2 / proj->t->numel), 0.02 / sqrt(8.0), 0.0008);
    for (size_t i = 0; i < ln->t->numel; i++) s += forge_f32(ln->t)[i];
    CHECK(s == (double)ln->t->numel);
    CHECK(wte->decay && !ln->decay);
    forge_tensor *losses;
    CHECK_OK(forge_model_forward(f.m, f.tape, f.ids, f.targets, 1.0f, &losses));
    double mean = 0;
    for (int i = 0; i < 32; i++) mean += forge_f32(losses)[i] / 32;
    CHECK_NEAR(mean, log(512.0), 0.15);
    forge_tape_reset(f.tape);
    fixture_free(&f);
}

/* Whole-model gradient against central differences of the mean loss, on a few
 * coordinates of every parameter tensor (reference backend, fp32 forward). */
static void model_gradcheck(int llama) {
    TEST_CASE(llama ? "gradcheck: whole llama model (rope, swiglu, rmsnorm, GQA, untied)"
                    : "gradcheck: whole gpt2 model (learned pos, gelu, layernorm, tied)");
    forge_model_config cfg = test_small_config(llama);
    int B = 2, T = 5, N = B * T;
    fixture f;
    CHECK(fixture_init(&f, &cfg, B, T, 1));
    if (test_case_failed()) return;
    /* larger weights than the 0.02 init so every path carries signal; h and the
     * 0.05 floor in the error balance curvature against fp32 noise in the loss */
    float *p = malloc(f.m->n_elements * sizeof(float));
    float *g = malloc(f.m->n_elements * sizeof(float));
    CHECK_OK(forge_model_get_params(f.m, p));
    for (size_t i = 0; i < f.m->n_elements; i++) p[i] *= 4.0f;
    CHECK_OK(forge_model_set_params(f.m, p));
    forge_tensor *losses;
    CHECK_OK(forge_model_zero_grad(f.m));
    CHECK_OK(forge_model_forward(f.m, f.tape, f.ids, f.targets, 1.0f / N, &losses));
    CHECK_OK(forge_tape_backward(f.tape));
    forge_tape_reset(f.tape);
    CHECK_OK(forge_model_get_grads(f.m, g));
    forge_tape_set_recording(f.tape, 0);
    double worst = 0;
    const char *worst_name = "";
    for (int k = 0; k < f.m->n_params; k++) {
        const forge_param *pp = &f.m->params[k];
        for (int probe = 0; probe < 3; probe++) {
            size_t idx = pp->offset + (size_t)(probe * 7919) % pp->t->numel;
            float keep = p[idx];
            double lsum[2];
            const float h = 5e-3f;
            for (int side = 0; side < 2; side++) {
                p[idx] = keep + (side ? -h : h);
                CHECK_OK(forge_model_set_params(f.m, p));
                CHECK_OK(forge_model_forward(f.m, f.tape, f.ids, f.targets, 0.0f, &losses));
                lsum[side] = 0;
                for (int i = 0; i < N; i++) lsum[side] += forge_f32(losses)[i];
                forge_tape_reset(f.tape);
            }
            p[idx] = keep;
            double num = (lsum[0] - lsum[1]) / N / (2.0 * h);
            double err = fabs(num - g[idx]) / (fabs(num) + 0.05);
            if (err > worst) {
                worst = err;
                worst_name = pp->name;
            }
        }
    }
    CHECK_OK(forge_model_set_params(f.m, p));
    CHECK_MSG(worst < 2e-2, "worst relative error %.3g at %s", worst, worst_name);
    free(p);
    free(g);
    fixture_free(&f);
}

static void test_overfit(int llama) {
    TEST_CASE(llama ? "overfit: tiny llama memorises one batch (loss < 0.1)"
                    : "overfit: tiny gpt2 memorises one batch (loss < 0.1)");
    forge_model_config cfg = test_small_config(llama);
    cfg.vocab_size = 64;
    cfg.d_model = 48;
    cfg.ffn_hidden = llama ? 96 : 192;
    int B = 4, T = 16, N = B * T;
    fixture f;
    CHECK(fixture_init(&f, &cfg, B, T, 0));
    if (test_case_failed()) return;
    forge_optimizer *opt;
    forge_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.0f, 1.0f};
    CHECK_OK(forge_optimizer_create(&opt, f.m, ac));
    float loss = 99;
    for (int step = 0; step < 300 && loss >= 0.1f; step++) {
        forge_tensor *losses;
        CHECK_OK(forge_model_zero_grad(f.m));
        CHECK_OK(forge_model_forward(f.m, f.tape, f.ids, f.targets, 1.0f / N, &losses));
        CHECK_OK(forge_tape_backward(f.tape));
        double s = 0;
        for (int i = 0; i < N; i++) s += forge_f32(losses)[i];
        loss = (float)(s / N);
        forge_tape_reset(f.tape);
        CHECK_OK(forge_optimizer_begin_step(opt, 1e-2f));
        CHECK_OK(forge_optimizer_grad_norm(opt));
        CHECK_OK(forge_optimizer_update(opt));
        if (test_case_failed()) break;
    }
    CHECK_MSG(loss < 0.1f, "loss after training is %.4f", loss);
    forge_optimizer_free(opt);
    fixture_free(&f);
}

/* The SwiGLU MLP as one GEMM each way on the stacked [gate; up] weights (model.c: pack_swiglu). Taken for a Llama
 * without biases: gate_up_w a (2H, C) view starting at fc_w's elements in the parameter, gradient and bf16
 * working-copy blocks, one tape entry fewer per layer. Not with biases (fc_b lies between fc_w and up_w). Against
 * the two-GEMM reference (swiglu_packed = 0) from the same init and batch: the forward gives the same bits (fp32
 * and bf16: each element is the same dot product), and fp32 training stays within float rounding of it (the input
 * gradient of h is one 2H-long sum instead of two H-long ones added, which moves later steps by a few ulps). */
static void test_swiglu_packed(void) {
    TEST_CASE("swiglu: one packed GEMM each way (llama, no biases); fp32 training follows the two-GEMM path");
    forge_model_config cfg = test_small_config(1);
    enum { B = 2, T = 8, N = B * T, STEPS = 12 };
    fixture f[2];
    int ok = fixture_init(&f[0], &cfg, B, T, 0);
    ok = fixture_init(&f[1], &cfg, B, T, 0) && ok;
    CHECK(ok);
    if (ok) {
        CHECK(f[0].m->swiglu_packed == 1);
        for (int l = 0; l < cfg.n_layers; l++) {
            const forge_layer_params *L = &f[0].m->layers[l];
            const forge_tensor *s = L->gate_up_w;
            CHECK_MSG(s && s->ndim == 2 && s->shape[0] == 2 * cfg.ffn_hidden && s->shape[1] == cfg.d_model &&
                          s->data == L->fc_w->data && s->grad->data == L->fc_w->grad->data &&
                          forge_f32(L->up_w) == forge_f32(s) + L->fc_w->numel && !s->working,
                      "layer %d: gate_up_w is not the (2H, C) view of fc_w then up_w", l);
        }
        f[1].m->swiglu_packed = 0; /* the reference: two GEMMs */
        forge_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
        forge_optimizer *opt[2] = {NULL, NULL};
        float loss[2][STEPS];
        size_t entries[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            CHECK_OK(forge_optimizer_create(&opt[k], f[k].m, ac));
            for (int step = 0; step < STEPS && !test_case_failed(); step++) {
                forge_tensor *losses;
                CHECK_OK(forge_model_zero_grad(f[k].m));
                CHECK_OK(forge_model_forward(f[k].m, f[k].tape, f[k].ids, f[k].targets, 1.0f / N, &losses));
                entries[k] = forge_tape_size(f[k].tape);
                CHECK_OK(forge_tape_backward(f[k].tape));
                double sum = 0;
                for (int i = 0; i < N; i++) sum += forge_f32(losses)[i];
                loss[k][step] = (float)(sum / N);
                forge_tape_reset(f[k].tape);
                CHECK_OK(forge_optimizer_begin_step(opt[k], 1e-2f));
                CHECK_OK(forge_optimizer_grad_norm(opt[k]));
                CHECK_OK(forge_optimizer_update(opt[k]));
            }
        }
        if (!test_case_failed()) {
            CHECK_MSG(entries[0] + (size_t)cfg.n_layers == entries[1], "tape entries: %zu packed, %zu unpacked",
                      entries[0], entries[1]);
            CHECK_MSG(memcmp(&loss[0][0], &loss[1][0], sizeof(float)) == 0, "first loss %.9g packed vs %.9g",
                      loss[0][0], loss[1][0]);
            double worst = 0;
            for (int i = 0; i < STEPS; i++) worst = fmax(worst, fabs((double)loss[0][i] - loss[1][i]) / loss[1][i]);
            CHECK_MSG(worst < 1e-5, "worst relative loss difference %.3g", worst);
            CHECK(loss[0][STEPS - 1] < loss[0][0] - 0.1f);
        }
        forge_optimizer_free(opt[0]);
        forge_optimizer_free(opt[1]);
    }
    fixture_free(&f[0]);
    fixture_free(&f[1]);

    /* biases: two GEMMs; GPT-2's GELU MLP has no second projection */
    const int families[2] = {1, 0};
    for (int k = 0; k < 2; k++) {
        forge_model_config c = test_small_config(families[k]);
        c.bias = 1;
        fixture g;
        CHECK(fixture_init(&g, &c, 1, 4, 0));
        if (!test_case_failed()) CHECK(g.m->swiglu_packed == 0 && g.m->layers[0].gate_up_w == NULL);
        fixture_free(&g);
    }

    /* bf16: the view covers the working copy too, and the forward's losses are the two GEMMs' bits */
    forge_runtime_options o;
    forge_runtime_options_default(&o);
    o.threads = 2;
    o.precision = FORGE_TRAIN_BF16;
    fixture h[2];
    memset(h, 0, sizeof h);
    float first[2][N];
    for (int k = 0; k < 2; k++) {
        CHECK(fixture_init_with(&h[k], &cfg, B, T, &o));
        if (test_case_failed()) break;
        h[k].m->swiglu_packed = k == 0;
        forge_tensor *losses;
        CHECK_OK(forge_model_forward(h[k].m, h[k].tape, h[k].ids, h[k].targets, 1.0f / N, &losses));
        if (!test_case_failed()) memcpy(first[k], forge_f32(losses), sizeof first[k]);
        forge_tape_reset(h[k].tape);
    }
    if (!test_case_failed()) {
        const forge_layer_params *L = &h[0].m->layers[cfg.n_layers - 1];
        const forge_tensor *w = L->gate_up_w->working;
        CHECK(w && w->dtype == FORGE_BF16 && w->shape[0] == 2 * cfg.ffn_hidden && w->data == L->fc_w->working->data &&
              (forge_bf16 *)L->up_w->working->data == (forge_bf16 *)w->data + L->fc_w->numel);
        CHECK_MSG(memcmp(first[0], first[1], sizeof first[0]) == 0, "bf16 forward: packed losses differ");
    }
    fixture_free(&h[0]);
    fixture_free(&h[1]);
}

/* The bucket-ready rule (train/buckets.h): every bucket the tape hook launches already holds its final gradient
 * (snapshots taken at launch equal the block after the whole backward, bit for bit); buckets are launched during
 * the backward, not all at its end; with tied embeddings the bucket of wte's first row goes last. */
typedef struct {
    forge_buckets *b;
    forge_model *m;
    float *snap;  /* the block as each bucket's elements were when it was launched */
    int seen;     /* launches copied so far */
    int before_last; /* launched before the hook of entry 0 */
} bucket_watch;

static forge_status watch_hook(void *ctx, const forge_tape *tape, size_t i) {
    bucket_watch *w = ctx;
    FORGE_TRY(forge_buckets_hook(w->b, tape, i));
    const size_t size = forge_buckets_size(w->b), n = w->m->n_elements;
    for (; w->seen < forge_buckets_launched(w->b); w->seen++) {
        const size_t b0 = (size_t)forge_buckets_launch_order(w->b, w->seen) * size;
        const size_t b1 = b0 + size < n ? b0 + size : n;
        memcpy(w->snap + b0, w->m->grad_data + b0, (b1 - b0) * sizeof(float));
        if (i > 0) w->before_last++;
    }
    return FORGE_OK;
}

static void test_buckets_ready(int llama) {
    TEST_CASE(llama ? "buckets: launched once final (llama, untied)" : "buckets: launched once final (gpt2, tied)");
    forge_model_config cfg = test_small_config(llama);
    fixture f;
    CHECK(fixture_init(&f, &cfg, 2, 8, 0));
    if (test_case_failed()) return;
    forge_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    forge_optimizer *opt = NULL;
    CHECK_OK(forge_optimizer_create(&opt, f.m, ac));
    bucket_watch w = {.m = f.m};
    CHECK_OK(forge_buckets_create(&w.b, opt, 1024)); /* 256 elements a bucket */
    const size_t n = f.m->n_elements;
    w.snap = calloc(n, sizeof(float));
    float *final = malloc(n * sizeof(float));
    CHECK(w.snap && final && forge_buckets_count(w.b) >= 8);
    if (!test_case_failed()) {
        forge_tensor *losses;
        for (int pass = 0; pass < 2; pass++) { /* the second pass accumulates onto the first's gradients */
            w.seen = w.before_last = 0;
            CHECK_OK(forge_model_forward(f.m, f.tape, f.ids, f.targets, 1.0f / 16, &losses));
            CHECK_OK(forge_buckets_plan(w.b, f.tape));
            CHECK_OK(forge_tape_backward_hooked(f.tape, watch_hook, &w));
            CHECK_OK(forge_buckets_finish(w.b));
            forge_tape_reset(f.tape);
        }
        const int count = forge_buckets_count(w.b);
        CHECK_MSG(w.seen == count, "%d of %d buckets launched by the hook", w.seen, count);
        CHECK_MSG(w.before_last >= count / 2, "only %d of %d buckets launched before the backward's last entry",
                  w.before_last, count);
        CHECK_OK(forge_model_get_grads(f.m, final));
        CHECK(memcmp(final, w.snap, n * sizeof(float)) == 0);
        const size_t wte_bucket = (size_t)((float *)f.m->wte->grad->data - f.m->grad_data) / forge_buckets_size(w.b);
        if (!llama)
            CHECK_MSG((size_t)forge_buckets_launch_order(w.b, count - 1) == wte_bucket,
                      "tied: bucket %d launched last, expected wte's %zu", forge_buckets_launch_order(w.b, count - 1),
                      wte_bucket);
    }
    free(w.snap);
    free(final);
    forge_buckets_free(w.b);
    forge_optimizer_free(opt);
    fixture_free(&f);
}

void suite_model(void) {
    test_layout();
    test_init_and_initial_loss();
    model_gradcheck(0);
    model_gradcheck(1);
    test_overfit(0);
    test_overfit(1);
    test_swiglu_packed();
    test_buckets_ready(0);
    test_buckets_ready(1);
}
