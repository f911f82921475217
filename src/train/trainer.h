/*
 * trainer.h: `forge train`: the training loop.
 *
 * One optimizer step = grad_accum micro-batches of (B, T) tokens, where
 * grad_accum = tokens_per_step / (B*T). Each micro-batch runs forward and
 * backward and then resets the tape, so its activations go back to the pool
 * before the next one: memory does not grow with the accumulation factor.
 * The loss of every micro-batch is scaled by 1/grad_accum in the classifier,
 * so the accumulated gradient is that of the mean loss over the step.
 */
#ifndef FORGE_TRAINER_H
#define FORGE_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "../backend/options.h"
#include "../base/status.h"

typedef struct {
    const char *config;     /* name in configs/ or a path; NULL = tiny, or with resume the checkpoint's
                               (given with resume, it must equal the checkpoint's config) */
    const char *configs_dir;/* where bare config names are looked up */
    const char *data_dir;   /* train_*.bin, val_*.bin, encoder.json, vocab.bpe */
    const char *out_dir;    /* checkpoints, log.jsonl */
    const char *resume;     /* run or checkpoint directory, or NULL */
    const char *init;       /* a fresh run (step 0, new optimizer) from these weights: a forge run or checkpoint
                               directory, or a Hugging Face save_pretrained directory (its config.json is mapped,
                               model/hf.h); NULL = initialise from seed. Excludes resume. */
    int batch_size;         /* B */
    int seq_len;            /* T; 0 = the config's context length */
    long tokens_per_step;   /* 0 = B*T (no accumulation) */
    int steps;
    float lr, warmup_frac, min_lr_ratio, weight_decay, grad_clip, beta1, beta2, eps;
    uint64_t seed;
    int eval_every, eval_batches; /* eval_every 0 = only at the end */
    int ckpt_every;               /* 0 = only at the end */
    int stop_after;               /* stop (with a checkpoint) after this step; 0 = run to the end */
    int keep_checkpoints;         /* newest complete checkpoints kept at each save (plus `latest`) [2] */
    int early_stop;               /* > 0: every evaluation with a new lowest val loss saves a checkpoint (named by the
                                   * run's `best` file), and the run stops after this many evaluations in a row
                                   * without one; 0 = off. Needs eval_every > 0. */
    forge_runtime_options runtime; /* device, matmul mode, attention, precision, threads, cache paths */
    int quiet;                    /* no progress lines */
    int no_graph;                 /* run every step op by op, never as a recorded graph (train/step.h) */
    int no_grad_lending;          /* the backward copies every gradient it could lend read-only (runtime/tape.h:
                                   * forge_tape_set_grad_lending): the reference the tests compare the lent path
                                   * with, bit for bit */
    int precision_given;          /* --precision (or --matmul) was given: a resumed run keeps it rather than its
                                   * checkpoint's precision */
    float *loss_out;              /* if set, loss_out[step-1] = that step's loss */
    int loss_out_cap;
    FILE *progress;               /* where progress lines go (stdout by default) */
    /* Data parallel (docs/distributed.md): the ranks of an mpirun job (NULL or one rank: a single process). The
     * global step (tokens_per_step) is the same whatever their number: each rank runs 1/N of its micro-batches;
     * rank 0 alone writes the log and the checkpoints, which are those of a single process. */
    struct forge_comm *comm;
    int zero1;                    /* shard the AdamW state over the ranks (ZeRO stage 1) */
    float bucket_mb;              /* the gradients are reduced in buckets of this many MiB, each launched during the
                                   * backward once final (train/buckets.h) [25]; 0: the whole block after it */
} forge_train_options;

void forge_train_options_default(forge_train_options *o);

/* FORGE_ERR_ARG naming the flag and what was expected for any option that
 * makes training undefined: beta1, beta2 outside [0, 1), eps <= 0, a negative
 * or non-finite lr / weight decay / grad clip, warm-up or min-lr fractions
 * outside [0, 1], counts below their minimum, --resume with --init. forge_train calls it first. */
forge_status forge_train_options_validate(const forge_train_options *o);

/* Results a caller (tests, the CLI) can inspect. */
typedef struct {
    int steps_done;
    float first_loss, last_loss;
    float last_val_loss;     /* NaN if never evaluated */
    float best_val_loss;     /* the lowest val loss of the run (NaN if never evaluated) */
    int best_val_step;       /* its step */
    int early_stopped;       /* the run ended at --early-stop */
    double tokens_per_second;
    size_t peak_bytes;       /* the pool's peak reserved (in use + cached) */
    size_t peak_in_use;      /* the pool's peak handed out */
    size_t grads_lent;       /* activation gradients the backward lent read-only rather than copied (tape.h) */
    char last_checkpoint[1200];
    char best_checkpoint[1200]; /* --early-stop: the checkpoint of the lowest val loss ("" if none) */
} forge_train_result;

/* Trains. The run directory (o->out_dir) is locked for the call (run_dir.h);
 * with o->resume the checkpoint is validated (finite values, consistent
 * state), log.jsonl is cut back to its step and training continues
 * bit-identically. A checkpoint is never written with non-finite values, and
 * a log or checkpoint write failure stops the run with FORGE_ERR_IO. */
forge_status forge_train(const forge_train_options *o, forge_train_result *result);

/* Set by SIGINT/SIGTERM; the loop saves a checkpoint and stops at the end of the step. */
void forge_train_install_signal_handlers(void);

#endif
