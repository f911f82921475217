/*
 * attention_cells.cu: `forge bench attention` (notes in
 * lab/notes/flash-attention.md, measurements in lab/notes/flash.md) and the
 * machinery it shares with the lab's attention suite (attention_cells.h).
 *
 * The suite's cells, per shape (B, H, T, D), causal, H = Hkv:
 * - "fwd ...": unfused_fp32_fwd (the CUDA backend's attention_forward on fp32
 *   packed qkv: materialised scores, the baseline) and flash_bf16_fwd_default
 *   (forge_flash_bf16_forward: the wgmma forward, mma.sync where it refuses);
 * - "fwd+bwd ...": unfused_fp32_fwdbwd (attention_forward + zeroing dqkv +
 *   attention_backward) and flash_bf16_fwdbwd_default (forge_flash_bf16_forward
 *   + forge_flash_bf16_backward).
 * The kernel variants' cells: `forge-lab bench attention-variants`.
 *
 * The decisions a reader would otherwise get wrong:
 * - Inputs Q, K, V, dO are uniform [-1, 1) from a stateless hash, rounded to
 *   bf16 ON THE HOST; the fp32 packed qkv / dO of the unfused cells are the
 *   same values converted exactly, so every cell and the reference see the
 *   same numbers.
 * - The float64 reference runs on the GPU (one warp per query row for out,
 *   lse, delta, dQ; one warp per key row for dK, dV; D = 64 or 128 only, the
 *   suite's shapes) over a deterministic SAMPLE of
 *   two (batch, head) slices, (0, 0) and (B-1, H-1): full T x T causal rows,
 *   every token of those slices. The gate compares only those slices (the
 *   whole slice, all of out / dQ / dK / dV): rel_err is the largest of the
 *   per-tensor relative Frobenius errors, and an element still holding the
 *   poison pattern (0xFFFF bf16, 0xFFFFFFFF fp32) counts as unwritten.
 * - bf16 cells use the bf16 tolerance (1e-2: P and dS are rounded to bf16
 *   for the second matmuls, out is bf16). The unfused fp32 cells override
 *   to 1e-4: their dQ/dK/dV are fp32 sums of length up to T = 4096 through
 *   the SIMT GEMM, whose rounding drift (~sqrt(T) ulps) can pass 1e-5.
 * - Everything runs on the CUDA backend's stream (the unfused ops have no
 *   other), so the timer's events order with every cell.
 * - One input set per shape: Q, K, V and dO together are >= 100 MB at every
 *   shape, twice the 50 MB L2.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" {
#include "../attention_bench.h"
#include "../harness.h"
#include "../harness_cuda.h"
#include "../../backend/backend.h"
#include "../../backend/cuda/flash_attention_bf16.h"
#include "../../base/rng.h"
}
#include "attention_cells.h"
#include "check_sums.cuh"
extern "C" {
#include "../coprocess.h"
}

#define AB_TRY(call)                                                                                \
    do {                                                                                            \
        cudaError_t ab_e_ = (call);                                                                 \
        if (ab_e_ != cudaSuccess)                                                                   \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__, \
                               cudaGetErrorString(ab_e_));                                          \
    } while (0)

#define AB_SLICES 2

/* ---- float64 reference over one (b, h) slice --------------------------------------- */

__device__ __forceinline__ double ab_bf(const uint16_t *p, size_t i) {
    return (double)__uint_as_float((uint32_t)p[i] << 16);
}

/* One WARP per row; lane l holds elements d = l + 32u (u < D/32) of a row, so
 * a dot product is D/32 FMAs plus a 5-level shuffle: a thread-per-row loop
 * would be a 128-long dependent FMA chain per key (seconds at T = 4096). */
template <int D> __device__ __forceinline__ double ab_dot(const double (&a)[D / 32], const uint16_t *p, size_t at,
                                                          int lane) {
    double s = 0.0;
#pragma unroll
    for (int u = 0; u < D / 32; u++) s += a[u] * ab_bf(p, at + lane + 32 * u);
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
    return s;
}

/* warp per query row i: out, lse, delta = dO.out, dQ (slice-local (T, D) doubles) */
template <int D>
__global__ void __launch_bounds__(128)
    ab_ref_rows_kernel(const uint16_t *__restrict__ q, const uint16_t *__restrict__ k, const uint16_t *__restrict__ v,
                       const uint16_t *__restrict__ dO, int T, int H, int b, int h, double scale,
                       double *__restrict__ out, double *__restrict__ dq, double *__restrict__ lse,
                       double *__restrict__ delta) {
    constexpr int U = D / 32;
    const int i = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (i >= T) return;
    const size_t qi = (((size_t)b * T + i) * H + h) * D;
    double qr[U], dor[U], o[U], g[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        qr[u] = ab_bf(q, qi + lane + 32 * u);
        dor[u] = ab_bf(dO, qi + lane + 32 * u);
        o[u] = g[u] = 0.0;
    }
    double m = -INFINITY;
    for (int j = 0; j <= i; j++) m = fmax(m, ab_dot<D>(qr, k, (((size_t)b * T + j) * H + h) * D, lane) * scale);
    double sum = 0.0;
    for (int j = 0; j <= i; j++) {
        const size_t kj = (((size_t)b * T + j) * H + h) * D;
        const double p = exp(ab_dot<D>(qr, k, kj, lane) * scale - m);
        sum += p;
#pragma unroll
        for (int u = 0; u < U; u++) o[u] += p * ab_bf(v, kj + lane + 32 * u);
    }
    double dl = 0.0;
#pragma unroll
    for (int u = 0; u < U; u++) {
        o[u] /= sum;
        dl += dor[u] * o[u];
    }
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) dl += __shfl_xor_sync(0xffffffffu, dl, x);
    const double ls = m + log(sum);
    for (int j = 0; j <= i; j++) {
        const size_t kj = (((size_t)b * T + j) * H + h) * D;
        const double p = exp(ab_dot<D>(qr, k, kj, lane) * scale - ls);
        const double ds = p * (ab_dot<D>(dor, v, kj, lane) - dl) * scale;
#pragma unroll
        for (int u = 0; u < U; u++) g[u] += ds * ab_bf(k, kj + lane + 32 * u);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        out[(size_t)i * D + lane + 32 * u] = o[u];
        dq[(size_t)i * D + lane + 32 * u] = g[u];
    }
    if (lane == 0) {
        lse[i] = ls;
        delta[i] = dl;
    }
}

