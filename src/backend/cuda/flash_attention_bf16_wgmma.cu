/*
 * flash_attention_bf16_wgmma.cu: the Hopper (sm_90a) forward of forge's bf16
 * flash attention on TMA + wgmma, FA3-style (entry and contract in
 * flash_attention_bf16.h, notes in lab/notes/flash-attention.md). Same results
 * contract as the mma.sync forward in flash_attention_bf16.cu.
 *
 * Two kernels: at D = 64 fw_fwd64_kernel (this file), TWO CTAs per SM; at
 * D = 128 fw_fwd_ov_kernel<128, 128, true> (flash_attention_bf16_wgmma_fwd_
 * sched.cuh), one persistent CTA per SM. At D = 64 a tile's softmax takes
 * about as long as its MMAs; with two consumer warpgroups per SM both are often
 * in their softmax at once and the tensor pipe idles, with four (two CTAs) the
 * schedulers interleave one's softmax with the others' MMAs: 1.35-1.48x the
 * one-CTA kernel at (16,12,1024,64), (64,6,512,64), (64,8,1024,64)
 * (lab/notes/flash.md, 2026-12-03). At D = 128, S + P + O of 64-key tiles (112
 * registers) do not fit the 96 two CTAs leave a thread; there each warpgroup
 * runs a 128-key tile's softmax under its previous tile's P.V (the two waits
 * held apart by fw_pin_before_wait), the warpgroups take turns issuing their
 * products, and persistent CTAs walk paired long + short query tiles: 1.13-1.19x
 * the one-CTA kernel at (16,16,2048,128) and (8,16,4096,128) (lab/notes/
 * flash.md, 2026-12-03, twelfth session).
 *
 * Design (the decisions a reader would otherwise get wrong):
 * - CTA = a PRODUCER (D = 128: warpgroup 0 under setmaxnreg; D = 64: warp 8,
 *   no setmaxnreg) whose one thread loads the 128-row Q tile once (qbar) and
 *   streams BN-key tiles of K and V into a ring of STAGES stages (full[s]: 1
 *   arrival + TMA bytes; empty[s]: lane 0 of each of the 8 consumer warps),
 *   and two CONSUMER warpgroups, each owning 64 query rows. Parities as in
 *   gemm_wgmma.cu: round r waits full with r&1 and empty with (r&1)^1.
 * - Tensor maps are 3D (column = h*D + d, token, batch) with the caller's
 *   token stride as the row stride: a box never crosses into the next batch,
 *   and rows past Tq / Tk are zero-filled by TMA (still counted in the bytes).
 *   Boxes are 64 columns (128 B, the 128B-swizzle limit) wide.
 * - S = Q.K^T: wgmma m64nBNk16, A (Q) and B (K) both K-major from shared
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
 *   never sees inf - inf; lse natural log, -inf for rows that see no key. At
 *   D = 64 only a row's first tile takes its max: later tiles exponentiate
 *   against it and fall back to the exact online softmax only when a P would
 *   pass 2^32 (fw_tile_ref).
 * - Causal: a CTA stops at its last visible key tile; a warpgroup whose 64
 *   rows see none of a tile skips its MMAs but still releases the stage;
 *   only tiles straddling the diagonal or Tk evaluate the mask.
 * - Tk = 0 goes to the mma.sync forward (a tensor map cannot have a 0 dim).
 * - At D = 64 the consumers wait for S, do the softmax, then wait for
 *   O += P.V; the D = 128 kernel's schedule is explained in its header. The
 *   lab holds the other schedules and the one-CTA kernel without the overlap
 *   (the baseline of both), which share the ring and epilogue
 *   (flash_attention_bf16_wgmma_fwd.cuh).
 * - out leaves through shared memory and a TMA store (fw_stage_out: the
 *   accumulator normalised to bf16 in the out map's 128B swizzle), at D = 64
 *   from the warpgroup's own rows of the Q tile, at D = 128 from the last
 *   stage's K area; lse by plain stores.
 * - Everything waits through mbar_wait (traps after 10 s instead of hanging).
 * - The barriers are set up before forge_pdl_wait (pdl.cuh), so under
 *   programmatic dependent launch that prologue runs under the previous
 *   kernel's tail; no thread touches global memory before the wait.
 */
