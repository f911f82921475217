/*
 * shards.h: token shards on disk, in llm.c's .bin format.
 *
 * A shard is a 1024-byte header of 256 little-endian int32 followed by the
 * tokens, little-endian:
 *
 *   header[0] = 20240520   magic (llm.c's)
 *   header[1] = version    1: uint16 tokens (llm.c's format, vocab <= 65536)
 *                          2: uint32 tokens (forge's variant for larger vocabularies;
 *                             llm.c does not read it)
 *   header[2] = N          number of tokens that follow (0 <= N <= INT32_MAX)
 *   header[3..255] = 0     (written as 0, not checked on read)
 *
 * so the file is exactly 1024 + N * (2 or 4) bytes. The reader insists on
 * that: a shorter file is a truncated copy, a longer one has something after
 * the tokens, and both are errors rather than something to guess about.
 *
 * The writer chooses the version from the vocabulary size (uint16 whenever
 * every id fits), writes to "<path>.tmp.<pid>" and only at close patches the
 * header count, fsyncs and renames onto <path>. A crash or an error therefore
 * never leaves a half-written shard under the final name.
 *
 * The reader memory-maps the file read-only. When given a vocabulary size it
 * scans every token once at open (a max-reduction over 64K blocks, so ~memory
 * speed; a hit is then located to report its position). Tokens are read with
 * forge_shard_token(), which assembles little-endian bytes and so is correct
 * on any host.
 */
#ifndef FORGE_SHARDS_H
#define FORGE_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"

#define FORGE_SHARD_MAGIC 20240520
#define FORGE_SHARD_HEADER_INTS 256
#define FORGE_SHARD_HEADER_BYTES 1024
#define FORGE_SHARD_VERSION_U16 1
#define FORGE_SHARD_VERSION_U32 2

/* ---- writer ---- */

typedef struct forge_shard_writer forge_shard_writer;

/* Starts a shard for ids in [0, vocab_size): uint16 when vocab_size <= 65536,
 * else uint32. Nothing appears at `path` until forge_shard_writer_close. */
forge_status forge_shard_writer_open(forge_shard_writer **out, const char *path, int vocab_size);
/* Appends n tokens; each must be in [0, vocab_size). After an error, abort
 * the writer (a bad token is detected before anything of the call is written,
 * but a failed write may leave part of it). */
forge_status forge_shard_writer_append(forge_shard_writer *w, const int32_t *tokens, size_t n);
/* Tokens appended so far. */
uint64_t forge_shard_writer_count(const forge_shard_writer *w);
/* Patches the header, fsyncs, renames the temp file onto the path and frees
 * the writer (also on error, in which case the temp file is removed). */
forge_status forge_shard_writer_close(forge_shard_writer *w);
/* Discards everything written and frees the writer; NULL is a no-op. */
void forge_shard_writer_abort(forge_shard_writer *w);

/* Writes a whole shard in one call. */
forge_status forge_shard_write(const char *path, const int32_t *tokens, size_t n, int vocab_size);

/* ---- reader ---- */

typedef struct {
    char *path;      /* owned copy, for error messages */
    int version;     /* FORGE_SHARD_VERSION_U16 or _U32 */
    int token_bytes; /* 2 or 4 */
    uint64_t n_tokens;
    const uint8_t *data; /* (n_tokens * token_bytes) little-endian tokens, inside the mapping */
    void *map;           /* the whole file, read-only; NULL from forge_shard_open_memory */
    size_t map_len;
} forge_shard;

/* Maps and validates `path`: magic, version, exact size. With vocab_size > 0
 * also checks that every token is < vocab_size. On error *s is left closed
 * (safe to pass to forge_shard_close). */
forge_status forge_shard_open(forge_shard *s, const char *path, int vocab_size);
/* The same checks on a shard image already in memory (len bytes at data, borrowed:
 * it must outlive s); name stands for the path in messages (NULL: "<memory>").
 * s->map stays NULL. forge_shard_open maps the file and shares this code. */
forge_status forge_shard_open_memory(forge_shard *s, const void *data, size_t len, const char *name,
                                     int vocab_size);
void forge_shard_close(forge_shard *s);

/* Token i (< s->n_tokens); no bounds check. */
static inline int32_t forge_shard_token(const forge_shard *s, uint64_t i) {
    if (s->token_bytes == 2) {
        const uint8_t *p = s->data + 2 * i;
        return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8);
    }
    const uint8_t *p = s->data + 4 * i;
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* Copies tokens [start, start + n) into out (caller checks the range). */
void forge_shard_read(const forge_shard *s, uint64_t start, size_t n, int32_t *out);

/* ---- naming ---- */

/* Shards of a split are named <split>_NNN.bin (at least three digits). Writes
 * "dir/<split>_NNN.bin" into buf; FORGE_ERR_ARG if it does not fit. */
forge_status forge_shard_path(char *buf, size_t size, const char *dir, const char *split,
                              int index);
/* 1 if name is "<split>_<digits>.bin" (setting *index to the digits' value),
 * else 0. */
int forge_shard_name_parse(const char *name, const char *split, unsigned long long *index);

#endif
