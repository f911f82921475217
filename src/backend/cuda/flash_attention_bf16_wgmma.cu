/*
 * flash_attention_bf16_wgmma.cu: the Hopper (sm_90a) forward of forge's bf16
 * flash attention on TMA + wgmma, FA3-style (issue 6; entry and contract in
 * flash_attention_bf16.h, notes in docs/flash-attention.md). Same results
 * contract as the mma.sync forward in flash_attention_bf16.cu.
 *
 * Design (the decisions a reader would otherwise get wrong):
 * - CTA = 3 warpgroups. Warpgroup 0 is the PRODUCER: one thread loads the
 *   128-row Q tile once (qbar) and streams BN-key tiles of K and V into a ring
 *   of STAGES stages (full[s]: 1 arrival + TMA bytes; empty[s]: lane 0 of each
 *   of the 8 consumer warps). Warpgroups 1, 2 are CONSUMERS, each owning 64
 *   query rows. Parities as in gemm_wgmma.cu: round r waits full with r&1 and
 *   empty with (r&1)^1.
 * - Tensor maps are 3D (column = h*D + d, token, batch) with the caller's
 *   token stride as the row stride: a box never crosses into the next batch,
 *   and rows past Tq / Tk are zero-filled by TMA (still counted in the bytes).
 *   Boxes are 64 columns (128 B, the 128B-swizzle limit) wide.
 * - S = Q.K^T: wgmma m64n128k16, A (Q) and B (K) both K-major from shared
 *   memory. A D-half of Q is one 128-row x 128 B box (16 KiB), of K one
 *   BN-row x 128 B box; the k16 step kk starts at (kk/4)*box + (kk%4)*32 B.
 * - O += P.V: wgmma m64nDk16 with A = P FROM REGISTERS. The accumulator of a
 *   wgmma (warp w: rows 16w.., per 8-column chunk n: regs 4n+0,1 row g cols
 *   8n+2t,+1; 4n+2,3 row g+8) is pairwise the register A fragment of
 *   m64nNk16 (a0 row g k 2t..; a1 row g+8; a2 row g k 2t+8..; a3 row g+8
 *   k 2t+8..), so chunks 2kk, 2kk+1 of S packed to bf16 are the A operand of
 *   key step kk. V (keys x D, D contiguous) is the MN-major B operand
 *   (imm-trans-b = 1): boxes of 64 D x 64 keys (8 KiB), box (key block i, D
 *   block j) at (i*D/64 + j)*8 KiB, so LBO = 8 KiB steps over D blocks and the
 *   key step kk starts at (kk/4)*(D/64)*8 KiB + (kk%4)*2 KiB (wgmma_desc_mn).
 * - Softmax in the log2 domain with scale*log2(e) folded into one FMA, row
 *   max/sum over the quad (shfl 1, 2); a row max of -inf is used as 0 so exp2
 *   never sees inf - inf; lse natural log, -inf for rows that see no key.
 * - Causal: a CTA stops at its last visible key tile; a warpgroup whose 64
 *   rows see none of a tile skips its MMAs but still releases the stage;
 *   only tiles straddling the diagonal or Tk evaluate the mask.
 * - Tk = 0 goes to the mma.sync forward (a tensor map cannot have a 0 dim).
 * - Everything waits through mbar_wait (traps after 10 s instead of hanging).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "flash_wgmma_common.cuh"
#include "wgmma_common.cuh"
#include "wgmma_tmap.h"

extern "C" {
#include "flash_attention_bf16.h"
}

#define FW_THREADS 384 /* producer warpgroup + 2 consumer warpgroups */
#define FW_BM 128      /* query rows per CTA */
#define FW_CONSUMER_WARPS 8
#define FW_PRODUCER_REGS 24
#define FW_CONSUMER_REGS 240
#define FW_LOG2E 1.4426950408889634f
#define FW_LN2 0.6931471805599453f

typedef unsigned short fw_bf16;

