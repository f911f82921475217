/* test_config.c: model config JSON: shipped files, defaults, errors, param counts. */
#include "test.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "../src/base/status.h"
#include "../src/model/config.h"

#define CONFIGS_DIR "configs"

static const char *write_text(const char *dir, const char *name, const char *text) {
    static char path[8][1024];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, 1024, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        test_case_fail(__FILE__, __LINE__, "cannot write %s", p);
        return p;
    }
    fputs(text, f);
    fclose(f);
    return p;
}

/* parse must fail with `want`, and the message must contain every needle */
static void expect_error(int line, const char *json, forge_status want, const char *n1,
                         const char *n2) {
    forge_model_config c;
    forge_error_clear();
    forge_status s = forge_config_parse(&c, json, "configs/x.json");
    const char *msg = forge_error_message();
    if (s != want) {
        test_case_fail(__FILE__, line, "status %s, expected %s (message: %s)", forge_status_name(s),
                       forge_status_name(want), msg);
        return;
    }
    if (!strstr(msg, "configs/x.json"))
        test_case_fail(__FILE__, line, "message lacks the file name: %s", msg);
    if (n1 && !strstr(msg, n1)) test_case_fail(__FILE__, line, "message lacks \"%s\": %s", n1, msg);
    if (n2 && !strstr(msg, n2)) test_case_fail(__FILE__, line, "message lacks \"%s\": %s", n2, msg);
}
#define EXPECT_ERROR(json, want, n1, n2) expect_error(__LINE__, (json), (want), (n1), (n2))

#define GPT2_BASE "\"family\": \"gpt2\", \"vocab_size\": 100, \"context_length\": 16, \"n_layers\": 2"
#define LLAMA_BASE "\"family\": \"llama\", \"vocab_size\": 100, \"context_length\": 16, \"n_layers\": 2"

static int configs_equal(const forge_model_config *a, const forge_model_config *b) {
    return strcmp(a->name, b->name) == 0 && a->family == b->family &&
           a->vocab_size == b->vocab_size && a->context_length == b->context_length &&
           a->d_model == b->d_model && a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->ffn_hidden == b->ffn_hidden &&
           a->norm == b->norm && a->norm_eps == b->norm_eps && a->positions == b->positions &&
           a->rope_theta == b->rope_theta && a->activation == b->activation &&
           a->bias == b->bias && a->tied_embeddings == b->tied_embeddings &&
           a->init_std == b->init_std;
}

static void test_shipped_configs(void) {
    TEST_CASE("every file in configs/ loads, validates and round-trips");
    DIR *d = opendir(CONFIGS_DIR);
    CHECK_MSG(d != NULL, "cannot open %s/ (tests run from the repo root)", CONFIGS_DIR);
    if (!d) return;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", CONFIGS_DIR, e->d_name);
        forge_model_config c, back;
        forge_status s = forge_config_load_file(&c, path);
        CHECK_MSG(s == FORGE_OK, "%s: %s", path, forge_error_message());
        if (s != FORGE_OK) continue;
        CHECK_MSG(strncmp(c.name, e->d_name, len - 5) == 0 && c.name[len - 5] == '\0',
                  "%s: name \"%s\" differs from the file name", path, c.name);
        char *json = forge_config_to_json(&c);
        CHECK(json != NULL);
        if (json) {
            CHECK_OK(forge_config_parse(&back, json, path));
            CHECK_MSG(configs_equal(&c, &back), "%s: to_json -> parse changed the config:\n%s", path, json);
            free(json);
        }
        n++;
    }
    closedir(d);
    CHECK_MSG(n >= 7, "only %d configs found in %s/", n, CONFIGS_DIR);
}

