/*
 * bench_gelu16_bwd.cu: `forge-lab bench gelu16-bwd [--reps N] [--blocks-per-sm K]`: the bf16 GELU backward, written
 * form (accumulate = 0: reads inp and dout, writes dinp), at gpt2-124m's MLP size n = 16384 x 3072, timed
 * interleaved round by round (CUDA events around each call, on the backend's stream):
 * - "compute": the kernel the op ran before its gelu' table (kept here as the baseline): forge_gelu_grad computed
 *   per element, 8-wide grid-stride chunks, 256 threads, min(n / 8 / 256, 32 x SMs) blocks;
 * - "table": the product, the op itself (be->gelu_backward_bf16 on a CUDA backend: gelu_grad_table.cuh's kernel
 *   with the product's grid);
 * - with --blocks-per-sm K, also "table/K": the same kernel launched with K blocks per SM.
 * Inputs (made on the device, the same every run): x a pre-activation-like N(0, 1) rounded to bf16, then a wider
 * N(0, 8^2), then N(0, 1) with 1% exact zeros (outside the table's window: its computed path); dout N(0, 1e-3^2).
 * Per kernel: the median us, the bandwidth it implies (3 n bf16), the median per-round ratio compute / this with a
 * 95% bootstrap CI, and whether the output equals the baseline's bitwise (PASS/FAIL; exit 1 on FAIL).
 *
 * `forge-lab bench gelu16-bwd-dbias [--reps N]`: the MLP's fc layer at N = 16384, OC = 3072: gelu_backward_bf16
 * then matmul_backward_weight_bf16's bias-gradient pass (C = 0) against gelu_backward_dbias_bf16 (one pass summing
 * the bias-gradient partials as it writes dinp, then the same finishing sum), interleaved; dinp and dbias must be
 * bitwise equal (PASS/FAIL).
 * Measurements: lab/notes/elementwise.md.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "../../src/backend/cuda/gelu_grad_table.cuh"
#include "../lab_stats.h"
#include "elementwise_lab.h"

#define GB_TRY(x)                                                                                                  \
    do {                                                                                                           \
        cudaError_t e_ = (x);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "forge-lab bench gelu16-bwd: %s: %s\n", #x, cudaGetErrorString(e_));                  \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)
#define GB_FORGE(x)                                                                                                \
    do {                                                                                                           \
        forge_status s_ = (x);                                                                                     \
        if (s_ != FORGE_OK) {                                                                                      \
            fprintf(stderr, "forge-lab bench gelu16-bwd: %s: %s\n", #x, forge_error_message());                  \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

#define GB_BASE_THREADS 256

/* The baseline: dinp = rn(0 + forge_gelu_grad(x) dout), 8-wide chunks, then the tail element by element. */
__global__ void __launch_bounds__(GB_BASE_THREADS)
    gb_compute_kernel(forge_bf16 *dinp, const forge_bf16 *inp, const forge_bf16 *dout, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    const size_t head = n / 8 * 8;
    for (size_t i = tid * 8; i < head; i += stride * 8) {
        float d[8], x[8], g[8];
        bf16_load<8>(x, inp + i);
        bf16_load<8>(g, dout + i);
#pragma unroll
        for (int k = 0; k < 8; k++) d[k] = fmaf(forge_gelu_grad(x[k]), g[k], 0.0f);
        bf16_store<8>(dinp + i, d);
    }
    for (size_t i = head + tid; i < n; i += stride)
        dinp[i] = f32_to_bf16(fmaf(forge_gelu_grad(bf16_to_f32(inp[i])), bf16_to_f32(dout[i]), 0.0f));
}

