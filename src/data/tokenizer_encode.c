/*
 * tokenizer_encode.c: text -> ids. Pre-tokenise with GPT-2's regex, then run
 * BPE on each piece, with a per-call cache of piece -> ids.
 *
 * Exactness first: tok_bpe_piece is GPT-2's bpe() (openai/gpt-2
 * src/encoder.py): find the adjacent pair with the lowest merge rank, merge
 * *every* occurrence of it left to right in one pass, repeat. The heap path
 * for long pieces keeps that order by popping all entries of one rank as a
 * batch (in position order) before any pair the batch creates is queued;
 * merging the lowest pair one occurrence at a time instead differs from GPT-2
 * when a pair created mid-pass outranks the rest of the pass.
 *
 * Invalid UTF-8: the regex is compiled with PCRE2_MATCH_INVALID_UTF, under
 * which invalid sequences never match and act as barriers; the splitter emits
 * each run of unmatched bytes as a piece of its own, so pieces tile the input
 * and decode(encode(x)) == x for every byte string.
 *
 * The cache lives in one encode call, not in the tokenizer, so concurrent
 * encodes with one tokenizer are safe (the tokenizer is read-only here).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* ---- pre-tokenisation ---- */

forge_status tok_splitter_init(tok_splitter *s, const pcre2_code *re) {
    memset(s, 0, sizeof *s);
    s->re = re;
    s->md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!s->md) return forge_error(FORGE_ERR_OOM, "out of memory for PCRE2 match data");
    return FORGE_OK;
}

void tok_splitter_free(tok_splitter *s) {
    if (s->md) pcre2_match_data_free(s->md);
    if (s->mctx) pcre2_match_context_free(s->mctx);
    if (s->jit_stack) pcre2_jit_stack_free(s->jit_stack);
    memset(s, 0, sizeof *s);
}

void tok_splitter_reset(tok_splitter *s, const uint8_t *text, size_t len) {
    s->text = text;
    s->len = len;
    s->pos = 0;
    s->have_next = 0;
}

static int splitter_match(tok_splitter *s, size_t from) {
    int rc = pcre2_match(s->re, s->text, s->len, from, 0, s->md, s->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !s->jit_stack) {
        /* The default 32 KiB JIT stack ran out: give it 8 MiB and retry. */
        s->mctx = pcre2_match_context_create(NULL);
        s->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        if (s->mctx && s->jit_stack) {
            pcre2_jit_stack_assign(s->mctx, NULL, s->jit_stack);
            rc = pcre2_match(s->re, s->text, s->len, from, 0, s->md, s->mctx);
        }
    }
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(s->re, s->text, s->len, from, PCRE2_NO_JIT, s->md, NULL);
    return rc;
}

int tok_splitter_next(tok_splitter *s, size_t *start, size_t *end) {
    if (s->have_next) {
        s->have_next = 0;
        *start = s->next_start;
        *end = s->next_end;
        s->pos = s->next_end;
        return 1;
    }
    if (s->pos >= s->len) return 0;
    int rc = splitter_match(s, s->pos);
    if (rc == PCRE2_ERROR_NOMATCH) { /* only unmatchable bytes remain */
        *start = s->pos;
        *end = s->len;
        s->pos = s->len;
        return 1;
    }
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        forge_error(FORGE_ERR_DATA, "pre-tokenisation failed at byte %zu: PCRE2 error %d: %s", s->pos, rc,
                    (const char *)msg);
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
    size_t ms = ov[0], me = ov[1];
    if (ms < s->pos || ms > s->len) ms = s->pos; /* defensive: never happens */
    if (me <= ms) me = ms + 1;                   /* every alternative is non-empty; stay safe anyway */
    if (me > s->len) me = s->len;
    if (ms > s->pos) { /* bytes the regex skipped: yield them first */
        *start = s->pos;
        *end = ms;
        s->next_start = ms;
        s->next_end = me;
        s->have_next = 1;
        s->pos = ms;
        return 1;
    }
    *start = ms;
    *end = me;
    s->pos = me;
    return 1;
}

/* ---- BPE on one piece ---- */

static inline uint64_t pair_lookup(const forge_tokenizer *tok, int32_t a, int32_t b) {
    const uint64_t *v = tok_u64map_get(&tok->pair_map, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b);
    return v ? *v : UINT64_MAX;
}

/* GPT-2's loop, literally; for short pieces. rank[i] belongs to pair (i, i+1)
 * of the array before the pass, which is still intact when the pass reaches i. */
