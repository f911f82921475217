/*
 * flash16_bwd_3wg.cu: the D = 64 dQ and dK/dV kernels of forge's Hopper (sm_90a) bf16 flash backward with THREE
 * consumer warpgroups per CTA (lab). Entry: lab_flash16_backward_3wg (flash16_variants.h); measurements:
 * lab/notes/flash.md (2026-12-03 eleventh session).
 *
 * Why: fb_dq_kernel<64> and fb_dkdv_kernel<64> (src/backend/cuda/flash_attention_bf16_wgmma_bwd.cu, whose
 * header explains the ring, the resident / streamed split, the fragments, causal skipping, FB_BIG masks and GQA)
 * run one CTA per SM with two consumer warpgroups: while both are in their exp / dS arithmetic the tensor pipe
 * idles. Two CTAs per SM (four consumers, flash16_bwd_2cta.cu) measured slower for dK/dV because 64-query tiles
 * need ~144 registers a thread and two CTAs cap them at 128 (32-query tiles: 0.70-0.79x). Here one CTA with three
 * consumer warpgroups, each keeping the product's 64-row tiles and per-tile code (fb_dq_tile_sdp, fb_dq_p,
 * fb_dkdv_tile_ps, fb_dkdv_accumulate: the same instructions per element):
 * - fb3_dq_kernel: 512 threads (the product's producer warpgroup + 3 consumers), 128 registers (the dQ step needs
 *   fewer), 192 resident queries.
 * - fb3_dkdv_kernel: 384 threads, no producer warpgroup (with one, setmaxnreg can give each of the 3 consumers at
 *   most 160 registers, and the dK/dV step needs more: it spilled at 160): 12 warps, 3 per register sub-partition,
 *   168 registers; warp 0 refills the ring between its tiles (flash16_bwd_2cta.cu's producer-less ring). 192
 *   resident keys.
 * Resident tensors are one 192-row box per 64 columns (tensor maps of 192-row boxes; consumer c's rows at c * 8 KiB
 * as in the product's 128-row box), 12 consumer warps release each stage, the product's 4 stages. Each output row
 * is accumulated over the same tiles in the same order as in the product, so dQ, dK and dV are bitwise forge's
 * (tested). Deterministic (no atomics). Launched without PDL (as the lab's other variants).
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

#define LAB_FB3_ENTRY "lab_flash16_backward_3wg" /* named in errors */
#define FB3_D 64
#define FB3_NC 3                       /* consumer warpgroups */
#define FB3_THREADS (128 * (FB3_NC + 1)) /* fb3_dq_kernel: + the producer warpgroup */
#define FB3_RES (64 * FB3_NC)          /* resident rows per CTA */
#define FB3_STAGES 4 /* fb_kv_produce's ring (fb_cfg<64>::STAGES) */

static_assert(FB3_STAGES == fb_cfg<FB3_D>::STAGES, "fb_kv_produce's ring");
static_assert(FB3_THREADS * 128 <= 65536, "the launch-time allocation of __launch_bounds__(FB3_THREADS, 1)");