static void test_param_counts(void) {
    static const struct {
        const char *name;
        int64_t params;
    } expected[] = {
        {"gpt2-124m", 124439808}, /* GPT-2 small, as Hugging Face counts it */
        {"tiny", 940800},         {"tiny-llama", 158016},    {"gpt-10m", 13989888},
        {"gpt-25m", 34087424},    {"gpt-100m", 103176192},   {"gpt-200m", 203668480},
    };
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        TEST_CASE(expected[i].name);
        forge_model_config c;
        CHECK_OK(forge_config_resolve(&c, expected[i].name, CONFIGS_DIR));
        if (test_case_failed()) continue;
        CHECK_MSG(forge_config_param_count(&c) == expected[i].params, "%s: %lld params, expected %lld",
                  expected[i].name, (long long)forge_config_param_count(&c),
                  (long long)expected[i].params);
    }

    TEST_CASE("param count: llama with GQA and biases, by hand");
    forge_model_config c;
    CHECK_OK(forge_config_parse(&c,
                                "{" LLAMA_BASE ", \"d_model\": 32, \"n_heads\": 4, \"n_kv_heads\": 1,"
                                " \"ffn_hidden\": 48, \"bias\": true, \"tied_embeddings\": true}",
                                "t.json"));
    /* V=100 C=32 HS=8 NKV=1 H=48 L=2, rmsnorm, rope, swiglu with biases, tied */
    int64_t qkv = (4 + 2) * 8;
    int64_t layer = 32 + (qkv * 32 + qkv) + (32 * 32 + 32) + 32 + 2 * (48 * 32 + 48) + (32 * 48 + 32);
    CHECK(forge_config_param_count(&c) == 100 * 32 + 2 * layer + 32);
}

static void test_defaults(void) {
    TEST_CASE("gpt2 family defaults");
    forge_model_config c;
    CHECK_OK(forge_config_parse(&c, "{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4}", "dir/my-model.json"));
    CHECK(strcmp(c.name, "my-model") == 0);
    CHECK(c.family == FORGE_FAMILY_GPT2);
    CHECK(c.norm == FORGE_NORM_LAYERNORM && c.positions == FORGE_POSITIONS_LEARNED);
    CHECK(c.activation == FORGE_ACTIVATION_GELU && c.bias == 1 && c.tied_embeddings == 1);
    CHECK(c.n_kv_heads == 4 && c.ffn_hidden == 256);
    CHECK(c.norm_eps == 1e-5f && c.rope_theta == 10000.0f && c.init_std == 0.02f);

    TEST_CASE("llama family defaults");
    CHECK_OK(forge_config_parse(&c, "{" LLAMA_BASE ", \"d_model\": 64, \"n_heads\": 4, \"ffn_hidden\": 172}",
                                "l.json"));
    CHECK(c.family == FORGE_FAMILY_LLAMA);
    CHECK(c.norm == FORGE_NORM_RMSNORM && c.positions == FORGE_POSITIONS_ROPE);
    CHECK(c.activation == FORGE_ACTIVATION_SWIGLU && c.bias == 0 && c.tied_embeddings == 0);
    CHECK(c.n_kv_heads == 4 && c.ffn_hidden == 172);

    TEST_CASE("explicit keys override the family");
    CHECK_OK(forge_config_parse(&c,
                                "{\"name\": \"hybrid\", " LLAMA_BASE ", \"d_model\": 64, \"n_heads\": 4,"
                                " \"norm\": \"layernorm\", \"positions\": \"learned\","
                                " \"activation\": \"gelu\", \"bias\": true, \"tied_embeddings\": true,"
                                " \"norm_eps\": 1e-6, \"rope_theta\": 500000, \"init_std\": 0.01}",
                                "h.json"));
    CHECK(strcmp(c.name, "hybrid") == 0 && c.family == FORGE_FAMILY_LLAMA);
    CHECK(c.norm == FORGE_NORM_LAYERNORM && c.positions == FORGE_POSITIONS_LEARNED);
    CHECK(c.activation == FORGE_ACTIVATION_GELU && c.bias == 1 && c.tied_embeddings == 1);
    CHECK(c.ffn_hidden == 256); /* gelu default 4 * d_model */
    CHECK(c.norm_eps == 1e-6f && c.rope_theta == 500000.0f && c.init_std == 0.01f);

    TEST_CASE("to_json -> parse round trip keeps every field");
    char *json = forge_config_to_json(&c);
    forge_model_config back;
    CHECK(json != NULL);
    if (json) {
        CHECK_OK(forge_config_parse(&back, json, "<checkpoint>"));
        CHECK(configs_equal(&c, &back));
        CHECK(strstr(json, "1e-06") != NULL); /* floats print short, not 9.99999997e-07 */
        free(json);
    }
}

