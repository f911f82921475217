/*
 * pool.c: caching allocator. Blocks are rounded up to a size class and kept on
 * one free list; a request takes the smallest cached block of its class. The
 * list is short (a model has a few dozen distinct activation sizes), so a
 * linear best-fit scan is cheaper than anything cleverer.
 */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    void *ptr;
    size_t bytes;
} pool_block;

struct forge_pool {
    forge_backend *be;
    pool_block *free_blocks;
    size_t n_free, cap_free;
    forge_tensor *live; /* singly linked through next_live */
    forge_pool_stats stats;
    /* Graph pinning (pool.h): the blocks handed out while recording, then the pinned ones among them. */
    int recording;
    void **noted;
    size_t n_noted, cap_noted;
    int recording_failed; /* out of host memory for the notes: nothing is pinned */
    size_t pinned_out;    /* pinned blocks handed out now */
    int pinned_lost;      /* a pinned block went back to the backend */
};

static void pool_note(forge_pool *pool, void *ptr) {
    for (size_t i = 0; i < pool->n_noted; i++)
        if (pool->noted[i] == ptr) return;
    if (pool->n_noted == pool->cap_noted) {
        size_t cap = pool->cap_noted ? 2 * pool->cap_noted : 256;
        void **nn = realloc(pool->noted, cap * sizeof *nn);
        if (!nn) {
            pool->recording_failed = 1;
            return;
        }
        pool->noted = nn;
        pool->cap_noted = cap;
    }
    pool->noted[pool->n_noted++] = ptr;
}

