/*
 * flash_attention_bf16_wgmma_bwd.cuh: the kernels of the Hopper (sm_90a)
 * backward of forge's bf16 flash attention on TMA + wgmma and their launch
 * steps, shared by flash_attention_bf16_wgmma_bwd.cu (the kernels forge runs,
 * the entry forge_flash_bf16_backward_wgmma; its header explains the design)
 * and the lab (its variants build on these helpers: lab/flash/). Instances
 * forge runs: fb_dq_kernel<64>, fb_dkdv_kernel<64, 1>, and at D = 128 the fused
 * kernel (flash_attention_bf16_wgmma_bwd_fused.cu) on fb_dkdv_kernel<128, 0>'s
 * tile; the lab also runs fb_dq_kernel<128> and fb_dkdv_kernel<128, 0> (the
 * three-kernel backward at D = 128, the fused one's reference) and
 * fb_dkdv_kernel<64, 0> (K and V read from shared memory by every product).
 * Every wait is
 * mbar_wait_wide (wgmma_common.cuh). Every kernel sets up its barriers, then
 * waits for the previous kernel (forge_pdl_wait, pdl.cuh) before any global
 * access, so the launchers may pass fb_call.pdl (programmatic dependent launch).
 */
#ifndef FORGE_FLASH_ATTENTION_BF16_WGMMA_BWD_CUH
#define FORGE_FLASH_ATTENTION_BF16_WGMMA_BWD_CUH

#include <math.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "flash_wgmma_common.cuh"
#include "kernel_attrs.h"
#include "pdl.cuh"
#include "wgmma_common.cuh"

extern "C" {
#include "flash_attention_bf16.h"
}

#define FB_THREADS 384 /* producer warpgroup + 2 consumer warpgroups */
#define FB_BR 128      /* resident rows per CTA (queries in dQ, keys in dK/dV): 64 per consumer */
#define FB_BS 64       /* streamed rows per tile (keys in dQ, queries in dK/dV); see the header */
#define FB_CONSUMER_WARPS 8
#define FB_PRODUCER_REGS 24
#define FB_CONSUMER_REGS 240
#define FB_LOG2E 1.4426950408889634f

/* Where the kernels store dq, dk, dv (forge_flash_grads, flash_attention_bf16.h, by value in the kernel
 * parameters). */
typedef forge_flash_grads fb_grads;

/* The bf16 pair (low half x, high half y) rn(old + x), rn(old' + y) of the bf16 pair old (0: rn(0 + d)), __fadd_rn:
 * never contracted with the product that made d, so the bits are those of the fp32 store and then the add pass. */
__device__ __forceinline__ uint32_t fb_bf16x2_add(uint32_t old, float x, float y) {
    const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(__fadd_rn(__uint_as_float(old << 16), x)));
    const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(__fadd_rn(__uint_as_float(old & 0xffff0000u), y)));
    return lo | hi << 16;
}

/* (x, y) = d at columns col, col + 1 of head h of token row `token` (b * T + row) of the gradient at p: fp32 dense
 * rows of `heads` heads, or bf16 at `stride` elements a token, rn(0 + d) or rn(old + d) (fb_bf16x2_add). */
__device__ __forceinline__ void fb_grad_store2(const fb_grads &g, void *p, long long stride, size_t token, int heads,
                                               int h, int D, int col, float x, float y) {
    if (!g.bf16) {
        *(float2 *)((float *)p + (token * heads + h) * D + col) = make_float2(x, y);
        return;
    }
    uint32_t *dst = (uint32_t *)((uint16_t *)p + token * stride + (size_t)h * D + col);
    *dst = fb_bf16x2_add(g.accumulate ? *dst : 0u, x, y);
}
/* "No bound" for the branch-free masks: the P / P^T loops run while the dP / dP^T wgmma is in flight, and the
 * natural `if (edge) { if (masked) p = 0; }` puts branches between a wgmma and its wait (measured: with them
 * ptxas spilled 4-24 B in fb_dq_kernel<128>; without, none). The masks are selects against per-thread bounds
 * that are FB_BIG ("none") on interior tiles. */
#define FB_BIG (1 << 30)

/* The backward's row statistics (forge_flash_bf16_backward_rowstats, FORGE_FLASH_BF16_ROWSTATS floats): the
 * lse*log2e plane (-inf -> 0: such a row is masked everywhere), then the delta plane, each (B, H) rows of Tq
 * padded to FORGE_FLASH_BF16_ROWS_PAD with zeros, so a 64-query tile's 64 + 64 floats are one box of the rows'
 * tensor map (fb_encode_rows: 64 floats x 1 row x 2 planes) and every row a CTA touches exists. fb_rows_at: row
 * `row` of head h, batch b. */
__device__ __forceinline__ size_t fb_rows_tpad(const forge_flash_shape &s) {
    return FORGE_FLASH_BF16_ROWS_TPAD(s.Tq);
}
__device__ __forceinline__ size_t fb_rows_plane(const forge_flash_shape &s) {
    return (size_t)s.B * s.H * fb_rows_tpad(s);
}
__device__ __forceinline__ size_t fb_rows_at(const forge_flash_shape &s, int b, int h, int row) {
    return ((size_t)b * s.H + h) * fb_rows_tpad(s) + row;
}

