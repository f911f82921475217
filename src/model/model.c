/* model.c: parameter layout, GPT-2 initialisation and the forward pass. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/ops.h"
#include "../base/rng.h"

/* Parameter registration happens in two passes over the same code: the first
 * counts and names, the second (with blocks allocated) creates the views. */
typedef struct {
    forge_model *m;
    int index;
    size_t offset;
    int creating;
    forge_status status;
} layout_builder;

static forge_tensor *add_param(layout_builder *lb, const char *name, int ndim, int64_t d0, int64_t d1,
                               forge_param_export export_kind) {
    size_t numel = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1);
    forge_tensor *t = NULL;
    if (lb->creating && lb->status == FORGE_OK) {
        forge_model *m = lb->m;
        forge_param *p = &m->params[lb->index];
        t = calloc(1, sizeof *t);
        forge_tensor *g = calloc(1, sizeof *g);
        if (!t || !g) {
            free(t);
            free(g);
            lb->status = forge_error(FORGE_ERR_OOM, "model: out of host memory");
            return NULL;
        }
        t->dtype = g->dtype = FORGE_F32;
        t->ndim = g->ndim = ndim;
        t->shape[0] = g->shape[0] = d0;
        t->shape[1] = g->shape[1] = d1;
        t->numel = g->numel = numel;
        t->data = m->param_data + lb->offset;
        g->data = m->grad_data + lb->offset;
        t->persistent = g->persistent = 1;
        t->requires_grad = 1;
        t->grad = g;
        if (m->working_data) {
            forge_tensor *w = calloc(1, sizeof *w);
            if (!w) {
                free(t);
                free(g);
                lb->status = forge_error(FORGE_ERR_OOM, "model: out of host memory");
                return NULL;
            }
            *w = *t;
            w->dtype = FORGE_BF16;
            w->data = m->working_data + lb->offset;
            w->grad = NULL;
            w->requires_grad = 0;
            t->working = w;
        }
        snprintf(p->name, sizeof p->name, "%s", name);
        p->t = t;
        p->offset = lb->offset;
        p->decay = ndim >= 2;
        p->export_kind = export_kind;
    }
    lb->index++;
    lb->offset += numel;
    return t;
}

