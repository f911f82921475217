/*
 * flash16_bwd_2cta.cu: the D = 64 dQ and dK/dV kernels of forge's Hopper
 * (sm_90a) bf16 flash backward with TWO CTAs per SM (lab). Entry:
 * lab_flash16_backward_2cta (flash16_variants.h); measurements and the plan:
 * lab/notes/flash.md (2026-12-03 tenth session, backward).
 *
 * Why: fb_dq_kernel<64> and fb_dkdv_kernel<64>
 * (src/backend/cuda/flash_attention_bf16_wgmma_bwd.cu, whose header explains
 * the ring, the resident / streamed split, the fragments, causal skipping,
 * FB_BIG masks and GQA) run one CTA per SM: only two consumer warpgroups share
 * the tensor pipe, and each waits for its own exp / dS arithmetic. The forward
 * run as two CTAs per SM (fw_fwd64_kernel, src/backend/cuda/flash_attention_bf16_wgmma.cu) was 1.35-1.48x faster on the
 * H200; here the same for the backward: four consumer warpgroups per SM,
 * interleaved by the warp schedulers.
 *
 * What changes against the product's kernels (everything else is their code:
 * fb_grad_store2, fb_dkdv_store, the tensor maps of fb_backward_prepare, the
 * 128-row resident boxes, the masks' arithmetic, lse -inf -> 0, dS unscaled,
 * dQ / dK times scale at the store, longest-first query blocks in dQ):
 * - No setmaxnreg. Two CTAs of 256 threads are 16 warps, 4 on each of the
 *   register file's four sub-partitions (16,384 registers): cap 128 a thread.
 *   Two of 288 threads are 18 warps, 5 on one sub-partition: cap 96 (see
 *   fw_fwd64_kernel).
 * - fb2_dq_kernel<64, 0> (256 threads, cap 128): 128 queries per CTA, 64 per
 *   consumer warpgroup, 64-key K / V tiles (S 32 + dP 32 + dQ 32 fp32 + dS 16
 *   b32 registers), 4 stages; NO producer warp: thread 0 (warp 0 of consumer
 *   warpgroup 0) issues the TMA loads (fb2_refill, below).
 *   fb2_dq_kernel<32, 1> (288 threads, cap 96): 32-key tiles (S 16 + dP 16 +
 *   dQ 32 + dS 8), 8 stages, and a producer warp (warp 8, lane 0) as the
 *   forward's fw_fwd64_kernel. S = Q.K^T and dP = dO.V^T are m64n32k16 (N = 32)
 *   and dQ += dS.K is two k16 steps over the tile's 32 keys.
 * - fb2_dkdv_kernel (256 threads, cap 128): 128 keys per CTA, 64 per consumer
 *   warpgroup (dK 32 + dV 32 fp32 registers), 32-query Q / dO tiles (S^T 16 +
 *   dP^T 16 + P^T 8 + dS^T 8), 8 stages, no producer warp: WARP 0 of
 *   consumer warpgroup 0 refills the ring. BM = 64 would be 144 registers.
 * - Streamed tiles of 32 rows are single boxes of 32 rows x 64 columns (4 KiB,
 *   128B swizzle): as the K-major B operand of the S-like product the 8-row
 *   groups are 1 KiB apart as in a 64-row box, and as the MN-major B operand of
 *   the accumulate product k16 step kk is at kk * 2 KiB, so the product's
 *   descriptors (wgmma_desc, wgmma_desc_mn) read them unchanged.
 *
 * The producer-less ring (fb2_refill). At the start of its iteration t the
 * issuer (dQ: thread 0; dK/dV: warp 0) loads every tile `next` with
 * next < t + STAGES whose stage is already empty, testing the stage's empty
 * barrier without blocking (mbarrier.test_wait), and blocks only for tile t
 * itself, which it needs now. No deadlock: tile t's stage is freed by the
 * releases of tile t - STAGES by all eight consumer warps; the issuer's own
 * warpgroup released it before reaching t, and the other warpgroup reaches
 * that release needing only tiles <= t - STAGES, all issued before the issuer
 * got to t (the issuer never waits for anything the other warpgroup needs from
 * it). The issuer's warpgroup still waits for and releases every tile it does
 * not compute, so no warp arrives on an empty barrier's next phase early.
 * The cost: the issuer's warp leaves its MMA work for the refill; with the
 * non-blocking test it blocks only when the other warpgroup is STAGES tiles
 * behind, which the producer design would stall on too.
 *
 * lse / delta of the dK/dV kernel's streamed queries (the product's producer
 * bulk-copies them into the stage's slot from the packed row statistics):
 * here the refilling warp 0 loads them with plain loads for the stage it loads: with
 * BM = 32 queries each of its 32 lanes owns one query: it waits for the stage's
 * empty barrier itself (acquire: the consumers' reads of the slot's previous
 * contents happen before its store), stores lse*log2e and delta into the slot
 * and arrives on full (release: its store happens before any consumer's
 * wait on full returns); lane 0's arrive.expect_tx is the 33rd arrival. The
 * global loads are issued one refill ahead into two registers of each lane
 * (fb2_ld_prefetch) so their latency runs under the iteration's MMAs instead of
 * stalling warpgroup 0 (whose wgmmas need all four of its warps). A
 * cp.async.bulk of the 32 lse floats is not possible in general: a head's lse
 * row starts at (b H + h) Tq floats, not 16-byte aligned when Tq % 4 != 0.
 *
 * Deterministic (no atomics; each dQ / dK / dV element written by one thread
 * once). Launched without PDL (as the lab's other variants).
 */
