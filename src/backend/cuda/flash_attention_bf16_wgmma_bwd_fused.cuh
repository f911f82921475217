/*
 * flash_attention_bf16_wgmma_bwd_fused.cuh: the fused Hopper (sm_90a) flash backward as a template over the head
 * dim: ff_bwd_kernel<D> and its launch step ff_launch<D>. forge runs both instances (fb_launch_fused,
 * flash_attention_bf16_wgmma_bwd_fused.cu, whose header explains the design; the lab's entries with a forced launch
 * order are lab/flash/flash16_bwd_fused64.cu and flash16_bwd_fused128.cu). Both instances have the same CTA,
 * barriers, ring, dS^T double buffer, staging tiles, dQ writers and turn counters; what D changes:
 * - D = 128: the consumers' S^T / dP^T read K and V from shared memory (fb_dkdv_kernel<128, 0>'s tile), and
 *   consumer c computes dQ[:, 64c .. 64c + 63] of the tile's 64 queries = dS . K[:, 64c ..] (m64n64k16, A = dS
 *   read MN-major from the 128B-swizzled dS^T buffer, B = the resident K box c): 32 fp32 registers, a 64-query x
 *   64-column staging tile (16 KiB) that writer c adds as two 32-column boxes. 3 ring stages.
 * - D = 64: the consumers hold their 64 rows of K and V as register A fragments (fb_dkdv_kernel<64, 1>'s tile,
 *   so dk and dv are bitwise the three-kernel backward's) and all 128 keys of K^T as register A fragments
 *   (ff_load_kt, 32 registers, read once per CTA by ldmatrix.trans), and consumer c computes the transposed dQ of
 *   the tile's queries 32c .. 32c + 31: dQ^T (64 columns x 32 queries) = K^T . dS^T[:, 32c ..] (m64n32k16, B =
 *   half c of the dS^T buffer, stored in two 32-query halves with the 64-byte swizzle so that each half is a
 *   canonical MN-major operand, wgmma_desc_mn64): 16 fp32 registers, a 32-query x 64-column staging tile (8 KiB,
 *   written transposed, ff_store_dq64) that writer c adds as two 32 x 32 boxes at rows 32c... Per tile the dQ
 *   product reads 16 KiB of shared memory (the dS^T halves) against 48 KiB for dS . K[:, 32c ..] with both
 *   operands from shared memory (an n32 SS wgmma reads 3 KiB in the 16 cycles it takes, past the SM's
 *   128 B/clk). The turn counters are per (b, h, query tile, consumer) at both D (FORGE_FLASH_BF16_TURNS). 6 ring
 *   stages (K and V resident are half the size).
 */
#ifndef FORGE_FLASH_ATTENTION_BF16_WGMMA_BWD_FUSED_CUH
#define FORGE_FLASH_ATTENTION_BF16_WGMMA_BWD_FUSED_CUH

#include <math.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "flash_attention_bf16_wgmma_bwd.cuh"
#include "kernel_attrs.h"
#include "wgmma_tmap.h"

extern "C" {
#include "flash_attention_bf16.h"
}

