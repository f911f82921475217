/*
 * pool.h: the pooled (caching) allocator.
 *
 * Device allocations (cudaMalloc, and to a lesser degree malloc) are slow and
 * may synchronise the device, so forge allocates each size once and keeps
 * released blocks on a free list for the next request of that size. A training
 * step allocates the same activations every micro-batch, so after the first
 * micro-batch every request is served from the cache: memory is recycled every
 * micro-batch and peak memory does not grow with the accumulation factor.
 *
 * The pool never talks to the device except through the backend's mem_alloc
 * and mem_free, and never synchronises with the host.
 */
#ifndef FORGE_POOL_H
#define FORGE_POOL_H

#include "../backend/backend.h"
#include "../base/status.h"
#include "../base/tensor.h"

typedef struct forge_pool forge_pool;

typedef struct {
    size_t bytes_in_use;    /* handed out now */
    size_t bytes_reserved;  /* in use + cached */
    size_t peak_in_use;
    size_t peak_reserved;
    size_t backend_allocs;  /* calls to mem_alloc: stops growing once warm */
    size_t cache_hits;
} forge_pool_stats;

forge_status forge_pool_create(forge_pool **out, forge_backend *be);
void forge_pool_destroy(forge_pool *pool);

/* A new tensor with uninitialised data. persistent = 1 for parameters, which
 * forge_pool_release_transient leaves alone. */
forge_status forge_pool_tensor(forge_pool *pool, forge_tensor **out, forge_dtype dtype, int ndim,
                               const int64_t *shape, int persistent);
/* Same, with data zeroed on the device. */
forge_status forge_pool_tensor_zeros(forge_pool *pool, forge_tensor **out, forge_dtype dtype,
                                     int ndim, const int64_t *shape, int persistent);

/* Returns a tensor (and its grad, unless the grad aliases it or is borrowed, tensor.h) to the pool. */
void forge_pool_release(forge_pool *pool, forge_tensor *t);
/* Returns t's gradient (a transient tensor other than t itself) to the pool and clears t->grad; a borrowed one
 * (tensor.h: its owner still holds it) is only dropped from t. */
void forge_pool_release_grad(forge_pool *pool, forge_tensor *t);
/* Releases every live non-persistent tensor: called by the tape every micro-batch. */
void forge_pool_release_transient(forge_pool *pool);
/* Returns cached blocks to the backend. */
void forge_pool_trim(forge_pool *pool);

/* Raw workspace blocks (not tensors), for scratch a kernel needs. The block
 * may be larger than asked; *block_bytes is what must be passed back. */
forge_status forge_pool_block(forge_pool *pool, void **out, size_t bytes, size_t *block_bytes);
void forge_pool_block_release(forge_pool *pool, void *ptr, size_t block_bytes);

/* Pinning for a recorded graph (runtime/graph.c), whose ops keep the raw pointers they were recorded with:
 * between record_begin and record_end every block handed out is noted; at record_end the noted blocks that are
 * free again (the step's activations and scratch) are pinned. A pinned block may still be handed out between
 * replays (evaluation reuses it), but forge_pool_trim keeps it allocated, and forge_pool_pinned_free says whether
 * every pinned block is free, which a replay needs. unpin drops the pins. One recording per pool at a time. */
void forge_pool_record_begin(forge_pool *pool);
forge_status forge_pool_record_end(forge_pool *pool);
int forge_pool_pinned_free(const forge_pool *pool);
void forge_pool_unpin(forge_pool *pool);

forge_pool_stats forge_pool_get_stats(const forge_pool *pool);
void forge_pool_reset_peak(forge_pool *pool);
forge_backend *forge_pool_backend(const forge_pool *pool);

#endif
