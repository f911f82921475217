/*
 * test_data.c: token shards, the loader, the tokenize pipeline and the
 * fortunes corpus.
 *
 * The pipeline is tested with a byte-level encoder (ids 0..255, eot 256)
 * through forge_tokenize_files_with, so it does not depend on the BPE. One
 * case runs the real path (forge_tokenizer_train + forge_tokenize_files +
 * loader); it reports itself skipped when the tokenizer's trainer is not
 * linked (forge_tokenizer_train is referenced weakly below).
 */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/base/fs.h"
#include "../src/data/corpus.h"
#include "../src/data/loader.h"
#include "../src/data/shards.h"
#include "../src/data/tokenize.h"
#include "../src/data/tokenizer.h"
#include "test.h"

#pragma weak forge_tokenizer_train
#pragma weak forge_tokenizer_load_files
#pragma weak forge_tokenizer_free

/* ------------------------------------------------------------------ helpers */

/* "dir/name" in a ring of 256 buffers: plenty for one test case, and dir may
 * itself be an earlier result */
static char *path_in(const char *dir, const char *name) {
    static char ring[256][512];
    static int slot;
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/%s", dir, name);
    char *p = ring[slot++ % 256];
    memcpy(p, tmp, sizeof tmp);
    return p;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        test_case_fail(__FILE__, __LINE__, "cannot write %s", path);
        return;
    }
    fputs(text, f);
    fclose(f);
}

/* malloc'ed contents (NUL-terminated), or NULL */
static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = '\0';
    if (len) *len = (size_t)n;
    return b;
}

/* overwrite 4 bytes at offset with a little-endian int32 */
static void patch_le32(const char *path, long offset, int32_t v) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
                    (uint8_t)((uint32_t)v >> 24)};
    fseek(f, offset, SEEK_SET);
    fwrite(b, 1, 4, f);
    fclose(f);
}

static int contains(const char *haystack, const char *needle) {
    return strstr(haystack, needle) != NULL;
}

#define CHECK_ERR(expr, want_status, needle)                                                       \
    do {                                                                                           \
        forge_status got_ = (expr);                                                                \
        CHECK_MSG(got_ == (want_status), "%s returned %s, expected %s (message: %s)", #expr,       \
                  forge_status_name(got_), forge_status_name(want_status), forge_error_message()); \
        CHECK_MSG(contains(forge_error_message(), (needle)), "message \"%s\" lacks \"%s\"",        \
                  forge_error_message(), (needle));                                                \
    } while (0)

/* writes tokens first, first+1, ..., first+n-1 */
static void write_ramp(const char *path, int32_t first, size_t n, int vocab_size) {
    int32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = first + (int32_t)i;
    CHECK_OK(forge_shard_write(path, t, n, vocab_size));
    free(t);
}

/* ------------------------------------------------------------------- shards */

static void test_shard_roundtrip(int vocab_size, int want_version, int want_bytes) {
    const char *dir = test_tmpdir();
    const char *path = path_in(dir, "s.bin");
    enum { N = 1000 };
    int32_t t[N];
    for (int i = 0; i < N; i++) t[i] = (int32_t)(((int64_t)i * 7919) % vocab_size);
    t[0] = 0;
    t[N - 1] = vocab_size - 1;
    CHECK_OK(forge_shard_write(path, t, N, vocab_size));
    CHECK(file_size(path) == 1024 + N * want_bytes);
    forge_shard s;
    CHECK_OK(forge_shard_open(&s, path, vocab_size));
    CHECK(s.version == want_version);
    CHECK(s.token_bytes == want_bytes);
    CHECK(s.n_tokens == N);
    int bad = 0;
    for (int i = 0; i < N && s.map; i++) bad += forge_shard_token(&s, (uint64_t)i) != t[i];
    CHECK_MSG(bad == 0, "%d tokens differ after the round trip", bad);
    int32_t out[10];
    if (s.map) {
        forge_shard_read(&s, N - 10, 10, out);
        CHECK(memcmp(out, t + N - 10, sizeof out) == 0);
    }
    forge_shard_close(&s);
    /* header bytes, as llm.c reads them */
    size_t len;
    uint8_t *raw = (uint8_t *)read_text(path, &len);
    CHECK(raw && raw[0] == (20240520 & 0xff) && raw[4] == want_version && raw[8] == (N & 0xff) &&
          raw[9] == (N >> 8));
    free(raw);
}

