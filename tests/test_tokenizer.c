/*
 * test_tokenizer.c: byte-level BPE. GPT-2's published encodings, exact
 * round-trips of arbitrary bytes (invalid UTF-8, NULs, whitespace runs) with
 * GPT-2's and a trained vocabulary, the trainer's merges and save/load, and
 * the error paths for broken vocabulary files.
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../src/data/tokenizer.h"
#include "../src/data/tokenizer_internal.h"
#include "../src/base/rng.h"
#include "test.h"
#include "../src/base/fs.h"

static forge_tokenizer *load_gpt2(void) {
    const char *enc = test_data_path("gpt2-tokenizer/encoder.json");
    const char *bpe = test_data_path("gpt2-tokenizer/vocab.bpe");
    if (!enc || !bpe) {
        test_case_skip("../shared/data/gpt2-tokenizer is absent");
        return NULL;
    }
    forge_tokenizer *tok = NULL;
    CHECK_OK(forge_tokenizer_load_files(&tok, enc, bpe));
    return tok;
}

static int write_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = fwrite(data, 1, len, f);
    return (fclose(f) == 0 && n == len) ? 0 : -1;
}

static char *read_text(const char *path, size_t *len) {
    char *data = NULL;
    if (forge_read_file(path, &data, len) != FORGE_OK) return NULL;
    return data;
}

/* encode then decode; returns 1 when the bytes come back exactly */
static int round_trips(const forge_tokenizer *tok, const char *s, size_t n, int allow_special) {
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *back = NULL;
    size_t back_len = 0;
    int ok = forge_tokenizer_encode(tok, s, n, allow_special, &ids, &n_ids) == FORGE_OK &&
             forge_tokenizer_decode(tok, ids, n_ids, &back, &back_len) == FORGE_OK && back_len == n &&
             memcmp(back, s, n) == 0;
    free(ids);
    free(back);
    return ok;
}

/* Random bytes from a mix of sources that stress the splitter and BPE. */
static size_t random_text(forge_rng *rng, char *buf, size_t cap) {
    static const char *frags[] = {
        "hello", " world", "'s", "'ll", " 123", "4567", "\n\n", "   ", "\t", " \xe4\xbd\xa0\xe5\xa5\xbd",
        "\xf0\x9f\x91\x8b", "<|endoftext|>", "!?", " ...", "\xc3\xa9t\xc3\xa9", "\xe2\x80\xa8", "\r\n", "\xc2\xa0",
    };
    size_t n = 0;
    while (n < cap) {
        uint32_t kind = forge_rng_u32(rng) % 6, k;
        switch (kind) {
        case 0: /* arbitrary bytes, mostly invalid UTF-8, including NUL */
            k = 1 + forge_rng_u32(rng) % 8;
            for (uint32_t i = 0; i < k && n < cap; i++) buf[n++] = (char)(forge_rng_u32(rng) & 0xFF);
            break;
        case 1: { /* a whitespace run */
            static const char ws[] = " \t\n\r\v\f";
            k = 1 + forge_rng_u32(rng) % 300;
            char c = ws[forge_rng_u32(rng) % 6];
            for (uint32_t i = 0; i < k && n < cap; i++) buf[n++] = (forge_rng_u32(rng) % 8) ? c : ' ';
            break;
        }
        case 2: /* lone continuation bytes / truncated sequences */
            buf[n++] = (char)(0x80 | (forge_rng_u32(rng) & 0x7F));
            if (n < cap) buf[n++] = (char)0xE2;
            break;
        default: {
            const char *f = frags[forge_rng_u32(rng) % (sizeof frags / sizeof frags[0])];
            for (size_t i = 0; f[i] && n < cap; i++) buf[n++] = f[i];
        }
        }
    }
    return n;
}

static void check_random_round_trips(const forge_tokenizer *tok, uint64_t seed) {
    forge_rng rng;
    forge_rng_seed(&rng, seed, 1);
    char buf[4096];
    int bad = 0;
    for (int t = 0; t < 200 && bad < 3; t++) {
        size_t cap = 1 + forge_rng_below(&rng, sizeof buf);
        size_t n = random_text(&rng, buf, cap);
        int special = (int)(forge_rng_u32(&rng) & 1);
        if (!round_trips(tok, buf, n, special)) {
            CHECK_MSG(0, "round trip failed for random text #%d (%zu bytes, allow_special=%d)", t, n, special);
            bad++;
        }
    }
    /* pure random bytes, and pathological runs */
    for (int t = 0; t < 50; t++) {
        size_t n = 1 + forge_rng_below(&rng, sizeof buf);
        for (size_t i = 0; i < n; i++) buf[i] = (char)(forge_rng_u32(&rng) & 0xFF);
        CHECK(round_trips(tok, buf, n, 0));
    }
    static char big[200000];
    memset(big, ' ', sizeof big);
    CHECK(round_trips(tok, big, sizeof big, 0));
    memset(big, 'a', sizeof big);
    CHECK(round_trips(tok, big, sizeof big, 0));
    memset(big, 0, sizeof big);
    CHECK(round_trips(tok, big, sizeof big, 0));
    CHECK(round_trips(tok, "", 0, 1));
}