template <int D> struct fb_cfg {
    static constexpr int DH = D / 64;                      /* 64-column boxes per row */
    static constexpr uint32_t RES_BYTES = FB_BR * D * 2;   /* one resident tensor (Q or dO; K or V) */
    static constexpr uint32_t TILE_BYTES = FB_BS * D * 2;  /* one streamed tensor */
    static constexpr uint32_t STAGE_BYTES = 2 * TILE_BYTES; /* K + V (dQ) or Q + dO (dK/dV) */
    static constexpr int STAGES = 4;
    /* resident pair, ring, lse/delta slots (dK/dV: 2 x 64 floats per stage), then the barriers: resbar,
     * full[STAGES], empty[STAGES]; 1 KiB slack to align the base to 1024 B */
    static constexpr uint32_t LD_BYTES = 2 * FB_BS * 4;
    static constexpr size_t SMEM =
        2 * (size_t)RES_BYTES + (size_t)STAGES * (STAGE_BYTES + LD_BYTES) + 8 * (1 + 2 * STAGES) + 1024;
    static_assert(SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");
    static_assert(D == 64 || D == 128, "compiled head dims");
};

/* S (64 x 64 fp32) = (_first: write-only, scale-d false) or += A (64x16, smem desc) . B (64x16, smem desc)^T;
 * MN = 0: both operands K-major (forge's kernels), MN = 1: both MN-major (imm-trans-a and imm-trans-b set). The
 * first k16 step does not name d as an input: with "+f" on a fresh array the compiler would see the previous
 * tile's (dead) values as read, and keep them live around the loop. The flags are spelled in the instruction
 * text (not "n" operands, which moved an unrelated instruction in ptxas's input). */
#define FB_WGMMA_N64_FIRST(trans)                                                                               \
    "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"                                                                  \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS32 "}, %32, %33, p, 1, 1, " trans ";\n}\n"
#define FB_WGMMA_N64(trans)                                                                                     \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS32 "}, %32, %33, 1, 1, 1, " trans ";\n"

template <int MN = 0>
__device__ __forceinline__ void fb_wgmma_ss_n64_first(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
    if constexpr (MN)
        asm volatile(FB_WGMMA_N64_FIRST("1, 1") : WG_OUT32 : "l"(desc_a), "l"(desc_b));
    else
        asm volatile(FB_WGMMA_N64_FIRST("0, 0") : WG_OUT32 : "l"(desc_a), "l"(desc_b));
}

template <int MN = 0>
__device__ __forceinline__ void fb_wgmma_ss_n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
    if constexpr (MN)
        asm volatile(FB_WGMMA_N64("1, 1") : WG_ACC32 : "l"(desc_a), "l"(desc_b));
    else
        asm volatile(FB_WGMMA_N64("0, 0") : WG_ACC32 : "l"(desc_a), "l"(desc_b));
}

/* S (64 x 64 fp32) = A (64 x D, K-major at a, row stride as the resident 128-row boxes) . B^T (B: the
 * streamed 64 x D tile at b, K-major). a_box / b_box: bytes between 64-column boxes. */
template <int D>
__device__ __forceinline__ void fb_ss(float (&d)[32], uint32_t a, uint32_t a_box, uint32_t b, uint32_t b_box) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint64_t da = wgmma_desc(a + (kk / 4) * a_box + (kk % 4) * 32);
        const uint64_t db = wgmma_desc(b + (kk / 4) * b_box + (kk % 4) * 32);
        if (kk == 0)
            fb_wgmma_ss_n64_first(d, da, db);
        else
            fb_wgmma_ss_n64(d, da, db);
    }
}

/* Resident A (RSA kernels): S (64 x 64 fp32) = A (64 x D bf16 fragments in registers, fb_load_a) .
 * B^T (the streamed 64 x D tile at b, K-major, 64-column boxes b_box bytes apart). With A in registers the
 * product streams only B from shared memory: an SS m64n64k16 reads 4 KiB in the 32 cycles the tensor pipe
 * takes for it, the whole 128 B/clk of an SM's shared memory. */
#define FB_WGMMA_RS_N64_FIRST                                                                                   \
    "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"                                                                  \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS32 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
#define FB_WGMMA_RS_N64                                                                                         \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS32 "}, {%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"

template <int D>
__device__ __forceinline__ void fb_rs_k(float (&d)[32], const uint32_t (&a)[D / 16][4], uint32_t b, uint32_t b_box) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint64_t db = wgmma_desc(b + (kk / 4) * b_box + (kk % 4) * 32);
        if (kk == 0)
            asm volatile(FB_WGMMA_RS_N64_FIRST
                         : WG_OUT32
                         : "r"(a[kk][0]), "r"(a[kk][1]), "r"(a[kk][2]), "r"(a[kk][3]), "l"(db));
        else
            asm volatile(FB_WGMMA_RS_N64
                         : WG_ACC32
                         : "r"(a[kk][0]), "r"(a[kk][1]), "r"(a[kk][2]), "r"(a[kk][3]), "l"(db));
    }
}

/* The thread's register A fragments (D / 16 k16 steps, fw_to_a's layout) of the 64 rows at `rows` of a resident
 * operand stored as TMA writes it: 64-column boxes of 128-byte rows, 128B-swizzled (the 16-byte chunk index
 * XOR the row's index within its 1024-byte group), box_stride bytes apart. Read once per CTA. */
template <int D>
__device__ __forceinline__ void fb_load_a(uint32_t (&a)[D / 16][4], uint32_t rows, uint32_t box_stride, int warp,
                                          int g, int tq) {
    const uint32_t r0 = rows + (uint32_t)(warp * 16 + g) * 128 + 4 * tq, r1 = r0 + 8 * 128; /* both rows = g mod 8 */
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t box = (kk / 4) * box_stride, c0 = (uint32_t)((2 * (kk % 4)) ^ g) * 16,
                       c1 = (uint32_t)((2 * (kk % 4) + 1) ^ g) * 16;
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(a[kk][0]) : "r"(r0 + box + c0));
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(a[kk][1]) : "r"(r1 + box + c0));
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(a[kk][2]) : "r"(r0 + box + c1));
        asm volatile("ld.shared.b32 %0, [%1];" : "=r"(a[kk][3]) : "r"(r1 + box + c1));
    }
}

/* acc (64 x D fp32) += A (64 x 64 bf16 fragments, 4 k16 steps) . B (the streamed 64-row tile at b, MN-major) */
template <int D> __device__ __forceinline__ void fb_rs(float (&acc)[D / 2], const uint32_t (&a)[4][4], uint32_t b) {
#pragma unroll
    for (int kk = 0; kk < FB_BS / 16; kk++) fw_pv<D>(acc, a[kk], wgmma_desc_mn(b + kk * 2048));
}

/* x, hidden from the compiler's loop-invariant code motion: descriptors built from the resident tiles' addresses
 * would otherwise be hoisted out of the tile loop and hold 2 registers each across it */
