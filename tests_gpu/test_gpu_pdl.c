/*
 * test_gpu_pdl.c: programmatic dependent launch (src/backend/cuda/pdl.cuh) changes no bit of a bf16 training step.
 *
 * With PDL a kernel of the step may start under the previous kernel's tail, and only its forge_pdl_wait keeps it
 * from reading an operand before it is written, or overwriting one (a workspace, a gradient) that the previous
 * kernel still reads. PDL changes no arithmetic, so a step with it must give the bits of a step without it: any
 * difference is a kernel that touches memory before its wait (scripts/check_pdl.py checks the source; this checks
 * the device). A tiny GPT-2 (LayerNorm, GELU, learned positions, tied embeddings, an odd vocabulary) and a tiny
 * Llama (RMSNorm, SwiGLU, RoPE, grouped-query attention) train a few bf16 steps of two micro-batches each on fixed
 * random tokens, from the same initial weights, three ways:
 *   - PDL off, the step recorded as a CUDA graph and replayed (the default: every kernel launched plainly);
 *   - PDL on, recorded and replayed (the trainer's default: programmatic edges inside the graph);
 *   - PDL on, op by op (launched directly on the stream, no graph);
 * and every step's loss and gradient norm and the final parameters (fp32 masters) must be equal bit for bit. The
 * graph runs must have replayed (forge_step_mode "graph"): a recording that failed would run op by op and hide a
 * capture problem. Shapes take the default kernels: head size 64 (the wgmma flash kernels), multiples of 8 (the
 * wgmma GEMMs), rows of both layouts of the classifier.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "../src/backend/options.h"
#include "../src/model/model.h"
#include "../src/runtime/pool.h"
#include "../src/runtime/tape.h"
#include "../src/train/optimizer.h"
#include "../src/train/step.h"

#define PDL_STEPS 6 /* step 1 op by op (warm-up), step 2 recorded and replayed, 3.. replayed */
#define PDL_B 4
#define PDL_T 128
#define PDL_ACCUM 2

static forge_model_config pdl_config(int llama) {
    forge_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", llama ? "gpu-pdl-llama" : "gpu-pdl-gpt2");
    c.family = llama ? FORGE_FAMILY_LLAMA : FORGE_FAMILY_GPT2;
    c.vocab_size = llama ? 768 : 1003; /* GPT-2: V % 8 != 0, the classifier's vocabulary tail */
    c.context_length = PDL_T;
    c.d_model = 128;
    c.n_layers = 2;
    c.n_heads = 2;                /* HS 64 */
    c.n_kv_heads = llama ? 1 : 2; /* Llama: both query heads on one kv head */
    c.ffn_hidden = llama ? 352 : 512;
    c.norm = llama ? FORGE_NORM_RMSNORM : FORGE_NORM_LAYERNORM;
    c.norm_eps = 1e-5f;
    c.positions = llama ? FORGE_POSITIONS_ROPE : FORGE_POSITIONS_LEARNED;
    c.rope_theta = 10000.0f;
    c.activation = llama ? FORGE_ACTIVATION_SWIGLU : FORGE_ACTIVATION_GELU;
    c.bias = !llama;
    c.tied_embeddings = !llama;
    c.init_std = 0.02f;
    return c;
}

/* One run's results: per step the loss and gradient norm, and the parameters after the last step. */
typedef struct {
    float loss[PDL_STEPS], norm[PDL_STEPS];
    float *params;
    size_t n_params;
    char mode[96];
} pdl_result;

/* Trains cfg PDL_STEPS steps on a fresh bf16 CUDA backend with the given pdl and graph settings; 1 on success,
 * else 0 with the reason in why. */
static int pdl_train(const forge_model_config *cfg, int pdl, int use_graph, pdl_result *r, char *why,
                     size_t why_cap) {
    memset(r, 0, sizeof *r);
    forge_runtime_options rt;
    forge_runtime_options_default(&rt);
    rt.device = FORGE_DEVICE_CUDA;
    rt.precision = FORGE_TRAIN_BF16;
    rt.pdl = pdl;
    forge_backend *be = NULL;
    forge_pool *pool = NULL;
    forge_tape *tape = NULL;
    forge_model *m = NULL;
    forge_optimizer *opt = NULL;
    forge_step *step = NULL;
    const size_t n = (size_t)PDL_ACCUM * PDL_B * PDL_T;
    int32_t *tokens = malloc(2 * n * sizeof *tokens);
    forge_status s = tokens ? FORGE_OK : forge_error(FORGE_ERR_OOM, "out of host memory");
    if (s == FORGE_OK) s = forge_backend_create(&be, FORGE_DEVICE_CUDA, &rt);
    if (s == FORGE_OK) s = forge_pool_create(&pool, be);
    if (s == FORGE_OK) s = forge_tape_create(&tape, pool);
    if (s == FORGE_OK) s = forge_model_create(&m, cfg, pool, 11);
    const forge_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    if (s == FORGE_OK) s = forge_optimizer_create(&opt, m, ac);
    const forge_step_options so = {.B = PDL_B, .T = PDL_T, .accum = PDL_ACCUM,
                                   .grad_scale = 1.0f / (float)n, .use_graph = use_graph};
    if (s == FORGE_OK) s = forge_step_create(&step, m, tape, opt, &so);
    forge_rng rng;
    for (int i = 0; s == FORGE_OK && i < PDL_STEPS; i++) {
        forge_rng_seed(&rng, 1000 + (uint64_t)i, 3); /* the same batches in every run */
        for (size_t k = 0; k < 2 * n; k++) tokens[k] = (int32_t)forge_rng_below(&rng, (uint64_t)cfg->vocab_size);
        s = forge_step_launch(step, tokens, tokens + n, 3e-3f);
        if (s == FORGE_OK) s = forge_step_finish(step, &r->loss[i], &r->norm[i]);
    }
    if (s == FORGE_OK) {
        snprintf(r->mode, sizeof r->mode, "%s", forge_step_mode(step, NULL));
        r->n_params = m->n_elements;
        r->params = malloc(r->n_params * sizeof *r->params);
        s = r->params ? forge_model_get_params(m, r->params) : forge_error(FORGE_ERR_OOM, "out of host memory");
    }
    if (s != FORGE_OK) snprintf(why, why_cap, "(%s: %s)", forge_status_name(s), forge_error_message());
    forge_step_free(step);
    forge_optimizer_free(opt);
    forge_model_free(m);
    forge_tape_destroy(tape);
    forge_pool_destroy(pool);
    forge_backend_destroy(be);
    free(tokens);
    return s == FORGE_OK;
}

