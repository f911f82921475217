/*
 * flash16_bwd_fused128.cu: a fused Hopper (sm_90a) backward of forge's bf16
 * flash attention at D = 128 (issue 18, item 1): one kernel computes dK and dV
 * of a 128-key block and adds the block's share of dQ, from a single S^T / dP^T
 * recomputation per (key block, query tile): 5 matmul passes of T^2 D / 2
 * instead of the 7 of forge's dQ + dK/dV kernels. Deterministic, with no
 * unordered reduction: the contributions to a dQ tile are added in a fixed
 * key-block order by an ordered hand-off. Same entry contract as
 * forge_flash_bf16_backward_wgmma (fp32 dq, dk, dv overwritten); dk and dv are
 * bitwise forge's (the same products and fp32 arithmetic per element, in the
 * same order), dq equal up to summation order.
 * Entry: lab_flash16_backward_fused128 (flash16_variants.h).
 *
 * Design (the register plan of lab/notes/flash.md, fourteenth session):
 * - Grid (key blocks, Hkv, B), 384 threads: fb_dkdv_kernel<128, 0>'s CTA.
 *   Warpgroup 0: thread 0 is fb_kv_produce (K, V resident; Q, dO and the row
 *   statistics through a ring of 3 stages), threads 32 and 64 the dQ writers
 *   (below). Consumer warpgroup c owns keys 64c..64c+63 of the block and per
 *   (query head, query tile) iteration runs fb_dkdv_kernel's tile: S^T, dP^T,
 *   P^T, dS^T, then dV += P^T.dO and dK += dS^T.Q.
 * - dQ: both consumers store their dS^T (bf16) into one 128-key buffer
 *   (fz_store_ds: dS as an MN-major A operand), and consumer c computes
 *   dQ[:, 64c .. 64c + 63] (64 queries x 64 columns, 32 fp32 registers) =
 *   dS (64 x 128 keys) . K[:, 64c ..] (the resident K box c read MN-major),
 *   8 k16 steps, issued with dV and dK and waited with them once. S^T and
 *   dP^T are dead by then, so the peak is dK + dV + P^T + dS^T + dQ (192
 *   fp32 / fragment registers). Two dS buffers (full: 8 warps after their
 *   fence.proxy.async; empty: 8 warps after their products).
 * - The dQ tile (times scale) leaves through shared memory: consumer c writes
 *   its 16 KiB staging tile (fz2_store_dq: two 32-column boxes, 128B-swizzled)
 *   and arrives on stgfull[c] (4 warps); writer c waits for the tile's turn,
 *   then for the staging tile, issues its two boxes as a TMA store (the tile's
 *   first contribution) or fp32 reduce-add (cp.reduce.async.bulk.tensor) into
 *   dq, releases the staging tile (stgempty[c]) once the bulk group has read
 *   it, and passes the turn on once the group is complete.
 * - The turn: one counter per (b, h, query tile, column half) in a zeroed
 *   workspace. A tile is visited by key blocks first = min(nkb - 1, (last row
 *   + diag) / 128) down to 0; block kb adds when its half's counter reads
 *   first - kb, then adds 1 (ld.acquire.gpu spin; after the group's completion
 *   fence.proxy.async.global and red.release.gpu). So dq = ((c_first +
 *   c_first-1) + ...) + c_0 in one order on every run. Block kb + 1 reaches a
 *   tile two iterations before block kb (its first tile is two later), so the
 *   turn is normally there already.
 * - Progress: a block waits only for higher blocks of its (kv head, batch).
 *   blockIdx.x maps to kb ascending (the longest causal blocks start first)
 *   when the key blocks fit on the SMs at once, else descending (desc), so a
 *   block never waits for one that has not started, given that the blocks
 *   start in blockIdx order (FlashAttention-3's deterministic mode assumes the
 *   same). Ascending is safe when they fit: the blocks of earlier (hk, b) have
 *   all started and finish on their own.
 * - Rows of query tiles that see no key (Tq > Tk) get no contribution: the
 *   entry zeroes them (cudaMemset2DAsync) after the kernel.
 * - Shared memory (bytes): K, V 2 x 32 Ki; ring 3 x 32 Ki; dS 2 x 16 Ki;
 *   staging 2 x 16 Ki; slots 3 x 512; 15 mbarriers; 1 KiB alignment slack:
 *   232,056 of 232,448.
 */
