/*
 * test.h: forge's minimal test harness.
 *
 * A suite is a function `void suite_NAME(void)` listed in tests/test_main.c.
 * Inside it, TEST_CASE("name") starts a case and the CHECK macros record
 * failures with file and line; the runner prints one line per failing check
 * and ends with "N passed, N failed" (counted per case).
 *
 * Tests that need ../shared/data call test_data_path(), which returns NULL
 * (and the test reports itself skipped) when the folder is absent.
 */
#ifndef FORGE_TEST_H
#define FORGE_TEST_H

#include <math.h>
#include <stdio.h>

#include "../src/model/config.h"

void test_case_begin(const char *suite, const char *name);
void test_case_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void test_case_skip(const char *why);
int test_case_failed(void);

/* Path to a file under the shared data folder, or NULL if it is missing. */
const char *test_data_path(const char *relative);
/* A fresh empty temporary directory for this test (removed at exit). */
const char *test_tmpdir(void);

#define TEST_CASE(name) test_case_begin(__func__, (name))

#define CHECK(cond)                                                       \
    do {                                                                  \
        if (!(cond)) test_case_fail(__FILE__, __LINE__, "CHECK(%s)", #cond); \
    } while (0)

#define CHECK_MSG(cond, ...)                                     \
    do {                                                         \
        if (!(cond)) test_case_fail(__FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

/* |a - b| <= tol, and neither is NaN */
#define CHECK_NEAR(a, b, tol)                                                         \
    do {                                                                              \
        double check_a_ = (double)(a), check_b_ = (double)(b), check_t_ = (double)(tol); \
        if (!(fabs(check_a_ - check_b_) <= check_t_))                                 \
            test_case_fail(__FILE__, __LINE__, "%s = %.9g vs %s = %.9g (tol %.3g)", #a,   \
                           check_a_, #b, check_b_, check_t_);                         \
    } while (0)

/* forge_status must be FORGE_OK; prints the error message otherwise */
#define CHECK_OK(expr)                                                                  \
    do {                                                                                \
        forge_status check_s_ = (expr);                                                 \
        if (check_s_ != FORGE_OK)                                                       \
            test_case_fail(__FILE__, __LINE__, "%s failed: %s", #expr, forge_error_message()); \
    } while (0)

/* The forge binary beside the test binary (build/forge for build/forge_tests), or NULL: the CLI tests run it. */
const char *test_forge_binary(void);
/* 1 if the current error message contains a and, when b is not NULL, b too. */
int test_msg_has(const char *a, const char *b);
/* A data directory for training tests: a `vocab`-id BPE trained on text_path, saved in dir, and text_path
 * tokenized into dir's shards (10% val). 1 on success. */
int test_tokenized_dir(const char *dir, const char *text_path, int vocab);
/* A small model of either family (GPT-2: learned positions, LayerNorm, GELU, biases, tied embeddings; Llama: RoPE,
 * RMSNorm, SwiGLU, 2 kv heads for 4 query heads, untied): vocab 37, context 16, d_model 24, 2 layers, init std
 * 0.02, named test-gpt2 / test-llama. Tests change the fields they need. */
forge_model_config test_small_config(int llama);

/* expr must return the status want with a message containing n1 (and n2, unless NULL) */
#define CHECK_ERR_MSG(expr, want, n1, n2)                                                     \
    do {                                                                                     \
        forge_status s_ = (expr);                                                            \
        CHECK_MSG(s_ == (want), "%s: %s, expected %s (%s)", #expr, forge_status_name(s_),    \
                  forge_status_name(want), forge_error_message());                          \
        CHECK_MSG(test_msg_has((n1), (n2)), "message lacks \"%s\"/\"%s\": %s", (n1),         \
                  (n2) ? (n2) : "", forge_error_message());                                 \
    } while (0)

#endif