__device__ __forceinline__ uint32_t fb_opaque(uint32_t x) {
    asm volatile("mov.b32 %0, %0;" : "+r"(x));
    return x;
}

/* The resident pair's barrier and the ring's: full[st] completes on the producer's one arrive.expect_tx and the
 * bytes, empty[st] on one arrive of each consumer warp. */
__device__ __forceinline__ void fb_barriers_init(uint32_t bars, int stages) {
    mbar_init(bars, 1); /* the resident pair */
    for (int st = 0; st < stages; st++) {
        mbar_init(bars + 8 + 8 * st, 1);
        mbar_init(bars + 8 + 8 * (stages + st), FB_CONSUMER_WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* ---- dQ over query blocks ---------------------------------------------------------------- */

/* dQ kernel, one tile: issue S = Q.K^T and dP = dO.V^T (K, V of the stage at kt) as two commit groups */
template <int D>
__device__ __forceinline__ void fb_dq_tile_sdp(float (&sc)[32], float (&dp)[32], uint32_t qa, uint32_t doa,
                                               uint32_t kt) {
    wgmma_fence();
    fb_ss<D>(sc, fb_opaque(qa), FB_BR * 128, kt, 8192);
    wgmma_commit();
    fb_ss<D>(dp, fb_opaque(doa), FB_BR * 128, kt + fb_cfg<D>::TILE_BYTES, 8192);
    wgmma_commit();
}

/* dQ kernel: P = exp2(S sl2 - lse2) with the branch-free causal / key-bound mask of the tile at key k0
 * (column j = key - k0 is visible to row r iff j <= vis[r] and j < lim; FB_BIG bounds on interior tiles) */
__device__ __forceinline__ void fb_dq_p(float (&sc)[32], int k0, int wrow0, int row_lo, int diag, int Tk, int tq,
                                        float sl2, const float (&lse2)[2]) {
    const bool edge = k0 + FB_BS - 1 > wrow0 + diag || k0 + FB_BS > Tk;
    const int vis0 = edge ? row_lo + diag - k0 : FB_BIG, vis1 = edge ? row_lo + 8 + diag - k0 : FB_BIG;
    const int lim = edge ? Tk - k0 : FB_BIG;
#pragma unroll
    for (int n = 0; n < FB_BS / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = n * 8 + 2 * tq + (e & 1);
            const float p = fw_ex2(fmaf(sc[4 * n + e], sl2, -lse2[e >> 1]));
            sc[4 * n + e] = (j > ((e >> 1) ? vis1 : vis0) || j >= lim) ? 0.0f : p;
        }
}

/* A dQ consumer thread's rows row_lo, row_lo + 8 of head h, batch b: lse*log2e and delta from the packed row
 * statistics (fb_rows_at; every row a dQ CTA owns is below the padded length) */
__device__ __forceinline__ void fb_dq_rows(const float *__restrict__ rows, const forge_flash_shape &s, int b, int h,
                                           int row_lo, float (&lse2)[2], float (&dlt)[2]) {
    const size_t at = fb_rows_at(s, b, h, row_lo), plane = fb_rows_plane(s);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lse2[r] = rows[at + r * 8];
        dlt[r] = rows[plane + at + r * 8];
    }
}

/* dQ (times scale) of those rows (the ones < Tq) from the thread's accumulator fragment */
template <int D>
__device__ __forceinline__ void fb_dq_store(const fb_grads &grads, const float (&acc)[D / 2], const forge_flash_shape &s,
                                            int b, int h, int row_lo, int tq, float scale) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row_lo + r * 8;
        if (row >= s.Tq) continue;
        const size_t token = (size_t)b * s.Tq + row;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            fb_grad_store2(grads, grads.dq, grads.dq_stride, token, s.H, h, D, n * 8 + 2 * tq, acc[4 * n + 2 * r] * scale,
                           acc[4 * n + 2 * r + 1] * scale);
    }
}

/* dQ over 128 queries per CTA (64 per consumer warpgroup): per key tile S and dP, then dS and dQ += dS.K, each
 * product waited before the next step. (Measured and not kept, lab/notes/flash.md: the same consumer
 * software-pipelined, with or without P and dS pinned before the next wait, and with Q and dO as register A
 * fragments.) */
