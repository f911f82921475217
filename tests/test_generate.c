/* test_generate.c: the KV-cache decode path: attention_decode's CPU reference against a double computation, the
 * decode step's logits against the full forward's rows, the device-resident id and position (the ops a recorded
 * CUDA step runs) against launch arguments bitwise, and greedy generation with the cache against the full
 * forward token for token (GPT-2, and Llama with grouped-query attention), past the context length too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/base/fs.h"
#include "../src/base/rng.h"
#include "../src/data/tokenizer.h"
#include "../src/model/model.h"
#include "../src/model/model_decode.h"
#include "../src/train/checkpoint.h"
#include "../src/train/generate.h"
#include "test.h"

#include <unistd.h>

/* ---- attention_decode against double ---------------------------------------------------------------------- */

static void fill(forge_rng *rng, float *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * forge_rng_uniform(rng));
}

/* RoPE at pos on a head (HS) in double, from the fp32 input */
static void rotate_double(double *out, const float *x, int HS, int pos, float theta) {
    int half = HS / 2;
    for (int i = 0; i < HS; i++) out[i] = x[i];
    if (!(theta > 0.0f)) return;
    for (int i = 0; i < half; i++) {
        double a = pos * pow((double)theta, -2.0 * i / HS), c = cos(a), s = sin(a);
        out[i] = x[i] * c - x[i + half] * s;
        out[i + half] = x[i + half] * c + x[i] * s;
    }
}

static void test_attention_decode_values(void) {
    TEST_CASE("attention_decode: the CPU reference equals a double computation (RoPE, GQA, first and last rows)");
    struct {
        int pos, maxT, NH, NKV, HS;
        float theta;
    } cases[] = {{0, 1, 2, 1, 8, 10000.0f}, {5, 9, 4, 2, 6, 10000.0f}, {20, 21, 6, 3, 10, 500.0f},
                 {13, 30, 3, 3, 7, 0.0f},   {40, 41, 8, 1, 16, 10000.0f}};
    forge_backend *be = NULL;
    CHECK_OK(forge_backend_create_cpu(&be, 2, 0));
    if (!be) return;
    forge_rng rng;
    forge_rng_seed(&rng, 11, 0);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int pos = cases[c].pos, maxT = cases[c].maxT, NH = cases[c].NH, NKV = cases[c].NKV, HS = cases[c].HS;
        const float theta = cases[c].theta;
        const size_t cache = (size_t)maxT * NKV * HS, row = (size_t)(NH + 2 * NKV) * HS;
        float *kc = malloc(cache * sizeof(float)), *vc = malloc(cache * sizeof(float));
        float *k0 = malloc(cache * sizeof(float)), *v0 = malloc(cache * sizeof(float));
        float *qkv = malloc(row * sizeof(float)), *out = malloc((size_t)NH * HS * sizeof(float));
        double *q = malloc((size_t)HS * sizeof(double)), *k = malloc((size_t)HS * sizeof(double));
        double *s = malloc((size_t)(pos + 1) * sizeof(double));
        fill(&rng, kc, cache, -1.5, 1.5);
        fill(&rng, vc, cache, -1.5, 1.5);
        fill(&rng, qkv, row, -1.5, 1.5);
        memcpy(k0, kc, cache * sizeof(float));
        memcpy(v0, vc, cache * sizeof(float));
        CHECK_OK(be->attention_decode(be, out, kc, vc, qkv, pos, maxT, NH, NKV, HS, theta));
        double worst_out = 0, worst_k = 0;
        int untouched = 1;
        for (int kh = 0; kh < NKV; kh++) {
            rotate_double(k, qkv + (size_t)(NH + kh) * HS, HS, pos, theta);
            for (int d = 0; d < HS; d++) {
                size_t at = ((size_t)pos * NKV + kh) * HS + d;
                worst_k = fmax(worst_k, fabs(kc[at] - k[d]));
                untouched &= vc[at] == qkv[(size_t)(NH + NKV + kh) * HS + d];
            }
        }
        for (size_t i = 0; i < cache; i++)
            if (i / ((size_t)NKV * HS) != (size_t)pos) untouched &= kc[i] == k0[i] && vc[i] == v0[i];
        for (int h = 0; h < NH; h++) {
            const int kh = h / (NH / NKV);
            rotate_double(q, qkv + (size_t)h * HS, HS, pos, theta);
            double m = -INFINITY, l = 0;
            for (int j = 0; j <= pos; j++) {
                const float *kj = kc + ((size_t)j * NKV + kh) * HS; /* row pos checked above */
                double dot = 0;
                for (int d = 0; d < HS; d++) dot += q[d] * (j == pos ? kj[d] : (double)k0[(size_t)(kj - kc) + d]);
                s[j] = dot / sqrt((double)HS);
                m = fmax(m, s[j]);
            }
            for (int j = 0; j <= pos; j++) l += s[j] = exp(s[j] - m);
            for (int d = 0; d < HS; d++) {
                double o = 0;
                for (int j = 0; j <= pos; j++) o += s[j] * vc[((size_t)j * NKV + kh) * HS + d];
                worst_out = fmax(worst_out, fabs(out[(size_t)h * HS + d] - o / l));
            }
        }
        /* the rotated key: fp32 products and one add of values <= 1.5 against the exact rotation of the same
         * fp32 inputs (cos/sin rounded to float: 2^-24 relative each): a few 1e-7. out: fp32 sums of <= 41 terms
         * and expf's error, relative ~1e-6 of values <= 1.5. */
        CHECK_MSG(worst_k <= 1e-6, "case %zu: rotated key off by %.3g", c, worst_k);
        CHECK_MSG(worst_out <= 1e-5, "case %zu: out off by %.3g", c, worst_out);
        CHECK_MSG(untouched, "case %zu: the value row or a row other than pos differs", c);
        free(kc);
        free(vc);
        free(k0);
        free(v0);
        free(qkv);
        free(out);
        free(q);
        free(k);
        free(s);
    }
    CHECK_ERR_MSG(be->attention_decode(be, NULL, NULL, NULL, NULL, 4, 4, 2, 1, 8, 0.0f), FORGE_ERR_ARG, "position 4",
                  "4 rows");
    forge_backend_destroy(be);
}

