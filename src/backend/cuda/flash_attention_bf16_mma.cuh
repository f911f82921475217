/*
 * flash_attention_bf16_mma.cuh: the mma.sync (m16n8k16) building blocks of
 * forge's bf16 flash attention and its forward kernel template, shared by
 * flash_attention_bf16.cu (the forward with 64 query rows per CTA, the
 * fallback of forge_flash_bf16_forward, and the backward kernels) and the lab
 * (the forward with 128 query rows). Design notes, fragment layouts and the
 * shared-memory row padding: the top of flash_attention_bf16.cu.
 */
#ifndef FORGE_FLASH_ATTENTION_BF16_MMA_CUH
#define FORGE_FLASH_ATTENTION_BF16_MMA_CUH

#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "flash_key_tiles.cuh"
#include "kernel_attrs.h"

extern "C" {
#include "flash_attention_bf16.h"
}

#define FA_THREADS 128 /* 4 warps x 16 rows */
#define FA_BM 64       /* rows owned by a CTA (queries fwd/dQ, keys dK/dV) */
#define FA_BN 64       /* streamed tile (keys fwd/dQ) */
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

typedef unsigned short bf16_t;

__device__ __forceinline__ uint32_t fa_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void fa_cp_async16(uint32_t dst, const void *src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void fa_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void fa_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void fa_ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void fa_ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void fa_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* lo goes to the low half (the lower column index), round to nearest even */
__device__ __forceinline__ uint32_t fa_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* C tiles 2kk, 2kk+1 (16 columns) of a 16-row accumulator -> one A fragment */
template <int NT>
__device__ __forceinline__ void fa_c_to_a(uint32_t (&a)[4], const float (&c)[NT][4], int kk) {
    a[0] = fa_pack(c[2 * kk][0], c[2 * kk][1]);
    a[1] = fa_pack(c[2 * kk][2], c[2 * kk][3]);
    a[2] = fa_pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = fa_pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/* ROWS x D bf16 rows row0.. of a strided tensor into shared memory (stride
 * D*2+16 bytes); rows >= limit are zero-filled. */
template <int D, int ROWS, int NT = FA_THREADS>
__device__ __forceinline__ void fa_load_rows(uint32_t dst, const bf16_t *__restrict__ base, long long stride,
                                             int row0, int limit, int tid) {
    constexpr int CPR = D / 8; /* 16-byte chunks per row */
    constexpr int STR = D * 2 + 16;
    static_assert((ROWS * CPR) % NT == 0, "chunks must divide evenly over the CTA");
#pragma unroll
    for (int i = 0; i < ROWS * CPR / NT; i++) {
        const int id = tid + NT * i;
        const int r = id / CPR, c = id % CPR;
        const int row = row0 + r;
        const bool ok = row < limit;
        const bf16_t *src = ok ? base + (size_t)row * (size_t)stride + c * 8 : base;
        fa_cp_async16(dst + (uint32_t)(r * STR + c * 16), src, ok ? 16u : 0u);
    }
}

/* ---- forward ------------------------------------------------------------------------ */

/* QR query rows per CTA = QR/16 warps: 64 (forge_flash_bf16_forward_mma) or 128 (the lab's variant: K/V tiles
 * shared by twice the warps, half the shared-memory fill traffic per FLOP). */
template <int D, int QR>
__global__ void __launch_bounds__(QR * 2)
    fa_fwd_kernel(const bf16_t *__restrict__ q, const bf16_t *__restrict__ k, const bf16_t *__restrict__ v,
                  bf16_t *__restrict__ out, float *__restrict__ lse, forge_flash_shape s, float sl2) {
    constexpr int STR = D * 2 + 16;
    constexpr int DK = D / 16; /* k16 steps over d */
    constexpr int DN = D / 8;  /* n8 tiles over d */
    constexpr int NN = FA_BN / 8;
    constexpr int TILE = FA_BN * STR;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    const uint32_t sq = fa_smem_u32(fa_smem);
    constexpr int NT = QR * 2;
    const uint32_t sk = sq + QR * STR; /* 2 stages of K, then 2 of V */
    const uint32_t sv = sk + 2 * TILE;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * QR, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / (s.H / s.Hkv);
    const int diag = s.Tk - s.Tq;
    const bf16_t *qb = q + (size_t)b * s.Tq * s.q_stride + (size_t)h * D;
    const bf16_t *kb = k + (size_t)b * s.Tk * s.k_stride + (size_t)hk * D;
    const bf16_t *vb = v + (size_t)b * s.Tk * s.v_stride + (size_t)hk * D;

    const int ntiles = flash_key_tiles(s.Tk, diag, q0, QR, FA_BN);

    fa_load_rows<D, QR, NT>(sq, qb, s.q_stride, q0, s.Tq, tid);
    fa_commit();
    if (ntiles > 0) {
        fa_load_rows<D, FA_BN, NT>(sk, kb, s.k_stride, 0, s.Tk, tid);
        fa_load_rows<D, FA_BN, NT>(sv, vb, s.v_stride, 0, s.Tk, tid);
    }
    fa_commit();
    fa_wait<1>();
    __syncthreads();

    uint32_t qf[DK][4];
#pragma unroll
    for (int kk = 0; kk < DK; kk++)
        fa_ldsm_x4(qf[kk], sq + (uint32_t)((warp * 16 + (lane & 15)) * STR + (lane >> 4) * 16 + kk * 32));

    float o[DN][4];
#pragma unroll
    for (int n = 0; n < DN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[n][e] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int row_lo = q0 + warp * 16 + g; /* this thread's rows: row_lo, row_lo + 8 */
    const uint32_t b_off = (uint32_t)(((lane & 7) + ((lane >> 4) << 3)) * STR + ((lane >> 3) & 1) * 16);
    const uint32_t t_off = (uint32_t)((lane & 15) * STR + (lane >> 4) * 16);

    for (int t = 0; t < ntiles; t++) {
        const int cur = t & 1;
        if (t + 1 < ntiles) {
            fa_load_rows<D, FA_BN, NT>(sk + (cur ^ 1) * TILE, kb, s.k_stride, (t + 1) * FA_BN, s.Tk, tid);
            fa_load_rows<D, FA_BN, NT>(sv + (cur ^ 1) * TILE, vb, s.v_stride, (t + 1) * FA_BN, s.Tk, tid);
        }
        fa_commit();
        fa_wait<1>();
        __syncthreads();

        float sc[NN][4];
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) sc[n][e] = 0.0f;
        const uint32_t kt = sk + cur * TILE;
#pragma unroll
        for (int kk = 0; kk < DK; kk++)
#pragma unroll
            for (int np = 0; np < NN / 2; np++) {
                uint32_t r[4];
                fa_ldsm_x4(r, kt + b_off + np * 16 * STR + kk * 32);
                fa_mma(sc[2 * np], qf[kk], r[0], r[1]);
                fa_mma(sc[2 * np + 1], qf[kk], r[2], r[3]);
            }

        const int k0 = t * FA_BN;
        if (k0 + FA_BN - 1 > q0 + diag || k0 + FA_BN > s.Tk) {
#pragma unroll
            for (int n = 0; n < NN; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = k0 + n * 8 + 2 * tq + (e & 1);
                    const int row = row_lo + (e >> 1) * 8;
                    if (key > row + diag || key >= s.Tk) sc[n][e] = -INFINITY;
                }
        }

#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < NN; n++) mx = fmaxf(mx, fmaxf(sc[n][2 * r], sc[n][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mnew = fmaxf(m[r], mx * sl2);
            const float muse = mnew == -INFINITY ? 0.0f : mnew;
            const float alpha = exp2f(m[r] - muse);
            m[r] = mnew;
            float sum = 0.0f;
#pragma unroll
            for (int n = 0; n < NN; n++) {
                sc[n][2 * r] = exp2f(fmaf(sc[n][2 * r], sl2, -muse));
                sc[n][2 * r + 1] = exp2f(fmaf(sc[n][2 * r + 1], sl2, -muse));
                sum += sc[n][2 * r] + sc[n][2 * r + 1];
            }
            l[r] = l[r] * alpha + sum;
#pragma unroll
            for (int n = 0; n < DN; n++) {
                o[n][2 * r] *= alpha;
                o[n][2 * r + 1] *= alpha;
            }
        }

        const uint32_t vt = sv + cur * TILE;
#pragma unroll
        for (int kk = 0; kk < FA_BN / 16; kk++) {
            uint32_t a[4];
            fa_c_to_a<NN>(a, sc, kk);
#pragma unroll
            for (int dp = 0; dp < DN / 2; dp++) {
                uint32_t r[4];
                fa_ldsm_x4_t(r, vt + t_off + kk * 16 * STR + dp * 32);
                fa_mma(o[2 * dp], a, r[0], r[1]);
                fa_mma(o[2 * dp + 1], a, r[2], r[3]);
            }
        }
        __syncthreads(); /* the next iteration refills the other stage, read one iteration ago */
    }
    fa_wait<0>();

#pragma unroll
    for (int r = 0; r < 2; r++) {
        float lr = l[r];
        lr += __shfl_xor_sync(0xffffffffu, lr, 1);
        lr += __shfl_xor_sync(0xffffffffu, lr, 2);
        const int row = row_lo + r * 8;
        if (row >= s.Tq) continue;
        const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
        bf16_t *orow = out + ((size_t)b * s.Tq + row) * (size_t)s.o_stride + (size_t)h * D;
#pragma unroll
        for (int n = 0; n < DN; n++)
            *(uint32_t *)(orow + n * 8 + 2 * tq) = fa_pack(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        if (tq == 0) lse[((size_t)b * s.H + h) * s.Tq + row] = lr > 0.0f ? (m[r] + log2f(lr)) * FA_LN2 : -INFINITY;
    }
}

/* ---- host ----------------------------------------------------------------------------- */

template <int D, int QR> constexpr int fa_fwd_smem() { return (QR + 4 * FA_BN) * (D * 2 + 16); }

template <int D, int QR>
static forge_status fa_forward_t(const forge_flash_shape *s, const void *q, const void *k, const void *v, void *out,
                                 float *lse, cudaStream_t st) {
    const float sl2 = (1.0f / sqrtf((float)D)) * FA_LOG2E;
    auto kern = fa_fwd_kernel<D, QR>;
    constexpr int smem = fa_fwd_smem<D, QR>();
    static kernel_attrs_once once;
    CUDA_TRY(kernel_attrs_set(&once, (const void *)kern, smem, 0));
    dim3 grid((unsigned)((s->Tq + QR - 1) / QR), (unsigned)s->H, (unsigned)s->B);
    kern<<<grid, QR * 2, smem, st>>>((const bf16_t *)q, (const bf16_t *)k, (const bf16_t *)v, (bf16_t *)out, lse,
                                     *s, sl2);
    CUDA_LAUNCH_CHECK(D == 64 ? (QR == 64 ? "fa_fwd_kernel<64,64>" : "fa_fwd_kernel<64,128>")
                              : (QR == 64 ? "fa_fwd_kernel<128,64>" : "fa_fwd_kernel<128,128>"));
    return FORGE_OK;
}

/* The forward with QR query rows per CTA: argument check (forge_flash_check_shape, naming `what`), nothing to do
 * for B == 0 or Tq == 0, else the D = 64 or 128 instance. stream is a cudaStream_t. */
template <int QR>
static forge_status fa_forward_rows(const char *what, const forge_flash_shape *s, const void *q, const void *k,
                                    const void *v, void *out_bf16, float *lse, void *stream) {
    const void *ptrs[5] = {q, k, v, out_bf16, lse};
    FORGE_TRY(forge_flash_check_shape(what, s, ptrs, 5));
    if (s->B == 0 || s->Tq == 0) return FORGE_OK;
    cudaStream_t st = (cudaStream_t)stream;
    return s->D == 64 ? fa_forward_t<64, QR>(s, q, k, v, out_bf16, lse, st)
                      : fa_forward_t<128, QR>(s, q, k, v, out_bf16, lse, st);
}

#endif