template <int D>
__global__ void __launch_bounds__(FB_THREADS, 1)
    fb_dq_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                 const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                 const float *__restrict__ rows, const fb_grads grads,
                 forge_flash_shape s, float sl2, float scale) {
    typedef fb_cfg<D> cfg;
    constexpr int STAGES = cfg::STAGES, DH = cfg::DH;
    extern __shared__ __align__(1024) unsigned char fb_smem[];
    const uint32_t base = (smem_u32(fb_smem) + 1023u) & ~1023u;
    const uint32_t sq = base, sdo = base + cfg::RES_BYTES;
    const uint32_t sring = sdo + cfg::RES_BYTES; /* stage st: K at +st*STAGE_BYTES, V TILE_BYTES further */
    const uint32_t resbar = sring + STAGES * (cfg::STAGE_BYTES + cfg::LD_BYTES);
    const uint32_t bars = resbar + 8; /* full[st] at +8st, empty[st] at +8(STAGES+st) */

    const int q0 = (gridDim.x - 1 - blockIdx.x) * FB_BR, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / (s.H / s.Hkv);
    const int diag = s.Tk - s.Tq;
    const int ntiles = flash_key_tiles(s.Tk, diag, q0, FB_BR, FB_BS);
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) fb_barriers_init(resbar, STAGES);
    __syncthreads();
    forge_pdl_wait(); /* shared memory only above; global memory from here (pdl.cuh) */
    forge_pdl_launch_dependents();

    if (wg == 0) {
        wgmma_setmaxnreg_dec<FB_PRODUCER_REGS>();
        if (threadIdx.x == 0 && ntiles > 0) {
            mbar_arrive_expect_tx(resbar, 2 * cfg::RES_BYTES);
#pragma unroll
            for (int j = 0; j < DH; j++) {
                fw_tma_load_3d(sq + j * (FB_BR * 128), &tm_q, h * D + 64 * j, q0, b, resbar);
                fw_tma_load_3d(sdo + j * (FB_BR * 128), &tm_do, h * D + 64 * j, q0, b, resbar);
            }
            int stage = 0;
            uint32_t phase = 0;
            for (int t = 0; t < ntiles; t++) {
                const uint32_t full = bars + 8 * stage, empty = bars + 8 * (STAGES + stage);
                mbar_wait_wide(empty, phase ^ 1);
                mbar_arrive_expect_tx(full, cfg::STAGE_BYTES);
                const uint32_t dk = sring + stage * cfg::STAGE_BYTES, dv = dk + cfg::TILE_BYTES;
#pragma unroll
                for (int j = 0; j < DH; j++) {
                    fw_tma_load_3d(dk + j * 8192, &tm_k, hk * D + 64 * j, t * FB_BS, b, full);
                    fw_tma_load_3d(dv + j * 8192, &tm_v, hk * D + 64 * j, t * FB_BS, b, full);
                }
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
            }
        }
        return;
    }

    wgmma_setmaxnreg_inc<FB_CONSUMER_REGS>();
    const int c = wg - 1;
    const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int wrow0 = q0 + c * 64;
    const int row_lo = wrow0 + warp * 16 + g; /* this thread's rows: row_lo, row_lo + 8 */

    float lse2[2], dlt[2];
    fb_dq_rows(rows, s, b, h, row_lo, lse2, dlt);

    float acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) acc[i] = 0.0f;

    if (ntiles > 0) mbar_wait_wide(resbar, 0);
    const uint32_t qa = sq + c * 8192, doa = sdo + c * 8192; /* rows 64c.. of each 128-row box */
    int stage = 0;
    uint32_t phase = 0;
    for (int t = 0; t < ntiles; t++) {
        const int k0 = t * FB_BS;
        mbar_wait_wide(bars + 8 * stage, phase);
        if (k0 <= wrow0 + 63 + diag) {
            const uint32_t kt = sring + stage * cfg::STAGE_BYTES;
            float sc[32], dp[32];
            fb_dq_tile_sdp<D>(sc, dp, qa, doa, kt);
            wgmma_wait<1>();
            wgmma_fence_operands(sc);
            fb_dq_p(sc, k0, wrow0, row_lo, diag, s.Tk, tq, sl2, lse2); /* branch-free: dP is in flight */

            wgmma_wait<0>();
            wgmma_fence_operands(dp);
#pragma unroll
            for (int i = 0; i < 32; i++) dp[i] = sc[i] * (dp[i] - dlt[(i >> 1) & 1]); /* dS / scale */
            uint32_t a[4][4];
            fw_to_a<64>(a, dp);
            wgmma_fence(); /* acc and a were written by ordinary instructions */
            fb_rs<D>(acc, a, kt);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operands(acc);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + stage));
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }

    fb_dq_store<D>(grads, acc, s, b, h, row_lo, tq, scale);
}

/* ---- dK, dV over key blocks --------------------------------------------------------------- */

/* Shared by both dK/dV kernels: which keys a CTA owns and which (head, query tile) iterations it streams.
 * Iteration it: query head hk*G + it/nq, query tile t_first + it%nq. */
struct fb_kv_block {
    int k0, hk, b, G, diag, t_first, nq, total;
};

/* The block of keys from k0 of kv head hk, batch b (the lab's fused backward walks several per CTA). */
__device__ __forceinline__ fb_kv_block fb_kv_block_at(const forge_flash_shape &s, int k0, int hk, int b) {
    fb_kv_block kb;
    kb.k0 = k0;
    kb.hk = hk;
    kb.b = b;
    kb.G = s.H / s.Hkv;
    kb.diag = s.Tk - s.Tq;
    const int qstart = max(0, kb.k0 - kb.diag); /* first query that sees any key of this block */
    kb.t_first = qstart / FB_BS;
    kb.nq = qstart < s.Tq ? (s.Tq + FB_BS - 1) / FB_BS - kb.t_first : 0;
    kb.total = kb.G * kb.nq;
    return kb;
}

/* The CTA's block: res_rows keys from blockIdx.x * res_rows, kv head blockIdx.y, batch blockIdx.z. */
__device__ __forceinline__ fb_kv_block fb_kv_block_of(const forge_flash_shape &s, int res_rows) {
    return fb_kv_block_at(s, blockIdx.x * res_rows, blockIdx.y, blockIdx.z);
}

/* The producer warpgroup of both dK/dV kernels, thread 0 alone: RES rows of K and V once (resbar; 64-column box
 * j at j * RES * 128 B), then per stage Q and dO (64-row boxes, box j at j * 8 KiB) and the tile's 64 queries'
 * lse*log2e and delta (one box of the packed row statistics' map tm_rows) into the stage's slot, all by TMA and
 * completing on the stage's full barrier (count 1). Every write to a stage is the async proxy's, ordered after the
 * consumers' release of the stage by the empty barrier. The slot is a tensor copy rather than a plain bulk copy
 * (cp.async.bulk) for compute-sanitizer's sake: racecheck attributes a bulk copy's write to the issuing thread and
 * reports it against the consumers' earlier plain reads of the slot, not modelling the empty barrier between them;
 * a tensor copy's write is the TMA unit's, as for the tiles (lab/notes/flash.md). STAGES: the ring's length
 * (fb_cfg's for the dQ and dK/dV kernels; the fused backward's ff_cfg). */