template <int D> struct ff_cfg {
    typedef fb_cfg<D> kv; /* the dK/dV kernel's tile sizes */
    static constexpr int STAGES = D == 128 ? 3 : 6;
    static constexpr uint32_t DS = FB_BR * FB_BS * 2; /* dS^T: 128 keys x 64 queries, bf16 */
    static constexpr int DQ_ROWS = D == 128 ? FB_BS : FB_BS / 2; /* a consumer's dQ tile: queries x 64 columns */
    static constexpr int DQ_REGS = DQ_ROWS / 2;                  /* its fp32 registers a thread */
    static constexpr uint32_t STG = DQ_ROWS * 64 * 4;            /* its fp32 staging tile (two 32-column boxes) */
    static constexpr int NBARS = 1 + 2 * STAGES + 4 + 4; /* resbar, full, empty, dsfull[2], dsempty[2], stgfull[2], stgempty[2] */
    static constexpr size_t SMEM = 2 * (size_t)kv::RES_BYTES + STAGES * (size_t)kv::STAGE_BYTES + 2 * (size_t)DS +
                                   2 * (size_t)STG + STAGES * (size_t)kv::LD_BYTES + 8 * NBARS + 1024;
    static_assert(SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");
    static_assert(D == 64 || D == 128, "compiled head dims");
    /* the writer's loop (turn arithmetic, the counter's address, four bulk operations) needs more than forge's 24 */
    static constexpr int PRODUCER_REGS = 40;
    static constexpr int CONSUMER_REGS = 232;
    static_assert(128 * (PRODUCER_REGS + 2 * CONSUMER_REGS) <= 65536, "the register file");
};

/* Offsets from the 1 KiB-aligned base; resbar, then full[st] and empty[st] as fb_kv_produce expects them. */
template <int D> struct ff_smem {
    typedef ff_cfg<D> F;
    uint32_t base;
    __device__ uint32_t k() const { return base; }
    __device__ uint32_t v() const { return base + F::kv::RES_BYTES; }
    __device__ uint32_t ring() const { return base + 2 * F::kv::RES_BYTES; }
    __device__ uint32_t ds(int i) const { return ring() + F::STAGES * F::kv::STAGE_BYTES + i * F::DS; }
    __device__ uint32_t stg(int c) const { return ds(2) + c * F::STG; }
    __device__ uint32_t ld() const { return stg(2); }
    __device__ uint32_t resbar() const { return ld() + F::STAGES * F::kv::LD_BYTES; }
    __device__ uint32_t bars() const { return resbar() + 8; }
    __device__ uint32_t full(int st) const { return bars() + 8 * st; }
    __device__ uint32_t empty(int st) const { return bars() + 8 * (F::STAGES + st); }
    __device__ uint32_t dsfull(int i) const { return bars() + 16 * F::STAGES + 8 * i; }
    __device__ uint32_t dsempty(int i) const { return dsfull(2) + 8 * i; }
    __device__ uint32_t stgfull(int c) const { return dsempty(2) + 8 * c; }
    __device__ uint32_t stgempty(int c) const { return stgfull(2) + 8 * c; }
};

__device__ __forceinline__ uint32_t ff_ld_acquire(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Spins until *p == turn; after WGMMA_WAIT_TIMEOUT_NS faults as mbar_wait_wide does (a broken hand-off must not
 * hang the process). */
__device__ __forceinline__ void ff_turn_wait(const uint32_t *p, uint32_t turn) {
    if (ff_ld_acquire(p) == turn) return;
    const uint64_t t0 = gemm_globaltimer();
    while (ff_ld_acquire(p) != turn) {
        if (gemm_globaltimer() - t0 > WGMMA_WAIT_TIMEOUT_NS)
            asm volatile("st.global.u32 [%0], %1;" ::"l"(0ull), "r"(0u) : "memory");
    }
}

/* The last key query tile qt's rows see: its last row (min(64 qt + 63, Tq - 1)) plus the bottom-right diagonal
 * Tk - Tq; negative when no row of the tile sees a key (Tq > Tk). */
__host__ __device__ __forceinline__ int ff_tile_last(const forge_flash_shape &s, int qt) {
    return min(FB_BS * qt + FB_BS - 1, s.Tq - 1) + (s.Tk - s.Tq);
}

/* The dQ writer of consumer c's part of the tile (warpgroup 0, thread 32 + 32c): per iteration of the block, the
 * staged tile into dq in the tile's turn for that part (see the header of flash_attention_bf16_wgmma_bwd_fused.cu).
 * The turn is waited first: it is usually there before the tile is staged. D = 128: columns 64c.. of the tile's 64
 * rows; D = 64: rows 32c.. of the tile, all 64 columns (nothing to add when they are all past Tq, as the tail
 * tile's second half can be). */
template <int D>
__device__ __forceinline__ void ff_dq_write(const fb_kv_block &kb, const forge_flash_shape &s, int c,
                                            const CUtensorMap *tm_dq, uint32_t *__restrict__ turns,
                                            const ff_smem<D> &sm) {
    typedef ff_cfg<D> F;
    const int ntq = (s.Tq + FB_BS - 1) / FB_BS, nkb = (s.Tk + FB_BR - 1) / FB_BR, kbi = kb.k0 / FB_BR;
    for (int it = 0; it < kb.total; it++) {
        const int h = kb.hk * kb.G + it / kb.nq, qt = kb.t_first + it % kb.nq, qt0 = qt * FB_BS;
        const int last = ff_tile_last(s, qt); /* >= kb.k0: the block sees this tile */
        const uint32_t turn = (uint32_t)(min(nkb - 1, last / FB_BR) - kbi);
        uint32_t *ctr = turns + (((size_t)kb.b * s.H + h) * ntq + qt) * 2 + c;
        ff_turn_wait(ctr, turn);
        asm volatile("fence.proxy.async.global;" ::: "memory"); /* the earlier blocks' adds before ours */
        mbar_wait_wide(sm.stgfull(c), (uint32_t)it & 1u);
        if constexpr (D == 128) {
#pragma unroll
            for (int j = 0; j < 2; j++)
                ff_tile_out(tm_dq, h * D + 64 * c + 32 * j, qt0, kb.b, sm.stg(c) + j * (F::STG / 2), turn != 0);
            tma_store_commit();
        } else {
            const int r0 = qt0 + F::DQ_ROWS * c;
            if (r0 < s.Tq) {
#pragma unroll
                for (int j = 0; j < 2; j++)
                    ff_tile_out(tm_dq, h * D + 32 * j, r0, kb.b, sm.stg(c) + j * (F::STG / 2), turn != 0);
                tma_store_commit();
            }
        }
        tma_store_wait_read<0>();
        mbar_arrive(sm.stgempty(c));
        tma_store_wait_all();
        asm volatile("fence.proxy.async.global;" ::: "memory"); /* our completed adds before the release */
        asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(ctr), "r"(1u) : "memory");
    }
}

/* ---- the D = 64 instance's dQ pieces ---------------------------------------------------------------------------- */

#define FF_REGS16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FF_D16(C)                                                                                                   \
    C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11]),  \
        C(d[12]), C(d[13]), C(d[14]), C(d[15])