#include <math.h>
#include <stdint.h>

#include "../../src/backend/cuda/flash_attention_bf16_wgmma_bwd.cuh"
#include "../../src/backend/cuda/wgmma_tmap.h"

#include "flash16_bwd_fused_kit.cuh"
#include "flash16_variants.h"

#define LAB_F3_ENTRY "lab_flash16_backward_fused128" /* named in errors */

namespace {

constexpr int F3_D = 128;
constexpr int F3_STAGES = 3;
typedef fb_cfg<F3_D> f3_cfg;
constexpr uint32_t F3_DS = FB_BR * FB_BS * 2;  /* dS^T: 128 keys x 64 queries, bf16 */
constexpr uint32_t F3_STG = FB_BS * 64 * 4;    /* a consumer's fp32 dQ tile: 64 queries x 64 columns */
constexpr int F3_NBARS = 1 + 2 * F3_STAGES + 4 + 4; /* resbar, full, empty, dsfull[2], dsempty[2], stgfull[2], stgempty[2] */
constexpr size_t F3_SMEM = 2 * (size_t)f3_cfg::RES_BYTES + F3_STAGES * (size_t)f3_cfg::STAGE_BYTES +
                           2 * (size_t)F3_DS + 2 * (size_t)F3_STG + F3_STAGES * (size_t)f3_cfg::LD_BYTES +
                           8 * F3_NBARS + 1024;
static_assert(F3_SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");
/* the writer's loop (turn arithmetic, the counter's address, four bulk operations) needs more than forge's 24 */
constexpr int F3_PRODUCER_REGS = 40;
constexpr int F3_CONSUMER_REGS = 232;
static_assert(128 * (F3_PRODUCER_REGS + 2 * F3_CONSUMER_REGS) <= 65536, "the register file");

/* Offsets from the 1 KiB-aligned base; resbar, then full[st] and empty[st] as fb_kv_produce expects them. */
struct f3_smem {
    uint32_t base;
    __device__ uint32_t k() const { return base; }
    __device__ uint32_t v() const { return base + f3_cfg::RES_BYTES; }
    __device__ uint32_t ring() const { return base + 2 * f3_cfg::RES_BYTES; }
    __device__ uint32_t ds(int i) const { return ring() + F3_STAGES * f3_cfg::STAGE_BYTES + i * F3_DS; }
    __device__ uint32_t stg(int c) const { return ds(2) + c * F3_STG; }
    __device__ uint32_t ld() const { return stg(2); }
    __device__ uint32_t resbar() const { return ld() + F3_STAGES * f3_cfg::LD_BYTES; }
    __device__ uint32_t bars() const { return resbar() + 8; }
    __device__ uint32_t full(int st) const { return bars() + 8 * st; }
    __device__ uint32_t empty(int st) const { return bars() + 8 * (F3_STAGES + st); }
    __device__ uint32_t dsfull(int i) const { return bars() + 16 * F3_STAGES + 8 * i; }
    __device__ uint32_t dsempty(int i) const { return dsfull(2) + 8 * i; }
    __device__ uint32_t stgfull(int c) const { return dsempty(2) + 8 * c; }
    __device__ uint32_t stgempty(int c) const { return stgfull(2) + 8 * c; }
};

__device__ __forceinline__ uint32_t f3_ld_acquire(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Spins until *p == turn; after WGMMA_WAIT_TIMEOUT_NS faults as mbar_wait_wide does (a broken hand-off must not
 * hang the process). */
__device__ __forceinline__ void f3_turn_wait(const uint32_t *p, uint32_t turn) {
    if (f3_ld_acquire(p) == turn) return;
    const uint64_t t0 = gemm_globaltimer();
    while (f3_ld_acquire(p) != turn) {
        if (gemm_globaltimer() - t0 > WGMMA_WAIT_TIMEOUT_NS)
            asm volatile("st.global.u32 [%0], %1;" ::"l"(0ull), "r"(0u) : "memory");
    }
}

/* The dQ writer of consumer c's column half (warpgroup 0, thread 32 + 32c): per iteration of the block, the
 * staged tile into dq in the tile's turn for that half (see the header). The turn is waited first: it is usually
 * there before the tile is staged. */
__device__ __forceinline__ void f3_dq_write(const fb_kv_block &kb, const forge_flash_shape &s, int c,
                                            const CUtensorMap *tm_dq, uint32_t *__restrict__ turns,
                                            const f3_smem &sm) {
    const int ntq = (s.Tq + FB_BS - 1) / FB_BS, nkb = (s.Tk + FB_BR - 1) / FB_BR, kbi = kb.k0 / FB_BR;
    for (int it = 0; it < kb.total; it++) {
        const int h = kb.hk * kb.G + it / kb.nq, qt = kb.t_first + it % kb.nq, qt0 = qt * FB_BS;
        const int last = min(qt0 + FB_BS - 1, s.Tq - 1) + kb.diag; /* >= kb.k0: the block sees this tile */
        const uint32_t turn = (uint32_t)(min(nkb - 1, last / FB_BR) - kbi);
        uint32_t *ctr = turns + (((size_t)kb.b * s.H + h) * ntq + qt) * 2 + c;
        f3_turn_wait(ctr, turn);
        asm volatile("fence.proxy.async.global;" ::: "memory"); /* the earlier blocks' adds before ours */
        mbar_wait_wide(sm.stgfull(c), (uint32_t)it & 1u);
#pragma unroll
        for (int j = 0; j < 2; j++)
            fz2_tile_out(tm_dq, h * F3_D + 64 * c + 32 * j, qt0, kb.b, sm.stg(c) + j * (F3_STG / 2), turn != 0);
        tma_store_commit();
        tma_store_wait_read<0>();
        mbar_arrive(sm.stgempty(c));
        tma_store_wait_all();
        asm volatile("fence.proxy.async.global;" ::: "memory"); /* our completed adds before the release */
        asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(ctr), "r"(1u) : "memory");
    }
}

/* A consumer's dQ tile of iteration it, waited (dqa), out: buffer (it & 1) of dS released, the tile (times scale)
 * into the consumer's staging tile once its writer has read the last one, stgfull. */
__device__ __forceinline__ void f3_dq_out(const f3_smem &sm, int c, int it, float (&dqa)[32], int warp, int lane,
                                          int g, int tq, float scale) {
    if (lane == 0) mbar_arrive(sm.dsempty(it & 1));
#pragma unroll
    for (int i = 0; i < 32; i++) dqa[i] *= scale;
    mbar_wait_wide(sm.stgempty(c), ((uint32_t)it & 1u) ^ 1u);
    fz2_store_dq(sm.stg(c), warp, g, tq, dqa);
    fz_fence_proxy_async(); /* the staging stores, visible to the TMA (async proxy) */
    __syncwarp();
    if (lane == 0) mbar_arrive(sm.stgfull(c));
}

/* Consumer c's dQ[:, 64c ..] of iteration it's tile = dS . K over the 128 keys (kbox: K's columns 64c..), once both
 * halves of the tile's dS are stored; waited, then f3_dq_out. */
__device__ __forceinline__ void f3_dq_tile(const f3_smem &sm, int c, int it, uint32_t kbox, int warp, int lane, int g,
                                           int tq, float scale) {
    mbar_wait_wide(sm.dsfull(it & 1), (uint32_t)(it >> 1) & 1u);
    float dqa[32];
    wgmma_fence();
    fz_dq_product(dqa, sm.ds(it & 1), fb_opaque(kbox));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(dqa);
    __syncwarp();
    f3_dq_out(sm, c, it, dqa, warp, lane, g, tq, scale);
}

template <int SCHED>
__global__ void __launch_bounds__(FB_THREADS, 1)
    f3_bwd_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                  const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                  const __grid_constant__ CUtensorMap tm_dq, const float *__restrict__ rows,
                  uint32_t *__restrict__ turns, const fb_grads grads, forge_flash_shape s, float sl2, float scale,
                  int desc) {
    extern __shared__ __align__(1024) unsigned char f3_smem_raw[];
    f3_smem sm;
    sm.base = (smem_u32(f3_smem_raw) + 1023u) & ~1023u;
    const float *ld_gen = (const float *)(f3_smem_raw + (sm.ld() - smem_u32(f3_smem_raw)));
    const int kbi = desc ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const fb_kv_block kb = fb_kv_block_at(s, kbi * FB_BR, blockIdx.y, blockIdx.z);
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int i = 0; i < 2; i++) {
            mbar_init(sm.dsfull(i), FB_CONSUMER_WARPS);
            mbar_init(sm.dsempty(i), FB_CONSUMER_WARPS);
        }
        for (int i = 0; i < 2; i++) {
            mbar_init(sm.stgfull(i), FB_CONSUMER_WARPS / 2);
            mbar_init(sm.stgempty(i), 1);
        }
        fb_barriers_init(sm.resbar(), F3_STAGES); /* and the init fences */
    }
    __syncthreads();

    if (wg == 0) {
        wgmma_setmaxnreg_dec<F3_PRODUCER_REGS>();
        if (threadIdx.x == 0)
            fb_kv_produce<F3_D, FB_BR, F3_STAGES>(kb, s, &tm_k, &tm_v, &tm_q, &tm_do, rows, sm.k(), sm.v(),
                                                  sm.ring(), sm.ld(), sm.resbar(), sm.bars());
        else if (threadIdx.x == 32 || threadIdx.x == 64)
            f3_dq_write(kb, s, threadIdx.x / 32 - 1, &tm_dq, turns, sm);
        return;
    }

    wgmma_setmaxnreg_inc<F3_CONSUMER_REGS>();
    const int c = wg - 1;
    const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int wk0 = kb.k0 + c * 64;         /* this warpgroup's first key */
    const int key_lo = wk0 + warp * 16 + g; /* this thread's keys: key_lo, key_lo + 8 */
    const int diag = kb.diag;

    float adk[F3_D / 2], adv[F3_D / 2];
