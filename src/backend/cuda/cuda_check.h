/*
 * cuda_check.h: the one way CUDA errors become forge statuses.
 *
 * CUDA_TRY wraps a runtime call; CUDA_LAUNCH_CHECK follows every kernel
 * launch (launches return nothing, so a bad grid or a missing sm_90a image
 * only shows up in cudaGetLastError). Both record the call or kernel name,
 * file, line and cudaGetErrorString in forge's per-thread message and return
 * FORGE_ERR_DEVICE; library code never exits (status.h). CUDA_LAUNCH_TRY is
 * CUDA_LAUNCH_CHECK for a launch that returns its error (forge_pdl_launch,
 * pdl.cuh).
 *
 * An error from an earlier asynchronous kernel (an illegal address, say) is
 * sticky and surfaces at the next CUDA_TRY, which then names the wrong call:
 * run under compute-sanitizer, or with CUDA_LAUNCH_BLOCKING=1, to find the
 * kernel that actually faulted.
 */
#ifndef FORGE_CUDA_CHECK_H
#define FORGE_CUDA_CHECK_H

#include <cuda_runtime.h>

extern "C" {
#include "../backend.h"
}

#define CUDA_TRY(call)                                                                       \
    do {                                                                                     \
        cudaError_t cuda_try_e_ = (call);                                                    \
        if (cuda_try_e_ != cudaSuccess)                                                      \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: %s", #call, __FILE__, \
                               __LINE__, cudaGetErrorString(cuda_try_e_));                   \
    } while (0)

#define CUDA_LAUNCH_CHECK(kernel_name)                                                        \
    do {                                                                                      \
        cudaError_t cuda_launch_e_ = cudaGetLastError();                                      \
        if (cuda_launch_e_ != cudaSuccess)                                                    \
            return forge_error(FORGE_ERR_DEVICE, "kernel %s failed to launch at %s:%d: %s",   \
                               (kernel_name), __FILE__, __LINE__,                             \
                               cudaGetErrorString(cuda_launch_e_));                           \
    } while (0)

#define CUDA_LAUNCH_TRY(launch, kernel_name)                                                  \
    do {                                                                                      \
        cudaError_t cuda_launch_e_ = (launch);                                                \
        if (cuda_launch_e_ != cudaSuccess)                                                    \
            return forge_error(FORGE_ERR_DEVICE, "kernel %s failed to launch at %s:%d: %s",   \
                               (kernel_name), __FILE__, __LINE__,                             \
                               cudaGetErrorString(cuda_launch_e_));                           \
    } while (0)

#endif
