/*
 * cuda_stream_access.cu: hands the CUDA backend's stream and device to code
 * outside the backend (the benchmark harness records its timing events on the
 * stream, so a timed op and its events are ordered on one stream). Declared
 * in cuda_backend.h.
 */
#include "cuda_backend.h"
#include "cuda_ops.h"

extern "C" void *forge_cuda_backend_stream(forge_backend *be) {
    if (!be || be->kind != FORGE_DEVICE_CUDA || !be->ctx) return NULL;
    return (void *)cuda_get_ctx(be)->stream;
}

extern "C" void *forge_cuda_backend_side_stream(forge_backend *be) {
    if (!be || be->kind != FORGE_DEVICE_CUDA || !be->ctx) return NULL;
    return (void *)cuda_get_ctx(be)->side;
}

extern "C" int forge_cuda_backend_device(forge_backend *be) {
    if (!be || be->kind != FORGE_DEVICE_CUDA || !be->ctx) return -1;
    return cuda_get_ctx(be)->device;
}
