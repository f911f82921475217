/*
 * run_dir.h: the housekeeping of a run directory (`forge train --out DIR`).
 *
 *   lock               one run at a time: an exclusive flock(2) held for the
 *                      run's lifetime (the kernel drops it when the process
 *                      dies, even by SIGKILL); the file holds the holder's pid,
 *                      host and start time so a refused run can name it
 *   ckpt_NNNNNN/       checkpoints; "complete" = model.safetensors and
 *                      state.safetensors both present (state is written last)
 *   latest             the name of the newest complete checkpoint
 *   best               with --early-stop: the checkpoint of the lowest val loss
 *   log.jsonl          one JSON line per step (and per evaluation)
 *
 * Collection keeps, at every save, the newest N complete checkpoints no newer
 * than the step just saved plus the ones `latest` and `best` name, and removes everything
 * else that looks like a checkpoint or a temporary leftover (incomplete or
 * half-deleted ckpt_* directories, *.tmp files): a run killed and resumed any
 * number of times holds the same directories as one that never stopped.
 */
#ifndef FORGE_RUN_DIR_H
#define FORGE_RUN_DIR_H

#include <stddef.h>

#include "../base/status.h"

#define FORGE_RUN_LOCK_FILE "lock"

/* Takes the run directory's lock (creating DIR/lock); *fd_out holds it until
 * forge_run_dir_unlock. A directory locked by another process (or another open
 * of the same file in this one) is FORGE_ERR_IO naming the holder. */
forge_status forge_run_dir_lock(const char *run_dir, int *fd_out);
void forge_run_dir_unlock(int fd);

/* The step of a checkpoint directory name "ckpt_<digits>", or -1. */
int forge_run_dir_checkpoint_step(const char *name);

/* Counts the ckpt_* directories of run_dir; *newest gets the name of the one
 * with the highest step ("" if none). */
int forge_run_dir_count_checkpoints(const char *run_dir, char *newest, size_t cap);

/* The checkpoint name a pointer file of run_dir (`latest`, `best`) holds, in name (cap bytes), or "" when there is
 * none. */
void forge_run_dir_pointer(const char *run_dir, const char *pointer, char *name, size_t cap);

/* The collection described above, after the checkpoint of step `step` was
 * saved and `latest` moved to it; keep >= 1. Removes what it can and returns
 * the first failure (the trainer only warns: a leftover is no reason to stop). */
forge_status forge_run_dir_collect(const char *run_dir, int step, int keep);

/* Cuts log_path back to the lines whose "step" is <= step (a torn last line,
 * one without its newline, is dropped too), rewriting it through
 * log_path.tmp and a rename. A missing log is not an error. *dropped (may be
 * NULL) gets the number of lines removed. */
forge_status forge_run_dir_cut_log(const char *log_path, int step, int *dropped);

#endif
