/*
 * gemm_mma_kernel.cuh: the warp-level tensor-core GEMM kernel (rung 2; notes in lab/notes/gemm-mma.md) and
 * its launcher, shared by forge's tf32 entry point (gemm_mma.cu; contract: gemm_mma.h) and the lab's bf16
 * instantiation (lab/gemm_mma/).
 *
 *   C (M,N) fp32 [+]= A (M,K) . B (N,K)^T [+ bias (N)]     A, B K-major
 *
 * and, tf32 only, for the trainer's backward layouts (--matmul tf32):
 * A stored (K,M) and/or B stored (K,N) ("MN-major", template flags A_MN /
 * B_MN), with accumulate (C +=).
 *
 * Design (the decisions a reader would otherwise get wrong):
 * - One kernel template serves bf16 (the lab's) and tf32. A stage holds a 128-row A tile
 *   and a 128-row B tile, each row 128 BYTES of K: 64 bf16 or 32 fp32. So the
 *   shared-memory layout, the cp.async chunking and the ldmatrix addressing
 *   are byte-identical for both types; only the MMA differs. A 128-byte row
 *   holds four 32-byte K steps: k16 for bf16 (m16n8k16), k8 for tf32
 *   (m16n8k8).
 * - Rows are padded to 144 bytes (128 + 16). An ldmatrix phase reads eight
 *   16-byte rows at one column; with a 144-byte stride row r starts at bank
 *   4r (mod 32), so the eight rows hit disjoint 4-bank groups: no conflicts.
 *   The 16-byte cp.async writes are conflict-free for the same reason.
 * - ldmatrix also serves tf32: an 8x8 b16 matrix is an 8-row x 4-word fp32
 *   matrix, and ldmatrix hands thread l the word (row l/4, word l%4), which
 *   is exactly the m16n8k8 tf32 A fragment (a0: row g, col t; a1: row g+8;
 *   a2: col t+4; a3: row g+8, col t+4) and B fragment (b0: k t, n g; b1: k
 *   t+4) with the same per-lane row/16-byte-column addresses as bf16.
 * - 256 threads = 8 warps as 2 (M) x 4 (N); each warp owns 64 x 32 of the
 *   128 x 128 block tile: 4 m16 tiles x 4 n8 tiles, 64 fp32 accumulators per
 *   thread. Per 32-byte K step a warp issues 4 ldmatrix.x4 for A, 2 for B
 *   and 16 MMAs.
 * - 3-stage cp.async ring (108 KiB of dynamic shared memory), two CTAs per
 *   SM (__launch_bounds__(256, 2): <= 128 registers). Standard multistage
 *   loop: wait until stage kt has landed (cp.async.wait_group STAGES-2),
 *   __syncthreads (which also proves every warp finished reading stage
 *   kt-1), then prefetch K tile kt+STAGES-1 into the stage kt-1 used, then
 *   compute stage kt. An empty commit group is issued when there is nothing
 *   left to prefetch so the wait_group arithmetic stays uniform.
 * - Edges: with VEC (K*elem % 16 == 0, A and B 16-byte aligned) a 16-byte
 *   chunk of a row is either wholly inside the matrix or wholly outside (K
 *   is a multiple of the chunk's element count), and cp.async with src-size
 *   0 zero-fills the outside ones. Without VEC each element is loaded with a
 *   bounds check and the chunk is stored to shared memory synchronously
 *   (visible after the same __syncthreads). Zeros contribute nothing to the
 *   dot products, so the mainloop has no tail code; the epilogue
 *   bounds-checks every store.
 * - tf32: cvt.rna.tf32.f32 on each fragment word after ldmatrix (the MMA
 *   itself would otherwise just ignore the low 13 bits = truncate).
 * - MN-major tf32 operands: ldmatrix.trans moves 16-bit elements only, so
 *   the tile is kept as stored: 32 K rows of 128 fp32 with a 544-byte
 *   (136-word) stride, filled by 16-byte cp.async along M/N (a warp per
 *   512-byte K row: coalesced), and each fragment word is a 32-bit shared
 *   load at (K row t or t+4, column g or g+8): lane (g, t) hits bank
 *   8t + g, conflict-free. 32 x 544 bytes fit the 128 x 144 region of a
 *   K-major tile, so the stage layout and the pipeline are unchanged.
 * - Tile order: the 1-D grid is numbered in groups of 8 row-blocks, all
 *   column-blocks of a group before the next, so concurrently running CTAs
 *   share A row-blocks and sweep B through L2 once per group.
 */