/* The heap path and GPT-2's literal loop agree on every piece. */
static void check_bpe_paths_agree(const forge_tokenizer *tok, uint64_t seed) {
    forge_rng rng;
    forge_rng_seed(&rng, seed, 2);
    static const char alpha[] = "eeetaoinshrdlu    0001";
    int32_t a[600], b[600];
    uint8_t piece[600];
    for (int t = 0; t < 300; t++) {
        size_t n = 1 + forge_rng_below(&rng, 600);
        for (size_t i = 0; i < n; i++)
            piece[i] = (uint8_t)((t % 3 == 0) ? (forge_rng_u32(&rng) & 0xFF) : (uint32_t)alpha[forge_rng_below(&rng, 22)]);
        size_t na = n <= TOK_BPE_SHORT ? tok_bpe_piece(tok, piece, n, a, 0) : 0;
        size_t nb = tok_bpe_piece(tok, piece, n, b, 1);
        if (n <= TOK_BPE_SHORT) {
            CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0);
        }
        size_t len = 0;
        for (size_t i = 0; i < nb; i++) {
            size_t l;
            const uint8_t *p = forge_tokenizer_token_bytes(tok, b[i], &l);
            CHECK(p && len + l <= n && memcmp(piece + len, p, l) == 0);
            if (!p || len + l > n) break;
            len += l;
        }
        CHECK(len == n);
        if (test_case_failed()) break;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void test_gpt2_vectors(void) {
    TEST_CASE("gpt2 test vectors");
    const char *path = test_data_path("gpt2-tokenizer/test-vectors.json");
    if (!path) {
        test_case_skip("test-vectors.json is absent");
        return;
    }
    forge_tokenizer *tok = load_gpt2();
    if (!tok) return;
    CHECK(forge_tokenizer_vocab_size(tok) == 50257);
    CHECK(forge_tokenizer_eot(tok) == 50256);
    size_t len;
    char *json = read_text(path, &len);
    cJSON *root = json ? cJSON_ParseWithLength(json, len) : NULL;
    cJSON *vectors = cJSON_GetObjectItemCaseSensitive(root, "vectors");
    CHECK(cJSON_IsArray(vectors));
    int n_vec = 0, n_match = 0;
    cJSON *v;
    cJSON_ArrayForEach(v, vectors) {
        const char *hex = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "text_utf8_hex"));
        cJSON *want = cJSON_GetObjectItemCaseSensitive(v, "ids");
        int special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "allow_special"));
        CHECK(hex && cJSON_IsArray(want));
        if (!hex || !cJSON_IsArray(want)) continue;
        size_t n = strlen(hex) / 2;
        char *text = malloc(n + 1);
        for (size_t i = 0; i < n; i++) text[i] = (char)(hexval(hex[2 * i]) * 16 + hexval(hex[2 * i + 1]));
        int32_t *ids = NULL;
        size_t n_ids = 0;
        CHECK_OK(forge_tokenizer_encode(tok, text, n, special, &ids, &n_ids));
        int same = (int)n_ids == cJSON_GetArraySize(want);
        for (size_t i = 0; same && i < n_ids; i++)
            same = ids[i] == (int32_t)cJSON_GetArrayItem(want, (int)i)->valuedouble;
        CHECK_MSG(same, "vector %d (%s) encodes differently (%zu ids)", n_vec, hex, n_ids);
        n_match += same;
        CHECK(round_trips(tok, text, n, special));
        free(ids);
        free(text);
        n_vec++;
    }
    CHECK_MSG(n_vec == 26 && n_match == 26, "%d of %d vectors match (expected 26)", n_match, n_vec);
    cJSON_Delete(root);
    free(json);
    forge_tokenizer_free(tok);
}

static void test_gpt2_special(void) {
    TEST_CASE("gpt2 <|endoftext|> only with allow_special");
    forge_tokenizer *tok = load_gpt2();
    if (!tok) return;
    const char *s = "a<|endoftext|><|endoftext|>b";
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(forge_tokenizer_encode(tok, s, strlen(s), 1, &ids, &n));
    CHECK(n == 4 && ids[1] == 50256 && ids[2] == 50256);
    free(ids);
    CHECK_OK(forge_tokenizer_encode(tok, s, strlen(s), 0, &ids, &n));
    for (size_t i = 0; i < n; i++) CHECK(ids[i] != 50256);
    static const int32_t plain[] = {64, 27, 91, 437, 1659, 5239, 91, 6927};
    CHECK(n >= 8 && memcmp(ids, plain, sizeof plain) == 0); /* "a<|endoftext|><|..." as text */
    free(ids);
    /* U+180E is not whitespace for Python's regex (GPT-2's reference) though
     * PCRE2's \s matches it; ids from openai/gpt-2's encoder.py */
    static const char mvs[] = "a\xe1\xa0\x8e\xe1\xa0\x8e  b \xe1\xa0\x8e\n  \xe1\xa0\x8ex";
    static const int32_t mvs_ids[] = {64, 157, 254, 236, 157, 254, 236, 220, 275, 28053, 254, 236, 198, 220, 28053, 254, 236, 87};
    CHECK_OK(forge_tokenizer_encode(tok, mvs, sizeof mvs - 1, 0, &ids, &n));
    CHECK(n == 18 && memcmp(ids, mvs_ids, sizeof mvs_ids) == 0);
    free(ids);
    CHECK_OK(forge_tokenizer_encode(tok, NULL, 0, 1, &ids, &n));
    CHECK(n == 0);
    free(ids);
    size_t len;
    const uint8_t *p = forge_tokenizer_token_bytes(tok, 50256, &len);
    CHECK(p && len == 13 && memcmp(p, "<|endoftext|>", 13) == 0);
    CHECK(forge_tokenizer_token_bytes(tok, 50257, &len) == NULL);
    CHECK(forge_tokenizer_token_bytes(tok, -1, &len) == NULL);
    int32_t bad = 50257;
    char *text;
    CHECK(forge_tokenizer_decode(tok, &bad, 1, &text, &len) == FORGE_ERR_ARG);
    forge_tokenizer_free(tok);
}

