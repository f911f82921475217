/*
 * tokenizer_train.c: byte-level BPE training, GPT-2 style.
 *
 * 1. Count pieces. Each file is split at "<|endoftext|>" (a document separator,
 *    never learned from) and pre-tokenised with GPT-2's regex; a hash map
 *    counts each distinct piece ("word"). With OpenMP the file is cut into one
 *    chunk per thread at a space that follows an ASCII letter or digit: no
 *    regex match can span such a point (the piece before it cannot contain
 *    the space, and the regex has no look-behind), so chunked counting equals
 *    whole-file counting.
 * 2. Merge. Pair counts are kept incrementally: pair -> count, and pair ->
 *    list of words that contained it (lazily pruned). A max-heap holds
 *    (count, pair) with lazy deletion: old pairs' counts only fall, so a
 *    popped entry whose count is stale is re-pushed with the current count;
 *    pairs that gain count (only pairs with the new token) are pushed after
 *    each merge. Each affected word is re-merged left to right, exactly as
 *    encoding will do, so the encoding of a training word equals its state
 *    here.
 *
 * Tie-break: the most frequent pair wins; among equal counts, the smallest
 * (left id, right id). Ids 0..255 are the bytes in GPT-2's order (printable
 * bytes first), so the first 256 ids agree with GPT-2's encoder.json.
 *
 * A merge whose bytes are already a token (e.g. "a"+"bc" after "ab"+"c")
 * reuses that id, as HF tokenizers does: bytes <-> id stays a bijection,
 * vocab.bpe can then hold more lines than vocab_size - 257, and every id is
 * still reachable. If the corpus runs out of pairs first, the vocabulary is
 * smaller than asked (forge_tokenizer_vocab_size says how big).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "tokenizer_internal.h"
#include "../base/fs.h"
#include "../base/clock.h"

/* ---- 1. counting ---- */

typedef struct {
    tok_strmap map;
    uint64_t *count; /* per entry */
    size_t cap;
} counter;

static int counter_init(counter *c, size_t expected) {
    memset(c, 0, sizeof *c);
    if (tok_strmap_init(&c->map, expected) != 0) return -1;
    c->cap = 1024;
    c->count = malloc(c->cap * sizeof *c->count);
    return c->count ? 0 : -1;
}

static void counter_free(counter *c) {
    tok_strmap_free(&c->map);
    free(c->count);
    memset(c, 0, sizeof *c);
}

static int counter_add(counter *c, const uint8_t *p, size_t n, uint64_t hash, uint64_t k) {
    int is_new;
    int32_t e = tok_strmap_insert(&c->map, p, n, hash, &is_new);
    if (e < 0) return -1;
    if (is_new) {
        if ((size_t)e >= c->cap) {
            uint64_t *q = realloc(c->count, c->cap * 2 * sizeof *q);
            if (!q) return -1;
            c->count = q;
            c->cap *= 2;
        }
        c->count[e] = 0;
    }
    c->count[e] += k;
    return 0;
}

/* Counts the pieces of text[0..len), documents split at <|endoftext|>. */
static forge_status count_chunk(const pcre2_code *re, const uint8_t *text, size_t len, counter *c) {
    tok_splitter sp;
    FORGE_TRY(tok_splitter_init(&sp, re));
    forge_status st = FORGE_OK;
    size_t pos = 0;
    while (pos < len && st == FORGE_OK) {
        const uint8_t *eot = memmem(text + pos, len - pos, FORGE_TOKENIZER_EOT, FORGE_TOKENIZER_EOT_LEN);
        size_t end = eot ? (size_t)(eot - text) : len;
        tok_splitter_reset(&sp, text + pos, end - pos);
        size_t a, b;
        int rc;
        while ((rc = tok_splitter_next(&sp, &a, &b)) == 1) {
            const uint8_t *p = text + pos + a;
            if (counter_add(c, p, b - a, tok_hash_bytes(p, b - a), 1) != 0) {
                st = forge_error(FORGE_ERR_OOM, "train: out of memory counting pieces");
                break;
            }
        }
        if (rc < 0 && st == FORGE_OK) st = FORGE_ERR_DATA;
        pos = eot ? end + FORGE_TOKENIZER_EOT_LEN : len;
    }
    tok_splitter_free(&sp);
    return st;
}