template <int D, int RES, int STAGES = fb_cfg<D>::STAGES>
__device__ __forceinline__ void fb_kv_produce(const fb_kv_block &kb, const forge_flash_shape &s,
                                              const CUtensorMap *tm_k, const CUtensorMap *tm_v,
                                              const CUtensorMap *tm_q, const CUtensorMap *tm_do,
                                              const CUtensorMap *tm_rows, uint32_t sk, uint32_t sv,
                                              uint32_t sring, uint32_t sld, uint32_t resbar, uint32_t bars) {
    typedef fb_cfg<D> cfg;
    constexpr int DH = cfg::DH;
    if (kb.total == 0) return;
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(resbar, 2 * (uint32_t)(RES * D * 2));
#pragma unroll
        for (int j = 0; j < DH; j++) {
            fw_tma_load_3d(sk + j * (RES * 128), tm_k, kb.hk * D + 64 * j, kb.k0, kb.b, resbar);
            fw_tma_load_3d(sv + j * (RES * 128), tm_v, kb.hk * D + 64 * j, kb.k0, kb.b, resbar);
        }
        int stage = 0;
        uint32_t phase = 0;
        for (int it = 0; it < kb.total; it++) {
            const int h = kb.hk * kb.G + it / kb.nq, qt0 = (kb.t_first + it % kb.nq) * FB_BS;
            const uint32_t full = bars + 8 * stage, empty = bars + 8 * (STAGES + stage);
            mbar_wait_wide(empty, phase ^ 1);
            mbar_arrive_expect_tx(full, cfg::STAGE_BYTES + cfg::LD_BYTES);
            const uint32_t dq_ = sring + stage * cfg::STAGE_BYTES, ddo = dq_ + cfg::TILE_BYTES;
#pragma unroll
            for (int j = 0; j < DH; j++) {
                fw_tma_load_3d(dq_ + j * 8192, tm_q, h * D + 64 * j, qt0, kb.b, full);
                fw_tma_load_3d(ddo + j * 8192, tm_do, h * D + 64 * j, qt0, kb.b, full);
            }
            fw_tma_load_3d(sld + stage * cfg::LD_BYTES, tm_rows, qt0, kb.b * s.H + h, 0, full);
            if (++stage == STAGES) {
                stage = 0;
                phase ^= 1;
            }
        }
    }
}

/* P^T (64 keys x 64 queries) of a consumer warpgroup from its S^T accumulator, in place: exp2 in the log2
 * domain with lse per column (query) from the stage's slot, masked branch-free (see FB_BIG) against vis0 /
 * vis1 (first visible column of the thread's two key rows) and lim (columns >= lim are past Tq). */
__device__ __forceinline__ void fb_p_transposed(float (&st)[32], const float *ls, int tq, float sl2, int vis0,
                                                int vis1, int lim) {
#pragma unroll
    for (int n = 0; n < FB_BS / 8; n++) {
        const int col = n * 8 + 2 * tq;
        const float2 l2 = *(const float2 *)(ls + col);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int j = col + (e & 1);
            const float p = fw_ex2(fmaf(st[4 * n + e], sl2, -((e & 1) ? l2.y : l2.x)));
            st[4 * n + e] = (j < ((e >> 1) ? vis1 : vis0) || j >= lim) ? 0.0f : p;
        }
    }
}

/* fb_p_transposed's mask bounds for the 64 keys from wk0 (the thread's keys key_lo, key_lo + 8) against the
 * query tile at qt0: the first visible column of each key row and the column bound, or "none" (FB_BIG) on
 * interior tiles. */
struct fb_pt_bounds {
    int vis0, vis1, lim;
};

__device__ __forceinline__ fb_pt_bounds fb_pt_bounds_of(int wk0, int key_lo, int qt0, int diag, int Tq) {
    const bool edge = wk0 + 63 > qt0 + diag || qt0 + FB_BS > Tq;
    fb_pt_bounds pb;
    pb.vis0 = edge ? key_lo - diag - qt0 : -FB_BIG;
    pb.vis1 = edge ? key_lo + 8 - diag - qt0 : -FB_BIG;
    pb.lim = edge ? Tq - qt0 : FB_BIG;
    return pb;
}

/* fb_dkdv_tile_ps's second half: both products waited; st becomes P^T (fb_p_transposed with the bounds pb,
 * while dP^T runs) and dpt dS^T / scale = P^T (dP^T - delta). ls: the stage's lse*log2e slot, delta FB_BS floats
 * further. */
__device__ __forceinline__ void fb_dkdv_tile_pds(float (&st)[32], float (&dpt)[32], const float *ls, int tq,
                                                 float sl2, const fb_pt_bounds &pb) {
    const float *dl = ls + FB_BS;
    wgmma_wait<1>();
    wgmma_fence_operands(st);
    fb_p_transposed(st, ls, tq, sl2, pb.vis0, pb.vis1, pb.lim); /* while dP^T runs */

    wgmma_wait<0>();
    wgmma_fence_operands(dpt);
#pragma unroll
    for (int n = 0; n < FB_BS / 8; n++) {
        const float2 d2 = *(const float2 *)(dl + n * 8 + 2 * tq);
#pragma unroll
        for (int e = 0; e < 4; e++)
            dpt[4 * n + e] = st[4 * n + e] * (dpt[4 * n + e] - ((e & 1) ? d2.y : d2.x)); /* dS^T/scale */
    }
}

/* One consumer warpgroup's S^T / dP^T step of a tile (fb_dkdv_kernel<D, 0>, and the lab's fused backward): st =
 * S^T = K.Q^T and dpt = dP^T = V.dO^T (ka, va: its 64 rows of the resident 128-row K, V boxes; qt, dt: the
 * stage's Q, dO tiles) issued as two commit groups, then fb_dkdv_tile_pds. The caller turns st and dpt into A
 * fragments (fw_to_a): with that step in here the compiler numbered the kernel's registers differently. */
template <int D>
__device__ __forceinline__ void fb_dkdv_tile_ps(float (&st)[32], float (&dpt)[32], uint32_t ka, uint32_t va,
                                                uint32_t qt, uint32_t dt, const float *ls, int tq, float sl2,
                                                const fb_pt_bounds &pb) {
    wgmma_fence();
    fb_ss<D>(st, fb_opaque(ka), FB_BR * 128, qt, 8192); /* S^T = K.Q^T */
    wgmma_commit();
    fb_ss<D>(dpt, fb_opaque(va), FB_BR * 128, dt, 8192); /* dP^T = V.dO^T */
    wgmma_commit();
    fb_dkdv_tile_pds(st, dpt, ls, tq, sl2, pb);
}

