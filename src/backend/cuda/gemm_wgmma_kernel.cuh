/*
 * gemm_wgmma_kernel.cuh: the Hopper bf16 GEMM's kernel templates and their launch machinery (rung 3
 * of lab/notes/gemm-ladder.md): the persistent warp-specialised body shared by the three layouts, its fused
 * epilogue, the split-K / stream-K work schedule, and the host side that encodes the tensor maps and launches
 * one instantiation. Included by gemm_wgmma.cu, which instantiates what the entry points of gemm.h run (the
 * defaults), and by the lab's variants (lab/gemm_bf16/), which instantiate and launch the same templates with
 * other tiles and reductions. Non-template host helpers are declared here and defined in gemm_wgmma.cu.
 *
 *   C (M,N) fp32 = A (M,K) . B (N,K)^T [+ bias (N)]     A, B bf16, K-major
 *
 * Design (the decisions a reader would otherwise get wrong):
 * - One CTA per SM (persistent grid), 3 warpgroups of 128 threads. Warpgroup
 *   0 is the PRODUCER: one thread issues the TMA copies (cp.async.bulk.tensor
 *   2D) of a 128x64 A tile and a BNx64 B tile into stage s of a ring of
 *   STAGES stages, completing on full[s]. Warpgroups 1 and 2 are CONSUMERS:
 *   each owns 64 rows of the 128-row block tile and issues wgmma
 *   m64nBNk16 (4 per 64-wide K slice) straight from shared memory, fp32
 *   accumulators in registers (BN/2 per thread). setmaxnreg moves registers
 *   from the producer (40) to the consumers (232).
 * - Ring protocol: full[s] has 1 arrival (the producer's arrive.expect_tx
 *   with the stage's byte count) plus the TMA transaction bytes; empty[s] has
 *   8 arrivals (lane 0 of each consumer warp, after wgmma.wait_group shows
 *   that warp's MMAs reading the stage have finished). Parities: round r of a
 *   stage waits full with parity r&1 and empty with parity (r&1)^1 (a fresh
 *   barrier counts its "previous" phase as complete, so round 0 of the
 *   producer does not block). Consumers keep one wgmma group in flight
 *   (wait_group 1) and release the previous stage.
 * - Layout: TMA writes each tile with the 128-byte swizzle (rows of 64 bf16 =
 *   128 B, 16-byte chunks XOR-ed with row%8). That is exactly wgmma's
 *   K-major SWIZZLE_128B canonical layout: descriptor SBO = 1024 B (one
 *   8-row group), LBO unused (1), and the k-th 16-wide K step starts 32*k
 *   bytes into the row. Every stage starts on a 1024-byte boundary, which the
 *   swizzle pattern requires (base offset 0).
 * - Edges: TMA zero-fills the parts of a box outside the tensor (rows past M
 *   or N, columns past K) and still counts the full box in the transaction
 *   bytes, so the mainloop needs no tail code; the epilogue bounds-checks
 *   every store. TMA needs the row stride (K*2 bytes) to be a multiple of
 *   16, hence K % 8 == 0; other K go to the SIMT kernel (gemm.h).
 * - Tile order: tiles are numbered in groups of GEMM_GROUP_M row-blocks, all
 *   N tiles of a group before the next, so the tiles in flight (one per SM) share a
 *   few A row-blocks and B sweeps through L2 once per group.
 * - No unbounded waits: an mbarrier wait that has not completed after
 *   WGMMA_WAIT_TIMEOUT_NS of %globaltimer traps, and the host sees an
 *   "unspecified launch failure" at its next synchronising call instead of
 *   a hung process.
 * - The epilogue stores from the accumulators, either straight to global
 *   memory (each quad of lanes writes 32 contiguous bytes of a row) or, with
 *   GEMM_EPI_TMA_STORE, through shared-memory staging boxes and TMA (the
 *   consumers move on while the stores drain); meanwhile the producer is
 *   already filling the ring for the CTA's next tile.
 * - The device code of the variants that the defaults do not launch stays in the shared body where it is a
 *   branch of it: the 192-row tile (BM = 192, three consumer warpgroups, a template parameter) and the TN
 *   in-kernel split reduction and stream-K schedule (gemm_splitk_fixup, gemm_work_next; run-time branches on
 *   gemm_epi_dev.tile_cnt / .streamk, which the defaults leave 0). Their launchers are the lab's.
 * - The TN bias gradient (DBIAS, a template flag of the body; the 128 x 256 TN tile only, split-K launches):
 *   the producer warpgroup's idle warps sum the staged A = dY^T tiles into per-split partial rows
 *   (gemm_dbias_unit), so dW and dbias take one pass over dY. The product's dW + dbias runs it on its
 *   128 x 256 plans (forge_gemm_bf16_tn_wgmma_dbias); the consumers' code does not depend on it.
 * - Programmatic dependent launch (pdl.cuh): the body initialises its
 *   barriers and prefetches its tensor maps, then waits for the previous
 *   kernel (forge_pdl_wait) before its first TMA load or global access, so a
 *   launch with pdl set overlaps that prologue with the previous kernel's tail
 *   and a plain launch runs the same code.
 * Tensor maps are encoded on the host per call (cuTensorMapEncodeTiled via
 * cudaGetDriverEntryPointByVersion, so the binary needs no -lcuda link) and
 * passed as __grid_constant__ parameters.
 */
#ifndef FORGE_GEMM_WGMMA_KERNEL_CUH
#define FORGE_GEMM_WGMMA_KERNEL_CUH

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "gemm_gelu.cuh"
#include "kernel_attrs.h"
#include "pdl.cuh"
#include "wgmma_common.cuh"
#include "wgmma_tmap.h"

extern "C" {
#include "gemm.h"
}

#define GEMM_BM 128            /* block tile rows: 2 consumer warpgroups x 64 */
#define GEMM_BK 64             /* K slice per stage: 64 bf16 = one 128-byte swizzle row */
#define GEMM_THREADS 384       /* producer warpgroup + 2 consumer warpgroups */
#define GEMM_CONSUMER_WARPS 8  /* arrivals on an empty barrier */
#define GEMM_GROUP_M 8         /* row-blocks per tile group (L2 order) */
#define GEMM_PRODUCER_REGS 40
#define GEMM_CONSUMER_REGS 232
#define GEMM_PRODUCER_REGS_3C 40  /* TN 192-row tile: 512 threads, 128 x 40 + 384 x 152 <= 64 Ki registers */
#define GEMM_CONSUMER_REGS_3C 152
#define GEMM_MN_BOX_BYTES 8192u /* 64 MN x 64 K bf16: one MN-major TMA box */
#define GEMM_MAX_SPLITS 32

/* Per block tile (BM rows: 128, or 192 for the TN kernel's three-consumer tile; BN columns): stage count chosen
 * to fill ~192 KiB of the 227 KiB. */
template <int BN, int BM = GEMM_BM> struct gemm_cfg {
    static constexpr int STAGES = BN == 128 ? 6 : 4;
    static constexpr uint32_t A_BYTES = BM * GEMM_BK * 2;
    static constexpr uint32_t B_BYTES = BN * GEMM_BK * 2;
    static constexpr uint32_t STAGE_BYTES = A_BYTES + B_BYTES;
    /* tiles, then full[STAGES] and empty[STAGES] barriers, plus 1 KiB of
     * slack to round the dynamic shared-memory base up to 1024 bytes */
    static constexpr size_t SMEM = (size_t)STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;
    /* GEMM_EPI_TMA_STORE: per consumer warpgroup two 64 x 32 fp32 staging boxes (8 KiB each), after the ring */
    static constexpr uint32_t OUT_BOX_BYTES = 64 * 32 * 4;
    static constexpr uint32_t OUT_STAGE_BYTES = 2 * 2 * OUT_BOX_BYTES;
    /* + the tile's bias (BN fp32), after the barriers: loaded once per tile by cp.async during the mainloop */
    static constexpr uint32_t BIAS_OFF = OUT_STAGE_BYTES + 2 * STAGES * 8; /* from the staging base */
    static constexpr size_t SMEM_TMA_STORE = SMEM + OUT_STAGE_BYTES + BN * 4;
    static_assert(SMEM_TMA_STORE <= 232448, "fits the 227 KiB of dynamic shared memory");
    static_assert(BN == 96 || BN == 128 || BN == 192 || BN == 256,
                  "wgmma N is 128, 192 (the TN 192 x 192 tile) or 256; 96 only for the C192 kernel's epilogue");
    static_assert(BM == 128 || BM == 192, "64-row consumer warpgroups: 2 or 3");
    static_assert(A_BYTES % 1024 == 0 && B_BYTES % 1024 == 0, "stages stay 1024-byte aligned");
};

/* The generic device helpers (shared-memory addresses, mbarriers with the timeout trap, TMA, wgmma
 * descriptors / fence / commit / wait) live in wgmma_common.cuh, shared with gemm_wgmma_fp8.cu. */

/* wgmma_m64n128k16 (bf16, 64 x 128): wgmma_common.cuh, shared with gemm_wgmma_fp8.cu's bf16 ping-pong */

/* d (64 x 256 fp32, 128 registers per thread) += A (64x16, smem desc) . B (256x16, smem desc)^T */
template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WG_REGS128
                 "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
                 : WG_ACC128
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
}

/* d (64 x 192 fp32, 96 registers per thread) += A (64x16, smem desc) . B (192x16, smem desc)^T */
template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n192k16(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" WG_REGS96 "}, %96, %97, p, 1, 1, %99, %100;\n}\n"
                 : WG_ACC96
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
}

/* one k16 step of the 64 x BN warpgroup tile; TA / TB are wgmma's imm-trans-a / imm-trans-b (0: the operand
 * is K-major in shared memory, 1: MN-major) */
template <int BN, int TA, int TB>
__device__ __forceinline__ void wgmma_tile_k16(float (&d)[BN / 2], uint64_t da, uint64_t db, int sc) {
    if constexpr (BN == 128)
        wgmma_m64n128k16<TA, TB>(d, da, db, sc);
    else if constexpr (BN == 192)
        wgmma_m64n192k16<TA, TB>(d, da, db, sc);
    else
        wgmma_m64n256k16<TA, TB>(d, da, db, sc);
}

/* tile index -> (row-block, column-block) in the grouped L2 order */
__device__ __forceinline__ void gemm_tile_coords(int t, int tiles_m, int tiles_n, int *tm, int *tn) {
    const int per_group = GEMM_GROUP_M * tiles_n;
    const int g = t / per_group, first_m = g * GEMM_GROUP_M;
    const int rows = min(tiles_m - first_m, GEMM_GROUP_M);
    const int r = t - g * per_group;
    *tm = first_m + r % rows;
    *tn = r / rows;
}

/* ---- the epilogue ---------------------------------------------------------- */

/* Compile-time epilogue flags (the EPI template parameter of the kernel body). What stays a run-time pointer
 * (bias, residual, pre_out: NULL or not) costs one uniform branch per element; what changes the arithmetic or
 * the store type is a template flag, so the plain kernel carries none of it. */