/* BN keys per streamed tile: 128 at D=64; at D=128 BN_D128 (S + O + P must fit the consumer registers) */
#ifndef FW_BN_D128
#define FW_BN_D128 64
#endif
template <int D> struct fw_cfg {
    static constexpr int BN = D == 64 ? 128 : FW_BN_D128;
    static constexpr int STAGES = D == 64 ? 4 : (BN == 64 ? 4 : 2);
    static constexpr uint32_t Q_BYTES = FW_BM * D * 2;
    static constexpr uint32_t KV_BYTES = BN * D * 2; /* one of K or V */
    static constexpr uint32_t STAGE_BYTES = 2 * KV_BYTES;
    /* Q, the ring, then qbar, full[STAGES], empty[STAGES]; 1 KiB slack to align the base to 1024 B */
    static constexpr size_t SMEM = Q_BYTES + (size_t)STAGES * STAGE_BYTES + 8 * (1 + 2 * STAGES) + 1024;
    static_assert(SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");
    static_assert(D == 64 || D == 128, "compiled head dims");
};

/* K/V tile t of BN keys into the ring's next stage (waits for it to be empty; K as D/64 boxes of BN rows x 128 B,
 * V as (BN/64) x (D/64) boxes of 64 x 64), then steps the ring: the producers' shared per-tile step. */
template <int D, int BN, int STAGES>
__device__ __forceinline__ void fw_load_kv(const CUtensorMap *tm_k, const CUtensorMap *tm_v, uint32_t sring,
                                           uint32_t bars, int t, int hk, int b, int &stage, uint32_t &phase) {
    constexpr int DH = D / 64;
    constexpr uint32_t KV_BYTES = BN * D * 2, STAGE_BYTES = 2 * KV_BYTES;
    const uint32_t full = bars + 8 * stage, empty = bars + 8 * (STAGES + stage);
    mbar_wait(empty, phase ^ 1);
    mbar_arrive_expect_tx(full, STAGE_BYTES);
    const uint32_t dk = sring + stage * STAGE_BYTES, dv = dk + KV_BYTES;
    const int k0 = t * BN;
#pragma unroll
    for (int j = 0; j < DH; j++) fw_tma_load_3d(dk + j * (BN * 128), tm_k, hk * D + 64 * j, k0, b, full);
#pragma unroll
    for (int i = 0; i < BN / 64; i++)
#pragma unroll
        for (int j = 0; j < DH; j++)
            fw_tma_load_3d(dv + (i * DH + j) * 8192, tm_v, hk * D + 64 * j, k0 + 64 * i, b, full);
    if (++stage == STAGES) {
        stage = 0;
        phase ^= 1;
    }
}

/* The producer (one thread of warpgroup 0): Q once on qbar, then ntiles K/V tiles of BN keys into the ring
 * (stage = tile % STAGES). */
template <int D, int BN, int STAGES>
__device__ __forceinline__ void fw_produce(const CUtensorMap *tm_q, const CUtensorMap *tm_k, const CUtensorMap *tm_v,
                                           uint32_t sq, uint32_t sring, uint32_t qbar, uint32_t bars, int q0, int h,
                                           int hk, int b, int ntiles) {
    constexpr int DH = D / 64;
    mbar_arrive_expect_tx(qbar, FW_BM * D * 2);
#pragma unroll
    for (int j = 0; j < DH; j++) fw_tma_load_3d(sq + j * (FW_BM * 128), tm_q, h * D + 64 * j, q0, b, qbar);
    int stage = 0;
    uint32_t phase = 0;
    for (int t = 0; t < ntiles; t++) fw_load_kv<D, BN, STAGES>(tm_k, tm_v, sring, bars, t, hk, b, stage, phase);
}

/* Epilogue of a consumer thread: rows row_lo, row_lo + 8 (quad-reduced l), out = o / l in bf16, lse natural
 * log (-inf for a row that saw no key; such a row stores 0). */
template <int D>
__device__ __forceinline__ void fw_store(const float (&o)[D / 2], const float (&m)[2], const float (&l)[2],
                                         fw_bf16 *__restrict__ out, float *__restrict__ lse,
                                         const forge_flash_shape &s, int row_lo, int tq, int b, int h) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float lr = l[r];
        lr += __shfl_xor_sync(0xffffffffu, lr, 1);
        lr += __shfl_xor_sync(0xffffffffu, lr, 2);
        const int row = row_lo + r * 8;
        if (row >= s.Tq) continue;
        const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
        fw_bf16 *orow = out + ((size_t)b * s.Tq + row) * (size_t)s.o_stride + (size_t)h * D;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *(uint32_t *)(orow + n * 8 + 2 * tq) = fw_pack(o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv);
        if (tq == 0) lse[((size_t)b * s.H + h) * s.Tq + row] = lr > 0.0f ? (m[r] + log2f(lr)) * FW_LN2 : -INFINITY;
    }
}