static void test_gpt2_round_trip(void) {
    TEST_CASE("gpt2 round-trips random bytes");
    forge_tokenizer *tok = load_gpt2();
    if (!tok) return;
    check_random_round_trips(tok, 7);
    check_bpe_paths_agree(tok, 7);
    forge_tokenizer_free(tok);
}

static void test_gpt2_save_load(void) {
    TEST_CASE("gpt2 save + load is identical");
    forge_tokenizer *tok = load_gpt2();
    if (!tok) return;
    const char *dir = test_tmpdir();
    char sub[600];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    CHECK_OK(forge_tokenizer_save(tok, sub));
    forge_tokenizer *back = NULL;
    CHECK_OK(forge_tokenizer_load(&back, sub));
    if (back) {
        CHECK(forge_tokenizer_vocab_size(back) == 50257);
        int same = 1;
        for (int32_t id = 0; id < 50257 && same; id++) {
            size_t la, lb;
            const uint8_t *a = forge_tokenizer_token_bytes(tok, id, &la), *b = forge_tokenizer_token_bytes(back, id, &lb);
            same = la == lb && memcmp(a, b, la) == 0;
        }
        CHECK(same);
        CHECK(back->n_merges == tok->n_merges && back->n_merges == 50000 &&
              memcmp(back->merge_result, tok->merge_result, 50000 * sizeof(int32_t)) == 0);
    }
    /* our vocab.bpe is byte-identical to GPT-2's */
    char p[700];
    snprintf(p, sizeof p, "%s/vocab.bpe", sub);
    size_t la, lb;
    char *a = read_text(p, &la), *b = read_text(test_data_path("gpt2-tokenizer/vocab.bpe"), &lb);
    CHECK(a && b && la == lb && memcmp(a, b, la) == 0);
    free(a);
    free(b);
    forge_tokenizer_free(back);
    forge_tokenizer_free(tok);
}

/* A small synthetic corpus with a known most-frequent pair: " the" is a third
 * of the words; the rest are random syllable strings. */
static void write_corpus(const char *path) {
    static const char *syl[] = {"ka", "lo", "mi", "ne", "ru", "sa", "po", "di", "gu", "fe", "xo", "by"};
    static const char *punct[] = {" ", " ", " ", " ", " ", ", ", ".\n", "! "};
    forge_rng rng;
    forge_rng_seed(&rng, 42, 3);
    size_t cap = 60000, n = 0;
    char *buf = malloc(cap + 64);
    while (n < cap) {
        if (forge_rng_u32(&rng) % 3 == 0) {
            memcpy(buf + n, "the", 3);
            n += 3;
        } else {
            for (uint64_t k = 1 + forge_rng_below(&rng, 3); k > 0; k--) {
                memcpy(buf + n, syl[forge_rng_below(&rng, 12)], 2);
                n += 2;
            }
        }
        const char *p = punct[forge_rng_below(&rng, 8)];
        memcpy(buf + n, p, strlen(p));
        n += strlen(p);
        if (forge_rng_u32(&rng) % 97 == 0) {
            memcpy(buf + n, "<|endoftext|>", 13);
            n += 13;
        }
    }
    CHECK(write_file(path, buf, n) == 0);
    free(buf);
}

static int token_is(const forge_tokenizer *tok, int32_t id, const char *s) {
    size_t l;
    const uint8_t *p = forge_tokenizer_token_bytes(tok, id, &l);
    return p && l == strlen(s) && memcmp(p, s, l) == 0;
}