#include <math.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../../src/backend/cuda/cuda_check.h"
#include "../../src/backend/cuda/flash_attention_bf16_wgmma_bwd.cuh"
#include "../../src/backend/cuda/flash_wgmma_common.cuh"
#include "../../src/backend/cuda/wgmma_common.cuh"
#include "../../src/backend/cuda/wgmma_tmap.h"

#include "flash16_lab_ring.cuh"
#include "flash16_bwd_three.cuh"
#include "flash16_variants.h"

#define LAB_FB2_ENTRY "lab_flash16_backward_2cta" /* named in errors */
#define FB2_D 64
#define FB2_RES 128                  /* resident rows per CTA: 64 per consumer warpgroup */
#define FB2_RES_BYTES (FB2_RES * 128) /* one resident 128 x 64 bf16 box */
#define FB2_BM 32                    /* queries per streamed dK/dV tile */
#define FB2_SMEM_LIMIT 115712        /* dynamic shared memory each of two CTAs may have (as the forward's fw_fwd64_kernel) */

/* two CTAs of 256 threads: 16 warps, 4 per register sub-partition -> 128 registers; of 288: 5 -> 96 */
static_assert(4 * 32 * 128 <= 16384 && 5 * 32 * 96 <= 16384 && 5 * 32 * 104 > 16384, "register caps");

/* ---- wgmma at N = 32 ----------------------------------------------------------------------------- */

#define FB2_REGS16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FB2_OUT16 WG_D8("=f", 0), WG_D8("=f", 8)
#define FB2_ACC16 WG_D8("+f", 0), WG_D8("+f", 8)

/* S (64 x 32 fp32) = (first: scale-d false, d written only) or += A (64x16, K-major) . B (32x16, K-major)^T, as
 * fb_wgmma_ss_n64_first / fb_wgmma_ss_n64 at N = 32 */
__device__ __forceinline__ void fb2_wgmma_ss_n32_first(float (&d)[16], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" FB2_REGS16 "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : FB2_OUT16
                 : "l"(desc_a), "l"(desc_b));
}
__device__ __forceinline__ void fb2_wgmma_ss_n32(float (&d)[16], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" FB2_REGS16 "}, %16, %17, 1, 1, 1, 0, 0;\n"
                 : FB2_ACC16
                 : "l"(desc_a), "l"(desc_b));
}

/* d (64 x N fp32) = A (64 x 64, K-major at a: 64 rows of a resident 128-row box) . B^T (B: the N x 64 streamed
 * tile at b, K-major); D = 64 is one 64-column box, k16 step kk at kk * 32 B */
template <int N> __device__ __forceinline__ void fb2_ss(float (&d)[N / 2], uint32_t a, uint32_t b) {
#pragma unroll
    for (int kk = 0; kk < FB2_D / 16; kk++) {
        const uint64_t da = wgmma_desc(a + kk * 32), db = wgmma_desc(b + kk * 32);
        if constexpr (N == 64) {
            if (kk == 0)
                fb_wgmma_ss_n64_first<0>(d, da, db);
            else
                fb_wgmma_ss_n64<0>(d, da, db);
        } else {
            static_assert(N == 32, "N = 32 or 64");
            if (kk == 0)
                fb2_wgmma_ss_n32_first(d, da, db);
            else
                fb2_wgmma_ss_n32(d, da, db);
        }
    }
}

/* acc (64 x 64 fp32) += A (64 x K bf16 fragments, K/16 k16 steps) . B (the streamed K-row tile at b, MN-major) */
template <int K> __device__ __forceinline__ void fb2_rs(float (&acc)[32], const uint32_t (&a)[K / 16][4], uint32_t b) {
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++) fw_pv<FB2_D>(acc, a[kk], wgmma_desc_mn(b + kk * 2048));
}

__device__ __forceinline__ void fb2_advance(int &stage, uint32_t &phase, int stages) {
    if (++stage == stages) {
        stage = 0;
        phase ^= 1;
    }
}

