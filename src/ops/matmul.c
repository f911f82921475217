/* matmul.c: the linear layer, out = x . weight^T + bias, and its two gradients. */
#include "op_common.h"

typedef struct {
    int N, C, OC;
} matmul_params;

static forge_status matmul_backward(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    matmul_params p;
    forge_tape_entry_params(e, &p, sizeof p);
    forge_tensor *dx, *dw, *db;
    FORGE_TRY(forge_tape_grad(tape, e->in[0], &dx));
    FORGE_TRY(forge_tape_grad(tape, e->in[1], &dw));
    FORGE_TRY(forge_tape_grad(tape, e->in[2], &db));
    const float *dout = forge_f32(e->out->grad);
    if (dx) {
        OP_REQUIRE(be, matmul_backward_input);
        FORGE_TRY(be->matmul_backward_input(be, forge_f32(dx), dout, forge_f32(e->in[1]), p.N, p.C, p.OC));
    }
    if (dw || db) {
        OP_REQUIRE(be, matmul_backward_weight);
        if (!dw) return forge_error(FORGE_ERR_UNSUPPORTED, "matmul: a bias gradient without a weight gradient");
        FORGE_TRY(be->matmul_backward_weight(be, forge_f32(dw), op_grad_data(db), dout, forge_f32(e->in[0]),
                                             p.N, p.C, p.OC));
    }
    return FORGE_OK;
}

forge_status forge_op_matmul(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *weight,
                             forge_tensor *bias) {
    forge_backend *be = forge_tape_backend(tape);
    OP_REQUIRE(be, matmul_forward);
    if (weight->ndim != 2) return forge_error(FORGE_ERR_ARG, "matmul: weight must be 2-D (OC, C)");
    int C = (int)weight->shape[1], OC = (int)weight->shape[0];
    FORGE_TRY(op_check_last("matmul", x, C, "input"));
    if (bias && (bias->ndim != 1 || bias->shape[0] != OC))
        return forge_error(FORGE_ERR_ARG, "matmul: bias must be (%d)", OC);
    FORGE_TRY(op_new_like(tape, out, x, OC));
    forge_tensor *o = *out;
    int N = op_rows(x);
    FORGE_TRY(be->matmul_forward(be, forge_f32(o), forge_f32(x), forge_f32(weight),
                                 bias ? forge_f32(bias) : NULL, N, C, OC));
    o->requires_grad = x->requires_grad || weight->requires_grad || (bias && bias->requires_grad);
    forge_tape_entry e = {.op = "matmul", .backward = matmul_backward, .out = o, .in = {x, weight, bias}};
    matmul_params p = {N, C, OC};
    return forge_tape_push(tape, &e, &p, sizeof p);
}
