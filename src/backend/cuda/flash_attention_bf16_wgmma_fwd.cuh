/*
 * flash_attention_bf16_wgmma_fwd.cuh: what the Hopper (sm_90a) forward kernels
 * of forge's bf16 flash attention share: the CTA shape (two consumer
 * warpgroups of 64 query rows, 128 query rows per CTA, and a producer), the
 * shared-memory layout, the producer's K/V tile step, the consumers' steps
 * (S = Q.K^T, the mask, the online softmax, O += P.V) and epilogues (out
 * from registers, or staged in shared memory for a TMA store), and the
 * host steps every entry runs before it launches. Included by
 * flash_attention_bf16_wgmma.cu (the forward forge runs, whose header explains
 * the design), flash_attention_bf16_wgmma_fwd_sched.cuh (the scheduled kernel)
 * and the lab's one-CTA kernel.
 */
#ifndef FORGE_FLASH_ATTENTION_BF16_WGMMA_FWD_CUH
#define FORGE_FLASH_ATTENTION_BF16_WGMMA_FWD_CUH

#include <math.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "flash_wgmma_common.cuh"
#include "pdl.cuh"
#include "wgmma_common.cuh"

extern "C" {
#include "flash_attention_bf16.h"
}

#define FW_THREADS 384 /* producer warpgroup + 2 consumer warpgroups */
#define FW_BM 128      /* query rows per CTA */
#define FW_CONSUMER_WARPS 8
#define FW_LOG2E 1.4426950408889634f
#define FW_LN2 0.6931471805599453f
#define FW_OUT_BAR 3  /* named barriers 3 (consumer warpgroup 0) and 4 (1): fw_wg_bar_sync */
#define FW_VOTE_BAR 5 /* named barriers 5 (consumer warpgroup 0) and 6 (1): fw_wg_any (the D = 64 kernel's; the
                       * D = 128 kernel, which does not vote, has its FW_KFREE_BAR there) */

typedef unsigned short fw_bf16;

/* The forward kernels' shared memory (cfg: Q_BYTES, STAGES, STAGE_BYTES): the 128-row Q tile at the dynamic base
 * rounded up to 1 KiB (the 128B swizzle's atom; the kernels ask for 1 KiB of slack), the ring of STAGES K/V stages
 * (stage st: K at +st*STAGE_BYTES, V KV_BYTES further), then the barriers, the first at qbar. */
template <typename cfg>
__device__ __forceinline__ void fw_smem_layout(uint32_t &sq, uint32_t &sring, uint32_t &qbar) {
    extern __shared__ __align__(1024) unsigned char fw_smem[];
    const uint32_t base = (smem_u32(fw_smem) + 1023u) & ~1023u;
    sq = base;
    sring = base + cfg::Q_BYTES;
    qbar = sring + cfg::STAGES * cfg::STAGE_BYTES;
}

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

/* The end of row `row` for a consumer thread (every lane calls it: the quad's shuffles): the row sum l reduced
 * over the quad, the row's lse (natural log; -inf for a row that saw no key) stored by tq 0 when row < Tq, and
 * 1 / sum returned (0 for such a row, whose out is then 0). */
__device__ __forceinline__ float fw_row_end(float l, float m, float *__restrict__ lse, const forge_flash_shape &s,
                                            int row, int tq, int b, int h) {
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (tq == 0 && row < s.Tq) lse[((size_t)b * s.H + h) * s.Tq + row] = l > 0.0f ? (m + log2f(l)) * FW_LN2 : -INFINITY;
    return l > 0.0f ? 1.0f / l : 0.0f;
}

/* Epilogue of a consumer thread from registers: rows row_lo, row_lo + 8, out = o / l in bf16 and lse (fw_row_end);
 * with o = 0 and l = 0 (a warpgroup that saw no key of the item) out = 0 and lse = -inf. */
template <int D>
__device__ __forceinline__ void fw_store(const float (&o)[D / 2], const float (&m)[2], const float (&l)[2],
                                         fw_bf16 *__restrict__ out, float *__restrict__ lse,
                                         const forge_flash_shape &s, int row_lo, int tq, int b, int h) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row_lo + r * 8;
        const float inv = fw_row_end(l[r], m[r], lse, s, row, tq, b, h);
        if (row >= s.Tq) continue;
        fw_bf16 *orow = out + ((size_t)b * s.Tq + row) * (size_t)s.o_stride + (size_t)h * D;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *(uint32_t *)(orow + n * 8 + 2 * tq) = fw_pack(o[4 * n + 2 * r] * inv, o[4 * n + 2 * r + 1] * inv);
    }
}