/* The issuer's side of a producer-less ring (see the header): the next tile to load and its stage / phase. */
struct fb2_loader {
    int next, stage;
    uint32_t phase;
};

/* ---- dQ -------------------------------------------------------------------------------------------- */

template <int BN> struct fb2_dq_cfg {
    static constexpr int STAGES = BN == 64 ? 4 : 8;
    static constexpr int THREADS = BN == 64 ? 256 : 288; /* BN = 32: + the producer warp */
    static constexpr int PRODUCER = BN == 32;
    static constexpr uint32_t TILE_BYTES = BN * 128; /* one streamed K or V tile */
    static constexpr uint32_t STAGE_BYTES = 2 * TILE_BYTES;
    /* Q, dO (resident), the ring, then resbar, full[STAGES], empty[STAGES]; 1 KiB slack to align the base */
    static constexpr size_t SMEM = 2 * (size_t)FB2_RES_BYTES + (size_t)STAGES * STAGE_BYTES + 8 * (1 + 2 * STAGES) +
                                   1024;
    static_assert(SMEM <= FB2_SMEM_LIMIT, "two CTAs fit an SM's shared memory");
};

/* K and V tile t (BN keys) into stage st: one arrive.expect_tx, two TMA boxes */
template <int BN>
__device__ __forceinline__ void fb2_dq_issue(const CUtensorMap *tm_k, const CUtensorMap *tm_v, uint32_t sring,
                                             uint32_t bars, int t, int st, int hk, int b) {
    typedef fb2_dq_cfg<BN> cfg;
    const uint32_t full = bars + 8 * st, dk = sring + st * cfg::STAGE_BYTES;
    mbar_arrive_expect_tx(full, cfg::STAGE_BYTES);
    fw_tma_load_3d(dk, tm_k, hk * FB2_D, t * BN, b, full);
    fw_tma_load_3d(dk + cfg::TILE_BYTES, tm_v, hk * FB2_D, t * BN, b, full);
}

/* dQ: P = exp2(S sl2 - lse2) with the branch-free mask of the BN-key tile at k0 (fb_dq_p at BN keys) */
template <int BN>
__device__ __forceinline__ void fb2_dq_p(float (&sc)[BN / 2], int k0, int wrow0, int row_lo, int diag, int Tk, int tq,
                                         float sl2, const float (&lse2)[2]) {
    const bool edge = k0 + BN - 1 > wrow0 + diag || k0 + BN > Tk;
    const int vis0 = edge ? row_lo + diag - k0 : FB_BIG, vis1 = edge ? row_lo + 8 + diag - k0 : FB_BIG;
    const int lim = edge ? Tk - k0 : FB_BIG;
#pragma unroll
    for (int n = 0; n < BN / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = n * 8 + 2 * tq + (e & 1);
            const float p = fw_ex2(fmaf(sc[4 * n + e], sl2, -lse2[e >> 1]));
            sc[4 * n + e] = (j > ((e >> 1) ? vis1 : vis0) || j >= lim) ? 0.0f : p;
        }
}

template <int BN>
__global__ void __launch_bounds__(fb2_dq_cfg<BN>::THREADS, 2)
    fb2_dq_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                  const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                  const float *__restrict__ rows, const fb_grads grads,
                  forge_flash_shape s, float sl2, float scale) {
    typedef fb2_dq_cfg<BN> cfg;
    constexpr int STAGES = cfg::STAGES;
    extern __shared__ __align__(1024) unsigned char fb2_smem[];
    const uint32_t base = (smem_u32(fb2_smem) + 1023u) & ~1023u;
    const uint32_t sq = base, sdo = base + FB2_RES_BYTES;
    const uint32_t sring = sdo + FB2_RES_BYTES; /* stage st: K at +st*STAGE_BYTES, V TILE_BYTES further */
    const uint32_t resbar = sring + STAGES * cfg::STAGE_BYTES;
    const uint32_t bars = resbar + 8; /* full[st] at +8st, empty[st] at +8(STAGES+st) */

    const int q0 = (gridDim.x - 1 - blockIdx.x) * FB2_RES, h = blockIdx.y, b = blockIdx.z; /* longest first */
    const int hk = h / (s.H / s.Hkv);
    const int diag = s.Tk - s.Tq;
    const int ntiles = flash_key_tiles(s.Tk, diag, q0, FB2_RES, BN);
    const int warp_id = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        mbar_init(resbar, 1);
        wgmma_ring_init<STAGES>(bars, FB_CONSUMER_WARPS); /* its fences cover resbar */
    }
    __syncthreads();

    /* Q and dO once: by the producer warp (BN = 32) or the issuer, thread 0, which also fills the fresh ring
     * (every stage empty: no wait) */
    fb2_loader ld = {0, 0, 0};
    if (threadIdx.x == (cfg::PRODUCER ? 256 : 0) && ntiles > 0) {
        mbar_arrive_expect_tx(resbar, 2 * FB2_RES_BYTES);
        fw_tma_load_3d(sq, &tm_q, h * FB2_D, q0, b, resbar);
        fw_tma_load_3d(sdo, &tm_do, h * FB2_D, q0, b, resbar);
        if (!cfg::PRODUCER) {
            ld.next = min(ntiles, STAGES);
            for (int t = 0; t < ld.next; t++) fb2_dq_issue<BN>(&tm_k, &tm_v, sring, bars, t, t, hk, b);
            ld.stage = ld.next % STAGES;
            ld.phase = ld.next == STAGES ? 1u : 0u;
        }
    }
    if constexpr (cfg::PRODUCER) {
        if (warp_id == 8) {
            if (lane == 0) {
                int stage = 0;
                uint32_t phase = 0;
                for (int t = 0; t < ntiles; t++) {
                    mbar_wait(bars + 8 * (STAGES + stage), phase ^ 1);
                    fb2_dq_issue<BN>(&tm_k, &tm_v, sring, bars, t, stage, hk, b);
                    fb2_advance(stage, phase, STAGES);
                }
            }
            return;
        }
    }

    const int c = wgmma_warpgroup_index(); /* 0 or 1, warp-uniform */
    const int warp = warp_id % 4, g = lane / 4, tq = lane % 4;
    const int wrow0 = q0 + c * 64;
    const int row_lo = wrow0 + warp * 16 + g; /* this thread's rows: row_lo, row_lo + 8 */
    const bool issuer = !cfg::PRODUCER && threadIdx.x == 0;

    float lse2[2], dlt[2];
    fb_dq_rows(rows, s, b, h, row_lo, lse2, dlt);

    float acc[FB2_D / 2];