/* warp per key row j: dK, dV from the rows' lse and delta */
template <int D>
__global__ void __launch_bounds__(128)
    ab_ref_cols_kernel(const uint16_t *__restrict__ q, const uint16_t *__restrict__ k, const uint16_t *__restrict__ v,
                       const uint16_t *__restrict__ dO, int T, int H, int b, int h, double scale,
                       const double *__restrict__ lse, const double *__restrict__ delta, double *__restrict__ dk,
                       double *__restrict__ dv) {
    constexpr int U = D / 32;
    const int j = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (j >= T) return;
    const size_t kj = (((size_t)b * T + j) * H + h) * D;
    double kr[U], vr[U], gk[U], gv[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        kr[u] = ab_bf(k, kj + lane + 32 * u);
        vr[u] = ab_bf(v, kj + lane + 32 * u);
        gk[u] = gv[u] = 0.0;
    }
    for (int i = j; i < T; i++) {
        const size_t qi = (((size_t)b * T + i) * H + h) * D;
        const double p = exp(ab_dot<D>(kr, q, qi, lane) * scale - lse[i]);
        const double ds = p * (ab_dot<D>(vr, dO, qi, lane) - delta[i]) * scale;
#pragma unroll
        for (int u = 0; u < U; u++) {
            gk[u] += ds * ab_bf(q, qi + lane + 32 * u);
            gv[u] += p * ab_bf(dO, qi + lane + 32 * u);
        }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        dk[(size_t)j * D + lane + 32 * u] = gk[u];
        dv[(size_t)j * D + lane + 32 * u] = gv[u];
    }
}

struct ab_sums {
    double d2, r2;
    unsigned long long unwritten;
};

/* sums += over the slice (b, h) of a (B, T, *, *) tensor: element (t, d) at
 * x[(b*T + t)*stride + off + d], bf16 or fp32, against ref (T, D) */
__global__ void __launch_bounds__(256)
    ab_check_kernel(ab_sums *sums, const void *__restrict__ x, int is_bf16, long long stride, long long off, int b,
                    int T, int D, const double *__restrict__ ref) {
    double d2 = 0.0, r2 = 0.0;
    unsigned long long un = 0;
    const size_t n = (size_t)T * D;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const size_t t = e / D, d = e % D;
        const size_t at = ((size_t)b * T + t) * (size_t)stride + (size_t)off + d;
        double val;
        if (is_bf16) {
            const uint16_t u = ((const uint16_t *)x)[at];
            un += u == 0xFFFFu;
            val = (double)__uint_as_float((uint32_t)u << 16);
        } else {
            const float f = ((const float *)x)[at];
            un += __float_as_uint(f) == 0xFFFFFFFFu;
            val = (double)f;
        }
        const double r = ref[e];
        d2 += (val - r) * (val - r);
        r2 += r * r;
    }
    bench_check_commit(sums, d2, r2, un);
}

/* packed fp32 qkv (B, T, 3*H*D) and fp32 dO from the bf16 tensors, exactly */
__global__ void ab_widen_kernel(float *__restrict__ qkv, float *__restrict__ dO32, const uint16_t *__restrict__ q,
                                const uint16_t *__restrict__ k, const uint16_t *__restrict__ v,
                                const uint16_t *__restrict__ dO, size_t tokens, int C) {
    const size_t n = tokens * C;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const size_t t = e / C, c = e % C;
        qkv[t * 3 * C + c] = __uint_as_float((uint32_t)q[e] << 16);
        qkv[t * 3 * C + C + c] = __uint_as_float((uint32_t)k[e] << 16);
        qkv[t * 3 * C + 2 * C + c] = __uint_as_float((uint32_t)v[e] << 16);
        dO32[e] = __uint_as_float((uint32_t)dO[e] << 16);
    }
}

/* ---- one shape ---------------------------------------------------------------------- */

typedef struct {
    int B, H, T, D;
    cudaStream_t stream;
    forge_backend *be;
    uint16_t *q, *k, *v, *dO;       /* (B, T, H, D) bf16 */
    uint16_t *out;                  /* flash out (B, T, H, D) bf16 */
    float *lse, *delta, *dq, *dk, *dv; /* flash */
    float *qkv32, *dO32, *out32, *att, *scratch, *dqkv; /* unfused */
    double *ref[AB_SLICES][4];      /* out, dq, dk, dv per slice, (T, D) */
    double *rlse, *rdelta;          /* (T) scratch of the reference */
    ab_sums *sums;
} ab_shape;

