/*
 * kernel_attrs.cu: function attributes set once per CUDA context (kernel_attrs.h).
 *
 * The context's id comes from the driver (cuCtxGetCurrent, cuCtxGetId: CUDA 12.0), fetched at run time as the
 * tensor-map encoder is (wgmma_tmap.cu), so no binary needs a -lcuda link. Where the driver cannot say (no context
 * current on this thread yet, an older driver) the id is 0 and the attributes are set on every call: correct, only
 * slower.
 */
#include <cuda.h>
#include <cuda_runtime.h>

#include "kernel_attrs.h"

typedef CUresult (*ctx_current_fn)(CUcontext *);
typedef CUresult (*ctx_id_fn)(CUcontext, unsigned long long *);

/* the driver's entries; g_resolved: 0 not looked up yet, 1 found, -1 missing. Racing first lookups store the same
 * pointers. */
static ctx_current_fn g_ctx_current;
static ctx_id_fn g_ctx_id;
static int g_resolved;

static int resolve_driver(void) {
    int r = __atomic_load_n(&g_resolved, __ATOMIC_ACQUIRE);
    if (r != 0) return r;
    void *cur = nullptr, *id = nullptr;
    cudaDriverEntryPointQueryResult q1 = cudaDriverEntryPointSymbolNotFound, q2 = cudaDriverEntryPointSymbolNotFound;
    const bool ok = cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &cur, 12000, cudaEnableDefault, &q1) ==
                        cudaSuccess &&
                    cudaGetDriverEntryPointByVersion("cuCtxGetId", &id, 12000, cudaEnableDefault, &q2) ==
                        cudaSuccess &&
                    q1 == cudaDriverEntryPointSuccess && q2 == cudaDriverEntryPointSuccess && cur && id;
    if (!ok) (void)cudaGetLastError(); /* a failed lookup must not linger as the thread's last error */
    __atomic_store_n(&g_ctx_current, ok ? (ctx_current_fn)cur : nullptr, __ATOMIC_RELAXED);
    __atomic_store_n(&g_ctx_id, ok ? (ctx_id_fn)id : nullptr, __ATOMIC_RELAXED);
    r = ok ? 1 : -1;
    __atomic_store_n(&g_resolved, r, __ATOMIC_RELEASE);
    return r;
}

/* the id of the context current on this thread; 0 when there is none or the driver cannot say */
static unsigned long long current_ctx_id(void) {
    if (resolve_driver() < 0) return 0;
    CUcontext c = nullptr;
    unsigned long long id = 0;
    if (__atomic_load_n(&g_ctx_current, __ATOMIC_RELAXED)(&c) != CUDA_SUCCESS || c == nullptr) return 0;
    if (__atomic_load_n(&g_ctx_id, __ATOMIC_RELAXED)(c, &id) != CUDA_SUCCESS) return 0;
    return id;
}

cudaError_t kernel_attrs_set(kernel_attrs_once *once, const void *func, int smem, int max_carveout) {
    int dev = 0;
    const cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    return kernel_attrs_set_dev(once, dev, func, smem, max_carveout);
}

cudaError_t kernel_attrs_set_dev(kernel_attrs_once *once, int dev, const void *func, int smem, int max_carveout) {
    const unsigned long long id = current_ctx_id();
    const bool recorded = id != 0 && dev >= 0 && dev < KERNEL_ATTRS_MAX_DEVICES;
    /* acquire / release: a thread that finds the record launches after the setting thread's calls */
    if (recorded && __atomic_load_n(&once->ctx[dev], __ATOMIC_ACQUIRE) == id) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess && max_carveout)
        e = cudaFuncSetAttribute(func, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 (int)cudaSharedmemCarveoutMaxShared);
    if (e == cudaSuccess && recorded) __atomic_store_n(&once->ctx[dev], id, __ATOMIC_RELEASE);
    return e;
}
