/*
 * flash16_bwd_dkdv.cu: the variants of forge's Hopper (sm_90a) bf16 flash
 * backward (src/backend/cuda/flash_attention_bf16_wgmma_bwd.cu, whose header
 * explains the kernels; the shared helpers, the producer and forge's kernels
 * in flash_attention_bf16_wgmma_bwd.cuh), each with forge's dQ kernel:
 * SPLIT (at D = 128 the dK/dV kernel that splits the four products between
 * its two warpgroups, fbl_dkdv_split_kernel<128, 0>; at D = 64 fb_dkdv_kernel<64,
 * 0>, its S-like products' resident operand read from shared memory), PIPE (the
 * split kernel pipelined, fbl_dkdv_split_kernel<128, 1>: forge's D = 128 dK/dV
 * kernel until the thirteenth session; at D = 64 as SPLIT) and RSA (D = 128:
 * the pipelined split kernel with K and V read once into register A fragments,
 * fbl_dkdv_split_kernel<128, 1, 1>; at D = 64 forge's kernels). The dQ variants
 * measured before (pipelined, pinned, register A) are in git history
 * (c4c75a2) and lab/notes/flash.md. Entry: lab_flash16_backward_dkdv
 * (flash16_variants.h).
 */
#include "../../src/backend/cuda/flash_attention_bf16_wgmma_bwd.cuh"

#include "flash16_bwd_three.cuh"
#include "flash16_variants.h"

#define LAB_FB_ENTRY "lab_flash16_backward_dkdv" /* named in errors */

#define FB_SP_BYTES (32 * 128 * 4) /* the split kernel's P^T handoff */

/* Shared memory of fbl_dkdv_split_kernel: K and V as 64-row tensors, the ring, lse/delta, the P^T handoff, the
 * barriers (+ full, empty of P^T); PIPE_SMEM (pipelined): the same with a second P^T buffer and its barriers */