template <int D>
__global__ void __launch_bounds__(FW_THREADS, 1)
    fw_fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                  const __grid_constant__ CUtensorMap tm_v, fw_bf16 *__restrict__ out, float *__restrict__ lse,
                  forge_flash_shape s, float sl2) {
    typedef fw_cfg<D> cfg;
    constexpr int STAGES = cfg::STAGES;
    constexpr int DH = D / 64; /* 64-column boxes per row */
    constexpr int FW_BN = cfg::BN;
    extern __shared__ __align__(1024) unsigned char fw_smem[];
    const uint32_t base = (smem_u32(fw_smem) + 1023u) & ~1023u;
    const uint32_t sq = base;
    const uint32_t sring = base + cfg::Q_BYTES; /* stage st: K at +st*STAGE_BYTES, V KV_BYTES further */
    const uint32_t qbar = sring + STAGES * cfg::STAGE_BYTES;
    const uint32_t bars = qbar + 8; /* full[st] at +8st, empty[st] at +8(STAGES+st) */

    const int q0 = (gridDim.x - 1 - blockIdx.x) * FW_BM, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / (s.H / s.Hkv);
    const int diag = s.Tk - s.Tq;
    const int kv_end = min(s.Tk, q0 + FW_BM + diag);
    const int ntiles = kv_end > 0 ? (kv_end + FW_BN - 1) / FW_BN : 0;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        mbar_init(qbar, 1);
        wgmma_ring_init<STAGES>(bars, FW_CONSUMER_WARPS);
    }
    __syncthreads();

    if (wg == 0) {
        wgmma_setmaxnreg_dec<FW_PRODUCER_REGS>();
        if (threadIdx.x == 0 && ntiles > 0)
            fw_produce<D, FW_BN, STAGES>(&tm_q, &tm_k, &tm_v, sq, sring, qbar, bars, q0, h, hk, b, ntiles);
        return;
    }

    wgmma_setmaxnreg_inc<FW_CONSUMER_REGS>();
    const int c = wg - 1;
    const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int wrow0 = q0 + c * 64;        /* this warpgroup's first query row */
    const int row_lo = wrow0 + warp * 16 + g; /* this thread's rows: row_lo, row_lo + 8 */

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    if (ntiles > 0) mbar_wait(qbar, 0);
    const uint32_t qa = sq + c * (64 * 128); /* rows c*64.. of each 128-row Q box */
    int stage = 0;
    uint32_t phase = 0;
    for (int t = 0; t < ntiles; t++) {
        const int k0 = t * FW_BN;
        /* the warpgroup's last row sees keys <= wrow0 + 63 + diag */
        /* every warpgroup waits for every stage, used or not, so no warp can run a ring round ahead and
         * arrive on an empty barrier's next phase early */
        mbar_wait(bars + 8 * stage, phase);
        if (k0 <= wrow0 + 63 + diag) {
            const uint32_t kt = sring + stage * cfg::STAGE_BYTES, vt = kt + cfg::KV_BYTES;
            float sc[FW_BN / 2];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                fw_qk<FW_BN>(sc, wgmma_desc(qa + (kk / 4) * (FW_BM * 128) + (kk % 4) * 32),
                                 wgmma_desc(kt + (kk / 4) * (FW_BN * 128) + (kk % 4) * 32), kk > 0 ? 1 : 0);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operands(sc);

            if (k0 + FW_BN - 1 > wrow0 + diag || k0 + FW_BN > s.Tk) {
#pragma unroll
                for (int n = 0; n < FW_BN / 8; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int key = k0 + n * 8 + 2 * tq + (e & 1);
                        const int row = row_lo + (e >> 1) * 8;
                        if (key > row + diag || key >= s.Tk) sc[4 * n + e] = -INFINITY;
                    }
            }

#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = -INFINITY;
#pragma unroll
                for (int n = 0; n < FW_BN / 8; n++) mx = fmaxf(mx, fmaxf(sc[4 * n + 2 * r], sc[4 * n + 2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mnew = fmaxf(m[r], mx * sl2);
                const float muse = mnew == -INFINITY ? 0.0f : mnew;
                const float alpha = exp2f(m[r] - muse);
                m[r] = mnew;
                float sum = 0.0f;
#pragma unroll
                for (int n = 0; n < FW_BN / 8; n++) {
                    sc[4 * n + 2 * r] = exp2f(fmaf(sc[4 * n + 2 * r], sl2, -muse));
                    sc[4 * n + 2 * r + 1] = exp2f(fmaf(sc[4 * n + 2 * r + 1], sl2, -muse));
                    sum += sc[4 * n + 2 * r] + sc[4 * n + 2 * r + 1];
                }
                l[r] = l[r] * alpha + sum;
#pragma unroll
                for (int n = 0; n < D / 8; n++) {
                    o[4 * n + 2 * r] *= alpha;
                    o[4 * n + 2 * r + 1] *= alpha;
                }
            }

            uint32_t pa[FW_BN / 16][4];
#pragma unroll
            for (int kk = 0; kk < FW_BN / 16; kk++) {
                pa[kk][0] = fw_pack(sc[8 * kk + 0], sc[8 * kk + 1]);
                pa[kk][1] = fw_pack(sc[8 * kk + 2], sc[8 * kk + 3]);
                pa[kk][2] = fw_pack(sc[8 * kk + 4], sc[8 * kk + 5]);
                pa[kk][3] = fw_pack(sc[8 * kk + 6], sc[8 * kk + 7]);
            }
            wgmma_fence(); /* o and pa were written by ordinary instructions */
#pragma unroll
            for (int kk = 0; kk < FW_BN / 16; kk++)
                fw_pv<D>(o, pa[kk], wgmma_desc_mn(vt + (kk / 4) * (DH * 8192) + (kk % 4) * 2048));
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operands(o);
        }
        /* this warp no longer reads the stage (or never did): release it */
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + stage));
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }

    fw_store<D>(o, m, l, out, lse, s, row_lo, tq, b, h);
}

/* ---- the overlapped schedules (FORGE_FLASH16_FWD_SCHED other than base; docs/flash-attention.md) ------------
 *
 * fw_fwd_ov_kernel: same CTA, ring, fragments and results contract as fw_fwd_kernel; the consumer's order of
 * work differs, and a CTA may walk several work items. fw_fwd_kernel waits for S_t = Q.K_t^T, does the
 * softmax of S_t and then waits for O += P_t.V_t, so within a warpgroup the tensor cores idle during every
 * softmax. Here a consumer, per work item (query tile, head, batch):
 *   prologue:  S_0 = Q.K_0^T; wait; softmax(S_0) -> P_0 (bf16 A fragments)
 *   tile t>0:  issue S_t = Q.K_t^T (group 1) and O += P_{t-1}.V_{t-1} (group 2); wait for group 1 only;
 *              softmax(S_t) (m, l, alpha_t, the exps) WHILE O += P_{t-1}.V_{t-1} runs; wait for group 2;
 *              release stage t-1 (its V was the last reader); O *= alpha_t; pack P_t
 *   then:      arrive on qempty (every S of the item is done: the producer may load the next item's Q)
 *   epilogue:  O += P_{nt-1}.V_{nt-1}; wait; release its stage; store out / lse
 * so O is rescaled by alpha_t after P_{t-1}.V_{t-1} (which is at the scale of m_{t-1}) and before
 * P_t.V_t (scale m_t): the same algebra as fw_fwd_kernel. Live per thread: O (D/2) + S (BN/2) + P (BN/4)
 * fp32/b32 registers, no more than fw_fwd_kernel holds at its peak. A stage is held for two tiles (K_t read at
 * t, V_t at t+1); STAGES >= 2 keeps the producer ahead.
 *
 * Persistence: the grid is one CTA per query tile (overlap, pingpong, pingpong_n128) or one per SM (persist
 * and persist_n128 = pingpong, persist_ov = overlap), CTA i taking units i, i + grid, ... (fw_unit_items:
 * under persistence a unit is a long and a short query tile of one head). The ring's stage / phase run on
 * across items; Q has one buffer with qbar (loaded, parity = the count of items with tiles) and qempty (8
 * consumer warps arrive once per item with tiles, after their last S); the producer loads the next item's
 * K/V tile 0 first, then waits for qempty and loads Q, so the next item's loads run under the current item's
 * last P.V and store. Every consumer waits for every qbar phase, used or not, for the reason every
 * warpgroup waits for every ring stage. BN: 128 at D = 64, 64 at D = 128 (128, 3 stages, for *_n128).
 *
 * PP (pingpong): the two consumer warpgroups also take turns ISSUING their MMAs, FA3's inter-warpgroup
 * schedule, so one warpgroup's softmax runs under the other's GEMMs instead of both softmaxes
 * coinciding. Named barriers FW_PP_BAR + c (256 threads: warpgroup c syncs, the other arrives): a "phase"
 * is sync(own) ; issue this step's wgmmas ; arrive(other's). Warpgroup 1 arrives on warpgroup 0's barrier
 * once at the start, so warpgroup 0 issues first. Both warpgroups run exactly ntiles + 1 phases per item (the
 * prologue, tiles 1..nt-1, the epilogue, one empty phase per tile they skip under the causal mask, and one
 * more if they see no tile at all), so every sync has its arrive; warpgroup 1 leaves out the arrive of its
 * last phase of the CTA's last item, which nobody would wait for. The empty phases of skipped tiles sit
 * inside the ring loop (wait full, phase, release), never after it: a warpgroup that is done must keep
 * releasing stages while it pads its phases, else the other could wait on a stage that its padding phases
 * never free. scripts/emulate_flash16_wgmma_fwd_sched.py checks all of this (ring, Q buffer, barriers,
 * masks) on the CPU under random interleavings.
 */
