/* test_train.c: the trainer end to end: resume is bit-exact, a non-finite
 * loss stops cleanly, checkpoints round-trip, and TinyStories val loss falls;
 * the guards (finite checkpoints, option and state validation, config
 * conflicts) and the run directory (lock, collection, log cut, write errors). */
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/base/fs.h"
#include "../src/data/shards.h"
#include "../src/data/tokenize.h"
#include "../src/data/tokenizer.h"
#include "../src/model/safetensors.h"
#include "../src/train/checkpoint.h"
#include "../src/train/evaluate.h"
#include "../src/train/plot.h"
#include "../src/runtime/pool.h"
#include "../src/model/config.h"
#include "../src/train/run_dir.h"
#include "../src/train/trainer.h"
#include "test.h"

static const char *TINY_GPT2 =
    "{\"family\": \"gpt2\", \"vocab_size\": 320, \"context_length\": 32, \"d_model\": 32,"
    " \"n_layers\": 2, \"n_heads\": 4}";
static const char *TINY_LLAMA =
    "{\"family\": \"llama\", \"vocab_size\": 320, \"context_length\": 32, \"d_model\": 32,"
    " \"n_layers\": 2, \"n_heads\": 4, \"n_kv_heads\": 2, \"ffn_hidden\": 64}";

/* A small data directory: a 320-id BPE trained on the head of TinyStories
 * valid (or a built-in text when the shared data is absent), tokenized. */
static const char *data_dir(void) {
    static char dir[512];
    if (dir[0]) return dir;
    snprintf(dir, sizeof dir, "%s", test_tmpdir());
    char text[600];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    FILE *out = fopen(text, "w");
    const char *src = test_data_path("tinystories/valid.txt");
    if (src) {
        FILE *in = fopen(src, "rb");
        char buf[65536];
        size_t total = 0, n;
        while (in && total < 300000 && (n = fread(buf, 1, sizeof buf, in)) > 0) {
            fwrite(buf, 1, n, out);
            total += n;
        }
        if (in) fclose(in);
    } else {
        for (int i = 0; i < 3000; i++)
            fprintf(out, "The cat %d sat on the mat and looked at the dog.\n<|endoftext|>\n", i % 17);
    }
    fclose(out);
    return test_tokenized_dir(dir, text, 320) ? dir : NULL;
}

static const char *write_config(const char *json) {
    static char path[8][600];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, 600, "%s/model.json", test_tmpdir());
    FILE *f = fopen(p, "w");
    fputs(json, f);
    fclose(f);
    return p;
}

static void base_options(forge_train_options *o, const char *config, const char *out_dir) {
    forge_train_options_default(o);
    o->config = config;
    o->data_dir = data_dir();
    o->out_dir = out_dir;
    o->batch_size = 4;
    o->seq_len = 32;
    o->steps = 20;
    o->lr = 3e-3f;
    o->eval_every = 0;
    o->eval_batches = 2;
    o->quiet = 1;
    o->runtime.threads = 2;
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    o->progress = devnull;
}

static void test_resume_exact(const char *json, const char *label, forge_train_precision precision) {
    TEST_CASE(label);
    if (!data_dir()) {
        CHECK_MSG(0, "could not build the test data: %s", forge_error_message());
        return;
    }
    const char *config = write_config(json);
    float straight[20], resumed[20];
    memset(resumed, 0, sizeof resumed);
    forge_train_options o;
    base_options(&o, config, test_tmpdir());
    o.runtime.precision = precision;
    o.tokens_per_step = 4 * 32 * 2; /* two micro-batches: accumulation is part of the state */
    o.loss_out = straight;
    o.loss_out_cap = 20;
    CHECK_OK(forge_train(&o, NULL));

    base_options(&o, config, test_tmpdir());
    o.runtime.precision = precision;
    o.tokens_per_step = 4 * 32 * 2;
    o.loss_out = resumed;
    o.loss_out_cap = 20;
    o.stop_after = 10;
    forge_train_result r;
    CHECK_OK(forge_train(&o, &r));
    CHECK(r.steps_done == 10);
    o.stop_after = 0;
    o.resume = o.out_dir;
    /* the precision is a run key: resumed without --precision (the CPU's default is fp32), the run continues in
     * its checkpoint's */
    o.runtime.precision = FORGE_TRAIN_FP32;
    o.precision_given = 0;
    CHECK_OK(forge_train(&o, &r));
    CHECK(r.steps_done == 10);
    for (int i = 0; i < 20; i++)
        CHECK_MSG(memcmp(&straight[i], &resumed[i], sizeof(float)) == 0, "step %d: %.9g straight vs %.9g resumed",
                  i + 1, straight[i], resumed[i]);
    CHECK(straight[19] < straight[0]);
    char ckpt[1024], prec[8] = "?";
    CHECK_OK(forge_checkpoint_resolve(o.out_dir, ckpt, sizeof ckpt));
    CHECK_OK(forge_checkpoint_read_precision(ckpt, prec, sizeof prec));
    CHECK_MSG(strcmp(prec, precision == FORGE_TRAIN_BF16 ? "bf16" : "fp32") == 0, "checkpoint precision \"%s\"", prec);
    if (precision == FORGE_TRAIN_BF16) {
        /* given explicitly, another precision wins (the fp32 masters carry over): the next 5 steps are fp32's */
        float more[25];
        memcpy(more, resumed, sizeof resumed);
        o.loss_out = more;
        o.loss_out_cap = 25;
        o.steps = 25;
        o.precision_given = 1;
        CHECK_OK(forge_train(&o, &r));
        CHECK(r.steps_done == 5);
        CHECK_OK(forge_checkpoint_resolve(o.out_dir, ckpt, sizeof ckpt));
        CHECK_OK(forge_checkpoint_read_precision(ckpt, prec, sizeof prec));
        CHECK_MSG(strcmp(prec, "fp32") == 0, "after resuming in fp32: checkpoint precision \"%s\"", prec);
    }
}

