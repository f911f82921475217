/*
 * forge.c: the command-line interface.
 *
 *   forge train     [options]          train a model (no options: the demo job)
 *   forge sample    --ckpt DIR [...]   generate text from a checkpoint
 *   forge tokenize  --tokenizer DIR --out DIR FILES...   text -> token shards
 *   forge tokenizer train --vocab N --out DIR FILES...   train a BPE vocabulary
 *   forge bench     [train|matmul|ops|gemm|gemm-epi|attention] [--device cpu|cuda]   benchmarks
 *   forge init      --config C --out DIR [--seed S]      write an initialised checkpoint
 *
 * This is the only place that prints errors and chooses exit codes: 2 for bad
 * usage or config, 1 for other failures, 130 when interrupted.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/backend/backend.h"
#include "../src/bench/attention_bench.h"
#include "../src/bench/bench.h"
#include "../src/bench/bench_ops.h"
#include "../src/bench/bench_train.h"
#include "../src/bench/gemm_bench.h"
#include "../src/bench/harness.h"
#include "../src/base/status.h"
#include "../src/data/corpus.h"
#include "../src/data/tokenize.h"
#include "../src/data/tokenizer.h"
#include "../src/model/hf.h"
#include "../src/model/safetensors.h"
#include "../src/runtime/comm.h"
#include "../src/train/checkpoint.h"
#include "../src/train/evaluate.h"
#include "../src/train/plot.h"
#include "../src/train/generate.h"
#include "../src/train/trainer.h"
#include "../src/base/fs.h"

/* ---- option parsing: --name value or --name=value -------------------------- */

typedef struct {
    int argc;
    char **argv;
    int i;
    /* the positional arguments (the input files of tokenize, tokenizer train): they are compacted to the front of
     * argv itself (positional = argv), which holds any number of them; the parse only reads forward of argv[i], and
     * n_positional <= i, so a compacted entry never overwrites one still to be read */
    const char **positional;
    int n_positional;
} args;

static int fail(forge_status s) {
    fprintf(stderr, "forge: %s%s\n", s == FORGE_ERR_INTERRUPTED ? "" : "error: ", forge_error_message());
    return forge_status_exit_code(s);
}

static forge_status usage_error(const char *cmd, const char *fmt, const char *what) {
    forge_error(FORGE_ERR_ARG, "%s: %s%s (see `forge %s --help`)", cmd, fmt, what ? what : "", cmd);
    return FORGE_ERR_ARG;
}

/* Returns 1 and sets *value when argv[i] is --name (value in the next word or after '='). */
static int opt_match(args *a, const char *name, const char **value, forge_status *err) {
    const char *arg = a->argv[a->i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0) return 0;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0') return 0;
    if (a->i + 1 >= a->argc) {
        *err = forge_error(FORGE_ERR_ARG, "option %s needs a value", name);
        return 1;
    }
    *value = a->argv[++a->i];
    return 1;
}

static forge_status parse_int(const char *opt, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi)
        return forge_error(FORGE_ERR_ARG, "%s: \"%s\" is not an integer in [%ld, %ld]", opt, v, lo, hi);
    *out = x;
    return FORGE_OK;
}

static forge_status parse_float(const char *opt, const char *v, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end || end == v || !(x >= lo && x <= hi))
        return forge_error(FORGE_ERR_ARG, "%s: \"%s\" is not a number in [%g, %g]", opt, v, lo, hi);
    *out = (float)x;
    return FORGE_OK;
}

#define INT_OPT(name, field, lo, hi)                                  \
    if (opt_match(&a, name, &v, &s)) {                                \
        long x_ = 0;                                                  \
        if (s == FORGE_OK) s = parse_int(name, v, lo, hi, &x_);       \
        if (s == FORGE_OK) field = x_;                                \
        continue;                                                     \
    }
#define FLOAT_OPT(name, field, lo, hi)                                \
    if (opt_match(&a, name, &v, &s)) {                                \
        if (s == FORGE_OK) s = parse_float(name, v, lo, hi, &field);  \
        continue;                                                     \
    }
#define STR_OPT(name, field)                                          \
    if (opt_match(&a, name, &v, &s)) {                                \
        if (s == FORGE_OK) field = v;                                 \
        continue;                                                     \
    }

static int wants_help(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    return 0;
}

/* ---- runtime options: the flags every command that runs ops shares ------------------ */

/* The flags' values as typed; runtime_options_build turns them into a forge_runtime_options. */
typedef struct {
    const char *device, *matmul, *attention, *precision, *matmul_cache;
    long threads;
    int pdl;
} runtime_flags;

#define RUNTIME_HELP                                                                                       \
    "  --device cpu|cuda|cuda:N  where the ops run [cpu]\n"                                                 \
    "  --matmul MODE        cuda GEMM path [fp32]: fp32 = forge's exact fp32 kernel; tf32 = forge's tf32\n"  \
    "                       tensor-core kernels (not exact fp32); cublas = cuBLAS pedantic fp32; auto = per\n" \
    "                       shape the faster of fp32 and cublas, measured once, cached, printed at start\n"   \
    "  --attention flash|materialised  the fused op (default) or the reference with (B,NH,T,T) scores\n"    \
    "  --precision P        the step's precision: fp32 (exact), tf32 (fp32 with tf32 GEMMs) or bf16\n"      \
    "                       (docs/mixed-precision.md) [bf16 on cuda, fp32 on cpu; a resumed run: its\n"  \
    "                       checkpoint's]\n"                        \
    "  --threads N          CPU threads [all cores]\n"                                                      \
    "  --pdl                cuda: launch the bf16 step's kernels with programmatic dependent launch (each\n"  \
    "                       starts under the previous one's tail; same results; off: it measured slower)\n" \
    "  --matmul-cache FILE  the auto matmul table's file [$XDG_CACHE_HOME/forge or ~/.cache/forge]\n"

/* Matches one runtime flag at a->argv[a->i]: 1 if it was one (its value or error recorded). */
static int runtime_flag(args *a, runtime_flags *f, forge_status *s) {
    const char *v = NULL;
    if (opt_match(a, "--device", &v, s)) return f->device = v, 1;
    if (opt_match(a, "--matmul-cache", &v, s)) return f->matmul_cache = v, 1;
    if (opt_match(a, "--matmul", &v, s)) return f->matmul = v, 1;
    if (opt_match(a, "--attention", &v, s)) return f->attention = v, 1;
    if (opt_match(a, "--precision", &v, s)) return f->precision = v, 1;
    if (strcmp(a->argv[a->i], "--pdl") == 0) return f->pdl = 1, 1;
    if (opt_match(a, "--threads", &v, s)) {
        if (*s == FORGE_OK) *s = parse_int("--threads", v, 0, 4096, &f->threads);
        return 1;
    }
    return 0;
}

/* The cache directory of measured choices: $XDG_CACHE_HOME/forge, else $HOME/.cache/forge, else none. */
static const char *default_cache_dir(void) {
    static char buf[PATH_MAX];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(buf, sizeof buf, "%s/forge", xdg);
    else if (home && *home) snprintf(buf, sizeof buf, "%s/.cache/forge", home);
    else return NULL;
    return buf;
}

static forge_status runtime_options_build(const char *cmd, const runtime_flags *f, forge_runtime_options *o) {
    forge_runtime_options_default(o);
    if (f->device) FORGE_TRY(forge_device_parse("--device", f->device, &o->device, &o->device_index));
    if (f->matmul) {
        if (o->device != FORGE_DEVICE_CUDA)
            return usage_error(cmd, "--matmul applies to --device cuda only", NULL);
        FORGE_TRY(forge_matmul_mode_parse("--matmul", f->matmul, &o->matmul));
    }
    if (f->attention) FORGE_TRY(forge_attention_kind_parse("--attention", f->attention, &o->attention));
    /* --precision: fp32 (exact), tf32 (fp32 with forge's tf32 GEMMs: --matmul tf32) or bf16; the default is bf16 on
     * CUDA (unless --matmul picks an fp32 step's GEMM) and fp32 on the CPU */
    if (f->precision && strcmp(f->precision, "tf32") == 0) {
        if (o->device != FORGE_DEVICE_CUDA) return usage_error(cmd, "--precision tf32 applies to --device cuda only", NULL);
        if (f->matmul && o->matmul != FORGE_MATMUL_TF32)
            return usage_error(cmd, "--precision tf32 runs the tf32 GEMMs: it conflicts with --matmul ", f->matmul);
        o->precision = FORGE_TRAIN_FP32;
        o->matmul = FORGE_MATMUL_TF32;
    } else if (f->precision) {
        static const char *const valid[] = {"fp32", "tf32", "bf16"};
        if (forge_train_precision_parse("--precision", f->precision, &o->precision) != FORGE_OK)
            return forge_error(FORGE_ERR_ARG, "--precision: \"%s\" is not valid: expected \"%s\", \"%s\" or \"%s\"",
                               f->precision, valid[0], valid[1], valid[2]);
        if (o->precision == FORGE_TRAIN_BF16 && f->matmul)
            return forge_error(FORGE_ERR_ARG,
                               "%s: --matmul %s picks the GEMMs of an fp32 step, and --precision bf16 runs forge's "
                               "bf16 GEMMs: drop one of them",
                               cmd, f->matmul);
    } else if (o->device == FORGE_DEVICE_CUDA && !f->matmul) {
        o->precision = FORGE_TRAIN_BF16;
    }
    if (f->pdl && o->device != FORGE_DEVICE_CUDA)
        return usage_error(cmd, "--pdl applies to --device cuda only", NULL);
    o->pdl = f->pdl;
    o->threads = (int)f->threads;
    o->cache_dir = default_cache_dir();
    o->matmul_cache_path = f->matmul_cache;
    return FORGE_OK;
}

