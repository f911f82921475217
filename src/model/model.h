/*
 * model.h: a decoder-only transformer built from a forge_model_config.
 *
 * One code path serves GPT-2 and Llama: the config's fields (norm, positions,
 * activation, bias, tied embeddings, n_kv_heads) choose each piece. Every
 * parameter lives in one flat device block, and every gradient in a second
 * flat block with the same layout, so zeroing the gradients, their global norm,
 * checkpointing and (later) sharding the optimizer state over GPUs are each a
 * single contiguous range.
 *
 * Parameter names are Hugging Face's (GPT2LMHeadModel, LlamaForCausalLM) so
 * checkpoints load there unchanged; the two places where HF's layout differs
 * from forge's (GPT-2's Conv1D stores weights transposed; Llama splits q, k, v)
 * are converted when saving and loading (checkpoint.c).
 *
 * Shape legend: B batch, T time, C d_model, V vocab, L layers, NH heads,
 * NKV kv heads, HS head size, H ffn hidden.
 */
#ifndef FORGE_MODEL_H
#define FORGE_MODEL_H

#include "../runtime/pool.h"
#include "../runtime/tape.h"
#include "config.h"

typedef enum {
    FORGE_EXPORT_PLAIN = 0,   /* stored as is */
    FORGE_EXPORT_TRANSPOSED,  /* GPT-2 Conv1D: HF stores (C_in, C_out) */
    FORGE_EXPORT_QKV,         /* Llama: rows split into q_proj, k_proj, v_proj */
} forge_param_export;

typedef struct {
    char name[96];           /* HF name; for FORGE_EXPORT_QKV the q_proj name */
    forge_tensor *t;         /* view into the flat parameter block; t->grad into the grad block */
    size_t offset;           /* element offset in the flat blocks */
    int decay;               /* weight decay applies: rank >= 2 */
    forge_param_export export_kind;
} forge_param;

typedef struct {
    forge_tensor *norm1_w, *norm1_b;        /* (C) */
    forge_tensor *qkv_w, *qkv_b;            /* ((NH+2NKV)*HS, C), ((NH+2NKV)*HS) */
    forge_tensor *attn_proj_w, *attn_proj_b;/* (C, C), (C) */
    forge_tensor *norm2_w, *norm2_b;        /* (C) */
    forge_tensor *fc_w, *fc_b;              /* gelu: (H, C) ; swiglu: gate (H, C) */
    forge_tensor *up_w, *up_b;              /* swiglu only: (H, C) */
    forge_tensor *gate_up_w;                /* swiglu without biases: (2H, C), fc_w's rows then up_w's, a view of
                                               both (data, grad, working copy; model.c: pack_swiglu); else NULL */
    forge_tensor *mlp_proj_w, *mlp_proj_b;  /* (C, H), (C) */
} forge_layer_params;

typedef struct {
    forge_model_config cfg;
    forge_backend *be;
    forge_pool *pool;
    forge_param *params;
    int n_params;
    size_t n_elements;              /* total parameter count */
    float *param_data, *grad_data;  /* the two flat device blocks */
    size_t param_block_bytes, grad_block_bytes;
    forge_bf16 *working_data;       /* bf16 step: the parameters' bf16 working copy, same layout; else NULL */
    size_t working_block_bytes;
    forge_tensor *wte, *wpe, *normf_w, *normf_b, *lm_head; /* lm_head == wte when tied */
    forge_layer_params *layers;
    int flash_attention; /* 1: fused attention (default); 0: the materialised reference (runtime options) */
    int swiglu_packed;   /* 1: the SwiGLU MLP runs one GEMM on gate_up_w (every layer has it); 0: two, on fc_w and
                          * up_w (a config with biases; tests clear it to run the reference) */
} forge_model;

/* Allocates the parameters on pool's backend and initialises them GPT-2 style
 * (normal 0.02; residual output projections 0.02/sqrt(2L); norms 1, biases 0)
 * from `seed`. */
forge_status forge_model_create(forge_model **out, const forge_model_config *cfg, forge_pool *pool,
                                uint64_t seed);
void forge_model_free(forge_model *m);

/* Forward pass over ids (B, T) i32. With targets (B, T) i32, runs the fused
 * classifier: *result is the (B, T) per-position losses and, when the tape
 * records, the logits' gradient (scaled by grad_scale) is in place for
 * forge_tape_backward. Without targets, *result is the (B, T, V) logits. */
forge_status forge_model_forward(forge_model *m, forge_tape *tape, const forge_tensor *ids,
                                 const forge_tensor *targets, float grad_scale, forge_tensor **result);

forge_status forge_model_zero_grad(forge_model *m);

/* bf16 step: rewrites the working copy from the fp32 masters (forge_model_set_params does; the optimizer keeps it
 * current after every update). No-op otherwise. */
forge_status forge_model_sync_working(forge_model *m);

/* Host copies of the whole flat blocks (n_elements floats). */
forge_status forge_model_get_params(const forge_model *m, float *host);
forge_status forge_model_set_params(forge_model *m, const float *host);
forge_status forge_model_get_grads(const forge_model *m, float *host);

const forge_param *forge_model_find_param(const forge_model *m, const char *name);

#endif