/* The producer's item loop needs more than 24 registers (ptxas spilled it at 24): 32 for the producer, 232 for
 * the consumers; the setmaxnreg.inc of the consumers takes what the producer's dec released (plus nothing
 * else), so 128 * producer + 256 * consumer must stay within the 384 * 168 the CTA launches with. */
#define FW_OV_PRODUCER_REGS 32
#define FW_OV_CONSUMER_REGS 232
static_assert(128 * FW_OV_PRODUCER_REGS + 256 * FW_OV_CONSUMER_REGS <= 384 * 168, "setmaxnreg budget");
#define FW_PP_BAR 1 /* named barriers 1 (warpgroup c = 0) and 2 (c = 1); 0 is __syncthreads */

/* immediate barrier ids (a register id makes ptxas reserve all 16) */
__device__ __forceinline__ void fw_bar_sync(int c) {
    if (c == 0)
        asm volatile("bar.sync %0, 256;" ::"n"(FW_PP_BAR) : "memory");
    else
        asm volatile("bar.sync %0, 256;" ::"n"(FW_PP_BAR + 1) : "memory");
}
__device__ __forceinline__ void fw_bar_arrive(int c) {
    if (c == 0)
        asm volatile("bar.arrive %0, 256;" ::"n"(FW_PP_BAR) : "memory");
    else
        asm volatile("bar.arrive %0, 256;" ::"n"(FW_PP_BAR + 1) : "memory");
}

template <int D, int BN> struct fw_ov_cfg {
    /* 4 stages where they fit, 3 at D = 128 with BN = 128 (64 KiB per stage, 225 KiB in all; *_n128
     * schedules). O 64 + S 64 + P 32 fit the consumers' 232 registers; with base's producer limit of 24
     * this instance spilled (284 bytes, in the producer), hence FW_OV_PRODUCER_REGS 32. */
    static constexpr int STAGES = (D == 128 && BN == 128) ? 3 : 4;
    static constexpr uint32_t Q_BYTES = FW_BM * D * 2;
    static constexpr uint32_t KV_BYTES = BN * D * 2;
    static constexpr uint32_t STAGE_BYTES = 2 * KV_BYTES;
    /* Q, the ring, then qbar, qempty, full[STAGES], empty[STAGES]; 1 KiB slack to align the base */
    static constexpr size_t SMEM = Q_BYTES + (size_t)STAGES * STAGE_BYTES + 8 * (2 + 2 * STAGES) + 1024;
    static_assert(SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");
    static_assert(STAGES >= 2, "a consumer holds two stages at once");
    static_assert(D == 64 || D == 128, "compiled head dims");
    static_assert(BN == 64 || BN == 128, "wgmma N of S");
};

/* Keys k0.. of one tile: -inf where key > row + diag (causal, bottom-right) or key >= Tk. */
template <int BN>
__device__ __forceinline__ void fw_mask(float (&sc)[BN / 2], int k0, int row_lo, int diag, int Tk, int tq) {
#pragma unroll
    for (int n = 0; n < BN / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int key = k0 + n * 8 + 2 * tq + (e & 1);
            const int row = row_lo + (e >> 1) * 8;
            if (key > row + diag || key >= Tk) sc[4 * n + e] = -INFINITY;
        }
}

/* Online softmax of one S tile in place (log2 domain, scale folded into the FMA): new running max m, the
 * factor alpha the old O and l are to be scaled by, l updated, sc = exp2(s * sl2 - m). A row max of -inf
 * is used as 0 so exp2 never sees inf - inf. Same arithmetic as fw_fwd_kernel. */
template <int BN>
__device__ __forceinline__ void fw_softmax(float (&sc)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                           float sl2) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < BN / 8; n++) mx = fmaxf(mx, fmaxf(sc[4 * n + 2 * r], sc[4 * n + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(m[r], mx * sl2);
        const float muse = mnew == -INFINITY ? 0.0f : mnew;
        alpha[r] = exp2f(m[r] - muse);
        m[r] = mnew;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < BN / 8; n++) {
            sc[4 * n + 2 * r] = exp2f(fmaf(sc[4 * n + 2 * r], sl2, -muse));
            sc[4 * n + 2 * r + 1] = exp2f(fmaf(sc[4 * n + 2 * r + 1], sl2, -muse));
            sum += sc[4 * n + 2 * r] + sc[4 * n + 2 * r + 1];
        }
        l[r] = l[r] * alpha[r] + sum;
    }
}