static void test_shards(void) {
    TEST_CASE("shard round trip, uint16 (GPT-2 vocabulary)");
    test_shard_roundtrip(50257, FORGE_SHARD_VERSION_U16, 2);
    TEST_CASE("shard round trip, uint16 at the limit (65536)");
    test_shard_roundtrip(65536, FORGE_SHARD_VERSION_U16, 2);
    TEST_CASE("shard round trip, uint32 (vocabulary over 65536)");
    test_shard_roundtrip(100000, FORGE_SHARD_VERSION_U32, 4);

    TEST_CASE("shard writer: chunks past its buffer, nothing at the path until close");
    {
        const char *dir = test_tmpdir();
        const char *path = path_in(dir, "big.bin");
        forge_shard_writer *w = NULL;
        CHECK_OK(forge_shard_writer_open(&w, path, 300));
        int32_t chunk[1000];
        for (int c = 0; c < 150 && w; c++) {
            for (int i = 0; i < 1000; i++) chunk[i] = (c * 1000 + i) % 300;
            CHECK_OK(forge_shard_writer_append(w, chunk, 1000));
        }
        CHECK(!file_exists(path));
        if (w) CHECK(forge_shard_writer_count(w) == 150000);
        if (w) CHECK_OK(forge_shard_writer_close(w));
        forge_shard s;
        CHECK_OK(forge_shard_open(&s, path, 300));
        int bad = 0;
        for (uint64_t i = 0; i < s.n_tokens; i++)
            bad += forge_shard_token(&s, i) != (int32_t)(i % 300);
        CHECK(s.n_tokens == 150000 && bad == 0);
        forge_shard_close(&s);
        /* only big.bin is left: no temp files */
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "test $(ls '%s' | wc -l) -eq 1", dir);
        CHECK(system(cmd) == 0);
    }

    TEST_CASE("shard writer rejects out-of-vocabulary tokens; abort leaves nothing");
    {
        const char *dir = test_tmpdir();
        const char *path = path_in(dir, "x.bin");
        forge_shard_writer *w = NULL;
        CHECK_OK(forge_shard_writer_open(&w, path, 100));
        int32_t t[3] = {1, 100, 2};
        if (w) CHECK_ERR(forge_shard_writer_append(w, t, 3), FORGE_ERR_ARG, "position 1");
        int32_t neg = -1;
        if (w) CHECK_ERR(forge_shard_writer_append(w, &neg, 1), FORGE_ERR_ARG, "token -1");
        forge_shard_writer_abort(w);
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", dir);
        CHECK(system(cmd) == 0);
    }

    TEST_CASE("truncated shard is an error naming both sizes");
    {
        const char *dir = test_tmpdir();
        const char *path = path_in(dir, "t.bin");
        write_ramp(path, 0, 100, 1000);
        CHECK(truncate(path, 1024 + 150) == 0);
        forge_shard s;
        CHECK_ERR(forge_shard_open(&s, path, 0), FORGE_ERR_DATA,
                  "truncated: header says 100 tokens (1224 bytes) but file has 1174 bytes");
        CHECK(contains(forge_error_message(), path));
        CHECK(s.map == NULL);
        forge_shard_close(&s);
        CHECK(truncate(path, 10) == 0);
        CHECK_ERR(forge_shard_open(&s, path, 0), FORGE_ERR_DATA, "less than the 1024-byte header");
    }

    TEST_CASE("trailing bytes after the tokens are an error");
    {
        const char *path = path_in(test_tmpdir(), "g.bin");
        write_ramp(path, 0, 100, 1000);
        FILE *f = fopen(path, "ab");
        fputs("junk", f);
        fclose(f);
        forge_shard s;
        CHECK_ERR(forge_shard_open(&s, path, 0), FORGE_ERR_DATA, "4 bytes of trailing data");
    }

    TEST_CASE("bad magic and unknown version are errors");
    {
        const char *path = path_in(test_tmpdir(), "m.bin");
        write_ramp(path, 0, 100, 1000);
        patch_le32(path, 0, 12345);
        forge_shard s;
        CHECK_ERR(forge_shard_open(&s, path, 0), FORGE_ERR_DATA,
                  "magic) is 12345, expected 20240520");
        patch_le32(path, 0, 20240520);
        patch_le32(path, 4, 3);
        CHECK_ERR(forge_shard_open(&s, path, 0), FORGE_ERR_DATA, "version) is 3");
        patch_le32(path, 4, 1);
        patch_le32(path, 8, -5);
        CHECK_ERR(forge_shard_open(&s, path, 0), FORGE_ERR_DATA, "negative");
        CHECK_ERR(forge_shard_open(&s, path_in(test_tmpdir(), "none.bin"), 0), FORGE_ERR_IO,
                  "cannot open shard");
    }

    TEST_CASE("token >= vocab size is reported with its position");
    {
        const char *dir = test_tmpdir();
        const char *p16 = path_in(dir, "v16.bin"), *p32 = path_in(dir, "v32.bin");
        static int32_t t[200000];
        for (int i = 0; i < 200000; i++) t[i] = i % 400;
        t[150007] = 999;
        CHECK_OK(forge_shard_write(p16, t, 200000, 1000));
        t[150007] = 70000;
        CHECK_OK(forge_shard_write(p32, t, 200000, 70001));
        forge_shard s;
        CHECK_ERR(forge_shard_open(&s, p16, 500), FORGE_ERR_DATA, "token 999 at position 150007");
        CHECK_ERR(forge_shard_open(&s, p32, 50257), FORGE_ERR_DATA,
                  "token 70000 at position 150007 is >= the vocabulary size 50257");
        CHECK_OK(forge_shard_open(&s, p32, 70001));
        forge_shard_close(&s);
        CHECK_OK(forge_shard_open(&s, p16, 0)); /* 0: unchecked */
        forge_shard_close(&s);
    }
}

static void test_shard_memory(void) {
    TEST_CASE("shard open_memory: the file's bytes in memory open as the file does");
    const char *dir = test_tmpdir();
    const char *path = path_in(dir, "m.bin");
    int32_t t[300];
    for (int i = 0; i < 300; i++) t[i] = (i * 37) % 1000;
    t[211] = 70000; /* forces uint32 tokens */
    CHECK_OK(forge_shard_write(path, t, 300, 70001));
    size_t len = 0;
    uint8_t *img = (uint8_t *)read_text(path, &len);
    CHECK(img && len == 1024 + 300 * 4);
    if (!img) return;
    forge_shard a, b;
    CHECK_OK(forge_shard_open(&a, path, 70001));
    CHECK_OK(forge_shard_open_memory(&b, img, len, "mem.bin", 70001));
    CHECK(b.map == NULL && b.data == img + 1024 && b.version == a.version && b.n_tokens == a.n_tokens);
    int bad = 0;
    for (uint64_t i = 0; b.data && i < b.n_tokens; i++) bad += forge_shard_token(&b, i) != forge_shard_token(&a, i);
    CHECK_MSG(bad == 0, "%d tokens differ between the file and the memory reader", bad);
    forge_shard_close(&a);
    forge_shard_close(&b);
    CHECK(b.path == NULL && b.data == NULL);
    CHECK_ERR(forge_shard_open_memory(&b, img, len, "mem.bin", 1000), FORGE_ERR_DATA,
              "mem.bin: token 70000 at position 211");
    CHECK_ERR(forge_shard_open_memory(&b, img, len - 1, NULL, 0), FORGE_ERR_DATA, "<memory>: truncated");
    CHECK_ERR(forge_shard_open_memory(&b, img, 1023, "mem.bin", 0), FORGE_ERR_DATA, "less than the 1024-byte header");
    CHECK_ERR(forge_shard_open_memory(&b, NULL, 0, "mem.bin", 0), FORGE_ERR_DATA, "file has 0 bytes");
    CHECK(b.path == NULL);
    /* a short file is refused before anything is mapped, as before */
    FILE *f = fopen(path, "wb");
    if (f) fclose(f);
    CHECK_ERR(forge_shard_open(&a, path, 0), FORGE_ERR_DATA, "file has 0 bytes");
    free(img);
}

