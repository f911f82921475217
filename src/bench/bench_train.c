/*
 * bench_train.c: training steps on random tokens, timed end to end, as
 * harness cells (`forge bench train`).
 *
 * One cell per config: a run is one full optimizer step (zero grads, forward,
 * backward, tape reset, global norm, AdamW) on a fixed random batch, launched
 * the way the trainer launches it (train/step.h: on CUDA a replayed graph from
 * the second step on), not waited for. The
 * checksum gate compares the step's forward pass, after the timed run, with
 * the CPU reference backend fed the same parameters and batch: per-position
 * losses (B*T values) within the fp32 tolerance, every loss written (the
 * device buffer is poisoned with NaN first). The backward pass and optimizer
 * are covered by the parity suite and the GPU-vs-CPU training comparison.
 * MFU is printed against a stated peak: for the CPU the measured FMA peak of
 * all threads, for CUDA the H200's dense bf16 rate (bf16 step) or its dense
 * fp32 (non-tensor) rate. --breakdown adds one step op by op (op_profile.h), by op and by argument sizes;
 * --baseline steps another framework's process in turn with forge (the paired
 * ratio: both see the same clocks).
 */
#include "bench_train.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "../model/model.h"
#include "../train/optimizer.h"
#include "../train/step.h"
#include "../base/rng.h"
#include "bench.h"
#include "bench_session.h"
#include "coprocess.h"
#include "harness.h"
#include "op_profile.h"
#ifdef FORGE_WITH_CUDA
#include "harness_cuda.h"
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
    forge_step *step;
    int eager; /* the step op by op (the profile of --breakdown) */
    forge_tensor *ids, *tgt, *ref_ids, *ref_tgt;
    float *host_params, *host_losses, *ref_losses;
    int32_t *host_tokens;
} train_cell;

