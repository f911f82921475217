/*
 * options.h: the runtime options: which device runs the ops and how.
 *
 * The CLI builds one forge_runtime_options from its flags and passes it down:
 * forge_backend_create(&be, kind, &options) keeps a copy in the backend
 * (be->options), where the kernels' launchers and the model read it. Nothing
 * below the CLI reads the environment: a setting reaches a kernel only as an
 * argument. Defaults (forge_runtime_options_default) are the exact fp32
 * reference configuration.
 */
#ifndef FORGE_OPTIONS_H
#define FORGE_OPTIONS_H

#include "../base/status.h"

typedef enum {
    FORGE_DEVICE_CPU = 0,
    FORGE_DEVICE_CUDA,
    FORGE_DEVICE_COUNT
} forge_device_kind;

/* How the CUDA backend computes the matmul ops (the CPU backend has one path). */
typedef enum {
    FORGE_MATMUL_FP32 = 0,   /* forge's exact fp32 SIMT kernel, tile chosen per shape: the default */
    FORGE_MATMUL_TF32,       /* forge's tf32 tensor-core kernels (operands rounded to 10 mantissa bits) */
    FORGE_MATMUL_CUBLAS,     /* cuBLAS in pedantic fp32: the reference path (not in a CUBLAS=0 build) */
    FORGE_MATMUL_AUTO,       /* per shape the faster of FP32 and CUBLAS, measured once and cached */
    FORGE_MATMUL_FP32_TILE64,  /* FP32 with its 64 x 64 tile forced (tests cover both tiles) */
    FORGE_MATMUL_FP32_TILE128, /* FP32 with its 128 x 128 tile forced */
    FORGE_MATMUL_COUNT
} forge_matmul_mode;

/* Which attention op the model calls. */
typedef enum {
    FORGE_ATTENTION_FLASH = 0,    /* fused: the (T, T) scores never reach memory; the default */
    FORGE_ATTENTION_MATERIALISED, /* the reference: (B, NH, T, T) probabilities saved for the backward */
    FORGE_ATTENTION_COUNT
} forge_attention_kind;

/* The precision of the training step (docs/mixed-precision.md): fp32 (exact, the reference) or bf16 (fp32 masters,
 * moments and weight gradients; bf16 working weights, activations and activation gradients). */
typedef enum {
    FORGE_TRAIN_FP32 = 0,
    FORGE_TRAIN_BF16,
    FORGE_TRAIN_PRECISION_COUNT
} forge_train_precision;

typedef struct {
    forge_device_kind device;
    int device_index;             /* which GPU (CUDA); 0 = the first */
    int threads;                  /* CPU: OpenMP threads; <= 0 = OpenMP's default */
    int cpu_reference;            /* CPU: plain single-threaded loops, the oracle the tests compare against */
    forge_matmul_mode matmul;
    forge_attention_kind attention;
    forge_train_precision precision;
    const char *cache_dir;        /* where measured choices are cached (matmul auto); NULL: not cached */
    const char *matmul_cache_path;/* the matmul auto table's file itself, overriding cache_dir's; or NULL */
    int pdl;                      /* CUDA: the bf16 step's kernels launch with programmatic dependent launch, each
                                     starting under the previous one's tail (backend/cuda/pdl.cuh; the same bits);
                                     off by default: on the H200 it measured 0.977x at gpt2-124m (docs/results.md);
                                     --pdl turns it on for A/B. */
} forge_runtime_options;

void forge_runtime_options_default(forge_runtime_options *o);

/* Parsers for the CLI's values; on failure the message names `what` (the flag) and the valid values. */
/* "cpu", "cuda" or "cuda:N" (device index N) */
forge_status forge_device_parse(const char *what, const char *s, forge_device_kind *kind, int *index);
/* "fp32" (alias "simt"), "tf32", "cublas", "auto", "simt64", "simt128" */
forge_status forge_matmul_mode_parse(const char *what, const char *s, forge_matmul_mode *out);
/* "flash", "materialised" */
forge_status forge_attention_kind_parse(const char *what, const char *s, forge_attention_kind *out);
/* "fp32", "bf16" */
forge_status forge_train_precision_parse(const char *what, const char *s, forge_train_precision *out);

const char *forge_device_name(forge_device_kind k);
const char *forge_matmul_mode_name(forge_matmul_mode m);
const char *forge_attention_kind_name(forge_attention_kind a);
const char *forge_train_precision_name(forge_train_precision p);

#endif
