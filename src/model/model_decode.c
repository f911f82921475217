/* model_decode.c: the one-token forward pass against per-layer KV caches (model_decode.h). */
#include "model_decode.h"

#include <stdio.h>
#include <stdlib.h>

#include "../runtime/graph.h"

struct forge_decoder {
    forge_model *m;
    forge_decoder_options o;
    int device_args;  /* id and pos travel through `args` (decode_embed, attention_decode_at) */
    int graphs;       /* steps with logits are recorded and replayed (use_graph on a backend that can) */
    void *block;      /* everything below, one pool block */
    size_t block_bytes;
    float *k_cache, *v_cache;             /* (L, context_length, NKV, HS) each */
    float *x0, *x20;                      /* the residual rows where a step starts (x, x2 swap within it) */
    float *x, *x2, *h, *qkv, *att, *proj; /* one row: C, C, C, QKV, NH*HS, C */
    float *fc, *act;                      /* fc: H (GELU), or 2H for SwiGLU: gate then up, the packed row the
                                           * swiglu_packed_forward entry reads; act: H */
    float *mean, *rstd;                   /* the norms' statistics (one row; not used afterwards) */
    float *logits;                        /* V */
    int32_t *args;                        /* device {id, pos} of the step being run or replayed */
    int32_t host_args[2];                 /* their host copy, the source of the upload */
    forge_graph *graph;                   /* the recorded step with logits, or NULL */
    int warm;        /* a step with logits ran op by op since the graph was last dropped: the next one records */
    int recordings, replays;
    char mode[320];
};

/* Pieces of the block start on 64-float (256-byte) boundaries. */
static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

forge_status forge_decoder_create(forge_decoder **out, forge_model *m, const forge_decoder_options *o) {
    *out = NULL;
    const forge_model_config *c = &m->cfg;
    const size_t C = (size_t)c->d_model, H = (size_t)c->ffn_hidden, V = (size_t)c->vocab_size;
    const size_t HS = C / (size_t)c->n_heads, QKV = (size_t)(c->n_heads + 2 * c->n_kv_heads) * HS;
    const size_t cache = (size_t)c->n_layers * (size_t)c->context_length * (size_t)c->n_kv_heads * HS;
    /* the last piece is the two int32 arguments, in a float-sized slot each */
    const size_t FC = c->activation == FORGE_ACTIVATION_SWIGLU ? 2 * H : H;
    const size_t sizes[] = {cache, cache, C, C, C, QKV, C, C, FC, H, 1, 1, V, 2};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) total += round64(sizes[i]);
    forge_decoder *d = calloc(1, sizeof *d);
    if (!d) return forge_error(FORGE_ERR_OOM, "decoder: out of host memory");
    d->m = m;
    if (o) d->o = *o;
    d->graphs = d->o.use_graph && forge_graph_supported(m->pool);
    d->device_args = d->o.device_args || d->graphs;
    snprintf(d->mode, sizeof d->mode, "%s", d->graphs ? "graph" : "eager");
    forge_status s = forge_pool_block(m->pool, &d->block, total * sizeof(float), &d->block_bytes);
    if (s != FORGE_OK) {
        free(d);
        return forge_error_context(s, "decoder: KV caches of %zu floats (%d layers x %d positions): ", 2 * cache,
                                   c->n_layers, c->context_length);
    }
    float *args = NULL;
    float **ptrs[] = {&d->k_cache, &d->v_cache, &d->x0,  &d->x20,   &d->h,    &d->qkv,    &d->att,   &d->proj,
                      &d->fc,      &d->act,     &d->mean, &d->rstd, &d->logits, &args};
    float *p = d->block;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        *ptrs[i] = p;
        p += round64(sizes[i]);
    }
    d->args = (int32_t *)args;
    *out = d;
    return FORGE_OK;
}

void forge_decoder_free(forge_decoder *d) {
    if (!d) return;
    forge_graph_free(d->graph);
    forge_pool_block_release(d->m->pool, d->block, d->block_bytes);
    free(d);
}

const char *forge_decoder_mode(const forge_decoder *d, int *recordings, int *replays) {
    if (recordings) *recordings = d->recordings;
    if (replays) *replays = d->replays;
    return d->mode;
}