/* ---- the decode step and generation against the full forward ------------------------------------------------ */

static forge_model_config small_config(int llama, int vocab) {
    forge_model_config c = test_small_config(llama);
    snprintf(c.name, sizeof c.name, "%s", llama ? "decode-llama" : "decode-gpt2");
    c.vocab_size = vocab;
    c.n_heads = llama ? 6 : 4; /* Llama: 6 query heads over 2 kv heads, HS 4 */
    c.init_std = 0.2f;         /* logits of O(1) spread: greedy choices far from ties */
    return c;
}

typedef struct {
    forge_backend *be;
    forge_pool *pool;
    forge_tape *tape;
    forge_model *m;
} env;

static int env_open(env *e, const forge_model_config *cfg) {
    memset(e, 0, sizeof *e);
    if (forge_backend_create_cpu(&e->be, 2, 0) != FORGE_OK) return 0;
    if (forge_pool_create(&e->pool, e->be) != FORGE_OK) return 0;
    if (forge_tape_create(&e->tape, e->pool) != FORGE_OK) return 0;
    return forge_model_create(&e->m, cfg, e->pool, 5) == FORGE_OK;
}

static void env_close(env *e) {
    forge_model_free(e->m);
    forge_tape_destroy(e->tape);
    forge_pool_destroy(e->pool);
    forge_backend_destroy(e->be);
}

