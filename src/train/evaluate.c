/* evaluate.c: a model's loss over a token stream (evaluate.h). */
#include "evaluate.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/clock.h"
#include "../base/fs.h"
#include "../data/shards.h"
#include "../runtime/pool.h"

forge_status forge_eval_token_bytes(const forge_tokenizer *tok, uint32_t **out, int *V) {
    *out = NULL;
    *V = forge_tokenizer_vocab_size(tok);
    uint32_t *b = malloc((size_t)*V * sizeof *b);
    if (!b) return forge_error(FORGE_ERR_OOM, "eval: out of host memory for %d token lengths", *V);
    const int32_t eot = forge_tokenizer_eot(tok);
    for (int32_t id = 0; id < *V; id++) {
        b[id] = 0;
        if (id == eot) continue;
        char *text = NULL;
        size_t len = 0;
        forge_status s = forge_tokenizer_decode(tok, &id, 1, &text, &len);
        free(text);
        if (s != FORGE_OK) {
            free(b);
            return s;
        }
        b[id] = (uint32_t)len;
    }
    *out = b;
    return FORGE_OK;
}

/* Appends the tokens of one shard to *buf (capacity *cap, *n used). */
static forge_status append_shard(const char *file, int vocab_size, int32_t **buf, size_t *n, size_t *cap) {
    forge_shard sh;
    FORGE_TRY(forge_shard_open(&sh, file, vocab_size));
    if (*n + sh.n_tokens > *cap) {
        size_t nc = (*n + sh.n_tokens) * 2;
        int32_t *nb = realloc(*buf, nc * sizeof *nb);
        if (!nb) {
            forge_shard_close(&sh);
            return forge_error(FORGE_ERR_OOM, "eval: out of host memory for %zu tokens (%s)", nc, file);
        }
        *buf = nb;
        *cap = nc;
    }
    forge_shard_read(&sh, 0, (size_t)sh.n_tokens, *buf + *n);
    *n += (size_t)sh.n_tokens;
    forge_shard_close(&sh);
    return FORGE_OK;
}

static int cmp_index(const void *a, const void *b) {
    const unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

static forge_status load_dir(const char *dir, int vocab_size, int32_t **out, size_t *n) {
    DIR *d = opendir(dir);
    if (!d) return forge_error(FORGE_ERR_IO, "eval: cannot open %s: %s", dir, strerror(errno));
    unsigned long long idx[4096];
    int k = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        unsigned long long i;
        if (forge_shard_name_parse(e->d_name, "val", &i)) {
            if (k == (int)(sizeof idx / sizeof idx[0])) {
                closedir(d);
                return forge_error(FORGE_ERR_DATA, "eval: %s has more than %d val shards", dir, k);
            }
            idx[k++] = i;
        }
    }
    closedir(d);
    if (k == 0)
        return forge_error(FORGE_ERR_DATA, "eval: %s has no val_NNN.bin shards (forge tokenize writes them; or give "
                           "a .bin shard or a text file)", dir);
    qsort(idx, (size_t)k, sizeof idx[0], cmp_index);
    size_t cap = 0;
    forge_status s = FORGE_OK;
    for (int i = 0; i < k && s == FORGE_OK; i++) {
        char file[1200];
        s = forge_shard_path(file, sizeof file, dir, "val", (int)idx[i]);
        if (s == FORGE_OK) s = append_shard(file, vocab_size, out, n, &cap);
    }
    return s;
}

static forge_status load_text(const char *path, const forge_tokenizer *tok, int vocab_size, int32_t **out,
                              size_t *n) {
    char *text = NULL;
    size_t len = 0;
    FORGE_TRY(forge_read_file(path, &text, &len));
    forge_status s = forge_tokenizer_encode(tok, text, len, 0, out, n);
    free(text);
    FORGE_TRY(s);
    for (size_t i = 0; i < *n; i++)
        if ((*out)[i] >= vocab_size) {
            s = forge_error(FORGE_ERR_DATA, "eval: %s encodes to id %d, outside the model's vocab_size %d", path,
                            (*out)[i], vocab_size);
            free(*out);
            *out = NULL;
            *n = 0;
            return s;
        }
    return FORGE_OK;
}