/* d (64 x 32 fp32) = (_first: scale-d false, d written only) or += A (64 x 16 bf16 fragments) . B (16 x 32, smem
 * desc, MN-major: imm-trans-b 1) */
__device__ __forceinline__ void ff_wgmma_rs_n32_first(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" FF_REGS16
                 "}, {%16, %17, %18, %19}, %20, p, 1, 1, 1;\n}\n"
                 : FF_D16("=f")
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
__device__ __forceinline__ void ff_wgmma_rs_n32(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" FF_REGS16
                 "}, {%16, %17, %18, %19}, %20, 1, 1, 1, 1;\n"
                 : FF_D16("+f")
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

/* The thread's register A fragments of K^T (rows: K's 64 columns, k: the block's 128 keys in 8 k16 steps;
 * fw_to_a's layout: a[kk][m] holds row 16 warp + g + 8 (m & 1), keys 16 kk + 8 (m >> 1) + 2 tq, +1) from the
 * resident K box at k (128 key rows of 128 B, 128B-swizzled as TMA writes it: 16-byte chunk j of row r at
 * ((j ^ (r & 7)) << 4)) by ldmatrix.trans: matrix m of step kk is keys 16 kk + 8 (m >> 1) .. + 7 x columns
 * 16 warp + 8 (m & 1) .. + 7, one 16-byte chunk of each key row, whose address lane 8m + r gives (key & 7 = r).
 * Read once per CTA, after the resident barrier. */
__device__ __forceinline__ void ff_load_kt(uint32_t (&a)[FB_BR / 16][4], uint32_t k, int warp, int lane) {
    const int m = lane / 8, r = lane % 8;
    const uint32_t chunk = (uint32_t)(2 * warp + (m & 1));
#pragma unroll
    for (int kk = 0; kk < FB_BR / 16; kk++) {
        const uint32_t key = (uint32_t)(16 * kk + 8 * (m >> 1) + r);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(a[kk][0]), "=r"(a[kk][1]), "=r"(a[kk][2]), "=r"(a[kk][3])
                     : "r"(k + key * 128u + ((chunk ^ (uint32_t)r) << 4)));
    }
}

/* A consumer's dS^T (its A fragments sa: rows = its 64 keys, columns = the tile's 64 queries, bf16 pairs) into rows
 * row0.. of the D = 64 dS^T buffer at ds (1 KiB aligned): two halves of 32 queries, half i at i * 8 KiB, each 128
 * key rows of 64 B in the 64-byte-swizzled MN-major layout wgmma_desc_mn64 reads (16-byte chunk j of row r at
 * ((j ^ ((r >> 1) & 3)) << 4)). sa[kk][2 jj + h] holds row g + 8h, queries 16 kk + 8 jj + 2 tq, +1 (fw_to_a):
 * half kk / 2, chunk 2 (kk % 2) + jj, bytes 4 tq.. of it. row0 is a multiple of 8, so (r >> 1) & 3 = g >> 1 for
 * both of the thread's rows: folded into the row base (whose bits 4-5 are clear), then one xor with an immediate
 * per store (fb_opaque: as ff_store_ds). Per store the warp's 32 lanes hit 32 distinct banks. */
__device__ __forceinline__ void ff_store_ds64(uint32_t ds, int row0, int g, int tq, const uint32_t (&sa)[4][4]) {
    const uint32_t bt = fb_opaque((ds + (uint32_t)(row0 + g) * 64u + 4u * tq) | ((uint32_t)(g >> 1) << 4));
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int jj = 0; jj < 2; jj++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                ff_st_shared((bt + (uint32_t)(kk >> 1) * 8192u + h * 512u) ^ ((uint32_t)(2 * (kk & 1) + jj) << 4),
                             sa[kk][2 * jj + h]);
}

/* dqt (64 columns x 32 queries fp32) = K^T (kt: ff_load_kt) . dS^T[:, 32c ..] (half, half c of the D = 64 dS^T
 * buffer): 8 k16 steps over the block's keys in order, step kk at kk * 1 KiB (16 rows of 64 B), B MN-major with
 * the 64-byte swizzle (wgmma_desc_mn64; N = 32 is one swizzle atom wide). */
__device__ __forceinline__ void ff_dq_product64(float (&dqt)[16], const uint32_t (&kt)[FB_BR / 16][4], uint32_t half) {
#pragma unroll
    for (int kk = 0; kk < FB_BR / 16; kk++) {
        const uint64_t db = wgmma_desc_mn64(half + kk * 1024);
        if (kk == 0)
            ff_wgmma_rs_n32_first(dqt, kt[kk], db);
        else
            ff_wgmma_rs_n32(dqt, kt[kk], db);
    }
}

/* The thread's dQ^T fragment d (columns 16 warp + g + 8 rr, queries 8 nn + 2 tq + e at d[4 nn + 2 rr + e]) into the
 * D = 64 staging tile at stg (1 KiB aligned) as TMA reads it: two boxes of 32 query rows x 32 columns (128 B), box
 * j (columns 32j..) at j * 4 KiB, 16-byte chunk c of row r at ((c ^ (r & 7)) << 4) (TMA's 128B swizzle). The
 * thread's columns are in box warp / 2, chunk 4 (warp & 1) + 2 rr + g / 4, word g % 4; its row r = 8 nn + 2 tq + e
 * has r & 7 = 2 tq + e. So (4 (warp & 1) + g / 4) ^ 2 tq is folded into the row base (bits 4-6 clear), then one
 * xor with (2 rr + e) per store; fb_opaque keeps the compiler from hoisting the 16 addresses out of the tile loop.
 * Scalar stores (each of the thread's values is in another row or chunk); per store the warp's 32 lanes hit 32
 * distinct banks. */
__device__ __forceinline__ void ff_store_dq64(uint32_t stg, int warp, int g, int tq, const float (&d)[16]) {
    const uint32_t row = stg + (uint32_t)(warp >> 1) * 4096u + (uint32_t)tq * 256u + 4u * (uint32_t)(g & 3);
    const uint32_t bt = fb_opaque(row | ((uint32_t)((4 * (warp & 1) + (g >> 2)) ^ (2 * tq)) << 4));
#pragma unroll
    for (int nn = 0; nn < 4; nn++)
#pragma unroll
        for (int rr = 0; rr < 2; rr++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const uint32_t a = (bt + (uint32_t)nn * 1024u + (uint32_t)e * 128u) ^ ((uint32_t)(2 * rr + e) << 4);
                asm volatile("st.shared.f32 [%0], %1;" ::"r"(a), "f"(d[4 * nn + 2 * rr + e]) : "memory");
            }
}

/* ---- the kernel ------------------------------------------------------------------------------------------------ */

/* A consumer's dQ tile of iteration it, waited (dqa), out: buffer (it & 1) of dS released, the tile (times scale)
 * into the consumer's staging tile once its writer has read the last one, stgfull. */
template <int D>
__device__ __forceinline__ void ff_dq_out(const ff_smem<D> &sm, int c, int it, float (&dqa)[ff_cfg<D>::DQ_REGS],
                                          int warp, int lane, int g, int tq, float scale) {
    if (lane == 0) mbar_arrive(sm.dsempty(it & 1));
#pragma unroll
    for (int i = 0; i < ff_cfg<D>::DQ_REGS; i++) dqa[i] *= scale;
    mbar_wait_wide(sm.stgempty(c), ((uint32_t)it & 1u) ^ 1u);
    if constexpr (D == 128)
        ff_store_dq(sm.stg(c), warp, g, tq, dqa);
    else
        ff_store_dq64(sm.stg(c), warp, g, tq, dqa);
    ff_fence_proxy_async(); /* the staging stores, visible to the TMA (async proxy) */
    __syncwarp();
    if (lane == 0) mbar_arrive(sm.stgfull(c));
}

/* D = 128: consumer c's dQ[:, 64c ..] of iteration it's tile = dS . K over the 128 keys (kbox: K's columns 64c..),
 * once both halves of the tile's dS are stored; waited, then ff_dq_out. */
__device__ __forceinline__ void ff_dq_tile(const ff_smem<128> &sm, int c, int it, uint32_t kbox, int warp, int lane,
                                           int g, int tq, float scale) {
    mbar_wait_wide(sm.dsfull(it & 1), (uint32_t)(it >> 1) & 1u);
    float dqa[32];
    wgmma_fence();
    ff_dq_product(dqa, sm.ds(it & 1), fb_opaque(kbox));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(dqa);
    __syncwarp();
    ff_dq_out<128>(sm, c, it, dqa, warp, lane, g, tq, scale);
}

/* D = 64: consumer c's dQ^T of iteration it's queries 32c.. = K^T (kt) . dS^T[:, 32c ..] over the 128 keys, once
 * both consumers' dS^T are stored; waited, then ff_dq_out. */
__device__ __forceinline__ void ff_dq_tile64(const ff_smem<64> &sm, int c, int it, const uint32_t (&kt)[FB_BR / 16][4],
                                             int warp, int lane, int g, int tq, float scale) {
    mbar_wait_wide(sm.dsfull(it & 1), (uint32_t)(it >> 1) & 1u);
    float dqt[16];
    wgmma_fence(); /* kt was written by ordinary instructions */
    ff_dq_product64(dqt, kt, sm.ds(it & 1) + (uint32_t)c * (ff_cfg<64>::DS / 2));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(dqt);
    __syncwarp();
    ff_dq_out<64>(sm, c, it, dqt, warp, lane, g, tq, scale);
}

/* The consumer thread's keys key_lo, key_lo + 8 (warpgroup's first key wk0), rebuilt where they are used from an
 * opaque copy of the thread index: held across the tile loop, ptxas spilled it. */
__device__ __forceinline__ int ff_key_lo(int wk0) {
    const int t = (int)(fb_opaque(threadIdx.x) % 128u); /* the thread's index in its warpgroup */
    return wk0 + t / 32 * 16 + t % 32 / 4;
}

template <int D>
__global__ void __launch_bounds__(FB_THREADS, 1)
    ff_bwd_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                  const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                  const __grid_constant__ CUtensorMap tm_dq, const __grid_constant__ CUtensorMap tm_rows,
                  uint32_t *__restrict__ turns, const fb_grads grads, forge_flash_shape s, float sl2, float scale,
                  int desc) {
    typedef ff_cfg<D> F;
    extern __shared__ __align__(1024) unsigned char ff_smem_raw[];
    ff_smem<D> sm;
    sm.base = (smem_u32(ff_smem_raw) + 1023u) & ~1023u;
    const float *ld_gen = (const float *)(ff_smem_raw + (sm.ld() - smem_u32(ff_smem_raw)));
    const int kbi = desc ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const fb_kv_block kb = fb_kv_block_at(s, kbi * FB_BR, blockIdx.y, blockIdx.z);
    const int wg = wgmma_warpgroup_index(); /* warp-uniform: descriptors in uniform registers */

    if (threadIdx.x == 0) {
        for (int i = 0; i < 2; i++) {
            mbar_init(sm.dsfull(i), FB_CONSUMER_WARPS);
            mbar_init(sm.dsempty(i), FB_CONSUMER_WARPS);
        }
        for (int i = 0; i < 2; i++) {
            mbar_init(sm.stgfull(i), FB_CONSUMER_WARPS / 2);
            mbar_init(sm.stgempty(i), 1);
        }
        fb_barriers_init(sm.resbar(), F::STAGES); /* and the init fences */
    }
    __syncthreads();
    forge_pdl_wait(); /* shared memory only above; global memory from here (pdl.cuh) */
    forge_pdl_launch_dependents();

    if (wg == 0) {
        wgmma_setmaxnreg_dec<F::PRODUCER_REGS>();
        if (threadIdx.x == 0)
            fb_kv_produce<D, FB_BR, F::STAGES>(kb, s, &tm_k, &tm_v, &tm_q, &tm_do, &tm_rows, sm.k(), sm.v(), sm.ring(),
                                               sm.ld(), sm.resbar(), sm.bars());
        else if (threadIdx.x == 32 || threadIdx.x == 64)
            ff_dq_write<D>(kb, s, threadIdx.x / 32 - 1, &tm_dq, turns, sm);
        return;
    }

    wgmma_setmaxnreg_inc<F::CONSUMER_REGS>();
    const int c = wg - 1;
    const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int wk0 = kb.k0 + c * 64; /* this warpgroup's first key */
    const int diag = kb.diag;

    float adk[D / 2], adv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) adk[i] = adv[i] = 0.0f;

    if (kb.total > 0) mbar_wait_wide(sm.resbar(), 0);
    const uint32_t ka = sm.k() + c * 8192, va = sm.v() + c * 8192; /* rows 64c.. of each 128-row box */
    [[maybe_unused]] const uint32_t kbox = sm.k() + c * (FB_BR * 128); /* D = 128: K's columns 64c.., all 128 keys */
    /* D = 64: the consumer's rows of K and V (fb_dkdv_kernel<64, 1>'s) and all of K^T as register A fragments */
    [[maybe_unused]] uint32_t kf[D / 16][4], vf[D / 16][4], kt[FB_BR / 16][4];
    if constexpr (D == 64) {
        if (kb.total > 0) {
            fb_load_a<D>(kf, ka, FB_BR * 128, warp, g, tq);
            fb_load_a<D>(vf, va, FB_BR * 128, warp, g, tq);
            ff_load_kt(kt, sm.k(), warp, lane);
        }
    }
    int stage = 0;
    uint32_t phase = 0;
    for (int it = 0; it < kb.total; it++) {
        const int qt0 = (kb.t_first + it % kb.nq) * FB_BS;
        const int db = it & 1;
        const uint32_t du = (uint32_t)(it >> 1) & 1u;
        mbar_wait_wide(sm.full(stage), phase);
        const uint32_t qtl = sm.ring() + stage * F::kv::STAGE_BYTES, dtl = qtl + F::kv::TILE_BYTES;
        /* the warpgroup's first key is seen by queries >= wk0 - diag; keys past Tk are never stored */
        const bool vis = wk0 <= qt0 + FB_BS - 1 + diag && wk0 < s.Tk;
        uint32_t pa[4][4], sa[4][4];
        if (vis) {
            const float *ls = ld_gen + stage * (2 * FB_BS);
            float st[32], dpt[32];
            if constexpr (D == 64)
                fb_dkdv_tile_ps_rs<D>(st, dpt, kf, vf, qtl, dtl, ls, tq, sl2,
                                      fb_pt_bounds_of(wk0, ff_key_lo(wk0), qt0, diag, s.Tq));
            else
                fb_dkdv_tile_ps<D>(st, dpt, ka, va, qtl, dtl, ls, tq, sl2,
                                   fb_pt_bounds_of(wk0, ff_key_lo(wk0), qt0, diag, s.Tq));
            fw_to_a<64>(pa, st);
            fw_to_a<64>(sa, dpt);
        } else { /* none of this warpgroup's keys is visible: its dS^T half is zero (pa is not read) */
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int i = 0; i < 4; i++) sa[kk][i] = 0u;
        }

        /* dS^T into buffer db once both dQ products of its previous use have read it, and dV += P^T.dO, dK +=
         * dS^T.Q, waited. At D = 128 the two products are issued first and run while dS^T is stored (1.04x at
         * (16,16,2048,128) and (8,16,4096,128), bitwise; at D = 64 the same order measured 0.94-0.96x, so there the
         * products follow the store; lab/notes/flash.md, 2026-12-04) */
        if constexpr (D == 128) {
            if (vis) fb_dkdv_issue<D>(adv, adk, pa, sa, dtl, qtl);
        }
        mbar_wait_wide(sm.dsempty(db), du ^ 1u);
        if constexpr (D == 64)
            ff_store_ds64(sm.ds(db), c * 64 + warp * 16, g, tq, sa);
        else
            ff_store_ds(sm.ds(db), c * 64 + warp * 16, g, tq, sa);
        ff_fence_proxy_async();
        __syncwarp();
        if (lane == 0) mbar_arrive(sm.dsfull(db));
        if constexpr (D == 128) {
            if (vis) fb_dkdv_wait<D>(adv, adk);
        } else {
            if (vis) fb_dkdv_accumulate<D>(adv, adk, pa, sa, dtl, qtl);
        }

        /* then this tile's dQ product */
        if constexpr (D == 64)
            ff_dq_tile64(sm, c, it, kt, warp, lane, g, tq, scale);
        else
            ff_dq_tile(sm, c, it, kbox, warp, lane, g, tq, scale);
        __syncwarp();
        if (lane == 0) mbar_arrive(sm.empty(stage)); /* the Q / dO tiles are read */
        if (++stage == F::STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }
    fb_dkdv_store<D>(grads, adk, adv, s, kb.b, kb.hk, ff_key_lo(wk0), tq, scale);
}

