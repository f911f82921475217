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
#include "../runtime/comm.h"

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
    /* Data parallel (docs/distributed.md): the ranks' communicator (NULL: one rank). With zero1 this rank owns
     * elements [lo, hi) of the flat blocks (forge_comm_range): m and v hold only that range, the spans are cut
     * to it and counted from lo, and the gradients are reduce-scattered instead of all-reduced. */
    forge_comm *comm;
    int zero1;
    size_t lo, hi;
    float *gathered_m, *gathered_v; /* host, rank 0, between forge_optimizer_gather and _release_gathered */
} forge_optimizer;

/* Elements per span of the multi-tensor AdamW: one GPU block each, so the blocks are balanced while a span stays
 * long enough to stream (16 passes of a block's 1024 elements). 65536 left gpt-25m's 34M parameters ~540 blocks,
 * about 4 of them an SM with some SMs a block behind (300 us, 3.4 TB/s, where gpt2-124m's ~1900 streamed at 3.9);
 * spans change no bits (each element's update is its own). */
#define FORGE_ADAMW_SPAN 16384

forge_status forge_optimizer_create(forge_optimizer **out, forge_model *model, forge_adamw_config cfg);
/* The same for one rank of a data-parallel run over comm (NULL or one rank: as forge_optimizer_create), with the
 * optimizer state sharded over the ranks when zero1 is set (ZeRO stage 1). */
forge_status forge_optimizer_create_dist(forge_optimizer **out, forge_model *model, forge_adamw_config cfg,
                                         forge_comm *comm, int zero1);
void forge_optimizer_free(forge_optimizer *opt);

/* Counts the next update and writes its learning rate and bias corrections to device memory (a copy, no wait);
 * call it before the step's device work, outside a recorded graph. */
forge_status forge_optimizer_begin_step(forge_optimizer *opt, float lr);
/* Sums the ranks' gradients after the backward: all-reduced into every rank's block, or with zero1
 * reduce-scattered (each rank's range summed into its own block). Nothing with one rank. */
forge_status forge_optimizer_reduce_grads(forge_optimizer *opt);
/* One bucket of the gradient block, elements [b0, b1), summed over the ranks like forge_optimizer_reduce_grads
 * sums the whole block (all-reduced, or with zero1 each rank's range of the block reduced to it): the buckets of a
 * step's last backward (train/buckets.h), each launched once its gradients are final. On MPI each element gets the
 * bits the whole-block reduction gives it; on NCCL the pieces run on the side stream (runtime/comm.h). Nothing
 * with one rank. */
forge_status forge_optimizer_reduce_bucket(forge_optimizer *opt, size_t b0, size_t b1);
/* After the last bucket: the norm and the update see every bucket's sums. */
forge_status forge_optimizer_reduce_join(forge_optimizer *opt);
/* The squared global norm of the gradients into the device scalar (one launch; with zero1 each rank's range,
 * then the partial sums all-reduced in rank order). */
forge_status forge_optimizer_grad_norm(forge_optimizer *opt);
/* Reads the norm computed by forge_optimizer_grad_norm (synchronises). */
forge_status forge_optimizer_read_grad_norm(forge_optimizer *opt, float *norm);
/* The AdamW update of every parameter (one launch) with the scalars of forge_optimizer_begin_step, after
 * forge_optimizer_grad_norm; a non-finite norm leaves the parameters and moments untouched. */
forge_status forge_optimizer_update(forge_optimizer *opt);

/* zero1: collects every rank's range of m and v into host copies on rank 0, which forge_optimizer_get_state and
 * _get_moment then read (a collective: every rank calls it; nothing without zero1). */
forge_status forge_optimizer_gather(forge_optimizer *opt);
void forge_optimizer_release_gathered(forge_optimizer *opt);

/* Host copies of the moments (all n_elements), for checkpoints; set_state takes all n_elements and keeps this
 * rank's range with zero1. */
forge_status forge_optimizer_get_state(const forge_optimizer *opt, float *m_host, float *v_host);
/* One moment's host copy: which 0 = m, 1 = v. */
forge_status forge_optimizer_get_moment(const forge_optimizer *opt, int which, float *host);
forge_status forge_optimizer_set_state(forge_optimizer *opt, const float *m_host, const float *v_host);

#endif
