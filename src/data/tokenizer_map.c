/*
 * tokenizer_map.c: the two hash maps behind the tokenizer and its trainer.
 *
 * Both use open addressing with linear probing in a power-of-two table kept at
 * most half full, and never delete (the tokenizer only adds). tok_strmap hands
 * out dense entry indices so callers keep values in plain parallel arrays.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

#define HASH_MUL 0x9E3779B97F4A7C15ull

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 32;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 32;
    return x;
}

uint64_t tok_hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x243F6A8885A308D3ull ^ (n * HASH_MUL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * HASH_MUL;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    if (n > 0) {
        uint64_t w = 0;
        memcpy(&w, p, n);
        h = (h ^ w) * HASH_MUL;
        h ^= h >> 29;
    }
    return mix64(h);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* ---- uint64 -> uint64 ---- */

int tok_u64map_init(tok_u64map *m, size_t expected) {
    m->cap = pow2_at_least(expected * 2 + 1);
    m->n = 0;
    m->keys = malloc(m->cap * sizeof *m->keys);
    m->vals = malloc(m->cap * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        tok_u64map_free(m);
        return -1;
    }
    memset(m->keys, 0xFF, m->cap * sizeof *m->keys);
    return 0;
}

void tok_u64map_free(tok_u64map *m) {
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->n = 0;
}

static inline size_t u64_slot(uint64_t key, size_t mask) { return (size_t)mix64(key * HASH_MUL) & mask; }

static int u64map_grow(tok_u64map *m) {
    tok_u64map g;
    if (tok_u64map_init(&g, m->cap) != 0) return -1; /* doubles the capacity */
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == UINT64_MAX) continue;
        size_t s = u64_slot(m->keys[i], g.cap - 1);
        while (g.keys[s] != UINT64_MAX) s = (s + 1) & (g.cap - 1);
        g.keys[s] = m->keys[i];
        g.vals[s] = m->vals[i];
    }
    g.n = m->n;
    tok_u64map_free(m);
    *m = g;
    return 0;
}

int tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val) {
    if ((m->n + 1) * 2 > m->cap && u64map_grow(m) != 0) return -1;
    size_t mask = m->cap - 1, s = u64_slot(key, mask);
    while (m->keys[s] != UINT64_MAX && m->keys[s] != key) s = (s + 1) & mask;
    if (m->keys[s] == UINT64_MAX) {
        m->keys[s] = key;
        m->n++;
    }
    m->vals[s] = val;
    return 0;
}

uint64_t *tok_u64map_get(const tok_u64map *m, uint64_t key) {
    if (m->cap == 0) return NULL;
    size_t mask = m->cap - 1, s = u64_slot(key, mask);
    for (;;) {
        uint64_t k = m->keys[s];
        if (k == key) return &m->vals[s];
        if (k == UINT64_MAX) return NULL;
        s = (s + 1) & mask;
    }
}

/* ---- bytes -> dense index ---- */

int tok_strmap_init(tok_strmap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_at_least(expected * 2 + 1);
    m->slots = malloc(m->cap * sizeof *m->slots);
    m->ecap = expected > 16 ? expected : 16;
    m->hash = malloc(m->ecap * sizeof *m->hash);
    m->off = malloc(m->ecap * sizeof *m->off);
    m->len = malloc(m->ecap * sizeof *m->len);
    m->arena_cap = m->ecap * 8;
    m->arena = malloc(m->arena_cap);
    if (!m->slots || !m->hash || !m->off || !m->len || !m->arena) {
        tok_strmap_free(m);
        return -1;
    }
    memset(m->slots, 0xFF, m->cap * sizeof *m->slots);
    return 0;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    free(m->hash);
    free(m->off);
    free(m->len);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

int32_t tok_strmap_find(const tok_strmap *m, const uint8_t *p, size_t n, uint64_t hash) {
    if (m->cap == 0) return -1;
    size_t mask = m->cap - 1, s = (size_t)hash & mask;
    for (;;) {
        int32_t e = m->slots[s];
        if (e < 0) return -1;
        if (m->hash[e] == hash && m->len[e] == n && memcmp(m->arena + m->off[e], p, n) == 0) return e;
        s = (s + 1) & mask;
    }
}

static int strmap_grow_slots(tok_strmap *m) {
    size_t cap = m->cap * 2;
    int32_t *slots = malloc(cap * sizeof *slots);
    if (!slots) return -1;
    memset(slots, 0xFF, cap * sizeof *slots);
    for (size_t e = 0; e < m->n; e++) {
        size_t s = (size_t)m->hash[e] & (cap - 1);
        while (slots[s] >= 0) s = (s + 1) & (cap - 1);
        slots[s] = (int32_t)e;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

static int grow(void **p, size_t *cap_bytes, size_t need_bytes) {
    if (need_bytes <= *cap_bytes) return 0;
    size_t c = *cap_bytes ? *cap_bytes : 64;
    while (c < need_bytes) c *= 2;
    void *q = realloc(*p, c);
    if (!q) return -1;
    *p = q;
    *cap_bytes = c;
    return 0;
}

int32_t tok_strmap_insert(tok_strmap *m, const uint8_t *p, size_t n, uint64_t hash, int *is_new) {
    *is_new = 0;
    size_t mask = m->cap - 1, s = (size_t)hash & mask;
    for (;;) {
        int32_t e = m->slots[s];
        if (e < 0) break;
        if (m->hash[e] == hash && m->len[e] == n && memcmp(m->arena + m->off[e], p, n) == 0) return e;
        s = (s + 1) & mask;
    }
    if (m->n >= (size_t)INT32_MAX || n > UINT32_MAX) return -1;
    if (m->n == m->ecap) {
        size_t c = m->ecap * 2;
        uint64_t *h = realloc(m->hash, c * sizeof *h);
        if (!h) return -1;
        m->hash = h;
        size_t *o = realloc(m->off, c * sizeof *o);
        if (!o) return -1;
        m->off = o;
        uint32_t *l = realloc(m->len, c * sizeof *l);
        if (!l) return -1;
        m->len = l;
        m->ecap = c;
    }
    if (grow((void **)&m->arena, &m->arena_cap, m->arena_len + n) != 0) return -1;
    int32_t e = (int32_t)m->n;
    memcpy(m->arena + m->arena_len, p, n);
    m->hash[e] = hash;
    m->off[e] = m->arena_len;
    m->len[e] = (uint32_t)n;
    m->arena_len += n;
    m->n++;
    m->slots[s] = e;
    *is_new = 1;
    if (m->n * 2 > m->cap && strmap_grow_slots(m) != 0) {
        /* the entry is in; the table is just fuller than we like. Undo to
         * keep the load-factor invariant honest and report OOM. */
        m->slots[s] = -1;
        m->n--;
        m->arena_len -= n;
        *is_new = 0;
        return -1;
    }
    return e;
}
