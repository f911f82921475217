/* test_hf.c: Hugging Face directories in and out (model/hf.c, train/checkpoint.c).
 *
 * The HF directories here are written by hand, independently of checkpoint.c: config.json in transformers'
 * schema (with keys forge ignores) and a model.safetensors under HF's names and layouts (GPT-2's Conv1D
 * weights as (in, out), Llama's q/k/v_proj separate, no lm_head for a tied model), built from a forge model's
 * weights. Loading it must give the same model: the same loss to the last bit. tools/hf_check.py checks the
 * same against transformers itself where torch exists. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/backend/backend.h"
#include "../src/base/fs.h"
#include "../src/base/rng.h"
#include "../src/data/tokenize.h"
#include "../src/data/tokenizer.h"
#include "../src/model/hf.h"
#include "../src/model/model.h"
#include "../src/model/safetensors.h"
#include "../src/train/checkpoint.h"
#include "../src/train/generate.h"
#include "../src/train/trainer.h"
#include "test.h"

typedef struct {
    forge_backend *be;
    forge_pool *pool;
    forge_tape *tape;
} env;

static int env_open(env *e) {
    memset(e, 0, sizeof *e);
    return forge_backend_create_cpu(&e->be, 0, 0) == FORGE_OK && forge_pool_create(&e->pool, e->be) == FORGE_OK &&
           forge_tape_create(&e->tape, e->pool) == FORGE_OK;
}

static void env_close(env *e) {
    forge_tape_destroy(e->tape);
    forge_pool_destroy(e->pool);
    forge_backend_destroy(e->be);
}

static forge_model_config small_config(int llama, int bias, int tied) {
    forge_model_config c = test_small_config(llama);
    snprintf(c.name, sizeof c.name, "%s", llama ? "hf-llama" : "hf-gpt2");
    c.norm_eps = llama ? 1e-6f : 1e-5f;
    c.rope_theta = llama ? 500.0f : 10000.0f;
    c.bias = bias;
    c.tied_embeddings = tied;
    return c;
}

/* The mean loss of m on a fixed random batch (2 x 12). */
static double model_loss(env *e, forge_model *m) {
    const int B = 2, T = 12;
    int64_t shape[2] = {B, T};
    forge_tensor *ids, *tg, *out = NULL;
    if (forge_pool_tensor(e->pool, &ids, FORGE_I32, 2, shape, 1) != FORGE_OK) return NAN;
    if (forge_pool_tensor(e->pool, &tg, FORGE_I32, 2, shape, 1) != FORGE_OK) return NAN;
    forge_rng rng;
    forge_rng_seed(&rng, 11, 0);
    for (int i = 0; i < B * T; i++) {
        forge_i32(ids)[i] = (int32_t)forge_rng_below(&rng, (uint64_t)m->cfg.vocab_size);
        forge_i32(tg)[i] = (int32_t)forge_rng_below(&rng, (uint64_t)m->cfg.vocab_size);
    }
    forge_tape_set_recording(e->tape, 0);
    double sum = NAN;
    if (forge_model_forward(m, e->tape, ids, tg, 0.0f, &out) == FORGE_OK) {
        sum = 0;
        for (int i = 0; i < B * T; i++) sum += forge_f32(out)[i];
    }
    forge_tape_reset(e->tape);
    forge_pool_release(e->pool, ids);
    forge_pool_release(e->pool, tg);
    return sum / (B * T);
}

/* Every parameter nonzero and distinct (norm weights near 1, biases small): a bias or norm mapped to the wrong
 * place, or a transposition missed, changes the loss. */
static void randomise(forge_model *m, float *host) {
    forge_rng rng;
    forge_rng_seed(&rng, 5, 1);
    for (size_t i = 0; i < m->n_elements; i++) host[i] = (float)(forge_rng_normal(&rng) * 0.3);
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].t->ndim == 1 && strstr(m->params[i].name, "norm") && strstr(m->params[i].name, "weight"))
            for (size_t j = 0; j < m->params[i].t->numel; j++) host[m->params[i].offset + j] += 1.0f;
    forge_model_set_params(m, host);
}

/* ---- an HF directory written by hand -------------------------------------------------------------------- */

typedef struct {
    forge_st_entry e[96];
    char names[96][96];
    void *bufs[96];
    int n;
} st_builder;

/* Adds tensor `name` (rows, cols; cols 0 = 1-D) copied from src (rows x cols, or, transposed, cols x rows as forge
 * stores it), stored as dtype "F32" or "BF16". */
static void add(st_builder *b, const char *name, const float *src, int64_t rows, int64_t cols, int transposed,
                const char *dtype) {
    int64_t c = cols ? cols : 1;
    size_t n = (size_t)(rows * c);
    int bf16 = strcmp(dtype, "BF16") == 0;
    float *f = malloc(n * sizeof *f);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < c; k++) f[r * c + k] = transposed ? src[k * rows + r] : src[r * c + k];
    void *data = f;
    if (bf16) {
        forge_bf16 *h = malloc(n * sizeof *h);
        for (size_t i = 0; i < n; i++) h[i] = forge_bf16_from_f32(f[i]);
        free(f);
        data = h;
    }
    snprintf(b->names[b->n], sizeof b->names[b->n], "%s", name);
    forge_st_entry *e = &b->e[b->n];
    e->name = b->names[b->n];
    e->dtype = dtype;
    e->ndim = cols ? 2 : 1;
    e->shape[0] = rows;
    e->shape[1] = cols;
    e->data = data;
    e->bytes = n * (bf16 ? 2 : 4);
    b->bufs[b->n++] = data;
}

