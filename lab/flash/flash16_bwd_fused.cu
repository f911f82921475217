/*
 * flash16_bwd_fused.cu: a fused Hopper (sm_90a) backward of forge's bf16
 * flash attention at D = 64: one kernel computes dK, dV and dQ from a single
 * S^T / dP^T recomputation per (key block, query tile), instead of forge's
 * separate dQ and dK/dV kernels, which both recompute S and dP (7 matmul
 * passes of T^2 D / 2 instead of 5). Same entry contract and results as
 * forge_flash_bf16_backward_wgmma (flash_attention_bf16.h) up to summation
 * order; deterministic (no atomics). Kernels, fragment layouts, masks and
 * the producer's lse/delta slots follow src/backend/cuda/
 * flash_attention_bf16_wgmma_bwd.cu (whose header explains them) and its
 * kit flash_attention_bf16_wgmma_bwd.cuh. Entries: flash16_variants.h.
 *
 * Design:
 * - Grid (S, Hkv, B): CTA (s, hk, b) owns the key blocks kb = s, s + S,
 *   s + 2S, ... (128 keys each) of kv head hk. 3 warpgroups: producer (TMA),
 *   two consumers of 64 keys each, exactly as fb_dkdv_kernel<64>. Per key
 *   block it walks the (query head of the group, query tile) iterations of
 *   fb_kv_block (causal: query tiles from the block's diagonal on), and per
 *   iteration each consumer does fb_dkdv_kernel<64>'s work on its 64 keys
 *   (S^T = K.Q^T, dP^T = V.dO^T, P^T, dS^T, dV += P^T.dO, dK += dS^T.Q).
 * - dQ_tile (64 queries x 64) += dS (64 queries x 128 keys) . K (128 x 64):
 *   both consumers store their dS^T (bf16, 64 keys x 64 queries each) into
 *   one 128-row buffer in shared memory in the 128B-swizzled layout TMA
 *   writes (rows = keys, 128 B of queries per row), which is dS as the
 *   MN-major A operand (imm-trans-a); K is the resident 128-row box read
 *   MN-major (imm-trans-b), as fb_dq_kernel reads its streamed K. ONE
 *   warpgroup issues all 8 k16 steps (m64n64k16, 128 keys) in a fixed order,
 *   so the two consumers' halves are summed in a fixed order by the tensor
 *   core: the issuer is consumer (query tile & 1), which spreads the dQ work
 *   over both and makes the same thread own a given dQ element on every key
 *   block of the CTA (its read-modify-write sees its own earlier store in
 *   program order, no cross-thread ordering needed). Two dS buffers
 *   (iteration n uses n & 1) with full (8 warps) / empty (the issuer's 4
 *   warps) mbarriers; writers fence.proxy.async before arriving, so the
 *   wgmma (async proxy) sees the generic stores.
 * - dQ partials: split s accumulates into dq_part[s] (B, Tq, H, 64) fp32,
 *   dq_part[0] = dq itself and dq_part[1..S-1] the workspace
 *   ((S - 1) * B * Tq * H * 64 * 4 bytes). The first key block of a CTA
 *   (kb = s) sees every query tile any later block of the CTA sees (the
 *   first visible tile only grows with kb), so it stores and later blocks
 *   add (plain load / add / store by the one owning thread). Rows are
 *   disjoint between CTAs of one split (a CTA owns its kv head's G query
 *   heads), so no two CTAs touch one element of one partial.
 * - fz_dq_reduce then writes dq = (dq_part[0] + dq_part[1] + ... ) * scale
 *   over the splits that wrote the row's query tile (split s wrote tile qt
 *   iff its first block kb = s visits qt: 128 s <= min(qt0 + 63, Tq - 1) +
 *   Tk - Tq), in that order; rows no split wrote get 0.
 * - dS is kept unscaled (P (dP - delta)); dK and dQ are multiplied by scale
 *   at their stores, like forge's kernels.
 * - S: B * Hkv * S CTAs should fill the SMs twice over (one CTA per SM by
 *   shared memory): S = clamp(ceil(2 * SMs / (B * Hkv)), 1, key blocks). The
 *   causal work of a key block shrinks with kb, and the interleaved kb = s
 *   mod S assignment spreads it evenly over the splits.
 * - Shared memory: K and V resident boxes, double-buffered so the next key
 *   block's K/V load under the current block's tail (2 x 2 x 16 KiB); the
 *   ring of STAGES Q + dO tiles (16 KiB each); two dS^T buffers (16 KiB
 *   each); the lse*log2e / delta slots (512 B per stage); mbarriers.
 * - wgmma discipline of forge's kernels: every code path that issues wgmma
 *   waits for it before any branch, nothing written to a register an
 *   in-flight wgmma reads; the issuer / visibility cases are separate paths
 *   each with its own issue and wait.
 * - fz_bwd2_kernel (entries lab_flash16_backward_fused2*): the same kernel
 *   with the dQ tile sent to its partial by a TMA store / fp32 bulk
 *   reduce-add from a shared-memory staging buffer instead of the owning
 *   thread's load / add / store; its notes are above the kernel.
 */
#include <math.h>
#include <stdint.h>

#include "../../src/backend/cuda/flash_attention_bf16_wgmma_bwd.cuh"
#include "../../src/backend/cuda/wgmma_tmap.h"

#include "flash16_variants.h"