static forge_status train_cell_run(void *ctx, int input_set) {
    (void)input_set; /* one batch: the parameters change every step anyway */
    train_cell *c = ctx;
    const size_t n = (size_t)c->B * c->T;
    /* the trainer's step: launched, not waited for (the harness times the device) */
    return (c->eager ? forge_step_launch_eager : forge_step_launch)(c->step, c->host_tokens, c->host_tokens + n, 1e-4f);
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
    /* a longer T is refused, not cut: the case's name, the provenance and the summary line all report bc->T */
    if (bc->T > c->cfg.context_length)
        return forge_error(FORGE_ERR_ARG, "bench train --cases %s:%dx%d: T %d exceeds %s's context_length %d", bc->config,
                           bc->B, bc->T, bc->T, bc->config, c->cfg.context_length);
    c->B = bc->B;
    c->T = bc->T;
    size_t n = (size_t)c->B * c->T;
    int64_t shape[2] = {c->B, c->T};
    FORGE_TRY(forge_pool_create(&c->pool, be));
    FORGE_TRY(forge_tape_create(&c->tape, c->pool));
    FORGE_TRY(forge_model_create(&c->m, &c->cfg, c->pool, 1));
    forge_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    FORGE_TRY(forge_optimizer_create(&c->opt, c->m, ac));
    forge_step_options so = {.B = c->B, .T = c->T, .accum = 1, .grad_scale = 1.0f / (float)(c->B * c->T),
                             .use_graph = 1};
    FORGE_TRY(forge_step_create(&c->step, c->m, c->tape, c->opt, &so));
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
    forge_step_free(c->step);
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

#define BENCH_TRAIN_MAX_CASES 4

/* "CONFIG:BxT[,CONFIG:BxT...]" into cases (names point into buf). */
static forge_status parse_cases(const char *spec, char *buf, size_t cap, bench_case *cases, int *n) {
    *n = 0;
    if (strlen(spec) >= cap) return forge_error(FORGE_ERR_ARG, "bench train --cases: too long");
    strcpy(buf, spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');
        int B = 0, T = 0, used = 0;
        if (!colon || sscanf(colon + 1, "%dx%d%n", &B, &T, &used) != 2 || colon[1 + used] != 0 || B < 1 || T < 1)
            return forge_error(FORGE_ERR_ARG, "bench train --cases: \"%s\" is not CONFIG:BxT (e.g. gpt2-124m:16x1024)",
                               tok);
        if (*n == BENCH_TRAIN_MAX_CASES)
            return forge_error(FORGE_ERR_ARG, "bench train --cases: at most %d cases", BENCH_TRAIN_MAX_CASES);
        *colon = 0;
        cases[(*n)++] = (bench_case){tok, B, T};
    }
    if (*n == 0) return forge_error(FORGE_ERR_ARG, "bench train --cases: no case in \"%s\"", spec);
    return FORGE_OK;
}

/* One step op by op (op_profile.h), printed. */
static forge_status breakdown(FILE *out, train_cell *c, const char *name) {
    forge_bench_marks marks;
    const int capacity = 1 << 16;
#ifdef FORGE_WITH_CUDA
    if (c->be->kind == FORGE_DEVICE_CUDA)
        FORGE_TRY(forge_cuda_bench_marks_create(&marks, forge_cuda_backend_stream(c->be), capacity));
    else
#endif
        FORGE_TRY(forge_cpu_bench_marks_create(&marks, capacity));
    FORGE_TRY(c->be->synchronize(c->be)); /* the span starts with this step's first op */
    forge_op_profile *p = NULL;
    forge_status s = forge_op_profile_attach(&p, c->be, &marks);
    if (s == FORGE_OK) {
        c->eager = 1;
        forge_status r = train_cell_run(c, 0);
        c->eager = 0;
        forge_op_profile_result res;
        s = forge_op_profile_detach(p, &res);
        if (r != FORGE_OK) s = r;
        if (s == FORGE_OK) {
            fprintf(out, "-- %s: one step op by op (device time between stamps around each call; ops under 0.5%% "
                         "folded)\n", name);
            forge_op_profile_print(out, &res, 0.005);
            fprintf(out, "-- %s: the same step by op and arguments (calls with equal sizes grouped; 1%% and up)\n",
                    name);
            forge_op_profile_print_shapes(out, &res, 0.01, 40);
        }
        forge_op_profile_result_free(&res);
    }
    marks.destroy(marks.ctx);
    return s;
}

/* The baseline's result: the JSON object on its last line. */
typedef struct {
    double median_ms, peak_mib;
    char torch[64], device[128];
} baseline_result;

static forge_status parse_baseline_json(const char *line, const char *what, baseline_result *b) {
    cJSON *j = cJSON_Parse(line);
    if (!j) return forge_error(FORGE_ERR_DATA, "bench train: the baseline \"%s\" ended with \"%.120s\", not JSON",
                               what, line);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "median_ms");
    const cJSON *pk = cJSON_GetObjectItemCaseSensitive(j, "peak_mib");
    const cJSON *tv = cJSON_GetObjectItemCaseSensitive(j, "torch");
    const cJSON *dv = cJSON_GetObjectItemCaseSensitive(j, "device");
    forge_status s = FORGE_OK;
    if (!cJSON_IsNumber(ms) || !cJSON_IsNumber(pk))
        s = forge_error(FORGE_ERR_DATA, "bench train: the baseline's JSON lacks median_ms or peak_mib: %.200s", line);
    else {
        b->median_ms = ms->valuedouble;
        b->peak_mib = pk->valuedouble;
        snprintf(b->torch, sizeof b->torch, "%s", cJSON_IsString(tv) ? tv->valuestring : "?");
        snprintf(b->device, sizeof b->device, "%s", cJSON_IsString(dv) ? dv->valuestring : "?");
    }
    cJSON_Delete(j);
    return s;
}

/* The baseline stepped in turn with forge: a round times one forge step (the suite's timer) and then one baseline
 * step (its own CUDA events), so both see the same clocks and thermal state; the ratio is per round. */
