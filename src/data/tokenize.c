/* tokenize.c: the `forge tokenize` pipeline, text files -> shards (see tokenize.h). */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* mmap, pwrite, fsync, clock_gettime */
#endif
#include "tokenize.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../base/fs.h"
#include "../base/rng.h"
#include "shards.h"
#include "../base/clock.h"

static const char EOT_TEXT[] = "<|endoftext|>";
#define EOT_LEN (sizeof EOT_TEXT - 1)

static const char *SPLIT_NAME[2] = {"train", "val"};

/* ------------------------------------------------------------------ helpers */


/* uniform in [0, 1) from (seed, document index) */
static double doc_hash(uint64_t seed, uint64_t doc) {
    return (double)(forge_hash64(seed ^ forge_hash64(doc)) >> 11) * (1.0 / 9007199254740992.0);
}

/* ------------------------------------------------------------ document split */

typedef struct {
    const char *text;
    size_t len, pos;
    int done;
} doc_iter;

static const char *find_eot(const char *p, const char *end) {
    while (end - p >= (ptrdiff_t)EOT_LEN) {
        const char *q = memchr(p, '<', (size_t)(end - p) - EOT_LEN + 1);
        if (!q) return NULL;
        if (memcmp(q, EOT_TEXT, EOT_LEN) == 0) return q;
        p = q + 1;
    }
    return NULL;
}

static int all_space(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(p[i] == ' ' || p[i] == '\n' || p[i] == '\t' || p[i] == '\r' || p[i] == '\v' ||
              p[i] == '\f'))
            return 0;
    return 1;
}

