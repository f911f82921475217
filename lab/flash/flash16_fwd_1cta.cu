/*
 * flash16_fwd_1cta.cu: the Hopper (sm_90a) bf16 flash forward with ONE CTA per
 * SM and no softmax / P.V overlap (lab): fw_fwd_kernel<D>, a producer
 * warpgroup and two consumer warpgroups under setmaxnreg 24 / 240, 4 stages;
 * 128-key tiles at D = 64 (144 KiB of shared memory), 64-key tiles at D = 128
 * (161 KiB). Each consumer waits for S = Q.K^T, does the softmax, then waits
 * for O += P.V (fw_tile). forge ran it until its two-CTA kernel (D = 64,
 * 1.35-1.48x) and its scheduled kernel (D = 128, flash_attention_bf16_wgmma_
 * fwd_sched.cuh, 1.13x) replaced it (lab/notes/flash.md); it stays here as
 * their baseline (cell flash_bf16_fwd_wgmma_1cta). Entry:
 * lab_flash16_forward_1cta (flash16_variants.h).
 */
#include <math.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "../../src/backend/cuda/cuda_check.h"
#include "../../src/backend/cuda/flash_attention_bf16_wgmma_fwd.cuh"
#include "../../src/backend/cuda/pdl.cuh"

#include "flash16_variants.h"

#define LAB_FW1_ENTRY "lab_flash16_forward_1cta" /* named in errors */

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
    const int ntiles = flash_key_tiles(s.Tk, diag, q0, FW_BM, FW_BN);
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

extern "C" forge_status lab_flash16_forward_1cta(const forge_flash_shape *s, const void *q, const void *k,
                                                 const void *v, void *out_bf16, float *lse, void *stream) {
    int launch = 0;
    FORGE_TRY(fw_forward_begin(LAB_FW1_ENTRY, s, q, k, v, out_bf16, lse, stream, &launch));
    if (!launch) return FORGE_OK;
    return s->D == 64 ? fw_forward_1cta<64>(s, q, k, v, out_bf16, lse, (cudaStream_t)stream, 0, LAB_FW1_ENTRY)
                      : fw_forward_1cta<128>(s, q, k, v, out_bf16, lse, (cudaStream_t)stream, 0, LAB_FW1_ENTRY);
}