/* llama 2: with biases (the MLP's gate and up as two GEMVs into the halves of the packed row, model.c: pack_swiglu) */
static void test_decode_logits(int llama) {
    TEST_CASE(llama == 2 ? "decode: every position's logits equal the full forward's row (Llama with biases)"
              : llama    ? "decode: every position's logits equal the full forward's row (Llama, GQA 6/2, RoPE)"
                         : "decode: every position's logits equal the full forward's row (GPT-2, tied, learned positions)");
    forge_model_config cfg = small_config(llama != 0, 61);
    if (llama == 2) cfg.bias = 1;
    env e;
    CHECK(env_open(&e, &cfg));
    if (test_case_failed()) return;
    const int T = cfg.context_length, V = cfg.vocab_size; /* every position of the cache */
    int64_t shape[2] = {1, T};
    forge_tensor *ids = NULL, *logits = NULL;
    CHECK_OK(forge_pool_tensor(e.pool, &ids, FORGE_I32, 2, shape, 1));
    forge_rng rng;
    forge_rng_seed(&rng, 7, 0);
    for (int t = 0; ids && t < T; t++) forge_i32(ids)[t] = (int32_t)forge_rng_below(&rng, (uint64_t)V);
    forge_tape_set_recording(e.tape, 0);
    if (ids) CHECK_OK(forge_model_forward(e.m, e.tape, ids, NULL, 0.0f, &logits));
    forge_decoder *d = NULL;
    CHECK_OK(forge_decoder_create(&d, e.m, NULL));
    double worst = 0, scale = 0;
    for (int t = 0; d && logits && t < T; t++) {
        const float *row = NULL;
        CHECK_OK(forge_decode_step(d, forge_i32(ids)[t], t, &row));
        if (!row) break;
        for (int v = 0; v < V; v++) {
            float want = forge_f32(logits)[(size_t)t * V + v];
            worst = fmax(worst, fabs(row[v] - want));
            scale = fmax(scale, fabs(want));
        }
    }
    /* The decode step runs the full forward's fp32 kernels on one row, except attention: a two-pass softmax
     * against the fused forward's online one, sums in another order (a few fp32 ulps of each head's output).
     * Through two layers and the lm head that stays within 1e-5 relative of the largest logit. */
    CHECK_MSG(worst <= 1e-5 * fmax(1.0, scale), "max |decode - forward| %.3g (max |logit| %.3g)", worst, scale);
    CHECK_MSG(scale > 1.0, "logits of max %.3g: too flat to test anything", scale);
    CHECK_ERR_MSG(d ? forge_decode_step(d, 0, T, NULL) : FORGE_ERR_ARG, FORGE_ERR_ARG, "position 16", NULL);
    CHECK_ERR_MSG(d ? forge_decode_step(d, V, 0, NULL) : FORGE_ERR_ARG, FORGE_ERR_ARG, "token id 61", NULL);
    forge_decoder_free(d);
    forge_tape_reset(e.tape);
    env_close(&e);
}

/* index of the largest of n values (the first on ties): greedy decoding */
static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The decode step with its id and position read from the device buffer (decode_embed, attention_decode_at: the ops
 * a recorded CUDA step runs) against the launch-argument path: the same logits bit for bit at every position, a
 * prompt prefilled without logits included, and the same greedy tokens; use_graph on the CPU runs op by op. */
