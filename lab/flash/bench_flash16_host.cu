/*
 * bench_flash16_host.cu: `forge-lab bench flash16-host [--reps N]`: what forge's flash entries cost on the host, and
 * how much of it a call timed alone (CUDA events around one call after a synchronize, as `forge bench attention`
 * and tools/sdpa_bench.py time each call) exposes. Per entry and shape: the CPU time of one call while the GPU is busy
 * (enqueue only: a spin kernel holds the stream), the event time of a call alone after a synchronize, and the event
 * time per call of 20 back to back (host work hidden under the previous call). Then the host primitives those
 * entries call: cuTensorMapEncodeTiled, cudaFuncSetAttribute, kernel_attrs_set once its record holds the context,
 * cudaGetDevice + cudaDeviceGetAttribute, a launch, cudaMemsetAsync. Measurements: lab/notes/flash.md.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#include "../lab.h"
#include "../../src/backend/cuda/kernel_attrs.h"
#include "../../src/backend/cuda/wgmma_tmap.h"

#include "flash_bench_common.h"
#include "flash_lab.h"

extern "C" {
#include "../../src/backend/cuda/flash_attention_bf16.h"
}

#define FHB_TRY(x) LAB_BENCH_CUDA("flash16-host", x)
#define FHB_FORGE(x) LAB_BENCH_FORGE("flash16-host", x)

static double fhb_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

__global__ void fhb_spin(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

/* an empty kernel with one argument (no printf: a kernel that may print launches with more host work) */
__global__ void fhb_empty(int *p, int x) {
    if (x < 0) *p = x;
}

/* a kernel with forge's D = 64 forward's parameters (four tensor maps, two pointers, the shape, a float) and its
 * dynamic shared memory: what a launch of it costs the host with and without the attributes set before it */
__global__ void __launch_bounds__(288, 2)
    fhb_maps(const __grid_constant__ CUtensorMap a, const __grid_constant__ CUtensorMap b,
             const __grid_constant__ CUtensorMap c, const __grid_constant__ CUtensorMap d, int *p, float *q,
             forge_flash_shape s, float x) {
    extern __shared__ int fhb_sm[];
    if (x < 0.0f) {
        const unsigned long long u = (unsigned long long)&a + (unsigned long long)&b + (unsigned long long)&c +
                                     (unsigned long long)&d;
        *p = s.B + fhb_sm[threadIdx.x] + (int)(u & 0xffu) + (int)q[0];
    }
}

struct fhb_case {
    forge_flash_shape fs;
    void *q, *k, *v, *out, *dO;
    float *lse, *scratch, *dq, *dk, *dv;
};

static int fhb_case_init(fhb_case *c, int B, int H, int T, int D) {
    const size_t n = (size_t)B * T * H * D;
    c->fs = {B, T, T, H, H, D, (long long)H * D, (long long)H * D, (long long)H * D, (long long)H * D};
    void **b16[5] = {&c->q, &c->k, &c->v, &c->out, &c->dO};
    for (void **p : b16) {
        FHB_TRY(cudaMalloc(p, n * 2));
        FHB_TRY(cudaMemset(*p, 0, n * 2));
    }
    FHB_TRY(cudaMalloc((void **)&c->lse, (size_t)B * H * T * 4));
    FHB_TRY(cudaMalloc((void **)&c->scratch, FORGE_FLASH_BF16_BWD_SCRATCH(B, H, T, D) * 4));
    FHB_TRY(cudaMalloc((void **)&c->dq, n * 4));
    FHB_TRY(cudaMalloc((void **)&c->dk, n * 4));
    FHB_TRY(cudaMalloc((void **)&c->dv, n * 4));
    return 0;
}

static void fhb_case_free(fhb_case *c) {
    void *all[] = {c->q, c->k, c->v, c->out, c->dO, c->lse, c->scratch, c->dq, c->dk, c->dv};
    for (void *p : all) cudaFree(p);
}

static forge_status fhb_call(fhb_case *c, int bwd) {
    if (!bwd) return forge_flash_bf16_forward_wgmma(&c->fs, c->q, c->k, c->v, c->out, c->lse, NULL, 0);
    return forge_flash_bf16_backward_wgmma(&c->fs, c->q, c->k, c->v, c->out, c->dO, c->lse, c->scratch, c->dq, c->dk,
                                           c->dv, NULL);
}