#pragma unroll
    for (int i = 0; i < F3_D / 2; i++) adk[i] = adv[i] = 0.0f;

    if (kb.total > 0) mbar_wait_wide(sm.resbar(), 0);
    const uint32_t ka = sm.k() + c * 8192, va = sm.v() + c * 8192; /* rows 64c.. of each 128-row box */
    const uint32_t kbox = sm.k() + c * (FB_BR * 128);              /* K's columns 64c.., all 128 keys */
    int stage = 0;
    uint32_t phase = 0;
    for (int it = 0; it < kb.total; it++) {
        const int qt0 = (kb.t_first + it % kb.nq) * FB_BS;
        const int db = it & 1;
        const uint32_t du = (uint32_t)(it >> 1) & 1u;
        mbar_wait_wide(sm.full(stage), phase);
        const uint32_t qtl = sm.ring() + stage * f3_cfg::STAGE_BYTES, dtl = qtl + f3_cfg::TILE_BYTES;
        /* the warpgroup's first key is seen by queries >= wk0 - diag; keys past Tk are never stored */
        const bool vis = wk0 <= qt0 + FB_BS - 1 + diag && wk0 < s.Tk;
        uint32_t pa[4][4], sa[4][4];
        if (vis) {
            const float *ls = ld_gen + stage * (2 * FB_BS);
            float st[32], dpt[32];
            fb_dkdv_tile_ps<F3_D>(st, dpt, ka, va, qtl, dtl, ls, tq, sl2,
                                  fb_pt_bounds_of(wk0, key_lo, qt0, diag, s.Tq));
            fw_to_a<64>(pa, st);
            fw_to_a<64>(sa, dpt);
        } else { /* none of this warpgroup's keys is visible: its dS^T half is zero (pa is not read) */
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int i = 0; i < 4; i++) sa[kk][i] = 0u;
        }

        /* dS^T into buffer db once both dQ products of its previous use have read it */
        mbar_wait_wide(sm.dsempty(db), du ^ 1u);
        fz_store_ds(sm.ds(db), c * 64 + warp * 16, g, tq, sa);
        fz_fence_proxy_async();
        __syncwarp();
        if (lane == 0) mbar_arrive(sm.dsfull(db));

        if constexpr (SCHED == LAB_FLASH16_FUSED128_OVERLAP) {
            /* dV += P^T.dO and dK += dS^T.Q in flight while waiting for the other half of dS, then the dQ product;
             * all three waited once */
            float dqa[32];
            wgmma_fence(); /* adv, adk, pa, sa were written by ordinary instructions */
            if (vis) {
                fb_rs<F3_D>(adv, pa, dtl);
                fb_rs<F3_D>(adk, sa, qtl);
                wgmma_commit();
            }
            mbar_wait_wide(sm.dsfull(db), du);
            fz_dq_product(dqa, sm.ds(db), fb_opaque(kbox));
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operands(adv);
            wgmma_fence_operands(adk);
            wgmma_fence_operands(dqa);
            __syncwarp();
            if (lane == 0) mbar_arrive(sm.empty(stage)); /* the Q / dO tiles are read */
            f3_dq_out(sm, c, it, dqa, warp, lane, g, tq, scale);
        } else {
            /* dV += P^T.dO and dK += dS^T.Q, waited; then WAIT_DKDV: this tile's dQ product; DEFER: the previous
             * tile's, whose dS halves are long stored, so the two consumers need not run in step */
            if (vis) fb_dkdv_accumulate<F3_D>(adv, adk, pa, sa, dtl, qtl);
            if constexpr (SCHED == LAB_FLASH16_FUSED128_WAIT_DKDV)
                f3_dq_tile(sm, c, it, kbox, warp, lane, g, tq, scale);
            else if (it > 0)
                f3_dq_tile(sm, c, it - 1, kbox, warp, lane, g, tq, scale);
            __syncwarp();
            if (lane == 0) mbar_arrive(sm.empty(stage)); /* the Q / dO tiles are read */
        }
        if (++stage == F3_STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }
    if constexpr (SCHED == LAB_FLASH16_FUSED128_DEFER) {
        if (kb.total > 0) f3_dq_tile(sm, c, kb.total - 1, kbox, warp, lane, g, tq, scale);
    }

    fb_dkdv_store<F3_D>(grads, adk, adv, s, kb.b, kb.hk, key_lo, tq, scale);
}

