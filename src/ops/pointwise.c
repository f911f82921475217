/* pointwise.c: residual add, GELU (tanh form, as GPT-2) and SwiGLU (Llama), the latter on separate gate and up
 * tensors or on the packed (N, 2F) output of the MLP's one GEMM on its stacked gate and up weights. */
#include "op_common.h"

static forge_status check_same(const char *op, const forge_tensor *a, const forge_tensor *b) {
    if (a->numel != b->numel) {
        char sa[64], sb[64];
        return forge_error(FORGE_ERR_ARG, "%s: shapes %s and %s differ", op, forge_shape_str(a, sa, sizeof sa),
                           forge_shape_str(b, sb, sizeof sb));
    }
    return FORGE_OK;
}

/* da += dout, db += dout, in the activations' dtype. bf16: a gradient that does not exist yet is not zeroed and
 * added into. a's takes over dout's block (forge_tape_grad_move: dout is dead once this rule has run, every
 * consumer of out came later in the forward, so its rule ran already). b's then borrows that block read-only
 * (forge_tape_grad_lend) where the tape can prove nothing changes it before b's producer has read it: the
 * residual stream's sublayer output, whose producer (a matmul) is recorded just before the add and only reads its
 * output's gradient. Otherwise b's is written, rn(0 + dout). The block handed over holds dout bit for bit, where an
 * add into zeros would turn a -0 into +0: the bf16 rules write their fresh gradients as rn(0 + d), and rn(x + d)
 * is -0 only for x = d = -0, so the gradients reaching here hold no -0, and the block lent to b holds the bits its
 * copy would. fp32 stays the reference: both gradients added into (zeroed when new). */
static forge_status add_backward(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    const int bf16 = op_is_bf16(e->out);
    if (bf16) OP_REQUIRE(be, accumulate_bf16);
    else OP_REQUIRE(be, accumulate);
    forge_tensor *a = e->in[0], *b = e->in[1], *dout = e->out->grad;
    int done[2] = {0, 0};
    if (bf16 && a != b && forge_tape_grad_move(e->out, a)) {
        done[0] = 1;
        FORGE_TRY(forge_tape_grad_lend(tape, e, a, b, &done[1]));
    }
    for (int i = 0; i < 2; i++) {
        if (done[i]) continue;
        forge_tensor *d;
        int fresh = 0;
        if (bf16) FORGE_TRY(forge_tape_grad_fresh(tape, e->in[i], &d, &fresh));
        else FORGE_TRY(forge_tape_grad(tape, e->in[i], &d));
        if (d && bf16) FORGE_TRY(be->accumulate_bf16(be, forge_bf16p(d), forge_bf16p(dout), d->numel, !fresh));
        else if (d) FORGE_TRY(be->accumulate(be, forge_f32(d), forge_f32(dout), d->numel));
    }
    return FORGE_OK;
}

forge_status op_record_add(forge_tape *tape, forge_tensor *out, forge_tensor *a, forge_tensor *b) {
    out->requires_grad = a->requires_grad || b->requires_grad;
    forge_tape_entry e = {.op = "add", .backward = add_backward, .out = out, .in = {a, b}};
    return forge_tape_push(tape, &e, NULL, 0);
}

forge_status forge_op_add(forge_tape *tape, forge_tensor **out, forge_tensor *a, forge_tensor *b) {
    forge_backend *be = forge_tape_backend(tape);
    if (op_is_bf16(a))
        return forge_error(FORGE_ERR_UNSUPPORTED, "add: bf16 residual adds are fused into the next norm "
                                                  "(forge_op_residual_norm)");
    OP_REQUIRE(be, add_forward);
    FORGE_TRY(check_same("add", a, b));
    FORGE_TRY(op_new(tape, out, a->ndim, a->shape));
    forge_tensor *o = *out;
    FORGE_TRY(be->add_forward(be, forge_f32(o), forge_f32(a), forge_f32(b), a->numel));
    return op_record_add(tape, o, a, b);
}

static forge_status gelu_backward(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *dx;
    if (op_is_bf16(e->in[0])) {
        int fresh = 0;
        FORGE_TRY(forge_tape_grad_fresh(tape, e->in[0], &dx, &fresh));
        if (!dx) return FORGE_OK;
        OP_REQUIRE(be, gelu_backward_bf16);
        return be->gelu_backward_bf16(be, forge_bf16p(dx), forge_bf16p(e->in[0]), forge_bf16p(e->out->grad),
                                      dx->numel, !fresh);
    }
    FORGE_TRY(forge_tape_grad(tape, e->in[0], &dx));
    if (!dx) return FORGE_OK;
    OP_REQUIRE(be, gelu_backward);
    return be->gelu_backward(be, forge_f32(dx), forge_f32(e->in[0]), forge_f32(e->out->grad), dx->numel);
}

forge_status forge_op_gelu(forge_tape *tape, forge_tensor **out, forge_tensor *x) {
    forge_backend *be = forge_tape_backend(tape);
    if (op_is_bf16(x)) OP_REQUIRE(be, gelu_forward_bf16);
    else OP_REQUIRE(be, gelu_forward);
    FORGE_TRY(op_new_dtype(tape, out, x->dtype, x->ndim, x->shape));
    forge_tensor *o = *out;
    if (op_is_bf16(x)) FORGE_TRY(be->gelu_forward_bf16(be, forge_bf16p(o), forge_bf16p(x), x->numel));
    else FORGE_TRY(be->gelu_forward(be, forge_f32(o), forge_f32(x), x->numel));
    o->requires_grad = x->requires_grad;
    forge_tape_entry e = {.op = "gelu", .backward = gelu_backward, .out = o, .in = {x}};
    return forge_tape_push(tape, &e, NULL, 0);
}