static void build_layout(layout_builder *lb) {
    forge_model *m = lb->m;
    const forge_model_config *c = &m->cfg;
    int C = c->d_model, H = c->ffn_hidden, V = c->vocab_size;
    int HS = C / c->n_heads, QKV = (c->n_heads + 2 * c->n_kv_heads) * HS;
    int gpt2 = c->family == FORGE_FAMILY_GPT2;
    int ln = c->norm == FORGE_NORM_LAYERNORM;
    forge_param_export linear = gpt2 ? FORGE_EXPORT_TRANSPOSED : FORGE_EXPORT_PLAIN;
    char name[96];
    const char *pre = gpt2 ? "transformer.h" : "model.layers";

    m->wte = add_param(lb, gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight", 2, V, C,
                       FORGE_EXPORT_PLAIN);
    m->wpe = NULL;
    if (c->positions == FORGE_POSITIONS_LEARNED)
        m->wpe = add_param(lb, gpt2 ? "transformer.wpe.weight" : "model.embed_positions.weight", 2,
                           c->context_length, C, FORGE_EXPORT_PLAIN);
#define P(field, suffix, ndim, d0, d1, kind)                                     \
    do {                                                                         \
        snprintf(name, sizeof name, "%s.%d.%s", pre, l, suffix);                 \
        forge_tensor *t_ = add_param(lb, name, ndim, d0, d1, kind);              \
        if (lb->creating) m->layers[l].field = t_;                               \
    } while (0)
    for (int l = 0; l < c->n_layers; l++) {
        P(norm1_w, gpt2 ? "ln_1.weight" : "input_layernorm.weight", 1, C, 1, FORGE_EXPORT_PLAIN);
        if (ln) P(norm1_b, gpt2 ? "ln_1.bias" : "input_layernorm.bias", 1, C, 1, FORGE_EXPORT_PLAIN);
        P(qkv_w, gpt2 ? "attn.c_attn.weight" : "self_attn.q_proj.weight", 2, QKV, C,
          gpt2 ? FORGE_EXPORT_TRANSPOSED : FORGE_EXPORT_QKV);
        if (c->bias)
            P(qkv_b, gpt2 ? "attn.c_attn.bias" : "self_attn.q_proj.bias", 1, QKV, 1,
              gpt2 ? FORGE_EXPORT_PLAIN : FORGE_EXPORT_QKV);
        P(attn_proj_w, gpt2 ? "attn.c_proj.weight" : "self_attn.o_proj.weight", 2, C, C, linear);
        if (c->bias) P(attn_proj_b, gpt2 ? "attn.c_proj.bias" : "self_attn.o_proj.bias", 1, C, 1, FORGE_EXPORT_PLAIN);
        P(norm2_w, gpt2 ? "ln_2.weight" : "post_attention_layernorm.weight", 1, C, 1, FORGE_EXPORT_PLAIN);
        if (ln) P(norm2_b, gpt2 ? "ln_2.bias" : "post_attention_layernorm.bias", 1, C, 1, FORGE_EXPORT_PLAIN);
        if (c->activation == FORGE_ACTIVATION_GELU) {
            P(fc_w, gpt2 ? "mlp.c_fc.weight" : "mlp.up_proj.weight", 2, H, C, linear);
            if (c->bias) P(fc_b, gpt2 ? "mlp.c_fc.bias" : "mlp.up_proj.bias", 1, H, 1, FORGE_EXPORT_PLAIN);
        } else {
            /* gate then up, back to back when there are no biases: pack_swiglu views them as one (2H, C) matrix */
            P(fc_w, gpt2 ? "mlp.c_gate.weight" : "mlp.gate_proj.weight", 2, H, C, linear);
            if (c->bias) P(fc_b, gpt2 ? "mlp.c_gate.bias" : "mlp.gate_proj.bias", 1, H, 1, FORGE_EXPORT_PLAIN);
            P(up_w, gpt2 ? "mlp.c_fc.weight" : "mlp.up_proj.weight", 2, H, C, linear);
            if (c->bias) P(up_b, gpt2 ? "mlp.c_fc.bias" : "mlp.up_proj.bias", 1, H, 1, FORGE_EXPORT_PLAIN);
        }
        P(mlp_proj_w, gpt2 ? "mlp.c_proj.weight" : "mlp.down_proj.weight", 2, C, H, linear);
        if (c->bias) P(mlp_proj_b, gpt2 ? "mlp.c_proj.bias" : "mlp.down_proj.bias", 1, C, 1, FORGE_EXPORT_PLAIN);
    }
#undef P
    m->normf_w = add_param(lb, gpt2 ? "transformer.ln_f.weight" : "model.norm.weight", 1, C, 1, FORGE_EXPORT_PLAIN);
    m->normf_b = NULL;
    if (ln) m->normf_b = add_param(lb, gpt2 ? "transformer.ln_f.bias" : "model.norm.bias", 1, C, 1, FORGE_EXPORT_PLAIN);
    if (c->tied_embeddings)
        m->lm_head = m->wte;
    else
        m->lm_head = add_param(lb, "lm_head.weight", 2, V, C, FORGE_EXPORT_PLAIN);
}

/* A (rows, C) tensor starting at a's elements, in all three blocks: the parameters, their gradients and (bf16 step)
 * the working copy. Not a parameter of the model: the optimizer, checkpoints and names see a's and its neighbour's. */
static forge_tensor *stacked_view(const forge_tensor *a, int64_t rows) {
    forge_tensor *t = calloc(1, sizeof *t), *g = calloc(1, sizeof *g), *w = a->working ? calloc(1, sizeof *w) : NULL;
    if (!t || !g || (a->working && !w)) {
        free(t);
        free(g);
        free(w);
        return NULL;
    }
    *t = *a;
    *g = *a->grad;
    t->shape[0] = g->shape[0] = rows;
    t->numel = g->numel = (size_t)rows * (size_t)a->shape[1];
    t->grad = g;
    if (w) {
        *w = *a->working;
        w->shape[0] = rows;
        w->numel = t->numel;
        t->working = w;
    }
    return t;
}

static void stacked_view_free(forge_tensor *t) {
    if (!t) return;
    free(t->grad);
    free(t->working);
    free(t);
}