#define GEMM_EPI_GELU 1  /* v = gelu(v) after the bias (and pre_out = v before it, if given) */
#define GEMM_EPI_BF16 2  /* C and pre_out are bf16 */
#define GEMM_EPI_DGELU 4 /* v *= gelu'(dpre[m][n]) (the GELU backward fused into dX) */
#define GEMM_EPI_TMA_STORE 8 /* stage C (fp32 or bf16) in shared memory, store it with TMA (see gemm_epilogue) */
#define GEMM_EPI_BF16_IN 16  /* res and dpre are bf16 (the nn bf16 dX, C = rn(C + d)) */
#define GEMM_EPI_RES 32      /* with TMA_STORE | BF16_IN (BN 128): C = rn(v + res), res loaded chunk by chunk like dpre */
#define GEMM_BIAS_BAR 3      /* named barrier of the 256 consumer threads (the tile's shared bias) */

/* What the epilogue reads and writes; (M,N) buffers are row-major with stride N. Passed by value. */
struct gemm_epi_dev {
    void *C;           /* fp32, or bf16 with GEMM_EPI_BF16 */
    const float *bias; /* (N) or nullptr */
    const float *res;  /* (M,N) fp32 or nullptr; may equal C (C +=): each element is read, then written, by the
                        * same thread, so no __restrict__ on these pointers */
    void *pre;         /* (M,N), C's type, or nullptr: v before GELU (GEMM_EPI_GELU only) */
    const float *dpre; /* (M,N) fp32: the pre-activation of GEMM_EPI_DGELU */
    float *work;       /* split-K partial slices (splits > 1; the epilogue is then plain) */
    int *tile_cnt;     /* TN split-K with the in-kernel fixed-order reduction: one arrival counter per tile
                        * (zeroed by the host before the launch); nullptr = the separate reduction pass */
    int streamk;       /* TN stream-K (with tile_cnt and work: 2 partial-tile slots per CTA); 0 = split-K units */
    int vec2;          /* N even and every (M,N) buffer aligned for 2-element accesses */
};

/* gemm_gelu (the tanh-GELU of the fused epilogues, GEMM_GELU_K / _C): gemm_gelu.cuh, shared with the bf16
 * ping-pong kernel's epilogue (gemm_wgmma_fp8_kernel.cuh) so that both compute the same bits */

/* d gelu / dx with s = sigmoid(2u): 1 + tanh u = 2s and sech^2 u = 4 s (1 - s), so elementwise.cu's
 * 0.5 (1 + t) + 0.5 x sech^2 K (1 + 3 C x^2) becomes s + 2 x s (1 - s) K (1 + 3 C x^2). */
__device__ __forceinline__ float gemm_gelu_grad(float x) {
    const float u = GEMM_GELU_K * fmaf(GEMM_GELU_C * x, x * x, x);
    const float sg = __fdividef(1.0f, 1.0f + __expf(-2.0f * u));
    return fmaf(2.0f * x * sg * (1.0f - sg), GEMM_GELU_K * fmaf(3.0f * GEMM_GELU_C * x, x, 1.0f), sg);
}

/* p[0], p[1] (p[1] only if has1), as one 8-byte load when vec */
__device__ __forceinline__ float2 gemm_ld2(const float *p, int vec, bool has1) {
    if (vec) return *reinterpret_cast<const float2 *>(p);
    return make_float2(p[0], has1 ? p[1] : 0.0f);
}

/* p[off], p[off + 1] of a bf16 (BIN) or fp32 buffer, widened; the second only if has1; one load when vec */
template <bool BIN>
__device__ __forceinline__ float2 gemm_ld2_in(const float *p, size_t off, int vec, bool has1) {
    if constexpr (BIN) {
        const __nv_bfloat16 *q = reinterpret_cast<const __nv_bfloat16 *>(p) + off;
        if (vec) return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(q));
        return make_float2(__bfloat162float(q[0]), has1 ? __bfloat162float(q[1]) : 0.0f);
    } else {
        return gemm_ld2(p + off, vec, has1);
    }
}

/* base[off], base[off + 1] (the second only if has1) = v0, v1 as fp32 or bf16, one vector store when vec */
template <bool BF16>
__device__ __forceinline__ void gemm_st2(void *base, size_t off, float v0, float v1, int vec, bool has1) {
    if constexpr (BF16) {
        __nv_bfloat16 *p = reinterpret_cast<__nv_bfloat16 *>(base) + off;
        if (vec) {
            *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(v0, v1);
        } else {
            p[0] = __float2bfloat16_rn(v0);
            if (has1) p[1] = __float2bfloat16_rn(v1);
        }
    } else {
        float *p = reinterpret_cast<float *>(base) + off;
        if (vec) {
            *reinterpret_cast<float2 *>(p) = make_float2(v0, v1);
        } else {
            p[0] = v0;
            if (has1) p[1] = v1;
        }
    }
}

/* tma_store_2d (2D TMA store of a staged box, clipped at the tensor bounds): wgmma_common.cuh */

/* Pulls this thread's part of the tile's rows of an (M,N) fp32 or (BIN) bf16 input into L2 at the start of the
 * tile, so the epilogue's loads (issued after the mainloop, when nothing else hides their latency) hit L2 instead
 * of HBM. A thread's rows are row0 and row0 + 8; a quad of lanes shares them and takes every 4th 128-byte line of
 * the tile's BN columns (BN * 4 or BN * 2 bytes). */
template <int BN, bool BIN>
__device__ __forceinline__ void gemm_prefetch_rows(const float *p, int row0, int tile_col0, int lane, int M, int N) {
    constexpr int ESIZE = BIN ? 2 : 4, LINE_COLS = 128 / ESIZE, LINES = BN * ESIZE / 128;
    const char *base = reinterpret_cast<const char *>(p);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = row0 + 8 * h;
#pragma unroll
        for (int q = lane % 4; q < LINES; q += 4) {
            const int col = tile_col0 + LINE_COLS * q;
            if (row < M && col < N) /* generic address */
                asm volatile("prefetch.L2 [%0];" ::"l"(base + ((size_t)row * N + col) * ESIZE));
        }
    }
}

/* The fused epilogue of one 64 x BN warpgroup tile (the order of gemm.h's forge_gemm_epilogue). Accumulator
 * fragment of wgmma m64nBN f32 (PTX ISA): d[4i + 2h + j] is row row0 + 8h, column col0 + 8i + j, with
 * row0 = warp*16 + lane/4 and col0 = 2(lane%4) offsets already added by the caller. Column groups go in chunks
 * of CH: first every load of the chunk (bias, residual, dpre) is issued, then the math and stores, so a
 * warp waits for memory once per chunk rather than once per element pair (per-pair waits made an earlier C +=
 * epilogue several times slower: lab/notes/gemm-bf16.md). */
/*
 * GEMM_EPI_TMA_STORE (what the entry points take wherever gemm_epi_tma_refusal allows it: a residual only in the
 * nn bf16 form, GEMM_EPI_RES; aligned buffers, N % 4 == 0 for fp32 / N % 8 == 0 for bf16 C): instead of st.global
 * from the registers, each chunk of 128 bytes of columns (fp32: 32 columns, CH = 4 groups; bf16: 64 columns,
 * CH = 8) of the warpgroup's 64 rows goes to a 64-row x 128-byte staging box in shared memory (128-byte swizzle:
 * 16-byte chunk k of row r at k ^ (r % 8), which TMA undoes; a warp's float2 / bf16x2 writes then take the minimum
 * 2 / 1 wavefronts), and one thread stores the box with TMA, so the global writes drain while the warpgroup moves on (and, at the last chunk, into the next tile's mainloop).
 * Two boxes per warpgroup alternate (chunk j uses box j % 2): before writing a box, thread 0 waits until at
 * most one bulk group (the previous chunk's) is still reading, then named barrier 1 + warpgroup (128 threads);
 * after writing, every thread fences the generic->async proxy, barrier again, thread 0 issues the store +
 * commit. TMA clips the box at M and N, so the staged values need no bounds checks.
 */
/* The CH column groups from col (this thread's two rows) of src (dgelu_pre, or the residual of GEMM_EPI_RES) into
 * p, fp32 or (BIN) bf16 widened; zero outside M x N. N % 4 == 0 (fp32) or N % 8 == 0 (bf16) and a 16-byte aligned
 * buffer (the TMA path's host rule), so col + 1 < N whenever col < N. */
template <int CH, bool BIN>
__device__ __forceinline__ void gemm_ld_in_chunk(float2 (&p)[CH][2], const float *src, int vec2, int row0, int col,
                                                 int M, int N) {
#pragma unroll
    for (int ii = 0; ii < CH; ii++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = row0 + 8 * h, c = col + 8 * ii;
            p[ii][h] = make_float2(0.0f, 0.0f);
            if (row < M && c < N) p[ii][h] = gemm_ld2_in<BIN>(src, (size_t)row * N + c, vec2, true);
        }
    }
}

/* a compile-time int as a value (the epilogue's staging pass) */
template <int V> struct gemm_int_c {
    static constexpr int value = V;
};

