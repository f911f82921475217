/* options.c: defaults, names and parsers of the runtime options. */
#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void forge_runtime_options_default(forge_runtime_options *o) {
    memset(o, 0, sizeof *o);
    o->device = FORGE_DEVICE_CPU;
    o->matmul = FORGE_MATMUL_FP32;
    o->attention = FORGE_ATTENTION_FLASH;
    o->precision = FORGE_TRAIN_FP32;
    o->pdl = 0;
}

static const char *const DEVICE_NAMES[FORGE_DEVICE_COUNT] = {"cpu", "cuda"};
static const char *const MATMUL_NAMES[FORGE_MATMUL_COUNT] = {"fp32", "tf32", "cublas", "auto", "simt64",
                                                             "simt128"};
static const char *const ATTENTION_NAMES[FORGE_ATTENTION_COUNT] = {"flash", "materialised"};
static const char *const PRECISION_NAMES[FORGE_TRAIN_PRECISION_COUNT] = {"fp32", "bf16"};

/* index of s in names[0..n), or -1 */
static int find_name(const char *s, const char *const *names, int n) {
    for (int i = 0; s && i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

/* "expected \"a\", \"b\" or \"c\"" */
static forge_status bad_value(const char *what, const char *s, const char *const *names, int n) {
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; i < n && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s\"%s\"", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                                 names[i]);
    return forge_error(FORGE_ERR_ARG, "%s: \"%s\" is not valid: expected %s", what, s ? s : "(null)", list);
}

forge_status forge_device_parse(const char *what, const char *s, forge_device_kind *kind, int *index) {
    *index = 0;
    if (s && strncmp(s, "cuda:", 5) == 0) {
        char *end;
        errno = 0;
        long v = strtol(s + 5, &end, 10);
        if (errno || *end || end == s + 5 || v < 0 || v > 1023)
            return forge_error(FORGE_ERR_ARG, "%s: \"%s\": expected cuda:N with N a device index in [0, 1023]",
                               what, s);
        *kind = FORGE_DEVICE_CUDA;
        *index = (int)v;
        return FORGE_OK;
    }
    int i = find_name(s, DEVICE_NAMES, FORGE_DEVICE_COUNT);
    if (i < 0) {
        static const char *const shown[] = {"cpu", "cuda", "cuda:N"};
        return bad_value(what, s, shown, 3);
    }
    *kind = (forge_device_kind)i;
    return FORGE_OK;
}

forge_status forge_matmul_mode_parse(const char *what, const char *s, forge_matmul_mode *out) {
    int i = s && strcmp(s, "simt") == 0 ? FORGE_MATMUL_FP32 : find_name(s, MATMUL_NAMES, FORGE_MATMUL_COUNT);
    if (i < 0) return bad_value(what, s, MATMUL_NAMES, FORGE_MATMUL_COUNT);
    *out = (forge_matmul_mode)i;
    return FORGE_OK;
}

forge_status forge_attention_kind_parse(const char *what, const char *s, forge_attention_kind *out) {
    int i = find_name(s, ATTENTION_NAMES, FORGE_ATTENTION_COUNT);
    if (i < 0) return bad_value(what, s, ATTENTION_NAMES, FORGE_ATTENTION_COUNT);
    *out = (forge_attention_kind)i;
    return FORGE_OK;
}

forge_status forge_train_precision_parse(const char *what, const char *s, forge_train_precision *out) {
    int i = find_name(s, PRECISION_NAMES, FORGE_TRAIN_PRECISION_COUNT);
    if (i < 0) return bad_value(what, s, PRECISION_NAMES, FORGE_TRAIN_PRECISION_COUNT);
    *out = (forge_train_precision)i;
    return FORGE_OK;
}

const char *forge_device_name(forge_device_kind k) {
    return (unsigned)k < FORGE_DEVICE_COUNT ? DEVICE_NAMES[k] : "?";
}
const char *forge_matmul_mode_name(forge_matmul_mode m) {
    return (unsigned)m < FORGE_MATMUL_COUNT ? MATMUL_NAMES[m] : "?";
}
const char *forge_attention_kind_name(forge_attention_kind a) {
    return (unsigned)a < FORGE_ATTENTION_COUNT ? ATTENTION_NAMES[a] : "?";
}
const char *forge_train_precision_name(forge_train_precision p) {
    return (unsigned)p < FORGE_TRAIN_PRECISION_COUNT ? PRECISION_NAMES[p] : "?";
}
