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
 * `forge-lab bench gelu16-bwd-dbias [--reps N]`: the MLP's fc layer at N = 16384, OC = 3072 (gpt2-124m) and 4096
 * (gpt-200m), and at N = 9000, OC = 1000 (x ~ N(0, 1), dout N(0, 1e-3^2)): the GELU backward writing dinp with the
 * bias gradient's row-chunk partials, then reduce.cu's ordered finish into dbias. Contenders:
 *   v0        the fused kernel with one row per thread per iteration (lab/elementwise/colsum16_v0.cuh), the
 *             product's grid form (SMs x its resident blocks, at most one block per work item), then the finish
 *   op        gelu_backward_dbias_bf16 itself (gelu_grad_table.cuh's kernel: U = GELU_DBIAS_UNROLL rows read per
 *             loop body)
 *   two-pass  gelu_backward_bf16 then matmul_backward_weight_bf16's bias gradient (C = 0), the unfused form
 *   U=u       the product kernel instantiated with u rows read per loop body (U = 1 with the product's register
 *             bound, U = 4 and 8 without one), the same grid form, then the finish
 * It times the contenders interleaved round by round, the L2 flushed (a 256 MB memset) before each run outside the
 * timing, and print the median us, the bandwidth it implies (bf16 bytes read and written), the median per-round
 * ratio v0 / this with a 95% bootstrap CI and whether dinp, the partials (ctx->ws for the ops) and dbias equal v0's
 * bitwise, from a first run from dbias = 0 (PASS/FAIL; exit 1 on FAIL).
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
#include "colsum16_v0.cuh"
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

/* ---- gelu16-bwd-dbias: the bf16 column sums ---------------------------------------------------------------------- */

#define GBD_FLUSH_BYTES ((size_t)256 << 20) /* a memset this large between timed runs evicts the 60 MB L2 */
#define GBD_MAX_K 8

/* One bench's state: the backend, the shape and its row chunks, the inputs, per contender k its dinp (gelu), its own
 * partials buffer (the lab's launches; the ops write ctx->ws) and dbias. */
typedef struct {
    forge_backend *be;
    cuda_ctx *ctx;
    cudaStream_t st;
    int N, OC, R, rows_per_chunk;
    forge_bf16 *x, *g; /* gelu: pre-activation and dout */
    forge_bf16 *d[GBD_MAX_K];
    float *part[GBD_MAX_K], *db[GBD_MAX_K];
    int grid[GBD_MAX_K]; /* the lab's gelu launches: gbd_grid's, found once */
    void *flush;
} gbd_env;

/* The grid the product gives a kernel of the gelu form: SMs x its resident blocks, at most one block per item. */
template <typename K>
static int gbd_grid(const gbd_env *e, K kernel, int *per_sm) {
    int k = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&k, kernel, 32 * GELU_DBIAS_ROWS, 0) != cudaSuccess || k < 1)
        k = 1;
    *per_sm = k;
    const int items = (e->OC + 255) / 256 * e->R, grid = e->ctx->num_sms * k;
    return grid < items ? grid : items;
}

/* gelu16-bwd-dbias's contenders: 0 v0 (colsum16_v0.cuh, then the finish), 1 the op, 2 the two passes, then the
 * product kernel instantiated with other row unrolls U (then the finish): U = 1 within the product's 64 registers,
 * U = 4 and 8 with no minimum of blocks (MIN_BLOCKS = 0: 72 and 118 registers, 3 and 2 blocks per SM). Where the
 * partials went: *part. */
typedef void (*gbd_kernel)(forge_bf16 *, float *, const forge_bf16 *, const forge_bf16 *, int, int, int, int,
                           const float *);
static const int gbd_unrolls[] = {1, 4, 8};
static const gbd_kernel gbd_kernels[] = {gelu_backward_dbias_bf16_kernel<1, GELU_DBIAS_MIN_BLOCKS>,
                                         gelu_backward_dbias_bf16_kernel<4, 0>, gelu_backward_dbias_bf16_kernel<8, 0>};

