/*
 * norm_lab.h: the norms' lab commands (lab/forge_lab.c's table).
 */
#ifndef FORGE_LAB_NORM_H
#define FORGE_LAB_NORM_H

/* `forge-lab bench norm16-bwd [--reps N]`: the bf16 norm backward's fused kernel, the previous one vs the default
 * and other stage counts, interleaved (lab/norm/bench_norm16_bwd.cu) */
#ifdef __cplusplus
extern "C"
#endif
int lab_bench_norm16_bwd(int argc, char **argv);

#endif