struct fb3_cfg {
    static constexpr uint32_t RES_BYTES = FB3_RES * FB3_D * 2;  /* one resident tensor */
    static constexpr uint32_t TILE_BYTES = FB_BS * FB3_D * 2;   /* one streamed tensor */
    static constexpr uint32_t STAGE_BYTES = 2 * TILE_BYTES;     /* K + V (dQ) or Q + dO (dK/dV) */
    static constexpr uint32_t LD_BYTES = 2 * FB_BS * 4;         /* dK/dV: lse*log2e and delta of a stage */
    static constexpr size_t SMEM =
        2 * (size_t)RES_BYTES + (size_t)FB3_STAGES * (STAGE_BYTES + LD_BYTES) + 8 * (1 + 2 * FB3_STAGES) + 1024;
    static_assert(SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");
};

/* resbar (count 1), full[st] (full_count), empty[st] (every consumer warp) */
__device__ __forceinline__ void fb3_barriers_init(uint32_t resbar, uint32_t full_count) {
    mbar_init(resbar, 1);
    for (int st = 0; st < FB3_STAGES; st++) {
        mbar_init(resbar + 8 + 8 * st, full_count);
        mbar_init(resbar + 8 + 8 * (FB3_STAGES + st), 4 * FB3_NC);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void fb3_advance(int &stage, uint32_t &phase) {
    if (++stage == FB3_STAGES) {
        stage = 0;
        phase ^= 1;
    }
}

/* dQ: 192 queries per CTA (longest-first), 64-key K / V tiles streamed; fb_dq_kernel<64>'s consumer step */
__global__ void __launch_bounds__(FB3_THREADS, 1)
    fb3_dq_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                  const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                  const float *__restrict__ rows, const fb_grads grads,
                  forge_flash_shape s, float sl2, float scale) {
    typedef fb3_cfg cfg;
    constexpr int D = FB3_D;
    extern __shared__ __align__(1024) unsigned char fb_smem[];
    const uint32_t base = (smem_u32(fb_smem) + 1023u) & ~1023u;
    const uint32_t sq = base, sdo = base + cfg::RES_BYTES;
    const uint32_t sring = sdo + cfg::RES_BYTES; /* stage st: K at +st*STAGE_BYTES, V TILE_BYTES further */
    const uint32_t resbar = sring + FB3_STAGES * (cfg::STAGE_BYTES + cfg::LD_BYTES);
    const uint32_t bars = resbar + 8;

    const int q0 = (gridDim.x - 1 - blockIdx.x) * FB3_RES, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / (s.H / s.Hkv);
    const int diag = s.Tk - s.Tq;
    const int ntiles = flash_key_tiles(s.Tk, diag, q0, FB3_RES, FB_BS);
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) fb3_barriers_init(resbar, 1);
    __syncthreads();

    if (wg == 0) {
        if (threadIdx.x == 0 && ntiles > 0) {
            mbar_arrive_expect_tx(resbar, 2 * cfg::RES_BYTES);
            fw_tma_load_3d(sq, &tm_q, h * D, q0, b, resbar);
            fw_tma_load_3d(sdo, &tm_do, h * D, q0, b, resbar);
            int stage = 0;
            uint32_t phase = 0;
            for (int t = 0; t < ntiles; t++) {
                const uint32_t full = bars + 8 * stage, empty = bars + 8 * (FB3_STAGES + stage);
                mbar_wait(empty, phase ^ 1);
                mbar_arrive_expect_tx(full, cfg::STAGE_BYTES);
                const uint32_t dk = sring + stage * cfg::STAGE_BYTES, dv = dk + cfg::TILE_BYTES;
                fw_tma_load_3d(dk, &tm_k, hk * D, t * FB_BS, b, full);
                fw_tma_load_3d(dv, &tm_v, hk * D, t * FB_BS, b, full);
                fb3_advance(stage, phase);
            }
        }
        return;
    }

    const int c = wg - 1;
    const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int wrow0 = q0 + c * 64;
    const int row_lo = wrow0 + warp * 16 + g; /* this thread's rows: row_lo, row_lo + 8 */

    float lse2[2], dlt[2];
    fb_dq_rows(rows, s, b, h, row_lo, lse2, dlt);

    float acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) acc[i] = 0.0f;

    if (ntiles > 0) mbar_wait(resbar, 0);
    const uint32_t qa = sq + c * 8192, doa = sdo + c * 8192; /* rows 64c.. of each 192-row box */
    int stage = 0;
    uint32_t phase = 0;
    for (int t = 0; t < ntiles; t++) {
        const int k0 = t * FB_BS;
        mbar_wait(bars + 8 * stage, phase);
        if (k0 <= wrow0 + 63 + diag && wrow0 < s.Tq) { /* T % 192 != 0: whole consumers past Tq skip */
            const uint32_t kt = sring + stage * cfg::STAGE_BYTES;
            float sc[32], dp[32];
            /* the 192-row box's rows are 128 B apart like the product's 128-row box: the same descriptors */
            fb_dq_tile_sdp<D>(sc, dp, qa, doa, kt);
            wgmma_wait<1>();
            wgmma_fence_operands(sc);
            fb_dq_p(sc, k0, wrow0, row_lo, diag, s.Tk, tq, sl2, lse2);
            wgmma_wait<0>();
            wgmma_fence_operands(dp);
#pragma unroll
            for (int i = 0; i < 32; i++) dp[i] = sc[i] * (dp[i] - dlt[(i >> 1) & 1]); /* dS / scale */
            uint32_t a[4][4];
            fw_to_a<64>(a, dp);
            wgmma_fence();
            fb_rs<D>(acc, a, kt);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operands(acc);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (FB3_STAGES + stage));
        fb3_advance(stage, phase);
    }