static void builder_free(st_builder *b) {
    for (int i = 0; i < b->n; i++) free(b->bufs[i]);
}

static const float *at(const forge_model *m, const float *host, const forge_tensor *t) {
    return host + ((const float *)t->data - m->param_data);
}

/* Writes dir/model.safetensors as transformers stores m's weights (host: m's parameters). skip: a tensor name left
 * out; extra: one more tensor, named so. */
static void write_hf_weights(const char *dir, const forge_model *m, const float *host, const char *dtype,
                             const char *skip, const char *extra) {
    const forge_model_config *c = &m->cfg;
    const int64_t C = c->d_model, H = c->ffn_hidden, V = c->vocab_size, HS = C / c->n_heads;
    const int64_t QR = c->n_heads * HS, KR = c->n_kv_heads * HS;
    st_builder *b = calloc(1, sizeof *b);
    char name[96];
    const int gpt2 = c->family == FORGE_FAMILY_GPT2;
#define ADD(fmt, t, rows, cols, tr)                              \
    do {                                                         \
        snprintf(name, sizeof name, fmt, l);                     \
        if (!skip || strcmp(skip, name) != 0)                    \
            add(b, name, at(m, host, t), rows, cols, tr, dtype); \
    } while (0)
#define ADDG(nm, t, rows, cols, tr)                                                    \
    do {                                                                               \
        if (!skip || strcmp(skip, nm) != 0) add(b, nm, at(m, host, t), rows, cols, tr, dtype); \
    } while (0)
    int l = 0;
    if (gpt2) {
        ADDG("transformer.wte.weight", m->wte, V, C, 0);
        ADDG("transformer.wpe.weight", m->wpe, c->context_length, C, 0);
        for (l = 0; l < c->n_layers; l++) {
            const forge_layer_params *L = &m->layers[l];
            ADD("transformer.h.%d.ln_1.weight", L->norm1_w, C, 0, 0);
            ADD("transformer.h.%d.ln_1.bias", L->norm1_b, C, 0, 0);
            ADD("transformer.h.%d.attn.c_attn.weight", L->qkv_w, C, 3 * C, 1); /* Conv1D: (in, out) */
            ADD("transformer.h.%d.attn.c_attn.bias", L->qkv_b, 3 * C, 0, 0);
            ADD("transformer.h.%d.attn.c_proj.weight", L->attn_proj_w, C, C, 1);
            ADD("transformer.h.%d.attn.c_proj.bias", L->attn_proj_b, C, 0, 0);
            ADD("transformer.h.%d.ln_2.weight", L->norm2_w, C, 0, 0);
            ADD("transformer.h.%d.ln_2.bias", L->norm2_b, C, 0, 0);
            ADD("transformer.h.%d.mlp.c_fc.weight", L->fc_w, C, H, 1);
            ADD("transformer.h.%d.mlp.c_fc.bias", L->fc_b, H, 0, 0);
            ADD("transformer.h.%d.mlp.c_proj.weight", L->mlp_proj_w, H, C, 1);
            ADD("transformer.h.%d.mlp.c_proj.bias", L->mlp_proj_b, C, 0, 0);
        }
        ADDG("transformer.ln_f.weight", m->normf_w, C, 0, 0);
        ADDG("transformer.ln_f.bias", m->normf_b, C, 0, 0);
    } else {
        ADDG("model.embed_tokens.weight", m->wte, V, C, 0);
        for (l = 0; l < c->n_layers; l++) {
            const forge_layer_params *L = &m->layers[l];
            const float *qkv = at(m, host, L->qkv_w); /* forge packs q, k, v rows; HF keeps three tensors */
            snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj.weight", l);
            add(b, name, qkv, QR, C, 0, dtype);
            snprintf(name, sizeof name, "model.layers.%d.self_attn.k_proj.weight", l);
            add(b, name, qkv + QR * C, KR, C, 0, dtype);
            snprintf(name, sizeof name, "model.layers.%d.self_attn.v_proj.weight", l);
            add(b, name, qkv + (QR + KR) * C, KR, C, 0, dtype);
            if (c->bias) {
                const float *qb = at(m, host, L->qkv_b);
                snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj.bias", l);
                add(b, name, qb, QR, 0, 0, dtype);
                snprintf(name, sizeof name, "model.layers.%d.self_attn.k_proj.bias", l);
                add(b, name, qb + QR, KR, 0, 0, dtype);
                snprintf(name, sizeof name, "model.layers.%d.self_attn.v_proj.bias", l);
                add(b, name, qb + QR + KR, KR, 0, 0, dtype);
                ADD("model.layers.%d.self_attn.o_proj.bias", L->attn_proj_b, C, 0, 0);
                ADD("model.layers.%d.mlp.gate_proj.bias", L->fc_b, H, 0, 0);
                ADD("model.layers.%d.mlp.up_proj.bias", L->up_b, H, 0, 0);
                ADD("model.layers.%d.mlp.down_proj.bias", L->mlp_proj_b, C, 0, 0);
            }
            ADD("model.layers.%d.input_layernorm.weight", L->norm1_w, C, 0, 0);
            ADD("model.layers.%d.self_attn.o_proj.weight", L->attn_proj_w, C, C, 0);
            ADD("model.layers.%d.post_attention_layernorm.weight", L->norm2_w, C, 0, 0);
            ADD("model.layers.%d.mlp.gate_proj.weight", L->fc_w, H, C, 0);
            ADD("model.layers.%d.mlp.up_proj.weight", L->up_w, H, C, 0);
            ADD("model.layers.%d.mlp.down_proj.weight", L->mlp_proj_w, C, H, 0);
        }
        ADDG("model.norm.weight", m->normf_w, C, 0, 0);
        if (!c->tied_embeddings) ADDG("lm_head.weight", m->lm_head, V, C, 0);
    }
    if (extra) add(b, extra, at(m, host, m->normf_w), C, 0, 0, dtype);
#undef ADD
#undef ADDG
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *k[] = {"format"}, *v[] = {"pt"};
    CHECK_OK(forge_safetensors_write(path, b->e, b->n, k, v, 1));
    builder_free(b);
    free(b);
}