/* fb_dkdv_tile_ps with K and V as register A fragments (kf, vf: fb_load_a; fb_dkdv_kernel<D, 1>) */
template <int D>
__device__ __forceinline__ void fb_dkdv_tile_ps_rs(float (&st)[32], float (&dpt)[32], const uint32_t (&kf)[D / 16][4],
                                                   const uint32_t (&vf)[D / 16][4], uint32_t qt, uint32_t dt,
                                                   const float *ls, int tq, float sl2, const fb_pt_bounds &pb) {
    wgmma_fence();
    fb_rs_k<D>(st, kf, qt, 8192); /* S^T = K.Q^T */
    wgmma_commit();
    fb_rs_k<D>(dpt, vf, dt, 8192); /* dP^T = V.dO^T */
    wgmma_commit();
    fb_dkdv_tile_pds(st, dpt, ls, tq, sl2, pb);
}

/* dV += P^T.dO and dK += dS^T.Q (pa, sa: fb_dkdv_tile_ps's P^T, dS^T as A fragments; dt, qt: the stage's dO, Q)
 * issued as one commit group (fb_dkdv_issue; pa and sa stay unmodified until it is waited), waited
 * (fb_dkdv_wait), or both (fb_dkdv_accumulate). */
template <int D>
__device__ __forceinline__ void fb_dkdv_issue(float (&adv)[D / 2], float (&adk)[D / 2], const uint32_t (&pa)[4][4],
                                              const uint32_t (&sa)[4][4], uint32_t dt, uint32_t qt) {
    wgmma_fence(); /* adv, adk, pa, sa were written by ordinary instructions */
    fb_rs<D>(adv, pa, dt); /* dV += P^T.dO */
    fb_rs<D>(adk, sa, qt); /* dK += dS^T.Q */
    wgmma_commit();
}
template <int D> __device__ __forceinline__ void fb_dkdv_wait(float (&adv)[D / 2], float (&adk)[D / 2]) {
    wgmma_wait<0>();
    wgmma_fence_operands(adv);
    wgmma_fence_operands(adk);
}
template <int D>
__device__ __forceinline__ void fb_dkdv_accumulate(float (&adv)[D / 2], float (&adk)[D / 2],
                                                   const uint32_t (&pa)[4][4], const uint32_t (&sa)[4][4],
                                                   uint32_t dt, uint32_t qt) {
    fb_dkdv_issue<D>(adv, adk, pa, sa, dt, qt);
    fb_dkdv_wait<D>(adv, adk);
}

/* dK (times scale) and dV of the thread's keys key_lo, key_lo + 8 (those < Tk) of kv head hk, batch b. */
template <int D>
__device__ __forceinline__ void fb_dkdv_store(const fb_grads &grads, const float (&adk)[D / 2], const float (&adv)[D / 2],
                                              const forge_flash_shape &s, int b, int hk, int key_lo, int tq,
                                              float scale) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = key_lo + r * 8;
        if (key >= s.Tk) continue;
        const size_t token = (size_t)b * s.Tk + key;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            fb_grad_store2(grads, grads.dk, grads.dk_stride, token, s.Hkv, hk, D, n * 8 + 2 * tq, adk[4 * n + 2 * r] * scale,
                           adk[4 * n + 2 * r + 1] * scale);
            fb_grad_store2(grads, grads.dv, grads.dv_stride, token, s.Hkv, hk, D, n * 8 + 2 * tq, adv[4 * n + 2 * r],
                           adv[4 * n + 2 * r + 1]);
        }
    }
}

/* 128 keys per CTA, each consumer warpgroup owns 64 of them and computes all four products (S^T, dP^T,
 * dV += P^T.dO, dK += dS^T.Q) with dK and dV (2 x D / 2 fp32) in registers. RSA = 1 (forge's at D = 64): its 64
 * rows of K and V read once into register A fragments, the S-like products issued from them. */
template <int D, int RSA = 0>
__global__ void __launch_bounds__(FB_THREADS, 1)
    fb_dkdv_kernel(const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                   const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                   const __grid_constant__ CUtensorMap tm_rows, const fb_grads grads,
                   forge_flash_shape s, float sl2, float scale) {
    typedef fb_cfg<D> cfg;
    constexpr int STAGES = cfg::STAGES;
    extern __shared__ __align__(1024) unsigned char fb_smem[];
    const uint32_t base = (smem_u32(fb_smem) + 1023u) & ~1023u;
    const uint32_t sk = base, sv = base + cfg::RES_BYTES;
    const uint32_t sring = sv + cfg::RES_BYTES; /* stage st: Q at +st*STAGE_BYTES, dO TILE_BYTES further */
    const uint32_t sld = sring + STAGES * cfg::STAGE_BYTES; /* stage st: lse*log2e [64], delta [64] */
    const uint32_t resbar = sld + STAGES * cfg::LD_BYTES;
    const uint32_t bars = resbar + 8;
    const float *ld_gen = (const float *)(fb_smem + (sld - smem_u32(fb_smem))); /* generic view of the slots */

    const fb_kv_block kb = fb_kv_block_of(s, FB_BR);
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) fb_barriers_init(resbar, STAGES);
    __syncthreads();
    forge_pdl_wait(); /* shared memory only above; global memory from here (pdl.cuh) */
    forge_pdl_launch_dependents();

    if (wg == 0) {
        wgmma_setmaxnreg_dec<FB_PRODUCER_REGS>();
        fb_kv_produce<D, FB_BR>(kb, s, &tm_k, &tm_v, &tm_q, &tm_do, &tm_rows, sk, sv, sring, sld, resbar,
                                bars);
        return;
    }

    wgmma_setmaxnreg_inc<FB_CONSUMER_REGS>();
    const int c = wg - 1;
    const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int wk0 = kb.k0 + c * 64;         /* this warpgroup's first key */
    const int key_lo = wk0 + warp * 16 + g; /* this thread's keys: key_lo, key_lo + 8 */
    const int diag = kb.diag;

    float adk[D / 2], adv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) adk[i] = adv[i] = 0.0f;

    if (kb.total > 0) mbar_wait_wide(resbar, 0);
    const uint32_t ka = sk + c * 8192, va = sv + c * 8192; /* rows 64c.. of each 128-row box */
    uint32_t kf[D / 16][4], vf[D / 16][4]; /* RSA */
    if constexpr (RSA) {
        if (kb.total > 0) {
            fb_load_a<D>(kf, ka, FB_BR * 128, warp, g, tq);
            fb_load_a<D>(vf, va, FB_BR * 128, warp, g, tq);
        }
    }
    int stage = 0;
    uint32_t phase = 0;
    for (int it = 0; it < kb.total; it++) {
        const int qt0 = (kb.t_first + it % kb.nq) * FB_BS;
        mbar_wait_wide(bars + 8 * stage, phase);
        /* the warpgroup's first key is seen by queries >= wk0 - diag; keys past Tk are never stored */
        if (wk0 <= qt0 + FB_BS - 1 + diag && wk0 < s.Tk) {
            const uint32_t qt = sring + stage * cfg::STAGE_BYTES, dt = qt + cfg::TILE_BYTES;
            const float *ls = ld_gen + stage * (2 * FB_BS);
            float st[32], dpt[32];
            const fb_pt_bounds pb = fb_pt_bounds_of(wk0, key_lo, qt0, diag, s.Tq);
            if constexpr (RSA)
                fb_dkdv_tile_ps_rs<D>(st, dpt, kf, vf, qt, dt, ls, tq, sl2, pb);
            else
                fb_dkdv_tile_ps<D>(st, dpt, ka, va, qt, dt, ls, tq, sl2, pb);
            uint32_t pa[4][4], sa[4][4];
            fw_to_a<64>(pa, st);
            fw_to_a<64>(sa, dpt);
            fb_dkdv_accumulate<D>(adv, adk, pa, sa, dt, qt);
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + stage));
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }

    fb_dkdv_store<D>(grads, adk, adv, s, kb.b, kb.hk, key_lo, tq, scale);
}

