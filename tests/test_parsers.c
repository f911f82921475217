/*
 * test_parsers.c: the parsers under their fuzz targets' checks, without a fuzzer.
 *
 * Every input committed under fuzz/corpus/<target>/ (the seeds, and each crash
 * a fuzzer found, as crash-*) is replayed through fuzz/fuzz_<target>.c
 * compiled into this binary (tests/fuzz_replay/, fuzz/fuzz.h), so `make test`
 * and `make asan` rerun them all. Then the safetensors reader's in-memory entry
 * point against the file one (the config, shard and tokenizer ones are tested
 * in their own suites), and the regression tests for what the fuzzers found
 * (docs/fuzzing.md lists them).
 */
#include <dirent.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/data/tokenizer.h"
#include "../src/model/safetensors.h"
#include "test.h"

int forge_fuzz_config(const uint8_t *data, size_t size);
int forge_fuzz_safetensors(const uint8_t *data, size_t size);
int forge_fuzz_shard(const uint8_t *data, size_t size);
int forge_fuzz_tokenizer(const uint8_t *data, size_t size);
int forge_fuzz_tokenizer_text(const uint8_t *data, size_t size);
int forge_fuzz_tokenizer_text_init(int *argc, char ***argv);

#define CORPUS_DIR "fuzz/corpus"

/* ---- the replay ---- */

static jmp_buf replay_jump;
static char replay_msg[2048];

void forge_fuzz_fail(const char *target, const char *fmt, ...) {
    va_list ap;
    int n = snprintf(replay_msg, sizeof replay_msg, "%s: ", target);
    va_start(ap, fmt);
    vsnprintf(replay_msg + n, sizeof replay_msg - (size_t)n, fmt, ap);
    va_end(ap);
    longjmp(replay_jump, 1);
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static uint8_t *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Runs entry on every file of fuzz/corpus/<target>; returns how many ran. */
static int replay(const char *target, int (*entry)(const uint8_t *, size_t)) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/%s", CORPUS_DIR, target);
    DIR *d = opendir(dir);
    if (!d) {
        test_case_fail(__FILE__, __LINE__, "cannot open %s (run the tests from the repository root)", dir);
        return 0;
    }
    char *names[4096];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 4096;)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_name);
    for (int i = 0; i < n; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len = 0;
        uint8_t *data = read_all(path, &len);
        if (!data) {
            test_case_fail(__FILE__, __LINE__, "cannot read %s", path);
            continue;
        }
        if (setjmp(replay_jump) == 0)
            entry(data, len);
        else
            test_case_fail(__FILE__, __LINE__, "%s: %s", path, replay_msg);
        free(data);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    return n;
}

static void test_replay(void) {
    static const struct {
        const char *name;
        int (*entry)(const uint8_t *, size_t);
    } targets[] = {
        {"config", forge_fuzz_config},       {"safetensors", forge_fuzz_safetensors},
        {"shard", forge_fuzz_shard},         {"tokenizer", forge_fuzz_tokenizer},
        {"tokenizer_text", forge_fuzz_tokenizer_text},
    };
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
        char name[96];
        snprintf(name, sizeof name, "fuzz corpus replays clean: %s", targets[t].name);
        TEST_CASE(name);
        if (targets[t].entry == forge_fuzz_tokenizer_text) {
            if (setjmp(replay_jump) == 0) {
                forge_fuzz_tokenizer_text_init(NULL, NULL);
            } else {
                test_case_fail(__FILE__, __LINE__, "tokenizer_text set-up: %s", replay_msg);
                continue;
            }
        }
        int n = replay(targets[t].name, targets[t].entry);
        CHECK_MSG(n > 0, "%s/%s holds no inputs", CORPUS_DIR, targets[t].name);
    }
}

/* ---- safetensors: open_memory is open without the file ---- */

static void test_safetensors_memory(void) {
    TEST_CASE("safetensors: open_memory agrees with open; every strict prefix is refused");
    const char *dir = test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    float w[6] = {1, 2, 3, 4, 5, 6};
    int32_t step = 42;
    forge_st_entry e[2] = {
        {.name = "w", .dtype = "F32", .ndim = 2, .shape = {2, 3}, .data = w, .bytes = sizeof w},
        {.name = "step", .dtype = "I32", .ndim = 0, .data = &step, .bytes = sizeof step},
    };
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    CHECK_OK(forge_safetensors_write(path, e, 2, mk, mv, 1));
    size_t len = 0;
    uint8_t *img = read_all(path, &len);
    CHECK(img != NULL && len > 8);
    if (!img) return;
    forge_safetensors *a = NULL, *b = NULL;
    CHECK_OK(forge_safetensors_open(&a, path));
    CHECK_OK(forge_safetensors_open_memory(&b, img, len, "in-memory"));
    if (a && b) {
        CHECK(forge_safetensors_count(a) == 2 && forge_safetensors_count(b) == 2);
        for (int i = 0; i < 2; i++) {
            const forge_st_entry *x = forge_safetensors_entry(a, i), *y = forge_safetensors_entry(b, i);
            CHECK(strcmp(x->name, y->name) == 0 && strcmp(x->dtype, y->dtype) == 0 && x->ndim == y->ndim &&
                  x->bytes == y->bytes && memcmp(x->data, y->data, x->bytes) == 0);
            CHECK((const uint8_t *)y->data >= img && (const uint8_t *)y->data + y->bytes <= img + len);
        }
        CHECK(strcmp(forge_safetensors_path(b), "in-memory") == 0);
        const char *v = forge_safetensors_meta(b, "format");
        CHECK(v && strcmp(v, "pt") == 0);
    }
    forge_safetensors_close(a);
    forge_safetensors_close(b);
    /* the last tensor holds bytes, so every shorter image is truncated somewhere */
    int accepted = 0;
    for (size_t k = 0; k < len; k++) {
        forge_safetensors *t = NULL;
        forge_status s = forge_safetensors_open_memory(&t, img, k, NULL);
        if (s == FORGE_OK || t) accepted++;
        else CHECK_MSG(s == FORGE_ERR_DATA && strstr(forge_error_message(), "<memory>"),
                       "prefix %zu: status %s, message %s", k, forge_status_name(s), forge_error_message());
        forge_safetensors_close(t);
    }
    CHECK_MSG(accepted == 0, "%d strict prefixes of the file opened", accepted);
    free(img);
}