template <int BN> __device__ __forceinline__ void fw_pack_p(uint32_t (&pa)[BN / 16][4], const float (&sc)[BN / 2]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
        pa[kk][0] = fw_pack(sc[8 * kk + 0], sc[8 * kk + 1]);
        pa[kk][1] = fw_pack(sc[8 * kk + 2], sc[8 * kk + 3]);
        pa[kk][2] = fw_pack(sc[8 * kk + 4], sc[8 * kk + 5]);
        pa[kk][3] = fw_pack(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
}

/* S = Q.K^T of the tile whose K starts at kt (no commit) */
template <int D, int BN>
__device__ __forceinline__ void fw_issue_qk(float (&sc)[BN / 2], uint32_t qa, uint32_t kt) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        fw_qk<BN>(sc, wgmma_desc(qa + (kk / 4) * (FW_BM * 128) + (kk % 4) * 32),
                  wgmma_desc(kt + (kk / 4) * (BN * 128) + (kk % 4) * 32), kk > 0 ? 1 : 0);
}

/* O += P.V of the tile whose V starts at vt (no commit) */
template <int D, int BN>
__device__ __forceinline__ void fw_issue_pv(float (&o)[D / 2], const uint32_t (&pa)[BN / 16][4], uint32_t vt) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
        fw_pv<D>(o, pa[kk], wgmma_desc_mn(vt + (kk / 4) * ((D / 64) * 8192) + (kk % 4) * 2048));
}

/* The producer of fw_fwd_ov_kernel for one work item (ntiles > 0; its nq-th such item): K/V tile 0, then Q
 * once the consumers have finished every S = Q.K^T of the previous item (qempty, parity as the ring's empty
 * barriers), then tiles 1..ntiles-1; the ring's stage / phase carry over from item to item. Tile 0 goes first
 * so it loads while the consumers finish the previous item; both are needed for the first S. */
template <int D, int BN, int STAGES>
__device__ __forceinline__ void fw_produce_ov(const CUtensorMap *tm_q, const CUtensorMap *tm_k,
                                              const CUtensorMap *tm_v, uint32_t sq, uint32_t sring, uint32_t qbar,
                                              uint32_t qempty, uint32_t bars, int q0, int h, int hk, int b,
                                              int ntiles, int nq, int &stage, uint32_t &phase) {
    constexpr int DH = D / 64;
    for (int t = 0; t < ntiles; t++) {
        fw_load_kv<D, BN, STAGES>(tm_k, tm_v, sring, bars, t, hk, b, stage, phase);
        if (t == 0) {
            mbar_wait(qempty, (nq & 1) ^ 1);
            mbar_arrive_expect_tx(qbar, FW_BM * D * 2);
#pragma unroll
            for (int j = 0; j < DH; j++) fw_tma_load_3d(sq + j * (FW_BM * 128), tm_q, h * D + 64 * j, q0, b, qbar);
        }
    }
}

/* A CTA's work (fw_fwd_ov_kernel): units u = blockIdx.x, blockIdx.x + gridDim.x, ... of np per (head, batch),
 * u -> (p = u % np, hb = u / np), query tiles fastest so the CTAs running at once share few heads' K / V in L2.
 * Unpaired (np = nqt, one CTA per unit): unit p is query tile nqt-1-p, fw_fwd_kernel's block order (longest
 * first). Paired (np = ceil(nqt/2), persistent CTAs): unit p is query tile nqt-1-p and then, unless it is the
 * same, tile p: every unit but the middle one of an odd nqt has nqt + 1 tiles' worth of causal work, so
 * static striding balances (plain striding of single tiles did not: with grid 132 and nqt = 4 a CTA would
 * always get the same tile, 4x the work of another). fw_unit_items: 1 or 2 items in unit u. */
__device__ __forceinline__ int fw_unit_items(int u, int np, int nqt, int paired) {
    const int p = u % np;
    return (paired && 2 * p != nqt - 1) ? 2 : 1;
}
__device__ __forceinline__ void fw_unit_item(int u, int j, int np, int nqt, int H, int &q0, int &h, int &b) {
    const int p = u % np, hb = u / np;
    q0 = (j == 0 ? nqt - 1 - p : p) * FW_BM;
    h = hb % H;
    b = hb / H;
}

