/*
 * gemm_wgmma_fp8_kernel.cuh: the Hopper wgmma GEMM body behind forge's fp8 and tf32 GEMMs and the bf16 ping-pong
 * kernel (entry points and their rules: gemm_fp8.h; the default kernels and entry points: gemm_wgmma_fp8.cu), with
 * the launch machinery they share. The lab's variants of this body (lab/gemm_fp8/gemm_fp8_variants.cu) include it
 * too and instantiate its other template arguments. The device code only they run (marked "lab variant" below) is
 * if-constexpr branches of this one body and the helpers those call: taken out behind a customisation point (a
 * specialised mainloop struct defined in the lab), the same instructions came out with their virtual registers
 * renumbered, so those kernels' PTX would no longer be the one measured; src instantiates none of them.
 *
 *   C (M,N) fp32|bf16 = scale * A (M,K) . B (N,K)^T     A, B K-major: fp8 (e4m3|e5m2 x e4m3), tf32 or bf16
 *
 * The structure is the bf16 kernel's (gemm_wgmma.cu; helpers in wgmma_common.cuh): persistent grid of one CTA per
 * SM, 3 warpgroups, the first one a TMA producer (setmaxnreg 40) filling a ring of STAGES stages, the other two
 * consumers (setmaxnreg 232) each owning 64 rows of the 128-row block tile, grouped (L2) tile order, full/empty
 * mbarriers with the same parities, timeouts that trap. What differs, and why:
 * - A stage holds 128 K elements = 128 bytes per row: exactly one 128-byte swizzle row, so the shared-memory
 *   layout, descriptors (SBO 1024 B) and the +32 B per k-step are those of bf16, only each k-step is wgmma k32
 *   (m64nBNk32 .e4m3/.e5m2, both operands K-major: fp8 wgmma has no transpose). tf32 (32 elements per row, k8)
 *   and bf16 (64, k16) read the same 128-byte rows.
 * - Promotion (PROMOTE = FP8_SERIAL): QGMMA's accumulator keeps ~14 mantissa bits and truncates
 *   (lab/notes/hopper-catalog.md), so a stage's 4 wgmmas write a temporary fragment t (the first with scale-d 0: t
 *   starts at zero), the warpgroup waits for them, releases the stage and adds t to the fp32 accumulator d. K per
 *   promotion = 128. This doubles the accumulator registers (2 x BN/2 per thread) and serialises one
 *   warpgroup's MMAs with its adds; the other consumer warpgroup's MMAs fill that gap. Hence BN is 128 or 192
 *   here (192: 2 x 96 = 192 of the 232 registers), not 256.
 * - Chunked promotion (PROMOTE = FP8_CHUNK64) reaches BN = 256 with promotion: d is 128 registers, so a stage's
 *   MMAs are issued per N-chunk into small temporaries: four 64-column chunks (m64n64k32) into two alternating
 *   32-register temporaries, chunk q+1's MMAs running while chunk q is added (wait_group 1). The price: A is
 *   read from shared memory once per chunk (4x per stage). The loops have no branch between a wgmma issue and
 *   its wait: ptxas serialises every wgmma of a kernel whose in-flight groups differ between control-flow paths
 *   (info C7518, "wgmma.mma_async instructions are serialized ... in divergent path": a wait_group 0 after every
 *   wgmma). scripts/check_ptxas.py fails on C7518. Both promotions do the same fp32 adds in the same K order.
 * - Lab variants of the promotion: FP8_PIPELINED (two alternating stage temporaries, wait_group 1, so a stage's
 *   adds overlap the next stage's MMAs; BN 128 or 144), FP8_CHUNK128 (two 128-column chunks per stage into one
 *   64-register temporary, BN 256), FP8_CHUNK64_RA (chunk64 at BN 192 with A read into registers once per stage by
 *   ldmatrix, two buffers), FP8_SERIAL_ROT (the serial promotion with its loop rotated as cuBLASLt's fp8 kernel's,
 *   at BN 144, the tile of cuBLASLt's fp8 kernel at 8192^3). All do the same adds in the same K order.
 * - 2-CTA clusters (CL = 2, the lab's _c2 kernels): the CTAs of a cluster take row-blocks 2p and 2p+1 of one
 *   column-block and each multicasts half of the shared B tile into both (protocol at fp8_cluster_rank below):
 *   a third less L2 -> SM traffic at BN 256. The protocol lives in the producer and the stage releases of this
 *   body, which every kernel shares.
 * - PROMOTE = 0: the bf16 kernel's loop (one wgmma group in flight, the accumulator is d itself): tf32 and the
 *   lab's fp8 fast accumulation (fp8_plain_tile). At BN = 256 a last column tile with at most 128 columns left in
 *   N runs the m64n128 MMA (N = 1408 = 5 x 256 + 128: 8% of the MMAs were on TMA zero-fill).
 * - tf32 ping-pong (gemm_wgmma_tf32_pp_kernel, PP = 1; fp8_pp_tile): each consumer warpgroup owns whole 128 x 128
 *   tiles and the two take turns, so one's epilogue runs under the other's MMAs; forge_gemm_tf32_nt's schedule
 *   at K <= TF32_PP_MAX_K (measurements: lab/notes/gemm-fp8.md).
 * - bf16 ping-pong (gemm_wgmma_bf16_pp_kernel<BIAS>, AT = WG_BF16): the same schedule on bf16 operands,
 *   forge_gemm_bf16_nt_wgmma's kernel wherever C takes the TMA store, + bias in the epilogue (measurements:
 *   lab/notes/gemm-fp8.md). With a bf16 C (gemm_wgmma_bf16_pp_epi_kernel<BIAS, GELU>, XEPI): the cooperative bf16
 *   kernel's epilogue sequence (bias, pre_out, GELU, round to bf16; fp8_store_tile_tma_epi), forge_gemm_bf16_nt_epi's
 *   kernel for its bf16 forms without residual where C and pre_out take the TMA store.
 * - Epilogue: scale = a_scale * b_scale multiplies d once; fp32 out or bf16 out (round to nearest even). TMA_C = 1
 *   (wherever C allows it: fp32 N % 4 == 0, bf16 N % 8 == 0, C 16-byte aligned): the tile is staged in shared
 *   memory in 64-row x 128-byte boxes (two per consumer warpgroup, 32 KiB in all) and stored by TMA, so the
 *   consumers go on to the next tile's MMAs while the stores drain (fp8_store_tile_tma; the pattern of
 *   gemm_wgmma.cu's GEMM_EPI_TMA_STORE); at BN 144 (the lab's 144-wide variants), which 32-column boxes do not
 *   divide, unswizzled 16-column boxes (fp8_store_tile_tma, PLAIN = 1). TMA_C = 0 ("direct", where C does not
 *   allow TMA): float2 / bf16x2 stores from the registers when N is even and C 8- / 4-byte aligned, scalar
 *   otherwise (fp8_store_tile_direct).
 * - The warpgroup index is a lane-0 shuffle (wgmma_warpgroup_index): warp-uniform to the compiler, so
 *   shared-memory addresses and descriptors stay in uniform registers (ncu had the first wgmma of every stage
 *   waiting on an R2UR move and an S2UR chain).
 * - Edges: K % 16 == 0 for fp8 (TMA row stride K bytes, a multiple of 16); the K tail of the last stage, rows past
 *   M and columns past N are zero-filled by TMA (the transaction count is still the full box); the TMA store clips
 *   its boxes at M and N, the direct store bounds-checks.
 * - Host side (end of the file): device query, tile-width rules, tensor maps, argument checks and the launchers of
 *   one instantiation; static, so every including translation unit has its own copies (and its own
 *   once-per-context attribute records, kernel_attrs.h).
 */
#ifndef FORGE_GEMM_WGMMA_FP8_KERNEL_CUH
#define FORGE_GEMM_WGMMA_FP8_KERNEL_CUH

#include <stdint.h>
#include <string.h>

#include <type_traits>

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
#include "gemm_fp8.h"
}

#define FP8_BM 128          /* block tile rows: 2 consumer warpgroups x 64 */
#define FP8_BK 128          /* K per stage: 128 fp8 = one 128-byte swizzle row; also the promotion interval */
#define FP8_THREADS 384     /* producer warpgroup + 2 consumer warpgroups */
#define FP8_CONSUMER_WARPS 8
#define FP8_GROUP_M 8       /* row-blocks per tile group (L2 order) */
#define FP8_PRODUCER_REGS 40
#define FP8_CONSUMER_REGS 232
#define FP8_MAX_DEVICES 64
/* lab variant: the pipelined promotion keeps d, t, t1 (3 x 64 fp32) live: the producer (one TMA thread) gives up 16
 * more registers so each consumer gets 240 (24 x 128 + 240 x 256 = 64512 of the 65536) */
#define FP8_PIPE_PRODUCER_REGS 24
#define FP8_PIPE_CONSUMER_REGS 240

/* PROMOTE (template parameter of the body): 0 none (tf32, bf16; the lab's fp8 fast accumulation), FP8_SERIAL the
 * serial promotion (BN 128 or 192), FP8_CHUNK64 the chunked promotion at BN 256 (64-column chunks, two alternating
 * temporaries): forge_gemm_fp8_nt's two. The others are lab variants (see the top of the file). */