template <int BN, int EPI>
__device__ __forceinline__ void gemm_epilogue(const float (&d)[BN / 2], const gemm_epi_dev &e, int row0, int col0,
                                              int M, int N, const CUtensorMap *tm_c = nullptr, uint32_t sout = 0,
                                              const CUtensorMap *tm_pre = nullptr) {
    constexpr bool GELU = (EPI & GEMM_EPI_GELU) != 0, BF16 = (EPI & GEMM_EPI_BF16) != 0,
                   DGELU = (EPI & GEMM_EPI_DGELU) != 0, TMA = (EPI & GEMM_EPI_TMA_STORE) != 0,
                   BIN = (EPI & GEMM_EPI_BF16_IN) != 0, RES = (EPI & GEMM_EPI_RES) != 0;
    /* TMA with an (M,N) input: the chunk loads of dgelu_pre or (RES) the residual, one chunk ahead */
    constexpr bool LOADS = TMA && (DGELU || RES);
    static_assert(!LOADS || BN == 128, "the chunk loads next to 128 accumulators (BN 256) would spill");
    static_assert(!RES || (TMA && BIN && !DGELU), "GEMM_EPI_RES: the bf16 residual through the TMA store, no dgelu");
    static_assert(!BIN || (BF16 && (!TMA || DGELU || RES)), "bf16 residual / dgelu_pre: bf16 C");
    /* registers: the chunk's loads live next to BN/2 accumulators; TMA: one staging box (64 rows x 128 bytes:
     * 32 fp32 or 64 bf16 columns) per chunk */
    /* 192: 96 accumulators in 152 registers; 96 (the C192 kernel): 12 column groups */
    constexpr int CH = TMA ? (BF16 ? 8 : 4) : (DGELU || BN == 192 || BN == 96) ? 4 : 8;
    static_assert((BN / 8) % CH == 0 && (!TMA || (BN / 8 / CH) % 2 == 0),
                  "chunks tile the BN/8 column groups (TMA: an even number of boxes per tile)");
    /* TMA staging (recomputed here from threadIdx rather than kept live through the mainloop: registers are
     * the limit): consumer warpgroup c (named barrier 1 + c, boxes at sout + c * 16 KiB), thread tid of it;
     * this thread's row byte offset (+ its bytes inside a 16-byte chunk: fp32 8 (lane%2), bf16 4 (lane%4)) and
     * chunk XOR base; the tile origin (row0 = tile_row + warp*16 + lane/4, col0 = tile_col + 2(lane%4)).
     * Every tile uses an even number of boxes, so chunk j of any tile uses box j % 2. */
    const int tid = (int)threadIdx.x % 128, c_wg = (int)threadIdx.x / 128 - 1, lane = tid % 32;
    const uint32_t srow = (uint32_t)((tid / 32) * 16 + lane / 4) * 128u +
                          (BF16 ? (uint32_t)(lane % 4) * 4u : (uint32_t)(lane % 2) * 8u);
    const uint32_t sx = BF16 ? (uint32_t)(lane / 4) : (uint32_t)(((lane / 2) % 2) ^ (lane / 4));
    const int tile_row = row0 - (tid / 32) * 16 - lane / 4, tile_col = col0 - 2 * (lane % 4);
    const uint32_t sbase = sout + (uint32_t)c_wg * 2u * (64 * 32 * 4);
    /* TMA: the tile's bias sits in shared memory (cp.async'd at the start of the tile by the body); wait for this
     * thread's copies, then for everyone's (the 256 consumer threads) */
    const uint32_t sbias = sout + gemm_cfg<BN>::BIAS_OFF + (uint32_t)(lane % 4) * 8u;
    const bool sh_bias = TMA && e.bias != nullptr;
    if (TMA && sh_bias) {
        asm volatile("cp.async.wait_all;" ::: "memory");
        asm volatile("bar.sync %0, 256;" ::"n"(GEMM_BIAS_BAR) : "memory");
    }
    (void)srow, (void)sx, (void)tile_row, (void)tile_col, (void)sbase, (void)tm_c, (void)sbias, (void)tm_pre;
    /* TMA + GELU + pre_out: each chunk is staged twice, pass 0 = v before GELU (stored through tm_pre) into box 0,
     * pass 1 = the output into box 1; the boxes still alternate fill by fill, so the wait_group.read 1 rule holds */
    constexpr int NPASS = TMA && GELU ? 2 : 1;
    const bool two_pass = NPASS == 2 && e.pre != nullptr;
    (void)two_pass;
    /* TMA + dgelu / residual: the next chunk's input, loaded one chunk ahead */
    const float *chunk_src = RES ? e.res : e.dpre;
    (void)chunk_src;
    float2 pn[LOADS ? CH : 1][2];
    if constexpr (LOADS) gemm_ld_in_chunk<CH, BIN>(pn, chunk_src, e.vec2, row0, col0, M, N);
#pragma unroll
    for (int i0 = 0; i0 < BN / 8; i0 += CH) {
        /* TMA reads the bias from shared memory at its use: nothing of it lives in registers; of the (M,N) inputs
         * TMA takes dgelu_pre or (RES) the bf16 residual, one of them (BN 128: its chunk loads fit next to 64
         * accumulators) */
        float2 bv[TMA ? 1 : CH], rv[TMA ? 1 : CH][2], pv[TMA && !LOADS ? 1 : CH][2];
        if constexpr (LOADS) {
            /* this chunk's values arrived during the previous chunk; issue the next chunk's loads now, so each
             * chunk's math and staging hide the next one's latency (one exposed round trip per tile, not per
             * chunk) */
#pragma unroll
            for (int ii = 0; ii < CH; ii++) {
                pv[ii][0] = pn[ii][0];
                pv[ii][1] = pn[ii][1];
            }
            if (i0 + CH < BN / 8) gemm_ld_in_chunk<CH, BIN>(pn, chunk_src, e.vec2, row0, col0 + 8 * (i0 + CH), M, N);
        }
        if constexpr (!TMA) {
#pragma unroll
            for (int ii = 0; ii < CH; ii++) {
                const int col = col0 + 8 * (i0 + ii);
                bv[ii] = make_float2(0.0f, 0.0f);
                if (e.bias != nullptr) {
                    if (col < N) bv[ii].x = __ldg(e.bias + col);
                    if (col + 1 < N) bv[ii].y = __ldg(e.bias + col + 1);
                }
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int row = row0 + 8 * h;
                    const bool in = row < M && col < N;
                    const size_t off = (size_t)row * N + col;
                    rv[ii][h] = make_float2(0.0f, 0.0f);
                    pv[ii][h] = make_float2(0.0f, 0.0f);
                    if (e.res != nullptr && in) rv[ii][h] = gemm_ld2_in<BIN>(e.res, off, e.vec2, col + 1 < N);
                    if constexpr (DGELU) {
                        if (in) pv[ii][h] = gemm_ld2_in<BIN>(e.dpre, off, e.vec2, col + 1 < N);
                    }
                }
            }
        }
        /* one staging pass (a compile-time pass number, so a 1-pass instantiation is exactly the old loop body: a
         * run-time pass loop pushed the dgelu instantiation's chunk loop off full unrolling, its accumulators
         * into a 256-byte local array) */
        auto stage = [&](auto pass_c) {
            constexpr int pass = decltype(pass_c)::value;
            {
                uint32_t box = 0;
                (void)box, (void)pass; /* TMA only */
                if constexpr (TMA) {
                    box = sbase + (uint32_t)(two_pass ? pass : (i0 / CH) % 2) * (64 * 32 * 4);
                    if (tid == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
                    asm volatile("bar.sync %0, 128;" ::"r"(1 + c_wg) : "memory");
                }
#pragma unroll
                for (int ii = 0; ii < CH; ii++) {
                    const int i = i0 + ii, col = col0 + 8 * i;
                    float2 b2 = make_float2(0.0f, 0.0f);
                    if constexpr (TMA) {
                        /* tile column 8i + 2(lane%4): zero past N (cp.async zero-filled it) */
                        if (sh_bias)
                            asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];"
                                         : "=f"(b2.x), "=f"(b2.y)
                                         : "r"(sbias + 32u * (uint32_t)i));
                    } else {
                        b2 = bv[ii];
                    }
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int row = row0 + 8 * h;
                        /* TMA clips the box at M and N: the staged values need no bounds check */
                        if (TMA || (row < M && col < N)) {
                            float v0 = d[4 * i + 2 * h] + b2.x, v1 = d[4 * i + 2 * h + 1] + b2.y;
                            if constexpr (TMA) {
                                if (GELU && pass == NPASS - 1) { /* pass 0 of 2 stages v itself (pre_out) */
                                    v0 = gemm_gelu(v0);
                                    v1 = gemm_gelu(v1);
                                }
                                if constexpr (DGELU) {
                                    v0 *= gemm_gelu_grad(pv[ii][h].x);
                                    v1 *= gemm_gelu_grad(pv[ii][h].y);
                                }
                                if constexpr (RES) { /* the register path's v + res */
                                    v0 += pv[ii][h].x;
                                    v1 += pv[ii][h].y;
                                }
                                /* row r = warp*16 + lane/4 + 8h (r % 8 = lane/4). fp32: column 8ii + 2(lane%4) is in
                                 * 16-byte chunk 2ii + (lane/2)%2 -> swizzled sx ^ 2ii; bf16: in chunk ii -> sx ^ ii */
                                const uint32_t a =
                                    box + srow + 1024u * h + ((sx ^ (uint32_t)(BF16 ? ii : 2 * ii)) << 4);
                                if constexpr (BF16) {
                                    /* v0 at the lower address */
                                    const __nv_bfloat162 p2 = __floats2bfloat162_rn(v0, v1);
                                    const uint32_t w = *reinterpret_cast<const uint32_t *>(&p2);
                                    asm volatile("st.shared.b32 [%0], %1;" ::"r"(a), "r"(w) : "memory");
                                } else {
                                    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(a), "f"(v0), "f"(v1)
                                                 : "memory");
                                }
                            } else {
                                const size_t off = (size_t)row * N + col;
                                const bool has1 = col + 1 < N;
                                if constexpr (GELU) {
                                    if (e.pre != nullptr) gemm_st2<BF16>(e.pre, off, v0, v1, e.vec2, has1);
                                    v0 = gemm_gelu(v0);
                                    v1 = gemm_gelu(v1);
                                }
                                if constexpr (DGELU) {
                                    v0 *= gemm_gelu_grad(pv[ii][h].x);
                                    v1 *= gemm_gelu_grad(pv[ii][h].y);
                                }
                                v0 += rv[ii][h].x;
                                v1 += rv[ii][h].y;
                                gemm_st2<BF16>(e.C, off, v0, v1, e.vec2, has1);
                            }
                        }
                    }
                }
                if constexpr (TMA) {
                    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                    asm volatile("bar.sync %0, 128;" ::"r"(1 + c_wg) : "memory");
                    if (tid == 0) {
                        tma_store_2d(pass == NPASS - 1 ? tm_c : tm_pre, tile_col + 8 * i0, tile_row, box);
                        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
                    }
                }
            }
        };
        if constexpr (NPASS == 2) {
            if (two_pass) stage(gemm_int_c<0>{}); /* pre_out first, then the output */
        }
        stage(gemm_int_c<NPASS - 1>{});
    }
}

/* ---- work schedule: split-K units or stream-K ranges ------------------------
 *
 * Split-K (!ep.streamk): unit u = split (u / tiles) of tile (u % tiles), K tiles [split*kps, +kps); CTA b
 * takes units b, b + grid, ...
 * Stream-K (ep.streamk, TN only): the W = tiles x ktiles (tile, K tile) iterations, tile-major, are cut into
 * grid contiguous ranges, CTA b's is [b*W/grid, (b+1)*W/grid) (each >= 1 iteration: the host keeps grid <= W).
 * A range crosses tile boundaries, so a CTA works on pieces of one to a few tiles; a tile's pieces ("parts")
 * come from consecutive CTAs, part p = CTA index - the first owner's, and meet in the fixup (fixed order
 * 0..parts-1). Every CTA runs the same number of iterations (+-1) whatever tiles x splits would have left over
 * (the point for a dW whose tiles fill a fraction of the SMs unsplit and a partial last wave split), and no
 * reduction pass moves (2S+1) x M*N*4 bytes. */
struct gemm_work {
    int tile, kt0, kt1; /* output tile, K tiles [kt0, kt1) */
    int part, parts;    /* which of the tile's contributions this is; parts == 1: the whole K range */
};

__device__ __forceinline__ long long gemm_sk_bound(long long b, long long W) { return b * W / gridDim.x; }
/* the CTA whose range holds iteration w: the largest b with b*W/grid <= w */
__device__ __forceinline__ int gemm_sk_owner(long long w, long long W) {
    return (int)(((w + 1) * gridDim.x - 1) / W);
}

__device__ __forceinline__ long long gemm_work_begin(const gemm_epi_dev &ep, int num_tiles, int ktiles) {
    return ep.streamk ? gemm_sk_bound(blockIdx.x, (long long)num_tiles * ktiles) : (long long)blockIdx.x;
}

/* The workspace slot (GEMM_BM x BN fp32) of part `part` of `tile`. Split-K: tile x splits + part. Stream-K: two
 * slots per CTA, 2b for the piece that starts its range and 2b + 1 for the one that ends it (the pieces between
 * are whole tiles, which need none): part p > 0 of a tile starts CTA first+p's range; part 0 starts the range
 * of CTA `first` only if the tile begins exactly there. So the workspace is 2 x grid slots whatever the tile
 * count. */
__device__ __forceinline__ long long gemm_fixup_slot(const gemm_epi_dev &ep, int tile, int part, int splits,
                                                     int ktiles, int num_tiles) {
    if (!ep.streamk) return (long long)tile * splits + part;
    const long long W = (long long)num_tiles * ktiles, t0 = (long long)tile * ktiles;
    const int first = gemm_sk_owner(t0, W);
    if (part > 0) return 2LL * (first + part);
    return 2LL * first + (gemm_sk_bound(first, W) == t0 ? 0 : 1);
}