    fb_dq_store<D>(grads, acc, s, b, h, row_lo, tq, scale);
}

/* ---- dK/dV: three consumer warpgroups and no producer warpgroup --------------------------------------------
 * With a producer warpgroup the CTA is 512 threads: 128 registers a thread at entry, and setmaxnreg (producer 24)
 * can raise the three consumers to 160 at most (128 x 24 + 384 x 160 <= 65,536; ptxas compiles a setmaxnreg.inc
 * branch to that count). The product's dK/dV step (dK 32 + dV 32 + S^T 32 + dP^T 32 fp32 + P^T / dS^T 16 + 16, plus
 * addresses) spilled 260 B at 160 and serialised its wgmmas (C7512). Without the producer, 384 threads = 12 warps,
 * 3 on each register sub-partition: 168 registers, 0 spills. Warp 0 refills the ring between its tiles as in
 * flash16_bwd_2cta.cu's fb2_dkdv_kernel (whose header has the deadlock argument): it loads every tile whose
 * stage is already empty (non-blocking test) up to STAGES ahead and blocks only for the tile it needs next; its
 * 32 lanes store the 64 queries' lse*log2e and delta (two each) and arrive on full (count 1 + 32). */
#define FB3_KV_THREADS (128 * FB3_NC)
static_assert(FB3_KV_THREADS / 32 / 4 * 32 * 168 <= 16384, "168 registers: 3 warps a sub-partition");

/* lse*log2e and delta of query rows lane and lane + 32 of iteration it's tile from the packed row statistics
 * (fb_rows_at; 0 past Tq, and 0 past the last iteration): plain loads whose values the refill stores one call
 * later */
__device__ __forceinline__ void fb3_ld_prefetch(const fb_kv_block &kb, const forge_flash_shape &s, const float *rows,
                                                int it, int lane, float (&pl)[2], float (&pd)[2]) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        pl[i] = 0.0f;
        pd[i] = 0.0f;
        if (it < kb.total) {
            const int h = kb.hk * kb.G + it / kb.nq, row = (kb.t_first + it % kb.nq) * FB_BS + lane + 32 * i;
            const size_t at = fb_rows_at(s, kb.b, h, row);
            pl[i] = rows[at];
            pd[i] = rows[fb_rows_plane(s) + at];
        }
    }
}

/* warp 0's load of tile `next` into stage st (the stage is empty): lane 0's TMA of Q and dO, every lane's slot
 * stores of (pl, pd), every lane's arrive on full */
__device__ __forceinline__ void fb3_kv_issue(const fb_kv_block &kb, const CUtensorMap *tm_q, const CUtensorMap *tm_do,
                                             uint32_t sring, float *ld_gen, uint32_t bars, int next, int st, int lane,
                                             const float (&pl)[2], const float (&pd)[2]) {
    typedef fb3_cfg cfg;
    const uint32_t full = bars + 8 * st;
    if (lane == 0) {
        const int h = kb.hk * kb.G + next / kb.nq, qt0 = (kb.t_first + next % kb.nq) * FB_BS;
        const uint32_t dq_ = sring + st * cfg::STAGE_BYTES;
        mbar_arrive_expect_tx(full, cfg::STAGE_BYTES);
        fw_tma_load_3d(dq_, tm_q, h * FB3_D, qt0, kb.b, full);
        fw_tma_load_3d(dq_ + cfg::TILE_BYTES, tm_do, h * FB3_D, qt0, kb.b, full);
    }
    float *slot = ld_gen + st * (2 * FB_BS);
#pragma unroll
    for (int i = 0; i < 2; i++) {
        slot[lane + 32 * i] = pl[i];
        slot[FB_BS + lane + 32 * i] = pd[i];
    }
    mbar_arrive(full); /* release: the slot stores before any consumer's wait on full returns */
}

/* dst (shared) = bytes of global src, completing on the mbarrier bar (expect_tx counted by the caller): a plain
 * bulk copy (forge's kernels load the slot by a tensor copy instead, fb_kv_produce says why) */
__device__ __forceinline__ void fb_bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

