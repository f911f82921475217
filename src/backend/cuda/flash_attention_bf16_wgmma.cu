/*
 * flash_attention_bf16_wgmma.cu: the Hopper (sm_90a) forward of forge's bf16
 * flash attention on TMA + wgmma, FA3-style (entry and contract in
 * flash_attention_bf16.h, notes in lab/notes/flash-attention.md). Same results
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
 * - The consumers wait for S, do the softmax, then wait for O += P.V (the
 *   BASE schedule); the lab holds the other consumer schedules of this
 *   forward (softmax under the previous tile's P.V, ping-pong between the
 *   warpgroups, persistent CTAs), which share this file's CTA, ring and
 *   epilogue (flash_attention_bf16_wgmma_fwd.cuh).
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
#include "flash_wgmma_common.cuh"
#include "pdl.cuh"
#include "wgmma_common.cuh"
#include "wgmma_tmap.h"

extern "C" {
#include "flash_attention_bf16.h"
}

#define FW_PRODUCER_REGS 24
#define FW_CONSUMER_REGS 240
#define FW_ENTRY "forge_flash_bf16_forward_wgmma" /* named in errors */

/* BN keys per streamed tile: 128 at D=64, 64 at D=128 (S + O + P must fit the consumer registers) */
template <int D> struct fw_cfg {
    static constexpr int BN = D == 64 ? 128 : 64;
    static constexpr int STAGES = 4;
    static constexpr uint32_t Q_BYTES = FW_BM * D * 2;
    static constexpr uint32_t KV_BYTES = BN * D * 2; /* one of K or V */
    static constexpr uint32_t STAGE_BYTES = 2 * KV_BYTES;
    /* Q, the ring, then qbar, full[STAGES], empty[STAGES]; 1 KiB slack to align the base to 1024 B */
    static constexpr size_t SMEM = Q_BYTES + (size_t)STAGES * STAGE_BYTES + 8 * (1 + 2 * STAGES) + 1024;
    static_assert(SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");
    static_assert(D == 64 || D == 128, "compiled head dims");
};

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

template <int D>
__global__ void __launch_bounds__(FW_THREADS, 1)
    fw_fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                  const __grid_constant__ CUtensorMap tm_v, fw_bf16 *__restrict__ out, float *__restrict__ lse,
                  forge_flash_shape s, float sl2) {
    typedef fw_cfg<D> cfg;
    constexpr int STAGES = cfg::STAGES;
    constexpr int FW_BN = cfg::BN;
    uint32_t sq, sring, qbar;
    fw_smem_layout<cfg>(sq, sring, qbar);
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
    /* shared memory only above; global memory from here (pdl.cuh) */
    forge_pdl_wait();
    forge_pdl_launch_dependents();

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
            fw_issue_qk<D, FW_BN>(sc, qa, kt);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operands(sc);

            if (k0 + FW_BN - 1 > wrow0 + diag || k0 + FW_BN > s.Tk) fw_mask<FW_BN>(sc, k0, row_lo, diag, s.Tk, tq);

#pragma unroll
            for (int r = 0; r < 2; r++) {
                float alpha;
                fw_softmax_row<FW_BN>(sc, m[r], l[r], alpha, r, sl2);
#pragma unroll
                for (int n = 0; n < D / 8; n++) {
                    o[4 * n + 2 * r] *= alpha;
                    o[4 * n + 2 * r + 1] *= alpha;
                }
            }

            uint32_t pa[FW_BN / 16][4];
            fw_to_a<FW_BN>(pa, sc);
            wgmma_fence(); /* o and pa were written by ordinary instructions */
            fw_issue_pv<D, FW_BN>(o, pa, vt);
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

template <int D>
static forge_status fw_forward_t(const forge_flash_shape *s, const void *q, const void *k, const void *v, void *out,
                                 float *lse, cudaStream_t st, int pdl) {
    CUtensorMap tq, tk, tv;
    FORGE_TRY(fw_encode(&tq, q, s->B, s->Tq, s->H * D, s->q_stride, FW_BM, "Q", FW_ENTRY));
    FORGE_TRY(fw_encode(&tk, k, s->B, s->Tk, s->Hkv * D, s->k_stride, fw_cfg<D>::BN, "K", FW_ENTRY));
    FORGE_TRY(fw_encode(&tv, v, s->B, s->Tk, s->Hkv * D, s->v_stride, 64, "V", FW_ENTRY));
    const float sl2 = (1.0f / sqrtf((float)D)) * FW_LOG2E;
    constexpr size_t smem = fw_cfg<D>::SMEM;
    CUDA_TRY(cudaFuncSetAttribute(fw_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((s->Tq + FW_BM - 1) / FW_BM), (unsigned)s->H, (unsigned)s->B);
    CUDA_LAUNCH_TRY(forge_pdl_launch(fw_fwd_kernel<D>, grid, FW_THREADS, smem, st, pdl, tq, tk, tv, (fw_bf16 *)out, lse,
                                     *s, sl2),
                    D == 64 ? "fw_fwd_kernel<64>" : "fw_fwd_kernel<128>");
    return FORGE_OK;
}

extern "C" forge_status forge_flash_bf16_forward_wgmma(const forge_flash_shape *s, const void *q, const void *k,
                                                       const void *v, void *out_bf16, float *lse, void *stream,
                                                       int pdl) {
    int launch = 0;
    FORGE_TRY(fw_forward_begin(FW_ENTRY, s, q, k, v, out_bf16, lse, stream, &launch));
    if (!launch) return FORGE_OK;
    cudaStream_t st = (cudaStream_t)stream;
    return s->D == 64 ? fw_forward_t<64>(s, q, k, v, out_bf16, lse, st, pdl)
                      : fw_forward_t<128>(s, q, k, v, out_bf16, lse, st, pdl);
}
