/*
 * tokenizer.h: byte-level BPE, GPT-2 compatible.
 *
 * One tokenizer type serves both cases: GPT-2's own vocabulary (encoder.json +
 * vocab.bpe) and vocabularies trained by forge, which are written in the same
 * two-file format so every tool that reads GPT-2's files reads ours. Text is
 * split with GPT-2's pre-tokenisation regex (PCRE2, Unicode classes), each
 * piece is mapped to bytes, and merges are applied by rank. Decoding is the
 * exact inverse: encode then decode returns the input bytes for any input,
 * including invalid UTF-8.
 *
 * The special token "<|endoftext|>" is always the last id (50256 for GPT-2).
 */
#ifndef FORGE_TOKENIZER_H
#define FORGE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"

typedef struct forge_tokenizer forge_tokenizer;

/* Loads encoder.json + vocab.bpe from a directory (as written by _save), or, when encoder.json is absent,
 * vocab.json + merges.txt (the same files under the names Hugging Face's GPT2Tokenizer saves them as). */
forge_status forge_tokenizer_load(forge_tokenizer **out, const char *dir);
/* Loads from explicit paths (GPT-2's files). */
forge_status forge_tokenizer_load_files(forge_tokenizer **out, const char *encoder_json,
                                        const char *vocab_bpe);
/* Loads from the two files' contents in memory (neither need be
 * NUL-terminated); the names stand for the paths in messages (NULL:
 * "encoder.json", "vocab.bpe"). The file loaders read the files and call this. */
forge_status forge_tokenizer_load_memory(forge_tokenizer **out, const char *encoder_json, size_t encoder_len,
                                         const char *encoder_name, const char *vocab_bpe, size_t vocab_len,
                                         const char *vocab_name);
/* Writes dir/encoder.json and dir/vocab.bpe (creating dir). */
forge_status forge_tokenizer_save(const forge_tokenizer *tok, const char *dir);

/* Trains a byte-level BPE with vocab_size ids in total: 256 byte tokens,
 * vocab_size - 257 merges, and <|endoftext|>. "<|endoftext|>" in the text
 * is a document separator and is not learned from. Deterministic (the same
 * result for any thread count): the most frequent pair wins, ties go to the
 * smallest (left id, right id). If the corpus runs out of pairs first, the
 * vocabulary is smaller: use forge_tokenizer_vocab_size(). */
forge_status forge_tokenizer_train(forge_tokenizer **out, const char *const *files, int n_files,
                                   int vocab_size, int verbose);

void forge_tokenizer_free(forge_tokenizer *tok);

int forge_tokenizer_vocab_size(const forge_tokenizer *tok);
int32_t forge_tokenizer_eot(const forge_tokenizer *tok);

/* Encodes len bytes. With allow_special, each "<|endoftext|>" becomes the
 * eot id; otherwise it is encoded as ordinary text. *ids is malloc'ed.
 * Safe to call from several threads on one tokenizer (the piece cache lives
 * in the call, so encode large chunks rather than many tiny strings). */
forge_status forge_tokenizer_encode(const forge_tokenizer *tok, const char *text, size_t len,
                                    int allow_special, int32_t **ids, size_t *n_ids);

/* Decodes ids to bytes; *text is malloc'ed and NUL-terminated (len excludes the NUL). */
forge_status forge_tokenizer_decode(const forge_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                    char **text, size_t *len);

/* The bytes of one token (not NUL-terminated); NULL for an id out of range. */
const uint8_t *forge_tokenizer_token_bytes(const forge_tokenizer *tok, int32_t id, size_t *len);

#endif
