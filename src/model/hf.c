/*
 * hf.c: Hugging Face config.json <-> forge_model_config (see hf.h for what is
 * mapped and why the rest is refused).
 *
 * HF configs carry many keys that do not change the function a model computes
 * (dropout rates, token ids, generation defaults, transformers' version), so
 * unknown keys are ignored here, unlike forge's own strict config parser; the
 * keys that do change it are all read, and a value forge cannot reproduce is an
 * error naming the file and the key.
 */
#include "hf.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ out */

int forge_hf_expressible(const forge_model_config *c, char *why, size_t cap) {
    char tmp[8];
    if (!why || !cap) {
        why = tmp;
        cap = sizeof tmp;
    }
    why[0] = '\0';
    const char *fam = forge_family_name(c->family);
    if (c->family == FORGE_FAMILY_GPT2) {
        /* GPT2LMHeadModel: LayerNorm with bias, learned positions, GELU (tanh) MLP, biases everywhere, MHA */
        if (c->norm != FORGE_NORM_LAYERNORM)
            snprintf(why, cap, "family \"%s\" with \"norm\" \"%s\": GPT2LMHeadModel has LayerNorm only", fam,
                     forge_norm_name(c->norm));
        else if (c->positions != FORGE_POSITIONS_LEARNED)
            snprintf(why, cap, "family \"%s\" with \"positions\" \"%s\": GPT2LMHeadModel has learned positions only",
                     fam, forge_positions_name(c->positions));
        else if (c->activation != FORGE_ACTIVATION_GELU)
            snprintf(why, cap, "family \"%s\" with \"activation\" \"%s\": GPT2LMHeadModel's MLP is c_fc, GELU, c_proj",
                     fam, forge_activation_name(c->activation));
        else if (!c->bias)
            snprintf(why, cap, "family \"%s\" with \"bias\" false: GPT2LMHeadModel's linear layers all have biases",
                     fam);
        else if (c->n_kv_heads != c->n_heads)
            snprintf(why, cap, "family \"%s\" with \"n_kv_heads\" %d < \"n_heads\" %d: GPT2LMHeadModel has no "
                     "grouped-query attention", fam, c->n_kv_heads, c->n_heads);
        return why[0] == '\0';
    }
    /* LlamaForCausalLM: RMSNorm without bias, RoPE, SwiGLU; one bias flag per attention and per MLP */
    if (c->norm != FORGE_NORM_RMSNORM)
        snprintf(why, cap, "family \"%s\" with \"norm\" \"%s\": LlamaForCausalLM has RMSNorm only", fam,
                 forge_norm_name(c->norm));
    else if (c->positions != FORGE_POSITIONS_ROPE)
        snprintf(why, cap, "family \"%s\" with \"positions\" \"%s\": LlamaForCausalLM has RoPE only", fam,
                 forge_positions_name(c->positions));
    else if (c->activation != FORGE_ACTIVATION_SWIGLU)
        snprintf(why, cap, "family \"%s\" with \"activation\" \"%s\": LlamaForCausalLM's MLP is SwiGLU", fam,
                 forge_activation_name(c->activation));
    return why[0] == '\0';
}

/* The shortest decimal that reads back as the same float, so 1e-5f is written 1e-05, not 9.99999974738e-06. */
static double short_float(float f) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