static forge_status paired_baseline(FILE *out, train_cell *c, const forge_bench_timer *timer, const char *command,
                                    const char *config_path, int rounds, double *forge_med, double *ratio,
                                    double *ratio_lo, double *ratio_hi, baseline_result *b) {
    char cmd[2048], line[4096];
    snprintf(cmd, sizeof cmd, "%s --serve --config '%s' --batch %d --seq %d", command, config_path, c->B, c->T);
    forge_coprocess cp;
    FORGE_TRY(forge_coprocess_start(&cp, cmd));
    double *f = malloc((size_t)rounds * sizeof(double)), *t = malloc((size_t)rounds * sizeof(double));
    double *r = malloc((size_t)rounds * sizeof(double));
    forge_status s = f && t && r ? FORGE_OK : forge_error(FORGE_ERR_OOM, "bench train: %d rounds", rounds);
    if (s == FORGE_OK) s = forge_coprocess_recv(&cp, line, sizeof line); /* compiled and warmed up */
    if (s == FORGE_OK && strcmp(line, "ready") != 0)
        s = forge_error(FORGE_ERR_DATA, "bench train: the baseline said \"%.200s\", expected \"ready\"", line);
    for (int i = 0; i < rounds && s == FORGE_OK; i++) {
        s = timer->start(timer->ctx);
        if (s == FORGE_OK) s = train_cell_run(c, 0);
        if (s == FORGE_OK) s = timer->stop(timer->ctx, &f[i]);
        if (s == FORGE_OK) s = forge_coprocess_send(&cp, "step");
        if (s == FORGE_OK) s = forge_coprocess_recv(&cp, line, sizeof line);
        if (s == FORGE_OK && (sscanf(line, "%lf", &t[i]) != 1 || !(t[i] > 0)))
            s = forge_error(FORGE_ERR_DATA, "bench train: the baseline answered \"%.200s\" to step", line);
        if (s == FORGE_OK) r[i] = t[i] / f[i];
    }
    if (s == FORGE_OK) s = forge_coprocess_send(&cp, "end");
    if (s == FORGE_OK) s = forge_coprocess_recv(&cp, line, sizeof line);
    if (s == FORGE_OK) s = parse_baseline_json(line, command, b);
    forge_status fin = forge_coprocess_finish(&cp);
    if (s == FORGE_OK) s = fin;
    if (s == FORGE_OK) {
        *forge_med = forge_harness_median(f, rounds);
        b->median_ms = forge_harness_median(t, rounds); /* the paired rounds', not the script's own reps */
        *ratio = forge_harness_median(r, rounds);
        forge_harness_bootstrap_ci(r, rounds, 7, 10000, ratio_lo, ratio_hi);
    }
    free(f), free(t), free(r);
    (void)out;
    return s;
}