static void test_train_small(void) {
    TEST_CASE("train vocab 300: merges, determinism, save/load");
    const char *dir = test_tmpdir();
    char corpus[600];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    write_corpus(corpus);
    const char *files[] = {corpus};
    forge_tokenizer *tok = NULL, *again = NULL, *back = NULL;
    CHECK_OK(forge_tokenizer_train(&tok, files, 1, 300, 0));
    if (!tok) return;
    CHECK(forge_tokenizer_vocab_size(tok) == 300);
    CHECK(forge_tokenizer_eot(tok) == 299);
    CHECK(token_is(tok, 299, "<|endoftext|>"));
    /* the first 256 ids are GPT-2's byte order: "!" is 0, "Ā" (byte 0) is 188 */
    size_t l0;
    const uint8_t *b0 = forge_tokenizer_token_bytes(tok, 188, &l0);
    CHECK(token_is(tok, 0, "!") && b0 && l0 == 1 && b0[0] == 0 && token_is(tok, 220, " "));
    /* "the" is a third of all words and the only source of "th" and "he":
     * those pairs tie for the first merge, and the tie goes to the smaller
     * (left id, right id): "h" (71) < "t" (83), so "he" comes first, then "the". */
    CHECK(tok->n_merges >= 43);
    CHECK(token_is(tok, tok->merge_left[0], "h") && token_is(tok, tok->merge_right[0], "e") &&
          tok->merge_result[0] == 256 && token_is(tok, 256, "he"));
    CHECK(token_is(tok, tok->merge_left[1], "t") && token_is(tok, tok->merge_right[1], "he") &&
          token_is(tok, 257, "the"));
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(forge_tokenizer_encode(tok, " the", 4, 0, &ids, &n));
    CHECK(n == 1 && token_is(tok, ids[0], " the"));
    free(ids);
    /* the separator is not learned from */
    for (int32_t id = 256; id < forge_tokenizer_eot(tok); id++) {
        size_t l;
        const uint8_t *p = forge_tokenizer_token_bytes(tok, id, &l);
        CHECK_MSG(!memmem(p, l, "endof", 5) && !memmem(p, l, "<|", 2), "token %d learned from <|endoftext|>", id);
    }
    /* deterministic */
    CHECK_OK(forge_tokenizer_train(&again, files, 1, 300, 0));
    if (again) {
        CHECK(again->n_merges == tok->n_merges);
        CHECK(memcmp(again->merge_left, tok->merge_left, (size_t)tok->n_merges * sizeof(int32_t)) == 0 &&
              memcmp(again->merge_right, tok->merge_right, (size_t)tok->n_merges * sizeof(int32_t)) == 0);
    }
    /* save + load: identical encodings of the corpus and of random bytes */
    char out_dir[600];
    snprintf(out_dir, sizeof out_dir, "%s/tok", dir);
    CHECK_OK(forge_tokenizer_save(tok, out_dir));
    CHECK_OK(forge_tokenizer_load(&back, out_dir));
    size_t len;
    char *text = read_text(corpus, &len);
    if (back && text) {
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        CHECK_OK(forge_tokenizer_encode(tok, text, len, 1, &a, &na));
        CHECK_OK(forge_tokenizer_encode(back, text, len, 1, &b, &nb));
        CHECK(na == nb && na > 0 && memcmp(a, b, na * sizeof *a) == 0);
        CHECK(na < len / 2); /* it compresses */
        free(a);
        free(b);
        CHECK(round_trips(back, text, len, 1));
    }
    free(text);
    check_random_round_trips(tok, 11);
    check_bpe_paths_agree(tok, 11);
    forge_tokenizer_free(tok);
    forge_tokenizer_free(again);
    forge_tokenizer_free(back);
}

static void test_train_runs_out(void) {
    TEST_CASE("train on a tiny corpus stops when no pairs are left");
    const char *dir = test_tmpdir();
    char corpus[600];
    snprintf(corpus, sizeof corpus, "%s/tiny.txt", dir);
    CHECK(write_file(corpus, "abab abab<|endoftext|>", 22) == 0);
    const char *files[] = {corpus};
    forge_tokenizer *tok = NULL;
    CHECK_OK(forge_tokenizer_train(&tok, files, 1, 1000, 0));
    if (!tok) return;
    /* "abab" -> ab ab -> abab; " abab" -> ... -> " abab": a handful of merges */
    CHECK(forge_tokenizer_vocab_size(tok) < 270 && forge_tokenizer_vocab_size(tok) > 258);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(forge_tokenizer_encode(tok, "abab abab", 9, 0, &ids, &n));
    CHECK(n == 2);
    free(ids);
    forge_tokenizer_free(tok);
}

static void test_train_threads(void) {
    TEST_CASE("train: chunked (OpenMP) counting equals one thread");
#ifndef _OPENMP
    test_case_skip("built without OpenMP");
#else
    const char *dir = test_tmpdir();
    char corpus[600];
    snprintf(corpus, sizeof corpus, "%s/big.txt", dir);
    /* > 1 MiB so the counter splits the file between threads */
    forge_rng rng;
    forge_rng_seed(&rng, 5, 5);
    size_t cap = (size_t)1 << 21, n = 0;
    char *buf = malloc(cap + 64);
    while (n < cap) n += random_text(&rng, buf + n, 1 + forge_rng_below(&rng, 40));
    CHECK(write_file(corpus, buf, n) == 0);
    free(buf);
    const char *files[] = {corpus};
    forge_tokenizer *one = NULL, *two = NULL;
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    CHECK_OK(forge_tokenizer_train(&one, files, 1, 400, 0));
    omp_set_num_threads(3);
    CHECK_OK(forge_tokenizer_train(&two, files, 1, 400, 0));
    omp_set_num_threads(saved);
    if (one && two) {
        CHECK(one->n_merges == two->n_merges && one->n_vocab == two->n_vocab);
        CHECK(memcmp(one->merge_left, two->merge_left, (size_t)one->n_merges * sizeof(int32_t)) == 0 &&
              memcmp(one->merge_right, two->merge_right, (size_t)one->n_merges * sizeof(int32_t)) == 0);
    }
    forge_tokenizer_free(one);
    forge_tokenizer_free(two);
#endif
}

