/*
 * bench_pp_bf16_epi.cu: `forge-lab bench pp-bf16-epi [--reps N]`: forge_gemm_bf16_nt_epi's bf16 forward GEMMs on
 * the two kernels that can run them: the cooperative kernel with the TMA-store epilogue (forced:
 * lab_gemm_bf16_nt_epi_store, what forge_gemm_bf16_nt_epi ran before the bf16 ping-pong epilogues) and the default
 * entry, which runs them on the bf16 ping-pong kernel (forge_gemm_bf16_nt_pp_bf16), timed interleaved round by
 * round (the order of the two alternating every round; 3 warm-up rounds) on the same operands, at the forward
 * shapes of gpt2-124m (16 x 1024 rows: qkv, attention projection, MLP fc with bias + GELU + pre_out, MLP
 * projection, all with a bias) and gpt-25m (16384 rows, no bias: qkv, the two MLP input GEMMs, the MLP output, the
 * attention projection), after check-only tail shapes (odd M, N = 8 / 72 / 200, K = 8 / 136 / 3000). Per shape:
 * the median us of each, TFLOP/s (2 M N K), the median per-round ratio cooperative / ping-pong (> 1: the ping-pong
 * kernel is faster) with a 95% bootstrap CI, and PASS when the ping-pong kernel's C (and pre_out) are bitwise the
 * cooperative kernel's (random bf16 operands and bias; FAIL otherwise, and the command exits 1).
 * Measurements: lab/notes/gemm-bf16.md.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#include "../lab_fill.cuh"
#include "../lab_stats.h"
extern "C" {
#include "gemm_bf16_variants.h"
}

#define PPB_TRY(x)                                                                                                 \
    do {                                                                                                           \
        cudaError_t e_ = (x);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "forge-lab bench pp-bf16-epi: %s: %s\n", #x, cudaGetErrorString(e_));                \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

#define PPB_FTRY(x)                                                                                                \
    do {                                                                                                           \
        forge_status s_ = (x);                                                                                     \
        if (s_ != FORGE_OK) {                                                                                      \
            fprintf(stderr, "forge-lab bench pp-bf16-epi: %s: %s\n", #x, forge_error_message());                 \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

struct ppb_shape {
    const char *name;
    int M, N, K, bias, gelu, pre;
};

__global__ void ppb_fill_f32(float *x, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + 1 + (seed << 40)) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z ^= z >> 31;
        x[i] = (float)(z >> 40) * (1.0f / 16777216.0f) - 0.5f;
    }
}

/* *bad += the 16-byte vectors where a and b differ */
__global__ void ppb_diff(unsigned long long *bad, const uint4 *a, const uint4 *b, size_t n) {
    unsigned long long k = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 p = a[i], q = b[i];
        k += p.x != q.x || p.y != q.y || p.z != q.z || p.w != q.w;
    }
    if (k) atomicAdd(bad, k);
}


/* k = 0: the cooperative kernel (TMA store forced), 1: the default entry (the ping-pong kernel) */
static forge_status ppb_run(int k, const void *A, const void *B, void *C, const ppb_shape &s,
                            const forge_gemm_epilogue *e) {
    return k == 0 ? lab_gemm_bf16_nt_epi_store(A, B, C, s.M, s.N, s.K, e, 1, NULL)
                  : forge_gemm_bf16_nt_epi(A, B, C, s.M, s.N, s.K, e, NULL, 0);
}

