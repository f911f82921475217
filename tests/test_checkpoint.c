/* test_checkpoint.c: safetensors I/O (round trip, corrupt files, atomic writes)
 * and the token sampler. */
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/base/status.h"
#include "../src/model/safetensors.h"
#include "../src/train/run_dir.h"
#include "../src/train/sampler.h"
#include "../src/base/rng.h"

/* ------------------------------------------------------------ helpers */

static const char *join(const char *dir, const char *name) {
    static char buf[8][1024];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, 1024, "%s/%s", dir, name);
    return p;
}

static long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* whole file into a malloc'ed buffer; NULL if missing */
static unsigned char *slurp(const char *path, long *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n + 1);
    if (b && fread(b, 1, (size_t)*n, f) != (size_t)*n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

/* A file with the given header text (length field = strlen(header)) and data. */
static void write_raw(const char *path, const char *header, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        test_case_fail(__FILE__, __LINE__, "cannot write %s", path);
        return;
    }
    uint64_t len = strlen(header);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(len >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, len, f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}


static float w_data[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
static int32_t ids_data[4] = {7, -1, 2147483647, 0};
static float scalar_data = 42.0f;

static const forge_st_entry sample_entries[] = {
    {"h.0.attn.weight", "F32", 2, {2, 3}, w_data, sizeof w_data},
    {"ids", "I32", 1, {4}, ids_data, sizeof ids_data},
    {"step", "F32", 0, {0}, &scalar_data, sizeof scalar_data},
    {"empty", "F32", 2, {0, 5}, NULL, 0},
};
static const char *const meta_k[] = {"format", "config"};
static const char *const meta_v[] = {"pt", "{\"name\": \"tiny\"}"};

static void write_sample(const char *path) {
    CHECK_OK(forge_safetensors_write(path, sample_entries, 4, meta_k, meta_v, 2));
}

/* -------------------------------------------------------- safetensors */

static void test_round_trip(void) {
    TEST_CASE("safetensors round trip with metadata");
    const char *dir = test_tmpdir();
    const char *path = join(dir, "model.safetensors");
    write_sample(path);
    CHECK(access(join(dir, "model.safetensors.tmp"), F_OK) != 0);

    long n = 0;
    unsigned char *raw = slurp(path, &n);
    CHECK(raw != NULL);
    if (raw) {
        uint64_t hlen = 0;
        for (int i = 0; i < 8; i++) hlen |= (uint64_t)raw[i] << (8 * i);
        CHECK(hlen % 8 == 0);
        CHECK((long)(8 + hlen + sizeof w_data + sizeof ids_data + sizeof scalar_data) == n);
        free(raw);
    }

    forge_safetensors *st = NULL;
    CHECK_OK(forge_safetensors_open(&st, path));
    if (!st) return;
    CHECK(forge_safetensors_count(st) == 4);
    for (int i = 0; i < 4 && i < forge_safetensors_count(st); i++) {
        const forge_st_entry *e = forge_safetensors_entry(st, i), *want = &sample_entries[i];
        CHECK(strcmp(e->name, want->name) == 0); /* header order == write order */
        CHECK(strcmp(e->dtype, want->dtype) == 0);
        CHECK(e->ndim == want->ndim);
        for (int d = 0; d < e->ndim; d++) CHECK(e->shape[d] == want->shape[d]);
        CHECK(e->bytes == want->bytes);
        CHECK(e->bytes == 0 || memcmp(e->data, want->data, e->bytes) == 0);
        CHECK(((uintptr_t)e->data % 4) == 0);
    }
    CHECK(forge_safetensors_entry(st, 4) == NULL && forge_safetensors_entry(st, -1) == NULL);
    const forge_st_entry *ids = forge_safetensors_find(st, "ids");
    CHECK(ids && ((const int32_t *)ids->data)[2] == 2147483647);
    CHECK(forge_safetensors_meta(st, "format") && strcmp(forge_safetensors_meta(st, "format"), "pt") == 0);
    CHECK(forge_safetensors_meta(st, "config") &&
          strcmp(forge_safetensors_meta(st, "config"), meta_v[1]) == 0);
    CHECK(forge_safetensors_meta(st, "nope") == NULL);
    CHECK(forge_safetensors_meta_count(st) == 2);
    const char *k = NULL, *v = NULL;
    CHECK(forge_safetensors_meta_at(st, 1, &k, &v) && strcmp(k, "config") == 0);
    CHECK(!forge_safetensors_meta_at(st, 2, &k, &v));
    CHECK(strcmp(forge_safetensors_path(st), path) == 0);
    forge_safetensors_close(st);

    TEST_CASE("safetensors: no tensors, no metadata");
    const char *empty = join(dir, "empty.safetensors");
    CHECK_OK(forge_safetensors_write(empty, NULL, 0, NULL, NULL, 0));
    CHECK_OK(forge_safetensors_open(&st, empty));
    if (st) {
        CHECK(forge_safetensors_count(st) == 0 && forge_safetensors_meta_count(st) == 0);
        forge_safetensors_close(st);
    }

    TEST_CASE("safetensors: reads an unpadded header as other tools write it");
    const char *hf = join(dir, "hf.safetensors");
    float two[2] = {1.0f, 2.0f};
    write_raw(hf, "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
                  "\"data_offsets\":[0,8]}}",
              two, sizeof two);
    CHECK_OK(forge_safetensors_open(&st, hf));
    if (st) {
        const forge_st_entry *b = forge_safetensors_find(st, "b");
        float got[2] = {0, 0};
        if (b) memcpy(got, b->data, sizeof got);
        CHECK(b && b->bytes == 8 && got[1] == 2.0f);
        forge_safetensors_close(st);
    }
}

static void test_lookup(void) {
    TEST_CASE("missing tensor lookup");
    const char *dir = test_tmpdir();
    const char *path = join(dir, "m.safetensors");
    write_sample(path);
    forge_safetensors *st = NULL;
    CHECK_OK(forge_safetensors_open(&st, path));
    if (!st) return;
    CHECK(forge_safetensors_find(st, "h.0.attn.bias") == NULL);
    const forge_st_entry *e = NULL;
    CHECK_ERR_MSG(forge_safetensors_get(st, "h.0.attn.bias", "F32", 0, NULL, &e), FORGE_ERR_DATA,
              "h.0.attn.bias", path);
    int64_t want[2] = {3, 2};
    CHECK_ERR_MSG(forge_safetensors_get(st, "h.0.attn.weight", "F32", 2, want, &e), FORGE_ERR_DATA,
              "has shape (2, 3), expected (3, 2)", path);
    CHECK_ERR_MSG(forge_safetensors_get(st, "ids", "F32", 1, NULL, &e), FORGE_ERR_DATA, "\"ids\"",
              "dtype I32, expected F32");
    int64_t good[2] = {2, 3};
    CHECK_OK(forge_safetensors_get(st, "h.0.attn.weight", "F32", 2, good, &e));
    CHECK(e && e->bytes == sizeof w_data);
    forge_safetensors_close(st);
}

static void test_corrupt_files(void) {
    const char *dir = test_tmpdir();
    const char *path = join(dir, "c.safetensors");
    forge_safetensors *st = NULL;
    float data[4] = {0};

    TEST_CASE("missing file");
    CHECK_ERR_MSG(forge_safetensors_open(&st, join(dir, "none.safetensors")), FORGE_ERR_IO,
              "none.safetensors", NULL);
    CHECK(st == NULL);

    TEST_CASE("truncated file");
    write_sample(path);
    long full = file_size(path);
    CHECK(truncate(path, full - 4) == 0);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, path, "\"step\"");
    CHECK(truncate(path, 40) == 0); /* inside the header */
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, path, "header length");
    CHECK(truncate(path, 5) == 0);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, path, "too short");
    CHECK(truncate(path, 0) == 0);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, path, "too short");

    TEST_CASE("corrupt header JSON");
    write_raw(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]  ", data,
              sizeof data);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, path, "not valid JSON");
    write_raw(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}} x", data,
              sizeof data);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, path, "trailing");
    write_raw(path, "[1, 2]", data, sizeof data);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, path, "not a JSON object");
    write_raw(path, "{\"a\": {\"dtype\": \"F31\", \"shape\": [4], \"data_offsets\": [0, 16]}}", data,
              sizeof data);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, "\"a\"", "\"F31\"");
    write_raw(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [-4], \"data_offsets\": [0, 16]}}", data,
              sizeof data);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, "\"a\"", "shape[0]");
    write_raw(path, "{\"__metadata__\": {\"n\": 3}}", data, 0);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, path, "\"n\"");

    TEST_CASE("offsets out of range, wrong size, overlapping");
    write_raw(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [100], \"data_offsets\": [0, 400]}}", data,
              sizeof data);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, "\"a\"", "out of range");
    write_raw(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [12, 8]}}", data,
              sizeof data);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, "\"a\"", "out of range");
    write_raw(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 12]}}", data,
              sizeof data);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, "\"a\"", "needs 16 bytes");
    write_raw(path,
              "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
              " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
              data, sizeof data);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, "\"a\"", "\"b\"");
    write_raw(path, /* an empty tensor inside "a" must not hide the overlap of "a" and "b" */
              "{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 12]},"
              " \"e\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 4]},"
              " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}",
              data, sizeof data);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, "overlap", "\"b\"");
    write_raw(path,
              "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
              " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
              data, sizeof data);
    CHECK_ERR_MSG(forge_safetensors_open(&st, path), FORGE_ERR_DATA, "\"a\"", "twice");
    CHECK(st == NULL);
}

