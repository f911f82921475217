/* buckets.c: the gradient buckets of a data-parallel step and the tape hook that launches them (buckets.h). */
#include "buckets.h"

#include <stdint.h>
#include <stdlib.h>

struct forge_buckets {
    forge_optimizer *opt;
    size_t n;          /* elements of the gradient block */
    size_t size;       /* elements per bucket */
    int count;
    size_t *final_at;  /* per bucket: the entry after whose replay it is final (SIZE_MAX: no entry touches it) */
    int *order;        /* the buckets in launch order: final_at descending, then index descending */
    int next;          /* order[next] is the next bucket to launch */
};

size_t forge_buckets_elements(size_t bucket_bytes) {
    size_t e = bucket_bytes / sizeof(float) / 256 * 256;
    return e < 256 ? 256 : e;
}

forge_status forge_buckets_create(forge_buckets **out, forge_optimizer *opt, size_t bucket_bytes) {
    *out = NULL;
    if (bucket_bytes == 0)
        return forge_error(FORGE_ERR_ARG, "buckets: a bucket of 0 bytes: expected > 0 (0 means no buckets: the "
                                          "step reduces the whole block after the backward)");
    forge_buckets *b = calloc(1, sizeof *b);
    if (!b) return forge_error(FORGE_ERR_OOM, "buckets: out of host memory");
    b->opt = opt;
    b->n = opt->model->n_elements;
    b->size = forge_buckets_elements(bucket_bytes);
    size_t count = (b->n + b->size - 1) / b->size;
    if (count == 0) count = 1;
    if (count > (size_t)1 << 30) {
        const size_t size = b->size;
        free(b);
        return forge_error(FORGE_ERR_ARG, "buckets: %zu buckets of %zu elements: expected < 2^30 (a larger size)",
                           count, size);
    }
    b->count = (int)count;
    b->final_at = malloc(count * sizeof *b->final_at);
    b->order = malloc(count * sizeof *b->order);
    if (!b->final_at || !b->order) {
        forge_buckets_free(b);
        return forge_error(FORGE_ERR_OOM, "buckets: out of host memory for %zu buckets", count);
    }
    for (int k = 0; k < b->count; k++) b->order[k] = b->count - 1 - k, b->final_at[k] = SIZE_MAX;
    b->next = b->count; /* nothing to launch before a plan */
    *out = b;
    return FORGE_OK;
}

void forge_buckets_free(forge_buckets *b) {
    if (!b) return;
    free(b->final_at);
    free(b->order);
    free(b);
}

int forge_buckets_count(const forge_buckets *b) { return b ? b->count : 0; }
size_t forge_buckets_size(const forge_buckets *b) { return b ? b->size : 0; }

int forge_buckets_launched(const forge_buckets *b) { return b->next < b->count ? b->next : b->count; }
int forge_buckets_launch_order(const forge_buckets *b, int j) { return b->order[j]; }

/* A tensor whose gradient lies in the model's gradient block (a parameter): the block's elements it covers. */
static int param_range(const forge_buckets *b, const forge_tensor *t, size_t *lo, size_t *hi) {
    if (!t || !t->grad || !t->grad->data) return 0;
    const float *g = t->grad->data, *base = b->opt->model->grad_data;
    if (g < base || g >= base + b->n) return 0;
    *lo = (size_t)(g - base);
    *hi = *lo + t->grad->numel;
    if (*hi > b->n) *hi = b->n;
    return *hi > *lo;
}

static void mark(forge_buckets *b, const forge_tensor *t, size_t entry) {
    size_t lo, hi;
    if (!param_range(b, t, &lo, &hi)) return;
    for (size_t k = lo / b->size; k <= (hi - 1) / b->size; k++)
        if (b->final_at[k] == SIZE_MAX || entry < b->final_at[k]) b->final_at[k] = entry;
}

typedef struct {
    size_t final_at;
    int k;
} launch_key;

/* Launch order: the later the finalising entry, the earlier the launch (SIZE_MAX, untouched, first); ties by
 * descending index (the block's end, the last layers, first). */
static int by_launch(const void *pa, const void *pb) {
    const launch_key *a = pa, *c = pb;
    if (a->final_at != c->final_at) return a->final_at > c->final_at ? -1 : 1;
    return a->k > c->k ? -1 : a->k < c->k;
}

forge_status forge_buckets_plan(forge_buckets *b, const forge_tape *tape) {
    for (int k = 0; k < b->count; k++) b->final_at[k] = SIZE_MAX;
    const size_t entries = forge_tape_size(tape);
    for (size_t i = 0; i < entries; i++) {
        const forge_tape_entry *e = forge_tape_entry_at(tape, i);
        for (int k = 0; k < FORGE_TAPE_MAX_INPUTS; k++) mark(b, e->in[k], i);
        for (int k = 0; k < FORGE_TAPE_MAX_SAVED; k++) mark(b, e->saved[k], i);
    }
    launch_key *keys = malloc((size_t)b->count * sizeof *keys);
    if (!keys) return forge_error(FORGE_ERR_OOM, "buckets: out of host memory ordering %d buckets", b->count);
    for (int k = 0; k < b->count; k++) keys[k] = (launch_key){b->final_at[k], k};
    qsort(keys, (size_t)b->count, sizeof *keys, by_launch);
    for (int k = 0; k < b->count; k++) b->order[k] = keys[k].k;
    free(keys);
    b->next = 0;
    return FORGE_OK;
}

static forge_status launch(forge_buckets *b, int k) {
    const size_t b0 = (size_t)k * b->size, b1 = b0 + b->size < b->n ? b0 + b->size : b->n;
    return forge_optimizer_reduce_bucket(b->opt, b0, b1);
}

forge_status forge_buckets_hook(void *ctx, const forge_tape *tape, size_t i) {
    (void)tape;
    forge_buckets *b = ctx;
    /* final_at >= i: the entry that finalises it has been replayed (SIZE_MAX: no entry ever touches it) */
    while (b->next < b->count && b->final_at[b->order[b->next]] >= i) FORGE_TRY(launch(b, b->order[b->next++]));
    return FORGE_OK;
}

forge_status forge_buckets_finish(forge_buckets *b) {
    while (b->next < b->count) FORGE_TRY(launch(b, b->order[b->next++]));
    return forge_optimizer_reduce_join(b->opt);
}