/* ------------------------------------------------------------------- loader */

enum { LB = 4, LT = 8 };

/* two shards: train_000 = 0..999, train_001 = 10000..10499; val_000 = 0..99 */
static const char *make_loader_dir(void) {
    const char *dir = test_tmpdir();
    write_ramp(path_in(dir, "train_000.bin"), 0, 1000, 20000);
    write_ramp(path_in(dir, "train_001.bin"), 10000, 500, 20000);
    write_ramp(path_in(dir, "val_000.bin"), 0, 100, 20000);
    return dir;
}

static int batches_equal(const int32_t *a, const int32_t *b) {
    return memcmp(a, b, LB * LT * sizeof *a) == 0;
}

static void test_loader(void) {
    const char *dir = make_loader_dir();
    int32_t in[LB * LT], tg[LB * LT], in2[LB * LT], tg2[LB * LT];

    TEST_CASE("loader: same seed gives the same batches, another seed others");
    {
        forge_loader *a = NULL, *b = NULL, *c = NULL;
        CHECK_OK(forge_loader_open(&a, dir, "train", LB, LT, 1234, 20000));
        CHECK_OK(forge_loader_open(&b, dir, "train", LB, LT, 1234, 20000));
        CHECK_OK(forge_loader_open(&c, dir, "train", LB, LT, 1235, 20000));
        if (a && b && c) {
            CHECK(forge_loader_num_shards(a) == 2);
            CHECK(forge_loader_num_tokens(a) == 1500);
            CHECK(contains(forge_loader_shard_path(a, 1), "train_001.bin"));
            int same = 1, differ = 0;
            for (int k = 0; k < 20; k++) {
                CHECK_OK(forge_loader_next(a, in, tg));
                CHECK_OK(forge_loader_next(b, in2, tg2));
                same &= batches_equal(in, in2) && batches_equal(tg, tg2);
                CHECK_OK(forge_loader_next(c, in2, tg2));
                differ += !batches_equal(in, in2);
            }
            CHECK(same);
            CHECK(differ >= 19);
            CHECK(forge_loader_state(a) == 20);
        }
        forge_loader_free(a);
        forge_loader_free(b);
        forge_loader_free(c);
    }

    TEST_CASE("loader: seek restores the exact batch sequence");
    {
        forge_loader *a = NULL, *b = NULL;
        CHECK_OK(forge_loader_open(&a, dir, "train", LB, LT, 7, 0));
        CHECK_OK(forge_loader_open(&b, dir, "train", LB, LT, 7, 0));
        if (a && b) {
            int32_t rec[12][LB * LT];
            for (int k = 0; k < 12; k++) CHECK_OK(forge_loader_next(a, rec[k], tg));
            /* a fresh loader resumed at 5 continues exactly like the run that never stopped */
            CHECK_OK(forge_loader_seek(b, 5));
            CHECK(forge_loader_state(b) == 5);
            int ok = 1;
            for (int k = 5; k < 12; k++) {
                CHECK_OK(forge_loader_next(b, in, tg));
                ok &= batches_equal(in, rec[k]);
            }
            CHECK(ok);
            /* and seeking backwards replays */
            CHECK_OK(forge_loader_seek(a, 2));
            CHECK_OK(forge_loader_next(a, in, tg));
            CHECK(batches_equal(in, rec[2]) && forge_loader_state(a) == 3);
        }
        forge_loader_free(a);
        forge_loader_free(b);
    }

    TEST_CASE("loader: targets are inputs shifted by one; windows never cross shards");
    {
        forge_loader *a = NULL;
        CHECK_OK(forge_loader_open(&a, dir, "train", LB, LT, 99, 20000));
        int shifted = 1, inside = 1, n_first = 0, n_rows = 0, saw_last_start[2] = {0, 0};
        for (int k = 0; a && k < 2000; k++) {
            CHECK_OK(forge_loader_next(a, in, tg));
            for (int b = 0; b < LB; b++) {
                const int32_t *x = in + b * LT, *y = tg + b * LT;
                for (int t = 0; t + 1 < LT; t++) shifted &= x[t + 1] == y[t];
                /* the shards are ramps, so a window inside one shard is one ramp */
                for (int t = 0; t < LT; t++) inside &= y[t] == x[t] + 1 && x[t] == x[0] + t;
                int first = x[0] < 10000;
                int32_t lo = first ? 0 : 10000, hi = first ? 1000 : 10500; /* [lo, hi) */
                inside &= x[0] >= lo && y[LT - 1] < hi;
                saw_last_start[!first] |= y[LT - 1] == hi - 1;
                n_first += first;
                n_rows++;
            }
        }
        CHECK(shifted);
        CHECK(inside);
        CHECK(saw_last_start[0] &&
              saw_last_start[1]); /* the last window of each shard is reachable */
        /* starts are uniform over positions: shard 0 has 992 of 1484 */
        double frac = (double)n_first / n_rows;
        CHECK_MSG(frac > 0.63 && frac < 0.71, "shard 0 got %.3f of windows, expected ~0.668", frac);
        forge_loader_free(a);
    }

    TEST_CASE("loader: val batches are sequential, deterministic and wrap");
    {
        forge_loader *v = NULL;
        CHECK_OK(forge_loader_open(&v, dir, "val", LB, LT, 5, 20000));
        if (v) {
            /* 100 tokens, T = 8: windows start at 0, 8, ..., 88 -> 12 windows, 3 batches */
            CHECK(forge_loader_val_num_batches(v) == 3);
            int ok = 1;
            for (uint64_t i = 0; i < 3; i++) {
                CHECK_OK(forge_loader_val_batch(v, i, in, tg));
                for (int b = 0; b < LB; b++)
                    for (int t = 0; t < LT; t++)
                        ok &= in[b * LT + t] ==
                                  (int32_t)((i * LB + (uint64_t)b) * LT + (uint64_t)t) &&
                              tg[b * LT + t] == in[b * LT + t] + 1;
            }
            CHECK(ok);
            CHECK_OK(forge_loader_val_batch(v, 1, in, tg));
            CHECK_OK(forge_loader_next(v, in2, tg2)); /* random draws don't disturb it */
            CHECK_OK(forge_loader_val_batch(v, 1, in2, tg2));
            CHECK(batches_equal(in, in2) && batches_equal(tg, tg2));
            CHECK_OK(forge_loader_val_batch(v, 3, in2, tg2)); /* 3 * 4 = 12 windows: wraps to 0 */
            CHECK_OK(forge_loader_val_batch(v, 0, in, tg));
            CHECK(batches_equal(in, in2));
            CHECK_OK(forge_loader_val_batch(v, UINT64_MAX, in, tg)); /* no overflow trouble */
        }
        forge_loader_free(v);

        /* across two shards, B not dividing the windows: 3 + 2 windows with T = 8, B = 4 */
        const char *d2 = test_tmpdir();
        write_ramp(path_in(d2, "val_000.bin"), 0, 30, 20000);    /* windows at 0, 8, 16 */
        write_ramp(path_in(d2, "val_001.bin"), 1000, 20, 20000); /* windows at 1000, 1008 */
        CHECK_OK(forge_loader_open(&v, d2, "val", LB, LT, 5, 20000));
        if (v) {
            CHECK(forge_loader_val_num_batches(v) == 2);
            CHECK_OK(forge_loader_val_batch(v, 0, in, tg));
            CHECK(in[0] == 0 && in[LT] == 8 && in[2 * LT] == 16 && in[3 * LT] == 1000);
            CHECK_OK(forge_loader_val_batch(v, 1, in, tg));
            CHECK(in[0] == 1008 && in[LT] == 0 && in[2 * LT] == 8 && in[3 * LT] == 16);
            CHECK(tg[LT - 1] == 1016);
        }
        forge_loader_free(v);
    }

    TEST_CASE("loader: shard names in numeric order, other files ignored");
    {
        const char *d = test_tmpdir();
        write_ramp(path_in(d, "train_10.bin"), 300, 20, 1000);
        write_ramp(path_in(d, "train_2.bin"), 200, 20, 1000);
        write_ramp(path_in(d, "train_000.bin"), 0, 20, 1000);
        write_ramp(path_in(d, "train_abc.bin"), 900, 20, 1000);
        write_text(path_in(d, "train_001.bin.tmp.123"), "partial");
        write_text(path_in(d, "notes.txt"), "hello");
        mkdir(path_in(d, "train_005.bin"), 0755);
        forge_loader *ld = NULL;
        CHECK_OK(forge_loader_open(&ld, d, "train", 1, 8, 0, 1000));
        if (ld) {
            CHECK(forge_loader_num_shards(ld) == 3);
            CHECK(contains(forge_loader_shard_path(ld, 0), "train_000.bin"));
            CHECK(contains(forge_loader_shard_path(ld, 1), "train_2.bin"));
            CHECK(contains(forge_loader_shard_path(ld, 2), "train_10.bin"));
        }
        forge_loader_free(ld);
    }

    TEST_CASE("loader: missing directory, missing split, too-short shards, bad tokens");
    {
        forge_loader *ld = NULL;
        const char *missing = path_in(test_tmpdir(), "nope");
        CHECK_ERR(forge_loader_open(&ld, missing, "train", LB, LT, 0, 0), FORGE_ERR_IO,
                  "cannot open data directory");
        CHECK(contains(forge_error_message(), missing));
        const char *empty = test_tmpdir();
        write_ramp(path_in(empty, "train_000.bin"), 0, 100, 1000);
        CHECK_ERR(forge_loader_open(&ld, empty, "val", LB, LT, 0, 0), FORGE_ERR_IO,
                  "no val_*.bin shards in");
        CHECK(contains(forge_error_message(), "run `forge tokenize` first"));
        CHECK_ERR(forge_loader_open(&ld, empty, "train", LB, 100, 0, 0), FORGE_ERR_DATA,
                  "T+1 = 101 tokens");
        CHECK_OK(forge_loader_open(&ld, empty, "train", LB, 99, 0, 0)); /* exactly one window */
        if (ld) {
            int32_t a[LB * 99], b[LB * 99];
            CHECK_OK(forge_loader_next(ld, a, b));
            CHECK(a[0] == 0 && b[98] == 99);
            CHECK_OK(forge_loader_val_batch(ld, 0, a, b));
            CHECK(a[LB * 99 - 99] == 0);
        }
        forge_loader_free(ld);
        ld = NULL;
        CHECK_ERR(forge_loader_open(&ld, empty, "train", LB, LT, 0, 50), FORGE_ERR_DATA,
                  "token 50 at position 50");
        CHECK_ERR(forge_loader_open(&ld, empty, "train", 0, LT, 0, 0), FORGE_ERR_ARG, "B=0");
        CHECK(ld == NULL);
    }
}

