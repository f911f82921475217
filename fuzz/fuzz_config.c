/*
 * fuzz_config.c: libFuzzer target for the model config parsers: forge's own
 * (src/model/config.c) and the Hugging Face config.json mapping (src/model/hf.c).
 *
 * The input is the bytes of a config file. Whatever they are, both parsers must
 * return a status without a sanitizer report; when one succeeds, the config
 * must survive its own round trip: to_json() and parse() give back an equal
 * struct, and param_count() runs on it (UBSan checks its int64 arithmetic).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../src/model/config.h"
#include "../src/model/hf.h"

static int same_config(const forge_model_config *a, const forge_model_config *b) {
    return strcmp(a->name, b->name) == 0 && a->family == b->family && a->vocab_size == b->vocab_size &&
           a->context_length == b->context_length && a->d_model == b->d_model && a->n_layers == b->n_layers &&
           a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads && a->ffn_hidden == b->ffn_hidden &&
           a->norm == b->norm && a->norm_eps == b->norm_eps && a->positions == b->positions &&
           a->rope_theta == b->rope_theta && a->activation == b->activation && a->bias == b->bias &&
           a->tied_embeddings == b->tied_embeddings && a->init_std == b->init_std;
}

#define FAIL(...) FUZZ_FAIL("config", __VA_ARGS__)

/* The same bytes as a Hugging Face config.json: a status, and when it maps, HF JSON that maps back to it. */
static void fuzz_hf(const uint8_t *data, size_t size) {
    forge_model_config cfg, back;
    forge_status s = forge_hf_config_parse(&cfg, (const char *)data, size, "config.json", "fuzz");
    if (s != FORGE_OK) {
        if (s != FORGE_ERR_CONFIG && s != FORGE_ERR_UNSUPPORTED)
            FAIL("hf: unexpected status %s: %s", forge_status_name(s), forge_error_message());
        return;
    }
    if (forge_config_validate(&cfg, "config.json") != FORGE_OK)
        FAIL("hf: mapped but does not validate: %s", forge_error_message());
    char *json = NULL;
    if (forge_hf_config_to_json(&cfg, -1, &json) != FORGE_OK) FAIL("hf: to_json failed: %s", forge_error_message());
    forge_status sb = forge_hf_config_parse(&back, json, strlen(json), "back.json", "fuzz");
    int same = sb == FORGE_OK && same_config(&cfg, &back);
    if (!same) {
        fprintf(stderr, "%s\n", json);
        free(json);
        FAIL("hf: to_json does not map back to the same config: %s", sb ? forge_error_message() : "fields differ");
    }
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_hf(data, size);
    forge_model_config cfg;
    forge_status s = forge_config_parse_bytes(&cfg, (const char *)data, size, "fuzz.json");
    if (s != FORGE_OK) {
        if (s != FORGE_ERR_CONFIG) FAIL("unexpected status %s: %s", forge_status_name(s), forge_error_message());
        return 0;
    }
    if (forge_config_validate(&cfg, "fuzz.json") != FORGE_OK)
        FAIL("parsed but does not validate: %s", forge_error_message());
    if (forge_config_param_count(&cfg) <= 0)
        FAIL("param_count %lld", (long long)forge_config_param_count(&cfg));
    char *json = forge_config_to_json(&cfg);
    if (!json) FAIL("to_json failed");
    forge_model_config back;
    forge_status sb = forge_config_parse(&back, json, "back.json");
    int same = sb == FORGE_OK && same_config(&cfg, &back);
    if (!same) {
        fprintf(stderr, "%s\n", json);
        free(json);
        FAIL("to_json does not parse back to the same config: %s", sb ? forge_error_message() : "fields differ");
    }
    free(json);
    return 0;
}
