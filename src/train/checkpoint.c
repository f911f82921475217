/* checkpoint.c: safetensors checkpoints under Hugging Face names. */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/fs.h"
#include "../model/hf.h"
#include "../model/safetensors.h"

#define CKPT_MODEL_FILE "model.safetensors"
#define CKPT_STATE_FILE "state.safetensors"
#define CKPT_HF_CONFIG "config.json"

/* Llama stores q, k and v separately: the k and v names replace "q_proj". */
static void qkv_name(const char *q_name, const char *which, char *out, size_t cap) {
    const char *at = strstr(q_name, "q_proj");
    if (!at) {
        snprintf(out, cap, "%s", q_name);
        return;
    }
    snprintf(out, cap, "%.*s%s%s", (int)(at - q_name), q_name, which, at + strlen("q_proj"));
}

/* The HF tensors one forge parameter becomes: up to three (q, k, v). */
typedef struct {
    int n;
    char name[3][128];
    int ndim;
    int64_t shape[3][2];
    size_t offset[3]; /* element offset inside the parameter, for row splits */
} hf_layout;

static void param_layout(const forge_model *m, const forge_param *p, hf_layout *L) {
    const forge_tensor *t = p->t;
    memset(L, 0, sizeof *L);
    L->ndim = t->ndim;
    if (p->export_kind == FORGE_EXPORT_QKV) {
        int HS = m->cfg.d_model / m->cfg.n_heads;
        int64_t rows[3] = {(int64_t)m->cfg.n_heads * HS, (int64_t)m->cfg.n_kv_heads * HS,
                           (int64_t)m->cfg.n_kv_heads * HS};
        const char *which[3] = {"q_proj", "k_proj", "v_proj"};
        int64_t cols = t->ndim > 1 ? t->shape[1] : 1;
        size_t off = 0;
        L->n = 3;
        for (int i = 0; i < 3; i++) {
            qkv_name(p->name, which[i], L->name[i], sizeof L->name[i]);
            L->shape[i][0] = rows[i];
            L->shape[i][1] = cols;
            L->offset[i] = off;
            off += (size_t)(rows[i] * cols);
        }
        return;
    }
    L->n = 1;
    snprintf(L->name[0], sizeof L->name[0], "%s", p->name);
    if (p->export_kind == FORGE_EXPORT_TRANSPOSED && t->ndim == 2) {
        L->shape[0][0] = t->shape[1];
        L->shape[0][1] = t->shape[0];
    } else {
        L->shape[0][0] = t->shape[0];
        L->shape[0][1] = t->ndim > 1 ? t->shape[1] : 1;
    }
}