/* A cell of a suite: the unfused fp32 baseline of a group, or a flash cell of the suite's list. */
typedef enum { AB_UNFUSED_FWD = 0, AB_UNFUSED_FWDBWD, AB_FLASH } ab_kind;

typedef struct {
    ab_shape *sh;
    ab_kind kind;
    const forge_attention_cell *flash; /* AB_FLASH */
} ab_cell;

static int ab_is_flash(const ab_cell *c) { return c->kind == AB_FLASH; }
static int ab_is_bwd(const ab_cell *c) { return c->kind == AB_UNFUSED_FWDBWD || (c->kind == AB_FLASH && c->flash->bwd); }

static void ab_shape_free(ab_shape *sh) {
    void *ps[] = {sh->q,    sh->k,     sh->v,    sh->dO,      sh->out,  sh->lse,  sh->delta, sh->dq, sh->dk,
                  sh->dv,   sh->qkv32, sh->dO32, sh->out32,   sh->att,  sh->scratch, sh->dqkv, sh->rlse,
                  sh->rdelta, sh->sums};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) cudaFree(ps[i]);
    for (int s = 0; s < AB_SLICES; s++)
        for (int t = 0; t < 4; t++) cudaFree(sh->ref[s][t]);
    cudaStream_t st = sh->stream;
    forge_backend *be = sh->be;
    memset(sh, 0, sizeof *sh);
    sh->stream = st;
    sh->be = be;
}

static uint16_t ab_to_bf16(float f) { /* nearest even; inputs are finite */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static void ab_slice(const ab_shape *sh, int s, int *b, int *h) {
    *b = s == 0 ? 0 : sh->B - 1;
    *h = s == 0 ? 0 : sh->H - 1;
}

/* unfused = 0 (the paired run) skips the unfused path's buffers: its two (B, H, T, T) fp32 score arrays are 17 GB at
 * (8, 16, 4096, 128) */
static forge_status ab_shape_init(ab_shape *sh, int B, int H, int T, int D, uint64_t seed, int unfused) {
    sh->B = B, sh->H = H, sh->T = T, sh->D = D;
    const size_t n = (size_t)B * T * H * D, nl = (size_t)B * H * T, tt = (size_t)B * H * T * T;
    cudaError_t e = cudaSuccess;
    uint16_t **ins[4] = {&sh->q, &sh->k, &sh->v, &sh->dO};
    uint16_t *host = (uint16_t *)malloc(n * sizeof(uint16_t));
    if (!host) return forge_error(FORGE_ERR_OOM, "attention bench: no host memory for %zu bf16 inputs", n);
    for (int i = 0; i < 4 && e == cudaSuccess; i++) {
        const uint64_t key = forge_hash64(seed ^ forge_hash64((uint64_t)i + 0x9E3779B97F4A7C15ull));
#pragma omp parallel for schedule(static)
        for (long long x = 0; x < (long long)n; x++) {
            const uint64_t r = forge_hash64(key + (uint64_t)x);
            host[x] = ab_to_bf16(2.0f * ((float)(r >> 40) * (1.0f / 16777216.0f)) - 1.0f);
        }
        e = cudaMalloc((void **)ins[i], n * 2);
        if (e == cudaSuccess) e = cudaMemcpy(*ins[i], host, n * 2, cudaMemcpyHostToDevice);
    }
    free(host);
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->out, n * 2);
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->lse, nl * 4);
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->delta, FORGE_FLASH_BF16_BWD_SCRATCH(B, H, T, D) * 4);
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->dq, n * 4);
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->dk, n * 4);
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->dv, n * 4);
    if (e == cudaSuccess && unfused) e = cudaMalloc((void **)&sh->qkv32, 3 * n * 4);
    if (e == cudaSuccess && unfused) e = cudaMalloc((void **)&sh->dO32, n * 4);
    if (e == cudaSuccess && unfused) e = cudaMalloc((void **)&sh->out32, n * 4);
    if (e == cudaSuccess && unfused) e = cudaMalloc((void **)&sh->att, tt * 4);
    if (e == cudaSuccess && unfused) e = cudaMalloc((void **)&sh->scratch, tt * 4);
    if (e == cudaSuccess && unfused) e = cudaMalloc((void **)&sh->dqkv, 3 * n * 4);
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->rlse, (size_t)T * 8);
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->rdelta, (size_t)T * 8);
    if (e == cudaSuccess) e = cudaMalloc((void **)&sh->sums, sizeof(ab_sums));
    for (int s = 0; s < AB_SLICES && e == cudaSuccess; s++)
        for (int t = 0; t < 4 && e == cudaSuccess; t++) e = cudaMalloc((void **)&sh->ref[s][t], (size_t)T * D * 8);
    if (e != cudaSuccess) {
        ab_shape_free(sh);
        return forge_error(e == cudaErrorMemoryAllocation ? FORGE_ERR_OOM : FORGE_ERR_DEVICE,
                           "attention bench: buffers of B=%d H=%d T=%d D=%d (scores of the unfused path: %zu "
                           "floats twice): %s",
                           B, H, T, D, tt, cudaGetErrorString(e));
    }
    if (unfused)
        ab_widen_kernel<<<2048, 256, 0, sh->stream>>>(sh->qkv32, sh->dO32, sh->q, sh->k, sh->v, sh->dO,
                                                      (size_t)B * T, H * D);
    const double scale = 1.0 / sqrt((double)D);
    const unsigned blocks = (unsigned)((T + 3) / 4); /* 4 warps, a row each */
    for (int s = 0; s < AB_SLICES; s++) {
        int b, h;
        ab_slice(sh, s, &b, &h);
        if (D == 64) {
            ab_ref_rows_kernel<64><<<blocks, 128, 0, sh->stream>>>(sh->q, sh->k, sh->v, sh->dO, T, H, b, h, scale,
                                                                   sh->ref[s][0], sh->ref[s][1], sh->rlse,
                                                                   sh->rdelta);
            ab_ref_cols_kernel<64><<<blocks, 128, 0, sh->stream>>>(sh->q, sh->k, sh->v, sh->dO, T, H, b, h, scale,
                                                                   sh->rlse, sh->rdelta, sh->ref[s][2],
                                                                   sh->ref[s][3]);
        } else {
            ab_ref_rows_kernel<128><<<blocks, 128, 0, sh->stream>>>(sh->q, sh->k, sh->v, sh->dO, T, H, b, h, scale,
                                                                    sh->ref[s][0], sh->ref[s][1], sh->rlse,
                                                                    sh->rdelta);
            ab_ref_cols_kernel<128><<<blocks, 128, 0, sh->stream>>>(sh->q, sh->k, sh->v, sh->dO, T, H, b, h, scale,
                                                                    sh->rlse, sh->rdelta, sh->ref[s][2],
                                                                    sh->ref[s][3]);
        }
    }
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaStreamSynchronize(sh->stream);
    if (e != cudaSuccess) {
        ab_shape_free(sh);
        return forge_error(FORGE_ERR_DEVICE, "attention bench: float64 reference (B=%d H=%d T=%d D=%d): %s", B, H,
                           T, D, cudaGetErrorString(e));
    }
    return FORGE_OK;
}

