/*
 * flash16_fwd64_n32.cu: forge's D = 64 forward (fw_fwd64_kernel) with 32-key tiles and THREE CTAs per SM (lab):
 * fw3_fwd_kernel. Why: the twentieth session's trace put the D = 64 tile at a serial chain per warpgroup (S 317
 * cycles, softmax ~1,000, P.V 317) and the loop's time per tile at about that chain, with the tensor pipe 40%, MUFU
 * 45% and issue 53% busy: the SM's four consumer warpgroups do not fill it. Two CTAs per SM brought 1.35-1.48x over
 * one (tenth session); a third needs fewer registers a thread. 64-key tiles hold S 32 + P 16 + O 32; 32-key tiles
 * S 16 + P 8 + O 32 (77 registers unconstrained). Three 288-thread CTAs (forge's, with a producer warp) are 27 warps,
 * 7 on one of the register file's four sub-partitions: 72 registers, and the kernel spills 64 B there with its wgmmas
 * serialised. So no producer warp: three 256-thread CTAs are 24 warps, 6 a sub-partition, 80 registers. The price:
 * twice the tiles a row (barrier waits, wgmma round trips, the row max's shuffles, the O rescale per 32 keys instead
 * of 64) and 18 MUFU per 32 keys instead of 34 per 64.
 *
 * CTA: consumer warpgroups 0 and 1 (64 query rows each). Thread 0 loads Q and the ring's first FW3_STAGES K / V
 * tiles of 32 keys (stages of 8 KiB: K one 32-row box, V one 32 x 64 box); after that the warp whose release
 * completes a stage refills it: each warp's lane 0 arrives on the stage's empty barrier (as forge's consumers do),
 * then counts its release with a relaxed shared atomic; the one that counts eighth waits on the empty barrier (its
 * acquire: the other warps' reads are done) and loads the tile STAGES on. A relaxed count, not an acq_rel one: the
 * twenty-second session's producer-less D = 64 kernel ordered by `atom.acq_rel` and got a MEMBAR.ALL.CTA in every
 * release (3-5% slower). S = Q.K^T is
 * wgmma m64n32k16 (4 k16 steps over D), O += P.V m64n64k16 with P from registers (2 k16 steps over the keys): the
 * tile (fw_tile at BN = 32), the out staging and the grid's longest-first order (fw64_tile_of) are forge's
 * (flash_attention_bf16_wgmma_fwd.cuh).
 * Shared memory: Q 16 KiB + 7 x 8 KiB + barriers and counts + 1 KiB alignment slack = 74,928 B; 3 x (74,928 +
 * 1,024 reserved) = 227,856 of the SM's 233,472.
 *
 * Entry: lab_flash16_forward_n32 (flash16_variants.h); D = 64 only (FORGE_ERR_UNSUPPORTED otherwise).
 */
#include <math.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "../../src/backend/cuda/cuda_check.h"
#include "../../src/backend/cuda/flash_attention_bf16_wgmma_fwd.cuh"
#include "../../src/backend/cuda/flash_key_tiles.cuh"
#include "../../src/backend/cuda/pdl.cuh"

#include "flash16_variants.h"

#define LAB_FW3_ENTRY "lab_flash16_forward_n32" /* named in errors */
#define FW3_THREADS 256
#define FW3_BN 32

/* FW3_STAGES (a probe's build flag, lab/scripts/build_variant.sh): 7 fits three CTAs an SM; 11 (105 KiB) leaves
 * two, the same kernel on four consumer warpgroups an SM, to tell the 32-key tiles' cost from the third CTA's gain */
#ifndef FW3_STAGES
#define FW3_STAGES 7
#endif

struct fw3_cfg {
    static constexpr int STAGES = FW3_STAGES;
    static constexpr uint32_t Q_BYTES = FW_BM * 64 * 2;   /* 16 KiB */
    static constexpr uint32_t KV_BYTES = FW3_BN * 64 * 2; /* 4 KiB: one of K or V */
    static constexpr uint32_t STAGE_BYTES = 2 * KV_BYTES;
    /* Q, the ring, then qbar, full[STAGES], empty[STAGES], the release counts cnt[STAGES] (8 B slots); 1 KiB
     * slack to align the base to 1024 B */
    static constexpr size_t SMEM = Q_BYTES + (size_t)STAGES * STAGE_BYTES + 8 * (1 + 3 * STAGES) + 1024;
    static_assert(FW3_STAGES != 7 || 3 * (SMEM + 1024) <= 228 * 1024, "three CTAs fit an SM's shared memory");
    static_assert(2 * (SMEM + 1024) <= 228 * 1024, "two CTAs fit an SM's shared memory");
};
static_assert(6 * 32 * 80 <= 16384 && 6 * 32 * 88 > 16384, "the register cap of three 256-thread CTAs is 80");