static void write_text(const char *dir, const char *file, const char *text) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* config.json as transformers writes it for c (with keys forge ignores), %s-free so tests can edit it. */
static void hf_config_text(const forge_model_config *c, char *out, size_t cap) {
    if (c->family == FORGE_FAMILY_GPT2)
        snprintf(out, cap,
                 "{\n  \"_name_or_path\": \"\",\n  \"activation_function\": \"gelu_new\",\n"
                 "  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"attn_pdrop\": 0.1,\n  \"bos_token_id\": 50256,\n"
                 "  \"embd_pdrop\": 0.1,\n  \"eos_token_id\": 50256,\n  \"initializer_range\": 0.02,\n"
                 "  \"layer_norm_epsilon\": 1e-05,\n  \"model_type\": \"gpt2\",\n  \"n_embd\": %d,\n"
                 "  \"n_head\": %d,\n  \"n_inner\": null,\n  \"n_layer\": %d,\n  \"n_positions\": %d,\n"
                 "  \"reorder_and_upcast_attn\": false,\n  \"resid_pdrop\": 0.1,\n"
                 "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"scale_attn_weights\": true,\n"
                 "  \"summary_activation\": null,\n  \"summary_first_dropout\": 0.1,\n"
                 "  \"summary_proj_to_labels\": true,\n  \"summary_type\": \"cls_index\",\n"
                 "  \"summary_use_proj\": true,\n  \"torch_dtype\": \"float32\",\n"
                 "  \"transformers_version\": \"4.57.0\",\n  \"use_cache\": true,\n  \"vocab_size\": %d\n}\n",
                 c->d_model, c->n_heads, c->n_layers, c->context_length, c->vocab_size);
    else
        snprintf(out, cap,
                 "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"attention_bias\": %s,\n"
                 "  \"attention_dropout\": 0.0,\n  \"bos_token_id\": 1,\n  \"dtype\": \"float32\",\n"
                 "  \"eos_token_id\": 2,\n  \"head_dim\": %d,\n  \"hidden_act\": \"silu\",\n  \"hidden_size\": %d,\n"
                 "  \"initializer_range\": 0.02,\n  \"intermediate_size\": %d,\n  \"max_position_embeddings\": %d,\n"
                 "  \"mlp_bias\": %s,\n  \"model_type\": \"llama\",\n  \"num_attention_heads\": %d,\n"
                 "  \"num_hidden_layers\": %d,\n  \"num_key_value_heads\": %d,\n  \"pretraining_tp\": 1,\n"
                 "  \"rms_norm_eps\": 1e-06,\n  \"rope_parameters\": {\"rope_theta\": 500.0, \"rope_type\": "
                 "\"default\"},\n  \"tie_word_embeddings\": %s,\n  \"transformers_version\": \"5.0.0\",\n"
                 "  \"use_cache\": true,\n  \"vocab_size\": %d\n}\n",
                 c->bias ? "true" : "false", c->d_model / c->n_heads, c->d_model, c->ffn_hidden, c->context_length,
                 c->bias ? "true" : "false", c->n_heads, c->n_layers, c->n_kv_heads,
                 c->tied_embeddings ? "true" : "false", c->vocab_size);
}

/* Replaces the first `from` in text with `to` (text has room). */
static void edit(char *text, size_t cap, const char *from, const char *to) {
    char *p = strstr(text, from);
    if (!p) return;
    size_t fl = strlen(from), tl = strlen(to), rest = strlen(p + fl);
    if ((size_t)(p - text) + tl + rest + 1 > cap) return;
    memmove(p + tl, p + fl, rest + 1);
    memcpy(p, to, tl);
}

static int configs_equal(const forge_model_config *a, const forge_model_config *b) {
    return a->family == b->family && a->vocab_size == b->vocab_size && a->context_length == b->context_length &&
           a->d_model == b->d_model && a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->ffn_hidden == b->ffn_hidden && a->norm == b->norm &&
           a->norm_eps == b->norm_eps && a->positions == b->positions &&
           (a->positions != FORGE_POSITIONS_ROPE || a->rope_theta == b->rope_theta) &&
           a->activation == b->activation && a->bias == b->bias && a->tied_embeddings == b->tied_embeddings &&
           a->init_std == b->init_std;
}

/* ---- out ------------------------------------------------------------------------------------------------- */