template <int D, int BN, bool PP>
__global__ void __launch_bounds__(FW_THREADS, 1)
    fw_fwd_ov_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                     const __grid_constant__ CUtensorMap tm_v, fw_bf16 *__restrict__ out, float *__restrict__ lse,
                     forge_flash_shape s, float sl2, int paired) {
    typedef fw_ov_cfg<D, BN> cfg;
    constexpr int STAGES = cfg::STAGES;
    extern __shared__ __align__(1024) unsigned char fw_smem[];
    const uint32_t base = (smem_u32(fw_smem) + 1023u) & ~1023u;
    const uint32_t sq = base;
    const uint32_t sring = base + cfg::Q_BYTES; /* stage st: K at +st*STAGE_BYTES, V KV_BYTES further */
    const uint32_t qbar = sring + STAGES * cfg::STAGE_BYTES;
    const uint32_t qempty = qbar + 8;
    const uint32_t bars = qbar + 16; /* full[st] at +8st, empty[st] at +8(STAGES+st) */

    /* work units (fw_unit_items); a CTA takes u = blockIdx.x, blockIdx.x + gridDim.x, ... */
    const int nqt = (s.Tq + FW_BM - 1) / FW_BM;
    const int np = paired ? (nqt + 1) / 2 : nqt;
    const int nunits = np * s.H * s.B;
    const int diag = s.Tk - s.Tq;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        mbar_init(qbar, 1);
        mbar_init(qempty, FW_CONSUMER_WARPS);
        wgmma_ring_init<STAGES>(bars, FW_CONSUMER_WARPS);
    }
    __syncthreads();

    if (wg == 0) {
        wgmma_setmaxnreg_dec<FW_OV_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int stage = 0, nq = 0;
            uint32_t phase = 0;
            for (int u = blockIdx.x, j = 0; u < nunits;) {
                int q0, h, b;
                fw_unit_item(u, j, np, nqt, s.H, q0, h, b);
                if (++j == fw_unit_items(u, np, nqt, paired)) {
                    j = 0;
                    u += gridDim.x;
                }
                const int hk = h / (s.H / s.Hkv);
                const int kv_end = min(s.Tk, q0 + FW_BM + diag);
                const int ntiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
                if (ntiles == 0) continue; /* the consumers skip it too: no Q, no tiles */
                fw_produce_ov<D, BN, STAGES>(&tm_q, &tm_k, &tm_v, sq, sring, qbar, qempty, bars, q0, h, hk, b,
                                             ntiles, nq, stage, phase);
                nq++;
            }
        }
        return;
    }

    wgmma_setmaxnreg_inc<FW_OV_CONSUMER_REGS>();
    const int c = wg - 1;
    const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const uint32_t qa = sq + c * (64 * 128); /* rows c*64.. of each 128-row Q box */

    int stage = 0;
    uint32_t phase = 0, qphase = 0; /* the ring's round parity; the parity of the next Q load (qbar) */
    auto advance = [&]() {
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    };
    auto release = [&](int st) {
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + st));
    };

    if (PP && c == 1) fw_bar_arrive(0); /* warpgroup 0 issues first */

    for (int u = blockIdx.x, j = 0; u < nunits;) {
        int q0, h, b;
        fw_unit_item(u, j, np, nqt, s.H, q0, h, b);
        const int nsub = fw_unit_items(u, np, nqt, paired);
        const bool last_item = u + (int)gridDim.x >= nunits && j == nsub - 1;
        if (++j == nsub) {
            j = 0;
            u += gridDim.x;
        }
        const int kv_end = min(s.Tk, q0 + FW_BM + diag);
        const int ntiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
        const int wrow0 = q0 + c * 64;            /* this warpgroup's first query row */
        const int row_lo = wrow0 + warp * 16 + g; /* this thread's rows: row_lo, row_lo + 8 */
        /* the warpgroup's last row sees keys <= vis: tiles 0..nt-1 (a prefix: tiles run in key order) */
        const int vis = wrow0 + 63 + diag;
        const int nt = vis < 0 ? 0 : min(ntiles, vis / BN + 1);
        /* the first tile that needs the mask: the first whose last key passes the warpgroup's first row's
         * diagonal or Tk; tiles before it run without mask code (wrow0 + diag + 1 >= 0 when nt > 0) */
        const int first_masked = min((wrow0 + diag + 1) / BN, s.Tk / BN);

        float o[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
        float sc[BN / 2];
        uint32_t pa[BN / 16][4];

        /* PP phases of this item left to run (ntiles + 1 in all); the CTA's very last phase of warpgroup 1
         * has no reader of its arrive (no_arrive_at = 1 then), every other one starts the other warpgroup's
         * next phase (in this item or the next) */
        int phases_left = ntiles + 1;
        const int no_arrive_at = (c == 1 && last_item) ? 1 : 0;
        auto pp_begin = [&]() {
            if (PP) fw_bar_sync(c);
        };
        auto pp_end = [&]() {
            if (PP) {
                if (phases_left != no_arrive_at) fw_bar_arrive(c ^ 1);
                phases_left--;
            }
        };

        /* every consumer waits for every Q phase, used or not (a warpgroup that skipped one could otherwise
         * take the previous, still pending phase for the next item's, as with the ring) */
        if (ntiles > 0) mbar_wait(qbar, qphase);
        if (nt > 0) {
            /* prologue: S_0, softmax, P_0 */
            mbar_wait(bars + 8 * stage, phase);
            pp_begin();
            wgmma_fence();
            fw_issue_qk<D, BN>(sc, qa, sring + stage * cfg::STAGE_BYTES);
            wgmma_commit();
            pp_end();
            wgmma_wait<0>();
            wgmma_fence_operands(sc);
            if (0 >= first_masked) fw_mask<BN>(sc, 0, row_lo, diag, s.Tk, tq);
            fw_softmax<BN>(sc, m, l, alpha, sl2); /* O is 0: no rescale */
            fw_pack_p<BN>(pa, sc);
            int pstage = stage;
            advance();

            for (int t = 1; t < nt; t++) {
                mbar_wait(bars + 8 * stage, phase);
                pp_begin();
                wgmma_fence(); /* sc, o and pa were written by ordinary instructions */
                fw_issue_qk<D, BN>(sc, qa, sring + stage * cfg::STAGE_BYTES);
                wgmma_commit();
                fw_issue_pv<D, BN>(o, pa, sring + pstage * cfg::STAGE_BYTES + cfg::KV_BYTES);
                wgmma_commit();
                pp_end();
                wgmma_wait<1>(); /* S_t is in; P_{t-1}.V_{t-1} may still run */
                wgmma_fence_operands(sc);
                if (t >= first_masked) fw_mask<BN>(sc, t * BN, row_lo, diag, s.Tk, tq);
                fw_softmax<BN>(sc, m, l, alpha, sl2);
                wgmma_wait<0>();
                wgmma_fence_operands(o);
                release(pstage);
#pragma unroll
                for (int n = 0; n < D / 8; n++) {
                    o[4 * n + 0] *= alpha[0];
                    o[4 * n + 1] *= alpha[0];
                    o[4 * n + 2] *= alpha[1];
                    o[4 * n + 3] *= alpha[1];
                }
                fw_pack_p<BN>(pa, sc);
                pstage = stage;
                advance();
            }
        }
        /* every S = Q.K^T of this item has completed: the producer may load the next item's Q */
        if (ntiles > 0) {
            __syncwarp();
            if (lane == 0) mbar_arrive(qempty);
            qphase ^= 1;
        }
        if (nt > 0) {
            /* the last P.V */
            const int pstage = stage == 0 ? STAGES - 1 : stage - 1;
            pp_begin();
            wgmma_fence();
            fw_issue_pv<D, BN>(o, pa, sring + pstage * cfg::STAGE_BYTES + cfg::KV_BYTES);
            wgmma_commit();
            pp_end();
            wgmma_wait<0>();
            wgmma_fence_operands(o);
            release(pstage);
        }
        /* tiles this warpgroup's rows do not see: wait for each (so no warp runs a ring round ahead and
         * arrives on an empty barrier's next phase early), release it, and run the PP phase it owes */
        for (int t = nt; t < ntiles; t++) {
            mbar_wait(bars + 8 * stage, phase);
            pp_begin();
            pp_end();
            release(stage);
            advance();
        }
        if (PP && nt == 0) { /* the phase a warpgroup with tiles spends on the last P.V */
            pp_begin();
            pp_end();
        }

        fw_store<D>(o, m, l, out, lse, s, row_lo, tq, b, h);
    }
}