/* K/V tile t into stage st (the stage is known to be free) */
__device__ __forceinline__ void fw3_load(const CUtensorMap *tm_k, const CUtensorMap *tm_v, uint32_t sring,
                                         uint32_t full, int st, int t, int hk, int b) {
    typedef fw3_cfg cfg;
    mbar_arrive_expect_tx(full, cfg::STAGE_BYTES);
    const uint32_t dk = sring + st * cfg::STAGE_BYTES;
    fw_tma_load_3d(dk, tm_k, hk * 64, t * FW3_BN, b, full);
    fw_tma_load_3d(dk + cfg::KV_BYTES, tm_v, hk * 64, t * FW3_BN, b, full);
}

__global__ void __launch_bounds__(FW3_THREADS, 3)
    fw3_fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                   const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                   fw_bf16 *__restrict__ out, float *__restrict__ lse, forge_flash_shape s, float sl2) {
    typedef fw3_cfg cfg;
    constexpr int STAGES = cfg::STAGES, BN = FW3_BN, D = 64;
    uint32_t sq, sring, qbar;
    fw_smem_layout<cfg>(sq, sring, qbar);
    const uint32_t bars = qbar + 8; /* full[st] at +8st, empty[st] at +8(STAGES+st) */
    extern __shared__ __align__(1024) unsigned char fw_smem[];
    /* cnt[st], as a generic pointer for atomicAdd: the 8-byte slots after the empty barriers */
    unsigned int *cnt = (unsigned int *)(fw_smem + (bars + 16 * STAGES - smem_u32(fw_smem)));

    int q0, h, b;
    fw64_tile_of(s.H, q0, h, b);
    const int hk = h / (s.H / s.Hkv);
    const int diag = s.Tk - s.Tq;
    const int ntiles = flash_key_tiles(s.Tk, diag, q0, FW_BM, BN);
    const int warp_id = wgmma_warp_index(), lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        mbar_init(qbar, 1);
#pragma unroll
        for (int st = 0; st < STAGES; st++) cnt[2 * st] = 0;
        wgmma_ring_init<STAGES>(bars, FW_CONSUMER_WARPS);
    }
    __syncthreads();
    if (threadIdx.x == 0 && ntiles > 0) {
        mbar_arrive_expect_tx(qbar, FW_BM * D * 2);
        fw_tma_load_3d(sq, &tm_q, h * D, q0, b, qbar);
        for (int t = 0; t < STAGES && t < ntiles; t++) fw3_load(&tm_k, &tm_v, sring, bars + 8 * t, t, t, hk, b);
    }

    const int c = warp_id / 4; /* consumer warpgroup 0 or 1 */
    const int warp = warp_id % 4, g = lane / 4, tq = lane % 4;
    const int wrow0 = q0 + c * 64;            /* this warpgroup's first query row */
    const int row_lo = wrow0 + warp * 16 + g; /* this thread's rows: row_lo, row_lo + 8 */
    const uint32_t qa = sq + c * (64 * 128);  /* rows c*64.. of the 128-row Q box */

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    int stage = 0;
    uint32_t phase = 0;
    /* this warp no longer reads stage `stage` (tile t): release it; the eighth to count refills it with tile
     * t + STAGES (every warp counts the same tiles: those with a refill) */
    auto step = [&](int t) {
        __syncwarp();
        if (lane == 0) {
            const uint32_t empty = bars + 8 * (STAGES + stage);
            mbar_arrive(empty);
            if (t + STAGES < ntiles && (atomicAdd(&cnt[2 * stage], 1u) & 7u) == 7u) {
                mbar_wait(empty, phase);
                fw3_load(&tm_k, &tm_v, sring, bars + 8 * stage, stage, t + STAGES, hk, b);
            }
        }
        __syncwarp(); /* lane 0's refill done: the warp converged for the next tile's aligned wgmma operations */
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    };

    if (ntiles > 0) mbar_wait(qbar, 0);
    const int vis = wrow0 + 63 + diag; /* the warpgroup's last row sees keys <= vis */
    const int nt = vis < 0 ? 0 : min(ntiles, vis / BN + 1);
    const int first_masked = min((wrow0 + diag + 1) / BN, s.Tk / BN);
    for (int t = 0; t < nt; t++) {
        mbar_wait(bars + 8 * stage, phase);
        const uint32_t kt = sring + stage * cfg::STAGE_BYTES, vt = kt + cfg::KV_BYTES;
        fw_tile<D, BN>(o, m, l, qa, kt, vt, t >= first_masked, t * BN, row_lo, diag, s.Tk, tq, sl2);
        step(t);
    }
    /* tiles this warpgroup does not see: each waited for before it is released and counted, so a stage's empty
     * phase and count only complete with their round's tile landed (no warp runs a round ahead) */
    for (int t = nt; t < ntiles; t++) {
        mbar_wait(bars + 8 * stage, phase);
        step(t);
    }

    if (nt == 0) {
        fw_store<D>(o, m, l, out, lse, s, row_lo, tq, b, h); /* o = 0, l = 0 */
        return;
    }
    const bool issuer = warp == 0 && lane == 0;
    fw_out_staged<D>(o, m, l, qa, &tm_o, lse, s, c, issuer, warp, g, tq, row_lo, wrow0, b, h);
    if (issuer) tma_store_wait_read<0>();
}