forge_status forge_hf_config_to_json(const forge_model_config *c, int eot_id, char **out) {
    *out = NULL;
    char why[256];
    if (!forge_hf_expressible(c, why, sizeof why))
        return forge_error(FORGE_ERR_UNSUPPORTED, "config %s has no Hugging Face equivalent: %s", c->name, why);
    cJSON *o = cJSON_CreateObject();
    cJSON *arch = o ? cJSON_AddArrayToObject(o, "architectures") : NULL;
    int gpt2 = c->family == FORGE_FAMILY_GPT2;
    int ok = arch && cJSON_AddItemToArray(arch, cJSON_CreateString(gpt2 ? "GPT2LMHeadModel" : "LlamaForCausalLM"));
#define NUM(k, v) ok = ok && cJSON_AddNumberToObject(o, k, v) != NULL
#define STR(k, v) ok = ok && cJSON_AddStringToObject(o, k, v) != NULL
#define BOOL(k, v) ok = ok && cJSON_AddBoolToObject(o, k, v) != NULL
    STR("model_type", gpt2 ? "gpt2" : "llama");
    NUM("vocab_size", c->vocab_size);
    if (gpt2) {
        NUM("n_positions", c->context_length);
        NUM("n_ctx", c->context_length); /* older transformers read n_ctx */
        NUM("n_embd", c->d_model);
        NUM("n_layer", c->n_layers);
        NUM("n_head", c->n_heads);
        NUM("n_inner", c->ffn_hidden);
        STR("activation_function", "gelu_new"); /* the tanh approximation forge's GELU is */
        NUM("layer_norm_epsilon", short_float(c->norm_eps));
        /* forge has no dropout: HF's defaults (0.1) would make a fine-tune there a different computation */
        NUM("resid_pdrop", 0.0);
        NUM("embd_pdrop", 0.0);
        NUM("attn_pdrop", 0.0);
        BOOL("scale_attn_weights", 1);
        BOOL("scale_attn_by_inverse_layer_idx", 0);
        BOOL("reorder_and_upcast_attn", 0);
    } else {
        NUM("hidden_size", c->d_model);
        NUM("intermediate_size", c->ffn_hidden);
        NUM("num_hidden_layers", c->n_layers);
        NUM("num_attention_heads", c->n_heads);
        NUM("num_key_value_heads", c->n_kv_heads);
        NUM("head_dim", c->d_model / c->n_heads);
        STR("hidden_act", "silu");
        NUM("max_position_embeddings", c->context_length);
        NUM("rms_norm_eps", short_float(c->norm_eps));
        NUM("rope_theta", short_float(c->rope_theta));
        BOOL("attention_bias", c->bias);
        BOOL("mlp_bias", c->bias);
        NUM("attention_dropout", 0.0);
        NUM("pretraining_tp", 1);
    }
    NUM("initializer_range", short_float(c->init_std));
    BOOL("tie_word_embeddings", c->tied_embeddings);
    if (eot_id >= 0) {
        NUM("bos_token_id", eot_id);
        NUM("eos_token_id", eot_id);
    } else {
        ok = ok && cJSON_AddNullToObject(o, "bos_token_id") && cJSON_AddNullToObject(o, "eos_token_id");
    }
    STR("torch_dtype", "float32"); /* forge keeps fp32 masters; model.safetensors holds F32 */
    STR("forge_config_name", c->name);
#undef NUM
#undef STR
#undef BOOL
    char *text = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) return forge_error(FORGE_ERR_OOM, "config %s: out of memory writing config.json", c->name);
    *out = strdup(text);
    cJSON_free(text);
    return *out ? FORGE_OK : forge_error(FORGE_ERR_OOM, "config %s: out of memory writing config.json", c->name);
}

/* ------------------------------------------------------------------- in */

/* HF configs are a few KB; the cap keeps a wrong file (a weights file given as config.json) from being parsed. */
#define HF_CONFIG_MAX_BYTES (1 << 20)

/* A key that may be absent or null (then the default holds), else must have the type. */
static const cJSON *item(const cJSON *root, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

static forge_status get_int(const char *src, const cJSON *root, const char *key, int required, int min, int *out) {
    const cJSON *it = item(root, key);
    if (!it) {
        if (required) return forge_error(FORGE_ERR_CONFIG, "%s: missing key \"%s\" (an integer >= %d)", src, key, min);
        return FORGE_OK;
    }
    double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!isfinite(v) || v != floor(v) || v < min || v > INT_MAX)
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be an integer in [%d, %d]", src, key, min, INT_MAX);
    *out = (int)v;
    return FORGE_OK;
}

static forge_status get_float(const char *src, const cJSON *root, const char *key, float *out) {
    const cJSON *it = item(root, key);
    if (!it) return FORGE_OK;
    double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!isfinite(v) || !isfinite((float)v))
        return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be a finite number", src, key);
    *out = (float)v;
    return FORGE_OK;
}

static forge_status get_bool(const char *src, const cJSON *root, const char *key, int *out) {
    const cJSON *it = item(root, key);
    if (!it) return FORGE_OK;
    if (!cJSON_IsBool(it)) return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be true or false", src, key);
    *out = cJSON_IsTrue(it) ? 1 : 0;
    return FORGE_OK;
}

static forge_status get_str(const char *src, const cJSON *root, const char *key, const char **out) {
    const cJSON *it = item(root, key);
    if (!it) return FORGE_OK;
    if (!cJSON_IsString(it)) return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be a string", src, key);
    *out = it->valuestring;
    return FORGE_OK;
}