#define FP8_SERIAL 1
#define FP8_PIPELINED 2
#define FP8_CHUNK64 3
#define FP8_CHUNK128 4
#define FP8_CHUNK64_RA 5 /* FP8_CHUNK64 with A read into registers once per stage (ldmatrix, double-buffered) */
#define FP8_SERIAL_ROT 6 /* serial promotion, loop rotated: a stage's full-barrier wait before the previous stage's
                          * retire (the loop of cuBLASLt's fp8 kernel, ncu), descriptors stepped per stage */

/* The input type of the shared body (template parameter AT): fp8 A e4m3 / e5m2 (B e4m3), tf32 A and B, or bf16 A and
 * B (the ping-pong schedule only: the cooperative bf16 kernels are gemm_wgmma.cu's). */
enum { WG_E4M3 = 0, WG_E5M2 = 1, WG_TF32 = 2, WG_BF16 = 3 };

/* TMA-store epilogue (TMA_C = 1): one staging box is 64 rows x 128 bytes (32 fp32 or 64 bf16 columns: the
 * 128-byte swizzle's row limit), two per consumer warpgroup */
#define FP8_OUT_BOX_BYTES (64u * 128u)
#define FP8_OUT_BYTES (2u * 2u * FP8_OUT_BOX_BYTES) /* 32 KiB: 2 consumer warpgroups x 2 boxes */
/* BN 144 (144 = 9 x 16 columns, not a multiple of the 32 fp32 columns of a 128-byte swizzled box): unswizzled boxes
 * of 64 rows x FP8_OUT_PLAIN_COLS columns, 4 KiB fp32 (2 KiB bf16), two per consumer warpgroup */
#define FP8_OUT_PLAIN_COLS 16
#define FP8_OUT_PLAIN_BOX_BYTES (64u * FP8_OUT_PLAIN_COLS * 4u)

/* Per block-tile width: stages fill ~192-200 KiB of the 227 KiB. Layout from the 1024-aligned base: A stages,
 * B stages, (TMA_C) the 32 KiB of staging boxes, then full[STAGES] and empty[STAGES] mbarriers; + 1 KiB of slack
 * to round the dynamic shared-memory base up to 1024 bytes. With TMA_C, BN 192 keeps 4 stages, not 5:
 * 5 x 40 KiB + 32 KiB + 80 B + 1 KiB = 238672 B would not fit (BN 128: 6 stages, 230496 B; BN 256: 4 stages,
 * 230464 B; BN 192: 4 stages, 197696 B; the limit is 232448). BN 144 (lab variants): 6 stages of 34 KiB, 210016 B,
 * with TMA_C 16 KiB of unswizzled staging boxes more, 226400 B. */
template <int BN, int TMA_C = 0> struct fp8_cfg {
    static constexpr int STAGES = BN == 128 || BN == 144 ? 6 : BN == 192 ? (TMA_C ? 4 : 5) : 4;
    static constexpr uint32_t A_BYTES = FP8_BM * FP8_BK;
    static constexpr uint32_t B_BYTES = BN * FP8_BK;
    static constexpr uint32_t STAGE_BYTES = A_BYTES + B_BYTES;
    /* BN 144: 16-column unswizzled boxes (fp8_store_tile_tma, PLAIN = 1), 2 x 4 KiB per consumer warpgroup */
    static constexpr uint32_t OUT_BYTES = TMA_C ? (BN == 144 ? 2u * 2u * FP8_OUT_PLAIN_BOX_BYTES : FP8_OUT_BYTES) : 0;
    static constexpr size_t SMEM = (size_t)STAGES * STAGE_BYTES + OUT_BYTES + 2 * STAGES * 8 + 1024;
    static_assert(BN == 128 || BN == 144 || BN == 192 || BN == 256, "fp8 wgmma tile N is 128, 144, 192 or 256 here");
    static_assert(A_BYTES % 1024 == 0 && B_BYTES % 1024 == 0, "stages stay 1024-byte aligned");
    static_assert(OUT_BYTES % 1024 == 0, "staging boxes start 1024-byte aligned (the 128-byte swizzle's atom)");
    static_assert(SMEM <= 232448, "fits the 227 KiB of dynamic shared memory");
};

/* ---- wgmma m64nNk32 fp8 (A type e4m3 or e5m2, B e4m3), fp32 accumulators ---- */

/* d (64 x 128 fp32, 64 registers per thread) (+)= A (64x32 e4m3, smem desc) . B (128x32 e4m3, smem desc)^T */
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
        WG_REGS64
        "}, %64, %65, p, 1, 1;\n}\n"
        : WG_ACC64
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* d (64 x 128 fp32, 64 registers per thread) (+)= A (64x32 e5m2, smem desc) . B (128x32 e4m3, smem desc)^T */
__device__ __forceinline__ void wgmma_m64n128k32_e5m2_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e4m3 {"
        WG_REGS64
        "}, %64, %65, p, 1, 1;\n}\n"
        : WG_ACC64
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* d (64 x 192 fp32, 96 registers per thread) (+)= A (64x32 e4m3, smem desc) . B (192x32 e4m3, smem desc)^T */
__device__ __forceinline__ void wgmma_m64n192k32_e4m3_e4m3(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 {"
        WG_REGS96
        "}, %96, %97, p, 1, 1;\n}\n"
        : WG_ACC96
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* d (64 x 192 fp32, 96 registers per thread) (+)= A (64x32 e5m2, smem desc) . B (192x32 e4m3, smem desc)^T */
__device__ __forceinline__ void wgmma_m64n192k32_e5m2_e4m3(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k32.f32.e5m2.e4m3 {"
        WG_REGS96
        "}, %96, %97, p, 1, 1;\n}\n"
        : WG_ACC96
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* d (64 x 256 fp32, 128 registers per thread) (+)= A (64x32 e4m3, smem desc) . B (256x32 e4m3, smem desc)^T */
__device__ __forceinline__ void wgmma_m64n256k32_e4m3_e4m3(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {"
        WG_REGS128
        "}, %128, %129, p, 1, 1;\n}\n"
        : WG_ACC128
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* d (64 x 256 fp32, 128 registers per thread) (+)= A (64x32 e5m2, smem desc) . B (256x32 e4m3, smem desc)^T */
__device__ __forceinline__ void wgmma_m64n256k32_e5m2_e4m3(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e5m2.e4m3 {"
        WG_REGS128
        "}, %128, %129, p, 1, 1;\n}\n"
        : WG_ACC128
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* d (64 x 128 fp32, 64 registers per thread) (+)= A (64x8 tf32, smem desc) . B (128x8 tf32, smem desc)^T */
__device__ __forceinline__ void wgmma_m64n128k8_tf32(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
        WG_REGS64
        "}, %64, %65, p, 1, 1;\n}\n"
        : WG_ACC64
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* d (64 x 256 fp32, 128 registers per thread) (+)= A (64x8 tf32, smem desc) . B (256x8 tf32, smem desc)^T */
__device__ __forceinline__ void wgmma_m64n256k8_tf32(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {"
        WG_REGS128
        "}, %128, %129, p, 1, 1;\n}\n"
        : WG_ACC128
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* lab variant (FP8_PIPELINED, FP8_CHUNK128):
 * d (64 x 128 fp32) = A (64x32 e4m3, smem desc) . B (128x32 e4m3, smem desc)^T with scale-d 0: d is written only,
 * never read, so the compiler need not keep its old value live (a promotion temporary is dead between stages) */
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_e4m3_first(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
        WG_REGS64
        "}, %64, %65, p, 1, 1;\n}\n"
        : WG_OUT64
        : "l"(desc_a), "l"(desc_b), "r"(0));
}

/* d (64 x 128 fp32) = A (64x32 e5m2, smem desc) . B (128x32 e4m3, smem desc)^T with scale-d 0: d is written only,
 * never read, so the compiler need not keep its old value live (a promotion temporary is dead between stages) */
__device__ __forceinline__ void wgmma_m64n128k32_e5m2_e4m3_first(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e5m2.e4m3 {"
        WG_REGS64
        "}, %64, %65, p, 1, 1;\n}\n"
        : WG_OUT64
        : "l"(desc_a), "l"(desc_b), "r"(0));
}

/* ---- wgmma m64n144k32 fp8 (lab variant): the 144-wide tiles of FP8_PIPELINED and FP8_SERIAL_ROT ----
 * d (64 x 144 fp32, 72 registers per thread) (+)= A (64x32, smem desc) . B (144x32 e4m3, smem desc)^T, A e4m3 or
 * e5m2; the _first forms are scale-d 0 with write-only (=f) operands, as at n128 (a promotion temporary is dead
 * between stages). One macro per A type: the four wrappers differ only in the type and the operand constraint. */
#define FP8_WGMMA_N144(ATYPE)                                                                                       \
    __device__ __forceinline__ void wgmma_m64n144k32_##ATYPE##_e4m3(float (&d)[72], uint64_t desc_a,             \
                                                                    uint64_t desc_b, int scale_d) {               \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %74, 0;\n"                                                 \
                     "wgmma.mma_async.sync.aligned.m64n144k32.f32." #ATYPE ".e4m3 {" WG_REGS72                    \
                     "}, %72, %73, p, 1, 1;\n}\n"                                                                 \
                     : WG_ACC72                                                                                   \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                   \
    }                                                                                                             \
    __device__ __forceinline__ void wgmma_m64n144k32_##ATYPE##_e4m3_first(float (&d)[72], uint64_t desc_a,       \
                                                                          uint64_t desc_b) {                      \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %74, 0;\n"                                                 \
                     "wgmma.mma_async.sync.aligned.m64n144k32.f32." #ATYPE ".e4m3 {" WG_REGS72                    \
                     "}, %72, %73, p, 1, 1;\n}\n"                                                                 \
                     : WG_OUT72                                                                                   \
                     : "l"(desc_a), "l"(desc_b), "r"(0));                                                         \
    }
FP8_WGMMA_N144(e4m3)
FP8_WGMMA_N144(e5m2)
#undef FP8_WGMMA_N144

/* ---- wgmma m64n64k32 fp8: the 64-column chunks of the chunked promotion (FP8_CHUNK64) ----
 * d (64 x 64 fp32, 32 registers per thread) (+)= A (64x32 e4m3|e5m2, smem desc) . B (64x32 e4m3, smem desc)^T.
 * No write-only (=f) "first" form here, unlike n128: with one, ptxas gave the chunk64 loop a 224-byte stack
 * frame and 420 bytes of spill stores (the scale-d 0 wgmma's outputs were new values in new registers, so the
 * temporaries' copies overlapped); with read-write operands, zeroed once per tile, 0 spills. */
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_e4m3(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
        WG_REGS32
        "}, %32, %33, p, 1, 1;\n}\n"
        : WG_ACC32
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n64k32_e5m2_e4m3(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e5m2.e4m3 {"
        WG_REGS32
        "}, %32, %33, p, 1, 1;\n}\n"
        : WG_ACC32
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

/* one k-step (32 bytes of K: k32 for fp8, k8 for tf32, k16 for bf16) of the 64 x BN warpgroup tile; AT: 0 = A e4m3,
 * 1 = A e5m2 (B is e4m3), 2 = A and B tf32, 3 = A and B bf16 (BN 128) */
template <int BN, int AT>
__device__ __forceinline__ void wgmma_fp8_k32(float (&d)[BN / 2], uint64_t da, uint64_t db, int sc) {
    if constexpr (AT == WG_BF16) {
        static_assert(BN == 128, "bf16 here is the 128-wide ping-pong tile");
        wgmma_m64n128k16<0, 0>(d, da, db, sc);
    } else if constexpr (AT == WG_TF32) {
        static_assert(BN == 128 || BN == 256, "tf32 tiles are 128 or 256 wide");
        if constexpr (BN == 128) wgmma_m64n128k8_tf32(d, da, db, sc);
        else wgmma_m64n256k8_tf32(d, da, db, sc);
    } else if constexpr (BN == 128) {
        if constexpr (AT == 0) wgmma_m64n128k32_e4m3_e4m3(d, da, db, sc);
        else wgmma_m64n128k32_e5m2_e4m3(d, da, db, sc);
    } else if constexpr (BN == 144) {
        if constexpr (AT == 0) wgmma_m64n144k32_e4m3_e4m3(d, da, db, sc);
        else wgmma_m64n144k32_e5m2_e4m3(d, da, db, sc);
    } else if constexpr (BN == 192) {
        if constexpr (AT == 0) wgmma_m64n192k32_e4m3_e4m3(d, da, db, sc);
        else wgmma_m64n192k32_e5m2_e4m3(d, da, db, sc);
    } else {
        if constexpr (AT == 0) wgmma_m64n256k32_e4m3_e4m3(d, da, db, sc);
        else wgmma_m64n256k32_e5m2_e4m3(d, da, db, sc);
    }
}

/* lab variant, FP8_PIPELINED: wait for stage `stage` to be full, then issue its 4 k32 wgmmas into the temporary `t`
 * (the first with scale-d 0: t = 0 + ...) as one commit group; the caller retires the group (wait_group) later */
template <int BN, int AT>
__device__ __forceinline__ void fp8_issue_stage(float (&t)[BN / 2], uint32_t bars, uint32_t sa, uint32_t sb, int c,
                                                int stage, uint32_t phase) {
    typedef fp8_cfg<BN> cfg;
    mbar_wait(bars + 8 * stage, phase);
    /* one descriptor per operand; the k-th step is 32 bytes on, i.e. +2 in the start-address field (address >> 4,
     * which stays below 2^14 in 227 KiB of shared memory, so the add never carries out of the field) */
    const uint64_t da = wgmma_desc(sa + stage * cfg::A_BYTES + c * (64 * FP8_BK));
    const uint64_t db = wgmma_desc(sb + stage * cfg::B_BYTES);
    wgmma_fence();
    static_assert((BN == 128 || BN == 144) && AT != WG_TF32, "pipelined promotion: fp8 at BN = 128 or 144");
    if constexpr (BN == 144) {
        if constexpr (AT == WG_E4M3) wgmma_m64n144k32_e4m3_e4m3_first(t, da, db);
        else wgmma_m64n144k32_e5m2_e4m3_first(t, da, db);
    } else {
        if constexpr (AT == WG_E4M3) wgmma_m64n128k32_e4m3_e4m3_first(t, da, db);
        else wgmma_m64n128k32_e5m2_e4m3_first(t, da, db);
    }
#pragma unroll
    for (int k = 1; k < FP8_BK / 32; k++) wgmma_fp8_k32<BN, AT>(t, da + 2 * k, db + 2 * k, 1);
    wgmma_commit();
}

/* FP8_CHUNK64 / FP8_CHUNK128 (BN = 256): issue one N-chunk of a stage, i.e. the chunk's 4 k32 wgmmas as one commit
 * group into the chunk temporary u (the first with scale-d 0: u = 0 + ...; u's old value is ignored but, for n64, kept
 * in the same registers: see the m64n64k32 wrappers). da: this warpgroup's A descriptor of the stage, db: the B
 * descriptor of the chunk's first row (row 64q or 128q of the 256-row B box: 8192 or 16384 bytes on, a multiple of the
 * 1024-byte swizzle atom). The fence orders the FADDs that read u (the previous chunk's promotion) before the wgmmas
 * that overwrite it. */
template <int AT>
__device__ __forceinline__ void fp8_issue_chunk64(float (&u)[32], uint64_t da, uint64_t db) {
    static_assert(AT == WG_E4M3 || AT == WG_E5M2, "chunked promotion: fp8 only");
    wgmma_fence();
    if constexpr (AT == WG_E4M3) {
#pragma unroll
        for (int k = 0; k < FP8_BK / 32; k++) wgmma_m64n64k32_e4m3_e4m3(u, da + 2 * k, db + 2 * k, k != 0 ? 1 : 0);
    } else {
#pragma unroll
        for (int k = 0; k < FP8_BK / 32; k++) wgmma_m64n64k32_e5m2_e4m3(u, da + 2 * k, db + 2 * k, k != 0 ? 1 : 0);
    }
    wgmma_commit();
}

/* ---- lab variant, FP8_CHUNK64_RA (chunk64 with A from registers, double-buffered) ----
 * d (64 x 64 fp32) (+)= A (64x32 fp8, registers: 4 x b32 per thread) . B (64x32 e4m3, smem desc)^T. The A fragment
 * of a k32 step (PTX: wgmma register fragments for 8-bit A) is per warp the 16 x 32-byte slab of rows 16w..16w+15:
 * a0 (row lane/4, bytes 4(lane%4)..+3), a1 (row + 8), a2 and a3 the same 16 bytes further, i.e. the four 8 x 16-byte
 * matrices of one ldmatrix.x4 (fp8_lda_stage). */
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_e4m3_ra(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                             int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
        WG_REGS32
        "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : WG_ACC32
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n64k32_e5m2_e4m3_ra(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                             int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e5m2.e4m3 {"
        WG_REGS32
        "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : WG_ACC32
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

/* This warpgroup's 64 rows x 128 bytes of A (one stage) into registers: a[kk] is k32 step kk's fragment. The
 * stage is 128-byte swizzled (16-byte chunk j of row r at chunk j ^ (r % 8), the stage 1024-byte aligned); thread t
 * of warp w addresses row 16w + t%8 + 8((t/8)%2) of its warpgroup's half, chunk 2kk + t/16. */
__device__ __forceinline__ void fp8_lda_stage(uint32_t (&a)[FP8_BK / 32][4], uint32_t a_half, int warp, int lane) {
    const uint32_t r = (uint32_t)(warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2));
    const uint32_t row = a_half + r * 128u;
#pragma unroll
    for (int kk = 0; kk < FP8_BK / 32; kk++) {
        const uint32_t chunk = (uint32_t)(2 * kk + lane / 16);
        const uint32_t addr = row + ((chunk ^ (r % 8u)) << 4);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(a[kk][0]), "=r"(a[kk][1]), "=r"(a[kk][2]), "=r"(a[kk][3])
                     : "r"(addr)
                     : "memory");
    }
}

/* one 64-column chunk (B rows from db) of a stage with A from registers, as one commit group into u */
template <int AT>
__device__ __forceinline__ void fp8_issue_chunk64_ra(float (&u)[32], const uint32_t (&a)[FP8_BK / 32][4],
                                                     uint64_t db) {
    static_assert(AT == WG_E4M3 || AT == WG_E5M2, "chunked promotion: fp8 only");
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < FP8_BK / 32; k++) {
        if constexpr (AT == WG_E4M3) wgmma_m64n64k32_e4m3_e4m3_ra(u, a[k], db + 2 * k, k != 0 ? 1 : 0);
        else wgmma_m64n64k32_e5m2_e4m3_ra(u, a[k], db + 2 * k, k != 0 ? 1 : 0);
    }
    wgmma_commit();
}

/* lab variant, FP8_CHUNK128: one 128-column chunk of a stage as one commit group into u (the first wgmma scale-d 0,
 * write-only operands) */
template <int AT>
__device__ __forceinline__ void fp8_issue_chunk128(float (&u)[64], uint64_t da, uint64_t db) {
    static_assert(AT == WG_E4M3 || AT == WG_E5M2, "chunked promotion: fp8 only");
    wgmma_fence();
    if constexpr (AT == WG_E4M3) {
        wgmma_m64n128k32_e4m3_e4m3_first(u, da, db);
#pragma unroll
        for (int k = 1; k < FP8_BK / 32; k++) wgmma_m64n128k32_e4m3_e4m3(u, da + 2 * k, db + 2 * k, 1);
    } else {
        wgmma_m64n128k32_e5m2_e4m3_first(u, da, db);
#pragma unroll
        for (int k = 1; k < FP8_BK / 32; k++) wgmma_m64n128k32_e5m2_e4m3(u, da + 2 * k, db + 2 * k, 1);
    }
    wgmma_commit();
}

/* d[OFF + i] += u[i]: promote one retired chunk temporary into its columns of the fp32 accumulator. A chunk of
 * 64 (128) columns is fragment elements 32q..32q+31 (64q..64q+63) of d: element 4i + 2h + j is column
 * 8i + 2(lane%4) + j, so 64 columns are 8 consecutive i, i.e. 32 consecutive elements. */
template <int OFF, int R, int ND>
__device__ __forceinline__ void fp8_promote_chunk(float (&d)[ND], const float (&u)[R]) {
    static_assert(OFF + R <= ND, "the chunk lies inside the accumulator");
#pragma unroll
    for (int i = 0; i < R; i++) d[OFF + i] += u[i];
}

/* tile index -> (row-block, column-block): groups of FP8_GROUP_M row-blocks, all column-blocks of a group before
 * the next, so the tiles in flight share a few A row-blocks (the bf16 kernel's order) */
__device__ __forceinline__ void fp8_tile_coords(int t, int tiles_m, int tiles_n, int *tm, int *tn) {
    const int per_group = FP8_GROUP_M * tiles_n;
    const int g = t / per_group, first_m = g * FP8_GROUP_M;
    const int rows = min(tiles_m - first_m, FP8_GROUP_M);
    const int r = t - g * per_group;
    *tm = first_m + r % rows;
    *tn = r / rows;
}

/* ---- 2-CTA clusters (CL = 2, the lab's gemm_wgmma_fp8_kernel_c2): B multicast --------------------------------
 * The two CTAs of a cluster take vertically adjacent tiles (row-blocks 2p and 2p+1, the same column-block), so
 * they need the same B tile: each CTA loads one half of it (BN/2 rows) with a multicast TMA into both CTAs'
 * shared memory (same offset), completing on each CTA's own full barrier, which therefore still expects the
 * whole stage (A 16 KiB own + B both halves). A CTA may overwrite a stage only when BOTH CTAs' consumers have
 * released it: each consumer warp arrives on its own and on the partner's empty barrier (count 2 x 8). L2 ->
 * SM traffic per CTA pair and stage: 2 x A + B instead of 2 x (A + B), -33% at BN 256. */
__device__ __forceinline__ uint32_t fp8_cluster_rank(void) {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

/* every thread of both CTAs: barrier.cluster with release/acquire (mbarrier inits visible to the partner at the
 * start; at the end, no CTA exits while the partner may still arrive on its barriers) */
__device__ __forceinline__ void fp8_cluster_sync(void) {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* the partner CTA's copy of a local shared-memory address (shared::cluster window) */
__device__ __forceinline__ uint32_t fp8_mapa(uint32_t addr, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}

/* Default semantics (.release, .cta scope), not .release.cluster: that form put MEMBAR.ALL.GPU + ERRBAR +
 * CGAERRBAR before every remote arrive (SASS), i.e. a GPU-wide fence per consumer warp and stage. What must be
 * ordered is this warp's wgmma reads of the stage (retired by wait_group before the arrive) before the partner
 * producer's TMA overwrite, which it issues only after observing the barrier phase; the smem reads are complete
 * when wait_group returns, so no memory fence is needed for them. */
__device__ __forceinline__ void fp8_mbar_arrive_remote(uint32_t cluster_addr) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_addr) : "memory");
}

/* 2D TMA load multicast to the CTAs in `mask` (same smem offset and same-offset mbarrier in each) */
__device__ __forceinline__ void fp8_tma_load_2d_mc(uint32_t dst, const CUtensorMap *tmap, int c0, int c1, uint32_t bar,
                                                   uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
                 "l"((uint64_t)tmap), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
                 : "memory");
}

/* a consumer warp's release of a stage: its own empty barrier, and with CL = 2 the partner's too */
template <int CL> __device__ __forceinline__ void fp8_release(uint32_t empty_bar, uint32_t rank) {
    mbar_arrive(empty_bar);
    if constexpr (CL == 2) fp8_mbar_arrive_remote(fp8_mapa(empty_bar, rank ^ 1u));
}

/* One stage's 4 k32 MMAs of this warpgroup (A rows from a0, B rows from b0: the k-th 32-byte K step is 32 bytes
 * into each swizzled row) into acc, NW columns, as one commit group; zero_first: scale-d 0 on the first (acc = 0 +) */
template <int NW, int AT>
__device__ __forceinline__ void fp8_mma_stage(float (&acc)[NW / 2], uint32_t a0, uint32_t b0, bool zero_first) {
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < FP8_BK / 32; k++)
        wgmma_fp8_k32<NW, AT>(acc, wgmma_desc(a0 + 32 * k), wgmma_desc(b0 + 32 * k), (!zero_first || k != 0) ? 1 : 0);
    wgmma_commit();
}

/* lab variant, FP8_SERIAL_ROT (this and the next two): retire every wgmma group of this warpgroup (its results in t are
 * then final) and release ring slot `slot`. */
template <int CL, int STAGES, int R>
__device__ __forceinline__ void fp8_retire_all(float (&t)[R], uint32_t bars, int slot, int lane, uint32_t rank) {
    wgmma_wait<0>();
    wgmma_fence_operands(t);
    if (lane == 0) fp8_release<CL>(bars + 8 * (STAGES + slot), rank);
}

/* The ring's next slot after `stage` (prev = the slot just issued), the phase flipping at the wrap. */
template <int STAGES> __device__ __forceinline__ void fp8_ring_next(int &prev, int &stage, uint32_t &phase) {
    prev = stage;
    if (++stage == STAGES) {
        stage = 0;
        phase ^= 1;
    }
}

/* One stage's 4 k32 MMAs into t with scale-d 0 on the first (t = 0 + the stage), from the stage's descriptors (the
 * k-th step 32 bytes on: +2 in the address field, which never carries out of it in 227 KiB), as one commit group. */
template <int NW, int AT>
__device__ __forceinline__ void fp8_mma_stage_desc(float (&t)[NW / 2], uint64_t da, uint64_t db) {
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < FP8_BK / 32; k++) wgmma_fp8_k32<NW, AT>(t, da + 2 * k, db + 2 * k, k != 0 ? 1 : 0);
    wgmma_commit();
}

/* The unpromoted mainloop (tf32; the lab's fp8 fast accumulation) of one tile: NW = BN, or BN / 2 for a tile whose
 * columns past BN/2 all lie past N. The narrow MMA accumulates into d's first NW/2 registers, which hold the same
 * columns in the m64nNW fragment as in the m64nBN one (d[4i + 2h + j] is column 8i + ...); the rest of d is stale and
 * feeds only columns past N, which the epilogue never stores. One stage's MMAs stay in flight across iterations
 * (wait_group 1 retires the previous stage's, which is released then); the loop drains (wait_group 0) before it
 * returns, so the caller's two instantiations never leave different groups in flight (ptxas C7518). */
template <int NW, int BN, int AT, int CL, int STAGES>
__device__ __forceinline__ void fp8_plain_tile(float (&d)[BN / 2], uint32_t bars, uint32_t sa, uint32_t sb, int c,
                                               int lane, int ktiles, int &stage, uint32_t &phase, uint32_t rank) {
    typedef fp8_cfg<BN> cfg; /* A_BYTES / B_BYTES (not STAGES: that one depends on TMA_C) */
    static_assert(NW == BN || (NW == BN / 2 && NW >= 128), "full width, or the half of a 256-wide tile");
    float(&dw)[NW / 2] = *reinterpret_cast<float(*)[NW / 2]>(&d[0]);
    int prev = 0;
    for (int kt = 0; kt < ktiles; kt++) {
        mbar_wait(bars + 8 * stage, phase);
        /* this warpgroup's 64 rows of the 128-row A box (64 rows x 128 B) */
        const uint32_t a0 = sa + stage * cfg::A_BYTES + c * (64 * FP8_BK);
        fp8_mma_stage<NW, AT>(dw, a0, sb + stage * cfg::B_BYTES, kt == 0);
        if (kt > 0) {
            wgmma_wait<1>(); /* the previous stage's MMAs are done: release it */
            if (lane == 0) fp8_release<CL>(bars + 8 * (STAGES + prev), rank);
        }
        prev = stage;
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }
    wgmma_wait<0>();
    wgmma_fence_operands(d);
    if (lane == 0) fp8_release<CL>(bars + 8 * (STAGES + prev), rank);
}

/* Ping-pong (PP = 1; tf32, BN = 128, TMA store): each consumer warpgroup owns whole 128 x 128 tiles, the CTA's
 * tiles j = 0, 1, 2, ... alternating between warpgroups 0 and 1, so one warpgroup's epilogue (64 KiB of fp32 through
 * its staging boxes) runs while the other's MMAs keep the tensor pipe busy. The cooperative schedule (both
 * warpgroups on one 128 x 256 tile) leaves the pipe idle in every epilogue, and at the tall shape (K = 512: 16
 * stages per tile) all 132 CTAs reach their epilogues together and wait on the same HBM writes (ncu: 70% tensor
 * busy; cuBLAS's tf32 kernel for that shape is a ping-pong one, 128 x 128 per warpgroup, 86%).
 * The producer is unchanged: it loads the CTA's tiles in order, ktiles stages each, so tile j occupies ring slots
 * [j*ktiles, (j+1)*ktiles) and a warpgroup starts tile j at slot j*ktiles (stage slot % STAGES, parity
 * (slot / STAGES) % 2). A parity wait is only unambiguous if the stage's previous use (slot - STAGES) has
 * completed its phase, which a warpgroup that skipped the other's tile cannot know by itself: an order barrier
 * (named barrier 3 + warpgroup, 256 threads) makes warpgroup c start tile j only after warpgroup 1 - c has
 * waited on the last stage of tile j - 1 (bar.arrive there, bar.sync here), which also keeps the two mainloops
 * in turn. A warpgroup arrives only if the CTA has a tile j + 1, so every arrive meets a sync. Each stage is
 * released by the 4 warps of one warpgroup (empty barriers count 4). The two m64n128 halves of the tile (rows
 * 0-63, 64-127 of the A stage) share each B descriptor; both drain (wait_group 0) before the function returns. */
#define FP8_PP_ORDER_BAR 3 /* named barriers 3, 4: the ping-pong order (1, 2: the staging boxes of the epilogue) */
template <int AT, int STAGES>
__device__ __forceinline__ void fp8_pp_tile(float (&dlo)[64], float (&dhi)[64], uint32_t bars, uint32_t sa,
                                            uint32_t sb, int lane, int ktiles, int stage, uint32_t phase,
                                            int signal_bar) {
    typedef fp8_cfg<128> cfg;
    int prev = 0;
    for (int kt = 0; kt < ktiles; kt++) {
        mbar_wait(bars + 8 * stage, phase);
        /* the other warpgroup may start its tile: every stage of this one has completed its phase */
        if (kt == ktiles - 1 && signal_bar >= 0) asm volatile("bar.arrive %0, 256;" ::"r"(signal_bar) : "memory");
        const uint32_t a0 = sa + stage * cfg::A_BYTES;
        const uint32_t b0 = sb + stage * cfg::B_BYTES;
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < FP8_BK / 32; k++) {
            const int sc = (kt != 0 || k != 0) ? 1 : 0;
            wgmma_fp8_k32<128, AT>(dlo, wgmma_desc(a0 + 32 * k), wgmma_desc(b0 + 32 * k), sc);
            wgmma_fp8_k32<128, AT>(dhi, wgmma_desc(a0 + 64 * FP8_BK + 32 * k), wgmma_desc(b0 + 32 * k), sc);
        }
        wgmma_ring_step<STAGES>(bars, kt > 0, lane, prev, stage, phase);
    }
    wgmma_wait<0>();
    wgmma_fence_operands(dlo);
    wgmma_fence_operands(dhi);
    if (lane == 0) mbar_arrive(bars + 8 * (STAGES + prev));
}

/* lab variant: one stage of FP8_CHUNK64_RA (BN = 192: three 64-column chunks) with A from a[CUR], loaded before: chunk
 * 0 into pX, 1 into pY, 2 into pX (pX = p0 on even stages, p1 on odd ones, so a stage's first chunk never lands on the
 * temporary that still holds the previous stage's last chunk); each chunk's adds run under the next chunk's MMAs; the
 * previous stage's chunk 2 (in pY) is retired, released and added after this stage's chunk 0 is issued, which also
 * frees a[1 - CUR] for the next stage's full-barrier wait and ldmatrix (has_next). No branch around a wgmma: the caller
 * unrolls by two so CUR is a compile-time index. */
template <int CUR, int AT, int CL, int STAGES>
__device__ __forceinline__ void fp8_ra_stage(float (&d)[96], float (&p0)[32], float (&p1)[32],
                                             uint32_t (&a)[2][FP8_BK / 32][4], uint32_t bars, uint32_t sa,
                                             uint32_t sb, int c, int warp, int lane, int &stage, uint32_t &phase,
                                             int &prev, bool first, bool has_next, uint32_t rank) {
    typedef fp8_cfg<192> cfg;
    float(&px)[32] = CUR ? p1 : p0;
    float(&py)[32] = CUR ? p0 : p1;
    const uint64_t db = wgmma_desc(sb + stage * cfg::B_BYTES);
    fp8_issue_chunk64_ra<AT>(px, a[CUR], db);
    wgmma_wait<1>(); /* the previous stage's chunk 2 (py): done, and a[1 - CUR] free */
    wgmma_fence_operands(py);
    if (!first && lane == 0) fp8_release<CL>(bars + 8 * (STAGES + prev), rank);
    fp8_promote_chunk<64>(d, py);
    fp8_issue_chunk64_ra<AT>(py, a[CUR], db + 512);
    wgmma_wait<1>(); /* chunk 0 */
    wgmma_fence_operands(px);
    fp8_promote_chunk<0>(d, px);
    prev = stage;
    if (++stage == STAGES) {
        stage = 0;
        phase ^= 1;
    }
    if (has_next) {
        mbar_wait(bars + 8 * stage, phase);
        fp8_lda_stage(a[1 - CUR], sa + stage * cfg::A_BYTES + c * (64 * FP8_BK), warp, lane);
    }
    fp8_issue_chunk64_ra<AT>(px, a[CUR], db + 1024);
    wgmma_wait<1>(); /* chunk 1 */
    wgmma_fence_operands(py);
    fp8_promote_chunk<32>(d, py);
}

/* ---- TMA-store epilogue (TMA_C = 1) ------------------------------------------------------------------------
 * The pattern of gemm_wgmma.cu's GEMM_EPI_TMA_STORE, without its fused operations: the warpgroup's 64 x BN tile
 * goes out in boxes of 64 rows x 128 bytes (fp32: 32 columns = 4 fragment column groups; bf16: 64 columns = 8),
 * each written by the 128 threads into a staging box in shared memory in the 128-byte-swizzled layout the tensor
 * map describes (16-byte chunk k of box row r at chunk k ^ (r % 8); the box is 1024-byte aligned), then stored
 * by one thread with TMA, so the global writes drain while the warpgroup goes on (the next box, then the next
 * tile's MMAs). Two boxes per warpgroup alternate within a tile (box b % 2): before filling box b, thread 0 waits
 * until at most one of its bulk groups (box b-1's) still reads shared memory (wait_group.read 1), and at b = 0
 * until none does (wait_group.read 0: the previous tile's last store, issued a whole mainloop earlier, so this
 * costs ~nothing and no box parity has to be carried across tiles); named barrier 1 + c (the warpgroup's 128
 * threads) holds the others until then. After filling, every thread fences its shared-memory writes to the
 * async proxy (fence.proxy.async.shared::cta), the barrier again, and thread 0 issues the store and commits it
 * as one bulk group. TMA clips a box at the tensor's bounds (rows past M, columns past N are not written), so
 * the staged values need no bounds checks; boxes wholly past N (a suffix of the tile's boxes) and all boxes of a
 * warpgroup whose 64 rows start at or past M are skipped (warpgroup-uniform conditions), so no store is issued
 * for a box wholly outside C. The CTA waits for all its groups before it exits (the body's end).
 * Fragment of wgmma m64nBN f32: d[4i + 2h + j] is tile row warp*16 + lane/4 + 8h, column 8i + 2(lane%4) + j. In a
 * box, column group ii (i = box * CH + ii) of row r sits at byte 128r + 32ii + 8(lane%4) (fp32) or
 * 128r + 16ii + 4(lane%4) (bf16): chunk 2ii + (lane%4)/2 or ii, and r % 8 = lane/4, so the swizzled chunk is
 * sx ^ 2ii (sx = ((lane/2)%2) ^ (lane/4)) or sx ^ ii (sx = lane/4); a warp's float2 / bf16x2 writes then take the
 * minimum 2 / 1 shared-memory wavefronts. */
/* PLAIN = 1 (BN 144, which the 32-column swizzled boxes do not divide): boxes of 64 rows x FP8_OUT_PLAIN_COLS = 16
 * columns, unswizzled (row pitch 64 bytes fp32, 32 bf16; tm_c encoded with that box and no swizzle), 4 KiB per
 * buffer. A warp's float2 writes of one column group cover 8 rows x 32 bytes: rows r and r + 2 share banks, so 4
 * wavefronts instead of 2 (4 KiB per box; the global stores are what the TMA store takes off the consumers). */
/* BIAS = 1: bias[col] (fp32, N values) is added after the scale; read through the read-only cache per column pair,
 * zero past N (the ping-pong kernel's epilogue runs under the other warpgroup's MMAs, so these loads are hidden). */
template <int BN, int OUT_BF16, int PLAIN = 0, int BIAS = 0>
__device__ __forceinline__ void fp8_store_tile_tma(const float (&d)[BN / 2], float scale, const CUtensorMap *tm_c,
                                                   uint32_t sout, int c, int tid, int tile_row, int tile_col, int M,
                                                   int N, const float *__restrict__ bias = nullptr) {
    static_assert(!BIAS || !PLAIN, "bias: the swizzled boxes only");
    constexpr int ES = OUT_BF16 ? 2 : 4;
    /* fragment column groups (8 columns each) per box */
    constexpr int CH = PLAIN ? FP8_OUT_PLAIN_COLS / 8 : OUT_BF16 ? 8 : 4;
    constexpr int NBOX = BN / 8 / CH;
    constexpr uint32_t BOX_BYTES = PLAIN ? FP8_OUT_PLAIN_BOX_BYTES : FP8_OUT_BOX_BYTES;
    constexpr uint32_t PITCH = PLAIN ? FP8_OUT_PLAIN_COLS * ES : 128u; /* bytes per staged row */
    static_assert((BN / 8) % CH == 0, "boxes tile the BN columns");
    const int warp = tid / 32, lane = tid % 32;
    const uint32_t srow = (uint32_t)(warp * 16 + lane / 4) * PITCH +
                          (PLAIN      ? (uint32_t)(2 * (lane % 4) * ES)
                           : OUT_BF16 ? (uint32_t)(lane % 4) * 4u
                                      : (uint32_t)(lane % 2) * 8u);
    const uint32_t sx = OUT_BF16 ? (uint32_t)(lane / 4) : (uint32_t)(((lane / 2) % 2) ^ (lane / 4));
    const uint32_t sbase = sout + (uint32_t)c * 2u * BOX_BYTES;
#pragma unroll
    for (int b = 0; b < NBOX; b++) {
        if (tile_row >= M || tile_col + b * CH * 8 >= N) break; /* wholly outside C: nothing to store */
        const uint32_t box = sbase + (uint32_t)(b & 1) * BOX_BYTES;
        if (tid == 0) {
            if (b == 0) tma_store_wait_read<0>(); /* the previous tile's stores have read their boxes */
            else tma_store_wait_read<1>();        /* box b-2's store (this box) has read it */
        }
        asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory");
#pragma unroll
        for (int ii = 0; ii < CH; ii++) {
            const int i = b * CH + ii;
            float b0 = 0.0f, b1 = 0.0f; /* this thread's two columns of column group i */
            if constexpr (BIAS) {
                const int col = tile_col + 8 * i + 2 * (lane % 4);
                if (col < N) b0 = __ldg(bias + col);
                if (col + 1 < N) b1 = __ldg(bias + col + 1);
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t a =
                    PLAIN ? box + srow + 8u * PITCH * (uint32_t)h + (uint32_t)(8 * ii * ES)
                          : box + srow + 1024u * (uint32_t)h + ((sx ^ (uint32_t)(OUT_BF16 ? ii : 2 * ii)) << 4);
                float v0 = d[4 * i + 2 * h] * scale, v1 = d[4 * i + 2 * h + 1] * scale;
                if constexpr (BIAS) v0 += b0, v1 += b1;
                if constexpr (OUT_BF16) {
                    const __nv_bfloat162 p2 = __floats2bfloat162_rn(v0, v1); /* v0 at the lower address */
                    const uint32_t w = *reinterpret_cast<const uint32_t *>(&p2);
                    asm volatile("st.shared.b32 [%0], %1;" ::"r"(a), "r"(w) : "memory");
                } else {
                    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(a), "f"(v0), "f"(v1) : "memory");
                }
            }
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory");
        if (tid == 0) {
            tma_store_2d(tm_c, tile_col + b * CH * 8, tile_row, box);
            tma_store_commit();
        }
    }
}

/* The bf16 ping-pong kernel's bf16 epilogues (XEPI != 0; BN 128, bf16 C through the swizzled boxes): per
 * accumulator value exactly the cooperative kernel's TMA-store sequence (gemm_wgmma_kernel.cuh's gemm_epilogue),
 * so both give the same bits:
 *     v = acc + bias[n]          (+ 0.0f without a bias, as there: a -0 sum becomes +0; no scale)
 *     pre_out[m][n] = rn(v)      FP8_EPI_GELU with tm_pre (has_pre)
 *     v = gemm_gelu(v)           FP8_EPI_GELU
 *     C[m][n] = rn(v)            bf16, round to nearest even
 * The staging is fp8_store_tile_tma's (64-row x 128-byte boxes of 64 bf16 columns, 128-byte swizzle, two boxes
 * per consumer warpgroup; named barrier 1 + c); with pre_out each box of columns is staged twice, pre_out first,
 * and fill f (f = 2 * box + pass, or box) takes staging box f % 2, so before a fill thread 0 waits until the
 * store of fill f - 2 (the same box) has read it: all of its bulk groups at the first fill (the previous tile
 * half's), at most one (fill f - 1's) after. The bias of a thread's 2 x 8 columns is loaded once per box of
 * columns (read-only cache, zero past N). */
#define FP8_EPI_ADD 1  /* the cooperative kernel's sequence: v = acc + bias (0 without one), bf16 C */
#define FP8_EPI_GELU 2 /* then GELU, pre_out (bf16) before it where has_pre */
template <int XEPI, int BIAS>
__device__ __forceinline__ void fp8_store_tile_tma_epi(const float (&d)[64], const CUtensorMap *tm_c,
                                                       const CUtensorMap *tm_pre, int has_pre, uint32_t sout, int c,
                                                       int tid, int tile_row, int tile_col, int M, int N,
                                                       const float *__restrict__ bias) {
    static_assert((XEPI & FP8_EPI_ADD) != 0, "the bf16 epilogues add the bias (or 0) first");
    constexpr bool GELU = (XEPI & FP8_EPI_GELU) != 0;
    constexpr int CH = 8;          /* 8-column groups per 64-column bf16 box */
    constexpr int NBOX = 128 / 64; /* boxes of columns in the 128-wide tile */
    const int warp = tid / 32, lane = tid % 32;
    const uint32_t srow = (uint32_t)(warp * 16 + lane / 4) * 128u + (uint32_t)(lane % 4) * 4u;
    const uint32_t sx = (uint32_t)(lane / 4);
    const uint32_t sbase = sout + (uint32_t)c * 2u * FP8_OUT_BOX_BYTES;
    const bool two_pass = GELU && has_pre;
    (void)tm_pre, (void)two_pass;
#pragma unroll
    for (int b = 0; b < NBOX; b++) {
        if (tile_row >= M || tile_col + b * CH * 8 >= N) break; /* wholly outside C: nothing to store */
        float bv[CH][2];
#pragma unroll
        for (int ii = 0; ii < CH; ii++) {
            bv[ii][0] = 0.0f, bv[ii][1] = 0.0f;
            if constexpr (BIAS) {
                const int col = tile_col + 8 * (b * CH + ii) + 2 * (lane % 4);
                if (col < N) bv[ii][0] = __ldg(bias + col);
                if (col + 1 < N) bv[ii][1] = __ldg(bias + col + 1);
            }
        }
        /* one fill of a staging box: pass 0 of 2 stages v (pre_out), the last pass the output */
        auto fill = [&](auto pass_c) {
            constexpr int pass = decltype(pass_c)::value;
            const int f = two_pass ? 2 * b + pass : b;
            const uint32_t box = sbase + (uint32_t)(f & 1) * FP8_OUT_BOX_BYTES;
            if (tid == 0) {
                if (f == 0) tma_store_wait_read<0>(); /* the previous tile half's stores have read their boxes */
                else tma_store_wait_read<1>();        /* fill f-2's store (this box) has read it */
            }
            asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory");
#pragma unroll
            for (int ii = 0; ii < CH; ii++) {
                const int i = b * CH + ii;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    /* row warp*16 + lane/4 + 8h (r % 8 = lane/4); column 8ii + 2(lane%4): 16-byte chunk ii,
                     * swizzled sx ^ ii */
                    const uint32_t a = box + srow + 1024u * (uint32_t)h + ((sx ^ (uint32_t)ii) << 4);
                    float v0 = d[4 * i + 2 * h] + bv[ii][0], v1 = d[4 * i + 2 * h + 1] + bv[ii][1];
                    if constexpr (GELU && pass == 1) { /* pass 0 of 2 stages v itself (pre_out) */
                        v0 = gemm_gelu(v0);
                        v1 = gemm_gelu(v1);
                    }
                    const __nv_bfloat162 p2 = __floats2bfloat162_rn(v0, v1); /* v0 at the lower address */
                    const uint32_t w = *reinterpret_cast<const uint32_t *>(&p2);
                    asm volatile("st.shared.b32 [%0], %1;" ::"r"(a), "r"(w) : "memory");
                }
            }
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            asm volatile("bar.sync %0, 128;" ::"r"(1 + c) : "memory");
            if (tid == 0) {
                tma_store_2d(GELU && pass == 0 ? tm_pre : tm_c, tile_col + b * CH * 8, tile_row, box);
                tma_store_commit();
            }
        };
        if constexpr (GELU) {
            if (two_pass) fill(std::integral_constant<int, 0>());
            fill(std::integral_constant<int, 1>());
        } else {
            fill(std::integral_constant<int, 0>());
        }
    }
}

/* The direct store of a warpgroup's 64 x BN tile at (tile_row, tile_col) from the accumulator fragment of wgmma
 * m64nBN f32 (PTX ISA): d[4i + 2h + j] is row warp*16 + lane/4 + 8h, column 8i + 2(lane%4) + j. float2 / bf16x2
 * stores where vec2 (N even, C aligned to two elements), bounds-checked against M and N. */
template <int BN, int OUT_BF16>
__device__ __forceinline__ void fp8_store_tile_direct(const float (&d)[BN / 2], float scale, void *__restrict__ Cv,
                                                      int tid, int tile_row, int tile_col, int M, int N, int vec2) {
    const int warp = tid / 32, lane = tid % 32;
    const int row0 = tile_row + warp * 16 + lane / 4;
    const int col0 = tile_col + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < BN / 8; i++) {
        const int col = col0 + 8 * i;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = row0 + 8 * h;
            if (row < M && col < N) {
                const float v0 = d[4 * i + 2 * h] * scale, v1 = d[4 * i + 2 * h + 1] * scale;
                const size_t off = (size_t)row * N + col;
                if constexpr (OUT_BF16) {
                    __nv_bfloat16 *p = (__nv_bfloat16 *)Cv + off;
                    if (vec2 && col + 1 < N) {
                        *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(v0, v1);
                    } else {
                        p[0] = __float2bfloat16_rn(v0);
                        if (col + 1 < N) p[1] = __float2bfloat16_rn(v1);
                    }
                } else {
                    float *p = (float *)Cv + off;
                    if (vec2 && col + 1 < N) {
                        *reinterpret_cast<float2 *>(p) = make_float2(v0, v1);
                    } else {
                        p[0] = v0;
                        if (col + 1 < N) p[1] = v1;
                    }
                }
            }
        }
    }
}


/* A consumer warpgroup's tile epilogue: through the TMA store (TMA_C; unswizzled 16-column boxes at BN 144) or
 * directly from the registers. */
template <int BN, int OUT_BF16, int TMA_C>
__device__ __forceinline__ void fp8_store_tile(const float (&d)[BN / 2], float scale, void *__restrict__ Cv,
                                               const CUtensorMap *tm_c, uint32_t sout, int c, int tid, int tile_row,
                                               int tile_col, int M, int N, int vec2) {
    if constexpr (TMA_C && BN == 144)
        fp8_store_tile_tma<BN, OUT_BF16, 1>(d, scale, tm_c, sout, c, tid, tile_row, tile_col, M, N);
    else if constexpr (TMA_C)
        fp8_store_tile_tma<BN, OUT_BF16>(d, scale, tm_c, sout, c, tid, tile_row, tile_col, M, N);
    else fp8_store_tile_direct<BN, OUT_BF16>(d, scale, Cv, tid, tile_row, tile_col, M, N, vec2);
}

/* ---- the kernel ------------------------------------------------------------ */

/* The mainloop + epilogue shared by the fp8 and tf32 kernels: a stage row is FP8_BK = 128 bytes of K either way
 * (128 fp8 or 32 tf32 elements, BKE), so only the element count per stage and the MMA differ. TMA_C: the
 * epilogue stages C in shared memory and stores it with TMA through tm_c (fp8_store_tile_tma; CL = 1 only);
 * otherwise it stores from the registers (tm_c unused, may be null). */
/* BIAS (ping-pong only): C = scale * A.B^T + bias (N fp32 values) */
/* XEPI (bf16 ping-pong only, OUT_BF16): fp8_store_tile_tma_epi's epilogue (the cooperative kernel's bias, GELU and
 * pre_out through tm_pre where has_pre) instead of fp8_store_tile_tma's */
template <int BN, int AT, int OUT_BF16, int PROMOTE, int CL = 1, int TMA_C = 0, int PP = 0, int BIAS = 0,
          int XEPI = 0>
__device__ __forceinline__ void wgmma_nt_body(const CUtensorMap &tm_a, const CUtensorMap &tm_b, void *__restrict__ Cv,
                                              float scale, int M, int N, int K, int vec2,
                                              const CUtensorMap *tm_c = nullptr, const float *bias = nullptr,
                                              const CUtensorMap *tm_pre = nullptr, int has_pre = 0) {
    static_assert(!BIAS || PP, "bias: the ping-pong epilogue only");
    static_assert(!XEPI || (PP && AT == WG_BF16 && OUT_BF16), "the bf16 epilogues: bf16 ping-pong, bf16 C");
    typedef fp8_cfg<BN, TMA_C> cfg;
    constexpr int STAGES = cfg::STAGES;
    constexpr int BKE = AT == WG_TF32 ? FP8_BK / 4 : AT == WG_BF16 ? FP8_BK / 2 : FP8_BK; /* K elements per stage */
    static_assert((AT != WG_TF32 && AT != WG_BF16) || !PROMOTE,
                  "tf32 and bf16 accumulate in fp32 in the tensor core: no promotion");
    static_assert(PROMOTE != FP8_PIPELINED || BN == 128 || BN == 144,
                  "pipelined promotion holds d, t, t1: 3 x BN/2 registers, so BN = 128 or 144 (216 of 240)");
    static_assert(PROMOTE != FP8_CHUNK64_RA || BN == 192,
                  "A-in-registers chunking: d 96 + 64 + 32 registers at BN 192");
    /* the variants that hold more than d and one temporary take the producer's registers down to 24 */
    constexpr bool WIDE_CONSUMERS = PROMOTE == FP8_PIPELINED || PROMOTE == FP8_CHUNK64_RA;
    static_assert((PROMOTE != FP8_CHUNK64 && PROMOTE != FP8_CHUNK128) || BN == 256,
                  "chunked promotion splits a 256-wide tile: d is 128 registers, the chunk temporaries 64");
    extern __shared__ __align__(1024) unsigned char fp8_smem[];
    const uint32_t base = (smem_u32(fp8_smem) + 1023u) & ~1023u;
    const uint32_t sa = base;                               /* A stages */
    const uint32_t sb = base + STAGES * cfg::A_BYTES;       /* B stages */
    const uint32_t sout = base + STAGES * cfg::STAGE_BYTES; /* TMA_C: 2 staging boxes per consumer warpgroup */
    const uint32_t bars = sout + cfg::OUT_BYTES;            /* full[s] at +8s, empty[s] at +8(STAGES+s) */
    (void)sout;

    static_assert(CL == 1 || (CL == 2 && AT != WG_TF32 && AT != WG_BF16 && BN % 2 == 0), "clusters of 1 or 2 (fp8)");
    static_assert(!PP || ((AT == WG_TF32 || AT == WG_BF16) && BN == 128 && TMA_C && CL == 1 && !PROMOTE),
                  "ping-pong: tf32 or bf16, 128 x 128 tiles per warpgroup, TMA store");
    static_assert(AT != WG_BF16 || PP, "bf16: the ping-pong schedule only");
    const int tiles_m = (M + FP8_BM - 1) / FP8_BM, tiles_n = (N + BN - 1) / BN;
    /* CL = 2: the unit of work is a pair of row-blocks (2p + rank); a rank-1 row-block past M (odd tiles_m) is a
     * phantom tile: its producer loads the last real row-block's A (a fully out-of-bounds TMA box is avoided),
     * its consumers compute and their epilogue's row < M check drops the result, so both CTAs run the same
     * stages (the B multicast needs both) */
    const int units_m = CL == 2 ? (tiles_m + 1) / 2 : tiles_m;
    const int num_tiles = units_m * tiles_n;
    const int ktiles = (K + BKE - 1) / BKE;
    /* warp-uniform (descriptors in uniform registers); not for chunk64ra, where it makes ptxas spill 4-40 bytes */
    const int wg = PROMOTE == FP8_CHUNK64_RA ? (int)(threadIdx.x / 128) : wgmma_warpgroup_index();
    const uint32_t rank = CL == 2 ? fp8_cluster_rank() : 0;
    const int unit0 = CL == 2 ? (int)(blockIdx.x / 2) : (int)blockIdx.x;
    const int unit_step = CL == 2 ? (int)(gridDim.x / 2) : (int)gridDim.x;

    if (threadIdx.x == 0) {
        /* PP: a stage is consumed by one warpgroup's 4 warps */
        wgmma_ring_init<STAGES>(bars, PP ? FP8_CONSUMER_WARPS / 2 : FP8_CONSUMER_WARPS * CL);
        tma_prefetch_desc(&tm_a);
        tma_prefetch_desc(&tm_b);
        if constexpr (TMA_C) tma_prefetch_desc(tm_c);
    }
    if constexpr (CL == 2) fp8_cluster_sync(); /* also a CTA barrier: the partner's barriers are initialised */
    else __syncthreads();
    /* the prologue above touched shared memory and the parameters' tensor maps only; from here on global memory,
     * which the previous kernel may still be using under programmatic dependent launch (pdl.cuh; a no-op for a
     * plain launch) */
    forge_pdl_wait();
    forge_pdl_launch_dependents();

    if (wg == 0) {
        /* ---- producer: one thread drives the TMA ring ---- */
        wgmma_setmaxnreg_dec<WIDE_CONSUMERS ? FP8_PIPE_PRODUCER_REGS : FP8_PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            int stage = 0;
            uint32_t phase = 0;
            for (int t = unit0; t < num_tiles; t += unit_step) {
                int tm, tn;
                fp8_tile_coords(t, units_m, tiles_n, &tm, &tn);
                if constexpr (CL == 2) tm = min(2 * tm + (int)rank, tiles_m - 1); /* a phantom loads real rows */
                const int m0 = tm * FP8_BM, n0 = tn * BN;
                for (int kt = 0; kt < ktiles; kt++) {
                    const uint32_t full = bars + 8 * stage, empty = bars + 8 * (STAGES + stage);
                    /* CL = 2: the partner's consumers arrive here too; a plain (cta-scope acquire) wait, as
                     * with .acquire.cluster ptxas adds a CCTL.IVALL (L1 invalidate) after every wait, and the
                     * TMA overwrite is ordered by the barrier itself (see fp8_mbar_arrive_remote) */
                    mbar_wait(empty, phase ^ 1);
                    /* CL = 2: the partner's half of B may complete on `full` before this expect_tx (tx-count
                     * goes negative; the phase still needs this arrival) */
                    mbar_arrive_expect_tx(full, cfg::STAGE_BYTES);
                    tma_load_2d(sa + stage * cfg::A_BYTES, &tm_a, kt * BKE, m0, full);
                    if constexpr (CL == 2)
                        fp8_tma_load_2d_mc(sb + stage * cfg::B_BYTES + rank * (BN / 2) * FP8_BK, &tm_b, kt * BKE,
                                           n0 + (int)rank * (BN / 2), full, (uint16_t)0x3);
                    else
                        tma_load_2d(sb + stage * cfg::B_BYTES, &tm_b, kt * BKE, n0, full);
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else {
        /* ---- consumers: wgmma from the ring (promoted or not), then the epilogue ---- */
        wgmma_setmaxnreg_inc<WIDE_CONSUMERS ? FP8_PIPE_CONSUMER_REGS : FP8_CONSUMER_REGS>();
        const int c = wg - 1; /* which 64-row half of the block tile (PP: which warpgroup of the pair) */
        const int tid = threadIdx.x - 128 * wg, warp = tid / 32, lane = tid % 32;
        if constexpr (PP) {
            float dlo[64], dhi[64];
            for (int j = c, t = unit0 + c * unit_step; t < num_tiles; j += 2, t += 2 * unit_step) {
                int tm, tn;
                fp8_tile_coords(t, units_m, tiles_n, &tm, &tn);
                const long long s0 = (long long)j * ktiles;
                if (j > 0) asm volatile("bar.sync %0, 256;" ::"r"(FP8_PP_ORDER_BAR + c) : "memory");
                const int signal = t + unit_step < num_tiles ? FP8_PP_ORDER_BAR + (1 - c) : -1;
                fp8_pp_tile<AT, STAGES>(dlo, dhi, bars, sa, sb, lane, ktiles, (int)(s0 % STAGES),
                                        (uint32_t)((s0 / STAGES) & 1), signal);
                if constexpr (XEPI) {
                    fp8_store_tile_tma_epi<XEPI, BIAS>(dlo, tm_c, tm_pre, has_pre, sout, c, tid, tm * FP8_BM,
                                                       tn * BN, M, N, bias);
                    fp8_store_tile_tma_epi<XEPI, BIAS>(dhi, tm_c, tm_pre, has_pre, sout, c, tid, tm * FP8_BM + 64,
                                                       tn * BN, M, N, bias);
                } else {
                    fp8_store_tile_tma<BN, OUT_BF16, 0, BIAS>(dlo, scale, tm_c, sout, c, tid, tm * FP8_BM, tn * BN,
                                                              M, N, bias);
                    fp8_store_tile_tma<BN, OUT_BF16, 0, BIAS>(dhi, scale, tm_c, sout, c, tid, tm * FP8_BM + 64,
                                                              tn * BN, M, N, bias);
                }
            }
        } else {
        int stage = 0;
        uint32_t phase = 0;
        float d[BN / 2];
        float t[BN / 2];  /* PROMOTE: one stage's partial sums (unused, and removed, otherwise) */
        float t1[BN / 2]; /* FP8_PIPELINED: the odd stages' partial sums (unused, and removed, otherwise) */
#pragma unroll
        for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;

        for (int u = unit0; u < num_tiles; u += unit_step) {
            int tm, tn;
            fp8_tile_coords(u, units_m, tiles_n, &tm, &tn);
            if constexpr (CL == 2) tm = 2 * tm + (int)rank;
            int prev = 0;
            if constexpr (PROMOTE) {
                /* 0 + t is exact, so the first stage needs no special case (a select per element would double
                 * the promotion's instruction count) */
#pragma unroll
                for (int i = 0; i < BN / 2; i++) d[i] = 0.0f;
            }
            if constexpr (PROMOTE == FP8_PIPELINED) {
                /* lab variant, pipelined promotion: stage kt's wgmmas write t (kt even) or t1 (kt odd); after issuing
                 * them, wait_group 1 retires the previous stage's group only, so its FADDs into d overlap this stage's
                 * MMAs instead of stalling the tensor pipe. Unrolled by two so each temporary is named at compile time.
                 * The loop body has no branch between an issue and its wait and leaves the same group (the odd stage's,
                 * t1) in flight on every iteration: an earlier version issued the odd stage under
                 * `if (kt + 1 < ktiles)` and drained under `if ((ktiles & 1) == 0)`, and ptxas serialised all its
                 * wgmmas (info C7518). t1 is zeroed per tile so the first retire adds +0. An odd last stage is the tail after the
                 * loop (a uniform branch, taken or not for the whole tile). */
#pragma unroll
                for (int i = 0; i < BN / 2; i++) t1[i] = 0.0f;
                int kt = 0;
#pragma unroll 1
                for (; kt + 1 < ktiles; kt += 2) {
                    fp8_issue_stage<BN, AT>(t, bars, sa, sb, c, stage, phase);
                    wgmma_wait<1>(); /* the previous odd stage (t1), if any */
                    wgmma_fence_operands(t1);
                    if (kt > 0 && lane == 0) fp8_release<CL>(bars + 8 * (STAGES + prev), rank);
#pragma unroll
                    for (int i = 0; i < BN / 2; i++) d[i] += t1[i];
                    prev = stage;
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                    fp8_issue_stage<BN, AT>(t1, bars, sa, sb, c, stage, phase);
                    wgmma_wait<1>(); /* the even stage (t) */
                    wgmma_fence_operands(t);
                    if (lane == 0) fp8_release<CL>(bars + 8 * (STAGES + prev), rank);
#pragma unroll
                    for (int i = 0; i < BN / 2; i++) d[i] += t[i];
                    prev = stage;
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
                if (kt < ktiles) {
                    /* odd ktiles: the last stage, into t; retire t1 (zeros when ktiles == 1) meanwhile */
                    fp8_issue_stage<BN, AT>(t, bars, sa, sb, c, stage, phase);
                    wgmma_wait<1>();
                    wgmma_fence_operands(t1);
                    if (kt > 0 && lane == 0) fp8_release<CL>(bars + 8 * (STAGES + prev), rank);
#pragma unroll
                    for (int i = 0; i < BN / 2; i++) d[i] += t1[i];
                    prev = stage;
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                    wgmma_wait<0>();
                    wgmma_fence_operands(t);
                    /* t into t1 (64 MOVs once per tile) so one copy of the final adds serves both tails: a
                     * second copy of `d += t` made ptxas spill in an earlier version */
#pragma unroll
                    for (int i = 0; i < BN / 2; i++) t1[i] = t[i];
                } else {
                    wgmma_wait<0>();
                    wgmma_fence_operands(t1);
                }
                if (lane == 0) fp8_release<CL>(bars + 8 * (STAGES + prev), rank);
#pragma unroll
                for (int i = 0; i < BN / 2; i++) d[i] += t1[i];
            } else if constexpr (PROMOTE == FP8_CHUNK64) {
                /* chunked promotion at BN = 256: a stage's 64 x 256 x 128 is four 64-column chunks q = 0..3, each
                 * 4 wgmma m64n64k32 as one commit group into p0 (q even) or p1 (q odd). After issuing chunk q the
                 * warpgroup retires chunk q-1 (wait_group 1) and adds its temporary into d while chunk q runs, so
                 * the tensor pipe always holds one of this warpgroup's groups during its FADDs. Chunk 3 of stage
                 * kt is retired after chunk 0 of stage kt+1 is issued, and stage kt released then (its smem is
                 * read by chunk 3). The control flow is the same on every path (no branch between an issue and
                 * its wait, the same groups in flight at every loop entry): ptxas serialises wgmma (C7518)
                 * otherwise. At kt = 0 there is no chunk 3 to retire: p1 is zeroed so that add is exact (+0). */
                float p0[32], p1[32];
#pragma unroll
                for (int i = 0; i < 32; i++) {
                    p0[i] = 0.0f; /* defined before its first (scale-d 0, read-write) wgmma */
                    p1[i] = 0.0f;
                }
#pragma unroll 1
                for (int kt = 0; kt < ktiles; kt++) {
                    mbar_wait(bars + 8 * stage, phase);
                    /* one descriptor per operand; +2 per 32-byte k-step, +512 per 64-row B chunk (8192 B >> 4):
                     * the start-address field (address >> 4 < 2^14 in 227 KiB) never carries */
                    const uint64_t da = wgmma_desc(sa + stage * cfg::A_BYTES + c * (64 * FP8_BK));
                    const uint64_t db = wgmma_desc(sb + stage * cfg::B_BYTES);
                    fp8_issue_chunk64<AT>(p0, da, db);
                    wgmma_wait<1>(); /* the previous stage's chunk 3 (p1): done */
                    wgmma_fence_operands(p1);
                    if (kt > 0 && lane == 0) fp8_release<CL>(bars + 8 * (STAGES + prev), rank);
                    fp8_promote_chunk<96>(d, p1);
                    fp8_issue_chunk64<AT>(p1, da, db + 512);
                    wgmma_wait<1>(); /* chunk 0 */
                    wgmma_fence_operands(p0);
                    fp8_promote_chunk<0>(d, p0);
                    fp8_issue_chunk64<AT>(p0, da, db + 1024);
                    wgmma_wait<1>(); /* chunk 1 */
                    wgmma_fence_operands(p1);
                    fp8_promote_chunk<32>(d, p1);
                    fp8_issue_chunk64<AT>(p1, da, db + 1536);
                    wgmma_wait<1>(); /* chunk 2 */
                    wgmma_fence_operands(p0);
                    fp8_promote_chunk<64>(d, p0);
                    prev = stage;
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
                wgmma_wait<0>(); /* the last stage's chunk 3 */
                wgmma_fence_operands(p1);
                if (lane == 0) fp8_release<CL>(bars + 8 * (STAGES + prev), rank);
                fp8_promote_chunk<96>(d, p1);
            } else if constexpr (PROMOTE == FP8_CHUNK64_RA) {
                /* lab variant, chunked promotion at BN = 192 with A in registers: FP8_CHUNK64's chunks each read the
                 * warpgroup's 64 x 128 bytes of A from shared memory (4x per stage; ncu: L1/TEX 94% busy at 8192^3);
                 * here one ldmatrix.x4 per k32 step per stage, into the other of two register buffers while the current
                 * stage's chunks run. 192 columns, not 256: d 96 + two 32-register temporaries + 2 x 16 A registers fit
                 * the consumers' 240 (at 256, 224 of them: 116-byte spills); a single A buffer at 256 forced a
                 * wait_group 0 per stage and measured 3% slower than FP8_CHUNK64. The same adds in the same order per
                 * element as the other promoted kernels. */
                float p0[32], p1[32];
                uint32_t a[2][FP8_BK / 32][4];
#pragma unroll
                for (int i = 0; i < 32; i++) {
                    p0[i] = 0.0f;
                    p1[i] = 0.0f; /* the first stage's retire of a "previous chunk 2" adds +0 */
                }
                mbar_wait(bars + 8 * stage, phase);
                fp8_lda_stage(a[0], sa + stage * cfg::A_BYTES + c * (64 * FP8_BK), warp, lane);
                int kt = 0;
#pragma unroll 1
                for (; kt + 1 < ktiles; kt += 2) {
                    fp8_ra_stage<0, AT, CL, STAGES>(d, p0, p1, a, bars, sa, sb, c, warp, lane, stage, phase, prev,
                                                    kt == 0, true, rank);
                    fp8_ra_stage<1, AT, CL, STAGES>(d, p0, p1, a, bars, sa, sb, c, warp, lane, stage, phase, prev,
                                                    false, kt + 2 < ktiles, rank);
                }
                if (kt < ktiles) { /* odd ktiles: an even last stage, its chunk 2 in p0 (one group in flight) */
                    fp8_ra_stage<0, AT, CL, STAGES>(d, p0, p1, a, bars, sa, sb, c, warp, lane, stage, phase, prev,
                                                    kt == 0, false, rank);
                    wgmma_wait<0>();
                    wgmma_fence_operands(p0);
#pragma unroll
                    for (int i = 0; i < 32; i++) p1[i] = p0[i]; /* one copy of the final add below */
                } else {
                    wgmma_wait<0>(); /* an odd last stage: its chunk 2 in p1 */
                    wgmma_fence_operands(p1);
                }
                if (lane == 0) fp8_release<CL>(bars + 8 * (STAGES + prev), rank);
                fp8_promote_chunk<64>(d, p1);
            } else if constexpr (PROMOTE == FP8_CHUNK128) {
                /* lab variant, chunked promotion at BN = 256, serial: two 128-column chunks per stage into one
                 * 64-register temporary pt (d 128 + pt 64: a second temporary would need 256 registers), each retired
                 * with wait_group 0 and added before the next is issued; the other consumer warpgroup's MMAs fill the
                 * gaps (as in FP8_SERIAL, at half the FADDs per gap and a 256-wide tile). */
                float pt[64];
#pragma unroll 1
                for (int kt = 0; kt < ktiles; kt++) {
                    mbar_wait(bars + 8 * stage, phase);
                    const uint64_t da = wgmma_desc(sa + stage * cfg::A_BYTES + c * (64 * FP8_BK));
                    const uint64_t db = wgmma_desc(sb + stage * cfg::B_BYTES);
                    fp8_issue_chunk128<AT>(pt, da, db);
                    wgmma_wait<0>();
                    wgmma_fence_operands(pt);
                    fp8_promote_chunk<0>(d, pt);
                    fp8_issue_chunk128<AT>(pt, da, db + 1024); /* rows 128..255: 16384 B >> 4 */
                    wgmma_wait<0>();
                    wgmma_fence_operands(pt);
                    if (lane == 0) fp8_release<CL>(bars + 8 * (STAGES + stage), rank); /* the stage is read: release it */
                    fp8_promote_chunk<64>(d, pt);
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            } else if constexpr (PROMOTE == FP8_SERIAL_ROT) {
                /* lab variant, serial promotion (one temporary t: d + t = 144 registers at BN 144), rotated: stage kt's
                 * MMAs are issued, then the loop waits for stage kt+1 to be full (the barrier check runs under stage
                 * kt's MMAs), retires stage kt (wait_group 0), releases it, adds t into d and issues stage kt+1 into t.
                 * This warpgroup's tensor work stops during its adds; the other consumer warpgroup's stage fills that
                 * gap. One group in flight at every loop entry and the same control flow on every path (ptxas C7518).
                 * Same adds, same order as FP8_SERIAL. */
                constexpr uint64_t A_STEP = cfg::A_BYTES >> 4, B_STEP = cfg::B_BYTES >> 4; /* descriptor units */
                const uint64_t da0 = wgmma_desc(sa + c * (64 * FP8_BK)), db0 = wgmma_desc(sb);
                mbar_wait(bars + 8 * stage, phase);
                fp8_mma_stage_desc<BN, AT>(t, da0 + stage * A_STEP, db0 + stage * B_STEP);
                fp8_ring_next<STAGES>(prev, stage, phase);
#pragma unroll 1
                for (int kt = 1; kt < ktiles; kt++) {
                    mbar_wait(bars + 8 * stage, phase);
                    fp8_retire_all<CL, STAGES>(t, bars, prev, lane, rank);
#pragma unroll
                    for (int i = 0; i < BN / 2; i++) d[i] += t[i];
                    fp8_mma_stage_desc<BN, AT>(t, da0 + stage * A_STEP, db0 + stage * B_STEP);
                    fp8_ring_next<STAGES>(prev, stage, phase);
                }
                fp8_retire_all<CL, STAGES>(t, bars, prev, lane, rank);
#pragma unroll
                for (int i = 0; i < BN / 2; i++) d[i] += t[i];
            } else if constexpr (PROMOTE == FP8_SERIAL) {
                for (int kt = 0; kt < ktiles; kt++) {
                    mbar_wait(bars + 8 * stage, phase);
                    /* this warpgroup's 64 rows of the 128-row A box (64 rows x 128 B) */
                    const uint32_t a0 = sa + stage * cfg::A_BYTES + c * (64 * FP8_BK);
                    fp8_mma_stage<BN, AT>(t, a0, sb + stage * cfg::B_BYTES, true); /* t = 0 + this stage */
                    wgmma_wait<0>();
                    wgmma_fence_operands(t);
                    if (lane == 0) fp8_release<CL>(bars + 8 * (STAGES + stage), rank); /* the stage is read: release it */
#pragma unroll
                    for (int i = 0; i < BN / 2; i++) d[i] += t[i];
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            } else if constexpr (BN == 256 && CL == 1) {
                /* a last column tile with at most BN/2 columns left in N (N = 1408 = 5 x 256 + 128: the tall
                 * shape) runs the half-width MMA: the full width would compute 128 columns of TMA zero-fill */
                if (tn * BN + BN / 2 >= N)
                    fp8_plain_tile<BN / 2, BN, AT, CL, STAGES>(d, bars, sa, sb, c, lane, ktiles, stage, phase, rank);
                else
                    fp8_plain_tile<BN, BN, AT, CL, STAGES>(d, bars, sa, sb, c, lane, ktiles, stage, phase, rank);
            } else {
                fp8_plain_tile<BN, BN, AT, CL, STAGES>(d, bars, sa, sb, c, lane, ktiles, stage, phase, rank);
            }

            fp8_store_tile<BN, OUT_BF16, TMA_C>(d, scale, Cv, tm_c, sout, c, tid, tm * FP8_BM + c * 64, tn * BN, M, N,
                                                vec2);
        }
        } /* PP */
    }
    /* TMA_C: the staging boxes must not be released (CTA exit) while a TMA store may still read them: every thread
     * waits for all of its bulk groups (only consumer thread tid 0 has any; a no-op for the others). Here, after
     * the producer / consumer branch and unconditional, not as `if (tid == 0)` at the end of the consumer branch:
     * that placement made ptxas cap the consumers' registers near 180 and spill 160-248 bytes in every promoted
     * instantiation (d + temporaries = 192 registers). */
    if constexpr (TMA_C) tma_store_wait_all();
    /* CL = 2: no CTA leaves while its partner may still arrive on its empty barriers (the partner's last
     * releases) or multicast into it (cannot happen: both run the same stages, each consumed before here) */
    if constexpr (CL == 2) fp8_cluster_sync();
}

/* fp8: AT = WG_E4M3 or WG_E5M2 (A's format; B is e4m3). TMA_C: C stored through tm_c (TMA-store epilogue),
 * else from the registers (tm_c unused). */
template <int BN, int AT, int OUT_BF16, int PROMOTE, int TMA_C>
__global__ void __launch_bounds__(FP8_THREADS, 1)
    gemm_wgmma_fp8_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                          const __grid_constant__ CUtensorMap tm_c, void *__restrict__ Cv, float scale, int M, int N,
                          int K, int vec2) {
    wgmma_nt_body<BN, AT, OUT_BF16, PROMOTE, 1, TMA_C>(tm_a, tm_b, Cv, scale, M, N, K, vec2, &tm_c);
}

/* tf32: fp32 inputs read as tf32 by wgmma (the low 13 mantissa bits are ignored), fp32 out, no promotion;
 * TMA_C as for fp8 */
template <int BN, int TMA_C>
__global__ void __launch_bounds__(FP8_THREADS, 1)
    gemm_wgmma_tf32_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                           const __grid_constant__ CUtensorMap tm_c, float *__restrict__ C, int M, int N, int K,
                           int vec2) {
    wgmma_nt_body<BN, WG_TF32, 0, 0, 1, TMA_C>(tm_a, tm_b, C, 1.0f, M, N, K, vec2, &tm_c);
}

/* tf32 ping-pong (PP = 1): defined in gemm_wgmma_fp8.cu; declared here for tf32_launch (the lab forces it) */
__global__ void __launch_bounds__(FP8_THREADS, 1)
    gemm_wgmma_tf32_pp_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                              const __grid_constant__ CUtensorMap tm_c, float *__restrict__ C, int M, int N, int K,
                              int vec2);

/* ---- host: what the default entry points (gemm_wgmma_fp8.cu) and the lab's variants share ---------------------- */

/* The current device and its SM count, cached per device; FORGE_ERR_UNSUPPORTED unless compute capability 9.x. */
static inline forge_status fp8_device_info(int *dev, int *sm_count) {
    static int sms_of[FP8_MAX_DEVICES], cc_of[FP8_MAX_DEVICES]; /* racing first callers store the same values */
    CUDA_TRY(cudaGetDevice(dev));
    if (*dev < 0 || *dev >= FP8_MAX_DEVICES)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_fp8: device index %d out of range", *dev);
    if (sms_of[*dev] == 0) {
        int major = 0, minor = 0, sms = 0;
        CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, *dev));
        CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, *dev));
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, *dev));
        cc_of[*dev] = 10 * major + minor;
        sms_of[*dev] = sms;
    }
    if (cc_of[*dev] / 10 != 9)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "gemm_fp8: the fp8 wgmma/TMA kernels are built for sm_90a only; device %d has compute "
                           "capability %d.%d",
                           *dev, cc_of[*dev] / 10, cc_of[*dev] % 10);
    *sm_count = sms_of[*dev];
    return FORGE_OK;
}

/* Tile width of the unpromoted kernels (tf32's cooperative schedule; the lab's fp8 fast accumulation): 256, or 128
 * when 256-wide tiles leave SMs idle that 128-wide tiles would use. */
static inline int fp8_bn_plain(int M, int N, int sm_count) {
    const long long tiles_m = (M + FP8_BM - 1) / FP8_BM;
    const long long t128 = tiles_m * ((N + 127) / 128), t256 = tiles_m * ((N + 255) / 256);
    return (t256 < sm_count && t128 > t256) ? 128 : 256;
}

/* Tile width of the serial promotion: 128 or 192, whichever has the smaller modelled time waves x per-tile cost
 * (192: 1, 128: 0.72 -- two thirds of the MMAs with the same A traffic and epilogue overheads per tile). */
static inline int fp8_bn_serial(int M, int N, int sm_count) {
    const long long tiles_m = (M + FP8_BM - 1) / FP8_BM;
    const long long t128 = tiles_m * ((N + 127) / 128), t192 = tiles_m * ((N + 191) / 192);
    const double c128 = 0.72 * (double)((t128 + sm_count - 1) / sm_count);
    const double c192 = 1.00 * (double)((t192 + sm_count - 1) / sm_count);
    return c128 < c192 ? 128 : 192;
}

/* forge_gemm_fp8_nt's kernel per shape: FP8_CHUNK64 (256-wide tiles) where 256-wide tiles cover at least half the
 * SMs, else FP8_SERIAL at 128/192 (fp8_bn_serial). Both do the same fp32 adds in the same K order. Chosen by
 * measurement (lab/notes/gemm-fp8.md): chunk64 ahead wherever its tiles fill the SMs, far behind where they leave
 * three quarters idle (1000 x 999 x 528: 32 tiles of 256). */
static inline int fp8_auto_promote(int M, int N, int sm_count) {
    const long long t256 = (long long)((M + FP8_BM - 1) / FP8_BM) * ((N + 255) / 256);
    return 2 * t256 >= sm_count ? FP8_CHUNK64 : FP8_SERIAL;
}

/* C (M,N) row-major for the TMA-store epilogue: dims {N, M}, row stride N*4 bytes fp32 (the caller ensures
 * N % 4 == 0) or N*2 bf16 (N % 8 == 0), base 16-byte aligned; boxes of 64 rows x 128 bytes (32 fp32 / 64 bf16
 * columns), 128-byte swizzle: the staging layout of fp8_store_tile_tma (gemm_wgmma.cu's gemm_encode_c). */
static inline forge_status fp8_encode_c(CUtensorMap *map, void *C, int M, int N, int bf16, int plain = 0) {
    gemm_encode_tiled_fn encode = nullptr;
    FORGE_TRY(gemm_get_encoder(&encode));
    const cuuint64_t dims[2] = {(cuuint64_t)N, (cuuint64_t)M};
    const cuuint64_t strides[1] = {(cuuint64_t)N * (bf16 ? 2 : 4)};
    /* plain (BN 144, fp8_store_tile_tma PLAIN): 64 rows x FP8_OUT_PLAIN_COLS columns, no swizzle */
    const cuuint32_t box[2] = {plain ? (cuuint32_t)FP8_OUT_PLAIN_COLS : bf16 ? 64u : 32u, 64u};
    const cuuint32_t elem_strides[2] = {1, 1};
    CUresult r = encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, C, dims,
                        strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        plain ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return forge_error(FORGE_ERR_DEVICE,
                           "gemm_fp8: cuTensorMapEncodeTiled for C (%d x %d %s, box 64 rows x %u columns, %s, TMA "
                           "store) failed with CUresult %d",
                           M, N, bf16 ? "bf16" : "fp32", (unsigned)box[0], plain ? "no swizzle" : "128B swizzle",
                           (int)r);
    return FORGE_OK;
}

/* Whether C can take the TMA-store epilogue: fp32 N % 4 == 0, bf16 N % 8 == 0 (16-byte row strides) and a
 * 16-byte aligned base. */
static inline int fp8_c_tma_ok(const void *C, int N, int out_bf16) {
    return (out_bf16 ? N % 8 == 0 : N % 4 == 0) && (uintptr_t)C % 16 == 0;
}

/* Why the bf16 ping-pong epilogue kernel refuses these arguments (forge_gemm_bf16_nt_pp_bf16's rules), or NULL when it
 * takes them. */
static inline const char *bf16_pp_refusal(const void *A, const void *B, const void *C, const float *bias,
                                          const void *pre_out, int gelu, int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return "M, N and K must be >= 1";
    if (K % 8 != 0) return "K must be a multiple of 8 (TMA needs 16-byte row strides: K*2 bytes)";
    if ((uintptr_t)A % 16 != 0 || (uintptr_t)B % 16 != 0) return "A and B must be 16-byte aligned (TMA)";
    if (!fp8_c_tma_ok(C, N, 1))
        return "the ping-pong schedule stores C through TMA: N must be a multiple of 8 and C 16-byte aligned";
    if (pre_out != nullptr && !gelu) return "pre_out is the pre-activation of GELU: give it with gelu only";
    if (pre_out != nullptr && (uintptr_t)pre_out % 16 != 0)
        return "pre_out goes through the TMA store: it must be 16-byte aligned";
    if ((uintptr_t)bias % 4 != 0) return "bias must be 4-byte aligned";
    return nullptr;
}

template <int BN, int AT, int OUT_BF16, int PROMOTE, int TMA_C>
static forge_status fp8_launch_t(const void *A, const void *B, void *C, float scale, int M, int N, int K, int vec2,
                                 int dev, int sm_count, cudaStream_t stream) {
    typedef fp8_cfg<BN, TMA_C> cfg;
    static kernel_attrs_once once; /* per instantiation */
    void (*kernel)(const CUtensorMap, const CUtensorMap, const CUtensorMap, void *, float, int, int, int, int) =
        gemm_wgmma_fp8_kernel<BN, AT, OUT_BF16, PROMOTE, TMA_C>;
    CUtensorMap tm_a, tm_b, tm_c;
    memset(&tm_c, 0, sizeof tm_c); /* direct store: passed, never read */
    FORGE_TRY(wgmma_encode_2d(&tm_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, A, M, K, (unsigned long long)K, FP8_BM, FP8_BK,
                              "gemm_fp8 A (fp8, K-major)"));
    FORGE_TRY(wgmma_encode_2d(&tm_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, B, N, K, (unsigned long long)K, BN, FP8_BK,
                              "gemm_fp8 B (fp8, K-major)"));
    if constexpr (TMA_C) FORGE_TRY(fp8_encode_c(&tm_c, C, M, N, OUT_BF16, BN == 144));
    CUDA_TRY(kernel_attrs_set_dev(&once, dev, (const void *)kernel, (int)cfg::SMEM, 0));
    const long long tiles = (long long)((M + FP8_BM - 1) / FP8_BM) * ((N + BN - 1) / BN);
    if (tiles > 0x7fffffffLL) return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_fp8: %lld tiles overflow int", tiles);
    const int grid = (int)(tiles < sm_count ? tiles : sm_count);
    kernel<<<grid, FP8_THREADS, cfg::SMEM, stream>>>(tm_a, tm_b, tm_c, C, scale, M, N, K, vec2);
    CUDA_LAUNCH_CHECK("gemm_wgmma_fp8_kernel");
    return FORGE_OK;
}

/* tma_c: the TMA-store epilogue (the caller checked fp8_c_tma_ok), else the direct store */
template <int BN, int AT, int OUT_BF16, int PROMOTE>
static forge_status fp8_launch(const void *A, const void *B, void *C, float scale, int M, int N, int K, int vec2,
                               int tma_c, int dev, int sm_count, cudaStream_t stream) {
    if (tma_c) return fp8_launch_t<BN, AT, OUT_BF16, PROMOTE, 1>(A, B, C, scale, M, N, K, vec2, dev, sm_count, stream);
    return fp8_launch_t<BN, AT, OUT_BF16, PROMOTE, 0>(A, B, C, scale, M, N, K, vec2, dev, sm_count, stream);
}

static inline const char *fp8_fmt_name(int f) {
    return f == FORGE_FP8_E4M3 ? "e4m3" : f == FORGE_FP8_E5M2 ? "e5m2" : "?";
}

/* One fp8 call's launch arguments besides the operands and the shape */
struct fp8_call {
    int out_bf16, vec2; /* C bf16; C takes float2 / bf16x2 stores */
    float scale;        /* a_scale * b_scale */
    int dev, sms;
    cudaStream_t st;
};

/* The argument rules of gemm_fp8.h (FORGE_ERR_UNSUPPORTED with the reason, before any device work), then the
 * device (fp8_device_info) and the launch arguments. */
static inline forge_status fp8_call_init(fp8_call *k, const void *A, forge_fp8_format a_fmt, const void *B,
                                         forge_fp8_format b_fmt, const void *C, forge_gemm_out c_type, float a_scale,
                                         float b_scale, int M, int N, int K, void *stream) {
    const char *why = nullptr;
    const size_t c_elem = c_type == FORGE_GEMM_OUT_BF16 ? 2 : 4;
    if (M <= 0 || N <= 0 || K <= 0) why = "M, N and K must be >= 1";
    else if (K % 16 != 0) why = "K must be a multiple of 16 (TMA needs 16-byte row strides: K fp8 bytes)";
    else if ((uintptr_t)A % 16 != 0 || (uintptr_t)B % 16 != 0) why = "A and B must be 16-byte aligned (TMA)";
    else if (c_type != FORGE_GEMM_OUT_F32 && c_type != FORGE_GEMM_OUT_BF16) why = "C must be fp32 or bf16";
    else if ((uintptr_t)C % c_elem != 0) why = "C must be aligned to its element size";
    else if (b_fmt != FORGE_FP8_E4M3 || (a_fmt != FORGE_FP8_E4M3 && a_fmt != FORGE_FP8_E5M2))
        why = "only e4m3 x e4m3 and e5m2 x e4m3 (A x B) are built";
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_fp8 nt (%s x %s, M=%d N=%d K=%d): %s", fp8_fmt_name(a_fmt),
                           fp8_fmt_name(b_fmt), M, N, K, why);
    FORGE_TRY(fp8_device_info(&k->dev, &k->sms));
    k->out_bf16 = c_type == FORGE_GEMM_OUT_BF16;
    k->vec2 = N % 2 == 0 && (uintptr_t)C % (2 * c_elem) == 0;
    k->scale = a_scale * b_scale;
    k->st = (cudaStream_t)stream;
    return FORGE_OK;
}