/* A 257-byte-token vocabulary as encoder.json text, plus extra entries. */
static size_t byte_vocab_json(char *json, size_t cap) {
    uint32_t b2c[256];
    uint8_t order[256];
    tok_byte_unicode(b2c, order);
    size_t n = (size_t)snprintf(json, cap, "{");
    for (int i = 0; i < 256; i++) {
        uint32_t cp = b2c[order[i]];
        char s[8];
        if (cp == '"' || cp == '\\')
            snprintf(s, sizeof s, "\\%c", (char)cp);
        else if (cp < 0x80)
            snprintf(s, sizeof s, "%c", (char)cp);
        else
            snprintf(s, sizeof s, "%c%c", (char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 0x3F)));
        n += (size_t)snprintf(json + n, cap - n, "\"%s\": %d, ", s, i);
    }
    return n;
}

static void test_load_shared_spelling(void) {
    TEST_CASE("load: two merges may make the same token");
    const char *dir = test_tmpdir();
    char enc[600], bpe[600];
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    size_t cap = 16384;
    char *json = malloc(cap);
    size_t n = byte_vocab_json(json, cap);
    n += (size_t)snprintf(json + n, cap - n, "\"bc\": 256, \"ab\": 257, \"abc\": 258, \"<|endoftext|>\": 259}");
    CHECK(write_file(enc, json, n) == 0);
    free(json);
    static const char merges[] = "#version: 0.2\nb c\na b\nab c\na bc\n";
    CHECK(write_file(bpe, merges, sizeof merges - 1) == 0);
    forge_tokenizer *tok = NULL;
    CHECK_OK(forge_tokenizer_load(&tok, dir));
    if (!tok) return;
    CHECK(forge_tokenizer_vocab_size(tok) == 260 && tok->n_merges == 4);
    int32_t *ids = NULL;
    size_t k = 0;
    /* "abc": (b,c) ranks first -> a bc -> (a,bc) -> abc; "abab": ab ab */
    CHECK_OK(forge_tokenizer_encode(tok, "abc abab", 8, 0, &ids, &k));
    CHECK(k == 4 && ids[0] == 258 && ids[2] == 257 && ids[3] == 257);
    free(ids);
    forge_tokenizer *back = NULL;
    char out[700];
    snprintf(out, sizeof out, "%s/again", dir);
    CHECK_OK(forge_tokenizer_save(tok, out));
    CHECK_OK(forge_tokenizer_load(&back, out));
    CHECK(back && back->n_merges == 4 && back->merge_result[3] == 258);
    forge_tokenizer_free(back);
    forge_tokenizer_free(tok);
}

static void test_load_fuzz(void) {
    TEST_CASE("load: mutated files fail cleanly or load");
    const char *dir = test_tmpdir();
    char enc[600], bpe[600];
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    size_t cap = 16384;
    char *json = malloc(cap), *mut = malloc(cap);
    size_t n = byte_vocab_json(json, cap);
    n += (size_t)snprintf(json + n, cap - n, "\"ab\": 256, \"abc\": 257, \"<|endoftext|>\": 258}");
    static const char merges[] = "#version: 0.2\na b\nab c\n";
    forge_rng rng;
    forge_rng_seed(&rng, 99, 9);
    for (int t = 0; t < 300; t++) {
        int which = t & 1;
        const char *src = which ? merges : json;
        size_t len = which ? sizeof merges - 1 : n;
        memcpy(mut, src, len);
        for (int k = 1 + (int)forge_rng_below(&rng, 4); k > 0 && len > 0; k--) {
            size_t at = forge_rng_below(&rng, len);
            switch (forge_rng_u32(&rng) % 3) {
            case 0: mut[at] = (char)(forge_rng_u32(&rng) & 0xFF); break;
            case 1: len = at; break; /* truncate */
            default: mut[at] = "\"{}:, \\0123456789\n"[forge_rng_below(&rng, 18)];
            }
        }
        CHECK(write_file(which ? bpe : enc, mut, len) == 0);
        CHECK(write_file(which ? enc : bpe, which ? json : merges, which ? n : sizeof merges - 1) == 0);
        forge_tokenizer *tok = NULL;
        forge_status st = forge_tokenizer_load(&tok, dir);
        CHECK((st == FORGE_OK) == (tok != NULL));
        CHECK(st == FORGE_OK || st == FORGE_ERR_DATA);
        if (tok) CHECK(round_trips(tok, "abcabc ab\xff\x00", 12, 1));
        forge_tokenizer_free(tok);
    }
    free(json);
    free(mut);
}

