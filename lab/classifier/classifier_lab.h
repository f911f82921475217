/*
 * classifier_lab.h: the classifier's lab commands (lab/forge_lab.c's table).
 */
#ifndef FORGE_LAB_CLASSIFIER_H
#define FORGE_LAB_CLASSIFIER_H

/* `forge-lab bench cls16t-passes [--reps N] [--widths]`: the bf16 classifier's column passes (the row-pair baseline,
 * forge's, its ahead form, the fast passes of cls16t_fast.cuh and their loops with forge's arithmetic; --widths: the
 * other rows a lane / lanes / unrolls), interleaved, checked bitwise or (the fast ones) with tolerances
 * (lab/classifier/bench_cls16t_passes.cu) */
#ifdef __cplusplus
extern "C"
#endif
int lab_bench_cls16t_passes(int argc, char **argv);

#endif
