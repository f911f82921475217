/* tape.c: entry list, lazy zeroed gradients, gradient hand-over and loans, reverse replay, reset. */
#include "tape.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* tape->replaying outside a replay */
#define TAPE_NOT_REPLAYING SIZE_MAX

struct forge_tape {
    forge_pool *pool;
    forge_tape_entry *entries;
    size_t n, cap;
    int recording;
    size_t replaying; /* the entry whose rule runs now, or TAPE_NOT_REPLAYING */
    int lending;      /* forge_tape_set_grad_lending */
    size_t lent;      /* loans made since creation */
};

forge_status forge_tape_create(forge_tape **out, forge_pool *pool) {
    forge_tape *tape = calloc(1, sizeof *tape);
    if (!tape) return forge_error(FORGE_ERR_OOM, "tape: out of host memory");
    tape->pool = pool;
    tape->recording = 1;
    tape->replaying = TAPE_NOT_REPLAYING;
    tape->lending = 1;
    *out = tape;
    return FORGE_OK;
}

void forge_tape_destroy(forge_tape *tape) {
    if (!tape) return;
    free(tape->entries);
    free(tape);
}

forge_pool *forge_tape_pool(const forge_tape *tape) { return tape->pool; }
forge_backend *forge_tape_backend(const forge_tape *tape) { return forge_pool_backend(tape->pool); }
void forge_tape_set_recording(forge_tape *tape, int on) { tape->recording = on; }
void forge_tape_set_grad_lending(forge_tape *tape, int on) { tape->lending = on; }
size_t forge_tape_grads_lent(const forge_tape *tape) { return tape->lent; }
int forge_tape_recording(const forge_tape *tape) { return tape->recording; }
size_t forge_tape_size(const forge_tape *tape) { return tape->n; }

forge_status forge_tape_push(forge_tape *tape, const forge_tape_entry *e, const void *params, size_t bytes) {
    if (bytes > FORGE_TAPE_PARAM_BYTES)
        return forge_error(FORGE_ERR_ARG, "tape: op %s has %zu bytes of parameters, more than the %d an entry holds",
                           e->op, bytes, FORGE_TAPE_PARAM_BYTES);
    if (!tape->recording) return FORGE_OK;
    if (tape->n == tape->cap) {
        size_t cap = tape->cap ? 2 * tape->cap : 256;
        forge_tape_entry *ne = realloc(tape->entries, cap * sizeof *ne);
        if (!ne) return forge_error(FORGE_ERR_OOM, "tape: out of host memory at %zu entries", tape->n);
        tape->entries = ne;
        tape->cap = cap;
    }
    forge_tape_entry *dst = &tape->entries[tape->n++];
    *dst = *e;
    memset(dst->params, 0, sizeof dst->params);
    if (bytes) memcpy(dst->params, params, bytes);
    return FORGE_OK;
}

void forge_tape_entry_params(const forge_tape_entry *e, void *params, size_t bytes) {
    memcpy(params, e->params, bytes < sizeof e->params ? bytes : sizeof e->params);
}

/* A rule asking for a gradient to write or add into: never a borrowed one (its block is another tensor's, read
 * by a producer that has not run yet) */
static forge_status tape_check_writable(const forge_tensor *t) {
    if (t->grad_borrowed)
        return forge_error(FORGE_ERR_ARG, "tape: a gradient to write into is borrowed read-only (another tensor's "
                                          "block, lent to this tensor until its producer has read it)");
    return FORGE_OK;
}

forge_status forge_tape_grad(forge_tape *tape, forge_tensor *t, forge_tensor **grad) {
    *grad = NULL;
    if (!t || !t->requires_grad) return FORGE_OK;
    FORGE_TRY(tape_check_writable(t));
    if (!t->grad) {
        /* an activation's gradient has the activation's dtype (bf16 in a bf16 step); parameters' are fp32 and
         * exist already */
        const forge_dtype gd = t->dtype == FORGE_BF16 ? FORGE_BF16 : FORGE_F32;
        FORGE_TRY(forge_pool_tensor_zeros(tape->pool, &t->grad, gd, t->ndim, t->shape, 0));
    }
    *grad = t->grad;
    return FORGE_OK;
}

forge_status forge_tape_grad_fresh(forge_tape *tape, forge_tensor *t, forge_tensor **grad, int *fresh) {
    *grad = NULL;
    *fresh = 0;
    if (!t || !t->requires_grad) return FORGE_OK;
    FORGE_TRY(tape_check_writable(t));
    if (!t->grad) {
        const forge_dtype gd = t->dtype == FORGE_BF16 ? FORGE_BF16 : FORGE_F32;
        FORGE_TRY(forge_pool_tensor(tape->pool, &t->grad, gd, t->ndim, t->shape, 0));
        *fresh = 1;
    }
    *grad = t->grad;
    return FORGE_OK;
}