static int gbd_gelu_run(gbd_env *e, int k, const float **part) {
    const int N = e->N, OC = e->OC, R = e->R, rpc = e->rows_per_chunk;
    int per_sm = 0;
    *part = e->part[k];
    if (k == 0) {
        if (!e->grid[k]) e->grid[k] = gbd_grid(e, gbd0_gelu_backward_dbias_kernel, &per_sm);
        gbd0_gelu_backward_dbias_kernel<<<e->grid[k], dim3(32, GELU_DBIAS_ROWS), 0, e->st>>>(
            e->d[k], e->part[k], e->x, e->g, N, OC, R, rpc, e->ctx->gelu_grad_table);
    } else if (k == 1) {
        *part = e->ctx->ws;
        GB_FORGE(e->be->gelu_backward_dbias_bf16(e->be, e->d[k], e->db[k], e->x, e->g, N, OC));
        return 0;
    } else if (k == 2) {
        *part = e->ctx->ws;
        GB_FORGE(e->be->gelu_backward_bf16(e->be, e->d[k], e->x, e->g, (size_t)N * OC, 0));
        GB_FORGE(e->be->matmul_backward_weight_bf16(e->be, NULL, e->db[k], e->d[k], NULL, N, 0, OC));
        return 0;
    } else {
        const gbd_kernel kern = gbd_kernels[k - 3];
        if (!e->grid[k]) e->grid[k] = gbd_grid(e, kern, &per_sm);
        kern<<<e->grid[k], dim3(32, GELU_DBIAS_ROWS), 0, e->st>>>(
            e->d[k], e->part[k], e->x, e->g, N, OC, R, rpc, e->ctx->gelu_grad_table);
    }
    GB_TRY(cudaGetLastError());
    GB_FORGE(cuda_colsum_finish(e->ctx, e->db[k], e->part[k], R, OC));
    return 0;
}

typedef int (*gbd_run_fn)(gbd_env *e, int k, const float **part);

/* Runs contenders 0..nk-1 once from dbias = 0 and compares each one's dinp (if gelu), partials and dbias with
 * contender 0's bitwise (same[k] = 1 when all equal), then times them interleaved round by round, the L2 flushed
 * before each run (outside the timing); us[k] = the per-round times. */
static int gbd_measure(gbd_env *e, gbd_run_fn run, int nk, int gelu, int reps, int same[], std::vector<double> us[]) {
    const size_t n = (size_t)e->N * e->OC, np = (size_t)e->R * e->OC;
    std::vector<forge_bf16> d0(gelu ? n : 0), dk(gelu ? n : 0);
    std::vector<float> p0(np), pk(np), b0(e->OC), bk(e->OC);
    for (int k = 0; k < nk; k++) {
        const float *part = NULL;
        if (gelu) GB_TRY(cudaMemsetAsync(e->d[k], 0xff, n * sizeof(forge_bf16), e->st));
        GB_TRY(cudaMemsetAsync(e->db[k], 0, e->OC * sizeof(float), e->st));
        if (run(e, k, &part)) return 1;
        GB_TRY(cudaStreamSynchronize(e->st));
        std::vector<forge_bf16> &hd = k == 0 ? d0 : dk;
        std::vector<float> &hp = k == 0 ? p0 : pk, &hb = k == 0 ? b0 : bk;
        if (gelu) GB_TRY(cudaMemcpy(hd.data(), e->d[k], n * sizeof(forge_bf16), cudaMemcpyDeviceToHost));
        GB_TRY(cudaMemcpy(hp.data(), part, np * sizeof(float), cudaMemcpyDeviceToHost));
        GB_TRY(cudaMemcpy(hb.data(), e->db[k], e->OC * sizeof(float), cudaMemcpyDeviceToHost));
        same[k] = k == 0 || ((!gelu || memcmp(dk.data(), d0.data(), n * sizeof(forge_bf16)) == 0) &&
                             memcmp(pk.data(), p0.data(), np * sizeof(float)) == 0 &&
                             memcmp(bk.data(), b0.data(), e->OC * sizeof(float)) == 0);
    }
    cudaEvent_t e0, e1;
    GB_TRY(cudaEventCreate(&e0));
    GB_TRY(cudaEventCreate(&e1));
    for (int r = -3; r < reps; r++)
        for (int k = 0; k < nk; k++) {
            const float *part = NULL;
            GB_TRY(cudaMemsetAsync(e->flush, r & 0xff, GBD_FLUSH_BYTES, e->st));
            GB_TRY(cudaEventRecord(e0, e->st));
            if (run(e, k, &part)) return 1;
            GB_TRY(cudaEventRecord(e1, e->st));
            GB_TRY(cudaEventSynchronize(e1));
            float ms = 0;
            GB_TRY(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0) us[k].push_back(1e3 * ms);
        }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 0;
}

/* one line per contender: median us, the bandwidth of bytes[k], the median per-round ratio v0 / this with a 95%
 * bootstrap CI, the bits against v0 */
static void gbd_print(int nk, const char *const names[], const double bytes[], const int same[], int reps,
                      std::vector<double> us[]) {
    printf("  %-10s %10s %9s %24s %s\n", "kernel", "us", "GB/s", "speedup [95% CI]", "bits vs v0");
    for (int k = 0; k < nk; k++) {
        std::vector<double> ratio;
        for (int i = 0; i < reps; i++) ratio.push_back(us[0][i] / us[k][i]);
        double lo, hi;
        lab_median_ci(ratio, &lo, &hi);
        const double t = lab_median(us[k]);
        printf("  %-10s %10.1f %9.0f %8.3fx [%.3f, %.3f] %s\n", names[k], t, bytes[k] / t * 1e-3, lab_median(ratio),
               lo, hi, k == 0 ? "-" : same[k] ? "PASS" : "FAIL");
    }
}