/* configs/ next to the executable's parent (build/forge -> ./configs), else ./configs. */
static const char *configs_dir(const char *argv0) {
    static char buf[PATH_MAX + 16];
    const char *env = getenv("FORGE_CONFIGS_DIR");
    if (env) return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (int up = 0; up < 3; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash) break;
            *slash = '\0';
            snprintf(buf, sizeof buf, "%s/configs", exe);
            if (access(buf, R_OK) == 0) return buf;
        }
    }
    (void)argv0;
    return "configs";
}

/* ---- forge tokenizer train --------------------------------------------------- */

static const char *TOKENIZER_HELP =
    "usage: forge tokenizer train --vocab N --out DIR FILE...\n"
    "  Trains a byte-level BPE vocabulary of N ids (256 bytes + merges + <|endoftext|>)\n"
    "  and writes DIR/encoder.json and DIR/vocab.bpe (GPT-2's file format).\n";

static int cmd_tokenizer(int argc, char **argv) {
    if (argc < 1 || wants_help(argc, argv) || strcmp(argv[0], "train") != 0) {
        fputs(TOKENIZER_HELP, argc < 1 || wants_help(argc, argv) ? stdout : stderr);
        return argc < 1 || wants_help(argc, argv) ? 0 : 2;
    }
    args a = {argc, argv, 0, (const char **)argv, 0};
    long vocab = 0;
    const char *out = NULL, *v;
    forge_status s = FORGE_OK;
    for (a.i = 1; a.i < argc && s == FORGE_OK; a.i++) {
        INT_OPT("--vocab", vocab, 257, 1L << 24)
        STR_OPT("--out", out)
        if (argv[a.i][0] == '-') return fail(usage_error("tokenizer", "unknown option ", argv[a.i]));
        a.positional[a.n_positional++] = argv[a.i];
    }
    if (s != FORGE_OK) return fail(s);
    if (!vocab || !out || a.n_positional == 0) {
        fputs(TOKENIZER_HELP, stderr);
        return 2;
    }
    struct stat out_st;
    if (stat(out, &out_st) == 0 && !S_ISDIR(out_st.st_mode))
        return fail(forge_error(FORGE_ERR_ARG, "tokenizer train: --out %s exists and is not a directory: expected a "
                                               "directory for encoder.json and vocab.bpe",
                                out));
    forge_tokenizer *tok;
    int n_ids = 0; /* what the corpus gave: fewer than --vocab when it runs out of pairs to merge */
    s = forge_tokenizer_train(&tok, a.positional, a.n_positional, (int)vocab, 1);
    if (s == FORGE_OK) {
        n_ids = forge_tokenizer_vocab_size(tok);
        s = forge_tokenizer_save(tok, out);
        forge_tokenizer_free(tok);
    }
    if (s != FORGE_OK) return fail(s);
    printf("wrote %s/encoder.json and %s/vocab.bpe (%d ids)\n", out, out, n_ids);
    return 0;
}

/* ---- forge tokenize ------------------------------------------------------------- */

static const char *TOKENIZE_HELP =
    "usage: forge tokenize --tokenizer DIR --out DIR [--val-fraction F] [--seed S] FILE...\n"
    "  Encodes text files (plain, or documents separated by <|endoftext|>) into token shards\n"
    "  DIR/train_NNN.bin and DIR/val_NNN.bin (llm.c's format: uint16 tokens, or uint32 when the\n"
    "  vocabulary exceeds 65536) and copies the tokenizer into DIR.\n"
    "  --tokenizer DIR holds encoder.json + vocab.bpe (GPT-2's files, or `forge tokenizer train`'s).\n"
    "  --val-fraction  share of documents held out for validation (default 0.05)\n";

static int cmd_tokenize(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(TOKENIZE_HELP, stdout);
        return 0;
    }
    args a = {argc, argv, 0, (const char **)argv, 0};
    const char *tok_dir = NULL, *out = NULL, *v;
    float val = 0.05f;
    long seed = 1337;
    forge_status s = FORGE_OK;
    for (a.i = 0; a.i < argc && s == FORGE_OK; a.i++) {
        STR_OPT("--tokenizer", tok_dir)
        STR_OPT("--out", out)
        FLOAT_OPT("--val-fraction", val, 0.0, 1.0)
        INT_OPT("--seed", seed, 0, LONG_MAX)
        if (argv[a.i][0] == '-') return fail(usage_error("tokenize", "unknown option ", argv[a.i]));
        a.positional[a.n_positional++] = argv[a.i];
    }
    if (s == FORGE_OK && val >= 1.0f)
        s = forge_error(FORGE_ERR_ARG, "--val-fraction: \"%g\" holds out every document and leaves no train shard: "
                                       "expected a fraction below 1",
                        (double)val);
    if (s != FORGE_OK) return fail(s);
    if (!tok_dir || !out || a.n_positional == 0) {
        fputs(TOKENIZE_HELP, stderr);
        return 2;
    }
    forge_tokenizer *tok;
    s = forge_tokenizer_load(&tok, tok_dir);
    if (s == FORGE_OK) {
        s = forge_tokenize_files(tok, a.positional, a.n_positional, out, val, (uint64_t)seed, stdout);
        if (s == FORGE_OK) s = forge_tokenizer_save(tok, out);
        forge_tokenizer_free(tok);
    }
    return s == FORGE_OK ? 0 : fail(s);
}

/* ---- forge sample --------------------------------------------------------------- */

static const char *SAMPLE_HELP =
    "usage: forge sample --ckpt DIR [--prompt TEXT | --prompt-file FILE] [--tokens N] [--temperature T]\n"
    "                    [--top-k K] [--top-p P] [--seed S] [--count N] [--tokenizer DIR] [--ids]\n"
    "                    [--no-kv-cache] [--no-graph]\n"
    "                    [runtime options]\n"
    "  DIR is a run directory (its newest checkpoint is used), a checkpoint directory or a Hugging Face\n"
    "  save_pretrained directory (GPT-2 or Llama: config.json + model.safetensors). Tokens are printed as\n"
    "  they are produced; a sample ends at <|endoftext|> or after N tokens. --temperature 0 is greedy.\n"
    "  --tokenizer DIR  encoder.json + vocab.bpe (or vocab.json + merges.txt) [DIR's own]\n"
    "  --ids            print token ids instead of text: the prompt's on one line, the new ones on the next\n"
    "  --no-kv-cache    re-run the full forward pass over the context for every token (the reference)\n"
    "  --no-graph       run every KV-cache step op by op (on CUDA the second step that samples a token is\n"
    "                   recorded as a graph and later ones replay it: one launch a token)\n"
    "  Decoding uses a KV cache, in fp32 whatever --precision says; the prompt is prefilled one position at a\n"
    "  time, and past the context length the full forward pass takes over. A last line on stderr gives the\n"
    "  tokens per second.\n"
    "  Defaults: --tokens 200 --temperature 0.8 --top-k 40 --top-p 0.95 --seed 1 --count 1\n"
    "runtime options:\n" RUNTIME_HELP;

typedef struct {
    const char *ckpt, *prompt, *tokenizer;
    forge_runtime_options runtime;
    long tokens, count, seed;
    float temperature, top_p;
    long top_k;
    int print_ids;
    int no_kv_cache;
    int no_graph;
} sample_options;

/* A checkpoint loaded for inference (sample, eval): its tokenizer (refused when it has more ids than the model's
 * vocabulary) and its model on the runtime's backend. */
typedef struct {
    char dir[1024];
    const char *tok_from; /* the tokenizer's directory, for messages */
    forge_model_config cfg;
    forge_tokenizer *tok;
    forge_backend *be;
    forge_pool *pool;
    forge_tape *tape;
    forge_model *m;
} loaded_ckpt;

