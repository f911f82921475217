/*
 * graph.h: a recorded step, replayed.
 *
 * The trainer records the device work of one whole step (forward, backward,
 * optimizer) once and replays it every following step: on CUDA that is one
 * graph launch instead of hundreds of kernel launches, and no host work per
 * op. A recording is only valid while everything it points at is: the
 * pool's blocks it used are pinned (pool.h) and the backend reports its own
 * replaced workspaces; a replay that would touch memory that changed hands
 * fails with FORGE_ERR_STALE, and the caller records again.
 *
 * What varies from step to step (the batch, the learning rate) must be in
 * device memory the recorded ops read, written before the replay.
 */
#ifndef FORGE_GRAPH_H
#define FORGE_GRAPH_H

#include "pool.h"

typedef struct forge_graph forge_graph;

/* 1 if the pool's backend can record graphs (CUDA); 0: run the step eagerly. */
int forge_graph_supported(const forge_pool *pool);
/* Starts recording the ops issued on the pool's backend (they do not run) and noting the pool's blocks. */
forge_status forge_graph_record_begin(forge_pool *pool);
/* Ends the recording. On failure (an op could not be recorded) nothing is pinned and the caller runs eagerly;
 * call it after a failed op too, to end the recording. */
forge_status forge_graph_record_end(forge_pool *pool, forge_graph **out);
/* Runs the recorded ops; FORGE_ERR_STALE (nothing run) when memory the graph uses changed hands. */
forge_status forge_graph_replay(forge_graph *g);
/* Drops the graph and its pins. */
void forge_graph_free(forge_graph *g);

#endif
