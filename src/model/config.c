/*
 * config.c: model config JSON <-> forge_model_config.
 *
 * Parsing runs in four steps, each with its own error: the text must be JSON
 * (line and column of the first bad byte), every key must be known and appear
 * once, each value must have the key's type, and the assembled struct must pass
 * forge_config_validate(). Family defaults are applied before the explicit keys,
 * so any key overrides its family's choice.
 */
#include "config.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ names */

static const char *const family_names[] = {"gpt2", "llama"};
static const char *const norm_names[] = {"layernorm", "rmsnorm"};
static const char *const positions_names[] = {"learned", "rope"};
static const char *const activation_names[] = {"gelu", "swiglu"};
_Static_assert(sizeof family_names / sizeof family_names[0] == FORGE_FAMILY_COUNT, "family names");
_Static_assert(sizeof norm_names / sizeof norm_names[0] == FORGE_NORM_COUNT, "norm names");
_Static_assert(sizeof positions_names / sizeof positions_names[0] == FORGE_POSITIONS_COUNT,
               "positions names");
_Static_assert(sizeof activation_names / sizeof activation_names[0] == FORGE_ACTIVATION_COUNT,
               "activation names");

static const char *enum_name(const char *const *names, int count, int value) {
    return (value >= 0 && value < count) ? names[value] : "invalid";
}
const char *forge_family_name(forge_family f) { return enum_name(family_names, FORGE_FAMILY_COUNT, (int)f); }
const char *forge_norm_name(forge_norm n) { return enum_name(norm_names, FORGE_NORM_COUNT, (int)n); }
const char *forge_positions_name(forge_positions p) {
    return enum_name(positions_names, FORGE_POSITIONS_COUNT, (int)p);
}
const char *forge_activation_name(forge_activation a) {
    return enum_name(activation_names, FORGE_ACTIVATION_COUNT, (int)a);
}

/* ------------------------------------------------------------- key table */

typedef enum { KEY_STRING, KEY_ENUM, KEY_INT, KEY_FLOAT, KEY_BOOL } key_kind;

typedef struct {
    const char *key;
    key_kind kind;
    int required;              /* missing => error (ffn_hidden is checked separately) */
    int int_min;               /* KEY_INT: smallest allowed value */
    const char *const *names;  /* KEY_ENUM */
    int n_names;
} key_spec;

static const key_spec key_table[] = {
    {"name", KEY_STRING, 0, 0, NULL, 0},
    {"family", KEY_ENUM, 1, 0, family_names, FORGE_FAMILY_COUNT},
    {"vocab_size", KEY_INT, 1, 2, NULL, 0},
    {"context_length", KEY_INT, 1, 1, NULL, 0},
    {"d_model", KEY_INT, 1, 1, NULL, 0},
    {"n_layers", KEY_INT, 1, 1, NULL, 0},
    {"n_heads", KEY_INT, 1, 1, NULL, 0},
    {"n_kv_heads", KEY_INT, 0, 1, NULL, 0},
    {"ffn_hidden", KEY_INT, 0, 1, NULL, 0},
    {"norm", KEY_ENUM, 0, 0, norm_names, FORGE_NORM_COUNT},
    {"norm_eps", KEY_FLOAT, 0, 0, NULL, 0},
    {"positions", KEY_ENUM, 0, 0, positions_names, FORGE_POSITIONS_COUNT},
    {"rope_theta", KEY_FLOAT, 0, 0, NULL, 0},
    {"activation", KEY_ENUM, 0, 0, activation_names, FORGE_ACTIVATION_COUNT},
    {"bias", KEY_BOOL, 0, 0, NULL, 0},
    {"tied_embeddings", KEY_BOOL, 0, 0, NULL, 0},
    {"init_std", KEY_FLOAT, 0, 0, NULL, 0},
};
#define N_KEYS ((int)(sizeof key_table / sizeof key_table[0]))

static const key_spec *find_key(const char *key) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(key_table[i].key, key) == 0) return &key_table[i];
    return NULL;
}