static size_t bpe_short(const forge_tokenizer *tok, const uint8_t *p, size_t n, int32_t *out) {
    uint32_t rank[TOK_BPE_SHORT];
    for (size_t i = 0; i < n; i++) out[i] = tok->byte_id[p[i]];
    size_t m = n;
    while (m > 1) {
        uint32_t best = UINT32_MAX;
        for (size_t i = 0; i + 1 < m; i++) {
            uint64_t v = pair_lookup(tok, out[i], out[i + 1]);
            rank[i] = v == UINT64_MAX ? UINT32_MAX : (uint32_t)(v >> 32);
            if (rank[i] < best) best = rank[i];
        }
        if (best == UINT32_MAX) break;
        int32_t merged = tok->merge_result[best];
        size_t j = 0;
        for (size_t i = 0; i < m;) {
            if (i + 1 < m && rank[i] == best) {
                out[j++] = merged;
                i += 2;
            } else {
                out[j++] = out[i++];
            }
        }
        m = j;
    }
    return m;
}

/* min-heap of (rank << 32 | position) */
static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent] <= v) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= last) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

#define NONE UINT32_MAX

/* Same result as bpe_short in O(n log n): a linked list of symbols (each node
 * keeps its first byte's position) and a heap of candidate pairs, validated
 * when popped. */
static size_t bpe_heap(const forge_tokenizer *tok, const uint8_t *p, size_t n, int32_t *out) {
    if (n > UINT32_MAX - 1) return 0;
    int32_t *id = malloc(n * sizeof *id);
    uint32_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
    uint32_t *batch = malloc((3 * n + 1) * sizeof *batch), *pending = malloc(2 * n * sizeof *pending);
    /* pushes: n - 1 initial + at most 2 per merge, and there are < n merges */
    uint64_t *heap = malloc((3 * n + 1) * sizeof *heap);
    size_t m = 0, hn = 0;
    if (!id || !next || !prev || !batch || !pending || !heap) goto done;
    for (size_t i = 0; i < n; i++) {
        id[i] = tok->byte_id[p[i]];
        next[i] = i + 1 < n ? (uint32_t)(i + 1) : NONE;
        prev[i] = i > 0 ? (uint32_t)(i - 1) : NONE;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        uint64_t v = pair_lookup(tok, id[i], id[i + 1]);
        if (v != UINT64_MAX) heap_push(heap, &hn, (v & 0xFFFFFFFF00000000ull) | i);
    }
    while (hn > 0) {
        uint32_t r = (uint32_t)(heap[0] >> 32);
        size_t nb = 0;
        while (hn > 0 && (uint32_t)(heap[0] >> 32) == r) batch[nb++] = (uint32_t)heap_pop(heap, &hn);
        int32_t first = tok->merge_left[r], second = tok->merge_right[r], merged = tok->merge_result[r];
        size_t np = 0;
        for (size_t k = 0; k < nb; k++) {
            uint32_t a = batch[k];
            if (id[a] != first) continue; /* stale: a was merged or absorbed */
            uint32_t b = next[a];
            if (b == NONE || id[b] != second) continue;
            id[a] = merged;
            id[b] = -1;
            next[a] = next[b];
            if (next[b] != NONE) prev[next[b]] = a;
            if (prev[a] != NONE) pending[np++] = prev[a];
            if (next[a] != NONE) pending[np++] = a;
        }
        for (size_t k = 0; k < np; k++) {
            uint32_t a = pending[k];
            if (id[a] < 0 || next[a] == NONE) continue;
            uint64_t v = pair_lookup(tok, id[a], id[next[a]]);
            if (v != UINT64_MAX) heap_push(heap, &hn, (v & 0xFFFFFFFF00000000ull) | a);
        }
    }
    for (uint32_t i = 0; i != NONE; i = next[i]) out[m++] = id[i];
done:
    free(id);
    free(next);
    free(prev);
    free(batch);
    free(pending);
    free(heap);
    return m;
}

size_t tok_bpe_piece(const forge_tokenizer *tok, const uint8_t *p, size_t n, int32_t *out, int force_heap) {
    if (n == 0) return 0;
    if (n == 1) {
        out[0] = tok->byte_id[p[0]];
        return 1;
    }
    if (n <= TOK_BPE_SHORT && !force_heap) return bpe_short(tok, p, n, out);
    return bpe_heap(tok, p, n, out);
}

/* ---- encode ---- */

#define CACHE_MAX_PIECE 64        /* longer pieces are rare: no caching */
#define CACHE_MAX_ENTRIES (1 << 20)

typedef struct {
    const forge_tokenizer *tok;
    tok_splitter split;
    tok_strmap cache;  /* piece bytes -> entry */
    size_t *cache_at;  /* entry -> offset in pool */
    uint8_t *cache_n;  /* entry -> number of ids (<= CACHE_MAX_PIECE) */
    size_t cache_cap;  /* capacity of cache_at / cache_n */
    int32_t *pool;     /* cached ids */
    size_t pool_len, pool_cap;
    int cache_ok;
} encoder;