template <int D> struct fbl_split_cfg {
    typedef fb_cfg<D> cfg;
    static constexpr size_t SMEM = 2 * (size_t)cfg::TILE_BYTES +
                                   (size_t)cfg::STAGES * (cfg::STAGE_BYTES + cfg::LD_BYTES) + FB_SP_BYTES +
                                   8 * (1 + 2 * cfg::STAGES + 2) + 1024;
    static constexpr size_t PIPE_SMEM = SMEM + FB_SP_BYTES + 16;
    static_assert(PIPE_SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");
};

__device__ __forceinline__ void fbl_ring_advance(int &stage, uint32_t &phase, int &prev, int stages) {
    prev = stage;
    if (++stage == stages) {
        stage = 0;
        phase ^= 1;
    }
}

/* The P^T handoff between the two consumer warpgroups of the D = 128 split dK/dV kernels goes through
 * mbarriers of count 128 (every thread of the sending warpgroup arrives: mbarrier.arrive releases its
 * shared-memory writes, try_wait acquires them). Per buffer, "full" (P^T written) and "empty" (read); the dK
 * warpgroup arrives on each empty barrier once before its first tile, so the n-th use of a buffer waits for phase
 * n of both barriers (parity n & 1) with no first-tile special case. An earlier version used named barriers
 * (bar.arrive / bar.sync); compute-sanitizer's racecheck reported the handoff as a race under those. */
__device__ __forceinline__ void fbl_handoff_init(uint32_t hb, int n) {
    for (int i = 0; i < n; i++) mbar_init(hb + 8 * i, 128);
}

/* The D = 128 dK/dV kernels (forge's until the thirteenth session, when the consumers' registers grew
 * to 240 with mbar_wait_wide and fb_dkdv_kernel<128> fit): 64 keys per CTA, split by role between the two
 * consumer warpgroups, which own the same 64 keys:
 * warpgroup 1 computes S^T, P^T and dV += P^T.dO and hands P^T (fp32) to warpgroup 2 through shared memory
 * in its own accumulator layout (sp[i * 128 + thread]: conflict-free, and the reader's layout is the same);
 * warpgroup 2 computes dP^T, dS^T = P^T (dP^T - delta) and dK += dS^T.Q. Each thread holds ONE 64-register
 * accumulator: with dK and dV in one warpgroup (the D = 64 kernel) ptxas spilled 150-280 B and serialised
 * every wgmma at D = 128 however the query tile was cut. Same 4 products per tile, two per warpgroup.
 * The handoff is single-buffered: warpgroup 1 waits for "empty" before overwriting sp, warpgroup 2 for "full"
 * before reading (mbarriers, fbl_handoff_init). With 64 keys
 * per CTA every streamed tile holds a visible key (t_first comes from k0), so there is no skip test and both
 * warpgroups run the same barrier sequence. */
/* ---- D = 128 dK/dV, pipelined (PIPE) ---------------------------------------------------------- */

/* Tile it's elementwise step of fbl_dkdv_pipe_consumer on sacc (its S-like product): P^T into buffer it & 1 of sp
 * (ROLE 0) or dS^T from it (ROLE 1); the arithmetic of fbl_dkdv_split_kernel. */
template <int ROLE>
__device__ __forceinline__ void fbl_pipe_elementwise(const fb_kv_block &kb, const forge_flash_shape &s, int it,
                                                    const float *ls, float *sp, uint32_t hb, int key_lo, int tq,
                                                    int tid, float sl2, float (&sacc)[32]) {
    const float *dl = ls + FB_BS;
    const int b = it & 1;
    const uint32_t use = (it >> 1) & 1, full = hb + 8 * b, empty = hb + 16 + 8 * b;
    float *spb = sp + b * (FB_SP_BYTES / 4);
    if (ROLE == 0) {
        const int qt0 = (kb.t_first + it % kb.nq) * FB_BS;
        const bool edge = kb.k0 + 63 > qt0 + kb.diag || qt0 + FB_BS > s.Tq;
        const int vis0 = edge ? key_lo - kb.diag - qt0 : -FB_BIG, vis1 = edge ? key_lo + 8 - kb.diag - qt0 : -FB_BIG;
        const int lim = edge ? s.Tq - qt0 : FB_BIG;
        fb_p_transposed(sacc, ls, tq, sl2, vis0, vis1, lim);
        mbar_wait_wide(empty, use);
#pragma unroll
        for (int i = 0; i < 32; i++) spb[i * 128 + tid] = sacc[i];
        mbar_arrive(full);
    } else {
        mbar_wait_wide(full, use);
#pragma unroll
        for (int n = 0; n < FB_BS / 8; n++) {
            const float2 d2 = *(const float2 *)(dl + n * 8 + 2 * tq);
#pragma unroll
            for (int e = 0; e < 4; e++) /* dS^T / scale */
                sacc[4 * n + e] = spb[(4 * n + e) * 128 + tid] * (sacc[4 * n + e] - ((e & 1) ? d2.y : d2.x));
        }
        mbar_arrive(empty);
    }
}

/* One consumer warpgroup of fbl_dkdv_split_kernel<D, 1>; ROLE 0: S^T -> P^T -> dV (and P^T into sp), ROLE 1:
 * dP^T -> dS^T -> dK. Same products and the same fp32 arithmetic per element as fbl_dkdv_split_kernel, in a
 * software pipeline: tile it's S-like product is issued, then tile it-1's accumulate product (dV += P^T.dO or
 * dK += dS^T.Q, register A from the previous iteration), and wait_group 1 retires the first only, so the
 * elementwise work of tile it (exp2 for P^T; the dS^T arithmetic) runs while the tensor pipe does tile it-1's
 * accumulation. The first tile is peeled and the last accumulation drained after the loop, so the loop body has
 * no branch between an issue and its wait and the same group in flight at every entry (ptxas serialises every
 * wgmma otherwise, C7518). The P^T handoff is double-buffered (tile it in buffer it & 1; fbl_handoff_init's
 * mbarriers, two per buffer), so the P^T warpgroup can run a tile ahead. */
template <int D, int ROLE, int RSA>
__device__ __forceinline__ void fbl_dkdv_pipe_consumer(const fb_kv_block &kb, const forge_flash_shape &s,
                                                      uint32_t res, uint32_t sring, const float *ld_gen, float *sp,
                                                      uint32_t hb, uint32_t resbar, uint32_t bars, int tid, float sl2,
                                                      float (&acc)[D / 2]) {
    typedef fb_cfg<D> cfg;
    constexpr int STAGES = cfg::STAGES;
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    /* the accumulate product's B operand within a stage: dO (ROLE 0) or Q (ROLE 1) */
    constexpr uint32_t B_OFF = ROLE == 0 ? cfg::TILE_BYTES : 0u;
    const int key_lo = kb.k0 + warp * 16 + g;
    if (kb.total == 0) return; /* CTA-uniform: neither warpgroup touches a barrier */
    mbar_wait_wide(resbar, 0);
    uint32_t rf[D / 16][4]; /* RSA: the resident K (ROLE 0) or V (ROLE 1) as A fragments */
    if constexpr (RSA) fb_load_a<D>(rf, res, FB_BS * 128, warp, g, tq);
    if (ROLE == 1) { /* both buffers start empty */
        mbar_arrive(hb + 16);
        mbar_arrive(hb + 24);
    }
    int stage = 0, prev = 0;
    uint32_t phase = 0;
    uint32_t a[4][4]; /* the previous tile's P^T / dS^T as the register A operand */

    { /* tile 0: nothing in flight yet */
        mbar_wait_wide(bars + 8 * stage, phase);
        const uint32_t t0 = sring + stage * cfg::STAGE_BYTES;
        float sacc[32];
        wgmma_fence();
        if constexpr (RSA)
            fb_rs_k<D>(sacc, rf, ROLE == 0 ? t0 : t0 + cfg::TILE_BYTES, 8192);
        else
            fb_ss<D>(sacc, fb_opaque(res), FB_BS * 128, ROLE == 0 ? t0 : t0 + cfg::TILE_BYTES, 8192);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(sacc);
        fbl_pipe_elementwise<ROLE>(kb, s, 0, ld_gen + stage * (2 * FB_BS), sp, hb, key_lo, tq, tid, sl2, sacc);
        fw_to_a<64>(a, sacc);
        fbl_ring_advance(stage, phase, prev, STAGES);
    }
#pragma unroll 1
    for (int it = 1; it < kb.total; it++) {
        mbar_wait_wide(bars + 8 * stage, phase);
        const uint32_t t0 = sring + stage * cfg::STAGE_BYTES;
        float sacc[32];
        wgmma_fence(); /* a was written by ordinary instructions */
        if constexpr (RSA)
            fb_rs_k<D>(sacc, rf, ROLE == 0 ? t0 : t0 + cfg::TILE_BYTES, 8192);
        else
            fb_ss<D>(sacc, fb_opaque(res), FB_BS * 128, ROLE == 0 ? t0 : t0 + cfg::TILE_BYTES, 8192);
        wgmma_commit();
        fb_rs<D>(acc, a, B_OFF + sring + prev * cfg::STAGE_BYTES); /* tile it-1's dV += P^T.dO or dK += dS^T.Q */
        wgmma_commit();
        wgmma_wait<1>(); /* the S-like product of tile it */
        wgmma_fence_operands(sacc);
        fbl_pipe_elementwise<ROLE>(kb, s, it, ld_gen + stage * (2 * FB_BS), sp, hb, key_lo, tq, tid, sl2, sacc);
        wgmma_wait<0>(); /* tile it-1's accumulation: its stage and a are free */
        wgmma_fence_operands(acc);
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + prev));
        fw_to_a<64>(a, sacc);
        fbl_ring_advance(stage, phase, prev, STAGES);
    }
    wgmma_fence();
    fb_rs<D>(acc, a, B_OFF + sring + prev * cfg::STAGE_BYTES);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(bars + 8 * (STAGES + prev));
}