/* ---- cell callbacks ------------------------------------------------------------------ */

static forge_flash_shape ab_flash_shape(const ab_shape *sh) {
    const long long C = (long long)sh->H * sh->D;
    forge_flash_shape fs = {sh->B, sh->T, sh->T, sh->H, sh->H, sh->D, C, C, C, C};
    return fs;
}

static forge_status ab_poison(void *ctx) {
    ab_cell *c = (ab_cell *)ctx;
    ab_shape *sh = c->sh;
    const size_t n = (size_t)sh->B * sh->T * sh->H * sh->D;
    if (ab_is_bwd(c) && c->kind != AB_UNFUSED_FWDBWD) {
        AB_TRY(cudaMemsetAsync(sh->dq, 0xFF, n * 4, sh->stream));
        AB_TRY(cudaMemsetAsync(sh->dk, 0xFF, n * 4, sh->stream));
        AB_TRY(cudaMemsetAsync(sh->dv, 0xFF, n * 4, sh->stream));
    }
    if (ab_is_flash(c))
        AB_TRY(cudaMemsetAsync(sh->out, 0xFF, n * 2, sh->stream));
    else /* unfused: dqkv is zeroed by the run itself (attention_backward accumulates) */
        AB_TRY(cudaMemsetAsync(sh->out32, 0xFF, n * 4, sh->stream));
    return FORGE_OK;
}

static forge_status ab_run(void *ctx, int set) {
    (void)set;
    ab_cell *c = (ab_cell *)ctx;
    ab_shape *sh = c->sh;
    forge_backend *be = sh->be;
    const size_t n = (size_t)sh->B * sh->T * sh->H * sh->D;
    switch (c->kind) {
    case AB_FLASH: {
        const forge_attention_io io = {ab_flash_shape(sh), sh->q, sh->k,     sh->v,  sh->dO, sh->out,
                                       sh->lse,            sh->delta, sh->dq, sh->dk, sh->dv, sh->stream};
        return c->flash->run(&io);
    }
    case AB_UNFUSED_FWD:
        return be->attention_forward(be, sh->out32, sh->att, sh->qkv32, sh->B, sh->T, sh->H, sh->H, sh->D);
    case AB_UNFUSED_FWDBWD:
        FORGE_TRY(be->attention_forward(be, sh->out32, sh->att, sh->qkv32, sh->B, sh->T, sh->H, sh->H, sh->D));
        AB_TRY(cudaMemsetAsync(sh->dqkv, 0, 3 * n * 4, sh->stream));
        return be->attention_backward(be, sh->dqkv, sh->scratch, sh->dO32, sh->qkv32, sh->att, sh->B, sh->T, sh->H,
                                      sh->H, sh->D);
    }
    return forge_error(FORGE_ERR_ARG, "attention bench: unknown cell kind %d", (int)c->kind);
}

/* relative Frobenius error of one tensor over one slice; *unwritten += poisoned elements */
static forge_status ab_check_one(ab_shape *sh, const void *x, int is_bf16, long long stride, long long off, int b,
                                 const double *ref, double *rel, unsigned long long *unwritten) {
    AB_TRY(cudaMemsetAsync(sh->sums, 0, sizeof(ab_sums), sh->stream));
    ab_check_kernel<<<256, 256, 0, sh->stream>>>(sh->sums, x, is_bf16, stride, off, b, sh->T, sh->D, ref);
    AB_TRY(cudaGetLastError());
    ab_sums hs;
    AB_TRY(cudaMemcpyAsync(&hs, sh->sums, sizeof hs, cudaMemcpyDeviceToHost, sh->stream));
    AB_TRY(cudaStreamSynchronize(sh->stream));
    *rel = hs.r2 > 0 ? sqrt(hs.d2 / hs.r2) : sqrt(hs.d2);
    *unwritten += hs.unwritten;
    return FORGE_OK;
}