forge_status forge_eval_load_tokens(const char *path, const forge_tokenizer *tok, int vocab_size, int32_t **out,
                                    size_t *n, char *what, size_t what_cap) {
    *out = NULL;
    *n = 0;
    struct stat st;
    if (stat(path, &st) != 0) return forge_error(FORGE_ERR_IO, "eval: %s: %s", path, strerror(errno));
    forge_status s;
    const size_t plen = strlen(path);
    if (S_ISDIR(st.st_mode)) {
        s = load_dir(path, vocab_size, out, n);
        snprintf(what, what_cap, "%s (val shards)", path);
    } else if (plen > 4 && strcmp(path + plen - 4, ".bin") == 0) {
        size_t cap = 0;
        s = append_shard(path, vocab_size, out, n, &cap);
        snprintf(what, what_cap, "%s (shard)", path);
    } else {
        s = load_text(path, tok, vocab_size, out, n);
        snprintf(what, what_cap, "%s (text, tokenized with the checkpoint's tokenizer)", path);
    }
    if (s == FORGE_OK && *n < 2)
        s = forge_error(FORGE_ERR_DATA, "eval: %s holds %zu token(s); at least 2 are needed (one predicted)", path,
                        *n);
    if (s != FORGE_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return s;
}

forge_status forge_evaluate(forge_model *m, forge_tape *tape, const int32_t *tokens, size_t n, int B, int T,
                            const uint32_t *bytes_of, int bytes_V, FILE *progress, forge_eval_result *r) {
    memset(r, 0, sizeof *r);
    if (n < 2) return forge_error(FORGE_ERR_ARG, "eval: %zu tokens; at least 2 are needed", n);
    if (B < 1 || T < 1 || T > m->cfg.context_length)
        return forge_error(FORGE_ERR_ARG, "eval: batch %d x %d (need B >= 1 and 1 <= T <= context_length %d)", B, T,
                           m->cfg.context_length);
    forge_backend *be = m->be;
    forge_pool *pool = forge_tape_pool(tape);
    const size_t predicted = n - 1, windows = (predicted + (size_t)T - 1) / (size_t)T;
    /* a batch wider than the text holds rows of nothing but ignored targets: not allocated (the sums are the same) */
    if ((size_t)B > windows) B = (int)windows;
    const size_t per = (size_t)B * T, batches = (windows + (size_t)B - 1) / (size_t)B;
    int32_t *ids = malloc(per * sizeof *ids), *tg = malloc(per * sizeof *tg);
    float *losses = malloc(per * sizeof *losses);
    forge_tensor *d_ids = NULL, *d_tg = NULL;
    const int64_t shape[2] = {B, T};
    forge_status s = ids && tg && losses ? FORGE_OK : forge_error(FORGE_ERR_OOM, "eval: out of host memory");
    if (s == FORGE_OK) s = forge_pool_tensor(pool, &d_ids, FORGE_I32, 2, shape, 1);
    if (s == FORGE_OK) s = forge_pool_tensor(pool, &d_tg, FORGE_I32, 2, shape, 1);
    const int was_recording = forge_tape_recording(tape);
    forge_tape_set_recording(tape, 0);
    double sum = 0.0;
    uint64_t bytes = 0, counted = 0;
    const double t0 = forge_now_seconds();
    double last_print = t0;
    for (size_t b = 0; b < batches && s == FORGE_OK; b++) {
        for (size_t i = 0; i < per; i++) {
            const size_t p = (b * (size_t)B + i / (size_t)T) * (size_t)T + i % (size_t)T; /* predicts p + 1 */
            ids[i] = p < predicted ? tokens[p] : 0;
            tg[i] = p < predicted ? tokens[p + 1] : -1; /* -1: the model's ignored target */
        }
        forge_tensor *out = NULL;
        s = be->copy_to_device(be, d_ids->data, ids, per * sizeof *ids);
        if (s == FORGE_OK) s = be->copy_to_device(be, d_tg->data, tg, per * sizeof *tg);
        if (s == FORGE_OK) s = forge_model_forward(m, tape, d_ids, d_tg, 0.0f, &out);
        if (s == FORGE_OK) s = be->copy_to_host(be, losses, out->data, per * sizeof *losses);
        if (s == FORGE_OK) s = be->poll_errors(be);
        forge_tape_reset(tape);
        for (size_t i = 0; i < per && s == FORGE_OK; i++) {
            if (tg[i] < 0) continue;
            sum += losses[i];
            counted++;
            if (bytes_of && tg[i] < bytes_V) bytes += bytes_of[tg[i]];
        }
        const double now = forge_now_seconds();
        if (progress && s == FORGE_OK && (now - last_print >= 2.0 || b + 1 == batches)) {
            const double tok_s = (double)counted / (now - t0 > 1e-9 ? now - t0 : 1e-9);
            fprintf(progress, "eval: batch %zu/%zu, %llu tokens, loss %.4f, %.0f tok/s, ETA %.0f s\n", b + 1, batches,
                    (unsigned long long)counted, sum / (double)counted, tok_s,
                    (double)(predicted - counted) / (tok_s > 0 ? tok_s : 1));
            fflush(progress);
            last_print = now;
        }
    }
    forge_tape_set_recording(tape, was_recording);
    if (d_ids) forge_pool_release(pool, d_ids);
    if (d_tg) forge_pool_release(pool, d_tg);
    free(ids), free(tg), free(losses);
    FORGE_TRY(s);
    r->tokens = counted;
    r->bytes = bytes;
    r->loss = sum / (double)counted;
    r->perplexity = exp(r->loss);
    r->bits_per_byte = bytes_of && bytes ? sum / log(2.0) / (double)bytes : NAN;
    return FORGE_OK;
}