static void loaded_ckpt_close(loaded_ckpt *c) {
    forge_model_free(c->m);
    forge_tape_destroy(c->tape);
    forge_pool_destroy(c->pool);
    forge_backend_destroy(c->be);
    forge_tokenizer_free(c->tok);
    memset(c, 0, sizeof *c);
}

static int has_tokenizer(const char *dir) {
    char enc[1100], hf[1100];
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(hf, sizeof hf, "%s/vocab.json", dir);
    return access(enc, F_OK) == 0 || access(hf, F_OK) == 0;
}

/* The tokenizer of a loaded checkpoint: --tokenizer DIR, else the checkpoint's own files (forge's encoder.json +
 * vocab.bpe, or the vocab.json + merges.txt of a Hugging Face GPT-2 directory), else fallback_dir's (eval: the
 * --data directory, whose shards were made with it; NULL: none). */
static forge_status load_ckpt_tokenizer(loaded_ckpt *c, const char *tokenizer_dir, const char *fallback_dir) {
    c->tok_from = tokenizer_dir ? tokenizer_dir : c->dir;
    if (tokenizer_dir) return forge_tokenizer_load(&c->tok, tokenizer_dir);
    if (!has_tokenizer(c->dir) && fallback_dir && has_tokenizer(fallback_dir)) {
        printf("note: %s has no tokenizer; using %s's\n", c->dir, fallback_dir);
        c->tok_from = fallback_dir;
        return forge_tokenizer_load(&c->tok, fallback_dir);
    }
    if (!has_tokenizer(c->dir))
        return forge_error(FORGE_ERR_IO,
                           "%s has no tokenizer (encoder.json + vocab.bpe, or Hugging Face's vocab.json + "
                           "merges.txt): pass --tokenizer DIR (e.g. the --data directory of `forge tokenize`)",
                           c->dir);
    return forge_tokenizer_load(&c->tok, c->dir);
}

static forge_status loaded_ckpt_open(loaded_ckpt *c, const char *ckpt, const char *tokenizer_dir,
                                     const char *fallback_dir, const forge_runtime_options *runtime) {
    memset(c, 0, sizeof *c);
    FORGE_TRY(forge_checkpoint_resolve(ckpt, c->dir, sizeof c->dir));
    FORGE_TRY(forge_checkpoint_read_config(c->dir, &c->cfg));
    FORGE_TRY(load_ckpt_tokenizer(c, tokenizer_dir, fallback_dir));
    forge_status s = FORGE_OK;
    if (forge_tokenizer_vocab_size(c->tok) > c->cfg.vocab_size)
        s = forge_error(FORGE_ERR_DATA,
                        "%s: the tokenizer of %s has %d ids, more than the model's vocab_size %d: the tokenizer "
                        "and the model do not match",
                        c->dir, c->tok_from, forge_tokenizer_vocab_size(c->tok), c->cfg.vocab_size);
    if (s == FORGE_OK) s = forge_backend_create(&c->be, runtime->device, runtime);
    if (s == FORGE_OK) s = forge_pool_create(&c->pool, c->be);
    if (s == FORGE_OK) s = forge_tape_create(&c->tape, c->pool);
    if (s == FORGE_OK) s = forge_model_create(&c->m, &c->cfg, c->pool, 0);
    if (s == FORGE_OK) s = forge_checkpoint_load_weights(c->dir, c->m);
    if (s != FORGE_OK) loaded_ckpt_close(c);
    return s;
}

static forge_status sample_run(const sample_options *so) {
    loaded_ckpt c;
    FORGE_TRY(loaded_ckpt_open(&c, so->ckpt, so->tokenizer, NULL, &so->runtime));
    forge_status s = FORGE_OK;
    for (long i = 0; i < so->count && s == FORGE_OK; i++) {
        forge_generate_options go = {(int)so->tokens, so->temperature, (int)so->top_k, so->top_p,
                                     (uint64_t)(so->seed + i), 1, so->print_ids, so->no_kv_cache, !so->no_graph};
        if (so->count > 1) printf("--- sample %ld ---\n", i + 1);
        forge_generate_stats st;
        s = forge_generate(c.m, c.tape, c.tok, so->prompt, &go, stdout, &st);
        if (s != FORGE_OK) break;
        /* the throughput line: stderr, so stdout holds the sample alone (--ids output is parsed) */
        fflush(stdout);
        char how[160];
        const char *precision = forge_train_precision_name(c.be->options.precision);
        const char *graph = st.graph_replays > 0 ? " graph" : "";
        if (strncmp(st.decode_mode, "eager (", 7) == 0) fprintf(stderr, "note: KV-cache steps ran %s\n", st.decode_mode);
        if (so->no_kv_cache)
            snprintf(how, sizeof how, "full forward %s", precision);
        else if (st.full_forward_tokens > 0)
            snprintf(how, sizeof how,
                     "kv cache fp32%s, the last %d tokens by the %s full forward past the context of %d", graph,
                     st.full_forward_tokens, precision, c.cfg.context_length);
        else
            snprintf(how, sizeof how, "kv cache fp32%s", graph);
        fprintf(stderr, "sampled %d tokens in %.3f s: %.1f tok/s (%s, prompt %d tokens, device %s)\n", st.new_tokens,
                st.seconds, st.seconds > 0 ? st.new_tokens / st.seconds : 0.0, how, st.prompt_tokens,
                forge_device_name(c.be->kind));
    }
    loaded_ckpt_close(&c);
    return s;
}

static int cmd_sample(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(SAMPLE_HELP, stdout);
        return 0;
    }
    sample_options so = {.prompt = "", .tokens = 200, .count = 1, .seed = 1, .temperature = 0.8f, .top_p = 0.95f,
                         .top_k = 40};
    const char *prompt_file = NULL;
    char *prompt_text = NULL;
    runtime_flags rf = {0};
    args a = {argc, argv, 0, NULL, 0};
    const char *v;
    forge_status s = FORGE_OK;
    for (a.i = 0; a.i < argc && s == FORGE_OK; a.i++) {
        if (runtime_flag(&a, &rf, &s)) continue;
        STR_OPT("--ckpt", so.ckpt)
        STR_OPT("--prompt", so.prompt)
        STR_OPT("--prompt-file", prompt_file)
        STR_OPT("--tokenizer", so.tokenizer)
        if (strcmp(argv[a.i], "--ids") == 0) {
            so.print_ids = 1;
            continue;
        }
        if (strcmp(argv[a.i], "--no-kv-cache") == 0) {
            so.no_kv_cache = 1;
            continue;
        }
        if (strcmp(argv[a.i], "--no-graph") == 0) {
            so.no_graph = 1;
            continue;
        }
        INT_OPT("--tokens", so.tokens, 1, 1 << 20)
        INT_OPT("--count", so.count, 1, 1000)
        INT_OPT("--seed", so.seed, 0, LONG_MAX)
        INT_OPT("--top-k", so.top_k, 0, 1 << 30)
        FLOAT_OPT("--temperature", so.temperature, 0.0, 100.0)
        FLOAT_OPT("--top-p", so.top_p, 0.0, 1.0)
        return fail(usage_error("sample", "unknown argument ", argv[a.i]));
    }
    if (s != FORGE_OK) return fail(s);
    if (!so.ckpt) {
        fputs(SAMPLE_HELP, stderr);
        return 2;
    }
    if (prompt_file && so.prompt[0])
        return fail(forge_error(FORGE_ERR_ARG, "sample: give --prompt or --prompt-file, not both"));
    size_t prompt_len = 0;
    if (prompt_file) {
        s = forge_read_file(prompt_file, &prompt_text, &prompt_len);
        if (s == FORGE_OK && strlen(prompt_text) != prompt_len)
            s = forge_error(FORGE_ERR_ARG, "sample: %s holds a NUL byte; a prompt is text", prompt_file);
        if (s == FORGE_OK) so.prompt = prompt_text;
    }
    if (s == FORGE_OK) s = runtime_options_build("sample", &rf, &so.runtime);
    if (s == FORGE_OK) s = sample_run(&so);
    free(prompt_text);
    return s == FORGE_OK ? 0 : fail(s);
}

/* ---- forge eval ----------------------------------------------------------------- */