/* A boolean key forge can only reproduce with one value (absent means HF's default, which is that value). */
static forge_status require_bool(const char *src, const cJSON *root, const char *key, int want, const char *why) {
    int v = want;
    FORGE_TRY(get_bool(src, root, key, &v));
    if (v != want)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: key \"%s\" is %s: forge supports only %s (%s)", src, key,
                           v ? "true" : "false", want ? "true" : "false", why);
    return FORGE_OK;
}

/* "architectures", when present, must name the causal-LM class (or its base model) of the model type. */
static forge_status check_architectures(const char *src, const cJSON *root, const char *lm, const char *base) {
    const cJSON *a = item(root, "architectures");
    if (!a) return FORGE_OK;
    if (!cJSON_IsArray(a)) return forge_error(FORGE_ERR_CONFIG, "%s: key \"architectures\" must be an array", src);
    for (const cJSON *it = a->child; it; it = it->next) {
        if (!cJSON_IsString(it))
            return forge_error(FORGE_ERR_CONFIG, "%s: key \"architectures\" must hold strings", src);
        if (strcmp(it->valuestring, lm) != 0 && strcmp(it->valuestring, base) != 0)
            return forge_error(FORGE_ERR_UNSUPPORTED,
                               "%s: key \"architectures\" names \"%.60s\": forge loads only %s (or %s) weights", src,
                               it->valuestring, lm, base);
    }
    return FORGE_OK;
}

static forge_status parse_gpt2(forge_model_config *c, const cJSON *root, const char *src) {
    FORGE_TRY(check_architectures(src, root, "GPT2LMHeadModel", "GPT2Model"));
    c->family = FORGE_FAMILY_GPT2;
    c->norm = FORGE_NORM_LAYERNORM;
    c->positions = FORGE_POSITIONS_LEARNED;
    c->activation = FORGE_ACTIVATION_GELU;
    c->bias = 1;
    c->tied_embeddings = 1;
    c->norm_eps = 1e-5f;
    c->init_std = 0.02f;
    c->rope_theta = 10000.0f; /* unused with learned positions; validate() wants it positive */
    FORGE_TRY(get_int(src, root, "vocab_size", 1, 2, &c->vocab_size));
    c->context_length = 0;
    FORGE_TRY(get_int(src, root, "n_ctx", 0, 1, &c->context_length)); /* older configs */
    FORGE_TRY(get_int(src, root, "n_positions", c->context_length == 0, 1, &c->context_length));
    FORGE_TRY(get_int(src, root, "n_embd", 1, 1, &c->d_model));
    FORGE_TRY(get_int(src, root, "n_layer", 1, 1, &c->n_layers));
    FORGE_TRY(get_int(src, root, "n_head", 1, 1, &c->n_heads));
    c->n_kv_heads = c->n_heads;
    c->ffn_hidden = 0;
    FORGE_TRY(get_int(src, root, "n_inner", 0, 1, &c->ffn_hidden));
    if (c->ffn_hidden == 0) {
        if (c->d_model > INT_MAX / 4)
            return forge_error(FORGE_ERR_CONFIG, "%s: key \"n_embd\" %d is too large for n_inner = 4 * n_embd", src,
                               c->d_model);
        c->ffn_hidden = 4 * c->d_model; /* HF's default for a null n_inner */
    }
    const char *act = "gelu_new";
    FORGE_TRY(get_str(src, root, "activation_function", &act));
    if (strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: key \"activation_function\" is \"%.40s\": forge's GELU is the tanh approximation, "
                           "expected \"gelu_new\" or \"gelu_pytorch_tanh\"",
                           src, act);
    FORGE_TRY(get_float(src, root, "layer_norm_epsilon", &c->norm_eps));
    FORGE_TRY(get_float(src, root, "initializer_range", &c->init_std));
    FORGE_TRY(get_bool(src, root, "tie_word_embeddings", &c->tied_embeddings));
    FORGE_TRY(require_bool(src, root, "scale_attn_weights", 1, "attention scores scaled by 1/sqrt(head size)"));
    FORGE_TRY(require_bool(src, root, "scale_attn_by_inverse_layer_idx", 0, "no per-layer attention scaling"));
    FORGE_TRY(require_bool(src, root, "add_cross_attention", 0, "a decoder-only model"));
    return FORGE_OK;
}

