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