/* Levenshtein distance, for "did you mean". Keys are short. */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static forge_status unknown_key_error(const char *src, const char *key) {
    char list[512] = "";
    size_t used = 0;
    const char *closest = NULL;
    int closest_d = 3; /* suggest only within distance 2 */
    for (int i = 0; i < N_KEYS; i++) {
        int n = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", key_table[i].key);
        if (n > 0 && (size_t)n < sizeof list - used) used += (size_t)n;
        int d = edit_distance(key, key_table[i].key);
        if (d < closest_d) {
            closest_d = d;
            closest = key_table[i].key;
        }
    }
    if (closest)
        return forge_error(FORGE_ERR_CONFIG,
                           "%s: unknown key \"%s\" (did you mean \"%s\"?); expected one of: %s",
                           src, key, closest, list);
    return forge_error(FORGE_ERR_CONFIG, "%s: unknown key \"%s\"; expected one of: %s", src, key,
                       list);
}

/* "string \"12\"", "number 1.5", "true", "array", ... for error messages. */
static const char *describe_json(const cJSON *item, char *buf, size_t cap) {
    if (cJSON_IsString(item)) snprintf(buf, cap, "string \"%.40s\"", item->valuestring);
    else if (cJSON_IsNumber(item)) snprintf(buf, cap, "number %.17g", item->valuedouble);
    else if (cJSON_IsTrue(item)) snprintf(buf, cap, "true");
    else if (cJSON_IsFalse(item)) snprintf(buf, cap, "false");
    else if (cJSON_IsNull(item)) snprintf(buf, cap, "null");
    else if (cJSON_IsArray(item)) snprintf(buf, cap, "an array");
    else if (cJSON_IsObject(item)) snprintf(buf, cap, "an object");
    else snprintf(buf, cap, "an unknown JSON value");
    return buf;
}

/* --------------------------------------------------------------- defaults */

static void apply_family_defaults(forge_model_config *c, forge_family family) {
    c->family = family;
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->init_std = 0.02f;
    if (family == FORGE_FAMILY_GPT2) {
        c->norm = FORGE_NORM_LAYERNORM;
        c->positions = FORGE_POSITIONS_LEARNED;
        c->activation = FORGE_ACTIVATION_GELU;
        c->bias = 1;
        c->tied_embeddings = 1;
    } else {
        c->norm = FORGE_NORM_RMSNORM;
        c->positions = FORGE_POSITIONS_ROPE;
        c->activation = FORGE_ACTIVATION_SWIGLU;
        c->bias = 0;
        c->tied_embeddings = 0;
    }
}

/* "configs/tiny.json" -> "tiny" */
static void default_name(char *out, const char *src) {
    const char *base = strrchr(src, '/');
    base = base ? base + 1 : src;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".json") == 0) n -= 5;
    if (n == 0) {
        base = "model";
        n = 5;
    }
    if (n >= FORGE_CONFIG_NAME_CAP) n = FORGE_CONFIG_NAME_CAP - 1;
    memcpy(out, base, n);
    out[n] = '\0';
}

/* ---------------------------------------------------------------- parsing */

static forge_status json_syntax_error(const char *src, const char *text, const char *err) {
    size_t len = strlen(text);
    if (!err || err < text || err > text + len)
        return forge_error(FORGE_ERR_CONFIG, "%s: invalid JSON", src);
    size_t pos = (size_t)(err - text);
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < pos; i++)
        if (text[i] == '\n') {
            line++;
            line_start = i + 1;
        }
    char near[32];
    size_t k = 0;
    for (size_t i = pos; i < len && k < 24 && text[i] != '\n'; i++)
        near[k++] = (text[i] >= 32 && text[i] < 127) ? text[i] : '?';
    near[k] = '\0';
    if (pos == len)
        return forge_error(FORGE_ERR_CONFIG,
                           "%s: invalid JSON: unexpected end of text at line %d, column %zu", src,
                           line, pos - line_start + 1);
    return forge_error(FORGE_ERR_CONFIG, "%s: invalid JSON at line %d, column %zu, near \"%s\"",
                       src, line, pos - line_start + 1, near);
}