#define LAB_FZ_ENTRY "lab_flash16_backward_fused"   /* named in errors */
#define LAB_FZ2_ENTRY "lab_flash16_backward_fused2" /* the TMA reduce-add variant (fz_bwd2_kernel) */

namespace {

constexpr int FZ_D = 64;
constexpr int FZ_STAGES = 4;
constexpr uint32_t FZ_RES = FB_BR * FZ_D * 2;       /* one resident 128-row tensor (K or V) */
constexpr uint32_t FZ_TILE = FB_BS * FZ_D * 2;      /* one streamed 64-row tensor (Q or dO) */
constexpr uint32_t FZ_STAGE = 2 * FZ_TILE;          /* Q + dO */
constexpr uint32_t FZ_DS = FB_BR * FB_BS * 2;       /* dS^T: 128 keys x 64 queries bf16 */
constexpr uint32_t FZ_LD = 2 * FB_BS * 4;           /* lse*log2e [64], delta [64] */
constexpr int FZ_NBARS = 4 + 2 * FZ_STAGES + 4;     /* resfull[2], resempty[2], ring, dsfull[2], dsempty[2] */
constexpr size_t FZ_SMEM = 4 * (size_t)FZ_RES + FZ_STAGES * (size_t)FZ_STAGE + 2 * (size_t)FZ_DS +
                           FZ_STAGES * (size_t)FZ_LD + 8 * FZ_NBARS + 1024; /* + slack to align to 1 KiB */
/* The producer walks several key blocks (split, block and ring state, four tensor maps): with forge's 24
 * registers ptxas spilled it; 40 + 2 x 232 per thread x 128 still fits the 64 K registers of the SM. */
constexpr int FZ_PRODUCER_REGS = 40;
constexpr int FZ_CONSUMER_REGS = 232;
static_assert(128 * (FZ_PRODUCER_REGS + 2 * FZ_CONSUMER_REGS) <= 65536, "the register file");
static_assert(FZ_SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");

/* Offsets from the 1 KiB-aligned base (every tensor region a multiple of 1 KiB: the swizzle atom). */
struct fz_smem {
    uint32_t base;
    __device__ uint32_t k(int i) const { return base + i * FZ_RES; }
    __device__ uint32_t v(int i) const { return base + (2 + i) * FZ_RES; }
    __device__ uint32_t ring() const { return base + 4 * FZ_RES; }
    __device__ uint32_t ds(int i) const { return ring() + FZ_STAGES * FZ_STAGE + i * FZ_DS; }
    __device__ uint32_t ld() const { return ds(2); }
    __device__ uint32_t bars() const { return ld() + FZ_STAGES * FZ_LD; }
    __device__ uint32_t resfull(int i) const { return bars() + 8 * i; }
    __device__ uint32_t resempty(int i) const { return bars() + 16 + 8 * i; }
    __device__ uint32_t full(int st) const { return bars() + 32 + 8 * st; }
    __device__ uint32_t empty(int st) const { return bars() + 32 + 8 * (FZ_STAGES + st); }
    __device__ uint32_t dsfull(int i) const { return bars() + 32 + 16 * FZ_STAGES + 8 * i; }
    __device__ uint32_t dsempty(int i) const { return bars() + 48 + 16 * FZ_STAGES + 8 * i; }
};

/* The producer warpgroup: warp 0 lane 0 loads each key block's K and V (128-row boxes) into resident buffer
 * r & 1 (r: the CTA's r-th key block with work) once the consumers released it, then the block's Q and dO tiles
 * into the ring; warp 1 fills the stage's lse*log2e / delta slot from the packed row statistics (fb_rows_at)
 * with plain stores (32 lane arrivals + the TMA thread's expect_tx on full). Both walk the same (key block, iteration) sequence as the consumers. */
__device__ __forceinline__ void fz_produce(const forge_flash_shape &s, int split, int nsplit, int hk, int b,
                                           const CUtensorMap *tm_k, const CUtensorMap *tm_v, const CUtensorMap *tm_q,
                                           const CUtensorMap *tm_do, const float *__restrict__ rows,
                                           const fz_smem &sm, float *ld_gen) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int nkb = (s.Tk + FB_BR - 1) / FB_BR;
    if (warp != 0 && warp != 1) return;
    if (warp == 0 && lane != 0) return;
    int stage = 0, r = 0;
    uint32_t phase = 0;
    for (int kbi = split; kbi < nkb; kbi += nsplit) {
        const fb_kv_block kb = fb_kv_block_at(s, kbi * FB_BR, hk, b);
        if (kb.total == 0) continue;
        if (warp == 0) {
            const int rb = r & 1;
            mbar_wait(sm.resempty(rb), ((r >> 1) & 1) ^ 1);
            mbar_arrive_expect_tx(sm.resfull(rb), 2 * FZ_RES);
            fw_tma_load_3d(sm.k(rb), tm_k, hk * FZ_D, kb.k0, b, sm.resfull(rb));
            fw_tma_load_3d(sm.v(rb), tm_v, hk * FZ_D, kb.k0, b, sm.resfull(rb));
        }
        r++;
        for (int it = 0; it < kb.total; it++) {
            const int h = hk * kb.G + it / kb.nq, qt0 = (kb.t_first + it % kb.nq) * FB_BS;
            mbar_wait(sm.empty(stage), phase ^ 1);
            if (warp == 0) {
                mbar_arrive_expect_tx(sm.full(stage), FZ_STAGE);
                const uint32_t dst = sm.ring() + stage * FZ_STAGE;
                fw_tma_load_3d(dst, tm_q, h * FZ_D, qt0, b, sm.full(stage));
                fw_tma_load_3d(dst + FZ_TILE, tm_do, h * FZ_D, qt0, b, sm.full(stage));
            } else {
                float *slot = ld_gen + stage * (2 * FB_BS);
                const size_t at = fb_rows_at(s, b, h, qt0), plane = fb_rows_plane(s);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const int rr = lane + 32 * i;
                    slot[rr] = rows[at + rr];
                    slot[FB_BS + rr] = rows[plane + at + rr];
                }
                mbar_arrive(sm.full(stage));
            }
            if (++stage == FZ_STAGES) {
                stage = 0;
                phase ^= 1;
            }
        }
    }
}

