/*
 * cuda_backend.cu: builds the CUDA forge_backend table: memory, copies, the
 * stream, the matmul path choice, and the entry point
 * forge_cuda_backend_create.
 *
 * The decisions a reader would otherwise get wrong:
 * - mem_alloc is a plain cudaMalloc: the caching allocator (runtime/pool.c)
 *   sits on top, so after the first micro-batch no op allocates. cudaFree may
 *   synchronise the device; the pool calls it only when trimming.
 * - Every op runs on ctx->stream, created non-blocking, so nothing is ever
 *   issued on the legacy default stream and no op waits on the host.
 *   copy_to_host is the one op that synchronises (it must: the caller reads
 *   the buffer when it returns).
 * - FORGE_MATMUL is read once, here. An unknown value is an error, never a
 *   silent fallback to the default path. Values: fp32 = simt (default:
 *   forge's exact fp32 SIMT kernel, deterministic, the same kernels as
 *   before the integration), simt64 / simt128 (tile forced, tests), cublas
 *   (pedantic fp32), tf32 (forge's mma.sync tf32 kernels, explicit opt-in:
 *   not exact fp32), auto (per shape, the faster of simt and cuBLAS, both
 *   exact fp32; matmul_table.cu). auto is not the default: its choice comes
 *   from a timing, so two machines (or a first run and a cached one) may
 *   pick different kernels and sum in different orders, and the default
 *   must give the same bits everywhere.
 * - A build without cuBLAS (make cuda CUBLAS=0, FORGE_NO_CUBLAS): cublas is
 *   refused with FORGE_ERR_UNSUPPORTED; auto prints a note and runs simt.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_ops.h"

static forge_status cuda_mem_alloc(forge_backend *be, void **ptr, size_t bytes) {
    (void)be;
    *ptr = NULL;
    if (bytes == 0) bytes = 256; /* a unique pointer, freed like any other */
    cudaError_t e = cudaMalloc(ptr, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* clear it: the pool may trim and retry */
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        *ptr = NULL;
        return forge_error(FORGE_ERR_OOM,
                           "cudaMalloc of %zu bytes: out of device memory (%.1f of %.1f MiB free)",
                           bytes, free_b / 1048576.0, total_b / 1048576.0);
    }
    if (e != cudaSuccess) {
        *ptr = NULL;
        return forge_error(FORGE_ERR_DEVICE, "cudaMalloc of %zu bytes failed: %s", bytes,
                           cudaGetErrorString(e));
    }
    return FORGE_OK;
}

static void cuda_mem_free(forge_backend *be, void *ptr) {
    (void)be;
    if (ptr) cudaFree(ptr);
}

static forge_status cuda_copy_to_device(forge_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return FORGE_OK;
    /* From pageable memory this returns once src has been staged, so the
     * caller may reuse src at once; the device copy itself is stream-ordered. */
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_get_ctx(be)->stream));
    return FORGE_OK;
}

static forge_status cuda_copy_to_host(forge_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return FORGE_OK;
    cudaStream_t s = cuda_get_ctx(be)->stream;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    CUDA_TRY(cudaStreamSynchronize(s));
    return FORGE_OK;
}

static forge_status cuda_copy_device(forge_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return FORGE_OK;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_get_ctx(be)->stream));
    return FORGE_OK;
}

static forge_status cuda_memset_zero(forge_backend *be, void *dst, size_t bytes) {
    if (bytes == 0) return FORGE_OK;
    CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, cuda_get_ctx(be)->stream));
    return FORGE_OK;
}

static forge_status cuda_synchronize(forge_backend *be) {
    CUDA_TRY(cudaStreamSynchronize(cuda_get_ctx(be)->stream));
    return FORGE_OK;
}

static void cuda_destroy(forge_backend *be) {
    if (!be) return;
    cuda_ctx *ctx = cuda_get_ctx(be);
    if (ctx) {
        if (ctx->stream) cudaStreamSynchronize(ctx->stream);
#ifndef FORGE_NO_CUBLAS
        if (ctx->cublas) cublasDestroy(ctx->cublas);
#endif
        cuda_mm_table_close(ctx);
        if (ctx->ws) cudaFree(ctx->ws);
        if (ctx->stream) cudaStreamDestroy(ctx->stream);
        free(ctx);
    }
    free(be);
}

