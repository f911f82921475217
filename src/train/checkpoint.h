/*
 * checkpoint.h: what a checkpoint directory holds, and how it is written.
 *
 *   model.safetensors  weights under Hugging Face names and layouts, config
 *                      JSON in the metadata ("forge_config"), so `forge
 *                      sample` needs nothing else
 *   config.json        the config in Hugging Face's schema (model/hf.h), so
 *                      transformers' from_pretrained(DIR) loads the
 *                      checkpoint; absent for a config HF cannot express
 *   state.safetensors  AdamW moments (flat, parameter layout) and the trainer
 *                      state in the metadata: step, batches drawn, seed, and
 *                      the run's settings (forge_run_settings), so that a
 *                      bare --resume continues the same run
 *   encoder.json, vocab.bpe  the tokenizer the model was trained with
 *
 * Every file is written to a temporary name and renamed (the tokenizer's two
 * files through DIR/.tokenizer.tmp/), state.safetensors last, and a run
 * directory's "latest" file (also renamed into place) names the newest
 * complete checkpoint, so an interruption at any point leaves the previous one
 * usable.
 *
 * A checkpoint never holds a non-finite value: the saver checks the weights
 * and both moments on the host copies it makes anyway (no extra device work
 * or sync per step) before it creates anything, and refuses with
 * FORGE_ERR_NUMERIC naming the first bad tensor and the count. The loaders
 * refuse such values too (FORGE_ERR_DATA), and load_state validates every
 * trainer field: an integer, in range, consistent with the others.
 */
#ifndef FORGE_CHECKPOINT_H
#define FORGE_CHECKPOINT_H

#include <stdint.h>

#include "../data/tokenizer.h"
#include "optimizer.h"

/* What a run must keep to be continued as the same run: the batch geometry the loader and the step drew, the lr
 * schedule, AdamW's hyper-parameters, the evaluations and checkpoints it logs and keeps, and the data. The CLI
 * takes them as the defaults of a resumed run (cli/forge.c); the trainer records them in every checkpoint. */
typedef struct {
    int recorded;                 /* 0: a checkpoint without these keys (written before they existed) */
    int batch_size, seq_len;      /* B and T as the run used them (seq_len resolved, never 0) */
    long tokens_per_step;         /* resolved: B * T * micro-batches per step */
    float lr, warmup_frac, min_lr_ratio, weight_decay, grad_clip, beta1, beta2, eps;
    int eval_every, eval_batches, ckpt_every, keep_checkpoints, early_stop;
    char data_dir[1024];          /* --data as an absolute path ("" when not known) */
} forge_run_settings;

typedef struct {
    int step;                /* optimizer steps completed */
    int total_steps;         /* the run's planned length (the lr schedule depends on it) */
    uint64_t loader_batches; /* training batches drawn so far */
    uint64_t seed;
    double tokens_seen;
    char precision[8];       /* the step's precision, "fp32", "tf32" or "bf16" ("": a checkpoint from before the key) */
    forge_run_settings run;  /* written when run.recorded; load_state leaves it alone (read_settings reads it) */
} forge_train_state;

/* The run settings recorded in dir's state.safetensors (dir: a checkpoint directory) and its planned length
 * (*total_steps). out->recorded = 0 when the checkpoint predates them; a malformed value is FORGE_ERR_DATA naming
 * the file and the key. */
forge_status forge_checkpoint_read_settings(const char *dir, forge_run_settings *out, int *total_steps);

/* The precision a checkpoint's run trained in (state.safetensors' "precision": "fp32", "tf32" or "bf16"), into
 * out; "" when the checkpoint predates the key. Another value is FORGE_ERR_DATA naming the file. */
forge_status forge_checkpoint_read_precision(const char *dir, char *out, size_t cap);

/* Writes a checkpoint into dir (created). opt, state and tok may be NULL.
 * FORGE_ERR_NUMERIC, with nothing created or written, when the weights or the
 * moments hold a non-finite value (or adamw.v a negative one). */
forge_status forge_checkpoint_save(const char *dir, const forge_model *m, const forge_optimizer *opt,
                                   const forge_train_state *state, const forge_tokenizer *tok);

/* Writes n_elements host values laid out like the parameters (the weights,
 * or their gradients) as a safetensors file under the HF names. */
forge_status forge_checkpoint_write_values(const char *path, const forge_model *m, const float *values);

/* Reads the config from dir/model.safetensors (or a .safetensors path): forge's own from its metadata, else
 * (a directory written by Hugging Face's save_pretrained) the config.json beside it, mapped (model/hf.h). */
forge_status forge_checkpoint_read_config(const char *path, forge_model_config *cfg);
/* Loads weights into an existing model of the same config: F32, or BF16/F16 widened to fp32; under HF's names or,
 * in a base model's file, without their "transformer." / "model." prefix. A missing tensor, a wrong shape, another
 * dtype, or a tensor that is no parameter of the model (a classification head...) is an error naming the file and
 * the tensor; GPT-2's saved mask buffers, RoPE frequencies and a tied lm_head copy are skipped. */
forge_status forge_checkpoint_load_weights(const char *path, forge_model *m);
/* Loads optimizer moments and trainer state from dir/state.safetensors. */
forge_status forge_checkpoint_load_state(const char *dir, forge_optimizer *opt, forge_train_state *state);

/* Counts the non-finite values (with nonnegative, also the negative ones) of
 * n_elements floats laid out like m's parameters; `values` need not be
 * aligned. first (cap bytes) gets the Hugging Face name of the tensor holding
 * the first one, *in_first how many that tensor holds. */
size_t forge_checkpoint_find_nonfinite(const forge_model *m, const void *values, int nonnegative, char *first,
                                       size_t cap, size_t *in_first);

/* Resolves a run directory (reads its "latest" file) or a checkpoint
 * directory (forge's, or an HF one holding model.safetensors) to the
 * checkpoint directory; out has cap bytes. An HF directory holding only a
 * sharded checkpoint or pytorch_model.bin is FORGE_ERR_UNSUPPORTED, saying
 * how to save it in one safetensors file. */
forge_status forge_checkpoint_resolve(const char *path, char *out, size_t cap);
/* Atomically points run_dir/latest at checkpoint directory name `name`. */
forge_status forge_checkpoint_set_latest(const char *run_dir, const char *name);
/* Atomically points run_dir/best at checkpoint directory name `name` (the lowest val loss of an early-stopping
 * run); run_dir_collect keeps the checkpoint it names. */
forge_status forge_checkpoint_set_best(const char *run_dir, const char *name);

#endif