static forge_status ab_check(void *ctx, double *rel_err, int *fully_written) {
    ab_cell *c = (ab_cell *)ctx;
    ab_shape *sh = c->sh;
    const long long HD = (long long)sh->H * sh->D;
    const int flash = ab_is_flash(c);
    const int bwd = ab_is_bwd(c);
    double worst = 0.0;
    unsigned long long un = 0;
    for (int s = 0; s < AB_SLICES; s++) {
        int b, h;
        ab_slice(sh, s, &b, &h);
        const long long ho = (long long)h * sh->D;
        for (int t = 0; t < (bwd ? 4 : 1); t++) {
            const void *x;
            int is_bf16 = 0;
            long long stride = HD, off = ho;
            if (flash) {
                x = t == 0 ? (const void *)sh->out : t == 1 ? (const void *)sh->dq
                                                 : t == 2 ? (const void *)sh->dk
                                                          : (const void *)sh->dv;
                is_bf16 = t == 0;
            } else if (t == 0) {
                x = sh->out32;
            } else { /* dqkv (B, T, 3*H*D): dq, dk, dv heads one after another */
                x = sh->dqkv;
                stride = 3 * HD;
                off = (t - 1) * HD + ho;
            }
            double rel = 0.0;
            FORGE_TRY(ab_check_one(sh, x, is_bf16, stride, off, b, sh->ref[s][t], &rel, &un));
            if (!(rel <= worst)) worst = rel; /* NaN propagates */
        }
    }
    *rel_err = worst;
    *fully_written = un == 0;
    return FORGE_OK;
}

/* ---- the suite ----------------------------------------------------------------------- */

static const int AB_SHAPES[][4] = {
    /* B, H, T, D (causal): issue 18's shapes, gpt2-124m's training shape first */
    {16, 12, 1024, 64},
    {64, 6, 512, 64},
    {64, 8, 1024, 64},
    {16, 16, 2048, 128},
    {8, 16, 4096, 128},
};
enum { AB_N_SHAPES = sizeof AB_SHAPES / sizeof AB_SHAPES[0] };

static const char *AB_RECIPE =
    "Q, K, V, dO (B,T,H,D): uniform [-1,1) from splitmix64(key(seed, tensor 0..3) + index) >> 40 / 2^24, rounded "
    "on the host to bf16 (nearest-even); unfused cells read the same values as fp32 (packed qkv, dO); reference: "
    "float64 causal attention forward/backward on the GPU over the slices (b,h) = (0,0) and (B-1,H-1)";

/* one cell through the harness; *bad counts cells that failed their gate */
static forge_status ab_cell_run(forge_harness *h, ab_cell *ctx, const char *name, const char *group, int baseline,
                                forge_precision prec, double tol, double flops, double bytes, int *bad) {
    forge_harness_cell cell;
    memset(&cell, 0, sizeof cell);
    cell.name = name;
    cell.group = group;
    cell.is_baseline = baseline;
    cell.precision = prec;
    cell.flops = flops;
    cell.bytes = bytes;
    cell.n_input_sets = 1;
    cell.ctx = ctx;
    cell.poison = ab_poison;
    cell.run = ab_run;
    cell.check = ab_check;
    cell.tolerance = tol;
    forge_cell_result res;
    memset(&res, 0, sizeof res);
    const forge_status s = forge_harness_run(h, &cell, &res);
    if (s == FORGE_OK && forge_cell_bad(&res)) (*bad)++;
    return s;
}