/* Byte-for-byte equal files */
static int files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        char ba[65536], bb[65536];
        size_t na = fread(ba, 1, sizeof ba, fa), nb = fread(bb, 1, sizeof bb, fb);
        if (na != nb || memcmp(ba, bb, na) != 0) same = 0;
        if (na < sizeof ba) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* bf16 runs with the residual adds' gradients lent (runtime/tape.h: forge_tape_grad_lend) and copied: every step's
 * loss and the final checkpoint (weights, AdamW moments, trainer state) the same bits, two loans per layer and
 * micro-batch (the attention and MLP projections' outputs), and the pool's peak no higher. */
static void test_grad_lending_exact(const char *json, int n_layers, const char *label) {
    TEST_CASE(label);
    if (!data_dir()) {
        CHECK_MSG(0, "could not build the test data: %s", forge_error_message());
        return;
    }
    const char *config = write_config(json);
    enum { STEPS = 8, ACCUM = 2 };
    float losses[2][STEPS];
    forge_train_result r[2];
    char dirs[2][600];
    for (int copy = 0; copy < 2; copy++) {
        snprintf(dirs[copy], sizeof dirs[copy], "%s", test_tmpdir());
        forge_train_options o;
        base_options(&o, config, dirs[copy]);
        o.runtime.precision = FORGE_TRAIN_BF16;
        o.steps = STEPS;
        o.tokens_per_step = 4 * 32 * ACCUM;
        o.loss_out = losses[copy];
        o.loss_out_cap = STEPS;
        o.no_grad_lending = copy;
        CHECK_OK(forge_train(&o, &r[copy]));
    }
    if (test_case_failed()) return;
    CHECK_MSG(r[0].grads_lent == (size_t)STEPS * ACCUM * 2 * n_layers && r[1].grads_lent == 0,
              "%zu gradients lent (expected %d), %zu with lending off", r[0].grads_lent, STEPS * ACCUM * 2 * n_layers,
              r[1].grads_lent);
    for (int i = 0; i < STEPS; i++)
        CHECK_MSG(memcmp(&losses[0][i], &losses[1][i], sizeof(float)) == 0, "step %d: %.9g lent vs %.9g copied", i + 1,
                  losses[0][i], losses[1][i]);
    static const char *files[] = {"model.safetensors", "state.safetensors"};
    for (int f = 0; f < 2; f++) {
        char a[1400], b[1400];
        snprintf(a, sizeof a, "%s/%s", r[0].last_checkpoint, files[f]);
        snprintf(b, sizeof b, "%s/%s", r[1].last_checkpoint, files[f]);
        CHECK_MSG(files_equal(a, b), "%s and %s differ", a, b);
    }
    CHECK_MSG(r[0].peak_in_use <= r[1].peak_in_use && r[0].peak_bytes <= r[1].peak_bytes,
              "pool peak in use %zu lent vs %zu copied, reserved %zu vs %zu", r[0].peak_in_use, r[1].peak_in_use,
              r[0].peak_bytes, r[1].peak_bytes);
}

/* 20 steps in bf16 and in fp32 from the same init and batches: every step's loss within 2% relative (the bf16
 * roundings of activations, gradients and weights move the trajectory, a broken op moves it much more), the loss
 * falls, and a second bf16 run gives the same bits (deterministic). */
static void test_bf16_tracks_fp32(const char *json, const char *label) {
    TEST_CASE(label);
    if (!data_dir()) {
        CHECK_MSG(0, "could not build the test data: %s", forge_error_message());
        return;
    }
    const char *config = write_config(json);
    float l32[20], l16[20], again[20];
    forge_train_options o;
    const forge_train_precision precisions[3] = {FORGE_TRAIN_FP32, FORGE_TRAIN_BF16, FORGE_TRAIN_BF16};
    float *losses[3] = {l32, l16, again};
    for (int r = 0; r < 3; r++) {
        base_options(&o, config, test_tmpdir());
        o.runtime.precision = precisions[r];
        o.loss_out = losses[r];
        o.loss_out_cap = 20;
        CHECK_OK(forge_train(&o, NULL));
    }
    double worst = 0;
    for (int i = 0; i < 20; i++) {
        const double rel = fabs((double)l16[i] - l32[i]) / fabs((double)l32[i]);
        if (rel > worst) worst = rel;
    }
    CHECK_MSG(worst < 2e-2, "worst relative loss difference bf16 vs fp32 %.3g", worst);
    CHECK(l16[19] < l16[0] - 0.1f);
    CHECK_MSG(memcmp(l16, again, sizeof l16) == 0, "two bf16 runs differ");
}

static void test_checkpoint_round_trip(void) {
    TEST_CASE("checkpoint: HF names, config and tokenizer inside; reload is exact");
    if (!data_dir()) return;
    forge_train_options o;
    const char *out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_LLAMA), out_dir);
    o.steps = 2;
    forge_train_result r;
    CHECK_OK(forge_train(&o, &r));
    char ckpt[1024], file[1200];
    CHECK_OK(forge_checkpoint_resolve(out_dir, ckpt, sizeof ckpt));
    CHECK(strstr(ckpt, "ckpt_000002") != NULL);
    snprintf(file, sizeof file, "%s/model.safetensors", ckpt);
    forge_safetensors *st;
    CHECK_OK(forge_safetensors_open(&st, file));
    if (test_case_failed()) return;
    const forge_st_entry *k = forge_safetensors_find(st, "model.layers.1.self_attn.k_proj.weight");
    CHECK(k && k->shape[0] == 16 && k->shape[1] == 32); /* 2 kv heads x 8 */
    CHECK(forge_safetensors_find(st, "model.layers.0.mlp.gate_proj.weight") != NULL);
    CHECK(forge_safetensors_find(st, "lm_head.weight") != NULL);
    CHECK(forge_safetensors_meta(st, "forge_config") != NULL);
    forge_safetensors_close(st);
    forge_model_config cfg;
    CHECK_OK(forge_checkpoint_read_config(ckpt, &cfg));
    CHECK(cfg.n_kv_heads == 2 && cfg.family == FORGE_FAMILY_LLAMA);
    forge_tokenizer *tok;
    CHECK_OK(forge_tokenizer_load(&tok, ckpt));
    if (tok) forge_tokenizer_free(tok);
    CHECK(forge_checkpoint_resolve("/nonexistent-forge-dir", ckpt, sizeof ckpt) == FORGE_ERR_IO);
}


static void read_latest(const char *out_dir, char *name, size_t cap) {
    char path[700];
    snprintf(path, sizeof path, "%s/latest", out_dir);
    name[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(name, (int)cap, f)) name[0] = '\0';
        fclose(f);
    }
    name[strcspn(name, "\n")] = '\0';
}

static void write_latest(const char *out_dir, const char *name) {
    char path[700];
    snprintf(path, sizeof path, "%s/latest", out_dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%s\n", name);
        fclose(f);
    }
}

static int exists(const char *dir, const char *name) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* Rewrites the checkpoint's file (state.safetensors or model.safetensors) with metadata key `key` set to `value`
 * (NULL removes it) and, when poison_tensor is set, that tensor's element 7 set to poison. */
static void edit_ckpt_file(const char *ckpt, const char *file, const char *key, const char *value,
                           const char *poison_tensor, float poison) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", ckpt, file);
    forge_safetensors *st;
    CHECK_OK(forge_safetensors_open(&st, path));
    if (!st) return;
    int n = forge_safetensors_count(st), nm = forge_safetensors_meta_count(st);
    forge_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    void **copies = calloc((size_t)n + 1, sizeof *copies);
    const char *keys[16], *vals[16];
    int k = 0;
    for (int i = 0; e && copies && i < n; i++) {
        e[i] = *forge_safetensors_entry(st, i);
        copies[i] = malloc(e[i].bytes ? e[i].bytes : 1);
        memcpy(copies[i], e[i].data, e[i].bytes);
        if (poison_tensor && strcmp(e[i].name, poison_tensor) == 0) memcpy((float *)copies[i] + 7, &poison, 4);
        e[i].data = copies[i];
    }
    for (int i = 0; i < nm && i < 16; i++) {
        forge_safetensors_meta_at(st, i, &keys[k], &vals[k]);
        if (key && strcmp(keys[k], key) == 0) {
            if (!value) continue;
            vals[k] = value;
        }
        k++;
    }
    char *tmp = malloc(strlen(path) + 8);
    sprintf(tmp, "%s.edit", path);
    CHECK(e && copies);
    if (e && copies) CHECK_OK(forge_safetensors_write(tmp, e, n, keys, vals, k)); /* values point into the mapping */
    forge_safetensors_close(st);
    CHECK(rename(tmp, path) == 0);
    free(tmp);
    for (int i = 0; copies && i < n; i++) free(copies[i]);
    free(copies);
    free(e);
}

static void edit_state(const char *ckpt, const char *key, const char *value, const char *poison_tensor,
                       float poison) {
    edit_ckpt_file(ckpt, "state.safetensors", key, value, poison_tensor, poison);
}

/* A directory's ckpt_* entries, counted; the names joined into list (for messages). */
static int list_checkpoints(const char *dir, char *list, size_t cap) {
    DIR *d = opendir(dir);
    int n = 0;
    list[0] = '\0';
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "ckpt_", 5) != 0) continue;
        n++;
        size_t len = strlen(list);
        snprintf(list + len, cap - len, "%s%s", len ? " " : "", de->d_name);
    }
    if (d) closedir(d);
    return n;
}

