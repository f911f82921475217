/*
 * norm.c: LayerNorm (GPT-2) and RMSNorm (Llama) over the last dimension, and
 * the residual add fused in front of them.
 *
 * fp32 activations run the fp32 table entries (the residual form is add, then
 * the norm). bf16 activations run the bf16 entries, the norm weights and bias
 * read in fp32 from the masters, statistics in fp32; the residual form is one
 * kernel (res = rn(a + b), then the norm of res) recorded as two tape entries,
 * the add and the norm, so the backward is the norm's rule, then the add's.
 * A bf16 norm's rule writes x's gradient rather than adding it when it is the
 * first contribution (no zeroing pass).
 */
#include "op_common.h"

/* Both norms' backward rules need the rows and the channels. */
typedef struct {
    int N, C;
} norm_params;

/* x's gradient: a bf16 one allocated uninitialised when this is its first contribution (*fresh = 1: the kernel
 * writes it), an fp32 one zeroed (its kernels add) */
static forge_status norm_dx(forge_tape *tape, forge_tensor *x, forge_tensor **dx, int *fresh) {
    *fresh = 0;
    if (op_is_bf16(x)) return forge_tape_grad_fresh(tape, x, dx, fresh);
    return forge_tape_grad(tape, x, dx);
}

static forge_status layernorm_backward(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *dx, *dw, *db;
    int dx_fresh;
    FORGE_TRY(norm_dx(tape, e->in[0], &dx, &dx_fresh));
    FORGE_TRY(forge_tape_grad(tape, e->in[1], &dw));
    FORGE_TRY(forge_tape_grad(tape, e->in[2], &db));
    const int bf16 = op_is_bf16(e->in[0]);
    if (bf16) OP_REQUIRE(be, layernorm_backward_bf16);
    else OP_REQUIRE(be, layernorm_backward);
    if (!dx || !dw || !db)
        return forge_error(FORGE_ERR_UNSUPPORTED, "layernorm: the backward needs the gradients of x, weight and "
                                                  "bias (one of them does not require a gradient)");
    norm_params p;
    forge_tape_entry_params(e, &p, sizeof p);
    if (bf16)
        return be->layernorm_backward_bf16(be, forge_bf16p(dx), forge_f32(dw), forge_f32(db),
                                           forge_bf16p(e->out->grad), forge_bf16p(e->in[0]), forge_f32(e->in[1]),
                                           forge_f32(e->saved[0]), forge_f32(e->saved[1]), p.N, p.C, !dx_fresh);
    return be->layernorm_backward(be, forge_f32(dx), forge_f32(dw), forge_f32(db), forge_f32(e->out->grad),
                                  forge_f32(e->in[0]), forge_f32(e->in[1]), forge_f32(e->saved[0]),
                                  forge_f32(e->saved[1]), p.N, p.C);
}

static forge_status rmsnorm_backward(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *dx, *dw;
    int dx_fresh;
    FORGE_TRY(norm_dx(tape, e->in[0], &dx, &dx_fresh));
    FORGE_TRY(forge_tape_grad(tape, e->in[1], &dw));
    const int bf16 = op_is_bf16(e->in[0]);
    if (bf16) OP_REQUIRE(be, rmsnorm_backward_bf16);
    else OP_REQUIRE(be, rmsnorm_backward);
    if (!dx || !dw)
        return forge_error(FORGE_ERR_UNSUPPORTED, "rmsnorm: the backward needs the gradients of x and weight "
                                                  "(one of them does not require a gradient)");
    norm_params p;
    forge_tape_entry_params(e, &p, sizeof p);
    if (bf16)
        return be->rmsnorm_backward_bf16(be, forge_bf16p(dx), forge_f32(dw), forge_bf16p(e->out->grad),
                                         forge_bf16p(e->in[0]), forge_f32(e->in[1]), forge_f32(e->saved[0]), p.N,
                                         p.C, !dx_fresh);
    return be->rmsnorm_backward(be, forge_f32(dx), forge_f32(dw), forge_f32(e->out->grad), forge_f32(e->in[0]),
                                forge_f32(e->in[1]), forge_f32(e->saved[0]), p.N, p.C);
}

/* The norm of x (computed already) on the tape, with its statistics saved. */
static forge_status record_norm(forge_tape *tape, forge_tensor *out, forge_tensor *x, forge_tensor *weight,
                                forge_tensor *bias, forge_tensor *mean, forge_tensor *rstd, int N, int C) {
    out->requires_grad = x->requires_grad || weight->requires_grad || (bias && bias->requires_grad);
    forge_tape_entry e = {.op = bias ? "layernorm" : "rmsnorm", .backward = bias ? layernorm_backward : rmsnorm_backward,
                          .out = out, .in = {x, weight, bias}, .saved = {bias ? mean : rstd, bias ? rstd : NULL}};
    norm_params p = {N, C};
    return forge_tape_push(tape, &e, &p, sizeof p);
}