/* this CTA's next work item at cursor (advanced); false when there is none. The producer and the consumers
 * walk the same sequence. */
__device__ __forceinline__ bool gemm_work_next(const gemm_epi_dev &ep, long long &cursor, int num_tiles, int ktiles,
                                               int splits, int kps, gemm_work &wk) {
    if (ep.streamk) {
        const long long W = (long long)num_tiles * ktiles, end = gemm_sk_bound(blockIdx.x + 1, W);
        if (cursor >= end) return false;
        wk.tile = (int)(cursor / ktiles);
        const long long t0 = (long long)wk.tile * ktiles;
        wk.kt0 = (int)(cursor - t0);
        wk.kt1 = end - t0 < ktiles ? (int)(end - t0) : ktiles;
        const int first = gemm_sk_owner(t0, W);
        wk.part = (int)blockIdx.x - first;
        wk.parts = gemm_sk_owner(t0 + ktiles - 1, W) - first + 1;
        cursor = t0 + wk.kt1;
        return true;
    }
    if (cursor >= (long long)num_tiles * splits) return false;
    const int u = (int)cursor;
    wk.part = u / num_tiles;
    wk.tile = u - wk.part * num_tiles;
    wk.kt0 = wk.part * kps;
    wk.kt1 = min(wk.kt0 + kps, ktiles);
    wk.parts = splits;
    cursor += gridDim.x;
    return true;
}

/* ---- split-K: the in-kernel fixed-order reduction ("fixup") ------------------
 *
 * The separate reduction pass reads every split's M*N slice back from memory after the GEMM has finished
 * ((2S+1) x M*N*4 bytes, none of it overlapped with the GEMM). Here the split's CTA
 * writes its partial tile to a per-(tile, split) slot in its fragment order (no bounds checks, one coalesced
 * 512-byte float4 row per warp and register group), then arrives on the tile's counter. The CTA that arrives
 * last (counter == splits - 1) reads the S slots back, still in L2 (each slot was written at most a wave
 * earlier), sums them in the fixed order 0, 1, ..., S-1 (its own slot included, re-read rather than taken
 * from registers, so the order never depends on which split came last) and runs the normal epilogue into C.
 * No atomics on the data, no waiting on other CTAs (the last arriver never waits: it is last), so no
 * co-residency assumption and the result is bit-reproducible for the same arguments and device.
 * Memory ordering (PTX model, the release/acquire pattern through a barrier): every writer thread fences
 * (membar.gl) after its slot stores, the 256 consumer threads meet at a named barrier, then one thread fences
 * again and does the relaxed atomicAdd (release by cumulativity); the thread that sees splits - 1 fences
 * (acquire) before publishing "last" through shared memory and a second barrier, and every reader fences again
 * and loads with ld.global.cg (L2, never a possibly stale L1 line). */
#define GEMM_FIXUP_BAR 5       /* named barrier id: 0 is __syncthreads, 1-2 the TMA-store epilogue's */
#define GEMM_FIXUP_RES_CHUNK 2 /* C += : column groups of C loaded per step (4 spilled 12 bytes at BN = 256) */
#define GEMM_FIXUP_CHUNK 4     /* float4 loads in flight per thread per step: 16 registers next to BN/2 */

template <int BN>
__device__ __forceinline__ void gemm_splitk_fixup(float (&d)[BN / 2], const gemm_epi_dev &ep, int tile, int split,
                                                  int splits, int kernel_splits, int ktiles, int num_tiles, int row0,
                                                  int col0, int M, int N, volatile int *fixup_last) {
    constexpr int V = BN / 8;               /* float4 per consumer thread */
    constexpr int SLOT4 = GEMM_BM * BN / 4; /* float4 per slot: 256 consumer threads x V */
    static_assert(V % GEMM_FIXUP_CHUNK == 0, "chunks tile the thread's float4 groups");
    const int ctid = threadIdx.x - 128; /* 0..255 over both consumer warpgroups */
    /* split / splits: this contribution and the tile's count (stream-K: the tile's parts); kernel_splits: the
     * launch's split count, which lays out the split-K slots */
    float4 *const slots = reinterpret_cast<float4 *>(ep.work) + ctid;
    float4 *const mine =
        slots + (size_t)gemm_fixup_slot(ep, tile, split, kernel_splits, ktiles, num_tiles) * SLOT4;
#pragma unroll
    for (int v = 0; v < V; v++) __stcg(mine + v * 256, make_float4(d[4 * v], d[4 * v + 1], d[4 * v + 2], d[4 * v + 3]));
    __threadfence();
    asm volatile("bar.sync %0, 256;" ::"n"(GEMM_FIXUP_BAR) : "memory");
    if (ctid == 0) {
        __threadfence();
        const int old = atomicAdd(ep.tile_cnt + tile, 1);
        __threadfence();
        *fixup_last = old == splits - 1;
    }
    asm volatile("bar.sync %0, 256;" ::"n"(GEMM_FIXUP_BAR) : "memory");
    if (!*fixup_last) return; /* uniform over the 256 threads; the next write of fixup_last is behind barrier 1 */
    __threadfence();
    const float4 *const first = slots + (size_t)gemm_fixup_slot(ep, tile, 0, kernel_splits, ktiles, num_tiles) * SLOT4;
#pragma unroll
    for (int v0 = 0; v0 < V; v0 += GEMM_FIXUP_CHUNK) {
        float4 w[GEMM_FIXUP_CHUNK];
#pragma unroll
        for (int j = 0; j < GEMM_FIXUP_CHUNK; j++) w[j] = __ldcg(first + (v0 + j) * 256);
#pragma unroll
        for (int j = 0; j < GEMM_FIXUP_CHUNK; j++) {
            d[4 * (v0 + j)] = w[j].x;
            d[4 * (v0 + j) + 1] = w[j].y;
            d[4 * (v0 + j) + 2] = w[j].z;
            d[4 * (v0 + j) + 3] = w[j].w;
        }
    }
    for (int s = 1; s < splits; s++) {
        const float4 *const src =
            slots + (size_t)gemm_fixup_slot(ep, tile, s, kernel_splits, ktiles, num_tiles) * SLOT4;
#pragma unroll
        for (int v0 = 0; v0 < V; v0 += GEMM_FIXUP_CHUNK) {
            float4 w[GEMM_FIXUP_CHUNK];
#pragma unroll
            for (int j = 0; j < GEMM_FIXUP_CHUNK; j++) w[j] = __ldcg(src + (v0 + j) * 256);
#pragma unroll
            for (int j = 0; j < GEMM_FIXUP_CHUNK; j++) {
                d[4 * (v0 + j)] += w[j].x;
                d[4 * (v0 + j) + 1] += w[j].y;
                d[4 * (v0 + j) + 2] += w[j].z;
                d[4 * (v0 + j) + 3] += w[j].w;
            }
        }
    }
    /* C += : C_old + sum, the pass's order, loaded here GEMM_FIXUP_RES_CHUNK column groups at a time (the
     * epilogue's own 8-wide residual chunks spilled next to this function's state); then a plain store */
    if (ep.res != nullptr) {
        const float *const r0 = ep.res + (size_t)row0 * N + col0, *const r1 = r0 + (size_t)8 * N;
        const bool in0 = row0 < M, in1 = row0 + 8 < M;
#pragma unroll
        for (int i0 = 0; i0 < BN / 8; i0 += GEMM_FIXUP_RES_CHUNK) {
            float2 rv[GEMM_FIXUP_RES_CHUNK][2];
#pragma unroll
            for (int ii = 0; ii < GEMM_FIXUP_RES_CHUNK; ii++) {
                const int dc = 8 * (i0 + ii);
                const bool cin = col0 + dc < N, c1 = col0 + dc + 1 < N;
                rv[ii][0] = in0 && cin ? gemm_ld2(r0 + dc, ep.vec2, c1) : make_float2(0.0f, 0.0f);
                rv[ii][1] = in1 && cin ? gemm_ld2(r1 + dc, ep.vec2, c1) : make_float2(0.0f, 0.0f);
            }
#pragma unroll
            for (int ii = 0; ii < GEMM_FIXUP_RES_CHUNK; ii++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    d[4 * (i0 + ii) + 2 * h] = rv[ii][h].x + d[4 * (i0 + ii) + 2 * h];
                    d[4 * (i0 + ii) + 2 * h + 1] = rv[ii][h].y + d[4 * (i0 + ii) + 2 * h + 1];
                }
        }
    }
    gemm_epi_dev out = {};
    out.C = ep.C;
    out.vec2 = ep.vec2;
    gemm_epilogue<BN, 0>(d, out, row0, col0, M, N);
}

/* ---- the bias gradient from the staged A tiles (DBIAS: dW + dbias in one pass over dY) ---------------------
 *
 * In the TN layout A = dout^T (M = OC rows, K = tokens), so dbias[m] = sum over K of A's row m: the column sums
 * of dout, which a separate pass would read from memory again. The ring already holds every K slice of A for
 * the unit's rows. With DBIAS, warps 1 .. BM/64 of the producer warpgroup (idle otherwise: one thread of warp 0
 * issues the TMA copies; the warpgroup sits at setmaxnreg 40) sum them: warp 1 + h takes A box h (rows 64h..64h+63
 * of the block tile) of every stage. They walk the work units in a loop of their own (gemm_dbias_helper), the
 * same sequence as the TMA thread and the consumers. Only units of tile column block 0 sum (one unit per (row
 * block, split), so each partial is written once and no summing is repeated across the N tiles); for every stage
 * of every unit the helper warps wait for the stage's full barrier and then arrive on its empty barrier (its
 * count grows by BM/64), after their reads when they read, so the producer never refills a stage a helper still
 * reads and an arrival always lands in the phase of the round it belongs to (the producer cannot start round
 * r + 1 of a stage before the helpers' round-r arrival). The consumers' code is the same with DBIAS off or on:
 * dW's bits do not depend on it. A unit's partial row goes to dbias_ws[part * M + m], part = the unit's split, so
 * DBIAS takes split-K launches only (under stream-K a unit's part is not its K range; the launcher refuses it).
 * Layout of a box (MN-major, 128-byte swizzle): K row k is 128 bytes (64 M values), its 16-byte chunk j (M values
 * 8j..8j+7) at chunk position j ^ (k % 8). Lane l owns the 4 M values 4(l % 16) .. +3 (chunk j = (l % 16) / 2, its
 * 8-byte half l % 2) in the 32 K rows 32(l / 16) + i, i = 0..31 (k % 8 = i % 8): per 8-byte load the warp reads two
 * whole rows (2 wavefronts, no bank conflicts). Each lane keeps 4 fp32 sums over its rows of all the unit's stages
 * (4 values a lane rather than 8 with 16-byte loads: the producer warpgroup has 40 registers); at the unit's end
 * the two row halves combine by one xor shuffle (a commutative add: both lanes agree bitwise) and lanes 0..15
 * store rows m..m+3 to part_row (M % 4 == 0 and a 16-byte aligned dbias_ws: gemm_wgmma_launch's rules). Rows past
 * K are TMA's zero fill; rows past M are never stored (a box wholly past M is not loaded and not summed). So a
 * partial is each lane half's fp32 sum over its 32 K rows of every stage of the split, in K order, then the two
 * halves added: a fixed order for a given plan. */
