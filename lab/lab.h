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

typedef struct {
    const char *name; /* as typed after `forge-lab`, e.g. "bench gemm-fp8" or "test gemm" */
    const char *help; /* one line */
    /* argc/argv: the words after the command's name. Returns the exit status. */
    int (*run)(int argc, char **argv);
} lab_command;

#endif
