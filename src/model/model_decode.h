/*
 * model_decode.h: incremental decoding with a KV cache: the model's forward
 * pass for one new token at a time.
 *
 * A decoder holds, per layer, the keys and values of every position decoded
 * so far: two (context_length, n_kv_heads, head_size) fp32 caches in one
 * device block from the model's pool, with the one-row activations the step
 * needs. forge_decode_step runs the training forward's fp32 pieces, in the
 * same order, on the single row of position pos: the token (+ learned
 * position) embedding, then per layer norm1, the qkv matmul, attention_decode
 * (RoPE at pos for the Llama family, the new key and value appended to the
 * layer's cache, the query attending over positions 0..pos, grouped-query
 * heads), the output projection, the residual add, norm2, the MLP (GELU, or
 * SwiGLU's gate and up), its projection and add; the final norm and the lm
 * head (wte when tied). So its logits are the full forward's last-row logits
 * of the same tokens, up to the order of the attention sums.
 *
 * Precision: always fp32, on the fp32 master weights (a model made for a bf16
 * step keeps them too; its bf16 working copy is not used here). The matmuls
 * run the backend's matmul path (tf32 where the runtime options say so).
 *
 * Nothing here synchronises with the host: a step only issues device work,
 * and the caller copies the logits row back when it needs it.
 *
 * Graphs: a step is ~10 small ops a layer, so on CUDA it is bound by kernel
 * launches rather than by reading the weights. With use_graph on a backend
 * that records graphs (runtime/graph.h), the token id and position travel in
 * a two-int32 device buffer the step's ops read (decode_embed and
 * attention_decode_at, not launch arguments), uploaded before each step; the
 * first step with logits runs op by op (it warms what a recording reuses),
 * the second is recorded and replayed, and every later one replays the
 * recording: one graph launch a token. Prompt positions (no logits) run op
 * by op. A replay refused as stale (a backend workspace replaced since) runs
 * that step op by op and records the next; a recording the backend refuses
 * leaves the decoder op by op for good (forge_decoder_mode says why). The
 * recording uses the pool's one recording slot (pool.h), so a pool whose
 * training step is recorded must not also hold a recording decoder. The
 * results are the op-by-op path's: the same kernels on the same values.
 */
#ifndef FORGE_MODEL_DECODE_H
#define FORGE_MODEL_DECODE_H

#include <stdint.h>

#include "model.h"

typedef struct forge_decoder forge_decoder;

typedef struct {
    int use_graph;   /* record a step with logits and replay it for later tokens, where the backend can record
                        graphs (forge_graph_supported); ignored elsewhere (the CPU: every step runs op by op) */
    int device_args; /* read the token id and position from the decoder's device buffer even without a graph (the
                        ops a recording needs, run op by op: how the CPU tests check them); implied by use_graph
                        where graphs are recorded */
} forge_decoder_options;

/* A decoder for m (its caches empty), memory from m's pool; o NULL: all options 0 (op by op, launch arguments). */
forge_status forge_decoder_create(forge_decoder **out, forge_model *m, const forge_decoder_options *o);
void forge_decoder_free(forge_decoder *d);

/* How the steps run: "graph", "eager", or "eager (...)" naming why a recording failed; recordings and replays
 * (may be NULL) get the counts so far. */
const char *forge_decoder_mode(const forge_decoder *d, int *recordings, int *replays);

/* Runs token id at position pos (0 <= pos < context_length): the caches must hold positions 0..pos-1 of the same
 * sequence (decoded by earlier steps); position pos is written. With logits not NULL, *logits is the device
 * pointer of the (vocab_size) logits of position pos, valid until the next step; NULL skips the final norm and
 * the lm head (a prompt's positions before its last). */
forge_status forge_decode_step(forge_decoder *d, int32_t id, int pos, const float **logits);

#endif