static forge_status get_int(const char *src, const key_spec *spec, const cJSON *item, int *out) {
    char what[96];
    if (!cJSON_IsNumber(item))
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be an integer, got %s", src,
                           spec->key, describe_json(item, what, sizeof what));
    double v = item->valuedouble;
    if (!isfinite(v) || v != floor(v))
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be an integer, got %.17g", src,
                           spec->key, v);
    if (v < spec->int_min || v > INT_MAX)
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be in [%d, %d], got %.17g", src,
                           spec->key, spec->int_min, INT_MAX, v);
    *out = (int)v;
    return FORGE_OK;
}

static forge_status get_float(const char *src, const key_spec *spec, const cJSON *item, float *out) {
    char what[96];
    if (!cJSON_IsNumber(item))
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be a number, got %s", src,
                           spec->key, describe_json(item, what, sizeof what));
    double v = item->valuedouble;
    if (!isfinite(v) || !isfinite((float)v))
        return forge_error(FORGE_ERR_CONFIG,
                           "%s: key \"%s\" must be a finite 32-bit float, got %.17g", src,
                           spec->key, v);
    *out = (float)v;
    return FORGE_OK;
}

static forge_status get_bool(const char *src, const key_spec *spec, const cJSON *item, int *out) {
    char what[96];
    if (!cJSON_IsBool(item))
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be true or false, got %s", src,
                           spec->key, describe_json(item, what, sizeof what));
    *out = cJSON_IsTrue(item) ? 1 : 0;
    return FORGE_OK;
}

static forge_status get_enum(const char *src, const key_spec *spec, const cJSON *item, int *out) {
    char list[128] = "";
    size_t used = 0;
    for (int i = 0; i < spec->n_names; i++) {
        int n = snprintf(list + used, sizeof list - used, "%s\"%s\"", i ? ", " : "", spec->names[i]);
        if (n > 0 && (size_t)n < sizeof list - used) used += (size_t)n;
    }
    char what[96];
    if (!cJSON_IsString(item))
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be one of %s, got %s", src,
                           spec->key, list, describe_json(item, what, sizeof what));
    for (int i = 0; i < spec->n_names; i++)
        if (strcmp(item->valuestring, spec->names[i]) == 0) {
            *out = i;
            return FORGE_OK;
        }
    return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be one of %s, got \"%.40s\"", src,
                       spec->key, list, item->valuestring);
}

