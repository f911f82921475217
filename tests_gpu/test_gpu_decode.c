/*
 * test_gpu_decode.c: the KV-cache decode path (model/model_decode.h) on the CUDA backend, on models with the
 * head sizes of real ones (64, 128), grouped-query attention and a context that misses every tile:
 * - every position's decode logits against the same backend's full forward (the last row of a forward over the
 *   tokens so far is the row of a forward over the whole context: causal);
 * - the CUDA decode against the CPU reference's decode of the same weights;
 * - two runs of the same tokens give bit-identical logits (no atomics, fixed sums);
 * - the recorded graph (forge_decoder_options.use_graph) replayed for 100+ tokens, and the device-resident id and
 *   position run op by op, give the op-by-op launch-argument path's logits bit for bit (the same kernels on the
 *   same values), a prompt prefilled without logits first; then the same with a backend workspace replaced
 *   mid-sample, which makes the replay stale: that step runs op by op, the next one records again.
 * Tolerance 1e-4 of the largest logit (at least 1): fp32 sums in other orders (the N = 1 GEMMs, the decode
 * kernel's three passes against the flash kernel's online softmax) move a logit by a few 1e-6 of the scale; a
 * wrong position, head or cache row moves it by O(1).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "../src/model/model.h"
#include "../src/model/model_decode.h"
#include "../src/runtime/pool.h"
#include "../src/runtime/tape.h"

typedef struct {
    forge_pool *pool;
    forge_tape *tape;
    forge_model *m;
} decode_env;

static int decode_env_open(decode_env *e, forge_backend *be, const forge_model_config *cfg) {
    memset(e, 0, sizeof *e);
    if (forge_pool_create(&e->pool, be) != FORGE_OK) return 0;
    if (forge_tape_create(&e->tape, e->pool) != FORGE_OK) return 0;
    if (forge_model_create(&e->m, cfg, e->pool, 5) != FORGE_OK) return 0;
    forge_tape_set_recording(e->tape, 0);
    return 1;
}

static void decode_env_close(decode_env *e) {
    forge_model_free(e->m);
    forge_tape_destroy(e->tape);
    forge_pool_destroy(e->pool);
}

static forge_model_config decode_config(int llama) {
    forge_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", llama ? "gpu-decode-llama" : "gpu-decode-gpt2");
    c.family = llama ? FORGE_FAMILY_LLAMA : FORGE_FAMILY_GPT2;
    c.vocab_size = 1001;
    c.context_length = 131;
    c.d_model = llama ? 512 : 256;
    c.n_layers = 2;
    c.n_heads = 4;                /* HS 128 (Llama), 64 (GPT-2) */
    c.n_kv_heads = llama ? 1 : 4; /* Llama: 4 query heads on one kv head */
    c.ffn_hidden = llama ? 344 : 1024;
    c.norm = llama ? FORGE_NORM_RMSNORM : FORGE_NORM_LAYERNORM;
    c.norm_eps = 1e-5f;
    c.positions = llama ? FORGE_POSITIONS_ROPE : FORGE_POSITIONS_LEARNED;
    c.rope_theta = llama ? 500000.0f : 10000.0f;
    c.activation = llama ? FORGE_ACTIVATION_SWIGLU : FORGE_ACTIVATION_GELU;
    c.bias = !llama;
    c.tied_embeddings = !llama;
    c.init_std = 0.1f;
    return c;
}

/* logits (T, V) of every position, by decode steps; 0 on failure */
static int decode_all(forge_model *m, const int32_t *ids, int T, float *logits) {
    forge_decoder *d = NULL;
    if (forge_decoder_create(&d, m, NULL) != FORGE_OK) return 0;
    int ok = 1;
    const size_t V = (size_t)m->cfg.vocab_size;
    for (int t = 0; ok && t < T; t++) {
        const float *row;
        ok = forge_decode_step(d, ids[t], t, &row) == FORGE_OK &&
             m->be->copy_to_host(m->be, logits + (size_t)t * V, row, V * sizeof(float)) == FORGE_OK;
    }
    forge_decoder_free(d);
    return ok;
}