static const char *cuda_matmul_impl_name(cuda_matmul_impl impl) {
    switch (impl) {
    case CUDA_MATMUL_SIMT: return "simt";
    case CUDA_MATMUL_SIMT64: return "simt64";
    case CUDA_MATMUL_SIMT128: return "simt128";
    case CUDA_MATMUL_CUBLAS: return "cublas";
    case CUDA_MATMUL_TF32: return "tf32";
    case CUDA_MATMUL_AUTO: return "auto";
    }
    return "?";
}

extern "C" const char *forge_cuda_matmul_impl(forge_backend *be) {
    if (!be || be->kind != FORGE_DEVICE_CUDA || !be->ctx) return NULL;
    return cuda_matmul_impl_name(cuda_get_ctx(be)->matmul_impl);
}

static forge_status cuda_parse_matmul_env(cuda_matmul_impl *out) {
    const char *v = getenv("FORGE_MATMUL");
    *out = CUDA_MATMUL_SIMT;
    if (!v || !*v || strcmp(v, "simt") == 0 || strcmp(v, "fp32") == 0) return FORGE_OK;
    if (strcmp(v, "simt64") == 0) *out = CUDA_MATMUL_SIMT64;
    else if (strcmp(v, "simt128") == 0) *out = CUDA_MATMUL_SIMT128;
    else if (strcmp(v, "cublas") == 0) *out = CUDA_MATMUL_CUBLAS;
    else if (strcmp(v, "tf32") == 0) *out = CUDA_MATMUL_TF32;
    else if (strcmp(v, "auto") == 0) *out = CUDA_MATMUL_AUTO;
    else
        return forge_error(FORGE_ERR_ARG,
                           "FORGE_MATMUL (or --matmul) '%s': expected \"fp32\" = \"simt\" (default), \"tf32\", "
                           "\"cublas\", \"auto\", \"simt64\" or \"simt128\"",
                           v);
#ifdef FORGE_NO_CUBLAS
    if (*out == CUDA_MATMUL_CUBLAS)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "FORGE_MATMUL (or --matmul) 'cublas': this forge was built without cuBLAS (make cuda "
                           "CUBLAS=0); expected \"fp32\", \"tf32\" or \"auto\", or rebuild with cuBLAS");
    if (*out == CUDA_MATMUL_AUTO) {
        fprintf(stderr, "matmul auto: this forge was built without cuBLAS (CUBLAS=0): every shape runs forge's "
                        "fp32 SIMT kernel\n");
        *out = CUDA_MATMUL_SIMT;
    }
#endif
    return FORGE_OK;
}

/* Everything that can fail once the context exists; the caller destroys on error. */
static forge_status cuda_ctx_init(cuda_ctx *ctx, int device_index) {
    int count = 0;
    CUDA_TRY(cudaGetDeviceCount(&count));
    if (device_index < 0 || device_index >= count)
        return forge_error(FORGE_ERR_ARG, "cuda device %d requested, but %d device(s) are visible",
                           device_index, count);
    CUDA_TRY(cudaSetDevice(device_index));
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, device_index));
    if (prop.major != 9)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "cuda device %d is %s (compute capability %d.%d): this forge was built "
                           "for sm_90a (Hopper) only; rebuild with another -gencode",
                           device_index, prop.name, prop.major, prop.minor);
    ctx->device = device_index;
    ctx->num_sms = prop.multiProcessorCount;
    CUDA_TRY(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaMalloc((void **)&ctx->ws, CUDA_WS_FLOATS * sizeof(float)));
#ifndef FORGE_NO_CUBLAS
    if (ctx->matmul_impl == CUDA_MATMUL_CUBLAS || ctx->matmul_impl == CUDA_MATMUL_AUTO) {
        cublasStatus_t cs = cublasCreate(&ctx->cublas);
        if (cs != CUBLAS_STATUS_SUCCESS) {
            ctx->cublas = NULL;
            return forge_error(FORGE_ERR_DEVICE, "cublasCreate failed: %s", cublasGetStatusString(cs));
        }
        cs = cublasSetStream(ctx->cublas, ctx->stream);
        /* pedantic: full fp32 everywhere, no TF32 or other reduced-precision tricks */
        if (cs == CUBLAS_STATUS_SUCCESS) cs = cublasSetMathMode(ctx->cublas, CUBLAS_PEDANTIC_MATH);
        if (cs != CUBLAS_STATUS_SUCCESS)
            return forge_error(FORGE_ERR_DEVICE, "cuBLAS stream/math-mode setup failed: %s",
                               cublasGetStatusString(cs));
    }