static forge_status config_from_json(forge_model_config *c, const cJSON *root, const char *src) {
    char what[96];
    if (!cJSON_IsObject(root))
        return forge_error(FORGE_ERR_CONFIG, "%s: expected a JSON object at the top level, got %s",
                           src, describe_json(root, what, sizeof what));

    /* every key known, none repeated */
    for (const cJSON *it = root->child; it; it = it->next) {
        if (!find_key(it->string)) return unknown_key_error(src, it->string);
        for (const cJSON *prev = root->child; prev != it; prev = prev->next)
            if (strcmp(prev->string, it->string) == 0)
                return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" appears more than once",
                                   src, it->string);
    }
    for (int i = 0; i < N_KEYS; i++)
        if (key_table[i].required && !cJSON_GetObjectItemCaseSensitive(root, key_table[i].key))
            return forge_error(FORGE_ERR_CONFIG, "%s: missing required key \"%s\"", src,
                               key_table[i].key);

    memset(c, 0, sizeof *c);
    int family = 0;
    FORGE_TRY(get_enum(src, find_key("family"), cJSON_GetObjectItemCaseSensitive(root, "family"),
                       &family));
    apply_family_defaults(c, (forge_family)family);
    default_name(c->name, src);
    int have_kv = 0, have_ffn = 0;

    for (const cJSON *it = root->child; it; it = it->next) {
        const key_spec *s = find_key(it->string);
        const char *k = s->key;
        int e = 0;
        if (strcmp(k, "name") == 0) {
            if (!cJSON_IsString(it))
                return forge_error(FORGE_ERR_CONFIG, "%s: key \"name\" must be a string, got %s",
                                   src, describe_json(it, what, sizeof what));
            size_t n = strlen(it->valuestring);
            if (n == 0 || n >= FORGE_CONFIG_NAME_CAP)
                return forge_error(FORGE_ERR_CONFIG,
                                   "%s: key \"name\" must be 1 to %d bytes long, got %zu", src,
                                   FORGE_CONFIG_NAME_CAP - 1, n);
            memcpy(c->name, it->valuestring, n + 1);
        } else if (strcmp(k, "family") == 0) {
            /* already applied */
        } else if (strcmp(k, "vocab_size") == 0) {
            FORGE_TRY(get_int(src, s, it, &c->vocab_size));
        } else if (strcmp(k, "context_length") == 0) {
            FORGE_TRY(get_int(src, s, it, &c->context_length));
        } else if (strcmp(k, "d_model") == 0) {
            FORGE_TRY(get_int(src, s, it, &c->d_model));
        } else if (strcmp(k, "n_layers") == 0) {
            FORGE_TRY(get_int(src, s, it, &c->n_layers));
        } else if (strcmp(k, "n_heads") == 0) {
            FORGE_TRY(get_int(src, s, it, &c->n_heads));
        } else if (strcmp(k, "n_kv_heads") == 0) {
            FORGE_TRY(get_int(src, s, it, &c->n_kv_heads));
            have_kv = 1;
        } else if (strcmp(k, "ffn_hidden") == 0) {
            FORGE_TRY(get_int(src, s, it, &c->ffn_hidden));
            have_ffn = 1;
        } else if (strcmp(k, "norm") == 0) {
            FORGE_TRY(get_enum(src, s, it, &e));
            c->norm = (forge_norm)e;
        } else if (strcmp(k, "norm_eps") == 0) {
            FORGE_TRY(get_float(src, s, it, &c->norm_eps));
        } else if (strcmp(k, "positions") == 0) {
            FORGE_TRY(get_enum(src, s, it, &e));
            c->positions = (forge_positions)e;
        } else if (strcmp(k, "rope_theta") == 0) {
            FORGE_TRY(get_float(src, s, it, &c->rope_theta));
        } else if (strcmp(k, "activation") == 0) {
            FORGE_TRY(get_enum(src, s, it, &e));
            c->activation = (forge_activation)e;
        } else if (strcmp(k, "bias") == 0) {
            FORGE_TRY(get_bool(src, s, it, &c->bias));
        } else if (strcmp(k, "tied_embeddings") == 0) {
            FORGE_TRY(get_bool(src, s, it, &c->tied_embeddings));
        } else if (strcmp(k, "init_std") == 0) {
            FORGE_TRY(get_float(src, s, it, &c->init_std));
        }
    }

    if (!have_kv) c->n_kv_heads = c->n_heads;
    if (!have_ffn) {
        if (c->activation == FORGE_ACTIVATION_SWIGLU)
            return forge_error(FORGE_ERR_CONFIG,
                               "%s: missing key \"ffn_hidden\", required when activation is "
                               "\"swiglu\" (llama uses about 8/3 * d_model, rounded up)",
                               src);
        if (c->d_model > INT_MAX / 4)
            return forge_error(FORGE_ERR_CONFIG,
                               "%s: key \"d_model\" (%d) is too large for the default ffn_hidden "
                               "4 * d_model",
                               src, c->d_model);
        c->ffn_hidden = 4 * c->d_model;
    }
    return forge_config_validate(c, src);
}

forge_status forge_config_parse(forge_model_config *out, const char *json_text,
                                const char *source_name) {
    const char *src = source_name ? source_name : "<config>";
    if (!out || !json_text) return forge_error(FORGE_ERR_ARG, "%s: forge_config_parse: NULL argument", src);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json_text, &end, 1);
    if (!root) return json_syntax_error(src, json_text, end);
    forge_model_config c;
    forge_status s = config_from_json(&c, root, src);
    cJSON_Delete(root);
    if (s == FORGE_OK) *out = c;
    return s;
}