#include <math.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "flash_attention_bf16_wgmma_fwd.cuh" /* CTA shape, K/V tile step, epilogue, host steps */
#include "flash_attention_bf16_wgmma_fwd_sched.cuh" /* the D = 128 kernel */
#include "flash_wgmma_common.cuh"
#include "kernel_attrs.h"
#include "pdl.cuh"
#include "wgmma_common.cuh"
#include "wgmma_tmap.h"

extern "C" {
#include "flash_attention_bf16.h"
}

#define FW_ENTRY "forge_flash_bf16_forward_wgmma" /* named in errors */

/* ---- D = 64: two CTAs per SM -------------------------------------------------------------------------------
 * CTA = 288 threads: consumer warpgroups 0 and 1 (warps 0-7, 64 query rows each, 128 per CTA) and one producer
 * warp (warp 8; its lane 0 issues every TMA). 64-key tiles, FW64_STAGES ring stages of 16 KiB. No setmaxnreg:
 * two CTAs are 18 warps, 5 of them on one of the register file's four sub-partitions (16,384 registers), so a
 * thread may hold at most 96 registers (5 x 32 x 96 <= 16384; ptxas applies the same cap to
 * __launch_bounds__(288, 2)); S (32) + P (16) + O (32) fit, 128-key tiles would not. The consumers run the
 * one-CTA kernel's schedule (wait for S, softmax, wait for O += P.V); a warpgroup's softmax overlaps the tensor
 * pipe through the SM's other three consumer warpgroups. */
#define FW64_THREADS 288
#define FW64_PRODUCER_WARP 8
#define FW64_BN 64

struct fw64_cfg {
    static constexpr int STAGES = 5;
    static constexpr uint32_t Q_BYTES = FW_BM * 64 * 2;    /* 16 KiB */
    static constexpr uint32_t KV_BYTES = FW64_BN * 64 * 2; /* 8 KiB: one of K or V */
    static constexpr uint32_t STAGE_BYTES = 2 * KV_BYTES;
    /* Q, the ring, then qbar, full[STAGES], empty[STAGES]; 1 KiB slack to align the base to 1024 B */
    static constexpr size_t SMEM = Q_BYTES + (size_t)STAGES * STAGE_BYTES + 8 * (1 + 2 * STAGES) + 1024;
    /* two CTAs per SM: 2 x (SMEM + the 1 KiB the system reserves per CTA) <= the SM's 228 KiB (6 stages do not) */
    static_assert(2 * (SMEM + 1024) <= 228 * 1024, "two CTAs fit an SM's shared memory");
};
static_assert(5 * 32 * 96 <= 16384 && 5 * 32 * 104 > 16384, "the register cap of two 288-thread CTAs is 96");