/* The consumer warpgroup's 64 x D slice of out, normalised and in bf16, into shared memory at so (1 KiB aligned:
 * D/64 boxes of 64 rows x 128 B, 8 KiB apart, in the 128B swizzle of the out tensor map: a row's 16-byte chunk x
 * at (x ^ row % 8)) for the TMA store, and the rows' lse (fw_row_end). Per store the warp's lanes hit 32 distinct
 * banks (rows g differ in row % 8, so their chunks differ). */
template <int D>
__device__ __forceinline__ void fw_stage_out(const float (&o)[D / 2], const float (&m)[2], const float (&l)[2],
                                             uint32_t so, float *__restrict__ lse, const forge_flash_shape &s,
                                             int warp, int g, int tq, int row_lo, int b, int h) {
    /* the row within the warpgroup's 64 is warp * 16 + g + 8 r: row % 8 == g */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float inv = fw_row_end(l[r], m[r], lse, s, row_lo + r * 8, tq, b, h);
        /* the row's address with g in the chunk bits (bits 4-6 of so + row * 128 + 4 tq are 0), through an empty
         * asm: computed here, not hoisted out of the item loop as 2 x D/8 live registers */
        uint32_t rb = so + (uint32_t)(warp * 16 + g + 8 * r) * 128 + 4 * tq + ((uint32_t)g << 4);
        asm volatile("" : "+r"(rb));
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const uint32_t addr = (rb ^ ((uint32_t)(n % 8) << 4)) + (uint32_t)(n / 8) * 8192;
            asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(fw_pack(o[4 * n + 2 * r] * inv,
                                                                            o[4 * n + 2 * r + 1] * inv))
                         : "memory");
        }
    }
}

/* Named barrier BAR0 + c (c: the consumer warpgroup 0 or 1) over THREADS threads, as immediates (a barrier id in a
 * register makes ptxas reserve all 16) */
template <int BAR0, int THREADS> __device__ __forceinline__ void fw_named_sync(int c) {
    if (c == 0)
        asm volatile("bar.sync %0, %1;" ::"n"(BAR0), "n"(THREADS) : "memory");
    else
        asm volatile("bar.sync %0, %1;" ::"n"(BAR0 + 1), "n"(THREADS) : "memory");
}
template <int BAR0, int THREADS> __device__ __forceinline__ void fw_named_arrive(int c) {
    if (c == 0)
        asm volatile("bar.arrive %0, %1;" ::"n"(BAR0), "n"(THREADS) : "memory");
    else
        asm volatile("bar.arrive %0, %1;" ::"n"(BAR0 + 1), "n"(THREADS) : "memory");
}

/* the consumer warpgroup c's own barrier (128 threads): its out slice is in shared memory */
__device__ __forceinline__ void fw_wg_bar_sync(int c) { fw_named_sync<FW_OUT_BAR, 128>(c); }

/* Out through shared memory and TMA, the steps both forwards share: the warpgroup c's normalised slice staged at so
 * (fw_stage_out, which also stores lse), made visible to the async proxy, the warpgroup's barrier, then the issuing
 * thread's D/64 TMA stores of rows wrow0.. (one bulk group, committed). The caller waits for the group (to reuse so
 * or exit) as its schedule allows. */
template <int D>
__device__ __forceinline__ void fw_out_staged(const float (&o)[D / 2], const float (&m)[2], const float (&l)[2],
                                              uint32_t so, const CUtensorMap *tm_o, float *__restrict__ lse,
                                              const forge_flash_shape &s, int c, bool issuer, int warp, int g,
                                              int tq, int row_lo, int wrow0, int b, int h) {
    fw_stage_out<D>(o, m, l, so, lse, s, warp, g, tq, row_lo, b, h);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    fw_wg_bar_sync(c);
    if (issuer) {
#pragma unroll
        for (int j = 0; j < D / 64; j++) fw_tma_store_3d(tm_o, h * D + 64 * j, wrow0, b, so + j * 8192);
        tma_store_commit();
    }
}

/* S = Q.K^T of the tile whose K starts at kt (no commit). The k16 steps' descriptors are the first ones stepped
 * (wgmma_desc_step): derived from the address at every step they took ~7 uniform instructions a wgmma, a fifth of
 * the D = 64 tile's ~290 issue slots; stepped, ~4. */