static void test_nonfinite_stops(void) {
    TEST_CASE("resume refuses a checkpoint whose weights are non-finite, naming the file and tensor");
    if (!data_dir()) return;
    forge_train_options o;
    const char *out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.steps = 4;
    o.stop_after = 2;
    CHECK_OK(forge_train(&o, NULL));
    /* poison the saved weights, then resume */
    char ckpt[1024], file[1200];
    CHECK_OK(forge_checkpoint_resolve(out_dir, ckpt, sizeof ckpt));
    snprintf(file, sizeof file, "%s/model.safetensors", ckpt);
    FILE *f = fopen(file, "r+b");
    CHECK(f != NULL);
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    float nan = NAN;
    fseek(f, size - 4 * 100, SEEK_SET); /* inside the last tensor */
    for (int i = 0; i < 100; i++) fwrite(&nan, 4, 1, f);
    fclose(f);
    o.stop_after = 0;
    o.resume = out_dir;
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_DATA, "model.safetensors: 100 non-finite weights", "\"transformer.");
    char again[1024];
    CHECK_OK(forge_checkpoint_resolve(out_dir, again, sizeof again));
    CHECK(strcmp(again, ckpt) == 0);

    TEST_CASE("weights that turn non-finite are never checkpointed; the message names the last good one");
    out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.steps = 6;
    o.stop_after = 2;
    o.ckpt_every = 1;
    CHECK_OK(forge_train(&o, NULL));
    /* lr x weight decay overflows: step 3's loss is finite, its update makes the weights infinite */
    o.stop_after = 0;
    o.resume = out_dir;
    o.lr = 1e30f;
    o.weight_decay = 1e30f;
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_NUMERIC, "step 3: checkpoint", "not written: the weights hold");
    CHECK_MSG(test_msg_has("the first in \"", "last good checkpoint is") && test_msg_has("ckpt_000002 (resume", NULL),
              "message: %s", forge_error_message());
    char hint[700];
    snprintf(hint, sizeof hint, "(resume with --resume %s and a lower --lr)", out_dir);
    CHECK_MSG(test_msg_has(hint, NULL), "message: %s", forge_error_message());
    char latest[256];
    read_latest(out_dir, latest, sizeof latest);
    CHECK_MSG(strcmp(latest, "ckpt_000002") == 0, "latest = %s", latest);
    CHECK(!exists(out_dir, "ckpt_000003"));
    o.lr = 3e-3f; /* the named checkpoint really is good: it loads and trains on */
    o.weight_decay = 0.1f;
    CHECK_OK(forge_train(&o, NULL));

    TEST_CASE("a non-finite loss after unsaved non-finite weights names the last good checkpoint");
    out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.steps = 8;
    o.stop_after = 2;
    o.ckpt_every = 2;
    CHECK_OK(forge_train(&o, NULL));
    o.stop_after = 0;
    o.resume = out_dir;
    o.lr = 1e30f;
    o.weight_decay = 1e30f;
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_NUMERIC, "step 4: the loss is", "last good checkpoint is");
    CHECK_MSG(test_msg_has("ckpt_000002 (resume", NULL), "message: %s", forge_error_message());
    read_latest(out_dir, latest, sizeof latest);
    CHECK(strcmp(latest, "ckpt_000002") == 0);

    TEST_CASE("no good checkpoint yet: the message says so instead of naming one");
    base_options(&o, write_config(TINY_GPT2), test_tmpdir());
    o.steps = 3;
    o.ckpt_every = 1;
    o.lr = 1e30f;
    o.weight_decay = 1e30f;
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_NUMERIC, "not written", "no good checkpoint of this run yet");
}

static void test_resume_state_validation(void) {
    TEST_CASE("resume refuses non-finite AdamW moments, naming the file and the tensor");
    if (!data_dir()) return;
    forge_train_options o;
    const char *out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.steps = 6;
    o.stop_after = 3;
    CHECK_OK(forge_train(&o, NULL));
    char ckpt[1024], saved[1200], cmd[2600];
    CHECK_OK(forge_checkpoint_resolve(out_dir, ckpt, sizeof ckpt));
    snprintf(saved, sizeof saved, "%s/saved.safetensors", out_dir);
    snprintf(cmd, sizeof cmd, "cp '%s/state.safetensors' '%s'", ckpt, saved);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/state.safetensors'", saved, ckpt);
    o.stop_after = 0;
    o.resume = out_dir;
    edit_state(ckpt, NULL, NULL, "adamw.m", NAN);
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_DATA, "state.safetensors: tensor \"adamw.m\" holds 1 non-finite",
              "\"transformer.wte.weight\"");
    CHECK(system(cmd) == 0);
    edit_state(ckpt, NULL, NULL, "adamw.v", INFINITY);
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_DATA, "state.safetensors: tensor \"adamw.v\"", "non-negative");
    CHECK(system(cmd) == 0);
    edit_state(ckpt, NULL, NULL, "adamw.v", -1.0f);
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_DATA, "tensor \"adamw.v\" holds 1 non-finite or negative", NULL);

    TEST_CASE("resume validates every state field: integer, in range, consistent");
    static const struct {
        const char *key, *value, *want;
    } bad[] = {
        {"step", "-1", "\"step\" = \"-1\": expected an integer in [0, 2147483647]"},
        {"step", "99999999999", "\"step\" = \"99999999999\": expected an integer in [0, 2147483647]"},
        {"step", " 3", "\"step\" = \" 3\""},
        {"step", "3x", "\"step\" = \"3x\""},
        {"step", "", "\"step\" = \"\""},
        {"step", "7", "\"step\" = 7 exceeds \"total_steps\" = 6"},
        {"step", "2", "\"adamw_step\" = 3 but \"step\" = 2"},
        {"step", NULL, "metadata has no \"step\""},
        {"total_steps", "0", "\"total_steps\" = 0: expected at least 1"},
        {"total_steps", "-6", "\"total_steps\" = \"-6\""},
        {"adamw_step", "4", "\"adamw_step\" = 4 but \"step\" = 3"},
        {"adamw_step", "18446744073709551616", "\"adamw_step\" = \"18446744073709551616\""},
        {"loader_batches", "2", "\"loader_batches\" = 2 with \"step\" = 3"},
        {"loader_batches", "-3", "\"loader_batches\" = \"-3\""},
        {"loader_batches", "18446744073709551615", "\"loader_batches\" = \"18446744073709551615\""},
        {"seed", "1e3", "\"seed\" = \"1e3\""},
        {"seed", "-1337", "\"seed\" = \"-1337\""},
        {"tokens_seen", "nan", "\"tokens_seen\" = \"nan\": expected a whole number"},
        {"tokens_seen", "-384", "\"tokens_seen\" = \"-384\""},
        {"tokens_seen", "1.5", "\"tokens_seen\" = \"1.5\""},
        {"tokens_seen", "2", "\"tokens_seen\" = 2 with \"loader_batches\" = 3"},
        {"tokens_seen", NULL, "metadata has no \"tokens_seen\""},
        {"precision", "fp16", "\"precision\" = \"fp16\": expected \"fp32\", \"tf32\" or \"bf16\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(system(cmd) == 0);
        edit_state(ckpt, bad[i].key, bad[i].value, NULL, 0);
        forge_status st = forge_train(&o, NULL);
        CHECK_MSG(st == FORGE_ERR_DATA && test_msg_has("state.safetensors", bad[i].want), "%s = %s: %s: %s", bad[i].key,
                  bad[i].value ? bad[i].value : "(missing)", forge_status_name(st), forge_error_message());
    }
    CHECK(system(cmd) == 0);

    TEST_CASE("resume: --steps below the checkpoint's step is refused; equal to it trains nothing");
    o.steps = 2;
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_ARG, "is at step 3, past --steps 2", NULL);
    o.steps = 3;
    forge_train_result r;
    CHECK_OK(forge_train(&o, &r));
    CHECK(r.steps_done == 0 && strstr(r.last_checkpoint, "ckpt_000003") != NULL);
    o.steps = 6;
    CHECK_OK(forge_train(&o, &r));
    CHECK(r.steps_done == 3);
}

