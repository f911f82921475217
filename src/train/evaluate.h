/*
 * evaluate.h: a model's loss over a token stream (`forge eval`).
 *
 * The stream is cut into windows of T + 1 tokens stepping by T, so every token
 * after the first is predicted exactly once, from the tokens before it in its
 * window; B windows go in a batch and the last batch's missing positions are
 * ignored targets. Reported: the mean loss (nats per predicted token), its
 * perplexity, and bits per byte: the summed loss in bits over the bytes the
 * predicted tokens decode to (<|endoftext|> counts as no bytes: it stands for
 * a document boundary, not text), which compares models with different
 * tokenizers.
 */
#ifndef FORGE_EVALUATE_H
#define FORGE_EVALUATE_H

#include <stdint.h>
#include <stdio.h>

#include "../data/tokenizer.h"
#include "../model/model.h"
#include "../runtime/tape.h"

typedef struct {
    double loss;          /* mean nats per predicted token */
    double perplexity;    /* exp(loss) */
    double bits_per_byte; /* summed loss / ln 2 / bytes */
    uint64_t tokens;      /* predicted tokens (n - 1) */
    uint64_t bytes;       /* the bytes they decode to */
} forge_eval_result;

/* The decoded length in bytes of every id of tok (eot: 0), for forge_evaluate; *out malloc'ed, V entries. */
forge_status forge_eval_token_bytes(const forge_tokenizer *tok, uint32_t **out, int *V);

/* The tokens to evaluate at path: a directory's val_NNN.bin shards in index order, one .bin shard, or else a text
 * file encoded with tok (ordinary text: "<|endoftext|>" in it is not the special id). Every id is checked
 * against vocab_size. *out malloc'ed; *what describes the source for messages. */
forge_status forge_eval_load_tokens(const char *path, const forge_tokenizer *tok, int vocab_size, int32_t **out,
                                    size_t *n, char *what, size_t what_cap);

/* The loss of m over tokens[0, n) (n >= 2) in batches of B windows of T (T <= the context length). bytes_of (bytes_V
 * entries; NULL: bits_per_byte NaN) gives each id's decoded length, an id past it counting none. progress (NULL: none)
 * gets a line every two seconds and at the end: batches, tokens, the running loss, tokens/s and the ETA. The tape
 * stops recording for the call. */
forge_status forge_evaluate(forge_model *m, forge_tape *tape, const int32_t *tokens, size_t n, int B, int T,
                            const uint32_t *bytes_of, int bytes_V, FILE *progress, forge_eval_result *r);

#endif