#ifndef FORGE_GEMM_MMA_KERNEL_CUH
#define FORGE_GEMM_MMA_KERNEL_CUH

#include <limits.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "cuda_check.h"
#include "kernel_attrs.h"

extern "C" {
#include "gemm_mma.h"
}

#define MMA_BM 128
#define MMA_BN 128
#define MMA_ROW_BYTES 128 /* K bytes per tile row per stage */
#define MMA_STRIDE 144    /* padded shared-memory row stride (bytes) */
#define MMA_STAGES 3
#define MMA_THREADS 256
#define MMA_GROUP_M 8
#define MMA_STAGE_BYTES ((MMA_BM + MMA_BN) * MMA_STRIDE)  /* 36,864 */
#define MMA_SMEM (MMA_STAGES * MMA_STAGE_BYTES)           /* 110,592 */
#define MMA_CHUNKS_PER_THREAD ((MMA_BM + MMA_BN) * (MMA_ROW_BYTES / 16) / MMA_THREADS) /* 8 */
#define MMA_B_OFFSET (MMA_BM * MMA_STRIDE) /* the B tile's byte offset in a stage */
#define MMA_SPLIT_MIN_KTILES 4 /* split-K: at least 4 K tiles (128 tf32 K) per split, so the pipeline fills */
#define MMA_SPLIT_MAX 16
/* row stride (bytes) of an MN-major tf32 tile: 136 words, so the 32-bit fragment loads of lanes (g, t) at K row t,
 * column g hit bank 8t + g (conflict-free); 32 rows of it fit in the 128 x 144-byte region of a K-major tile */
#define MMA_MN_STRIDE 544

static_assert(MMA_CHUNKS_PER_THREAD == 8, "chunk mapping below assumes 8 chunks per thread");
static_assert(MMA_ROW_BYTES / 4 * MMA_MN_STRIDE <= MMA_BM * MMA_STRIDE && MMA_BM == MMA_BN,
              "an MN-major tf32 tile (32 K rows) fits the region of a K-major one");
static_assert(MMA_MN_STRIDE % 16 == 0 && MMA_MN_STRIDE >= MMA_BM * 4, "MN rows hold 128 fp32, 16-byte aligned");