/* PIPE = 0 (the lab's SPLIT variant): the consumers as above; PIPE = 1 (the lab's PIPE): each consumer runs
 * fbl_dkdv_pipe_consumer, with a second 16 KiB P^T buffer. Same producer, ring, 64 keys per CTA, roles, outputs.
 * RSA = 1 (the lab's, PIPE = 1 only): each consumer reads its resident K or V once into register A fragments and
 * issues its S-like product from them, streaming only Q or dO from shared memory. */
template <int D, int PIPE, int RSA = 0>
__global__ void __launch_bounds__(FB_THREADS, 1)
    fbl_dkdv_split_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                         const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                         const __grid_constant__ CUtensorMap tm_rows, const fb_grads grads,
                         forge_flash_shape s, float sl2, float scale) {
    typedef fb_cfg<D> cfg;
    constexpr int STAGES = cfg::STAGES;
    constexpr uint32_t KV_BYTES = FB_BS * D * 2; /* one resident 64-row tensor */
    extern __shared__ __align__(1024) unsigned char fb_smem[];
    const uint32_t base = (smem_u32(fb_smem) + 1023u) & ~1023u;
    const uint32_t sk = base, sv = base + KV_BYTES;
    const uint32_t sring = sv + KV_BYTES;
    const uint32_t sld = sring + STAGES * cfg::STAGE_BYTES;
    constexpr int NB = 1 + PIPE;                       /* P^T buffers */
    const uint32_t ssp = sld + STAGES * cfg::LD_BYTES; /* P^T handoff: NB x 32 x 128 fp32 */
    const uint32_t resbar = ssp + NB * FB_SP_BYTES;
    const uint32_t bars = resbar + 8;
    /* the P^T handoff (fbl_handoff_init): full[b] at hb + 8b, empty[b] at hb + 8 NB + 8b */
    const uint32_t hb = bars + 16 * STAGES, hfull = hb, hempty = hb + 8 * NB;
    const float *ld_gen = (const float *)(fb_smem + (sld - smem_u32(fb_smem)));
    float *sp = (float *)(fb_smem + (ssp - smem_u32(fb_smem)));

    const fb_kv_block kb = fb_kv_block_of(s, FB_BS);
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        fbl_handoff_init(hb, 2 * NB);
        fb_barriers_init(resbar, STAGES); /* its fence covers the handoff barriers too */
    }
    __syncthreads();
    forge_pdl_wait(); /* shared memory only above; global memory from here (pdl.cuh) */
    forge_pdl_launch_dependents();

    if (wg == 0) {
        wgmma_setmaxnreg_dec<FB_PRODUCER_REGS>();
        fb_kv_produce<D, FB_BS>(kb, s, &tm_k, &tm_v, &tm_q, &tm_do, &tm_rows, sk, sv, sring, sld, resbar,
                                bars);
        return;
    }

    wgmma_setmaxnreg_inc<FB_CONSUMER_REGS>();
    const int c = wg - 1; /* 0: S^T, P^T, dV; 1: dP^T, dS^T, dK */
    const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    /* this thread's keys: key_lo, key_lo + 8 (computed where each variant's measured build had it) */
    int key_lo = 0;
    if constexpr (!PIPE) key_lo = kb.k0 + warp * 16 + g;
    const int diag = kb.diag;

    static_assert(PIPE || !RSA, "RSA is written for the pipelined consumers");
    float acc[D / 2]; /* dV (c = 0) or dK (c = 1) */
