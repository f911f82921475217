/* step.c: one training step on the device (step.h). */
#include "step.h"

#include "buckets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct forge_step {
    forge_model *model;
    forge_tape *tape;
    forge_optimizer *opt;
    forge_pool *pool;
    forge_step_options o;
    forge_tensor *ids, *targets; /* (accum * B, T) i32 on the device */
    forge_tensor views[2];       /* the current micro-batch's (B, T) views of ids and targets */
    float *loss_sum;             /* device scalar: the step's summed loss */
    float *eval_sum;             /* device scalar: one evaluated micro-batch's */
    size_t sum_bytes, eval_bytes;
    forge_buckets *buckets;      /* data parallel with bucket_bytes: the last backward's gradient buckets */
    forge_graph *graph;
    int steps;                   /* launched so far */
    int record_next;             /* the next launch records */
    char mode[320];
    int mode_changed;
};

static void set_mode(forge_step *st, const char *mode) {
    if (strcmp(st->mode, mode) == 0) return;
    snprintf(st->mode, sizeof st->mode, "%s", mode);
    st->mode_changed = 1;
}

forge_status forge_step_create(forge_step **out, forge_model *model, forge_tape *tape, forge_optimizer *opt,
                               const forge_step_options *o) {
    *out = NULL;
    if (o->B < 1 || o->T < 1 || o->accum < 1)
        return forge_error(FORGE_ERR_ARG, "step: batch %d x %d with %d micro-batches, expected >= 1 each", o->B, o->T,
                           o->accum);
    forge_step *st = calloc(1, sizeof *st);
    if (!st) return forge_error(FORGE_ERR_OOM, "step: out of host memory");
    st->model = model;
    st->tape = tape;
    st->opt = opt;
    st->pool = model->pool;
    st->o = *o;
    int64_t shape[2] = {(int64_t)o->accum * o->B, o->T};
    forge_status s = forge_pool_tensor(st->pool, &st->ids, FORGE_I32, 2, shape, 1);
    if (s == FORGE_OK) s = forge_pool_tensor(st->pool, &st->targets, FORGE_I32, 2, shape, 1);
    if (s == FORGE_OK) s = forge_pool_block(st->pool, (void **)&st->loss_sum, sizeof(float), &st->sum_bytes);
    if (s == FORGE_OK) s = forge_pool_block(st->pool, (void **)&st->eval_sum, sizeof(float), &st->eval_bytes);
    if (s == FORGE_OK && forge_comm_active(o->comm) && o->bucket_bytes > 0)
        s = forge_buckets_create(&st->buckets, opt, o->bucket_bytes);
    if (s != FORGE_OK) {
        forge_step_free(st);
        return s;
    }
    /* the collectives wait on the host (under the watchdog), which a recording cannot hold */
    if (forge_comm_active(o->comm)) st->o.use_graph = 0;
    set_mode(st, st->o.use_graph && forge_graph_supported(st->pool) ? "graph" : "eager");
    st->mode_changed = 0;
    *out = st;
    return FORGE_OK;
}

void forge_step_free(forge_step *st) {
    if (!st) return;
    forge_graph_free(st->graph);
    forge_buckets_free(st->buckets);
    if (st->ids) forge_pool_release(st->pool, st->ids);
    if (st->targets) forge_pool_release(st->pool, st->targets);
    if (st->loss_sum) forge_pool_block_release(st->pool, st->loss_sum, st->sum_bytes);
    if (st->eval_sum) forge_pool_block_release(st->pool, st->eval_sum, st->eval_bytes);
    free(st);
}

/* Micro-batch m of a (accum * B, T) tensor, as a (B, T) tensor sharing its memory. */
static forge_tensor *micro_view(forge_step *st, int which, int m) {
    const forge_tensor *all = which ? st->targets : st->ids;
    forge_tensor *v = &st->views[which];
    const size_t n = (size_t)st->o.B * st->o.T;
    *v = *all;
    v->shape[0] = st->o.B;
    v->numel = n;
    v->data = (int32_t *)all->data + (size_t)m * n;
    v->next_live = NULL;
    v->block_bytes = 0;
    return v;
}

/* Everything the step does on the device, issued in order without waiting: what a recording captures. */
static forge_status device_step(forge_step *st) {
    forge_backend *be = st->model->be;
    const size_t n = (size_t)st->o.B * st->o.T;
    FORGE_TRY(be->memset_zero(be, st->loss_sum, sizeof(float)));
    FORGE_TRY(forge_model_zero_grad(st->model));
    for (int m = 0; m < st->o.accum; m++) {
        forge_tensor *losses;
        forge_status s = forge_model_forward(st->model, st->tape, micro_view(st, 0, m), micro_view(st, 1, m),
                                             st->o.grad_scale, &losses);
        /* data parallel with buckets: the last backward launches each bucket's reduction once its gradients are
         * final (buckets.h), so the reduction overlaps the rest of the backward where the communicator can */
        if (s == FORGE_OK && st->buckets && m == st->o.accum - 1) {
            s = forge_buckets_plan(st->buckets, st->tape);
            if (s == FORGE_OK) s = forge_tape_backward_hooked(st->tape, forge_buckets_hook, st->buckets);
        } else if (s == FORGE_OK) {
            s = forge_tape_backward(st->tape);
        }
        if (s == FORGE_OK) s = be->sum_accumulate(be, st->loss_sum, forge_f32(losses), n);
        forge_tape_reset(st->tape);
        FORGE_TRY(s);
    }
    /* data parallel: every rank's gradients and loss summed (the step's global batch is every rank's micro-batches):
     * the buckets' last launches and their join, or the whole block at once */
    if (st->buckets) FORGE_TRY(forge_buckets_finish(st->buckets));
    else FORGE_TRY(forge_optimizer_reduce_grads(st->opt));
    FORGE_TRY(forge_comm_all_reduce_sum(st->o.comm, be, st->loss_sum, 1));
    FORGE_TRY(forge_optimizer_grad_norm(st->opt));
    return forge_optimizer_update(st->opt);
}