static void test_errors(void) {
    TEST_CASE("unknown key names the key, suggests, lists the valid keys");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_modle\": 64, \"n_heads\": 4}", FORGE_ERR_CONFIG,
                 "unknown key \"d_modle\"", "did you mean \"d_model\"");
    EXPECT_ERROR("{" GPT2_BASE ", \"zzz\": 1, \"d_model\": 64, \"n_heads\": 4}", FORGE_ERR_CONFIG,
                 "\"zzz\"", "expected one of: name, family");

    TEST_CASE("wrong types");
    EXPECT_ERROR("{\"family\": \"gpt2\", \"vocab_size\": 100, \"context_length\": 16, \"n_layers\": \"12\","
                 " \"d_model\": 64, \"n_heads\": 4}",
                 FORGE_ERR_CONFIG, "key \"n_layers\" must be an integer", "got string");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64.5, \"n_heads\": 4}", FORGE_ERR_CONFIG, "\"d_model\"",
                 "must be an integer, got 64.5");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": true, \"n_heads\": 4}", FORGE_ERR_CONFIG, "\"d_model\"", "true");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4, \"bias\": 1}", FORGE_ERR_CONFIG,
                 "\"bias\"", "true or false");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4, \"norm_eps\": \"1e-5\"}",
                 FORGE_ERR_CONFIG, "\"norm_eps\"", "must be a number");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4, \"norm\": \"batchnorm\"}",
                 FORGE_ERR_CONFIG, "\"norm\"", "\"layernorm\", \"rmsnorm\"");
    EXPECT_ERROR("{\"family\": \"bert\", \"vocab_size\": 100, \"context_length\": 16, \"n_layers\": 2,"
                 " \"d_model\": 64, \"n_heads\": 4}",
                 FORGE_ERR_CONFIG, "\"family\"", "\"bert\"");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4, \"name\": 7}", FORGE_ERR_CONFIG,
                 "\"name\"", "must be a string");
    EXPECT_ERROR("[1, 2]", FORGE_ERR_CONFIG, "JSON object", NULL);

    TEST_CASE("out of range values");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 0, \"n_heads\": 4}", FORGE_ERR_CONFIG, "\"d_model\"", "[1,");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": -4}", FORGE_ERR_CONFIG, "\"n_heads\"", NULL);
    EXPECT_ERROR("{\"family\": \"gpt2\", \"vocab_size\": 1, \"context_length\": 16, \"n_layers\": 2,"
                 " \"d_model\": 64, \"n_heads\": 4}",
                 FORGE_ERR_CONFIG, "\"vocab_size\"", "[2, 2147483647]");
    EXPECT_ERROR("{\"family\": \"gpt2\", \"vocab_size\": 2147483648, \"context_length\": 16,"
                 " \"n_layers\": 2, \"d_model\": 64, \"n_heads\": 4}",
                 FORGE_ERR_CONFIG, "\"vocab_size\"", "2147483648");
    EXPECT_ERROR("{\"family\": \"gpt2\", \"vocab_size\": 100, \"context_length\": 0, \"n_layers\": 2,"
                 " \"d_model\": 64, \"n_heads\": 4}",
                 FORGE_ERR_CONFIG, "\"context_length\"", NULL);
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 5}", FORGE_ERR_CONFIG,
                 "\"d_model\" (64) must be divisible by \"n_heads\" (5)", NULL);
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4, \"n_kv_heads\": 3}", FORGE_ERR_CONFIG,
                 "\"n_kv_heads\" (3)", "\"n_heads\" (4)");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4, \"n_kv_heads\": 8}", FORGE_ERR_CONFIG,
                 "\"n_kv_heads\" (8)", NULL);
    EXPECT_ERROR("{" LLAMA_BASE ", \"d_model\": 60, \"n_heads\": 4, \"ffn_hidden\": 160}", FORGE_ERR_CONFIG,
                 "head size", "\"rope\"");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4, \"norm_eps\": 0}", FORGE_ERR_CONFIG,
                 "\"norm_eps\"", "(0, 1)");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4, \"norm_eps\": 1}", FORGE_ERR_CONFIG,
                 "\"norm_eps\"", NULL);
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4, \"init_std\": -0.02}", FORGE_ERR_CONFIG,
                 "\"init_std\"", NULL);
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4, \"init_std\": 5}", FORGE_ERR_CONFIG,
                 "\"init_std\"", "(0, 1]");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4, \"norm_eps\": 1e300}", FORGE_ERR_CONFIG,
                 "\"norm_eps\"", "finite");
    EXPECT_ERROR("{\"family\": \"gpt2\", \"vocab_size\": 2000000000, \"context_length\": 16,"
                 " \"n_layers\": 2000000000, \"d_model\": 2000000000, \"n_heads\": 1, \"ffn_hidden\": 4}",
                 FORGE_ERR_CONFIG, "parameters", NULL);

    TEST_CASE("missing and repeated keys");
    EXPECT_ERROR("{" GPT2_BASE ", \"n_heads\": 4}", FORGE_ERR_CONFIG, "missing required key \"d_model\"", NULL);
    EXPECT_ERROR("{\"vocab_size\": 100, \"context_length\": 16, \"n_layers\": 2, \"d_model\": 64,"
                 " \"n_heads\": 4}",
                 FORGE_ERR_CONFIG, "\"family\"", NULL);
    EXPECT_ERROR("{" LLAMA_BASE ", \"d_model\": 64, \"n_heads\": 4}", FORGE_ERR_CONFIG,
                 "\"ffn_hidden\"", "\"swiglu\"");
    EXPECT_ERROR("{" GPT2_BASE ", \"d_model\": 64, \"n_heads\": 4, \"d_model\": 128}", FORGE_ERR_CONFIG,
                 "\"d_model\"", "more than once");

    TEST_CASE("invalid JSON reports line and column");
    EXPECT_ERROR("{\n  \"family\": \"gpt2\",\n  \"vocab_size\": 100,,\n}", FORGE_ERR_CONFIG,
                 "invalid JSON", "line 3");
    EXPECT_ERROR("{\"family\": \"gpt2\"", FORGE_ERR_CONFIG, "invalid JSON", "line 1");
    EXPECT_ERROR("", FORGE_ERR_CONFIG, "invalid JSON", NULL);
    EXPECT_ERROR("{\"family\": \"gpt2\"} trailing", FORGE_ERR_CONFIG, "invalid JSON", NULL);

    TEST_CASE("validate() on a struct built in code");
    forge_model_config c;
    CHECK_OK(forge_config_resolve(&c, "tiny", CONFIGS_DIR));
    c.n_kv_heads = 3;
    CHECK(forge_config_validate(&c, "built") == FORGE_ERR_CONFIG);
    CHECK(strstr(forge_error_message(), "built") && strstr(forge_error_message(), "n_kv_heads"));
    c.n_kv_heads = c.n_heads;
    c.bias = 2;
    CHECK(forge_config_validate(&c, "built") == FORGE_ERR_CONFIG);
    CHECK(strstr(forge_error_message(), "\"bias\"") != NULL);
}