static void test_decode_device_args(int llama) {
    TEST_CASE(llama ? "decode: device-resident id and position equal the launch-argument path bitwise (Llama)"
                    : "decode: device-resident id and position equal the launch-argument path bitwise (GPT-2)");
    forge_model_config cfg = small_config(llama, 61);
    env e;
    CHECK(env_open(&e, &cfg));
    if (test_case_failed()) return;
    const int T = cfg.context_length, V = cfg.vocab_size, prompt = 5;
    const forge_decoder_options opts[] = {{0}, {.device_args = 1}, {.use_graph = 1}, {.use_graph = 1, .device_args = 1}};
    enum { NOPT = sizeof opts / sizeof *opts };
    forge_decoder *d[NOPT] = {NULL};
    int32_t seq[NOPT][64];
    float *logits = malloc((size_t)NOPT * T * V * sizeof(float));
    CHECK(logits != NULL && T <= 64);
    forge_rng rng;
    forge_rng_seed(&rng, 11, 0);
    for (int t = 0; t < prompt; t++) seq[0][t] = (int32_t)forge_rng_below(&rng, (uint64_t)V);
    for (int k = 0; k < NOPT && !test_case_failed(); k++) {
        CHECK_OK(forge_decoder_create(&d[k], e.m, &opts[k]));
        if (!d[k]) break;
        memcpy(seq[k], seq[0], prompt * sizeof(int32_t));
        /* the prompt's positions without logits but the last, then greedy tokens to the end of the context */
        for (int t = 0; t < T && !test_case_failed(); t++) {
            const float *row = NULL;
            const int want = t >= prompt - 1;
            CHECK_OK(forge_decode_step(d[k], seq[k][t], t, want ? &row : NULL));
            if (!want || !row) continue;
            float *mine = logits + ((size_t)k * T + t) * V;
            memcpy(mine, row, (size_t)V * sizeof(float));
            if (t + 1 < T) seq[k][t + 1] = (int32_t)argmax(mine, V);
        }
        int rec = -1, rep = -1;
        const char *mode = forge_decoder_mode(d[k], &rec, &rep);
        CHECK_MSG(strcmp(mode, "eager") == 0 && rec == 0 && rep == 0,
                  "options %d: mode \"%s\", %d recordings, %d replays (the CPU records no graphs)", k, mode, rec, rep);
    }
    for (int k = 1; k < NOPT && !test_case_failed(); k++) {
        CHECK_MSG(memcmp(seq[k], seq[0], (size_t)T * sizeof(int32_t)) == 0, "options %d: other greedy tokens", k);
        const size_t off = ((size_t)k * T + (prompt - 1)) * V, n = (size_t)(T - prompt + 1) * V;
        CHECK_MSG(memcmp(logits + off, logits + (size_t)(prompt - 1) * V, n * sizeof(float)) == 0,
                  "options %d: logits differ from the launch-argument path", k);
    }
    /* the host checks the id and position before they are uploaded, with the launch-argument path's messages */
    if (d[1]) {
        CHECK_ERR_MSG(forge_decode_step(d[1], 0, T, NULL), FORGE_ERR_ARG, "position 16", NULL);
        CHECK_ERR_MSG(forge_decode_step(d[1], V, 0, NULL), FORGE_ERR_ARG, "token id 61", NULL);
    }
    for (int k = 0; k < NOPT; k++) forge_decoder_free(d[k]);
    free(logits);
    env_close(&e);
}

/* The device-argument ops refuse what they read out of range (the CPU reference checks when it runs), and
 * decode_embed equals position_forward on the same rows bitwise. */
static void test_decode_ops(void) {
    TEST_CASE("decode_embed and attention_decode_at: values read from memory, refused outside their tables");
    forge_backend *be = NULL;
    CHECK_OK(forge_backend_create_cpu(&be, 2, 0));
    if (!be) return;
    enum { C = 5, V = 3, MAXT = 4 };
    float wte[V * C], wpe[MAXT * C], out[C], want[C];
    for (int i = 0; i < V * C; i++) wte[i] = 0.1f * (float)i + 0.01f;
    for (int i = 0; i < MAXT * C; i++) wpe[i] = -0.07f * (float)i + 0.3f;
    int32_t id = 2, pos = 3;
    CHECK_OK(be->decode_embed(be, out, &id, &pos, wte, wpe, C, V, MAXT));
    CHECK_OK(be->position_forward(be, want, wte + 2 * C, wpe + 3 * C, 1, 1, C));
    CHECK_MSG(memcmp(out, want, sizeof out) == 0, "decode_embed differs from position_forward");
    pos = -1; /* not read without wpe */
    CHECK_OK(be->decode_embed(be, out, &id, &pos, wte, NULL, C, V, MAXT));
    CHECK_MSG(memcmp(out, wte + 2 * C, sizeof out) == 0, "decode_embed without wpe is not the wte row");
    CHECK_ERR_MSG(be->decode_embed(be, out, &id, &pos, wte, wpe, C, V, MAXT), FORGE_ERR_ARG, "position -1", "[0, 4)");
    id = 3;
    pos = 0;
    CHECK_ERR_MSG(be->decode_embed(be, out, &id, &pos, wte, wpe, C, V, MAXT), FORGE_ERR_ARG, "= 3", "[0, 3)");
    pos = 4;
    CHECK_ERR_MSG(be->attention_decode_at(be, NULL, NULL, NULL, NULL, &pos, 4, 2, 1, 8, 0.0f), FORGE_ERR_ARG,
                  "position 4", "4 rows");
    forge_backend_destroy(be);
}

