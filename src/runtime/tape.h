/*
 * tape.h: the dynamic autograd tape.
 *
 * Each op of src/ops/ computes its forward result through the backend and,
 * while recording is on, appends an entry: its backward rule, its output, its
 * inputs, whatever it saved (LayerNorm's mean and rstd, attention's
 * probabilities) and its own parameter struct (sizes, constants). forge_tape_backward() replays the entries in reverse; a rule
 * runs only if its output received a gradient, and it accumulates (+=) into
 * its inputs' gradients, which the tape allocates zeroed on first use (or,
 * through forge_tape_grad_fresh, uninitialised for a rule that writes the
 * first contribution instead).
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

#include "pool.h"
#include "../base/tensor.h"

typedef struct forge_tape forge_tape;
typedef struct forge_tape_entry forge_tape_entry;

typedef forge_status (*forge_backward_fn)(forge_tape *tape, const forge_tape_entry *e);

#define FORGE_TAPE_MAX_INPUTS 3
#define FORGE_TAPE_MAX_SAVED 2
/* Room for an op's parameter struct (the sizes and constants its backward rule needs). */
#define FORGE_TAPE_PARAM_BYTES 32

struct forge_tape_entry {
    const char *op;
    forge_backward_fn backward;
    forge_tensor *out;
    forge_tensor *in[FORGE_TAPE_MAX_INPUTS];
    forge_tensor *saved[FORGE_TAPE_MAX_SAVED];
    /* The op's own parameter struct (each op in src/ops/ defines its type), stored by forge_tape_push and read
     * back by forge_tape_entry_params: the tape carries it without knowing its fields. */
    unsigned char params[FORGE_TAPE_PARAM_BYTES];
};

forge_status forge_tape_create(forge_tape **out, forge_pool *pool);
void forge_tape_destroy(forge_tape *tape);

forge_pool *forge_tape_pool(const forge_tape *tape);
forge_backend *forge_tape_backend(const forge_tape *tape);

/* Recording is on by default; evaluation and sampling turn it off. */
void forge_tape_set_recording(forge_tape *tape, int on);
int forge_tape_recording(const forge_tape *tape);

/* Appends e (when recording) with a copy of the op's parameter struct (params may be NULL with bytes 0);
 * bytes over FORGE_TAPE_PARAM_BYTES is FORGE_ERR_ARG. */
forge_status forge_tape_push(forge_tape *tape, const forge_tape_entry *e, const void *params, size_t bytes);
/* Copies an entry's parameter struct out (bytes as given to forge_tape_push). */
void forge_tape_entry_params(const forge_tape_entry *e, void *params, size_t bytes);

/* The gradient of t, allocated zeroed if it does not exist yet; NULL (and
 * FORGE_OK) when t does not require a gradient. */
forge_status forge_tape_grad(forge_tape *tape, forge_tensor *t, forge_tensor **grad);
/* The same for an op that can either write or add its contribution: when the gradient does not exist yet
 * (this op is the first to contribute, the replay being in reverse), it is allocated uninitialised and
 * *fresh = 1, and the caller must write every element (no zeroing pass); else *fresh = 0 and the caller adds. */
forge_status forge_tape_grad_fresh(forge_tape *tape, forge_tensor *t, forge_tensor **grad, int *fresh);

forge_status forge_tape_backward(forge_tape *tape);
/* Called by forge_tape_backward_hooked once entry i has been replayed (or skipped: its output received no
 * gradient), in replay order (i = n - 1 down to 0). No entry below i has run yet, so a tensor that no entry below
 * i takes as an input receives no more gradient: whatever the caller does with such gradients (a data-parallel
 * step launches their reduction) may start here. A status other than FORGE_OK ends the replay with it. */
typedef forge_status (*forge_tape_hook)(void *ctx, const forge_tape *tape, size_t i);
/* forge_tape_backward with hook(ctx, tape, i) after each entry i. */
forge_status forge_tape_backward_hooked(forge_tape *tape, forge_tape_hook hook, void *ctx);
void forge_tape_reset(forge_tape *tape);
size_t forge_tape_size(const forge_tape *tape);
/* Entry i (< forge_tape_size) of the current recording, valid until the next push or reset. */
const forge_tape_entry *forge_tape_entry_at(const forge_tape *tape, size_t i);

#endif