static void transpose(float *dst, const float *src, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

static int mkdir_one(const char *dir) { return mkdir(dir, 0755) == 0 || errno == EEXIST ? 0 : -1; }

forge_status forge_checkpoint_write_values(const char *path, const forge_model *m, const float *values) {
    size_t n = m->n_elements;
    float *scratch = malloc(n * sizeof(float)); /* transposed copies, same total size */
    forge_st_entry *entries = calloc((size_t)(3 * m->n_params), sizeof *entries);
    hf_layout *layouts = calloc((size_t)m->n_params, sizeof *layouts);
    char *config_json = forge_config_to_json(&m->cfg);
    forge_status s = FORGE_OK;
    if (!scratch || !entries || !layouts || !config_json)
        s = forge_error(FORGE_ERR_OOM, "checkpoint: out of host memory for %zu parameters", n);
    int ne = 0;
    for (int i = 0; s == FORGE_OK && i < m->n_params; i++) {
        const forge_param *p = &m->params[i];
        hf_layout *L = &layouts[i];
        param_layout(m, p, L);
        const float *src = values + p->offset;
        if (p->export_kind == FORGE_EXPORT_TRANSPOSED && p->t->ndim == 2) {
            transpose(scratch + p->offset, src, p->t->shape[0], p->t->shape[1]);
            src = scratch + p->offset;
        }
        for (int k = 0; k < L->n; k++) {
            forge_st_entry *e = &entries[ne++];
            e->name = L->name[k];
            e->dtype = "F32";
            e->ndim = L->ndim;
            e->shape[0] = L->shape[k][0];
            e->shape[1] = L->shape[k][1];
            e->data = src + L->offset[k];
            e->bytes = (size_t)(L->shape[k][0] * (L->ndim > 1 ? L->shape[k][1] : 1)) * sizeof(float);
        }
    }
    if (s == FORGE_OK) {
        const char *keys[] = {"format", "forge_config"};
        const char *vals[] = {"pt", config_json};
        s = forge_safetensors_write(path, entries, ne, keys, vals, 2);
    }
    free(scratch);
    free(entries);
    free(layouts);
    free(config_json);
    return s;
}

/* The HF tensor holding flat element `index` of the parameter block, and that tensor's range. */
static void hf_tensor_at(const forge_model *m, size_t index, char *name, size_t cap, size_t *begin,
                         size_t *end) {
    snprintf(name, cap, "?");
    *begin = *end = index;
    for (int i = 0; i < m->n_params; i++) {
        const forge_param *p = &m->params[i];
        if (index < p->offset || index >= p->offset + p->t->numel) continue;
        hf_layout L;
        param_layout(m, p, &L);
        *begin = p->offset;
        *end = p->offset + p->t->numel;
        snprintf(name, cap, "%s", L.name[0]);
        for (int k = 0; k < L.n && L.n > 1; k++) {
            size_t b = p->offset + L.offset[k], e = b + (size_t)(L.shape[k][0] * L.shape[k][1]);
            if (index >= b && index < e) {
                snprintf(name, cap, "%s", L.name[k]);
                *begin = b;
                *end = e;
            }
        }
        return;
    }
}

static size_t count_bad(const unsigned char *bytes, size_t begin, size_t end, int nonnegative,
                        size_t *first) {
    size_t bad = 0;
    *first = end;
    for (size_t i = begin; i < end; i++) {
        float x;
        memcpy(&x, bytes + i * sizeof(float), sizeof x); /* a file's data need not be aligned */
        if (!isfinite(x) || (nonnegative && x < 0.0f)) {
            if (!bad) *first = i;
            bad++;
        }
    }
    return bad;
}

size_t forge_checkpoint_find_nonfinite(const forge_model *m, const void *values, int nonnegative, char *first,
                                       size_t cap, size_t *in_first) {
    size_t at, begin, end;
    size_t total = count_bad(values, 0, m->n_elements, nonnegative, &at);
    if (cap) first[0] = '\0';
    if (in_first) *in_first = 0;
    if (total) {
        hf_tensor_at(m, at, first, cap, &begin, &end);
        size_t dummy;
        if (in_first) *in_first = count_bad(values, begin, end, nonnegative, &dummy);
    }
    return total;
}

/* FORGE_ERR_NUMERIC when values (laid out like the parameters) hold a non-finite value. */
static forge_status check_values(const forge_model *m, const float *values, const char *what, const char *dir,
                                 int nonnegative) {
    char first[160];
    size_t there;
    size_t bad = forge_checkpoint_find_nonfinite(m, values, nonnegative, first, sizeof first, &there);
    if (!bad) return FORGE_OK;
    return forge_error(FORGE_ERR_NUMERIC,
                       "checkpoint %s not written: %s hold %zu %s values, the first in \"%s\" (%zu of them there)",
                       dir, what, bad, nonnegative ? "non-finite or negative" : "non-finite", first, there);
}

/* fsync a file that was written with stdio and closed (the tokenizer's). */
static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

/* The tokenizer's files go to dir/.tokenizer.tmp/ first, then each is renamed into dir. */
static forge_status save_tokenizer(const char *dir, const forge_tokenizer *tok) {
    static const char *files[] = {"encoder.json", "vocab.bpe"};
    char tmp_dir[1200], from[1300], to[1300];
    snprintf(tmp_dir, sizeof tmp_dir, "%s/.tokenizer.tmp", dir);
    forge_status s = forge_tokenizer_save(tok, tmp_dir);
    for (size_t i = 0; s == FORGE_OK && i < sizeof files / sizeof files[0]; i++) {
        snprintf(from, sizeof from, "%s/%s", tmp_dir, files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        if (fsync_path(from) != 0 || rename(from, to) != 0)
            s = forge_error(FORGE_ERR_IO, "cannot move %s to %s: %s", from, to, strerror(errno));
    }
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(from, sizeof from, "%s/%s", tmp_dir, files[i]);
        unlink(from);
    }
    rmdir(tmp_dir);
    return s;
}

/* dir/config.json in Hugging Face's schema, beside model.safetensors, so from_pretrained(dir) loads the checkpoint
 * (model/hf.h); written through a temporary name like every other file. A config with no HF equivalent gets none
 * (and a stale one from an earlier save is removed): the CLI says why when the run starts. */
static forge_status save_hf_config(const char *dir, const forge_model_config *cfg, const forge_tokenizer *tok) {
    char path[1200], tmp[1300];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_HF_CONFIG);
    if (!forge_hf_expressible(cfg, NULL, 0)) {
        if (unlink(path) != 0 && errno != ENOENT)
            return forge_error(FORGE_ERR_IO, "cannot remove the stale %s: %s", path, strerror(errno));
        return FORGE_OK;
    }
    char *json = NULL;
    FORGE_TRY(forge_hf_config_to_json(cfg, tok ? forge_tokenizer_eot(tok) : -1, &json));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL;
    if (ok) ok = fputs(json, f) >= 0 && fputc('\n', f) != EOF;
    if (f) ok = fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
    if (f) ok = fclose(f) == 0 && ok;
    free(json);
    if (!ok || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return forge_error(FORGE_ERR_IO, "cannot write %s: %s", path, strerror(err));
    }
    return FORGE_OK;
}

