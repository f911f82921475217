/*
 * cpu_backend.c: builds the CPU forge_backend table (called by
 * forge_backend_create, backend.c); every op of op_list.h is bound.
 *
 * "Device memory" on the CPU is ordinary host memory, 64-byte aligned so that
 * vector loads in the kernels never split a cache line at a row start; the
 * copy entries are memcpy and synchronize has nothing to wait for.
 *
 * The decision a reader would get wrong: cpu_reference is not a debug flag
 * but the oracle. It pins every op to one thread and matmul to its plain
 * triple loop, and the tests and the GPU parity checks compare against a
 * backend created that way. Every entry of the table is filled: a NULL here
 * would mean "unsupported" (backend.h), which the reference must never be.
 */
#include <stdlib.h>
#include <string.h>

#include "../devices.h"
#include "cpu_ops.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static forge_status cpu_mem_alloc(forge_backend *be, void **ptr, size_t bytes) {
    (void)be;
    /* aligned_alloc wants a multiple of the alignment; 0 bytes still gets a
     * unique pointer so callers can free it uniformly */
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    if (rounded < bytes) return forge_error(FORGE_ERR_OOM, "cpu mem_alloc: %zu bytes overflows", bytes);
    *ptr = aligned_alloc(64, rounded);
    if (!*ptr)
        return forge_error(FORGE_ERR_OOM, "cpu mem_alloc: could not allocate %zu bytes of host memory",
                           bytes);
    return FORGE_OK;
}

static void cpu_mem_free(forge_backend *be, void *ptr) {
    (void)be;
    free(ptr);
}

static forge_status cpu_copy(forge_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, src, bytes);
    return FORGE_OK;
}

static forge_status cpu_memset_zero(forge_backend *be, void *dst, size_t bytes) {
    (void)be;
    if (bytes) memset(dst, 0, bytes);
    return FORGE_OK;
}

static forge_status cpu_synchronize(forge_backend *be) {
    (void)be; /* every CPU op has finished when it returns */
    return FORGE_OK;
}

static forge_status cpu_side_noop(forge_backend *be) {
    (void)be; /* one stream: work issued after an op already runs after it */
    return FORGE_OK;
}

static forge_status cpu_poll_errors(forge_backend *be) {
    (void)be; /* every CPU op reports a bad input when it runs */
    return FORGE_OK;
}

static void cpu_destroy(forge_backend *be) {
    if (!be) return;
    cpu_ctx *ctx = (cpu_ctx *)be->ctx;
    if (ctx) free(ctx->pack);
    free(ctx);
    free(be);
}

forge_status forge_cpu_backend_create(forge_backend **out, const forge_runtime_options *options) {
    if (!out || !options) return forge_error(FORGE_ERR_ARG, "forge_cpu_backend_create: out or options is NULL");
    *out = NULL;
    int threads = options->threads, reference = options->cpu_reference != 0;
    if (threads <= 0) {
#ifdef _OPENMP
        threads = omp_get_max_threads();
#else
        threads = 1;
#endif
    }
    if (reference) threads = 1;

    forge_backend *be = calloc(1, sizeof *be);
    cpu_ctx *ctx = calloc(1, sizeof *ctx);
    size_t pack_bytes = cpu_matmul_pack_floats(threads) * sizeof(float);
    float *pack = aligned_alloc(64, (pack_bytes + 63) / 64 * 64);
    if (!be || !ctx || !pack) {
        free(be);
        free(ctx);
        free(pack);
        return forge_error(FORGE_ERR_OOM,
                           "forge_cpu_backend_create: could not allocate the backend and %zu bytes "
                           "of matmul packing buffers for %d threads",
                           pack_bytes, threads);
    }
    ctx->threads = threads;
    ctx->reference = reference;
    ctx->pack = pack;

    be->name = reference ? "cpu-reference" : "cpu";
    be->kind = FORGE_DEVICE_CPU;
    be->options = *options;
    be->ctx = ctx;

    be->mem_alloc = cpu_mem_alloc;
    be->mem_free = cpu_mem_free;
    be->copy_to_device = cpu_copy;
    be->copy_to_host = cpu_copy;
    be->copy_device = cpu_copy;
    be->memset_zero = cpu_memset_zero;
    be->synchronize = cpu_synchronize;
    be->poll_errors = cpu_poll_errors;
    be->side_fork = cpu_side_noop;
    be->side_join = cpu_side_noop;
    be->side_synchronize = cpu_side_noop;
    be->destroy = cpu_destroy;

    FORGE_OP_LIST(FORGE_OP_BIND_CPU, FORGE_OP_NOTHING, FORGE_OP_NOTHING)

    *out = be;
    return FORGE_OK;
}
