/* tape.c: entry list, lazy zeroed gradients, reverse replay, reset. */
#include "tape.h"

#include <stdlib.h>
#include <string.h>

struct forge_tape {
    forge_pool *pool;
    forge_tape_entry *entries;
    size_t n, cap;
    int recording;
};

forge_status forge_tape_create(forge_tape **out, forge_pool *pool) {
    forge_tape *tape = calloc(1, sizeof *tape);
    if (!tape) return forge_error(FORGE_ERR_OOM, "tape: out of host memory");
    tape->pool = pool;
    tape->recording = 1;
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

forge_status forge_tape_grad(forge_tape *tape, forge_tensor *t, forge_tensor **grad) {
    *grad = NULL;
    if (!t || !t->requires_grad) return FORGE_OK;
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
    if (!t->grad) {
        const forge_dtype gd = t->dtype == FORGE_BF16 ? FORGE_BF16 : FORGE_F32;
        FORGE_TRY(forge_pool_tensor(tape->pool, &t->grad, gd, t->ndim, t->shape, 0));
        *fresh = 1;
    }
    *grad = t->grad;
    return FORGE_OK;
}

const forge_tape_entry *forge_tape_entry_at(const forge_tape *tape, size_t i) { return &tape->entries[i]; }

forge_status forge_tape_backward(forge_tape *tape) { return forge_tape_backward_hooked(tape, NULL, NULL); }

forge_status forge_tape_backward_hooked(forge_tape *tape, forge_tape_hook hook, void *ctx) {
    for (size_t i = tape->n; i-- > 0;) {
        const forge_tape_entry *e = &tape->entries[i];
        if (!e->out->grad) { /* nothing downstream needed this output */
            if (hook) FORGE_TRY(hook(ctx, tape, i));
            continue;
        }
        forge_status s = e->backward(tape, e);
        if (s != FORGE_OK) return forge_error_context(s, "backward of %s (tape entry %zu): ", e->op, i);
        /* The output's gradient is dead once its producer has passed it on: no earlier entry can reference this
         * output (it did not exist before entry i). Returning it now lets the next layers' gradients reuse the
         * block, so a step holds a few activation gradients at a time, not all of them. An op writing in place
         * (its output is one of its inputs) shares the input's gradient, which earlier entries still need. */
        int in_place = 0;
        for (int k = 0; k < FORGE_TAPE_MAX_INPUTS; k++)
            if (e->in[k] && (e->in[k] == e->out || (e->in[k]->grad && e->in[k]->grad == e->out->grad))) in_place = 1;
        if (!in_place) forge_pool_release_grad(tape->pool, e->out);
        if (hook) FORGE_TRY(hook(ctx, tape, i));
    }
    return FORGE_OK;
}

void forge_tape_reset(forge_tape *tape) {
    tape->n = 0;
    forge_pool_release_transient(tape->pool);
}
