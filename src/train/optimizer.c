/* optimizer.c: AdamW state and the per-step update. */
#include "optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The parameter tensors as AdamW spans (host array, *count of them), cut to the elements [lo, hi) this rank
 * updates and counted from lo (the optimizer hands AdamW the blocks from lo on). */
static forge_status make_spans(const forge_model *model, float weight_decay, size_t lo, size_t hi,
                               forge_adamw_span **out, int *count) {
    size_t n = 0;
    for (int i = 0; i < model->n_params; i++)
        n += (model->params[i].t->numel + FORGE_ADAMW_SPAN - 1) / FORGE_ADAMW_SPAN + 1; /* + 1: a cut piece */
    if (n > (size_t)1 << 30) return forge_error(FORGE_ERR_ARG, "optimizer: %zu AdamW spans, expected < 2^30", n);
    forge_adamw_span *sp = malloc((n ? n : 1) * sizeof *sp);
    if (!sp) return forge_error(FORGE_ERR_OOM, "optimizer: out of host memory for %zu spans", n);
    size_t k = 0;
    for (int i = 0; i < model->n_params; i++) {
        const forge_param *p = &model->params[i];
        size_t b = p->offset > lo ? p->offset : lo, e = p->offset + p->t->numel < hi ? p->offset + p->t->numel : hi;
        for (size_t off = b; off < e; off += FORGE_ADAMW_SPAN) {
            size_t len = e - off < FORGE_ADAMW_SPAN ? e - off : FORGE_ADAMW_SPAN;
            sp[k++] = (forge_adamw_span){.begin = off - lo, .n = (uint32_t)len,
                                         .weight_decay = p->decay ? weight_decay : 0.0f};
        }
    }
    *out = sp;
    *count = (int)k;
    return FORGE_OK;
}

forge_status forge_optimizer_create(forge_optimizer **out, forge_model *model, forge_adamw_config cfg) {
    return forge_optimizer_create_dist(out, model, cfg, NULL, 0);
}

