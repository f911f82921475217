/*
 * cpu_backend.c: builds the CPU forge_backend table, and the by-name factory
 * forge_backend_create / forge_backend_destroy every caller goes through.
 *
 * "Device memory" on the CPU is ordinary host memory, 64-byte aligned so that
 * vector loads in the kernels never split a cache line at a row start; the
 * copy entries are memcpy and synchronize has nothing to wait for.
 *
 * The decision a reader would get wrong: reference = 1 is not a debug flag
 * but the oracle. It pins every op to one thread and matmul to its plain
 * triple loop, and the tests and the GPU parity checks compare against a
 * backend created that way. Every entry of the table is filled: a NULL here
 * would mean "unsupported" (backend.h), which the reference must never be.
 */
#include <stdlib.h>
#include <string.h>

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

static void cpu_destroy(forge_backend *be) {
    if (!be) return;
    cpu_ctx *ctx = (cpu_ctx *)be->ctx;
    if (ctx) free(ctx->pack);
    free(ctx);
    free(be);
}

forge_status forge_cpu_backend_create(forge_backend **out, int threads, int reference) {
    if (!out) return forge_error(FORGE_ERR_ARG, "forge_cpu_backend_create: out is NULL");
    *out = NULL;
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
    ctx->reference = reference ? 1 : 0;
    ctx->pack = pack;

    be->name = reference ? "cpu-reference" : "cpu";
    be->kind = FORGE_DEVICE_CPU;
    be->ctx = ctx;

    be->mem_alloc = cpu_mem_alloc;
    be->mem_free = cpu_mem_free;
    be->copy_to_device = cpu_copy;
    be->copy_to_host = cpu_copy;
    be->copy_device = cpu_copy;
    be->memset_zero = cpu_memset_zero;
    be->synchronize = cpu_synchronize;
    be->destroy = cpu_destroy;

    be->accumulate = cpu_accumulate;
    be->add_forward = cpu_add_forward;
    be->gelu_forward = cpu_gelu_forward;
    be->gelu_backward = cpu_gelu_backward;
    be->swiglu_forward = cpu_swiglu_forward;
    be->swiglu_backward = cpu_swiglu_backward;

    be->embedding_forward = cpu_embedding_forward;
    be->embedding_backward = cpu_embedding_backward;
    be->position_forward = cpu_position_forward;
    be->position_backward = cpu_position_backward;

    be->matmul_forward = cpu_matmul_forward;
    be->matmul_backward_input = cpu_matmul_backward_input;
    be->matmul_backward_weight = cpu_matmul_backward_weight;

    be->layernorm_forward = cpu_layernorm_forward;
    be->layernorm_backward = cpu_layernorm_backward;
    be->rmsnorm_forward = cpu_rmsnorm_forward;
    be->rmsnorm_backward = cpu_rmsnorm_backward;

    be->rope_forward = cpu_rope_forward;
    be->rope_backward = cpu_rope_backward;

    be->attention_forward = cpu_attention_forward;
    be->attention_backward = cpu_attention_backward;
    be->flash_attention_forward = cpu_flash_attention_forward;
    be->flash_attention_backward = cpu_flash_attention_backward;
    be->flash_attention_forward_ext = cpu_flash_attention_forward_ext;
    be->flash_attention_backward_ext = cpu_flash_attention_backward_ext;

    be->classifier_forward_backward = cpu_classifier_forward_backward;

    be->sumsq_accumulate = cpu_sumsq_accumulate;
    be->adamw_update = cpu_adamw_update;

    *out = be;
    return FORGE_OK;
}

forge_status forge_backend_create(forge_backend **out, const char *name) {
    if (!out) return forge_error(FORGE_ERR_ARG, "forge_backend_create: out is NULL");
    *out = NULL;
    if (name && strcmp(name, "cpu") == 0) return forge_cpu_backend_create(out, 0, 0);
    if (name && strcmp(name, "cuda") == 0) return forge_cuda_backend_create(out, 0);
    return forge_error(FORGE_ERR_ARG, "unknown backend '%s': valid backends are \"cpu\" and \"cuda\"",
                       name ? name : "(null)");
}

void forge_backend_destroy(forge_backend *be) {
    if (be && be->destroy) be->destroy(be);
}