static void test_option_validation(void) {
    TEST_CASE("options that make AdamW undefined are refused, naming the flag and the range");
    forge_train_options o;
    forge_train_options_default(&o);
    o.data_dir = "unused";
    CHECK_OK(forge_train_options_validate(&o));
    static const struct {
        const char *flag;
        float value;
        const char *want;
    } bad[] = {
        {"--beta1", 1.0f, "--beta1 1: expected a finite number in [0, 1)"},
        {"--beta1", -0.1f, "--beta1 -0.1"},
        {"--beta2", 1.0f, "--beta2 1: expected a finite number in [0, 1)"},
        {"--eps", 0.0f, "--eps 0: expected a finite number in (0, inf)"},
        {"--eps", -1e-8f, "--eps -1e-08"},
        {"--lr", -1.0f, "--lr -1: expected a finite number in [0, inf)"},
        {"--lr", NAN, "--lr nan"},
        {"--lr", INFINITY, "--lr inf"},
        {"--weight-decay", -0.1f, "--weight-decay -0.1"},
        {"--weight-decay", NAN, "--weight-decay nan"},
        {"--grad-clip", INFINITY, "--grad-clip inf"},
        {"--grad-clip", -1.0f, "--grad-clip -1"},
        {"--warmup-frac", 1.5f, "--warmup-frac 1.5: expected a finite number in [0, 1]"},
        {"--warmup-frac", -0.5f, "--warmup-frac -0.5"},
        {"--min-lr-ratio", 2.0f, "--min-lr-ratio 2: expected a finite number in [0, 1]"},
        {"--min-lr-ratio", NAN, "--min-lr-ratio nan"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        forge_train_options_default(&o);
        o.data_dir = "unused";
        const char *f = bad[i].flag;
        float *field = strcmp(f, "--beta1") == 0         ? &o.beta1
                       : strcmp(f, "--beta2") == 0       ? &o.beta2
                       : strcmp(f, "--eps") == 0         ? &o.eps
                       : strcmp(f, "--lr") == 0          ? &o.lr
                       : strcmp(f, "--weight-decay") == 0 ? &o.weight_decay
                       : strcmp(f, "--grad-clip") == 0   ? &o.grad_clip
                       : strcmp(f, "--warmup-frac") == 0 ? &o.warmup_frac
                                                         : &o.min_lr_ratio;
        *field = bad[i].value;
        CHECK_ERR_MSG(forge_train_options_validate(&o), FORGE_ERR_ARG, bad[i].want, NULL);
    }
    /* the ends that are fine */
    forge_train_options_default(&o);
    o.data_dir = "unused";
    o.beta1 = 0.0f;
    o.beta2 = 0.0f;
    o.lr = 0.0f;
    o.weight_decay = 0.0f;
    o.grad_clip = 0.0f;
    o.warmup_frac = 1.0f;
    o.min_lr_ratio = 0.0f;
    CHECK_OK(forge_train_options_validate(&o));
    o.keep_checkpoints = 0;
    CHECK_ERR_MSG(forge_train_options_validate(&o), FORGE_ERR_ARG, "--keep-checkpoints 0: expected an integer >= 1",
              NULL);

    TEST_CASE("forge_train refuses --beta1 1 and --eps 0 --beta2 0 before touching the run directory");
    if (!data_dir()) return;
    char out_dir[600];
    snprintf(out_dir, sizeof out_dir, "%s/run", test_tmpdir());
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.beta1 = 1.0f;
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_ARG, "--beta1 1", "[0, 1)");
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.eps = 0.0f;
    o.beta2 = 0.0f;
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_ARG, "--eps 0", "(0, inf)");
    CHECK(access(out_dir, F_OK) != 0);
}

static void test_config_conflict(void) {
    TEST_CASE("--config with --resume: the same config is fine, a different one is refused naming both");
    if (!data_dir()) return;
    forge_train_options o;
    const char *out_dir = test_tmpdir();
    const char *gpt2 = write_config(TINY_GPT2);
    base_options(&o, gpt2, out_dir);
    o.steps = 4;
    o.stop_after = 2;
    CHECK_OK(forge_train(&o, NULL));
    o.stop_after = 3;
    o.resume = out_dir;
    const char *other = write_config(
        "{\"family\": \"gpt2\", \"vocab_size\": 320, \"context_length\": 32, \"d_model\": 32,"
        " \"n_layers\": 3, \"n_heads\": 4}");
    o.config = other;
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_ARG, other, "conflicts with the config of the checkpoint");
    CHECK_MSG(test_msg_has("ckpt_000002", "n_layers 3 in --config, 2 in the checkpoint"), "message: %s",
              forge_error_message());
    o.config = write_config(TINY_LLAMA);
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_ARG, "family 1 in --config, 0 in the checkpoint", NULL);
    o.config = "no-such-config";
    CHECK(forge_train(&o, NULL) == FORGE_ERR_IO);
    o.config = gpt2; /* the same one */
    CHECK_OK(forge_train(&o, NULL));
    o.config = NULL; /* none: the checkpoint's */
    o.stop_after = 0;
    forge_train_result r;
    CHECK_OK(forge_train(&o, &r));
    CHECK(r.steps_done == 1);
}

static void test_resume_tokenizer(void) {
    TEST_CASE("resume refuses a --data whose tokenizer differs from the checkpoint's, naming both");
    if (!data_dir()) return;
    forge_train_options o;
    const char *out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.steps = 4;
    o.stop_after = 2;
    CHECK_OK(forge_train(&o, NULL));
    /* another corpus, another 320-id vocabulary: the same ids stand for other bytes */
    const char *other = test_tmpdir();
    char text[600];
    snprintf(text, sizeof text, "%s/text.txt", other);
    FILE *f = fopen(text, "w");
    for (int i = 0; f && i < 3000; i++) fprintf(f, "zebra quixotic jukebox %d wyvern fjord\n<|endoftext|>\n", i % 23);
    if (f) fclose(f);
    CHECK(test_tokenized_dir(other, text, 320));
    o.stop_after = 0;
    o.resume = out_dir;
    o.data_dir = other;
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_DATA, "tokenizer of the checkpoint", other);
    CHECK_MSG(test_msg_has("ckpt_000002/encoder.json", "differ from id"), "message: %s", forge_error_message());
    o.data_dir = data_dir(); /* the run's own data: resumes */
    forge_train_result r;
    CHECK_OK(forge_train(&o, &r));
    CHECK(r.steps_done == 2);
}

/* The checkpoint records the run's settings (checkpoint.h: forge_run_settings) exactly; one without them (as
 * written before they existed) reads as not recorded, with its planned length. */
