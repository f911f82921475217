/*
 * flash_attention_bf16_wgmma_fwd_sched.cuh: the scheduled Hopper (sm_90a) bf16
 * flash forward, fw_fwd_ov_kernel<D, BN, PP>: the CTA, ring, fragments and
 * results contract of the other wgmma forwards (their shared pieces are in
 * flash_attention_bf16_wgmma_fwd.cuh), with the softmax of each tile run
 * under the previous tile's P.V, optionally
 * ping-pong between the two consumer warpgroups and persistent CTAs. forge runs
 * <128, 128, true> on a persistent grid at D = 128
 * (flash_attention_bf16_wgmma.cu); the lab instantiates the other schedules
 * (lab/flash/flash16_fwd_sched.cu). Measurements: lab/notes/flash.md.
 *
 * Per work item (query tile, head, batch) a consumer runs:
 *   prologue:  S_0 = Q.K_0^T; wait; softmax(S_0) -> P_0 (bf16 A fragments)
 *   tile t>0:  issue S_t = Q.K_t^T (group 1) and O += P_{t-1}.V_{t-1} (group 2); wait for group 1 only;
 *              softmax(S_t) (m, l, alpha_t, the exps) WHILE O += P_{t-1}.V_{t-1} runs; wait for group 2;
 *              release stage t-1 (its V was the last reader); O *= alpha_t; pack P_t
 *   then:      arrive on qempty (every S of the item is done: the producer may load the next item's Q) and on
 *              the other warpgroup's K-free barrier (FW_KFREE_BAR)
 *   epilogue:  O += P_{nt-1}.V_{nt-1}; wait; once the other warpgroup's S are done too (K-free barrier), out
 *              normalised to bf16 into this warpgroup's half of the last stage's K area (fw_stage_out; K is dead
 *              then, V is not: the other warpgroup's last P.V may still read it), one TMA store per 64 columns,
 *              and the stage released (4 arrivals by the issuing thread) once the store has read it, which the
 *              thread checks after its next item's first softmax (release_out), not at once: waiting there held
 *              the warpgroup ~1.5% of the kernel (lab/notes/flash.md, 2026-12-04); lse by
 *              plain stores (the lab's 64-key instances, whose K area is too small, store out from registers).
 *              Stored from registers (4-byte pieces, 32 per thread at D = 128), out held the consumers ~3,500
 *              cycles an item, more than a tile (lab/notes/flash.md, 2026-12-04).
 * so O is rescaled by alpha_t after P_{t-1}.V_{t-1} (which is at the scale of m_{t-1}) and before
 * P_t.V_t (scale m_t). The softmax stays between the two waits only because fw_pin_before_wait
 * (flash_wgmma_common.cuh) ties the wait to its row sums: ptxas otherwise issues the second wait right after
 * the first. Live per thread: O (D/2) + S (BN/2) + P (BN/4) fp32/b32 registers (160 at D = BN = 128, within
 * the consumers' 232). A stage is held for two tiles (K_t read at t, V_t at t+1); STAGES >= 2 keeps the
 * producer ahead (3 stages of 64 KiB at D = BN = 128).
 *
 * Persistence: the grid is one CTA per query tile, or (persist) at most one per SM walking the items of fw_walk
 * (paired long + short query tiles of one head, the last rounds' items one by one, longest first). The ring's
 * stage / phase run on across items; Q has one buffer with qbar (loaded, parity = the count of items with tiles)
 * and qempty (8 consumer warps arrive once per item with tiles, after their last S); the producer loads the next
 * item's K/V tile 0 first, then waits for qempty and loads Q, so the next item's loads run under the current
 * item's last P.V and store. Every consumer waits for every qbar phase, used or not, for the reason every
 * warpgroup waits for every ring stage.
 *
 * PP (ping-pong): the two consumer warpgroups also take turns ISSUING their MMAs (FlashAttention-3's
 * inter-warpgroup schedule), so one warpgroup's softmax runs under the other's GEMMs. Named barriers
 * FW_PP_BAR + c (256 threads: warpgroup c syncs, the other arrives): a "phase" is sync(own) ; issue this step's
 * wgmmas ; arrive(other's). Warpgroup 1 arrives on warpgroup 0's barrier once at the start, so warpgroup 0
 * issues first. Both warpgroups run exactly ntiles + 1 phases per item (the prologue, tiles 1..nt-1, the
 * epilogue, one empty phase per tile they skip under the causal mask, and one more if they see no tile at all),
 * so every sync has its arrive; warpgroup 1 leaves out the arrive of its last phase of the CTA's last item,
 * which nobody would wait for. The empty phases of skipped tiles sit inside the ring loop (wait full, phase,
 * release), never after it: a warpgroup that is done must keep releasing stages while it pads its phases, else
 * the other could wait on a stage that its padding phases never free. The emulator
 * lab/emulators/emulate_flash16_wgmma_fwd_sched.py checks all of this (ring, Q buffer, barriers, masks) on the
 * CPU under random interleavings.
 */