#define REQUIRE(be, op)                                                                                          \
    do {                                                                                                         \
        if (!(be)->op) return forge_error(FORGE_ERR_UNSUPPORTED, "backend %s does not support " #op, (be)->name); \
    } while (0)

static const float *f32(const forge_tensor *t) { return t ? (const float *)t->data : NULL; }

/* out = norm(x) with weight w (and bias b for LayerNorm), one row */
static forge_status norm_row(forge_decoder *d, float *out, const float *x, const forge_tensor *w,
                             const forge_tensor *b) {
    forge_backend *be = d->m->be;
    const forge_model_config *c = &d->m->cfg;
    if (c->norm == FORGE_NORM_LAYERNORM) {
        REQUIRE(be, layernorm_forward);
        return be->layernorm_forward(be, out, d->mean, d->rstd, x, f32(w), f32(b), 1, c->d_model, c->norm_eps);
    }
    REQUIRE(be, rmsnorm_forward);
    return be->rmsnorm_forward(be, out, d->rstd, x, f32(w), 1, c->d_model, c->norm_eps);
}

/* out (OC) = x (C) . w (OC, C)^T + b */
static forge_status linear_row(forge_backend *be, float *out, const float *x, const forge_tensor *w,
                               const forge_tensor *b) {
    REQUIRE(be, matmul_forward);
    return be->matmul_forward(be, out, x, f32(w), f32(b), 1, (int)w->shape[1], (int)w->shape[0]);
}

/* x = x + y, through the spare row (add_forward's operands do not alias) */
static forge_status residual_row(forge_decoder *d, const float *y) {
    forge_backend *be = d->m->be;
    REQUIRE(be, add_forward);
    FORGE_TRY(be->add_forward(be, d->x2, d->x, y, (size_t)d->m->cfg.d_model));
    float *t = d->x;
    d->x = d->x2;
    d->x2 = t;
    return FORGE_OK;
}

/* Everything one step issues on the device, without waiting: what a recording captures. With device_args the
 * token id and position are read from d->args (uploaded by the caller); otherwise they are launch arguments. */
static forge_status device_step(forge_decoder *d, int32_t id, int pos, int want_logits) {
    forge_model *m = d->m;
    forge_backend *be = m->be;
    const forge_model_config *c = &m->cfg;
    const int C = c->d_model, NH = c->n_heads, NKV = c->n_kv_heads, HS = C / NH, H = c->ffn_hidden;
    d->x = d->x0; /* the rows swap an even number of times a step; starting from fixed ones keeps a replay's */
    d->x2 = d->x20;
    /* the encoder: x = wte[id] (+ wpe[pos]) */
    if (d->device_args) {
        REQUIRE(be, decode_embed);
        FORGE_TRY(be->decode_embed(be, d->x, d->args, d->args + 1, f32(m->wte), f32(m->wpe), C, c->vocab_size,
                                   c->context_length));
    } else {
        /* the rows are addressed directly, so the id never travels */
        const float *wte_row = f32(m->wte) + (size_t)id * C;
        if (m->wpe) {
            REQUIRE(be, position_forward);
            FORGE_TRY(be->position_forward(be, d->x, wte_row, f32(m->wpe) + (size_t)pos * C, 1, 1, C));
        } else {
            FORGE_TRY(be->copy_device(be, d->x, wte_row, (size_t)C * sizeof(float)));
        }
    }
    FORGE_TRY(norm_row(d, d->h, d->x, m->layers[0].norm1_w, m->layers[0].norm1_b));
    const size_t layer_cache = (size_t)c->context_length * NKV * HS;
    const float theta = c->positions == FORGE_POSITIONS_ROPE ? c->rope_theta : 0.0f;
    for (int l = 0; l < c->n_layers; l++) {
        const forge_layer_params *L = &m->layers[l];
        float *kc = d->k_cache + l * layer_cache, *vc = d->v_cache + l * layer_cache;
        /* attention block: x = x + proj(attention(rope(qkv(h)))), then h = norm2(x) */
        FORGE_TRY(linear_row(be, d->qkv, d->h, L->qkv_w, L->qkv_b));
        if (d->device_args)
            FORGE_TRY(be->attention_decode_at(be, d->att, kc, vc, d->qkv, d->args + 1, c->context_length, NH, NKV, HS,
                                              theta));
        else
            FORGE_TRY(be->attention_decode(be, d->att, kc, vc, d->qkv, pos, c->context_length, NH, NKV, HS, theta));
        FORGE_TRY(linear_row(be, d->proj, d->att, L->attn_proj_w, L->attn_proj_b));
        FORGE_TRY(residual_row(d, d->proj));
        FORGE_TRY(norm_row(d, d->h, d->x, L->norm2_w, L->norm2_b));
        /* MLP block: x = x + proj(act(fc(h))), then h = the next block's norm1 (or the final norm) of x */
        if (c->activation == FORGE_ACTIVATION_GELU) {
            REQUIRE(be, gelu_forward);
            FORGE_TRY(linear_row(be, d->fc, d->h, L->fc_w, L->fc_b));
            FORGE_TRY(be->gelu_forward(be, d->act, d->fc, (size_t)H));
        } else {
            /* gate and up into one row, as the training forward: one GEMV on the stacked weights where the model
             * has them (model.c: pack_swiglu), else two into its halves */
            REQUIRE(be, swiglu_packed_forward);
            if (m->swiglu_packed) {
                FORGE_TRY(linear_row(be, d->fc, d->h, L->gate_up_w, NULL));
            } else {
                FORGE_TRY(linear_row(be, d->fc, d->h, L->fc_w, L->fc_b));
                FORGE_TRY(linear_row(be, d->fc + H, d->h, L->up_w, L->up_b));
            }
            FORGE_TRY(be->swiglu_packed_forward(be, d->act, d->fc, 1, H));
        }
        FORGE_TRY(linear_row(be, d->proj, d->act, L->mlp_proj_w, L->mlp_proj_b));
        FORGE_TRY(residual_row(d, d->proj));
        const int last = l == c->n_layers - 1;
        if (last && !want_logits) break; /* a prompt position: its cache rows are written, its logits not wanted */
        FORGE_TRY(norm_row(d, d->h, d->x, last ? m->normf_w : m->layers[l + 1].norm1_w,
                           last ? m->normf_b : m->layers[l + 1].norm1_b));
    }
    if (want_logits) FORGE_TRY(linear_row(be, d->logits, d->h, m->lm_head, NULL));
    return FORGE_OK;
}

/* Records the step with logits and replays it. A recording the backend refuses leaves the decoder op by op (its
 * mode says why) and runs the step that way; an op that fails is the step's own error. */
static forge_status record_and_replay(forge_decoder *d) {
    forge_pool *pool = d->m->pool;
    forge_status s = forge_graph_record_begin(pool);
    if (s == FORGE_OK) {
        forge_status ds = device_step(d, 0, 0, 1);
        forge_status es = forge_graph_record_end(pool, &d->graph);
        if (ds != FORGE_OK) {
            forge_graph_free(d->graph);
            d->graph = NULL;
            return ds;
        }
        s = es;
    }
    if (s != FORGE_OK) {
        snprintf(d->mode, sizeof d->mode, "eager (the decode step could not be recorded as a graph: %s)",
                 forge_error_message());
        forge_error_clear();
        d->graphs = 0;
        return device_step(d, 0, 0, 1);
    }
    d->recordings++;
    d->replays++;
    return forge_graph_replay(d->graph);
}

/* A step with logits on the graph path: the first one after the graph was dropped runs op by op (it warms what the
 * recording reuses: lazily made workspaces, the matmul table's choices), the next one records, later ones replay. */
static forge_status graph_step(forge_decoder *d) {
    if (!d->graph) {
        if (!d->warm) {
            d->warm = 1;
            return device_step(d, 0, 0, 1);
        }
        return record_and_replay(d);
    }
    forge_status s = forge_graph_replay(d->graph);
    if (s == FORGE_ERR_STALE) { /* memory the graph used changed hands: this step op by op, the next recorded */
        forge_error_clear();
        forge_graph_free(d->graph);
        d->graph = NULL;
        return device_step(d, 0, 0, 1);
    }
    if (s == FORGE_OK) d->replays++;
    return s;
}

forge_status forge_decode_step(forge_decoder *d, int32_t id, int pos, const float **logits) {
    forge_model *m = d->m;
    forge_backend *be = m->be;
    const forge_model_config *c = &m->cfg;
    if (id < 0 || id >= c->vocab_size)
        return forge_error(FORGE_ERR_ARG, "decode: token id %d outside the vocabulary [0, %d)", (int)id,
                           c->vocab_size);
    if (pos < 0 || pos >= c->context_length)
        return forge_error(FORGE_ERR_ARG, "decode: position %d outside the context [0, %d)", pos, c->context_length);
    if (d->device_args) {
        REQUIRE(be, attention_decode_at);
        d->host_args[0] = id;
        d->host_args[1] = (int32_t)pos;
        FORGE_TRY(be->copy_to_device(be, d->args, d->host_args, sizeof d->host_args)); /* stream-ordered */
    } else {
        REQUIRE(be, attention_decode);
    }
    if (d->graphs && logits) FORGE_TRY(graph_step(d));
    else FORGE_TRY(device_step(d, id, pos, logits != NULL));
    if (logits) *logits = d->logits;
    return FORGE_OK;
}