template <int STAGES, uint32_t A_STAGE_BYTES>
__device__ __forceinline__ void gemm_dbias_unit(uint32_t sa, uint32_t bars, int box, int m0, int tn, int nk, int M,
                                                float *part_row, int &stage, uint32_t &phase) {
    const int lane = (int)threadIdx.x % 32;
    /* the lane's first row and its chunk (j = (lane % 16) / 2, unswizzled) and 8-byte half: the address bits 4..6
     * of everything else are 0 (1024-byte aligned stages and boxes), so XOR-ing (k % 8) << 4 in swizzles it */
    const uint32_t rows = sa + (uint32_t)box * GEMM_MN_BOX_BYTES + (uint32_t)(lane / 16) * (32u * 128u) +
                          (uint32_t)(lane % 16) * 8u;
    const int mb = m0 + 64 * box;       /* the box's first row */
    const bool sum = tn == 0 && mb < M; /* warp-uniform */
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int n = nk; n > 0; n--) {
        mbar_wait(bars + 8 * stage, phase);
        if (sum) {
            const uint32_t p = rows + (uint32_t)stage * A_STAGE_BYTES;
#pragma unroll
            for (int i = 0; i < 32; i++) {
                uint32_t w0, w1;
                asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];"
                             : "=r"(w0), "=r"(w1)
                             : "r"((p ^ ((uint32_t)(i % 8) << 4)) + 128u * (uint32_t)i));
                /* the lower address is the lower M row */
                acc[0] += __uint_as_float(w0 << 16);
                acc[1] += __uint_as_float(w0 & 0xffff0000u);
                acc[2] += __uint_as_float(w1 << 16);
                acc[3] += __uint_as_float(w1 & 0xffff0000u);
            }
        }
        __syncwarp(); /* every lane's reads before lane 0's release of the stage */
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + stage));
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }
    if (sum) {
#pragma unroll
        for (int j = 0; j < 4; j++) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], 16);
        const int m = mb + 4 * (lane % 16);
        if (lane < 16 && m < M)
            *reinterpret_cast<float4 *>(part_row + m) = make_float4(acc[0], acc[1], acc[2], acc[3]);
    }
}

/* A helper warp's walk (DBIAS): the split-K units of gemm_work_next (!ep.streamk: u = split * tiles + tile, CTA b
 * takes b, b + grid, ...) in the same order as the TMA thread, each summed by gemm_dbias_unit. The warps walk the
 * units in a loop of their own, not inside the TMA thread's: folded into that loop (one branch per unit) the
 * qkv dW + dbias took 151.6 us against 118.6 for this form (H200, 2026-12-04, lab/notes/gemm-bf16.md). */
template <int STAGES, int BM, uint32_t A_STAGE_BYTES>
__device__ __forceinline__ void gemm_dbias_helper(uint32_t sa, uint32_t bars, int box, int M, int tiles_m, int tiles_n,
                                                  int ktiles, int splits, int kps, float *dbias_ws) {
    const int num_tiles = tiles_m * tiles_n, units = num_tiles * splits;
    int stage = 0;
    uint32_t phase = 0;
    for (int u = (int)blockIdx.x; u < units; u += (int)gridDim.x) {
        const int part = u / num_tiles;
        int tm, tn;
        gemm_tile_coords(u - part * num_tiles, tiles_m, tiles_n, &tm, &tn);
        gemm_dbias_unit<STAGES, A_STAGE_BYTES>(sa, bars, box, tm * BM, tn, min(kps, ktiles - part * kps), M,
                                               dbias_ws + (size_t)part * M, stage, phase);
    }
}

/* ---- kernels ------------------------------------------------------------- */

/* The persistent warp-specialised mainloop + epilogue, shared by the three layouts. TA / TB (compile time):
 * 0 = the operand is K-major in global and shared memory (one TMA box of rows x 64 K), 1 = MN-major (the
 * MN dimension is contiguous: boxes of 64 MN x 64 K, one per 64-wide MN block, wgmma transpose flag set).
 * Work units are (tile, K split) pairs, unit u = split (u / tiles) of tile (u % tiles), so the CTAs in
 * flight share one K range of the operands in L2. With splits == 1 the epilogue (gemm_epilogue<BN, EPI>, the
 * fused operations of ep) writes C; with splits > 1 (EPI 0 only) it writes split s's partial sums, plain, to
 * the fp32 slice ep.work + s*M*N, and gemm_splitk_reduce_kernel adds the slices into C afterwards (or, TN with
 * ep.tile_cnt, the fixup reduces in the kernel). TN stream-K (ep.streamk) replaces the units by contiguous
 * iteration ranges (gemm_work_next); a tile done by one CTA gets the normal epilogue, one split between CTAs the
 * fixup. DBIAS (the 128 x 256 TN tile, split-K launches only, not stream-K): the producer warpgroup's idle warps
 * also sum A's rows into dbias_ws's per-split partial rows (gemm_dbias_unit). */
template <int BN, int TA, int TB, int EPI, int BM = GEMM_BM, bool DBIAS = false>
__device__ __forceinline__ void gemm_wgmma_body(const CUtensorMap &tm_a, const CUtensorMap &tm_b,
                                                const CUtensorMap &tm_c, const gemm_epi_dev &ep, int M, int N, int K,
                                                int splits, int kps, const CUtensorMap *tm_pre = nullptr,
                                                float *dbias_ws = nullptr) {
    typedef gemm_cfg<BN, BM> cfg;
    /* BM = 192 (TN only): three consumer warpgroups of 64 rows, the plain epilogue, split-K by the pass */
    static_assert(BM == GEMM_BM || (TA && TB && EPI == 0), "the 192-row tile is the TN kernel's, plain epilogue");
    static_assert(!DBIAS || (TA && TB && BM == GEMM_BM), "DBIAS sums the MN-major A boxes of the 128-row TN tile");
    constexpr int CONSUMER_WARPS = 4 * (BM / 64);
    constexpr int STAGES = cfg::STAGES;
    constexpr uint32_t BOX = GEMM_MN_BOX_BYTES; /* one 64 x 64 bf16 MN-major box */
    extern __shared__ __align__(1024) unsigned char gemm_smem[];
    const uint32_t base = (smem_u32(gemm_smem) + 1023u) & ~1023u;
    const uint32_t sa = base;                                   /* A stages */
    const uint32_t sb = base + STAGES * cfg::A_BYTES;           /* B stages */
    constexpr bool TMA_STORE = (EPI & GEMM_EPI_TMA_STORE) != 0;
    const uint32_t sout = base + STAGES * cfg::STAGE_BYTES;     /* TMA_STORE staging: 2 boxes per consumer WG */
    /* full[s] at +8s, empty[s] at +8(STAGES+s) */
    const uint32_t bars = sout + (TMA_STORE ? cfg::OUT_STAGE_BYTES : 0);

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int num_tiles = tiles_m * tiles_n;
    const int ktiles = (K + GEMM_BK - 1) / GEMM_BK;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        /* DBIAS: the helper warps release every stage too */
        wgmma_ring_init<STAGES>(bars, CONSUMER_WARPS + (DBIAS ? BM / 64 : 0));
        tma_prefetch_desc(&tm_a);
        tma_prefetch_desc(&tm_b);
        if constexpr (TMA_STORE) tma_prefetch_desc(&tm_c);
    }
    __syncthreads();
    /* the prologue above touched shared memory and the parameters' tensor maps only; from here on global memory,
     * which the previous kernel may still be writing or reading under programmatic dependent launch (pdl.cuh) */
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    (void)dbias_ws; /* DBIAS only */

    if (wg == 0) {
        /* ---- producer warpgroup: one thread drives the TMA ring (DBIAS: warps 1 .. BM/64 sum A box pw - 1 of
         * each unit beside it, gemm_dbias_helper) ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(BM == 192 ? GEMM_PRODUCER_REGS_3C
                                                                            : GEMM_PRODUCER_REGS));
        if (threadIdx.x == 0) {
            int stage = 0;
            uint32_t phase = 0;
            gemm_work wk;
            for (long long cur = gemm_work_begin(ep, num_tiles, ktiles);
                 gemm_work_next(ep, cur, num_tiles, ktiles, splits, kps, wk);) {
                int tm, tn;
                gemm_tile_coords(wk.tile, tiles_m, tiles_n, &tm, &tn);
                const int kt0 = wk.kt0, kt1 = wk.kt1;
                const int m0 = tm * BM, n0 = tn * BN;
                /* MN-major boxes entirely past M or N are not loaded: their stale shared memory only feeds
                 * output rows / columns the epilogue discards (TMA counts a partly-outside box in full) */
                uint32_t bytes = 0;
                if constexpr (TA) {
                    for (int h = 0; h < BM / 64; h++)
                        if (m0 + 64 * h < M) bytes += BOX;
                } else {
                    bytes += cfg::A_BYTES;
                }
                if constexpr (TB) {
                    for (int j = 0; j < BN / 64; j++)
                        if (n0 + 64 * j < N) bytes += BOX;
                } else {
                    bytes += cfg::B_BYTES;
                }
                for (int kt = kt0; kt < kt1; kt++) {
                    const uint32_t full = bars + 8 * stage, empty = bars + 8 * (STAGES + stage);
                    mbar_wait(empty, phase ^ 1);
                    mbar_arrive_expect_tx(full, bytes);
                    const uint32_t da = sa + stage * cfg::A_BYTES, db = sb + stage * cfg::B_BYTES;
                    if constexpr (TA) {
                        for (int h = 0; h < BM / 64; h++)
                            if (m0 + 64 * h < M) tma_load_2d(da + h * BOX, &tm_a, m0 + 64 * h, kt * GEMM_BK, full);
                    } else {
                        tma_load_2d(da, &tm_a, kt * GEMM_BK, m0, full);
                    }
                    if constexpr (TB) {
                        for (int j = 0; j < BN / 64; j++)
                            if (n0 + 64 * j < N) tma_load_2d(db + j * BOX, &tm_b, n0 + 64 * j, kt * GEMM_BK, full);
                    } else {
                        tma_load_2d(db, &tm_b, kt * GEMM_BK, n0, full);
                    }
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
        } else if constexpr (DBIAS) {
            const int pw = (int)threadIdx.x / 32; /* warps 1 .. BM/64 sum A box pw - 1 (gemm_dbias_helper) */
            if (pw >= 1 && pw <= BM / 64)
                gemm_dbias_helper<STAGES, BM, cfg::A_BYTES>(sa, bars, pw - 1, M, tiles_m, tiles_n, ktiles, splits,
                                                            kps, dbias_ws);
        }
    } else {
        /* ---- consumer warpgroups: wgmma from the ring, then the epilogue ---- */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(BM == 192 ? GEMM_CONSUMER_REGS_3C
                                                                            : GEMM_CONSUMER_REGS));
        const int c = wg - 1;                 /* which 64-row block of the block tile */
        const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32;
        int stage = 0;
        uint32_t phase = 0;
        float d[BN / 2];
