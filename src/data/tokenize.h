/*
 * tokenize.h: text files -> train/val token shards (`forge tokenize`).
 *
 * Documents. Each input file is split at every "<|endoftext|>"; a file
 * without one is a single document, and a file's end always ends a document.
 * One newline ("\n" or "\r\n") directly after a separator belongs to the
 * separator ("...<|endoftext|>\n" is how forge's corpus files are written)
 * and is dropped; documents that are empty or all whitespace are skipped.
 *
 * Layout. Each document's tokens are followed by the eot token:
 *   doc0 <eot> doc1 <eot> doc2 <eot> ...
 * (llm.c's fineweb.py puts eot before each document instead; either way eot
 * separates documents, and sampling can start a new document from a lone eot
 * prompt.) The last token of every split is therefore eot. Shards fill to
 * shard_tokens exactly (100M by default) and spill into the next file, like
 * llm.c, so a document may straddle two shards: the loader simply never
 * samples a window across the cut.
 *
 * Split. Document d (counted over all files in order, skipped ones not
 * counted) goes to val when hash(seed, d) < val_fraction: deterministic, and
 * independent of how files are grouped into shards. With val_fraction > 0 and
 * at least two such documents, val is never empty (the document with the
 * lowest hash moves there) and, with val_fraction < 1, neither is train
 * (highest hash moves back). The exception is a file that is one document
 * (plain text without separators, such as tinyshakespeare or a book): when
 * 0 < val_fraction < 1 it is cut by tokens instead, its last val_fraction of
 * tokens (at least one) going to val and the rest to train, each part
 * followed by eot. Otherwise `forge tokenize book.txt` would have no val
 * split, and two books would put one whole book in val.
 *
 * Outputs: out_dir/train_000.bin, train_001.bin, ..., val_000.bin, ...
 * (out_dir is created). After a successful run, other <split>_NNN.bin files in
 * out_dir (left by an earlier, larger run) are deleted so the loader does not
 * mix them in. Each file is read twice: once to count documents, then to
 * encode them, so a missing or unreadable file fails before any encoding.
 */
#ifndef FORGE_TOKENIZE_H
#define FORGE_TOKENIZE_H

#include <stdint.h>
#include <stdio.h>

#include "../base/status.h"
#include "tokenizer.h"

#define FORGE_TOKENIZE_SHARD_TOKENS 100000000ULL

/* What the pipeline needs of a tokenizer; lets tests (and other tokenizers)
 * drive it without a BPE vocabulary. */
typedef struct {
    /* Encodes len bytes (never containing "<|endoftext|>"); *ids is malloc'ed. */
    forge_status (*encode)(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n_ids);
    void *ctx;
    int vocab_size; /* every id is < vocab_size; decides uint16 vs uint32 shards */
    int32_t eot;
} forge_text_encoder;

enum { FORGE_SPLIT_TRAIN = 0, FORGE_SPLIT_VAL = 1 };

typedef struct {
    int n_files;
    uint64_t n_bytes;     /* text read */
    uint64_t n_docs[2];   /* indexed by FORGE_SPLIT_TRAIN / _VAL */
    uint64_t n_tokens[2]; /* including the eot after each document */
    int n_shards[2];
    double seconds;
} forge_tokenize_stats;

/* Tokenizes files[0..n) with tok into out_dir. progress (may be NULL) gets one
 * line per file and a summary: files, bytes, documents and tokens per split,
 * tokens/s. val_fraction in [0, 1]. */
forge_status forge_tokenize_files(const forge_tokenizer *tok, const char *const *files, int n,
                                  const char *out_dir, double val_fraction, uint64_t seed,
                                  FILE *progress);

/* The same with any encoder, a shard size (0 = FORGE_TOKENIZE_SHARD_TOKENS)
 * and optional stats. */
forge_status forge_tokenize_files_with(const forge_text_encoder *enc, const char *const *files,
                                       int n, const char *out_dir, double val_fraction,
                                       uint64_t seed, uint64_t shard_tokens, FILE *progress,
                                       forge_tokenize_stats *stats);

#endif
