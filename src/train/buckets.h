/*
 * buckets.h: the gradient block of a data-parallel step reduced in buckets, each
 * launched as soon as the backward has finished writing it.
 *
 * The flat fp32 gradient block (model.h) is cut into contiguous buckets of a
 * fixed number of elements (the last one shorter). A bucket is final once the
 * backward has replayed the lowest-index tape entry that takes any parameter
 * whose gradient lies in it: entries below that one do not touch it (the tape
 * replays in reverse, and only an entry's inputs receive gradient). So before
 * the backward of the step's last micro-batch, forge_buckets_plan reads the
 * tape once for each bucket's entry; forge_buckets_hook, the tape's hook
 * (tape.h), launches every bucket whose entry has just been replayed; and
 * forge_buckets_finish launches any left (a bucket no entry touches) and joins.
 * A parameter used both first and last (tied embeddings: wte by the encoder,
 * entry 0, and by the classifier) keeps its buckets until the very end.
 *
 * The launch order depends only on the tape, which every rank records the same
 * way, so every rank issues the same buckets in the same order (NCCL and MPI
 * both need that). Each bucket is reduced by forge_optimizer_reduce_bucket:
 * on MPI every element gets the bits of the unbucketed reduction; on NCCL the
 * buckets run on the backend's side stream, overlapping the rest of the
 * backward (docs/distributed.md).
 */
#ifndef FORGE_BUCKETS_H
#define FORGE_BUCKETS_H

#include "../runtime/tape.h"
#include "optimizer.h"

typedef struct forge_buckets forge_buckets;

/* Elements per bucket for a size in bytes: bytes / 4 rounded down to a multiple of 256 (1 KiB), at least 256. */
size_t forge_buckets_elements(size_t bucket_bytes);

/* The buckets of opt's gradient block (opt->model's n_elements) of bucket_bytes each (bucket_bytes > 0). */
forge_status forge_buckets_create(forge_buckets **out, forge_optimizer *opt, size_t bucket_bytes);
void forge_buckets_free(forge_buckets *b);
int forge_buckets_count(const forge_buckets *b);
size_t forge_buckets_size(const forge_buckets *b); /* elements per bucket */

/* Buckets launched since the last plan, and the j-th of them (j < launched), for tests and logs. */
int forge_buckets_launched(const forge_buckets *b);
int forge_buckets_launch_order(const forge_buckets *b, int j);

/* Reads the recorded tape (forward done, backward not started): the entry after whose replay each bucket is final,
 * and the launch order. Call it before each hooked backward. */
forge_status forge_buckets_plan(forge_buckets *b, const forge_tape *tape);
/* The hook of forge_tape_backward_hooked (ctx: the forge_buckets): launches the buckets final after entry i. */
forge_status forge_buckets_hook(void *ctx, const forge_tape *tape, size_t i);
/* After the hooked backward: launches the buckets not launched yet, then joins (forge_optimizer_reduce_join). */
forge_status forge_buckets_finish(forge_buckets *b);

#endif