forge_status forge_optimizer_create_dist(forge_optimizer **out, forge_model *model, forge_adamw_config cfg,
                                         forge_comm *comm, int zero1) {
    forge_backend *be = model->be;
    if (!be->sumsq || !be->adamw)
        return forge_error(FORGE_ERR_UNSUPPORTED, "backend %s does not support adamw/sumsq", be->name);
    forge_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return forge_error(FORGE_ERR_OOM, "optimizer: out of host memory");
    opt->model = model;
    opt->cfg = cfg;
    opt->comm = forge_comm_active(comm) ? comm : NULL;
    opt->zero1 = opt->comm && zero1;
    opt->lo = 0;
    opt->hi = model->n_elements;
    if (opt->zero1) forge_comm_range(model->n_elements, forge_comm_size(comm), forge_comm_rank(comm), &opt->lo, &opt->hi);
    forge_adamw_span *host_spans = NULL;
    /* one element at least: a rank whose range is empty (more ranks than elements) still holds valid blocks */
    size_t bytes = (opt->hi > opt->lo ? opt->hi - opt->lo : 1) * sizeof(float);
    forge_status s = make_spans(model, cfg.weight_decay, opt->lo, opt->hi, &host_spans, &opt->n_spans);
    if (s == FORGE_OK) s = forge_pool_block(model->pool, (void **)&opt->m, bytes, &opt->m_bytes);
    if (s == FORGE_OK) s = forge_pool_block(model->pool, (void **)&opt->v, bytes, &opt->v_bytes);
    if (s == FORGE_OK) s = forge_pool_block(model->pool, (void **)&opt->grad_sumsq, sizeof(float), &opt->s_bytes);
    if (s == FORGE_OK) s = forge_pool_block(model->pool, (void **)&opt->step_scalars, 3 * sizeof(float), &opt->x_bytes);
    if (s == FORGE_OK)
        s = forge_pool_block(model->pool, (void **)&opt->spans, (size_t)(opt->n_spans + 1) * sizeof(forge_adamw_span),
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
    forge_optimizer_release_gathered(opt);
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

forge_status forge_optimizer_reduce_grads(forge_optimizer *opt) {
    if (!opt->comm) return FORGE_OK;
    forge_model *model = opt->model;
    if (opt->zero1) return forge_comm_reduce_scatter_sum(opt->comm, model->be, model->grad_data, model->n_elements);
    return forge_comm_all_reduce_sum(opt->comm, model->be, model->grad_data, model->n_elements);
}

forge_status forge_optimizer_reduce_bucket(forge_optimizer *opt, size_t b0, size_t b1) {
    if (!opt->comm) return FORGE_OK;
    forge_model *model = opt->model;
    return forge_comm_reduce_piece(opt->comm, model->be, model->grad_data, model->n_elements, b0, b1, opt->zero1);
}

forge_status forge_optimizer_reduce_join(forge_optimizer *opt) {
    return opt->comm ? forge_comm_reduce_join(opt->comm, opt->model->be) : FORGE_OK;
}

forge_status forge_optimizer_grad_norm(forge_optimizer *opt) {
    forge_backend *be = opt->model->be;
    /* a rank with an empty range (more ranks than parameters) adds 0: no zero-size launch */
    if (opt->hi > opt->lo) FORGE_TRY(be->sumsq(be, opt->grad_sumsq, opt->model->grad_data + opt->lo, opt->hi - opt->lo));
    else FORGE_TRY(be->memset_zero(be, opt->grad_sumsq, sizeof(float)));
    if (!opt->comm) return FORGE_OK;
    if (opt->zero1) return forge_comm_all_reduce_sum(opt->comm, be, opt->grad_sumsq, 1);
    /* every rank holds the same summed gradient, but a threaded sumsq need not add its partials in the same order
     * on every rank: rank 0's norm decides the clip everywhere, so the ranks' parameters can never drift apart */
    return forge_comm_broadcast(opt->comm, be, opt->grad_sumsq, sizeof(float), 0);
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
    /* the bf16 step rewrites the working copy in the same pass; with zero1 the blocks from this rank's lo on */
    const size_t lo = opt->lo;
    if (opt->n_spans > 0)
        FORGE_TRY(be->adamw(be, model->param_data + lo, model->working_data ? model->working_data + lo : NULL,
                            model->grad_data + lo, opt->m, opt->v, opt->hi - lo, opt->spans, opt->n_spans,
                            opt->grad_sumsq, opt->step_scalars, hp));
    if (!opt->zero1) return FORGE_OK;
    /* every rank's updated range of the fp32 masters to every rank; the bf16 working copy is then re-rounded from
     * them here (the bits AdamW wrote for this rank's range) rather than gathered too: one local pass instead of
     * 2 bytes a parameter more on the wire (docs/distributed.md) */
    FORGE_TRY(forge_comm_all_gather(opt->comm, be, model->param_data, model->n_elements, sizeof(float)));
    return forge_model_sync_working(model);
}

forge_status forge_optimizer_gather(forge_optimizer *opt) {
    if (!opt->zero1) return FORGE_OK;
    forge_optimizer_release_gathered(opt);
    const size_t n = opt->model->n_elements;
    const int root = forge_comm_rank(opt->comm) == 0;
    if (root) {
        opt->gathered_m = malloc(n * sizeof(float));
        opt->gathered_v = malloc(n * sizeof(float));
    }
    /* a root that cannot allocate fails here; its error aborts every rank (cli/forge.c), none waits forever */
    if (root && (!opt->gathered_m || !opt->gathered_v)) {
        forge_optimizer_release_gathered(opt);
        return forge_error(FORGE_ERR_OOM, "optimizer: out of host memory gathering %zu AdamW moments on rank 0", n);
    }
    forge_status s = forge_comm_gather(opt->comm, opt->model->be, opt->m, n, opt->gathered_m, 0);
    if (s == FORGE_OK) s = forge_comm_gather(opt->comm, opt->model->be, opt->v, n, opt->gathered_v, 0);
    if (s != FORGE_OK) forge_optimizer_release_gathered(opt);
    return s;
}

void forge_optimizer_release_gathered(forge_optimizer *opt) {
    free(opt->gathered_m);
    free(opt->gathered_v);
    opt->gathered_m = opt->gathered_v = NULL;
}

forge_status forge_optimizer_get_moment(const forge_optimizer *opt, int which, float *host) {
    forge_backend *be = opt->model->be;
    const size_t n = opt->model->n_elements;
    if (opt->zero1) {
        const float *g = which ? opt->gathered_v : opt->gathered_m;
        if (!g)
            return forge_error(FORGE_ERR_ARG, "optimizer: the moments are sharded over %d ranks: expected "
                               "forge_optimizer_gather on every rank first (and to read them on rank 0)",
                               forge_comm_size(opt->comm));
        memcpy(host, g, n * sizeof(float));
        return FORGE_OK;
    }
    return be->copy_to_host(be, host, which ? opt->v : opt->m, n * sizeof(float));
}

forge_status forge_optimizer_get_state(const forge_optimizer *opt, float *m_host, float *v_host) {
    FORGE_TRY(forge_optimizer_get_moment(opt, 0, m_host));
    return forge_optimizer_get_moment(opt, 1, v_host);
}

forge_status forge_optimizer_set_state(forge_optimizer *opt, const float *m_host, const float *v_host) {
    forge_backend *be = opt->model->be;
    const size_t lo = opt->lo, bytes = (opt->hi - lo) * sizeof(float);
    if (!bytes) return FORGE_OK;
    FORGE_TRY(be->copy_to_device(be, opt->m, m_host + lo, bytes));
    return be->copy_to_device(be, opt->v, v_host + lo, bytes);
}
