/*
 * bench_train.c: training steps on random tokens, timed end to end, as
 * harness cells (`forge bench train`).
 *
 * One cell per config: a run is one full optimizer step (zero grads, forward,
 * backward, tape reset, global norm, AdamW) on a fixed random batch. The
 * checksum gate compares the step's forward pass, after the timed run, with
 * the CPU reference backend fed the same parameters and batch: per-position
 * losses (B*T values) within the fp32 tolerance, every loss written (the
 * device buffer is poisoned with NaN first). The backward pass and optimizer
 * are covered by the parity suite and the GPU-vs-CPU training comparison.
 * MFU is printed against a stated peak: for the CPU the measured FMA peak of
 * all threads, for CUDA the H200's dense fp32 (non-tensor) rate.
 */
#include "bench_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "../model/model.h"
#include "../train/optimizer.h"
#include "../base/rng.h"
#include "bench.h"
#include "bench_session.h"
#include "harness.h"
#ifdef FORGE_WITH_CUDA
#include "../backend/cuda/cuda_backend.h"
#endif

double forge_train_flops_per_token(long long params, int n_layers, int seq_len, int d_model) {
    return 6.0 * (double)params + 12.0 * n_layers * (double)seq_len * d_model;
}

typedef struct {
    const char *config;
    int B, T;
} bench_case;

typedef struct {
    forge_backend *be, *ref;
    forge_model_config cfg;
    int B, T;
    forge_pool *pool, *ref_pool;
    forge_tape *tape, *ref_tape;
    forge_model *m, *ref_model;
    forge_optimizer *opt;
    forge_tensor *ids, *tgt, *ref_ids, *ref_tgt;
    float *host_params, *host_losses, *ref_losses;
    int32_t *host_tokens;
} train_cell;

static forge_status train_cell_run(void *ctx, int input_set) {
    (void)input_set; /* one batch: the parameters change every step anyway */
    train_cell *c = ctx;
    forge_tensor *losses;
    FORGE_TRY(forge_model_zero_grad(c->m));
    FORGE_TRY(forge_model_forward(c->m, c->tape, c->ids, c->tgt, 1.0f / (c->B * c->T), &losses));
    FORGE_TRY(forge_tape_backward(c->tape));
    forge_tape_reset(c->tape);
    FORGE_TRY(forge_optimizer_grad_norm(c->opt));
    return forge_optimizer_update(c->opt, 1e-4f);
}

static forge_status train_cell_poison(void *ctx) {
    (void)ctx; /* the checked output (the losses) is poisoned inside check */
    return FORGE_OK;
}

/* losses of the current parameters on the device and on the CPU reference */
static forge_status train_cell_check(void *ctx, double *rel_err, int *fully_written) {
    train_cell *c = ctx;
    size_t n = (size_t)c->B * c->T;
    forge_tensor *losses;
    forge_tape_set_recording(c->tape, 0);
    forge_status s = forge_model_forward(c->m, c->tape, c->ids, c->tgt, 0.0f, &losses);
    if (s == FORGE_OK) s = c->be->copy_to_host(c->be, c->host_losses, losses->data, n * sizeof(float));
    forge_tape_reset(c->tape);
    forge_tape_set_recording(c->tape, 1);
    FORGE_TRY(s);
    FORGE_TRY(forge_model_get_params(c->m, c->host_params));
    FORGE_TRY(forge_model_set_params(c->ref_model, c->host_params));
    forge_tape_set_recording(c->ref_tape, 0);
    s = forge_model_forward(c->ref_model, c->ref_tape, c->ref_ids, c->ref_tgt, 0.0f, &losses);
    if (s == FORGE_OK) memcpy(c->ref_losses, losses->data, n * sizeof(float));
    forge_tape_reset(c->ref_tape);
    FORGE_TRY(s);
    double d = 0, r = 0;
    int written = 1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(c->host_losses[i])) written = 0;
        d += ((double)c->host_losses[i] - c->ref_losses[i]) * ((double)c->host_losses[i] - c->ref_losses[i]);
        r += (double)c->ref_losses[i] * c->ref_losses[i];
    }
    *rel_err = sqrt(d) / sqrt(r);
    *fully_written = written;
    return FORGE_OK;
}