static void test_atomic_write(void) {
    const char *dir = test_tmpdir();
    const char *path = join(dir, "ckpt.safetensors");
    const char *tmp = join(dir, "ckpt.safetensors.tmp");
    write_sample(path);
    long n_before = 0;
    unsigned char *before = slurp(path, &n_before);
    float other[2] = {9.0f, 9.0f};
    forge_st_entry e2 = {"x", "F32", 1, {2}, other, sizeof other};

#define CHECK_UNCHANGED()                                                     \
    do {                                                                      \
        long n_now = 0;                                                       \
        unsigned char *now = slurp(path, &n_now);                             \
        CHECK_MSG(now && before && n_now == n_before && memcmp(now, before, (size_t)n_now) == 0, \
                  "%s changed after a failed write", path);                   \
        free(now);                                                            \
    } while (0)

    TEST_CASE("atomic write: temp file cannot be created");
    CHECK(mkdir(tmp, 0755) == 0); /* path.tmp taken by a directory */
    CHECK_ERR_MSG(forge_safetensors_write(path, &e2, 1, NULL, NULL, 0), FORGE_ERR_IO, path, ".tmp");
    CHECK_UNCHANGED();
    CHECK(rmdir(tmp) == 0);

    TEST_CASE("atomic write: bad entry leaves the old file and no temp");
    forge_st_entry bad = e2;
    bad.bytes = 4;
    CHECK_ERR_MSG(forge_safetensors_write(path, &bad, 1, NULL, NULL, 0), FORGE_ERR_ARG, "\"x\"", "needs 8");
    bad = e2;
    bad.dtype = "F33";
    CHECK_ERR_MSG(forge_safetensors_write(path, &bad, 1, NULL, NULL, 0), FORGE_ERR_ARG, "\"x\"", "F33");
    forge_st_entry dup[2] = {e2, e2};
    CHECK_ERR_MSG(forge_safetensors_write(path, dup, 2, NULL, NULL, 0), FORGE_ERR_ARG, "\"x\"", "twice");
    CHECK_UNCHANGED();
    CHECK(access(tmp, F_OK) != 0);

    TEST_CASE("atomic write: rename fails, temp removed");
    char dirtarget[1024], child[1100];
    snprintf(dirtarget, sizeof dirtarget, "%s/adir", dir);
    snprintf(child, sizeof child, "%s/child", dirtarget);
    CHECK(mkdir(dirtarget, 0755) == 0);
    CHECK(mkdir(child, 0755) == 0);
    CHECK_ERR_MSG(forge_safetensors_write(dirtarget, &e2, 1, NULL, NULL, 0), FORGE_ERR_IO, dirtarget,
              "rename");
    CHECK(access(join(dir, "adir.tmp"), F_OK) != 0);

    TEST_CASE("atomic write: nonexistent directory");
    const char *nodir = join(dir, "no/such/dir/x.safetensors");
    CHECK_ERR_MSG(forge_safetensors_write(nodir, &e2, 1, NULL, NULL, 0), FORGE_ERR_IO, nodir, NULL);
    CHECK(access(nodir, F_OK) != 0);

    TEST_CASE("atomic write: a good write replaces the file");
    CHECK_OK(forge_safetensors_write(path, &e2, 1, NULL, NULL, 0));
    CHECK(access(tmp, F_OK) != 0);
    forge_safetensors *st = NULL;
    CHECK_OK(forge_safetensors_open(&st, path));
    if (st) {
        CHECK(forge_safetensors_count(st) == 1 && forge_safetensors_find(st, "x") != NULL);
        forge_safetensors_close(st);
    }
    free(before);
#undef CHECK_UNCHANGED
}