/* b's elements follow a's in every block a and b live in */
static int adjacent(const forge_tensor *a, const forge_tensor *b) {
    if (a->ndim != 2 || b->ndim != 2 || a->shape[1] != b->shape[1]) return 0;
    if (forge_f32(b) != forge_f32(a) + a->numel || forge_f32(b->grad) != forge_f32(a->grad) + a->numel) return 0;
    if (!a->working != !b->working) return 0;
    return !a->working || (forge_bf16 *)b->working->data == (forge_bf16 *)a->working->data + a->numel;
}

/* The SwiGLU MLP's gate and up projections read the same input, so stacked into one (2H, C) matrix they run as one
 * GEMM each way: the forward's gu = h [gate_w; up_w]^T (N, 2H) (each element the same C-long dot product as two
 * GEMMs give), the backward's dh = dgu [gate_w; up_w] (one K = 2H product written once, where the second of two
 * GEMMs added into the first's output) and one dW GEMM into both gradients. build_layout registers the two back to
 * back, so the stack is a view of the parameters, and since the gradient and working-copy blocks share their
 * layout, of those too. With biases, the gate's bias sits between them and the stack does not exist: the flat layout is
 * also the order state.safetensors stores the AdamW moments in, element for element, so it stays what existing
 * checkpoints hold, and those configs keep two GEMMs (swiglu_packed = 0). */
static forge_status pack_swiglu(forge_model *m) {
    const forge_model_config *c = &m->cfg;
    m->swiglu_packed = 0;
    if (c->activation != FORGE_ACTIVATION_SWIGLU || c->bias) return FORGE_OK;
    for (int l = 0; l < c->n_layers; l++)
        if (!adjacent(m->layers[l].fc_w, m->layers[l].up_w)) return FORGE_OK;
    for (int l = 0; l < c->n_layers; l++) {
        forge_layer_params *L = &m->layers[l];
        L->gate_up_w = stacked_view(L->fc_w, L->fc_w->shape[0] + L->up_w->shape[0]);
        if (!L->gate_up_w) return forge_error(FORGE_ERR_OOM, "model: out of host memory");
    }
    m->swiglu_packed = 1;
    return FORGE_OK;
}

static int is_residual_projection(const forge_model *m, const forge_tensor *t) {
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (t == m->layers[l].attn_proj_w || t == m->layers[l].mlp_proj_w) return 1;
    return 0;
}

static int is_norm_weight(const forge_model *m, const forge_tensor *t) {
    if (t == m->normf_w) return 1;
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (t == m->layers[l].norm1_w || t == m->layers[l].norm2_w) return 1;
    return 0;
}

static forge_status init_params(forge_model *m, uint64_t seed) {
    float *host = malloc(m->n_elements * sizeof(float));
    if (!host) return forge_error(FORGE_ERR_OOM, "model: no host memory for %zu parameters", m->n_elements);
    forge_rng rng;
    forge_rng_seed(&rng, seed, 0x696e6974 /* "init" */);
    double std = m->cfg.init_std;
    double residual_std = std / sqrt(2.0 * m->cfg.n_layers);
    for (int i = 0; i < m->n_params; i++) {
        const forge_param *p = &m->params[i];
        float *dst = host + p->offset;
        size_t n = p->t->numel;
        if (p->t->ndim == 1) {
            float v = is_norm_weight(m, p->t) ? 1.0f : 0.0f;
            for (size_t j = 0; j < n; j++) dst[j] = v;
        } else {
            double s = is_residual_projection(m, p->t) ? residual_std : std;
            for (size_t j = 0; j < n; j++) dst[j] = (float)(forge_rng_normal(&rng) * s);
        }
    }
    forge_status st = forge_model_set_params(m, host);
    free(host);
    return st;
}

