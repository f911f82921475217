/*
 * attention.c: rotary embedding on packed qkv, and causal multi-head
 * attention in two forms: the reference form (the (B, NH, T, T) probabilities
 * are materialised and saved for backward) and the fused flash form (only the
 * (B, NH, T) logsumexp is saved; the backward recomputes the probabilities).
 */
#include "op_common.h"

typedef struct {
    int B, T, n_heads, n_rot, HS;
    float theta;
} rope_params;

/* Both attention forms' backward rules need the shape. */
typedef struct {
    int B, T, NH, NKV, HS;
} attention_params;

static forge_status check_qkv(const char *op, const forge_tensor *qkv, int NH, int NKV, int HS) {
    if (qkv->ndim != 3) return forge_error(FORGE_ERR_ARG, "%s: qkv must be (B, T, (NH+2*NKV)*HS)", op);
    if (NH <= 0 || NKV <= 0 || NH % NKV != 0)
        return forge_error(FORGE_ERR_ARG, "%s: n_heads %d must be a positive multiple of n_kv_heads %d", op, NH,
                           NKV);
    return op_check_last(op, qkv, (int64_t)(NH + 2 * NKV) * HS, "qkv");
}

/* bf16: dx written rather than added when it is x's first gradient (no zeroing pass); the in-place form (out is
 * qkv itself, sharing its gradient) turns that gradient into qkv's where it lies: each pair is read before it is
 * written, and written, not added */
static forge_status rope_backward(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *dx;
    int dx_fresh = 0;
    if (e->out == e->in[0]) {
        rope_params p;
        forge_tape_entry_params(e, &p, sizeof p);
        forge_bf16 *g = forge_bf16p(e->out->grad);
        OP_REQUIRE(be, rope_backward_bf16);
        return be->rope_backward_bf16(be, g, g, p.B, p.T, p.n_heads, p.n_rot, p.HS, p.theta, 0);
    }
    if (op_is_bf16(e->in[0])) FORGE_TRY(forge_tape_grad_fresh(tape, e->in[0], &dx, &dx_fresh));
    else FORGE_TRY(forge_tape_grad(tape, e->in[0], &dx));
    if (!dx) return FORGE_OK;
    rope_params p;
    forge_tape_entry_params(e, &p, sizeof p);
    if (op_is_bf16(dx)) {
        OP_REQUIRE(be, rope_backward_bf16);
        return be->rope_backward_bf16(be, forge_bf16p(dx), forge_bf16p(e->out->grad), p.B, p.T, p.n_heads, p.n_rot,
                                      p.HS, p.theta, !dx_fresh);
    }
    OP_REQUIRE(be, rope_backward);
    return be->rope_backward(be, forge_f32(dx), forge_f32(e->out->grad), p.B, p.T, p.n_heads, p.n_rot, p.HS,
                             p.theta);
}

forge_status forge_op_rope(forge_tape *tape, forge_tensor **out, forge_tensor *qkv, int NH, int NKV, int HS,
                           float theta) {
    forge_backend *be = forge_tape_backend(tape);
    const int bf16 = op_is_bf16(qkv);
    if (bf16) OP_REQUIRE(be, rope_forward_bf16);
    else OP_REQUIRE(be, rope_forward);
    FORGE_TRY(check_qkv("rope", qkv, NH, NKV, HS));
    if (HS % 2) return forge_error(FORGE_ERR_ARG, "rope: head size %d must be even", HS);
    int B = (int)qkv->shape[0], T = (int)qkv->shape[1];
    /* bf16: in place (out = qkv): nothing reads the unrotated qkv again (the qkv GEMM's backward needs its input,
     * rope's only its output's gradient), so it need not be kept for the backward (a (B, T, (NH+2*NKV)*HS) block a
     * layer) */
    if (bf16) *out = qkv;
    else FORGE_TRY(op_new_dtype(tape, out, qkv->dtype, 3, qkv->shape));
    forge_tensor *o = *out;
    if (bf16)
        FORGE_TRY(be->rope_forward_bf16(be, forge_bf16p(o), forge_bf16p(qkv), B, T, NH + 2 * NKV, NH + NKV, HS,
                                        theta));
    else
        FORGE_TRY(be->rope_forward(be, forge_f32(o), forge_f32(qkv), B, T, NH + 2 * NKV, NH + NKV, HS, theta));
    o->requires_grad = qkv->requires_grad;
    forge_tape_entry e = {.op = "rope", .backward = rope_backward, .out = o, .in = {qkv}};
    rope_params p = {B, T, NH + 2 * NKV, NH + NKV, HS, theta};
    return forge_tape_push(tape, &e, &p, sizeof p);
}

/* Both forms' backward rule: dqkv +=, with a scratch block the size of what the forward saved (the
 * materialised form's probabilities, the fused form's lse: it holds D = rowsum(dO * O)) taken from the pool for
 * the call. The pool never syncs: the block is reused only by later work on the same stream. */
static forge_status attention_backward_either(forge_tape *tape, const forge_tape_entry *e, int flash) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *dqkv;
    FORGE_TRY(forge_tape_grad(tape, e->in[0], &dqkv));
    if (!dqkv) return FORGE_OK;
    if (flash) OP_REQUIRE(be, flash_attention_backward);
    else OP_REQUIRE(be, attention_backward);
    attention_params p;
    forge_tape_entry_params(e, &p, sizeof p);
    forge_pool *pool = forge_tape_pool(tape);
    size_t scratch_bytes;
    void *scratch;
    FORGE_TRY(forge_pool_block(pool, &scratch, forge_tensor_bytes(e->saved[0]), &scratch_bytes));
    const float *dout = forge_f32(e->out->grad), *qkv = forge_f32(e->in[0]), *saved = forge_f32(e->saved[0]);
    forge_status s = flash ? be->flash_attention_backward(be, forge_f32(dqkv), scratch, dout, qkv, forge_f32(e->out),
                                                          saved, p.B, p.T, p.NH, p.NKV, p.HS)
                           : be->attention_backward(be, forge_f32(dqkv), scratch, dout, qkv, saved, p.B, p.T, p.NH,
                                                    p.NKV, p.HS);
    forge_pool_block_release(pool, scratch, scratch_bytes);
    return s;
}