#pragma unroll
        for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;

        gemm_work wk;
        for (long long cur = gemm_work_begin(ep, num_tiles, ktiles);
             gemm_work_next(ep, cur, num_tiles, ktiles, splits, kps, wk);) {
            int tm, tn;
            gemm_tile_coords(wk.tile, tiles_m, tiles_n, &tm, &tn);
            const int kt0 = wk.kt0, kt1 = wk.kt1;
            const int row0 = tm * BM + c * 64 + warp * 16 + lane / 4;
            const int col0 = tn * BN + 2 * (lane % 4);
            /* the epilogue's inputs travel to L2 while the mainloop runs */
            constexpr bool BIN = (EPI & GEMM_EPI_BF16_IN) != 0;
            if (wk.parts == 1 && ep.res != nullptr) gemm_prefetch_rows<BN, BIN>(ep.res, row0, tn * BN, lane, M, N);
            if constexpr ((EPI & GEMM_EPI_DGELU) != 0)
                gemm_prefetch_rows<BN, BIN>(ep.dpre, row0, tn * BN, lane, M, N);
            /* TMA store + bias: the tile's BN bias values go to shared memory once, by cp.async (no registers,
             * no wait until the epilogue), instead of 2 x BN/8 dependent global loads per thread in the epilogue
             * (measured slower: lab/notes/gemm-bf16.md). One copy for both consumer warpgroups: the
             * barrier makes sure the other one has finished reading the previous tile's copy. */
            if constexpr (TMA_STORE) {
                if (ep.bias != nullptr) {
                    asm volatile("bar.sync %0, 256;" ::"n"(GEMM_BIAS_BAR) : "memory");
                    const int ct = (int)threadIdx.x - 128, col = tn * BN + ct;
                    if (ct < BN) {
                        const uint32_t dst = sout + cfg::BIAS_OFF + 4u * (uint32_t)ct;
                        const size_t src = __cvta_generic_to_global(ep.bias + (col < N ? col : 0));
                        /* src-size 0 past N: zero-filled */
                        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src),
                                     "r"(col < N ? 4 : 0)
                                     : "memory");
                    }
                    asm volatile("cp.async.commit_group;" ::: "memory");
                }
            }
            int prev = 0;
            for (int kt = kt0; kt < kt1; kt++) {
                mbar_wait(bars + 8 * stage, phase);
                /* this warpgroup's 64 rows: K-major, rows c*64.. of the 128-row box (64 rows x 128 B);
                 * MN-major, box c (64 M x 64 K, 8 KiB): the same offset either way */
                const uint32_t a0 = sa + stage * cfg::A_BYTES + c * (64 * 128);
                const uint32_t b0 = sb + stage * cfg::B_BYTES;
                wgmma_fence();
#pragma unroll
                for (int k = 0; k < GEMM_BK / 16; k++) {
                    /* K-major: the k-th 16-wide K step is 32 bytes into each row; MN-major: 16 rows of
                     * 128 bytes further */
                    const uint64_t da = TA ? wgmma_desc_mn(a0 + 2048 * k) : wgmma_desc(a0 + 32 * k);
                    const uint64_t db = TB ? wgmma_desc_mn(b0 + 2048 * k) : wgmma_desc(b0 + 32 * k);
                    /* scale-d 0 on the unit's first MMA: overwrite, don't accumulate */
                    wgmma_tile_k16<BN, TA, TB>(d, da, db, (kt != kt0 || k != 0) ? 1 : 0);
                }
                /* the previous slice's MMAs done: release its stage */
                wgmma_ring_step<STAGES>(bars, kt > kt0, lane, prev, stage, phase);
            }
            wgmma_wait<0>();
            wgmma_fence_operands(d);
            if (lane == 0) mbar_arrive(bars + 8 * (STAGES + prev));

            if (wk.parts == 1) {
                gemm_epilogue<BN, EPI>(d, ep, row0, col0, M, N, &tm_c, sout, tm_pre);
            } else if (TA && TB && BM == GEMM_BM && ep.tile_cnt != nullptr) { /* TN: the in-kernel reduction */
                /* "last" flag: the 16 bytes after the barriers, inside the 1 KiB alignment slack of cfg::SMEM */
                if constexpr (TA && TB && BM == GEMM_BM)
                    gemm_splitk_fixup<BN>(d, ep, wk.tile, wk.part, wk.parts, splits, ktiles, num_tiles, row0,
                                          col0, M, N,
                                          reinterpret_cast<volatile int *>(
                                              gemm_smem + (bars + 16 * STAGES - smem_u32(gemm_smem))));
            } else { /* a split-K partial: plain fp32 into this split's slice of the workspace */
                gemm_epi_dev part = {};
                part.vec2 = ep.vec2;
                if constexpr (TMA_STORE && TA && TB) {
                    /* TN split partials through the TMA store: tm_c maps the workspace as (splits x M) rows of N;
                     * slice s starts at row s*M (M % 128 == 0, so no box crosses into the next slice) */
                    part.C = ep.work;
                    gemm_epilogue<BN, GEMM_EPI_TMA_STORE>(d, part, row0 + wk.part * M, col0, splits * M, N, &tm_c,
                                                          sout);
                } else {
                    part.C = ep.work + (size_t)wk.part * M * N;
                    gemm_epilogue<BN, 0>(d, part, row0, col0, M, N);
                }
            }
        }
        /* the staging boxes must not be released (CTA exit) while a TMA store still reads them */
        if constexpr (TMA_STORE) {
            if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        }
    }
}

/* NT (forward, Y = X . W^T): A (M,K) and B (N,K), both K-major. EPI: any of GELU, BF16; or TMA_STORE alone
 * (+ bias, GELU, bf16 out; the host refuses residual / pre_out with it).
 * tm_c (every layout; read only with TMA_STORE): C as an (M,N) fp32 / bf16 tensor, boxes of 64 rows x 128 B.
 * tm_pre (NT only; read only with TMA_STORE | GELU and ep.pre set): pre_out, the same geometry as tm_c. */
template <int BN, int EPI>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
    gemm_wgmma_bf16_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                           const __grid_constant__ CUtensorMap tm_c, const gemm_epi_dev ep, int M, int N, int K,
                           int splits, int kps, const __grid_constant__ CUtensorMap tm_pre) {
    gemm_wgmma_body<BN, 0, 0, EPI>(tm_a, tm_b, tm_c, ep, M, N, K, splits, kps, &tm_pre);
}

/* NN (dX = dY . W): A (M,K) K-major, B stored (K,N) with N contiguous: MN-major. EPI: 0, DGELU, TMA_STORE, or
 * DGELU | TMA_STORE or RES | TMA_STORE (BN 128 only), each optionally with BF16 (| BF16_IN). */
template <int BN, int EPI>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
    gemm_wgmma_bf16_nn_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                              const __grid_constant__ CUtensorMap tm_c, const gemm_epi_dev ep, int M, int N, int K,
                              int splits, int kps) {
    gemm_wgmma_body<BN, 0, 1, EPI>(tm_a, tm_b, tm_c, ep, M, N, K, splits, kps);
}

/* TN (dW = dY^T . X): A stored (K,M) with M contiguous, B stored (K,N) with N contiguous: both MN-major. EPI 0,
 * or TMA_STORE (split-K partials through the TMA store, tm_c = the workspace; launched only with
 * splits > 1, so no unit takes the whole-tile epilogue). DBIAS (BN 256, BM 128): dbias_ws gets the per-split
 * partial rows of A's row sums (gemm_dbias_unit); read only with DBIAS. */
template <int BN, int EPI, int BM, bool DBIAS = false>
__global__ void __launch_bounds__(128 * (1 + BM / 64), 1)
    gemm_wgmma_bf16_tn_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                              const __grid_constant__ CUtensorMap tm_c, const gemm_epi_dev ep, int M, int N, int K,
                              int splits, int kps, float *dbias_ws) {
    gemm_wgmma_body<BN, 1, 1, EPI, BM, DBIAS>(tm_a, tm_b, tm_c, ep, M, N, K, splits, kps, nullptr, dbias_ws);
}

/* ---- TN on 192 x 192 tiles, two consumer warpgroups splitting N (the "C192" kernel) ------------------------
 * The tile and split-K plan that cuBLAS's dW kernel uses at the GPT-2 MLP shapes (192 x 192, two consumer
 * warpgroups, one wave of split-K units), where the 128 x 256 plan takes almost three waves and a three-warpgroup
 * 192-row tile (the lab's T192) loses in its mainloop (lab/notes/gemm-bf16.md). Warpgroup w computes all 192 rows x
 * columns 96w..96w+95: per k16 step three wgmma m64n96k16 (A row-blocks 0-2, the same B half), 3 x 48
 * accumulators. A 96-column half must start on an MN block of the swizzled layout, so B is staged as six 32-wide
 * MN-major boxes with the 64-byte swizzle (wgmma_desc_mn64), A as the usual three 64-wide boxes (128-byte
 * swizzle). Work units as in the 128-row kernel (unit u = split u / tiles of tile u % tiles, kps K slices each);
 * splits == 1 writes C (C += through ep.res), splits > 1 writes plain partials to ep.work's slice and the pass
 * reduces them (gemm_splitk_reduce_launch). The product's kernel is gemm_wgmma_bf16_tn_c192_kernel (gemm_wgmma.cu).
 * No fused bias gradient here: its DBIAS form (the producer warpgroup's three idle warps summing A's three boxes)
 * measured 0.81x the GEMM + the separate column sum at the GPT-2 MLP projection (lab/notes/gemm-bf16.md). */
#define GEMM_C192_BM 192
#define GEMM_C192_BN 192
#define GEMM_C192_STAGES 4
#define GEMM_C192_B_BOX 32                                   /* N columns per B box (64-byte swizzle) */
#define GEMM_C192_B_BOX_BYTES (GEMM_C192_B_BOX * GEMM_BK * 2) /* 4096 */
#define GEMM_C192_A_BYTES (GEMM_C192_BM * GEMM_BK * 2)       /* 24576: three 64-wide boxes */
#define GEMM_C192_B_BYTES (GEMM_C192_BN * GEMM_BK * 2)       /* 24576: six 32-wide boxes */
#define GEMM_C192_SMEM \
    ((size_t)GEMM_C192_STAGES * (GEMM_C192_A_BYTES + GEMM_C192_B_BYTES) + 2 * GEMM_C192_STAGES * 8 + 1024)

