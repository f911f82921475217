/*
 * flash_attention_bf16_wgmma_bwd_fused.cu: the fused Hopper (sm_90a) backward forge runs at D = 128
 * (fb_launch_fused, called by the entries in flash_attention_bf16_wgmma_bwd.cu, whose header explains the
 * kernels it builds on; measurements in lab/notes/flash.md). One kernel per 128-key block computes dK and dV and
 * adds the block's share of dQ from a single S^T / dP^T recomputation per (key block, query tile): 5 matmul
 * passes of T^2 D / 2 instead of the 7 of the dQ + dK/dV kernels forge runs at D = 64. Deterministic, with no
 * unordered reduction: the contributions to a dQ tile are added in one key-block order by an ordered hand-off.
 *
 * Design:
 * - Grid (key blocks, Hkv, B), 384 threads: fb_dkdv_kernel<128, 0>'s CTA. Warpgroup 0: thread 0 is
 *   fb_kv_produce (K, V resident; Q, dO and the row statistics through a ring of 3 stages), threads 32 and 64
 *   the dQ writers (below). Consumer warpgroup c owns keys 64c..64c+63 of the block and per (query head, query
 *   tile) iteration runs fb_dkdv_kernel's tile: S^T, dP^T, P^T, dS^T, then dV += P^T.dO and dK += dS^T.Q,
 *   waited. So dk and dv are bitwise the dK/dV kernel's.
 * - dQ: both consumers store their dS^T (bf16) into one 128-key buffer (ff_store_ds: dS as an MN-major A
 *   operand), and consumer c computes dQ[:, 64c .. 64c + 63] (64 queries x 64 columns, 32 fp32 registers) =
 *   dS (64 x 128 keys) . K[:, 64c ..] (the resident K box c read MN-major), 8 k16 steps, after dV and dK are
 *   waited: S^T and dP^T are dead by then, so the peak stays the dK/dV kernel's. Two dS buffers (full: 8 warps
 *   after their fence.proxy.async; empty: 8 warps after their dQ product).
 * - The dQ tile times scale leaves through shared memory: consumer c writes its 16 KiB staging tile
 *   (ff_store_dq) and arrives on stgfull[c] (4 warps); writer c waits for the tile's turn, then for the staging
 *   tile, issues its two boxes as a TMA store (the tile's first contribution) or fp32 reduce-add
 *   (cp.reduce.async.bulk.tensor) into the fp32 dq, releases the staging tile (stgempty[c]) once the bulk group
 *   has read it, and passes the turn on once the group is complete. With bf16 gradients the fp32 dq is the
 *   scratch's accumulator and ff_dq_bf16 stores it as fb_grad_store2 does (rn(0 + d) or rn(old + d)).
 * - The turn: one counter per (b, h, query tile, column half), zeroed before the launch. A tile is visited by key
 *   blocks first = min(nkb - 1, (last row + diag) / 128) down to 0; block kb adds when its half's counter reads
 *   first - kb, then adds 1 (ld.acquire.gpu spin; after the group's completion fence.proxy.async.global and
 *   red.release.gpu). So dq = ((c_first + c_first-1) + ...) + c_0 in one order on every run. Block kb + 1
 *   reaches a tile two iterations before block kb (its first tile is two later), so the turn is normally there.
 * - Progress: a block waits only for higher blocks of its (kv head, batch). blockIdx.x maps to kb ascending
 *   (the longest causal blocks start first) when the key blocks fit on the SMs at once, else descending (desc),
 *   so a block never waits for one that has not started, given that blocks start in blockIdx order
 *   (FlashAttention-3's deterministic mode assumes the same). Ascending is safe when they fit: the blocks of
 *   earlier (hk, b) have all started and finish on their own.
 * - Rows of query tiles that see no key (Tq > Tk) get no contribution: zeroed by the host (fp32) or stored as
 *   d = 0 by ff_dq_bf16.
 * - Shared memory (bytes): K, V 2 x 32 Ki; ring 3 x 32 Ki; dS 2 x 16 Ki; staging 2 x 16 Ki; slots 3 x 512;
 *   15 mbarriers; 1 KiB alignment slack: 232,056 of 232,448. Registers: 40 for the producer warpgroup (the
 *   writers' loop), 232 for the consumers.
 */
