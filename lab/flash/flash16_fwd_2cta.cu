/*
 * flash16_fwd_2cta.cu: forge's Hopper (sm_90a) bf16 flash forward at D = 64
 * with TWO CTAs per SM (lab). Entry: lab_flash16_forward_2cta
 * (flash16_variants.h); measurements and the plan: lab/notes/flash.md.
 *
 * Why: fw_fwd_kernel<64> (src/backend/cuda/flash_attention_bf16_wgmma.cu,
 * whose header explains the ring, the fragments and the tensor maps) runs one
 * CTA per SM: a producer warpgroup and two consumer warpgroups under
 * setmaxnreg 24 / 240, 144 KiB of shared memory. Only two warpgroups share an
 * SM's tensor pipe, and at D = 64 a tile's softmax takes about as long as its
 * MMAs, so when both are in their softmax the pipe idles. Here each SM holds
 * two CTAs, four consumer warpgroups, and the warp schedulers interleave one
 * warpgroup's softmax with the others' MMAs without any explicit turn-taking.
 *
 * What changes against fw_fwd_kernel<64> (everything else is its code: the
 * shared pieces of flash_attention_bf16_wgmma_fwd.cuh, the same tensor-map
 * conventions, mask, online softmax, epilogue, lse, GQA, bottom-right causal
 * Tq != Tk, longest-first query-tile order):
 * - CTA = 288 threads: consumer warpgroups 0 and 1 (warps 0-7, 64 query rows
 *   each, 128 rows per CTA as the product) and ONE producer warp (warp 8, its
 *   lane 0 issues every TMA). No setmaxnreg: every thread gets the same count.
 *   That count is 96, not 65536 / (2 x 288) = 113: the register file is four
 *   sub-partitions of 16,384 registers, a warp's registers come from its own
 *   sub-partition (rounded to 256), and two CTAs are 18 warps, so one
 *   sub-partition holds 5 of them: 5 x 32 x R <= 16384 gives R <= 102, 96 in
 *   steps of 8 (cuda_occupancy.h, cudaOccMaxBlocksPerSMRegsLimit; ptxas caps
 *   __launch_bounds__(288, 2) at 96). At 104 or 112 only one CTA would fit.
 *   The kernel uses 93 (build/cuda/lab/flash/flash16_fwd_2cta.ptxas.txt).
 * - BN = 64 keys per tile (S 32 + P 16 + O 32 fp32/b32 registers per consumer
 *   thread; 128-key tiles would need S 64 + P 32 + O 32 = 128 > 96). K box
 *   BN = 64 rows, V one 64 x 64 box per tile, as the product's D = 128
 *   instance streams them.
 * - STAGES = 5 ring stages of 16 KiB: Q 16 KiB + 5 x 16 KiB + barriers + the
 *   1 KiB alignment slack = 99,416 B per CTA; two CTAs plus the 1 KiB each the
 *   system reserves fit the SM's 228 KiB (6 stages would be 115,816 B, 104 B
 *   over the 115,712 B two CTAs may each have). The host asks for the
 *   max-shared carveout so the driver does not pick a smaller one.
 * - Exponentials: the product's fw_softmax_row, so fw_ex2 (one
 *   ex2.approx.ftz.f32, flash_wgmma_common.cuh) as the product since a4e0d2d.
 * - The consumers run the product's BASE schedule (wait for S, softmax,
 *   wait for O += P.V): the overlap between a warpgroup's softmax and the
 *   tensor pipe comes from the other three warpgroups on the SM. An OVERLAP
 *   schedule (S_t issued with P_{t-1}.V_{t-1}, as the lab's fw_fwd_ov_kernel)
 *   was built too and dropped: it wants ~106 registers and spilled 144 B at
 *   the cap of 96 (wgmmas serialised, C7512).
 * - Launched without PDL (as the lab's other schedules).
 */
#include <math.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../../src/backend/cuda/cuda_check.h"
#include "../../src/backend/cuda/flash_attention_bf16_wgmma_fwd.cuh"
#include "../../src/backend/cuda/flash_wgmma_common.cuh"
#include "../../src/backend/cuda/wgmma_common.cuh"

#include "flash16_variants.h"

#define LAB_FW2_ENTRY "lab_flash16_forward_2cta" /* named in errors */
#define FW2_THREADS 288                          /* 2 consumer warpgroups + 1 producer warp */
#define FW2_PRODUCER_WARP 8
#define FW2_D 64
#define FW2_BN 64

