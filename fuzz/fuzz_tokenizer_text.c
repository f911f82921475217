/*
 * fuzz_tokenizer_text.c: libFuzzer target for encode/decode alone
 * (src/data/tokenizer_encode.c: the GPT-2 pre-tokeniser, BPE, the piece
 * cache), with one tokenizer loaded once, so every execution goes to the text.
 *
 * The tokenizer is built at start-up from the merge list below (the bytes plus
 * 63 merges: English pieces, runs of spaces and of 'a', two merges making one token, spelled into encoder.json / vocab.bpe
 * text and loaded with forge_tokenizer_load_memory), or loaded from the
 * directory FORGE_FUZZ_TOKENIZER names (e.g. GPT-2's, whose 50000 merges make
 * long pieces take the heap path). The input is the text: it must round-trip
 * exactly through encode and decode, with and without the special token, every
 * id must be in range, and the two BPE paths (rescan and heap) must agree on
 * its first TOK_BPE_SHORT bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_round_trip.h"
#include "../src/data/tokenizer.h"
#include "../src/data/tokenizer_internal.h"

#define FAIL(...) FUZZ_FAIL("tokenizer_text", __VA_ARGS__)

static forge_tokenizer *tok;

/* left and right halves of each merge, in rank order, as plain bytes */
static const char *const merges[][2] = {
    {"t", "h"}, {"th", "e"}, {" ", "t"}, {" t", "h"}, {" th", "e"}, {"i", "n"}, {"in", "g"}, {"a", "n"},
    {"an", "d"}, {" ", "a"}, {" a", "n"}, {" an", "d"}, {"e", "r"}, {"o", "n"}, {"r", "e"}, {"e", "d"},
    {" ", "s"}, {"o", "u"}, {"e", "s"}, {"i", "s"}, {" ", "w"}, {"i", "t"}, {" ", "o"}, {"o", "f"},
    {" o", "f"}, {" ", "i"}, {" i", "s"}, {"'", "s"}, {"1", "2"}, {"12", "3"}, {" ", "1"}, {" 1", "2"},
    {"\n", "\n"}, {" ", " "}, {"  ", "  "}, {"    ", "    "}, {"\xc3", "\xa9"}, {"c", "a"}, {"ca", "f"},
    {"caf", "\xc3\xa9"}, {"\xe4", "\xbd"}, {"\xe4\xbd", "\xa0"}, {"<", "|"}, {"e", "n"}, {"en", "d"},
    {"<|", "end"}, {"t", "e"}, {"te", "x"}, {"tex", "t"}, {"of", "text"}, {"<|end", "oftext"}, {"|", ">"},
    {" ", "\n"}, {"\r", "\n"}, {"a", "a"}, {"aa", "aa"}, {"aaaa", "aaaa"}, {"a", "aa"}, {"aa", "a"},
    {"b", "a"}, {"a", "b"}, {"ab", "a"}, {"a", "ba"},
};
#define N_MERGES ((int)(sizeof merges / sizeof merges[0]))

/* appends bytes spelled in GPT-2's byte-to-unicode alphabet; JSON-escaped if asked */
static size_t spell(char *out, const char *p, size_t n, const uint32_t b2c[256], int json) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = b2c[(uint8_t)p[i]];
        if (cp < 0x80) {
            if (json && (cp == '"' || cp == '\\')) out[k++] = '\\';
            out[k++] = (char)cp;
        } else {
            out[k++] = (char)(0xC0 | (cp >> 6));
            out[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return k;
}

static forge_tokenizer *build_tokenizer(void) {
    uint32_t b2c[256];
    uint8_t order[256];
    tok_byte_unicode(b2c, order);
    size_t cap = 1 << 16;
    char *enc = malloc(cap), *bpe = malloc(cap);
    if (!enc || !bpe) FAIL("out of memory");
    size_t ne = 0, nb = 0;
    enc[ne++] = '{';
    for (int i = 0; i < 256; i++) {
        char b = (char)order[i];
        ne += (size_t)snprintf(enc + ne, cap - ne, "%s\"", i ? ", " : "");
        ne += spell(enc + ne, &b, 1, b2c, 1);
        ne += (size_t)snprintf(enc + ne, cap - ne, "\": %d", i);
    }
    /* each merge's result is a new token unless an earlier one spelled the same bytes */
    static char made[N_MERGES][64];
    int id = 256;
    nb += (size_t)snprintf(bpe + nb, cap - nb, "#version: 0.2\n");
    for (int r = 0; r < N_MERGES; r++) {
        snprintf(made[r], sizeof made[r], "%s%s", merges[r][0], merges[r][1]);
        int seen = 0;
        for (int q = 0; q < r; q++) seen |= strcmp(made[q], made[r]) == 0;
        if (!seen) {
            ne += (size_t)snprintf(enc + ne, cap - ne, ", \"");
            ne += spell(enc + ne, made[r], strlen(made[r]), b2c, 1);
            ne += (size_t)snprintf(enc + ne, cap - ne, "\": %d", id++);
        }
        nb += spell(bpe + nb, merges[r][0], strlen(merges[r][0]), b2c, 0);
        bpe[nb++] = ' ';
        nb += spell(bpe + nb, merges[r][1], strlen(merges[r][1]), b2c, 0);
        bpe[nb++] = '\n';
    }
    ne += (size_t)snprintf(enc + ne, cap - ne, ", \"<|endoftext|>\": %d}", id);
    forge_tokenizer *t = NULL;
    if (forge_tokenizer_load_memory(&t, enc, ne, "built-in encoder.json", bpe, nb, "built-in vocab.bpe") != FORGE_OK)
        FAIL("the built-in tokenizer does not load: %s", forge_error_message());
    free(enc);
    free(bpe);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *dir = getenv("FORGE_FUZZ_TOKENIZER");
    if (dir && dir[0]) {
        if (forge_tokenizer_load(&tok, dir) != FORGE_OK) FAIL("FORGE_FUZZ_TOKENIZER: %s", forge_error_message());
    } else {
        tok = build_tokenizer();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_round_trip("tokenizer_text", tok, data, size, 0);
    fuzz_round_trip("tokenizer_text", tok, data, size, 1);
    size_t k = size < TOK_BPE_SHORT ? size : TOK_BPE_SHORT;
    if (k >= 2) {
        int32_t a[TOK_BPE_SHORT], b[TOK_BPE_SHORT];
        size_t na = tok_bpe_piece(tok, data, k, a, 0), nb = tok_bpe_piece(tok, data, k, b, 1);
        if (na != nb || memcmp(a, b, na * sizeof a[0]) != 0) FAIL("BPE paths disagree on a %zu-byte piece", k);
    }
    return 0;
}