/* ---- the fused D = 128 backward's dQ pieces (flash_attention_bf16_wgmma_bwd_fused.cu; the lab's fused D = 64
 * kernels use them too) ------------------------------------------------------------------------------------- */

/* dq (64 queries x 64) = dS (the 128-key dS^T buffer at ds, read transposed) . K (the resident 128-row box at
 * k): 8 k16 steps over the keys in order, step kk at kk * 2 KiB in both (16 rows of 128 B), both operands
 * MN-major (fb_wgmma_ss_n64<1>: imm-trans-a, imm-trans-b). */
__device__ __forceinline__ void ff_dq_product(float (&dq)[32], uint32_t ds, uint32_t k) {
#pragma unroll
    for (int kk = 0; kk < FB_BR / 16; kk++) {
        const uint64_t da = wgmma_desc_mn(ds + kk * 2048), db = wgmma_desc_mn(k + kk * 2048);
        if (kk == 0)
            fb_wgmma_ss_n64_first<1>(dq, da, db);
        else
            fb_wgmma_ss_n64<1>(dq, da, db);
    }
}

__device__ __forceinline__ void ff_st_shared(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

/* Generic-proxy shared-memory stores made visible to the async proxy (the wgmma that reads them). */
__device__ __forceinline__ void ff_fence_proxy_async(void) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* A consumer's dS^T (its A fragments sa: rows = its 64 keys, columns = the tile's 64 queries, bf16 pairs) into
 * rows row0.. of the dS^T buffer at ds (1 KiB aligned), in the 128B-swizzled layout (16-byte chunk j of row r
 * at ((j ^ (r & 7)) << 4)): sa[kk][2 jj + h] holds row g + 8h, queries 16kk + 8jj + 2tq, +1 (fw_to_a), i.e.
 * chunk 2kk + jj, bytes 4tq.. of it. The thread's row base has bits 4-6 clear and r & 7 = g, so every address is
 * (base | g << 4) ^ chunk << 4: one xor with an immediate per store (fb_opaque keeps the compiler from hoisting
 * the 8 xors out of the tile loop into 8 live registers). Per store the warp's 32 lanes hit 32 distinct banks. */
__device__ __forceinline__ void ff_store_ds(uint32_t ds, int row0, int g, int tq, const uint32_t (&sa)[4][4]) {
    const uint32_t bt = fb_opaque((ds + (uint32_t)(row0 + g) * 128u + 4u * tq) | ((uint32_t)g << 4));
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int jj = 0; jj < 2; jj++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                ff_st_shared((bt + h * 1024u) ^ ((uint32_t)(2 * kk + jj) << 4), sa[kk][2 * jj + h]);
}

/* The thread's dQ fragment d (rows 16 warp + g + 8 rr, columns 8 nn + 2 tq, +1 at d[4 nn + 2 rr], +1) into the
 * staging tile at stg (1 KiB aligned): two boxes of 64 rows x 32 columns (128 B), box j at j * 8 KiB, 16-byte chunk c of row r at ((c ^ (r & 7)) << 4) (TMA's 128B swizzle). A half-warp's 64-bit stores touch 4 rows x 2 chunks on 4 chunk positions: a 2-way bank conflict. The row base has bits 4-6
 * clear, so the chunk (2 (nn % 4) + tq / 2) ^ g is (tq / 2 ^ g) folded into the base, then one xor with an
 * immediate per store; fb_opaque keeps the compiler from hoisting the 16 addresses out of the tile loop. */
__device__ __forceinline__ void ff_store_dq(uint32_t stg, int warp, int g, int tq, const float (&d)[32]) {
    const uint32_t row = stg + (uint32_t)(16 * warp + g) * 128u + 8u * (uint32_t)(tq & 1);
    const uint32_t bt = fb_opaque(row | ((uint32_t)((tq >> 1) ^ g) << 4));
#pragma unroll
    for (int nn = 0; nn < 64 / 8; nn++)
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const uint32_t a = (bt + (uint32_t)(nn >> 2) * 8192u + (uint32_t)rr * 1024u) ^ ((uint32_t)(nn & 3) << 5);
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(a), "f"(d[4 * nn + 2 * rr]),
                         "f"(d[4 * nn + 2 * rr + 1])
                         : "memory");
        }
}