static void test_config_out(void) {
    struct {
        int llama, bias, tied;
        const char *label;
    } cases[] = {
        {0, 1, 1, "config.json out: GPT-2 (tied) is written beside model.safetensors and maps back exactly"},
        {0, 1, 0, "config.json out: GPT-2 untied"},
        {1, 0, 0, "config.json out: Llama GQA untied"},
        {1, 1, 1, "config.json out: Llama with biases, tied"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TEST_CASE(cases[i].label);
        env e;
        CHECK(env_open(&e));
        forge_model_config c = small_config(cases[i].llama, cases[i].bias, cases[i].tied), back;
        forge_model *m = NULL;
        CHECK_OK(forge_model_create(&m, &c, e.pool, 1));
        const char *dir = test_tmpdir();
        if (m) CHECK_OK(forge_checkpoint_save(dir, m, NULL, NULL, NULL));
        char path[600];
        snprintf(path, sizeof path, "%s/config.json", dir);
        char *text = NULL;
        size_t len = 0;
        CHECK_OK(forge_read_file(path, &text, &len));
        if (text) {
            cJSON *root = cJSON_Parse(text);
            CHECK(root != NULL);
            const cJSON *mt = cJSON_GetObjectItem(root, "model_type");
            const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "architectures"), 0);
            CHECK(cJSON_IsString(mt) && strcmp(mt->valuestring, cases[i].llama ? "llama" : "gpt2") == 0);
            CHECK(cJSON_IsString(arch) &&
                  strcmp(arch->valuestring, cases[i].llama ? "LlamaForCausalLM" : "GPT2LMHeadModel") == 0);
            CHECK(cJSON_IsBool(cJSON_GetObjectItem(root, "tie_word_embeddings")));
            cJSON_Delete(root);
            CHECK_OK(forge_hf_config_parse(&back, text, len, path, "x"));
            CHECK_MSG(configs_equal(&c, &back), "config.json does not map back to the config");
        }
        free(text);
        forge_model_free(m);
        env_close(&e);
    }

    TEST_CASE("config.json out: a config without an HF equivalent gets none, and says why");
    forge_model_config c = small_config(0, 1, 1);
    c.norm = FORGE_NORM_RMSNORM;
    char why[256];
    CHECK(!forge_hf_expressible(&c, why, sizeof why));
    CHECK_MSG(strstr(why, "norm") && strstr(why, "GPT2LMHeadModel"), "why: %s", why);
    char *json = NULL;
    CHECK_ERR_MSG(forge_hf_config_to_json(&c, -1, &json), FORGE_ERR_UNSUPPORTED, "no Hugging Face equivalent",
                  "rmsnorm");
    c = small_config(1, 0, 0);
    c.positions = FORGE_POSITIONS_LEARNED;
    CHECK(!forge_hf_expressible(&c, why, sizeof why) && strstr(why, "RoPE"));
    env e;
    CHECK(env_open(&e));
    forge_model *m = NULL;
    CHECK_OK(forge_model_create(&m, &c, e.pool, 1));
    const char *dir = test_tmpdir();
    write_text(dir, "config.json", "{\"stale\": true}"); /* from an earlier save: must not survive */
    if (m) CHECK_OK(forge_checkpoint_save(dir, m, NULL, NULL, NULL));
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(access(path, F_OK) != 0);
    forge_model_config back;
    CHECK_OK(forge_checkpoint_read_config(dir, &back)); /* forge's own config still travels in the metadata */
    CHECK(configs_equal(&c, &back));
    forge_model_free(m);
    env_close(&e);
}

/* ---- in -------------------------------------------------------------------------------------------------- */

/* An HF directory for config c from a randomised forge model; returns its loss (and the model, kept). */
static double make_hf_dir(env *e, const forge_model_config *c, const char *dir, const char *dtype, forge_model **keep,
                          float **host_out) {
    forge_model *m = NULL;
    if (forge_model_create(&m, c, e->pool, 3) != FORGE_OK) return NAN;
    float *host = malloc(m->n_elements * sizeof *host);
    randomise(m, host);
    char cfg[4096];
    hf_config_text(c, cfg, sizeof cfg);
    if (c->family == FORGE_FAMILY_GPT2 && c->ffn_hidden != 4 * c->d_model) {
        char inner[64];
        snprintf(inner, sizeof inner, "\"n_inner\": %d", c->ffn_hidden);
        edit(cfg, sizeof cfg, "\"n_inner\": null", inner);
    }
    write_text(dir, "config.json", cfg);
    write_hf_weights(dir, m, host, dtype, NULL, NULL);
    double loss = model_loss(e, m);
    if (keep) *keep = m;
    else forge_model_free(m);
    if (host_out) *host_out = host;
    else free(host);
    return loss;
}

