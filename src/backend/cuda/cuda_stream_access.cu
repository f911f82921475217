/*
 * cuda_stream_access.cu: hands the CUDA backend's stream to code outside the
 * backend (the benchmark harness records its timing events on it, so a timed
 * op and its events are ordered on one stream). Declared in
 * src/bench/harness_cuda.h.
 */
#include "cuda_ops.h"

extern "C" void *forge_cuda_backend_stream(forge_backend *be) {
    if (!be || be->kind != FORGE_DEVICE_CUDA || !be->ctx) return NULL;
    return (void *)cuda_get_ctx(be)->stream;
}

/* The CUDA device index the backend was created on (-1 if not a CUDA backend). */
extern "C" int forge_cuda_backend_device(forge_backend *be) {
    if (!be || be->kind != FORGE_DEVICE_CUDA || !be->ctx) return -1;
    return cuda_get_ctx(be)->device;
}
