/*
 * config.h: a model's architecture, read from a JSON file in configs/.
 *
 * The family ("gpt2" or "llama") only supplies defaults; every architectural
 * choice is its own field, so a GPT-2 with RMSNorm or a llama with tied
 * embeddings is one key away and the model code branches on the field, never
 * on the family. The parser is strict on purpose: an unknown key, a number
 * where an integer belongs or a value out of range is an error that names the
 * file, the key and what was expected, because a typo that silently falls back
 * to a default wastes a training run.
 *
 * Shape legend: V vocab_size, C d_model, L n_layers, NH n_heads, NKV n_kv_heads,
 * HS head size C / NH, H ffn_hidden.
 */
#ifndef FORGE_CONFIG_H
#define FORGE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"

typedef enum { FORGE_FAMILY_GPT2 = 0, FORGE_FAMILY_LLAMA, FORGE_FAMILY_COUNT } forge_family;
typedef enum { FORGE_NORM_LAYERNORM = 0, FORGE_NORM_RMSNORM, FORGE_NORM_COUNT } forge_norm;
typedef enum { FORGE_POSITIONS_LEARNED = 0, FORGE_POSITIONS_ROPE, FORGE_POSITIONS_COUNT } forge_positions;
typedef enum { FORGE_ACTIVATION_GELU = 0, FORGE_ACTIVATION_SWIGLU, FORGE_ACTIVATION_COUNT } forge_activation;

#define FORGE_CONFIG_NAME_CAP 64

typedef struct {
    char name[FORGE_CONFIG_NAME_CAP]; /* defaults to the file name without .json */
    forge_family family;
    int vocab_size;      /* V */
    int context_length;  /* T max */
    int d_model;         /* C */
    int n_layers;        /* L */
    int n_heads;         /* NH */
    int n_kv_heads;      /* NKV; < NH means grouped-query attention */
    int ffn_hidden;      /* H */
    forge_norm norm;
    float norm_eps;
    forge_positions positions;
    float rope_theta;
    forge_activation activation;
    int bias;            /* 0/1: biases on the linear layers (norm biases follow `norm`) */
    int tied_embeddings; /* 0/1: lm_head shares the token embedding */
    float init_std;
} forge_model_config;

/* Reads and validates a config file. FORGE_ERR_IO if it cannot be read,
 * FORGE_ERR_CONFIG for anything wrong inside it. */
forge_status forge_config_load_file(forge_model_config *out, const char *path);

/* Parses and validates JSON text; source_name (a path, or e.g. "<checkpoint>")
 * starts every error message and gives the default name. */
forge_status forge_config_parse(forge_model_config *out, const char *json_text,
                                const char *source_name);

/* Parses len bytes of JSON text that need not be NUL-terminated, with the
 * checks a config file gets: at most 1 MiB and no NUL byte (FORGE_ERR_CONFIG,
 * naming the offset). forge_config_load_file reads the file and calls this. */
forge_status forge_config_parse_bytes(forge_model_config *out, const char *data, size_t len,
                                      const char *source_name);

/* Checks ranges and cross-field constraints (d_model % n_heads, ...). */
forge_status forge_config_validate(const forge_model_config *cfg, const char *source_name);

/* "tiny" (no '/' and no ".json") loads <configs_dir>/tiny.json; anything else is
 * a path. configs_dir NULL means "configs". */
forge_status forge_config_resolve(forge_model_config *out, const char *name_or_path,
                                  const char *configs_dir);

/* Exact number of parameters (weights + biases) of the architecture. */
int64_t forge_config_param_count(const forge_model_config *cfg);

/* Every field as a JSON object (parse() reads it back to an equal struct);
 * malloc'ed, the caller frees. NULL only when out of memory. */
char *forge_config_to_json(const forge_model_config *cfg);

const char *forge_family_name(forge_family family);
const char *forge_norm_name(forge_norm norm);
const char *forge_positions_name(forge_positions positions);
const char *forge_activation_name(forge_activation activation);

#endif