static void test_files(void) {
    const char *dir = test_tmpdir();
    forge_model_config c;

    TEST_CASE("missing file is an I/O error naming the path");
    char missing[1024];
    snprintf(missing, sizeof missing, "%s/nope.json", dir);
    CHECK(forge_config_load_file(&c, missing) == FORGE_ERR_IO);
    CHECK(strstr(forge_error_message(), missing) != NULL);

    TEST_CASE("errors in a file name the file");
    const char *bad = write_text(dir, "bad.json", "{\"family\": \"gpt2\", \"vocab_size\": 100,\n"
                                                  " \"context_length\": 16, \"n_layers\": 2,\n"
                                                  " \"d_model\": 64, \"n_heads\": 4, \"d_modle\": 3}\n");
    CHECK(forge_config_load_file(&c, bad) == FORGE_ERR_CONFIG);
    CHECK(strstr(forge_error_message(), bad) && strstr(forge_error_message(), "d_modle"));
    const char *broken = write_text(dir, "broken.json", "{\n\"family\": \"gpt2\"\n\"x\": 1}\n");
    CHECK(forge_config_load_file(&c, broken) == FORGE_ERR_CONFIG);
    CHECK(strstr(forge_error_message(), broken) && strstr(forge_error_message(), "line 3"));

    TEST_CASE("resolve: bare name, path, unknown name");
    CHECK_OK(forge_config_resolve(&c, "tiny", NULL)); /* default dir "configs" */
    CHECK(strcmp(c.name, "tiny") == 0);
    CHECK_OK(forge_config_resolve(&c, "configs/gpt2-124m.json", "/nonexistent"));
    CHECK(strcmp(c.name, "gpt2-124m") == 0);
    const char *good = write_text(dir, "mine.json", "{" GPT2_BASE ", \"d_model\": 32, \"n_heads\": 2}");
    CHECK_OK(forge_config_resolve(&c, good, CONFIGS_DIR));
    CHECK(strcmp(c.name, "mine") == 0 && c.d_model == 32);
    CHECK_OK(forge_config_resolve(&c, "mine", dir));
    CHECK(forge_config_resolve(&c, "tinyy", CONFIGS_DIR) == FORGE_ERR_IO);
    CHECK(strstr(forge_error_message(), "configs/tinyy.json") && strstr(forge_error_message(), "tiny-llama"));
}

