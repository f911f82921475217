/*
 * generate.h: text generation from a checkpoint (`forge sample`).
 *
 * No KV cache yet: each new token re-runs the forward pass over the last
 * context_length tokens. That is quadratic in the sample length but exact, and
 * it reuses the training forward pass unchanged.
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
} forge_generate_options;

/* Continues `prompt` (may be empty: starts a new document) and writes the
 * decoded text (prompt included) to out as it is produced. */
forge_status forge_generate(forge_model *m, forge_tape *tape, const forge_tokenizer *tok, const char *prompt,
                            const forge_generate_options *opt, FILE *out);

#endif