/* a copy of s[0..n) in a buffer of exactly n bytes: no NUL after it for a reader to lean on */
static char *exact_copy(const char *s, size_t n) {
    char *p = malloc(n ? n : 1);
    if (p) memcpy(p, s, n);
    return p;
}

static void test_load_memory(void) {
    TEST_CASE("load_memory: the files' bytes in memory, without NUL terminators, load as the files do");
    size_t cap = 16384;
    char *json = malloc(cap);
    size_t n = byte_vocab_json(json, cap);
    n += (size_t)snprintf(json + n, cap - n, "\"ab\": 256, \"<|endoftext|>\": 257}");
    static const char merges[] = "#version: 0.2\na b\n";
    char *enc = exact_copy(json, n), *bpe = exact_copy(merges, sizeof merges - 1);
    forge_tokenizer *tok = NULL;
    CHECK_OK(forge_tokenizer_load_memory(&tok, enc, n, "mem/encoder.json", bpe, sizeof merges - 1, "mem/vocab.bpe"));
    if (tok) {
        CHECK(forge_tokenizer_vocab_size(tok) == 258 && tok->n_merges == 1);
        CHECK(round_trips(tok, "cabab \xff<|endoftext|>", 20, 1));
        forge_tokenizer_free(tok);
        tok = NULL;
    }
    /* messages carry the names given, or the default ones */
    CHECK(forge_tokenizer_load_memory(&tok, enc, n, "mem/encoder.json", "#x\nb a\n", 7, "mem/vocab.bpe") ==
          FORGE_ERR_DATA);
    CHECK(strstr(forge_error_message(), "mem/vocab.bpe:2") && strstr(forge_error_message(), "mem/encoder.json"));
    CHECK(forge_tokenizer_load_memory(&tok, enc, n - 1, NULL, bpe, sizeof merges - 1, NULL) == FORGE_ERR_DATA);
    CHECK(strstr(forge_error_message(), "encoder.json:") != NULL);
    CHECK(forge_tokenizer_load_memory(&tok, NULL, 0, NULL, NULL, 0, NULL) == FORGE_ERR_DATA && tok == NULL);
    free(enc);
    free(bpe);
    free(json);
}

/* Issue 16: an empty (or cut) vocab.bpe loaded as if the vocabulary were byte-level. */
static void test_merges_cover(void) {
    TEST_CASE("load: a vocab.bpe whose merges make too few of encoder.json's tokens is refused");
    size_t cap = 16384;
    char *json = malloc(cap);
    size_t body = byte_vocab_json(json, cap), n;
    forge_tokenizer *tok = NULL;

    n = body + (size_t)snprintf(json + body, cap - body, "\"ab\": 256, \"<|endoftext|>\": 257}");
    static const char *const empties[] = {"", "#version: 0.2\n", "\n\n"};
    for (int i = 0; i < 3; i++) {
        CHECK(forge_tokenizer_load_memory(&tok, json, n, "t/encoder.json", empties[i], strlen(empties[i]),
                                          "t/vocab.bpe") == FORGE_ERR_DATA && tok == NULL);
        const char *m = forge_error_message();
        CHECK_MSG(strstr(m, "t/vocab.bpe") && strstr(m, "its 0 merges make 0 of the 1 multi-byte tokens of t/encoder.json") &&
                      strstr(m, "258 ids") && strstr(m, "\"ab\" (id 256)"),
                  "empty vocab.bpe %d: %s", i, m);
    }
    /* three multi-byte tokens, two merges: "abc" is made by none */
    n = body + (size_t)snprintf(json + body, cap - body,
                                "\"bc\": 256, \"ab\": 257, \"abc\": 258, \"<|endoftext|>\": 259}");
    CHECK(forge_tokenizer_load_memory(&tok, json, n, "t/encoder.json", "b c\na b\n", 8, "t/vocab.bpe") ==
          FORGE_ERR_DATA);
    CHECK_MSG(strstr(forge_error_message(), "its 2 merges make 2 of the 3") &&
                  strstr(forge_error_message(), "\"abc\" (id 258)"),
              "%s", forge_error_message());
    /* two merges making the same token count once; then all three are made */
    CHECK(forge_tokenizer_load_memory(&tok, json, n, "t/encoder.json", "b c\na b\na bc\n", 12, "t/vocab.bpe") ==
          FORGE_OK);
    forge_tokenizer_free(tok);
    tok = NULL;

    TEST_CASE("load: a byte-level vocabulary (257 ids, no merges) with an empty vocab.bpe stays valid");
    n = body + (size_t)snprintf(json + body, cap - body, "\"<|endoftext|>\": 256}");
    CHECK_OK(forge_tokenizer_load_memory(&tok, json, n, "t/encoder.json", "", 0, "t/vocab.bpe"));
    if (tok) {
        CHECK(forge_tokenizer_vocab_size(tok) == 257 && tok->n_merges == 0);
        CHECK(round_trips(tok, "bytes \x01\xfe<|endoftext|>", 21, 1));
        forge_tokenizer_free(tok);
        tok = NULL;
    }
    free(json);

    TEST_CASE("load: GPT-2's encoder.json with an empty vocab.bpe is refused with the counts");
    const char *enc = test_data_path("gpt2-tokenizer/encoder.json");
    if (!enc) {
        test_case_skip("../shared/data/gpt2-tokenizer is absent");
        return;
    }
    const char *dir = test_tmpdir();
    char bpe[600];
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    CHECK(write_file(bpe, "#version: 0.2\n", 14) == 0);
    CHECK(forge_tokenizer_load_files(&tok, enc, bpe) == FORGE_ERR_DATA && tok == NULL);
    CHECK_MSG(strstr(forge_error_message(), bpe) &&
                  strstr(forge_error_message(), "its 0 merges make 0 of the 50000 multi-byte tokens") &&
                  strstr(forge_error_message(), "50257 ids"),
              "%s", forge_error_message());
}