#pragma unroll
    for (int i = 0; i < FB2_D / 2; i++) acc[i] = 0.0f;

    const uint32_t qa = sq + c * 8192, doa = sdo + c * 8192; /* rows 64c.. of each 128-row box */
    int stage = 0;
    uint32_t phase = 0;
    for (int t = 0; t < ntiles; t++) {
        if (issuer) { /* fb2_refill: tiles up to t + STAGES - 1 whose stage is free; block only for tile t */
            while (ld.next < ntiles && ld.next < t + STAGES) {
                const uint32_t empty = bars + 8 * (STAGES + ld.stage);
                if (ld.next == t)
                    mbar_wait(empty, ld.phase ^ 1);
                else if (!lab_mbar_test(empty, ld.phase ^ 1))
                    break;
                fb2_dq_issue<BN>(&tm_k, &tm_v, sring, bars, ld.next, ld.stage, hk, b);
                ld.next++;
                fb2_advance(ld.stage, ld.phase, STAGES);
            }
        }
        __syncwarp();
        if (t == 0) mbar_wait(resbar, 0);
        const int k0 = t * BN;
        mbar_wait(bars + 8 * stage, phase);
        if (k0 <= wrow0 + 63 + diag) {
            const uint32_t kt = sring + stage * cfg::STAGE_BYTES, vt = kt + cfg::TILE_BYTES;
            float sc[BN / 2], dp[BN / 2];
            wgmma_fence();
            fb2_ss<BN>(sc, fb_opaque(qa), kt); /* S = Q.K^T */
            wgmma_commit();
            fb2_ss<BN>(dp, fb_opaque(doa), vt); /* dP = dO.V^T */
            wgmma_commit();
            wgmma_wait<1>();
            wgmma_fence_operands(sc);
            fb2_dq_p<BN>(sc, k0, wrow0, row_lo, diag, s.Tk, tq, sl2, lse2); /* branch-free: dP is in flight */
            wgmma_wait<0>();
            wgmma_fence_operands(dp);
#pragma unroll
            for (int i = 0; i < BN / 2; i++) dp[i] = sc[i] * (dp[i] - dlt[(i >> 1) & 1]); /* dS / scale */
            uint32_t a[BN / 16][4];
            fw_to_a<BN>(a, dp);
            wgmma_fence(); /* acc and a were written by ordinary instructions */
            fb2_rs<BN>(acc, a, kt); /* dQ += dS.K */
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operands(acc);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + stage));
        fb2_advance(stage, phase, STAGES);
    }

    fb_dq_store<FB2_D>(grads, acc, s, b, h, row_lo, tq, scale);
}

/* ---- dK / dV ---------------------------------------------------------------------------------------- */

