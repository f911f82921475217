/*
 * loader.h: batches of (inputs, targets) from a directory of token shards.
 *
 * A split ("train", "val") is every regular file in the directory named
 * <split>_<digits>.bin, in numeric order (train_000.bin, train_001.bin, ...),
 * each opened with forge_shard_open (mapped, validated against vocab_size).
 *
 * Shapes: B sequences of T positions. A window is T+1 consecutive tokens of
 * one shard; inputs (B, T) = window[0..T-1], targets (B, T) = window[1..T].
 * A window never crosses a shard boundary, so the last token of one shard
 * never predicts the first of the next.
 *
 * Training batches (forge_loader_next) are random: every window start of
 * every shard is equally likely (so shards are weighted by their size), B
 * draws with replacement. Batch k is a pure function of (seed, k): its RNG is
 * seeded from a hash of both, so nothing but the counter k is needed to
 * resume, and forge_loader_seek(ld, k) makes the next batch exactly the one a
 * run that never stopped would have drawn. The decision a reader might get
 * wrong: there are no epochs and no shuffled order to save, by design.
 *
 * Validation batches (forge_loader_val_batch) are sequential and
 * deterministic: the split is cut into non-overlapping windows of T inputs
 * (window w of a shard starts at token w*T; consecutive windows share only
 * the boundary token, which is a target of one and an input of the next), so
 * every token after the first of a shard is predicted exactly once. Batch i
 * holds windows i*B .. i*B+B-1 counted across shards in order, wrapping past
 * the last, so the same index always gives the same tokens.
 *
 * Shards too short for one window (fewer than T+1 tokens) contribute no
 * windows; opening fails only when no shard of the split has a window.
 */
#ifndef FORGE_LOADER_H
#define FORGE_LOADER_H

#include <stdint.h>

#include "../base/status.h"

typedef struct forge_loader forge_loader;

/* Opens every <split>_NNN.bin in dir. vocab_size > 0 checks every token
 * against it (0 skips the check). */
forge_status forge_loader_open(forge_loader **out, const char *dir, const char *split, int B, int T,
                               uint64_t seed, int vocab_size);
void forge_loader_free(forge_loader *ld);

/* Draws the next random batch: inputs (B, T) and targets (B, T). */
forge_status forge_loader_next(forge_loader *ld, int32_t *inputs, int32_t *targets);
/* Batches drawn so far: the whole resumable state besides the seed. */
uint64_t forge_loader_state(const forge_loader *ld);
/* Sets the batches-drawn counter, so the next forge_loader_next returns
 * batch number `batches_drawn`. Always succeeds. */
forge_status forge_loader_seek(forge_loader *ld, uint64_t batches_drawn);

/* The index-th sequential batch (see top comment); does not touch the
 * random-batch counter. */
forge_status forge_loader_val_batch(const forge_loader *ld, uint64_t index, int32_t *inputs,
                                    int32_t *targets);
/* Sequential batches before val_batch wraps: ceil(windows / B). */
uint64_t forge_loader_val_num_batches(const forge_loader *ld);

int forge_loader_num_shards(const forge_loader *ld);
/* Path of shard i (0 <= i < num_shards). */
const char *forge_loader_shard_path(const forge_loader *ld, int i);
/* Tokens in all shards of the split. */
uint64_t forge_loader_num_tokens(const forge_loader *ld);

#endif