/* ---- regression tests for what the fuzzers found (docs/fuzzing.md) ---- */

/* n bytes of data placed so that the byte after them is the first of a
 * PROT_NONE page: a read one past the end faults, with or without ASan. */
typedef struct {
    void *map;
    size_t map_len;
    uint8_t *p;
} guarded;

static int guarded_copy(guarded *g, const void *data, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t pages = (n + page - 1) / page + 1;
    g->map_len = pages * page;
    g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) return -1;
    uint8_t *guard = (uint8_t *)g->map + (pages - 1) * page;
    if (mprotect(guard, page, PROT_NONE) != 0) return -1;
    g->p = guard - n;
    memcpy(g->p, data, n);
    return 0;
}

static void guarded_free(guarded *g) { munmap(g->map, g->map_len); }

/* cJSON (1.7.15, Debian 12's; DaveGamble/cJSON#800) reads the byte after a
 * length-delimited text that ends just after a comma inside an object
 * (parse_object steps past the ',' and parse_string looks at the next byte
 * before checking the length). Found by fuzz_safetensors and fuzz_tokenizer
 * linked against an instrumented cJSON (make fuzz-build FUZZ_CJSON_SRC=...).
 * The safetensors header is parsed in place: a file whose header runs to its
 * last byte, with a size a multiple of the page size, read one byte past the
 * mapping. Both parsers now hand cJSON a NUL-terminated copy. */
static void test_cjson_overread(void) {
    TEST_CASE("regression (fuzz): a safetensors header ending in ',' is not read past its end");
    static const uint8_t crash[] = "5\0\0\0\0\0\0\0{\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0],";
    guarded g;
    if (guarded_copy(&g, crash, sizeof crash - 1) != 0) {
        test_case_fail(__FILE__, __LINE__, "cannot set up a guard page");
        return;
    }
    forge_safetensors *st = NULL;
    CHECK(forge_safetensors_open_memory(&st, g.p, sizeof crash - 1, "crash.safetensors") == FORGE_ERR_DATA);
    CHECK(st == NULL && strstr(forge_error_message(), "not valid JSON") != NULL);
    guarded_free(&g);
    /* a file of exactly one page whose header ends at its last byte with a ',' */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *file = malloc(page);
    uint64_t hlen = page - 8;
    for (int i = 0; i < 8; i++) file[i] = (uint8_t)(hlen >> (8 * i));
    memset(file + 8, ' ', hlen);
    static const char member[] = "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}";
    memcpy(file + 8, member, sizeof member - 1);
    file[page - 1] = ',';
    char path[600];
    snprintf(path, sizeof path, "%s/page.safetensors", test_tmpdir());
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(file, 1, page, f) == page);
    if (f) fclose(f);
    free(file);
    CHECK(forge_safetensors_open(&st, path) == FORGE_ERR_DATA && st == NULL);
    CHECK(strstr(forge_error_message(), path) && strstr(forge_error_message(), "not valid JSON"));

    TEST_CASE("regression (fuzz): an encoder.json ending in ',' is not read past its end");
    static const uint8_t enc[] = "{\"\":\r\n \x04" "5 \f\n,";
    if (guarded_copy(&g, enc, sizeof enc - 1) != 0) {
        test_case_fail(__FILE__, __LINE__, "cannot set up a guard page");
        return;
    }
    forge_tokenizer *tok = NULL;
    CHECK(forge_tokenizer_load_memory(&tok, (const char *)g.p, sizeof enc - 1, "crash/encoder.json", "", 0, NULL) ==
          FORGE_ERR_DATA);
    CHECK(tok == NULL && strstr(forge_error_message(), "crash/encoder.json:") != NULL);
    guarded_free(&g);
}

void suite_parsers(void) {
    test_replay();
    test_safetensors_memory();
    test_cjson_overread();
}