/* bf16: dgate and dup are written when both are first contributions (the kernel takes one flag; a fresh one
 * beside an existing one is zeroed, and both are added into) */
static forge_status swiglu_backward(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *dgate, *dup;
    const int bf16 = op_is_bf16(e->out);
    int fresh_gate = 0, fresh_up = 0;
    if (bf16) {
        FORGE_TRY(forge_tape_grad_fresh(tape, e->in[0], &dgate, &fresh_gate));
        FORGE_TRY(forge_tape_grad_fresh(tape, e->in[1], &dup, &fresh_up));
    } else {
        FORGE_TRY(forge_tape_grad(tape, e->in[0], &dgate));
        FORGE_TRY(forge_tape_grad(tape, e->in[1], &dup));
    }
    if (!dgate && !dup) return FORGE_OK;
    if (!dgate || !dup) return forge_error(FORGE_ERR_UNSUPPORTED, "swiglu: gate and up must both need grads");
    if (bf16) {
        OP_REQUIRE(be, swiglu_backward_bf16);
        const int write = fresh_gate && fresh_up && dgate != dup;
        if (!write && (fresh_gate || fresh_up)) {
            OP_REQUIRE(be, memset_zero);
            forge_tensor *z = fresh_gate ? dgate : dup;
            FORGE_TRY(be->memset_zero(be, z->data, forge_tensor_bytes(z)));
        }
        return be->swiglu_backward_bf16(be, forge_bf16p(dgate), forge_bf16p(dup), forge_bf16p(e->out->grad),
                                        forge_bf16p(e->in[0]), forge_bf16p(e->in[1]), e->out->numel, !write);
    }
    OP_REQUIRE(be, swiglu_backward);
    return be->swiglu_backward(be, forge_f32(dgate), forge_f32(dup), forge_f32(e->out->grad),
                               forge_f32(e->in[0]), forge_f32(e->in[1]), e->out->numel);
}

forge_status forge_op_swiglu(forge_tape *tape, forge_tensor **out, forge_tensor *gate, forge_tensor *up) {
    forge_backend *be = forge_tape_backend(tape);
    const int bf16 = op_is_bf16(gate);
    if (bf16) OP_REQUIRE(be, swiglu_forward_bf16);
    else OP_REQUIRE(be, swiglu_forward);
    FORGE_TRY(check_same("swiglu", gate, up));
    FORGE_TRY(op_new_dtype(tape, out, gate->dtype, gate->ndim, gate->shape));
    forge_tensor *o = *out;
    if (bf16) FORGE_TRY(be->swiglu_forward_bf16(be, forge_bf16p(o), forge_bf16p(gate), forge_bf16p(up), o->numel));
    else FORGE_TRY(be->swiglu_forward(be, forge_f32(o), forge_f32(gate), forge_f32(up), o->numel));
    o->requires_grad = gate->requires_grad || up->requires_grad;
    forge_tape_entry e = {.op = "swiglu", .backward = swiglu_backward, .out = o, .in = {gate, up}};
    return forge_tape_push(tape, &e, NULL, 0);
}

/* dgu (N, 2F): bf16 writes it (rn(0 + d), no zeroing pass) when it is gu's first gradient, as in the model, where
 * this op is gu's only consumer; otherwise adds into it */
static forge_status swiglu_packed_backward(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *gu = e->in[0], *dgu;
    const int N = op_rows(gu), F = op_cols(gu) / 2;
    if (op_is_bf16(e->out)) {
        OP_REQUIRE(be, swiglu_packed_backward_bf16);
        int fresh = 0;
        FORGE_TRY(forge_tape_grad_fresh(tape, gu, &dgu, &fresh));
        if (!dgu) return FORGE_OK;
        return be->swiglu_packed_backward_bf16(be, forge_bf16p(dgu), forge_bf16p(e->out->grad), forge_bf16p(gu), N,
                                               F, !fresh);
    }
    OP_REQUIRE(be, swiglu_packed_backward);
    FORGE_TRY(forge_tape_grad(tape, gu, &dgu));
    if (!dgu) return FORGE_OK;
    return be->swiglu_packed_backward(be, forge_f32(dgu), forge_f32(e->out->grad), forge_f32(gu), N, F);
}

forge_status forge_op_swiglu_packed(forge_tape *tape, forge_tensor **out, forge_tensor *gu) {
    forge_backend *be = forge_tape_backend(tape);
    const int bf16 = op_is_bf16(gu);
    if (bf16) OP_REQUIRE(be, swiglu_packed_forward_bf16);
    else OP_REQUIRE(be, swiglu_packed_forward);
    if (op_cols(gu) % 2 != 0)
        return forge_error(FORGE_ERR_ARG, "swiglu_packed: the last dimension (%d) must be even: gate then up",
                           op_cols(gu));
    const int N = op_rows(gu), F = op_cols(gu) / 2;
    FORGE_TRY(op_new_like(tape, out, gu, F));
    forge_tensor *o = *out;
    if (bf16) FORGE_TRY(be->swiglu_packed_forward_bf16(be, forge_bf16p(o), forge_bf16p(gu), N, F));
    else FORGE_TRY(be->swiglu_packed_forward(be, forge_f32(o), forge_f32(gu), N, F));
    o->requires_grad = gu->requires_grad;
    forge_tape_entry e = {.op = "swiglu_packed", .backward = swiglu_packed_backward, .out = o, .in = {gu}};
    return forge_tape_push(tape, &e, NULL, 0);
}