#ifndef FORGE_FLASH_ATTENTION_BF16_WGMMA_FWD_SCHED_CUH
#define FORGE_FLASH_ATTENTION_BF16_WGMMA_FWD_SCHED_CUH

#include <math.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "flash_attention_bf16_wgmma_fwd.cuh"
#include "flash_wgmma_common.cuh"
#include "kernel_attrs.h"
#include "pdl.cuh"
#include "wgmma_common.cuh"

/* The producer's item loop needs more than 24 registers (ptxas spilled it at 24, and at 32 once it walked fw_walk's
 * tail): 40 for the producer, 232 for the consumers; the setmaxnreg.inc of the consumers takes what the producer's
 * dec released (plus nothing else), so 128 * producer + 256 * consumer must stay within the 384 * 168 the CTA
 * launches with (exactly, at 40 and 232). */
#define FW_OV_PRODUCER_REGS 40
#define FW_OV_CONSUMER_REGS 232
static_assert(128 * FW_OV_PRODUCER_REGS + 256 * FW_OV_CONSUMER_REGS <= 384 * 168, "setmaxnreg budget");
#define FW_PP_BAR 1    /* named barriers 1 (warpgroup c = 0) and 2 (c = 1); 0 is __syncthreads, 3-4 FW_OUT_BAR */
#define FW_KFREE_BAR 5 /* 5 and 6: the other warpgroup's S of the item done (256: it arrives, c syncs) */

/* the ping-pong: warpgroup c syncs on FW_PP_BAR + c, the other arrives on it */
__device__ __forceinline__ void fw_bar_sync(int c) { fw_named_sync<FW_PP_BAR, 256>(c); }
__device__ __forceinline__ void fw_bar_arrive(int c) { fw_named_arrive<FW_PP_BAR, 256>(c); }