/* Records the step and replays it; a failed recording leaves the run eager (the note says why) and runs it. */
static forge_status record_and_replay(forge_step *st) {
    forge_status s = forge_graph_record_begin(st->pool);
    if (s == FORGE_OK) {
        forge_status ds = device_step(st);
        forge_status es = forge_graph_record_end(st->pool, &st->graph);
        s = ds != FORGE_OK ? ds : es;
        if (ds != FORGE_OK && es == FORGE_OK) { /* the step itself failed: not a recording problem */
            forge_graph_free(st->graph);
            st->graph = NULL;
            return ds;
        }
    }
    if (s != FORGE_OK) {
        char note[300];
        snprintf(note, sizeof note, "eager (the step could not be recorded as a graph: %s)", forge_error_message());
        forge_error_clear();
        set_mode(st, note);
        st->o.use_graph = 0;
        return device_step(st);
    }
    return forge_graph_replay(st->graph);
}

static forge_status launch(forge_step *st, const int32_t *ids, const int32_t *targets, float lr, int may_replay) {
    forge_backend *be = st->model->be;
    const size_t bytes = (size_t)st->o.accum * st->o.B * st->o.T * sizeof(int32_t);
    FORGE_TRY(be->copy_to_device(be, st->ids->data, ids, bytes));
    FORGE_TRY(be->copy_to_device(be, st->targets->data, targets, bytes));
    FORGE_TRY(forge_optimizer_begin_step(st->opt, lr));
    const int graphs = may_replay && st->o.use_graph && forge_graph_supported(st->pool);
    st->steps++;
    if (!graphs || st->steps == 1) return device_step(st); /* the first step warms what the recording reuses */
    if (!st->graph || st->record_next) {
        st->record_next = 0;
        forge_graph_free(st->graph);
        st->graph = NULL;
        return record_and_replay(st);
    }
    forge_status s = forge_graph_replay(st->graph);
    if (s == FORGE_ERR_STALE) { /* memory it used changed hands: this step op by op, the next one recorded */
        forge_error_clear();
        forge_graph_free(st->graph);
        st->graph = NULL;
        st->record_next = 1;
        return device_step(st);
    }
    return s;
}

forge_status forge_step_launch(forge_step *st, const int32_t *ids, const int32_t *targets, float lr) {
    return launch(st, ids, targets, lr, 1);
}

forge_status forge_step_launch_eager(forge_step *st, const int32_t *ids, const int32_t *targets, float lr) {
    return launch(st, ids, targets, lr, 0);
}

forge_status forge_step_finish(forge_step *st, float *loss, float *norm) {
    forge_backend *be = st->model->be;
    float sum;
    FORGE_TRY(be->copy_to_host(be, &sum, st->loss_sum, sizeof sum)); /* waits for the step */
    FORGE_TRY(be->poll_errors(be)); /* a token id outside the table, found on the device */
    FORGE_TRY(forge_optimizer_read_grad_norm(st->opt, norm));
    *loss = sum / (float)((double)st->o.accum * forge_comm_size(st->o.comm) * st->o.B * st->o.T);
    return FORGE_OK;
}

forge_status forge_step_eval(forge_step *st, const int32_t *ids, const int32_t *targets, double *loss_sum) {
    forge_backend *be = st->model->be;
    const size_t n = (size_t)st->o.B * st->o.T;
    FORGE_TRY(be->copy_to_device(be, st->ids->data, ids, n * sizeof(int32_t)));
    FORGE_TRY(be->copy_to_device(be, st->targets->data, targets, n * sizeof(int32_t)));
    FORGE_TRY(be->memset_zero(be, st->eval_sum, sizeof(float)));
    const int was = forge_tape_recording(st->tape);
    forge_tape_set_recording(st->tape, 0);
    forge_tensor *losses;
    forge_status s = forge_model_forward(st->model, st->tape, micro_view(st, 0, 0), micro_view(st, 1, 0), 0.0f, &losses);
    if (s == FORGE_OK) s = be->sum_accumulate(be, st->eval_sum, forge_f32(losses), n);
    forge_tape_reset(st->tape);
    forge_tape_set_recording(st->tape, was);
    FORGE_TRY(s);
    float sum;
    FORGE_TRY(be->copy_to_host(be, &sum, st->eval_sum, sizeof sum));
    FORGE_TRY(be->poll_errors(be));
    *loss_sum = sum;
    return FORGE_OK;
}

int forge_step_buckets(const forge_step *st, size_t *bucket_elements) {
    if (bucket_elements) *bucket_elements = forge_buckets_size(st->buckets);
    return forge_buckets_count(st->buckets);
}

const char *forge_step_mode(forge_step *st, int *changed) {
    if (changed) *changed = st->mode_changed;
    st->mode_changed = 0;
    return st->mode;
}