/* ---- host ----------------------------------------------------------------------------- */

/* the shared 3D token map (wgmma_tmap.cu), naming this entry and its fallback in a refusal */
static forge_status fw_encode(CUtensorMap *map, const void *ptr, int B, int T, int cols, long long stride, int box_rows,
                              const char *what) {
    return wgmma_encode_tokens(map, ptr, B, T, cols, stride, box_rows, what, "forge_flash_bf16_forward_wgmma", "mma.sync forward");
}

template <int D>
static forge_status fw_forward_t(const forge_flash_shape *s, const void *q, const void *k, const void *v, void *out,
                                 float *lse, cudaStream_t st) {
    CUtensorMap tq, tk, tv;
    FORGE_TRY(fw_encode(&tq, q, s->B, s->Tq, s->H * D, s->q_stride, FW_BM, "Q"));
    FORGE_TRY(fw_encode(&tk, k, s->B, s->Tk, s->Hkv * D, s->k_stride, fw_cfg<D>::BN, "K"));
    FORGE_TRY(fw_encode(&tv, v, s->B, s->Tk, s->Hkv * D, s->v_stride, 64, "V"));
    const float sl2 = (1.0f / sqrtf((float)D)) * FW_LOG2E;
    auto kern = fw_fwd_kernel<D>;
    constexpr size_t smem = fw_cfg<D>::SMEM;
    CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((s->Tq + FW_BM - 1) / FW_BM), (unsigned)s->H, (unsigned)s->B);
    kern<<<grid, FW_THREADS, smem, st>>>(tq, tk, tv, (fw_bf16 *)out, lse, *s, sl2);
    CUDA_LAUNCH_CHECK(D == 64 ? "fw_fwd_kernel<64>" : "fw_fwd_kernel<128>");
    return FORGE_OK;
}

/* persist: a grid of at most one CTA per SM walking paired units (fw_unit_items), else one CTA per query tile */
template <int D, int BN, bool PP>
static forge_status fw_forward_ov_t(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                    void *out, float *lse, bool persist, cudaStream_t st) {
    const long long nqt = (s->Tq + FW_BM - 1) / FW_BM;
    const long long nunits = (persist ? (nqt + 1) / 2 : nqt) * s->H * s->B;
    if (nunits > (1LL << 30)) /* u + gridDim.x stays within int */
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "forge_flash_bf16_forward_wgmma: %lld work units (B=%d H=%d Tq=%d) exceed one grid "
                           "dimension; use the base schedule",
                           nunits, s->B, s->H, s->Tq);
    unsigned grid = (unsigned)nunits;
    if (persist) {
        int dev = 0, sms = 0;
        CUDA_TRY(cudaGetDevice(&dev));
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        if (sms > 0 && (long long)sms < nunits) grid = (unsigned)sms;
    }
    CUtensorMap tq, tk, tv;
    FORGE_TRY(fw_encode(&tq, q, s->B, s->Tq, s->H * D, s->q_stride, FW_BM, "Q"));
    FORGE_TRY(fw_encode(&tk, k, s->B, s->Tk, s->Hkv * D, s->k_stride, BN, "K"));
    FORGE_TRY(fw_encode(&tv, v, s->B, s->Tk, s->Hkv * D, s->v_stride, 64, "V"));
    const float sl2 = (1.0f / sqrtf((float)D)) * FW_LOG2E;
    auto kern = fw_fwd_ov_kernel<D, BN, PP>;
    constexpr size_t smem = fw_ov_cfg<D, BN>::SMEM;
    CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    kern<<<grid, FW_THREADS, smem, st>>>(tq, tk, tv, (fw_bf16 *)out, lse, *s, sl2, persist ? 1 : 0);
    CUDA_LAUNCH_CHECK(PP ? "fw_fwd_ov_kernel<pingpong>" : "fw_fwd_ov_kernel<overlap>");
    return FORGE_OK;
}

