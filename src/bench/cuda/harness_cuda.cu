/*
 * harness_cuda.cu: the CUDA-event timer and GPU provenance of the benchmark
 * harness (declared in src/bench/harness_cuda.h).
 *
 * The decisions a reader would otherwise get wrong:
 * - The timer records both events on the suite's stream, so it measures the
 *   kernels queued between start and stop on that stream (launch gaps
 *   included), and stop() blocks on the stop event: one timed run per
 *   start/stop pair, as the harness uses it.
 * - NVML is loaded with dlopen("libnvidia-ml.so.1") rather than linked: the
 *   binary then builds on a machine without the driver and runs on one where
 *   NVML is missing, recording -1 clocks (harness.h allows that) instead of
 *   failing to start. The NVML handle is found by PCI bus id, because NVML's
 *   device order need not match CUDA's (CUDA_VISIBLE_DEVICES, FASTEST_FIRST).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" {
#include "../harness_cuda.h"
}

#define HCUDA_TRY(call)                                                                       \
    do {                                                                                      \
        cudaError_t hcuda_e_ = (call);                                                        \
        if (hcuda_e_ != cudaSuccess)                                                          \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: %s", #call, __FILE__, \
                               __LINE__, cudaGetErrorString(hcuda_e_));                       \
    } while (0)

/* ---- marks: one event per slot ------------------------------------------------- */

typedef struct {
    cudaStream_t stream;
    int n;
    cudaEvent_t *ev;
} cuda_marks_ctx;

static void cuda_marks_destroy(void *p) {
    cuda_marks_ctx *m = (cuda_marks_ctx *)p;
    if (!m) return;
    for (int i = 0; i < m->n; i++) cudaEventDestroy(m->ev[i]);
    free(m->ev);
    free(m);
}

static forge_status cuda_marks_record(void *p, int slot) {
    cuda_marks_ctx *m = (cuda_marks_ctx *)p;
    HCUDA_TRY(cudaEventRecord(m->ev[slot], m->stream));
    return FORGE_OK;
}

static forge_status cuda_marks_elapsed(void *p, int a, int b, double *ms) {
    cuda_marks_ctx *m = (cuda_marks_ctx *)p;
    float f = 0;
    HCUDA_TRY(cudaEventSynchronize(m->ev[b]));
    HCUDA_TRY(cudaEventElapsedTime(&f, m->ev[a], m->ev[b]));
    *ms = (double)f;
    return FORGE_OK;
}

extern "C" forge_status forge_cuda_bench_marks_create(forge_bench_marks *out, void *cuda_stream, int capacity) {
    memset(out, 0, sizeof *out);
    if (capacity < 1) return forge_error(FORGE_ERR_ARG, "forge_cuda_bench_marks_create: capacity %d < 1", capacity);
    cuda_marks_ctx *m = (cuda_marks_ctx *)calloc(1, sizeof *m);
    if (m) m->ev = (cudaEvent_t *)calloc((size_t)capacity, sizeof(cudaEvent_t));
    if (!m || !m->ev) {
        free(m);
        return forge_error(FORGE_ERR_OOM, "forge_cuda_bench_marks_create: %d events", capacity);
    }
    m->stream = (cudaStream_t)cuda_stream;
    for (; m->n < capacity; m->n++) {
        cudaError_t e = cudaEventCreate(&m->ev[m->n]);
        if (e != cudaSuccess) {
            const int made = m->n;
            cuda_marks_destroy(m);
            return forge_error(FORGE_ERR_DEVICE, "forge_cuda_bench_marks_create: cudaEventCreate (%d of %d): %s",
                               made, capacity, cudaGetErrorString(e));
        }
    }
    out->ctx = m;
    out->capacity = capacity;
    out->record = cuda_marks_record;
    out->elapsed = cuda_marks_elapsed;
    out->destroy = cuda_marks_destroy;
    return FORGE_OK;
}

/* ---- timer --------------------------------------------------------------------- */

typedef struct {
    cudaStream_t stream;
    cudaEvent_t start, stop;
} cuda_timer_ctx;

static forge_status cuda_timer_start(void *p) {
    cuda_timer_ctx *t = (cuda_timer_ctx *)p;
    HCUDA_TRY(cudaEventRecord(t->start, t->stream));
    return FORGE_OK;
}

static forge_status cuda_timer_stop(void *p, double *elapsed_ms) {
    cuda_timer_ctx *t = (cuda_timer_ctx *)p;
    float ms = 0;
    HCUDA_TRY(cudaEventRecord(t->stop, t->stream));
    HCUDA_TRY(cudaEventSynchronize(t->stop));
    HCUDA_TRY(cudaEventElapsedTime(&ms, t->start, t->stop));
    *elapsed_ms = (double)ms;
    return FORGE_OK;
}