/* ------------------------------------------------------------- validation */

forge_status forge_config_validate(const forge_model_config *c, const char *source_name) {
    const char *src = source_name ? source_name : "<config>";
    if (!c) return forge_error(FORGE_ERR_ARG, "%s: forge_config_validate: NULL config", src);
    if (!memchr(c->name, '\0', sizeof c->name) || c->name[0] == '\0')
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"name\" must be 1 to %d bytes long", src,
                           FORGE_CONFIG_NAME_CAP - 1);
    if ((int)c->family < 0 || c->family >= FORGE_FAMILY_COUNT)
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"family\" must be \"gpt2\" or \"llama\"", src);
    if ((int)c->norm < 0 || c->norm >= FORGE_NORM_COUNT)
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"norm\" must be \"layernorm\" or \"rmsnorm\"", src);
    if ((int)c->positions < 0 || c->positions >= FORGE_POSITIONS_COUNT)
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"positions\" must be \"learned\" or \"rope\"", src);
    if ((int)c->activation < 0 || c->activation >= FORGE_ACTIVATION_COUNT)
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"activation\" must be \"gelu\" or \"swiglu\"", src);

    struct {
        const char *key;
        int value, min;
    } ints[] = {
        {"vocab_size", c->vocab_size, 2}, {"context_length", c->context_length, 1},
        {"d_model", c->d_model, 1},       {"n_layers", c->n_layers, 1},
        {"n_heads", c->n_heads, 1},       {"n_kv_heads", c->n_kv_heads, 1},
        {"ffn_hidden", c->ffn_hidden, 1},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].value < ints[i].min)
            return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be in [%d, %d], got %d", src,
                               ints[i].key, ints[i].min, INT_MAX, ints[i].value);

    if (c->d_model % c->n_heads != 0)
        return forge_error(FORGE_ERR_CONFIG,
                           "%s: key \"d_model\" (%d) must be divisible by \"n_heads\" (%d)", src,
                           c->d_model, c->n_heads);
    if (c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads != 0)
        return forge_error(FORGE_ERR_CONFIG,
                           "%s: key \"n_heads\" (%d) must be a multiple of \"n_kv_heads\" (%d)",
                           src, c->n_heads, c->n_kv_heads);
    int head_size = c->d_model / c->n_heads;
    if (c->positions == FORGE_POSITIONS_ROPE && head_size % 2 != 0)
        return forge_error(FORGE_ERR_CONFIG,
                           "%s: head size \"d_model\" / \"n_heads\" = %d / %d = %d must be even "
                           "when \"positions\" is \"rope\" (rotations act on pairs)",
                           src, c->d_model, c->n_heads, head_size);
    if (!(c->norm_eps > 0.0f && c->norm_eps < 1.0f))
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"norm_eps\" must be in (0, 1), got %g", src,
                           (double)c->norm_eps);
    if (!(c->rope_theta > 0.0f) || !isfinite(c->rope_theta))
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"rope_theta\" must be > 0, got %g", src,
                           (double)c->rope_theta);
    /* above 1 every logit of the first step overflows its softmax: no model is initialised that wide */
    if (!(c->init_std > 0.0f) || !(c->init_std <= 1.0f))
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"init_std\" must be in (0, 1], got %g", src,
                           (double)c->init_std);
    if (c->bias != 0 && c->bias != 1)
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"bias\" must be 0 or 1, got %d", src, c->bias);
    if (c->tied_embeddings != 0 && c->tied_embeddings != 1)
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"tied_embeddings\" must be 0 or 1, got %d",
                           src, c->tied_embeddings);

    /* Guards the int64 arithmetic in param_count and every size computed from
     * the config downstream; no real model is near it. */
    double C = c->d_model, V = c->vocab_size, H = c->ffn_hidden, L = c->n_layers;
    double approx = 2.0 * V * C + (double)c->context_length * C + L * (4.0 * C * C + 3.0 * H * C);
    if (approx > 1e15)
        return forge_error(FORGE_ERR_CONFIG,
                           "%s: the architecture has about %.3g parameters; more than 1e15 is "
                           "surely a typo in \"d_model\", \"n_layers\", \"vocab_size\" or "
                           "\"ffn_hidden\"",
                           src, approx);
    return FORGE_OK;
}

