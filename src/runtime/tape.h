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
 * Gradient ownership: a tensor owns its gradient block, and the tape returns
 * an output's block to the pool once its producer's rule has run (no earlier
 * entry can reference that output). Two transfers spare a rule a copy:
 * forge_tape_grad_move hands a block over to another tensor (it owns it
 * from then on), and forge_tape_grad_lend lends one read-only to the output
 * of the entry just below the one replaying, whose producer only reads it
 * (FORGE_TAPE_OUT_GRAD_READ_ONLY): the borrower's gradient is the owner's
 * block until that producer has run, and is never written, added into,
 * handed over or released through the borrower. The bf16 residual add uses
 * both: a's gradient takes over dout, and b's (the sublayer's output, b's
 * producer the matmul recorded just before the add) borrows it.
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

/* Entry flags: properties of an op's backward rule that the tape relies on. */
/* The rule only reads out's gradient, within the call: it never writes or adds into it, hands it over or keeps
 * it past its return (and, like every rule, it writes no gradient but its inputs'). Its output may then borrow a
 * gradient block read-only (forge_tape_grad_lend). */
#define FORGE_TAPE_OUT_GRAD_READ_ONLY 1u

struct forge_tape_entry {
    const char *op;
    forge_backward_fn backward;
    unsigned flags; /* FORGE_TAPE_* above */
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
 * FORGE_OK) when t does not require a gradient. FORGE_ERR_ARG when t's gradient
 * is borrowed (read-only: forge_tape_grad_lend), as for forge_tape_grad_fresh. */
forge_status forge_tape_grad(forge_tape *tape, forge_tensor *t, forge_tensor **grad);
/* The same for an op that can either write or add its contribution: when the gradient does not exist yet
 * (this op is the first to contribute, the replay being in reverse), it is allocated uninitialised and
 * *fresh = 1, and the caller must write every element (no zeroing pass); else *fresh = 0 and the caller adds. */
forge_status forge_tape_grad_fresh(forge_tape *tape, forge_tensor *t, forge_tensor **grad, int *fresh);

/* Hands t's gradient over to `to`, for a rule whose input `to` needs exactly that gradient as its first
 * contribution: `to` owns the block from then on and t has none (so the tape releases nothing for t). Done (1)
 * only when `to` requires a gradient and has none yet, to != t, and t's gradient is its own (not t itself, not
 * borrowed, not a parameter's) with to's dtype and shape; else 0 and nothing changes. */
int forge_tape_grad_move(forge_tensor *t, forge_tensor *to);

/* Lends owner's gradient to `borrower` read-only in place of a copy, from within the rule of entry e (the entry
 * being replayed), for two inputs of e where borrower's gradient is owner's bit for bit (and the rule writes
 * neither after the loan). On success borrower->grad is owner's gradient (the same tensor, marked borrowed,
 * tensor.h) and *lent = 1; the loan ends right after borrower's producer has run (it reads the block, then the
 * tape drops the reference and releases nothing). Whatever would write, add into, hand over or release the block
 * through the borrower fails (forge_tape_grad, forge_tape_grad_fresh), declines (forge_tape_grad_move) or leaves
 * the owner's block alone (pool.h).
 * Refused (*lent = 0, nothing changed: the caller writes its copy) unless the block provably stays unchanged while
 * the loan lasts: lending is on (forge_tape_set_grad_lending); borrower's producer is the entry just below e (no
 * other entry runs before it) and carries FORGE_TAPE_OUT_GRAD_READ_ONLY; none of that producer's inputs is owner
 * or borrower or holds owner's gradient (its rule writes its inputs' gradients); borrower != owner, borrower
 * requires a gradient, has none yet (no later consumer gave it one) and is not a parameter; owner's gradient is
 * its own (not owner itself, not borrowed, not a parameter's), is not e's output's (the tape releases that one
 * after e) and has borrower's dtype and shape. The values are the caller's to vouch for. FORGE_ERR_ARG when e is
 * not the entry being replayed, or owner or borrower is not one of its inputs. */
forge_status forge_tape_grad_lend(forge_tape *tape, const forge_tape_entry *e, forge_tensor *owner,
                                  forge_tensor *borrower, int *lent);
/* Lending is on by default; off, forge_tape_grad_lend refuses every loan, so its callers write their copies (the
 * reference the lent path is tested against, bit for bit). */
void forge_tape_set_grad_lending(forge_tape *tape, int on);
/* Gradients lent since the tape was created. */
size_t forge_tape_grads_lent(const forge_tape *tape);

forge_status forge_tape_backward(forge_tape *tape);
/* Called by forge_tape_backward_hooked once entry i has been replayed (or skipped: its output received no
 * gradient), in replay order (i = n - 1 down to 0). No entry below i has run yet, so a tensor that no entry below
 * i takes as an input receives no more gradient: whatever the caller does with such gradients (a data-parallel
 * step launches their reduction) may start here. A hook reads gradients; it never writes an activation's (one may
 * be lent, forge_tape_grad_lend). A status other than FORGE_OK ends the replay with it. */
typedef forge_status (*forge_tape_hook)(void *ctx, const forge_tape *tape, size_t i);
/* forge_tape_backward with hook(ctx, tape, i) after each entry i. */
forge_status forge_tape_backward_hooked(forge_tape *tape, forge_tape_hook hook, void *ctx);
void forge_tape_reset(forge_tape *tape);
size_t forge_tape_size(const forge_tape *tape);
/* Entry i (< forge_tape_size) of the current recording, valid until the next push or reset. */
const forge_tape_entry *forge_tape_entry_at(const forge_tape *tape, size_t i);

#endif