/* ------------------------------------------------------- run directory */

static void touch(const char *dir, const char *name) {
    FILE *f = fopen(join(dir, name), "w");
    if (f) fclose(f);
}

/* ckpt_<step> with model and state files (complete) or only a model file */
static void fake_checkpoint(const char *run, int step, int complete) {
    char name[64];
    snprintf(name, sizeof name, "ckpt_%06d", step);
    mkdir(join(run, name), 0755);
    snprintf(name, sizeof name, "ckpt_%06d/model.safetensors", step);
    touch(run, name);
    snprintf(name, sizeof name, "ckpt_%06d/state.safetensors", step);
    if (complete) touch(run, name);
}

static int has_ckpt(const char *run, int step) {
    char name[64];
    snprintf(name, sizeof name, "ckpt_%06d", step);
    return access(join(run, name), F_OK) == 0;
}

static void test_run_dir(void) {
    TEST_CASE("run dir: checkpoint names");
    CHECK(forge_run_dir_checkpoint_step("ckpt_000012") == 12);
    CHECK(forge_run_dir_checkpoint_step("ckpt_1234567") == 1234567);
    CHECK(forge_run_dir_checkpoint_step("ckpt_") == -1);
    CHECK(forge_run_dir_checkpoint_step("ckpt_12.tmp") == -1);
    CHECK(forge_run_dir_checkpoint_step("ckpt_-1") == -1);
    CHECK(forge_run_dir_checkpoint_step("ckpt_99999999999") == -1);
    CHECK(forge_run_dir_checkpoint_step("latest") == -1);

    TEST_CASE("run dir: collection keeps the newest N complete (<= the step) and latest, removes the rest");
    const char *run = test_tmpdir();
    for (int i = 1; i <= 6; i++) fake_checkpoint(run, i, 1);
    fake_checkpoint(run, 7, 0);                 /* half written */
    fake_checkpoint(run, 9, 1);                 /* past the step: another trajectory */
    mkdir(join(run, "ckpt_000006/.tokenizer.tmp"), 0755);
    touch(run, "ckpt_000006/.tokenizer.tmp/vocab.bpe");
    touch(run, "ckpt_000006/model.safetensors.tmp");
    touch(run, "latest.tmp");
    touch(run, "log.jsonl.tmp");
    touch(run, "notes.txt");                    /* not ours: left alone */
    mkdir(join(run, "ckpt_old"), 0755);         /* not a checkpoint name: left alone */
    FILE *f = fopen(join(run, "latest"), "w");
    fputs("ckpt_000002\n", f);
    fclose(f);
    CHECK_OK(forge_run_dir_collect(run, 6, 2));
    for (int i = 1; i <= 9; i++)
        CHECK_MSG(has_ckpt(run, i) == (i == 2 || i == 5 || i == 6), "ckpt %d %s", i,
                  has_ckpt(run, i) ? "kept" : "removed");
    CHECK(access(join(run, "ckpt_000006/.tokenizer.tmp"), F_OK) != 0);
    CHECK(access(join(run, "ckpt_000006/model.safetensors.tmp"), F_OK) != 0);
    CHECK(access(join(run, "ckpt_000006/model.safetensors"), F_OK) == 0);
    CHECK(access(join(run, "latest.tmp"), F_OK) != 0 && access(join(run, "log.jsonl.tmp"), F_OK) != 0);
    CHECK(access(join(run, "notes.txt"), F_OK) == 0 && access(join(run, "ckpt_old"), F_OK) == 0);
    char newest[64];
    CHECK(forge_run_dir_count_checkpoints(run, newest, sizeof newest) == 3 && strcmp(newest, "ckpt_000006") == 0);
    CHECK_OK(forge_run_dir_collect(run, 6, 1));
    CHECK(has_ckpt(run, 2) && !has_ckpt(run, 5) && has_ckpt(run, 6));

    TEST_CASE("run dir: the log is cut back to a step (torn last line dropped), atomically");
    const char *dir = test_tmpdir();
    const char *log = join(dir, "log.jsonl");
    f = fopen(log, "w");
    fputs("{\"step\": 1, \"loss\": 5.0}\n{\"step\": 2, \"loss\": 4.0}\n{\"step\": 2, \"val_loss\": 4.5}\n"
          "{\"step\": 3, \"loss\": 3.0}\n{\"step\": 4, \"lo",
          f);
    fclose(f);
    int dropped = -1;
    CHECK_OK(forge_run_dir_cut_log(log, 2, &dropped));
    long n = 0;
    unsigned char *text = slurp(log, &n);
    const char *want = "{\"step\": 1, \"loss\": 5.0}\n{\"step\": 2, \"loss\": 4.0}\n{\"step\": 2, \"val_loss\": 4.5}\n";
    CHECK_MSG(text && n == (long)strlen(want) && memcmp(text, want, (size_t)n) == 0, "log now: %.*s", (int)n,
              text ? (const char *)text : "");
    free(text);
    CHECK(dropped == 2);
    CHECK(access(join(dir, "log.jsonl.tmp"), F_OK) != 0);
    CHECK_OK(forge_run_dir_cut_log(join(dir, "none.jsonl"), 2, &dropped)); /* a missing log is fine */
    CHECK(dropped == 0);
    mkdir(join(dir, "log.jsonl.tmp"), 0755); /* the temporary name taken: an error, the log unchanged */
    CHECK_ERR_MSG(forge_run_dir_cut_log(log, 1, &dropped), FORGE_ERR_IO, log, "log.jsonl.tmp");
    CHECK(file_size(log) == (long)strlen(want));
}