const forge_tape_entry *forge_tape_entry_at(const forge_tape *tape, size_t i) { return &tape->entries[i]; }

static int same_shape(const forge_tensor *a, const forge_tensor *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

/* t's gradient is a block t owns: not t itself (the classifier's logits), not borrowed, not a parameter's */
static int grad_owned(const forge_tensor *t) {
    return t->grad && t->grad != t && !t->grad_borrowed && !t->grad->persistent;
}

int forge_tape_grad_move(forge_tensor *t, forge_tensor *to) {
    if (!t || !to || to == t || !to->requires_grad || to->grad || !grad_owned(t) || !same_shape(t->grad, to))
        return 0;
    to->grad = t->grad;
    t->grad = NULL;
    return 1;
}

forge_status forge_tape_grad_lend(forge_tape *tape, const forge_tape_entry *e, forge_tensor *owner,
                                  forge_tensor *borrower, int *lent) {
    *lent = 0;
    const size_t i = tape->replaying;
    if (i == TAPE_NOT_REPLAYING || e != &tape->entries[i])
        return forge_error(FORGE_ERR_ARG, "tape: a gradient lent from outside the rule being replayed (op %s)",
                           e->op);
    /* both are e's inputs: produced below e, so the owner's producer (below the borrower's: owner != borrower) is
     * not replayed, and the owner's block not released, before the loan ends */
    int inputs = 0;
    for (int k = 0; k < FORGE_TAPE_MAX_INPUTS; k++) {
        if (owner && e->in[k] == owner) inputs |= 1;
        if (borrower && e->in[k] == borrower) inputs |= 2;
    }
    if (inputs != 3)
        return forge_error(FORGE_ERR_ARG, "tape: op %s lends a gradient between tensors that are not both its inputs",
                           e->op);
    if (!tape->lending || !owner || owner == borrower || !borrower->requires_grad || borrower->grad ||
        borrower->persistent || !grad_owned(owner) || owner->grad == e->out->grad || !same_shape(owner->grad, borrower))
        return FORGE_OK;
    /* the producer runs next, and is the only rule that runs while the loan lasts: it must read the block and
     * write nothing that is the block */
    if (i == 0) return FORGE_OK;
    const forge_tape_entry *p = &tape->entries[i - 1];
    if (p->out != borrower || !(p->flags & FORGE_TAPE_OUT_GRAD_READ_ONLY)) return FORGE_OK;
    for (int k = 0; k < FORGE_TAPE_MAX_INPUTS; k++) {
        const forge_tensor *x = p->in[k];
        if (x && (x == owner || x == borrower || (x->grad && x->grad == owner->grad))) return FORGE_OK;
    }
    borrower->grad = owner->grad;
    borrower->grad_borrowed = 1;
    tape->lent++;
    *lent = 1;
    return FORGE_OK;
}

forge_status forge_tape_backward(forge_tape *tape) { return forge_tape_backward_hooked(tape, NULL, NULL); }

forge_status forge_tape_backward_hooked(forge_tape *tape, forge_tape_hook hook, void *ctx) {
    for (size_t i = tape->n; i-- > 0;) {
        const forge_tape_entry *e = &tape->entries[i];
        if (!e->out->grad) { /* nothing downstream needed this output */
            if (hook) FORGE_TRY(hook(ctx, tape, i));
            continue;
        }
        tape->replaying = i;
        forge_status s = e->backward(tape, e);
        tape->replaying = TAPE_NOT_REPLAYING;
        if (s != FORGE_OK) return forge_error_context(s, "backward of %s (tape entry %zu): ", e->op, i);
        /* The output's gradient is dead once its producer has passed it on: no earlier entry can reference this
         * output (it did not exist before entry i). Returning it now lets the next layers' gradients reuse the
         * block, so a step holds a few activation gradients at a time, not all of them. An op writing in place
         * (its output is one of its inputs) shares the input's gradient, which earlier entries still need. A
         * borrowed gradient's loan ends here: the block is its owner's, and only the reference goes. */
        int in_place = 0;
        for (int k = 0; k < FORGE_TAPE_MAX_INPUTS; k++)
            if (e->in[k] && (e->in[k] == e->out || (e->in[k]->grad && e->in[k]->grad == e->out->grad))) in_place = 1;
        if (!in_place || e->out->grad_borrowed) forge_pool_release_grad(tape->pool, e->out);
        if (hook) FORGE_TRY(hook(ctx, tape, i));
    }
    return FORGE_OK;
}

void forge_tape_reset(forge_tape *tape) {
    tape->n = 0;
    tape->replaying = TAPE_NOT_REPLAYING;
    forge_pool_release_transient(tape->pool);
}
