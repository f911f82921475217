/* norm.c: LayerNorm (GPT-2) and RMSNorm (Llama) over the last dimension. */
#include "op_common.h"

/* Both norms' backward rules need the rows and the channels. */
typedef struct {
    int N, C;
} norm_params;

static forge_status layernorm_backward(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *dx, *dw, *db;
    FORGE_TRY(forge_tape_grad(tape, e->in[0], &dx));
    FORGE_TRY(forge_tape_grad(tape, e->in[1], &dw));
    FORGE_TRY(forge_tape_grad(tape, e->in[2], &db));
    OP_REQUIRE(be, layernorm_backward);
    if (!dx || !dw || !db)
        return forge_error(FORGE_ERR_UNSUPPORTED, "layernorm: the backward needs the gradients of x, weight and "
                                                  "bias (one of them does not require a gradient)");
    norm_params p;
    forge_tape_entry_params(e, &p, sizeof p);
    return be->layernorm_backward(be, forge_f32(dx), forge_f32(dw), forge_f32(db),
                                  forge_f32(e->out->grad), forge_f32(e->in[0]), forge_f32(e->in[1]),
                                  forge_f32(e->saved[0]), forge_f32(e->saved[1]), p.N, p.C);
}

forge_status forge_op_layernorm(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *weight,
                                forge_tensor *bias, float eps) {
    forge_backend *be = forge_tape_backend(tape);
    OP_REQUIRE(be, layernorm_forward);
    int C = op_cols(x), N = op_rows(x);
    FORGE_TRY(op_check_last("layernorm", weight, C, "weight"));
    FORGE_TRY(op_check_last("layernorm", bias, C, "bias"));
    forge_tensor *mean, *rstd;
    int64_t rows = N;
    FORGE_TRY(op_new(tape, out, x->ndim, x->shape));
    FORGE_TRY(op_new(tape, &mean, 1, &rows));
    FORGE_TRY(op_new(tape, &rstd, 1, &rows));
    forge_tensor *o = *out;
    FORGE_TRY(be->layernorm_forward(be, forge_f32(o), forge_f32(mean), forge_f32(rstd), forge_f32(x),
                                    forge_f32(weight), forge_f32(bias), N, C, eps));
    o->requires_grad = x->requires_grad || weight->requires_grad || bias->requires_grad;
    forge_tape_entry e = {.op = "layernorm", .backward = layernorm_backward, .out = o,
                          .in = {x, weight, bias}, .saved = {mean, rstd}};
    norm_params p = {N, C};
    return forge_tape_push(tape, &e, &p, sizeof p);
}

static forge_status rmsnorm_backward(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *dx, *dw;
    FORGE_TRY(forge_tape_grad(tape, e->in[0], &dx));
    FORGE_TRY(forge_tape_grad(tape, e->in[1], &dw));
    OP_REQUIRE(be, rmsnorm_backward);
    if (!dx || !dw)
        return forge_error(FORGE_ERR_UNSUPPORTED, "rmsnorm: the backward needs the gradients of x and weight "
                                                  "(one of them does not require a gradient)");
    norm_params p;
    forge_tape_entry_params(e, &p, sizeof p);
    return be->rmsnorm_backward(be, forge_f32(dx), forge_f32(dw), forge_f32(e->out->grad),
                                forge_f32(e->in[0]), forge_f32(e->in[1]), forge_f32(e->saved[0]), p.N, p.C);
}

forge_status forge_op_rmsnorm(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *weight,
                              float eps) {
    forge_backend *be = forge_tape_backend(tape);
    OP_REQUIRE(be, rmsnorm_forward);
    int C = op_cols(x), N = op_rows(x);
    FORGE_TRY(op_check_last("rmsnorm", weight, C, "weight"));
    forge_tensor *rstd;
    int64_t rows = N;
    FORGE_TRY(op_new(tape, out, x->ndim, x->shape));
    FORGE_TRY(op_new(tape, &rstd, 1, &rows));
    forge_tensor *o = *out;
    FORGE_TRY(be->rmsnorm_forward(be, forge_f32(o), forge_f32(rstd), forge_f32(x), forge_f32(weight), N, C,
                                  eps));
    o->requires_grad = x->requires_grad || weight->requires_grad;
    forge_tape_entry e = {.op = "rmsnorm", .backward = rmsnorm_backward, .out = o, .in = {x, weight},
                          .saved = {rstd}};
    norm_params p = {N, C};
    return forge_tape_push(tape, &e, &p, sizeof p);
}