struct fb2_kv_cfg {
    static constexpr int STAGES = 8;
    static constexpr int THREADS = 256;
    static constexpr uint32_t TILE_BYTES = FB2_BM * 128; /* one streamed Q or dO tile */
    static constexpr uint32_t STAGE_BYTES = 2 * TILE_BYTES;
    static constexpr uint32_t LD_BYTES = 2 * FB2_BM * 4; /* lse*log2e [32], delta [32] */
    /* K, V (resident), the ring, the lse/delta slots, resbar, full[STAGES], empty[STAGES]; 1 KiB slack */
    static constexpr size_t SMEM = 2 * (size_t)FB2_RES_BYTES + (size_t)STAGES * (STAGE_BYTES + LD_BYTES) +
                                   8 * (1 + 2 * STAGES) + 1024;
    static_assert(SMEM <= FB2_SMEM_LIMIT, "two CTAs fit an SM's shared memory");
};

/* The CTA's keys and streamed iterations (fb_kv_block_at at 128 keys, 32-query tiles): iteration it is query
 * head hk*G + it/nq, query tile t_first + it%nq. */
__device__ __forceinline__ fb_kv_block fb2_kv_block(const forge_flash_shape &s) {
    fb_kv_block kb;
    kb.k0 = blockIdx.x * FB2_RES;
    kb.hk = blockIdx.y;
    kb.b = blockIdx.z;
    kb.G = s.H / s.Hkv;
    kb.diag = s.Tk - s.Tq;
    const int qstart = max(0, kb.k0 - kb.diag); /* first query that sees any key of this block */
    kb.t_first = qstart / FB2_BM;
    kb.nq = qstart < s.Tq ? (s.Tq + FB2_BM - 1) / FB2_BM - kb.t_first : 0;
    kb.total = kb.G * kb.nq;
    return kb;
}

/* lse*log2e and delta of query row `lane` of iteration it's tile from the packed row statistics (fb_rows_at; 0
 * past Tq, and 0 past the last iteration): plain loads whose values the refill stores one call later */
__device__ __forceinline__ void fb2_ld_prefetch(const fb_kv_block &kb, const forge_flash_shape &s, const float *rows,
                                                int it, int lane, float &pl, float &pd) {
    pl = 0.0f;
    pd = 0.0f;
    if (it < kb.total) {
        const int h = kb.hk * kb.G + it / kb.nq, row = (kb.t_first + it % kb.nq) * FB2_BM + lane;
        const size_t at = fb_rows_at(s, kb.b, h, row);
        pl = rows[at];
        pd = rows[fb_rows_plane(s) + at];
    }
}

/* P^T (64 keys x BM queries) from S^T in place (fb_p_transposed at BM columns) */
__device__ __forceinline__ void fb2_p_transposed(float (&st)[FB2_BM / 2], const float *ls, int tq, float sl2,
                                                 int vis0, int vis1, int lim) {
#pragma unroll
    for (int n = 0; n < FB2_BM / 8; n++) {
        const int col = n * 8 + 2 * tq;
        const float2 l2 = *(const float2 *)(ls + col);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = col + (e & 1);
            const float p = fw_ex2(fmaf(st[4 * n + e], sl2, -((e & 1) ? l2.y : l2.x)));
            st[4 * n + e] = (j < ((e >> 1) ? vis1 : vis0) || j >= lim) ? 0.0f : p;
        }
    }
}