static const char *EVAL_HELP =
    "usage: forge eval --ckpt DIR --data DIR|FILE [--batch B] [--seq-len T] [--tokenizer DIR]\n"
    "                  [--dump-logits FILE] [runtime options]\n"
    "  The checkpoint's loss on held-out tokens: mean loss (nats per token), perplexity and bits per\n"
    "  byte (the loss in bits over the bytes the predicted tokens decode to; <|endoftext|> counts none).\n"
    "  DIR is a run directory (its newest checkpoint), a checkpoint directory or a Hugging Face\n"
    "  save_pretrained directory (GPT-2 or Llama: config.json + model.safetensors). --data: a directory's\n"
    "  val_NNN.bin shards (from `forge tokenize`), one .bin shard, or a text file (tokenized with the\n"
    "  checkpoint's tokenizer). Windows of T tokens, each predicted from the ones before it in its window.\n"
    "  Defaults: --batch 8 --seq-len the config's context_length\n"
    "  --tokenizer DIR      encoder.json + vocab.bpe (or vocab.json + merges.txt) [DIR's own; else a --data\n"
    "                       directory's]\n"
    "  --dump-logits FILE   also write the logits (T, V) of the first window and its ids (T) to FILE\n"
    "                       (safetensors: \"logits\" F32, \"ids\" I32), to compare with another implementation\n"
    "runtime options:\n" RUNTIME_HELP;

/* The logits of one window, tokens[0, T), as a safetensors file ("logits" (T, V) F32 and "ids" (T) I32). */
static forge_status dump_logits(loaded_ckpt *c, const int32_t *tokens, size_t n, int T, const char *path) {
    const int Tw = n < (size_t)T ? (int)n : T, V = c->cfg.vocab_size;
    forge_backend *be = c->be;
    float *host = malloc((size_t)Tw * V * sizeof *host);
    forge_bf16 *narrow = NULL;
    if (!host) return forge_error(FORGE_ERR_OOM, "eval --dump-logits: out of host memory");
    const int was_recording = forge_tape_recording(c->tape);
    forge_tape_set_recording(c->tape, 0);
    const int64_t shape[2] = {1, Tw};
    forge_tensor *ids = NULL, *logits = NULL;
    forge_status s = forge_pool_tensor(forge_tape_pool(c->tape), &ids, FORGE_I32, 2, shape, 0);
    if (s == FORGE_OK) s = be->copy_to_device(be, ids->data, tokens, (size_t)Tw * sizeof *tokens);
    if (s == FORGE_OK) s = forge_model_forward(c->m, c->tape, ids, NULL, 0.0f, &logits);
    if (s == FORGE_OK && logits->dtype == FORGE_BF16) { /* a bf16 step's logits, widened */
        narrow = malloc((size_t)Tw * V * sizeof *narrow);
        s = narrow ? be->copy_to_host(be, narrow, logits->data, (size_t)Tw * V * sizeof *narrow)
                   : forge_error(FORGE_ERR_OOM, "eval --dump-logits: out of host memory");
        for (size_t i = 0; s == FORGE_OK && i < (size_t)Tw * V; i++) host[i] = forge_bf16_to_f32(narrow[i]);
    } else if (s == FORGE_OK) {
        s = be->copy_to_host(be, host, logits->data, (size_t)Tw * V * sizeof *host);
    }
    if (s == FORGE_OK) s = be->poll_errors(be);
    forge_tape_reset(c->tape);
    forge_tape_set_recording(c->tape, was_recording);
    if (s == FORGE_OK) {
        forge_st_entry e[2] = {
            {.name = "logits", .dtype = "F32", .ndim = 2, .shape = {Tw, V}, .data = host,
             .bytes = (size_t)Tw * V * sizeof(float)},
            {.name = "ids", .dtype = "I32", .ndim = 1, .shape = {Tw}, .data = tokens,
             .bytes = (size_t)Tw * sizeof(int32_t)},
        };
        const char *keys[] = {"format"}, *vals[] = {"pt"};
        s = forge_safetensors_write(path, e, 2, keys, vals, 1);
    }
    free(host);
    free(narrow);
    return s;
}

static int cmd_eval(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(EVAL_HELP, stdout);
        return 0;
    }
    const char *ckpt = NULL, *data = NULL, *tokenizer = NULL, *dump = NULL, *v;
    long batch = 8, seq = 0;
    runtime_flags rf = {0};
    args a = {argc, argv, 0, NULL, 0};
    forge_status s = FORGE_OK;
    for (a.i = 0; a.i < argc && s == FORGE_OK; a.i++) {
        if (runtime_flag(&a, &rf, &s)) continue;
        STR_OPT("--ckpt", ckpt)
        STR_OPT("--data", data)
        STR_OPT("--tokenizer", tokenizer)
        STR_OPT("--dump-logits", dump)
        INT_OPT("--batch", batch, 1, 1 << 16)
        INT_OPT("--seq-len", seq, 1, 1 << 20)
        return fail(usage_error("eval", "unknown argument ", argv[a.i]));
    }
    if (s != FORGE_OK) return fail(s);
    if (!ckpt || !data) {
        fputs(EVAL_HELP, stderr);
        return 2;
    }
    forge_runtime_options rt;
    s = runtime_options_build("eval", &rf, &rt);
    if (s != FORGE_OK) return fail(s);
    loaded_ckpt c;
    struct stat data_st;
    const int data_is_dir = stat(data, &data_st) == 0 && S_ISDIR(data_st.st_mode);
    s = loaded_ckpt_open(&c, ckpt, tokenizer, data_is_dir ? data : NULL, &rt);
    if (s != FORGE_OK) return fail(s);
    int32_t *tokens = NULL;
    size_t n = 0;
    uint32_t *bytes_of = NULL;
    int bytes_V = 0;
    char what[1400];
    forge_eval_result r;
    const int T = seq > 0 ? (int)seq : c.cfg.context_length;
    s = forge_eval_load_tokens(data, c.tok, c.cfg.vocab_size, &tokens, &n, what, sizeof what);
    if (s == FORGE_OK) s = forge_eval_token_bytes(c.tok, &bytes_of, &bytes_V);
    if (s == FORGE_OK) {
        printf("eval: %s on %s (%s, %s): %zu tokens, batch %ld x %d\n", c.dir, what, c.be->name,
               forge_train_precision_name(c.be->options.precision), n, batch, T);
        fflush(stdout);
        s = forge_evaluate(c.m, c.tape, tokens, n, (int)batch, T, bytes_of, bytes_V, stderr, &r);
    }
    if (s == FORGE_OK)
        printf("eval: %llu tokens (%llu bytes) | loss %.6f | perplexity %.4f | bits per byte %.6f\n",
               (unsigned long long)r.tokens, (unsigned long long)r.bytes, r.loss, r.perplexity, r.bits_per_byte);
    if (s == FORGE_OK && dump) {
        s = dump_logits(&c, tokens, n, T, dump);
        if (s == FORGE_OK) printf("eval: logits of the first window written to %s\n", dump);
    }
    free(tokens);
    free(bytes_of);
    loaded_ckpt_close(&c);
    return s == FORGE_OK ? 0 : fail(s);
}

/* ---- forge plot ----------------------------------------------------------------- */

static const char *PLOT_HELP =
    "usage: forge plot RUN_DIR... [--out FILE.png]\n"
    "  The training and val loss of one or more runs (their log.jsonl) against the tokens trained on,\n"
    "  overlaid in one PNG (gnuplot). Default --out: the first run's loss.png. forge train draws its\n"
    "  own at the end of a run.\n";

static int cmd_plot(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(PLOT_HELP, stdout);
        return 0;
    }
    const char *out = NULL, *v;
    const char **runs = calloc((size_t)argc + 1, sizeof *runs);
    if (!runs) return fail(forge_error(FORGE_ERR_OOM, "plot: out of memory"));
    int n = 0;
    args a = {argc, argv, 0, NULL, 0};
    forge_status s = FORGE_OK;
    for (a.i = 0; a.i < argc && s == FORGE_OK; a.i++) {
        STR_OPT("--out", out)
        if (argv[a.i][0] == '-') {
            free(runs);
            return fail(usage_error("plot", "unknown argument ", argv[a.i]));
        }
        runs[n++] = argv[a.i];
    }
    char png[1100];
    if (s == FORGE_OK && n == 0) {
        free(runs);
        fputs(PLOT_HELP, stderr);
        return 2;
    }
    if (s == FORGE_OK) {
        if (!out) {
            snprintf(png, sizeof png, "%s/loss.png", runs[0]);
            out = png;
        }
        s = forge_plot_runs(runs, n, out);
    }
    if (s == FORGE_OK) printf("plot: %d run(s) -> %s\n", n, out);
    free(runs);
    return s == FORGE_OK ? 0 : fail(s);
}

/* ---- forge train ---------------------------------------------------------------- */

