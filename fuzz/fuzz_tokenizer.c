/*
 * fuzz_tokenizer.c: libFuzzer target for the tokenizer's files and codec
 * (src/data/tokenizer*.c): encoder.json, vocab.bpe, and encode/decode.
 *
 * The input is three parts separated by NUL bytes:
 *     encoder.json \0 vocab.bpe \0 text
 * (a NUL is no loss: neither file can hold one; the text may). The two files
 * are loaded with forge_tokenizer_load_memory. When they load, the text must
 * round-trip exactly through encode and decode, with and without the special
 * token, every id must be in range, and on a text of at most TOK_BPE_SHORT
 * bytes the two BPE paths (rescan and heap) must agree.
 *
 * The custom mutator mutates one part at a time (encoder.json 40%, vocab.bpe
 * 30%, text 30%) and keeps the separators, so the small text is not drowned by
 * the 3 KB encoder.json and most edits keep the other parts loadable.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_round_trip.h"
#include "../src/data/tokenizer.h"
#include "../src/data/tokenizer_internal.h"

#define FAIL(...) FUZZ_FAIL("tokenizer", __VA_ARGS__)

#ifndef FORGE_FUZZ_REPLAY
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    uint8_t *z1 = memchr(data, 0, size);
    uint8_t *z2 = z1 ? memchr(z1 + 1, 0, (size_t)(data + size - z1 - 1)) : NULL;
    if (!z2 || max_size < size || seed % 10 == 9) return LLVMFuzzerMutate(data, size, max_size);
    size_t part = seed % 10 < 4 ? 0 : seed % 10 < 7 ? 1 : 2;
    size_t start = part == 0 ? 0 : part == 1 ? (size_t)(z1 + 1 - data) : (size_t)(z2 + 1 - data);
    size_t stop = part == 0 ? (size_t)(z1 - data) : part == 1 ? (size_t)(z2 - data) : size;
    size_t rest = size - stop;
    if (stop == start) return LLVMFuzzerMutate(data, size, max_size);
    uint8_t *tail = malloc(rest ? rest : 1);
    if (!tail) return LLVMFuzzerMutate(data, size, max_size);
    memcpy(tail, data + stop, rest);
    size_t n = LLVMFuzzerMutate(data + start, stop - start, max_size - start - rest);
    memcpy(data + start + n, tail, rest);
    free(tail);
    return start + n + rest;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *end = data + size;
    const uint8_t *z1 = memchr(data, 0, size);
    const uint8_t *bpe = z1 ? z1 + 1 : end;
    const uint8_t *z2 = z1 ? memchr(bpe, 0, (size_t)(end - bpe)) : NULL;
    const uint8_t *text = z2 ? z2 + 1 : end;
    size_t enc_len = (size_t)((z1 ? z1 : end) - data);
    size_t bpe_len = (size_t)((z2 ? z2 : end) - bpe);
    size_t text_len = (size_t)(end - text);

    forge_tokenizer *tok = NULL;
    forge_status s = forge_tokenizer_load_memory(&tok, (const char *)data, enc_len, "encoder.json",
                                                 (const char *)bpe, bpe_len, "vocab.bpe");
    if (s != FORGE_OK) {
        if (tok) FAIL("failed load left a tokenizer");
        if (s != FORGE_ERR_DATA && s != FORGE_ERR_OOM) FAIL("unexpected status %s: %s", forge_status_name(s),
                                                            forge_error_message());
        return 0;
    }
    fuzz_round_trip("tokenizer", tok, text, text_len, 0);
    fuzz_round_trip("tokenizer", tok, text, text_len, 1);
    if (text_len >= 2 && text_len <= TOK_BPE_SHORT) {
        int32_t a[TOK_BPE_SHORT], b[TOK_BPE_SHORT];
        size_t na = tok_bpe_piece(tok, text, text_len, a, 0), nb = tok_bpe_piece(tok, text, text_len, b, 1);
        if (na != nb || memcmp(a, b, na * sizeof a[0]) != 0) FAIL("BPE paths disagree on a %zu-byte piece", text_len);
    }
    forge_tokenizer_free(tok);
    return 0;
}