template <int D, int BN>
__device__ __forceinline__ void fw_issue_qk(float (&sc)[BN / 2], uint32_t qa, uint32_t kt) {
    const uint64_t qd = wgmma_desc(qa), kd = wgmma_desc(kt);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        fw_qk<BN>(sc, wgmma_desc_step(qd, (kk / 4) * (FW_BM * 128) + (kk % 4) * 32),
                  wgmma_desc_step(kd, (kk / 4) * (BN * 128) + (kk % 4) * 32), kk > 0 ? 1 : 0);
}

/* O += P.V of the tile whose V starts at vt (no commit; descriptors stepped as in fw_issue_qk) */
template <int D, int BN>
__device__ __forceinline__ void fw_issue_pv(float (&o)[D / 2], const uint32_t (&pa)[BN / 16][4], uint32_t vt) {
    const uint64_t vd = wgmma_desc_mn(vt);
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
        fw_pv<D>(o, pa[kk], wgmma_desc_step(vd, (kk / 4) * ((D / 64) * 8192) + (kk % 4) * 2048));
}

/* Keys k0.. of one tile: -inf where key > row + diag (causal, bottom-right) or key >= Tk. At BN = 64 (the D = 64
 * kernel) written as the element's key offset j = n * 8 + (e & 1), a constant, against thread values (key = k0 +
 * 2 tq + j, row = row_lo + 8 (e >> 1)), with the Tk test only in a tile that reaches Tk: one compare and one select
 * an element, half the instructions of the direct form, 1.01x the D = 64 forward; the D = 128 kernel, whose mask
 * runs between its two wgmma waits, measured 1% slower with it and keeps the direct form (lab/notes/flash.md,
 * 2026-12-04). */