static void test_load_hf_dir(void) {
    struct {
        int llama, bias, tied;
        const char *label;
    } cases[] = {
        {0, 1, 1, "HF in: a GPT2LMHeadModel directory (Conv1D (in, out), tied) loads with the same loss"},
        {1, 0, 0, "HF in: a LlamaForCausalLM directory (q/k/v_proj, GQA, lm_head) loads with the same loss"},
        {1, 1, 1, "HF in: a Llama directory with attention and MLP biases, tied, loads with the same loss"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TEST_CASE(cases[i].label);
        env e;
        CHECK(env_open(&e));
        forge_model_config c = small_config(cases[i].llama, cases[i].bias, cases[i].tied), got;
        c.ffn_hidden = cases[i].llama ? 40 : 96;
        const char *dir = test_tmpdir();
        double want = make_hf_dir(&e, &c, dir, "F32", NULL, NULL);
        char resolved[1024];
        CHECK_OK(forge_checkpoint_resolve(dir, resolved, sizeof resolved));
        CHECK_OK(forge_checkpoint_read_config(dir, &got));
        CHECK_MSG(configs_equal(&c, &got), "the mapped config differs from the model's");
        forge_model *m = NULL;
        CHECK_OK(forge_model_create(&m, &got, e.pool, 99));
        if (m) CHECK_OK(forge_checkpoint_load_weights(dir, m));
        if (m && !test_case_failed()) {
            double loss = model_loss(&e, m);
            CHECK_MSG(loss == want, "loss %.9g after loading, %.9g before", loss, want);
        }
        forge_model_free(m);
        env_close(&e);
    }

    TEST_CASE("HF in: BF16 weights are widened to fp32 on load (exactly the bf16 values)");
    env e;
    CHECK(env_open(&e));
    forge_model_config c = small_config(1, 0, 0);
    const char *dir = test_tmpdir();
    forge_model *src = NULL;
    float *host = NULL;
    make_hf_dir(&e, &c, dir, "F32", &src, &host);
    if (src && host) {
        write_hf_weights(dir, src, host, "BF16", NULL, NULL);
        forge_model *m = NULL;
        CHECK_OK(forge_model_create(&m, &c, e.pool, 99));
        if (m) CHECK_OK(forge_checkpoint_load_weights(dir, m));
        float *got = malloc(src->n_elements * sizeof *got);
        if (m && got && forge_model_get_params(m, got) == FORGE_OK) {
            size_t bad = 0;
            for (size_t i = 0; i < src->n_elements; i++)
                bad += got[i] != forge_bf16_to_f32(forge_bf16_from_f32(host[i]));
            CHECK_MSG(bad == 0, "%zu of %zu values are not the bf16 ones", bad, src->n_elements);
        }
        free(got);
        forge_model_free(m);
    }
    forge_model_free(src);
    free(host);
    env_close(&e);

    TEST_CASE("HF in: F16 and BF16 conversions are exact (normal, subnormal, inf, sign)");
    const uint16_t f16[] = {0x3c00, 0xc000, 0x0001, 0x7c00, 0x8000, 0x3555};
    const float f16_want[] = {1.0f, -2.0f, 0x1p-24f, INFINITY, -0.0f, 0.333251953125f};
    const uint16_t bf16[] = {0x3f80, 0xc040};
    const float bf16_want[] = {1.0f, -3.0f};
    float out[6];
    CHECK_OK(forge_hf_to_f32(out, f16, 6, "F16"));
    for (int i = 0; i < 6; i++) CHECK_MSG(out[i] == f16_want[i] && signbit(out[i]) == signbit(f16_want[i]),
                                          "F16 %04x -> %g, expected %g", f16[i], out[i], f16_want[i]);
    CHECK_OK(forge_hf_to_f32(out, bf16, 2, "BF16"));
    CHECK(out[0] == bf16_want[0] && out[1] == bf16_want[1]);
    CHECK_ERR_MSG(forge_hf_to_f32(out, f16, 1, "F64"), FORGE_ERR_UNSUPPORTED, "F64", NULL);

    TEST_CASE("HF in: a base model's file (names without transformer./model.) and its mask buffers load");
    CHECK(env_open(&e));
    c = small_config(0, 1, 1);
    dir = test_tmpdir();
    src = NULL;
    host = NULL;
    double want = make_hf_dir(&e, &c, dir, "F32", &src, &host);
    if (src && host) {
        /* rename every tensor as GPT2Model saves it, and add the causal-mask buffer older versions saved */
        char path[600];
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        forge_safetensors *st = NULL;
        CHECK_OK(forge_safetensors_open(&st, path));
        int n = st ? forge_safetensors_count(st) : 0;
        forge_st_entry *es = calloc((size_t)n + 1, sizeof *es);
        static const float mask[4] = {1, 0, 1, 1};
        for (int i = 0; i < n; i++) {
            es[i] = *forge_safetensors_entry(st, i);
            es[i].name += strlen("transformer.");
        }
        es[n] = (forge_st_entry){.name = "h.0.attn.bias", .dtype = "F32", .ndim = 2, .shape = {2, 2}, .data = mask,
                                 .bytes = sizeof mask};
        char base[600];
        snprintf(base, sizeof base, "%s/base.safetensors", dir);
        if (st) CHECK_OK(forge_safetensors_write(base, es, n + 1, NULL, NULL, 0));
        forge_safetensors_close(st);
        free(es);
        rename(base, path);
        forge_model *m = NULL;
        CHECK_OK(forge_model_create(&m, &c, e.pool, 99));
        if (m) CHECK_OK(forge_checkpoint_load_weights(dir, m));
        if (m && !test_case_failed()) CHECK(model_loss(&e, m) == want);
        forge_model_free(m);
    }
    forge_model_free(src);
    free(host);
    env_close(&e);
}

static void test_hf_errors(void) {
    env e;
    CHECK(env_open(&e));
    forge_model_config c = small_config(0, 1, 1), got;
    char cfg[4096], path[600];
    struct {
        const char *from, *to, *n1, *n2;
        forge_status want;
        const char *label;
    } cfg_cases[] = {
        {"\"n_embd\"", "\"n_embed\"", "missing key \"n_embd\"", NULL, FORGE_ERR_CONFIG,
         "HF in: a missing config.json key is named with the file"},
        {"\"model_type\": \"gpt2\"", "\"model_type\": \"mistral\"", "model_type", "mistral", FORGE_ERR_UNSUPPORTED,
         "HF in: an unsupported model_type is refused, naming it"},
        {"[\"GPT2LMHeadModel\"]", "[\"GPT2ForSequenceClassification\"]", "architectures",
         "GPT2ForSequenceClassification", FORGE_ERR_UNSUPPORTED, "HF in: an unsupported architecture is refused"},
        {"\"gelu_new\"", "\"relu\"", "activation_function", "relu", FORGE_ERR_UNSUPPORTED,
         "HF in: an activation forge lacks is refused"},
        {"\"scale_attn_by_inverse_layer_idx\": false", "\"scale_attn_by_inverse_layer_idx\": true",
         "scale_attn_by_inverse_layer_idx", NULL, FORGE_ERR_UNSUPPORTED,
         "HF in: GPT-2's per-layer attention scaling is refused"},
        {"\"n_head\": 4", "\"n_head\": 5", "d_model", "n_heads", FORGE_ERR_CONFIG,
         "HF in: a config forge's validation rejects names the file"},
        {"\"vocab_size\": 37", "\"vocab_size\": \"37\"", "vocab_size", "integer", FORGE_ERR_CONFIG,
         "HF in: a mistyped value is named"},
    };
    for (size_t i = 0; i < sizeof cfg_cases / sizeof cfg_cases[0]; i++) {
        TEST_CASE(cfg_cases[i].label);
        const char *dir = test_tmpdir();
        make_hf_dir(&e, &c, dir, "F32", NULL, NULL);
        hf_config_text(&c, cfg, sizeof cfg);
        edit(cfg, sizeof cfg, cfg_cases[i].from, cfg_cases[i].to);
        write_text(dir, "config.json", cfg);
        CHECK_ERR_MSG(forge_checkpoint_read_config(dir, &got), cfg_cases[i].want, "config.json", cfg_cases[i].n1);
        if (cfg_cases[i].n2) CHECK_MSG(test_msg_has(cfg_cases[i].n2, NULL), "%s", forge_error_message());
    }

    forge_model_config l = small_config(1, 0, 0);
    struct {
        const char *from, *to, *n1, *n2;
        const char *label;
    } llama_cases[] = {
        {"\"rope_type\": \"default\"", "\"rope_type\": \"llama3\", \"factor\": 8.0", "rope_parameters", "llama3",
         "HF in: RoPE scaling is refused"},
        {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act", "silu",
         "HF in: a Llama activation other than silu is refused"},
        {"\"mlp_bias\": false", "\"mlp_bias\": true", "attention_bias", "mlp_bias",
         "HF in: attention_bias != mlp_bias is refused (forge has one bias flag)"},
        {"\"head_dim\": 6", "\"head_dim\": 8", "head_dim", NULL, "HF in: a head_dim other than hidden/heads is refused"},
    };
    for (size_t i = 0; i < sizeof llama_cases / sizeof llama_cases[0]; i++) {
        TEST_CASE(llama_cases[i].label);
        const char *dir = test_tmpdir();
        make_hf_dir(&e, &l, dir, "F32", NULL, NULL);
        hf_config_text(&l, cfg, sizeof cfg);
        edit(cfg, sizeof cfg, llama_cases[i].from, llama_cases[i].to);
        write_text(dir, "config.json", cfg);
        CHECK_ERR_MSG(forge_checkpoint_read_config(dir, &got), FORGE_ERR_UNSUPPORTED, "config.json", llama_cases[i].n1);
        if (llama_cases[i].n2) CHECK_MSG(test_msg_has(llama_cases[i].n2, NULL), "%s", forge_error_message());
    }

    TEST_CASE("HF in: config.json that is not JSON, or not an object, is named");
    const char *bad[] = {"{\"model_type\": \"gpt2\",", "[1, 2]", ""};
    for (int i = 0; i < 3; i++) {
        CHECK_ERR_MSG(forge_hf_config_parse(&got, bad[i], strlen(bad[i]), "x/config.json", "x"), FORGE_ERR_CONFIG,
                      "x/config.json", i == 1 ? "JSON object" : "not valid JSON");
    }

    TEST_CASE("HF in: a tensor of the wrong shape names the file, the tensor and both shapes");
    const char *dir = test_tmpdir();
    make_hf_dir(&e, &c, dir, "F32", NULL, NULL);
    hf_config_text(&c, cfg, sizeof cfg);
    edit(cfg, sizeof cfg, "\"n_inner\": null", "\"n_inner\": 100"); /* the file's c_fc is (24, 96) */
    write_text(dir, "config.json", cfg);
    CHECK_OK(forge_checkpoint_read_config(dir, &got));
    forge_model *m = NULL;
    CHECK_OK(forge_model_create(&m, &got, e.pool, 1));
    if (m) CHECK_ERR_MSG(forge_checkpoint_load_weights(dir, m), FORGE_ERR_DATA, "model.safetensors",
                         "transformer.h.0.mlp.c_fc.weight\" has shape (24, 96), expected (24, 100)");
    forge_model_free(m);

    TEST_CASE("HF in: a missing tensor, an extra tensor and an unsupported dtype are named");
    forge_model *src = NULL;
    float *host = NULL;
    make_hf_dir(&e, &c, dir, "F32", &src, &host);
    m = NULL;
    CHECK_OK(forge_model_create(&m, &c, e.pool, 1));
    if (src && m) {
        write_hf_weights(dir, src, host, "F32", "transformer.h.1.ln_2.bias", NULL);
        CHECK_ERR_MSG(forge_checkpoint_load_weights(dir, m), FORGE_ERR_DATA, "model.safetensors",
                      "no tensor \"transformer.h.1.ln_2.bias\"");
        write_hf_weights(dir, src, host, "F32", NULL, "score.weight");
        CHECK_ERR_MSG(forge_checkpoint_load_weights(dir, m), FORGE_ERR_DATA, "model.safetensors",
                      "tensor \"score.weight\" is no parameter");
        write_hf_weights(dir, src, host, "F32", NULL, "lm_head.weight"); /* a tied model's copy: ignored */
        CHECK_OK(forge_checkpoint_load_weights(dir, m));
        /* an F64 tensor: rewrite the file with the final norm's bias as F64 */
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        write_hf_weights(dir, src, host, "F32", "transformer.ln_f.bias", NULL);
        forge_safetensors *st = NULL;
        CHECK_OK(forge_safetensors_open(&st, path));
        int n = st ? forge_safetensors_count(st) : 0;
        forge_st_entry *es = calloc((size_t)n + 1, sizeof *es);
        double d[24] = {0};
        for (int i = 0; i < n; i++) es[i] = *forge_safetensors_entry(st, i);
        es[n] = (forge_st_entry){.name = "transformer.ln_f.bias", .dtype = "F64", .ndim = 1, .shape = {24},
                                 .data = d, .bytes = sizeof d};
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s/f64.safetensors", dir);
        if (st) CHECK_OK(forge_safetensors_write(tmp, es, n + 1, NULL, NULL, 0));
        forge_safetensors_close(st);
        free(es);
        rename(tmp, path);
        CHECK_ERR_MSG(forge_checkpoint_load_weights(dir, m), FORGE_ERR_UNSUPPORTED, "transformer.ln_f.bias", "F64");
    }
    forge_model_free(m);
    forge_model_free(src);
    free(host);

    TEST_CASE("HF in: no config.json, a sharded checkpoint and a pytorch_model.bin are refused clearly");
    dir = test_tmpdir();
    make_hf_dir(&e, &c, dir, "F32", NULL, NULL);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    CHECK_ERR_MSG(forge_checkpoint_read_config(dir, &got), FORGE_ERR_DATA, "forge_config", "config.json");
    char resolved[1024];
    dir = test_tmpdir();
    write_text(dir, "config.json", "{}");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {}}");
    CHECK_ERR_MSG(forge_checkpoint_resolve(dir, resolved, sizeof resolved), FORGE_ERR_UNSUPPORTED, "sharded",
                  "model.safetensors.index.json");
    dir = test_tmpdir();
    write_text(dir, "pytorch_model.bin", "x");
    CHECK_ERR_MSG(forge_checkpoint_resolve(dir, resolved, sizeof resolved), FORGE_ERR_UNSUPPORTED,
                  "pytorch_model.bin", "safe_serialization=True");
    /* a checkpoint's model.safetensors named directly is its directory; another file is refused as a file */
    dir = test_tmpdir();
    write_text(dir, "model.safetensors", "x");
    char file[1200];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    CHECK_OK(forge_checkpoint_resolve(file, resolved, sizeof resolved));
    CHECK_MSG(strcmp(resolved, dir) == 0, "resolved \"%s\", expected \"%s\"", resolved, dir);
    snprintf(file, sizeof file, "%s/pytorch_model.bin", test_tmpdir());
    FILE *pf = fopen(file, "w");
    if (pf) fclose(pf);
    CHECK_ERR_MSG(forge_checkpoint_resolve(file, resolved, sizeof resolved), FORGE_ERR_IO, "a file",
                  "checkpoint directory");
    env_close(&e);
}