static forge_status fw3_prepare(void) {
    CUDA_TRY(cudaFuncSetAttribute(fw3_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fw3_cfg::SMEM));
    CUDA_TRY(cudaFuncSetAttribute(fw3_fwd_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  (int)cudaSharedmemCarveoutMaxShared));
    return FORGE_OK;
}

extern "C" forge_status lab_flash16_forward_n32(const forge_flash_shape *s, const void *q, const void *k,
                                                const void *v, void *out, float *lse, void *stream) {
    int launch = 0;
    FORGE_TRY(fw_forward_begin(LAB_FW3_ENTRY, s, q, k, v, out, lse, stream, &launch));
    if (!launch) return FORGE_OK;
    if (s->D != 64)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: compiled for D = 64, got D=%d", LAB_FW3_ENTRY, s->D);
    CUtensorMap tq, tk, tv, to;
    FORGE_TRY(fw_encode(&tq, q, s->B, s->Tq, s->H * 64, s->q_stride, FW_BM, "Q", LAB_FW3_ENTRY));
    FORGE_TRY(fw_encode(&tk, k, s->B, s->Tk, s->Hkv * 64, s->k_stride, FW3_BN, "K", LAB_FW3_ENTRY));
    FORGE_TRY(fw_encode(&tv, v, s->B, s->Tk, s->Hkv * 64, s->v_stride, FW3_BN, "V", LAB_FW3_ENTRY));
    FORGE_TRY(fw_encode(&to, out, s->B, s->Tq, s->H * 64, s->o_stride, 64, "out", LAB_FW3_ENTRY));
    const float sl2 = (1.0f / sqrtf(64.0f)) * FW_LOG2E;
    FORGE_TRY(fw3_prepare());
    const long long nqt = (s->Tq + FW_BM - 1) / FW_BM;
    if (nqt * s->H * s->B > 0x7fffffffLL)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: %lld CTAs exceed the int block index", LAB_FW3_ENTRY,
                           nqt * s->H * s->B);
    fw3_fwd_kernel<<<dim3((unsigned)nqt, (unsigned)s->H, (unsigned)s->B), FW3_THREADS, fw3_cfg::SMEM,
                     (cudaStream_t)stream>>>(tq, tk, tv, to, (fw_bf16 *)out, lse, *s, sl2);
    CUDA_TRY(cudaGetLastError());
    return FORGE_OK;
}

/* resident CTAs per SM of fw3_fwd_kernel (the design: 3) */
extern "C" forge_status lab_flash16_forward_n32_occupancy(int *ctas_per_sm) {
    FORGE_TRY(fw3_prepare());
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, (const void *)fw3_fwd_kernel, FW3_THREADS,
                                                           fw3_cfg::SMEM));
    return FORGE_OK;
}