static void test_run_settings_recorded(void) {
    TEST_CASE("checkpoint: the run's settings recorded exactly; a checkpoint without them reads as not recorded");
    if (!data_dir()) return;
    forge_train_options o;
    const char *out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.steps = 3;
    o.stop_after = 1;
    o.batch_size = 2;
    o.seq_len = 16;
    o.tokens_per_step = 64;
    o.lr = 1.2345678e-3f, o.warmup_frac = 0.3f, o.min_lr_ratio = 0.05f, o.weight_decay = 0.07f;
    o.grad_clip = 0.9f, o.beta1 = 0.85f, o.beta2 = 0.97f, o.eps = 3e-9f;
    CHECK_OK(forge_train(&o, NULL));
    char ckpt[1100];
    CHECK_OK(forge_checkpoint_resolve(out_dir, ckpt, sizeof ckpt));
    forge_run_settings r;
    int planned = 0;
    CHECK_OK(forge_checkpoint_read_settings(ckpt, &r, &planned));
    char *abs = realpath(o.data_dir, NULL);
    CHECK(r.recorded && planned == 3 && r.batch_size == 2 && r.seq_len == 16 && r.tokens_per_step == 64);
    CHECK(r.lr == o.lr && r.warmup_frac == o.warmup_frac && r.min_lr_ratio == o.min_lr_ratio &&
          r.weight_decay == o.weight_decay && r.grad_clip == o.grad_clip && r.beta1 == o.beta1 &&
          r.beta2 == o.beta2 && r.eps == o.eps);
    CHECK_MSG(abs && strcmp(r.data_dir, abs) == 0, "data_dir \"%s\", expected \"%s\"", r.data_dir, abs ? abs : "");
    free(abs);
    /* a malformed value names the key */
    edit_state(ckpt, "seq_len", "-16", NULL, 0);
    CHECK_ERR_MSG(forge_checkpoint_read_settings(ckpt, &r, &planned), FORGE_ERR_DATA, "seq_len", "state.safetensors");
    /* the same state without the settings' keys: not recorded, the plan still read */
    static const char *const run_keys[] = {"batch_size",  "seq_len",      "tokens_per_step", "lr",
                                           "warmup_frac", "min_lr_ratio", "weight_decay",    "grad_clip",
                                           "beta1",       "beta2",        "eps",             "eval_every",
                                           "eval_batches", "ckpt_every",  "keep_checkpoints", "early_stop",
                                           "data_dir"};
    for (size_t i = 0; i < sizeof run_keys / sizeof run_keys[0]; i++) edit_state(ckpt, run_keys[i], NULL, NULL, 0);
    CHECK_OK(forge_checkpoint_read_settings(ckpt, &r, &planned));
    CHECK(!r.recorded && planned == 3);
}

/* log.jsonl without its timings (each line cut at "tokens_per_s"): what two runs of the same training share */
static char *log_without_timings(const char *path) {
    char *text = NULL;
    size_t n = 0;
    if (forge_read_file(path, &text, &n) != FORGE_OK) return NULL;
    char *out = malloc(n + 1), *w = out;
    for (const char *line = text; out && *line;) {
        const char *end = strchr(line, '\n'), *cut = strstr(line, ", \"tokens_per_s\"");
        if (!end) end = line + strlen(line);
        const char *stop = cut && cut < end ? cut : end;
        memcpy(w, line, (size_t)(stop - line));
        w += stop - line;
        *w++ = '\n';
        line = *end ? end + 1 : end;
    }
    if (out) *w = '\0';
    free(text);
    return out;
}

/* `forge train --resume RUN` with no other flag, from another working directory, continues the run bit for bit:
 * the batch geometry, the schedule, AdamW and --data come from the checkpoint. A flag given with another value is
 * said. */
static void test_cli_resume_keeps_settings(void) {
    TEST_CASE("forge train --resume RUN alone continues the run bit for bit (settings and data from the checkpoint)");
    const char *forge = test_forge_binary();
    if (!forge || !data_dir()) {
        test_case_skip("no forge binary beside the test binary, or no test data");
        return;
    }
    const char *config = write_config(TINY_GPT2), *dir = test_tmpdir();
    char common[2400], cmd[3000];
    snprintf(common, sizeof common,
             "%s train --config %s --data %s --steps 6 --batch 2 --seq-len 16 --tokens-per-step 64 --lr 0.004 "
             "--warmup-frac 0.2 --weight-decay 0.05 --eval-every 3 --eval-batches 2 --threads 1 --quiet",
             forge, config, data_dir());
    snprintf(cmd, sizeof cmd, "%s --out %s/full >%s/full.txt 2>&1", common, dir, dir);
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
    snprintf(cmd, sizeof cmd, "%s --out %s/part --stop-after 3 >%s/part.txt 2>&1", common, dir, dir);
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
    snprintf(cmd, sizeof cmd, "cd / && %s train --resume %s/part --threads 1 --quiet >%s/resume.txt 2>&1", forge, dir,
             dir);
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
    char a[1200], b[1200];
    snprintf(a, sizeof a, "%s/full/ckpt_000006/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/part/ckpt_000006/model.safetensors", dir);
    CHECK_MSG(files_equal(a, b), "%s differs from the uninterrupted run's", b);
    snprintf(a, sizeof a, "%s/full/log.jsonl", dir);
    snprintf(b, sizeof b, "%s/part/log.jsonl", dir);
    char *x = log_without_timings(a), *y = log_without_timings(b);
    CHECK_MSG(x && y && strcmp(x, y) == 0 && strstr(x, "val_loss"), "the logs differ:\n%s\n--\n%s", x ? x : "",
              y ? y : "");
    free(x);
    free(y);
    char out[1200], *text = NULL;
    size_t n = 0;
    snprintf(out, sizeof out, "%s/resume.txt", dir);
    CHECK_OK(forge_read_file(out, &text, &n));
    CHECK_MSG(text && strstr(text, "resuming on the run's data"), "output: %s", text ? text : "");
    free(text);
    /* another --batch is used, and said */
    snprintf(cmd, sizeof cmd, "%s train --resume %s/part --steps 7 --batch 4 --threads 1 --quiet >%s/other.txt 2>&1",
             forge, dir, dir);
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
    snprintf(out, sizeof out, "%s/other.txt", dir);
    CHECK_OK(forge_read_file(out, &text, &n));
    CHECK_MSG(text && strstr(text, "--batch 4 (the run's: 2)") && strstr(text, "not a bit-identical"), "output: %s",
              text ? text : "");
    free(text);
}

/* A checkpoint whose embedded config is damaged is bad data (exit 1), named with its metadata key; a config file
 * the user wrote stays a config error (exit 2). */
static void test_damaged_embedded_config(void) {
    TEST_CASE("checkpoint: a damaged embedded config is FORGE_ERR_DATA naming the file and \"forge_config\"");
    if (!data_dir()) return;
    forge_train_options o;
    const char *out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.steps = 1;
    CHECK_OK(forge_train(&o, NULL));
    char ckpt[1100];
    CHECK_OK(forge_checkpoint_resolve(out_dir, ckpt, sizeof ckpt));
    edit_ckpt_file(ckpt, "model.safetensors", "forge_config", "{\"family\": \"gpt2\", \"vocab_size\": ", NULL, 0);
    forge_model_config cfg;
    CHECK_ERR_MSG(forge_checkpoint_read_config(ckpt, &cfg), FORGE_ERR_DATA, "model.safetensors", "forge_config");
}

/* On the CPU a micro-batch whose activations cannot fit the machine's memory is refused before anything is
 * allocated (malloc would not refuse it; the kernel would kill the process). */
static void test_host_memory_floor(void) {
    TEST_CASE("train on the CPU refuses a micro-batch larger than the machine's memory, naming --batch");
    if (!data_dir()) return;
    const double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
    const double per_seq = 32.0 * (320 + 4 * 32 * 2) * 4.0; /* TINY_GPT2 at T = 32: logits + 4 C a layer */
    const double b = 2.0 * ram / per_seq + 1;
    if (!(ram > 0) || b > (double)(INT_MAX / 64)) {
        test_case_skip("this machine's memory is too large to exceed with an int batch");
        return;
    }
    forge_train_options o;
    base_options(&o, write_config(TINY_GPT2), test_tmpdir());
    o.batch_size = (int)b;
    o.seq_len = 32;
    o.steps = 1;
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_OOM, "lower --batch", "GiB");
}

