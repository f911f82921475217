/*
 * tokenizer_internal.h: what tokenizer.c, tokenizer_encode.c, tokenizer_train.c
 * and tokenizer_map.c share. Not part of the public API (tests may include it).
 *
 * Token ids are dense: 0..n_vocab-1, with <|endoftext|> last. Every token has
 * a byte string; two ids never share one (the trainer reuses the existing id
 * when a merge produces bytes that are already a token, as HF tokenizers do),
 * so bytes <-> id is a bijection and GPT-2's string-keyed encoder.json can
 * express any forge vocabulary.
 *
 * A merge of rank r is (merge_left[r], merge_right[r]) -> merge_result[r];
 * pair_map maps the packed pair (left << 32 | right) to (r << 32 | result).
 */
#ifndef FORGE_TOKENIZER_INTERNAL_H
#define FORGE_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

#define FORGE_TOKENIZER_EOT "<|endoftext|>"
#define FORGE_TOKENIZER_EOT_LEN 13

/* GPT-2's pre-tokenisation regex (openai/gpt-2 src/encoder.py)
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * written for PCRE2 with \s spelled out. PCRE2's \s (with UCP) is \p{Zs}, \h
 * and \v, and \h keeps U+180E (MONGOLIAN VOWEL SEPARATOR, whitespace before
 * Unicode 6.3) where Python's `regex` does not; the explicit set below equals
 * Python's \s on every code point both libraries' tables know. (Letters
 * assigned in newer Unicode versions than PCRE2's tables still differ; no
 * pattern can fix that.) One class instead of an alternation keeps JIT fast. */
#define FORGE_TOKENIZER_WS "\\p{Zs}\\t\\n\\x0B\\f\\r\\x{85}\\x{2028}\\x{2029}"
#define FORGE_TOKENIZER_PATTERN                                                                        \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" FORGE_TOKENIZER_WS "\\p{L}\\p{N}]+|[" \
    FORGE_TOKENIZER_WS "]+(?![^" FORGE_TOKENIZER_WS "])|[" FORGE_TOKENIZER_WS "]+"

/* ---- hash maps (tokenizer_map.c) ---- */

uint64_t tok_hash_bytes(const uint8_t *p, size_t n);

/* uint64 key -> uint64 value, open addressing; the key UINT64_MAX is reserved. */
typedef struct {
    uint64_t *keys;
    uint64_t *vals;
    size_t cap; /* power of two */
    size_t n;
} tok_u64map;

int tok_u64map_init(tok_u64map *m, size_t expected); /* 0, or -1 when out of memory */
void tok_u64map_free(tok_u64map *m);
/* Inserts or overwrites; 0, or -1 when out of memory. */
int tok_u64map_put(tok_u64map *m, uint64_t key, uint64_t val);
/* Pointer to the value, or NULL when absent (valid until the next put). */
uint64_t *tok_u64map_get(const tok_u64map *m, uint64_t key);

/* Byte string -> dense entry index (0, 1, 2, ... in insertion order). The
 * keys live in an arena owned by the map; callers keep values in parallel
 * arrays indexed by entry. */
typedef struct {
    int32_t *slots; /* entry index, -1 empty; cap entries */
    size_t cap;     /* power of two */
    uint64_t *hash; /* per entry */
    size_t *off;    /* per entry: offset of the key in arena */
    uint32_t *len;  /* per entry */
    size_t n, ecap;
    uint8_t *arena;
    size_t arena_len, arena_cap;
} tok_strmap;

int tok_strmap_init(tok_strmap *m, size_t expected);
void tok_strmap_free(tok_strmap *m);
/* Entry index of the key, or -1. hash must be tok_hash_bytes(p, n). */
int32_t tok_strmap_find(const tok_strmap *m, const uint8_t *p, size_t n, uint64_t hash);
/* Entry index of the key, inserting it when absent (*is_new says which);
 * -1 when out of memory or past INT32_MAX entries. */
int32_t tok_strmap_insert(tok_strmap *m, const uint8_t *p, size_t n, uint64_t hash, int *is_new);
static inline const uint8_t *tok_strmap_key(const tok_strmap *m, int32_t e, size_t *n) {
    *n = m->len[e];
    return m->arena + m->off[e];
}

/* ---- the tokenizer ---- */

struct forge_tokenizer {
    int n_vocab;       /* ids 0..n_vocab-1, eot = n_vocab - 1 */
    uint8_t *tok_data; /* token bytes, concatenated */
    size_t *tok_off;   /* n_vocab + 1 offsets into tok_data */
    int32_t byte_id[256];
    int n_merges;
    int32_t *merge_left, *merge_right, *merge_result; /* n_merges, by rank */
    tok_u64map pair_map;                              /* (l << 32 | r) -> (rank << 32 | result) */
    pcre2_code *re;                                   /* FORGE_TOKENIZER_PATTERN, JIT-compiled if possible */
};

/* GPT-2's bytes_to_unicode(): byte -> code point, and the byte order GPT-2
 * gives ids 0..255 (printable bytes first). */
void tok_byte_unicode(uint32_t byte_to_cp[256], uint8_t order[256]);

/* Builds pair_map and the regex once tokens and merges are filled in. */
forge_status tok_finalize(forge_tokenizer *tok);

/* Pre-tokenisation: yields the pieces of text[0..len) in order. Bytes the
 * regex cannot match (invalid UTF-8) come out as a piece of their own, so
 * the pieces always tile the input. */
typedef struct {
    const pcre2_code *re;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    const uint8_t *text;
    size_t len, pos;
    size_t next_start, next_end; /* a match found past a gap, not yet yielded */
    int have_next;
} tok_splitter;

forge_status tok_splitter_init(tok_splitter *s, const pcre2_code *re);
void tok_splitter_reset(tok_splitter *s, const uint8_t *text, size_t len);
/* 1 with [*start, *end) set, 0 at the end, -1 on a PCRE2 failure (message set). */
int tok_splitter_next(tok_splitter *s, size_t *start, size_t *end);
void tok_splitter_free(tok_splitter *s);

/* Applies the merges to one piece (n >= 1): writes at most n ids to out and
 * returns how many, or 0 when out of memory. Exactly GPT-2's bpe(): take the
 * lowest-ranked adjacent pair, merge all its occurrences left to right, repeat.
 * Short pieces rescan (O(n^2), no allocation); long ones use a heap
 * (O(n log n)); force_heap takes the heap path for any n so tests compare both. */
#define TOK_BPE_SHORT 32
size_t tok_bpe_piece(const forge_tokenizer *tok, const uint8_t *p, size_t n, int32_t *out,
                     int force_heap);

/* Compiles FORGE_TOKENIZER_PATTERN (UTF, UCP, MATCH_INVALID_UTF; JIT when available). */
forge_status tok_compile_regex(pcre2_code **re);

/* Reads a whole file; *data is malloc'ed and NUL-terminated. */

/* Allocates an empty tokenizer (calloc). */
forge_tokenizer *tok_alloc(void);

#endif