/* d (64 x 96 fp32, 48 registers per thread) += A (64x16, smem desc) . B (96x16, smem desc)^T, both MN-major */
__device__ __forceinline__ void wgmma_m64n96k16_tt(float (&d)[48], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {" WG_REGS48 "}, %48, %49, p, 1, 1, 1, 1;\n}\n"
                 : WG_ACC48
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void gemm_tn_c192_body(const CUtensorMap &tm_a, const CUtensorMap &tm_b,
                                                  const gemm_epi_dev &ep, int M, int N, int K, int splits, int kps) {
    constexpr int STAGES = GEMM_C192_STAGES;
    extern __shared__ __align__(1024) unsigned char gemm_smem[];
    const uint32_t base = (smem_u32(gemm_smem) + 1023u) & ~1023u;
    const uint32_t sa = base, sb = base + STAGES * GEMM_C192_A_BYTES;
    const uint32_t bars = sb + STAGES * GEMM_C192_B_BYTES; /* full[s] at +8s, empty[s] at +8(STAGES+s) */
    const int tiles_m = (M + GEMM_C192_BM - 1) / GEMM_C192_BM, tiles_n = (N + GEMM_C192_BN - 1) / GEMM_C192_BN;
    const int num_tiles = tiles_m * tiles_n;
    const int ktiles = (K + GEMM_BK - 1) / GEMM_BK;
    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        wgmma_ring_init<STAGES>(bars, GEMM_CONSUMER_WARPS);
        tma_prefetch_desc(&tm_a);
        tma_prefetch_desc(&tm_b);
    }
    __syncthreads();
    /* shared memory and the parameters' tensor maps only above; global memory from here (pdl.cuh) */
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    gemm_epi_dev noep = {}; /* gemm_work_next's split-K path reads only ep.streamk */
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(GEMM_PRODUCER_REGS));
        if (threadIdx.x == 0) {
            int stage = 0;
            uint32_t phase = 0;
            gemm_work wk;
            for (long long cur = blockIdx.x; gemm_work_next(noep, cur, num_tiles, ktiles, splits, kps, wk);) {
                int tm, tn;
                gemm_tile_coords(wk.tile, tiles_m, tiles_n, &tm, &tn);
                const int m0 = tm * GEMM_C192_BM, n0 = tn * GEMM_C192_BN;
                /* boxes wholly past M or N are not loaded (they feed only discarded rows / columns) */
                uint32_t bytes = 0;
                for (int h = 0; h < 3; h++)
                    if (m0 + 64 * h < M) bytes += GEMM_MN_BOX_BYTES;
                for (int j = 0; j < GEMM_C192_BN / GEMM_C192_B_BOX; j++)
                    if (n0 + GEMM_C192_B_BOX * j < N) bytes += GEMM_C192_B_BOX_BYTES;
                for (int kt = wk.kt0; kt < wk.kt1; kt++) {
                    const uint32_t full = bars + 8 * stage, empty = bars + 8 * (STAGES + stage);
                    mbar_wait(empty, phase ^ 1);
                    mbar_arrive_expect_tx(full, bytes);
                    const uint32_t da = sa + stage * GEMM_C192_A_BYTES, db = sb + stage * GEMM_C192_B_BYTES;
                    for (int h = 0; h < 3; h++)
                        if (m0 + 64 * h < M)
                            tma_load_2d(da + h * GEMM_MN_BOX_BYTES, &tm_a, m0 + 64 * h, kt * GEMM_BK, full);
                    for (int j = 0; j < GEMM_C192_BN / GEMM_C192_B_BOX; j++)
                        if (n0 + GEMM_C192_B_BOX * j < N)
                            tma_load_2d(db + j * GEMM_C192_B_BOX_BYTES, &tm_b, n0 + GEMM_C192_B_BOX * j, kt * GEMM_BK,
                                        full);
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(GEMM_CONSUMER_REGS));
        const int w = wg - 1; /* which 96-column half of the tile */
        const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32;
        int stage = 0;
        uint32_t phase = 0;
        float d0[48], d1[48], d2[48];
#pragma unroll
        for (int i = 0; i < 48; i++) d0[i] = d1[i] = d2[i] = 0.0f;
        gemm_work wk;
        for (long long cur = blockIdx.x; gemm_work_next(noep, cur, num_tiles, ktiles, splits, kps, wk);) {
            int tm, tn;
            gemm_tile_coords(wk.tile, tiles_m, tiles_n, &tm, &tn);
            int prev = 0;
            for (int kt = wk.kt0; kt < wk.kt1; kt++) {
                mbar_wait(bars + 8 * stage, phase);
                const uint32_t a0 = sa + stage * GEMM_C192_A_BYTES;
                const uint32_t b0 = sb + stage * GEMM_C192_B_BYTES + (uint32_t)w * 3u * GEMM_C192_B_BOX_BYTES;
                wgmma_fence();
#pragma unroll
                for (int k = 0; k < GEMM_BK / 16; k++) {
                    /* MN-major: a k16 step is 16 K rows further (128-byte rows for A, 64-byte rows for B) */
                    const uint64_t db = wgmma_desc_mn64(b0 + 1024 * k);
                    const int sc = (kt != wk.kt0 || k != 0) ? 1 : 0;
                    wgmma_m64n96k16_tt(d0, wgmma_desc_mn(a0 + 2048 * k), db, sc);
                    wgmma_m64n96k16_tt(d1, wgmma_desc_mn(a0 + GEMM_MN_BOX_BYTES + 2048 * k), db, sc);
                    wgmma_m64n96k16_tt(d2, wgmma_desc_mn(a0 + 2 * GEMM_MN_BOX_BYTES + 2048 * k), db, sc);
                }
                wgmma_ring_step<STAGES>(bars, kt > wk.kt0, lane, prev, stage, phase);
            }
            wgmma_wait<0>();
            wgmma_fence_operands(d0);
            wgmma_fence_operands(d1);
            wgmma_fence_operands(d2);
            if (lane == 0) mbar_arrive(bars + 8 * (STAGES + prev));
            /* fragment of m64n96: d[4i + 2h + j] is row warp*16 + lane/4 + 8h, column 8i + 2(lane%4) + j */
            gemm_epi_dev out = ep;
            if (wk.parts > 1) {
                out = gemm_epi_dev{};
                out.C = ep.work + (size_t)wk.part * M * N;
                out.vec2 = ep.vec2;
            }
            const int row0 = tm * GEMM_C192_BM + warp * 16 + lane / 4;
            const int col0 = tn * GEMM_C192_BN + 96 * w + 2 * (lane % 4);
            gemm_epilogue<96, 0>(d0, out, row0, col0, M, N);
            gemm_epilogue<96, 0>(d1, out, row0 + 64, col0, M, N);
            gemm_epilogue<96, 0>(d2, out, row0 + 128, col0, M, N);
        }
    }
}

/* ---- host: launch machinery ------------------------------------------------------------------------------
 * gemm_wgmma.cu defines the non-template helpers declared below (external linkage, so that the lab's variants
 * link them from the library) and the entry points of gemm.h. */

/* Process-wide caches of facts that never change for a device (SM count, capability; per instantiation of
 * gemm_wgmma_launch, whether the kernel's shared-memory limit was raised). Racing writers store identical values. */
#define GEMM_MAX_DEVICES 64

/* The current device and its SM count; FORGE_ERR_UNSUPPORTED unless it has compute capability 9.x. */
forge_status gemm_device_info(int *dev, int *sm_count);

/* Tensor maps of the operands and of C (the layouts gemm_wgmma_body reads and gemm_epilogue stages):
 * - kmajor: a (rows, K) bf16 operand, K contiguous: boxes of 64 K x box_rows, 128-byte swizzle.
 * - mnmajor: a (K, mn) bf16 operand stored row-major, mn contiguous: boxes of 64 mn x 64 K with the 128-byte
 *   swizzle, or (box_mn = 32) 32 x 64 boxes with the 64-byte swizzle (the C192 kernel's B, wgmma_desc_mn64).
 * - c: C (M,N) fp32 (N % 4 == 0) or bf16 (N % 8 == 0) for the TMA store: boxes of 128 bytes x 64 rows. */
forge_status gemm_encode_kmajor(CUtensorMap *map, gemm_encode_tiled_fn encode, const void *ptr, int rows, int K,
                                int box_rows, const char *what);
forge_status gemm_encode_mnmajor(CUtensorMap *map, gemm_encode_tiled_fn encode, const void *ptr, int mn, int K,
                                 const char *what, int box_mn = 64);
forge_status gemm_encode_c(CUtensorMap *map, gemm_encode_tiled_fn encode, void *ptr, int M, int N, int bf16);

/* The split-K second pass over ep.work's splits slices into ep.C (C += when accumulate); pdl: launched with
 * programmatic dependent launch (pdl.cuh), as every launcher below does with its pdl argument. */
forge_status gemm_splitk_reduce_launch(const gemm_epi_dev &ep, int M, int N, int splits, int accumulate,
                                       cudaStream_t stream, int pdl, int sm_count);

/* The layouts: NT = both K-major, NN = B MN-major, TN = both MN-major. */
enum { GEMM_NT = 0, GEMM_NN = 1, GEMM_TN = 2 };

/* The kernel of (BN, layout, EPI, BM, DBIAS) as a symbol (its shared-memory attribute); if constexpr so that only
 * the requested instantiation exists. DBIAS: the TN 128 x 256 tile's only. */
template <int BN, int LAYOUT, int EPI, int BM, bool DBIAS> static const void *gemm_kernel_sym(void) {
    if constexpr (LAYOUT == GEMM_NT)
        return (const void *)gemm_wgmma_bf16_kernel<BN, EPI>;
    else if constexpr (LAYOUT == GEMM_NN)
        return (const void *)gemm_wgmma_bf16_nn_kernel<BN, EPI>;
    else
        return (const void *)gemm_wgmma_bf16_tn_kernel<BN, EPI, BM, DBIAS>;
}

/* ep.vec2 is set here. accumulate only matters for splits > 1 (the reduction adds C); with splits == 1 the
 * caller expresses C += as ep.res = C. dbias_ws != nullptr (the 128 x 256 TN tile on a split-K launch only: the
 * DBIAS instantiation, gemm_dbias_unit) also writes dbias_ws[s * M + m] = split s's sum of A's row m, s < splits
 * (16-byte aligned, M % 4 == 0); nullptr: the kernel without it. */
