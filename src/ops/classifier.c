/*
 * classifier.c: fused softmax + cross-entropy.
 *
 * The (B*T, V) logits are the largest activation of a small model, so the
 * gradient is written over them in place (as llm.c does) and the logits
 * tensor becomes its own gradient. The backward rule therefore has nothing to
 * do; it exists so the tape shows the op.
 */
#include "op_common.h"

static forge_status classifier_backward(forge_tape *tape, const forge_tape_entry *e) {
    (void)tape;
    (void)e;
    return FORGE_OK;
}

forge_status forge_op_classifier(forge_tape *tape, forge_tensor **losses, forge_tensor *logits,
                                 const forge_tensor *targets, int ignore_index, float grad_scale) {
    forge_backend *be = forge_tape_backend(tape);
    OP_REQUIRE(be, classifier_forward_backward);
    int V = op_cols(logits), N = op_rows(logits);
    if (targets->dtype != FORGE_I32 || (int)targets->numel != N)
        return forge_error(FORGE_ERR_ARG, "classifier: targets must be %d i32 values", N);
    int64_t shape[2] = {targets->shape[0], targets->ndim > 1 ? targets->shape[1] : 1};
    FORGE_TRY(op_new(tape, losses, targets->ndim > 1 ? 2 : 1, shape));
    FORGE_TRY(be->classifier_forward_backward(be, forge_f32(*losses), forge_f32(logits), forge_i32(targets), N,
                                              V, ignore_index, grad_scale));
    if (!forge_tape_recording(tape) || !logits->requires_grad) return FORGE_OK;
    logits->grad = logits;
    forge_tape_entry e = {.op = "classifier", .backward = classifier_backward, .out = *losses,
                          .in = {logits}};
    return forge_tape_push(tape, &e, NULL, 0);
}

/* ---- the lm head and the classifier together --------------------------------------------------------------- */

forge_status forge_op_lm_head_classifier(forge_tape *tape, forge_tensor **losses, forge_tensor *x,
                                         forge_tensor *lm_head, const forge_tensor *targets, int ignore_index,
                                         float grad_scale) {
    if (!op_is_bf16(x)) {
        forge_tensor *logits;
        FORGE_TRY(forge_op_matmul(tape, &logits, x, lm_head, NULL));
        return forge_op_classifier(tape, losses, logits, targets, ignore_index, grad_scale);
    }
    forge_backend *be = forge_tape_backend(tape);
    OP_REQUIRE(be, classifier_bf16);
    if (lm_head->ndim != 2) return forge_error(FORGE_ERR_ARG, "lm head: weight must be (V, C)");
    const int C = op_cols(x), N = op_rows(x), V = (int)lm_head->shape[0];
    FORGE_TRY(op_check_last("lm head", lm_head, C, "weight"));
    if (targets->dtype != FORGE_I32 || (int)targets->numel != N)
        return forge_error(FORGE_ERR_ARG, "classifier: targets must be %d i32 values", N);
    const forge_bf16 *w16;
    FORGE_TRY(op_working("lm head", lm_head, &w16));
    int64_t shape[2] = {targets->shape[0], targets->ndim > 1 ? targets->shape[1] : 1};
    FORGE_TRY(op_new(tape, losses, targets->ndim > 1 ? 2 : 1, shape));
    /* Training: the gradients of x (bf16) and of the lm head (fp32) are accumulated here, chunk by chunk of
     * rows, so the (N, V) logits never exist whole (x's is written when it is its first gradient: no zeroing
     * pass); evaluation computes the losses alone. */
    forge_tensor *dx = NULL, *dw = NULL;
    int dx_fresh = 0;
    if (forge_tape_recording(tape)) {
        FORGE_TRY(forge_tape_grad_fresh(tape, x, &dx, &dx_fresh));
        FORGE_TRY(forge_tape_grad(tape, lm_head, &dw));
    }
    forge_pool *pool = forge_tape_pool(tape);
    size_t scratch_bytes;
    void *scratch;
    FORGE_TRY(forge_pool_block(pool, &scratch, FORGE_CLS_BF16_SCRATCH(N, C, V, 0) * sizeof(float), &scratch_bytes));
    forge_status s = be->classifier_bf16(be, forge_f32(*losses), dx ? forge_bf16p(dx) : NULL, dw ? forge_f32(dw) : NULL,
                                         scratch, forge_bf16p(x), w16, forge_i32(targets), N, C, V, ignore_index,
                                         grad_scale, !dx_fresh, 0);
    forge_pool_block_release(pool, scratch, scratch_bytes);
    FORGE_TRY(s);
    if (!dx && !dw) return FORGE_OK;
    /* the gradients are in place: the entry only shows the op (its rule has nothing left to do) */
    forge_tape_entry e = {.op = "lm_head_classifier", .backward = classifier_backward, .out = *losses,
                          .in = {x, lm_head}};
    return forge_tape_push(tape, &e, NULL, 0);
}