template <int BN>
__device__ __forceinline__ void fw_mask(float (&sc)[BN / 2], int k0, int row_lo, int diag, int Tk, int tq) {
    if constexpr (BN == 64) {
        const int d = row_lo + diag - k0 - 2 * tq; /* key > row + diag  <=>  j > d + 8 (e >> 1) */
        const int dt = Tk - k0 - 2 * tq;           /* key >= Tk  <=>  j >= dt */
        if (k0 + BN <= Tk) {
#pragma unroll
            for (int n = 0; n < BN / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (n * 8 + (e & 1) > d + (e >> 1) * 8) sc[4 * n + e] = -INFINITY;
        } else {
#pragma unroll
            for (int n = 0; n < BN / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (n * 8 + (e & 1) > d + (e >> 1) * 8 || n * 8 + (e & 1) >= dt) sc[4 * n + e] = -INFINITY;
        }
    } else {
#pragma unroll
        for (int n = 0; n < BN / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = k0 + n * 8 + 2 * tq + (e & 1);
                const int row = row_lo + (e >> 1) * 8;
                if (key > row + diag || key >= Tk) sc[4 * n + e] = -INFINITY;
            }
    }
}

/* Online softmax of row r (0: the thread's row g, 1: row g + 8) of one S tile in place, in the log2 domain with
 * scale*log2(e) folded into one FMA: the running max m and sum l updated, sc = exp2(s * sl2 - m), alpha the factor
 * the row's earlier O is to be scaled by (l already is). Row max/sum over the quad (shfl 1, 2); a row
 * max of -inf (nothing visible yet) is used as 0 so exp2 never sees inf - inf. */
template <int BN>
__device__ __forceinline__ void fw_softmax_row(float (&sc)[BN / 2], float &m, float &l, float &alpha, int r,
                                               float sl2) {
    /* the first pair starts the max and (below) the sum: -inf and 0 as starting values cost an instruction each */
    float mx = fmaxf(sc[2 * r], sc[2 * r + 1]);
#pragma unroll
    for (int n = 1; n < BN / 8; n++) mx = fmaxf(mx, fmaxf(sc[4 * n + 2 * r], sc[4 * n + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mnew = fmaxf(m, mx * sl2);
    const float muse = mnew == -INFINITY ? 0.0f : mnew;
    alpha = fw_ex2(m - muse);
    m = mnew;
    float sum;
#pragma unroll
    for (int n = 0; n < BN / 8; n++) {
        sc[4 * n + 2 * r] = fw_ex2(fmaf(sc[4 * n + 2 * r], sl2, -muse));
        sc[4 * n + 2 * r + 1] = fw_ex2(fmaf(sc[4 * n + 2 * r + 1], sl2, -muse));
        const float pair = sc[4 * n + 2 * r] + sc[4 * n + 2 * r + 1];
        sum = n == 0 ? pair : sum + pair; /* 0 + pair is pair: the exps are >= 0, never -0 */
    }
    l = l * alpha + sum;
}

/* The steps of a K/V tile (K at kt, V at vt; keys k0..) that fw_tile and fw_tile_ref share. fw_s_tile: S = Q.K^T
 * waited for, the mask where `masked`. */
template <int D, int BN>
__device__ __forceinline__ void fw_s_tile(float (&sc)[BN / 2], uint32_t qa, uint32_t kt, bool masked, int k0,
                                          int row_lo, int diag, int Tk, int tq) {
    wgmma_fence();
    fw_issue_qk<D, BN>(sc, qa, kt);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(sc);
    if (masked) fw_mask<BN>(sc, k0, row_lo, diag, Tk, tq);
}

/* the online softmax of the thread's two rows in place, O rescaled by each row's alpha */
template <int D, int BN>
__device__ __forceinline__ void fw_softmax_rescale(float (&sc)[BN / 2], float (&o)[D / 2], float (&m)[2],
                                                   float (&l)[2], float sl2) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float alpha;
        fw_softmax_row<BN>(sc, m[r], l[r], alpha, r, sl2);
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[4 * n + 2 * r] *= alpha;
            o[4 * n + 2 * r + 1] *= alpha;
        }
    }
}

/* O += P.V with P = sc packed to bf16, waited for */
template <int D, int BN>
__device__ __forceinline__ void fw_pv_tile(float (&o)[D / 2], const float (&sc)[BN / 2], uint32_t vt) {
    uint32_t pa[BN / 16][4];
    fw_to_a<BN>(pa, sc);
    wgmma_fence(); /* o and pa were written by ordinary instructions */
    fw_issue_pv<D, BN>(o, pa, vt);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(o);
}

/* One K/V tile of a consumer warpgroup: S = Q.K^T, the mask where `masked`, the online softmax of the thread's two
 * rows with O rescaled, O += P.V; waits for both products. fw_fwd64_kernel (a row's first tile) and the lab's
 * one-CTA kernel run it (the scheduled kernel splits it around its two waits). */
template <int D, int BN>
__device__ __forceinline__ void fw_tile(float (&o)[D / 2], float (&m)[2], float (&l)[2], uint32_t qa, uint32_t kt,
                                        uint32_t vt, bool masked, int k0, int row_lo, int diag, int Tk, int tq,
                                        float sl2) {
    float sc[BN / 2];
    fw_s_tile<D, BN>(sc, qa, kt, masked, k0, row_lo, diag, Tk, tq);
    fw_softmax_rescale<D, BN>(sc, o, m, l, sl2);
    fw_pv_tile<D, BN>(o, sc, vt);
}

/* A tile's exponentials may reach 2^32 of a row's reference before fw_tile_ref falls back to the exact max: P, l
 * and O then stay in bf16 / fp32 range while Tk * max|v| < 2^95. */
#define FW_REF_CAP 4294967296.0f

/* Whether `bad` holds in any thread of consumer warpgroup c: a reduction over its 128 threads on named barrier
 * FW_VOTE_BAR + c, which every thread of the warpgroup reaches. */
__device__ __forceinline__ bool fw_wg_any(bool bad, int c) {
    uint32_t any;
    if (c == 0)
        asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.u32 q, %1, 0;\n\tbar.red.or.pred p, %2, 128, q;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(any)
                     : "r"((uint32_t)bad), "n"(FW_VOTE_BAR)
                     : "memory");
    else
        asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.u32 q, %1, 0;\n\tbar.red.or.pred p, %2, 128, q;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(any)
                     : "r"((uint32_t)bad), "n"(FW_VOTE_BAR + 1)
                     : "memory");
    return any != 0;
}