/* RoPE parameters: rope_theta at the top level (transformers 4) and/or a rope_parameters / rope_scaling object
 * (transformers 5 moves rope_theta there); only the unscaled "default" rotation is forge's. */
static forge_status parse_rope(forge_model_config *c, const cJSON *root, const char *src) {
    FORGE_TRY(get_float(src, root, "rope_theta", &c->rope_theta));
    static const char *const keys[] = {"rope_scaling", "rope_parameters"};
    for (int k = 0; k < 2; k++) {
        const cJSON *r = item(root, keys[k]);
        if (!r) continue;
        if (!cJSON_IsObject(r))
            return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be an object or null", src, keys[k]);
        const char *type = "default";
        FORGE_TRY(get_str(src, r, "rope_type", &type));
        if (!item(r, "rope_type")) FORGE_TRY(get_str(src, r, "type", &type));
        if (strcmp(type, "default") != 0)
            return forge_error(FORGE_ERR_UNSUPPORTED,
                               "%s: key \"%s\" has rope_type \"%.40s\": forge's RoPE has no frequency scaling, "
                               "expected \"default\" (or no %s)",
                               src, keys[k], type, keys[k]);
        float partial = 1.0f;
        FORGE_TRY(get_float(src, r, "partial_rotary_factor", &partial));
        if (partial != 1.0f)
            return forge_error(FORGE_ERR_UNSUPPORTED,
                               "%s: key \"%s\" has partial_rotary_factor %g: forge rotates whole heads, expected 1",
                               src, keys[k], (double)partial);
        char what[64];
        snprintf(what, sizeof what, "%s.rope_theta", keys[k]);
        const cJSON *t = item(r, "rope_theta");
        if (t && !(cJSON_IsNumber(t) && isfinite(t->valuedouble)))
            return forge_error(FORGE_ERR_CONFIG, "%s: key \"%s\" must be a finite number", src, what);
        if (t) c->rope_theta = (float)t->valuedouble;
    }
    float partial = 1.0f;
    FORGE_TRY(get_float(src, root, "partial_rotary_factor", &partial));
    if (partial != 1.0f)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: key \"partial_rotary_factor\" is %g: forge rotates whole heads, expected 1", src,
                           (double)partial);
    return FORGE_OK;
}

static forge_status parse_llama(forge_model_config *c, const cJSON *root, const char *src) {
    FORGE_TRY(check_architectures(src, root, "LlamaForCausalLM", "LlamaModel"));
    c->family = FORGE_FAMILY_LLAMA;
    c->norm = FORGE_NORM_RMSNORM;
    c->positions = FORGE_POSITIONS_ROPE;
    c->activation = FORGE_ACTIVATION_SWIGLU;
    c->tied_embeddings = 0;
    c->norm_eps = 1e-6f;       /* LlamaConfig's defaults */
    c->rope_theta = 10000.0f;
    c->init_std = 0.02f;
    c->context_length = 2048;
    FORGE_TRY(get_int(src, root, "vocab_size", 1, 2, &c->vocab_size));
    FORGE_TRY(get_int(src, root, "hidden_size", 1, 1, &c->d_model));
    FORGE_TRY(get_int(src, root, "intermediate_size", 1, 1, &c->ffn_hidden));
    FORGE_TRY(get_int(src, root, "num_hidden_layers", 1, 1, &c->n_layers));
    FORGE_TRY(get_int(src, root, "num_attention_heads", 1, 1, &c->n_heads));
    c->n_kv_heads = c->n_heads;
    FORGE_TRY(get_int(src, root, "num_key_value_heads", 0, 1, &c->n_kv_heads));
    FORGE_TRY(get_int(src, root, "max_position_embeddings", 0, 1, &c->context_length));
    int head_dim = 0;
    FORGE_TRY(get_int(src, root, "head_dim", 0, 1, &head_dim));
    if (head_dim && (int64_t)head_dim * c->n_heads != c->d_model)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: key \"head_dim\" is %d but hidden_size / num_attention_heads = %d / %d: forge's head "
                           "size is hidden_size / num_attention_heads",
                           src, head_dim, c->d_model, c->n_heads);
    const char *act = "silu";
    FORGE_TRY(get_str(src, root, "hidden_act", &act));
    if (strcmp(act, "silu") != 0)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: key \"hidden_act\" is \"%.40s\": forge's gated MLP is SwiGLU, expected \"silu\"", src,
                           act);
    int attn_bias = 0, mlp_bias = 0;
    FORGE_TRY(get_bool(src, root, "attention_bias", &attn_bias));
    FORGE_TRY(get_bool(src, root, "mlp_bias", &mlp_bias));
    if (attn_bias != mlp_bias)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: keys \"attention_bias\" (%s) and \"mlp_bias\" (%s) differ: forge has one bias flag "
                           "for every linear layer, expected both true or both false",
                           src, attn_bias ? "true" : "false", mlp_bias ? "true" : "false");
    c->bias = attn_bias;
    FORGE_TRY(get_float(src, root, "rms_norm_eps", &c->norm_eps));
    FORGE_TRY(get_float(src, root, "initializer_range", &c->init_std));
    FORGE_TRY(get_bool(src, root, "tie_word_embeddings", &c->tied_embeddings));
    return parse_rope(c, root, src);
}

