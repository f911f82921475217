/* optimizer.c: AdamW state and the per-step update. */
#include "optimizer.h"

#include <math.h>
#include <stdlib.h>

forge_status forge_optimizer_create(forge_optimizer **out, forge_model *model, forge_adamw_config cfg) {
    forge_backend *be = model->be;
    if (!be->sumsq_accumulate || !(model->working_data ? (void *)be->adamw_update_bf16 : (void *)be->adamw_update))
        return forge_error(FORGE_ERR_UNSUPPORTED, "backend %s does not support %s/sumsq_accumulate", be->name,
                           model->working_data ? "adamw_update_bf16" : "adamw_update");
    forge_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return forge_error(FORGE_ERR_OOM, "optimizer: out of host memory");
    opt->model = model;
    opt->cfg = cfg;
    size_t bytes = model->n_elements * sizeof(float);
    forge_status s = forge_pool_block(model->pool, (void **)&opt->m, bytes, &opt->m_bytes);
    if (s == FORGE_OK) s = forge_pool_block(model->pool, (void **)&opt->v, bytes, &opt->v_bytes);
    if (s == FORGE_OK) s = forge_pool_block(model->pool, (void **)&opt->grad_sumsq, sizeof(float), &opt->s_bytes);
    if (s == FORGE_OK) s = be->memset_zero(be, opt->m, bytes);
    if (s == FORGE_OK) s = be->memset_zero(be, opt->v, bytes);
    if (s == FORGE_OK) s = be->memset_zero(be, opt->grad_sumsq, sizeof(float));
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
    free(opt);
}

forge_status forge_optimizer_grad_norm(forge_optimizer *opt) {
    forge_backend *be = opt->model->be;
    FORGE_TRY(be->memset_zero(be, opt->grad_sumsq, sizeof(float)));
    return be->sumsq_accumulate(be, opt->grad_sumsq, opt->model->grad_data, opt->model->n_elements);
}

forge_status forge_optimizer_read_grad_norm(forge_optimizer *opt, float *norm) {
    forge_backend *be = opt->model->be;
    float sumsq;
    FORGE_TRY(be->copy_to_host(be, &sumsq, opt->grad_sumsq, sizeof sumsq));
    *norm = sqrtf(sumsq);
    return FORGE_OK;
}

forge_status forge_optimizer_update(forge_optimizer *opt, float lr) {
    forge_model *model = opt->model;
    forge_backend *be = model->be;
    opt->step++;
    for (int i = 0; i < model->n_params; i++) {
        const forge_param *p = &model->params[i];
        forge_adamw_params hp = {
            .lr = lr,
            .beta1 = opt->cfg.beta1,
            .beta2 = opt->cfg.beta2,
            .eps = opt->cfg.eps,
            .weight_decay = p->decay ? opt->cfg.weight_decay : 0.0f,
            .max_grad_norm = opt->cfg.max_grad_norm,
            .step = opt->step,
        };
        if (model->working_data) { /* bf16 step: the working copy rewritten in the same pass */
            FORGE_TRY(be->adamw_update_bf16(be, model->param_data + p->offset, model->working_data + p->offset,
                                            model->grad_data + p->offset, opt->m + p->offset, opt->v + p->offset,
                                            p->t->numel, opt->grad_sumsq, hp));
        } else {
            FORGE_TRY(be->adamw_update(be, model->param_data + p->offset, model->grad_data + p->offset,
                                       opt->m + p->offset, opt->v + p->offset, p->t->numel, opt->grad_sumsq, hp));
        }
    }
    return FORGE_OK;
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