__global__ void __launch_bounds__(fb2_kv_cfg::THREADS, 2)
    fb2_dkdv_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                    const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                    const float *__restrict__ rows, const fb_grads grads,
                    forge_flash_shape s, float sl2, float scale) {
    typedef fb2_kv_cfg cfg;
    constexpr int STAGES = cfg::STAGES, BM = FB2_BM;
    extern __shared__ __align__(1024) unsigned char fb2_smem[];
    const uint32_t base = (smem_u32(fb2_smem) + 1023u) & ~1023u;
    const uint32_t sk = base, sv = base + FB2_RES_BYTES;
    const uint32_t sring = sv + FB2_RES_BYTES; /* stage st: Q at +st*STAGE_BYTES, dO TILE_BYTES further */
    const uint32_t sld = sring + STAGES * cfg::STAGE_BYTES; /* stage st: lse*log2e [32], delta [32] */
    const uint32_t resbar = sld + STAGES * cfg::LD_BYTES;
    const uint32_t bars = resbar + 8;
    float *ld_gen = (float *)(fb2_smem + (sld - smem_u32(fb2_smem))); /* generic view of the slots */

    const fb_kv_block kb = fb2_kv_block(s);
    const int warp_id = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        mbar_init(resbar, 1);
#pragma unroll
        for (int st = 0; st < STAGES; st++) {
            mbar_init(bars + 8 * st, 1 + 32); /* lane 0's arrive.expect_tx + 32 slot stores */
            mbar_init(bars + 8 * (STAGES + st), FB_CONSUMER_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0 && kb.total > 0) {
        mbar_arrive_expect_tx(resbar, 2 * FB2_RES_BYTES);
        fw_tma_load_3d(sk, &tm_k, kb.hk * FB2_D, kb.k0, kb.b, resbar);
        fw_tma_load_3d(sv, &tm_v, kb.hk * FB2_D, kb.k0, kb.b, resbar);
    }
    const bool issuer = warp_id == 0; /* warp-uniform */
    /* warp 0 fills the fresh ring (every stage empty: no wait): the TMA of its first n0 tiles, then the slots, all
     * lse / delta loads in flight before the first store */
    fb2_loader ld = {0, 0, 0};
    if (issuer && kb.total > 0) {
        const int n0 = min(kb.total, STAGES);
        if (lane == 0)
            for (int i = 0; i < n0; i++) {
                const int h = kb.hk * kb.G + i / kb.nq, qt0 = (kb.t_first + i % kb.nq) * BM;
                const uint32_t full = bars + 8 * i, dq_ = sring + i * cfg::STAGE_BYTES;
                mbar_arrive_expect_tx(full, cfg::STAGE_BYTES);
                fw_tma_load_3d(dq_, &tm_q, h * FB2_D, qt0, kb.b, full);
                fw_tma_load_3d(dq_ + cfg::TILE_BYTES, &tm_do, h * FB2_D, qt0, kb.b, full);
            }
        float l0[STAGES], d0[STAGES];
#pragma unroll
        for (int i = 0; i < STAGES; i++) fb2_ld_prefetch(kb, s, rows, i, lane, l0[i], d0[i]);
#pragma unroll
        for (int i = 0; i < STAGES; i++)
            if (i < n0) {
                float *slot = ld_gen + i * (2 * BM);
                slot[lane] = l0[i];
                slot[BM + lane] = d0[i];
                mbar_arrive(bars + 8 * i);
            }
        ld.next = n0;
        ld.stage = n0 % STAGES;
        ld.phase = n0 == STAGES ? 1u : 0u;
    }

    const int c = wgmma_warpgroup_index(); /* 0 or 1, warp-uniform */
    const int warp = warp_id % 4, g = lane / 4, tq = lane % 4;
    const int wk0 = kb.k0 + c * 64;         /* this warpgroup's first key */
    const int key_lo = wk0 + warp * 16 + g; /* this thread's keys: key_lo, key_lo + 8 */
    const int diag = kb.diag;

    float adk[FB2_D / 2], adv[FB2_D / 2];
#pragma unroll
    for (int i = 0; i < FB2_D / 2; i++) adk[i] = adv[i] = 0.0f;

    const uint32_t ka = sk + c * 8192, va = sv + c * 8192; /* rows 64c.. of each 128-row box */
    float pl = 0.0f, pd = 0.0f; /* the issuer's prefetched slot values of tile ld.next */
    if (issuer) fb2_ld_prefetch(kb, s, rows, ld.next, lane, pl, pd);
    int stage = 0;
    uint32_t phase = 0;
    for (int it = 0; it < kb.total; it++) {
        if (issuer) { /* fb2_refill, warp-wide: warp-uniform loop, every lane waits / stores / arrives */
            while (ld.next < kb.total && ld.next < it + STAGES) {
                const uint32_t empty = bars + 8 * (STAGES + ld.stage), full = bars + 8 * ld.stage;
                if (ld.next > it) {
                    const uint32_t ok = __shfl_sync(0xffffffffu, lane == 0 ? lab_mbar_test(empty, ld.phase ^ 1) : 0u, 0);
                    if (!ok) break;
                }
                mbar_wait(empty, ld.phase ^ 1); /* every lane: acquire before overwriting the slot */
                if (lane == 0) {
                    const int h = kb.hk * kb.G + ld.next / kb.nq, qt0 = (kb.t_first + ld.next % kb.nq) * BM;
                    const uint32_t dq_ = sring + ld.stage * cfg::STAGE_BYTES;
                    mbar_arrive_expect_tx(full, cfg::STAGE_BYTES);
                    fw_tma_load_3d(dq_, &tm_q, h * FB2_D, qt0, kb.b, full);
                    fw_tma_load_3d(dq_ + cfg::TILE_BYTES, &tm_do, h * FB2_D, qt0, kb.b, full);
                }
                float *slot = ld_gen + ld.stage * (2 * BM);
                slot[lane] = pl;
                slot[BM + lane] = pd;
                mbar_arrive(full); /* release: the slot stores before any consumer's wait on full returns */
                ld.next++;
                fb2_advance(ld.stage, ld.phase, STAGES);
                fb2_ld_prefetch(kb, s, rows, ld.next, lane, pl, pd);
            }
        }
        if (it == 0) mbar_wait(resbar, 0);
        const int qt0 = (kb.t_first + it % kb.nq) * BM;
        mbar_wait(bars + 8 * stage, phase);
        /* the warpgroup's first key is seen by queries >= wk0 - diag; keys past Tk are never stored */
        if (wk0 <= qt0 + BM - 1 + diag && wk0 < s.Tk) {
            const uint32_t qt = sring + stage * cfg::STAGE_BYTES, dt = qt + cfg::TILE_BYTES;
            const float *ls = ld_gen + stage * (2 * BM), *dl = ls + BM;
            float st[BM / 2], dpt[BM / 2];
            wgmma_fence();
            fb2_ss<BM>(st, fb_opaque(ka), qt); /* S^T = K.Q^T */
            wgmma_commit();
            fb2_ss<BM>(dpt, fb_opaque(va), dt); /* dP^T = V.dO^T */
            wgmma_commit();
            wgmma_wait<1>();
            wgmma_fence_operands(st);
            { /* P^T while dP^T runs (fb_pt_bounds_of at BM columns) */
                const bool edge = wk0 + 63 > qt0 + diag || qt0 + BM > s.Tq;
                const int vis0 = edge ? key_lo - diag - qt0 : -FB_BIG, vis1 = edge ? key_lo + 8 - diag - qt0 : -FB_BIG;
                const int lim = edge ? s.Tq - qt0 : FB_BIG;
                fb2_p_transposed(st, ls, tq, sl2, vis0, vis1, lim);
            }
            wgmma_wait<0>();
            wgmma_fence_operands(dpt);
#pragma unroll
            for (int n = 0; n < BM / 8; n++) {
                const float2 d2 = *(const float2 *)(dl + n * 8 + 2 * tq);
#pragma unroll
                for (int e = 0; e < 4; e++) /* dS^T / scale */
                    dpt[4 * n + e] = st[4 * n + e] * (dpt[4 * n + e] - ((e & 1) ? d2.y : d2.x));
            }
            uint32_t pa[BM / 16][4], sa[BM / 16][4];
            fw_to_a<BM>(pa, st);
            fw_to_a<BM>(sa, dpt);
            wgmma_fence(); /* adv, adk, pa, sa were written by ordinary instructions */
            fb2_rs<BM>(adv, pa, dt); /* dV += P^T.dO */
            fb2_rs<BM>(adk, sa, qt); /* dK += dS^T.Q */
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operands(adv);
            wgmma_fence_operands(adk);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + stage));
        fb2_advance(stage, phase, STAGES);
    }

    fb_dkdv_store<FB2_D>(grads, adk, adv, s, kb.b, kb.hk, key_lo, tq, scale);
}