/* ------------------------------------------------------------ sampler */

static void softmax(const float *logits, int V, float t, double *p) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) m = logits[i] > m ? logits[i] : m;
    for (int i = 0; i < V; i++) s += p[i] = exp((logits[i] - m) / t);
    for (int i = 0; i < V; i++) p[i] /= s;
}

static void test_sampler_greedy(void) {
    TEST_CASE("sampler: greedy is argmax and draws nothing");
    float logits[6] = {0.1f, 2.0f, -1.0f, 3.5f, 3.5f, 0.0f};
    float scratch[12];
    forge_rng rng, before;
    forge_rng_seed(&rng, 1, 0);
    before = rng;
    CHECK(forge_sample_token(logits, 6, 0.0f, 0, 1.0f, &rng, scratch) == 3); /* lowest id on ties */
    CHECK(forge_sample_token(logits, 6, -1.0f, 5, 0.5f, &rng, scratch) == 3);
    CHECK(forge_sample_token(logits, 6, 0.0f, 0, 1.0f, NULL, NULL) == 3);
    CHECK(rng.state == before.state);
    CHECK(forge_sample_token(logits, 0, 1.0f, 0, 1.0f, &rng, scratch) == -1);
    CHECK(forge_sample_token(NULL, 6, 1.0f, 0, 1.0f, &rng, scratch) == -1);
    CHECK(forge_sample_token(logits, 6, 1.0f, 0, 1.0f, &rng, NULL) == -1);
    float one = 5.0f;
    CHECK(forge_sample_token(&one, 1, 1.0f, 0, 1.0f, &rng, scratch) == 0);
    float withnan[3] = {NAN, 1.0f, 2.0f};
    CHECK(forge_sample_token(withnan, 3, 0.0f, 0, 1.0f, &rng, scratch) == 2);

    TEST_CASE("sampler: top_k = 1 and tiny top_p equal greedy");
    forge_rng_seed(&rng, 7, 3);
    enum { V = 300 };
    static float big[V], bigscratch[2 * V];
    for (int trial = 0; trial < 50; trial++) {
        for (int i = 0; i < V; i++) big[i] = (float)forge_rng_normal(&rng) * 2.0f;
        int32_t g = forge_sample_token(big, V, 0.0f, 0, 1.0f, NULL, NULL);
        CHECK(forge_sample_token(big, V, 1.0f, 1, 1.0f, &rng, bigscratch) == g);
        CHECK(forge_sample_token(big, V, 1.5f, 0, 1e-6f, &rng, bigscratch) == g);
        CHECK(forge_sample_token(big, V, 1.0f, 10, 0.0f, &rng, bigscratch) == g);
    }
}