/* fn(std::integral_constant<int, AT>, std::integral_constant<int, OUT_BF16>) for A's format and C's type: the
 * caller's instantiation of the four */
template <typename Fn> static forge_status fp8_with_types(forge_fp8_format a_fmt, int out_bf16, Fn &&fn) {
    if (a_fmt == FORGE_FP8_E4M3)
        return out_bf16 ? fn(std::integral_constant<int, WG_E4M3>(), std::integral_constant<int, 1>())
                        : fn(std::integral_constant<int, WG_E4M3>(), std::integral_constant<int, 0>());
    return out_bf16 ? fn(std::integral_constant<int, WG_E5M2>(), std::integral_constant<int, 1>())
                    : fn(std::integral_constant<int, WG_E5M2>(), std::integral_constant<int, 0>());
}

/* The promoted kernel of `promote` (FP8_CHUNK64: BN 256; FP8_SERIAL: BN 128 or 192 by fp8_bn_serial); tc: the
 * TMA-store epilogue (the caller checked fp8_c_tma_ok) */
template <int AT, int OUT_BF16>
static forge_status fp8_launch_promoted(int promote, const void *A, const void *B, void *C, int M, int N, int K,
                                        int tc, const fp8_call &k) {
    if (promote == FP8_CHUNK64)
        return fp8_launch<256, AT, OUT_BF16, FP8_CHUNK64>(A, B, C, k.scale, M, N, K, k.vec2, tc, k.dev, k.sms, k.st);
    if (fp8_bn_serial(M, N, k.sms) == 128)
        return fp8_launch<128, AT, OUT_BF16, FP8_SERIAL>(A, B, C, k.scale, M, N, K, k.vec2, tc, k.dev, k.sms, k.st);
    return fp8_launch<192, AT, OUT_BF16, FP8_SERIAL>(A, B, C, k.scale, M, N, K, k.vec2, tc, k.dev, k.sms, k.st);
}