static forge_status train_cell_init(train_cell *c, forge_backend *be, forge_backend *ref, const char *configs_dir,
                                    const bench_case *bc) {
    memset(c, 0, sizeof *c);
    c->be = be;
    c->ref = ref;
    FORGE_TRY(forge_config_resolve(&c->cfg, bc->config, configs_dir));
    c->B = bc->B;
    c->T = bc->T < c->cfg.context_length ? bc->T : c->cfg.context_length;
    size_t n = (size_t)c->B * c->T;
    int64_t shape[2] = {c->B, c->T};
    FORGE_TRY(forge_pool_create(&c->pool, be));
    FORGE_TRY(forge_tape_create(&c->tape, c->pool));
    FORGE_TRY(forge_model_create(&c->m, &c->cfg, c->pool, 1));
    forge_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    FORGE_TRY(forge_optimizer_create(&c->opt, c->m, ac));
    FORGE_TRY(forge_pool_tensor(c->pool, &c->ids, FORGE_I32, 2, shape, 1));
    FORGE_TRY(forge_pool_tensor(c->pool, &c->tgt, FORGE_I32, 2, shape, 1));
    FORGE_TRY(forge_pool_create(&c->ref_pool, ref));
    FORGE_TRY(forge_tape_create(&c->ref_tape, c->ref_pool));
    FORGE_TRY(forge_model_create(&c->ref_model, &c->cfg, c->ref_pool, 1));
    FORGE_TRY(forge_pool_tensor(c->ref_pool, &c->ref_ids, FORGE_I32, 2, shape, 1));
    FORGE_TRY(forge_pool_tensor(c->ref_pool, &c->ref_tgt, FORGE_I32, 2, shape, 1));
    c->host_params = malloc(c->m->n_elements * sizeof(float));
    c->host_losses = malloc(n * sizeof(float));
    c->ref_losses = malloc(n * sizeof(float));
    c->host_tokens = malloc(2 * n * sizeof(int32_t));
    if (!c->host_params || !c->host_losses || !c->ref_losses || !c->host_tokens)
        return forge_error(FORGE_ERR_OOM, "bench train: out of host memory");
    forge_rng rng;
    forge_rng_seed(&rng, 7, 0);
    for (size_t i = 0; i < 2 * n; i++) c->host_tokens[i] = (int32_t)forge_rng_below(&rng, (uint64_t)c->cfg.vocab_size);
    FORGE_TRY(be->copy_to_device(be, c->ids->data, c->host_tokens, n * sizeof(int32_t)));
    FORGE_TRY(be->copy_to_device(be, c->tgt->data, c->host_tokens + n, n * sizeof(int32_t)));
    memcpy(c->ref_ids->data, c->host_tokens, n * sizeof(int32_t));
    memcpy(c->ref_tgt->data, c->host_tokens + n, n * sizeof(int32_t));
    return FORGE_OK;
}

static void train_cell_free(train_cell *c) {
    forge_optimizer_free(c->opt);
    forge_model_free(c->m);
    forge_model_free(c->ref_model);
    forge_tape_destroy(c->tape);
    forge_tape_destroy(c->ref_tape);
    forge_pool_destroy(c->pool);
    forge_pool_destroy(c->ref_pool);
    free(c->host_params);
    free(c->host_losses);
    free(c->ref_losses);
    free(c->host_tokens);
}

static const char *TRAIN_RECIPE =
    "train: model init forge_model_create(seed 1); tokens PCG32 forge_rng_seed(7, 0), ids then targets, "
    "forge_rng_below(vocab); one batch; AdamW lr 1e-4 betas 0.9/0.95 wd 0.1 clip 1.0";