template <int BN, int LAYOUT, int EPI, int BM = GEMM_BM>
static forge_status gemm_wgmma_launch(const void *A, const void *B, gemm_epi_dev ep, int M, int N, int K,
                                      int accumulate, int splits, cudaStream_t stream, int pdl, int dev, int sm_count,
                                      long long sk_iters = 0, float *dbias_ws = nullptr) {
    static_assert(BM == GEMM_BM || (LAYOUT == GEMM_TN && EPI == 0), "the 192-row tile is TN's, plain epilogue");
    constexpr int threads = 128 * (1 + BM / 64);
    static_assert(LAYOUT != GEMM_TN || EPI == 0 || EPI == GEMM_EPI_TMA_STORE,
                  "dW (TN) has the plain epilogue, or TMA-stored split partials");
    constexpr bool HAS_DBIAS = LAYOUT == GEMM_TN && BN == 256 && BM == GEMM_BM; /* the only DBIAS instantiations */
    if (dbias_ws != nullptr &&
        (!HAS_DBIAS || sk_iters > 0 || ep.streamk || (uintptr_t)dbias_ws % 16 != 0 || M % 4 != 0))
        return forge_error(FORGE_ERR_ARG, "gemm_wgmma: the fused bias gradient takes the 128 x 256 TN tile on a "
                                          "split-K launch, M %% 4 == 0 and 16-byte aligned rows");
    const bool dbias = HAS_DBIAS && dbias_ws != nullptr;
    typedef gemm_cfg<BN, BM> cfg;
    static kernel_attrs_once once[2]; /* per kernel of the instantiation (without, with the bias gradient) */
    const void *kernel_sym = dbias ? gemm_kernel_sym<BN, LAYOUT, EPI, BM, HAS_DBIAS>()
                                   : gemm_kernel_sym<BN, LAYOUT, EPI, BM, false>();
    gemm_encode_tiled_fn encode = nullptr;
    FORGE_TRY(gemm_get_encoder(&encode));
    CUtensorMap tm_a, tm_b;
    if (LAYOUT == GEMM_TN)
        FORGE_TRY(gemm_encode_mnmajor(&tm_a, encode, A, M, K, "A"));
    else
        FORGE_TRY(gemm_encode_kmajor(&tm_a, encode, A, M, K, GEMM_BM, "A"));
    if (LAYOUT == GEMM_NT)
        FORGE_TRY(gemm_encode_kmajor(&tm_b, encode, B, N, K, BN, "B"));
    else
        FORGE_TRY(gemm_encode_mnmajor(&tm_b, encode, B, N, K, "B"));
    CUtensorMap tm_c, tm_pre;
    memset(&tm_c, 0, sizeof tm_c);
    memset(&tm_pre, 0, sizeof tm_pre);
    if constexpr (LAYOUT == GEMM_TN && (EPI & GEMM_EPI_TMA_STORE) != 0) {
        if (splits < 2 || ep.work == nullptr || ep.tile_cnt != nullptr || ep.streamk)
            return forge_error(FORGE_ERR_ARG, "gemm_wgmma tn: TMA-stored partials need a plain split-K launch");
        FORGE_TRY(gemm_encode_c(&tm_c, encode, ep.work, splits * M, N, 0)); /* the splits' slices, stacked */
    } else if constexpr ((EPI & GEMM_EPI_TMA_STORE) != 0) {
        FORGE_TRY(gemm_encode_c(&tm_c, encode, ep.C, M, N, (EPI & GEMM_EPI_BF16) != 0));
    }
    if constexpr ((EPI & GEMM_EPI_TMA_STORE) != 0 && (EPI & GEMM_EPI_GELU) != 0)
        if (ep.pre != nullptr) FORGE_TRY(gemm_encode_c(&tm_pre, encode, ep.pre, M, N, (EPI & GEMM_EPI_BF16) != 0));
    const size_t smem = (EPI & GEMM_EPI_TMA_STORE) ? cfg::SMEM_TMA_STORE : cfg::SMEM;
    CUDA_TRY(kernel_attrs_set_dev(&once[dbias], dev, kernel_sym, (int)smem, 0));
    const int ktiles = (K + GEMM_BK - 1) / GEMM_BK;
    const int kps = (ktiles + splits - 1) / splits;
    const long long units = (long long)((M + BM - 1) / BM) * ((N + BN - 1) / BN) * splits;
    if (units > 0x7fffffffLL) return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_wgmma: %lld work units overflow int", units);
    /* stream-K (sk_iters = tiles x ktiles): every SM, but never more CTAs than iterations (each range >= 1) */
    const long long want = sk_iters > 0 ? sk_iters : units;
    const int grid = (int)(want < sm_count ? want : sm_count);
    /* 2-element accesses: N even (an even column's pair then never straddles a row end) and every (M,N) buffer
     * aligned for them (8 bytes fp32, 4 bytes bf16) */
    const uintptr_t c_align = (EPI & GEMM_EPI_BF16) ? 4 : 8, in_align = (EPI & GEMM_EPI_BF16_IN) ? 4 : 8;
    ep.vec2 = N % 2 == 0 && (uintptr_t)ep.C % c_align == 0 && (uintptr_t)ep.pre % c_align == 0 &&
              (uintptr_t)ep.res % in_align == 0 && (uintptr_t)ep.dpre % in_align == 0 && (uintptr_t)ep.work % 8 == 0;
    if constexpr (LAYOUT == GEMM_NT)
        CUDA_LAUNCH_TRY(forge_pdl_launch(gemm_wgmma_bf16_kernel<BN, EPI>, grid, threads, smem, stream, pdl, tm_a, tm_b,
                                         tm_c, ep, M, N, K, splits, kps, tm_pre),
                        "gemm_wgmma_bf16_kernel");
    else if constexpr (LAYOUT == GEMM_NN)
        CUDA_LAUNCH_TRY(forge_pdl_launch(gemm_wgmma_bf16_nn_kernel<BN, EPI>, grid, threads, smem, stream, pdl, tm_a,
                                         tm_b, tm_c, ep, M, N, K, splits, kps),
                        "gemm_wgmma_bf16_nn_kernel");
    else if (dbias)
        CUDA_LAUNCH_TRY(forge_pdl_launch(gemm_wgmma_bf16_tn_kernel<BN, EPI, BM, HAS_DBIAS>, grid, threads, smem, stream,
                                         pdl, tm_a, tm_b, tm_c, ep, M, N, K, splits, kps, dbias_ws),
                        "gemm_wgmma_bf16_tn_kernel (dbias)");
    else
        CUDA_LAUNCH_TRY(forge_pdl_launch(gemm_wgmma_bf16_tn_kernel<BN, EPI, BM>, grid, threads, smem, stream, pdl, tm_a,
                                         tm_b, tm_c, ep, M, N, K, splits, kps, (float *)nullptr),
                        "gemm_wgmma_bf16_tn_kernel");
    /* with tile_cnt the kernel reduced in place (TN fixup) */
    if (splits > 1 && ep.tile_cnt == nullptr)
        return gemm_splitk_reduce_launch(ep, M, N, splits, accumulate, stream, pdl, sm_count);
    return FORGE_OK;
}


/* ---- NT / NN: the fused epilogues -------------------------------------------------------------------------- */

/* Why the TMA store (GEMM_EPI_TMA_STORE) cannot take these arguments, or NULL. The entries take the TMA store
 * wherever this is NULL and the direct store elsewhere (gemm.h's forge_gemm_bf16_epi_store). */
const char *gemm_epi_tma_refusal(int layout, const void *C, int N, const forge_gemm_epilogue *e);

/* What forge_gemm_bf16_nt_epi / forge_gemm_bf16_nn_epi run, with the store given: tma_store != 0 stages C in
 * shared memory and stores it with TMA (FORGE_ERR_UNSUPPORTED with gemm_epi_tma_refusal's reason where it cannot),
 * 0 stores from the registers. The entries pass tma_store = (gemm_epi_tma_refusal(...) == NULL). epi NULL: plain. */
forge_status gemm_bf16_nt_epi_launch(const void *A, const void *B, void *C, int M, int N, int K,
                                     const forge_gemm_epilogue *epi, int tma_store, cudaStream_t stream, int pdl);
forge_status gemm_bf16_nn_epi_launch(const void *A, const void *B, void *C, int M, int N, int K,
                                     const forge_gemm_epilogue *epi, int tma_store, cudaStream_t stream, int pdl);

/* ---- TN (dW): the pieces of forge_gemm_bf16_tn_wgmma's plan ------------------------------------------------ */

/* Why the NN / TN paths cannot take these arguments, or NULL. */
const char *gemm_wgmma_refusal_bwd(int layout, const void *A, const void *B, const float *C, int M, int N, int K);

/* How many M*N fp32 split slices the workspace holds (0 without one). */
long long gemm_tn_max_slices(int M, int N, const void *workspace, size_t workspace_bytes);

/* A candidate tile of the TN cost model (gemm_plan_tn): bm x bn, the modelled cost of one 64-wide K slice of a
 * unit relative to 128 x 256's, and one_wave: only plans of at most one wave of units may take it. */
typedef struct {
    int bm, bn;
    double slice_cost;
    int one_wave;
} gemm_tn_tile;
/* The default plan's candidates: 128 x 256 (1) and 128 x 128 (0.68: its MMAs are half as wide, its operand loads
 * not halved; the cost measured on the H200 at gpt2-124m's qkv dW, lab/notes/gemm-bf16.md). */
extern const gemm_tn_tile GEMM_TN_TILES[2];

/* Split-K plan for TN: of the n_tiles candidates and splits 1..cap, the (tile, splits) with the least modelled
 * time, where time = waves x K slices per unit x the tile's slice cost + the reduction pass's traffic (each
 * split's slice written once and read once, C read if accumulating and written) at 3.5 TB/s, in units of one
 * 128x256x64 slice (0.6 us; both constants measured: lab/notes/gemm-bf16.md). cap = min(K slices,
 * GEMM_MAX_SPLITS, max_slices; at least 1): max_slices is what the workspace holds (< 2: no split). Every split
 * is non-empty (splits = ceil(ktiles / kps)); ties go to the earlier candidate and the smaller split count.
 * Deterministic in its arguments. */
void gemm_plan_tn(int M, int N, int K, int accumulate, int sm_count, long long max_slices, const gemm_tn_tile *tiles,
                  int n_tiles, int *bm_out, int *bn_out, int *splits_out);

/* The splits that put 192 x 192 tiles on one wave of units: SMs / tiles, capped like the model's (GEMM_MAX_SPLITS,
 * max_slices, K slices) and renormalised so that no split is empty. */
int gemm_tn_one_wave_splits(int M, int N, int K, int sm_count, long long max_slices);

/* Whether the default runs the C192 kernel at `splits` (gemm_tn_one_wave_splits): where that one wave keeps
 * >= 90% of the SMs busy with units of >= 64 K slices; with shorter units the 128-row plans measured faster
 * (lab/notes/gemm-bf16.md). */
int gemm_tn_c192_default(int M, int N, int K, int sm_count, int splits);

/* The plan forge_gemm_bf16_tn_wgmma(_dbias) runs at (M, N, K) with max_slices split slices in its workspace: the
 * C192 kernel at its one-wave splits where gemm_tn_c192_default takes it, else gemm_plan_tn's 128-row tile (bm x bn)
 * at `splits`. */
struct gemm_tn_default {
    int c192, bm, bn, splits;
};
gemm_tn_default gemm_tn_default_plan(int M, int N, int K, int accumulate, int sm_count, long long max_slices);

/* Whether that plan also sums the bias gradient's partial rows (DBIAS) into rows_floats floats: the 128 x 256 tile
 * only (the C192 form measured slower than the separate column sum, lab/notes/gemm-bf16.md), one row of M per
 * split. */
int gemm_tn_default_dbias(const gemm_tn_default &p, int M, size_t rows_floats);

/* C (+)= A^T . B on the C192 kernel (192 x 192 tiles, two consumer warpgroups splitting N) at `splits`: unsplit,
 * C += is the epilogue's read-add-store; split, the partials go to the workspace's slices and the pass adds them
 * (and C) in order. */
forge_status gemm_tn_c192_run(const void *A, const void *B, float *C, int M, int N, int K, int accumulate,
                              void *workspace, int splits, cudaStream_t stream, int pdl, int dev, int sm_count);

/* One launch of the 128-row TN kernel of width bn (128 or 256) with ep as given (split partials through the TMA
 * store when tma_partials; stream-K when sk_iters > 0), then the reduction pass where the launch splits K without
 * tile counters. dbias_ws: gemm_wgmma_launch's (bn 256 on a split-K launch only; nullptr: none). */
forge_status gemm_tn_launch(int bn, int tma_partials, const void *A, const void *B, const gemm_epi_dev &ep, int M,
                            int N, int K, int accumulate, int splits, cudaStream_t stream, int pdl, int dev,
                            int sm_count, long long sk_iters, float *dbias_ws = nullptr);

/* Whether split partials can go through the TMA store: M % 128 == 0 (a box never crosses into the next split's
 * slice), N % 4 == 0, a 16-byte aligned workspace, splits x M rows addressable as int. */
int gemm_tn_tma_partials_ok(int M, int N, int splits, const void *workspace);

/* C (+)= A^T . B on the 128-row kernel of width bn at `splits`: unsplit, C += is the epilogue's read-add-store;
 * split, each split's partials go to its slice of the workspace (through the TMA store when allow_tma and
 * gemm_tn_tma_partials_ok, else from the registers: the same sums) and the pass adds them in order 0..S-1.
 * dbias_ws (bn 256 only; nullptr: none): also dbias_ws[s * M + m] = split s's sum of A's row m, s < splits. */
forge_status gemm_tn_split_run(const void *A, const void *B, float *C, int M, int N, int K, int accumulate,
                               void *workspace, int bn, int splits, int allow_tma, cudaStream_t stream, int pdl,
                               int dev, int sm_count, float *dbias_ws = nullptr);

#endif
