/* test_train.c: the trainer end to end: resume is bit-exact, a non-finite
 * loss stops cleanly, checkpoints round-trip, and TinyStories val loss falls. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/data/tokenize.h"
#include "../src/data/tokenizer.h"
#include "../src/model/safetensors.h"
#include "../src/train/checkpoint.h"
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
    const char *files[1] = {text};
    forge_tokenizer *tok;
    if (forge_tokenizer_train(&tok, files, 1, 320, 0) != FORGE_OK) return NULL;
    forge_status s = forge_tokenizer_save(tok, dir);
    if (s == FORGE_OK) s = forge_tokenize_files(tok, files, 1, dir, 0.1, 1, NULL);
    forge_tokenizer_free(tok);
    return s == FORGE_OK ? dir : NULL;
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

static void test_resume_exact(const char *json, const char *label) {
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
    o.tokens_per_step = 4 * 32 * 2; /* two micro-batches: accumulation is part of the state */
    o.loss_out = straight;
    o.loss_out_cap = 20;
    CHECK_OK(forge_train(&o, NULL));

    base_options(&o, config, test_tmpdir());
    o.tokens_per_step = 4 * 32 * 2;
    o.loss_out = resumed;
    o.loss_out_cap = 20;
    o.stop_after = 10;
    forge_train_result r;
    CHECK_OK(forge_train(&o, &r));
    CHECK(r.steps_done == 10);
    o.stop_after = 0;
    o.resume = o.out_dir;
    CHECK_OK(forge_train(&o, &r));
    CHECK(r.steps_done == 10);
    for (int i = 0; i < 20; i++)
        CHECK_MSG(memcmp(&straight[i], &resumed[i], sizeof(float)) == 0, "step %d: %.9g straight vs %.9g resumed",
                  i + 1, straight[i], resumed[i]);
    CHECK(straight[19] < straight[0]);
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

static void test_nonfinite_stops(void) {
    TEST_CASE("a non-finite loss stops training with a clear message and keeps the checkpoint");
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
    forge_status s = forge_train(&o, NULL);
    CHECK(s == FORGE_ERR_NUMERIC);
    CHECK_MSG(strstr(forge_error_message(), "last good checkpoint") != NULL, "message: %s", forge_error_message());
    char again[1024];
    CHECK_OK(forge_checkpoint_resolve(out_dir, again, sizeof again));
    CHECK(strcmp(again, ckpt) == 0);
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
    TEST_CASE("memory: peak bytes equal with 1 and 8 accumulation steps (micro-batch memory recycled)");
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
    CHECK_MSG(peak[0] == peak[1] && peak[0] > 0, "peak %zu bytes (accum 1) vs %zu (accum 8)", peak[0], peak[1]);
}

void suite_train(void) {
    test_peak_memory_accumulation();
    test_resume_exact(TINY_GPT2, "resume: 20 steps == 10 + resume + 10, bitwise (gpt2, accumulation 2)");
    test_resume_exact(TINY_LLAMA, "resume: 20 steps == 10 + resume + 10, bitwise (llama)");
    test_checkpoint_round_trip();
    test_nonfinite_stops();
    test_bad_options();
    test_tinystories_learns();
}