/* Whether any row of query tile qt sees a key: the tiles that do not (Tq > Tk) are the first ones, and no key block
 * adds to them. */
__host__ __device__ __forceinline__ int ff_tile_seen(const forge_flash_shape &s, int qt) {
    return ff_tile_last(s, qt) >= 0;
}

/* bf16 gradients: dq at g.dq (bf16 rows of g.dq_stride elements) from the fp32 accumulator dq32 (B, Tq, H, D). A
 * token's H * D values are contiguous in both, so a thread converts a chunk of 8 of them: two 16-byte loads, then one
 * 16-byte store where the row stride keeps it 16-byte aligned (VEC), else four 4-byte ones; each pair stored as
 * fb_grad_store2 stores it (fb_bf16x2_add: rn(0 + d), or rn(old + d) when accumulating), d = 0 in tiles that see no
 * key. The chunks are numbered token-major (n_chunks = tokens x row_chunks < 2^31), one a thread in 256-thread
 * blocks: one 32-bit division per 8 values. A block per token (row_chunks threads: 96 at GPT-2 124M) made 16 K
 * blocks of a few KiB each, whose launch rate held the pass at ~30 us for its 75 MB (H200, lab/notes/flash.md). */
template <bool VEC>
__global__ void ff_dq_bf16(const float *__restrict__ dq32, const fb_grads g, forge_flash_shape s, int row_chunks,
                           int n_chunks) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    /* unsigned: i + the grid's stride stays below 2^32 for n_chunks < 2^31 */
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)n_chunks; i += gridDim.x * blockDim.x) {
        const unsigned token = i / (unsigned)row_chunks, ch = i - token * (unsigned)row_chunks;
        float v[8];
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = 0.0f;
        if (ff_tile_seen(s, (int)(token % (unsigned)s.Tq) / FB_BS)) {
            const float4 *src = (const float4 *)(dq32 + (size_t)i * 8);
            const float4 x = src[0], y = src[1];
            v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
        }
        uint32_t *dst = (uint32_t *)((uint16_t *)g.dq + (size_t)token * g.dq_stride + (size_t)ch * 8);
        uint32_t w[4] = {0u, 0u, 0u, 0u}; /* the old pairs: +0 + d = rn(0 + d) */
        if (g.accumulate) {
            if (VEC) {
                const uint4 o = *(const uint4 *)dst;
                w[0] = o.x, w[1] = o.y, w[2] = o.z, w[3] = o.w;
            } else {
#pragma unroll
                for (int k = 0; k < 4; k++) w[k] = dst[k];
            }
        }
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = fb_bf16x2_add(w[k], v[2 * k], v[2 * k + 1]);
        if (VEC) {
            *(uint4 *)dst = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++) dst[k] = w[k];
        }
    }
}