/* A 3D tensor map of the fp32 dq (B, Tq, H * 128 dense: dims H * 128, Tq, B) in 32-column x 64-row x 1 boxes,
 * 128B-swizzled, as f3_dq_write writes it. */
forge_status f3_encode_dq(CUtensorMap *map, float *dq, const forge_flash_shape *s) {
    gemm_encode_tiled_fn encode = nullptr;
    FORGE_TRY(gemm_get_encoder(&encode));
    const cuuint64_t row = (cuuint64_t)s->H * F3_D * 4;
    const cuuint64_t dims[3] = {(cuuint64_t)s->H * F3_D, (cuuint64_t)s->Tq, (cuuint64_t)s->B};
    const cuuint64_t strides[2] = {row, row * (cuuint64_t)s->Tq};
    const cuuint32_t box[3] = {32, FB_BS, 1};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, dq, dims, strides, box, elem_strides,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: cuTensorMapEncodeTiled for dq (fp32, B=%d x Tq=%d rows of %d columns, box 32 x 64, "
                           "128B swizzle) failed with CUresult %d",
                           LAB_F3_ENTRY, s->B, s->Tq, s->H * F3_D, (int)r);
    return FORGE_OK;
}

} // namespace

/* The turn counters are a grow-only buffer of this file, zeroed on the call's stream before each launch, freed at
 * exit by the driver (not thread-safe: a lab entry for tests and benches). */