/* TMA store (add false) or fp32 reduce-add (add true) of the 64-row x 32-column box at src (128B-swizzled) into
 * the fp32 tensor of tm at (column c0, row c1, batch c2), in the issuing thread's current bulk group. */
__device__ __forceinline__ void ff_tile_out(const CUtensorMap *tm, int c0, int c1, int c2, uint32_t src, bool add) {
    if (add)
        asm volatile(
            "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];" ::"l"(
                (uint64_t)tm),
            "r"(c0), "r"(c1), "r"(c2), "r"(src)
            : "memory");
    else
        asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3}], [%4];" ::"l"(
                         (uint64_t)tm),
                     "r"(c0), "r"(c1), "r"(c2), "r"(src)
                     : "memory");
}

/* ---- host ----------------------------------------------------------------------------------- */

/* What every launch of one backward call reads (fb_backward_prepare): the tensor maps, 128-row boxes for what a
 * CTA keeps resident (Q, dO in dQ; K, V in dK/dV: k_res, v_res), 64-row boxes for streamed tiles and the lab's
 * split dK/dV kernel's resident K, V; the outputs and scalars. */
struct fb_call {
    forge_flash_shape s;
    CUtensorMap q_res, do_res, k_str, v_str, q_str, do_str, k_res, v_res;
    const float *rows;    /* the packed row statistics (fb_rows_at), written by fb_backward_prepare */
    CUtensorMap rows_map; /* the same as a tensor map: a 64-query tile's two planes one box (fb_kv_produce) */
    fb_grads g; /* fp32 dense from fb_backward_prepare; forge_flash_bf16_backward_into sets its own */
    float sl2, scale;
    cudaStream_t st;
    int pdl; /* the kernels launch with programmatic dependent launch (pdl.cuh) */
};

/* Defined in flash_attention_bf16_wgmma_bwd.cu. fb_backward_begin: what every wgmma backward entry runs first
 * (`what` names it in errors): forge_flash_check_shape; nothing to do for B == 0 (*launch = 0); Tq == 0 or
 * Tk == 0 (a tensor map cannot have a 0 dim) and a device other than sm_90 are FORGE_ERR_UNSUPPORTED; else
 * *launch = 1. fb_backward_prepare: every tensor map (a refused layout, FORGE_ERR_UNSUPPORTED naming `entry`,
 * leaves nothing half-written), then the packed row statistics into `delta` (forge_flash_bf16_backward_rowstats:
 * lse*log2e and rowsum(dO * O); c->rows, c->rows_map). */
forge_status fb_backward_begin(const char *what, const forge_flash_shape *s, const void *q, const void *k,
                               const void *v, const void *out_bf16, const void *dout_bf16, const float *lse,
                               float *delta, float *dq, float *dk, float *dv, int *launch);
forge_status fb_backward_prepare(fb_call *c, const char *entry, const forge_flash_shape *s, const void *q,
                                 const void *k, const void *v, const void *out_bf16, const void *dout_bf16,
                                 const float *lse, float *delta, float *dq, float *dk, float *dv, void *stream,
                                 int pdl);
/* Defined in flash_attention_bf16_wgmma_bwd_fused.cu: the fused backward at D = 128 (its header explains it) into
 * c.g, after fb_backward_prepare. scratch: the FORGE_FLASH_BF16_BWD_SCRATCH floats the row statistics start
 * (the turn counters after them, then the fp32 dQ accumulator that bf16 gradients go through); order: the key
 * blocks' launch order, FB_FUSED_BY_RULE (ascending when they fit on the SMs at once, else descending: what
 * forge runs), FB_FUSED_ASC or FB_FUSED_DESC (the lab's tests: the same bits). */
#define FB_FUSED_BY_RULE 0
#define FB_FUSED_ASC 1
#define FB_FUSED_DESC 2
forge_status fb_launch_fused(const fb_call &c, float *scratch, int order, const char *entry);

/* the dQ kernel */
template <int D> static forge_status fb_launch_dq(const fb_call &c) {
    constexpr size_t smem = fb_cfg<D>::SMEM;
    static kernel_attrs_once once;
    CUDA_TRY(kernel_attrs_set(&once, (const void *)fb_dq_kernel<D>, (int)smem, 0));
    dim3 gq((unsigned)((c.s.Tq + FB_BR - 1) / FB_BR), (unsigned)c.s.H, (unsigned)c.s.B);
    CUDA_LAUNCH_TRY(forge_pdl_launch(fb_dq_kernel<D>, gq, FB_THREADS, smem, c.st, c.pdl, c.q_res, c.do_res,
                                     c.k_str, c.v_str, c.rows, c.g, c.s, c.sl2, c.scale),
                    D == 64 ? "fb_dq_kernel<64>" : "fb_dq_kernel<128>");
    return FORGE_OK;
}

/* the dK/dV kernel with 128 keys per CTA (RSA: K, V as register A fragments) */
template <int D, int RSA = 0> static forge_status fb_launch_dkdv(const fb_call &c) {
    constexpr size_t smem = fb_cfg<D>::SMEM;
    static kernel_attrs_once once;
    CUDA_TRY(kernel_attrs_set(&once, (const void *)fb_dkdv_kernel<D, RSA>, (int)smem, 0));
    dim3 gk((unsigned)((c.s.Tk + FB_BR - 1) / FB_BR), (unsigned)c.s.Hkv, (unsigned)c.s.B);
    CUDA_LAUNCH_TRY(forge_pdl_launch(fb_dkdv_kernel<D, RSA>, gk, FB_THREADS, smem, c.st, c.pdl, c.k_res, c.v_res,
                                     c.q_str, c.do_str, c.rows_map, c.g, c.s, c.sl2, c.scale),
                    D == 64 ? "fb_dkdv_kernel<64>" : "fb_dkdv_kernel<128>");
    return FORGE_OK;
}

#endif