#pragma unroll
    for (int i = 0; i < D / 2; i++) acc[i] = 0.0f;

    if constexpr (PIPE) {
        if (c == 0)
            fbl_dkdv_pipe_consumer<D, 0, RSA>(kb, s, sk, sring, ld_gen, sp, hb, resbar, bars, tid, sl2, acc);
        else
            fbl_dkdv_pipe_consumer<D, 1, RSA>(kb, s, sv, sring, ld_gen, sp, hb, resbar, bars, tid, sl2, acc);
        key_lo = kb.k0 + warp * 16 + g;
    } else {
    if (kb.total > 0) mbar_wait_wide(resbar, 0);
    if (c == 1) mbar_arrive(hempty); /* sp starts empty */
    const uint32_t res = c == 0 ? sk : sv; /* the A operand of this warpgroup's S-like product */
    int stage = 0;
    uint32_t phase = 0;
    for (int it = 0; it < kb.total; it++) {
        const int qt0 = (kb.t_first + it % kb.nq) * FB_BS;
        mbar_wait_wide(bars + 8 * stage, phase);
        const uint32_t qt = sring + stage * cfg::STAGE_BYTES, dt = qt + cfg::TILE_BYTES;
        const float *ls = ld_gen + stage * (2 * FB_BS), *dl = ls + FB_BS;
        float sacc[32]; /* S^T (c = 0) or dP^T (c = 1) */
        wgmma_fence();
        fb_ss<D>(sacc, fb_opaque(res), FB_BS * 128, c == 0 ? qt : dt, 8192); /* K.Q^T or V.dO^T */
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(sacc);
        if (c == 0) {
            const bool edge = kb.k0 + 63 > qt0 + diag || qt0 + FB_BS > s.Tq;
            const int vis0 = edge ? key_lo - diag - qt0 : -FB_BIG, vis1 = edge ? key_lo + 8 - diag - qt0 : -FB_BIG;
            const int lim = edge ? s.Tq - qt0 : FB_BIG;
            fb_p_transposed(sacc, ls, tq, sl2, vis0, vis1, lim);
            mbar_wait_wide(hempty, it & 1);
#pragma unroll
            for (int i = 0; i < 32; i++) sp[i * 128 + tid] = sacc[i];
            mbar_arrive(hfull);
        } else {
            mbar_wait_wide(hfull, it & 1);
#pragma unroll
            for (int n = 0; n < FB_BS / 8; n++) {
                const float2 d2 = *(const float2 *)(dl + n * 8 + 2 * tq);
#pragma unroll
                for (int e = 0; e < 4; e++) /* dS^T / scale */
                    sacc[4 * n + e] = sp[(4 * n + e) * 128 + tid] * (sacc[4 * n + e] - ((e & 1) ? d2.y : d2.x));
            }
            mbar_arrive(hempty);
        }
        uint32_t a[4][4];
        fw_to_a<64>(a, sacc);
        wgmma_fence(); /* acc and a were written by ordinary instructions */
        fb_rs<D>(acc, a, c == 0 ? dt : qt); /* dV += P^T.dO or dK += dS^T.Q */
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(acc);
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + stage));
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }
    }

    void *out = c == 0 ? grads.dv : grads.dk;
    const long long stride = c == 0 ? grads.dv_stride : grads.dk_stride;
    const float f = c == 0 ? 1.0f : scale;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = key_lo + r * 8;
        if (key >= s.Tk) continue;
        const size_t token = (size_t)kb.b * s.Tk + key;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            fb_grad_store2(grads, out, stride, token, s.Hkv, kb.hk, D, n * 8 + 2 * tq, acc[4 * n + 2 * r] * f,
                           acc[4 * n + 2 * r + 1] * f);
    }
}