static void check_histogram(int line, const float *logits, int V, float t, int top_k, float top_p,
                            const double *want) {
    enum { N = 20000 };
    int counts[16] = {0};
    float scratch[32];
    forge_rng rng;
    forge_rng_seed(&rng, 1234, 5);
    for (int i = 0; i < N; i++) {
        int32_t tok = forge_sample_token(logits, V, t, top_k, top_p, &rng, scratch);
        if (tok < 0 || tok >= V) {
            test_case_fail(__FILE__, line, "token %d out of range", tok);
            return;
        }
        counts[tok]++;
    }
    for (int i = 0; i < V; i++) {
        double f = counts[i] / (double)N;
        /* 0.015 is > 4 standard deviations for any p at N = 20000 */
        if (fabs(f - want[i]) > 0.015 || (want[i] == 0.0 && counts[i] != 0))
            test_case_fail(__FILE__, line, "token %d: frequency %.4f, expected %.4f", i, f, want[i]);
    }
}

static void test_sampler_distribution(void) {
    float logits[6] = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f};
    double p[6];

    TEST_CASE("sampler: 20000 draws match softmax (T = 1)");
    softmax(logits, 6, 1.0f, p);
    check_histogram(__LINE__, logits, 6, 1.0f, 0, 1.0f, p);

    TEST_CASE("sampler: 20000 draws match softmax (T = 0.5, top_k = V)");
    softmax(logits, 6, 0.5f, p);
    check_histogram(__LINE__, logits, 6, 0.5f, 6, 1.0f, p);

    TEST_CASE("sampler: top_k = 3 keeps the 3 most likely, renormalised");
    softmax(logits, 6, 1.0f, p);
    double top3 = p[1] + p[4] + p[0];
    double want_k[6] = {p[0] / top3, p[1] / top3, 0, 0, p[4] / top3, 0};
    check_histogram(__LINE__, logits, 6, 1.0f, 3, 1.0f, want_k);

    TEST_CASE("sampler: top_k cuts ties in id order");
    float flat[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    double want_t[6] = {1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 0, 0};
    check_histogram(__LINE__, flat, 6, 1.0f, 3, 1.0f, want_t);

    TEST_CASE("sampler: top_p keeps the smallest set reaching p");
    /* probabilities 0.5, 0.3, 0.1, 0.05, 0.05: top_p 0.7 keeps {0, 1} */
    float lp[5] = {logf(0.5f), logf(0.3f), logf(0.1f), logf(0.05f), logf(0.05f)};
    double want_p[5] = {0.625, 0.375, 0, 0, 0};
    check_histogram(__LINE__, lp, 5, 1.0f, 0, 0.7f, want_p);
    /* top_p 0.85 keeps {0, 1, 2}; top_k 2 first then top_p 0.5 of {0.625, 0.375} keeps {0} */
    double want_p2[5] = {0.5 / 0.9, 0.3 / 0.9, 0.1 / 0.9, 0, 0};
    check_histogram(__LINE__, lp, 5, 1.0f, 0, 0.85f, want_p2);
    double want_p3[5] = {1, 0, 0, 0, 0};
    check_histogram(__LINE__, lp, 5, 1.0f, 2, 0.5f, want_p3);
}