static int fhb_entry(const char *name, fhb_case *c, int bwd, int reps) {
    FHB_FORGE(fhb_call(c, bwd)); /* warm */
    FHB_TRY(cudaDeviceSynchronize());
    /* host time of one call while the stream is held by a spin kernel */
    std::vector<float> host;
    for (int r = 0; r < reps; r++) {
        fhb_spin<<<1, 1>>>(2000000);
        const double t0 = fhb_now_us();
        FHB_FORGE(fhb_call(c, bwd));
        host.push_back((float)(fhb_now_us() - t0));
        FHB_TRY(cudaDeviceSynchronize());
    }
    /* a call alone, events around it, after a synchronize; and 20 back to back */
    cudaEvent_t e0, e1;
    FHB_TRY(cudaEventCreate(&e0));
    FHB_TRY(cudaEventCreate(&e1));
    std::vector<float> alone, batch;
    for (int r = 0; r < reps; r++) {
        FHB_TRY(cudaDeviceSynchronize());
        FHB_TRY(cudaEventRecord(e0, NULL));
        FHB_FORGE(fhb_call(c, bwd));
        FHB_TRY(cudaEventRecord(e1, NULL));
        FHB_TRY(cudaEventSynchronize(e1));
        float ms = 0;
        FHB_TRY(cudaEventElapsedTime(&ms, e0, e1));
        alone.push_back(1e3f * ms);
        FHB_TRY(cudaEventRecord(e0, NULL));
        for (int i = 0; i < 20; i++) FHB_FORGE(fhb_call(c, bwd));
        FHB_TRY(cudaEventRecord(e1, NULL));
        FHB_TRY(cudaEventSynchronize(e1));
        FHB_TRY(cudaEventElapsedTime(&ms, e0, e1));
        batch.push_back(1e3f * ms / 20);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    const double h = lab_bench_median(host), a = lab_bench_median(alone), bt = lab_bench_median(batch);
    printf("%-34s host %.1f us a call; alone %.1f us, back to back %.1f us a call: %.1f us (%.1f%%) exposed\n", name,
           h, a, bt, a - bt, 100.0 * (a - bt) / bt);
    return 0;
}

extern "C" int lab_bench_flash16_host(int argc, char **argv) {
    int reps = 0;
    if (lab_reps_args(argc, argv, "flash16-host", 30, 3, &reps)) return 2;
    /* issue 18's five shapes, as `forge bench attention` and lab/scripts/sdpa_b2b.py time them */
    static const int shapes[][4] = {
        {16, 12, 1024, 64}, {64, 6, 512, 64}, {64, 8, 1024, 64}, {16, 16, 2048, 128}, {8, 16, 4096, 128}};
    for (const auto &sh : shapes) {
        fhb_case c;
        memset(&c, 0, sizeof c);
        if (fhb_case_init(&c, sh[0], sh[1], sh[2], sh[3])) return 1;
        char name[96];
        for (int bwd = 0; bwd < 2; bwd++) {
            snprintf(name, sizeof name, "%s (%d,%d,%d,%d)", bwd ? "backward" : "forward", sh[0], sh[1], sh[2], sh[3]);
            if (fhb_entry(name, &c, bwd, reps)) return 1;
        }
        fhb_case_free(&c);
    }
    /* the primitives, 1000 each */
    const int N = 1000;
    gemm_encode_tiled_fn encode = nullptr;
    FHB_FORGE(gemm_get_encoder(&encode));
    void *buf = nullptr;
    FHB_TRY(cudaMalloc(&buf, 1 << 20));
    CUtensorMap map;
    /* a (16, 128, 256) bf16 tensor (the 1 MiB buffer) in forge's token-map form: boxes of 64 columns x 128 rows */
    const cuuint64_t dims[3] = {256, 128, 16}, strides[2] = {256 * 2, 256 * 2 * 128};
    const cuuint32_t box[3] = {64, 128, 1}, es[3] = {1, 1, 1};
    CUresult enc = CUDA_SUCCESS;
    double t0 = fhb_now_us();
    for (int i = 0; i < N; i++)
        enc = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, buf, dims, strides, box, es,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    const double t_enc = (fhb_now_us() - t0) / N;
    if (enc != CUDA_SUCCESS) {
        fprintf(stderr, "forge-lab bench flash16-host: cuTensorMapEncodeTiled failed with CUresult %d\n", (int)enc);
        return 1;
    }
    t0 = fhb_now_us();
    for (int i = 0; i < N; i++) FHB_TRY(cudaFuncSetAttribute(fhb_empty, cudaFuncAttributeMaxDynamicSharedMemorySize, 1024));
    const double t_attr = (fhb_now_us() - t0) / N;
    static kernel_attrs_once once;
    FHB_TRY(kernel_attrs_set(&once, (const void *)fhb_empty, 1024, 0));
    t0 = fhb_now_us();
    for (int i = 0; i < N; i++) FHB_TRY(kernel_attrs_set(&once, (const void *)fhb_empty, 1024, 0));
    const double t_once = (fhb_now_us() - t0) / N;
    int dev = 0, v = 0;
    t0 = fhb_now_us();
    for (int i = 0; i < N; i++) {
        FHB_TRY(cudaGetDevice(&dev));
        FHB_TRY(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, dev));
    }
    const double t_dev = (fhb_now_us() - t0) / N;
    /* launches and memsets queued behind a spin kernel, 100 at a time (well inside the launch queue, which blocks
     * the host once full) */
    const int Q = 100;
    FHB_TRY(cudaDeviceSynchronize());
    fhb_spin<<<1, 1>>>(20000000);
    t0 = fhb_now_us();
    for (int i = 0; i < Q; i++) fhb_empty<<<1, 32>>>((int *)buf, i);
    const double t_launch = (fhb_now_us() - t0) / Q;
    FHB_TRY(cudaGetLastError());
    FHB_TRY(cudaDeviceSynchronize());
    fhb_spin<<<1, 1>>>(20000000);
    t0 = fhb_now_us();
    for (int i = 0; i < Q; i++) FHB_TRY(cudaMemsetAsync(buf, 0, 4096, NULL));
    const double t_memset = (fhb_now_us() - t0) / Q;
    FHB_TRY(cudaDeviceSynchronize());
    /* fhb_maps (forge's D = 64 forward's parameters, 99,416 B of dynamic shared memory) behind a busy stream, Q at a
     * time: the launch alone, after setting its dynamic shared memory, after that and the carveout (as
     * fw64_prepare did each call before kernel_attrs.h); then each alone after a synchronize (events), 2 CTAs a block on 132 x 2 */
    {
        const int smem = 99416;
        /* the first n of the two attributes fw64_prepare set each call: the dynamic shared memory, the carveout */
        auto attrs = [&](int n) -> cudaError_t {
            cudaError_t e = cudaSuccess;
            if (n >= 1) e = cudaFuncSetAttribute(fhb_maps, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
            if (n >= 2 && e == cudaSuccess)
                e = cudaFuncSetAttribute(fhb_maps, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         (int)cudaSharedmemCarveoutMaxShared);
            return e;
        };
        FHB_TRY(attrs(2));
        const forge_flash_shape s = {1, 1, 1, 1, 1, 64, 64, 64, 64, 64};
        /* one launch after setting the first `mode` attributes again (launch errors: cudaGetLastError after the timed
         * loops, not inside them) */
        auto launch = [&](int mode) -> cudaError_t {
            const cudaError_t e = attrs(mode);
            if (e == cudaSuccess) fhb_maps<<<264, 288, smem>>>(map, map, map, map, (int *)buf, (float *)buf, s, 1.0f);
            return e;
        };
        double tm[3], al[3];
        cudaEvent_t e0, e1;
        FHB_TRY(cudaEventCreate(&e0));
        FHB_TRY(cudaEventCreate(&e1));
        for (int mode = 0; mode < 3; mode++) {
            FHB_TRY(cudaDeviceSynchronize());
            fhb_spin<<<1, 1>>>(20000000);
            t0 = fhb_now_us();
            for (int i = 0; i < Q; i++) FHB_TRY(launch(mode));
            tm[mode] = (fhb_now_us() - t0) / Q;
            FHB_TRY(cudaGetLastError());
            std::vector<float> a;
            for (int r = 0; r < 50; r++) {
                FHB_TRY(cudaDeviceSynchronize());
                FHB_TRY(cudaEventRecord(e0, NULL));
                FHB_TRY(launch(mode));
                FHB_TRY(cudaEventRecord(e1, NULL));
                FHB_TRY(cudaEventSynchronize(e1));
                float ms = 0;
                FHB_TRY(cudaEventElapsedTime(&ms, e0, e1));
                a.push_back(1e3f * ms);
            }
            al[mode] = lab_bench_median(a);
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        printf("a launch with the D = 64 forward's parameters and shared memory (us; host behind a busy stream / event "
               "time alone): launch only %.2f / %.2f, + its shared-memory attribute %.2f / %.2f, + the carveout %.2f / "
               "%.2f\n",
               tm[0], al[0], tm[1], al[1], tm[2], al[2]);
    }
    printf("host primitives (us a call; %d each, launches and memsets %d behind a busy stream): cuTensorMapEncodeTiled "
           "%.2f, cudaFuncSetAttribute %.2f, kernel_attrs_set (recorded) %.2f, cudaGetDevice + "
           "cudaDeviceGetAttribute %.2f, a kernel launch %.2f, cudaMemsetAsync %.2f\n",
           N, Q, t_enc, t_attr, t_once, t_dev, t_launch, t_memset);
    cudaFree(buf);
    return 0;
}