/* the D = 128 dK/dV kernel split by role between the consumers: 64 keys per CTA; PIPE = 1 pipelined */
template <int D, int PIPE, int RSA = 0> static forge_status fbl_launch_dkdv_split(const fb_call &c) {
    constexpr size_t smem = PIPE ? fbl_split_cfg<D>::PIPE_SMEM : fbl_split_cfg<D>::SMEM;
    CUDA_TRY(cudaFuncSetAttribute(fbl_dkdv_split_kernel<D, PIPE, RSA>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem));
    dim3 gk((unsigned)((c.s.Tk + FB_BS - 1) / FB_BS), (unsigned)c.s.Hkv, (unsigned)c.s.B);
    CUDA_LAUNCH_TRY(forge_pdl_launch(fbl_dkdv_split_kernel<D, PIPE, RSA>, gk, FB_THREADS, smem, c.st, c.pdl, c.k_str,
                                     c.v_str, c.q_str, c.do_str, c.rows_map, c.g, c.s, c.sl2, c.scale),
                    PIPE ? "fbl_dkdv_split_kernel<128, pipelined>" : "fbl_dkdv_split_kernel<128>");
    return FORGE_OK;
}

extern "C" forge_status lab_flash16_backward_dkdv(const forge_flash_shape *s, const void *q, const void *k,
                                                  const void *v, const void *out_bf16, const void *dout_bf16,
                                                  const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                  int dkdv, void *stream) {
    if (dkdv < LAB_FLASH16_DKDV_SPLIT || dkdv > LAB_FLASH16_DKDV_RSA)
        return forge_error(FORGE_ERR_ARG,
                           "%s: backward variant %d (expected LAB_FLASH16_DKDV_SPLIT, _PIPE or _RSA)", LAB_FB_ENTRY,
                           dkdv);
    int launch = 0;
    FORGE_TRY(fb_backward_begin(LAB_FB_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, &launch));
    if (!launch) return FORGE_OK;
    fb_call c;
    FORGE_TRY(
        fb_backward_prepare(&c, LAB_FB_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream, 0));
    const int d128 = c.s.D == 128;
    FORGE_TRY(fb_launch_dq_default(c));
    switch (dkdv) {
    case LAB_FLASH16_DKDV_SPLIT:
        return d128 ? fbl_launch_dkdv_split<128, 0>(c) : fb_launch_dkdv<64, 0>(c);
    case LAB_FLASH16_DKDV_PIPE:
        return d128 ? fbl_launch_dkdv_split<128, 1>(c) : fb_launch_dkdv<64, 0>(c);
    default: /* LAB_FLASH16_DKDV_RSA */
        return d128 ? fbl_launch_dkdv_split<128, 1, 1>(c) : fb_launch_dkdv_default(c);
    }
}