/* One K/V tile of consumer warpgroup c after a row's first (fw_tile set m to that tile's max): the softmax against
 * the fixed reference m, P = exp2(s * sl2 - m), with no row max, quad shuffles, factor alpha or O rescale in the
 * tile. It is the same softmax (out = sum P v / sum P for any reference; lse = m + log2 l); only the point where P
 * is rounded to bf16 moves. The exponentials start as soon as S lands; their per-thread sums, which l needs anyway,
 * say whether every P stayed below FW_REF_CAP (inf and NaN fail, and so does a reference still -inf: nothing
 * visible yet). If not in some thread, the warpgroup (S is its collective product) issues S again from the K tile,
 * still in its stage, and runs the exact online softmax, which raises m to the new max and rescales O and l. A row
 * whose later scores rise 32 log2 units (22 nats) above its first tile's max takes that path once per such rise.
 * 1.04-1.06x the D = 64 forward with the exact max every tile; a per-thread max test before the exponentials in
 * place of the vote gained 0-1.5% (lab/notes/flash.md, 2026-12-05). */
template <int D, int BN>
__device__ __forceinline__ void fw_tile_ref(float (&o)[D / 2], float (&m)[2], float (&l)[2], uint32_t qa, uint32_t kt,
                                            uint32_t vt, bool masked, int k0, int row_lo, int diag, int Tk, int tq,
                                            float sl2, int c) {
    float sc[BN / 2];
    fw_s_tile<D, BN>(sc, qa, kt, masked, k0, row_lo, diag, Tk, tq);
    float ts[2];
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int n = 0; n < BN / 8; n++) {
            sc[4 * n + 2 * r] = fw_ex2(fmaf(sc[4 * n + 2 * r], sl2, -m[r]));
            sc[4 * n + 2 * r + 1] = fw_ex2(fmaf(sc[4 * n + 2 * r + 1], sl2, -m[r]));
            const float pair = sc[4 * n + 2 * r] + sc[4 * n + 2 * r + 1];
            ts[r] = n == 0 ? pair : ts[r] + pair;
        }
    const bool bad = !(ts[0] <= FW_REF_CAP && ts[1] <= FW_REF_CAP) || m[0] == -INFINITY || m[1] == -INFINITY;
    if (fw_wg_any(bad, c)) {
        fw_s_tile<D, BN>(sc, qa, kt, masked, k0, row_lo, diag, Tk, tq);
        fw_softmax_rescale<D, BN>(sc, o, m, l, sl2);
    } else {
        l[0] += ts[0];
        l[1] += ts[1];
    }
    fw_pv_tile<D, BN>(o, sc, vt);
}

/* The CTA's query tile and head. Blocks start in launch order (blockIdx.x fastest over the grid (query tiles, H,
 * B)), and the grid runs the longest causal work first: every (b, h)'s last query tile, then every one's second to
 * last, ..., so it ends on short tiles: a CTA that starts late on a long tile leaves SMs idle at the end, which is
 * what each head's tiles in turn did (lab/notes/flash.md has the measurements, and the head groups tried).
 * fw_fwd64_kernel uses it. */
__device__ __forceinline__ void fw64_tile_of(int H, int &q0, int &h, int &b) {
    const int nqt = (int)gridDim.x, heads = (int)(gridDim.y * gridDim.z);
    const int lin = (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
    const int hb = lin % heads;
    q0 = (nqt - 1 - lin / heads) * FW_BM;
    h = hb % H;
    b = hb / H;
}

/* The producer (one thread: of warpgroup 0, or of warp 8 in the two-CTA kernel): Q once on qbar, then ntiles K/V
 * tiles of BN keys into the ring (stage = tile % STAGES). */
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

/* ---- host (defined in flash_attention_bf16_wgmma.cu) ------------------------------------------------------ */

/* The 3D token map of Q, K or V (wgmma_encode_tokens: 64 columns x box_rows tokens), naming `entry` and its
 * fallback, the mma.sync forward, in a refusal (FORGE_ERR_UNSUPPORTED). */
forge_status fw_encode(CUtensorMap *map, const void *ptr, int B, int T, int cols, long long stride, int box_rows,
                       const char *what, const char *entry);

/* What every wgmma forward entry runs before it launches (`what` names it in errors): forge_flash_check_shape;
 * nothing to do for B == 0 or Tq == 0; Tk == 0 to the mma.sync forward (a tensor map cannot have a 0 dim; that
 * forward writes out = 0, lse = -inf); FORGE_ERR_UNSUPPORTED on a device other than sm_90. *launch = 1 when
 * the caller is to launch its kernel, 0 when the call is complete. */
forge_status fw_forward_begin(const char *what, const forge_flash_shape *s, const void *q, const void *k,
                              const void *v, void *out_bf16, float *lse, void *stream, int *launch);

#endif