static int pool_is_free(const forge_pool *pool, const void *ptr) {
    for (size_t i = 0; i < pool->n_free; i++)
        if (pool->free_blocks[i].ptr == ptr) return 1;
    return 0;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

/* The pinned blocks are sorted (record_end): a lookup per allocation and release is a binary search. */
static int pool_is_pinned(const forge_pool *pool, void *ptr) {
    if (pool->recording || pool->n_noted == 0) return 0;
    return bsearch(&ptr, pool->noted, pool->n_noted, sizeof *pool->noted, cmp_ptr) != NULL;
}

void forge_pool_record_begin(forge_pool *pool) {
    pool->n_noted = 0;
    pool->recording_failed = 0;
    pool->recording = 1;
}

forge_status forge_pool_record_end(forge_pool *pool) {
    pool->recording = 0;
    if (pool->recording_failed) {
        pool->n_noted = 0;
        return forge_error(FORGE_ERR_OOM, "pool: out of host memory noting the blocks of a recorded graph");
    }
    /* Blocks still handed out belong to their holders (tensors made during the recording that outlive it);
     * the free ones are the graph's scratch: pinned. */
    size_t k = 0;
    for (size_t i = 0; i < pool->n_noted; i++)
        if (pool_is_free(pool, pool->noted[i])) pool->noted[k++] = pool->noted[i];
    pool->n_noted = k;
    qsort(pool->noted, k, sizeof *pool->noted, cmp_ptr);
    pool->pinned_out = 0;
    pool->pinned_lost = 0;
    return FORGE_OK;
}

int forge_pool_pinned_free(const forge_pool *pool) { return pool->pinned_out == 0 && !pool->pinned_lost; }

void forge_pool_unpin(forge_pool *pool) {
    pool->recording = 0;
    pool->n_noted = 0;
    pool->pinned_out = 0;
    pool->pinned_lost = 0;
}

/* Size classes: 512-byte granules below 1 MiB, 1 MiB granules above, so
 * slightly different shapes still share blocks without wasting much. */
static size_t pool_round(size_t bytes) {
    if (bytes == 0) bytes = 1;
    size_t g = bytes < ((size_t)1 << 20) ? 512 : ((size_t)1 << 20);
    return (bytes + g - 1) / g * g;
}

forge_status forge_pool_create(forge_pool **out, forge_backend *be) {
    forge_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return forge_error(FORGE_ERR_OOM, "pool: out of host memory");
    pool->be = be;
    *out = pool;
    return FORGE_OK;
}

forge_backend *forge_pool_backend(const forge_pool *pool) { return pool->be; }

forge_status forge_pool_block(forge_pool *pool, void **out, size_t bytes, size_t *block_bytes) {
    size_t want = pool_round(bytes);
    size_t best = (size_t)-1;
    for (size_t i = 0; i < pool->n_free; i++) {
        size_t b = pool->free_blocks[i].bytes;
        /* Accept at most 2x the request so a small tensor cannot pin a huge block. */
        if (b >= want && b <= 2 * want && (best == (size_t)-1 || b < pool->free_blocks[best].bytes))
            best = i;
    }
    size_t got;
    if (best != (size_t)-1) {
        *out = pool->free_blocks[best].ptr;
        got = pool->free_blocks[best].bytes;
        pool->free_blocks[best] = pool->free_blocks[--pool->n_free];
        pool->stats.cache_hits++;
    } else {
        forge_status s = pool->be->mem_alloc(pool->be, out, want);
        if (s != FORGE_OK && pool->n_free > 0) {
            /* Out of memory with blocks cached: give them back and retry once. */
            forge_pool_trim(pool);
            s = pool->be->mem_alloc(pool->be, out, want);
        }
        if (s != FORGE_OK)
            return forge_error_context(s, "pool: allocating %zu bytes (%.1f MiB in use, peak %.1f MiB): ",
                                       want, pool->stats.bytes_in_use / 1048576.0,
                                       pool->stats.peak_in_use / 1048576.0);
        got = want;
        pool->stats.bytes_reserved += got;
        pool->stats.backend_allocs++;
        if (pool->stats.bytes_reserved > pool->stats.peak_reserved)
            pool->stats.peak_reserved = pool->stats.bytes_reserved;
    }
    if (pool->recording) pool_note(pool, *out);
    else if (pool_is_pinned(pool, *out)) pool->pinned_out++;
    pool->stats.bytes_in_use += got;
    if (pool->stats.bytes_in_use > pool->stats.peak_in_use)
        pool->stats.peak_in_use = pool->stats.bytes_in_use;
    *block_bytes = got;
    return FORGE_OK;
}

static void pool_give_back(forge_pool *pool, void *ptr, size_t block_bytes) {
    if (!ptr) return;
    if (pool_is_pinned(pool, ptr)) pool->pinned_out--;
    if (pool->n_free == pool->cap_free) {
        size_t cap = pool->cap_free ? 2 * pool->cap_free : 64;
        pool_block *nb = realloc(pool->free_blocks, cap * sizeof *nb);
        if (!nb) { /* cannot cache it: return it to the backend instead */
            if (pool_is_pinned(pool, ptr)) pool->pinned_lost = 1;
            pool->be->mem_free(pool->be, ptr);
            pool->stats.bytes_reserved -= block_bytes;
            pool->stats.bytes_in_use -= block_bytes;
            return;
        }
        pool->free_blocks = nb;
        pool->cap_free = cap;
    }
    pool->free_blocks[pool->n_free].ptr = ptr;
    pool->free_blocks[pool->n_free].bytes = block_bytes;
    pool->n_free++;
    pool->stats.bytes_in_use -= block_bytes;
}

void forge_pool_block_release(forge_pool *pool, void *ptr, size_t block_bytes) {
    pool_give_back(pool, ptr, block_bytes);
}

forge_status forge_pool_tensor(forge_pool *pool, forge_tensor **out, forge_dtype dtype, int ndim,
                               const int64_t *shape, int persistent) {
    if (ndim < 1 || ndim > FORGE_MAX_DIMS)
        return forge_error(FORGE_ERR_ARG, "tensor: ndim %d, expected 1..%d", ndim, FORGE_MAX_DIMS);
    forge_tensor *t = calloc(1, sizeof *t);
    if (!t) return forge_error(FORGE_ERR_OOM, "tensor: out of host memory");
    t->dtype = dtype;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0) {
            free(t);
            return forge_error(FORGE_ERR_ARG, "tensor: dimension %d is %lld, expected > 0", i,
                               (long long)shape[i]);
        }
        t->shape[i] = shape[i];
        t->numel *= (size_t)shape[i];
    }
    t->persistent = persistent;
    forge_status s = forge_pool_block(pool, &t->data, forge_tensor_bytes(t), &t->block_bytes);
    if (s != FORGE_OK) {
        free(t);
        return s;
    }
    t->next_live = pool->live;
    pool->live = t;
    *out = t;
    return FORGE_OK;
}

