/*
 * generate.h: text generation from a checkpoint (`forge sample`).
 *
 * Every backend decodes with a KV cache (model/model_decode.h): the prompt is
 * prefilled through the same one-token step, one position at a time, then
 * each new token costs one step over the cached positions. The decode path
 * runs in fp32 on the fp32 master weights, whatever the runtime's precision.
 * Once the sequence outgrows context_length the cache cannot hold the window
 * (its positions would all shift), so the rest of the sample falls back to
 * the full forward pass over the last context_length tokens, as the
 * full_forward option does from the start (the reference the cached path is
 * checked against: quadratic in the sample length, exact). With use_graph, on
 * CUDA the cached steps after the first two replay one recorded graph.
 */
#ifndef FORGE_GENERATE_H
#define FORGE_GENERATE_H

#include <stdint.h>
#include <stdio.h>

#include "../data/tokenizer.h"
#include "../model/model.h"

typedef struct {
    int max_tokens;
    float temperature;
    int top_k;
    float top_p;
    uint64_t seed;
    int stop_at_eot; /* end the sample at <|endoftext|> */
    int print_ids;   /* write token ids instead of text: the prompt's on one line (a lone <|endoftext|> for an
                        empty prompt), the new ones on the next, space-separated; what a token-for-token
                        comparison with another implementation reads (tools/hf_check.py) */
    int full_forward; /* 1: no KV cache: re-run the full forward pass over the context for every token */
    int use_graph;    /* KV-cache steps recorded once and replayed where the backend records graphs
                         (model/model_decode.h); 0: every step op by op */
} forge_generate_options;

/* What a generation did, for its throughput line. */
typedef struct {
    int prompt_tokens;      /* ids the sample started from (a lone <|endoftext|> for an empty prompt) */
    int new_tokens;         /* ids sampled */
    int full_forward_tokens;/* of those, the ones the full forward pass produced (past the context, or full_forward) */
    double seconds;         /* wall time from the first forward to the last sampled token, prefill included */
    int graph_replays;      /* KV-cache steps run as replays of a recorded graph */
    char decode_mode[320];  /* the decoder's forge_decoder_mode ("" without a KV cache) */
} forge_generate_stats;

/* Continues `prompt` (may be empty: starts a new document) and writes the
 * decoded text (prompt included) to out as it is produced; stats (may be NULL) gets the counts and the time. */
forge_status forge_generate(forge_model *m, forge_tape *tape, const forge_tokenizer *tok, const char *prompt,
                            const forge_generate_options *opt, FILE *out, forge_generate_stats *stats);

#endif
