/*
 * safetensors.h: reading and writing .safetensors files (checkpoints, optimizer
 * and trainer state, Hugging Face weights).
 *
 * Format (huggingface/safetensors, docs "Format"): an 8-byte little-endian
 * header length N, N bytes of JSON
 *     {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *      "__metadata__": {"key": "value", ...}}
 * then the tensor bytes, row-major, little-endian; offsets are relative to the
 * first byte after the header. The writer pads the header with spaces to a
 * multiple of 8 and packs the tensors back to back in the order given, so every
 * F32/I32 tensor of a forge file starts 4-byte aligned in memory.
 *
 * What a reader would otherwise get wrong:
 *  - the writer is atomic: it writes path.tmp, fsyncs it and renames it over
 *    path, so a crash or a failed write never leaves a half-written checkpoint
 *    where the last good one was;
 *  - the reader mmaps the file and every check happens in open(): header length
 *    against the file size, JSON, dtypes, shapes, offsets inside the data and
 *    not overlapping, bytes == numel * dtype size. After open() succeeds an
 *    entry's data pointer is valid until close();
 *  - a file written by another tool need not pad its header, so entry data may
 *    be unaligned: copy it out with memcpy rather than dereferencing a float *.
 */
#ifndef FORGE_SAFETENSORS_H
#define FORGE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"

#define FORGE_ST_MAX_DIMS 4

/* One tensor: what the writer takes and what the reader hands back. */
typedef struct {
    const char *name;
    const char *dtype;  /* "F32", "I32", ... (see forge_safetensors_dtype_size) */
    int ndim;           /* 0 (a scalar) to FORGE_ST_MAX_DIMS */
    int64_t shape[FORGE_ST_MAX_DIMS];
    const void *data;   /* host memory, `bytes` long */
    size_t bytes;       /* numel * dtype size */
} forge_st_entry;

typedef struct forge_safetensors forge_safetensors;

/* Bytes per element of a safetensors dtype name ("F32" -> 4), 0 if unknown.
 * Known: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2. */
size_t forge_safetensors_dtype_size(const char *dtype);

/* Writes n tensors and n_meta string pairs (meta_keys/meta_values may be NULL
 * when n_meta is 0) to path, atomically. Names must be unique and not
 * "__metadata__". On any failure path is untouched and path.tmp removed. */
forge_status forge_safetensors_write(const char *path, const forge_st_entry *entries, int n,
                                     const char *const *meta_keys,
                                     const char *const *meta_values, int n_meta);

/* Maps and validates a file. FORGE_ERR_IO if it cannot be opened,
 * FORGE_ERR_DATA if it is truncated or malformed. */
forge_status forge_safetensors_open(forge_safetensors **out, const char *path);
/* The same checks on a file image already in memory (len bytes at data),
 * which is borrowed: it must outlive the reader, entries point into it. name
 * stands for the path in messages and forge_safetensors_path (NULL:
 * "<memory>"). forge_safetensors_open maps the file and shares this code. */
forge_status forge_safetensors_open_memory(forge_safetensors **out, const void *data, size_t len,
                                           const char *name);
void forge_safetensors_close(forge_safetensors *st);

const char *forge_safetensors_path(const forge_safetensors *st);

/* Tensors in header order: i in [0, count). */
int forge_safetensors_count(const forge_safetensors *st);
const forge_st_entry *forge_safetensors_entry(const forge_safetensors *st, int i);

/* The tensor called name, or NULL. */
const forge_st_entry *forge_safetensors_find(const forge_safetensors *st, const char *name);

/* Like find, but a missing tensor, another dtype or another shape is an error
 * (FORGE_ERR_DATA) naming the file, the tensor, and what was expected.
 * dtype NULL accepts any dtype; shape NULL accepts any shape. */
forge_status forge_safetensors_get(const forge_safetensors *st, const char *name,
                                   const char *dtype, int ndim, const int64_t *shape,
                                   const forge_st_entry **out);

/* __metadata__ value for key, or NULL. */
const char *forge_safetensors_meta(const forge_safetensors *st, const char *key);
int forge_safetensors_meta_count(const forge_safetensors *st);
/* i-th metadata pair in header order; returns 0 when i is out of range. */
int forge_safetensors_meta_at(const forge_safetensors *st, int i, const char **key,
                              const char **value);

#endif
