/*
 * gemm_fp8_lab.h: the lab's variants of forge's fp8 and tf32 wgmma GEMMs (gemm_fp8_variants.cu), plain C. The
 * product's entry points are src/backend/cuda/gemm_fp8.h's (forge_gemm_fp8_nt, forge_gemm_tf32_nt); these run
 * the same kernel body with an accumulation scheme, a store or a schedule forced, for the A/B suites and the
 * parity tests of `forge-lab bench gemm-fp8` / `forge-lab test gemm-fp8`. Measurements: lab/notes/gemm-fp8.md.
 *
 * Arguments, layouts, formats and refusals are forge_gemm_fp8_nt's / forge_gemm_tf32_nt's (gemm_fp8.h); a mode
 * outside the enums below is FORGE_ERR_ARG.
 */
#ifndef FORGE_LAB_GEMM_FP8_LAB_H
#define FORGE_LAB_GEMM_FP8_LAB_H

#include "../../src/backend/cuda/gemm_fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The accumulation scheme (which kernel): */
typedef enum {
    /* forge_gemm_fp8_nt's choice per shape: chunk64 where 256-wide tiles cover at least half the SMs, else serial */
    LAB_FP8_PROMOTE = 0,
    /* the serial promotion at 128- or 192-wide tiles (its cost model), at every shape */
    LAB_FP8_PROMOTE_SERIAL = 1,
    /* the chunked promotion at 256-wide tiles: a stage's MMAs issued per 64-column chunk into two alternating
     * 32-register temporaries (each chunk's adds under the next chunk's MMAs), at every shape */
    LAB_FP8_PROMOTE_CHUNK64 = 2,
    /* one wgmma accumulator over all of K (cuBLASLt's "fast accum"): faster, less accurate at large K; 256-wide
     * tiles, 128 where those leave SMs idle */
    LAB_FP8_FAST_ACCUM = 3,
    /* the same promotion (the same adds in the same K order, so the same numbers) with two partial-sum
     * temporaries alternating, so a stage's adds overlap the next stage's MMAs (wait_group 1); 128-wide tiles */
    LAB_FP8_PROMOTE_PIPELINED = 4,
    /* the chunked promotion with 128-column chunks into one 64-register temporary (serial); 256-wide tiles */
    LAB_FP8_PROMOTE_CHUNK128 = 5,
    /* chunk64 (FP8_CHUNK64) on 2-CTA clusters: the two CTAs take row-blocks 2p and 2p+1 of one column-block and
     * each multicasts half of the shared B tile into both (a third less L2 -> SM traffic) */
    LAB_FP8_PROMOTE_CHUNK64_C2 = 6,
    /* fast accumulation (BN 256) on 2-CTA clusters */
    LAB_FP8_FAST_ACCUM_C2 = 7,
    /* chunk64 at 192-wide tiles with the warpgroup's A read into registers once per stage (ldmatrix, two buffers)
     * instead of from shared memory by each chunk */
    LAB_FP8_PROMOTE_CHUNK64_RA = 8,
    /* the pipelined promotion at 144-wide tiles (d, t and t1 = 3 x 72 of the consumers' 240 registers), 6
     * stages, the TMA store through 16-column boxes */
    LAB_FP8_PROMOTE_PIPE144 = 9,
    /* the same on 2-CTA clusters (72-row B halves multicast) */
    LAB_FP8_PROMOTE_PIPE144_C2 = 10,
    /* the serial promotion at 144-wide tiles with its loop rotated (a stage's full-barrier wait before the previous
     * stage's retire, descriptors stepped per stage) */
    LAB_FP8_PROMOTE_SERIAL144 = 11,
    /* the same on 2-CTA clusters */
    LAB_FP8_PROMOTE_SERIAL144_C2 = 12
} lab_fp8_accum;

/* How C is stored: AUTO = forge's rule (the TMA-store epilogue wherever C allows it, else from the registers);
 * TMA = the TMA store wherever C allows it (today the same as AUTO); DIRECT = from the registers always. All write
 * the same values. */
typedef enum { LAB_GEMM_STORE_AUTO = 0, LAB_GEMM_STORE_DIRECT = 1, LAB_GEMM_STORE_TMA = 2 } lab_gemm_store;

/* The tf32 schedule: AUTO = forge_gemm_tf32_nt's rule (ping-pong at K <= 1024 where C takes the TMA store, else
 * cooperative); COOP = both consumer warpgroups on one 128 x 256 (or 128 x 128) tile; PINGPONG = each warpgroup
 * owns whole 128 x 128 tiles and they take turns (needs the TMA store: FORGE_ERR_UNSUPPORTED where C does not take
 * it or the store is DIRECT). */
typedef enum { LAB_GEMM_SCHED_AUTO = 0, LAB_GEMM_SCHED_COOP = 1, LAB_GEMM_SCHED_PINGPONG = 2 } lab_gemm_sched;

/* forge_gemm_fp8_nt with the accumulation scheme and the store forced (LAB_FP8_PROMOTE, LAB_GEMM_STORE_AUTO: the
 * same call). */
forge_status lab_gemm_fp8_nt(const void *A, forge_fp8_format a_fmt, const void *B, forge_fp8_format b_fmt, void *C,
                             forge_gemm_out c_type, float a_scale, float b_scale, int M, int N, int K,
                             lab_fp8_accum accum, lab_gemm_store store, void *stream);

/* forge_gemm_tf32_nt with the store and the schedule forced (AUTO, AUTO: the same call). */
forge_status lab_gemm_tf32_nt(const float *A, const float *B, float *C, int M, int N, int K, lab_gemm_store store,
                              lab_gemm_sched sched, void *stream);

/* The commands (lab/forge_lab.c): `forge-lab bench gemm-fp8` (gemm_fp8_cells.cu), `forge-lab test gemm-fp8`
 * (test_gemm_fp8.c). argc/argv: the words after the command's name; the exit status. */
int lab_bench_gemm_fp8(int argc, char **argv);
int lab_test_gemm_fp8(int argc, char **argv);

#ifdef __cplusplus
}
#endif

#endif
