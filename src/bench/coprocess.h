/*
 * coprocess.h: a helper process spoken to line by line over pipes, for
 * baselines that must run in the same call as forge and be timed step for
 * step against it (bench_train.c and tools/torch_train_bench.py --serve).
 */
#ifndef FORGE_COPROCESS_H
#define FORGE_COPROCESS_H

#include <stdio.h>
#include <sys/types.h>

#include "../base/status.h"

typedef struct {
    pid_t pid;
    FILE *to, *from; /* its stdin, its stdout; its stderr is ours */
    char what[256];  /* the command, for messages */
} forge_coprocess;

/* Starts /bin/sh -c command. */
forge_status forge_coprocess_start(forge_coprocess *c, const char *command);
/* Writes one line (a newline is added) and flushes. */
forge_status forge_coprocess_send(forge_coprocess *c, const char *line);
/* Reads the next line into buf (newline removed); FORGE_ERR_IO naming the command if it ended first. */
forge_status forge_coprocess_recv(forge_coprocess *c, char *buf, size_t cap);
/* Closes its stdin and waits for it; FORGE_ERR_IO if it exited non-zero or on a signal. */
forge_status forge_coprocess_finish(forge_coprocess *c);

#endif