/* ------------------------------------------------------------ param count */

int64_t forge_config_param_count(const forge_model_config *c) {
    int64_t V = c->vocab_size, T = c->context_length, C = c->d_model;
    int64_t NH = c->n_heads, NKV = c->n_kv_heads, HS = C / NH, H = c->ffn_hidden;
    int64_t b = c->bias ? 1 : 0;
    int64_t norm = (c->norm == FORGE_NORM_LAYERNORM) ? 2 * C : C; /* weight [+ bias] */
    int64_t qkv_out = (NH + 2 * NKV) * HS;

    int64_t layer = 0;
    layer += norm;                          /* norm1 */
    layer += qkv_out * C + b * qkv_out;     /* qkv (NH+2*NKV)*HS, C) */
    layer += C * C + b * C;                 /* attention out proj (C, C) */
    layer += norm;                          /* norm2 */
    if (c->activation == FORGE_ACTIVATION_GELU)
        layer += (H * C + b * H) + (C * H + b * C);           /* fc (H, C), proj (C, H) */
    else
        layer += 2 * (H * C + b * H) + (C * H + b * C);       /* gate, up (H, C); down (C, H) */

    int64_t total = V * C;                                    /* token embedding (V, C) */
    if (c->positions == FORGE_POSITIONS_LEARNED) total += T * C; /* (T, C) */
    total += c->n_layers * layer;
    total += norm;                                            /* final norm */
    if (!c->tied_embeddings) total += V * C;                  /* lm_head (V, C) */
    return total;
}

/* ---------------------------------------------------------------- to_json */

/* The shortest decimal that reads back as the same float, as a double, so
 * 1e-5f prints as 1e-05 and not 9.9999997473787516e-06. */
static double float_for_json(float f) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

char *forge_config_to_json(const forge_model_config *c) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    int ok = 1;
    ok &= cJSON_AddStringToObject(o, "name", c->name) != NULL;
    ok &= cJSON_AddStringToObject(o, "family", forge_family_name(c->family)) != NULL;
    ok &= cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size) != NULL;
    ok &= cJSON_AddNumberToObject(o, "context_length", c->context_length) != NULL;
    ok &= cJSON_AddNumberToObject(o, "d_model", c->d_model) != NULL;
    ok &= cJSON_AddNumberToObject(o, "n_layers", c->n_layers) != NULL;
    ok &= cJSON_AddNumberToObject(o, "n_heads", c->n_heads) != NULL;
    ok &= cJSON_AddNumberToObject(o, "n_kv_heads", c->n_kv_heads) != NULL;
    ok &= cJSON_AddNumberToObject(o, "ffn_hidden", c->ffn_hidden) != NULL;
    ok &= cJSON_AddStringToObject(o, "norm", forge_norm_name(c->norm)) != NULL;
    ok &= cJSON_AddNumberToObject(o, "norm_eps", float_for_json(c->norm_eps)) != NULL;
    ok &= cJSON_AddStringToObject(o, "positions", forge_positions_name(c->positions)) != NULL;
    ok &= cJSON_AddNumberToObject(o, "rope_theta", float_for_json(c->rope_theta)) != NULL;
    ok &= cJSON_AddStringToObject(o, "activation", forge_activation_name(c->activation)) != NULL;
    ok &= cJSON_AddBoolToObject(o, "bias", c->bias) != NULL;
    ok &= cJSON_AddBoolToObject(o, "tied_embeddings", c->tied_embeddings) != NULL;
    ok &= cJSON_AddNumberToObject(o, "init_std", float_for_json(c->init_std)) != NULL;
    char *text = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) return NULL;
    /* cJSON allocates with malloc by default; copy anyway so the caller's free()
     * is right even if cJSON hooks were installed elsewhere. */
    char *copy = strdup(text);
    cJSON_free(text);
    return copy;
}