/* The fused kernel (see the header). dq_ws: dq_part[1..S-1], each B * Tq * H * 64 floats. */
__global__ void __launch_bounds__(FB_THREADS, 1)
    fz_bwd_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                  const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                  const float *__restrict__ rows, float *__restrict__ dq,
                  float *__restrict__ dq_ws, const fb_grads grads, forge_flash_shape s,
                  float sl2, float scale) {
    extern __shared__ __align__(1024) unsigned char fz_smem_raw[];
    fz_smem sm;
    sm.base = (smem_u32(fz_smem_raw) + 1023u) & ~1023u;
    float *ld_gen = (float *)(fz_smem_raw + (sm.ld() - smem_u32(fz_smem_raw)));
    const int split = blockIdx.x, nsplit = gridDim.x, hk = blockIdx.y, b = blockIdx.z;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int i = 0; i < 2; i++) {
            mbar_init(sm.resfull(i), 1);
            mbar_init(sm.resempty(i), FB_CONSUMER_WARPS);
            mbar_init(sm.dsfull(i), FB_CONSUMER_WARPS);
            mbar_init(sm.dsempty(i), FB_CONSUMER_WARPS / 2); /* the issuing warpgroup's 4 warps */
        }
        for (int st = 0; st < FZ_STAGES; st++) {
            mbar_init(sm.full(st), 1 + 32);
            mbar_init(sm.empty(st), FB_CONSUMER_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        wgmma_setmaxnreg_dec<FZ_PRODUCER_REGS>();
        fz_produce(s, split, nsplit, hk, b, &tm_k, &tm_v, &tm_q, &tm_do, rows, sm, ld_gen);
        return;
    }

    wgmma_setmaxnreg_inc<FZ_CONSUMER_REGS>();
    const int c = wg - 1;
    const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int nkb = (s.Tk + FB_BR - 1) / FB_BR;
    float *dqp = split == 0 ? dq : dq_ws + (size_t)(split - 1) * ((size_t)s.B * s.Tq * s.H * FZ_D);
    int stage = 0, r = 0, n = 0; /* ring position, resident buffer uses, dS buffer uses */
    uint32_t phase = 0;

    for (int kbi = split, j = 0; kbi < nkb; kbi += nsplit, j++) {
        const fb_kv_block kb = fb_kv_block_at(s, kbi * FB_BR, hk, b);
        const int diag = kb.diag;
        const int wk0 = kb.k0 + c * 64;         /* this warpgroup's first key */
        const int key_lo = wk0 + warp * 16 + g; /* this thread's keys: key_lo, key_lo + 8 */
        float adk[FZ_D / 2], adv[FZ_D / 2];
#pragma unroll
        for (int i = 0; i < FZ_D / 2; i++) adk[i] = adv[i] = 0.0f;

        if (kb.total > 0) {
            const int rb = r & 1;
            mbar_wait(sm.resfull(rb), (r >> 1) & 1);
            r++;
            const uint32_t kres = sm.k(rb), ka = kres + c * 8192, va = sm.v(rb) + c * 8192;
            for (int it = 0; it < kb.total; it++) {
                const int h = kb.hk * kb.G + it / kb.nq, qt = kb.t_first + it % kb.nq, qt0 = qt * FB_BS;
                mbar_wait(sm.full(stage), phase);
                const uint32_t qtl = sm.ring() + stage * FZ_STAGE, dtl = qtl + FZ_TILE;
                const float *ls = ld_gen + stage * (2 * FB_BS);
                /* the warpgroup's first key is seen by queries >= wk0 - diag; keys past Tk are never stored */
                const bool vis = wk0 <= qt0 + FB_BS - 1 + diag && wk0 < s.Tk;
                uint32_t pa[4][4], sa[4][4];
                if (vis) {
                    float st[32], dpt[32];
                    fb_dkdv_tile_ps<FZ_D>(st, dpt, ka, va, qtl, dtl, ls, tq, sl2,
                                          fb_pt_bounds_of(wk0, key_lo, qt0, diag, s.Tq));
                    fw_to_a<64>(pa, st);
                    fw_to_a<64>(sa, dpt);
                } else { /* none of this warpgroup's keys is visible: its dS^T half is zero (pa is not read) */
#pragma unroll
                    for (int kk = 0; kk < 4; kk++)
#pragma unroll
                        for (int i = 0; i < 4; i++) sa[kk][i] = 0u;
                }

                /* dS^T into buffer n & 1 once the issuer of use n - 2 has read it */
                const int db = n & 1;
                const uint32_t du = (uint32_t)(n >> 1) & 1u;
                mbar_wait(sm.dsempty(db), du ^ 1);
                ff_store_ds(sm.ds(db), c * 64 + warp * 16, g, tq, sa);
                ff_fence_proxy_async();
                __syncwarp();
                if (lane == 0) mbar_arrive(sm.dsfull(db));

                const bool issuer = c == (qt & 1);
                float dqa[32];
                if (issuer) {
                    mbar_wait(sm.dsfull(db), du);
                    if (vis) fb_dkdv_accumulate<FZ_D>(adv, adk, pa, sa, dtl, qtl); /* first: pa, sa die before dqa */
                    wgmma_fence();
                    ff_dq_product(dqa, sm.ds(db), fb_opaque(kres)); /* dQ_tile = dS.K over the 128 keys */
                    wgmma_commit();
                    wgmma_wait<0>();
                    wgmma_fence_operands(dqa);
                } else if (vis) {
                    fb_dkdv_accumulate<FZ_D>(adv, adk, pa, sa, dtl, qtl);
                }
                __syncwarp();
                if (lane == 0) mbar_arrive(sm.empty(stage)); /* the Q / dO tiles are read */
                if (++stage == FZ_STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
                n++;

                if (issuer) {
                    if (lane == 0) mbar_arrive(sm.dsempty(db)); /* the dQ product has read the buffer */
                    /* dq_part: the first key block stores, later ones add (the same thread every time) */
#pragma unroll
                    for (int rr = 0; rr < 2; rr++) {
                        const int row = qt0 + warp * 16 + g + 8 * rr;
                        if (row >= s.Tq) continue;
                        float *dst = dqp + (((size_t)b * s.Tq + row) * s.H + h) * FZ_D + 2 * tq;
                        if (j == 0) {
#pragma unroll
                            for (int nn = 0; nn < FZ_D / 8; nn++)
                                *(float2 *)(dst + nn * 8) = make_float2(dqa[4 * nn + 2 * rr], dqa[4 * nn + 2 * rr + 1]);
                        } else {
                            float2 old[FZ_D / 8];
#pragma unroll
                            for (int nn = 0; nn < FZ_D / 8; nn++) old[nn] = *(const float2 *)(dst + nn * 8);
#pragma unroll
                            for (int nn = 0; nn < FZ_D / 8; nn++)
                                *(float2 *)(dst + nn * 8) = make_float2(old[nn].x + dqa[4 * nn + 2 * rr],
                                                                        old[nn].y + dqa[4 * nn + 2 * rr + 1]);
                        }
                    }
                }
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(sm.resempty(rb)); /* every wgmma reading K / V of this block is done */
        }

        fb_dkdv_store<FZ_D>(grads, adk, adv, s, b, hk, key_lo, tq, scale);
    }
}

/* dq = (dq_part[0] + dq_part[1] + ... + dq_part[ns - 1]) * scale, dq_part[0] = dq in place, ns the splits that
 * wrote the row's query tile (see the header); 4 floats a thread (H * 64 is a multiple of 4, so they share a
 * row). */
__global__ void fz_dq_reduce(float *__restrict__ dq, const float *__restrict__ ws, size_t n4, int Tq, int HD,
                             int diag, int nsplit, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const int row = (int)((i * 4 / (size_t)HD) % (size_t)Tq);
        const int qt0 = row / FB_BS * FB_BS;
        const int last = min(qt0 + FB_BS - 1, Tq - 1) + diag; /* the last key any row of the tile sees */
        const int ns = last < 0 ? 0 : min(nsplit, last / FB_BR + 1);
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (ns > 0) a = ((const float4 *)dq)[i];
        for (int sp = 1; sp < ns; sp++) {
            const float4 p = ((const float4 *)ws)[(size_t)(sp - 1) * n4 + i];
            a.x += p.x;
            a.y += p.y;
            a.z += p.z;
            a.w += p.w;
        }
        ((float4 *)dq)[i] = make_float4(a.x * scale, a.y * scale, a.z * scale, a.w * scale);
    }
}

int fz_key_blocks(const forge_flash_shape *s) { return (s->Tk + FB_BR - 1) / FB_BR; }

/* the split count of a call: `splits` if > 0 (capped at the key blocks), else the SM-filling rule */
forge_status fz_splits(const forge_flash_shape *s, int splits, int *out) {
    const int nkb = fz_key_blocks(s);
    if (splits <= 0) {
        int dev = 0, sms = 0;
        CUDA_TRY(cudaGetDevice(&dev));
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        const long long ctas = (long long)s->B * s->Hkv;
        splits = (int)((2LL * sms + ctas - 1) / ctas);
    }
    *out = splits < 1 ? 1 : splits > nkb ? nkb : splits;
    return FORGE_OK;
}

size_t fz_ws_bytes(const forge_flash_shape *s, int nsplit) {
    return (size_t)(nsplit - 1) * s->B * s->Tq * s->H * FZ_D * sizeof(float);
}

} // namespace

