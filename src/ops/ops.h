/*
 * ops.h: the differentiable ops the model is built from.
 *
 * Each op allocates its output from the tape's pool, runs the backend's
 * forward kernel and records its backward rule on the tape (when recording).
 * Backward rules call only the backend's *_backward entries, which are tested
 * op by op against finite differences, so autograd runs only tested kernels.
 *
 * Shapes: x is (B, T, C) or (N, C); the last dimension is the channel one.
 * A backend that lacks an entry yields FORGE_ERR_UNSUPPORTED naming it.
 */
#ifndef FORGE_OPS_H
#define FORGE_OPS_H

#include "../backend/backend.h"
#include "../runtime/tape.h"

/* out (B,T,C) = table[ids]; ids (B,T) int32 */
forge_status forge_op_embedding(forge_tape *tape, forge_tensor **out, const forge_tensor *ids,
                                forge_tensor *table);
/* out (B,T,C) = x + wpe[t] */
forge_status forge_op_position(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *wpe);
/* The model's first op: out (B,T,C) = wte[ids] (+ wpe[t] when wpe is not NULL), with activations of `dtype`: fp32
 * runs embedding then position; bf16 runs the fused encoder on the parameters' working copies. */
forge_status forge_op_encoder(forge_tape *tape, forge_tensor **out, const forge_tensor *ids, forge_tensor *wte,
                              forge_tensor *wpe, forge_dtype dtype);
/* out (..., OC) = x (..., C) . weight (OC, C)^T + bias; bias may be NULL */
forge_status forge_op_matmul(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *weight,
                             forge_tensor *bias);
/* out = gelu(x . weight^T + bias): fp32 runs matmul then gelu; bf16 fuses GELU into the GEMM */
forge_status forge_op_matmul_gelu(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *weight,
                                  forge_tensor *bias);
forge_status forge_op_layernorm(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *weight,
                                forge_tensor *bias, float eps);
forge_status forge_op_rmsnorm(forge_tape *tape, forge_tensor **out, forge_tensor *x, forge_tensor *weight,
                              float eps);
/* res = a + b, then out = LayerNorm(res) (bias given) or RMSNorm(res) (bias NULL): the residual stream's add and
 * the next block's norm (fused into one kernel for bf16) */
forge_status forge_op_residual_norm(forge_tape *tape, forge_tensor **res, forge_tensor **out, forge_tensor *a,
                                    forge_tensor *b, forge_tensor *weight, forge_tensor *bias, float eps);
/* qkv (B,T,(NH+2NKV)*HS): rotates the NH+NKV query and key heads; bf16 qkv in place (*out = qkv: the caller must
 * not need the unrotated values), fp32 into a new tensor */
forge_status forge_op_rope(forge_tape *tape, forge_tensor **out, forge_tensor *qkv, int NH, int NKV, int HS,
                           float theta);
forge_status forge_op_gelu(forge_tape *tape, forge_tensor **out, forge_tensor *x);
forge_status forge_op_swiglu(forge_tape *tape, forge_tensor **out, forge_tensor *gate, forge_tensor *up);
/* out (.., F) = silu(gate) up over the packed gu (.., 2F): gate its columns [0, F), up [F, 2F) (the output of the
 * MLP's one GEMM on the stacked [gate_w; up_w]) */
forge_status forge_op_swiglu_packed(forge_tape *tape, forge_tensor **out, forge_tensor *gu);
forge_status forge_op_add(forge_tape *tape, forge_tensor **out, forge_tensor *a, forge_tensor *b);
/* out (B,T,NH*HS) = causal attention over packed qkv (B,T,(NH+2NKV)*HS) */
forge_status forge_op_attention(forge_tape *tape, forge_tensor **out, forge_tensor *qkv, int NH, int NKV,
                                int HS);
/* Same result, fused: saves the (B,NH,T) logsumexp instead of the (B,NH,T,T) probabilities */
forge_status forge_op_flash_attention(forge_tape *tape, forge_tensor **out, forge_tensor *qkv, int NH,
                                      int NKV, int HS);
/* Fused softmax + cross-entropy. losses (B,T) per position (0 where target ==
 * ignore_index). logits is always overwritten by dlogits * grad_scale (so
 * it must be its last use); when recording it becomes its own gradient. */
forge_status forge_op_classifier(forge_tape *tape, forge_tensor **losses, forge_tensor *logits,
                                 const forge_tensor *targets, int ignore_index, float grad_scale);

/* The lm head and the classifier: losses (B, T) of logits = x . lm_head^T. fp32: the matmul, then the fused
 * classifier above (the logits become their own gradient). bf16: one op that runs the head's forward and backward
 * chunk by chunk of rows, accumulating the gradients of x and lm_head at once when the tape records (the (N, V)
 * logits never exist whole); not recording, the losses alone. */
forge_status forge_op_lm_head_classifier(forge_tape *tape, forge_tensor **losses, forge_tensor *x,
                                         forge_tensor *lm_head, const forge_tensor *targets, int ignore_index,
                                         float grad_scale);

#endif