/* A byte-level tokenizer (the 256 bytes and <|endoftext|>, a few merges) trained on a small text. */
static forge_tokenizer *small_tokenizer(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/text.txt", test_tmpdir());
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    for (int i = 0; i < 50; i++) fprintf(f, "the cat sat on the mat %d times.\n", i % 7);
    fclose(f);
    const char *files[] = {path};
    forge_tokenizer *tok = NULL;
    if (forge_tokenizer_train(&tok, files, 1, 270, 0) != FORGE_OK) return NULL;
    return tok;
}

/* forge_generate's --ids output with the given options */
static char *generate_ids(env *e, const forge_tokenizer *tok, const char *prompt, forge_generate_options go,
                          forge_generate_stats *st) {
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) return NULL;
    go.print_ids = 1;
    CHECK_OK(forge_generate(e->m, e->tape, tok, prompt, &go, mem, st));
    fclose(mem);
    return buf;
}

static void test_greedy(int llama) {
    TEST_CASE(llama ? "generate: greedy with the KV cache equals the full forward token for token (Llama, GQA)"
                    : "generate: greedy with the KV cache equals the full forward token for token (GPT-2)");
    forge_tokenizer *tok = small_tokenizer();
    CHECK_MSG(tok != NULL, "tokenizer: %s", forge_error_message());
    if (!tok) return;
    forge_model_config cfg = small_config(llama, forge_tokenizer_vocab_size(tok));
    env e;
    CHECK(env_open(&e, &cfg));
    struct {
        const char *prompt;
        int tokens; /* past 16 - prompt: the rest runs the full forward */
    } runs[] = {{"the cat", 6}, {"", 15}, {"the cat sat", 30}, {"on the mat 3 times.\nthe cat sat", 12}};
    for (size_t r = 0; !test_case_failed() && r < sizeof runs / sizeof *runs; r++) {
        forge_generate_options go = {.max_tokens = runs[r].tokens, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f,
                                     .seed = 1, .stop_at_eot = 0};
        forge_generate_stats cached, full;
        char *a = generate_ids(&e, tok, runs[r].prompt, go, &cached);
        go.full_forward = 1;
        char *b = generate_ids(&e, tok, runs[r].prompt, go, &full);
        CHECK_MSG(a && b && strcmp(a, b) == 0, "run %zu (\"%s\"): KV cache\n%s\nfull forward\n%s", r, runs[r].prompt,
                  a ? a : "", b ? b : "");
        CHECK(cached.new_tokens == runs[r].tokens && full.new_tokens == runs[r].tokens);
        CHECK(full.full_forward_tokens == runs[r].tokens);
        /* the cache serves every token whose context fits: n <= 16 ids before sampling it */
        int fits = cfg.context_length - cached.prompt_tokens + 1;
        int want_full = runs[r].tokens > fits ? runs[r].tokens - fits : 0;
        CHECK_MSG(cached.full_forward_tokens == want_full, "run %zu: %d tokens by the full forward, expected %d", r,
                  cached.full_forward_tokens, want_full);
        free(a);
        free(b);
    }
    /* sampling (temperature 0.9, top-k 20) draws the same tokens from the same logits and seed */
    forge_generate_options go = {.max_tokens = 12, .temperature = 0.9f, .top_k = 20, .top_p = 0.95f, .seed = 3};
    char *a = generate_ids(&e, tok, "the", go, NULL);
    go.full_forward = 1;
    char *b = generate_ids(&e, tok, "the", go, NULL);
    CHECK_MSG(a && b && strcmp(a, b) == 0, "sampled: KV cache\n%s\nfull forward\n%s", a ? a : "", b ? b : "");
    free(a);
    free(b);
    env_close(&e);
    forge_tokenizer_free(tok);
}