static void cache_add(encoder *E, const uint8_t *p, size_t n, uint64_t h, const int32_t *ids, size_t k) {
    if (!E->cache_ok || E->cache.n >= CACHE_MAX_ENTRIES) return;
    if (E->cache.n == E->cache_cap) {
        size_t c = E->cache_cap ? E->cache_cap * 2 : 1024;
        size_t *a = realloc(E->cache_at, c * sizeof *a);
        if (a) E->cache_at = a;
        uint8_t *b = realloc(E->cache_n, c);
        if (b) E->cache_n = b;
        if (!a || !b) return; /* caching is optional */
        E->cache_cap = c;
    }
    if (E->pool_len + k > E->pool_cap) {
        size_t c = E->pool_cap ? E->pool_cap * 2 : 4096;
        while (c < E->pool_len + k) c *= 2;
        int32_t *q = realloc(E->pool, c * sizeof *q);
        if (!q) return;
        E->pool = q;
        E->pool_cap = c;
    }
    int is_new;
    int32_t e = tok_strmap_insert(&E->cache, p, n, h, &is_new);
    if (e < 0 || !is_new) return;
    memcpy(E->pool + E->pool_len, ids, k * sizeof *ids);
    E->cache_at[e] = E->pool_len;
    E->cache_n[e] = (uint8_t)k;
    E->pool_len += k;
}

/* Encodes text without special tokens, appending to out (room for len ids). */
static forge_status encode_ordinary(encoder *E, const uint8_t *text, size_t len, int32_t *out, size_t *n_out) {
    size_t n = *n_out, a, b;
    int rc;
    tok_splitter_reset(&E->split, text, len);
    while ((rc = tok_splitter_next(&E->split, &a, &b)) == 1) {
        const uint8_t *p = text + a;
        size_t pn = b - a;
        if (pn == 1) {
            out[n++] = E->tok->byte_id[p[0]];
            continue;
        }
        uint64_t h = 0;
        if (pn <= CACHE_MAX_PIECE && E->cache_ok) {
            h = tok_hash_bytes(p, pn);
            int32_t e = tok_strmap_find(&E->cache, p, pn, h);
            if (e >= 0) {
                memcpy(out + n, E->pool + E->cache_at[e], E->cache_n[e] * sizeof *out);
                n += E->cache_n[e];
                continue;
            }
        }
        size_t k = tok_bpe_piece(E->tok, p, pn, out + n, 0);
        if (k == 0) return forge_error(FORGE_ERR_OOM, "encode: out of memory for a %zu-byte piece", pn);
        if (pn <= CACHE_MAX_PIECE) cache_add(E, p, pn, h, out + n, k);
        n += k;
    }
    *n_out = n;
    return rc < 0 ? FORGE_ERR_DATA : FORGE_OK;
}

forge_status forge_tokenizer_encode(const forge_tokenizer *tok, const char *text, size_t len, int allow_special,
                                    int32_t **ids, size_t *n_ids) {
    if (!tok || !ids || !n_ids || (!text && len))
        return forge_error(FORGE_ERR_ARG, "forge_tokenizer_encode: NULL argument");
    *ids = NULL;
    *n_ids = 0;
    /* every piece yields at most one id per byte, and each special token (13 bytes) one id */
    int32_t *out = malloc((len ? len : 1) * sizeof *out);
    if (!out) return forge_error(FORGE_ERR_OOM, "encode: out of memory for %zu ids", len);
    encoder E;
    memset(&E, 0, sizeof E);
    E.tok = tok;
    forge_status st = tok_splitter_init(&E.split, tok->re);
    if (st != FORGE_OK) {
        free(out);
        return st;
    }
    E.cache_ok = tok_strmap_init(&E.cache, len / 64 < 4096 ? 256 : 4096) == 0;
    const uint8_t *s = (const uint8_t *)text;
    size_t n = 0, pos = 0;
    while (st == FORGE_OK && pos < len) {
        size_t seg_end = len;
        const uint8_t *sp = NULL;
        if (allow_special) {
            sp = memmem(s + pos, len - pos, FORGE_TOKENIZER_EOT, FORGE_TOKENIZER_EOT_LEN);
            if (sp) seg_end = (size_t)(sp - s);
        }
        if (seg_end > pos) st = encode_ordinary(&E, s + pos, seg_end - pos, out, &n);
        if (sp) {
            out[n++] = tok->n_vocab - 1;
            pos = seg_end + FORGE_TOKENIZER_EOT_LEN;
        } else {
            pos = seg_end;
        }
    }
    tok_splitter_free(&E.split);
    tok_strmap_free(&E.cache);
    free(E.cache_at);
    free(E.cache_n);
    free(E.pool);
    if (st != FORGE_OK) {
        free(out);
        return st;
    }
    int32_t *shrunk = realloc(out, (n ? n : 1) * sizeof *out);
    *ids = shrunk ? shrunk : out;
    *n_ids = n;
    return FORGE_OK;
}