/* ----------------------------------------------------------------- tokenize */

/* byte-level encoder: ids 0..255, eot 256 */
static forge_status byte_encode(void *ctx, const char *text, size_t len, int32_t **ids,
                                size_t *n_ids) {
    (void)ctx;
    *ids = malloc((len ? len : 1) * sizeof **ids);
    if (!*ids) return forge_error(FORGE_ERR_OOM, "byte_encode");
    for (size_t i = 0; i < len; i++) (*ids)[i] = (unsigned char)text[i];
    *n_ids = len;
    return FORGE_OK;
}
static const forge_text_encoder BYTES = {byte_encode, NULL, 257, 256};

/* All tokens of a split's shards, concatenated; NULL if none. */
static int32_t *read_split(const char *dir, const char *split, size_t *n, int *n_shards) {
    int32_t *all = NULL;
    *n = 0;
    *n_shards = 0;
    for (int i = 0;; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s_%03d.bin", dir, split, i);
        if (!file_exists(path)) break;
        forge_shard s;
        if (forge_shard_open(&s, path, 257) != FORGE_OK) {
            test_case_fail(__FILE__, __LINE__, "%s", forge_error_message());
            break;
        }
        all = realloc(all, (*n + s.n_tokens + 1) * sizeof *all);
        forge_shard_read(&s, 0, s.n_tokens, all + *n);
        *n += s.n_tokens;
        (*n_shards)++;
        forge_shard_close(&s);
    }
    return all;
}