/* Straightforward reference: full sort, top-k, top-p, draw with the same u.
 * Without filters the sampler walks the ids in order (no sort), and so does this. */
static int cmp_desc_ref(const void *a, const void *b) {
    const double *x = a, *y = b;
    if (x[0] != y[0]) return x[0] > y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

static int32_t reference_sample(const float *logits, int V, float t, int top_k, float top_p, float u) {
    double(*pairs)[2] = malloc(sizeof(double[2]) * (size_t)V);
    float m = -INFINITY;
    for (int i = 0; i < V; i++) m = logits[i] > m ? logits[i] : m;
    for (int i = 0; i < V; i++) {
        pairs[i][0] = expf((logits[i] - m) * (1.0f / t));
        pairs[i][1] = i;
    }
    int filtered = (top_k > 0 && top_k < V) || top_p < 1.0f;
    if (filtered) qsort(pairs, (size_t)V, sizeof pairs[0], cmp_desc_ref);
    int n = (top_k > 0 && top_k < V) ? top_k : V;
    double s = 0;
    for (int j = 0; j < n; j++) s += pairs[j][0];
    if (top_p < 1.0f) {
        double c = 0;
        for (int j = 0; j < n; j++) {
            c += pairs[j][0];
            if (c >= top_p * s) {
                n = j + 1;
                break;
            }
        }
    }
    double tot = 0;
    for (int j = 0; j < n; j++) tot += pairs[j][0];
    double r = u * tot, c = 0;
    int32_t tok = (int32_t)pairs[n - 1][1];
    for (int j = 0; j < n; j++) {
        c += pairs[j][0];
        if (r < c) {
            tok = (int32_t)pairs[j][1];
            break;
        }
    }
    free(pairs);
    return tok;
}

static void test_sampler_reference(void) {
    TEST_CASE("sampler: matches a plain full-sort reference (V = 50257)");
    enum { V = 50257 };
    float *logits = malloc(sizeof(float) * V), *scratch = malloc(sizeof(float) * 2 * V);
    forge_rng data, rng, copy;
    forge_rng_seed(&data, 99, 1);
    forge_rng_seed(&rng, 5, 2);
    static const struct {
        float t;
        int k;
        float p;
    } settings[] = {{1.0f, 0, 0.9f}, {0.8f, 50, 1.0f}, {0.7f, 200, 0.95f}, {1.3f, 0, 0.5f}, {1.0f, 0, 1.0f}};
    int mismatches = 0, draws = 0;
    for (size_t s = 0; s < sizeof settings / sizeof settings[0]; s++) {
        for (int trial = 0; trial < 8; trial++) {
            for (int i = 0; i < V; i++) logits[i] = (float)forge_rng_normal(&data) * 3.0f;
            copy = rng;
            float u = forge_rng_uniform(&copy); /* the one draw the sampler will make */
            int32_t got = forge_sample_token(logits, V, settings[s].t, settings[s].k, settings[s].p,
                                             &rng, scratch);
            CHECK(rng.state == copy.state);
            if (settings[s].k > 0) {
                /* never outside the top k */
                int above = 0;
                for (int i = 0; i < V; i++)
                    above += logits[i] > logits[got] || (logits[i] == logits[got] && i < got);
                CHECK_MSG(above < settings[s].k, "token %d ranks %d, top_k %d", got, above, settings[s].k);
            }
            int32_t want = reference_sample(logits, V, settings[s].t, settings[s].k, settings[s].p, u);
            mismatches += got != want;
            draws++;
        }
    }
    /* sums are taken in different orders, so a draw right on a boundary may differ */
    CHECK_MSG(mismatches <= 1, "%d of %d draws differ from the reference", mismatches, draws);

    TEST_CASE("sampler: same seed, same tokens");
    forge_rng a, b;
    forge_rng_seed(&a, 11, 0);
    forge_rng_seed(&b, 11, 0);
    int same = 1;
    for (int i = 0; i < 200; i++)
        same &= forge_sample_token(logits, V, 0.9f, 40, 0.9f, &a, scratch) ==
                forge_sample_token(logits, V, 0.9f, 40, 0.9f, &b, scratch);
    CHECK(same);
    free(logits);
    free(scratch);
}

void suite_checkpoint(void) {
    test_round_trip();
    test_lookup();
    test_corrupt_files();
    test_atomic_write();
    test_run_dir();
    test_sampler_greedy();
    test_sampler_distribution();
    test_sampler_reference();
}
