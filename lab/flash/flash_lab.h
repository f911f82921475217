/*
 * flash_lab.h: the flash-attention family's lab commands (lab/forge_lab.c's table).
 */
#ifndef FORGE_LAB_FLASH_H
#define FORGE_LAB_FLASH_H

/* `forge-lab test flash16 [--quick]`: parity of the bf16 flash variants (lab/flash/test_flash16.c) */
int lab_test_flash16(int argc, char **argv);
/* `forge-lab bench attention-variants [--quick] [--reps N]`: the bf16 flash kernels and variants by name
 * (lab/flash/bench_attention_variants.c) */
int lab_bench_attention_variants(int argc, char **argv);

/* `forge-lab bench flash16-bwd-fused [--reps N]`: forge's wgmma backward next to the fused one at
 * (16, 12 | 8, 1024, 64) causal, at D = 128 the three-kernel backward next to forge's fused one at
 * (16, 16, 2048, 128) and (8, 16, 4096, 128), and at D = 64 forge's three-kernel backward next to the fused
 * kernel's D = 64 instance at (16, 12, 1024, 64), (64, 6, 512, 64), (64, 8, 1024, 64)
 * (lab/flash/bench_flash16_bwd_fused.cu) */
#ifdef __cplusplus
extern "C"
#endif
int lab_bench_flash16_bwd_fused(int argc, char **argv);

/* `forge-lab bench flash16-fwd-1cta [--reps N]`: forge's wgmma forward (two CTAs per SM at D = 64) next to the
 * one-CTA kernel it replaced at (16, 12, 1024, 64), (64, 6, 512, 64), (64, 8, 1024, 64) causal
 * (lab/flash/bench_flash16_fwd_1cta.cu) */
#ifdef __cplusplus
extern "C"
#endif
int lab_bench_flash16_fwd_1cta(int argc, char **argv);

/* `forge-lab bench flash16-host [--reps N]`: the flash entries' host cost and how much a call timed alone exposes
 * (lab/flash/bench_flash16_host.cu) */
#ifdef __cplusplus
extern "C"
#endif
int lab_bench_flash16_host(int argc, char **argv);

/* `forge-lab bench flash16-bwd-2cta [--reps N]`: forge's wgmma backward next to the two-CTA-per-SM kernels, whole
 * calls and each kernel alone, at (16, 12, 1024, 64), (64, 6, 512, 64), (64, 8, 1024, 64) causal
 * (lab/flash/bench_flash16_bwd_2cta.cu) */
#ifdef __cplusplus
extern "C"
#endif
int lab_bench_flash16_bwd_2cta(int argc, char **argv);

#endif