/* The run settings' metadata keys, in this order (run_settings_meta writes them, forge_checkpoint_read_settings
 * reads them). Floats are written with 9 significant digits: they read back to the same float. */
#define RUN_KEYS 17
static const char *const RUN_KEY_NAMES[RUN_KEYS] = {
    "batch_size", "seq_len",      "tokens_per_step", "lr",         "warmup_frac",      "min_lr_ratio",
    "weight_decay", "grad_clip",  "beta1",           "beta2",      "eps",              "eval_every",
    "eval_batches", "ckpt_every", "keep_checkpoints", "early_stop", "data_dir"};

static int run_settings_meta(const forge_run_settings *r, const char **keys, const char **vals, char (*buf)[1100]) {
    const float f[8] = {r->lr, r->warmup_frac, r->min_lr_ratio, r->weight_decay, r->grad_clip, r->beta1, r->beta2,
                        r->eps};
    snprintf(buf[0], sizeof buf[0], "%d", r->batch_size);
    snprintf(buf[1], sizeof buf[1], "%d", r->seq_len);
    snprintf(buf[2], sizeof buf[2], "%ld", r->tokens_per_step);
    for (int i = 0; i < 8; i++) snprintf(buf[3 + i], sizeof buf[3 + i], "%.9g", (double)f[i]);
    const int counts[5] = {r->eval_every, r->eval_batches, r->ckpt_every, r->keep_checkpoints, r->early_stop};
    for (int i = 0; i < 5; i++) snprintf(buf[11 + i], sizeof buf[11 + i], "%d", counts[i]);
    snprintf(buf[16], sizeof buf[16], "%s", r->data_dir);
    for (int i = 0; i < RUN_KEYS; i++) keys[i] = RUN_KEY_NAMES[i], vals[i] = buf[i];
    return RUN_KEYS;
}

forge_status forge_checkpoint_save(const char *dir, const forge_model *m, const forge_optimizer *opt,
                                   const forge_train_state *state, const forge_tokenizer *tok) {
    size_t n = m->n_elements;
    float *host = malloc(n * sizeof(float));
    float *host2 = malloc(n * sizeof(float));
    int with_state = opt && state;
    forge_status s = FORGE_OK;
    if (!host || !host2) s = forge_error(FORGE_ERR_OOM, "checkpoint: out of host memory for %zu parameters", n);
    /* Nothing is written until every value is known to be finite: the weights, then each moment
     * (copied into host2 one after the other, and again for writing, so the host holds two
     * blocks as before). */
    if (s == FORGE_OK) s = forge_model_get_params(m, host);
    if (s == FORGE_OK) s = check_values(m, host, "the weights", dir, 0);
    if (s == FORGE_OK && with_state) s = forge_optimizer_get_moment(opt, 0, host2);
    if (s == FORGE_OK && with_state) s = check_values(m, host2, "the AdamW first moments (adamw.m)", dir, 0);
    if (s == FORGE_OK && with_state) s = forge_optimizer_get_moment(opt, 1, host2);
    if (s == FORGE_OK && with_state)
        s = check_values(m, host2, "the AdamW second moments (adamw.v)", dir, 1);
    if (s == FORGE_OK && mkdir_one(dir) != 0)
        s = forge_error(FORGE_ERR_IO, "checkpoint: cannot create directory %s: %s", dir, strerror(errno));
    /* state.safetensors last: a directory holding it (and model.safetensors) is complete */
    if (s == FORGE_OK && tok) s = save_tokenizer(dir, tok);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_MODEL_FILE);
    if (s == FORGE_OK) s = forge_checkpoint_write_values(path, m, host);
    if (s == FORGE_OK) s = save_hf_config(dir, &m->cfg, tok);
    if (s == FORGE_OK && with_state) {
        s = forge_optimizer_get_state(opt, host, host2);
        char step[32], total[32], batches[32], seed[32], seen[64], ostep[32];
        snprintf(step, sizeof step, "%d", state->step);
        snprintf(total, sizeof total, "%d", state->total_steps);
        snprintf(batches, sizeof batches, "%" PRIu64, state->loader_batches);
        snprintf(seed, sizeof seed, "%" PRIu64, state->seed);
        snprintf(seen, sizeof seen, "%.17g", state->tokens_seen);
        snprintf(ostep, sizeof ostep, "%d", opt->step);
        const char *keys[7 + RUN_KEYS] = {"step", "total_steps", "loader_batches", "seed", "tokens_seen", "adamw_step"};
        const char *vals[7 + RUN_KEYS] = {step, total, batches, seed, seen, ostep};
        int n_keys = 6;
        if (state->precision[0]) keys[n_keys] = "precision", vals[n_keys++] = state->precision;
        char run_vals[RUN_KEYS][1100];
        if (state->run.recorded) n_keys += run_settings_meta(&state->run, keys + n_keys, vals + n_keys, run_vals);
        forge_st_entry st[2] = {
            {.name = "adamw.m", .dtype = "F32", .ndim = 1, .shape = {(int64_t)n}, .data = host, .bytes = n * 4},
            {.name = "adamw.v", .dtype = "F32", .ndim = 1, .shape = {(int64_t)n}, .data = host2, .bytes = n * 4},
        };
        snprintf(path, sizeof path, "%s/%s", dir, CKPT_STATE_FILE);
        if (s == FORGE_OK) s = forge_safetensors_write(path, st, 2, keys, vals, n_keys);
    }
    free(host);
    free(host2);
    if (s == FORGE_ERR_NUMERIC) return s; /* the message names the directory already */
    if (s != FORGE_OK) return forge_error_context(s, "saving checkpoint %s: ", dir);
    return FORGE_OK;
}