#include <math.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "flash_attention_bf16_wgmma_bwd.cuh"
#include "wgmma_tmap.h"

extern "C" {
#include "flash_attention_bf16.h"
}

namespace {

constexpr int FF_D = 128;
constexpr int FF_STAGES = 3;
typedef fb_cfg<FF_D> ff_cfg;
constexpr uint32_t FF_DS = FB_BR * FB_BS * 2;  /* dS^T: 128 keys x 64 queries, bf16 */
constexpr uint32_t FF_STG = FB_BS * 64 * 4;    /* a consumer's fp32 dQ tile: 64 queries x 64 columns */
constexpr int FF_NBARS = 1 + 2 * FF_STAGES + 4 + 4; /* resbar, full, empty, dsfull[2], dsempty[2], stgfull[2], stgempty[2] */
constexpr size_t FF_SMEM = 2 * (size_t)ff_cfg::RES_BYTES + FF_STAGES * (size_t)ff_cfg::STAGE_BYTES +
                           2 * (size_t)FF_DS + 2 * (size_t)FF_STG + FF_STAGES * (size_t)ff_cfg::LD_BYTES +
                           8 * FF_NBARS + 1024;
static_assert(FF_SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");
/* the writer's loop (turn arithmetic, the counter's address, four bulk operations) needs more than forge's 24 */
constexpr int FF_PRODUCER_REGS = 40;
constexpr int FF_CONSUMER_REGS = 232;
static_assert(128 * (FF_PRODUCER_REGS + 2 * FF_CONSUMER_REGS) <= 65536, "the register file");

/* Offsets from the 1 KiB-aligned base; resbar, then full[st] and empty[st] as fb_kv_produce expects them. */
struct ff_smem {
    uint32_t base;
    __device__ uint32_t k() const { return base; }
    __device__ uint32_t v() const { return base + ff_cfg::RES_BYTES; }
    __device__ uint32_t ring() const { return base + 2 * ff_cfg::RES_BYTES; }
    __device__ uint32_t ds(int i) const { return ring() + FF_STAGES * ff_cfg::STAGE_BYTES + i * FF_DS; }
    __device__ uint32_t stg(int c) const { return ds(2) + c * FF_STG; }
    __device__ uint32_t ld() const { return stg(2); }
    __device__ uint32_t resbar() const { return ld() + FF_STAGES * ff_cfg::LD_BYTES; }
    __device__ uint32_t bars() const { return resbar() + 8; }
    __device__ uint32_t full(int st) const { return bars() + 8 * st; }
    __device__ uint32_t empty(int st) const { return bars() + 8 * (FF_STAGES + st); }
    __device__ uint32_t dsfull(int i) const { return bars() + 16 * FF_STAGES + 8 * i; }
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

/* The dQ writer of consumer c's column half (warpgroup 0, thread 32 + 32c): per iteration of the block, the
 * staged tile into dq in the tile's turn for that half (see the header). The turn is waited first: it is usually
 * there before the tile is staged. */
__device__ __forceinline__ void ff_dq_write(const fb_kv_block &kb, const forge_flash_shape &s, int c,
                                            const CUtensorMap *tm_dq, uint32_t *__restrict__ turns,
                                            const ff_smem &sm) {
    const int ntq = (s.Tq + FB_BS - 1) / FB_BS, nkb = (s.Tk + FB_BR - 1) / FB_BR, kbi = kb.k0 / FB_BR;
    for (int it = 0; it < kb.total; it++) {
        const int h = kb.hk * kb.G + it / kb.nq, qt = kb.t_first + it % kb.nq, qt0 = qt * FB_BS;
        const int last = ff_tile_last(s, qt); /* >= kb.k0: the block sees this tile */
        const uint32_t turn = (uint32_t)(min(nkb - 1, last / FB_BR) - kbi);
        uint32_t *ctr = turns + (((size_t)kb.b * s.H + h) * ntq + qt) * 2 + c;
        ff_turn_wait(ctr, turn);
        asm volatile("fence.proxy.async.global;" ::: "memory"); /* the earlier blocks' adds before ours */
        mbar_wait_wide(sm.stgfull(c), (uint32_t)it & 1u);
#pragma unroll
        for (int j = 0; j < 2; j++)
            ff_tile_out(tm_dq, h * FF_D + 64 * c + 32 * j, qt0, kb.b, sm.stg(c) + j * (FF_STG / 2), turn != 0);
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
__device__ __forceinline__ void ff_dq_out(const ff_smem &sm, int c, int it, float (&dqa)[32], int warp, int lane,
                                          int g, int tq, float scale) {
    if (lane == 0) mbar_arrive(sm.dsempty(it & 1));
#pragma unroll
    for (int i = 0; i < 32; i++) dqa[i] *= scale;
    mbar_wait_wide(sm.stgempty(c), ((uint32_t)it & 1u) ^ 1u);
    ff_store_dq(sm.stg(c), warp, g, tq, dqa);
    ff_fence_proxy_async(); /* the staging stores, visible to the TMA (async proxy) */
    __syncwarp();
    if (lane == 0) mbar_arrive(sm.stgfull(c));
}

/* Consumer c's dQ[:, 64c ..] of iteration it's tile = dS . K over the 128 keys (kbox: K's columns 64c..), once both
 * halves of the tile's dS are stored; waited, then ff_dq_out. */
__device__ __forceinline__ void ff_dq_tile(const ff_smem &sm, int c, int it, uint32_t kbox, int warp, int lane, int g,
                                           int tq, float scale) {
    mbar_wait_wide(sm.dsfull(it & 1), (uint32_t)(it >> 1) & 1u);
    float dqa[32];
    wgmma_fence();
    ff_dq_product(dqa, sm.ds(it & 1), fb_opaque(kbox));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(dqa);
    __syncwarp();
    ff_dq_out(sm, c, it, dqa, warp, lane, g, tq, scale);
}

/* The consumer thread's keys key_lo, key_lo + 8 (warpgroup's first key wk0), rebuilt where they are used from an
 * opaque copy of the thread index: held across the tile loop, ptxas spilled it. */
__device__ __forceinline__ int ff_key_lo(int wk0) {
    const int t = (int)(fb_opaque(threadIdx.x) % 128u); /* the thread's index in its warpgroup */
    return wk0 + t / 32 * 16 + t % 32 / 4;
}

__global__ void __launch_bounds__(FB_THREADS, 1)
    ff_bwd_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                  const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                  const __grid_constant__ CUtensorMap tm_dq, const float *__restrict__ rows,
                  uint32_t *__restrict__ turns, const fb_grads grads, forge_flash_shape s, float sl2, float scale,
                  int desc) {
    extern __shared__ __align__(1024) unsigned char ff_smem_raw[];
    ff_smem sm;
    sm.base = (smem_u32(ff_smem_raw) + 1023u) & ~1023u;
    const float *ld_gen = (const float *)(ff_smem_raw + (sm.ld() - smem_u32(ff_smem_raw)));
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
        fb_barriers_init(sm.resbar(), FF_STAGES); /* and the init fences */
    }
    __syncthreads();
    forge_pdl_wait(); /* shared memory only above; global memory from here (pdl.cuh) */
    forge_pdl_launch_dependents();

    if (wg == 0) {
        wgmma_setmaxnreg_dec<FF_PRODUCER_REGS>();
        if (threadIdx.x == 0)
            fb_kv_produce<FF_D, FB_BR, FF_STAGES>(kb, s, &tm_k, &tm_v, &tm_q, &tm_do, rows, sm.k(), sm.v(),
                                                  sm.ring(), sm.ld(), sm.resbar(), sm.bars());
        else if (threadIdx.x == 32 || threadIdx.x == 64)
            ff_dq_write(kb, s, threadIdx.x / 32 - 1, &tm_dq, turns, sm);
        return;
    }

    wgmma_setmaxnreg_inc<FF_CONSUMER_REGS>();
    const int c = wg - 1;
    const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int wk0 = kb.k0 + c * 64; /* this warpgroup's first key */
    const int diag = kb.diag;

    float adk[FF_D / 2], adv[FF_D / 2];
#pragma unroll
    for (int i = 0; i < FF_D / 2; i++) adk[i] = adv[i] = 0.0f;

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
        const uint32_t qtl = sm.ring() + stage * ff_cfg::STAGE_BYTES, dtl = qtl + ff_cfg::TILE_BYTES;
        /* the warpgroup's first key is seen by queries >= wk0 - diag; keys past Tk are never stored */
        const bool vis = wk0 <= qt0 + FB_BS - 1 + diag && wk0 < s.Tk;
        uint32_t pa[4][4], sa[4][4];
        if (vis) {
            const float *ls = ld_gen + stage * (2 * FB_BS);
            float st[32], dpt[32];
            fb_dkdv_tile_ps<FF_D>(st, dpt, ka, va, qtl, dtl, ls, tq, sl2,
                                  fb_pt_bounds_of(wk0, ff_key_lo(wk0), qt0, diag, s.Tq));
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
        ff_store_ds(sm.ds(db), c * 64 + warp * 16, g, tq, sa);
        ff_fence_proxy_async();
        __syncwarp();
        if (lane == 0) mbar_arrive(sm.dsfull(db));

        /* dV += P^T.dO and dK += dS^T.Q, waited; then this tile's dQ product */
        if (vis) fb_dkdv_accumulate<FF_D>(adv, adk, pa, sa, dtl, qtl);
        ff_dq_tile(sm, c, it, kbox, warp, lane, g, tq, scale);
        __syncwarp();
        if (lane == 0) mbar_arrive(sm.empty(stage)); /* the Q / dO tiles are read */
        if (++stage == FF_STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }
    fb_dkdv_store<FF_D>(grads, adk, adv, s, kb.b, kb.hk, ff_key_lo(wk0), tq, scale);
}

/* Whether any row of query tile qt sees a key: the tiles that do not (Tq > Tk) are the first ones, and no key block
 * adds to them. */
__host__ __device__ __forceinline__ int ff_tile_seen(const forge_flash_shape &s, int qt) {
    return ff_tile_last(s, qt) >= 0;
}

/* bf16 gradients: dq at g.dq (bf16 rows at g.dq_stride) from the fp32 accumulator dq32 (B, Tq, H, 128), a pair of
 * columns a thread, stored as fb_grad_store2 stores (rn(0 + d) or rn(old + d)), d = 0 in unseen tiles. */
__global__ void ff_dq_bf16(const float *__restrict__ dq32, const fb_grads g, forge_flash_shape s, size_t n2) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n2; i += (size_t)gridDim.x * blockDim.x) {
        const size_t e = 2 * i;
        const int col = (int)(e % FF_D), h = (int)(e / FF_D % (size_t)s.H);
        const size_t token = e / ((size_t)FF_D * s.H);
        const int row = (int)(token % (size_t)s.Tq);
        float2 d = make_float2(0.0f, 0.0f);
        if (ff_tile_seen(s, row / FB_BS)) d = *(const float2 *)(dq32 + e);
        fb_grad_store2(g, g.dq, g.dq_stride, token, s.H, h, FF_D, col, d.x, d.y);
    }
}

} // namespace

forge_status fb_launch_fused(const fb_call &c, float *scratch, int order, const char *entry) {
    const forge_flash_shape &s = c.s;
    if (s.D != FF_D)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: the fused backward is compiled for D = 128, got D=%d", entry,
                           s.D);
    uint32_t *turns = (uint32_t *)(scratch + FORGE_FLASH_BF16_ROWSTATS(s.B, s.H, s.Tq));
    float *dq32 = c.g.bf16 ? scratch + FORGE_FLASH_BF16_ROWSTATS(s.B, s.H, s.Tq) + FORGE_FLASH_BF16_TURNS(s.B, s.H, s.Tq)
                           : (float *)c.g.dq;
    /* dq32 (B, Tq, H * 128 fp32 dense: dims H * 128, Tq, B) in the 32-column x 64-row x 1 boxes ff_dq_write adds */
    gemm_encode_tiled_fn encode = nullptr;
    FORGE_TRY(gemm_get_encoder(&encode));
    const cuuint64_t row = (cuuint64_t)s.H * FF_D * 4;
    const cuuint64_t dims[3] = {(cuuint64_t)s.H * FF_D, (cuuint64_t)s.Tq, (cuuint64_t)s.B};
    const cuuint64_t strides[2] = {row, row * (cuuint64_t)s.Tq};
    const cuuint32_t box[3] = {32, FB_BS, 1};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    CUtensorMap tm_dq;
    const CUresult r = encode(&tm_dq, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, dq32, dims, strides, box, elem_strides,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: cuTensorMapEncodeTiled for the fp32 dq (B=%d x Tq=%d rows of %d columns, box 32 x 64, "
                           "128B swizzle) failed with CUresult %d",
                           entry, s.B, s.Tq, s.H * FF_D, (int)r);
    const int ntq = (s.Tq + FB_BS - 1) / FB_BS, nkb = (s.Tk + FB_BR - 1) / FB_BR;
    int desc = order == FB_FUSED_DESC;
    if (order == FB_FUSED_BY_RULE) {
        int dev = 0, sms = 0;
        CUDA_TRY(cudaGetDevice(&dev));
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        desc = nkb > sms; /* one CTA per SM (shared memory) */
    }
    CUDA_TRY(cudaMemsetAsync(turns, 0, (size_t)s.B * s.H * ntq * 2 * sizeof(uint32_t), c.st));
    CUDA_TRY(cudaFuncSetAttribute(ff_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)FF_SMEM));
    const dim3 grid((unsigned)nkb, (unsigned)s.Hkv, (unsigned)s.B);
    CUDA_LAUNCH_TRY(forge_pdl_launch(ff_bwd_kernel, grid, FB_THREADS, FF_SMEM, c.st, c.pdl, c.k_res, c.v_res, c.q_str,
                                     c.do_str, tm_dq, c.rows, turns, c.g, c.s, c.sl2, c.scale, desc),
                    "ff_bwd_kernel");
    if (c.g.bf16) {
        const size_t n2 = (size_t)s.B * s.Tq * s.H * FF_D / 2, blocks = (n2 + 255) / 256;
        CUDA_LAUNCH_TRY(forge_pdl_launch(ff_dq_bf16, dim3((unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16)),
                                         256, 0, c.st, c.pdl, (const float *)dq32, c.g, c.s, n2),
                        "ff_dq_bf16");
        return FORGE_OK;
    }
    int unseen = 0;
    while (unseen < ntq && !ff_tile_seen(s, unseen)) unseen++;
    const size_t zrows = (size_t)(FB_BS * unseen < s.Tq ? FB_BS * unseen : s.Tq), rb = (size_t)row;
    if (zrows > 0) CUDA_TRY(cudaMemset2DAsync(dq32, (size_t)s.Tq * rb, 0, zrows * rb, (size_t)s.B, c.st));
    return FORGE_OK;
}