__device__ __forceinline__ uint32_t mma_smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mma_cp_async16(uint32_t dst, const void *src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void mma_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void mma_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void mma_ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ uint32_t mma_to_tf32(uint32_t x) {
    uint32_t y;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(y) : "f"(__uint_as_float(x)));
    return y;
}

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_tf32_1688(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Loads K tile kt of one operand (rows row0.. of A or B, `lim` rows in the
 * matrix) into the operand's region dst of a stage.
 *
 * K-major (MN = false; stored (lim, K), row stride K): chunk i of this thread
 * is tile row (tid >> 3) + 32 i, 16-byte column tid & 7; smem row stride
 * MMA_STRIDE (read with ldmatrix).
 *
 * MN-major (MN = true, tf32 only; stored (K, lim), row stride lim): the tile
 * is kept as it is stored, 32 K rows of 128 fp32 (512 bytes), smem row stride
 * MMA_MN_STRIDE; chunk i of this thread is K row (tid >> 5) + 8 i, 16-byte
 * column tid & 31, so a warp reads one contiguous 512-byte row. The fragments
 * are then read with 32-bit shared loads instead of ldmatrix (ldmatrix.trans
 * moves 16-bit elements only). */
template <bool TF32, bool MN, bool VEC>
__device__ __forceinline__ void mma_load_operand(unsigned char *dst, const unsigned char *__restrict__ base, int lim,
                                                 int K, int row0, int kt, int tid) {
    constexpr int EB = TF32 ? 4 : 2;   /* bytes per element */
    constexpr int CH = 16 / EB;        /* elements per 16-byte chunk */
    constexpr int BK = MMA_ROW_BYTES / EB;
    static_assert(TF32 || !MN, "MN-major operands are tf32 only");
    if (!MN) {
        const int c = tid & 7;
        const int k = kt * BK + c * CH;
#pragma unroll
        for (int i = 0; i < MMA_CHUNKS_PER_THREAD / 2; i++) {
            const int r = (tid >> 3) + 32 * i; /* 0..127 */
            const int grow = row0 + r;
            unsigned char *d = dst + r * MMA_STRIDE + c * 16;
            if (VEC) {
                const bool ok = grow < lim && k < K;
                const unsigned char *src = ok ? base + ((size_t)grow * (size_t)K + (size_t)k) * EB : base;
                mma_cp_async16(mma_smem_u32(d), src, ok ? 16u : 0u);
            } else {
                uint32_t w[4] = {0u, 0u, 0u, 0u};
                if (grow < lim) {
                    const unsigned char *row = base + (size_t)grow * (size_t)K * EB;
#pragma unroll
                    for (int e = 0; e < CH; e++) {
                        if (k + e < K) {
                            uint32_t v;
                            if (TF32)
                                v = __ldg((const unsigned int *)(row + (size_t)(k + e) * 4));
                            else
                                v = __ldg((const unsigned short *)(row + (size_t)(k + e) * 2));
                            if (TF32)
                                w[e] = v;
                            else
                                w[e / 2] |= v << (16 * (e % 2));
                        }
                    }
                }
                *(uint4 *)d = make_uint4(w[0], w[1], w[2], w[3]);
            }
        }
    } else {
        const int mc = tid & 31;
        const int gm = row0 + mc * 4; /* first of this chunk's 4 rows */
#pragma unroll
        for (int i = 0; i < MMA_CHUNKS_PER_THREAD / 2; i++) {
            const int kr = (tid >> 5) + 8 * i; /* 0..31 */
            const int gk = kt * BK + kr;
            unsigned char *d = dst + kr * MMA_MN_STRIDE + mc * 16;
            if (VEC) {
                /* VEC: lim % 4 == 0, so the chunk is wholly inside or outside */
                const bool ok = gk < K && gm < lim;
                const unsigned char *src = ok ? base + ((size_t)gk * (size_t)lim + (size_t)gm) * 4 : base;
                mma_cp_async16(mma_smem_u32(d), src, ok ? 16u : 0u);
            } else {
                uint32_t w[4] = {0u, 0u, 0u, 0u};
                if (gk < K) {
                    const unsigned char *row = base + (size_t)gk * (size_t)lim * 4;
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (gm + e < lim) w[e] = __ldg((const unsigned int *)(row + (size_t)(gm + e) * 4));
                }
                *(uint4 *)d = make_uint4(w[0], w[1], w[2], w[3]);
            }
        }
    }
}

template <bool TF32, bool A_MN, bool B_MN, bool VEC>
__device__ __forceinline__ void mma_load_stage(unsigned char *smem, int stage, const unsigned char *__restrict__ A,
                                               const unsigned char *__restrict__ B, int M, int N, int K, int m0,
                                               int n0, int kt, int tid) {
    unsigned char *st = smem + stage * MMA_STAGE_BYTES;
    mma_load_operand<TF32, A_MN, VEC>(st, A, M, K, m0, kt, tid);
    mma_load_operand<TF32, B_MN, VEC>(st + MMA_B_OFFSET, B, N, K, n0, kt, tid);
}

/* A_MN / B_MN: A stored (K, M) / B stored (K, N) instead of K-major (tf32
 * only). accumulate: C += result instead of C = result. Split-K: blockIdx.y
 * is the split; it sums K tiles [y kt_per_split, (y+1) kt_per_split) and
 * writes C + y split_stride (the launcher points C at the workspace, with no
 * bias and no accumulate, and gemm_mma_splitk_reduce_kernel sums the splits
 * in order). Without split-K gridDim.y = 1 and kt_per_split covers all of K. */
template <bool TF32, bool A_MN, bool B_MN, bool VEC>
__global__ void __launch_bounds__(MMA_THREADS, 2)
    gemm_mma_kernel(const unsigned char *__restrict__ A, const unsigned char *__restrict__ B, float *__restrict__ C,
                    const float *__restrict__ bias, int M, int N, int K, int tiles_m, int tiles_n, int vec_c,
                    int accumulate, int kt_per_split, long long split_stride) {
    extern __shared__ __align__(128) unsigned char mma_smem[];
    constexpr int EB = TF32 ? 4 : 2;
    constexpr int BK = MMA_ROW_BYTES / EB;
    static_assert(TF32 || (!A_MN && !B_MN), "MN-major operands are tf32 only");

    /* grouped tile order (see the top of the file) */
    const int pid = blockIdx.x;
    const int per_group = MMA_GROUP_M * tiles_n;
    const int first_m = (pid / per_group) * MMA_GROUP_M;
    const int gsize = min(tiles_m - first_m, MMA_GROUP_M);
    const int tm = first_m + (pid % per_group) % gsize;
    const int tn = (pid % per_group) / gsize;
    const int m0 = tm * MMA_BM, n0 = tn * MMA_BN;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3; /* 2 x 4 warps, 64 x 32 each */
    const int g = lane >> 2, t = lane & 3;   /* mma fragment row group / thread in group */

    /* per-lane ldmatrix byte offsets within a stage (K-major operands, see the top of the file) */
    const uint32_t smem_base = mma_smem_u32(mma_smem);
    const uint32_t a_off = (uint32_t)((wm * 64 + (lane & 15)) * MMA_STRIDE + (lane >> 4) * 16);
    const uint32_t b_off =
        (uint32_t)(MMA_B_OFFSET + (wn * 32 + (lane & 7) + ((lane >> 4) << 3)) * MMA_STRIDE + ((lane >> 3) & 1) * 16);
    /* per-lane byte offsets of the 32-bit fragment loads (MN-major operands): K row t, M/N column g. With a row
     * stride of 136 words, lane (g, t) hits bank 8t + g: conflict-free. */
    const int a_mn_off = t * MMA_MN_STRIDE + (wm * 64 + g) * 4;
    const int b_mn_off = MMA_B_OFFSET + t * MMA_MN_STRIDE + (wn * 32 + g) * 4;

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int v = 0; v < 4; v++) acc[i][j][v] = 0.0f;

    /* this CTA's K tiles: kt0 .. kt0 + ktiles - 1 (all of K without split-K). Split boundaries are whole K
     * tiles, so the bounds checks against K stay the same. */
    const int kt0 = (int)blockIdx.y * kt_per_split;
    const int ktiles = max(0, min((K + BK - 1) / BK - kt0, kt_per_split));
    C += (size_t)blockIdx.y * (size_t)split_stride;
#pragma unroll
    for (int s = 0; s < MMA_STAGES - 1; s++) {
        if (s < ktiles) mma_load_stage<TF32, A_MN, B_MN, VEC>(mma_smem, s, A, B, M, N, K, m0, n0, kt0 + s, tid);
        mma_cp_async_commit();
    }

    for (int kt = 0; kt < ktiles; kt++) {
        mma_cp_async_wait<MMA_STAGES - 2>();
        __syncthreads();
        {
            const int nk = kt + MMA_STAGES - 1;
            if (nk < ktiles)
                mma_load_stage<TF32, A_MN, B_MN, VEC>(mma_smem, nk % MMA_STAGES, A, B, M, N, K, m0, n0, kt0 + nk,
                                                      tid);
            mma_cp_async_commit();
        }
        const uint32_t st = smem_base + (uint32_t)((kt % MMA_STAGES) * MMA_STAGE_BYTES);
        const unsigned char *stp = mma_smem + (kt % MMA_STAGES) * MMA_STAGE_BYTES;
#pragma unroll
        for (int kk = 0; kk < MMA_ROW_BYTES / 32; kk++) {
            uint32_t a[4][4], b[4][2];
            if (!A_MN) {
#pragma unroll
                for (int mt = 0; mt < 4; mt++) mma_ldmatrix_x4(a[mt], st + a_off + mt * 16 * MMA_STRIDE + kk * 32);
            } else {
                /* k step kk covers K rows 8 kk .. 8 kk + 7: a0 (m g, k t), a1 (m g+8), a2 (k t+4), a3 (both) */
                const unsigned char *ap = stp + a_mn_off + kk * 8 * MMA_MN_STRIDE;
#pragma unroll
                for (int mt = 0; mt < 4; mt++) {
                    a[mt][0] = *(const uint32_t *)(ap + mt * 64);
                    a[mt][1] = *(const uint32_t *)(ap + mt * 64 + 32);
                    a[mt][2] = *(const uint32_t *)(ap + 4 * MMA_MN_STRIDE + mt * 64);
                    a[mt][3] = *(const uint32_t *)(ap + 4 * MMA_MN_STRIDE + mt * 64 + 32);
                }
            }
            if (!B_MN) {
#pragma unroll
                for (int np = 0; np < 2; np++) {
                    uint32_t r[4];
                    mma_ldmatrix_x4(r, st + b_off + np * 16 * MMA_STRIDE + kk * 32);
                    b[2 * np][0] = r[0];
                    b[2 * np][1] = r[1];
                    b[2 * np + 1][0] = r[2];
                    b[2 * np + 1][1] = r[3];
                }
            } else {
                /* b0 (k t, n g), b1 (k t+4, n g) */
                const unsigned char *bp = stp + b_mn_off + kk * 8 * MMA_MN_STRIDE;
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    b[nt][0] = *(const uint32_t *)(bp + nt * 32);
                    b[nt][1] = *(const uint32_t *)(bp + 4 * MMA_MN_STRIDE + nt * 32);
                }
            }
            if (TF32) {
#pragma unroll
                for (int mt = 0; mt < 4; mt++)
#pragma unroll
                    for (int v = 0; v < 4; v++) a[mt][v] = mma_to_tf32(a[mt][v]);
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int v = 0; v < 2; v++) b[nt][v] = mma_to_tf32(b[nt][v]);
            }
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    if (TF32)
                        mma_tf32_1688(acc[mt][nt], a[mt], b[nt][0], b[nt][1]);
                    else
                        mma_bf16_16816(acc[mt][nt], a[mt], b[nt][0], b[nt][1]);
                }
        }
    }
    mma_cp_async_wait<0>(); /* no cp.async may be outstanding at exit */

    /* epilogue: c0,c1 at (row g, cols 2t, 2t+1), c2,c3 at (row g+8, same cols); one thread owns each element, so
     * accumulate (C +=) is a plain read-modify-write */