struct fw2_cfg {
    static constexpr int STAGES = 5;
    static constexpr uint32_t Q_BYTES = FW_BM * FW2_D * 2;   /* 16 KiB */
    static constexpr uint32_t KV_BYTES = FW2_BN * FW2_D * 2; /* 8 KiB: one of K or V */
    static constexpr uint32_t STAGE_BYTES = 2 * KV_BYTES;
    /* Q, the ring, then qbar, full[STAGES], empty[STAGES]; 1 KiB slack to align the base to 1024 B */
    static constexpr size_t SMEM = Q_BYTES + (size_t)STAGES * STAGE_BYTES + 8 * (1 + 2 * STAGES) + 1024;
    /* two CTAs per SM: 2 x (SMEM + the 1 KiB the system reserves per CTA) <= the SM's 228 KiB */
    static_assert(2 * (SMEM + 1024) <= 228 * 1024, "two CTAs fit an SM's shared memory");
};
/* two CTAs = 18 warps, 5 on one register-file sub-partition (16,384 registers): 96 registers a thread at most
 * (ptxas applies the same cap to __launch_bounds__(288, 2)) */
static_assert(5 * 32 * 96 <= 16384 && 5 * 32 * 104 > 16384, "the register cap of two 288-thread CTAs is 96");

/* fw_softmax_row (flash_attention_bf16_wgmma_fwd.cuh: online softmax in the log2 domain, exponentials by fw_ex2)
 * over both rows of the thread; alpha[r]: the factor row r's O is to be scaled by */
__device__ __forceinline__ void fw2_softmax(float (&sc)[FW2_BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                            float sl2) {
#pragma unroll
    for (int r = 0; r < 2; r++) fw_softmax_row<FW2_BN>(sc, m[r], l[r], alpha[r], r, sl2);
}

__device__ __forceinline__ void fw2_rescale(float (&o)[FW2_D / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int n = 0; n < FW2_D / 8; n++) {
        o[4 * n + 0] *= alpha[0];
        o[4 * n + 1] *= alpha[0];
        o[4 * n + 2] *= alpha[1];
        o[4 * n + 3] *= alpha[1];
    }
}

__global__ void __launch_bounds__(FW2_THREADS, 2)
    fw2_fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                   const __grid_constant__ CUtensorMap tm_v, fw_bf16 *__restrict__ out, float *__restrict__ lse,
                   forge_flash_shape s, float sl2) {
    typedef fw2_cfg cfg;
    constexpr int STAGES = cfg::STAGES, BN = FW2_BN, D = FW2_D;
    uint32_t sq, sring, qbar;
    fw_smem_layout<cfg>(sq, sring, qbar);
    const uint32_t bars = qbar + 8; /* full[st] at +8st, empty[st] at +8(STAGES+st) */

    const int q0 = (gridDim.x - 1 - blockIdx.x) * FW_BM, h = blockIdx.y, b = blockIdx.z; /* longest first */
    const int hk = h / (s.H / s.Hkv);
    const int diag = s.Tk - s.Tq;
    const int kv_end = min(s.Tk, q0 + FW_BM + diag);
    const int ntiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
    const int warp_id = threadIdx.x / 32, lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        mbar_init(qbar, 1);
        wgmma_ring_init<STAGES>(bars, FW_CONSUMER_WARPS);
    }
    __syncthreads();

    if (warp_id == FW2_PRODUCER_WARP) {
        if (lane == 0 && ntiles > 0) {
            mbar_arrive_expect_tx(qbar, cfg::Q_BYTES);
            fw_tma_load_3d(sq, &tm_q, h * D, q0, b, qbar);
            int stage = 0;
            uint32_t phase = 0;
            for (int t = 0; t < ntiles; t++)
                fw_load_kv<D, BN, STAGES>(&tm_k, &tm_v, sring, bars, t, hk, b, stage, phase);
        }
        return;
    }

    const int c = wgmma_warpgroup_index(); /* 0 or 1, warp-uniform */
    const int warp = warp_id % 4, g = lane / 4, tq = lane % 4;
    const int wrow0 = q0 + c * 64;            /* this warpgroup's first query row */
    const int row_lo = wrow0 + warp * 16 + g; /* this thread's rows: row_lo, row_lo + 8 */
    const uint32_t qa = sq + c * (64 * 128);  /* rows c*64.. of the 128-row Q box */

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];

    int stage = 0;
    uint32_t phase = 0;
    auto advance = [&]() {
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    };
    auto release = [&](int st) { /* this warp no longer reads stage st */
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + st));
    };

    if (ntiles > 0) mbar_wait(qbar, 0);
    /* the warpgroup's last row sees keys <= vis: tiles 0..nt-1 (a prefix: tiles run in key order) */
    const int vis = wrow0 + 63 + diag;
    const int nt = vis < 0 ? 0 : min(ntiles, vis / BN + 1);
    /* the first tile whose last key passes the warpgroup's first row's diagonal or Tk needs the mask, and every
     * later one (truncation toward 0 of a negative numerator gives 0: every tile masked, which is safe) */
    const int first_masked = min((wrow0 + diag + 1) / BN, s.Tk / BN);

    for (int t = 0; t < nt; t++) {
        mbar_wait(bars + 8 * stage, phase);
        const uint32_t kt = sring + stage * cfg::STAGE_BYTES, vt = kt + cfg::KV_BYTES;
        float sc[BN / 2];
        wgmma_fence();
        fw_issue_qk<D, BN>(sc, qa, kt);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(sc);
        if (t >= first_masked) fw_mask<BN>(sc, t * BN, row_lo, diag, s.Tk, tq);
        fw2_softmax(sc, m, l, alpha, sl2);
        fw2_rescale(o, alpha);
        uint32_t pa[BN / 16][4];
        fw_to_a<BN>(pa, sc);
        wgmma_fence(); /* o and pa were written by ordinary instructions */
        fw_issue_pv<D, BN>(o, pa, vt);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(o);
        release(stage);
        advance();
    }
    /* tiles this warpgroup's rows do not see: every warpgroup waits for every stage, used or not, so no warp can
     * run a ring round ahead and arrive on an empty barrier's next phase early */
    for (int t = nt; t < ntiles; t++) {
        mbar_wait(bars + 8 * stage, phase);
        release(stage);
        advance();
    }

    fw_store<D>(o, m, l, out, lse, s, row_lo, tq, b, h);
}

