/*
 * gemm_fp8.h: forge's Hopper fp8 GEMM (issue 5), plain C.
 *
 *   C (M,N) = (a_scale * b_scale) * A (M,K) . B (N,K)^T      fp32 or bf16 C
 *
 * NT layout only: both operands fp8, K-major (row-major, K contiguous), which
 * is the only layout fp8 wgmma reads; the trainer transposes as needed.
 * Format combinations: e4m3 x e4m3 (forward) and e5m2 x e4m3 (gradient x
 * weight); the other two are refused (wgmma has them, forge does not build
 * them). a_scale and b_scale are the per-tensor dequantisation scales, applied
 * once in the epilogue (C = a_scale * b_scale * sum).
 *
 * Accumulation (docs/hopper-catalog.md: QGMMA keeps only ~14 mantissa bits of
 * its running sum and truncates):
 * - FORGE_FP8_PROMOTE (the default): every 128 of K, the wgmma partial sum is
 *   added in fp32 to a separate accumulator, so the error does not grow with K.
 *   The kernel is picked per shape: chunk64 (below) where 256-wide tiles cover
 *   at least half the SMs, else the serial promotion at 128/192-wide tiles
 *   (H200, session 6, with the TMA-store epilogue: 1287 / 1418 TFLOP/s at
 *   4096^3 / 8192^3 = 1.65x / 1.82x forge bf16 and 1.09x / 1.01x cuBLASLt fp8
 *   in one run; 0.97-1.01x at 8192^3 over the session's runs).
 * - FORGE_FP8_FAST_ACCUM: one wgmma accumulator over all of K (cuBLASLt's
 *   "fast accum"). Faster, less accurate at large K; for comparison only.
 * - FORGE_FP8_PROMOTE_PIPELINED: the same promotion (the same adds in the
 *   same K order, so the same numbers as FORGE_FP8_PROMOTE), but two
 *   partial-sum temporaries alternate so a stage's adds overlap the next
 *   stage's MMAs (wgmma wait_group 1, not 0). 128-wide tiles only (3
 *   fragments of 64 registers). Candidate default, pending H200 measurement
 *   (bench cell forge_fp8_e4m3_pipe). Its first H200 figures (903 / 927
 *   TFLOP/s at 4096^3 / 8192^3) were of a build whose wgmmas ptxas had
 *   serialised (info C7518, wait 0 after every wgmma); fixed, unmeasured.
 * - FORGE_FP8_PROMOTE_CHUNK64 / FORGE_FP8_PROMOTE_CHUNK128: the same promotion
 *   (same adds, same K order: the same numbers) at a 256-wide tile: a stage's
 *   MMAs are issued per N-chunk, 64 columns into two alternating 32-register
 *   temporaries (each chunk's adds overlap the next chunk's MMAs), or 128
 *   columns into one 64-register temporary (serial). BN = 256 always.
 *   Candidates, pending H200 measurement (bench cells forge_fp8_e4m3_chunk64,
 *   forge_fp8_e4m3_chunk128).
 * - FORGE_FP8_PROMOTE_CHUNK64_C2 / FORGE_FP8_FAST_ACCUM_C2: chunk64 / fast accum
 *   (BN 256) on 2-CTA clusters: the two CTAs take row-blocks 2p and 2p+1 of
 *   one column-block and each multicasts half of the shared B tile into both
 *   (a third less L2 -> SM traffic). Candidates, unmeasured (bench cells
 *   forge_fp8_e4m3_chunk64_c2, forge_fp8_e4m3_fastacc_c2).
 * - FORGE_FP8_PROMOTE_CHUNK64_RA: chunk64 with the warpgroup's A read into
 *   registers once per stage (ldmatrix, two buffers: the next stage's A is
 *   loaded while the current stage's chunks run) instead of from shared memory
 *   by each of the four chunks (same adds, same order: the same numbers).
 * - FORGE_FP8_PROMOTE_PIPE144 / FORGE_FP8_PROMOTE_PIPE144_C2: the pipelined
 *   promotion (two alternating stage temporaries) at 144-wide tiles, the
 *   widest where d, t and t1 fit (3 x 72 of the consumers' 240 registers;
 *   cuBLASLt's fp8 kernel at 8192^3 is a 144-wide tile too), 6 stages, the
 *   TMA store through 16-column boxes; _C2 on 2-CTA clusters with B
 *   multicast. Same adds, same order: the same numbers. Measured (session 6,
 *   H200): 0.96-0.98x cuBLASLt fp8 at 8192^3, 0.93-0.96x at 4096^3, below
 *   chunk64 at every shape: opt-in.
 * - FORGE_FP8_PROMOTE_SERIAL144 / FORGE_FP8_PROMOTE_SERIAL144_C2: the serial
 *   promotion (one temporary: d + t = 144 registers) at 144-wide tiles with
 *   the loop of cuBLASLt's fp8 kernel (ncu, session 6): the next stage's
 *   full-barrier wait before the current stage's retire, descriptors stepped
 *   per stage; _C2 on 2-CTA clusters. Same adds, same order. Measured 0.72-
 *   0.84x cuBLASLt fp8 at 8192^3: this warpgroup's tensor work stops during
 *   its adds and the other's does not fill the gap here. Opt-in.
 * - Environment: FORGE_FP8_PROMOTE_VARIANT=auto|serial|pipe|chunk64|chunk128|chunk64c2|chunk64ra|pipe144|pipe144c2|
 *   serial144|serial144c2
 *   makes FORGE_FP8_PROMOTE (only that mode) run the named variant (read once
 *   per process; unset = auto; anything else fails the call, FORGE_ERR_ARG).
 *   Measured (session 3): pipe 745 / 1157 / 1178, chunk128 719 / 1150 / 1190,
 *   chunk64c2 690 / 1139 / 1296 at 2048^3 / 4096^3 / 8192^3: none beats chunk64.
 *
 * Epilogue (rung 4e, docs/gemm-ladder.md): where C allows it -- fp32 C with
 * N % 4 == 0, bf16 C with N % 8 == 0, C 16-byte aligned -- the kernel stages C
 * in shared memory and stores it with TMA (the consumers go on to the next
 * tile while the stores drain); otherwise it stores from the registers
 * ("direct"). The 2-CTA cluster modes stored directly always until session 6. forge_gemm_fp8_nt_store /
 * forge_gemm_tf32_nt_store with FORGE_GEMM_STORE_DIRECT / _TMA force the
 * direct / TMA store; FORGE_FP8_STORE=direct / tma (read once per process)
 * does the same for every FORGE_GEMM_STORE_AUTO call (auto / unset: the
 * measured choice, forge_gemm_store below; anything else fails those calls,
 * FORGE_ERR_ARG). All write the same values.
 *
 * Needs: a compute-capability 9.x device, M, N >= 1, K >= 16 and K % 16 == 0
 * (TMA's 16-byte row strides), A and B 16-byte aligned, C aligned to its
 * element. Any M and N (tails are zero-filled by TMA, clipped by the TMA store
 * or bounds-checked by the direct one). Anything else returns FORGE_ERR_UNSUPPORTED with the reason.
 * Pointers are device pointers; stream is a cudaStream_t (NULL = default).
 * Nothing synchronises with the host (errors of the running kernel surface
 * at the caller's next synchronising CUDA call).
 */