/* BULK = 1: a tile's lse*log2e and delta (the packed row statistics, fb_rows_at) are two 256-byte bulk copies
 * that complete on the stage's full barrier with the TMA (count 1): thread 0 alone refills the ring, and warp 0's
 * other lanes go on to their tile. */
__device__ __forceinline__ void fb3_kv_issue_bulk(const fb_kv_block &kb, const forge_flash_shape &s,
                                                  const CUtensorMap *tm_q, const CUtensorMap *tm_do, uint32_t sring,
                                                  uint32_t sld, uint32_t bars, const float *rows, int next, int st) {
    typedef fb3_cfg cfg;
    const uint32_t full = bars + 8 * st;
    const int h = kb.hk * kb.G + next / kb.nq, qt0 = (kb.t_first + next % kb.nq) * FB_BS;
    const uint32_t dq_ = sring + st * cfg::STAGE_BYTES, slot = sld + st * cfg::LD_BYTES;
    const float *src = rows + fb_rows_at(s, kb.b, h, qt0);
    mbar_arrive_expect_tx(full, cfg::STAGE_BYTES + cfg::LD_BYTES);
    fw_tma_load_3d(dq_, tm_q, h * FB3_D, qt0, kb.b, full);
    fw_tma_load_3d(dq_ + cfg::TILE_BYTES, tm_do, h * FB3_D, qt0, kb.b, full);
    fb_bulk_load(slot, src, FB_BS * 4, full);
    fb_bulk_load(slot + FB_BS * 4, src + fb_rows_plane(s), FB_BS * 4, full);
}

