/* embedding.c: token and learned-position embeddings (GPT-2's wte and wpe). */
#include "op_common.h"

typedef struct {
    int N, C, V;
} embedding_params;

typedef struct {
    int B, T, C;
} position_params;

static forge_status embedding_backward(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *dtable;
    FORGE_TRY(forge_tape_grad(tape, e->in[1], &dtable));
    if (!dtable) return FORGE_OK;
    OP_REQUIRE(be, embedding_backward);
    embedding_params p;
    forge_tape_entry_params(e, &p, sizeof p);
    return be->embedding_backward(be, forge_f32(dtable), forge_f32(e->out->grad), forge_i32(e->in[0]), p.N, p.C,
                                  p.V);
}

forge_status forge_op_embedding(forge_tape *tape, forge_tensor **out, const forge_tensor *ids,
                                forge_tensor *table) {
    forge_backend *be = forge_tape_backend(tape);
    OP_REQUIRE(be, embedding_forward);
    if (ids->dtype != FORGE_I32 || ids->ndim != 2)
        return forge_error(FORGE_ERR_ARG, "embedding: ids must be (B, T) i32");
    if (table->ndim != 2) return forge_error(FORGE_ERR_ARG, "embedding: table must be (V, C)");
    int C = op_cols(table), V = (int)table->shape[0];
    int64_t shape[3] = {ids->shape[0], ids->shape[1], C};
    FORGE_TRY(op_new(tape, out, 3, shape));
    forge_tensor *o = *out;
    int N = (int)ids->numel;
    FORGE_TRY(be->embedding_forward(be, forge_f32(o), forge_i32(ids), forge_f32(table), N, C, V));
    o->requires_grad = table->requires_grad;
    forge_tape_entry e = {.op = "embedding", .backward = embedding_backward, .out = o,
                          .in = {(forge_tensor *)ids, table}};
    embedding_params p = {N, C, V};
    return forge_tape_push(tape, &e, &p, sizeof p);
}

static forge_status position_backward(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *dx, *dwpe;
    FORGE_TRY(forge_tape_grad(tape, e->in[0], &dx));
    FORGE_TRY(forge_tape_grad(tape, e->in[1], &dwpe));
    OP_REQUIRE(be, position_backward);
    OP_REQUIRE(be, accumulate);
    const float *dout = forge_f32(e->out->grad);
    position_params p;
    forge_tape_entry_params(e, &p, sizeof p);
    if (dwpe)
        FORGE_TRY(be->position_backward(be, op_grad_data(dx), forge_f32(dwpe), dout, p.B, p.T, p.C));
    else if (dx)
        FORGE_TRY(be->accumulate(be, forge_f32(dx), dout, dx->numel));
    return FORGE_OK;
}

forge_status forge_op_position(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *wpe) {
    forge_backend *be = forge_tape_backend(tape);
    OP_REQUIRE(be, position_forward);
    if (x->ndim != 3) return forge_error(FORGE_ERR_ARG, "position: x must be (B, T, C)");
    int B = (int)x->shape[0], T = (int)x->shape[1], C = (int)x->shape[2];
    if (T > wpe->shape[0])
        return forge_error(FORGE_ERR_ARG, "position: sequence length %d exceeds the context length %lld", T,
                           (long long)wpe->shape[0]);
    FORGE_TRY(op_check_last("position", wpe, C, "wpe"));
    FORGE_TRY(op_new(tape, out, 3, x->shape));
    forge_tensor *o = *out;
    FORGE_TRY(be->position_forward(be, forge_f32(o), forge_f32(x), forge_f32(wpe), B, T, C));
    o->requires_grad = x->requires_grad || wpe->requires_grad;
    forge_tape_entry e = {.op = "position", .backward = position_backward, .out = o, .in = {x, wpe}};
    position_params p = {B, T, C};
    return forge_tape_push(tape, &e, &p, sizeof p);
}

/* ---- the encoder: token (+ position) embedding, the model's first op ------------------------------------------- */

typedef struct {
    int B, T, C, V;
} encoder_params;

static forge_status encoder_backward_bf16(forge_tape *tape, const forge_tape_entry *e) {
    forge_backend *be = forge_tape_backend(tape);
    forge_tensor *dwte, *dwpe = NULL;
    FORGE_TRY(forge_tape_grad(tape, e->in[1], &dwte));
    if (e->in[2]) FORGE_TRY(forge_tape_grad(tape, e->in[2], &dwpe));
    if (!dwte && !dwpe) return FORGE_OK;
    if (!dwte) return forge_error(FORGE_ERR_UNSUPPORTED, "encoder: a position gradient without a token gradient");
    OP_REQUIRE(be, encoder_backward_bf16);
    encoder_params p;
    forge_tape_entry_params(e, &p, sizeof p);
    return be->encoder_backward_bf16(be, forge_f32(dwte), dwpe ? forge_f32(dwpe) : NULL, forge_bf16p(e->out->grad),
                                     forge_i32(e->in[0]), p.B, p.T, p.C, p.V);
}

forge_status forge_op_encoder(forge_tape *tape, forge_tensor **out, const forge_tensor *ids, forge_tensor *wte,
                              forge_tensor *wpe, forge_dtype dtype) {
    if (dtype == FORGE_F32) {
        FORGE_TRY(forge_op_embedding(tape, out, ids, wte));
        return wpe ? forge_op_position(tape, out, *out, wpe) : FORGE_OK;
    }
    if (dtype != FORGE_BF16) return forge_error(FORGE_ERR_ARG, "encoder: activations of %s", forge_dtype_name(dtype));
    forge_backend *be = forge_tape_backend(tape);
    OP_REQUIRE(be, encoder_forward_bf16);
    if (ids->dtype != FORGE_I32 || ids->ndim != 2) return forge_error(FORGE_ERR_ARG, "encoder: ids must be (B, T) i32");
    if (wte->ndim != 2) return forge_error(FORGE_ERR_ARG, "encoder: wte must be (V, C)");
    const int B = (int)ids->shape[0], T = (int)ids->shape[1], C = op_cols(wte), V = (int)wte->shape[0];
    if (wpe) {
        FORGE_TRY(op_check_last("encoder", wpe, C, "wpe"));
        if (T > wpe->shape[0])
            return forge_error(FORGE_ERR_ARG, "encoder: sequence length %d exceeds the context length %lld", T,
                               (long long)wpe->shape[0]);
    }
    const forge_bf16 *wte16, *wpe16 = NULL;
    FORGE_TRY(op_working("encoder", wte, &wte16));
    if (wpe) FORGE_TRY(op_working("encoder", wpe, &wpe16));
    const int64_t shape[3] = {B, T, C};
    FORGE_TRY(op_new_dtype(tape, out, FORGE_BF16, 3, shape));
    forge_tensor *o = *out;
    FORGE_TRY(be->encoder_forward_bf16(be, forge_bf16p(o), forge_i32(ids), wte16, wpe16, B, T, C, V));
    o->requires_grad = wte->requires_grad || (wpe && wpe->requires_grad);
    forge_tape_entry e = {.op = "encoder", .backward = encoder_backward_bf16, .out = o,
                          .in = {(forge_tensor *)ids, wte, wpe}};
    encoder_params p = {B, T, C, V};
    return forge_tape_push(tape, &e, &p, sizeof p);
}