forge_status forge_bench_train(FILE *out, const forge_runtime_options *rt, const char *configs_dir, int steps) {
    forge_backend *be = NULL, *ref = NULL;
    FORGE_TRY(forge_backend_create(&be, rt->device, rt));
    int cuda = be->kind == FORGE_DEVICE_CUDA;
    /* the CPU device checks against the plain reference loops; CUDA against the tiled CPU backend */
    forge_status s = forge_backend_create_cpu(&ref, 0, cuda ? 0 : 1);
    double peak = cuda ? 67e12 : forge_bench_cpu_peak_flops();
    forge_bench_session bs = {0};
    if (s == FORGE_OK) s = forge_bench_session_begin(&bs, be);
    static const bench_case cpu_cases[] = {{"tiny", 16, 128}, {"gpt-10m", 2, 128}};
    static const bench_case cuda_cases[] = {{"gpt-10m", 32, 512}, {"gpt2-124m", 8, 1024}};
    const bench_case *cases = cuda ? cuda_cases : cpu_cases;
    char config[256], suite[64];
    snprintf(suite, sizeof suite, "train_cpu");
    /* one results file per matmul path: cuBLAS and forge runs of a commit share a folder */
    const char *precision = forge_train_precision_name(be->options.precision);
    if (cuda && be->options.precision == FORGE_TRAIN_BF16) snprintf(suite, sizeof suite, "train_cuda_bf16");
    else if (cuda) snprintf(suite, sizeof suite, "train_cuda_%s", forge_matmul_mode_name(be->options.matmul));
    snprintf(config, sizeof config, "train backend=%s precision=%s cases=%s:%dx%d,%s:%dx%d", be->name, precision,
             cases[0].config, cases[0].B, cases[0].T, cases[1].config, cases[1].B, cases[1].T);
    forge_harness_config hc = {.suite = suite, .results_root = NULL, .config_text = config,
                               .input_recipe = TRAIN_RECIPE, .seed = 7, .reps = steps, .warmup = 3, .out = out};
    forge_harness *h = NULL;
    if (s == FORGE_OK) s = forge_harness_open(&h, &hc, &bs.prov, &bs.timer);
    if (s == FORGE_OK)
        fprintf(out, "== forge bench train (%s, %s): full steps on random tokens; check = forward losses vs the "
                     "CPU reference on the same parameters\n", be->name, precision);
    double mfu[2] = {0, 0}, peak_mib[2] = {0, 0}, tok_s[2] = {0, 0};
    int bad = 0;
    /* the tf32 matmul mode rounds the linear layers' operands to tf32: its losses are gated at the tf32
     * tolerance, every other path at fp32's */
    const forge_precision prec = be->options.precision == FORGE_TRAIN_BF16                  ? FORGE_PREC_BF16
                                 : cuda && be->options.matmul == FORGE_MATMUL_TF32 ? FORGE_PREC_TF32
                                                                                   : FORGE_PREC_FP32;
    for (int i = 0; i < 2 && s == FORGE_OK; i++) {
        train_cell c;
        s = train_cell_init(&c, be, ref, configs_dir, &cases[i]);
        double tokens = (double)c.B * c.T;
        double flops = s == FORGE_OK ? forge_train_flops_per_token((long long)c.m->n_elements, c.cfg.n_layers, c.T,
                                                                   c.cfg.d_model) * tokens : 0;
        char name[96];
        snprintf(name, sizeof name, "%s B=%d T=%d", cases[i].config, c.B, c.T);
        forge_harness_cell cell = {.name = name, .group = name, .precision = prec, .flops = flops,
                                   .n_input_sets = 1, .ctx = &c, .poison = train_cell_poison,
                                   .run = train_cell_run, .check = train_cell_check};
        forge_cell_result r;
        if (s == FORGE_OK) s = forge_harness_run(h, &cell, &r);
        if (s == FORGE_OK) {
            if (forge_cell_bad(&r)) bad++;
            tok_s[i] = tokens / (r.median_ms / 1000);
            mfu[i] = peak > 0 ? flops / (r.median_ms / 1000) / peak : 0;
            peak_mib[i] = forge_pool_get_stats(c.pool).peak_reserved / 1048576.0;
        }
        train_cell_free(&c);
    }
    s = forge_bench_session_end(&bs, h, s);
    for (int i = 0; i < 2 && s == FORGE_OK; i++)
        fprintf(out, "%-10s B=%-3d T=%-5d | %9.0f tok/s | peak %8.1f MiB | MFU %5.1f%% of %.1f GFLOP/s (%s)\n",
                cases[i].config, cases[i].B, cases[i].T, tok_s[i], peak_mib[i], 100 * mfu[i], peak / 1e9,
                cuda ? "the H200's dense fp32 datasheet rate" : "the measured FMA peak of all threads");
    if (s == FORGE_OK && bad) s = forge_error(FORGE_ERR_NUMERIC, "bench train: %d cell(s) failed the check", bad);
    forge_backend_destroy(ref);
    forge_backend_destroy(be);
    return s;
}