/* a hash of (i, seed) to a uniform in (0, 1) */
__device__ __forceinline__ float gb_uniform(uint64_t i, uint32_t seed) {
    uint64_t z = i * 0x9e3779b97f4a7c15ull + seed * 0xbf58476d1ce4e5b9ull + 0x94d049bb133111ebull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return ((float)(z >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

/* v[i] = rn(sigma N(0, 1)) (Box-Muller), or +0 with probability zero_frac */
__global__ void gb_fill_kernel(forge_bf16 *v, size_t n, float sigma, float zero_frac, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float u1 = gb_uniform(2 * i, seed), u2 = gb_uniform(2 * i + 1, seed);
        const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
        v[i] = gb_uniform(i, seed ^ 0x5bd1e995u) < zero_frac ? (forge_bf16)0 : f32_to_bf16(sigma * z);
    }
}

typedef struct {
    forge_backend *be;
    cudaStream_t stream;
    int num_sms;
    int bps;             /* --blocks-per-sm, or 0 */
    float *table;        /* the lab's own copy of the gelu' table, for table/K */
    forge_bf16 *x, *g, *d[3];
} gb_env;

/* kernel k (0 compute, 1 table (the op), 2 table/K) into e->d[k] */
static int gb_run(gb_env *e, int k, size_t n) {
    if (k == 0) {
        size_t blocks = (n / 8 + GB_BASE_THREADS - 1) / GB_BASE_THREADS;
        if (blocks > (size_t)e->num_sms * 32) blocks = (size_t)e->num_sms * 32;
        if (blocks < 1) blocks = 1;
        gb_compute_kernel<<<(unsigned)blocks, GB_BASE_THREADS, 0, e->stream>>>(e->d[0], e->x, e->g, n);
        GB_TRY(cudaGetLastError());
    } else if (k == 1) {
        GB_FORGE(e->be->gelu_backward_bf16(e->be, e->d[1], e->x, e->g, n, 0));
    } else {
        gelu_backward_bf16_table_kernel<false><<<gelu_bwd_grid(e->num_sms, e->bps, n), GELU_BWD_THREADS, 0,
                                                 e->stream>>>(e->d[2], e->x, e->g, n, e->table);
        GB_TRY(cudaGetLastError());
    }
    return 0;
}

static int gb_case(gb_env *e, const char *name, size_t n, float sigma, float zero_frac, int reps) {
    const int nk = e->bps > 0 ? 3 : 2;
    gb_fill_kernel<<<1024, 256, 0, e->stream>>>(e->x, n, sigma, zero_frac, 1);
    gb_fill_kernel<<<1024, 256, 0, e->stream>>>(e->g, n, 1e-3f, 0.0f, 2);
    GB_TRY(cudaGetLastError());
    for (int k = 0; k < nk; k++) {
        GB_TRY(cudaMemsetAsync(e->d[k], 0xff, n * sizeof(forge_bf16), e->stream));
        if (gb_run(e, k, n)) return 1;
    }
    GB_TRY(cudaStreamSynchronize(e->stream));
    std::vector<forge_bf16> ref(n), got(n);
    int same[3] = {1, 1, 1};
    GB_TRY(cudaMemcpy(ref.data(), e->d[0], n * sizeof(forge_bf16), cudaMemcpyDeviceToHost));
    for (int k = 1; k < nk; k++) {
        GB_TRY(cudaMemcpy(got.data(), e->d[k], n * sizeof(forge_bf16), cudaMemcpyDeviceToHost));
        same[k] = memcmp(got.data(), ref.data(), n * sizeof(forge_bf16)) == 0;
    }
    cudaEvent_t e0, e1;
    GB_TRY(cudaEventCreate(&e0));
    GB_TRY(cudaEventCreate(&e1));
    std::vector<double> t[3];
    for (int r = -3; r < reps; r++)
        for (int k = 0; k < nk; k++) {
            GB_TRY(cudaEventRecord(e0, e->stream));
            if (gb_run(e, k, n)) return 1;
            GB_TRY(cudaEventRecord(e1, e->stream));
            GB_TRY(cudaEventSynchronize(e1));
            float ms = 0;
            GB_TRY(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0) t[k].push_back(1e3 * ms);
        }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    printf("%s (n = %zu), median of %d interleaved rounds:\n", name, n, reps);
    printf("  %-10s %10s %9s %24s %s\n", "kernel", "us", "GB/s", "speedup [95% CI]", "bits vs compute");
    for (int k = 0; k < nk; k++) {
        std::vector<double> ratio;
        for (int i = 0; i < reps; i++) ratio.push_back(t[0][i] / t[k][i]);
        double lo, hi;
        lab_median_ci(ratio, &lo, &hi);
        const double us = lab_median(t[k]);
        char label[32];
        snprintf(label, sizeof label, k == 0 ? "compute" : k == 1 ? "table" : "table/%d", e->bps);
        printf("  %-10s %10.1f %9.0f %8.3fx [%.3f, %.3f] %s\n", label, us, 3.0 * n * 2 / us * 1e-3,
               lab_median(ratio), lo, hi, k == 0 ? "-" : same[k] ? "PASS" : "FAIL");
    }
    return same[1] && same[2] ? 0 : 1;
}

extern "C" int lab_bench_gelu16_bwd(int argc, char **argv) {
    int reps = 30, bps = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--blocks-per-sm") == 0 && i + 1 < argc) {
            bps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: forge-lab bench gelu16-bwd [--reps N] [--blocks-per-sm K]\n");
            return 2;
        }
    }
    if (reps < 3) reps = 3;
    const size_t n = (size_t)16384 * 3072;
    gb_env e;
    memset(&e, 0, sizeof e);
    e.bps = bps;
    forge_runtime_options rt;
    forge_runtime_options_default(&rt);
    GB_FORGE(forge_backend_create(&e.be, FORGE_DEVICE_CUDA, &rt));
    cuda_ctx *ctx = cuda_get_ctx(e.be);
    e.stream = ctx->stream;
    e.num_sms = ctx->num_sms;
    printf("gelu16-bwd: %d SMs; table kernel: %d threads, %d blocks per SM (occupancy), %d B of shared memory\n",
           e.num_sms, GELU_BWD_THREADS, ctx->gelu_bwd_blocks_per_sm, (int)(GELU_TAB_FLOATS * sizeof(float)));
    GB_TRY(cudaMalloc(&e.table, GELU_TAB_FLOATS * sizeof(float)));
    gelu_grad_table_kernel<<<GELU_TAB_FLOATS / 256, 256, 0, e.stream>>>(e.table);
    GB_TRY(cudaGetLastError());
    GB_TRY(cudaMalloc(&e.x, n * sizeof(forge_bf16)));
    GB_TRY(cudaMalloc(&e.g, n * sizeof(forge_bf16)));
    for (int k = 0; k < 3; k++) GB_TRY(cudaMalloc(&e.d[k], n * sizeof(forge_bf16)));
    int rc = gb_case(&e, "x ~ N(0, 1)", n, 1.0f, 0.0f, reps);
    rc |= gb_case(&e, "x ~ N(0, 8^2)", n, 8.0f, 0.0f, reps);
    rc |= gb_case(&e, "x ~ N(0, 1), 1% zeros", n, 1.0f, 0.01f, reps);
    cudaFree(e.table);
    cudaFree(e.x);
    cudaFree(e.g);
    for (int k = 0; k < 3; k++) cudaFree(e.d[k]);
    forge_backend_destroy(e.be);
    return rc;
}