#pragma unroll
    for (int nt = 0; nt < 4; nt++) {
        const int col = n0 + wn * 32 + nt * 8 + 2 * t;
        if (col >= N) continue;
        const bool two = col + 1 < N;
        const float b0 = bias != nullptr ? __ldg(bias + col) : 0.0f;
        const float b1 = (bias != nullptr && two) ? __ldg(bias + col + 1) : 0.0f;
#pragma unroll
        for (int mt = 0; mt < 4; mt++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = m0 + wm * 64 + mt * 16 + g + 8 * h;
                if (row >= M) continue;
                float *p = C + (size_t)row * (size_t)N + col;
                float v0 = acc[mt][nt][2 * h] + b0, v1 = acc[mt][nt][2 * h + 1] + b1;
                if (vec_c && two) {
                    if (accumulate) {
                        const float2 o = *(const float2 *)p;
                        v0 += o.x;
                        v1 += o.y;
                    }
                    *(float2 *)p = make_float2(v0, v1);
                } else {
                    p[0] = accumulate ? p[0] + v0 : v0;
                    if (two) p[1] = accumulate ? p[1] + v1 : v1;
                }
            }
        }
    }
}

/* The split-K reduction (gemm_mma.cu): C (+)= sum over s of work[s] (+ bias), s in order 0..S-1. */
__global__ void gemm_mma_splitk_reduce_kernel(float *__restrict__ C, const float *__restrict__ work,
                                              const float *__restrict__ bias, size_t mn, int N, int S,
                                              int accumulate);