forge_status forge_hf_config_parse(forge_model_config *out, const char *json, size_t len, const char *src,
                                   const char *name) {
    if (!src) src = "config.json";
    if (!out || (!json && len)) return forge_error(FORGE_ERR_ARG, "%s: forge_hf_config_parse: NULL argument", src);
    if (len && memchr(json, '\0', len))
        return forge_error(FORGE_ERR_CONFIG, "%s: holds a NUL byte; expected JSON text", src);
    if (len > HF_CONFIG_MAX_BYTES)
        return forge_error(FORGE_ERR_CONFIG, "%s: larger than %d bytes; expected a small JSON config", src,
                           HF_CONFIG_MAX_BYTES);
    /* cJSON gets a NUL-terminated copy: given a length it may read the byte past the text (safetensors.c says
     * when), and the input here need not be terminated. */
    char *text = malloc(len + 1);
    if (!text) return forge_error(FORGE_ERR_OOM, "%s: out of memory", src);
    if (len) memcpy(text, json, len);
    text[len] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    long at = end && end >= text && end <= text + len ? (long)(end - text) : -1;
    free(text);
    if (!root) return forge_error(FORGE_ERR_CONFIG, "%s: not valid JSON (error at byte %ld)", src, at);
    forge_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", name && name[0] ? name : "hf-model");
    forge_status s = FORGE_OK;
    const char *type = NULL;
    if (!cJSON_IsObject(root)) s = forge_error(FORGE_ERR_CONFIG, "%s: expected a JSON object at the top level", src);
    if (s == FORGE_OK) s = get_str(src, root, "model_type", &type);
    if (s == FORGE_OK && !type)
        s = forge_error(FORGE_ERR_CONFIG, "%s: missing key \"model_type\" (\"gpt2\" or \"llama\")", src);
    if (s == FORGE_OK && type) {
        if (strcmp(type, "gpt2") == 0)
            s = parse_gpt2(&c, root, src);
        else if (strcmp(type, "llama") == 0)
            s = parse_llama(&c, root, src);
        else
            s = forge_error(FORGE_ERR_UNSUPPORTED,
                            "%s: key \"model_type\" is \"%.40s\": forge maps \"gpt2\" (GPT2LMHeadModel) and \"llama\" "
                            "(LlamaForCausalLM) only",
                            src, type);
    }
    cJSON_Delete(root);
    if (s == FORGE_OK) s = forge_config_validate(&c, src);
    if (s == FORGE_OK) *out = c;
    return s;
}

/* ---------------------------------------------------------------- dtypes */

/* IEEE half -> float, exactly (every half is a float): subnormals are renormalised. */
static float half_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* inf, NaN */
    } else if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

forge_status forge_hf_to_f32(float *dst, const void *src, size_t n, const char *dtype) {
    const unsigned char *b = src;
    if (strcmp(dtype, "F32") == 0) {
        memcpy(dst, src, n * sizeof(float));
    } else if (strcmp(dtype, "BF16") == 0 || strcmp(dtype, "F16") == 0) {
        int bf = dtype[0] == 'B';
        for (size_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(b[2 * i] | (b[2 * i + 1] << 8)); /* little-endian, maybe unaligned */
            if (bf) {
                uint32_t bits = (uint32_t)h << 16;
                memcpy(&dst[i], &bits, sizeof bits);
            } else {
                dst[i] = half_to_f32(h);
            }
        }
    } else {
        return forge_error(FORGE_ERR_UNSUPPORTED, "dtype %s: forge loads F32, BF16 and F16 weights (widened to fp32)",
                           dtype);
    }
    return FORGE_OK;
}