static void model_file(const char *path, char *out, size_t cap) {
    size_t len = strlen(path);
    if (len > 12 && strcmp(path + len - 12, ".safetensors") == 0)
        snprintf(out, cap, "%s", path);
    else
        snprintf(out, cap, "%s/%s", path, CKPT_MODEL_FILE);
}

/* The directory holding a model file, and its last component (a config name for an HF directory). */
static void file_dir(const char *file, char *dir, size_t cap, const char **base) {
    snprintf(dir, cap, "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, cap, ".");
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = '\0';
    const char *b = strrchr(dir, '/');
    *base = b ? b + 1 : dir;
    if (strcmp(*base, ".") == 0 || strcmp(*base, "..") == 0 || !(*base)[0]) *base = "hf-model";
}

/* A directory written by Hugging Face's save_pretrained: its config.json, mapped to forge's (model/hf.h). */
static forge_status read_hf_config(const char *file, forge_model_config *cfg) {
    char dir[1200], hf[1300];
    const char *base;
    file_dir(file, dir, sizeof dir, &base);
    snprintf(hf, sizeof hf, "%s/%s", dir, CKPT_HF_CONFIG);
    if (access(hf, F_OK) != 0)
        return forge_error(FORGE_ERR_DATA,
                           "%s: no \"forge_config\" in the metadata and no %s beside it: expected a forge checkpoint "
                           "or a Hugging Face save_pretrained directory (config.json + model.safetensors)",
                           file, hf);
    char *text = NULL;
    size_t len = 0;
    FORGE_TRY(forge_read_file(hf, &text, &len));
    forge_status s = forge_hf_config_parse(cfg, text, len, hf, base);
    free(text);
    return s;
}

forge_status forge_checkpoint_read_config(const char *path, forge_model_config *cfg) {
    char file[1200];
    model_file(path, file, sizeof file);
    forge_safetensors *st;
    FORGE_TRY(forge_safetensors_open(&st, file));
    const char *json = forge_safetensors_meta(st, "forge_config");
    char label[1300]; /* an error in the embedded config names the file and the metadata key holding it */
    snprintf(label, sizeof label, "%s (metadata \"forge_config\")", file);
    forge_status s = json ? forge_config_parse(cfg, json, label) : read_hf_config(file, cfg);
    if (json && s == FORGE_ERR_CONFIG) s = FORGE_ERR_DATA; /* a damaged checkpoint, not a config the user wrote */
    forge_safetensors_close(st);
    return s;
}

/* The tensor a file stores under an HF name: the name itself or, in a base model's file (GPT2Model, LlamaModel,
 * as some hub repositories hold them), the name without its "transformer." / "model." prefix. */
static const forge_st_entry *find_hf_tensor(const forge_safetensors *st, const char *name) {
    const forge_st_entry *e = forge_safetensors_find(st, name);
    if (e) return e;
    if (strncmp(name, "transformer.", 12) == 0) return forge_safetensors_find(st, name + 12);
    if (strncmp(name, "model.", 6) == 0) return forge_safetensors_find(st, name + 6);
    return NULL;
}

/* Tensors an HF file may hold that are no forge parameter and no learned value: GPT-2's causal-mask buffers
 * (older transformers saved them), Llama's RoPE frequencies, and a tied model's lm_head.weight (the embedding). */
static int ignorable_tensor(const char *name, int tied) {
    static const char *const suffixes[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t k = strlen(suffixes[i]);
        if (n >= k && strcmp(name + n - k, suffixes[i]) == 0) return 1;
    }
    return tied && strcmp(name, "lm_head.weight") == 0;
}

/* Copies one file tensor (F32, BF16 or F16; the file's data need not be aligned) into dst, widened to fp32 and,
 * for a GPT-2 Conv1D weight stored (in, out), transposed to forge's (out, in). */
static forge_status load_tensor(const forge_safetensors *st, const forge_st_entry *e, int transposed, int64_t rows,
                                int64_t cols, float *dst) {
    const size_t n = (size_t)rows * (size_t)cols;
    if (strcmp(e->dtype, "F32") != 0 && strcmp(e->dtype, "BF16") != 0 && strcmp(e->dtype, "F16") != 0)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: tensor \"%s\" has dtype %s: expected F32, BF16 or F16 (widened to fp32 on load)",
                           forge_safetensors_path(st), e->name, e->dtype);
    if (!transposed) return forge_hf_to_f32(dst, e->data, n, e->dtype);
    float *tmp = malloc(n * sizeof *tmp + 1);
    if (!tmp) return forge_error(FORGE_ERR_OOM, "checkpoint: out of host memory for tensor \"%s\"", e->name);
    forge_status s = forge_hf_to_f32(tmp, e->data, n, e->dtype);
    if (s == FORGE_OK) transpose(dst, tmp, rows, cols);
    free(tmp);
    return s;
}

