/* optimizer.c: AdamW state and the per-step update. */
#include "optimizer.h"

#include <math.h>
#include <stdlib.h>

/* The parameter tensors as AdamW spans (host array, *count of them). */
static forge_status make_spans(const forge_model *model, float weight_decay, forge_adamw_span **out, int *count) {
    size_t n = 0;
    for (int i = 0; i < model->n_params; i++)
        n += (model->params[i].t->numel + FORGE_ADAMW_SPAN - 1) / FORGE_ADAMW_SPAN;
    if (n > (size_t)1 << 30) return forge_error(FORGE_ERR_ARG, "optimizer: %zu AdamW spans, expected < 2^30", n);
    forge_adamw_span *sp = malloc((n ? n : 1) * sizeof *sp);
    if (!sp) return forge_error(FORGE_ERR_OOM, "optimizer: out of host memory for %zu spans", n);
    size_t k = 0;
    for (int i = 0; i < model->n_params; i++) {
        const forge_param *p = &model->params[i];
        for (size_t off = 0; off < p->t->numel; off += FORGE_ADAMW_SPAN) {
            size_t len = p->t->numel - off < FORGE_ADAMW_SPAN ? p->t->numel - off : FORGE_ADAMW_SPAN;
            sp[k++] = (forge_adamw_span){.begin = p->offset + off, .n = (uint32_t)len,
                                         .weight_decay = p->decay ? weight_decay : 0.0f};
        }
    }
    *out = sp;
    *count = (int)k;
    return FORGE_OK;
}

forge_status forge_optimizer_create(forge_optimizer **out, forge_model *model, forge_adamw_config cfg) {
    forge_backend *be = model->be;
    if (!be->sumsq || !be->adamw)
        return forge_error(FORGE_ERR_UNSUPPORTED, "backend %s does not support adamw/sumsq", be->name);
    forge_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return forge_error(FORGE_ERR_OOM, "optimizer: out of host memory");
    opt->model = model;
    opt->cfg = cfg;
    forge_adamw_span *host_spans = NULL;
    size_t bytes = model->n_elements * sizeof(float);
    forge_status s = make_spans(model, cfg.weight_decay, &host_spans, &opt->n_spans);
    if (s == FORGE_OK) s = forge_pool_block(model->pool, (void **)&opt->m, bytes, &opt->m_bytes);
    if (s == FORGE_OK) s = forge_pool_block(model->pool, (void **)&opt->v, bytes, &opt->v_bytes);
    if (s == FORGE_OK) s = forge_pool_block(model->pool, (void **)&opt->grad_sumsq, sizeof(float), &opt->s_bytes);
    if (s == FORGE_OK) s = forge_pool_block(model->pool, (void **)&opt->step_scalars, 3 * sizeof(float), &opt->x_bytes);
    if (s == FORGE_OK)
        s = forge_pool_block(model->pool, (void **)&opt->spans, (size_t)opt->n_spans * sizeof(forge_adamw_span),
                             &opt->spans_bytes);
    if (s == FORGE_OK)
        s = be->copy_to_device(be, opt->spans, host_spans, (size_t)opt->n_spans * sizeof(forge_adamw_span));
    if (s == FORGE_OK) s = be->memset_zero(be, opt->m, bytes);
    if (s == FORGE_OK) s = be->memset_zero(be, opt->v, bytes);
    if (s == FORGE_OK) s = be->memset_zero(be, opt->grad_sumsq, sizeof(float));
    if (s == FORGE_OK) s = be->memset_zero(be, opt->step_scalars, 3 * sizeof(float));
    free(host_spans); /* the copy above is staged before it returns */
    if (s != FORGE_OK) {
        forge_optimizer_free(opt);
        return forge_error_context(s, "optimizer state for %zu parameters: ", model->n_elements);
    }
    *out = opt;
    return FORGE_OK;
}

void forge_optimizer_free(forge_optimizer *opt) {
    if (!opt) return;
    forge_pool *pool = opt->model->pool;
    if (opt->m) forge_pool_block_release(pool, opt->m, opt->m_bytes);
    if (opt->v) forge_pool_block_release(pool, opt->v, opt->v_bytes);
    if (opt->grad_sumsq) forge_pool_block_release(pool, opt->grad_sumsq, opt->s_bytes);
    if (opt->step_scalars) forge_pool_block_release(pool, opt->step_scalars, opt->x_bytes);
    if (opt->spans) forge_pool_block_release(pool, opt->spans, opt->spans_bytes);
    free(opt);
}

forge_status forge_optimizer_begin_step(forge_optimizer *opt, float lr) {
    forge_backend *be = opt->model->be;
    const int t = opt->step + 1;
    /* host float powf: the bits every backend gets, whatever its own powf */
    const float scalars[3] = {lr, 1.0f - powf(opt->cfg.beta1, (float)t), 1.0f - powf(opt->cfg.beta2, (float)t)};
    FORGE_TRY(be->copy_to_device(be, opt->step_scalars, scalars, sizeof scalars));
    opt->step = t;
    return FORGE_OK;
}

forge_status forge_optimizer_grad_norm(forge_optimizer *opt) {
    forge_backend *be = opt->model->be;
    return be->sumsq(be, opt->grad_sumsq, opt->model->grad_data, opt->model->n_elements);
}

forge_status forge_optimizer_read_grad_norm(forge_optimizer *opt, float *norm) {
    forge_backend *be = opt->model->be;
    float sumsq;
    FORGE_TRY(be->copy_to_host(be, &sumsq, opt->grad_sumsq, sizeof sumsq));
    *norm = sqrtf(sumsq);
    return FORGE_OK;
}

forge_status forge_optimizer_update(forge_optimizer *opt) {
    forge_model *model = opt->model;
    forge_backend *be = model->be;
    if (opt->step < 1)
        return forge_error(FORGE_ERR_ARG, "optimizer: update without forge_optimizer_begin_step (step %d)", opt->step);
    forge_adamw_params hp = {.beta1 = opt->cfg.beta1,
                             .beta2 = opt->cfg.beta2,
                             .eps = opt->cfg.eps,
                             .max_grad_norm = opt->cfg.max_grad_norm};
    /* the bf16 step rewrites the working copy in the same pass */
    return be->adamw(be, model->param_data, model->working_data, model->grad_data, opt->m, opt->v,
                     model->n_elements, opt->spans, opt->n_spans, opt->grad_sumsq, opt->step_scalars, hp);
}

forge_status forge_optimizer_get_state(const forge_optimizer *opt, float *m_host, float *v_host) {
    forge_backend *be = opt->model->be;
    size_t bytes = opt->model->n_elements * sizeof(float);
    FORGE_TRY(be->copy_to_host(be, m_host, opt->m, bytes));
    return be->copy_to_host(be, v_host, opt->v, bytes);
}

forge_status forge_optimizer_get_moment(const forge_optimizer *opt, int which, float *host) {
    forge_backend *be = opt->model->be;
    return be->copy_to_host(be, host, which ? opt->v : opt->m, opt->model->n_elements * sizeof(float));
}

forge_status forge_optimizer_set_state(forge_optimizer *opt, const float *m_host, const float *v_host) {
    forge_backend *be = opt->model->be;
    size_t bytes = opt->model->n_elements * sizeof(float);
    FORGE_TRY(be->copy_to_device(be, opt->m, m_host, bytes));
    return be->copy_to_device(be, opt->v, v_host, bytes);
}