static const char *TRAIN_HELP =
    "usage: forge train [--config NAME|PATH] [--data DIR] [--out DIR] [options]\n"
    "  With no --data: the demo job. Builds a corpus from Debian's `fortunes` package,\n"
    "  trains a BPE vocabulary for it, trains the `tiny` config on the CPU and prints samples.\n"
    "options (defaults in brackets):\n"
    "  --config NAME|PATH   configs/NAME.json or a JSON file [tiny; with --resume, the checkpoint's]\n"
    "  --data DIR           train_*.bin / val_*.bin shards + tokenizer, from `forge tokenize`\n"
    "  --out DIR            checkpoints and log.jsonl, locked while a run uses it [runs/<config>;\n"
    "                       with --resume RUN_DIR, RUN_DIR]\n"

    "  --steps N            optimizer steps [500; 600 for the demo]\n"
    "  --batch B            sequences per micro-batch [16]\n"
    "  --seq-len T          tokens per sequence [the config's context_length]\n"
    "  --tokens-per-step N  gradient accumulation to N tokens per step [B*T]\n"
    "  --lr X               peak learning rate [3e-3]; warm-up 10%, cosine to 10% of peak\n"
    "  --warmup-frac F --min-lr-ratio R --weight-decay W --grad-clip G --beta1 --beta2 --eps\n"
    "  --seed S             init and data order [1337]\n"
    "  --eval-every N       val loss every N steps [100]; --eval-batches N [8]\n"
    "  --ckpt-every N       checkpoint every N steps [only at the end]\n"
    "  --keep-checkpoints N the newest N checkpoints are kept at each save [2]\n"
    "  --early-stop N       stop when N evaluations in a row bring no val loss below the best so far;\n"
    "                       every new best is saved, and DIR/best names it (sample and eval it with\n"
    "                       --ckpt DIR/$(cat DIR/best)) [0: off; needs --eval-every]\n"
    "  --resume DIR         continue a run (bit-identical) from DIR's newest checkpoint; the flags\n"
    "                       above not given (--data, steps, batch, seq-len, tokens-per-step, the\n"
    "                       schedule, AdamW, eval, checkpoints, early stop) take the run's values\n"
    "  --init DIR           start a new run (step 0, fresh optimizer) from DIR's weights and config: a forge\n"
    "                       run or checkpoint directory, or a Hugging Face save_pretrained directory of a\n"
    "                       GPT-2 or Llama model (config.json + model.safetensors), to fine-tune it\n"
    "  --stop-after N       stop after step N with a checkpoint (to resume later)\n"
    "  --samples N          text samples printed after training [3 for the demo, else 0]\n"
    "  --quiet              no progress lines\n"
    "  --no-graph           run every step op by op (on CUDA the second step is recorded as a\n"
    "                       graph and later steps replay it: one launch a step)\n"
    "data parallel (docs/distributed.md): `mpirun -np N forge train ...` runs N ranks, one device each\n"
    "  (cuda: the device of the rank's index on its host); the global batch is --tokens-per-step, of\n"
    "  which each rank runs 1/N of the micro-batches, so the loss curve does not depend on N.\n"
    "  --zero1              shard the AdamW moments over the ranks (ZeRO-1): gradients\n"
    "                       reduce-scattered, each rank updates its range, weights all-gathered\n"
    "  --bucket-mb X        the gradients are reduced in buckets of X MiB, each launched as soon as the\n"
    "                       backward has finished it (NCCL: on a side stream, overlapping the rest of\n"
    "                       the backward) [25; 0 = the whole block after the backward]\n"
    "  --dist-timeout S     abort every rank when a collective waits longer than S seconds (a\n"
    "                       rank died or hangs) [600; 0 = never]; it must cover rank 0's evaluation\n"
    "                       and checkpoints, which the other ranks wait for\n"
    "  Ctrl-C saves a checkpoint at the end of the current step and exits.\n"
    "runtime options:\n" RUNTIME_HELP;

static forge_status prepare_demo_data(const char *data_dir, int vocab, FILE *out) {
    char corpus[1100], enc[1100], shard[1100];
    snprintf(corpus, sizeof corpus, "%s/fortunes.txt", data_dir);
    snprintf(enc, sizeof enc, "%s/encoder.json", data_dir);
    snprintf(shard, sizeof shard, "%s/train_000.bin", data_dir);
    if (access(shard, R_OK) == 0 && access(enc, R_OK) == 0) {
        fprintf(out, "demo data: reusing %s\n", data_dir);
        return FORGE_OK;
    }
    FORGE_TRY(forge_mkdir_p(data_dir));
    size_t docs = 0;
    FORGE_TRY(forge_corpus_fortunes(corpus, &docs));
    fprintf(out, "demo data: %zu fortunes from Debian's fortunes package -> %s\n", docs, corpus);
    const char *files[1] = {corpus};
    forge_tokenizer *tok;
    fprintf(out, "demo data: training a %d-id BPE vocabulary\n", vocab);
    FORGE_TRY(forge_tokenizer_train(&tok, files, 1, vocab, 0));
    forge_status s = forge_tokenizer_save(tok, data_dir);
    if (s == FORGE_OK) s = forge_tokenize_files(tok, files, 1, data_dir, 0.05, 1337, out);
    forge_tokenizer_free(tok);
    return s;
}

/* A config with no Hugging Face equivalent gets no config.json in its checkpoints (model/hf.h): said once, at the
 * start, rather than at every save. Best effort: a config that does not load is reported by the command itself. */
static void hf_note(const char *init, const char *config, const char *configs_dir) {
    forge_model_config cfg;
    char dir[1100], why[256];
    forge_status s = init ? forge_checkpoint_resolve(init, dir, sizeof dir) : FORGE_OK;
    if (s == FORGE_OK)
        s = init ? forge_checkpoint_read_config(dir, &cfg)
                 : forge_config_resolve(&cfg, config ? config : "tiny", configs_dir);
    if (s != FORGE_OK) {
        forge_error_clear();
        return;
    }
    if (!forge_hf_expressible(&cfg, why, sizeof why))
        printf("note: config %s has no Hugging Face equivalent (%s): its checkpoints carry no config.json, so "
               "transformers cannot load them\n",
               cfg.name, why);
}

/* The ranks mpirun announced in the environment (Open MPI, MPICH's PMI, MVAPICH), 0 when not launched by one. */
static int launched_ranks(void) {
    static const char *const keys[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = getenv(keys[i]);
        long n;
        if (v && parse_int(keys[i], v, 1, INT_MAX, &n) == FORGE_OK) return (int)n;
    }
    forge_error_clear();
    return 0;
}

/* A failure of one rank of several ends every rank (MPI_Abort) after printing its message: the others may wait in
 * a collective it will never join. An interruption is agreed by every rank first (trainer.c), so each exits alone. */
static int train_fail(forge_status s, forge_comm *comm) {
    if (forge_comm_size(comm) <= 1) {
        int code = fail(s);
        forge_comm_destroy(comm);
        return code;
    }
    fprintf(stderr, "forge: rank %d of %d: %s%s\n", forge_comm_rank(comm), forge_comm_size(comm),
            s == FORGE_ERR_INTERRUPTED ? "" : "error: ", forge_error_message());
    int code = forge_status_exit_code(s);
    if (s != FORGE_ERR_INTERRUPTED) forge_comm_abort(comm, code);
    forge_comm_destroy(comm);
    return code;
}

/* One training setting on the command line: its value if given (NaN if not), the resumed run's recorded value
 * (recorded: there is one) and the default. */
typedef struct {
    const char *flag;
    double given, run, dflt;
    int recorded;
    int said_elsewhere; /* the trainer says a change of it itself (--steps: "the checkpoint planned N steps") */
} train_setting;

/* The value of each setting: given, else the run's (resuming a run that recorded it), else the default. A given
 * value that differs from the run's is said (when say), once for all of them: the continuation is then another
 * run. */
static void settle_train_settings(const train_setting *s, size_t n, int resuming, int say, double *out) {
    char differ[512] = "";
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        const int use_run = resuming && s[i].recorded;
        out[i] = !isnan(s[i].given) ? s[i].given : use_run ? s[i].run : s[i].dflt;
        if (use_run && !s[i].said_elsewhere && !isnan(s[i].given) && (float)s[i].given != (float)s[i].run &&
            len < sizeof differ - 64)
            len += (size_t)snprintf(differ + len, sizeof differ - len, "%s %s %g (the run's: %g)", len ? "," : "",
                                    s[i].flag, s[i].given, s[i].run);
    }
    if (len && say)
        printf("note: resuming with%s: not the run's own settings, so not a bit-identical continuation\n", differ);
}