extern "C" forge_status forge_cuda_bench_timer_create(forge_bench_timer *out, void *cuda_stream) {
    if (!out) return forge_error(FORGE_ERR_ARG, "forge_cuda_bench_timer_create: out is NULL");
    memset(out, 0, sizeof *out);
    cuda_timer_ctx *t = (cuda_timer_ctx *)calloc(1, sizeof *t);
    if (!t) return forge_error(FORGE_ERR_OOM, "forge_cuda_bench_timer_create: out of host memory");
    t->stream = (cudaStream_t)cuda_stream;
    cudaError_t e = cudaEventCreate(&t->start);
    if (e == cudaSuccess) {
        e = cudaEventCreate(&t->stop);
        if (e != cudaSuccess) cudaEventDestroy(t->start);
    }
    if (e != cudaSuccess) {
        free(t);
        return forge_error(FORGE_ERR_DEVICE, "forge_cuda_bench_timer_create: cudaEventCreate failed: %s",
                           cudaGetErrorString(e));
    }
    out->ctx = t;
    out->start = cuda_timer_start;
    out->stop = cuda_timer_stop;
    return FORGE_OK;
}

extern "C" void forge_cuda_bench_timer_destroy(forge_bench_timer *timer) {
    if (!timer || !timer->ctx) return;
    cuda_timer_ctx *t = (cuda_timer_ctx *)timer->ctx;
    cudaEventDestroy(t->start);
    cudaEventDestroy(t->stop);
    free(t);
    memset(timer, 0, sizeof *timer);
}

/* ---- NVML through dlopen --------------------------------------------------------- */

/* The few NVML declarations used (nvml.h, NVML API v2); nvml.h itself is not
 * needed to build. */
typedef int nvml_return; /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef void *nvml_device;
enum { NVML_CLOCK_SM_ = 1, NVML_CLOCK_MEM_ = 2 };

typedef struct {
    int loaded; /* 1 ok, -1 unavailable */
    nvml_return (*init)(void);
    nvml_return (*by_pci)(const char *bus_id, nvml_device *dev);
    nvml_return (*clock)(nvml_device dev, int type, unsigned *mhz);
    nvml_return (*driver)(char *buf, unsigned n);
} nvml_api;

/* Loaded once per process and never unloaded; NULL when NVML is missing. */
static nvml_api *nvml_get(void) {
    static nvml_api api;
    if (api.loaded) return api.loaded > 0 ? &api : NULL;
    api.loaded = -1;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return NULL;
    *(void **)&api.init = dlsym(lib, "nvmlInit_v2");
    *(void **)&api.by_pci = dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&api.clock = dlsym(lib, "nvmlDeviceGetClockInfo");
    *(void **)&api.driver = dlsym(lib, "nvmlSystemGetDriverVersion");
    if (!api.init || !api.by_pci || !api.clock || !api.driver || api.init() != 0) return NULL;
    api.loaded = 1;
    return &api;
}

/* Current SM and memory clocks of CUDA device `device`, -1 when unreadable. */
static void nvml_clocks(int device, int *sm_mhz, int *mem_mhz) {
    *sm_mhz = *mem_mhz = -1;
    nvml_api *api = nvml_get();
    char bus[32];
    if (!api || cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device) != cudaSuccess) return;
    nvml_device dev;
    if (api->by_pci(bus, &dev) != 0) return;
    unsigned v;
    if (api->clock(dev, NVML_CLOCK_SM_, &v) == 0) *sm_mhz = (int)v;
    if (api->clock(dev, NVML_CLOCK_MEM_, &v) == 0) *mem_mhz = (int)v;
}

/* ---- provenance ------------------------------------------------------------------ */

extern "C" forge_status forge_cuda_provenance(forge_provenance *p, int device) {
    if (!p) return forge_error(FORGE_ERR_ARG, "forge_cuda_provenance: p is NULL");
    if (!p->commit[0]) forge_provenance_init_host(p);
    cudaDeviceProp prop;
    HCUDA_TRY(cudaGetDeviceProperties(&prop, device));
    snprintf(p->gpu_name, sizeof p->gpu_name, "%.127s", prop.name);
    p->sm_count = prop.multiProcessorCount;
    int drv = 0, rt = 0;
    HCUDA_TRY(cudaDriverGetVersion(&drv));
    HCUDA_TRY(cudaRuntimeGetVersion(&rt));
    char nvml_drv[80] = "";
    nvml_api *api = nvml_get();
    if (api && api->driver(nvml_drv, (unsigned)sizeof nvml_drv) != 0) nvml_drv[0] = '\0';
    if (nvml_drv[0])
        snprintf(p->driver, sizeof p->driver, "%d.%d (%.40s)", drv / 1000, (drv % 1000) / 10, nvml_drv);
    else
        snprintf(p->driver, sizeof p->driver, "%d.%d", drv / 1000, (drv % 1000) / 10);
    snprintf(p->toolkit, sizeof p->toolkit, "CUDA %d.%d", rt / 1000, (rt % 1000) / 10);
    nvml_clocks(device, &p->clock_sm_mhz_start, &p->clock_mem_mhz_start);
    p->clock_sm_mhz_end = p->clock_mem_mhz_end = -1;
    return FORGE_OK;
}

extern "C" forge_status forge_cuda_provenance_end(forge_provenance *p, int device) {
    if (!p) return forge_error(FORGE_ERR_ARG, "forge_cuda_provenance_end: p is NULL");
    nvml_clocks(device, &p->clock_sm_mhz_end, &p->clock_mem_mhz_end);
    return FORGE_OK;
}