static int is_ascii_alnum(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static forge_status count_file(const pcre2_code *re, const char *path, counter *total) {
    char *data;
    size_t len;
    FORGE_TRY(forge_read_file(path, &data, &len));
    const uint8_t *text = (const uint8_t *)data;
    int nt = 1;
#ifdef _OPENMP
    nt = omp_get_max_threads();
#endif
    if (len < ((size_t)1 << 20)) nt = 1;
    if (nt > 64) nt = 64;
    size_t cut[65];
    cut[0] = 0;
    for (int t = 1; t < nt; t++) {
        size_t p = len / (size_t)nt * (size_t)t;
        if (p < cut[t - 1]) p = cut[t - 1];
        while (p < len && !(text[p] == ' ' && p > 0 && is_ascii_alnum(text[p - 1]))) p++;
        cut[t] = p;
    }
    cut[nt] = len;
    counter parts[64];
    forge_status status[64];
    for (int t = 0; t < nt; t++) status[t] = counter_init(&parts[t], 1 << 14) == 0 ? FORGE_OK : FORGE_ERR_OOM;
    #pragma omp parallel for num_threads(nt) schedule(static, 1)
    for (int t = 0; t < nt; t++) {
        if (status[t] == FORGE_OK) status[t] = count_chunk(re, text + cut[t], cut[t + 1] - cut[t], &parts[t]);
    }
    forge_status st = FORGE_OK;
    for (int t = 0; t < nt && st == FORGE_OK; t++) {
        if (status[t] != FORGE_OK) {
            /* the message was set on the worker thread; restate it here */
            st = forge_error(status[t], "train: counting pieces of %s failed (%s)", path, forge_status_name(status[t]));
            break;
        }
        for (size_t e = 0; e < parts[t].map.n; e++) {
            size_t n;
            const uint8_t *p = tok_strmap_key(&parts[t].map, (int32_t)e, &n);
            if (counter_add(total, p, n, parts[t].map.hash[e], parts[t].count[e]) != 0) {
                st = forge_error(FORGE_ERR_OOM, "train: out of memory counting pieces");
                break;
            }
        }
    }
    for (int t = 0; t < nt; t++) counter_free(&parts[t]);
    free(data);
    return st;
}

/* ---- 2. merging ---- */

typedef struct {
    int32_t *w;
    uint32_t n, cap;
} word_list;

typedef struct {
    uint64_t count;
    int32_t pair;
} heap_entry;

typedef struct {
    /* words: symbols[off[w] .. off[w] + len[w]) */
    size_t n_words;
    int32_t *sym;
    size_t *off;
    uint32_t *len;
    uint64_t *wcount;
    uint32_t *stamp; /* last merge step that visited the word */
    /* pairs */
    tok_u64map pair_idx; /* (a << 32 | b) -> pair index */
    int32_t *pl, *pr;
    int64_t *pc;
    word_list *pw;
    uint32_t *touched_at;
    size_t n_pairs, pair_cap;
    int32_t *touched;
    size_t n_touched, touched_cap;
    heap_entry *heap;
    size_t hn, hcap;
} trainer;

static int pair_less(const trainer *T, heap_entry x, heap_entry y) { /* x ranks above y */
    if (x.count != y.count) return x.count > y.count;
    if (T->pl[x.pair] != T->pl[y.pair]) return T->pl[x.pair] < T->pl[y.pair];
    return T->pr[x.pair] < T->pr[y.pair];
}

static int heap_push(trainer *T, uint64_t count, int32_t pair) {
    if (T->hn == T->hcap) {
        size_t c = T->hcap ? T->hcap * 2 : 4096;
        heap_entry *h = realloc(T->heap, c * sizeof *h);
        if (!h) return -1;
        T->heap = h;
        T->hcap = c;
    }
    heap_entry v = {count, pair};
    size_t i = T->hn++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_less(T, v, T->heap[parent])) break;
        T->heap[i] = T->heap[parent];
        i = parent;
    }
    T->heap[i] = v;
    return 0;
}

static heap_entry heap_pop(trainer *T) {
    heap_entry top = T->heap[0], last = T->heap[--T->hn];
    size_t i = 0, n = T->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_less(T, T->heap[c + 1], T->heap[c])) c++;
        if (!pair_less(T, T->heap[c], last)) break;
        T->heap[i] = T->heap[c];
        i = c;
    }
    if (n > 0) T->heap[i] = last;
    return top;
}