forge_status forge_pool_tensor_zeros(forge_pool *pool, forge_tensor **out, forge_dtype dtype,
                                     int ndim, const int64_t *shape, int persistent) {
    FORGE_TRY(forge_pool_tensor(pool, out, dtype, ndim, shape, persistent));
    return pool->be->memset_zero(pool->be, (*out)->data, forge_tensor_bytes(*out));
}

static void pool_unlink(forge_pool *pool, forge_tensor *t) {
    for (forge_tensor **p = &pool->live; *p; p = &(*p)->next_live) {
        if (*p == t) {
            *p = t->next_live;
            return;
        }
    }
}

static void pool_free_tensor(forge_pool *pool, forge_tensor *t) {
    pool_give_back(pool, t->data, t->block_bytes);
    free(t);
}

void forge_pool_release(forge_pool *pool, forge_tensor *t) {
    if (!t) return;
    if (t->grad && t->grad != t && !t->grad_borrowed) {
        pool_unlink(pool, t->grad);
        pool_free_tensor(pool, t->grad);
    }
    pool_unlink(pool, t);
    pool_free_tensor(pool, t);
}

void forge_pool_release_grad(forge_pool *pool, forge_tensor *t) {
    if (!t || !t->grad || t->grad == t || t->grad->persistent) return;
    if (t->grad_borrowed) { /* its owner's: only the reference goes */
        t->grad = NULL;
        t->grad_borrowed = 0;
        return;
    }
    pool_unlink(pool, t->grad);
    pool_free_tensor(pool, t->grad);
    t->grad = NULL;
}

void forge_pool_release_transient(forge_pool *pool) {
    /* First drop references from persistent tensors to transient grads, then free. */
    for (forge_tensor *t = pool->live; t; t = t->next_live)
        if (t->persistent && t->grad && t->grad != t && !t->grad->persistent) t->grad = NULL;
    forge_tensor **p = &pool->live;
    while (*p) {
        forge_tensor *t = *p;
        if (!t->persistent) {
            *p = t->next_live;
            pool_free_tensor(pool, t);
        } else {
            p = &t->next_live;
        }
    }
}

void forge_pool_trim(forge_pool *pool) {
    size_t kept = 0;
    for (size_t i = 0; i < pool->n_free; i++) {
        if (pool_is_pinned(pool, pool->free_blocks[i].ptr)) { /* a recorded graph's scratch stays allocated */
            pool->free_blocks[kept++] = pool->free_blocks[i];
            continue;
        }
        pool->be->mem_free(pool->be, pool->free_blocks[i].ptr);
        pool->stats.bytes_reserved -= pool->free_blocks[i].bytes;
    }
    pool->n_free = kept;
}

void forge_pool_destroy(forge_pool *pool) {
    if (!pool) return;
    while (pool->live) {
        forge_tensor *t = pool->live;
        pool->live = t->next_live;
        pool_free_tensor(pool, t);
    }
    forge_pool_unpin(pool);
    forge_pool_trim(pool);
    free(pool->free_blocks);
    free(pool->noted);
    free(pool);
}

forge_pool_stats forge_pool_get_stats(const forge_pool *pool) { return pool->stats; }

void forge_pool_reset_peak(forge_pool *pool) {
    pool->stats.peak_in_use = pool->stats.bytes_in_use;
    pool->stats.peak_reserved = pool->stats.bytes_reserved;
}