/* ---- host ----------------------------------------------------------------------------------------------- */

template <typename K> static forge_status fb2_prepare(K kern, size_t smem) {
    CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    /* the largest shared-memory carveout, so two CTAs (plus the 1 KiB the system reserves per CTA) fit */
    CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  (int)cudaSharedmemCarveoutMaxShared));
    return FORGE_OK;
}

static forge_status fb2_encode(CUtensorMap *map, const void *ptr, int B, int T, int cols, long long stride,
                               int box_rows, const char *what) {
    return wgmma_encode_tokens(map, ptr, B, T, cols, stride, box_rows, what, LAB_FB2_ENTRY,
                               "forge_flash_bf16_backward_wgmma");
}

/* c: fb_backward_prepare's maps (Q, dO 128-row boxes; K, V 64-row boxes) */
template <int BN> static forge_status fb2_launch_dq(const fb_call &c, const void *k, const void *v) {
    typedef fb2_dq_cfg<BN> cfg;
    const forge_flash_shape &s = c.s;
    CUtensorMap tk = c.k_str, tv = c.v_str;
    if (BN != 64) {
        FORGE_TRY(fb2_encode(&tk, k, s.B, s.Tk, s.Hkv * FB2_D, s.k_stride, BN, "K (32-row boxes)"));
        FORGE_TRY(fb2_encode(&tv, v, s.B, s.Tk, s.Hkv * FB2_D, s.v_stride, BN, "V (32-row boxes)"));
    }
    FORGE_TRY(fb2_prepare(fb2_dq_kernel<BN>, cfg::SMEM));
    dim3 grid((unsigned)((s.Tq + FB2_RES - 1) / FB2_RES), (unsigned)s.H, (unsigned)s.B);
    fb2_dq_kernel<BN><<<grid, cfg::THREADS, cfg::SMEM, c.st>>>(c.q_res, c.do_res, tk, tv, c.rows, c.g, s,
                                                                c.sl2, c.scale);
    CUDA_LAUNCH_CHECK(BN == 64 ? "fb2_dq_kernel<64>" : "fb2_dq_kernel<32>");
    return FORGE_OK;
}