/* ---- tf32 (the same body; no promotion: the tensor core accumulates tf32 products in fp32) ---- */

/* forge_gemm_tf32_nt's schedule: ping-pong up to this K where C takes the TMA store (tc), cooperative otherwise
 * (chosen by measurement, lab/notes/gemm-fp8.md: short K is where the epilogue is a large share of the tile) */
#define TF32_PP_MAX_K 1024
static inline int tf32_pingpong_rule(int tc, int K) { return tc && K <= TF32_PP_MAX_K; }

/* The argument rules of forge_gemm_tf32_nt (FORGE_ERR_UNSUPPORTED with the reason), before any device work. */
static inline forge_status tf32_nt_check(const float *A, const float *B, const float *C, int M, int N, int K) {
    const char *why = nullptr;
    if (M <= 0 || N <= 0 || K <= 0) why = "M, N and K must be >= 1";
    else if (K % 4 != 0) why = "K must be a multiple of 4 (TMA needs 16-byte row strides: K*4 bytes)";
    else if ((uintptr_t)A % 16 != 0 || (uintptr_t)B % 16 != 0) why = "A and B must be 16-byte aligned (TMA)";
    else if ((uintptr_t)C % 4 != 0) why = "C must be 4-byte aligned";
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_tf32 nt (M=%d N=%d K=%d): %s", M, N, K, why);
    return FORGE_OK;
}

