/* generate.c: autoregressive sampling: the KV-cache decode path, the full forward pass past the context. */
#include "generate.h"

#include <stdlib.h>
#include <string.h>

#include "../base/clock.h"
#include "../base/rng.h"
#include "../model/model_decode.h"
#include "sampler.h"

static void write_token(const forge_tokenizer *tok, int32_t id, FILE *out) {
    size_t len;
    const uint8_t *bytes = forge_tokenizer_token_bytes(tok, id, &len);
    if (id == forge_tokenizer_eot(tok)) {
        fputs("\n", out);
        return;
    }
    if (bytes) fwrite(bytes, 1, len, out);
}

/* logits (V, host) of the token after seq[0..n): the training forward over the last context_length tokens */
static forge_status full_forward_logits(forge_model *m, forge_tape *tape, const int32_t *seq, size_t n, float *logits,
                                        float *scratch) {
    forge_backend *be = m->be;
    const int V = m->cfg.vocab_size, ctx = m->cfg.context_length;
    size_t start = n > (size_t)ctx ? n - (size_t)ctx : 0;
    int64_t shape[2] = {1, (int64_t)(n - start)};
    forge_tensor *ids, *out_logits;
    forge_status s = forge_pool_tensor(forge_tape_pool(tape), &ids, FORGE_I32, 2, shape, 0);
    if (s == FORGE_OK) s = be->copy_to_device(be, ids->data, seq + start, (n - start) * sizeof(int32_t));
    if (s == FORGE_OK) s = forge_model_forward(m, tape, ids, NULL, 0.0f, &out_logits);
    if (s == FORGE_OK && out_logits->dtype == FORGE_BF16) { /* a bf16 step's logits: widened here */
        forge_bf16 *row = (forge_bf16 *)scratch; /* scratch holds 2V floats: room for V bf16 */
        s = be->copy_to_host(be, row, (forge_bf16 *)out_logits->data + (n - start - 1) * (size_t)V,
                             (size_t)V * sizeof(forge_bf16));
        for (int v = 0; s == FORGE_OK && v < V; v++) logits[v] = forge_bf16_to_f32(row[v]);
    } else if (s == FORGE_OK) {
        s = be->copy_to_host(be, logits, forge_f32(out_logits) + (n - start - 1) * (size_t)V, (size_t)V * sizeof(float));
    }
    if (s == FORGE_OK) s = be->poll_errors(be);
    forge_tape_reset(tape);
    return s;
}

/* logits (V, host) of the token after seq[0..n), n <= context_length, from the decoder whose caches hold the first
 * *cached positions of seq: the missing positions before n - 1 are prefilled (no logits), then position n - 1 */
static forge_status cached_logits(forge_model *m, forge_decoder *dec, const int32_t *seq, size_t n, size_t *cached,
                                  float *logits) {
    for (; *cached + 1 < n; (*cached)++) FORGE_TRY(forge_decode_step(dec, seq[*cached], (int)*cached, NULL));
    const float *dlogits;
    FORGE_TRY(forge_decode_step(dec, seq[n - 1], (int)(n - 1), &dlogits));
    *cached = n;
    return m->be->copy_to_host(m->be, logits, dlogits, (size_t)m->cfg.vocab_size * sizeof(float));
}

forge_status forge_generate(forge_model *m, forge_tape *tape, const forge_tokenizer *tok, const char *prompt,
                            const forge_generate_options *opt, FILE *out, forge_generate_stats *stats) {
    int V = m->cfg.vocab_size, ctx = m->cfg.context_length;
    if (forge_tokenizer_vocab_size(tok) > V)
        return forge_error(FORGE_ERR_DATA,
                           "generate: the tokenizer has %d ids, more than the model's vocab_size %d: the tokenizer "
                           "and the model do not match",
                           forge_tokenizer_vocab_size(tok), V);
    int32_t *prompt_ids = NULL;
    size_t n_prompt = 0;
    if (prompt && *prompt)
        FORGE_TRY(forge_tokenizer_encode(tok, prompt, strlen(prompt), 1, &prompt_ids, &n_prompt));
    size_t cap = n_prompt + (size_t)opt->max_tokens + 1;
    int32_t *seq = malloc(cap * sizeof *seq);
    float *logits = malloc((size_t)V * sizeof *logits);
    float *scratch = malloc(2 * (size_t)V * sizeof *scratch);
    if (!seq || !logits || !scratch) {
        free(prompt_ids);
        free(seq);
        free(logits);
        free(scratch);
        return forge_error(FORGE_ERR_OOM, "sample: out of host memory");
    }
    size_t n = 0;
    if (n_prompt == 0) {
        seq[n++] = forge_tokenizer_eot(tok); /* a lone eot starts a new document */
    } else {
        memcpy(seq, prompt_ids, n_prompt * sizeof *seq);
        n = n_prompt;
        if (!opt->print_ids) fwrite(prompt, 1, strlen(prompt), out);
    }
    for (size_t i = 0; opt->print_ids && i < n; i++) fprintf(out, "%d%s", (int)seq[i], i + 1 < n ? " " : "\n");
    free(prompt_ids);
    forge_rng rng;
    forge_rng_seed(&rng, opt->seed, 0x73616d70 /* "samp" */);
    int was_recording = forge_tape_recording(tape);
    forge_tape_set_recording(tape, 0);
    forge_decoder *dec = NULL;
    size_t cached = 0; /* positions of seq in the decoder's caches */
    const forge_decoder_options dopt = {.use_graph = opt->use_graph};
    forge_status s = opt->full_forward ? FORGE_OK : forge_decoder_create(&dec, m, &dopt);
    if (stats) *stats = (forge_generate_stats){.prompt_tokens = (int)n};
    double t0 = forge_now_seconds();
    for (int i = 0; i < opt->max_tokens && s == FORGE_OK; i++) {
        const int use_cache = dec && n <= (size_t)ctx;
        if (use_cache) s = cached_logits(m, dec, seq, n, &cached, logits);
        else s = full_forward_logits(m, tape, seq, n, logits, scratch);
        if (s != FORGE_OK) break;
        int32_t next = forge_sample_token(logits, V, opt->temperature, opt->top_k, opt->top_p, &rng, scratch);
        if (next >= forge_tokenizer_vocab_size(tok)) next = forge_tokenizer_eot(tok); /* padded vocab rows */
        if (opt->stop_at_eot && next == forge_tokenizer_eot(tok)) break;
        seq[n++] = next;
        if (stats) {
            stats->new_tokens++;
            stats->full_forward_tokens += !use_cache;
        }
        if (opt->print_ids) fprintf(out, "%s%d", i ? " " : "", (int)next);
        else write_token(tok, next, out);
        fflush(out);
    }
    if (stats) {
        stats->seconds = forge_now_seconds() - t0;
        if (dec) snprintf(stats->decode_mode, sizeof stats->decode_mode, "%s",
                          forge_decoder_mode(dec, NULL, &stats->graph_replays));
    }
    fputs("\n", out);
    forge_decoder_free(dec);
    forge_tape_set_recording(tape, was_recording);
    free(seq);
    free(logits);
    free(scratch);
    return s;
}
