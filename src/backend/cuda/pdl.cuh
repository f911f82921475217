/*
 * pdl.cuh: programmatic dependent launch (PDL) on Hopper: a kernel's launch and prologue overlap the tail of
 * the kernel before it on the stream (CUDA programming guide, "Programmatic Dependent Launch"; PTX ISA,
 * griddepcontrol). The bf16 training step's kernels launch through forge_pdl_launch; inside the recorded step
 * (graph.cu) stream capture turns each such launch into a programmatic edge of the graph.
 *
 * What a reader would get wrong:
 * - A kernel launched with PDL may start while the previous kernel is still running, reading and writing.
 *   forge_pdl_wait() (griddepcontrol.wait) blocks the calling thread until every prerequisite grid has
 *   COMPLETED and its memory is visible. So every thread of such a kernel calls it, unconditionally, before its
 *   first global-memory access of any kind: loads, stores (a store before the wait can overwrite what the
 *   previous kernel still reads), atomics, cp.async, TMA loads and stores. Before the wait a kernel does only
 *   index math on its scalar arguments, shared-memory and mbarrier set-up, setmaxnreg, and prefetches of the
 *   tensor maps in its __grid_constant__ parameters. No thread returns before the wait: a grid whose threads
 *   all waited cannot complete before its predecessor, which is what lets the kernel after it rely on its own
 *   wait alone (the ordering is transitive). scripts/check_pdl.py checks every kernel forge_pdl_launch starts.
 * - forge_pdl_launch_dependents() (griddepcontrol.launch_dependents) only lets the NEXT kernel be scheduled
 *   once every CTA of this grid has issued it or exited; it publishes nothing (the next kernel's wait is what
 *   orders memory). It acts once per CTA, whichever thread issues it first; the kernels call it right after
 *   their wait, so the next kernel's CTAs take the SMs this grid's last wave leaves free and run their own
 *   prologue there.
 * - A kernel launched without the attribute (PDL off: the default, the lab, the fp8 / tf32 kernels sharing a body) runs
 *   both instructions as no-ops: nothing waits, nothing is triggered early; one binary serves both.
 * - Both are compiled only for sm_90 and later (griddepcontrol is PTX 7.8, sm_90); elsewhere they are empty.
 */
#ifndef FORGE_PDL_CUH
#define FORGE_PDL_CUH

#include <stddef.h>
#include <utility>

#include <cuda_runtime.h>

/* Waits until the kernels this grid depends on have completed and their writes are visible (see above). */
__device__ __forceinline__ void forge_pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Lets the kernel after this one on the stream be scheduled (see above); orders no memory. */
__device__ __forceinline__ void forge_pdl_launch_dependents(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

#ifdef __CUDACC__ /* the host launcher needs nvcc; the device side above also builds in the lab's host emulators */
/* kernel<<<grid, block, smem, stream>>>(args...), with pdl != 0 through cudaLaunchKernelEx with
 * cudaLaunchAttributeProgrammaticStreamSerialization = 1 (the kernel may start under the previous kernel's tail;
 * it must keep the contract above). The arguments convert to the kernel's parameter types as in a <<<>>> launch.
 * Returns the launch's error and clears the runtime's last-error state either way (a failed launch must not be
 * reported again by the next CUDA_LAUNCH_CHECK, naming another kernel); callers wrap it in CUDA_LAUNCH_TRY. The
 * caller decides pdl: the context's switch (cuda_ctx.pdl: the runtime options' pdl, on a device of compute
 * capability 9.x), or 0. */
template <typename... Params, typename... Args>
static inline cudaError_t forge_pdl_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                           cudaStream_t stream, int pdl, Args &&...args) {
    if (!pdl) {
        kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
        return cudaGetLastError();
    }
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
    const cudaError_t last = cudaGetLastError();
    return e != cudaSuccess ? e : last;
}
#endif

#endif