/* Issue 16: a byte token missing from encoder.json (the other ids left as they
 * were) was reported as <|endoftext|>'s id being out of range. */
static void test_missing_byte(void) {
    TEST_CASE("load: a missing byte token is named as such, with the file");
    size_t cap = 16384;
    char *json = malloc(cap), *cut = malloc(cap);
    size_t n = byte_vocab_json(json, cap);
    n += (size_t)snprintf(json + n, cap - n, "\"ab\": 256, \"<|endoftext|>\": 257}");
    /* drop the first entry, "!": 0 (byte 0x21); every other id stays */
    const char *second = strchr(json, ',') + 2;
    size_t k = (size_t)snprintf(cut, cap, "{%s", second);
    forge_tokenizer *tok = NULL;
    CHECK(forge_tokenizer_load_memory(&tok, cut, k, "t/encoder.json", "a b\n", 4, "t/vocab.bpe") == FORGE_ERR_DATA);
    const char *m = forge_error_message();
    CHECK_MSG(strstr(m, "t/encoder.json") && strstr(m, "no token for byte 0x21") && strstr(m, "U+0021") &&
                  !strstr(m, "endoftext"),
              "%s", m);
    /* with every byte present, an id past the end names the key and the free id */
    k = (size_t)snprintf(cut, cap, "%.*s\"ab\": 258, \"<|endoftext|>\": 257}", (int)(strstr(json, "\"ab\"") - json),
                         json);
    CHECK(forge_tokenizer_load_memory(&tok, cut, k, "t/encoder.json", "a b\n", 4, "t/vocab.bpe") == FORGE_ERR_DATA);
    CHECK_MSG(strstr(forge_error_message(), "key \"ab\": id 258") && strstr(forge_error_message(), "id 256 has no key"),
              "%s", forge_error_message());
    free(json);
    free(cut);

    TEST_CASE("load: GPT-2's encoder.json without the space byte's token names byte 0x20");
    const char *enc = test_data_path("gpt2-tokenizer/encoder.json");
    const char *bpe = test_data_path("gpt2-tokenizer/vocab.bpe");
    if (!enc || !bpe) {
        test_case_skip("../shared/data/gpt2-tokenizer is absent");
        return;
    }
    size_t len = 0;
    char *text = read_text(enc, &len);
    cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    CHECK(root != NULL);
    if (!root) return;
    cJSON_DeleteItemFromObjectCaseSensitive(root, "\xc4\xa0"); /* U+0120, GPT-2's spelling of ' ' */
    char *printed = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    const char *dir = test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    CHECK(printed && write_file(path, printed, strlen(printed)) == 0);
    cJSON_free(printed);
    CHECK(forge_tokenizer_load_files(&tok, path, bpe) == FORGE_ERR_DATA && tok == NULL);
    m = forge_error_message();
    CHECK_MSG(strstr(m, path) && strstr(m, "no token for byte 0x20") && !strstr(m, "endoftext"), "%s", m);
}