/* A bf16 dW GEMM whose split-K plan grows the backend's workspace: a graph recorded before it is stale. */
static forge_status replace_workspace(forge_backend *be) {
    enum { K = 16384, M = 64, N = 64 };
    void *dout = NULL, *inp = NULL, *dw = NULL;
    forge_status s = be->mem_alloc(be, &dout, (size_t)K * M * sizeof(forge_bf16));
    if (s == FORGE_OK) s = be->mem_alloc(be, &inp, (size_t)K * N * sizeof(forge_bf16));
    if (s == FORGE_OK) s = be->mem_alloc(be, &dw, (size_t)M * N * sizeof(float));
    if (s == FORGE_OK) s = be->memset_zero(be, dout, (size_t)K * M * sizeof(forge_bf16));
    if (s == FORGE_OK) s = be->memset_zero(be, inp, (size_t)K * N * sizeof(forge_bf16));
    if (s == FORGE_OK) s = be->memset_zero(be, dw, (size_t)M * N * sizeof(float));
    if (s == FORGE_OK && !be->matmul_backward_weight_bf16)
        s = forge_error(FORGE_ERR_UNSUPPORTED, "no matmul_backward_weight_bf16");
    if (s == FORGE_OK) s = be->matmul_backward_weight_bf16(be, dw, NULL, dout, inp, K, N, M);
    if (s == FORGE_OK) s = be->synchronize(be);
    if (dout) be->mem_free(be, dout);
    if (inp) be->mem_free(be, inp);
    if (dw) be->mem_free(be, dw);
    return s;
}

/* logits (T, V) by decode steps with options o: positions before prompt - 1 without logits (their rows zeroed),
 * the workspace replaced before step stale_at (< 0: never); the decoder's counts into rec and rep; 0 on failure */
static int decode_run(forge_model *m, const int32_t *ids, int T, int prompt, const forge_decoder_options *o,
                      int stale_at, float *logits, int *rec, int *rep) {
    forge_decoder *d = NULL;
    if (forge_decoder_create(&d, m, o) != FORGE_OK) return 0;
    int ok = 1;
    const size_t V = (size_t)m->cfg.vocab_size;
    memset(logits, 0, (size_t)T * V * sizeof(float));
    for (int t = 0; ok && t < T; t++) {
        if (t == stale_at) ok = replace_workspace(m->be) == FORGE_OK;
        const float *row = NULL;
        const int want = t >= prompt - 1;
        ok = ok && forge_decode_step(d, ids[t], t, want ? &row : NULL) == FORGE_OK;
        if (ok && want) ok = m->be->copy_to_host(m->be, logits + (size_t)t * V, row, V * sizeof(float)) == FORGE_OK;
    }
    const char *mode = forge_decoder_mode(d, rec, rep);
    if (ok && o && o->use_graph && strcmp(mode, "graph") != 0) {
        fprintf(stderr, "decoder mode: %s\n", mode);
        ok = 0;
    }
    forge_decoder_free(d);
    return ok;
}

/* The graph path against op by op, on a backend of its own (a fresh workspace, so replacing it is certain). */
static void case_decode_graph(parity *P, int llama) {
    const forge_model_config cfg = decode_config(llama);
    const int T = cfg.context_length, V = cfg.vocab_size, prompt = 7;
    char shape[160];
    snprintf(shape, sizeof shape, "%s C=%d NH=%d NKV=%d T=%d prompt=%d", llama ? "llama" : "gpt2", cfg.d_model,
             cfg.n_heads, cfg.n_kv_heads, T, prompt);
    forge_backend *be = NULL;
    decode_env g;
    memset(&g, 0, sizeof g);
    int ok = forge_backend_create(&be, FORGE_DEVICE_CUDA, &P->gpu->options) == FORGE_OK && decode_env_open(&g, be, &cfg);
    const size_t n = (size_t)T * V;
    float *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    int32_t *ids = malloc((size_t)T * sizeof(int32_t));
    ok = ok && ref && got && ids;
    for (int t = 0; ok && t < T; t++) ids[t] = (int32_t)((t * 104729u + 7u) % (unsigned)V);
    int rec = 0, rep = 0;
    ok = ok && decode_run(g.m, ids, T, prompt, NULL, -1, ref, &rec, &rep);
    if (!ok) report(P, 0, "decode graph", shape, INFINITY, 0, forge_error_message());
    const struct {
        const char *what;
        forge_decoder_options o;
        int stale_at;
    } runs[] = {{"decode[device args] vs decode[op by op]", {.device_args = 1}, -1},
                {"decode[graph] vs decode[op by op]", {.use_graph = 1}, -1},
                {"decode[graph, stale at 60] vs decode[op by op]", {.use_graph = 1}, 60}};
    for (size_t r = 0; ok && r < sizeof runs / sizeof *runs; r++) {
        if (!decode_run(g.m, ids, T, prompt, &runs[r].o, runs[r].stale_at, got, &rec, &rep)) {
            report(P, 0, runs[r].what, shape, INFINITY, 0, forge_error_message());
            continue;
        }
        size_t differ = 0;
        for (size_t i = 0; i < n; i++) differ += memcmp(&got[i], &ref[i], sizeof(float)) != 0;
        char why[160];
        snprintf(why, sizeof why, "(%zu of %zu logits differ in their bits; %d recordings, %d replays)", differ, n,
                 rec, rep);
        report(P, differ == 0, runs[r].what, shape, differ ? 1.0 : 0.0, 0.0, differ ? why : NULL);
        /* the logit steps: the first op by op, the second recorded, the rest replayed; stale: one more op by op
         * (the refused replay) and one more recording */
        const int steps = T - (prompt - 1);
        const int want_rec = !runs[r].o.use_graph ? 0 : runs[r].stale_at >= 0 ? 2 : 1;
        const int want_rep = !runs[r].o.use_graph ? 0 : runs[r].stale_at >= 0 ? steps - 2 : steps - 1;
        snprintf(why, sizeof why, "(%d recordings, %d replays; expected %d and %d)", rec, rep, want_rec, want_rep);
        if (runs[r].stale_at >= 0 && rec == 1)
            report_skip(P, "decode[graph] re-recorded when stale", shape,
                        "the bf16 dW GEMM did not replace the workspace (its plan did not split)");
        else
            report(P, rec == want_rec && rep == want_rep, "decode[graph] recordings and replays", shape, 0.0, 0.0,
                   rec == want_rec && rep == want_rep ? NULL : why);
    }
    free(ref);
    free(got);
    free(ids);
    decode_env_close(&g);
    forge_backend_destroy(be);
}

