/*
 * matmul.c: the linear layer, out = x . weight^T + bias, and its two gradients;
 * and the same with GELU applied (the MLP's first layer).
 *
 * fp32 activations run the fp32 table entries (matmul, then the gelu op).
 * bf16 activations run the bf16 entries on the weight's working copy, the
 * bias read in fp32: forward with GELU fused into the GEMM's epilogue, which
 * then also stores the pre-activation; its backward takes the GELU derivative
 * first (gelu_backward_bf16 writing a new bf16 buffer; gelu_backward_dbias_bf16,
 * which also sums the bias gradient from it, when there is one), then the two GEMMs; dX
 * is written rather than added when it is x's first gradient. The GELU
 * derivative is its own pass, not the dgelu_pre epilogue of the projection's dX
 * GEMM, which measured slower than the pair (docs/results.md).
 */
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

/* bf16: dx += dout W (with GELU, dout is first turned into the pre-activation's gradient), dW, dbias += (fp32) */
static forge_status matmul_backward_bf16(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    matmul_params p;
    forge_tape_entry_params(e, &p, sizeof p);
    forge_tensor *dx, *dw, *db;
    int dx_fresh = 0; /* the first gradient of x: dX is written, not added (no zeroing pass) */
    FORGE_TRY(forge_tape_grad_fresh(tape, e->in[0], &dx, &dx_fresh));
    FORGE_TRY(forge_tape_grad(tape, e->in[1], &dw));
    FORGE_TRY(forge_tape_grad(tape, e->in[2], &db));
    const forge_tensor *pre = e->saved[0];
    forge_tensor *dpre = NULL;
    const forge_bf16 *dout = forge_bf16p(e->out->grad);
    int db_done = 0; /* the bias gradient summed by the GELU backward's pass */
    if (pre) { /* GELU: the gradient of the pre-activation */
        FORGE_TRY(op_new_dtype(tape, &dpre, FORGE_BF16, pre->ndim, pre->shape));
        if (db && dw) {
            OP_REQUIRE(be, gelu_backward_dbias_bf16);
            FORGE_TRY(be->gelu_backward_dbias_bf16(be, forge_bf16p(dpre), op_grad_data(db), forge_bf16p(pre), dout,
                                                   p.N, p.OC));
            db_done = 1;
        } else {
            OP_REQUIRE(be, gelu_backward_bf16);
            FORGE_TRY(be->gelu_backward_bf16(be, forge_bf16p(dpre), forge_bf16p(pre), dout, pre->numel, 0));
        }
        dout = forge_bf16p(dpre);
    }
    forge_status s = FORGE_OK;
    if (dx) {
        const forge_bf16 *w16;
        OP_REQUIRE(be, matmul_backward_input_bf16);
        s = op_working("matmul", e->in[1], &w16);
        if (s == FORGE_OK)
            s = be->matmul_backward_input_bf16(be, forge_bf16p(dx), dout, w16, NULL, p.N, p.C, p.OC, !dx_fresh);
    }
    if (s == FORGE_OK && (dw || db)) {
        OP_REQUIRE(be, matmul_backward_weight_bf16);
        if (!dw) s = forge_error(FORGE_ERR_UNSUPPORTED, "matmul: a bias gradient without a weight gradient");
        else
            s = be->matmul_backward_weight_bf16(be, forge_f32(dw), db_done ? NULL : op_grad_data(db), dout,
                                                forge_bf16p(e->in[0]), p.N, p.C, p.OC);
    }
    if (dpre) forge_pool_release(forge_tape_pool(tape), dpre);
    return s;
}

static forge_status matmul_check(forge_tensor *x, forge_tensor *weight, forge_tensor *bias, int *N, int *C, int *OC) {
    if (weight->ndim != 2) return forge_error(FORGE_ERR_ARG, "matmul: weight must be 2-D (OC, C)");
    *C = (int)weight->shape[1];
    *OC = (int)weight->shape[0];
    FORGE_TRY(op_check_last("matmul", x, *C, "input"));
    if (bias && (bias->ndim != 1 || bias->shape[0] != *OC))
        return forge_error(FORGE_ERR_ARG, "matmul: bias must be (%d)", *OC);
    *N = op_rows(x);
    return FORGE_OK;
}

/* bf16: out = (gelu ? gelu : identity)(x W^T + bias), pre-activation saved with GELU */
static forge_status matmul_bf16(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *weight,
                                forge_tensor *bias, int gelu) {
    forge_backend *be = forge_tape_backend(tape);
    OP_REQUIRE(be, matmul_forward_bf16);
    int N = 0, C = 0, OC = 0;
    FORGE_TRY(matmul_check(x, weight, bias, &N, &C, &OC));
    const forge_bf16 *w16;
    FORGE_TRY(op_working("matmul", weight, &w16));
    forge_tensor *pre = NULL;
    FORGE_TRY(op_new_like(tape, out, x, OC));
    if (gelu) FORGE_TRY(op_new_like(tape, &pre, x, OC));
    forge_tensor *o = *out;
    FORGE_TRY(be->matmul_forward_bf16(be, forge_bf16p(o), pre ? forge_bf16p(pre) : NULL, forge_bf16p(x), w16,
                                      bias ? forge_f32(bias) : NULL, N, C, OC));
    o->requires_grad = x->requires_grad || weight->requires_grad || (bias && bias->requires_grad);
    /* the rule reads dout (into dpre with GELU) and writes only dx, dW and dbias: out may borrow its gradient */
    forge_tape_entry e = {.op = gelu ? "matmul_gelu" : "matmul", .backward = matmul_backward_bf16,
                          .flags = FORGE_TAPE_OUT_GRAD_READ_ONLY, .out = o, .in = {x, weight, bias}, .saved = {pre}};
    matmul_params p = {N, C, OC};
    return forge_tape_push(tape, &e, &p, sizeof p);
}

forge_status forge_op_matmul(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *weight,
                             forge_tensor *bias) {
    if (op_is_bf16(x)) return matmul_bf16(tape, out, x, weight, bias, 0);
    forge_backend *be = forge_tape_backend(tape);
    OP_REQUIRE(be, matmul_forward);
    int N = 0, C = 0, OC = 0;
    FORGE_TRY(matmul_check(x, weight, bias, &N, &C, &OC));
    FORGE_TRY(op_new_like(tape, out, x, OC));
    forge_tensor *o = *out;
    FORGE_TRY(be->matmul_forward(be, forge_f32(o), forge_f32(x), forge_f32(weight),
                                 bias ? forge_f32(bias) : NULL, N, C, OC));
    o->requires_grad = x->requires_grad || weight->requires_grad || (bias && bias->requires_grad);
    forge_tape_entry e = {.op = "matmul", .backward = matmul_backward, .flags = FORGE_TAPE_OUT_GRAD_READ_ONLY,
                          .out = o, .in = {x, weight, bias}};
    matmul_params p = {N, C, OC};
    return forge_tape_push(tape, &e, &p, sizeof p);
}

forge_status forge_op_matmul_gelu(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *weight,
                                  forge_tensor *bias) {
    if (op_is_bf16(x)) return matmul_bf16(tape, out, x, weight, bias, 1);
    FORGE_TRY(forge_op_matmul(tape, out, x, weight, bias));
    return forge_op_gelu(tape, out, *out);
}