extern "C" size_t lab_flash16_backward_fused_ws_bytes(const forge_flash_shape *s, int splits) {
    if (s == NULL || s->B <= 0 || s->Tq <= 0 || s->Tk <= 0 || s->D != FZ_D) return 0;
    int ns = 1;
    if (fz_splits(s, splits, &ns) != FORGE_OK) return 0;
    return fz_ws_bytes(s, ns);
}

extern "C" forge_status lab_flash16_backward_fused_ws(const forge_flash_shape *s, const void *q, const void *k,
                                                      const void *v, const void *out_bf16, const void *dout_bf16,
                                                      const float *lse, float *delta, float *dq, float *dk,
                                                      float *dv, int splits, void *ws, size_t ws_bytes,
                                                      void *stream) {
    int launch = 0;
    FORGE_TRY(fb_backward_begin(LAB_FZ_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, &launch));
    if (!launch) return FORGE_OK;
    if (s->D != FZ_D)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: the fused backward is compiled for D = 64 only, got D=%d",
                           LAB_FZ_ENTRY, s->D);
    int nsplit = 1;
    FORGE_TRY(fz_splits(s, splits, &nsplit));
    const size_t need = fz_ws_bytes(s, nsplit);
    if (ws_bytes < need || (need > 0 && ws == NULL))
        return forge_error(FORGE_ERR_ARG, "%s: %d splits need a %zu-byte workspace, got %zu", LAB_FZ_ENTRY, nsplit,
                           need, ws_bytes);
    fb_call c;
    FORGE_TRY(
        fb_backward_prepare(&c, LAB_FZ_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream, 0));
    CUDA_TRY(cudaFuncSetAttribute(fz_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)FZ_SMEM));
    const dim3 grid((unsigned)nsplit, (unsigned)s->Hkv, (unsigned)s->B);
    fz_bwd_kernel<<<grid, FB_THREADS, FZ_SMEM, c.st>>>(c.k_res, c.v_res, c.q_str, c.do_str, c.rows,
                                                       (float *)c.g.dq, (float *)ws, c.g, c.s, c.sl2, c.scale);
    CUDA_LAUNCH_CHECK("fz_bwd_kernel");
    const size_t n4 = (size_t)s->B * s->Tq * s->H * FZ_D / 4;
    const size_t blocks = (n4 + 255) / 256;
    fz_dq_reduce<<<(unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16), 256, 0, c.st>>>(
        dq, (const float *)ws, n4, s->Tq, s->H * FZ_D, s->Tk - s->Tq, nsplit, c.scale);
    CUDA_LAUNCH_CHECK("fz_dq_reduce");
    return FORGE_OK;
}