forge_status forge_model_create(forge_model **out, const forge_model_config *cfg, forge_pool *pool,
                                uint64_t seed) {
    FORGE_TRY(forge_config_validate(cfg, cfg->name));
    forge_model *m = calloc(1, sizeof *m);
    if (!m) return forge_error(FORGE_ERR_OOM, "model: out of host memory");
    m->cfg = *cfg;
    m->pool = pool;
    m->be = forge_pool_backend(pool);
    /* The fused form is the default: it saves (B,NH,T) floats per layer instead of (B,NH,T,T) and needs no
     * T x T scratch in the backward; the materialised form stays selectable as the reference the fused one
     * was checked against. */
    m->flash_attention = m->be->options.attention == FORGE_ATTENTION_FLASH;
    layout_builder lb = {.m = m};
    build_layout(&lb);
    m->n_params = lb.index;
    m->n_elements = lb.offset;
    m->params = calloc((size_t)m->n_params, sizeof *m->params);
    m->layers = calloc((size_t)cfg->n_layers, sizeof *m->layers);
    forge_status s = FORGE_OK;
    if (!m->params || !m->layers) s = forge_error(FORGE_ERR_OOM, "model: out of host memory");
    if (s == FORGE_OK)
        s = forge_pool_block(pool, (void **)&m->param_data, m->n_elements * sizeof(float), &m->param_block_bytes);
    if (s == FORGE_OK)
        s = forge_pool_block(pool, (void **)&m->grad_data, m->n_elements * sizeof(float), &m->grad_block_bytes);
    if (s == FORGE_OK && m->be->options.precision == FORGE_TRAIN_BF16)
        s = forge_pool_block(pool, (void **)&m->working_data, m->n_elements * sizeof(forge_bf16),
                             &m->working_block_bytes);
    if (s == FORGE_OK) {
        layout_builder create = {.m = m, .creating = 1};
        build_layout(&create);
        s = create.status;
    }
    if (s == FORGE_OK) s = pack_swiglu(m);
    if (s == FORGE_OK) s = init_params(m, seed);
    if (s == FORGE_OK) s = forge_model_zero_grad(m);
    if (s != FORGE_OK) {
        forge_model_free(m);
        return forge_error_context(s, "creating model %s: ", cfg->name);
    }
    *out = m;
    return FORGE_OK;
}

void forge_model_free(forge_model *m) {
    if (!m) return;
    if (m->params) {
        for (int i = 0; i < m->n_params; i++) {
            if (m->params[i].t) {
                free(m->params[i].t->grad);
                free(m->params[i].t->working);
            }
            free(m->params[i].t);
        }
    }
    if (m->layers)
        for (int l = 0; l < m->cfg.n_layers; l++) stacked_view_free(m->layers[l].gate_up_w);
    if (m->param_data) forge_pool_block_release(m->pool, m->param_data, m->param_block_bytes);
    if (m->grad_data) forge_pool_block_release(m->pool, m->grad_data, m->grad_block_bytes);
    if (m->working_data) forge_pool_block_release(m->pool, m->working_data, m->working_block_bytes);
    free(m->params);
    free(m->layers);
    free(m);
}

forge_status forge_model_zero_grad(forge_model *m) {
    return m->be->memset_zero(m->be, m->grad_data, m->n_elements * sizeof(float));
}

forge_status forge_model_get_params(const forge_model *m, float *host) {
    return m->be->copy_to_host(m->be, host, m->param_data, m->n_elements * sizeof(float));
}

forge_status forge_model_set_params(forge_model *m, const float *host) {
    FORGE_TRY(m->be->copy_to_device(m->be, m->param_data, host, m->n_elements * sizeof(float)));
    return forge_model_sync_working(m);
}

forge_status forge_model_sync_working(forge_model *m) {
    if (!m->working_data) return FORGE_OK;
    if (!m->be->cast_bf16) return forge_error(FORGE_ERR_UNSUPPORTED, "backend %s does not support cast_bf16", m->be->name);
    return m->be->cast_bf16(m->be, m->working_data, m->param_data, m->n_elements);
}

forge_status forge_model_get_grads(const forge_model *m, float *host) {
    return m->be->copy_to_host(m->be, host, m->grad_data, m->n_elements * sizeof(float));
}

const forge_param *forge_model_find_param(const forge_model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
    return NULL;
}

static forge_status norm(forge_model *m, forge_tape *tape, forge_tensor **out, forge_tensor *x,
                         forge_tensor *w, forge_tensor *b) {
    if (m->cfg.norm == FORGE_NORM_LAYERNORM) return forge_op_layernorm(tape, out, x, w, b, m->cfg.norm_eps);
    return forge_op_rmsnorm(tape, out, x, w, m->cfg.norm_eps);
}