/* The fused backward at head dim D into c.g, after fb_backward_prepare: turns, the FORGE_FLASH_BF16_TURNS(B, H, Tq)
 * counters (zeroed here, before the kernel); dq32, the fp32 dQ accumulator (B, Tq, H, D): c.g.dq itself for fp32
 * gradients, else scratch that ff_dq_bf16 stores from; order: FB_FUSED_BY_RULE, FB_FUSED_ASC or FB_FUSED_DESC
 * (fb_launch_fused); entry: named in errors. */
template <int D>
static forge_status ff_launch(const fb_call &c, uint32_t *turns, float *dq32, int order, const char *entry) {
    typedef ff_cfg<D> F;
    const forge_flash_shape &s = c.s;
    /* dq32 (B, Tq, H * D fp32 dense: dims H * D, Tq, B) in the 32-column x DQ_ROWS-row x 1 boxes ff_dq_write adds */
    gemm_encode_tiled_fn encode = nullptr;
    FORGE_TRY(gemm_get_encoder(&encode));
    const cuuint64_t row = (cuuint64_t)s.H * D * 4;
    const cuuint64_t dims[3] = {(cuuint64_t)s.H * D, (cuuint64_t)s.Tq, (cuuint64_t)s.B};
    const cuuint64_t strides[2] = {row, row * (cuuint64_t)s.Tq};
    const cuuint32_t box[3] = {32, F::DQ_ROWS, 1};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    CUtensorMap tm_dq;
    const CUresult r = encode(&tm_dq, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, dq32, dims, strides, box, elem_strides,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: cuTensorMapEncodeTiled for the fp32 dq (B=%d x Tq=%d rows of %d columns, box 32 x %d, "
                           "128B swizzle) failed with CUresult %d",
                           entry, s.B, s.Tq, s.H * D, F::DQ_ROWS, (int)r);
    const int ntq = (s.Tq + FB_BS - 1) / FB_BS, nkb = (s.Tk + FB_BR - 1) / FB_BR;
    int desc = order == FB_FUSED_DESC;
    if (order == FB_FUSED_BY_RULE) {
        int dev = 0, sms = 0;
        CUDA_TRY(cudaGetDevice(&dev));
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        desc = nkb > sms; /* one CTA per SM (shared memory and registers) */
    }
    CUDA_TRY(cudaMemsetAsync(turns, 0, (size_t)s.B * s.H * ntq * 2 * sizeof(uint32_t), c.st));
    static kernel_attrs_once once;
    CUDA_TRY(kernel_attrs_set(&once, (const void *)ff_bwd_kernel<D>, (int)F::SMEM, 0));
    const dim3 grid((unsigned)nkb, (unsigned)s.Hkv, (unsigned)s.B);
    CUDA_LAUNCH_TRY(forge_pdl_launch(ff_bwd_kernel<D>, grid, FB_THREADS, F::SMEM, c.st, c.pdl, c.k_res, c.v_res,
                                     c.q_str, c.do_str, tm_dq, c.rows_map, turns, c.g, c.s, c.sl2, c.scale, desc),
                    D == 128 ? "ff_bwd_kernel<128>" : "ff_bwd_kernel<64>");
    if (c.g.bf16) {
        const int row_chunks = s.H * D / 8;
        const long long n_chunks = (long long)s.B * s.Tq * row_chunks;
        if (n_chunks > 0x7fffffffLL)
            return forge_error(FORGE_ERR_UNSUPPORTED, "%s: %lld dQ chunks of 8 exceed the conversion's int index", entry,
                               n_chunks);
        const long long blocks = (n_chunks + 255) / 256;
        const bool vec = c.g.dq_stride % 8 == 0 && (uintptr_t)c.g.dq % 16 == 0;
        CUDA_LAUNCH_TRY(forge_pdl_launch(vec ? ff_dq_bf16<true> : ff_dq_bf16<false>,
                                         dim3((unsigned)(blocks < 0x7fffffffLL ? blocks : 0x7fffffffLL)), 256, 0, c.st,
                                         c.pdl, (const float *)dq32, c.g, c.s, row_chunks, (int)n_chunks),
                        "ff_dq_bf16");
        return FORGE_OK;
    }
    int unseen = 0;
    while (unseen < ntq && !ff_tile_seen(s, unseen)) unseen++;
    const size_t zrows = (size_t)(FB_BS * unseen < s.Tq ? FB_BS * unseen : s.Tq), rb = (size_t)row;
    if (zrows > 0) CUDA_TRY(cudaMemset2DAsync(dq32, (size_t)s.Tq * rb, 0, zrows * rb, (size_t)s.B, c.st));
    return FORGE_OK;
}

#endif