/* The entry with forge's backward signature: the workspace is a grow-only buffer of this file, freed at exit by
 * the driver (not thread-safe; a lab entry for tests and benches). */
extern "C" forge_status lab_flash16_backward_fused(const forge_flash_shape *s, const void *q, const void *k,
                                                   const void *v, const void *out_bf16, const void *dout_bf16,
                                                   const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                   void *stream) {
    static void *ws = NULL;
    static size_t ws_cap = 0;
    const size_t need = lab_flash16_backward_fused_ws_bytes(s, 0);
    if (need > ws_cap) {
        if (ws) CUDA_TRY(cudaFree(ws));
        ws = NULL;
        ws_cap = 0;
        CUDA_TRY(cudaMalloc(&ws, need));
        ws_cap = need;
    }
    return lab_flash16_backward_fused_ws(s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, 0, ws, ws_cap,
                                         stream);
}

namespace {

/* ---- fused2: the dQ partial tile leaves through shared memory and a TMA bulk reduce-add ------------------------
 *
 * fz_bwd2_kernel is fz_bwd_kernel (same grid, producer, ring, dS buffers, issuer rule, products, dK / dV) except
 * for how the issuer's dQ tile (64 queries x 64, fp32, unscaled) reaches its split's partial. fz_bwd_kernel adds
 * it with a plain load / add / store by the owning thread, a dependent L2 round trip on the issuer's critical
 * path per (key block, query tile). Here:
 * - right after the dQ product's wait the issuing warpgroup writes the tile from its accumulator registers into
 *   its own staging buffer in shared memory (consumer c owns buffer c, 16 KiB: two 32-column boxes of 64 rows x
 *   128 B in the 128B-swizzled layout of the partial's tensor map), each thread fences the generic stores for the
 *   async proxy (fence.proxy.async), each warp's lane 0 arrives on the buffer's mbarrier (once the stage and dS
 *   buffer are released), and the warpgroup's thread 0 waits for the 4 warps and
 *   issues two TMA tensor operations (one per box) as one bulk group: on the CTA's first key block a store
 *   (cp.async.bulk.tensor), on later ones a reduce-add (cp.reduce.async.bulk.tensor ... .add: the partial is
 *   fp32, so the add is fp32). The tensor map clips rows past Tq (and never crosses a batch: boxes are 1 deep in
 *   the batch dimension), so a ragged last tile needs no mask. The warpgroup goes on to its next iteration; only
 *   thread 0 waits, and only for its own warps' stores.
 * - The staging buffer is reused at the consumer's next issue. The issuer alternates with the query tile's
 *   parity, so that is normally two iterations later (with G > 1 and an odd tile count the same consumer can
 *   issue twice in a row). Before the consumer's threads write it again, thread 0 waits until its bulk groups no
 *   longer read shared memory (cp.async.bulk.wait_group.read 0); it does that before it stores its dS^T and
 *   arrives on the dS "full" barrier, and every thread of the issuing warpgroup waits on that barrier before the
 *   dQ product, so the release / acquire of the mbarrier orders the wait before every thread's staging stores.
 *   Two buffers (one per consumer) is what the shared memory holds next to the K / V double buffer and the
 *   4-stage ring (fb_cfg's 227 KiB); a second buffer per consumer would not fit with 4 stages.
 * - Determinism: every element of a partial receives, per key block of the CTA, at most one operation (a key
 *   block visits each (query head, query tile) once), always from the same thread (thread 0 of consumer
 *   qt & 1). Bulk operations of one thread in flight together have no defined order between them, and the fp32
 *   adds do not commute bitwise, so before its first issue of a key block thread 0 waits for the full completion
 *   of all its earlier bulk groups (cp.async.bulk.wait_group 0: the writes performed, not just the source read)
 *   instead of .read. Hence block j's operation on a tile is complete before block j + 1's is issued, and the
 *   partial is ((store_0 + add_1) + add_2) + ... in key-block order on every run. The first block's stores are
 *   covered the same way (they complete before any add is issued). Thread 0 also waits for completion (wait_group
 *   0) before the CTA exits, so the shared-memory source outlives its reads and fz_dq_reduce, the next kernel on
 *   the stream, sees every partial.
 * - The partials must be 16-byte aligned (a TMA global address); their row pitch H * 64 * 4 bytes is a multiple
 *   of 16. fz_dq_reduce then sums and scales exactly as for fz_bwd_kernel.
 * - The staging stores: thread (warp w, g, tq) holds rows 16w + g (+8), columns 8nn + 2tq, +1; in box nn / 4 the
 *   pair is 16-byte chunk 2 (nn % 4) + tq / 2 of its row, bytes 8 (tq & 1).., swizzled to chunk ^ (row & 7) =
 *   chunk ^ g. Per 64-bit store a half-warp (g = 0..3) touches 4 rows x 2 chunks that the swizzle maps onto 4
 *   distinct chunk positions: a 2-way bank conflict (4 wavefronts a warp store instead of 2), 16 stores a tile.
 */

constexpr uint32_t FZ2_STG = FB_BS * FZ_D * 4; /* one fp32 dQ tile: two 32-column boxes of 64 rows x 128 B */
/* the staging buffers follow fz_smem's layout (its barriers end it), from the next 1 KiB boundary */
constexpr uint32_t FZ2_STG_OFF =
    (4 * FZ_RES + FZ_STAGES * FZ_STAGE + 2 * FZ_DS + FZ_STAGES * FZ_LD + 8 * FZ_NBARS + 1023u) & ~1023u;
constexpr size_t FZ2_SMEM = FZ2_STG_OFF + 2 * (size_t)FZ2_STG + 16 + 1024; /* + 2 mbarriers, + alignment slack */
static_assert(FZ2_SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");

struct fz2_smem : fz_smem {
    __device__ uint32_t stg(int c) const { return base + FZ2_STG_OFF + c * FZ2_STG; }
    __device__ uint32_t stgfull(int c) const { return stg(2) + 8 * c; } /* the staging tile is written */
};

/* The fused kernel with TMA dQ partials (see the notes above). tm_p0: split 0's partial (dq, batch dim B);
 * tm_pw: dq_part[1..S-1] in the workspace as one tensor of batch dim (S - 1) B (split s, batch b at
 * (s - 1) B + b; a copy of tm_p0 when S = 1, never used). */
__global__ void __launch_bounds__(FB_THREADS, 1)
    fz_bwd2_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                   const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                   const __grid_constant__ CUtensorMap tm_p0, const __grid_constant__ CUtensorMap tm_pw,
                   const float *__restrict__ rows, const fb_grads grads,
                   forge_flash_shape s, float sl2, float scale) {
    extern __shared__ __align__(1024) unsigned char fz_smem_raw[];
    fz2_smem sm;
    sm.base = (smem_u32(fz_smem_raw) + 1023u) & ~1023u;
    float *ld_gen = (float *)(fz_smem_raw + (sm.ld() - smem_u32(fz_smem_raw)));
    const int split = blockIdx.x, nsplit = gridDim.x, hk = blockIdx.y, b = blockIdx.z;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int i = 0; i < 2; i++) {
            mbar_init(sm.resfull(i), 1);
            mbar_init(sm.resempty(i), FB_CONSUMER_WARPS);
            mbar_init(sm.dsfull(i), FB_CONSUMER_WARPS);
            mbar_init(sm.dsempty(i), FB_CONSUMER_WARPS / 2); /* the issuing warpgroup's 4 warps */
            mbar_init(sm.stgfull(i), FB_CONSUMER_WARPS / 2); /* consumer i's 4 warps */
        }
        for (int st = 0; st < FZ_STAGES; st++) {
            mbar_init(sm.full(st), 1 + 32);
            mbar_init(sm.empty(st), FB_CONSUMER_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        wgmma_setmaxnreg_dec<FZ_PRODUCER_REGS>();
        fz_produce(s, split, nsplit, hk, b, &tm_k, &tm_v, &tm_q, &tm_do, rows, sm, ld_gen);
        return;
    }

    wgmma_setmaxnreg_inc<FZ_CONSUMER_REGS>();
    const int c = wg - 1;
    const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int nkb = (s.Tk + FB_BR - 1) / FB_BR;
    int stage = 0, r = 0, n = 0; /* ring position, resident buffer uses, dS buffer uses */
    int ni = 0;                  /* this consumer's issues so far: uses of its staging buffer */
    uint32_t phase = 0;

    for (int kbi = split, j = 0; kbi < nkb; kbi += nsplit, j++) {
        const fb_kv_block kb = fb_kv_block_at(s, kbi * FB_BR, hk, b);
        const int diag = kb.diag;
        const int wk0 = kb.k0 + c * 64;         /* this warpgroup's first key */
        const int key_lo = wk0 + warp * 16 + g; /* this thread's keys: key_lo, key_lo + 8 */
        float adk[FZ_D / 2], adv[FZ_D / 2];
#pragma unroll
        for (int i = 0; i < FZ_D / 2; i++) adk[i] = adv[i] = 0.0f;

        if (kb.total > 0) {
            const int rb = r & 1;
            mbar_wait(sm.resfull(rb), (r >> 1) & 1);
            r++;
            const uint32_t kres = sm.k(rb), ka = kres + c * 8192, va = sm.v(rb) + c * 8192;
            for (int it = 0; it < kb.total; it++) {
                const int h = kb.hk * kb.G + it / kb.nq, qt = kb.t_first + it % kb.nq, qt0 = qt * FB_BS;
                mbar_wait(sm.full(stage), phase);
                const uint32_t qtl = sm.ring() + stage * FZ_STAGE, dtl = qtl + FZ_TILE;
                const float *ls = ld_gen + stage * (2 * FB_BS);
                /* the warpgroup's first key is seen by queries >= wk0 - diag; keys past Tk are never stored */
                const bool vis = wk0 <= qt0 + FB_BS - 1 + diag && wk0 < s.Tk;
                uint32_t pa[4][4], sa[4][4];
                if (vis) {
                    float st[32], dpt[32];
                    fb_dkdv_tile_ps<FZ_D>(st, dpt, ka, va, qtl, dtl, ls, tq, sl2,
                                          fb_pt_bounds_of(wk0, key_lo, qt0, diag, s.Tq));
                    fw_to_a<64>(pa, st);
                    fw_to_a<64>(sa, dpt);
                } else { /* none of this warpgroup's keys is visible: its dS^T half is zero (pa is not read) */
#pragma unroll
                    for (int kk = 0; kk < 4; kk++)
#pragma unroll
                        for (int i = 0; i < 4; i++) sa[kk][i] = 0u;
                }

                const bool issuer = c == (qt & 1);
                /* the staging buffer free again; at the consumer's first issue of the key block (iteration 0 or 1:
                 * the issuer alternates with qt's parity) every earlier operation complete, for the fixed add
                 * order. Ordered before the other threads' staging stores by dsfull below. */
                if (issuer && tid == 0) {
                    if (it == ((kb.t_first ^ c) & 1))
                        tma_store_wait_all();
                    else
                        tma_store_wait_read<0>();
                }

                /* dS^T into buffer n & 1 once the issuer of use n - 2 has read it */
                const int db = n & 1;
                const uint32_t du = (uint32_t)(n >> 1) & 1u;
                mbar_wait(sm.dsempty(db), du ^ 1);
                ff_store_ds(sm.ds(db), c * 64 + warp * 16, g, tq, sa);
                ff_fence_proxy_async();
                __syncwarp();
                if (lane == 0) mbar_arrive(sm.dsfull(db));

                float dqa[32];
                if (issuer) {
                    mbar_wait(sm.dsfull(db), du);
                    if (vis) fb_dkdv_accumulate<FZ_D>(adv, adk, pa, sa, dtl, qtl); /* first: pa, sa die before dqa */
                    wgmma_fence();
                    ff_dq_product(dqa, sm.ds(db), fb_opaque(kres)); /* dQ_tile = dS.K over the 128 keys */
                    wgmma_commit();
                    wgmma_wait<0>();
                    wgmma_fence_operands(dqa);
                    /* into the staging buffer at once: with the stores after the stage / dS releases below, dqa
                     * stayed live across them and ptxas spilled ~560 B and serialised the wgmmas (C7512) */
                    ff_store_dq(sm.stg(c), warp, g, tq, dqa);
                } else if (vis) {
                    fb_dkdv_accumulate<FZ_D>(adv, adk, pa, sa, dtl, qtl);
                }
                __syncwarp();
                if (lane == 0) mbar_arrive(sm.empty(stage)); /* the Q / dO tiles are read */
                if (++stage == FZ_STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
                n++;

                if (issuer) {
                    if (lane == 0) mbar_arrive(sm.dsempty(db)); /* the dQ product has read the buffer */
                    const uint32_t stg = sm.stg(c);
                    ff_fence_proxy_async(); /* the staging stores, visible to the TMA (async proxy) */
                    __syncwarp();
                    if (lane == 0) mbar_arrive(sm.stgfull(c));
                    if (tid == 0) { /* dq_part: the first key block stores, later ones add */
                        const CUtensorMap *tmp = split == 0 ? &tm_p0 : &tm_pw;
                        const int pz = split == 0 ? b : (split - 1) * s.B + b; /* the partial's batch coordinate */
                        mbar_wait(sm.stgfull(c), (uint32_t)ni & 1u);
                        ff_tile_out(tmp, h * FZ_D, qt0, pz, stg, j != 0);
                        ff_tile_out(tmp, h * FZ_D + 32, qt0, pz, stg + FZ2_STG / 2, j != 0);
                        tma_store_commit();
                    }
                    ni++;
                }
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(sm.resempty(rb)); /* every wgmma reading K / V of this block is done */
        }

        fb_dkdv_store<FZ_D>(grads, adk, adv, s, b, hk, key_lo, tq, scale);
    }
    if (tid == 0) tma_store_wait_all(); /* the partials written and the staging buffer read before the CTA exits */
}

/* A 3D tensor map of nb fp32 dQ partials (B, Tq, H * 64 dense each, back to back from p: dims H * 64, Tq, nb) in
 * 32-column x 64-row x 1 boxes, 128B-swizzled, as fz_bwd2_kernel writes them. FORGE_ERR_UNSUPPORTED naming the
 * entry if the driver refuses it. */
forge_status fz2_encode_partial(CUtensorMap *map, float *p, int nb, int Tq, int H, const char *what) {
    gemm_encode_tiled_fn encode = nullptr;
    FORGE_TRY(gemm_get_encoder(&encode));
    const cuuint64_t row = (cuuint64_t)H * FZ_D * 4;
    const cuuint64_t dims[3] = {(cuuint64_t)H * FZ_D, (cuuint64_t)Tq, (cuuint64_t)nb};
    const cuuint64_t strides[2] = {row, row * (cuuint64_t)Tq};
    const cuuint32_t box[3] = {32, FB_BS, 1};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, p, dims, strides, box, elem_strides,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: cuTensorMapEncodeTiled for %s (fp32, %d x %d rows of %d columns, box 32 x 64, 128B "
                           "swizzle) failed with CUresult %d",
                           LAB_FZ2_ENTRY, what, nb, Tq, H * FZ_D, (int)r);
    return FORGE_OK;
}

} // namespace

extern "C" size_t lab_flash16_backward_fused2_ws_bytes(const forge_flash_shape *s, int splits) {
    return lab_flash16_backward_fused_ws_bytes(s, splits);
}

extern "C" forge_status lab_flash16_backward_fused2_ws(const forge_flash_shape *s, const void *q, const void *k,
                                                       const void *v, const void *out_bf16, const void *dout_bf16,
                                                       const float *lse, float *delta, float *dq, float *dk,
                                                       float *dv, int splits, void *ws, size_t ws_bytes,
                                                       void *stream) {
    int launch = 0;
    FORGE_TRY(fb_backward_begin(LAB_FZ2_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, &launch));
    if (!launch) return FORGE_OK;
    if (s->D != FZ_D)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: the fused backward is compiled for D = 64 only, got D=%d",
                           LAB_FZ2_ENTRY, s->D);
    int nsplit = 1;
    FORGE_TRY(fz_splits(s, splits, &nsplit));
    const size_t need = fz_ws_bytes(s, nsplit);
    if (ws_bytes < need || (need > 0 && ws == NULL))
        return forge_error(FORGE_ERR_ARG, "%s: %d splits need a %zu-byte workspace, got %zu", LAB_FZ2_ENTRY, nsplit,
                           need, ws_bytes);
    if (((uintptr_t)dq & 15u) != 0 || (need > 0 && ((uintptr_t)ws & 15u) != 0))
        return forge_error(FORGE_ERR_ARG,
                           "%s: dq (%p) and the workspace (%p) must be 16-byte aligned (TMA writes the dQ partials)",
                           LAB_FZ2_ENTRY, (void *)dq, ws);
    /* the partials' maps first: a refusal leaves nothing written */
    CUtensorMap tm_p0, tm_pw;
    FORGE_TRY(fz2_encode_partial(&tm_p0, dq, s->B, s->Tq, s->H, "dq (split 0's partial)"));
    if (nsplit > 1)
        FORGE_TRY(fz2_encode_partial(&tm_pw, (float *)ws, (nsplit - 1) * s->B, s->Tq, s->H,
                                     "the workspace (splits 1.. partials)"));
    else
        tm_pw = tm_p0;
    fb_call c;
    FORGE_TRY(
        fb_backward_prepare(&c, LAB_FZ2_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream, 0));
    CUDA_TRY(cudaFuncSetAttribute(fz_bwd2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)FZ2_SMEM));
    const dim3 grid((unsigned)nsplit, (unsigned)s->Hkv, (unsigned)s->B);
    fz_bwd2_kernel<<<grid, FB_THREADS, FZ2_SMEM, c.st>>>(c.k_res, c.v_res, c.q_str, c.do_str, tm_p0, tm_pw, c.rows,
                                                         c.g, c.s, c.sl2, c.scale);
    CUDA_LAUNCH_CHECK("fz_bwd2_kernel");
    const size_t n4 = (size_t)s->B * s->Tq * s->H * FZ_D / 4;
    const size_t blocks = (n4 + 255) / 256;
    fz_dq_reduce<<<(unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16), 256, 0, c.st>>>(
        dq, (const float *)ws, n4, s->Tq, s->H * FZ_D, s->Tk - s->Tq, nsplit, c.scale);
    CUDA_LAUNCH_CHECK("fz_dq_reduce (fused2)");
    return FORGE_OK;
}

/* lab_flash16_backward_fused2_ws with forge's backward signature, S by the rule and a grow-only workspace of
 * this file (cudaMalloc: 256-byte aligned), freed at exit by the driver (not thread-safe). */
extern "C" forge_status lab_flash16_backward_fused2(const forge_flash_shape *s, const void *q, const void *k,
                                                    const void *v, const void *out_bf16, const void *dout_bf16,
                                                    const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                    void *stream) {
    static void *ws = NULL;
    static size_t ws_cap = 0;
    const size_t need = lab_flash16_backward_fused2_ws_bytes(s, 0);
    if (need > ws_cap) {
        if (ws) CUDA_TRY(cudaFree(ws));
        ws = NULL;
        ws_cap = 0;
        CUDA_TRY(cudaMalloc(&ws, need));
        ws_cap = need;
    }
    return lab_flash16_backward_fused2_ws(s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, 0, ws, ws_cap,
                                          stream);
}
