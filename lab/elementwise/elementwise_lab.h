/*
 * elementwise_lab.h: the elementwise ops' lab commands (lab/forge_lab.c's table).
 */
#ifndef FORGE_LAB_ELEMENTWISE_H
#define FORGE_LAB_ELEMENTWISE_H

/* `forge-lab bench gelu16-bwd [--reps N] [--blocks-per-sm K]`: the bf16 GELU backward, the compute kernel vs the
 * table kernel (the op), interleaved, outputs compared bitwise (lab/elementwise/bench_gelu16_bwd.cu) */
#ifdef __cplusplus
extern "C"
#endif
int lab_bench_gelu16_bwd(int argc, char **argv);

/* `forge-lab bench gelu16-bwd-dbias [--reps N]`: gelu_backward_dbias_bf16's previous kernel (v0) vs the op, the
 * two passes it fuses and other row unrolls, interleaved, outputs compared bitwise
 * (lab/elementwise/bench_gelu16_bwd.cu) */
#ifdef __cplusplus
extern "C"
#endif
int lab_bench_gelu16_bwd_dbias(int argc, char **argv);


#endif
