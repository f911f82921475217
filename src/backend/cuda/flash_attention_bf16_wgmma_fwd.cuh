/*
 * flash_attention_bf16_wgmma_fwd.cuh: what the Hopper (sm_90a) forward kernels
 * of forge's bf16 flash attention share: the CTA shape (two consumer
 * warpgroups of 64 query rows, 128 query rows per CTA, and a producer), the
 * shared-memory layout, the producer's K/V tile step, the consumers' steps
 * (S = Q.K^T, the mask, the online softmax, O += P.V) and epilogue, the host
 * steps every entry runs before it launches, and the one-CTA-per-SM kernel
 * (fw_fwd_kernel<D>: forge's at D = 128, the lab's baseline at D = 64) with
 * its launch. Included by flash_attention_bf16_wgmma.cu (the forward forge
 * runs, whose header explains the design) and by the lab's other schedules.
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

/* Online softmax of row r (0: the thread's row g, 1: row g + 8) of one S tile in place, in the log2 domain with
 * scale*log2(e) folded into one FMA: the running max m and sum l updated, sc = exp2(s * sl2 - m), alpha the factor
 * the row's earlier O is to be scaled by (l already is). Row max/sum over the quad (shfl 1, 2); a row
 * max of -inf (nothing visible yet) is used as 0 so exp2 never sees inf - inf. */
template <int BN>
__device__ __forceinline__ void fw_softmax_row(float (&sc)[BN / 2], float &m, float &l, float &alpha, int r,
                                               float sl2) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < BN / 8; n++) mx = fmaxf(mx, fmaxf(sc[4 * n + 2 * r], sc[4 * n + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mnew = fmaxf(m, mx * sl2);
    const float muse = mnew == -INFINITY ? 0.0f : mnew;
    alpha = fw_ex2(m - muse);
    m = mnew;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < BN / 8; n++) {
        sc[4 * n + 2 * r] = fw_ex2(fmaf(sc[4 * n + 2 * r], sl2, -muse));
        sc[4 * n + 2 * r + 1] = fw_ex2(fmaf(sc[4 * n + 2 * r + 1], sl2, -muse));
        sum += sc[4 * n + 2 * r] + sc[4 * n + 2 * r + 1];
    }
    l = l * alpha + sum;
}

/* One K/V tile of a consumer warpgroup (K at kt, V at vt; keys k0..): S = Q.K^T, the mask where `masked`, the online
 * softmax of the thread's two rows with O rescaled, O += P.V; waits for both products. Both forward kernels run it. */
template <int D, int BN>
__device__ __forceinline__ void fw_tile(float (&o)[D / 2], float (&m)[2], float (&l)[2], uint32_t qa, uint32_t kt,
                                        uint32_t vt, bool masked, int k0, int row_lo, int diag, int Tk, int tq,
                                        float sl2) {
    float sc[BN / 2];
    wgmma_fence();
    fw_issue_qk<D, BN>(sc, qa, kt);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(sc);
    if (masked) fw_mask<BN>(sc, k0, row_lo, diag, Tk, tq);
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
    uint32_t pa[BN / 16][4];
    fw_to_a<BN>(pa, sc);
    wgmma_fence(); /* o and pa were written by ordinary instructions */
    fw_issue_pv<D, BN>(o, pa, vt);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(o);
}

/* ---- the one-CTA-per-SM forward: what forge runs at D = 128 (the lab instantiates it at D = 64 as the
 * baseline of the two-CTA kernel that replaced it there) ------------------------------------------------------ */

#define FW_PRODUCER_REGS 24
#define FW_CONSUMER_REGS 240

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
            const bool masked = k0 + FW_BN - 1 > wrow0 + diag || k0 + FW_BN > s.Tk;
            fw_tile<D, FW_BN>(o, m, l, qa, kt, vt, masked, k0, row_lo, diag, s.Tk, tq, sl2);
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

/* the one-CTA forward at head dim D (launched with PDL when pdl; `entry` named in errors) */
template <int D>
static forge_status fw_forward_1cta(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                    void *out, float *lse, cudaStream_t st, int pdl, const char *entry) {
    CUtensorMap tq, tk, tv;
    FORGE_TRY(fw_encode(&tq, q, s->B, s->Tq, s->H * D, s->q_stride, FW_BM, "Q", entry));
    FORGE_TRY(fw_encode(&tk, k, s->B, s->Tk, s->Hkv * D, s->k_stride, fw_cfg<D>::BN, "K", entry));
    FORGE_TRY(fw_encode(&tv, v, s->B, s->Tk, s->Hkv * D, s->v_stride, 64, "V", entry));
    const float sl2 = (1.0f / sqrtf((float)D)) * FW_LOG2E;
    constexpr size_t smem = fw_cfg<D>::SMEM;
    CUDA_TRY(cudaFuncSetAttribute(fw_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((s->Tq + FW_BM - 1) / FW_BM), (unsigned)s->H, (unsigned)s->B);
    CUDA_LAUNCH_TRY(forge_pdl_launch(fw_fwd_kernel<D>, grid, FW_THREADS, smem, st, pdl, tq, tk, tv, (fw_bf16 *)out, lse,
                                     *s, sl2),
                    D == 64 ? "fw_fwd_kernel<64>" : "fw_fwd_kernel<128>");
    return FORGE_OK;
}


#endif