/* ------------------------------------------------------------------ files */

#define CONFIG_MAX_BYTES (1 << 20)

forge_status forge_config_parse_bytes(forge_model_config *out, const char *data, size_t len,
                                      const char *source_name) {
    const char *src = source_name ? source_name : "<config>";
    if (!out || (!data && len))
        return forge_error(FORGE_ERR_ARG, "%s: forge_config_parse_bytes: NULL argument", src);
    if (len > CONFIG_MAX_BYTES)
        return forge_error(FORGE_ERR_CONFIG, "%s: larger than %d bytes; expected a small JSON config",
                           src, CONFIG_MAX_BYTES);
    const char *nul = len ? memchr(data, '\0', len) : NULL;
    if (nul)
        return forge_error(FORGE_ERR_CONFIG, "%s: NUL byte at offset %zu; expected JSON text", src,
                           (size_t)(nul - data));
    char *text = malloc(len + 1);
    if (!text) return forge_error(FORGE_ERR_OOM, "%s: out of memory parsing config", src);
    if (len) memcpy(text, data, len);
    text[len] = '\0';
    forge_status s = forge_config_parse(out, text, src);
    free(text);
    return s;
}

forge_status forge_config_load_file(forge_model_config *out, const char *path) {
    if (!out || !path) return forge_error(FORGE_ERR_ARG, "forge_config_load_file: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f) return forge_error(FORGE_ERR_IO, "%s: cannot open config: %s", path, strerror(errno));
    char *buf = malloc(CONFIG_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        return forge_error(FORGE_ERR_OOM, "%s: out of memory reading config", path);
    }
    /* one byte past the limit, so an over-long file is seen as one */
    size_t n = fread(buf, 1, CONFIG_MAX_BYTES + 1, f);
    int read_err = ferror(f);
    fclose(f);
    if (read_err) {
        free(buf);
        return forge_error(FORGE_ERR_IO, "%s: read error", path);
    }
    forge_status s = forge_config_parse_bytes(out, buf, n, path);
    free(buf);
    return s;
}

static int is_bare_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || strchr(s, '/')) return 0;
    return !(n >= 5 && strcmp(s + n - 5, ".json") == 0);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* ", " separated list of the *.json names in dir, sorted, for a hint. */
static void list_configs(const char *dir, char *out, size_t cap) {
    out[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) return;
    char *names[128];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 128) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".json") == 0) {
            names[n] = strndup(e->d_name, len - 5);
            if (names[n]) n++;
        }
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        int w = snprintf(out + used, cap - used, "%s%s", i ? ", " : "", names[i]);
        if (w > 0 && (size_t)w < cap - used) used += (size_t)w;
        free(names[i]);
    }
}

forge_status forge_config_resolve(forge_model_config *out, const char *name_or_path,
                                  const char *configs_dir) {
    if (!out || !name_or_path)
        return forge_error(FORGE_ERR_ARG, "forge_config_resolve: NULL argument");
    if (!is_bare_name(name_or_path)) return forge_config_load_file(out, name_or_path);
    const char *dir = configs_dir ? configs_dir : "configs";
    char path[4096];
    int w = snprintf(path, sizeof path, "%s/%s.json", dir, name_or_path);
    if (w < 0 || (size_t)w >= sizeof path)
        return forge_error(FORGE_ERR_ARG, "config name \"%s\" is too long", name_or_path);
    if (access(path, F_OK) != 0) {
        char avail[1024];
        list_configs(dir, avail, sizeof avail);
        return forge_error(FORGE_ERR_IO, "config \"%s\": no file %s (available in %s: %s)",
                           name_or_path, path, dir, avail[0] ? avail : "none");
    }
    return forge_config_load_file(out, path);
}