/* Bitwise comparison of two runs: the number of values that differ (losses, norms, parameters), and the largest
 * relative difference among them in *maxrel. */
static size_t pdl_diff(const pdl_result *a, const pdl_result *b, double *maxrel) {
    size_t bad = 0;
    *maxrel = 0.0;
    const size_t np = a->n_params < b->n_params ? a->n_params : b->n_params;
    for (size_t i = 0; i < 2 * PDL_STEPS + np; i++) {
        const size_t j = i - 2 * PDL_STEPS;
        const float x = i < PDL_STEPS ? a->loss[i] : i < 2 * PDL_STEPS ? a->norm[i - PDL_STEPS] : a->params[j];
        const float y = i < PDL_STEPS ? b->loss[i] : i < 2 * PDL_STEPS ? b->norm[i - PDL_STEPS] : b->params[j];
        if (memcmp(&x, &y, sizeof x) == 0) continue;
        bad++;
        const double rel = fabs((double)x - y) / fmax(fabs((double)x), 1e-30);
        if (!(rel <= *maxrel)) *maxrel = rel; /* a NaN counts as the largest */
    }
    return bad + (a->n_params != b->n_params);
}

static void pdl_case(parity *P, int llama) {
    const forge_model_config cfg = pdl_config(llama);
    char shape[160], what[64];
    snprintf(shape, sizeof shape, "%s B=%d T=%d accum=%d steps=%d V=%d C=%d NH=%d NKV=%d", cfg.name, PDL_B, PDL_T,
             PDL_ACCUM, PDL_STEPS, cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.n_kv_heads);
    /* [0]: PDL off, graph (the reference); [1]: PDL on, graph; [2]: PDL on, op by op */
    static const int pdl_of[3] = {0, 1, 1}, graph_of[3] = {1, 1, 0};
    static const char *const name_of[3] = {"pdl off, graph", "pdl on, graph", "pdl on, op by op"};
    pdl_result res[3];
    int ran[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++) {
        char why[512] = "";
        ran[k] = pdl_train(&cfg, pdl_of[k], graph_of[k], &res[k], why, sizeof why);
        snprintf(what, sizeof what, "pdl_train[%s]", name_of[k]);
        if (!ran[k]) {
            report(P, 0, what, shape, INFINITY, 0, why);
            continue;
        }
        /* the graph runs replayed a recording (a failed one leaves the run op by op, with a note) */
        const int mode_ok = strcmp(res[k].mode, graph_of[k] ? "graph" : "eager") == 0;
        char note[160];
        snprintf(note, sizeof note, "(step mode \"%s\"; loss %.6f -> %.6f)", res[k].mode, (double)res[k].loss[0],
                 (double)res[k].loss[PDL_STEPS - 1]);
        report(P, mode_ok && isfinite(res[k].loss[PDL_STEPS - 1]), what, shape, 0, 0, note);
    }
    for (int k = 1; k < 3; k++) {
        if (!ran[0] || !ran[k]) continue;
        double maxrel = 0.0;
        const size_t bad = pdl_diff(&res[0], &res[k], &maxrel);
        char why[160];
        snprintf(why, sizeof why, "(%zu of %zu losses, norms and parameters differ from pdl off; bitwise required)",
                 bad, 2 * PDL_STEPS + res[0].n_params);
        snprintf(what, sizeof what, "pdl_bitwise[%s]", name_of[k]);
        report(P, bad == 0, what, shape, maxrel, 0, bad ? why : NULL);
    }
    for (int k = 0; k < 3; k++)
        if (ran[k]) free(res[k].params);
}

void run_pdl_cases(parity *P) {
    pdl_case(P, 0);
    pdl_case(P, 1);
}