/* ---- gelu16-bwd-dbias: the GELU backward and the fc layer's bias gradient ----------------------------------------- */

/* path 0: gelu_backward_bf16 then the dbias pass of matmul_backward_weight_bf16 (C = 0: no weight gradient);
 * path 1: gelu_backward_dbias_bf16 */
static int gbd_run(forge_backend *be, int path, forge_bf16 *dinp, float *dbias, const forge_bf16 *x,
                   const forge_bf16 *g, int N, int OC) {
    if (path == 0) {
        GB_FORGE(be->gelu_backward_bf16(be, dinp, x, g, (size_t)N * OC, 0));
        GB_FORGE(be->matmul_backward_weight_bf16(be, NULL, dbias, dinp, NULL, N, 0, OC));
    } else {
        GB_FORGE(be->gelu_backward_dbias_bf16(be, dinp, dbias, x, g, N, OC));
    }
    return 0;
}

extern "C" int lab_bench_gelu16_bwd_dbias(int argc, char **argv) {
    int reps = 30;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: forge-lab bench gelu16-bwd-dbias [--reps N]\n");
            return 2;
        }
    }
    if (reps < 3) reps = 3;
    const int N = 16384, OC = 3072;
    const size_t n = (size_t)N * OC;
    forge_backend *be = NULL;
    forge_runtime_options rt;
    forge_runtime_options_default(&rt);
    GB_FORGE(forge_backend_create(&be, FORGE_DEVICE_CUDA, &rt));
    cuda_ctx *ctx = cuda_get_ctx(be);
    cudaStream_t st = ctx->stream;
    forge_bf16 *x, *g, *d[2];
    float *db[2];
    GB_TRY(cudaMalloc(&x, n * sizeof(forge_bf16)));
    GB_TRY(cudaMalloc(&g, n * sizeof(forge_bf16)));
    for (int k = 0; k < 2; k++) {
        GB_TRY(cudaMalloc(&d[k], n * sizeof(forge_bf16)));
        GB_TRY(cudaMalloc(&db[k], OC * sizeof(float)));
    }
    gb_fill_kernel<<<1024, 256, 0, st>>>(x, n, 1.0f, 0.0f, 1);
    gb_fill_kernel<<<1024, 256, 0, st>>>(g, n, 1e-3f, 0.0f, 2);
    GB_TRY(cudaGetLastError());
    /* one call each from dbias = 0: dinp and dbias compared bitwise */
    for (int k = 0; k < 2; k++) {
        GB_TRY(cudaMemsetAsync(d[k], 0xff, n * sizeof(forge_bf16), st));
        GB_TRY(cudaMemsetAsync(db[k], 0, OC * sizeof(float), st));
        if (gbd_run(be, k, d[k], db[k], x, g, N, OC)) return 1;
    }
    GB_TRY(cudaStreamSynchronize(st));
    std::vector<forge_bf16> h0(n), h1(n);
    std::vector<float> b0(OC), b1(OC);
    GB_TRY(cudaMemcpy(h0.data(), d[0], n * sizeof(forge_bf16), cudaMemcpyDeviceToHost));
    GB_TRY(cudaMemcpy(h1.data(), d[1], n * sizeof(forge_bf16), cudaMemcpyDeviceToHost));
    GB_TRY(cudaMemcpy(b0.data(), db[0], OC * sizeof(float), cudaMemcpyDeviceToHost));
    GB_TRY(cudaMemcpy(b1.data(), db[1], OC * sizeof(float), cudaMemcpyDeviceToHost));
    const int same_d = memcmp(h0.data(), h1.data(), n * sizeof(forge_bf16)) == 0;
    const int same_b = memcmp(b0.data(), b1.data(), OC * sizeof(float)) == 0;
    cudaEvent_t e0, e1;
    GB_TRY(cudaEventCreate(&e0));
    GB_TRY(cudaEventCreate(&e1));
    std::vector<double> t[2];
    for (int r = -3; r < reps; r++)
        for (int k = 0; k < 2; k++) {
            GB_TRY(cudaEventRecord(e0, st));
            if (gbd_run(be, k, d[k], db[k], x, g, N, OC)) return 1;
            GB_TRY(cudaEventRecord(e1, st));
            GB_TRY(cudaEventSynchronize(e1));
            float ms = 0;
            GB_TRY(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0) t[k].push_back(1e3 * ms);
        }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    printf("gelu16-bwd-dbias (N = %d, OC = %d, x ~ N(0, 1)), median of %d interleaved rounds; dinp %s, dbias %s "
           "(fused vs two passes, bitwise)\n", N, OC, reps, same_d ? "PASS" : "FAIL", same_b ? "PASS" : "FAIL");
    printf("  %-10s %10s %9s %24s\n", "path", "us", "GB/s", "speedup [95% CI]");
    for (int k = 0; k < 2; k++) {
        std::vector<double> ratio;
        for (int i = 0; i < reps; i++) ratio.push_back(t[0][i] / t[k][i]);
        double lo, hi;
        lab_median_ci(ratio, &lo, &hi);
        const double us = lab_median(t[k]);
        /* bytes: the fused pass reads x and dout and writes dinp; the two passes read dinp once more */
        printf("  %-10s %10.1f %9.0f %8.3fx [%.3f, %.3f]\n", k == 0 ? "two-pass" : "fused", us,
               (k == 0 ? 4.0 : 3.0) * n * 2 / us * 1e-3, lab_median(ratio), lo, hi);
    }
    cudaFree(x);
    cudaFree(g);
    for (int k = 0; k < 2; k++) {
        cudaFree(d[k]);
        cudaFree(db[k]);
    }
    forge_backend_destroy(be);
    return same_d && same_b ? 0 : 1;
}