template <int BULK>
__global__ void __launch_bounds__(FB3_KV_THREADS, 1)
    fb3_dkdv_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                    const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                    const float *__restrict__ rows, const fb_grads grads, forge_flash_shape s, float sl2,
                    float scale) {
    typedef fb3_cfg cfg;
    constexpr int D = FB3_D, STAGES = FB3_STAGES;
    extern __shared__ __align__(1024) unsigned char fb_smem[];
    const uint32_t base = (smem_u32(fb_smem) + 1023u) & ~1023u;
    const uint32_t sk = base, sv = base + cfg::RES_BYTES;
    const uint32_t sring = sv + cfg::RES_BYTES; /* stage st: Q at +st*STAGE_BYTES, dO TILE_BYTES further */
    const uint32_t sld = sring + STAGES * cfg::STAGE_BYTES; /* stage st: lse*log2e [64], delta [64] */
    const uint32_t resbar = sld + STAGES * cfg::LD_BYTES;
    const uint32_t bars = resbar + 8;
    float *ld_gen = (float *)(fb_smem + (sld - smem_u32(fb_smem)));

    const fb_kv_block kb = fb_kv_block_of(s, FB3_RES);
    const int warp_id = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (threadIdx.x == 0) fb3_barriers_init(resbar, BULK ? 1 : 1 + 32);
    __syncthreads();
    if (threadIdx.x == 0 && kb.total > 0) {
        mbar_arrive_expect_tx(resbar, 2 * cfg::RES_BYTES);
        fw_tma_load_3d(sk, &tm_k, kb.hk * D, kb.k0, kb.b, resbar);
        fw_tma_load_3d(sv, &tm_v, kb.hk * D, kb.k0, kb.b, resbar);
    }
    const bool issuer = BULK ? threadIdx.x == 0 : warp_id == 0; /* BULK: thread 0; else warp 0 (warp-uniform) */
    int next = 0, lstage = 0;         /* the issuer's next tile to load, its stage and phase */
    uint32_t lphase = 0;
    float pl[2], pd[2];
    if (BULK && issuer && kb.total > 0) { /* the fresh ring: every stage empty, no wait */
        next = min(kb.total, STAGES);
        for (int i = 0; i < next; i++) fb3_kv_issue_bulk(kb, s, &tm_q, &tm_do, sring, sld, bars, rows, i, i);
        lstage = next % STAGES;
        lphase = next == STAGES ? 1u : 0u;
    }
    if (!BULK && issuer && kb.total > 0) {
        const int n0 = min(kb.total, STAGES);
        for (int i = 0; i < n0; i++) {
            fb3_ld_prefetch(kb, s, rows, i, lane, pl, pd);
            fb3_kv_issue(kb, &tm_q, &tm_do, sring, ld_gen, bars, i, i, lane, pl, pd);
        }
        next = n0;
        lstage = n0 % STAGES;
        lphase = n0 == STAGES ? 1u : 0u;
        fb3_ld_prefetch(kb, s, rows, next, lane, pl, pd);
    }

    const int c = warp_id / 4; /* consumer warpgroup, warp-uniform */
    const int warp = warp_id % 4, g = lane / 4, tq = lane % 4;
    const int wk0 = kb.k0 + c * 64;
    const int key_lo = wk0 + warp * 16 + g;
    const int diag = kb.diag;

    float adk[D / 2], adv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) adk[i] = adv[i] = 0.0f;

    const uint32_t ka = sk + c * 8192, va = sv + c * 8192;
    int stage = 0;
    uint32_t phase = 0;
    for (int it = 0; it < kb.total; it++) {
        if (BULK && issuer) { /* the refill, thread 0 */
            while (next < kb.total && next < it + STAGES) {
                const uint32_t empty = bars + 8 * (STAGES + lstage);
                if (next > it && !lab_mbar_test(empty, lphase ^ 1)) break;
                mbar_wait(empty, lphase ^ 1);
                fb3_kv_issue_bulk(kb, s, &tm_q, &tm_do, sring, sld, bars, rows, next, lstage);
                next++;
                fb3_advance(lstage, lphase);
            }
        }
        if (BULK) __syncwarp();
        if (!BULK && issuer) { /* the refill, warp-wide: every lane waits / stores / arrives */
            while (next < kb.total && next < it + STAGES) {
                const uint32_t empty = bars + 8 * (STAGES + lstage);
                if (next > it) {
                    const uint32_t ok =
                        __shfl_sync(0xffffffffu, lane == 0 ? lab_mbar_test(empty, lphase ^ 1) : 0u, 0);
                    if (!ok) break;
                }
                mbar_wait(empty, lphase ^ 1); /* every lane: acquire before overwriting the slot */
                fb3_kv_issue(kb, &tm_q, &tm_do, sring, ld_gen, bars, next, lstage, lane, pl, pd);
                next++;
                fb3_advance(lstage, lphase);
                fb3_ld_prefetch(kb, s, rows, next, lane, pl, pd);
            }
        }
        if (it == 0) mbar_wait(resbar, 0);
        const int qt0 = (kb.t_first + it % kb.nq) * FB_BS;
        mbar_wait(bars + 8 * stage, phase);
        if (wk0 <= qt0 + FB_BS - 1 + diag && wk0 < s.Tk) {
            const uint32_t qt = sring + stage * cfg::STAGE_BYTES, dt = qt + cfg::TILE_BYTES;
            const float *ls = ld_gen + stage * (2 * FB_BS);
            float st[32], dpt[32];
            fb_dkdv_tile_ps<D>(st, dpt, ka, va, qt, dt, ls, tq, sl2, fb_pt_bounds_of(wk0, key_lo, qt0, diag, s.Tq));
            uint32_t pa[4][4], sa[4][4];
            fw_to_a<64>(pa, st);
            fw_to_a<64>(sa, dpt);
            fb_dkdv_accumulate<D>(adv, adk, pa, sa, dt, qt);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + stage));
        fb3_advance(stage, phase);
    }

    fb_dkdv_store<D>(grads, adk, adv, s, kb.b, kb.hk, key_lo, tq, scale);
}

/* ---- host ----------------------------------------------------------------------------------------------- */

static forge_status fb3_encode(CUtensorMap *map, const void *ptr, int B, int T, int cols, long long stride,
                               int box_rows, const char *what) {
    return wgmma_encode_tokens(map, ptr, B, T, cols, stride, box_rows, what, LAB_FB3_ENTRY,
                               "forge_flash_bf16_backward_wgmma");
}

template <typename K> static forge_status fb3_prepare(K kern) {
    CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fb3_cfg::SMEM));
    return FORGE_OK;
}

