/*
 * fuzz_shard.c: libFuzzer target for the token shard reader (src/data/shards.c).
 *
 * The input is a whole shard image, opened with forge_shard_open_memory and
 * no vocabulary check. When it opens, its size must be exactly the header plus
 * n_tokens tokens, every token is read (ASan sees a read past the image), and
 * the vocabulary check must agree with the tokens: opening again with
 * vocab_size = max + 1 succeeds, with vocab_size = max it fails at the first
 * position holding max.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../src/data/shards.h"

#define FAIL(...) FUZZ_FAIL("shard", __VA_ARGS__)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    forge_shard sh;
    forge_status s = forge_shard_open_memory(&sh, data, size, "fuzz.bin", 0);
    if (s != FORGE_OK) {
        if (s != FORGE_ERR_DATA) FAIL("unexpected status %s", forge_status_name(s));
        if (sh.path || sh.map || sh.data) FAIL("failed open left state behind");
        return 0;
    }
    if (sh.token_bytes != 2 && sh.token_bytes != 4) FAIL("token_bytes %d", sh.token_bytes);
    if ((uint64_t)size != FORGE_SHARD_HEADER_BYTES + sh.n_tokens * (uint64_t)sh.token_bytes)
        FAIL("%zu bytes for %llu tokens of %d bytes", size, (unsigned long long)sh.n_tokens, sh.token_bytes);
    uint32_t max = 0;
    uint64_t first_max = 0;
    for (uint64_t i = 0; i < sh.n_tokens; i++) {
        uint32_t t = (uint32_t)forge_shard_token(&sh, i);
        if (t > max || i == 0) {
            max = t;
            first_max = i;
        }
    }
    /* forge_shard_read agrees with forge_shard_token, in chunks */
    int32_t buf[64];
    for (uint64_t i = 0; i < sh.n_tokens; i += 64) {
        size_t k = sh.n_tokens - i < 64 ? (size_t)(sh.n_tokens - i) : 64;
        forge_shard_read(&sh, i, k, buf);
        for (size_t j = 0; j < k; j++)
            if (buf[j] != forge_shard_token(&sh, i + j)) FAIL("read and token disagree at %llu", (unsigned long long)(i + j));
    }
    uint64_t n = sh.n_tokens;
    forge_shard_close(&sh);
    if (n == 0 || max >= (uint32_t)INT32_MAX) return 0;
    if (forge_shard_open_memory(&sh, data, size, "fuzz.bin", (int)max + 1) != FORGE_OK)
        FAIL("vocab_size max + 1 = %u refused: %s", max + 1, forge_error_message());
    forge_shard_close(&sh);
    if (max == 0) return 0; /* vocab_size 0 means no check */
    s = forge_shard_open_memory(&sh, data, size, "fuzz.bin", (int)max);
    if (s != FORGE_ERR_DATA) FAIL("vocab_size max = %u accepted (status %s)", max, forge_status_name(s));
    char want[64];
    snprintf(want, sizeof want, "position %llu ", (unsigned long long)first_max);
    /* the first token >= max is the first occurrence of max */
    if (!strstr(forge_error_message(), want)) FAIL("expected \"%s\" in: %s", want, forge_error_message());
    return 0;
}
