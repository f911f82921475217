/*
 * step.h: one training step on the device, the way the trainer and
 * `forge bench train` run it.
 *
 * A step is: zero the gradients; per micro-batch the forward, the backward
 * and the loss summed into a device scalar; in a data-parallel run the sum of
 * the ranks' gradients (optimizer.h) and losses; the global gradient norm; AdamW.
 * The host uploads the step's batches and learning rate first and reads the
 * loss and norm after: inside the step nothing waits for the host. On a
 * backend that records graphs (CUDA) the first step runs op by op (it warms
 * the pool and the kernels' one-time set-up), the second is recorded and
 * every later one replays the recording (one launch); a recording that went
 * stale (runtime/graph.h) is made again, and one that fails leaves the run
 * op by op, with a note.
 */
#ifndef FORGE_STEP_H
#define FORGE_STEP_H

#include "../model/model.h"
#include "../runtime/graph.h"
#include "../runtime/tape.h"
#include "optimizer.h"

typedef struct {
    int B, T;         /* micro-batch */
    int accum;        /* micro-batches per step */
    float grad_scale; /* the loss gradient's scale: 1 / tokens per step */
    int use_graph;    /* record and replay the step where the backend can */
    forge_comm *comm; /* data parallel: the ranks (NULL: one); each runs accum micro-batches of the global step, the
                         gradients and losses are summed over the ranks (the optimizer's communicator) and the
                         step runs op by op (the collectives wait on the host) */
    size_t bucket_bytes; /* data parallel: the gradient block is reduced in buckets of about this many bytes, each
                            launched during the last micro-batch's backward once final (buckets.h); 0: the whole
                            block after the backward. Ignored without an active communicator. */
} forge_step_options;

typedef struct forge_step forge_step;

forge_status forge_step_create(forge_step **out, forge_model *model, forge_tape *tape, forge_optimizer *opt,
                               const forge_step_options *o);
void forge_step_free(forge_step *st);

/* Uploads the step's accum micro-batches (ids and targets, (accum, B, T) each, host memory) and the learning
 * rate, then runs the step (or replays its recording) without waiting for it. */
forge_status forge_step_launch(forge_step *st, const int32_t *ids, const int32_t *targets, float lr);
/* The same, op by op whatever the options (a profile of one step sees every op); a recording stays valid. */
forge_status forge_step_launch_eager(forge_step *st, const int32_t *ids, const int32_t *targets, float lr);
/* Waits for the launched step: its mean loss per token and gradient norm, and any bad input a kernel found. */
forge_status forge_step_finish(forge_step *st, float *loss, float *norm);

/* The summed loss of one micro-batch (B, T), forward only (evaluation); waits for it. */
forge_status forge_step_eval(forge_step *st, const int32_t *ids, const int32_t *targets, double *loss_sum);

/* How many gradient buckets the step reduces (0: none, the whole block at once) and their size in elements. */
int forge_step_buckets(const forge_step *st, size_t *bucket_elements);

/* How the steps run: "graph" (replayed), "eager" (op by op: the backend cannot record, or use_graph is 0) or
 * "eager (NOTE)" after a recording failed; and whether that changed since the last call (to print it once). */
const char *forge_step_mode(forge_step *st, int *changed);

#endif