/* the backend, the shape's row chunks (the product's cuda_colsum_chunks), the inputs and nk contenders' buffers */
static int gbd_init(gbd_env *e, int N, int OC, int nk, int gelu) {
    memset(e, 0, sizeof *e);
    forge_runtime_options rt;
    forge_runtime_options_default(&rt);
    GB_FORGE(forge_backend_create(&e->be, FORGE_DEVICE_CUDA, &rt));
    e->ctx = cuda_get_ctx(e->be);
    e->st = e->ctx->stream;
    e->N = N;
    e->OC = OC;
    e->R = cuda_colsum_chunks(N, OC, 1);
    e->rows_per_chunk = (N + e->R - 1) / e->R;
    const size_t n = (size_t)N * OC;
    if (gelu) GB_TRY(cudaMalloc(&e->x, n * sizeof(forge_bf16)));
    GB_TRY(cudaMalloc(&e->g, n * sizeof(forge_bf16)));
    for (int k = 0; k < nk; k++) {
        if (gelu) GB_TRY(cudaMalloc(&e->d[k], n * sizeof(forge_bf16)));
        GB_TRY(cudaMalloc(&e->part[k], (size_t)e->R * OC * sizeof(float)));
        GB_TRY(cudaMalloc(&e->db[k], OC * sizeof(float)));
    }
    GB_TRY(cudaMalloc(&e->flush, GBD_FLUSH_BYTES));
    if (gelu) gb_fill_kernel<<<1024, 256, 0, e->st>>>(e->x, n, 1.0f, 0.0f, 1);
    gb_fill_kernel<<<1024, 256, 0, e->st>>>(e->g, n, gelu ? 1e-3f : 1.0f, 0.0f, 2);
    GB_TRY(cudaGetLastError());
    return 0;
}

static void gbd_free(gbd_env *e) {
    cudaFree(e->x);
    cudaFree(e->g);
    for (int k = 0; k < GBD_MAX_K; k++) {
        cudaFree(e->d[k]);
        cudaFree(e->part[k]);
        cudaFree(e->db[k]);
    }
    cudaFree(e->flush);
    forge_backend_destroy(e->be);
}

static int gbd_reps(int argc, char **argv, const char *name, int *reps) {
    *reps = 30;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            *reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: forge-lab bench %s [--reps N]\n", name);
            return 2;
        }
    }
    if (*reps < 3) *reps = 3;
    return 0;
}

extern "C" int lab_bench_gelu16_bwd_dbias(int argc, char **argv) {
    int reps;
    if (gbd_reps(argc, argv, "gelu16-bwd-dbias", &reps)) return 2;
    /* gpt2-124m's fc layer, gpt-200m's, and a shape whose work items do not fill the grid's rounds evenly */
    static const int shapes[][2] = {{16384, 3072}, {16384, 4096}, {9000, 1000}};
    const int nu = (int)(sizeof gbd_unrolls / sizeof gbd_unrolls[0]), nk = 3 + nu;
    int rc = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0] && rc == 0; s++) {
        const int N = shapes[s][0], OC = shapes[s][1];
        gbd_env e;
        if (gbd_init(&e, N, OC, nk, 1)) return 1;
        const double n = (double)N * OC;
        const char *names[GBD_MAX_K] = {"v0", "op", "two-pass"};
        char unames[GBD_MAX_K][16];
        double bytes[GBD_MAX_K];
        for (int k = 0; k < nk; k++) bytes[k] = (k == 2 ? 4.0 : 3.0) * n * 2; /* two passes: dinp read once more */
        printf("gelu16-bwd-dbias (N = %d, OC = %d, x ~ N(0, 1)): %d row chunks of %d, %d work items; resident blocks "
               "per SM: v0 ",
               N, OC, e.R, e.rows_per_chunk, (OC + 255) / 256 * e.R);
        int per_sm = 0;
        gbd_grid(&e, gbd0_gelu_backward_dbias_kernel, &per_sm);
        printf("%d, op (U = %d) %d", per_sm, GELU_DBIAS_UNROLL, e.ctx->gelu_dbias_blocks_per_sm);
        for (int i = 0; i < nu; i++) {
            snprintf(unames[i], sizeof unames[i], "U=%d", gbd_unrolls[i]);
            names[3 + i] = unames[i];
            gbd_grid(&e, gbd_kernels[i], &per_sm);
            printf(", U = %d %d", gbd_unrolls[i], per_sm);
        }
        printf("\nmedian of %d interleaved rounds, L2 flushed before each run; bits: dinp, partials and dbias vs "
               "v0\n",
               reps);
        int same[GBD_MAX_K];
        std::vector<double> us[GBD_MAX_K];
        rc = gbd_measure(&e, gbd_gelu_run, nk, 1, reps, same, us);
        if (rc == 0) {
            gbd_print(nk, names, bytes, same, reps, us);
            for (int k = 1; k < nk; k++) rc |= !same[k];
        }
        gbd_free(&e);
    }
    return rc;
}