/* ---- host ----------------------------------------------------------------------------- */

static forge_status fw2_prepare(void) {
    auto kern = fw2_fwd_kernel;
    CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fw2_cfg::SMEM));
    /* the largest shared-memory carveout, so two CTAs (99,416 B each, plus the 1 KiB the system reserves per CTA)
     * are resident at once */
    CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  (int)cudaSharedmemCarveoutMaxShared));
    return FORGE_OK;
}

static forge_status fw2_forward(const forge_flash_shape *s, const void *q, const void *k, const void *v, void *out,
                                  float *lse, cudaStream_t st) {
    CUtensorMap tq, tk, tv;
    FORGE_TRY(fw_encode(&tq, q, s->B, s->Tq, s->H * FW2_D, s->q_stride, FW_BM, "Q", LAB_FW2_ENTRY));
    FORGE_TRY(fw_encode(&tk, k, s->B, s->Tk, s->Hkv * FW2_D, s->k_stride, FW2_BN, "K", LAB_FW2_ENTRY));
    FORGE_TRY(fw_encode(&tv, v, s->B, s->Tk, s->Hkv * FW2_D, s->v_stride, 64, "V", LAB_FW2_ENTRY));
    const float sl2 = (1.0f / sqrtf((float)FW2_D)) * FW_LOG2E;
    FORGE_TRY(fw2_prepare());
    dim3 grid((unsigned)((s->Tq + FW_BM - 1) / FW_BM), (unsigned)s->H, (unsigned)s->B);
    fw2_fwd_kernel<<<grid, FW2_THREADS, fw2_cfg::SMEM, st>>>(tq, tk, tv, (fw_bf16 *)out, lse, *s, sl2);
    CUDA_LAUNCH_CHECK("fw2_fwd_kernel");
    return FORGE_OK;
}

extern "C" forge_status lab_flash16_forward_2cta(const forge_flash_shape *s, const void *q, const void *k,
                                                 const void *v, void *out_bf16, float *lse, void *stream) {
    int launch = 0;
    FORGE_TRY(fw_forward_begin(LAB_FW2_ENTRY, s, q, k, v, out_bf16, lse, stream, &launch));
    if (!launch) return FORGE_OK;
    if (s->D != FW2_D)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: the two-CTA forward is compiled for D = 64 only, got D=%d; use "
                           "forge_flash_bf16_forward_wgmma",
                           LAB_FW2_ENTRY, s->D);
    return fw2_forward(s, q, k, v, out_bf16, lse, (cudaStream_t)stream);
}

extern "C" forge_status lab_flash16_forward_2cta_occupancy(int *ctas_per_sm) {
    *ctas_per_sm = 0;
    FORGE_TRY(fw2_prepare());
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, (const void *)fw2_fwd_kernel, FW2_THREADS,
                                                           fw2_cfg::SMEM));
    return FORGE_OK;
}
