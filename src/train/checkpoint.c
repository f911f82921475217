/* checkpoint.c: safetensors checkpoints under Hugging Face names. */
#include "checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../model/safetensors.h"

#define CKPT_MODEL_FILE "model.safetensors"
#define CKPT_STATE_FILE "state.safetensors"

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

forge_status forge_checkpoint_save(const char *dir, const forge_model *m, const forge_optimizer *opt,
                                   const forge_train_state *state, const forge_tokenizer *tok) {
    if (mkdir_one(dir) != 0)
        return forge_error(FORGE_ERR_IO, "checkpoint: cannot create directory %s: %s", dir, strerror(errno));
    size_t n = m->n_elements;
    float *host = malloc(n * sizeof(float));
    float *host2 = malloc(n * sizeof(float));
    forge_status s = FORGE_OK;
    if (!host || !host2) s = forge_error(FORGE_ERR_OOM, "checkpoint: out of host memory for %zu parameters", n);
    if (s == FORGE_OK) s = forge_model_get_params(m, host);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_MODEL_FILE);
    if (s == FORGE_OK) s = forge_checkpoint_write_values(path, m, host);
    if (s == FORGE_OK && opt && state) {
        s = forge_optimizer_get_state(opt, host, host2);
        char step[32], total[32], batches[32], seed[32], seen[64], ostep[32];
        snprintf(step, sizeof step, "%d", state->step);
        snprintf(total, sizeof total, "%d", state->total_steps);
        snprintf(batches, sizeof batches, "%" PRIu64, state->loader_batches);
        snprintf(seed, sizeof seed, "%" PRIu64, state->seed);
        snprintf(seen, sizeof seen, "%.17g", state->tokens_seen);
        snprintf(ostep, sizeof ostep, "%d", opt->step);
        const char *keys[] = {"step", "total_steps", "loader_batches", "seed", "tokens_seen", "adamw_step"};
        const char *vals[] = {step, total, batches, seed, seen, ostep};
        forge_st_entry st[2] = {
            {.name = "adamw.m", .dtype = "F32", .ndim = 1, .shape = {(int64_t)n}, .data = host, .bytes = n * 4},
            {.name = "adamw.v", .dtype = "F32", .ndim = 1, .shape = {(int64_t)n}, .data = host2, .bytes = n * 4},
        };
        snprintf(path, sizeof path, "%s/%s", dir, CKPT_STATE_FILE);
        if (s == FORGE_OK) s = forge_safetensors_write(path, st, 2, keys, vals, 6);
    }
    if (s == FORGE_OK && tok) s = forge_tokenizer_save(tok, dir);
    free(host);
    free(host2);
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

forge_status forge_checkpoint_read_config(const char *path, forge_model_config *cfg) {
    char file[1200];
    model_file(path, file, sizeof file);
    forge_safetensors *st;
    FORGE_TRY(forge_safetensors_open(&st, file));
    const char *json = forge_safetensors_meta(st, "forge_config");
    forge_status s;
    if (!json)
        s = forge_error(FORGE_ERR_DATA, "%s: no \"forge_config\" in the metadata (not a forge checkpoint?)", file);
    else
        s = forge_config_parse(cfg, json, file);
    forge_safetensors_close(st);
    return s;
}

forge_status forge_checkpoint_load_weights(const char *path, forge_model *m) {
    char file[1200];
    model_file(path, file, sizeof file);
    forge_safetensors *st;
    FORGE_TRY(forge_safetensors_open(&st, file));
    float *host = malloc(m->n_elements * sizeof(float));
    forge_status s = host ? FORGE_OK : forge_error(FORGE_ERR_OOM, "checkpoint: out of host memory");
    for (int i = 0; s == FORGE_OK && i < m->n_params; i++) {
        const forge_param *p = &m->params[i];
        hf_layout L;
        param_layout(m, p, &L);
        for (int k = 0; s == FORGE_OK && k < L.n; k++) {
            const forge_st_entry *e;
            s = forge_safetensors_get(st, L.name[k], "F32", L.ndim, L.shape[k], &e);
            if (s != FORGE_OK) break;
            if (p->export_kind == FORGE_EXPORT_TRANSPOSED && L.ndim == 2)
                transpose(host + p->offset, e->data, L.shape[k][0], L.shape[k][1]);
            else
                memcpy(host + p->offset + L.offset[k], e->data, e->bytes);
        }
    }
    if (s == FORGE_OK) s = forge_model_set_params(m, host);
    free(host);
    forge_safetensors_close(st);
    return s;
}

static forge_status meta_u64(const forge_safetensors *st, const char *key, uint64_t *out) {
    const char *v = forge_safetensors_meta(st, key);
    char *end;
    if (!v) return forge_error(FORGE_ERR_DATA, "%s: metadata has no \"%s\"", forge_safetensors_path(st), key);
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || end == v)
        return forge_error(FORGE_ERR_DATA, "%s: metadata \"%s\" = \"%s\", expected an integer",
                           forge_safetensors_path(st), key, v);
    *out = x;
    return FORGE_OK;
}

forge_status forge_checkpoint_load_state(const char *dir, forge_optimizer *opt, forge_train_state *state) {
    char file[1200];
    snprintf(file, sizeof file, "%s/%s", dir, CKPT_STATE_FILE);
    forge_safetensors *st;
    FORGE_TRY(forge_safetensors_open(&st, file));
    int64_t shape[1] = {(int64_t)opt->model->n_elements};
    const forge_st_entry *m, *v;
    uint64_t step, total, batches, seed, ostep;
    forge_status s = forge_safetensors_get(st, "adamw.m", "F32", 1, shape, &m);
    if (s == FORGE_OK) s = forge_safetensors_get(st, "adamw.v", "F32", 1, shape, &v);
    if (s == FORGE_OK) s = meta_u64(st, "step", &step);
    if (s == FORGE_OK) s = meta_u64(st, "total_steps", &total);
    if (s == FORGE_OK) s = meta_u64(st, "loader_batches", &batches);
    if (s == FORGE_OK) s = meta_u64(st, "seed", &seed);
    if (s == FORGE_OK) s = meta_u64(st, "adamw_step", &ostep);
    if (s == FORGE_OK) s = forge_optimizer_set_state(opt, m->data, v->data);
    if (s == FORGE_OK) {
        const char *seen = forge_safetensors_meta(st, "tokens_seen");
        state->step = (int)step;
        state->total_steps = (int)total;
        state->loader_batches = batches;
        state->seed = seed;
        state->tokens_seen = seen ? strtod(seen, NULL) : 0;
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
    return forge_error(FORGE_ERR_IO, "%s: not a run directory (no \"latest\" file) nor a checkpoint (no %s)",
                       path, CKPT_MODEL_FILE);
}

forge_status forge_checkpoint_set_latest(const char *run_dir, const char *name) {
    char tmp[1200], file[1200];
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", run_dir);
    snprintf(file, sizeof file, "%s/latest", run_dir);
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
    return FORGE_OK;
}