/* Index of pair (a, b), created with count 0 if new; -1 when out of memory. */
static int32_t pair_get_or_add(trainer *T, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint64_t *v = tok_u64map_get(&T->pair_idx, key);
    if (v) return (int32_t)*v;
    if (T->n_pairs >= (size_t)INT32_MAX) return -1;
    if (T->n_pairs == T->pair_cap) {
        size_t c = T->pair_cap ? T->pair_cap * 2 : 1 << 16;
        int32_t *pl = realloc(T->pl, c * sizeof *pl);
        if (pl) T->pl = pl;
        int32_t *pr = realloc(T->pr, c * sizeof *pr);
        if (pr) T->pr = pr;
        int64_t *pc = realloc(T->pc, c * sizeof *pc);
        if (pc) T->pc = pc;
        word_list *pw = realloc(T->pw, c * sizeof *pw);
        if (pw) T->pw = pw;
        uint32_t *ta = realloc(T->touched_at, c * sizeof *ta);
        if (ta) T->touched_at = ta;
        if (!pl || !pr || !pc || !pw || !ta) return -1;
        T->pair_cap = c;
    }
    int32_t i = (int32_t)T->n_pairs++;
    T->pl[i] = a;
    T->pr[i] = b;
    T->pc[i] = 0;
    memset(&T->pw[i], 0, sizeof T->pw[i]);
    T->touched_at[i] = UINT32_MAX;
    if (tok_u64map_put(&T->pair_idx, key, (uint64_t)i) != 0) return -1;
    return i;
}

static int word_list_add(word_list *l, int32_t w) {
    if (l->n > 0 && l->w[l->n - 1] == w) return 0;
    if (l->n == l->cap) {
        uint32_t c = l->cap ? l->cap * 2 : 4;
        int32_t *q = realloc(l->w, c * sizeof *q);
        if (!q) return -1;
        l->w = q;
        l->cap = c;
    }
    l->w[l->n++] = w;
    return 0;
}

static void trainer_free(trainer *T) {
    free(T->sym);
    free(T->off);
    free(T->len);
    free(T->wcount);
    free(T->stamp);
    tok_u64map_free(&T->pair_idx);
    for (size_t i = 0; i < T->n_pairs; i++) free(T->pw[i].w);
    free(T->pl);
    free(T->pr);
    free(T->pc);
    free(T->pw);
    free(T->touched_at);
    free(T->touched);
    free(T->heap);
}

#define OOM() forge_error(FORGE_ERR_OOM, "train: out of memory")

static forge_status trainer_build(trainer *T, const counter *c, const int32_t byte_id[256]) {
    T->n_words = c->map.n;
    size_t total = c->map.arena_len;
    T->sym = malloc((total ? total : 1) * sizeof *T->sym);
    T->off = malloc((T->n_words + 1) * sizeof *T->off);
    T->len = malloc((T->n_words + 1) * sizeof *T->len);
    T->wcount = malloc((T->n_words + 1) * sizeof *T->wcount);
    T->stamp = malloc((T->n_words + 1) * sizeof *T->stamp);
    if (!T->sym || !T->off || !T->len || !T->wcount || !T->stamp || tok_u64map_init(&T->pair_idx, 1 << 16) != 0)
        return OOM();
    size_t off = 0;
    for (size_t w = 0; w < T->n_words; w++) {
        size_t n;
        const uint8_t *p = tok_strmap_key(&c->map, (int32_t)w, &n);
        T->off[w] = off;
        T->len[w] = (uint32_t)n;
        T->wcount[w] = c->count[w];
        T->stamp[w] = UINT32_MAX;
        for (size_t i = 0; i < n; i++) T->sym[off + i] = byte_id[p[i]];
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t pi = pair_get_or_add(T, T->sym[off + i], T->sym[off + i + 1]);
            if (pi < 0 || word_list_add(&T->pw[pi], (int32_t)w) != 0) return OOM();
            T->pc[pi] += (int64_t)c->count[w];
        }
        off += n;
    }
    for (size_t i = 0; i < T->n_pairs; i++)
        if (T->pc[i] > 0 && heap_push(T, (uint64_t)T->pc[i], (int32_t)i) != 0) return OOM();
    return FORGE_OK;
}

/* Pops the best live pair, or -1 when none is left. */
static int32_t trainer_best(trainer *T) {
    while (T->hn > 0) {
        heap_entry e = heap_pop(T);
        int64_t now = T->pc[e.pair];
        if (now <= 0) continue;
        if ((uint64_t)now == e.count) return e.pair;
        if (heap_push(T, (uint64_t)now, e.pair) != 0) return -2; /* stale: re-queue with its real count */
    }
    return -1;
}

