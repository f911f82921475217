/*
 * optimizer.h: AdamW over the model's flat parameter block.
 *
 * The moments m and v are flat blocks laid out like the parameters, so a
 * data-parallel run can shard them by contiguous range. One step is two
 * launches: the squared global gradient norm into a device scalar, then one
 * multi-tensor AdamW over every parameter tensor (spans of the flat block,
 * each with its weight decay: the configured one for rank >= 2, 0 for biases
 * and norm weights), which reads the clip factor from that scalar. The
 * learning rate and bias corrections of the step are written to device memory
 * first (forge_optimizer_begin_step), so the two launches can be recorded once
 * and replayed (runtime/graph.h). Nothing here waits for the device except
 * forge_optimizer_read_grad_norm and the state copies.
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
    float *step_scalars; /* device: lr, 1 - beta1^t, 1 - beta2^t of the current step */
    forge_adamw_span *spans; /* device: the parameter tensors, cut into pieces of at most FORGE_ADAMW_SPAN */
    int n_spans;
    size_t m_bytes, v_bytes, s_bytes, x_bytes, spans_bytes;
    int step;            /* updates begun so far */
} forge_optimizer;

/* Elements per span of the multi-tensor AdamW: one GPU block each, so the blocks are balanced (124M parameters
 * make ~1900 spans) while a span stays long enough to stream. */
#define FORGE_ADAMW_SPAN 65536

forge_status forge_optimizer_create(forge_optimizer **out, forge_model *model, forge_adamw_config cfg);
void forge_optimizer_free(forge_optimizer *opt);

/* Counts the next update and writes its learning rate and bias corrections to device memory (a copy, no wait);
 * call it before the step's device work, outside a recorded graph. */
forge_status forge_optimizer_begin_step(forge_optimizer *opt, float lr);
/* The squared global norm of the gradients into the device scalar (one launch). */
forge_status forge_optimizer_grad_norm(forge_optimizer *opt);
/* Reads the norm computed by forge_optimizer_grad_norm (synchronises). */
forge_status forge_optimizer_read_grad_norm(forge_optimizer *opt, float *norm);
/* The AdamW update of every parameter (one launch) with the scalars of forge_optimizer_begin_step, after
 * forge_optimizer_grad_norm; a non-finite norm leaves the parameters and moments untouched. */
forge_status forge_optimizer_update(forge_optimizer *opt);

/* Host copies of the moments, for checkpoints. */
forge_status forge_optimizer_get_state(const forge_optimizer *opt, float *m_host, float *v_host);
/* One moment's host copy: which 0 = m, 1 = v. */
forge_status forge_optimizer_get_moment(const forge_optimizer *opt, int which, float *host);
forge_status forge_optimizer_set_state(forge_optimizer *opt, const float *m_host, const float *v_host);

#endif