/* reps 0: the bitwise check alone; *pass_out: PASS / FAIL */
static int ppb_shape_run(const ppb_shape &s, int reps, int *pass_out) {
    const size_t an = (size_t)s.M * s.K, bn = (size_t)s.N * s.K, cn = (size_t)s.M * s.N;
    uint16_t *A, *B, *C[2], *P[2];
    float *bias;
    unsigned long long *bad;
    PPB_TRY(cudaMalloc(&A, an * 2));
    PPB_TRY(cudaMalloc(&B, bn * 2));
    PPB_TRY(cudaMalloc(&bias, (size_t)s.N * 4));
    PPB_TRY(cudaMalloc(&bad, sizeof *bad));
    for (int k = 0; k < 2; k++) {
        PPB_TRY(cudaMalloc(&C[k], cn * 2));
        PPB_TRY(cudaMalloc(&P[k], cn * 2));
        PPB_TRY(cudaMemset(C[k], 0xFF, cn * 2)); /* NaN: an element never written differs */
        PPB_TRY(cudaMemset(P[k], 0xFF, cn * 2));
    }
    lab_fill_bf16<<<1024, 256>>>(A, an, 1, 1.0f);
    lab_fill_bf16<<<1024, 256>>>(B, bn, 2, 0.125f);
    ppb_fill_f32<<<64, 256>>>(bias, (size_t)s.N, 3);
    PPB_TRY(cudaGetLastError());
    forge_gemm_epilogue e[2];
    for (int k = 0; k < 2; k++) {
        memset(&e[k], 0, sizeof e[k]);
        e[k].bias = s.bias ? bias : NULL;
        e[k].gelu = s.gelu;
        e[k].pre_out = s.pre ? P[k] : NULL;
        e[k].out_bf16 = 1;
    }
    if (strcmp(forge_gemm_bf16_epi_store(0, C[1], s.N, &e[1]), "tma") != 0) {
        fprintf(stderr, "forge-lab bench pp-bf16-epi: %s: the default entry does not take the TMA store\n", s.name);
        return 1;
    }
    /* the bits */
    for (int k = 0; k < 2; k++) PPB_FTRY(ppb_run(k, A, B, C[k], s, &e[k]));
    PPB_TRY(cudaDeviceSynchronize());
    unsigned long long nbad = 0;
    PPB_TRY(cudaMemset(bad, 0, sizeof *bad));
    ppb_diff<<<1024, 256>>>(bad, (const uint4 *)C[0], (const uint4 *)C[1], cn / 8); /* N % 8 == 0 */
    if (s.pre) ppb_diff<<<1024, 256>>>(bad, (const uint4 *)P[0], (const uint4 *)P[1], cn / 8);
    PPB_TRY(cudaGetLastError());
    PPB_TRY(cudaMemcpy(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost));
    *pass_out = nbad == 0;
    const char *epi = s.gelu ? (s.pre ? (s.bias ? "bias+gelu+pre" : "gelu+pre") : (s.bias ? "bias+gelu" : "gelu"))
                             : (s.bias ? "bias" : "plain");
    if (reps == 0) {
        printf("  %-22s %6d x %5d x %5d %-14s bits %s (%llu 16-byte vectors differ)\n", s.name, s.M, s.N, s.K, epi,
               nbad == 0 ? "PASS" : "FAIL", nbad);
    } else {
        cudaEvent_t e0, e1;
        PPB_TRY(cudaEventCreate(&e0));
        PPB_TRY(cudaEventCreate(&e1));
        std::vector<double> t[2];
        for (int r = -3; r < reps; r++)
            for (int j = 0; j < 2; j++) {
                const int k = (r & 1) ? 1 - j : j; /* alternate which goes first */
                PPB_TRY(cudaEventRecord(e0));
                PPB_FTRY(ppb_run(k, A, B, C[k], s, &e[k]));
                PPB_TRY(cudaEventRecord(e1));
                PPB_TRY(cudaEventSynchronize(e1));
                float ms = 0;
                PPB_TRY(cudaEventElapsedTime(&ms, e0, e1));
                if (r >= 0) t[k].push_back(1e3 * ms);
            }
        std::vector<double> ratio;
        for (int i = 0; i < reps; i++) ratio.push_back(t[0][i] / t[1][i]);
        double lo, hi;
        lab_median_ci(ratio, &lo, &hi);
        const double flop = 2.0 * s.M * s.N * s.K, uc = lab_median(t[0]), up = lab_median(t[1]);
        printf("  %-22s %6d x %5d x %5d %-14s %9.1f %7.1f %9.1f %7.1f %8.3fx [%.3f, %.3f] %s\n", s.name, s.M, s.N, s.K,
               epi, uc, flop / uc * 1e-6, up, flop / up * 1e-6, lab_median(ratio), lo, hi,
               nbad == 0 ? "PASS" : "FAIL");
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    for (int k = 0; k < 2; k++) cudaFree(C[k]), cudaFree(P[k]);
    cudaFree(A), cudaFree(B), cudaFree(bias), cudaFree(bad);
    return 0;
}

extern "C" int lab_bench_pp_bf16_epi(int argc, char **argv) {
    int reps = 30;
    const char *only = NULL; /* --only SUBSTRING: the timed shapes whose name holds it, no check-only shapes (ncu) */
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else {
            fprintf(stderr, "usage: forge-lab bench pp-bf16-epi [--reps N] [--only SUBSTRING]\n");
            return 2;
        }
    }
    if (reps < 3) reps = 3;
    /* check only: odd M (last row-blocks of 1 / 5 / 77 rows, second 64-row halves wholly outside), N = 8, 72, 200
     * (a tile + 72 columns), K = 8 (one stage), 136 (a K tail), 3000 */
    static const ppb_shape checks[] = {
        {"tail N=8 K=8", 257, 8, 8, 1, 1, 1},        {"tail N=72", 1001, 72, 768, 1, 1, 1},
        {"tail N=200 K=136", 517, 200, 136, 0, 1, 1}, {"tail N=72 K=3000", 129, 72, 3000, 1, 0, 0},
        {"tail gelu no pre", 333, 3072, 768, 1, 1, 0}, {"tail plain", 4173, 1408, 512, 0, 0, 0},
    };
    static const ppb_shape shapes[] = {
        {"gpt2-124m qkv", 16384, 2304, 768, 1, 0, 0},  {"gpt2-124m attn proj", 16384, 768, 768, 1, 0, 0},
        {"gpt2-124m mlp fc", 16384, 3072, 768, 1, 1, 1}, {"gpt2-124m mlp proj", 16384, 768, 3072, 1, 0, 0},
        {"gpt-25m qkv", 16384, 1536, 512, 0, 0, 0},    {"gpt-25m mlp in (x2)", 16384, 1408, 512, 0, 0, 0},
        {"gpt-25m mlp out", 16384, 512, 1408, 0, 0, 0}, {"gpt-25m attn proj", 16384, 512, 512, 0, 0, 0},
    };
    int rc = 0, pass = 0;
    printf("forge-lab bench pp-bf16-epi: bf16 C, cooperative (TMA store) vs ping-pong (the default entry)\n");
    printf("check only, bits vs the cooperative kernel:\n");
    for (const ppb_shape &s : checks) {
        if (only) break;
        if (ppb_shape_run(s, 0, &pass)) return 1;
        rc |= !pass;
    }
    printf("median of %d interleaved rounds:\n", reps);
    printf("  %-22s %-22s %-14s %9s %7s %9s %7s %24s %s\n", "shape", "M x N x K", "epilogue", "coop us", "TFLOP/s",
           "pp us", "TFLOP/s", "coop/pp [95% CI]", "bits");
    for (const ppb_shape &s : shapes) {
        if (only && !strstr(s.name, only)) continue;
        if (ppb_shape_run(s, reps, &pass)) return 1;
        rc |= !pass;
    }
    return rc;
}
