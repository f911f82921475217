/*
 * fuzz_round_trip.h: the tokenizer targets' shared check (fuzz_tokenizer.c, fuzz_tokenizer_text.c): text encodes
 * (with or without <|endoftext|> allowed) to in-range ids, at most one id a byte, no end-of-text id unless allowed,
 * and decodes back to the same bytes. A broken invariant is FUZZ_FAIL(target, ...).
 */
#ifndef FORGE_FUZZ_ROUND_TRIP_H
#define FORGE_FUZZ_ROUND_TRIP_H

#include <string.h>

#include "fuzz.h"
#include "../src/data/tokenizer.h"

static void fuzz_round_trip(const char *target, const forge_tokenizer *tok, const uint8_t *text, size_t len,
                            int allow_special) {
    int32_t *ids = NULL;
    size_t n = 0;
    forge_status s = forge_tokenizer_encode(tok, (const char *)text, len, allow_special, &ids, &n);
    if (s != FORGE_OK) FUZZ_FAIL(target, "encode failed: %s", forge_error_message());
    if (n > len) FUZZ_FAIL(target, "%zu ids for %zu bytes", n, len);
    int V = forge_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= V) FUZZ_FAIL(target, "id %d outside [0, %d)", ids[i], V);
        if (!allow_special && ids[i] == V - 1) FUZZ_FAIL(target, "eot id without allow_special");
    }
    char *back = NULL;
    size_t back_len = 0;
    s = forge_tokenizer_decode(tok, ids, n, &back, &back_len);
    if (s != FORGE_OK) FUZZ_FAIL(target, "decode failed: %s", forge_error_message());
    if (back_len != len || memcmp(back, text, len) != 0)
        FUZZ_FAIL(target, "round trip (allow_special %d): %zu bytes in, %zu out", allow_special, len, back_len);
    free(ids);
    free(back);
}

#endif