/* ---- tokenizer and training ------------------------------------------------------------------------------ */

static const char *tiny_data(void) {
    static char dir[512];
    if (dir[0]) return dir;
    snprintf(dir, sizeof dir, "%s", test_tmpdir());
    char text[600];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    FILE *out = fopen(text, "w");
    if (!out) return NULL;
    for (int i = 0; i < 400; i++)
        fprintf(out, "The hen %d pecked at the corn and the fox watched.\n<|endoftext|>\n", i % 13);
    fclose(out);
    return test_tokenized_dir(dir, text, 300) ? dir : NULL;
}

static void test_tokenizer_and_init(void) {
    TEST_CASE("HF in: vocab.json + merges.txt (HF's GPT-2 tokenizer names) load as encoder.json + vocab.bpe");
    const char *data = tiny_data();
    CHECK_MSG(data != NULL, "test data: %s", forge_error_message());
    if (!data) return;
    const char *dir = test_tmpdir();
    char from[700], to[700];
    snprintf(from, sizeof from, "%s/encoder.json", data);
    snprintf(to, sizeof to, "%s/vocab.json", dir);
    char *a = NULL, *b = NULL;
    size_t al = 0, bl = 0;
    CHECK_OK(forge_read_file(from, &a, &al));
    snprintf(from, sizeof from, "%s/vocab.bpe", data);
    CHECK_OK(forge_read_file(from, &b, &bl));
    if (a && b) {
        write_text(dir, "vocab.json", a);
        write_text(dir, "merges.txt", b);
    }
    free(a);
    free(b);
    forge_tokenizer *t1 = NULL, *t2 = NULL;
    CHECK_OK(forge_tokenizer_load(&t1, data));
    CHECK_OK(forge_tokenizer_load(&t2, dir));
    if (t1 && t2) {
        CHECK(forge_tokenizer_vocab_size(t1) == forge_tokenizer_vocab_size(t2));
        int32_t *i1 = NULL, *i2 = NULL;
        size_t n1 = 0, n2 = 0;
        const char *s = "The hen pecked at the fox.";
        CHECK_OK(forge_tokenizer_encode(t1, s, strlen(s), 0, &i1, &n1));
        CHECK_OK(forge_tokenizer_encode(t2, s, strlen(s), 0, &i2, &n2));
        CHECK(n1 == n2 && n1 > 0 && memcmp(i1, i2, n1 * sizeof *i1) == 0);
        free(i1);
        free(i2);
    }
    forge_tokenizer_free(t1);
    forge_tokenizer_free(t2);

    TEST_CASE("sample --ids: the prompt's ids on one line, the greedy new ids on the next");
    {
        env ge;
        CHECK(env_open(&ge));
        forge_model_config gc = small_config(0, 1, 1);
        gc.vocab_size = 320;
        forge_model *gm = NULL;
        forge_tokenizer *tok = NULL;
        CHECK_OK(forge_model_create(&gm, &gc, ge.pool, 8));
        CHECK_OK(forge_tokenizer_load(&tok, data));
        char *buf = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&buf, &len);
        forge_generate_options go = {.max_tokens = 4, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 1,
                                     .stop_at_eot = 1, .print_ids = 1};
        const char *prompt = "The hen";
        if (gm && tok && mem) CHECK_OK(forge_generate(gm, ge.tape, tok, prompt, &go, mem, NULL));
        if (mem) fclose(mem);
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok) CHECK_OK(forge_tokenizer_encode(tok, prompt, strlen(prompt), 1, &ids, &n));
        char want[256] = "";
        for (size_t i = 0; i < n; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", i ? " " : "", (int)ids[i]);
        strcat(want, "\n");
        CHECK_MSG(buf && strncmp(buf, want, strlen(want)) == 0, "prompt line \"%s\", expected \"%s\"",
                  buf ? buf : "", want);
        int news = 0;
        const char *line2 = buf ? strchr(buf, '\n') : NULL;
        for (const char *q = line2 ? line2 + 1 : ""; *q && *q != '\n';) {
            char *end;
            long id = strtol(q, &end, 10);
            CHECK(end != q && id >= 0 && id < forge_tokenizer_eot(tok));
            if (end == q) break;
            news++;
            q = end + (*end == ' ');
        }
        CHECK(news <= 4 && line2 && buf[len - 1] == '\n');
        free(ids);
        free(buf);
        forge_tokenizer_free(tok);
        forge_model_free(gm);
        env_close(&ge);
    }

    TEST_CASE("train --init DIR (an HF directory): a new run starts from its weights; --resume with it is refused");
    env e;
    CHECK(env_open(&e));
    forge_model_config c = small_config(1, 0, 0);
    c.vocab_size = 320;
    c.context_length = 16;
    const char *hf = test_tmpdir();
    forge_model *src = NULL;
    float *host = NULL;
    make_hf_dir(&e, &c, hf, "F32", &src, &host);
    forge_train_options o;
    forge_train_options_default(&o);
    o.init = hf;
    o.data_dir = data;
    o.out_dir = test_tmpdir();
    o.batch_size = 2;
    o.seq_len = 16;
    o.steps = 1;
    o.lr = 0.0f; /* AdamW with lr 0 (decoupled decay included) leaves the weights as loaded */
    o.eval_every = 0;
    o.quiet = 1;
    o.runtime.threads = 2;
    FILE *devnull = fopen("/dev/null", "w");
    o.progress = devnull;
    forge_train_result r;
    CHECK_OK(forge_train(&o, &r));
    CHECK(r.steps_done == 1);
    forge_model *m = NULL;
    forge_model_config got;
    CHECK_OK(forge_checkpoint_read_config(r.last_checkpoint, &got));
    CHECK(configs_equal(&c, &got));
    CHECK_OK(forge_model_create(&m, &got, e.pool, 5));
    if (m) CHECK_OK(forge_checkpoint_load_weights(r.last_checkpoint, m));
    float *after = src ? malloc(src->n_elements * sizeof *after) : NULL;
    if (m && after && forge_model_get_params(m, after) == FORGE_OK)
        CHECK_MSG(memcmp(after, host, src->n_elements * sizeof *after) == 0,
                  "the checkpoint of an lr-0 run from --init differs from the HF weights");
    char path[1300];
    snprintf(path, sizeof path, "%s/config.json", r.last_checkpoint);
    CHECK_MSG(access(path, F_OK) == 0, "the fine-tuned checkpoint has no config.json");
    free(after);
    forge_model_free(m);
    forge_model_free(src);
    free(host);
    o.resume = o.out_dir;
    o.out_dir = test_tmpdir();
    CHECK_ERR_MSG(forge_train(&o, &r), FORGE_ERR_ARG, "--resume", "--init");
    if (devnull) fclose(devnull);
    env_close(&e);
}

void suite_hf(void) {
    test_config_out();
    test_load_hf_dir();
    test_hf_errors();
    test_tokenizer_and_init();
}