/* checks that the decoded documents of train + val are exactly `docs` (any
 * split, in order within a split), each followed by eot */
static void check_docs(const char *dir, const char *const *docs, int n_docs, int *n_val) {
    size_t n[2];
    int shards[2];
    int32_t *tok[2] = {read_split(dir, "train", &n[0], &shards[0]),
                       read_split(dir, "val", &n[1], &shards[1])};
    int next = 0, seen[16] = {0};
    *n_val = 0;
    for (int s = 0; s < 2; s++) {
        size_t start = 0;
        CHECK_MSG(n[s] == 0 || tok[s][n[s] - 1] == 256, "split %d does not end with eot", s);
        for (size_t i = 0; i < n[s]; i++) {
            if (tok[s][i] != 256) continue;
            char buf[256];
            size_t len = i - start < 255 ? i - start : 255;
            for (size_t k = 0; k < len; k++) buf[k] = (char)tok[s][start + k];
            buf[len] = '\0';
            int found = -1;
            for (int d = 0; d < n_docs; d++)
                if (!seen[d] && strcmp(docs[d], buf) == 0) found = d;
            CHECK_MSG(found >= 0, "unexpected document \"%s\"", buf);
            if (found >= 0) seen[found] = 1;
            next++;
            *n_val += s;
            start = i + 1;
        }
    }
    CHECK_MSG(next == n_docs, "%d documents in the shards, expected %d", next, n_docs);
    free(tok[0]);
    free(tok[1]);
}