extern "C" forge_status lab_flash16_backward_fused128_order(const forge_flash_shape *s, const void *q, const void *k,
                                                            const void *v, const void *out_bf16,
                                                            const void *dout_bf16, const float *lse, float *delta,
                                                            float *dq, float *dk, float *dv, int order, int sched,
                                                            void *stream) {
    static uint32_t *turns = NULL;
    static size_t turns_cap = 0;
    int launch = 0;
    FORGE_TRY(fb_backward_begin(LAB_F3_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, &launch));
    if (!launch) return FORGE_OK;
    if (order < LAB_FLASH16_FUSED128_BY_RULE || order > LAB_FLASH16_FUSED128_DESC)
        return forge_error(FORGE_ERR_ARG, "%s: order %d is not one of 0 (by the rule), 1 (ascending), 2 (descending)",
                           LAB_F3_ENTRY, order);
    if (sched < LAB_FLASH16_FUSED128_WAIT_DKDV || sched > LAB_FLASH16_FUSED128_DEFER)
        return forge_error(FORGE_ERR_ARG, "%s: sched %d is not one of 0 (wait dK/dV), 1 (overlap), 2 (defer)",
                           LAB_F3_ENTRY, sched);
    if (s->D != F3_D)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: the fused backward is compiled for D = 128 only, got D=%d",
                           LAB_F3_ENTRY, s->D);
    if (((uintptr_t)dq & 15u) != 0)
        return forge_error(FORGE_ERR_ARG, "%s: dq (%p) must be 16-byte aligned (TMA adds the dQ tiles)", LAB_F3_ENTRY,
                           (void *)dq);
    const size_t ntq = (size_t)(s->Tq + FB_BS - 1) / FB_BS;
    const size_t need = (size_t)s->B * s->H * ntq * 2 * sizeof(uint32_t);
    if (need > turns_cap) {
        if (turns) CUDA_TRY(cudaFree(turns));
        turns = NULL;
        turns_cap = 0;
        CUDA_TRY(cudaMalloc((void **)&turns, need));
        turns_cap = need;
    }
    CUtensorMap tm_dq; /* before anything is written: a refusal leaves the outputs untouched */
    FORGE_TRY(f3_encode_dq(&tm_dq, dq, s));
    fb_call c;
    FORGE_TRY(fb_backward_prepare(&c, LAB_F3_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream,
                                  0));
    CUDA_TRY(cudaMemsetAsync(turns, 0, need, c.st));
    auto kernel = sched == LAB_FLASH16_FUSED128_OVERLAP ? f3_bwd_kernel<LAB_FLASH16_FUSED128_OVERLAP>
                  : sched == LAB_FLASH16_FUSED128_DEFER ? f3_bwd_kernel<LAB_FLASH16_FUSED128_DEFER>
                                                        : f3_bwd_kernel<LAB_FLASH16_FUSED128_WAIT_DKDV>;
    CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)F3_SMEM));
    int dev = 0, sms = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int nkb = (s->Tk + FB_BR - 1) / FB_BR; /* one CTA per SM (shared memory) */
    const dim3 grid((unsigned)nkb, (unsigned)s->Hkv, (unsigned)s->B);
    kernel<<<grid, FB_THREADS, F3_SMEM, c.st>>>(c.k_res, c.v_res, c.q_str, c.do_str, tm_dq, c.rows, turns, c.g,
                                                       c.s, c.sl2, c.scale,
                                                       order == LAB_FLASH16_FUSED128_BY_RULE ? nkb > sms
                                                                                             : order == LAB_FLASH16_FUSED128_DESC);
    CUDA_LAUNCH_CHECK("f3_bwd_kernel");
    /* rows of the query tiles whose last row sees no key (Tq > Tk): no block adds to them */
    const int diag = s->Tk - s->Tq;
    int zt = 0; /* such tiles: tile t's last row min(64 t + 63, Tq - 1) + diag < 0 */
    while ((size_t)zt < ntq && (FB_BS * zt + FB_BS - 1 < s->Tq ? FB_BS * zt + FB_BS - 1 : s->Tq - 1) + diag < 0) zt++;
    const size_t zrows = (size_t)(FB_BS * zt < s->Tq ? FB_BS * zt : s->Tq), row_bytes = (size_t)s->H * F3_D * sizeof(float);
    if (zrows > 0)
        CUDA_TRY(cudaMemset2DAsync(dq, (size_t)s->Tq * row_bytes, 0, zrows * row_bytes, (size_t)s->B, c.st));
    return FORGE_OK;
}

extern "C" forge_status lab_flash16_backward_fused128(const forge_flash_shape *s, const void *q, const void *k,
                                                      const void *v, const void *out_bf16, const void *dout_bf16,
                                                      const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                      void *stream) {
    return lab_flash16_backward_fused128_order(s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv,
                                               LAB_FLASH16_FUSED128_BY_RULE, LAB_FLASH16_FUSED128_WAIT_DKDV, stream);
}