static void test_run_dir_consistency(void) {
    TEST_CASE("checkpoint tokenizer files are renamed into place (no temporary directory left)");
    if (!data_dir()) return;
    forge_train_options o;
    const char *out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.steps = 10;
    o.ckpt_every = 1;
    o.stop_after = 5;
    CHECK_OK(forge_train(&o, NULL));
    char ckpt[1024];
    CHECK_OK(forge_checkpoint_resolve(out_dir, ckpt, sizeof ckpt));
    CHECK(exists(ckpt, "encoder.json") && exists(ckpt, "vocab.bpe") && !exists(ckpt, ".tokenizer.tmp"));
    forge_tokenizer *tok = NULL;
    CHECK_OK(forge_tokenizer_load(&tok, ckpt));
    forge_tokenizer_free(tok);

    TEST_CASE("keep-newest-2 holds across resumes: leftovers of interrupted runs are collected");
    char list[2000], path[1400];
    CHECK_MSG(list_checkpoints(out_dir, list, sizeof list) == 2, "after 5 steps: %s", list);
    /* what a killed run leaves: an older complete checkpoint it had not collected, a half-deleted one,
     * one half-written past latest, temporary files */
    snprintf(path, sizeof path, "cp -r '%s/ckpt_000005' '%s/ckpt_000001' && mkdir '%s/ckpt_000002' && "
             "touch '%s/ckpt_000002/vocab.bpe' && mkdir -p '%s/ckpt_000006/.tokenizer.tmp' && "
             "touch '%s/ckpt_000006/model.safetensors.tmp' '%s/ckpt_000005/state.safetensors.tmp' '%s/latest.tmp'",
             out_dir, out_dir, out_dir, out_dir, out_dir, out_dir, out_dir, out_dir);
    CHECK(system(path) == 0);
    o.stop_after = 7;
    o.resume = out_dir;
    CHECK_OK(forge_train(&o, NULL));
    CHECK_MSG(list_checkpoints(out_dir, list, sizeof list) == 2 && strstr(list, "ckpt_000006") &&
                  strstr(list, "ckpt_000007"),
              "after the resume: %s", list);
    CHECK(!exists(out_dir, "latest.tmp"));
    o.stop_after = 0;
    o.keep_checkpoints = 3;
    CHECK_OK(forge_train(&o, NULL));
    CHECK_MSG(list_checkpoints(out_dir, list, sizeof list) == 3 && strstr(list, "ckpt_000010"), "keep 3: %s", list);

    TEST_CASE("log.jsonl after kill + resume: steps past the checkpoint are cut, none repeats");
    out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.steps = 10;
    o.ckpt_every = 4;
    o.eval_every = 2;
    o.stop_after = 6;
    CHECK_OK(forge_train(&o, NULL));
    write_latest(out_dir, "ckpt_000004"); /* as if killed after logging steps 5 and 6 */
    snprintf(path, sizeof path, "%s/log.jsonl", out_dir);
    FILE *f = fopen(path, "a");
    if (f) {
        fputs("{\"step\": 7, \"loss\": 1.", f); /* a torn line */
        fclose(f);
    }
    o.stop_after = 0;
    o.resume = out_dir;
    CHECK_OK(forge_train(&o, NULL));
    int seen[12] = {0}, vals[12] = {0}, lines = 0, torn = 0;
    char line[512];
    f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        lines++;
        const char *p = strstr(line, "\"step\": ");
        int step = p ? atoi(p + 8) : -1;
        if (step < 1 || step > 10 || !strchr(line, '}')) {
            torn++;
            continue;
        }
        if (strstr(line, "val_loss")) vals[step]++;
        else seen[step]++;
    }
    if (f) fclose(f);
    CHECK(torn == 0 && lines == 15);
    for (int i = 1; i <= 10; i++) {
        CHECK_MSG(seen[i] == 1, "step %d logged %d times", i, seen[i]);
        CHECK_MSG(vals[i] == (i % 2 == 0), "val loss of step %d logged %d times", i, vals[i]);
    }
}

static void test_run_dir_lock(void) {
    TEST_CASE("two runs on one --out: the second is refused naming the holder");
    if (!data_dir()) return;
    forge_train_options o;
    const char *out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.steps = 2;
    int fd = -1;
    CHECK_OK(forge_run_dir_lock(out_dir, &fd));
    char want_buf[64];
    const char *want = want_buf;
    snprintf(want_buf, sizeof want_buf, "pid %d on ", (int)getpid());
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_IO, "is in use by another run", want);
    CHECK(!exists(out_dir, "log.jsonl"));
    forge_run_dir_unlock(fd);
    CHECK_OK(forge_train(&o, NULL));
    CHECK_OK(forge_run_dir_lock(out_dir, &fd)); /* released when forge_train returned */
    forge_run_dir_unlock(fd);

    TEST_CASE("the run lock of a process killed by SIGKILL is released by the kernel");
    int ready[2];
    CHECK(pipe(ready) == 0);
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        int cfd;
        char ok = forge_run_dir_lock(out_dir, &cfd) == FORGE_OK ? 'y' : 'n';
        if (write(ready[1], &ok, 1) != 1) _exit(1);
        for (;;) pause();
    }
    char ok = 'n';
    CHECK(child > 0 && read(ready[0], &ok, 1) == 1 && ok == 'y');
    snprintf(want_buf, sizeof want_buf, "pid %d on ", (int)child);
    CHECK_ERR_MSG(forge_run_dir_lock(out_dir, &fd), FORGE_ERR_IO, "is in use by another run", want);
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    close(ready[0]);
    close(ready[1]);
    CHECK_OK(forge_run_dir_lock(out_dir, &fd));
    forge_run_dir_unlock(fd);
}

static void test_log_write_failure(void) {
    TEST_CASE("a log write failure (disk full) stops the run with an error naming the log");
    if (access("/dev/full", W_OK) != 0) {
        test_case_skip("/dev/full not available");
        return;
    }
    if (!data_dir()) return;
    forge_train_options o;
    const char *out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.steps = 4;
    o.ckpt_every = 1;
    char log[700];
    snprintf(log, sizeof log, "%s/log.jsonl", out_dir);
    CHECK(symlink("/dev/full", log) == 0);
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_IO, "log.jsonl: cannot write the log after step 1",
              "No space left on device");
    CHECK(!exists(out_dir, "latest")); /* stopped before step 1's checkpoint */
}

static void test_bad_options(void) {
    TEST_CASE("trainer: bad options are errors, not crashes");
    if (!data_dir()) return;
    forge_train_options o;
    base_options(&o, write_config(TINY_GPT2), test_tmpdir());
    o.seq_len = 64; /* > context_length 32 */
    CHECK(forge_train(&o, NULL) == FORGE_ERR_ARG);
    base_options(&o, write_config(TINY_GPT2), test_tmpdir());
    o.tokens_per_step = 100; /* not a multiple of 4*32 */
    CHECK(forge_train(&o, NULL) == FORGE_ERR_ARG);
    base_options(&o, write_config(TINY_GPT2), test_tmpdir());
    o.data_dir = "/nonexistent-forge-data";
    CHECK(forge_train(&o, NULL) != FORGE_OK);
    base_options(&o, "no-such-config", test_tmpdir());
    CHECK(forge_train(&o, NULL) == FORGE_ERR_IO);
}

/* val_loss lines of log.jsonl, in order */
static int read_val_losses(const char *out_dir, float *vals, int cap) {
    char path[600], line[512];
    snprintf(path, sizeof path, "%s/log.jsonl", out_dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *v = strstr(line, "\"val_loss\": ");
        if (v && n < cap) vals[n++] = strtof(v + 12, NULL);
    }
    if (f) fclose(f);
    return n;
}

static void test_tinystories_learns(void) {
    TEST_CASE("tinystories: a short run's val loss falls");
    if (!test_data_path("tinystories/valid.txt")) {
        test_case_skip("../shared/data/tinystories not found");
        return;
    }
    if (!data_dir()) return;
    forge_train_options o;
    const char *out_dir = test_tmpdir();
    base_options(&o, write_config(TINY_GPT2), out_dir);
    o.steps = 120;
    o.batch_size = 8;
    o.eval_every = 20;
    o.eval_batches = 4;
    forge_train_result r;
    CHECK_OK(forge_train(&o, &r));
    float vals[16];
    int n = read_val_losses(out_dir, vals, 16);
    CHECK(n == 6);
    if (n >= 2) CHECK_MSG(vals[n - 1] < vals[0] - 0.3f, "val loss %.3f -> %.3f", vals[0], vals[n - 1]);
    CHECK_MSG(r.last_val_loss < logf(320.0f) - 1.0f, "final val loss %.3f vs log(V) %.3f", r.last_val_loss,
              logf(320.0f));
}