extern "C" forge_status forge_attention_suite_run(FILE *out, int reps, int quick, const char *suite,
                                                  const char *banner, const forge_attention_cell *cells,
                                                  int ncells) {
    const uint64_t seed = 20261130;
    const int nshapes = quick ? 2 : AB_N_SHAPES;
    char config[2048];
    int len = snprintf(config, sizeof config, "attention causal, H=Hkv, cells=unfused_fp32_fwd,unfused_fp32_fwdbwd");
    for (int c = 0; c < ncells && len < (int)sizeof config; c++)
        len += snprintf(config + len, sizeof config - (size_t)len, ",%s", cells[c].name);
    if (len < (int)sizeof config)
        len += snprintf(config + len, sizeof config - (size_t)len,
                        "; flops fwd 2*B*H*T^2*D, fwd+bwd 3.5x; shapes (B,H,T,D)=");
    for (int i = 0; i < nshapes && len < (int)sizeof config; i++)
        len += snprintf(config + len, sizeof config - (size_t)len, "%d,%d,%d,%d;", AB_SHAPES[i][0], AB_SHAPES[i][1],
                        AB_SHAPES[i][2], AB_SHAPES[i][3]);

    AB_TRY(cudaSetDevice(0));
    ab_shape sh;
    memset(&sh, 0, sizeof sh);
    forge_status s = forge_backend_create(&sh.be, FORGE_DEVICE_CUDA, NULL);
    if (s != FORGE_OK) return s;
    sh.stream = (cudaStream_t)forge_cuda_backend_stream(sh.be);
    forge_bench_timer timer;
    int have_timer = 0;
    forge_provenance prov;
    memset(&prov, 0, sizeof prov);
    forge_harness *h = NULL;
    int bad = 0;
    s = forge_cuda_bench_timer_create(&timer, sh.stream);
    if (s == FORGE_OK) have_timer = 1;
    if (s == FORGE_OK) s = forge_cuda_provenance(&prov, 0);
    if (s == FORGE_OK) {
        forge_harness_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.suite = suite;
        cfg.results_root = NULL; /* forge_harness_set_default_root, else "results" */
        cfg.config_text = config;
        cfg.input_recipe = AB_RECIPE;
        cfg.seed = seed;
        cfg.reps = reps;
        cfg.warmup = 10;
        cfg.out = out;
        s = forge_harness_open(&h, &cfg, &prov, &timer);
    }
    if (s == FORGE_OK)
        fprintf(out, "%s; gate: relative Frobenius error of out (+ dQ, dK, dV) vs float64 on two (b,h) slices + poison "
                     "count; PyTorch SDPA baselines: tools/sdpa_bench.py\n",
                banner);
    for (int i = 0; i < nshapes && s == FORGE_OK; i++) {
        const int B = AB_SHAPES[i][0], H = AB_SHAPES[i][1], T = AB_SHAPES[i][2], D = AB_SHAPES[i][3];
        s = ab_shape_init(&sh, B, H, T, D, seed + (uint64_t)i, 1);
        if (s != FORGE_OK) break;
        const double fwd = 2.0 * B * H * (double)T * T * D;
        const double nb = (double)B * T * H * D;
        char gf[128], gb[128];
        snprintf(gf, sizeof gf, "fwd B=%d H=%d T=%d D=%d", B, H, T, D);
        snprintf(gb, sizeof gb, "fwd+bwd B=%d H=%d T=%d D=%d", B, H, T, D);
        /* per group the unfused fp32 baseline (1e-4: justified at the top of the file), then the suite's cells */
        for (int bwd = 0; bwd < 2 && s == FORGE_OK; bwd++) {
            ab_cell base = {&sh, bwd ? AB_UNFUSED_FWDBWD : AB_UNFUSED_FWD, NULL};
            s = ab_cell_run(h, &base, bwd ? "unfused_fp32_fwdbwd" : "unfused_fp32_fwd", bwd ? gb : gf, 1,
                            FORGE_PREC_FP32, 1e-4, bwd ? 3.5 * fwd : fwd, bwd ? 4.0 * 10 * nb : 4.0 * 4 * nb, &bad);
            for (int c = 0; c < ncells && s == FORGE_OK; c++) {
                if (cells[c].bwd != bwd || (cells[c].only_d != 0 && cells[c].only_d != D)) continue;
                ab_cell ctx = {&sh, AB_FLASH, &cells[c]};
                s = ab_cell_run(h, &ctx, cells[c].name, bwd ? gb : gf, 0, FORGE_PREC_BF16, 0, bwd ? 3.5 * fwd : fwd,
                                bwd ? 2.0 * 9 * nb + 4.0 * 3 * nb : 2.0 * 4 * nb, &bad);
            }
        }
        ab_shape_free(&sh);
    }
    if (s == FORGE_OK) s = forge_cuda_provenance_end(forge_harness_provenance(h), 0);
    if (s == FORGE_OK) {
        s = forge_harness_close(h);
        h = NULL;
    }
    forge_harness_free(h);
    ab_shape_free(&sh);
    if (have_timer) forge_cuda_bench_timer_destroy(&timer);
    forge_backend_destroy(sh.be);
    if (s == FORGE_OK && bad > 0)
        s = forge_error(FORGE_ERR_NUMERIC, "%s bench: %d cell(s) failed or were garbage (see the table)", suite, bad);
    return s;
}

/* ---- `forge bench attention`: forge's defaults ---------------------------------------- */

static forge_status ab_default_fwd(const forge_attention_io *io) {
    return forge_flash_bf16_forward(&io->fs, io->q, io->k, io->v, io->out, io->lse, io->stream, 0);
}

static forge_status ab_default_fwdbwd(const forge_attention_io *io) {
    FORGE_TRY(forge_flash_bf16_forward(&io->fs, io->q, io->k, io->v, io->out, io->lse, io->stream, 0));
    return forge_flash_bf16_backward(&io->fs, io->q, io->k, io->v, io->out, io->dO, io->lse, io->delta, io->dq,
                                     io->dk, io->dv, io->stream);
}

extern "C" forge_status forge_bench_attention_cuda(FILE *out, int reps, int quick) {
    static const forge_attention_cell cells[] = {
        {"flash_bf16_fwd_default", 0, 0, ab_default_fwd},
        {"flash_bf16_fwdbwd_default", 1, 0, ab_default_fwdbwd},
    };
    return forge_attention_suite_run(out, reps, quick, "attention",
                                     "attention bench: causal, forge's bf16 flash attention (forge_flash_bf16_forward, "
                                     "_backward) vs forge's unfused fp32 attention",
                                     cells, (int)(sizeof cells / sizeof cells[0]));
}