/* max |a - b| and max |b| over n */
static double max_diff(const float *a, const float *b, size_t n, double *scale) {
    double w = 0;
    *scale = 0;
    for (size_t i = 0; i < n; i++) {
        w = fmax(w, fabs((double)a[i] - b[i]));
        *scale = fmax(*scale, fabs((double)b[i]));
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
    }
    return w;
}

static void case_decode(parity *P, int llama) {
    const forge_model_config cfg = decode_config(llama);
    const int T = cfg.context_length, V = cfg.vocab_size;
    char shape[160];
    snprintf(shape, sizeof shape, "%s C=%d NH=%d NKV=%d T=%d", llama ? "llama" : "gpt2", cfg.d_model, cfg.n_heads,
             cfg.n_kv_heads, T);
    decode_env g, c;
    int ok = decode_env_open(&g, P->gpu, &cfg) && decode_env_open(&c, P->cpu, &cfg);
    float *params = ok ? malloc(g.m->n_elements * sizeof(float)) : NULL;
    float *fwd = malloc((size_t)T * V * sizeof(float)), *dg = malloc((size_t)T * V * sizeof(float));
    float *dg2 = malloc((size_t)T * V * sizeof(float)), *dc = malloc((size_t)T * V * sizeof(float));
    int32_t *ids = malloc((size_t)T * sizeof(int32_t));
    ok = ok && params && fwd && dg && dg2 && dc && ids;
    if (ok) { /* the same weights on both sides */
        ok = forge_model_get_params(g.m, params) == FORGE_OK && forge_model_set_params(c.m, params) == FORGE_OK;
        for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 7919u + 13u) % (unsigned)V);
    }
    forge_tensor *tid = NULL, *logits = NULL;
    int64_t sh[2] = {1, T};
    ok = ok && forge_pool_tensor(g.pool, &tid, FORGE_I32, 2, sh, 0) == FORGE_OK &&
         P->gpu->copy_to_device(P->gpu, tid->data, ids, (size_t)T * sizeof(int32_t)) == FORGE_OK &&
         forge_model_forward(g.m, g.tape, tid, NULL, 0.0f, &logits) == FORGE_OK &&
         P->gpu->copy_to_host(P->gpu, fwd, logits->data, (size_t)T * V * sizeof(float)) == FORGE_OK;
    forge_tape_reset(g.tape);
    ok = ok && decode_all(g.m, ids, T, dg) && decode_all(g.m, ids, T, dg2) && decode_all(c.m, ids, T, dc);
    if (!ok) {
        report(P, 0, "decode", shape, INFINITY, 0, forge_error_message());
    } else {
        double scale, w = max_diff(dg, fwd, (size_t)T * V, &scale), tol = 1e-4 * fmax(1.0, scale);
        report(P, w <= tol, "decode[cuda] vs forward[cuda]", shape, w, tol, NULL);
        w = max_diff(dg, dc, (size_t)T * V, &scale);
        tol = 1e-4 * fmax(1.0, scale);
        report(P, w <= tol, "decode[cuda] vs decode[cpu]", shape, w, tol, NULL);
        int same = memcmp(dg, dg2, (size_t)T * V * sizeof(float)) == 0;
        report(P, same, "decode[cuda] deterministic", shape, same ? 0.0 : 1.0, 0.0, same ? NULL : "(two runs differ)");
    }
    free(params);
    free(fwd);
    free(dg);
    free(dg2);
    free(dc);
    free(ids);
    decode_env_close(&g);
    decode_env_close(&c);
}

void run_decode_cases(parity *P) {
    case_decode(P, 0);
    case_decode(P, 1);
    case_decode_graph(P, 0);
    case_decode_graph(P, 1);
}