/* res = x + y, then the norm of res with weight w (and bias b for LayerNorm) */
static forge_status residual_norm(forge_model *m, forge_tape *tape, forge_tensor **res, forge_tensor **out,
                                  forge_tensor *x, forge_tensor *y, forge_tensor *w, forge_tensor *b) {
    return forge_op_residual_norm(tape, res, out, x, y, w, m->cfg.norm == FORGE_NORM_LAYERNORM ? b : NULL,
                                  m->cfg.norm_eps);
}

forge_status forge_model_forward(forge_model *m, forge_tape *tape, const forge_tensor *ids,
                                 const forge_tensor *targets, float grad_scale, forge_tensor **result) {
    const forge_model_config *c = &m->cfg;
    if (ids->ndim != 2 || ids->dtype != FORGE_I32)
        return forge_error(FORGE_ERR_ARG, "model: ids must be (B, T) i32");
    if (ids->shape[1] > c->context_length)
        return forge_error(FORGE_ERR_ARG, "model: sequence length %lld exceeds context_length %d",
                           (long long)ids->shape[1], c->context_length);
    int NH = c->n_heads, NKV = c->n_kv_heads, HS = c->d_model / c->n_heads;
    /* the activations' dtype: bf16 when the parameters carry a bf16 working copy (docs/mixed-precision.md) */
    const forge_dtype act = m->working_data ? FORGE_BF16 : FORGE_F32;
    if (act == FORGE_BF16 && !m->flash_attention)
        return forge_error(FORGE_ERR_UNSUPPORTED, "model %s: --precision bf16 runs the fused attention only "
                                                  "(--attention flash)", c->name);
    forge_tensor *x, *h, *a, *u;
    FORGE_TRY(forge_op_encoder(tape, &x, ids, m->wte, m->wpe, act));
    FORGE_TRY(norm(m, tape, &h, x, m->layers[0].norm1_w, m->layers[0].norm1_b));
    for (int l = 0; l < c->n_layers; l++) {
        forge_layer_params *L = &m->layers[l];
        /* attention block: x = x + proj(attention(rope(qkv(h)))), then h = norm2(x) */
        FORGE_TRY(forge_op_matmul(tape, &h, h, L->qkv_w, L->qkv_b));
        if (c->positions == FORGE_POSITIONS_ROPE) FORGE_TRY(forge_op_rope(tape, &h, h, NH, NKV, HS, c->rope_theta));
        if (m->flash_attention)
            FORGE_TRY(forge_op_flash_attention(tape, &a, h, NH, NKV, HS));
        else
            FORGE_TRY(forge_op_attention(tape, &a, h, NH, NKV, HS));
        FORGE_TRY(forge_op_matmul(tape, &a, a, L->attn_proj_w, L->attn_proj_b));
        FORGE_TRY(residual_norm(m, tape, &x, &h, x, a, L->norm2_w, L->norm2_b));
        /* MLP block: x = x + proj(act(fc(h))), then h = the next block's norm1 (or the final norm) of x */
        if (c->activation == FORGE_ACTIVATION_GELU) {
            FORGE_TRY(forge_op_matmul_gelu(tape, &u, h, L->fc_w, L->fc_b));
        } else if (m->swiglu_packed) {
            /* gate and up in one GEMM (pack_swiglu): gu (N, 2H), gate in columns [0, H), up in [H, 2H) */
            forge_tensor *gu;
            FORGE_TRY(forge_op_matmul(tape, &gu, h, L->gate_up_w, NULL));
            FORGE_TRY(forge_op_swiglu_packed(tape, &u, gu));
        } else {
            forge_tensor *gate, *up;
            FORGE_TRY(forge_op_matmul(tape, &gate, h, L->fc_w, L->fc_b));
            FORGE_TRY(forge_op_matmul(tape, &up, h, L->up_w, L->up_b));
            FORGE_TRY(forge_op_swiglu(tape, &u, gate, up));
        }
        FORGE_TRY(forge_op_matmul(tape, &u, u, L->mlp_proj_w, L->mlp_proj_b));
        const int last = l == c->n_layers - 1;
        FORGE_TRY(residual_norm(m, tape, &x, &h, x, u, last ? m->normf_w : m->layers[l + 1].norm1_w,
                                last ? m->normf_b : m->layers[l + 1].norm1_b));
    }
    if (!targets) return forge_op_matmul(tape, result, h, m->lm_head, NULL);
    return forge_op_lm_head_classifier(tape, result, h, m->lm_head, targets, -1, grad_scale);
}