static int cmd_train(int argc, char **argv, const char *argv0) {
    if (wants_help(argc, argv)) {
        fputs(TRAIN_HELP, stdout);
        return 0;
    }
    forge_train_options o;
    forge_train_options_default(&o);
    o.configs_dir = configs_dir(argv0);
    const char *out_dir = NULL, *v;
    runtime_flags rf = {0};
    long samples = -1, steps = -1, batch = -1, seq = -1, tps = -1, seed = (long)o.seed; /* -1: not given */
    /* NaN: not given (a resumed run then takes the run's value, forge_train_options_default's otherwise) */
    float lr = NAN, warmup = NAN, min_lr = NAN, wd = NAN, clip = NAN, beta1 = NAN, beta2 = NAN, eps = NAN;
    long eval_every = -1, eval_batches = -1, ckpt_every = -1, stop_after = 0, keep = -1, early_stop = -1;
    float dist_timeout = 600.0f;
    args a = {argc, argv, 0, NULL, 0};
    forge_status s = FORGE_OK;
    for (a.i = 0; a.i < argc && s == FORGE_OK; a.i++) {
        if (runtime_flag(&a, &rf, &s)) continue;
        STR_OPT("--config", o.config)
        STR_OPT("--data", o.data_dir)
        STR_OPT("--out", out_dir)
        STR_OPT("--resume", o.resume)
        STR_OPT("--init", o.init)
        INT_OPT("--steps", steps, 1, 1L << 30)
        INT_OPT("--batch", batch, 1, 1 << 20)
        INT_OPT("--seq-len", seq, 1, 1 << 24)
        INT_OPT("--tokens-per-step", tps, 1, LONG_MAX)
        INT_OPT("--seed", seed, 0, LONG_MAX)
        INT_OPT("--eval-every", eval_every, 0, 1L << 30)
        INT_OPT("--eval-batches", eval_batches, 1, 1 << 20)
        INT_OPT("--ckpt-every", ckpt_every, 0, 1L << 30)
        INT_OPT("--stop-after", stop_after, 0, 1L << 30)
        INT_OPT("--keep-checkpoints", keep, 1, 1L << 20)
        INT_OPT("--early-stop", early_stop, 0, 1L << 20)
        INT_OPT("--samples", samples, 0, 100)
        FLOAT_OPT("--lr", lr, 0.0, 10.0)
        FLOAT_OPT("--warmup-frac", warmup, 0.0, 1.0)
        FLOAT_OPT("--min-lr-ratio", min_lr, 0.0, 1.0)
        FLOAT_OPT("--weight-decay", wd, 0.0, 10.0)
        FLOAT_OPT("--grad-clip", clip, 0.0, 1e9)
        FLOAT_OPT("--beta1", beta1, 0.0, 1.0)
        FLOAT_OPT("--beta2", beta2, 0.0, 1.0)
        FLOAT_OPT("--eps", eps, 0.0, 1.0)
        FLOAT_OPT("--dist-timeout", dist_timeout, 0.0, 1e7)
        FLOAT_OPT("--bucket-mb", o.bucket_mb, 0.0, 1e6)
        if (strcmp(argv[a.i], "--zero1") == 0) {
            o.zero1 = 1;
            continue;
        }
        if (strcmp(argv[a.i], "--quiet") == 0) {
            o.quiet = 1;
            continue;
        }
        if (strcmp(argv[a.i], "--no-graph") == 0) {
            o.no_graph = 1;
            continue;
        }
        return fail(usage_error("train", "unknown argument ", argv[a.i]));
    }
    if (s == FORGE_OK) s = runtime_options_build("train", &rf, &o.runtime);
    o.precision_given = rf.precision != NULL || rf.matmul != NULL;
    if (s != FORGE_OK) return fail(s);
    /* Under mpirun: the MPI communicator (a build without it refuses more than one rank rather than run N
     * independent copies); otherwise none, and the run is a single process as it always was. */
    forge_comm *comm = NULL;
    int ranks = launched_ranks();
    if (ranks > 1 && !forge_comm_mpi_built())
        return fail(forge_error(FORGE_ERR_UNSUPPORTED,
                                "train: launched as one of %d ranks, but this forge was built without MPI: expected "
                                "a build with MPI (install Open MPI, e.g. libopenmpi-dev, then `make MPI=1`)",
                                ranks));
    if (ranks >= 1 && forge_comm_mpi_built()) {
        /* the communicator goes with the backend: NCCL for CUDA where built, else MPI (CUDA buffers staged) */
        if (o.runtime.device == FORGE_DEVICE_CUDA && forge_comm_nccl_built())
            s = forge_comm_create_nccl(&comm, dist_timeout);
        else
            s = forge_comm_create_mpi(&comm, dist_timeout);
        if (s != FORGE_OK) return fail(s);
    }
    if (forge_comm_active(comm)) {
        o.comm = comm;
        /* one device per rank: the rank's index among the ranks of its host picks the GPU (cuda:N offsets it) */
        if (o.runtime.device == FORGE_DEVICE_CUDA) o.runtime.device_index += forge_comm_local_rank(comm);
        /* CPU ranks of one host share its cores instead of each starting a thread per core */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (o.runtime.device == FORGE_DEVICE_CPU && rf.threads == 0 && cores > 0) {
            long share = cores / forge_comm_local_size(comm);
            o.runtime.threads = share > 0 ? (int)share : 1;
        }
    } else if (o.zero1) {
        o.zero1 = 0; /* one rank holds every shard: ZeRO-1 is the plain optimizer */
    }
    /* A resumed run takes the run's recorded settings for the flags not given (checkpoint.h: forge_run_settings);
     * a path that names no checkpoint is left to the trainer's error, a malformed record is refused here */
    forge_run_settings rs = {0};
    int planned = 0;
    char resume_ckpt[1100];
    if (o.resume && forge_checkpoint_resolve(o.resume, resume_ckpt, sizeof resume_ckpt) == FORGE_OK) {
        s = forge_checkpoint_read_settings(resume_ckpt, &rs, &planned);
        if (s != FORGE_OK) return train_fail(s, comm);
    }
    forge_error_clear();
    const train_setting settings[] = {
        {"--steps", steps > 0 ? (double)steps : NAN, planned, o.steps, 1, 1},
        {"--batch", batch > 0 ? (double)batch : NAN, rs.batch_size, o.batch_size, rs.recorded, 0},
        {"--seq-len", seq > 0 ? (double)seq : NAN, rs.seq_len, o.seq_len, rs.recorded, 0},
        {"--tokens-per-step", tps > 0 ? (double)tps : NAN, (double)rs.tokens_per_step, o.tokens_per_step,
         rs.recorded, 0},
        {"--lr", lr, rs.lr, o.lr, rs.recorded, 0},
        {"--warmup-frac", warmup, rs.warmup_frac, o.warmup_frac, rs.recorded, 0},
        {"--min-lr-ratio", min_lr, rs.min_lr_ratio, o.min_lr_ratio, rs.recorded, 0},
        {"--weight-decay", wd, rs.weight_decay, o.weight_decay, rs.recorded, 0},
        {"--grad-clip", clip, rs.grad_clip, o.grad_clip, rs.recorded, 0},
        {"--beta1", beta1, rs.beta1, o.beta1, rs.recorded, 0},
        {"--beta2", beta2, rs.beta2, o.beta2, rs.recorded, 0},
        {"--eps", eps, rs.eps, o.eps, rs.recorded, 0},
        {"--eval-every", eval_every >= 0 ? (double)eval_every : NAN, rs.eval_every, o.eval_every, rs.recorded, 0},
        {"--eval-batches", eval_batches >= 0 ? (double)eval_batches : NAN, rs.eval_batches, o.eval_batches,
         rs.recorded, 0},
        {"--ckpt-every", ckpt_every >= 0 ? (double)ckpt_every : NAN, rs.ckpt_every, o.ckpt_every, rs.recorded, 0},
        {"--keep-checkpoints", keep >= 0 ? (double)keep : NAN, rs.keep_checkpoints, o.keep_checkpoints,
         rs.recorded, 0},
        {"--early-stop", early_stop >= 0 ? (double)early_stop : NAN, rs.early_stop, o.early_stop, rs.recorded, 0},
    };
    double set[sizeof settings / sizeof settings[0]];
    const int say = forge_comm_rank(comm) == 0;
    settle_train_settings(settings, sizeof settings / sizeof settings[0], o.resume != NULL && planned > 0, say, set);
    int steps_given = steps > 0 || (o.resume && planned > 0); /* a resumed run keeps its plan: not the demo's 600 */
    o.steps = (int)set[0];
    o.batch_size = (int)set[1];
    o.seq_len = (int)set[2];
    o.tokens_per_step = (long)set[3];
    o.lr = (float)set[4], o.warmup_frac = (float)set[5], o.min_lr_ratio = (float)set[6];
    o.weight_decay = (float)set[7], o.grad_clip = (float)set[8];
    o.beta1 = (float)set[9], o.beta2 = (float)set[10], o.eps = (float)set[11];
    o.eval_every = (int)set[12], o.eval_batches = (int)set[13], o.ckpt_every = (int)set[14];
    o.keep_checkpoints = (int)set[15], o.early_stop = (int)set[16];
    if (o.resume && !o.data_dir && rs.recorded && rs.data_dir[0]) {
        if (access(rs.data_dir, R_OK) != 0)
            return train_fail(forge_error(FORGE_ERR_DATA,
                                          "train: --resume %s: the run's data %s is gone (%s): expected --data DIR "
                                          "with the run's shards and tokenizer",
                                          o.resume, rs.data_dir, strerror(errno)),
                              comm);
        o.data_dir = rs.data_dir;
        if (say) printf("resuming on the run's data %s\n", rs.data_dir);
    }
    o.seed = (uint64_t)seed;
    o.stop_after = (int)stop_after;
    int demo = o.data_dir == NULL;
    char out_buf[1024], data_buf[1024];
    if (demo) {
        forge_model_config cfg;
        s = forge_config_resolve(&cfg, o.config ? o.config : "tiny", o.configs_dir);
        if (s != FORGE_OK) return train_fail(s, comm);
        snprintf(data_buf, sizeof data_buf, "runs/data-fortunes-%d", cfg.vocab_size);
        /* rank 0 builds the demo data once; the others wait for it */
        if (forge_comm_rank(comm) == 0) s = prepare_demo_data(data_buf, cfg.vocab_size, stdout);
        if (s != FORGE_OK) return train_fail(s, comm);
        s = forge_comm_barrier(comm);
        if (s != FORGE_OK) return train_fail(s, comm);
        o.data_dir = data_buf;
        if (samples < 0) samples = 3;
        if (!steps_given) o.steps = 600; /* 83 s on an idle 2-core VM (README, docs/cpu.md) */
    }
    /* Without --out, a resumed run continues in its run directory: --resume RUN, or --resume RUN/ckpt_N. */
    char run_dir[1100] = "", latest[1200];
    if (o.resume) {
        snprintf(latest, sizeof latest, "%s/latest", o.resume);
        if (access(latest, F_OK) == 0) {
            snprintf(run_dir, sizeof run_dir, "%s", o.resume);
        } else {
            char parent[1100];
            snprintf(parent, sizeof parent, "%s", o.resume);
            size_t len = strlen(parent);
            while (len > 1 && parent[len - 1] == '/') parent[--len] = '\0';
            char *slash = strrchr(parent, '/');
            const char *base = slash ? slash + 1 : parent;
            int is_ckpt = strncmp(base, "ckpt_", 5) == 0;
            if (slash) *slash = '\0';
            else snprintf(parent, sizeof parent, ".");
            snprintf(latest, sizeof latest, "%s/latest", parent);
            if (is_ckpt && access(latest, F_OK) == 0) snprintf(run_dir, sizeof run_dir, "%s", parent);
        }
    }
    if (!out_dir && run_dir[0]) {
        out_dir = run_dir;
    } else if (!out_dir) {
        const char *config = o.config ? o.config : "tiny";
        forge_model_config ckpt_cfg;
        char ckpt[1100];
        const char *from = o.resume ? o.resume : o.init;
        if (!o.config && from && forge_checkpoint_resolve(from, ckpt, sizeof ckpt) == FORGE_OK &&
            forge_checkpoint_read_config(ckpt, &ckpt_cfg) == FORGE_OK)
            config = ckpt_cfg.name; /* a checkpoint directory: runs/<its config's name> */
        const char *base = strrchr(config, '/') ? strrchr(config, '/') + 1 : config;
        snprintf(out_buf, sizeof out_buf, "runs/%.*s", (int)strcspn(base, "."), base);
        out_dir = out_buf; /* created (with runs/) by the trainer */
    }
    o.out_dir = out_dir;
    if (!o.resume) hf_note(o.init, o.config, o.configs_dir);
    forge_train_install_signal_handlers();
    forge_train_result res;
    s = forge_train(&o, &res);
    if (s != FORGE_OK) return train_fail(s, comm);
    int rank = forge_comm_rank(comm);
    forge_comm_destroy(comm);
    if (samples > 0 && rank == 0) {
        printf("\n=== %ld samples from %s (temperature 0.8, top-k 40) ===\n", samples, res.last_checkpoint);
        sample_options so = {.ckpt = res.last_checkpoint, .prompt = "", .runtime = o.runtime, .tokens = 120,
                             .count = samples, .seed = 1, .temperature = 0.8f, .top_p = 0.95f, .top_k = 40,
                             .no_graph = o.no_graph};
        s = sample_run(&so);
        if (s != FORGE_OK) return fail(s);
    }
    return 0;
}