/* ---- `forge bench attention --baseline CMD`: forge's defaults paired with another process ------------------------
 * The suite's shapes (AB_SHAPES: issue 18's). Per shape and mode (fwd, fwd+bwd): forge's default cell
 * is checked against the float64 reference once (the suite's gate, 1e-2), CMD --serve is told the case ("case B H T
 * D fwd|fwdbwd SEED": it builds its own inputs, checks them against its own float64 reference and answers "ok ERR",
 * "garbage ERR" or "failed WHY"), both warm up, then each round times K forge calls (one event pair each, the median)
 * and asks CMD for the median of K of its calls ("time K"), so both sides of a round see the same clocks and thermal
 * state. Then, in the same round, K calls back to back between one pair of events on each side ("b2b K": the
 * milliseconds per call): a call timed alone includes what its host side exposes (PyTorch's dispatch, forge's
 * launch), calls queued back to back leave the kernels' own time, which is what a training step sees. Reported:
 * the medians over rounds, TFLOP/s (forward 2 B H T^2 D causal, fwd+bwd 3.5x), and both per-round ratios baseline
 * ms / forge ms (> 1: forge faster) with the bootstrap 95% CI of the median. A baseline that does not answer "b2b"
 * (another CMD) gets the calls-alone ratio only. */

/* per-round samples of one paired case: calls alone (f, b, r) and back to back (fq, bq, rq), forge's K calls (fk) */
typedef struct {
    double *f, *b, *r, *fq, *bq, *rq, *fk;
} ab_paired_samples;

static forge_status ab_paired_case(FILE *out, forge_coprocess *cp, const forge_bench_timer *timer, ab_shape *sh,
                                   const forge_attention_cell *cell, uint64_t seed, int rounds, int per_round,
                                   const ab_paired_samples *sm, int *b2b) {
    double *f = sm->f, *b = sm->b, *r = sm->r, *fk = sm->fk;
    char line[1024];
    ab_cell ctx = {sh, AB_FLASH, cell};
    double rel = 0.0;
    int written = 0;
    FORGE_TRY(ab_poison(&ctx));
    FORGE_TRY(ab_run(&ctx, 0));
    FORGE_TRY(ab_check(&ctx, &rel, &written));
    const char *mode = cell->bwd ? "fwdbwd" : "fwd";
    snprintf(line, sizeof line, "case %d %d %d %d %s %llu", sh->B, sh->H, sh->T, sh->D, mode,
             (unsigned long long)seed);
    FORGE_TRY(forge_coprocess_send(cp, line));
    FORGE_TRY(forge_coprocess_recv(cp, line, sizeof line));
    char bstatus[64] = "";
    double berr = NAN;
    if (sscanf(line, "%63s %lf", bstatus, &berr) < 1 || (strcmp(bstatus, "ok") != 0 && strcmp(bstatus, "garbage") != 0))
        return forge_error(FORGE_ERR_DATA, "bench attention: the baseline answered \"%.200s\" to the case", line);
    for (int w = 0; w < 5; w++) FORGE_TRY(ab_run(&ctx, 0));
    for (int i = 0; i < rounds; i++) {
        for (int k = 0; k < per_round; k++) {
            FORGE_TRY(timer->start(timer->ctx));
            FORGE_TRY(ab_run(&ctx, 0));
            FORGE_TRY(timer->stop(timer->ctx, &fk[k]));
        }
        f[i] = forge_harness_median(fk, per_round);
        snprintf(line, sizeof line, "time %d", per_round);
        FORGE_TRY(forge_coprocess_send(cp, line));
        FORGE_TRY(forge_coprocess_recv(cp, line, sizeof line));
        if (sscanf(line, "%lf", &b[i]) != 1 || !(b[i] > 0))
            return forge_error(FORGE_ERR_DATA, "bench attention: the baseline answered \"%.200s\" to time", line);
        r[i] = b[i] / f[i];
        if (!*b2b) continue;
        FORGE_TRY(timer->start(timer->ctx));
        for (int k = 0; k < per_round; k++) FORGE_TRY(ab_run(&ctx, 0));
        FORGE_TRY(timer->stop(timer->ctx, &sm->fq[i]));
        sm->fq[i] /= per_round;
        snprintf(line, sizeof line, "b2b %d", per_round);
        FORGE_TRY(forge_coprocess_send(cp, line));
        FORGE_TRY(forge_coprocess_recv(cp, line, sizeof line));
        if (strncmp(line, "failed", 6) == 0) { /* a baseline without the command: calls alone only, from here on */
            *b2b = 0;
            continue;
        }
        if (sscanf(line, "%lf", &sm->bq[i]) != 1 || !(sm->bq[i] > 0))
            return forge_error(FORGE_ERR_DATA, "bench attention: the baseline answered \"%.200s\" to b2b", line);
        sm->rq[i] = sm->bq[i] / sm->fq[i];
    }
    const double fwd = 2.0 * sh->B * sh->H * (double)sh->T * sh->T * sh->D, flops = cell->bwd ? 3.5 * fwd : fwd;
    const double fm = forge_harness_median(f, rounds), bm = forge_harness_median(b, rounds);
    double lo = 0.0, hi = 0.0;
    forge_harness_bootstrap_ci(r, rounds, 7, 10000, &lo, &hi);
    const int ok = written && rel <= 1e-2 && strcmp(bstatus, "ok") == 0;
    fprintf(out, "%-7s (%2d,%2d,%4d,%3d) | forge %8.3f ms %6.1f TFLOP/s | baseline %8.3f ms %6.1f TFLOP/s | forge "
                 "speed-up %.3fx [%.3f, %.3f]",
            cell->bwd ? "fwd+bwd" : "fwd", sh->B, sh->H, sh->T, sh->D, fm, flops / fm * 1e-9, bm, flops / bm * 1e-9,
            forge_harness_median(r, rounds), lo, hi);
    if (*b2b) {
        forge_harness_bootstrap_ci(sm->rq, rounds, 7, 10000, &lo, &hi);
        fprintf(out, " | back to back: forge %8.3f ms, baseline %8.3f ms, speed-up %.3fx [%.3f, %.3f]",
                forge_harness_median(sm->fq, rounds), forge_harness_median(sm->bq, rounds),
                forge_harness_median(sm->rq, rounds), lo, hi);
    }
    fprintf(out, " | check forge %.1e%s, baseline %.1e %s\n", rel, written ? "" : " UNWRITTEN", berr, bstatus);
    fflush(out);
    return ok ? FORGE_OK : forge_error(FORGE_ERR_NUMERIC, "bench attention: %s (%d,%d,%d,%d) failed its check",
                                       cell->bwd ? "fwd+bwd" : "fwd", sh->B, sh->H, sh->T, sh->D);
}

