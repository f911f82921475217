/*
 * classifier_lab.h: the classifier's lab commands (lab/forge_lab.c's table).
 */
#ifndef FORGE_LAB_CLASSIFIER_H
#define FORGE_LAB_CLASSIFIER_H

/* `forge-lab bench cls16t-passes [--reps N]`: the bf16 classifier's column passes by access width (the row-pair
 * baseline, forge's, the lab's other rows a lane / lanes / unrolls), interleaved, with a bitwise check
 * (lab/classifier/bench_cls16t_passes.cu) */
#ifdef __cplusplus
extern "C"
#endif
int lab_bench_cls16t_passes(int argc, char **argv);

#endif