forge_status forge_checkpoint_load_weights(const char *path, forge_model *m) {
    char file[1200];
    model_file(path, file, sizeof file);
    forge_safetensors *st;
    FORGE_TRY(forge_safetensors_open(&st, file));
    const int count = forge_safetensors_count(st);
    float *host = malloc(m->n_elements * sizeof(float));
    char *used = calloc((size_t)count + 1, 1);
    forge_status s = host && used ? FORGE_OK : forge_error(FORGE_ERR_OOM, "checkpoint: out of host memory");
    for (int i = 0; s == FORGE_OK && i < m->n_params; i++) {
        const forge_param *p = &m->params[i];
        hf_layout L;
        param_layout(m, p, &L);
        for (int k = 0; s == FORGE_OK && k < L.n; k++) {
            const forge_st_entry *e = find_hf_tensor(st, L.name[k]);
            /* get() checks the shape, and words the error for a missing tensor */
            s = forge_safetensors_get(st, e ? e->name : L.name[k], NULL, L.ndim, L.shape[k], &e);
            if (s != FORGE_OK) break;
            used[e - forge_safetensors_entry(st, 0)] = 1;
            int transposed = p->export_kind == FORGE_EXPORT_TRANSPOSED && L.ndim == 2;
            s = load_tensor(st, e, transposed, L.shape[k][0], L.ndim > 1 ? L.shape[k][1] : 1,
                            host + p->offset + L.offset[k]);
        }
    }
    /* A tensor that fits nowhere means the file is another model than the config describes (a classification
     * head, a different architecture): loading the rest would silently drop weights. */
    for (int i = 0; s == FORGE_OK && i < count; i++) {
        const forge_st_entry *e = forge_safetensors_entry(st, i);
        if (!used[i] && !ignorable_tensor(e->name, m->cfg.tied_embeddings))
            s = forge_error(FORGE_ERR_DATA,
                            "%s: tensor \"%s\" is no parameter of the model its config describes (%s, family %s, %d "
                            "layers): expected only that model's tensors",
                            file, e->name, m->cfg.name, forge_family_name(m->cfg.family), m->cfg.n_layers);
    }
    if (s == FORGE_OK) {
        char first[160];
        size_t there, bad = forge_checkpoint_find_nonfinite(m, host, 0, first, sizeof first, &there);
        if (bad)
            s = forge_error(FORGE_ERR_DATA,
                            "%s: %zu non-finite weights, the first in \"%s\" (%zu of them there); forge never "
                            "writes such a checkpoint: expected finite values",
                            file, bad, first, there);
    }
    if (s == FORGE_OK) s = forge_model_set_params(m, host);
    free(host);
    free(used);
    forge_safetensors_close(st);
    return s;
}

