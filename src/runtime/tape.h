/*
 * tape.h: the dynamic autograd tape.
 *
 * Each op of src/ops/ computes its forward result through the backend and,
 * while recording is on, appends an entry: its backward rule, its output, its
 * inputs and whatever it saved (LayerNorm's mean and rstd, attention's
 * probabilities). forge_tape_backward() replays the entries in reverse; a rule
 * runs only if its output received a gradient, and it accumulates (+=) into
 * its inputs' gradients, which the tape allocates zeroed on first use.
 *
 * The loss gradient is not seeded by the tape: the fused classifier writes
 * dlogits in place and makes the logits tensor its own gradient (grad ==
 * self), which is why nothing may consume the logits after the classifier.
 *
 * forge_tape_reset() drops the entries and releases every transient tensor
 * (activations and their gradients) back to the pool, so each micro-batch
 * reuses the previous one's memory. Nothing here synchronises with the host.
 */
#ifndef FORGE_TAPE_H
#define FORGE_TAPE_H

#include "../backend/backend.h"
#include "pool.h"
#include "../base/tensor.h"

typedef struct forge_tape forge_tape;
typedef struct forge_tape_entry forge_tape_entry;

typedef forge_status (*forge_backward_fn)(forge_tape *tape, const forge_tape_entry *e);

/* The sizes and constants an op's backward rule needs, by name. */
typedef struct {
    int N, C, OC;       /* rows, input channels, output channels */
    int B, T;           /* batch, time */
    int NH, NKV, HS;    /* heads, key/value heads, head size */
    int n_heads, n_rot; /* rope: heads in the row, heads rotated */
    float eps, theta;
} forge_op_params;

#define FORGE_TAPE_MAX_INPUTS 3
#define FORGE_TAPE_MAX_SAVED 2

struct forge_tape_entry {
    const char *op;
    forge_backward_fn backward;
    forge_tensor *out;
    forge_tensor *in[FORGE_TAPE_MAX_INPUTS];
    forge_tensor *saved[FORGE_TAPE_MAX_SAVED];
    forge_op_params p;
};

forge_status forge_tape_create(forge_tape **out, forge_pool *pool);
void forge_tape_destroy(forge_tape *tape);

forge_pool *forge_tape_pool(const forge_tape *tape);
forge_backend *forge_tape_backend(const forge_tape *tape);

/* Recording is on by default; evaluation and sampling turn it off. */
void forge_tape_set_recording(forge_tape *tape, int on);
int forge_tape_recording(const forge_tape *tape);

forge_status forge_tape_push(forge_tape *tape, const forge_tape_entry *e);

/* The gradient of t, allocated zeroed if it does not exist yet; NULL (and
 * FORGE_OK) when t does not require a gradient. */
forge_status forge_tape_grad(forge_tape *tape, forge_tensor *t, forge_tensor **grad);

forge_status forge_tape_backward(forge_tape *tape);
void forge_tape_reset(forge_tape *tape);
size_t forge_tape_size(const forge_tape *tape);

#endif
