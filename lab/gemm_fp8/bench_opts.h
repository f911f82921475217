/*
 * bench_opts.h: the options of the lab's Hopper benchmark commands (`forge-lab bench gemm-fp8 | gemm-mma |
 * characterize`), those `forge bench` gives its suites: --reps N, --results DIR, --order sequential|interleaved,
 * --only "pat1|pat2" (the cells whose "name@group" contains a pattern), plus one option of the command's own (e.g.
 * gemm-fp8's --c2). Each takes "--opt VALUE" or "--opt=VALUE".
 */
#ifndef FORGE_LAB_BENCH_OPTS_H
#define FORGE_LAB_BENCH_OPTS_H

typedef struct {
    int reps;            /* --reps N (1..100000); 0 when not given */
    const char *results; /* --results DIR: where the suite writes its <date>_<commit>/ folder; NULL: results */
    const char *own;     /* the value of the command's own option; NULL when not given */
} lab_fp8_bench_opts;

/* Parses the words after the command's name. own_opt: the name of the command's own option ("--c2"), or NULL.
 * Applies --results, --order and --only to the harness (forge_harness_set_default_root / _order / _cell_filter). Returns 0, or prints
 * what was wrong and "usage: forge-lab <command> <usage>" to stderr and returns 2. */
int lab_fp8_bench_opts_parse(lab_fp8_bench_opts *o, int argc, char **argv, const char *command, const char *usage,
                             const char *own_opt);

/* The exit status of a suite that returned s: 0, or 1 after printing its error message to stderr. */
int lab_fp8_bench_exit(const char *command, int s);

#endif