/* An unsigned decimal integer in [0, max]: digits only (strtoull would take "-1" as 2^64 - 1). */
static forge_status meta_uint(const forge_safetensors *st, const char *key, uint64_t max, uint64_t *out) {
    const char *v = forge_safetensors_meta(st, key);
    if (!v) return forge_error(FORGE_ERR_DATA, "%s: metadata has no \"%s\"", forge_safetensors_path(st), key);
    uint64_t x = 0;
    int ok = v[0] != '\0' && strlen(v) <= 20;
    for (const char *p = v; ok && *p; p++) {
        if (*p < '0' || *p > '9' || x > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) ok = 0;
        else x = x * 10 + (uint64_t)(*p - '0');
    }
    if (!ok || x > max)
        return forge_error(FORGE_ERR_DATA, "%s: metadata \"%s\" = \"%s\": expected an integer in [0, %" PRIu64 "]",
                           forge_safetensors_path(st), key, v, max);
    *out = x;
    return FORGE_OK;
}

/* The moments must be finite (and v >= 0): a bad one turns every weight it touches into NaN at the first step. */
static forge_status check_moment(const forge_safetensors *st, const forge_optimizer *opt, const forge_st_entry *e,
                                 int nonnegative) {
    char first[160];
    size_t there, bad = forge_checkpoint_find_nonfinite(opt->model, e->data, nonnegative, first, sizeof first,
                                                        &there);
    if (!bad) return FORGE_OK;
    return forge_error(FORGE_ERR_DATA,
                       "%s: tensor \"%s\" holds %zu %s values, the first in the slice of \"%s\" (%zu of them "
                       "there): expected finite%s AdamW moments",
                       forge_safetensors_path(st), e->name, bad, nonnegative ? "non-finite or negative" : "non-finite",
                       first, there, nonnegative ? ", non-negative" : "");
}

static forge_status meta_precision(const forge_safetensors *st, char *out, size_t cap) {
    const char *p = forge_safetensors_meta(st, "precision");
    if (!p) p = "";
    if (*p && strcmp(p, "fp32") != 0 && strcmp(p, "tf32") != 0 && strcmp(p, "bf16") != 0)
        return forge_error(FORGE_ERR_DATA, "%s: metadata \"precision\" = \"%.40s\": expected \"fp32\", \"tf32\" or \"bf16\"",
                           forge_safetensors_path(st), p);
    snprintf(out, cap, "%s", p);
    return FORGE_OK;
}

forge_status forge_checkpoint_read_precision(const char *dir, char *out, size_t cap) {
    char file[1200];
    snprintf(file, sizeof file, "%s/%s", dir, CKPT_STATE_FILE);
    forge_safetensors *st;
    FORGE_TRY(forge_safetensors_open(&st, file));
    forge_status s = meta_precision(st, out, cap);
    forge_safetensors_close(st);
    return s;
}

/* metadata key as a finite float (what run_settings_meta wrote) */
static forge_status meta_float(const forge_safetensors *st, const char *key, float *out) {
    const char *v = forge_safetensors_meta(st, key);
    char *end = NULL;
    errno = 0;
    const double x = v ? strtod(v, &end) : NAN;
    if (!v || errno || end == v || *end || !isfinite(x) || x < 0 || x > 1e9)
        return forge_error(FORGE_ERR_DATA, "%s: metadata \"%s\" = \"%.40s\": expected a number in [0, 1e9]",
                           forge_safetensors_path(st), key, v ? v : "(missing)");
    *out = (float)x;
    return FORGE_OK;
}