/* FORGE_FLASH16_FWD_SCHED, read once: base (the default until the others are measured), overlap, pingpong,
 * persist, persist_ov, pingpong_n128 or persist_n128. Concurrent first callers read the same environment and
 * store the same value; an unknown value is reported by the call that reads it. */
static int fw_sched_choice = -1;

static forge_status fw_sched_from_env(int *sched) {
    if (fw_sched_choice < 0) {
        const char *e = getenv("FORGE_FLASH16_FWD_SCHED");
        int v = FORGE_FLASH16_SCHED_BASE;
        if (e == nullptr || e[0] == 0 || strcmp(e, "base") == 0)
            v = FORGE_FLASH16_SCHED_BASE;
        else if (strcmp(e, "overlap") == 0)
            v = FORGE_FLASH16_SCHED_OVERLAP;
        else if (strcmp(e, "pingpong") == 0)
            v = FORGE_FLASH16_SCHED_PINGPONG;
        else if (strcmp(e, "persist") == 0)
            v = FORGE_FLASH16_SCHED_PERSIST;
        else if (strcmp(e, "persist_ov") == 0)
            v = FORGE_FLASH16_SCHED_PERSIST_OV;
        else if (strcmp(e, "pingpong_n128") == 0)
            v = FORGE_FLASH16_SCHED_PINGPONG_N128;
        else if (strcmp(e, "persist_n128") == 0)
            v = FORGE_FLASH16_SCHED_PERSIST_N128;
        else
            return forge_error(FORGE_ERR_ARG,
                               "FORGE_FLASH16_FWD_SCHED=%s: expected base, overlap, pingpong, persist, persist_ov, "
                               "pingpong_n128 or persist_n128",
                               e);
        fw_sched_choice = v;
    }
    *sched = fw_sched_choice;
    return FORGE_OK;
}

extern "C" forge_status forge_flash_bf16_forward_wgmma_sched(const forge_flash_shape *s, const void *q,
                                                             const void *k, const void *v, void *out_bf16,
                                                             float *lse, int sched, void *stream) {
    const char *what = "forge_flash_bf16_forward_wgmma";
    const void *ptrs[5] = {q, k, v, out_bf16, lse};
    FORGE_TRY(forge_flash_check_shape(what, s, ptrs, 5));
    if (sched < FORGE_FLASH16_SCHED_BASE || sched > FORGE_FLASH16_SCHED_PERSIST_N128)
        return forge_error(FORGE_ERR_ARG, "%s: unknown schedule %d", what, sched);
    if (s->B == 0 || s->Tq == 0) return FORGE_OK;
    if (s->Tk == 0) return forge_flash_bf16_forward_rows(s, q, k, v, out_bf16, lse, 64, stream);
    int dev = 0, major = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major != 9)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: needs an sm_90a (Hopper) device for wgmma/TMA, found compute capability %d.x; use "
                           "the mma.sync forward",
                           what, major);
    cudaStream_t st = (cudaStream_t)stream;
    switch (sched) {
    case FORGE_FLASH16_SCHED_OVERLAP:
    case FORGE_FLASH16_SCHED_PERSIST_OV: {
        const bool persist = sched == FORGE_FLASH16_SCHED_PERSIST_OV;
        return s->D == 64 ? fw_forward_ov_t<64, 128, false>(s, q, k, v, out_bf16, lse, persist, st)
                          : fw_forward_ov_t<128, 64, false>(s, q, k, v, out_bf16, lse, persist, st);
    }
    case FORGE_FLASH16_SCHED_PINGPONG:
    case FORGE_FLASH16_SCHED_PERSIST: {
        const bool persist = sched == FORGE_FLASH16_SCHED_PERSIST;
        return s->D == 64 ? fw_forward_ov_t<64, 128, true>(s, q, k, v, out_bf16, lse, persist, st)
                          : fw_forward_ov_t<128, 64, true>(s, q, k, v, out_bf16, lse, persist, st);
    }
    case FORGE_FLASH16_SCHED_PINGPONG_N128:
    case FORGE_FLASH16_SCHED_PERSIST_N128: { /* 128-key tiles at D = 128 too (3 stages) */
        const bool persist = sched == FORGE_FLASH16_SCHED_PERSIST_N128;
        return s->D == 64 ? fw_forward_ov_t<64, 128, true>(s, q, k, v, out_bf16, lse, persist, st)
                          : fw_forward_ov_t<128, 128, true>(s, q, k, v, out_bf16, lse, persist, st);
    }
    default:
        return s->D == 64 ? fw_forward_t<64>(s, q, k, v, out_bf16, lse, st)
                          : fw_forward_t<128>(s, q, k, v, out_bf16, lse, st);
    }
}

extern "C" forge_status forge_flash_bf16_forward_wgmma(const forge_flash_shape *s, const void *q, const void *k,
                                                       const void *v, void *out_bf16, float *lse, void *stream) {
    int sched = FORGE_FLASH16_SCHED_BASE;
    FORGE_TRY(fw_sched_from_env(&sched));
    return forge_flash_bf16_forward_wgmma_sched(s, q, k, v, out_bf16, lse, sched, stream);
}