/* ---- forge bench ---------------------------------------------------------------- */

static const char *BENCH_HELP =
    "usage: forge bench [train|matmul|ops|gemm|gemm-epi|attention|all] [options] [--steps N] [--reps N]\n"
    "  (the lab's suites, kernel variants and characterization: build/cuda/forge-lab --help)\n"
    "  train   training tokens/s, peak memory and MFU for tiny and gpt-10m (cpu) or\n"
    "          gpt-10m and gpt2-124m (cuda), on random tokens\n"
    "  matmul  CPU matmul GFLOP/s against the measured FMA peak of all threads\n"
    "  ops     each op's time at gpt-10m training shapes (cuda: B=8, T=512; cpu: B=2, T=128);\n"
    "          --ops-batch B --ops-seq T --ops-embd C --ops-heads NH override them (C=384, NH=6)\n"
    "  gemm    bf16 GEMM: forge's wgmma kernel vs cuBLAS (--device cuda only)\n"
    "  gemm-epi  the fused GEMM epilogues alone (bias+GELU, residual, bf16 out, GELU backward,\n"
    "          C +=) vs separate passes, cuBLAS(Lt) (--device cuda only; also part of gemm)\n"
    "  attention  causal attention: forge's bf16 flash kernels vs forge's unfused fp32 path\n"
    "          (--device cuda only; --quick: the first two shapes;\n"
    "          PyTorch SDPA baselines: tools/sdpa_bench.py); with --baseline CMD (python3\n"
    "          tools/sdpa_bench.py: PyTorch SDPA on cuDNN) forge's kernels paired with CMD instead,\n"
    "          --steps rounds of --reps calls each side, at the issue-18 shapes, ratio with its CI\n"
    "  --results DIR  where every suite writes its <date>_<commit>/ folder (default results)\n"
    "  --order sequential|interleaved  how the GEMM suites (gemm, gemm-epi) time a\n"
    "          group's cells: interleaved (their default) runs one rep of each cell per round, so all see\n"
    "          the same clocks and the table adds a paired per-round ratio with its CI; sequential times\n"
    "          each cell's reps back to back (the other suites always do)\n"
    "  --only \"pat1|pat2\"  run only the cells whose \"name@group\" contains a pattern\n"
    "          (one shape for a profiler: --only \"(gpt2 dW mlp fc)\" forge bench gemm)\n"
    "  --quick  the smaller shapes only (attention, gemm-epi)\n"
    "train only:\n"
    "  --cases \"CONFIG:BxT,...\"  the models and batches (default gpt-10m:32x512,gpt2-124m:8x1024 on cuda)\n"
    "  --breakdown  after the timed steps, one step op by op: device time per op and between ops,\n"
    "          then per op and argument sizes (us per call)\n"
    "  --baseline CMD  step CMD (python3 tools/torch_train_bench.py: PyTorch, torch.compile, bf16\n"
    "          autocast, fused AdamW, SDPA) in turn with forge, --steps rounds, and print the paired\n"
    "          ratio with its CI and both peak memories\n"
    "runtime options (train, ops):\n" RUNTIME_HELP;