static void test_peak_memory_accumulation(void) {
    TEST_CASE("memory: activation peak equal with 1 and 8 accumulation steps (micro-batch memory recycled)");
    if (!data_dir()) return;
    size_t peak[2];
    int accum[2] = {1, 8};
    for (int k = 0; k < 2; k++) {
        forge_train_options o;
        base_options(&o, write_config(TINY_GPT2), test_tmpdir());
        o.steps = 2;
        o.tokens_per_step = 4L * 32 * accum[k];
        forge_train_result r;
        CHECK_OK(forge_train(&o, &r));
        peak[k] = r.peak_bytes;
    }
    /* the step uploads all its micro-batches at once (ids and targets, i32, B x T each; the pool rounds to 512
     * bytes), so the only difference is those 7 extra micro-batches */
    const size_t batches = 2 * 7 * (size_t)(4 * 32 * 4);
    CHECK_MSG(peak[0] > 0 && peak[1] - peak[0] == batches,
              "peak %zu bytes (accum 1) vs %zu (accum 8): expected %zu more (the extra micro-batches' ids)", peak[0],
              peak[1], batches);
}

static void test_eval(void) {
    TEST_CASE("eval: every token after the first predicted once, the mean of direct forwards, bits per byte, sources");
    const char *dir = data_dir();
    if (!dir) {
        CHECK_MSG(0, "could not build the test data: %s", forge_error_message());
        return;
    }
    forge_model_config cfg;
    forge_backend *be = NULL;
    forge_pool *pool = NULL;
    forge_tape *tape = NULL;
    forge_model *m = NULL;
    forge_tokenizer *tok = NULL;
    int32_t *all = NULL, *one = NULL;
    uint32_t *bytes_of = NULL;
    size_t n_all = 0, n_one = 0;
    int V = 0;
    char what[1400], path[1200];
    CHECK_OK(forge_config_load_file(&cfg, write_config(TINY_GPT2)));
    CHECK_OK(forge_backend_create_cpu(&be, 2, 0));
    if (be) CHECK_OK(forge_pool_create(&pool, be));
    if (pool) CHECK_OK(forge_tape_create(&tape, pool));
    if (tape) CHECK_OK(forge_model_create(&m, &cfg, pool, 5));
    CHECK_OK(forge_tokenizer_load(&tok, dir));
    if (!m || !tok) goto done;
    CHECK_OK(forge_eval_load_tokens(dir, tok, cfg.vocab_size, &all, &n_all, what, sizeof what));
    CHECK_OK(forge_eval_token_bytes(tok, &bytes_of, &V));
    if (!all || !bytes_of) goto done;
    /* 3 batches of 4 windows of 16 and a partial fourth: n - 1 = 3 * 64 + 7 predicted tokens */
    const int B = 4, T = 16;
    const size_t n = (size_t)3 * B * T + 8;
    CHECK(n_all >= n);
    forge_eval_result r;
    CHECK_OK(forge_evaluate(m, tape, all, n, B, T, bytes_of, V, NULL, &r));
    /* the same windows one at a time, B = 1, the tail padded with ignored targets */
    double sum = 0.0;
    uint64_t bytes = 0;
    int64_t shape[2] = {1, T};
    forge_tensor *ids = NULL, *tg = NULL, *losses = NULL;
    CHECK_OK(forge_pool_tensor(pool, &ids, FORGE_I32, 2, shape, 1));
    CHECK_OK(forge_pool_tensor(pool, &tg, FORGE_I32, 2, shape, 1));
    forge_tape_set_recording(tape, 0);
    for (size_t w = 0; ids && tg && w * T < n - 1; w++) {
        for (int t = 0; t < T; t++) {
            const size_t p = w * T + (size_t)t;
            ((int32_t *)ids->data)[t] = p < n - 1 ? all[p] : 0;
            ((int32_t *)tg->data)[t] = p < n - 1 ? all[p + 1] : -1;
        }
        CHECK_OK(forge_model_forward(m, tape, ids, tg, 0.0f, &losses));
        for (int t = 0; t < T; t++)
            if (((int32_t *)tg->data)[t] >= 0) sum += ((const float *)losses->data)[t];
        forge_tape_reset(tape);
    }
    forge_tape_set_recording(tape, 1);
    for (size_t p = 1; p < n; p++) bytes += bytes_of[all[p]];
    CHECK_MSG(r.tokens == n - 1 && r.bytes == bytes, "%llu tokens, %llu bytes; expected %zu, %llu",
              (unsigned long long)r.tokens, (unsigned long long)r.bytes, n - 1, (unsigned long long)bytes);
    CHECK_MSG(fabs(r.loss - sum / (double)(n - 1)) <= 1e-6 * fabs(r.loss), "loss %.9g vs %.9g one window at a time",
              r.loss, sum / (double)(n - 1));
    CHECK(fabs(r.perplexity - exp(r.loss)) <= 1e-9 * r.perplexity);
    CHECK(fabs(r.bits_per_byte - sum / log(2.0) / (double)bytes) <= 1e-6 * r.bits_per_byte);
    /* a batch far wider than the text (13 windows): the same result, without a 1 << 20-row batch allocated */
    forge_eval_result wide;
    const size_t peak_before = forge_pool_get_stats(pool).peak_reserved;
    CHECK_OK(forge_evaluate(m, tape, all, n, 1 << 20, T, bytes_of, V, NULL, &wide));
    CHECK_MSG(wide.tokens == r.tokens && fabs(wide.loss - r.loss) <= 1e-6 * fabs(r.loss), "loss %.9g vs %.9g",
              wide.loss, r.loss);
    CHECK_MSG(forge_pool_get_stats(pool).peak_reserved <= peak_before + ((size_t)64 << 20),
              "peak %zu bytes after %zu", forge_pool_get_stats(pool).peak_reserved, peak_before);
    /* sources: the first val shard alone is a prefix of the directory's tokens; a text file is its encoding */
    CHECK_OK(forge_shard_path(path, sizeof path, dir, "val", 0));
    CHECK_OK(forge_eval_load_tokens(path, tok, cfg.vocab_size, &one, &n_one, what, sizeof what));
    CHECK(one && n_one <= n_all && memcmp(one, all, n_one * sizeof *one) == 0);
    free(one);
    one = NULL;
    snprintf(path, sizeof path, "%s/eval_text.txt", test_tmpdir());
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("The cat sat on the mat. <|endoftext|> It looked at the dog.\n", f);
        fclose(f);
    }
    CHECK_OK(forge_eval_load_tokens(path, tok, cfg.vocab_size, &one, &n_one, what, sizeof what));
    int32_t *enc = NULL;
    size_t n_enc = 0;
    const char *text = "The cat sat on the mat. <|endoftext|> It looked at the dog.\n";
    CHECK_OK(forge_tokenizer_encode(tok, text, strlen(text), 0, &enc, &n_enc));
    CHECK(one && enc && n_one == n_enc && memcmp(one, enc, n_enc * sizeof *enc) == 0);
    for (size_t i = 0; one && i < n_one; i++) CHECK(one[i] != forge_tokenizer_eot(tok)); /* ordinary text */
    free(enc);
    free(one); /* the call below sets it (to NULL, failing) */
    one = NULL;
    /* errors: no val shards; too few tokens; a window longer than the context */
    const char *empty = test_tmpdir();
    CHECK(forge_eval_load_tokens(empty, tok, cfg.vocab_size, &one, &n_one, what, sizeof what) == FORGE_ERR_DATA);
    CHECK(strstr(forge_error_message(), "no val_NNN.bin") != NULL);
    forge_error_clear();
    CHECK(forge_evaluate(m, tape, all, 1, B, T, bytes_of, V, NULL, &r) == FORGE_ERR_ARG);
    CHECK(forge_evaluate(m, tape, all, n, B, cfg.context_length + 1, bytes_of, V, NULL, &r) == FORGE_ERR_ARG);
    forge_error_clear();