#ifndef FORGE_GEMM_FP8_H
#define FORGE_GEMM_FP8_H

#include "../../base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FORGE_FP8_E4M3 = 0, FORGE_FP8_E5M2 = 1 } forge_fp8_format;
typedef enum { FORGE_GEMM_OUT_F32 = 0, FORGE_GEMM_OUT_BF16 = 1 } forge_gemm_out;
typedef enum {
    FORGE_FP8_PROMOTE = 0,
    FORGE_FP8_FAST_ACCUM = 1,
    FORGE_FP8_PROMOTE_PIPELINED = 2,
    FORGE_FP8_PROMOTE_CHUNK64 = 3,
    FORGE_FP8_PROMOTE_CHUNK128 = 4,
    FORGE_FP8_PROMOTE_CHUNK64_C2 = 5,
    FORGE_FP8_FAST_ACCUM_C2 = 6,
    FORGE_FP8_PROMOTE_CHUNK64_RA = 7,
    FORGE_FP8_PROMOTE_PIPE144 = 8,
    FORGE_FP8_PROMOTE_PIPE144_C2 = 9,
    FORGE_FP8_PROMOTE_SERIAL144 = 10,
    FORGE_FP8_PROMOTE_SERIAL144_C2 = 11
} forge_fp8_accum;

/* How C is stored: AUTO = the measured choice, TMA = the TMA-store epilogue wherever C allows it, DIRECT = from the
 * registers always. AUTO is TMA wherever C allows it. Session 6 (H200, alternating A/B, 3 rounds, chunk64 fp32 out):
 * TMA 741-759 / 1294-1308 / 1413-1417 TFLOP/s at 2048^3 / 4096^3 / 8192^3 against 708-743 / 1252-1268 / 1349-1386
 * direct (0.99x cuBLASLt fp8 at 8192^3 instead of 0.96x). Session 4 had measured the opposite at K > 1024 (1175
 * against 1278 at 8192^3), before the warp-uniform warpgroup index (fcab692) and the other session-5/6 changes of
 * the kernel; so until session 6 AUTO took the direct store for fp32-out fp8 at K > 1024. bf16-out fp8 and tf32 were
 * as fast or faster through TMA at every measured shape in both. */
