/*
 * kernel_attrs.h: a kernel's function attributes (its dynamic shared-memory limit and, for kernels sized to share
 * an SM with copies of themselves, the shared-memory carveout) set once per CUDA context, not before every launch.
 *
 * The attributes belong to the kernel's copy in a context and stay set there, so a second cudaFuncSetAttribute
 * only adds host work to the launch path: the eager ops, the first step of a run and the per-call benchmarks pay
 * it, a recorded step (graph.cu) does not. The record is the context's id rather than a flag per device: after a
 * cudaDeviceReset the device's next primary context starts without the attributes, and a per-device flag would
 * skip setting them there (the launch would then fail for its shared memory, or run at fewer CTAs per SM).
 */
#ifndef FORGE_KERNEL_ATTRS_H
#define FORGE_KERNEL_ATTRS_H

#include <cuda_runtime.h>

#define KERNEL_ATTRS_MAX_DEVICES 64

/* One per kernel, a zero-initialised static beside its launch: per device, the id of the context whose copy of the
 * kernel has the attributes (0: none recorded). Devices from KERNEL_ATTRS_MAX_DEVICES on set them every call. */
typedef struct {
    unsigned long long ctx[KERNEL_ATTRS_MAX_DEVICES];
} kernel_attrs_once;

/* Raises func's dynamic shared-memory limit to smem bytes and, when max_carveout is non-zero, asks for the largest
 * shared-memory carveout, unless the current context's copy of func has them already. Returns the first failing
 * call's error (nothing recorded then). Concurrent first calls are safe: they set the same values. Every launch of
 * func must pass the same smem (the limit is the kernel's, not the call site's). */
cudaError_t kernel_attrs_set(kernel_attrs_once *once, const void *func, int smem, int max_carveout);

/* kernel_attrs_set for callers that hold the current device's index already (cudaGetDevice's answer) */
cudaError_t kernel_attrs_set_dev(kernel_attrs_once *once, int dev, const void *func, int smem, int max_carveout);

#endif