static void test_sample_cli(void) {
    TEST_CASE("forge sample: --ids on stdout as before, the tokens/s line last on stderr");
    const char *forge = test_forge_binary();
    if (!forge) {
        test_case_skip("no forge binary beside the test binary");
        return;
    }
    forge_tokenizer *tok = small_tokenizer();
    CHECK(tok != NULL);
    if (!tok) return;
    forge_model_config cfg = small_config(1, forge_tokenizer_vocab_size(tok));
    env e;
    CHECK(env_open(&e, &cfg));
    char dir[600], out[700], err[700], cmd[4096];
    snprintf(dir, sizeof dir, "%s/ckpt", test_tmpdir());
    snprintf(out, sizeof out, "%s/out.txt", test_tmpdir());
    snprintf(err, sizeof err, "%s/err.txt", test_tmpdir());
    if (!test_case_failed()) CHECK_OK(forge_checkpoint_save(dir, e.m, NULL, NULL, NULL));
    if (!test_case_failed()) CHECK_OK(forge_tokenizer_save(tok, dir));
    const char *flags[] = {"", " --no-kv-cache", " --no-graph"}; /* --no-graph: accepted, the CPU's steps as ever */
    for (int run = 0; run < 3 && !test_case_failed(); run++) {
        const int full = run == 1;
        snprintf(cmd, sizeof cmd, "%s sample --ckpt %s --prompt 'the cat' --tokens 20 --temperature 0 --ids%s >%s 2>%s",
                 forge, dir, flags[run], out, err);
        CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
        char *o = NULL, *r = NULL;
        size_t lo = 0, lr = 0;
        CHECK_OK(forge_read_file(out, &o, &lo));
        CHECK_OK(forge_read_file(err, &r, &lr));
        int lines = 0;
        for (size_t i = 0; o && i < lo; i++) lines += o[i] == '\n';
        CHECK_MSG(o && lines == 2, "stdout holds %d lines, expected the prompt's ids and the new ones:\n%s", lines,
                  o ? o : "");
        const char *last = r ? strstr(r, "sampled ") : NULL;
        int n = -1;
        double secs = -1, rate = -1;
        char how[64] = "";
        CHECK_MSG(last && sscanf(last, "sampled %d tokens in %lf s: %lf tok/s (%63[^,]", &n, &secs, &rate, how) == 4,
                  "stderr: %s", r ? r : "");
        CHECK_MSG(n >= 0 && n <= 20 && secs >= 0 && strcmp(how, full ? "full forward fp32" : "kv cache fp32") == 0,
                  "stderr: %s", r ? r : "");
        CHECK_MSG(last && strstr(last, "device cpu)\n") != NULL, "stderr: %s", r ? r : "");
        free(o);
        free(r);
    }
    env_close(&e);
    forge_tokenizer_free(tok);
}

void suite_generate(void) {
    test_attention_decode_values();
    test_decode_logits(0);
    test_decode_logits(1);
    test_decode_logits(2);
    test_decode_device_args(0);
    test_decode_device_args(1);
    test_decode_ops();
    test_greedy(0);
    test_greedy(1);
    test_sample_cli();
}