forge_status forge_checkpoint_read_settings(const char *dir, forge_run_settings *out, int *total_steps) {
    char file[1200];
    snprintf(file, sizeof file, "%s/%s", dir, CKPT_STATE_FILE);
    memset(out, 0, sizeof *out);
    forge_safetensors *st;
    FORGE_TRY(forge_safetensors_open(&st, file));
    uint64_t total = 0, b = 0, t = 0, tps = 0;
    forge_status s = meta_uint(st, "total_steps", INT_MAX, &total);
    if (s == FORGE_OK) *total_steps = (int)total;
    if (s == FORGE_OK && forge_safetensors_meta(st, "batch_size")) {
        float *f[8] = {&out->lr,    &out->warmup_frac, &out->min_lr_ratio, &out->weight_decay,
                       &out->grad_clip, &out->beta1,   &out->beta2,        &out->eps};
        s = meta_uint(st, "batch_size", INT_MAX, &b);
        if (s == FORGE_OK) s = meta_uint(st, "seq_len", INT_MAX, &t);
        if (s == FORGE_OK) s = meta_uint(st, "tokens_per_step", LONG_MAX, &tps);
        for (int i = 0; i < 8 && s == FORGE_OK; i++) s = meta_float(st, RUN_KEY_NAMES[3 + i], f[i]);
        int *c[5] = {&out->eval_every, &out->eval_batches, &out->ckpt_every, &out->keep_checkpoints, &out->early_stop};
        for (int i = 0; i < 5 && s == FORGE_OK; i++) {
            uint64_t x = 0;
            s = meta_uint(st, RUN_KEY_NAMES[11 + i], INT_MAX, &x);
            *c[i] = (int)x;
        }
        const char *d = forge_safetensors_meta(st, "data_dir");
        if (s == FORGE_OK && (b < 1 || t < 1 || tps < b * t || tps % (b * t) != 0))
            s = forge_error(FORGE_ERR_DATA,
                            "%s: metadata \"batch_size\" = %" PRIu64 ", \"seq_len\" = %" PRIu64
                            ", \"tokens_per_step\" = %" PRIu64 ": expected a whole number of B x T micro-batches",
                            file, b, t, tps);
        if (s == FORGE_OK && (!d || strlen(d) >= sizeof out->data_dir))
            s = forge_error(FORGE_ERR_DATA, "%s: metadata \"data_dir\": expected a path of under %zu bytes", file,
                            sizeof out->data_dir);
        if (s == FORGE_OK) {
            out->recorded = 1;
            out->batch_size = (int)b;
            out->seq_len = (int)t;
            out->tokens_per_step = (long)tps;
            snprintf(out->data_dir, sizeof out->data_dir, "%s", d);
        }
    }
    forge_safetensors_close(st);
    if (s != FORGE_OK) memset(out, 0, sizeof *out);
    return s;
}

forge_status forge_checkpoint_load_state(const char *dir, forge_optimizer *opt, forge_train_state *state) {
    char file[1200];
    snprintf(file, sizeof file, "%s/%s", dir, CKPT_STATE_FILE);
    forge_safetensors *st;
    FORGE_TRY(forge_safetensors_open(&st, file));
    int64_t shape[1] = {(int64_t)opt->model->n_elements};
    const forge_st_entry *m, *v;
    uint64_t step, total, batches, seed, ostep;
    const uint64_t max_batches = (uint64_t)1 << 53; /* tokens_seen is a double: exact below 2^53 */
    forge_status s = forge_safetensors_get(st, "adamw.m", "F32", 1, shape, &m);
    if (s == FORGE_OK) s = forge_safetensors_get(st, "adamw.v", "F32", 1, shape, &v);
    if (s == FORGE_OK) s = meta_uint(st, "step", INT_MAX, &step);
    if (s == FORGE_OK) s = meta_uint(st, "total_steps", INT_MAX, &total);
    if (s == FORGE_OK) s = meta_uint(st, "loader_batches", max_batches, &batches);
    if (s == FORGE_OK) s = meta_uint(st, "seed", UINT64_MAX, &seed);
    if (s == FORGE_OK) s = meta_uint(st, "adamw_step", INT_MAX, &ostep);
    double seen = 0;
    if (s == FORGE_OK) {
        const char *sv = forge_safetensors_meta(st, "tokens_seen");
        char *end = NULL;
        if (sv) {
            errno = 0;
            seen = strtod(sv, &end);
        }
        if (!sv)
            s = forge_error(FORGE_ERR_DATA, "%s: metadata has no \"tokens_seen\"", file);
        else if (errno || end == sv || *end || !(seen >= 0) || seen > 0x1p53 || seen != floor(seen))
            s = forge_error(FORGE_ERR_DATA,
                            "%s: metadata \"tokens_seen\" = \"%s\": expected a whole number in [0, 2^53]", file,
                            sv);
    }
    /* consistency: every step draws at least one batch of at least one token, and AdamW stepped once per step */
    if (s == FORGE_OK && total < 1)
        s = forge_error(FORGE_ERR_DATA, "%s: metadata \"total_steps\" = 0: expected at least 1", file);
    if (s == FORGE_OK && step > total)
        s = forge_error(FORGE_ERR_DATA,
                        "%s: metadata \"step\" = %" PRIu64 " exceeds \"total_steps\" = %" PRIu64
                        ": expected step <= total_steps",
                        file, step, total);
    if (s == FORGE_OK && ostep != step)
        s = forge_error(FORGE_ERR_DATA,
                        "%s: metadata \"adamw_step\" = %" PRIu64 " but \"step\" = %" PRIu64
                        ": expected one AdamW update per step",
                        file, ostep, step);
    if (s == FORGE_OK && (batches < step || (step == 0) != (batches == 0)))
        s = forge_error(FORGE_ERR_DATA,
                        "%s: metadata \"loader_batches\" = %" PRIu64 " with \"step\" = %" PRIu64
                        ": expected at least one batch per step (and none before the first)",
                        file, batches, step);
    if (s == FORGE_OK && (seen < (double)batches || (step == 0) != (seen == 0)))
        s = forge_error(FORGE_ERR_DATA,
                        "%s: metadata \"tokens_seen\" = %.17g with \"loader_batches\" = %" PRIu64
                        ": expected at least one token per batch",
                        file, seen, batches);
    char precision[8] = "";
    if (s == FORGE_OK) s = meta_precision(st, precision, sizeof precision);
    if (s == FORGE_OK) s = check_moment(st, opt, m, 0);
    if (s == FORGE_OK) s = check_moment(st, opt, v, 1);
    if (s == FORGE_OK) s = forge_optimizer_set_state(opt, m->data, v->data);
    if (s == FORGE_OK) {
        state->step = (int)step;
        state->total_steps = (int)total;
        state->loader_batches = batches;
        state->seed = seed;
        state->tokens_seen = seen;
        snprintf(state->precision, sizeof state->precision, "%s", precision);
        opt->step = (int)ostep;
    }
    forge_safetensors_close(st);
    return s;
}