static forge_status fb2_launch_dkdv(const fb_call &c, const void *q, const void *dout) {
    const forge_flash_shape &s = c.s;
    CUtensorMap tq, tdo;
    FORGE_TRY(fb2_encode(&tq, q, s.B, s.Tq, s.H * FB2_D, s.q_stride, FB2_BM, "Q (32-row boxes)"));
    FORGE_TRY(fb2_encode(&tdo, dout, s.B, s.Tq, s.H * FB2_D, s.o_stride, FB2_BM, "dO (32-row boxes)"));
    FORGE_TRY(fb2_prepare(fb2_dkdv_kernel, fb2_kv_cfg::SMEM));
    dim3 grid((unsigned)((s.Tk + FB2_RES - 1) / FB2_RES), (unsigned)s.Hkv, (unsigned)s.B);
    fb2_dkdv_kernel<<<grid, fb2_kv_cfg::THREADS, fb2_kv_cfg::SMEM, c.st>>>(c.k_res, c.v_res, tq, tdo, c.rows,
                                                                          c.g, s, c.sl2, c.scale);
    CUDA_LAUNCH_CHECK("fb2_dkdv_kernel");
    return FORGE_OK;
}

extern "C" forge_status lab_flash16_backward_2cta(const forge_flash_shape *s, const void *q, const void *k,
                                                  const void *v, const void *out_bf16, const void *dout_bf16,
                                                  const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                  int kernels, void *stream) {
    const int known = LAB_FLASH16_BWD2_DQ64 | LAB_FLASH16_BWD2_DQ32 | LAB_FLASH16_BWD2_DKDV |
                      LAB_FLASH16_BWD2_NO_DQ | LAB_FLASH16_BWD2_NO_DKDV;
    if ((kernels & ~known) != 0 || ((kernels & LAB_FLASH16_BWD2_DQ64) && (kernels & LAB_FLASH16_BWD2_DQ32)))
        return forge_error(FORGE_ERR_ARG,
                           "%s: kernels = %#x (expected LAB_FLASH16_BWD2_DQ64 or _DQ32, _DKDV, _NO_DQ, _NO_DKDV; not "
                           "both dQ kernels)",
                           LAB_FB2_ENTRY, kernels);
    int launch = 0;
    FORGE_TRY(fb_backward_begin(LAB_FB2_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, &launch));
    if (!launch) return FORGE_OK;
    if (s->D != FB2_D)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: the two-CTA backward is compiled for D = 64 only, got D=%d; use "
                           "forge_flash_bf16_backward_wgmma",
                           LAB_FB2_ENTRY, s->D);
    fb_call c;
    FORGE_TRY(
        fb_backward_prepare(&c, LAB_FB2_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream, 0));
    if (!(kernels & LAB_FLASH16_BWD2_NO_DQ)) {
        if (kernels & LAB_FLASH16_BWD2_DQ64)
            FORGE_TRY(fb2_launch_dq<64>(c, k, v));
        else if (kernels & LAB_FLASH16_BWD2_DQ32)
            FORGE_TRY(fb2_launch_dq<32>(c, k, v));
        else
            FORGE_TRY(fb_launch_dq_default(c));
    }
    if (!(kernels & LAB_FLASH16_BWD2_NO_DKDV)) {
        if (kernels & LAB_FLASH16_BWD2_DKDV)
            FORGE_TRY(fb2_launch_dkdv(c, q, dout_bf16));
        else
            FORGE_TRY(fb_launch_dkdv_default(c));
    }
    return FORGE_OK;
}

extern "C" forge_status lab_flash16_backward_2cta_occupancy(int kernel, int *ctas_per_sm) {
    *ctas_per_sm = 0;
    if (kernel == LAB_FLASH16_BWD2_DQ64) {
        FORGE_TRY(fb2_prepare(fb2_dq_kernel<64>, fb2_dq_cfg<64>::SMEM));
        CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, (const void *)fb2_dq_kernel<64>,
                                                               fb2_dq_cfg<64>::THREADS, fb2_dq_cfg<64>::SMEM));
    } else if (kernel == LAB_FLASH16_BWD2_DQ32) {
        FORGE_TRY(fb2_prepare(fb2_dq_kernel<32>, fb2_dq_cfg<32>::SMEM));
        CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, (const void *)fb2_dq_kernel<32>,
                                                               fb2_dq_cfg<32>::THREADS, fb2_dq_cfg<32>::SMEM));
    } else if (kernel == LAB_FLASH16_BWD2_DKDV) {
        FORGE_TRY(fb2_prepare(fb2_dkdv_kernel, fb2_kv_cfg::SMEM));
        CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, (const void *)fb2_dkdv_kernel,
                                                               fb2_kv_cfg::THREADS, fb2_kv_cfg::SMEM));
    } else {
        return forge_error(FORGE_ERR_ARG, "%s_occupancy: kernel %d (expected LAB_FLASH16_BWD2_DQ64, _DQ32 or _DKDV)",
                           LAB_FB2_ENTRY, kernel);
    }
    return FORGE_OK;
}