static forge_status attention_backward(forge_tape *tape, const forge_tape_entry *e) {
    return attention_backward_either(tape, e, 0);
}

static forge_status flash_attention_backward(forge_tape *tape, const forge_tape_entry *e) {
    return attention_backward_either(tape, e, 1);
}

/* bf16: dqkv += (bf16), or dqkv written when it is qkv's first gradient (no zeroing pass), with the scratch the op
 * list states for the head size (the delta rows and the fp32 gradients of the tensor-core kernels, or the widened
 * operands of their fallback) taken from the pool for the call */
static forge_status flash_attention_backward_bf16(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *dqkv;
    int fresh = 0;
    FORGE_TRY(forge_tape_grad_fresh(tape, e->in[0], &dqkv, &fresh));
    if (!dqkv) return FORGE_OK;
    OP_REQUIRE(be, flash_attention_backward_bf16);
    attention_params p;
    forge_tape_entry_params(e, &p, sizeof p);
    forge_pool *pool = forge_tape_pool(tape);
    size_t scratch_bytes;
    void *scratch;
    FORGE_TRY(forge_pool_block(pool, &scratch, FORGE_FLASH_BF16_SCRATCH(p.B, p.T, p.NH, p.NKV, p.HS) * sizeof(float),
                               &scratch_bytes));
    forge_status s = be->flash_attention_backward_bf16(be, forge_bf16p(dqkv), scratch, forge_bf16p(e->out->grad),
                                                       forge_bf16p(e->in[0]), forge_bf16p(e->out),
                                                       forge_f32(e->saved[0]), p.B, p.T, p.NH, p.NKV, p.HS, !fresh);
    forge_pool_block_release(pool, scratch, scratch_bytes);
    return s;
}

forge_status forge_op_attention(forge_tape *tape, forge_tensor **out, forge_tensor *qkv, int NH, int NKV,
                                int HS) {
    forge_backend *be = forge_tape_backend(tape);
    if (op_is_bf16(qkv))
        return forge_error(FORGE_ERR_UNSUPPORTED, "attention: the materialised reference runs in fp32 only "
                                                  "(--attention flash with --precision bf16)");
    OP_REQUIRE(be, attention_forward);
    FORGE_TRY(check_qkv("attention", qkv, NH, NKV, HS));
    int B = (int)qkv->shape[0], T = (int)qkv->shape[1];
    int64_t oshape[3] = {B, T, (int64_t)NH * HS};
    int64_t ashape[4] = {B, NH, T, T};
    forge_tensor *att;
    FORGE_TRY(op_new(tape, out, 3, oshape));
    FORGE_TRY(op_new(tape, &att, 4, ashape));
    forge_tensor *o = *out;
    FORGE_TRY(be->attention_forward(be, forge_f32(o), forge_f32(att), forge_f32(qkv), B, T, NH, NKV, HS));
    o->requires_grad = qkv->requires_grad;
    forge_tape_entry e = {.op = "attention", .backward = attention_backward, .out = o, .in = {qkv},
                          .saved = {att}};
    attention_params p = {B, T, NH, NKV, HS};
    return forge_tape_push(tape, &e, &p, sizeof p);
}

forge_status forge_op_flash_attention(forge_tape *tape, forge_tensor **out, forge_tensor *qkv, int NH,
                                      int NKV, int HS) {
    forge_backend *be = forge_tape_backend(tape);
    const int bf16 = op_is_bf16(qkv);
    if (bf16) OP_REQUIRE(be, flash_attention_forward_bf16);
    else OP_REQUIRE(be, flash_attention_forward);
    FORGE_TRY(check_qkv("flash attention", qkv, NH, NKV, HS));
    int B = (int)qkv->shape[0], T = (int)qkv->shape[1];
    int64_t oshape[3] = {B, T, (int64_t)NH * HS};
    int64_t lshape[3] = {B, NH, T};
    forge_tensor *lse;
    FORGE_TRY(op_new_dtype(tape, out, qkv->dtype, 3, oshape));
    FORGE_TRY(op_new(tape, &lse, 3, lshape));
    forge_tensor *o = *out;
    if (bf16)
        FORGE_TRY(be->flash_attention_forward_bf16(be, forge_bf16p(o), forge_f32(lse), forge_bf16p(qkv), B, T, NH, NKV,
                                                   HS));
    else
        FORGE_TRY(be->flash_attention_forward(be, forge_f32(o), forge_f32(lse), forge_f32(qkv), B, T, NH, NKV, HS));
    o->requires_grad = qkv->requires_grad;
    /* the output itself is read by the backward (D = rowsum(dO * O)) */
    forge_tape_entry e = {.op = "flash_attention",
                          .backward = bf16 ? flash_attention_backward_bf16 : flash_attention_backward, .out = o,
                          .in = {qkv}, .saved = {lse}};
    attention_params p = {B, T, NH, NKV, HS};
    return forge_tape_push(tape, &e, &p, sizeof p);
}