static int cmd_bench(int argc, char **argv, const char *argv0) {
    if (wants_help(argc, argv)) {
        fputs(BENCH_HELP, stdout);
        return 0;
    }
    const char *what = "all", *v;
    runtime_flags rf = {0};
    int quick = 0;
    long steps = 5, reps = 10;
    /* ops shapes: 0 = the gpt-10m default of the device (see BENCH_HELP) */
    long ops_b = 0, ops_t = 0, ops_c = 384, ops_nh = 6;
    const char *results = NULL, *order = NULL, *only = NULL;
    forge_bench_train_options to = {0};
    args a = {argc, argv, 0, NULL, 0};
    forge_status s = FORGE_OK;
    for (a.i = 0; a.i < argc && s == FORGE_OK; a.i++) {
        if (runtime_flag(&a, &rf, &s)) continue;
        STR_OPT("--only", only)
        if (strcmp(argv[a.i], "--quick") == 0) {
            quick = 1;
            continue;
        }
        if (strcmp(argv[a.i], "--breakdown") == 0) {
            to.breakdown = 1;
            continue;
        }
        STR_OPT("--cases", to.cases)
        STR_OPT("--baseline", to.baseline)
        INT_OPT("--steps", steps, 1, 100000)
        INT_OPT("--reps", reps, 1, 100000)
        STR_OPT("--results", results)
        STR_OPT("--order", order)
        INT_OPT("--ops-batch", ops_b, 1, 4096)
        INT_OPT("--ops-seq", ops_t, 1, 65536)
        INT_OPT("--ops-embd", ops_c, 1, 65536)
        INT_OPT("--ops-heads", ops_nh, 1, 1024)
        if (argv[a.i][0] != '-' && a.n_positional == 0) {
            what = argv[a.i];
            a.n_positional++;
            continue;
        }
        return fail(usage_error("bench", "unknown argument ", argv[a.i]));
    }
    forge_runtime_options rt;
    if (s == FORGE_OK) s = runtime_options_build("bench", &rf, &rt);
    if (s != FORGE_OK) return fail(s);
    const char *device = forge_device_name(rt.device);
    forge_harness_set_default_root(results); /* every suite writes under --results DIR (default results/) */
    forge_harness_set_cell_filter(only);
    if (order) {
        forge_timing_order o;
        s = forge_timing_order_parse(order, &o);
        if (s != FORGE_OK) return fail(s);
        forge_harness_set_default_order(o);
    }
    if (strcmp(what, "gemm-epi") == 0) {
        s = forge_bench_gemm_epi(stdout, device, (int)reps, quick);
        return s == FORGE_OK ? 0 : fail(s);
    }
    if (strcmp(what, "attention") == 0) {
        s = to.baseline ? forge_bench_attention_paired(stdout, device, to.baseline, (int)steps, (int)reps)
                        : forge_bench_attention(stdout, device, (int)reps, quick);
        return s == FORGE_OK ? 0 : fail(s);
    }
    int do_train = strcmp(what, "train") == 0 || strcmp(what, "all") == 0;
    int do_matmul = strcmp(what, "matmul") == 0 || (strcmp(what, "all") == 0 && rt.device == FORGE_DEVICE_CPU);
    int do_ops = strcmp(what, "ops") == 0;
    int do_gemm = strcmp(what, "gemm") == 0;
    if (!do_train && !do_matmul && !do_ops && !do_gemm) return fail(usage_error("bench", "unknown suite ", what));
    if (do_ops && ops_c % ops_nh != 0)
        return fail(forge_error(FORGE_ERR_ARG, "bench ops: --ops-embd %ld must be divisible by --ops-heads %ld",
                                ops_c, ops_nh));
    if (do_ops) {
        int gpu = rt.device != FORGE_DEVICE_CPU;
        s = forge_bench_ops(stdout, &rt, ops_b ? (int)ops_b : gpu ? 8 : 2, ops_t ? (int)ops_t : gpu ? 512 : 128,
                            (int)ops_c, (int)ops_nh, 8192, NULL);
    }
    if (do_matmul) s = forge_bench_cpu_matmul(stdout, (int)reps);
    if (do_gemm) s = forge_bench_gemm(stdout, device, (int)reps);
    to.steps = (int)steps;
    if (s == FORGE_OK && do_train) s = forge_bench_train(stdout, &rt, configs_dir(argv0), &to);
    return s == FORGE_OK ? 0 : fail(s);
}

/* ---- forge init ----------------------------------------------------------------- */

static const char *INIT_HELP =
    "usage: forge init --config NAME|PATH --out DIR [--seed S]\n"
    "  Writes DIR/model.safetensors: the model as `forge train` initialises it (Hugging Face\n"
    "  names, config in the metadata) and, when the config has a Hugging Face equivalent, DIR/config.json\n"
    "  for transformers' from_pretrained, e.g. to compare forge against another framework.\n";

static int cmd_init(int argc, char **argv, const char *argv0) {
    if (wants_help(argc, argv)) {
        fputs(INIT_HELP, stdout);
        return 0;
    }
    const char *config = NULL, *out = NULL, *v;
    long seed = 1337;
    args a = {argc, argv, 0, NULL, 0};
    forge_status s = FORGE_OK;
    for (a.i = 0; a.i < argc && s == FORGE_OK; a.i++) {
        STR_OPT("--config", config)
        STR_OPT("--out", out)
        INT_OPT("--seed", seed, 0, LONG_MAX)
        return fail(usage_error("init", "unknown argument ", argv[a.i]));
    }
    if (s != FORGE_OK) return fail(s);
    if (!config || !out) {
        fputs(INIT_HELP, stderr);
        return 2;
    }
    forge_model_config cfg;
    forge_backend *be = NULL;
    forge_pool *pool = NULL;
    forge_model *m = NULL;
    s = forge_config_resolve(&cfg, config, configs_dir(argv0));
    if (s == FORGE_OK) hf_note(NULL, config, configs_dir(argv0));
    if (s == FORGE_OK) s = forge_backend_create(&be, FORGE_DEVICE_CPU, NULL);
    if (s == FORGE_OK) s = forge_pool_create(&pool, be);
    if (s == FORGE_OK) s = forge_model_create(&m, &cfg, pool, (uint64_t)seed);
    if (s == FORGE_OK) s = forge_mkdir_p(out); /* its parents too, as train and tokenize make theirs */
    if (s == FORGE_OK) s = forge_checkpoint_save(out, m, NULL, NULL, NULL);
    if (s == FORGE_OK) printf("wrote %s/model.safetensors (%s, %zu parameters, seed %ld)\n", out, cfg.name,
                              m->n_elements, seed);
    forge_model_free(m);
    forge_pool_destroy(pool);
    forge_backend_destroy(be);
    return s == FORGE_OK ? 0 : fail(s);
}

/* ---- main ----------------------------------------------------------------------- */

static const char *MAIN_HELP =
    "forge: a from-scratch LLM training framework (GPT-2 and Llama families)\n"
    "usage: forge <command> [options]   (forge <command> --help for details)\n"
    "  train       train a model; with no options, the CPU demo job\n"
    "  sample      generate text from a checkpoint\n"
    "  eval        a checkpoint's loss, perplexity and bits per byte on held-out data\n"
    "  plot        loss curves of runs to a PNG\n"
    "  tokenize    text files -> token shards\n"
    "  tokenizer   tokenizer train: learn a BPE vocabulary\n"
    "  bench       benchmarks\n"
    "  init        write an initialised checkpoint\n";

/* OpenMP threads that finish a parallel region first wait for the others; by
 * default libgomp spins there (up to 300000 pauses, milliseconds on AMD Zen)
 * before it sleeps. With a core to each thread that is cheap, but beside
 * another busy process the waiting thread spins on a core while the thread it
 * waits for is queued behind that process, and forge's CPU runs take several
 * times longer and burn CPU time doing nothing (docs/cpu.md: the tiny step 3-7x
 * slower, 2-3x the CPU time, beside busy neighbours on the 2-core VM). Waiting
 * passively gives the core back at once, at a small cost to a machine forge has
 * to itself. libgomp reads the policy once, when it loads, before main: so for
 * CPU runs forge sets OMP_WAIT_POLICY=passive and executes itself again. A
 * policy the user chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT set) is kept, and
 * --device cuda runs are left alone. FORGE_OMP_POLICY_SET marks the re-executed
 * process, which removes both variables again so that programs forge starts
 * (gnuplot, a baseline's Python) see the user's environment. */
static void omp_wait_passively(int argc, char **argv) {
    if (getenv("FORGE_OMP_POLICY_SET")) {
        unsetenv("FORGE_OMP_POLICY_SET");
        unsetenv("OMP_WAIT_POLICY");
        return;
    }
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    for (int i = 1; i < argc; i++) {
        const char *v = strncmp(argv[i], "--device=", 9) == 0 ? argv[i] + 9
                        : strcmp(argv[i], "--device") == 0 && i + 1 < argc ? argv[i + 1]
                                                                           : NULL;
        if (v && strncmp(v, "cuda", 4) == 0) return;
    }
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0 || setenv("FORGE_OMP_POLICY_SET", "1", 1) != 0) return;
    execv("/proc/self/exe", argv);
    /* no /proc (or exec refused): run on with libgomp's default policy */
    unsetenv("FORGE_OMP_POLICY_SET");
    unsetenv("OMP_WAIT_POLICY");
}

int main(int argc, char **argv) {
    omp_wait_passively(argc, argv);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        fputs(MAIN_HELP, stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    int n = argc - 2;
    char **rest = argv + 2;
    if (strcmp(cmd, "train") == 0) return cmd_train(n, rest, argv[0]);
    if (strcmp(cmd, "sample") == 0) return cmd_sample(n, rest);
    if (strcmp(cmd, "eval") == 0) return cmd_eval(n, rest);
    if (strcmp(cmd, "plot") == 0) return cmd_plot(n, rest);
    if (strcmp(cmd, "tokenize") == 0) return cmd_tokenize(n, rest);
    if (strcmp(cmd, "tokenizer") == 0) return cmd_tokenizer(n, rest);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(n, rest, argv[0]);
    if (strcmp(cmd, "init") == 0) return cmd_init(n, rest, argv[0]);
    fprintf(stderr, "forge: unknown command \"%s\"\n%s", cmd, MAIN_HELP);
    return 2;
}