template <bool TF32, bool A_MN, bool B_MN, bool VEC>
static forge_status gemm_mma_launch_t(const void *A, const void *B, float *C, const float *bias, int M, int N, int K,
                                      int tiles_m, int tiles_n, int vec_c, int accumulate, int splits,
                                      int kt_per_split, cudaStream_t stream) {
    auto kernel = gemm_mma_kernel<TF32, A_MN, B_MN, VEC>;
    static kernel_attrs_once once;
    CUDA_TRY(kernel_attrs_set(&once, (const void *)kernel, MMA_SMEM, 0));
    const dim3 grid((unsigned)(tiles_m * tiles_n), (unsigned)splits);
    kernel<<<grid, MMA_THREADS, MMA_SMEM, stream>>>((const unsigned char *)A, (const unsigned char *)B, C, bias, M, N,
                                                    K, tiles_m, tiles_n, vec_c, accumulate, kt_per_split,
                                                    splits > 1 ? (long long)M * N : 0LL);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return forge_error(FORGE_ERR_DEVICE, "kernel gemm_mma_kernel<%s,a_mn=%d,b_mn=%d,%s> failed to launch: %s",
                           TF32 ? "tf32" : "bf16", (int)A_MN, (int)B_MN, VEC ? "vec" : "scalar",
                           cudaGetErrorString(e));
    return FORGE_OK;
}

