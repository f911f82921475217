/*
 * lab.h: the kernel laboratory's command table (lab/README.md).
 *
 * `forge-lab` runs what the product does not: kernel variants that are not a
 * default, their parity tests, characterization and A/B benchmark suites. Each
 * command lives in its own file under lab/ and is listed once in
 * lab/forge_lab.c. The lab builds against the library (`make lab`) and may use
 * any header of src/; nothing in src/ includes lab/.
 */
#ifndef FORGE_LAB_H
#define FORGE_LAB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name; /* as typed after `forge-lab`, e.g. "bench gemm-fp8" or "test gemm" */
    const char *help; /* one line */
    /* argc/argv: the words after the command's name. Returns the exit status. */
    int (*run)(int argc, char **argv);
} lab_command;

/* The arguments of a bench whose one option is `--reps N` (`forge-lab bench NAME [--reps N]`): *reps = N, or def
 * without it, raised to min. 0, or 2 (the command's exit status) after printing that usage on any other argument. */
static inline int lab_reps_args(int argc, char **argv, const char *name, int def, int min, int *reps) {
    *reps = def;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            *reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: forge-lab bench %s [--reps N]\n", name);
            return 2;
        }
    }
    if (*reps < min) *reps = min;
    return 0;
}

#endif