/* Merges (A, B) -> C in every word that has it, updating pair counts. */
static forge_status trainer_apply(trainer *T, int32_t pair, int32_t C, uint32_t step) {
    int32_t A = T->pl[pair], B = T->pr[pair];
    word_list list = T->pw[pair];
    memset(&T->pw[pair], 0, sizeof T->pw[pair]);
    T->n_touched = 0;
    forge_status st = FORGE_OK;
    for (uint32_t k = 0; k < list.n && st == FORGE_OK; k++) {
        int32_t w = list.w[k];
        if (T->stamp[w] == step) continue;
        T->stamp[w] = step;
        int32_t *s = T->sym + T->off[w];
        uint32_t L = T->len[w], i;
        for (i = 0; i + 1 < L; i++)
            if (s[i] == A && s[i + 1] == B) break;
        if (i + 1 >= L) continue; /* the list is pruned lazily */
        int64_t cnt = (int64_t)T->wcount[w];
        for (i = 0; i + 1 < L; i++) {
            uint64_t *v = tok_u64map_get(&T->pair_idx, ((uint64_t)(uint32_t)s[i] << 32) | (uint32_t)s[i + 1]);
            T->pc[*v] -= cnt;
        }
        uint32_t j = 0;
        for (i = 0; i < L;) {
            if (i + 1 < L && s[i] == A && s[i + 1] == B) {
                s[j++] = C;
                i += 2;
            } else {
                s[j++] = s[i++];
            }
        }
        T->len[w] = L = j;
        for (i = 0; i + 1 < L; i++) {
            int32_t pi = pair_get_or_add(T, s[i], s[i + 1]);
            if (pi < 0) {
                st = OOM();
                break;
            }
            T->pc[pi] += cnt;
            if (s[i] != C && s[i + 1] != C) continue;
            if (word_list_add(&T->pw[pi], w) != 0) {
                st = OOM();
                break;
            }
            if (T->touched_at[pi] != step) {
                T->touched_at[pi] = step;
                if (T->n_touched == T->touched_cap) {
                    size_t c = T->touched_cap ? T->touched_cap * 2 : 1024;
                    int32_t *q = realloc(T->touched, c * sizeof *q);
                    if (!q) {
                        st = OOM();
                        break;
                    }
                    T->touched = q;
                    T->touched_cap = c;
                }
                T->touched[T->n_touched++] = pi;
            }
        }
    }
    free(list.w);
    for (size_t k = 0; k < T->n_touched && st == FORGE_OK; k++) {
        int32_t pi = T->touched[k];
        if (T->pc[pi] > 0 && heap_push(T, (uint64_t)T->pc[pi], pi) != 0) st = OOM();
    }
    return st;
}

/* ---- 3. the result ---- */

typedef struct {
    tok_strmap strs; /* token bytes -> entry == id */
    int32_t *ml, *mr, *mres;
    size_t n_merges, cap;
} vocab;

static int vocab_add_merge(vocab *v, int32_t a, int32_t b, int32_t c) {
    if (v->n_merges == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 1024;
        int32_t *l = realloc(v->ml, cap * sizeof *l);
        if (l) v->ml = l;
        int32_t *r = realloc(v->mr, cap * sizeof *r);
        if (r) v->mr = r;
        int32_t *m = realloc(v->mres, cap * sizeof *m);
        if (m) v->mres = m;
        if (!l || !r || !m) return -1;
        v->cap = cap;
    }
    v->ml[v->n_merges] = a;
    v->mr[v->n_merges] = b;
    v->mres[v->n_merges] = c;
    v->n_merges++;
    return 0;
}