extern "C" forge_status forge_bench_attention_paired_cuda(FILE *out, const char *command, int rounds, int per_round) {
    static const forge_attention_cell cells[] = {
        {"flash_bf16_fwd_default", 0, 0, ab_default_fwd},
        {"flash_bf16_fwdbwd_default", 1, 0, ab_default_fwdbwd},
    };
    if (rounds < 5 || per_round < 1)
        return forge_error(FORGE_ERR_ARG, "bench attention: --steps %d rounds (at least 5) of --reps %d calls",
                           rounds, per_round);
    const uint64_t seed = 20261203;
    AB_TRY(cudaSetDevice(0));
    cudaDeviceProp prop;
    AB_TRY(cudaGetDeviceProperties(&prop, 0));
    ab_shape sh;
    memset(&sh, 0, sizeof sh);
    FORGE_TRY(forge_backend_create(&sh.be, FORGE_DEVICE_CUDA, NULL));
    sh.stream = (cudaStream_t)forge_cuda_backend_stream(sh.be);
    forge_bench_timer timer;
    forge_status s = forge_cuda_bench_timer_create(&timer, sh.stream);
    if (s != FORGE_OK) {
        forge_backend_destroy(sh.be);
        return s;
    }
    double *buf = (double *)malloc((6 * (size_t)rounds + (size_t)per_round) * sizeof(double));
    ab_paired_samples sm;
    memset(&sm, 0, sizeof sm);
    if (buf) {
        double **parts[] = {&sm.f, &sm.b, &sm.r, &sm.fq, &sm.bq, &sm.rq, &sm.fk}; /* fk (per_round) last */
        for (size_t j = 0; j < sizeof parts / sizeof parts[0]; j++) *parts[j] = buf + j * (size_t)rounds;
    }
    int b2b = 1;
    char cmd[2048], line[1024];
    snprintf(cmd, sizeof cmd, "%s --serve", command);
    forge_coprocess cp;
    int started = 0;
    if (!buf) s = forge_error(FORGE_ERR_OOM, "bench attention: %d rounds", rounds);
    if (s == FORGE_OK) s = forge_coprocess_start(&cp, cmd);
    if (s == FORGE_OK) started = 1;
    if (s == FORGE_OK) s = forge_coprocess_recv(&cp, line, sizeof line);
    if (s == FORGE_OK && strncmp(line, "ready", 5) != 0)
        s = forge_error(FORGE_ERR_DATA, "bench attention: the baseline said \"%.200s\", expected \"ready\"", line);
    if (s == FORGE_OK)
        fprintf(out,
                "== attention paired: forge's bf16 flash attention (forge_flash_bf16_forward, _backward) against "
                "\"%s\" (%s) on %s, causal, H = Hkv, %d rounds of %d calls each side, each call timed alone, then (where "
                "the baseline answers b2b) %d calls back to back; forge speed-up = baseline ms / forge ms per round, "
                "median [bootstrap 95%% CI]\n",
                command, line + (line[5] ? 6 : 5), prop.name, rounds, per_round, per_round);
    const int nshapes = AB_N_SHAPES;
    int bad = 0;
    for (int i = 0; i < nshapes && s == FORGE_OK; i++) {
        const int *p = AB_SHAPES[i];
        s = ab_shape_init(&sh, p[0], p[1], p[2], p[3], seed + (uint64_t)i, 0);
        for (int c = 0; c < 2 && s == FORGE_OK; c++) {
            s = ab_paired_case(out, &cp, &timer, &sh, &cells[c], seed + (uint64_t)i, rounds, per_round, &sm, &b2b);
            if (s == FORGE_ERR_NUMERIC) { /* reported; the other cases go on */
                bad++;
                s = FORGE_OK;
            }
        }
        ab_shape_free(&sh);
    }
    if (started) {
        if (s == FORGE_OK) s = forge_coprocess_send(&cp, "quit");
        const forge_status fin = forge_coprocess_finish(&cp);
        if (s == FORGE_OK) s = fin;
    }
    free(buf);
    forge_cuda_bench_timer_destroy(&timer);
    forge_backend_destroy(sh.be);
    if (s == FORGE_OK && bad > 0)
        s = forge_error(FORGE_ERR_NUMERIC, "bench attention: %d paired case(s) failed their check (see the table)", bad);
    return s;
}