/* c: fb_backward_prepare's maps (K, V 64-row boxes); Q and dO resident as 192-row boxes */
static forge_status fb3_launch_dq(const fb_call &c, const void *q, const void *dout) {
    const forge_flash_shape &s = c.s;
    CUtensorMap tq, tdo;
    FORGE_TRY(fb3_encode(&tq, q, s.B, s.Tq, s.H * FB3_D, s.q_stride, FB3_RES, "Q (192-row boxes)"));
    FORGE_TRY(fb3_encode(&tdo, dout, s.B, s.Tq, s.H * FB3_D, s.o_stride, FB3_RES, "dO (192-row boxes)"));
    FORGE_TRY(fb3_prepare(fb3_dq_kernel));
    dim3 grid((unsigned)((s.Tq + FB3_RES - 1) / FB3_RES), (unsigned)s.H, (unsigned)s.B);
    fb3_dq_kernel<<<grid, FB3_THREADS, fb3_cfg::SMEM, c.st>>>(tq, tdo, c.k_str, c.v_str, c.rows, c.g, s, c.sl2,
                                                              c.scale);
    CUDA_LAUNCH_CHECK("fb3_dq_kernel");
    return FORGE_OK;
}

/* c: fb_backward_prepare's maps (Q, dO 64-row boxes); K and V resident as 192-row boxes */
template <int BULK> static forge_status fb3_launch_dkdv(const fb_call &c, const void *k, const void *v) {
    const forge_flash_shape &s = c.s;
    CUtensorMap tk, tv;
    FORGE_TRY(fb3_encode(&tk, k, s.B, s.Tk, s.Hkv * FB3_D, s.k_stride, FB3_RES, "K (192-row boxes)"));
    FORGE_TRY(fb3_encode(&tv, v, s.B, s.Tk, s.Hkv * FB3_D, s.v_stride, FB3_RES, "V (192-row boxes)"));
    FORGE_TRY(fb3_prepare(fb3_dkdv_kernel<BULK>));
    dim3 grid((unsigned)((s.Tk + FB3_RES - 1) / FB3_RES), (unsigned)s.Hkv, (unsigned)s.B);
    fb3_dkdv_kernel<BULK><<<grid, FB3_KV_THREADS, fb3_cfg::SMEM, c.st>>>(tk, tv, c.q_str, c.do_str, c.rows, c.g,
                                                                       s, c.sl2, c.scale);
    CUDA_LAUNCH_CHECK(BULK ? "fb3_dkdv_kernel<bulk>" : "fb3_dkdv_kernel");
    return FORGE_OK;
}

extern "C" forge_status lab_flash16_backward_3wg(const forge_flash_shape *s, const void *q, const void *k,
                                                 const void *v, const void *out_bf16, const void *dout_bf16,
                                                 const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                 int kernels, void *stream) {
    const int known = LAB_FLASH16_BWD3_DQ | LAB_FLASH16_BWD3_DKDV | LAB_FLASH16_BWD3_NO_DQ |
                      LAB_FLASH16_BWD3_NO_DKDV | LAB_FLASH16_BWD3_BULK;
    if ((kernels & ~known) != 0)
        return forge_error(FORGE_ERR_ARG,
                           "%s: kernels = %#x (expected a set of LAB_FLASH16_BWD3_DQ, _DKDV, _NO_DQ, _NO_DKDV, _BULK)",
                           LAB_FB3_ENTRY, kernels);
    int launch = 0;
    FORGE_TRY(fb_backward_begin(LAB_FB3_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, &launch));
    if (!launch) return FORGE_OK;
    if (s->D != FB3_D)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: the three-consumer backward is compiled for D = 64 only, got D=%d; use "
                           "forge_flash_bf16_backward_wgmma",
                           LAB_FB3_ENTRY, s->D);
    fb_call c;
    FORGE_TRY(
        fb_backward_prepare(&c, LAB_FB3_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream, 0));
    if (!(kernels & LAB_FLASH16_BWD3_NO_DQ))
        FORGE_TRY((kernels & LAB_FLASH16_BWD3_DQ) ? fb3_launch_dq(c, q, dout_bf16) : fb_launch_dq_default(c));
    if (!(kernels & LAB_FLASH16_BWD3_NO_DKDV))
        FORGE_TRY(!(kernels & LAB_FLASH16_BWD3_DKDV) ? fb_launch_dkdv_default(c)
                  : (kernels & LAB_FLASH16_BWD3_BULK)  ? fb3_launch_dkdv<1>(c, k, v)
                                                       : fb3_launch_dkdv<0>(c, k, v));
    return FORGE_OK;
}
