/*
 * devices.h: each device's backend constructor. Private to src/backend/:
 * every caller goes through forge_backend_create (backend.h), which picks the
 * constructor by device kind; a CPU-only build links backend_nocuda.c in place
 * of the CUDA one.
 */
#ifndef FORGE_DEVICES_H
#define FORGE_DEVICES_H

#ifdef __cplusplus
extern "C" {
#endif

#include "backend.h"

forge_status forge_cpu_backend_create(forge_backend **out, const forge_runtime_options *options);
forge_status forge_cuda_backend_create(forge_backend **out, const forge_runtime_options *options);

#ifdef __cplusplus
}
#endif

#endif