template <int D, int BN> struct fw_ov_cfg {
    /* 4 stages where they fit, 3 at D = 128 with BN = 128 (64 KiB per stage, 225 KiB in all). O 64 + S 64 +
     * P 32 fit the consumers' 232 registers; with the one-CTA kernel's producer limit of 24 this instance
     * spilled (284 bytes, in the producer), hence FW_OV_PRODUCER_REGS above 24. */
    static constexpr int STAGES = (D == 128 && BN == 128) ? 3 : 4;
    static constexpr uint32_t Q_BYTES = FW_BM * D * 2;
    static constexpr uint32_t KV_BYTES = BN * D * 2;
    static constexpr uint32_t STAGE_BYTES = 2 * KV_BYTES;
    /* Q, the ring, then qbar, qempty, full[STAGES], empty[STAGES], the consumers' sink (fw_pin_before_wait:
     * one float per consumer thread); 1 KiB slack to align the base */
    static constexpr uint32_t SINK_OFFSET = 8 * (2 + 2 * STAGES); /* from qbar */
    static constexpr size_t SMEM = Q_BYTES + (size_t)STAGES * STAGE_BYTES + SINK_OFFSET + 4 * 256 + 1024;
    static_assert(SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");
    static_assert(STAGES >= 2, "a consumer holds two stages at once");
    static_assert(D == 64 || D == 128, "compiled head dims");
    static_assert(BN == 64 || BN == 128, "wgmma N of S");
};

/* Online softmax of one S tile in place, both of the thread's rows (fw_softmax_row): alpha[r] is the factor
 * row r's O is to be scaled by. */
template <int BN>
__device__ __forceinline__ void fw_softmax(float (&sc)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                           float sl2) {
#pragma unroll
    for (int r = 0; r < 2; r++) fw_softmax_row<BN>(sc, m[r], l[r], alpha[r], r, sl2);
}

/* warpgroup c ^ 1 arrives on warpgroup c's barrier once its last S of the item has completed; c syncs on it before
 * writing its out slice over the last tile's K (which S of both warpgroups read) */
__device__ __forceinline__ void fw_bar_arrive_kfree(int c) { fw_named_arrive<FW_KFREE_BAR, 256>(c); }
__device__ __forceinline__ void fw_bar_sync_kfree(int c) { fw_named_sync<FW_KFREE_BAR, 256>(c); }

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

/* A CTA's work (fw_fwd_ov_kernel): a walk over work items (query tile, head, batch), the same in the producer and
 * the consumers.
 * Unpaired (one CTA per query tile): the CTA's item is query tile nqt-1-p of unit u = blockIdx.x (np = nqt units per
 * (head, batch), u -> (p = u % np, hb = u / np)), the one-CTA kernel's block order (longest first).
 * Paired (persistent CTAs, at most one per SM; np = ceil(nqt / 2) units per (head, batch)): unit p is query tile
 * nqt-1-p and then, unless it is the same, tile p, so every unit but the middle one of an odd nqt has nqt + 1
 * tiles' worth of causal work (plain striding of single tiles did not balance: with grid 132 and nqt = 4 a CTA
 * would always get the same tile, 4x the work of another). CTA c takes units c, c + G, ... below U0 = (N / G - 1) G
 * (N units, G CTAs: every CTA the same number), query tiles fastest so the CTAs running at once share few heads'
 * K / V in L2. The last N - U0 units (G to 2G - 1 of them) would leave equal units over a remainder of the CTAs
 * (N = 2048, G = 132: 68 CTAs run a 16th unit while 64 idle, 3% of the kernel); their items go out one by one,
 * longest first (query tile descending, then unit), round r to CTA c (r even) or G - 1 - c (r odd), so a CTA that
 * took a long item in one round takes a short one in the next: ~1% above the mean by a cost model of
 * lab/notes/flash.md. An item's tiles rise with its query tile (flash_key_tiles), so the order is longest first. */
struct fw_walk {
    int nqt, np, G, U0, paired;      /* the grid's work (unpaired: U0 = N, no tail) */
    int tail_items, u0m, wdiv, wmod; /* the tail: its items, U0 % np, (N - U0) / np, (N - U0) % np */
    int u, j, r;                     /* this CTA: the unit and its item j below U0, else the tail round r */
};

__device__ __forceinline__ fw_walk fw_walk_begin(const forge_flash_shape &s, int paired) {
    fw_walk w;
    w.nqt = (s.Tq + FW_BM - 1) / FW_BM;
    w.np = paired ? (w.nqt + 1) / 2 : w.nqt;
    const int N = w.np * s.H * s.B;
    w.G = (int)gridDim.x;
    w.paired = paired;
    w.U0 = paired ? max(0, N / w.G - 1) * w.G : N;
    const int W = N - w.U0;
    w.u0m = w.U0 % w.np;
    w.wdiv = W / w.np;
    w.wmod = W % w.np;
    /* every tail unit has 2 items but the middle one (p = np - 1) of an odd nqt */
    const int middles = (w.nqt & 1) ? w.wdiv + ((w.np - 1 - w.u0m + w.np) % w.np < w.wmod ? 1 : 0) : 0;
    w.tail_items = paired ? 2 * W - middles : 0;
    w.u = (int)blockIdx.x;
    w.j = 0;
    w.r = 0;
    return w;
}

/* The walk's current item into (q0, h, b); false when the CTA's walk is over. */
__device__ __forceinline__ bool fw_walk_item(const fw_walk &w, int H, int &q0, int &h, int &b) {
    int u, qt;
    if (w.u < w.U0) {
        u = w.u;
        const int p = u % w.np;
        qt = w.j == 0 ? w.nqt - 1 - p : p;
    } else {
        int k = w.r * w.G + ((w.r & 1) ? w.G - 1 - (int)blockIdx.x : (int)blockIdx.x);
        if (k >= w.tail_items) return false;
        /* the k-th tail item, query tile descending: tile qt is unit p's (p = nqt-1-qt for the long tiles, qt for
         * the short ones), held by the tail units u = p (mod np): wdiv of them, one more for the first wmod
         * residues from U0 */
        u = 0;
        for (qt = w.nqt - 1; qt >= 0; qt--) {
            const int p = qt >= w.nqt - w.np ? w.nqt - 1 - qt : qt;
            int d = p - w.u0m;
            if (d < 0) d += w.np;
            const int n = w.wdiv + (d < w.wmod ? 1 : 0);
            if (k < n) {
                u = w.U0 + d + k * w.np;
                break;
            }
            k -= n;
        }
    }
    const int hb = u / w.np;
    q0 = qt * FW_BM;
    h = hb % H;
    b = hb / H;
    return true;
}

__device__ __forceinline__ void fw_walk_next(fw_walk &w) {
    if (w.u < w.U0) {
        const int p = w.u % w.np;
        if (++w.j == ((w.paired && 2 * p != w.nqt - 1) ? 2 : 1)) {
            w.j = 0;
            w.u += w.G;
        }
    } else {
        w.r++;
    }
}

template <int D, int BN, bool PP>
__global__ void __launch_bounds__(FW_THREADS, 1)
    fw_fwd_ov_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                     const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                     fw_bf16 *__restrict__ out, float *__restrict__ lse, forge_flash_shape s, float sl2, int paired) {
    typedef fw_ov_cfg<D, BN> cfg;
    constexpr int STAGES = cfg::STAGES;
    /* out staged in the last tile's K area (both warpgroups' 128 x D slices fit when BN >= 128) for a TMA store */
    constexpr bool OUT_STAGED = BN * D * 2 >= FW_BM * D * 2;
    uint32_t sq, sring, qbar;
    fw_smem_layout<cfg>(sq, sring, qbar);
    const uint32_t qempty = qbar + 8;
    const uint32_t bars = qbar + 16; /* full[st] at +8st, empty[st] at +8(STAGES+st) */

    const int diag = s.Tk - s.Tq;
    const int wg = wgmma_warpgroup_index(); /* warp-uniform: descriptors in uniform registers */

    if (threadIdx.x == 0) {
        mbar_init(qbar, 1);
        mbar_init(qempty, FW_CONSUMER_WARPS);
        wgmma_ring_init<STAGES>(bars, FW_CONSUMER_WARPS);
    }
    __syncthreads();
    /* shared memory only above; global memory from here (pdl.cuh) */
    forge_pdl_wait();
    forge_pdl_launch_dependents();

    if (wg == 0) {
        wgmma_setmaxnreg_dec<FW_OV_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int stage = 0, nq = 0;
            uint32_t phase = 0;
            fw_walk w = fw_walk_begin(s, paired); /* the CTA's work items */
            for (int q0, h, b; fw_walk_item(w, s.H, q0, h, b);) {
                fw_walk_next(w);
                const int hk = h / (s.H / s.Hkv);
                const int ntiles = flash_key_tiles(s.Tk, diag, q0, FW_BM, BN);
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
    const uint32_t sink = qbar + cfg::SINK_OFFSET + 4 * (threadIdx.x - 128);

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

    /* the stage holding this warpgroup's out slice of the previous item: released (tid 0, once the TMA store has
     * read it) after the next item's first softmax, or before the next item's tiles this warpgroup does not see,
     * whichever comes first, so the read runs under that work instead of holding the warpgroup at the item's end.
     * No ring wait before that point needs the stage: the two warpgroups' visible tiles differ by at most one
     * (64 rows each, 128-key tiles), so after the held stage come at most that tile and the next item's tile 0,
     * and the ring has 3 or more stages. */
    int pending = -1;
    auto release_out = [&]() {
        if (pending >= 0) {
            if (tid == 0) {
                tma_store_wait_read<0>();
                mbar_arrive_n(bars + 8 * (STAGES + pending), 4);
            }
            pending = -1;
        }
    };

    fw_walk w = fw_walk_begin(s, paired); /* the CTA's work items, as the producer walks them */
    int nq0, nh, nb; /* the walk's next item */
    for (bool more = fw_walk_item(w, s.H, nq0, nh, nb); more;) {
        const int q0 = nq0, h = nh, b = nb;
        fw_walk_next(w);
        more = fw_walk_item(w, s.H, nq0, nh, nb);
        const bool last_item = !more;
        const int ntiles = flash_key_tiles(s.Tk, diag, q0, FW_BM, BN);
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
            fw_to_a<BN>(pa, sc);
            int pstage = stage;
            advance();
            release_out(); /* the previous item's out slice (tile 0's stage is another one) */

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
                fw_pin_before_wait(sink, l[0] + l[1]);
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
                fw_to_a<BN>(pa, sc);
                pstage = stage;
                advance();
            }
        }
        /* every S = Q.K^T of this item has completed: the producer may load the next item's Q; the other
         * warpgroup may write its out slice over the last tile's K (fw_stage_out) */
        if (ntiles > 0) {
            __syncwarp();
            if (lane == 0) mbar_arrive(qempty);
            qphase ^= 1;
            if (OUT_STAGED) fw_bar_arrive_kfree(c ^ 1);
        }
        int held = -1; /* the stage whose K area holds this warpgroup's out slice until the TMA store read it */
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
            if (OUT_STAGED)
                held = pstage;
            else
                release(pstage);
        }
        /* tiles this warpgroup's rows do not see: wait for each (so no warp runs a ring round ahead and
         * arrives on an empty barrier's next phase early), release it, and run the PP phase it owes */
        release_out(); /* before any wait that could need the previous item's out stage (nt == 0) */
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

        if (OUT_STAGED && ntiles > 0) fw_bar_sync_kfree(c); /* the other warpgroup's S are done: K is free */
        if (OUT_STAGED && held >= 0) {
            /* out through shared memory and one TMA store per 64 columns (the header says why) */
            const uint32_t so = sring + held * cfg::STAGE_BYTES + c * (64 * D * 2);
            fw_out_staged<D>(o, m, l, so, &tm_o, lse, s, c, tid == 0, warp, g, tq, row_lo, wrow0, b, h);
            /* the CTA's last item: the writes performed before the CTA exits, and the stage released (a wait
             * placed after the item loop made ptxas serialise the kernel's wgmmas, CUDA 13.0) */
            if (tid == 0 && last_item) {
                tma_store_wait_all();
                mbar_arrive_n(bars + 8 * (STAGES + held), 4);
            }
            /* else the stage is released by release_out in the next item, once the TMA store has read it */
            if (!last_item) pending = held;
        } else { /* the 64-key instances, or no tile seen (o = 0, l = 0: out 0, lse -inf) */
            fw_store<D>(o, m, l, out, lse, s, row_lo, tq, b, h);
            if (OUT_STAGED && last_item && tid == 0) tma_store_wait_all(); /* an earlier item's TMA store */
        }
    }
}