__global__ void __launch_bounds__(FW64_THREADS, 2)
    fw_fwd64_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                    const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_o,
                    fw_bf16 *__restrict__ out, float *__restrict__ lse, forge_flash_shape s, float sl2) {
    typedef fw64_cfg cfg;
    constexpr int STAGES = cfg::STAGES, BN = FW64_BN, D = 64;
    uint32_t sq, sring, qbar;
    fw_smem_layout<cfg>(sq, sring, qbar);
    const uint32_t bars = qbar + 8; /* full[st] at +8st, empty[st] at +8(STAGES+st) */

    int q0, h, b;
    fw64_tile_of(s.H, q0, h, b);
    const int hk = h / (s.H / s.Hkv);
    const int diag = s.Tk - s.Tq;
    const int ntiles = flash_key_tiles(s.Tk, diag, q0, FW_BM, BN);
    /* warp-uniform (wgmma_warp_index): the warp's shared-memory addresses and descriptors in uniform registers */
    const int warp_id = wgmma_warp_index(), lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        mbar_init(qbar, 1);
        wgmma_ring_init<STAGES>(bars, FW_CONSUMER_WARPS);
    }
    __syncthreads();
    /* shared memory only above; global memory from here (pdl.cuh) */
    forge_pdl_wait();
    forge_pdl_launch_dependents();

    if (warp_id == FW64_PRODUCER_WARP) {
        if (lane == 0 && ntiles > 0)
            fw_produce<D, BN, STAGES>(&tm_q, &tm_k, &tm_v, sq, sring, qbar, bars, q0, h, hk, b, ntiles);
        return;
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
    /* the warpgroup's last row sees keys <= vis: tiles 0..nt-1 (tiles run in key order) */
    const int vis = wrow0 + 63 + diag;
    const int nt = vis < 0 ? 0 : min(ntiles, vis / BN + 1);
    /* the first tile whose last key passes the warpgroup's first row's diagonal or Tk needs the mask, and every
     * later one (a negative numerator truncates toward 0: every tile masked, which is safe) */
    const int first_masked = min((wrow0 + diag + 1) / BN, s.Tk / BN);

    /* tile 0 sets each row's reference (its max); later tiles exponentiate against it (fw_tile_ref) */
    auto tile = [&](int t, bool ref) {
        mbar_wait(bars + 8 * stage, phase);
        const uint32_t kt = sring + stage * cfg::STAGE_BYTES, vt = kt + cfg::KV_BYTES;
        if (ref)
            fw_tile_ref<D, BN>(o, m, l, qa, kt, vt, t >= first_masked, t * BN, row_lo, diag, s.Tk, tq, sl2, c);
        else
            fw_tile<D, BN>(o, m, l, qa, kt, vt, t >= first_masked, t * BN, row_lo, diag, s.Tk, tq, sl2);
        release(stage);
        advance();
    };
    if (nt > 0) tile(0, false);
    for (int t = 1; t < nt; t++) tile(t, true);
    /* tiles this warpgroup's rows do not see: every warpgroup waits for every stage, used or not, so no warp can
     * run a ring round ahead and arrive on an empty barrier's next phase early */
    for (int t = nt; t < ntiles; t++) {
        mbar_wait(bars + 8 * stage, phase);
        release(stage);
        advance();
    }

    if (nt == 0) {
        fw_store<D>(o, m, l, out, lse, s, row_lo, tq, b, h); /* o = 0, l = 0 */
        return;
    }
    /* out through shared memory (the warpgroup's own rows of the Q tile, which only its S read) and a TMA store,
     * not 4-byte stores from the accumulator layout, which hold the warps (and with them the CTA's SM slot) for
     * thousands of cycles: 1.03-1.05x at the issue-18 D = 64 shapes (lab/notes/flash.md, 2026-12-04). The
     * issuing thread waits until the store has read the slice (the CTA's shared memory is freed when it exits) */
    const bool issuer = warp == 0 && lane == 0;
    fw_out_staged<D>(o, m, l, qa, &tm_o, lse, s, c, issuer, warp, g, tq, row_lo, wrow0, b, h);
    if (issuer) tma_store_wait_read<0>();
}

/* the D = 64 kernel's attributes: its shared memory, and the largest carveout, so that two CTAs are resident */
static forge_status fw64_prepare(void) {
    static kernel_attrs_once once;
    CUDA_TRY(kernel_attrs_set(&once, (const void *)fw_fwd64_kernel, (int)fw64_cfg::SMEM, 1));
    return FORGE_OK;
}