typedef enum { FORGE_GEMM_STORE_AUTO = 0, FORGE_GEMM_STORE_DIRECT = 1, FORGE_GEMM_STORE_TMA = 2 } forge_gemm_store;

forge_status forge_gemm_fp8_nt(const void *A, forge_fp8_format a_fmt, const void *B, forge_fp8_format b_fmt, void *C,
                               forge_gemm_out c_type, float a_scale, float b_scale, int M, int N, int K,
                               forge_fp8_accum accum, void *stream);

/* forge_gemm_fp8_nt with an explicit store mode (forge_gemm_fp8_nt = FORGE_GEMM_STORE_AUTO). */
forge_status forge_gemm_fp8_nt_store(const void *A, forge_fp8_format a_fmt, const void *B, forge_fp8_format b_fmt,
                                     void *C, forge_gemm_out c_type, float a_scale, float b_scale, int M, int N, int K,
                                     forge_fp8_accum accum, forge_gemm_store store, void *stream);

/*
 * tf32 on the same kernel body (gemm_wgmma_tf32_kernel): C (M,N) fp32 = A (M,K) . B (N,K)^T with A, B fp32
 * K-major, read by wgmma .tf32 (k8; the low 13 mantissa bits of each input are ignored: round the inputs to
 * tf32 first for round-to-nearest semantics), fp32 accumulation in the tensor core (no promotion needed).
 * Needs K % 4 == 0 (16-byte TMA row strides), A and B 16-byte aligned, C 4-byte aligned, compute capability
 * 9.x; any M, N. Otherwise FORGE_ERR_UNSUPPORTED with the reason.
 */
forge_status forge_gemm_tf32_nt(const float *A, const float *B, float *C, int M, int N, int K, void *stream);

/* forge_gemm_tf32_nt with an explicit store mode (forge_gemm_tf32_nt = FORGE_GEMM_STORE_AUTO). */
forge_status forge_gemm_tf32_nt_store(const float *A, const float *B, float *C, int M, int N, int K,
                                      forge_gemm_store store, void *stream);

/* How the two consumer warpgroups share the work. COOP: both on one 128 x 256 (or 128 x 128) tile (the only schedule
 * before session 5). PINGPONG: each warpgroup owns whole 128 x 128 tiles and they take turns, one's epilogue under the
 * other's MMAs (gemm_wgmma_tf32_pp_kernel; needs the TMA store: FORGE_ERR_UNSUPPORTED with the direct store).
 * AUTO: FORGE_TF32_SCHED=pp|coop if set, else PINGPONG at K <= 1024 where C takes the TMA store, COOP otherwise
 * (measured: ping-pong 1.05x cuBLAS tf32 at 65536 x 1408 x 512, where COOP is at 0.87x; equal at 2048^3; COOP
 * 3-7% ahead at K = 4096 and 8192). */
typedef enum { FORGE_GEMM_SCHED_AUTO = 0, FORGE_GEMM_SCHED_COOP = 1, FORGE_GEMM_SCHED_PINGPONG = 2 } forge_gemm_sched;

/* forge_gemm_tf32_nt_store with an explicit schedule (forge_gemm_tf32_nt_store = FORGE_GEMM_SCHED_AUTO). */
forge_status forge_gemm_tf32_nt_sched(const float *A, const float *B, float *C, int M, int N, int K,
                                      forge_gemm_store store, forge_gemm_sched sched, void *stream);

/* bf16 C (M,N) fp32 = A (M,K) . B (N,K)^T [+ bias (N)] (A, B bf16, K-major) on the ping-pong schedule: 128 x 128
 * tiles, one per consumer warpgroup, taking turns (the tf32 ping-pong kernel's body), C through the TMA store. What
 * forge_gemm_bf16_nt_wgmma (gemm.h) runs wherever C allows the TMA store (FORGE_BF16_SCHED=coop keeps the
 * cooperative kernel); the cooperative kernels keep the other fused epilogues (GELU, pre-activation, residual, bf16
 * out). bias NULL: none. FORGE_ERR_UNSUPPORTED unless K % 8 == 0, A and B 16-byte aligned, N % 4 == 0 and C 16-byte
 * aligned. */
forge_status forge_gemm_bf16_nt_pp(const void *A, const void *B, float *C, const float *bias, int M, int N, int K,
                                   void *stream);

/* The block-tile width (128, 144, 192 or 256) forge_gemm_fp8_nt picks for these arguments on the current device
 * (FORGE_FP8_PROMOTE_VARIANT applied), for benchmark labels; 0 with the error set if the device query fails. */
int forge_gemm_fp8_tile_n(int M, int N, forge_fp8_accum accum);

#ifdef __cplusplus
}
#endif

#endif