static void test_parse_bytes(void) {
    forge_model_config c, f;

    TEST_CASE("parse_bytes: text without a NUL terminator parses as the file does");
    static const char text[] = "{" GPT2_BASE ", \"d_model\": 32, \"n_heads\": 2}";
    size_t n = sizeof text - 1;
    char *exact = malloc(n); /* no room for a terminator: ASan sees any read past it */
    memcpy(exact, text, n);
    CHECK_OK(forge_config_parse_bytes(&c, exact, n, "mem/exact.json"));
    CHECK(strcmp(c.name, "exact") == 0 && c.d_model == 32);
    const char *path = write_text(test_tmpdir(), "exact.json", text);
    CHECK_OK(forge_config_load_file(&f, path));
    CHECK(configs_equal(&c, &f));
    /* a prefix is cut JSON: the error is at the end of the text, not past it */
    CHECK(forge_config_parse_bytes(&c, exact, n - 1, "mem/cut.json") == FORGE_ERR_CONFIG);
    CHECK(strstr(forge_error_message(), "mem/cut.json") && strstr(forge_error_message(), "end of text"));
    free(exact);

    TEST_CASE("parse_bytes: a NUL byte or more than 1 MiB is refused, naming the source");
    static const char nul[] = "{\"family\": \"gpt2\"\0, \"x\": 1}";
    CHECK(forge_config_parse_bytes(&c, nul, sizeof nul - 1, "mem/nul.json") == FORGE_ERR_CONFIG);
    CHECK(strstr(forge_error_message(), "mem/nul.json") && strstr(forge_error_message(), "NUL byte at offset 17"));
    size_t big = (1 << 20) + 1;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    CHECK(forge_config_parse_bytes(&c, huge, big, "mem/big.json") == FORGE_ERR_CONFIG);
    CHECK(strstr(forge_error_message(), "larger than"));
    free(huge);
    CHECK(forge_config_parse_bytes(&c, "", 0, NULL) == FORGE_ERR_CONFIG);
    CHECK(strstr(forge_error_message(), "<config>") != NULL);
}

void suite_config(void) {
    test_shipped_configs();
    test_param_counts();
    test_defaults();
    test_errors();
    test_files();
    test_parse_bytes();
}