static int files_equal(const char *a, const char *b) {
    size_t la, lb;
    char *x = read_text(a, &la), *y = read_text(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

static void test_tokenize(void) {
    TEST_CASE("tokenize: documents split at eot, each followed by eot, split deterministic");
    {
        const char *dir = test_tmpdir();
        const char *f1 = path_in(dir, "a.txt"), *f2 = path_in(dir, "b.txt");
        write_text(f1, "first doc\n<|endoftext|>\nsecond doc\n<|endoftext|>\n  \n<|endoftext|>"
                       "third<|endoftext|>\r\nfourth\n<|endoftext|>\n");
        write_text(f2, "fifth\n<|endoftext|>\nsixth, no separator after it\n");
        const char *docs[] = {"first doc\n", "second doc\n", "third",
                              "fourth\n",    "fifth\n",      "sixth, no separator after it\n"};
        const char *files[] = {f1, f2};
        const char *out = path_in(dir, "out/nested");
        forge_tokenize_stats st;
        CHECK_OK(forge_tokenize_files_with(&BYTES, files, 2, out, 0.4, 42, 0, NULL, &st));
        int n_val;
        check_docs(out, docs, 6, &n_val);
        CHECK(st.n_files == 2);
        CHECK(st.n_docs[0] + st.n_docs[1] == 6 && (int)st.n_docs[1] == n_val);
        CHECK(n_val >= 1 && n_val <= 5);
        size_t text_tokens = 0;
        for (int i = 0; i < 6; i++) text_tokens += strlen(docs[i]);
        CHECK(st.n_tokens[0] + st.n_tokens[1] == text_tokens + 6);
        /* the same again, into another directory: byte-identical shards */
        const char *out2 = path_in(dir, "out2");
        CHECK_OK(forge_tokenize_files_with(&BYTES, files, 2, out2, 0.4, 42, 0, NULL, NULL));
        CHECK(files_equal(path_in(out, "train_000.bin"), path_in(out2, "train_000.bin")));
        CHECK(files_equal(path_in(out, "val_000.bin"), path_in(out2, "val_000.bin")));
        /* the loader reads what the pipeline wrote */
        forge_loader *ld = NULL;
        CHECK_OK(forge_loader_open(&ld, out, "train", 2, 4, 0, 257));
        forge_loader_free(ld);
    }

    TEST_CASE("tokenize: val is never empty for val_fraction > 0, nor train for < 1");
    {
        const char *dir = test_tmpdir();
        const char *f = path_in(dir, "c.txt");
        write_text(f, "alpha<|endoftext|>beta<|endoftext|>gamma");
        const char *docs[] = {"alpha", "beta", "gamma"};
        int n_val;
        const char *o1 = path_in(dir, "o1");
        CHECK_OK(forge_tokenize_files_with(&BYTES, &f, 1, o1, 1e-9, 1, 0, NULL, NULL));
        check_docs(o1, docs, 3, &n_val);
        CHECK(n_val == 1);
        const char *o2 = path_in(dir, "o2");
        CHECK_OK(forge_tokenize_files_with(&BYTES, &f, 1, o2, 0.999999, 1, 0, NULL, NULL));
        check_docs(o2, docs, 3, &n_val);
        CHECK(n_val == 2);
        const char *o3 = path_in(dir, "o3");
        CHECK_OK(forge_tokenize_files_with(&BYTES, &f, 1, o3, 0.0, 1, 0, NULL, NULL));
        check_docs(o3, docs, 3, &n_val);
        CHECK(n_val == 0 && !file_exists(path_in(o3, "val_000.bin")));
    }

    TEST_CASE("tokenize: a single document is cut by tokens");
    {
        const char *dir = test_tmpdir();
        const char *f = path_in(dir, "one.txt");
        write_text(f, "0123456789012345678901234567890123456789012345678901234567890123456789"
                      "012345678901234567890123456789");
        forge_tokenize_stats st;
        CHECK_OK(forge_tokenize_files_with(&BYTES, &f, 1, path_in(dir, "o"), 0.1, 3, 0, NULL, &st));
        CHECK(st.n_tokens[0] == 90 + 1 && st.n_tokens[1] == 10 + 1);
        size_t n;
        int shards;
        int32_t *v = read_split(path_in(dir, "o"), "val", &n, &shards);
        CHECK(v && n == 11 && v[0] == '0' && v[9] == '9' && v[10] == 256);
        free(v);
    }

    TEST_CASE("tokenize: single-document files are cut, multi-document files hashed");
    {
        const char *dir = test_tmpdir();
        const char *f1 = path_in(dir, "book1.txt"), *f2 = path_in(dir, "docs.txt"),
                   *f3 = path_in(dir, "book2.txt");
        write_text(f1, "AAAAAAAAAAAAAAAAAAAA");          /* 20 bytes -> 18 train + 2 val */
        write_text(f2, "x<|endoftext|>y<|endoftext|>z"); /* 3 documents, hashed */
        write_text(f3, "BBBBBBBBBB");                    /* 10 bytes -> 9 train + 1 val */
        const char *files[] = {f1, f2, f3};
        forge_tokenize_stats st;
        const char *out = path_in(dir, "o");
        CHECK_OK(forge_tokenize_files_with(&BYTES, files, 3, out, 0.1, 5, 0, NULL, &st));
        CHECK(st.n_docs[0] + st.n_docs[1] == 7); /* each book counts once per split */
        size_t n[2];
        int shards;
        int32_t *tr = read_split(out, "train", &n[0], &shards),
                *va = read_split(out, "val", &n[1], &shards);
        int a_train = 0, a_val = 0, b_train = 0, b_val = 0, xyz = 0;
        for (size_t i = 0; i < n[0]; i++)
            a_train += tr[i] == 'A', b_train += tr[i] == 'B', xyz += tr[i] >= 'x' && tr[i] <= 'z';
        for (size_t i = 0; i < n[1]; i++)
            a_val += va[i] == 'A', b_val += va[i] == 'B', xyz += va[i] >= 'x' && va[i] <= 'z';
        CHECK(a_train == 18 && a_val == 2 && b_train == 9 && b_val == 1 && xyz == 3);
        free(tr);
        free(va);
    }

    TEST_CASE("tokenize: shards roll over, stale shards of a larger run are removed");
    {
        const char *dir = test_tmpdir();
        const char *f = path_in(dir, "r.txt");
        write_text(f, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa<|endoftext|>"
                      "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb<|endoftext|>");
        const char *out = path_in(dir, "o");
        forge_tokenize_stats st;
        CHECK_OK(forge_tokenize_files_with(&BYTES, &f, 1, out, 0.0, 3, 10, NULL, &st));
        /* 63 + 1 + 38 + 1 = 103 tokens -> 11 shards of 10 and one of 3 */
        CHECK(st.n_shards[0] == 11 && st.n_tokens[0] == 103);
        CHECK(file_size(path_in(out, "train_000.bin")) == 1024 + 20);
        CHECK(file_size(path_in(out, "train_010.bin")) == 1024 + 6);
        CHECK(!file_exists(path_in(out, "train_011.bin")));
        write_text(path_in(out, "val_007.bin"), "stale");
        CHECK_OK(forge_tokenize_files_with(&BYTES, &f, 1, out, 0.0, 3, 50, NULL, &st));
        CHECK(st.n_shards[0] == 3);
        CHECK(file_exists(path_in(out, "train_002.bin")) &&
              !file_exists(path_in(out, "train_003.bin")));
        CHECK(!file_exists(path_in(out, "train_010.bin")) &&
              !file_exists(path_in(out, "val_007.bin")));
        size_t n;
        int shards;
        int32_t *t = read_split(out, "train", &n, &shards);
        CHECK(n == 103 && shards == 3 && t && t[63] == 256 && t[64] == 'b' && t[102] == 256);
        free(t);
    }

    TEST_CASE("tokenize: summary on the progress stream");
    {
        const char *dir = test_tmpdir();
        const char *f = path_in(dir, "p.txt");
        write_text(f, "one<|endoftext|>two<|endoftext|>three");
        const char *log = path_in(dir, "log.txt");
        FILE *pf = fopen(log, "w");
        CHECK_OK(forge_tokenize_files_with(&BYTES, &f, 1, path_in(dir, "o"), 0.5, 9, 0, pf, NULL));
        fclose(pf);
        char *text = read_text(log, NULL);
        CHECK(text && contains(text, "1 file, ") && contains(text, "3 documents") &&
              contains(text, "tokens/s") && contains(text, "train") && contains(text, "val"));
        free(text);
    }

    TEST_CASE("tokenize: missing input, bad arguments, nothing to tokenize");
    {
        const char *dir = test_tmpdir();
        const char *good = path_in(dir, "g.txt");
        write_text(good, "hello");
        const char *files[] = {good, path_in(dir, "missing.txt")};
        const char *out = path_in(dir, "o");
        CHECK_ERR(forge_tokenize_files_with(&BYTES, files, 2, out, 0.1, 0, 0, NULL, NULL),
                  FORGE_ERR_IO, "missing.txt: cannot open text file");
        CHECK(!file_exists(out)); /* failed before writing anything */
        CHECK_ERR(forge_tokenize_files_with(&BYTES, files, 1, out, 1.5, 0, 0, NULL, NULL),
                  FORGE_ERR_ARG, "val_fraction");
        const char *blank = path_in(dir, "blank.txt");
        write_text(blank, "\n\n<|endoftext|>\n  ");
        CHECK_ERR(forge_tokenize_files_with(&BYTES, &blank, 1, out, 0.1, 0, 0, NULL, NULL),
                  FORGE_ERR_DATA, "no text to tokenize");
        CHECK_ERR(forge_tokenize_files_with(&BYTES, &dir, 1, out, 0.1, 0, 0, NULL, NULL),
                  FORGE_ERR_IO, "is a directory");
    }

    TEST_CASE("tokenize: GPT-2 tokenizer -> uint16 shards ending in eot 50256");
    {
        const char *enc_json = test_data_path("gpt2-tokenizer/encoder.json");
        const char *vocab_bpe = test_data_path("gpt2-tokenizer/vocab.bpe");
        if (!forge_tokenizer_load_files || !forge_tokenizer_free) {
            test_case_skip("forge_tokenizer_load_files is not linked");
        } else if (!enc_json || !vocab_bpe) {
            test_case_skip("shared/data/gpt2-tokenizer is missing");
        } else {
            forge_tokenizer *tok = NULL;
            CHECK_OK(forge_tokenizer_load_files(&tok, enc_json, vocab_bpe));
            const char *dir = test_tmpdir();
            const char *f = path_in(dir, "t.txt");
            write_text(f, "Hello world<|endoftext|>\nHello world");
            if (tok) {
                const char *out = path_in(dir, "o");
                CHECK_OK(forge_tokenize_files(tok, &f, 1, out, 0.5, 0, NULL));
                /* "Hello world" is [15496, 995] in GPT-2; one document each way */
                size_t n[2];
                forge_shard s;
                for (int sp = 0; sp < 2; sp++) {
                    const char *p = path_in(out, sp ? "val_000.bin" : "train_000.bin");
                    CHECK_OK(forge_shard_open(&s, p, 50257));
                    n[sp] = s.n_tokens;
                    if (s.map) {
                        CHECK(s.version == FORGE_SHARD_VERSION_U16);
                        CHECK(s.n_tokens == 3 && forge_shard_token(&s, 0) == 15496 &&
                              forge_shard_token(&s, 1) == 995 && forge_shard_token(&s, 2) == 50256);
                    }
                    forge_shard_close(&s);
                }
                CHECK(n[0] == 3 && n[1] == 3);
            }
            forge_tokenizer_free(tok);
        }
    }

    TEST_CASE("tokenize: trained BPE tokenizer -> shards -> loader");
    if (!forge_tokenizer_train || !forge_tokenizer_free) {
        test_case_skip("forge_tokenizer_train is not linked yet");
    } else {
        const char *dir = test_tmpdir();
        const char *f = path_in(dir, "corpus.txt");
        FILE *fp = fopen(f, "w");
        for (int i = 0; i < 200; i++)
            fprintf(fp, "The quick brown fox %d jumps over the lazy dog.\n<|endoftext|>\n", i);
        fclose(fp);
        forge_tokenizer *tok = NULL;
        CHECK_OK(forge_tokenizer_train(&tok, &f, 1, 300, 0));
        if (tok) {
            const char *out = path_in(dir, "shards");
            CHECK_OK(forge_tokenize_files(tok, &f, 1, out, 0.1, 1, NULL));
            forge_loader *tr = NULL, *va = NULL;
            CHECK_OK(forge_loader_open(&tr, out, "train", 2, 16, 0, 300));
            CHECK_OK(forge_loader_open(&va, out, "val", 2, 16, 0, 300));
            if (tr && va) {
                int32_t x[32], y[32];
                CHECK_OK(forge_loader_next(tr, x, y));
                CHECK(x[1] == y[0]);
                CHECK_OK(forge_loader_val_batch(va, 0, x, y));
                /* a val shard holds whole documents, each followed by eot (id 299) */
                forge_shard s;
                CHECK_OK(forge_shard_open(&s, forge_loader_shard_path(va, 0), 300));
                if (s.map) CHECK(forge_shard_token(&s, s.n_tokens - 1) == 299);
                forge_shard_close(&s);
            }
            forge_loader_free(tr);
            forge_loader_free(va);
            forge_tokenizer_free(tok);
        }
    }
}

/* ------------------------------------------------------------------- corpus */

static void test_corpus(void) {
    TEST_CASE("corpus: fortunes files -> entries separated by eot, sorted, indexes skipped");
    {
        const char *dir = test_tmpdir();
        const char *fd = path_in(dir, "fortunes");
        mkdir(fd, 0755);
        write_text(path_in(fd, "b"),
                   "Bee one.\n%\n\tIndented\n  -- someone\n%\n%\n   \n%\nlast, no newline");
        write_text(path_in(fd, "a"), "Aye\r\n%\r\nsecond\r\n");
        write_text(path_in(fd, "a.dat"), "\x01\x02binary");
        CHECK(symlink("a", path_in(fd, "a.u8")) == 0);
        mkdir(path_in(fd, "off"), 0755);
        write_text(path_in(fd, "off/rude"), "nope\n%\n");
        CHECK(symlink("off", path_in(fd, "offlink")) == 0);
        const char *out = path_in(dir, "corpus.txt");
        size_t n = 0;
        CHECK_OK(forge_corpus_fortunes_from(fd, out, &n));
        CHECK(n == 5);
        char *text = read_text(out, NULL);
        const char *want = "Aye\n<|endoftext|>\n"
                           "second\n<|endoftext|>\n"
                           "Bee one.\n<|endoftext|>\n"
                           "\tIndented\n  -- someone\n<|endoftext|>\n"
                           "last, no newline\n<|endoftext|>\n";
        CHECK_MSG(text && strcmp(text, want) == 0, "corpus is:\n%s", text ? text : "(none)");
        free(text);
    }

    TEST_CASE("corpus: a missing fortunes directory says how to install it");
    {
        size_t n = 7;
        CHECK_ERR(forge_corpus_fortunes_from(path_in(test_tmpdir(), "none"),
                                             path_in(test_tmpdir(), "c.txt"), &n),
                  FORGE_ERR_IO,
                  "install Debian's `fortunes` package (apt-get install fortunes) or pass --data");
        CHECK(n == 0);
    }

    TEST_CASE("corpus: the installed fortunes package");
    if (access(FORGE_FORTUNES_DIR, R_OK) != 0) {
        test_case_skip(FORGE_FORTUNES_DIR " is not installed");
    } else {
        const char *dir = test_tmpdir();
        const char *out = path_in(dir, "fortunes.txt");
        size_t n = 0;
        CHECK_OK(forge_corpus_fortunes(out, &n));
        size_t len = 0;
        char *text = read_text(out, &len);
        CHECK_MSG(n > 1000, "only %zu entries", n);
        CHECK(text && len > 100000 && len >= 15 &&
              strcmp(text + len - 15, "\n<|endoftext|>\n") == 0);
        /* deterministic */
        CHECK_OK(forge_corpus_fortunes(path_in(dir, "again.txt"), NULL));
        CHECK(files_equal(out, path_in(dir, "again.txt")));
        /* and it goes through the pipeline into loadable shards */
        forge_tokenize_stats st;
        CHECK_OK(forge_tokenize_files_with(&BYTES, &out, 1, path_in(dir, "shards"), 0.05, 0, 0,
                                           NULL, &st));
        CHECK(st.n_docs[0] + st.n_docs[1] == n);
        CHECK(st.n_docs[1] > n / 40 && st.n_docs[1] < n / 10);
        free(text);
    }
}

static void test_cli_many_files(void) {
    TEST_CASE("forge tokenizer train / tokenize: 300 input files; the ids written are the ones the corpus gave");
    const char *forge = test_forge_binary();
    if (!forge || !forge_tokenizer_train) {
        test_case_skip("no forge binary beside the test binary, or no tokenizer trainer");
        return;
    }
    const char *dir = test_tmpdir();
    enum { N_FILES = 300 };
    size_t cap = 64 * 1024, len = 0;
    char *cmd = malloc(cap);
    CHECK(cmd != NULL);
    if (!cmd) return;
    len += (size_t)snprintf(cmd + len, cap - len, "%s tokenizer train --vocab 100000 --out %s/tok", forge, dir);
    for (int i = 0; i < N_FILES; i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/f%03d.txt", dir, i);
        FILE *f = fopen(path, "w");
        if (f) fprintf(f, "story %d: the cat sat on the mat.\n", i);
        if (f) fclose(f);
        len += (size_t)snprintf(cmd + len, cap - len, " %s", path);
    }
    snprintf(cmd + len, cap - len, " >%s/out.txt 2>&1", dir);
    CHECK_MSG(system(cmd) == 0, "forge tokenizer train with %d files failed", N_FILES);
    char tok_dir[600], out_path[600];
    snprintf(tok_dir, sizeof tok_dir, "%s/tok", dir);
    snprintf(out_path, sizeof out_path, "%s/out.txt", dir);
    forge_tokenizer *tok = NULL;
    CHECK_OK(forge_tokenizer_load(&tok, tok_dir));
    char *out = NULL;
    size_t out_len = 0;
    CHECK_OK(forge_read_file(out_path, &out, &out_len));
    char want[64];
    snprintf(want, sizeof want, "(%d ids)", forge_tokenizer_vocab_size(tok));
    CHECK_MSG(tok && out && forge_tokenizer_vocab_size(tok) < 100000 && strstr(out, want),
              "expected \"%s\" (the vocabulary written, not --vocab) in:\n%s", want, out ? out : "");
    free(out);
    forge_tokenizer_free(tok);
    /* the same files through tokenize: every document lands in a shard */
    len = (size_t)snprintf(cmd, cap, "%s tokenize --tokenizer %s --out %s/shards --val-fraction 0", forge, tok_dir, dir);
    for (int i = 0; i < N_FILES; i++) len += (size_t)snprintf(cmd + len, cap - len, " %s/f%03d.txt", dir, i);
    snprintf(cmd + len, cap - len, " >%s/out.txt 2>&1", dir);
    CHECK_MSG(system(cmd) == 0, "forge tokenize with %d files failed", N_FILES);
    CHECK_OK(forge_read_file(out_path, &out, &out_len));
    CHECK_MSG(out && strstr(out, "300 documents"), "tokenize output:\n%s", out ? out : "");
    free(out);
    /* --val-fraction 1 would leave no train shard: refused before anything is written (exit 2) */
    snprintf(cmd, cap, "%s tokenize --tokenizer %s --out %s/none --val-fraction 1 %s/f000.txt >%s/out.txt 2>&1", forge,
             tok_dir, dir, dir, dir);
    const int rc = system(cmd);
    CHECK_MSG(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "exit status %d", rc);
    out = NULL;
    CHECK_OK(forge_read_file(out_path, &out, &out_len));
    CHECK_MSG(out && strstr(out, "--val-fraction") && strstr(out, "no train shard"), "output:\n%s", out ? out : "");
    free(out);
    free(cmd);
}

void suite_data(void) {
    test_shards();
    test_shard_memory();
    test_loader();
    test_tokenize();
    test_corpus();
    test_cli_many_files();
}