#endif
    if (ctx->matmul_impl == CUDA_MATMUL_AUTO) FORGE_TRY(cuda_mm_table_open(ctx));
    return FORGE_OK;
}

extern "C" forge_status forge_cuda_backend_create(forge_backend **out, int device_index) {
    if (!out) return forge_error(FORGE_ERR_ARG, "forge_cuda_backend_create: out is NULL");
    *out = NULL;
    cuda_matmul_impl impl;
    FORGE_TRY(cuda_parse_matmul_env(&impl));

    forge_backend *be = (forge_backend *)calloc(1, sizeof *be);
    cuda_ctx *ctx = (cuda_ctx *)calloc(1, sizeof *ctx);
    if (!be || !ctx) {
        free(be);
        free(ctx);
        return forge_error(FORGE_ERR_OOM, "forge_cuda_backend_create: out of host memory");
    }
    ctx->matmul_impl = impl;
    /* The matmul path is part of the name, so every log line that names the
     * backend says which GEMM ran (cuBLAS is never chosen silently). */
    switch (impl) {
    case CUDA_MATMUL_SIMT: be->name = "cuda (matmul: forge simt)"; break;
    case CUDA_MATMUL_SIMT64: be->name = "cuda (matmul: forge simt64)"; break;
    case CUDA_MATMUL_SIMT128: be->name = "cuda (matmul: forge simt128)"; break;
    case CUDA_MATMUL_CUBLAS: be->name = "cuda (matmul: cuBLAS fp32)"; break;
    case CUDA_MATMUL_TF32: be->name = "cuda (matmul: forge tf32 mma.sync)"; break;
    case CUDA_MATMUL_AUTO: be->name = "cuda (matmul: auto = forge simt or cuBLAS fp32 per shape)"; break;
    }
    be->kind = FORGE_DEVICE_CUDA;
    be->ctx = ctx;
    forge_status s = cuda_ctx_init(ctx, device_index);
    if (s != FORGE_OK) {
        cuda_destroy(be);
        return forge_error_context(s, "creating the cuda backend on device %d: ", device_index);
    }

    be->mem_alloc = cuda_mem_alloc;
    be->mem_free = cuda_mem_free;
    be->copy_to_device = cuda_copy_to_device;
    be->copy_to_host = cuda_copy_to_host;
    be->copy_device = cuda_copy_device;
    be->memset_zero = cuda_memset_zero;
    be->synchronize = cuda_synchronize;
    be->destroy = cuda_destroy;

    be->accumulate = cuda_accumulate;
    be->add_forward = cuda_add_forward;
    be->gelu_forward = cuda_gelu_forward;
    be->gelu_backward = cuda_gelu_backward;
    be->swiglu_forward = cuda_swiglu_forward;
    be->swiglu_backward = cuda_swiglu_backward;

    be->embedding_forward = cuda_embedding_forward;
    be->embedding_backward = cuda_embedding_backward;
    be->position_forward = cuda_position_forward;
    be->position_backward = cuda_position_backward;

    be->matmul_forward = cuda_matmul_forward;
    be->matmul_backward_input = cuda_matmul_backward_input;
    be->matmul_backward_weight = cuda_matmul_backward_weight;

    be->layernorm_forward = cuda_layernorm_forward;
    be->layernorm_backward = cuda_layernorm_backward;
    be->rmsnorm_forward = cuda_rmsnorm_forward;
    be->rmsnorm_backward = cuda_rmsnorm_backward;

    be->rope_forward = cuda_rope_forward;
    be->rope_backward = cuda_rope_backward;

    be->attention_forward = cuda_attention_forward;
    be->attention_backward = cuda_attention_backward;
    be->flash_attention_forward = cuda_flash_attention_forward;
    be->flash_attention_backward = cuda_flash_attention_backward;
    be->flash_attention_forward_ext = cuda_flash_attention_forward_ext;
    be->flash_attention_backward_ext = cuda_flash_attention_backward_ext;

    be->classifier_forward_backward = cuda_classifier_forward_backward;

    be->sumsq_accumulate = cuda_sumsq_accumulate;
    be->adamw_update = cuda_adamw_update;

    *out = be;
    return FORGE_OK;
}