forge_status forge_tokenizer_train(forge_tokenizer **out, const char *const *files, int n_files, int vocab_size,
                                   int verbose) {
    if (!out) return forge_error(FORGE_ERR_ARG, "forge_tokenizer_train: out is NULL");
    *out = NULL;
    if (!files || n_files < 1) return forge_error(FORGE_ERR_ARG, "train: need at least one text file");
    for (int i = 0; i < n_files; i++)
        if (!files[i]) return forge_error(FORGE_ERR_ARG, "train: files[%d] is NULL", i);
    if (vocab_size < 257 || vocab_size > (1 << 24))
        return forge_error(FORGE_ERR_ARG,
                           "train: vocab_size %d out of range; expected 257..16777216 (256 bytes + <|endoftext|> "
                           "+ merges)",
                           vocab_size);
    double t0 = forge_now_seconds();
    pcre2_code *re = NULL;
    FORGE_TRY(tok_compile_regex(&re));
    counter total;
    trainer T;
    vocab V;
    memset(&T, 0, sizeof T);
    memset(&V, 0, sizeof V);
    forge_tokenizer *tok = NULL;
    forge_status st = counter_init(&total, 1 << 16) == 0 ? FORGE_OK : OOM();
    for (int i = 0; i < n_files && st == FORGE_OK; i++) st = count_file(re, files[i], &total);
    pcre2_code_free(re);
    if (st != FORGE_OK) goto done;
    double t1 = forge_now_seconds();
    if (verbose)
        fprintf(stderr, "train: %zu distinct pieces from %d file(s) in %.2f s\n", total.map.n, n_files, t1 - t0);

    uint32_t b2c[256];
    uint8_t order[256];
    int32_t byte_id[256];
    tok_byte_unicode(b2c, order);
    if (tok_strmap_init(&V.strs, (size_t)vocab_size) != 0) {
        st = OOM();
        goto done;
    }
    for (int i = 0; i < 256; i++) {
        int is_new;
        if (tok_strmap_insert(&V.strs, &order[i], 1, tok_hash_bytes(&order[i], 1), &is_new) != i) {
            st = OOM();
            goto done;
        }
        byte_id[order[i]] = i;
    }
    st = trainer_build(&T, &total, byte_id);
    counter_free(&total);
    if (st != FORGE_OK) goto done;

    int32_t n_tokens = 256;
    uint8_t *buf = NULL;
    size_t buf_cap = 0;
    for (uint32_t step = 0; n_tokens < vocab_size - 1 && st == FORGE_OK; step++) {
        int32_t pair = trainer_best(&T);
        if (pair == -2) st = OOM();
        if (pair < 0) break;
        int32_t A = T.pl[pair], B = T.pr[pair];
        size_t la, lb;
        tok_strmap_key(&V.strs, A, &la);
        tok_strmap_key(&V.strs, B, &lb);
        if (la + lb > buf_cap) {
            uint8_t *q = realloc(buf, (la + lb) * 2);
            if (!q) {
                st = OOM();
                break;
            }
            buf = q;
            buf_cap = (la + lb) * 2;
        }
        const uint8_t *pa = tok_strmap_key(&V.strs, A, &la), *pb = tok_strmap_key(&V.strs, B, &lb);
        memcpy(buf, pa, la);
        memcpy(buf + la, pb, lb);
        int is_new;
        int32_t C = tok_strmap_insert(&V.strs, buf, la + lb, tok_hash_bytes(buf, la + lb), &is_new);
        if (C < 0 || vocab_add_merge(&V, A, B, C) != 0) {
            st = OOM();
            break;
        }
        if (is_new) n_tokens++;
        st = trainer_apply(&T, pair, C, step);
        if (verbose && (V.n_merges % 1000 == 0))
            fprintf(stderr, "train: %zu merges, %d tokens, %.2f s\n", V.n_merges, n_tokens, forge_now_seconds() - t0);
    }
    free(buf);
    if (st != FORGE_OK) goto done;
    if (verbose) {
        fprintf(stderr, "train: %zu merges, vocabulary %d (asked %d) in %.2f s (merging %.2f s)\n", V.n_merges,
                n_tokens + 1, vocab_size, forge_now_seconds() - t0, forge_now_seconds() - t1);
        if (n_tokens + 1 < vocab_size) fprintf(stderr, "train: the corpus ran out of pairs to merge\n");
    }

    tok = tok_alloc();
    if (!tok) {
        st = OOM();
        goto done;
    }
    tok->n_vocab = n_tokens + 1;
    tok->tok_off = malloc(((size_t)tok->n_vocab + 1) * sizeof *tok->tok_off);
    tok->tok_data = malloc(V.strs.arena_len + FORGE_TOKENIZER_EOT_LEN);
    if (!tok->tok_off || !tok->tok_data) {
        st = OOM();
        goto done;
    }
    size_t off = 0;
    for (int32_t id = 0; id < n_tokens; id++) {
        size_t n;
        const uint8_t *p = tok_strmap_key(&V.strs, id, &n);
        tok->tok_off[id] = off;
        memcpy(tok->tok_data + off, p, n);
        off += n;
    }
    tok->tok_off[n_tokens] = off;
    memcpy(tok->tok_data + off, FORGE_TOKENIZER_EOT, FORGE_TOKENIZER_EOT_LEN);
    tok->tok_off[n_tokens + 1] = off + FORGE_TOKENIZER_EOT_LEN;
    memcpy(tok->byte_id, byte_id, sizeof byte_id);
    tok->n_merges = (int)V.n_merges;
    tok->merge_left = V.ml;
    tok->merge_right = V.mr;
    tok->merge_result = V.mres;
    V.ml = V.mr = V.mres = NULL;
    st = tok_finalize(tok);
done:
    counter_free(&total);
    trainer_free(&T);
    tok_strmap_free(&V.strs);
    free(V.ml);
    free(V.mr);
    free(V.mres);
    if (st != FORGE_OK) {
        forge_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return FORGE_OK;
}