/* The launch geometry of one call: split-K (splits > 1) or not. */
typedef struct {
    int tiles_m, tiles_n, vec_c, accumulate, splits, kt_per_split;
} mma_geom;

template <bool TF32, bool A_MN, bool B_MN>
static forge_status gemm_mma_launch_v(bool vec, const void *A, const void *B, float *C, const float *bias, int M,
                                      int N, int K, const mma_geom &g, cudaStream_t st) {
    return vec ? gemm_mma_launch_t<TF32, A_MN, B_MN, true>(A, B, C, bias, M, N, K, g.tiles_m, g.tiles_n, g.vec_c,
                                                          g.accumulate, g.splits, g.kt_per_split, st)
               : gemm_mma_launch_t<TF32, A_MN, B_MN, false>(A, B, C, bias, M, N, K, g.tiles_m, g.tiles_n, g.vec_c,
                                                           g.accumulate, g.splits, g.kt_per_split, st);
}

/* One call of the kernel: checks, geometry (split-K: whole K tiles per split), launch, and the split-K reduction.
 * TF32 false (bf16) takes the NT layout only; what names the caller in messages. */
template <bool TF32>
static forge_status gemm_mma_launch(int a_mn, int b_mn, const void *A, const void *B, float *C, const float *bias,
                                    int M, int N, int K, int accumulate, int splits, float *work, size_t work_floats,
                                    void *stream, const char *what) {
    if (M < 0 || N < 0 || K < 0) return forge_error(FORGE_ERR_ARG, "%s: negative size M=%d N=%d K=%d", what, M, N, K);
    if (a_mn && !b_mn)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: A stored (K,M) with B stored (N,K) is not instantiated (the training layouts are "
                           "NT, NN = (a_mn 0, b_mn 1) and TN = (1, 1))",
                           what);
    if (M == 0 || N == 0) return FORGE_OK;
    if (C == nullptr || (K > 0 && (A == nullptr || B == nullptr)))
        return forge_error(FORGE_ERR_ARG, "%s: NULL operand (A=%p B=%p C=%p)", what, A, B, (void *)C);
    mma_geom g;
    g.tiles_m = (M + MMA_BM - 1) / MMA_BM;
    g.tiles_n = (N + MMA_BN - 1) / MMA_BN;
    if ((long long)g.tiles_m * g.tiles_n > INT_MAX)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: M=%d N=%d gives more than 2^31-1 tiles", what, M, N);
    const size_t eb = TF32 ? 4 : 2;
    const int ktiles_all = (int)(((size_t)K * eb + MMA_ROW_BYTES - 1) / MMA_ROW_BYTES);
    /* split-K: whole K tiles per split, and no empty split */
    g.splits = 1;
    g.kt_per_split = ktiles_all;
    if (splits > 1 && ktiles_all > 1) {
        g.kt_per_split = (ktiles_all + splits - 1) / splits;
        g.splits = (ktiles_all + g.kt_per_split - 1) / g.kt_per_split;
    }
    if (g.splits > 1 && (work == nullptr || (size_t)g.splits * (size_t)M * (size_t)N > work_floats))
        return forge_error(FORGE_ERR_ARG, "%s: split-K into %d needs a workspace of %zu floats (have %zu at %p)", what,
                           g.splits, (size_t)g.splits * (size_t)M * (size_t)N, work_floats, (void *)work);
    if (g.splits > 65535) return forge_error(FORGE_ERR_ARG, "%s: %d splits is beyond the grid limit", what, g.splits);
    /* 16-byte chunks are whole (wholly inside or outside the matrix) when the contiguous dimension is a multiple
     * of the chunk: K for a K-major operand, M or N for an MN-major one */
    const bool a_ok = (a_mn ? (size_t)M * eb : (size_t)K * eb) % 16 == 0 && ((uintptr_t)A % 16) == 0;
    const bool b_ok = (b_mn ? (size_t)N * eb : (size_t)K * eb) % 16 == 0 && ((uintptr_t)B % 16) == 0;
    const bool vec = a_ok && b_ok;
    float *out = g.splits > 1 ? work : C;
    const float *kbias = g.splits > 1 ? nullptr : bias;
    g.accumulate = g.splits > 1 ? 0 : accumulate;
    g.vec_c = (N % 2 == 0) && ((uintptr_t)out % 8) == 0; /* N even: every split's slab (M*N floats) stays 8-aligned */
    cudaStream_t st = (cudaStream_t)stream;
    forge_status s;
    if constexpr (!TF32) {
        if (a_mn || b_mn)
            return forge_error(FORGE_ERR_UNSUPPORTED, "%s: bf16 operands are instantiated K-major only", what);
        s = gemm_mma_launch_v<false, false, false>(vec, A, B, out, kbias, M, N, K, g, st);
    } else if (!a_mn && !b_mn) {
        s = gemm_mma_launch_v<true, false, false>(vec, A, B, out, kbias, M, N, K, g, st);
    } else if (!a_mn) {
        s = gemm_mma_launch_v<true, false, true>(vec, A, B, out, kbias, M, N, K, g, st);
    } else {
        s = gemm_mma_launch_v<true, true, true>(vec, A, B, out, kbias, M, N, K, g, st);
    }
    if (s != FORGE_OK || g.splits == 1) return s;
    const size_t mn = (size_t)M * N;
    size_t blocks = (mn + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    gemm_mma_splitk_reduce_kernel<<<(unsigned)blocks, 256, 0, st>>>(C, work, bias, mn, N, g.splits, accumulate);
    CUDA_LAUNCH_CHECK("gemm_mma_splitk_reduce_kernel");
    return FORGE_OK;
}

#endif