forge_status forge_checkpoint_resolve(const char *path, char *out, size_t cap) {
    char file[1200];
    snprintf(file, sizeof file, "%s/latest", path);
    FILE *f = fopen(file, "r");
    if (f) {
        char name[256] = "";
        int ok = fgets(name, sizeof name, f) != NULL;
        fclose(f);
        name[strcspn(name, "\r\n")] = '\0';
        if (!ok || !name[0] || strchr(name, '/'))
            return forge_error(FORGE_ERR_DATA, "%s: expected the name of a checkpoint directory", file);
        snprintf(out, cap, "%s/%s", path, name);
        return FORGE_OK;
    }
    snprintf(file, sizeof file, "%s/%s", path, CKPT_MODEL_FILE);
    if (access(file, R_OK) == 0) {
        snprintf(out, cap, "%s", path);
        return FORGE_OK;
    }
    /* What a Hugging Face directory may hold instead of one model.safetensors: said plainly, with the way out */
    snprintf(file, sizeof file, "%s/%s.index.json", path, CKPT_MODEL_FILE);
    if (access(file, F_OK) == 0)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: a sharded checkpoint (%s): forge reads one %s; save it again in one file, e.g. "
                           "model.save_pretrained(DIR, max_shard_size=\"1000GB\")",
                           path, file, CKPT_MODEL_FILE);
    snprintf(file, sizeof file, "%s/pytorch_model.bin", path);
    if (access(file, F_OK) == 0)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: holds pytorch_model.bin (a pickle) and no %s: forge reads safetensors only; save it "
                           "again with model.save_pretrained(DIR, safe_serialization=True)",
                           path, CKPT_MODEL_FILE);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        /* a checkpoint's model.safetensors named directly: its directory is the checkpoint */
        const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
        if (strcmp(base, CKPT_MODEL_FILE) == 0) {
            if (!slash) snprintf(out, cap, ".");
            else snprintf(out, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
            return FORGE_OK;
        }
        return forge_error(FORGE_ERR_IO, "%s: a file; expected a run directory or a checkpoint directory (the one "
                                         "holding %s)",
                           path, CKPT_MODEL_FILE);
    }
    return forge_error(FORGE_ERR_IO, "%s: not a run directory (no \"latest\" file) nor a checkpoint (no %s)",
                       path, CKPT_MODEL_FILE);
}

static forge_status set_pointer(const char *run_dir, const char *pointer, const char *name) {
    char tmp[1200], file[1200];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", run_dir, pointer);
    snprintf(file, sizeof file, "%s/%s", run_dir, pointer);
    FILE *f = fopen(tmp, "w");
    if (!f) return forge_error(FORGE_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    int ok = fprintf(f, "%s\n", name) > 0;
    ok = (fflush(f) == 0) && ok;
    ok = (fsync(fileno(f)) == 0) && ok;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, file) != 0) {
        unlink(tmp);
        return forge_error(FORGE_ERR_IO, "cannot write %s: %s", file, strerror(errno));
    }
    int dfd = open(run_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd); /* best effort: the rename itself is what a crash must not tear */
        close(dfd);
    }
    return FORGE_OK;
}

forge_status forge_checkpoint_set_latest(const char *run_dir, const char *name) {
    return set_pointer(run_dir, "latest", name);
}

forge_status forge_checkpoint_set_best(const char *run_dir, const char *name) {
    return set_pointer(run_dir, "best", name);
}