/* Next non-blank document of the text: 1 and (*doc, *doc_len), or 0 at the end. */
static int doc_next(doc_iter *it, const char **doc, size_t *doc_len) {
    const char *end = it->text + it->len;
    while (!it->done) {
        const char *p = it->text + it->pos;
        if (it->pos > 0) { /* just after a separator: its newline goes with it */
            if (end - p >= 2 && p[0] == '\r' && p[1] == '\n')
                p += 2;
            else if (p < end && p[0] == '\n')
                p += 1;
        }
        const char *e = find_eot(p, end);
        if (!e) {
            e = end;
            it->done = 1;
        } else {
            it->pos = (size_t)(e - it->text) + EOT_LEN;
        }
        size_t n = (size_t)(e - p);
        if (n > 0 && !all_space(p, n)) {
            *doc = p;
            *doc_len = n;
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ split outputs */

typedef struct {
    const char *out_dir;
    int split;
    int vocab_size;
    uint64_t shard_tokens;
    forge_shard_writer *w; /* NULL between shards: opened on the first token */
    int n_shards;          /* shards started */
    uint64_t n_tokens, n_docs;
} split_out;

static forge_status split_append(split_out *o, const int32_t *ids, size_t n) {
    while (n > 0) {
        if (!o->w) {
            char path[4096];
            FORGE_TRY(
                forge_shard_path(path, sizeof path, o->out_dir, SPLIT_NAME[o->split], o->n_shards));
            FORGE_TRY(forge_shard_writer_open(&o->w, path, o->vocab_size));
            o->n_shards++;
        }
        uint64_t room = o->shard_tokens - forge_shard_writer_count(o->w);
        size_t k = (uint64_t)n < room ? n : (size_t)room;
        FORGE_TRY(forge_shard_writer_append(o->w, ids, k));
        o->n_tokens += k;
        ids += k;
        n -= k;
        if (forge_shard_writer_count(o->w) == o->shard_tokens) {
            forge_shard_writer *w = o->w;
            o->w = NULL;
            FORGE_TRY(forge_shard_writer_close(w));
        }
    }
    return FORGE_OK;
}

static forge_status split_append_doc(split_out *o, const int32_t *ids, size_t n, int32_t eot) {
    FORGE_TRY(split_append(o, ids, n));
    FORGE_TRY(split_append(o, &eot, 1));
    o->n_docs++;
    return FORGE_OK;
}

/* Deletes <split>_NNN.bin files in dir other than the n shards just written. */
static void remove_stale_shards(const char *dir, int split, int n, FILE *progress) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned long long idx;
        if (!forge_shard_name_parse(e->d_name, SPLIT_NAME[split], &idx)) continue;
        char ours[64];
        snprintf(ours, sizeof ours, "%s_%03llu.bin", SPLIT_NAME[split], idx);
        if (idx < (unsigned long long)n && strcmp(ours, e->d_name) == 0) continue;
        char path[4096];
        int len = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (len < 0 || (size_t)len >= sizeof path) continue;
        if (unlink(path) == 0 && progress)
            fprintf(progress, "tokenize: removed stale shard %s\n", path);
    }
    closedir(d);
}

/* ---------------------------------------------------------------- pipeline */

forge_status forge_tokenize_files_with(const forge_text_encoder *enc, const char *const *files,
                                       int n, const char *out_dir, double val_fraction,
                                       uint64_t seed, uint64_t shard_tokens, FILE *progress,
                                       forge_tokenize_stats *stats) {
    if (n <= 0) return forge_error(FORGE_ERR_ARG, "tokenize: no input files given");
    if (!(val_fraction >= 0.0 && val_fraction <= 1.0))
        return forge_error(FORGE_ERR_ARG, "tokenize: val_fraction must be in [0, 1], got %g",
                           val_fraction);
    if (enc->vocab_size <= 0 || enc->eot < 0 || enc->eot >= enc->vocab_size)
        return forge_error(FORGE_ERR_ARG, "tokenize: tokenizer has vocab size %d and eot %d",
                           enc->vocab_size, (int)enc->eot);
    if (shard_tokens == 0) shard_tokens = FORGE_TOKENIZE_SHARD_TOKENS;
    if (shard_tokens > INT32_MAX)
        return forge_error(FORGE_ERR_ARG,
                           "tokenize: shard size %llu exceeds a shard's limit of %d tokens",
                           (unsigned long long)shard_tokens, INT32_MAX);
    double t0 = forge_now_seconds();

    /* pass 1: read every file, count documents, settle the val/train guarantees */
    int cutting = val_fraction > 0 && val_fraction < 1;
    char *cut = calloc((size_t)n, 1); /* cut[f]: file f is one document, split by tokens */
    if (!cut) return forge_error(FORGE_ERR_OOM, "tokenize: out of memory");
    uint64_t n_docs = 0, n_bytes = 0, n_hashed = 0, force_val = UINT64_MAX,
             force_train = UINT64_MAX;
    uint64_t min_doc = 0, max_doc = 0;
    double min_u = 2.0, max_u = -1.0;
    int any_val = 0, any_train = 0, n_cut = 0;
    for (int f = 0; f < n; f++) {
        char *text;
        size_t len;
        forge_status rs = forge_read_file(files[f], &text, &len);
        if (rs != FORGE_OK) {
            free(cut);
            return rs;
        }
        n_bytes += len;
        doc_iter it = {text, len, 0, 0};
        const char *doc;
        size_t doc_len;
        uint64_t first = n_docs;
        while (doc_next(&it, &doc, &doc_len)) n_docs++;
        free(text);
        if (n_docs - first == 1 && cutting) {
            cut[f] = 1;
            n_cut++;
            continue;
        }
        for (uint64_t d = first; d < n_docs; d++) {
            double u = doc_hash(seed, d);
            if (u < val_fraction)
                any_val = 1;
            else
                any_train = 1;
            if (u < min_u) min_u = u, min_doc = d;
            if (u > max_u) max_u = u, max_doc = d;
            n_hashed++;
        }
    }
    if (n_docs == 0) {
        free(cut);
        return forge_error(
            FORGE_ERR_DATA, "%s%s: no text to tokenize (%llu bytes, all blank or separators)",
            files[0], n > 1 ? " and the other input files" : "", (unsigned long long)n_bytes);
    }
    /* n_hashed is 0 or >= 2: a file with one document is cut whenever 0 < val_fraction < 1 */
    if (n_hashed >= 2 && val_fraction > 0 && !any_val && n_cut == 0) force_val = min_doc;
    if (n_hashed >= 2 && val_fraction < 1 && !any_train && n_cut == 0) force_train = max_doc;

    forge_status made = forge_mkdir_p(out_dir);
    if (made != FORGE_OK) {
        free(cut);
        return made;
    }

    /* pass 2: encode and write */
    split_out out[2];
    for (int s = 0; s < 2; s++)
        out[s] = (split_out){out_dir, s, enc->vocab_size, shard_tokens, NULL, 0, 0, 0};
    forge_status r = FORGE_OK;
    uint64_t d = 0;
    for (int f = 0; f < n && r == FORGE_OK; f++) {
        char *text;
        size_t len;
        r = forge_read_file(files[f], &text, &len);
        if (r != FORGE_OK) break;
        double tf = forge_now_seconds();
        uint64_t file_docs = 0, file_tokens = 0;
        doc_iter it = {text, len, 0, 0};
        const char *doc;
        size_t doc_len;
        while (r == FORGE_OK && doc_next(&it, &doc, &doc_len)) {
            int32_t *ids = NULL;
            size_t n_ids = 0;
            r = enc->encode(enc->ctx, doc, doc_len, &ids, &n_ids);
            if (r != FORGE_OK) {
                forge_error_context(r, "%s: document %llu (byte %zu): ", files[f],
                                    (unsigned long long)file_docs, (size_t)(doc - text));
                break;
            }
            if (cut[f] && n_ids >= 2) {
                size_t n_val = (size_t)ceil(val_fraction * (double)n_ids - 1e-9);
                if (n_val < 1) n_val = 1;
                if (n_val > n_ids - 1) n_val = n_ids - 1;
                r = split_append_doc(&out[FORGE_SPLIT_TRAIN], ids, n_ids - n_val, enc->eot);
                if (r == FORGE_OK)
                    r = split_append_doc(&out[FORGE_SPLIT_VAL], ids + (n_ids - n_val), n_val,
                                         enc->eot);
            } else if (n_ids > 0) {
                int val = d == force_val || (d != force_train && doc_hash(seed, d) < val_fraction);
                r = split_append_doc(&out[val], ids, n_ids, enc->eot);
            }
            free(ids);
            if (n_ids > 0) file_tokens += n_ids + (cut[f] && n_ids >= 2 ? 2 : 1);
            file_docs++;
            d++;
        }
        free(text);
        if (r == FORGE_OK && progress) {
            double dt = forge_now_seconds() - tf;
            fprintf(
                progress,
                "tokenize: [%d/%d] %s: %zu bytes, %llu document%s%s, %llu tokens (%.0f tokens/s)\n",
                f + 1, n, files[f], len, (unsigned long long)file_docs, file_docs == 1 ? "" : "s",
                cut[f] ? " (split by tokens)" : "", (unsigned long long)file_tokens,
                dt > 0 ? (double)file_tokens / dt : 0.0);
            fflush(progress);
        }
    }
    for (int s = 0; s < 2; s++) {
        if (!out[s].w) continue;
        if (r == FORGE_OK)
            r = forge_shard_writer_close(out[s].w);
        else
            forge_shard_writer_abort(out[s].w);
        out[s].w = NULL;
    }
    free(cut);
    if (r != FORGE_OK) return forge_error_context(r, "tokenize: ");
    for (int s = 0; s < 2; s++) remove_stale_shards(out_dir, s, out[s].n_shards, progress);

    double dt = forge_now_seconds() - t0;
    uint64_t total = out[0].n_tokens + out[1].n_tokens;
    if (progress) {
        fprintf(progress, "tokenize: %d file%s, %llu bytes, %llu documents", n, n == 1 ? "" : "s",
                (unsigned long long)n_bytes, (unsigned long long)n_docs);
        if (n_cut)
            fprintf(progress, " (%d single-document file%s split by tokens)", n_cut,
                    n_cut == 1 ? "" : "s");
        fprintf(progress, "\n");
        for (int s = 0; s < 2; s++) {
            if (out[s].n_shards == 0) {
                fprintf(progress, "tokenize: %-5s no tokens%s\n", SPLIT_NAME[s],
                        s == FORGE_SPLIT_VAL && val_fraction == 0 ? " (val_fraction is 0)" : "");
                continue;
            }
            fprintf(progress,
                    "tokenize: %-5s %llu tokens, %llu documents, %d shard%s (%s/%s_000.bin%s)\n",
                    SPLIT_NAME[s], (unsigned long long)out[s].n_tokens,
                    (unsigned long long)out[s].n_docs, out[s].n_shards,
                    out[s].n_shards == 1 ? "" : "s", out_dir, SPLIT_NAME[s],
                    out[s].n_shards > 1 ? " ..." : "");
        }
        fprintf(progress, "tokenize: %llu tokens in %.2f s (%.0f tokens/s)\n",
                (unsigned long long)total, dt, dt > 0 ? (double)total / dt : 0.0);
        fflush(progress);
    }
    if (stats) {
        stats->n_files = n;
        stats->n_bytes = n_bytes;
        for (int s = 0; s < 2; s++) {
            stats->n_docs[s] = out[s].n_docs;
            stats->n_tokens[s] = out[s].n_tokens;
            stats->n_shards[s] = out[s].n_shards;
        }
        stats->seconds = dt;
    }
    return FORGE_OK;
}

/* ------------------------------------------------------------ BPE adapter */

static forge_status encode_with_tokenizer(void *ctx, const char *text, size_t len, int32_t **ids,
                                          size_t *n_ids) {
    return forge_tokenizer_encode((const forge_tokenizer *)ctx, text, len, 1, ids, n_ids);
}

forge_status forge_tokenize_files(const forge_tokenizer *tok, const char *const *files, int n,
                                  const char *out_dir, double val_fraction, uint64_t seed,
                                  FILE *progress) {
    forge_text_encoder enc = {encode_with_tokenizer, (void *)tok, forge_tokenizer_vocab_size(tok),
                              forge_tokenizer_eot(tok)};
    return forge_tokenize_files_with(&enc, files, n, out_dir, val_fraction, seed, 0, progress,
                                     NULL);
}
