/* test_main.c: runs every suite and prints "N passed, N failed". */
#include "test.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/base/status.h"
#include "../src/data/tokenize.h"
#include "../src/data/tokenizer.h"

#define SUITES(X)        \
    X(core)              \
    X(grad_lend)         \
    X(ops_forward)       \
    X(ops_bf16)          \
    X(ops_bf16_attn)     \
    X(ops_bf16_matmul)   \
    X(gradcheck)         \
    X(flash)             \
    X(tokenizer)         \
    X(data)              \
    X(config)            \
    X(parsers)           \
    X(checkpoint)        \
    X(hf)                \
    X(model)             \
    X(train)             \
    X(generate)          \
    X(golden)            \
    X(harness)           \
    X(op_walker)

/* Weak, so a partial build (one suite plus the code it tests) links and runs. */
#define DECLARE(name) void suite_##name(void) __attribute__((weak));
SUITES(DECLARE)

static int n_passed, n_failed, n_skipped;
static int current_open, current_failed, current_skipped;
static char current_name[256];
static const char *only_suite;
static char tmp_root[256];
static int tmp_count;

static void test_case_end(void) {
    if (!current_open) return;
    if (current_failed) {
        n_failed++;
        printf("FAIL %s\n", current_name);
    } else if (current_skipped) {
        n_skipped++;
    } else {
        n_passed++;
        if (getenv("FORGE_TEST_VERBOSE")) printf("ok   %s\n", current_name);
    }
    fflush(stdout);
    current_open = 0;
}

void test_case_begin(const char *suite, const char *name) {
    test_case_end();
    snprintf(current_name, sizeof current_name, "%s: %s", suite, name);
    current_open = 1;
    current_failed = 0;
    current_skipped = 0;
}

void test_case_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    printf("  %s:%d: [%s] ", file, line, current_name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    current_failed = 1;
}

void test_case_skip(const char *why) {
    printf("skip %s: %s\n", current_name, why);
    current_skipped = 1;
}

int test_case_failed(void) { return current_failed; }

const char *test_data_path(const char *relative) {
    static char buf[8][1024];
    static int slot;
    const char *root = getenv("FORGE_DATA_DIR");
    char *out = buf[slot++ % 8];
    snprintf(out, 1024, "%s/%s", root ? root : "../shared/data", relative);
    return access(out, R_OK) == 0 ? out : NULL;
}

const char *test_tmpdir(void) {
    static char buf[8][512];
    char *out = buf[tmp_count % 8];
    snprintf(out, 512, "%s/t%d", tmp_root, tmp_count++);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", out, out);
    if (system(cmd) != 0) test_case_fail(__FILE__, __LINE__, "cannot create %s", out);
    return out;
}

int main(int argc, char **argv) {
    if (argc > 1) only_suite = argv[1];
    snprintf(tmp_root, sizeof tmp_root, "/tmp/forge-tests-%d", (int)getpid());
#define RUN(name)                                                     \
    if (suite_##name && (!only_suite || strcmp(only_suite, #name) == 0)) {              \
        printf("== %s\n", #name);                                     \
        fflush(stdout);                                               \
        suite_##name();                                               \
        test_case_end();                                              \
    }
    SUITES(RUN)
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmp_root);
    printf("%d passed, %d failed, %d skipped\n", n_passed, n_failed, n_skipped);
    return n_failed ? 1 : 0;
}

const char *test_forge_binary(void) {
    static char path[1024];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 16);
    if (n <= 0) return NULL;
    path[n] = 0;
    char *slash = strrchr(path, '/');
    if (!slash) return NULL;
    strcpy(slash + 1, "forge");
    return access(path, X_OK) == 0 ? path : NULL;
}

int test_msg_has(const char *a, const char *b) {
    const char *m = forge_error_message();
    return strstr(m, a) != NULL && (!b || strstr(m, b) != NULL);
}

forge_model_config test_small_config(int llama) {
    forge_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", llama ? "test-llama" : "test-gpt2");
    c.family = llama ? FORGE_FAMILY_LLAMA : FORGE_FAMILY_GPT2;
    c.vocab_size = 37;
    c.context_length = 16;
    c.d_model = 24;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = llama ? 2 : 4;
    c.ffn_hidden = llama ? 40 : 96;
    c.norm = llama ? FORGE_NORM_RMSNORM : FORGE_NORM_LAYERNORM;
    c.norm_eps = 1e-5f;
    c.positions = llama ? FORGE_POSITIONS_ROPE : FORGE_POSITIONS_LEARNED;
    c.rope_theta = 10000.0f;
    c.activation = llama ? FORGE_ACTIVATION_SWIGLU : FORGE_ACTIVATION_GELU;
    c.bias = !llama;
    c.tied_embeddings = !llama;
    c.init_std = 0.02f;
    return c;
}

int test_tokenized_dir(const char *dir, const char *text_path, int vocab) {
    const char *files[1] = {text_path};
    forge_tokenizer *tok;
    if (forge_tokenizer_train(&tok, files, 1, vocab, 0) != FORGE_OK) return 0;
    forge_status s = forge_tokenizer_save(tok, dir);
    if (s == FORGE_OK) s = forge_tokenize_files(tok, files, 1, dir, 0.1, 1, NULL);
    forge_tokenizer_free(tok);
    return s == FORGE_OK;
}