/* ---- host ------------------------------------------------------------------------------------------- */

/* fw_fwd_ov_kernel<D, BN, PP>'s shared-memory limit, once per context (one record per instantiation, shared by
 * its launch and forge's occupancy query) */
template <int D, int BN, bool PP> static forge_status fw_ov_prepare(void) {
    static kernel_attrs_once once;
    CUDA_TRY(kernel_attrs_set(&once, (const void *)fw_fwd_ov_kernel<D, BN, PP>, (int)fw_ov_cfg<D, BN>::SMEM, 0));
    return FORGE_OK;
}

/* fw_fwd_ov_kernel<D, BN, PP> on the caller's stream (launched with PDL when pdl; `entry` named in errors), after
 * fw_forward_begin. persist: a grid of at most one CTA per SM walking fw_walk's items, else one CTA
 * per query tile. */
template <int D, int BN, bool PP>
static forge_status fw_forward_sched(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                     void *out, float *lse, bool persist, cudaStream_t st, int pdl,
                                     const char *entry) {
    const long long nqt = (s->Tq + FW_BM - 1) / FW_BM;
    const long long nunits = (persist ? (nqt + 1) / 2 : nqt) * s->H * s->B;
    if (nunits > (1LL << 30)) /* u + gridDim.x stays within int */
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: %lld work units (B=%d H=%d Tq=%d) exceed one grid dimension; use the mma.sync "
                           "forward",
                           entry, nunits, s->B, s->H, s->Tq);
    unsigned grid = (unsigned)nunits;
    if (persist) {
        int dev = 0, sms = 0;
        CUDA_TRY(cudaGetDevice(&dev));
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        if (sms > 0 && (long long)sms < nunits) grid = (unsigned)sms;
    }
    CUtensorMap tq, tk, tv, to;
    FORGE_TRY(fw_encode(&tq, q, s->B, s->Tq, s->H * D, s->q_stride, FW_BM, "Q", entry));
    FORGE_TRY(fw_encode(&tk, k, s->B, s->Tk, s->Hkv * D, s->k_stride, BN, "K", entry));
    FORGE_TRY(fw_encode(&tv, v, s->B, s->Tk, s->Hkv * D, s->v_stride, 64, "V", entry));
    FORGE_TRY(fw_encode(&to, out, s->B, s->Tq, s->H * D, s->o_stride, 64, "out", entry));
    const float sl2 = (1.0f / sqrtf((float)D)) * FW_LOG2E;
    auto kern = fw_fwd_ov_kernel<D, BN, PP>;
    constexpr size_t smem = fw_ov_cfg<D, BN>::SMEM;
    FORGE_TRY((fw_ov_prepare<D, BN, PP>()));
    CUDA_LAUNCH_TRY(forge_pdl_launch(kern, dim3(grid), FW_THREADS, smem, st, pdl, tq, tk, tv, to, (fw_bf16 *)out, lse,
                                     *s, sl2, persist ? 1 : 0),
                    PP ? "fw_fwd_ov_kernel<pingpong>" : "fw_fwd_ov_kernel<overlap>");
    return FORGE_OK;
}

#endif