/* The shared argument checks and outputs: out like x (x's dtype), fp32 statistics of N rows. */
static forge_status norm_outputs(forge_tape *tape, const char *op, forge_tensor *x, forge_tensor *weight,
                                 forge_tensor *bias, forge_tensor **out, forge_tensor **mean, forge_tensor **rstd,
                                 int *N, int *C) {
    *C = op_cols(x);
    *N = op_rows(x);
    FORGE_TRY(op_check_last(op, weight, *C, "weight"));
    if (bias) FORGE_TRY(op_check_last(op, bias, *C, "bias"));
    if (op_is_bf16(x) && (weight->dtype != FORGE_F32 || (bias && bias->dtype != FORGE_F32)))
        return forge_error(FORGE_ERR_ARG, "%s: bf16 activations take fp32 weight and bias", op);
    int64_t rows = *N;
    FORGE_TRY(op_new_dtype(tape, out, x->dtype, x->ndim, x->shape));
    if (bias) FORGE_TRY(op_new(tape, mean, 1, &rows));
    FORGE_TRY(op_new(tape, rstd, 1, &rows));
    return FORGE_OK;
}

forge_status forge_op_layernorm(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *weight,
                                forge_tensor *bias, float eps) {
    forge_backend *be = forge_tape_backend(tape);
    const int bf16 = op_is_bf16(x);
    if (bf16) OP_REQUIRE(be, layernorm_forward_bf16);
    else OP_REQUIRE(be, layernorm_forward);
    if (!bias) return forge_error(FORGE_ERR_ARG, "layernorm: bias is required");
    forge_tensor *mean = NULL, *rstd;
    int N, C;
    FORGE_TRY(norm_outputs(tape, "layernorm", x, weight, bias, out, &mean, &rstd, &N, &C));
    forge_tensor *o = *out;
    if (bf16)
        FORGE_TRY(be->layernorm_forward_bf16(be, forge_bf16p(o), forge_f32(mean), forge_f32(rstd), forge_bf16p(x),
                                             forge_f32(weight), forge_f32(bias), N, C, eps));
    else
        FORGE_TRY(be->layernorm_forward(be, forge_f32(o), forge_f32(mean), forge_f32(rstd), forge_f32(x),
                                        forge_f32(weight), forge_f32(bias), N, C, eps));
    return record_norm(tape, o, x, weight, bias, mean, rstd, N, C);
}

forge_status forge_op_rmsnorm(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *weight,
                              float eps) {
    forge_backend *be = forge_tape_backend(tape);
    const int bf16 = op_is_bf16(x);
    if (bf16) OP_REQUIRE(be, rmsnorm_forward_bf16);
    else OP_REQUIRE(be, rmsnorm_forward);
    forge_tensor *rstd;
    int N, C;
    FORGE_TRY(norm_outputs(tape, "rmsnorm", x, weight, NULL, out, NULL, &rstd, &N, &C));
    forge_tensor *o = *out;
    if (bf16)
        FORGE_TRY(be->rmsnorm_forward_bf16(be, forge_bf16p(o), forge_f32(rstd), forge_bf16p(x), forge_f32(weight), N,
                                           C, eps));
    else
        FORGE_TRY(be->rmsnorm_forward(be, forge_f32(o), forge_f32(rstd), forge_f32(x), forge_f32(weight), N, C, eps));
    return record_norm(tape, o, x, weight, NULL, NULL, rstd, N, C);
}

forge_status forge_op_residual_norm(forge_tape *tape, forge_tensor **res, forge_tensor **out, forge_tensor *a,
                                    forge_tensor *b, forge_tensor *weight, forge_tensor *bias, float eps) {
    if (!op_is_bf16(a)) {
        FORGE_TRY(forge_op_add(tape, res, a, b));
        return bias ? forge_op_layernorm(tape, out, *res, weight, bias, eps)
                    : forge_op_rmsnorm(tape, out, *res, weight, eps);
    }
    forge_backend *be = forge_tape_backend(tape);
    if (bias) OP_REQUIRE(be, residual_layernorm_forward_bf16);
    else OP_REQUIRE(be, residual_rmsnorm_forward_bf16);
    if (a->dtype != b->dtype || a->numel != b->numel || a->ndim != b->ndim)
        return forge_error(FORGE_ERR_ARG, "residual norm: a and b must have one shape and dtype");
    const char *op = bias ? "residual layernorm" : "residual rmsnorm";
    forge_tensor *mean = NULL, *rstd;
    int N, C;
    FORGE_TRY(op_new_dtype(tape, res, a->dtype, a->ndim, a->shape));
    FORGE_TRY(norm_outputs(tape, op, *res, weight, bias, out, &mean, &rstd, &N, &C));
    forge_tensor *r = *res, *o = *out;
    if (bias)
        FORGE_TRY(be->residual_layernorm_forward_bf16(be, forge_bf16p(r), forge_bf16p(o), forge_f32(mean),
                                                      forge_f32(rstd), forge_bf16p(a), forge_bf16p(b),
                                                      forge_f32(weight), forge_f32(bias), N, C, eps));
    else
        FORGE_TRY(be->residual_rmsnorm_forward_bf16(be, forge_bf16p(r), forge_bf16p(o), forge_f32(rstd),
                                                    forge_bf16p(a), forge_bf16p(b), forge_f32(weight), N, C, eps));
    FORGE_TRY(op_record_add(tape, r, a, b));
    return record_norm(tape, o, r, weight, bias, mean, rstd, N, C);
}