/* PP = 1: the ping-pong kernel (BN 128, TMA store) */
template <int BN, int TMA_C, int PP = 0>
static forge_status tf32_launch(const float *A, const float *B, float *C, int M, int N, int K, int vec2, int dev,
                                int sm_count, cudaStream_t stream) {
    static_assert(!PP || (BN == 128 && TMA_C), "ping-pong: BN 128, TMA store");
    typedef fp8_cfg<BN, TMA_C> cfg;
    static kernel_attrs_once once;
    void (*kernel)(const CUtensorMap, const CUtensorMap, const CUtensorMap, float *, int, int, int, int) =
        PP ? gemm_wgmma_tf32_pp_kernel : gemm_wgmma_tf32_kernel<BN, TMA_C>;
    CUtensorMap tm_a, tm_b, tm_c;
    memset(&tm_c, 0, sizeof tm_c); /* direct store: passed, never read */
    if constexpr (TMA_C) FORGE_TRY(fp8_encode_c(&tm_c, C, M, N, 0));
    /* 32 fp32 = 128 bytes of K per box row: the 128-byte swizzle row, as for fp8 */
    FORGE_TRY(wgmma_encode_2d(&tm_a, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, A, M, K, (unsigned long long)K * 4, FP8_BM,
                              FP8_BK / 4, "gemm_tf32 A (fp32, K-major)"));
    FORGE_TRY(wgmma_encode_2d(&tm_b, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, B, N, K, (unsigned long long)K * 4, BN,
                              FP8_BK / 4, "gemm_tf32 B (fp32, K-major)"));
    CUDA_TRY(kernel_attrs_set_dev(&once, dev, (const void *)kernel, (int)cfg::SMEM, 0));
    const long long tiles = (long long)((M + FP8_BM - 1) / FP8_BM) * ((N + BN - 1) / BN);
    if (tiles > 0x7fffffffLL) return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_tf32: %lld tiles overflow int", tiles);
    const int grid = (int)(tiles < sm_count ? tiles : sm_count);
    kernel<<<grid, FP8_THREADS, cfg::SMEM, stream>>>(tm_a, tm_b, tm_c, C, M, N, K, vec2);
    CUDA_LAUNCH_CHECK(PP ? "gemm_wgmma_tf32_pp_kernel" : "gemm_wgmma_tf32_kernel");
    return FORGE_OK;
}

/* pingpong: the ping-pong kernel (the caller checked that C takes the TMA store, tc); else the cooperative one at
 * fp8_bn_plain's width, TMA store where tc */
static inline forge_status tf32_launch_sched(int pingpong, const float *A, const float *B, float *C, int M, int N,
                                             int K, int tc, int dev, int sms, cudaStream_t st) {
    const int vec2 = N % 2 == 0 && (uintptr_t)C % 8 == 0;
    if (pingpong) return tf32_launch<128, 1, 1>(A, B, C, M, N, K, vec2, dev, sms, st);
    if (fp8_bn_plain(M, N, sms) == 128)
        return tc ? tf32_launch<128, 1>(A, B, C, M, N, K, vec2, dev, sms, st)
                  : tf32_launch<128, 0>(A, B, C, M, N, K, vec2, dev, sms, st);
    return tc ? tf32_launch<256, 1>(A, B, C, M, N, K, vec2, dev, sms, st)
              : tf32_launch<256, 0>(A, B, C, M, N, K, vec2, dev, sms, st);
}

#endif