forge_status forge_bench_train(FILE *out, const forge_runtime_options *rt, const char *configs_dir,
                               const forge_bench_train_options *o) {
    forge_backend *be = NULL, *ref = NULL;
    FORGE_TRY(forge_backend_create(&be, rt->device, rt));
    int cuda = be->kind == FORGE_DEVICE_CUDA;
    /* the CPU device checks against the plain reference loops; CUDA against the tiled CPU backend */
    forge_status s = forge_backend_create_cpu(&ref, 0, cuda ? 0 : 1);
    /* MFU against the H200's dense bf16 tensor rate for a bf16 step, its dense fp32 rate otherwise */
    const int bf16 = be->options.precision == FORGE_TRAIN_BF16;
    double peak = cuda ? (bf16 ? 989e12 : 67e12) : forge_bench_cpu_peak_flops();
    const char *peak_what = !cuda ? "the measured FMA peak of all threads"
                            : bf16 ? "the H200's dense bf16 datasheet rate"
                                   : "the H200's dense fp32 datasheet rate";
    forge_bench_session bs = {0};
    if (s == FORGE_OK) s = forge_bench_session_begin(&bs, be);
    static const bench_case cpu_cases[] = {{"tiny", 16, 128}, {"gpt-10m", 2, 128}};
    static const bench_case cuda_cases[] = {{"gpt-10m", 32, 512}, {"gpt2-124m", 8, 1024}};
    bench_case cases[BENCH_TRAIN_MAX_CASES];
    char case_buf[512];
    int n_cases = 2;
    memcpy(cases, cuda ? cuda_cases : cpu_cases, 2 * sizeof *cases);
    if (s == FORGE_OK && o->cases) s = parse_cases(o->cases, case_buf, sizeof case_buf, cases, &n_cases);
    char config[1024], suite[64];
    snprintf(suite, sizeof suite, "train_cpu");
    /* one results file per matmul path: cuBLAS and forge runs of a commit share a folder */
    const char *precision = forge_train_precision_name(be->options.precision);
    if (cuda && bf16) snprintf(suite, sizeof suite, "train_cuda_bf16");
    else if (cuda) snprintf(suite, sizeof suite, "train_cuda_%s", forge_matmul_mode_name(be->options.matmul));
    /* PDL (--pdl) is in the config, so an A/B's two runs are two configurations of one suite */
    int len = snprintf(config, sizeof config, "train backend=%s precision=%s%s cases=", be->name, precision,
                       !cuda ? "" : be->options.pdl ? " pdl=on" : " pdl=off");
    for (int i = 0; i < n_cases && len < (int)sizeof config; i++)
        len += snprintf(config + len, sizeof config - (size_t)len, "%s%s:%dx%d", i ? "," : "", cases[i].config,
                        cases[i].B, cases[i].T);
    forge_harness_config hc = {.suite = suite, .results_root = NULL, .config_text = config,
                               .input_recipe = TRAIN_RECIPE, .seed = 7, .reps = o->steps, .warmup = 3, .out = out};
    forge_harness *h = NULL;
    if (s == FORGE_OK) s = forge_harness_open(&h, &hc, &bs.prov, &bs.timer);
    if (s == FORGE_OK)
        fprintf(out, "== forge bench train (%s, %s%s): full steps on random tokens; check = forward losses vs the "
                     "CPU reference on the same parameters\n", be->name, precision,
                !cuda ? "" : be->options.pdl ? ", PDL on (--pdl)" : ", PDL off");
    double mfu[BENCH_TRAIN_MAX_CASES] = {0}, peak_mib[BENCH_TRAIN_MAX_CASES] = {0};
    double tok_s[BENCH_TRAIN_MAX_CASES] = {0};
    double ratio[BENCH_TRAIN_MAX_CASES], ratio_lo[BENCH_TRAIN_MAX_CASES], ratio_hi[BENCH_TRAIN_MAX_CASES];
    double paired_ms[BENCH_TRAIN_MAX_CASES];
    /* how the timed steps ran (forge_step_mode): "graph", or "eager (why)" when the recording failed */
    char mode[BENCH_TRAIN_MAX_CASES][336];
    memset(mode, 0, sizeof mode);
    baseline_result base[BENCH_TRAIN_MAX_CASES];
    memset(base, 0, sizeof base);
    int bad = 0;
    /* the tf32 matmul mode rounds the linear layers' operands to tf32: its losses are gated at the tf32
     * tolerance, every other path at fp32's */
    const forge_precision prec = bf16                                                    ? FORGE_PREC_BF16
                                 : cuda && be->options.matmul == FORGE_MATMUL_TF32 ? FORGE_PREC_TF32
                                                                                   : FORGE_PREC_FP32;
    for (int i = 0; i < n_cases && s == FORGE_OK; i++) {
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
            snprintf(mode[i], sizeof mode[i], "%s", forge_step_mode(c.step, NULL));
        }
        if (s == FORGE_OK && o->breakdown) s = breakdown(out, &c, name);
        if (s == FORGE_OK && o->baseline) {
            char path[1024];
            if (strchr(cases[i].config, '/') || strstr(cases[i].config, ".json"))
                snprintf(path, sizeof path, "%s", cases[i].config);
            else
                snprintf(path, sizeof path, "%s/%s.json", configs_dir, cases[i].config);
            fprintf(out, "-- %s: the baseline, %d rounds of one forge step and one baseline step (%s)\n", name,
                    o->steps, o->baseline);
            fflush(out);
            s = paired_baseline(out, &c, &bs.timer, o->baseline, path, o->steps, &paired_ms[i], &ratio[i],
                                &ratio_lo[i], &ratio_hi[i], &base[i]);
        }
        train_cell_free(&c);
    }
    s = forge_bench_session_end(&bs, h, s);
    for (int i = 0; i < n_cases && s == FORGE_OK; i++)
        fprintf(out, "%-10s B=%-3d T=%-5d | %9.0f tok/s | peak %8.1f MiB | MFU %5.1f%% of %.1f TFLOP/s (%s) | steps %s\n",
                cases[i].config, cases[i].B, cases[i].T, tok_s[i], peak_mib[i], 100 * mfu[i], peak / 1e12,
                peak_what, mode[i]);
    for (int i = 0; i < n_cases && s == FORGE_OK && o->baseline; i++) {
        const double tokens = (double)cases[i].B * cases[i].T;
        fprintf(out, "%-10s B=%-3d T=%-5d | paired: forge %9.0f tok/s, baseline %9.0f tok/s (torch %s) | forge / "
                     "baseline %.3fx [%.3f, %.3f] | peak forge %.0f / baseline %.0f MiB\n",
                cases[i].config, cases[i].B, cases[i].T, tokens / (paired_ms[i] / 1000),
                tokens / (base[i].median_ms / 1000), base[i].torch, ratio[i], ratio_lo[i], ratio_hi[i], peak_mib[i],
                base[i].peak_mib);
    }
    if (s == FORGE_OK && bad) s = forge_error(FORGE_ERR_NUMERIC, "bench train: %d cell(s) failed the check", bad);
    forge_backend_destroy(ref);
    forge_backend_destroy(be);
    return s;
}
