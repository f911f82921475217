/*
 * optimizer.h: AdamW over the model's flat parameter block.
 *
 * The moments m and v are flat blocks laid out like the parameters, so a
 * data-parallel run can shard them by contiguous range. One step: the global
 * gradient norm is accumulated into a device scalar (no host sync), then each
 * parameter tensor is updated with its own weight decay (0.1 for rank >= 2,
 * 0 for biases and norm weights); the clip factor is read from the device
 * scalar inside the update kernel.
 */
#ifndef FORGE_OPTIMIZER_H
#define FORGE_OPTIMIZER_H

#include "../model/model.h"

typedef struct {
    float beta1, beta2, eps, weight_decay, max_grad_norm;
} forge_adamw_config;

typedef struct {
    forge_model *model;
    forge_adamw_config cfg;
    float *m, *v;        /* device, n_elements each */
    float *grad_sumsq;   /* device scalar */
    size_t m_bytes, v_bytes, s_bytes;
    int step;            /* updates done so far */
} forge_optimizer;

forge_status forge_optimizer_create(forge_optimizer **out, forge_model *model, forge_adamw_config cfg);
void forge_optimizer_free(forge_optimizer *opt);

/* Accumulates the squared global norm of the gradients into the device scalar. */
forge_status forge_optimizer_grad_norm(forge_optimizer *opt);
/* Reads the norm computed by forge_optimizer_grad_norm (synchronises). */
forge_status forge_optimizer_read_grad_norm(forge_optimizer *opt, float *norm);
/* One AdamW update at learning rate lr (after forge_optimizer_grad_norm). */
forge_status forge_optimizer_update(forge_optimizer *opt, float lr);

/* Host copies of the moments, for checkpoints. */
forge_status forge_optimizer_get_state(const forge_optimizer *opt, float *m_host, float *v_host);
/* One moment's host copy: which 0 = m, 1 = v. */
forge_status forge_optimizer_get_moment(const forge_optimizer *opt, int which, float *host);
forge_status forge_optimizer_set_state(forge_optimizer *opt, const float *m_host, const float *v_host);

#endif