static void test_errors(void) {
    TEST_CASE("errors: missing files, bad JSON, bad merges, vocab too small");
    const char *dir = test_tmpdir();
    char enc[600], bpe[600];
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    forge_tokenizer *tok = NULL;

    CHECK(forge_tokenizer_load(&tok, "/nonexistent/forge/tok") == FORGE_ERR_IO && tok == NULL);
    CHECK(strstr(forge_error_message(), "/nonexistent/forge/tok/encoder.json") != NULL);

    /* a valid 258-token vocabulary to break in different ways */
    size_t cap = 16384;
    char *json = malloc(cap);
    size_t n = byte_vocab_json(json, cap);
    size_t body = n;
    n += (size_t)snprintf(json + n, cap - n, "\"ab\": 256, \"<|endoftext|>\": 257}");
    CHECK(write_file(enc, json, n) == 0);
    CHECK(write_file(bpe, "#version: 0.2\na b\n", 18) == 0);
    CHECK_OK(forge_tokenizer_load(&tok, dir));
    if (tok) {
        CHECK(forge_tokenizer_vocab_size(tok) == 258);
        int32_t *ids = NULL;
        size_t k = 0;
        CHECK_OK(forge_tokenizer_encode(tok, "cabab", 5, 0, &ids, &k));
        CHECK(k == 3 && ids[1] == 256 && ids[2] == 256);
        free(ids);
        forge_tokenizer_free(tok);
        tok = NULL;
    }

    /* vocab.bpe missing */
    char missing[700];
    snprintf(missing, sizeof missing, "%s/nope.bpe", dir);
    CHECK(forge_tokenizer_load_files(&tok, enc, missing) == FORGE_ERR_IO);
    CHECK(strstr(forge_error_message(), "nope.bpe") != NULL);

    /* merge naming an unknown token, on line 3 */
    CHECK(write_file(bpe, "#version: 0.2\na b\nzz q\n", 23) == 0);
    CHECK(forge_tokenizer_load(&tok, dir) == FORGE_ERR_DATA && tok == NULL);
    CHECK(strstr(forge_error_message(), "vocab.bpe:3") && strstr(forge_error_message(), "zz"));
    /* merge whose result is not a token */
    CHECK(write_file(bpe, "#version: 0.2\nb a\n", 18) == 0);
    CHECK(forge_tokenizer_load(&tok, dir) == FORGE_ERR_DATA);
    CHECK(strstr(forge_error_message(), "vocab.bpe:2") != NULL);
    /* malformed merge line, duplicate merge */
    CHECK(write_file(bpe, "#version: 0.2\nab\n", 17) == 0);
    CHECK(forge_tokenizer_load(&tok, dir) == FORGE_ERR_DATA);
    CHECK(write_file(bpe, "#version: 0.2\na b\na b\n", 22) == 0);
    CHECK(forge_tokenizer_load(&tok, dir) == FORGE_ERR_DATA);
    CHECK(strstr(forge_error_message(), "repeats line 2") != NULL);
    CHECK(write_file(bpe, "#version: 0.2\na b\n", 18) == 0);

    /* malformed JSON: names the file and the line */
    CHECK(write_file(enc, "{\"a\": 0,\n \"b\" 1}", 16) == 0);
    CHECK(forge_tokenizer_load(&tok, dir) == FORGE_ERR_DATA);
    CHECK(strstr(forge_error_message(), "encoder.json:2") != NULL);
    CHECK(write_file(enc, "[1, 2]", 6) == 0);
    CHECK(forge_tokenizer_load(&tok, dir) == FORGE_ERR_DATA);
    CHECK(write_file(enc, "", 0) == 0);
    CHECK(forge_tokenizer_load(&tok, dir) == FORGE_ERR_DATA);

    /* duplicate ids, non-integer id, eot not last, a key outside the alphabet, a missing byte */
    const char *tails[] = {
        "\"ab\": 255, \"<|endoftext|>\": 257}", "\"ab\": 256.5, \"<|endoftext|>\": 257}",
        "\"ab\": \"x\", \"<|endoftext|>\": 257}", "\"<|endoftext|>\": 256, \"ab\": 257}",
        "\"a\\u4e00\": 256, \"<|endoftext|>\": 257}", "\"ab\": 256, \"ba\": 257}",
    };
    const char *expect[] = {"id 255", "256.5", "\"ab\"", "last id", "U+4E00", "<|endoftext|>"};
    for (size_t t = 0; t < sizeof tails / sizeof tails[0]; t++) {
        n = body + (size_t)snprintf(json + body, cap - body, "%s", tails[t]);
        CHECK(write_file(enc, json, n) == 0);
        CHECK_MSG(forge_tokenizer_load(&tok, dir) == FORGE_ERR_DATA, "case %zu loaded", t);
        CHECK_MSG(strstr(forge_error_message(), expect[t]) && strstr(forge_error_message(), "encoder.json"),
                  "case %zu: message \"%s\"", t, forge_error_message());
    }
    /* the key for byte 0x21 '!' (the first entry) replaced: that byte has no token */
    n = body + (size_t)snprintf(json + body, cap - body, "\"ab\": 256, \"<|endoftext|>\": 257}");
    char *json2 = malloc(cap);
    n = (size_t)snprintf(json2, cap, "{\"zz\": 0, %s", strchr(json, ',') + 2);
    CHECK(write_file(enc, json2, n) == 0);
    free(json2);
    CHECK(forge_tokenizer_load(&tok, dir) == FORGE_ERR_DATA);
    CHECK(strstr(forge_error_message(), "0x21") != NULL);
    free(json);

    /* training: vocab too small, missing file */
    const char *files[] = {enc};
    CHECK(forge_tokenizer_train(&tok, files, 1, 256, 0) == FORGE_ERR_ARG && tok == NULL);
    const char *nofile[] = {missing};
    CHECK(forge_tokenizer_train(&tok, nofile, 1, 300, 0) == FORGE_ERR_IO && tok == NULL);
    CHECK(strstr(forge_error_message(), "nope.bpe") != NULL);
}

void suite_tokenizer(void) {
    test_gpt2_vectors();
    test_gpt2_special();
    test_gpt2_round_trip();
    test_gpt2_save_load();
    test_train_small();
    test_train_runs_out();
    test_train_threads();
    test_load_shared_spelling();
    test_load_fuzz();
    test_load_memory();
    test_merges_cover();
    test_missing_byte();
    test_errors();
}