done:
    free(all);
    free(one);
    free(bytes_of);
    forge_tokenizer_free(tok);
    forge_model_free(m);
    forge_tape_destroy(tape);
    forge_pool_destroy(pool);
    forge_backend_destroy(be);
}

static void write_log(const char *dir, const char *text) {
    char p[1200];
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/log.jsonl", dir);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_plot(void) {
    TEST_CASE("plot: runs' logs overlaid into a PNG (gnuplot); a log without loss and odd paths are refused");
    char a[1100], b[1100], png[1100], bad[1100];
    snprintf(a, sizeof a, "%s/run-a", test_tmpdir());
    snprintf(b, sizeof b, "%s/run-b", test_tmpdir());
    snprintf(bad, sizeof bad, "%s/run-bad", test_tmpdir());
    snprintf(png, sizeof png, "%s/both.png", test_tmpdir());
    write_log(a, "{\"step\": 1, \"tokens\": 512, \"loss\": 5.0}\n{\"step\": 2, \"tokens\": 1024, \"loss\": 4.0}\n"
                 "{\"step\": 2, \"tokens\": 1024, \"val_loss\": 4.5}\n{\"step\": 3, \"tok"); /* a torn last line */
    write_log(b, "{\"step\": 1, \"loss\": 6.0}\n{\"step\": 2, \"loss\": 5.5}\n"); /* before the tokens field */
    write_log(bad, "{\"hello\": 1}\n");
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        printf("  (gnuplot not installed: the drawing itself is skipped)\n");
    } else {
        const char *runs[2] = {a, b};
        CHECK_OK(forge_plot_runs(runs, 2, png));
        FILE *f = fopen(png, "rb");
        unsigned char magic[8] = {0};
        if (f) {
            CHECK(fread(magic, 1, 8, f) == 8);
            fclose(f);
        }
        CHECK_MSG(memcmp(magic, "\x89PNG\r\n\x1a\n", 8) == 0, "%s is not a PNG", png);
    }
    const char *bad_runs[1] = {bad};
    CHECK(forge_plot_runs(bad_runs, 1, png) == FORGE_ERR_IO);
    CHECK(strstr(forge_error_message(), "holds no loss") != NULL);
    forge_error_clear();
    const char *quoted[1] = {"run\"x"};
    CHECK(forge_plot_runs(quoted, 1, png) == FORGE_ERR_ARG);
    forge_error_clear();
}

/* --early-stop: a run whose val loss stops improving ends there, its best checkpoint kept and named by `best`; a
 * run stopped before that and resumed ends at the same step (the val history is read back from the log) */
static void test_early_stop(void) {
    TEST_CASE("train --early-stop: stops after N evaluations without a new best, keeps the best checkpoint; a "
              "resumed run stops at the same step");
    if (!data_dir()) {
        CHECK_MSG(0, "could not build the test data: %s", forge_error_message());
        return;
    }
    const char *config = write_config(TINY_GPT2);
    char dir_a[700], dir_b[700];
    snprintf(dir_a, sizeof dir_a, "%s/early_a", test_tmpdir());
    snprintf(dir_b, sizeof dir_b, "%s/early_b", test_tmpdir());
    forge_train_options o;
    base_options(&o, config, dir_a);
    o.steps = 400;
    o.lr = 5e-2f; /* too high: the val loss soon stops improving */
    o.eval_every = 2;
    o.eval_batches = 1;
    o.early_stop = 2;
    forge_train_result a;
    CHECK_OK(forge_train(&o, &a));
    CHECK_MSG(a.early_stopped && a.steps_done < 400, "early_stopped %d after %d steps", a.early_stopped,
              a.steps_done);
    CHECK(a.best_val_loss <= a.last_val_loss && a.best_val_step < a.steps_done);
    char path[1500], name[64] = "";
    snprintf(path, sizeof path, "%s/best", dir_a);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (f) {
        if (fgets(name, sizeof name, f)) name[strcspn(name, "\n")] = '\0';
        fclose(f);
    }
    char want[64];
    snprintf(want, sizeof want, "ckpt_%06d", a.best_val_step);
    CHECK_MSG(strcmp(name, want) == 0, "best names \"%s\", expected %s", name, want);
    /* kept: the newest --keep-checkpoints (2) and best, nothing else (an earlier best is collected once it is not) */
    char list[1200];
    CHECK_MSG(list_checkpoints(dir_a, list, sizeof list) <= 3, "left in %s: %s (keep 2 + best)", dir_a, list);
    snprintf(path, sizeof path, "%s/%s/model.safetensors", dir_a, want);
    CHECK_MSG(access(path, F_OK) == 0, "%s is missing", path);
    CHECK(strstr(a.best_checkpoint, want) != NULL);
    if (a.steps_done < 4) return;

    base_options(&o, config, dir_b);
    o.steps = 400;
    o.lr = 5e-2f;
    o.eval_every = 2;
    o.eval_batches = 1;
    o.early_stop = 2;
    o.stop_after = a.steps_done - 2;
    forge_train_result b;
    CHECK_OK(forge_train(&o, &b));
    o.stop_after = 0;
    o.resume = dir_b;
    CHECK_OK(forge_train(&o, &b));
    CHECK_MSG(b.early_stopped && b.steps_done == 2 && b.best_val_step == a.best_val_step,
              "resumed: early_stopped %d after %d more steps, best at step %d (straight: best at %d)",
              b.early_stopped, b.steps_done, b.best_val_step, a.best_val_step);

    base_options(&o, config, dir_b);
    o.early_stop = 3; /* evaluations: none without --eval-every */
    CHECK_ERR_MSG(forge_train(&o, NULL), FORGE_ERR_ARG, "--early-stop 3", "--eval-every");
}

void suite_train(void) {
    test_peak_memory_accumulation();
    test_resume_exact(TINY_GPT2, "resume: 20 steps == 10 + resume + 10, bitwise (gpt2, accumulation 2)",
                      FORGE_TRAIN_FP32);
    test_resume_exact(TINY_LLAMA, "resume: 20 steps == 10 + resume + 10, bitwise (llama)", FORGE_TRAIN_FP32);
    test_resume_exact(TINY_GPT2, "bf16: resume is bitwise (the working copy re-derived from the masters; gpt2)",
                      FORGE_TRAIN_BF16);
    test_resume_exact(TINY_LLAMA, "bf16: resume is bitwise (llama)", FORGE_TRAIN_BF16);
    test_grad_lending_exact(TINY_GPT2, 2, "bf16: lent residual gradients give the copies' bits (gpt2)");
    test_grad_lending_exact(TINY_LLAMA, 2, "bf16: lent residual gradients give the copies' bits (llama)");
    test_bf16_tracks_fp32(TINY_GPT2, "bf16 vs fp32 from one init and one data order: the losses agree (gpt2)");
    test_bf16_tracks_fp32(TINY_LLAMA, "bf16 vs fp32 from one init and one data order: the losses agree (llama)");
    test_checkpoint_round_trip();
    test_nonfinite_stops();
    test_resume_state_validation();
    test_option_validation();
    test_config_conflict();
    test_resume_tokenizer();
    test_run_settings_recorded();
    test_cli_resume_keeps_settings();
    test_host_memory_floor();
    test_damaged_embedded_config();
    test_run_dir_consistency();
    test_early_stop();
    test_run_dir_lock();
    test_log_write_failure();
    test_bad_options();
    test_tinystories_learns();
    test_eval();
    test_plot();
}