static forge_status fw_forward_64(const forge_flash_shape *s, const void *q, const void *k, const void *v, void *out,
                                  float *lse, cudaStream_t st, int pdl) {
    CUtensorMap tq, tk, tv, to;
    FORGE_TRY(fw_encode(&tq, q, s->B, s->Tq, s->H * 64, s->q_stride, FW_BM, "Q", FW_ENTRY));
    FORGE_TRY(fw_encode(&tk, k, s->B, s->Tk, s->Hkv * 64, s->k_stride, FW64_BN, "K", FW_ENTRY));
    FORGE_TRY(fw_encode(&tv, v, s->B, s->Tk, s->Hkv * 64, s->v_stride, 64, "V", FW_ENTRY));
    FORGE_TRY(fw_encode(&to, out, s->B, s->Tq, s->H * 64, s->o_stride, 64, "out", FW_ENTRY));
    const float sl2 = (1.0f / sqrtf(64.0f)) * FW_LOG2E;
    FORGE_TRY(fw64_prepare());
    const int nqt = (s->Tq + FW_BM - 1) / FW_BM;
    const long long ctas = (long long)nqt * s->H * s->B;
    if (ctas > 0x7fffffffLL) /* fw64_tile_of's linear block index is an int */
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: %lld CTAs (B=%d H=%d Tq=%d) exceed the D = 64 forward's int block index; use the "
                           "mma.sync forward",
                           FW_ENTRY, ctas, s->B, s->H, s->Tq);
    dim3 grid((unsigned)nqt, (unsigned)s->H, (unsigned)s->B);
    CUDA_LAUNCH_TRY(forge_pdl_launch(fw_fwd64_kernel, grid, FW64_THREADS, fw64_cfg::SMEM, st, pdl, tq, tk, tv, to,
                                     (fw_bf16 *)out, lse, *s, sl2),
                    "fw_fwd64_kernel");
    return FORGE_OK;
}

/* ---- host ----------------------------------------------------------------------------- */

forge_status fw_encode(CUtensorMap *map, const void *ptr, int B, int T, int cols, long long stride, int box_rows,
                       const char *what, const char *entry) {
    return wgmma_encode_tokens(map, ptr, B, T, cols, stride, box_rows, what, entry, "mma.sync forward");
}

forge_status fw_forward_begin(const char *what, const forge_flash_shape *s, const void *q, const void *k,
                              const void *v, void *out_bf16, float *lse, void *stream, int *launch) {
    *launch = 0;
    const void *ptrs[5] = {q, k, v, out_bf16, lse};
    FORGE_TRY(forge_flash_check_shape(what, s, ptrs, 5));
    if (s->B == 0 || s->Tq == 0) return FORGE_OK;
    if (s->Tk == 0) return forge_flash_bf16_forward_mma(s, q, k, v, out_bf16, lse, stream);
    int dev = 0, major = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major != 9)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: needs an sm_90a (Hopper) device for wgmma/TMA, found compute capability %d.x; use "
                           "the mma.sync forward",
                           what, major);
    *launch = 1;
    return FORGE_OK;
}

extern "C" forge_status forge_flash_bf16_forward_wgmma(const forge_flash_shape *s, const void *q, const void *k,
                                                       const void *v, void *out_bf16, float *lse, void *stream,
                                                       int pdl) {
    int launch = 0;
    FORGE_TRY(fw_forward_begin(FW_ENTRY, s, q, k, v, out_bf16, lse, stream, &launch));
    if (!launch) return FORGE_OK;
    cudaStream_t st = (cudaStream_t)stream;
    return s->D == 64 ? fw_forward_64(s, q, k, v, out_bf16, lse, st, pdl)
                      : fw_forward_sched<128, 128, true>(s, q, k, v, out_bf16, lse, true, st, pdl, FW_ENTRY);
}

extern "C" forge_status forge_flash_bf16_forward_wgmma_occupancy(int D, int *ctas_per_sm) {
    *ctas_per_sm = 0;
    if (D != 64 && D != 128)
        return forge_error(FORGE_ERR_ARG, "%s occupancy: D must be 64 or 128, got %d", FW_ENTRY, D);
    if (D == 64) {
        FORGE_TRY(fw64_prepare());
        CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, (const void *)fw_fwd64_kernel,
                                                               FW64_THREADS, fw64_cfg::SMEM));
        return FORGE_OK;
    }
    typedef fw_ov_cfg<128, 128> cfg128;
    FORGE_TRY((fw_ov_prepare<128, 128, true>()));
    CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, (const void *)fw_fwd_ov_kernel<128, 128, true>,
                                                           FW_THREADS, cfg128::SMEM));
    return FORGE_OK;
}
