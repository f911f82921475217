/*
 * hf.h: Hugging Face's config.json <-> forge_model_config, for the two model
 * classes whose parameters forge names exactly: GPT2LMHeadModel ("gpt2") and
 * LlamaForCausalLM ("llama").
 *
 * Out: a forge checkpoint carries config.json beside model.safetensors when its
 * config has an exact equivalent there, so from_pretrained(DIR) loads it. The
 * weights need no export step: model.safetensors already holds HF's names and
 * layouts (checkpoint.c splits Llama's packed qkv into q/k/v_proj and
 * transposes GPT-2's Conv1D weights on the way out and back), and forge's RoPE
 * is HF's rotate-half layout (pairs (i, i + HS/2), backend/cpu/rope.c), so q and
 * k need no permutation.
 *
 * In: a directory written by save_pretrained (config.json + model.safetensors)
 * is mapped to a forge config. Settings forge cannot reproduce exactly (RoPE
 * scaling, another activation, different attention and MLP bias flags, GPT-2's
 * per-layer attention scaling, cross-attention...) are refused with the file,
 * the key and what was expected, because a silently different model would
 * fine-tune from the wrong function. Keys that change nothing forge computes
 * (dropout rates, token ids, use_cache...) are ignored.
 */
#ifndef FORGE_HF_H
#define FORGE_HF_H

#include <stddef.h>

#include "../base/status.h"
#include "config.h"

/* 1 when cfg has an exact HF counterpart whose parameter names are forge's; else 0, and why (cap bytes) names
 * the field that has none, e.g. "family \"gpt2\" with \"norm\" \"rmsnorm\": GPT2LMHeadModel has only LayerNorm". */
int forge_hf_expressible(const forge_model_config *cfg, char *why, size_t cap);

/* HF config.json text for cfg (malloc'ed, the caller frees). eot_id is the tokenizer's <|endoftext|> id written as
 * bos/eos_token_id (-1: unknown, written as null). FORGE_ERR_UNSUPPORTED (with the reason) when cfg is not
 * expressible. */
forge_status forge_hf_config_to_json(const forge_model_config *cfg, int eot_id, char **out);

/* Maps HF config.json text (len bytes, need not be NUL-terminated) to a forge config; src names the file in every
 * message, name becomes the config's name (truncated to fit). FORGE_ERR_CONFIG for a missing or mistyped key,
 * FORGE_ERR_UNSUPPORTED for a model type or setting forge cannot reproduce exactly. */
forge_status forge_hf_config_parse(forge_model_config *out, const char *json, size_t len, const char *src,
                                   const char *name);

/* Widens n elements of a safetensors tensor of dtype "F32", "BF16" or "F16" (src need not be aligned) to fp32;
 * FORGE_ERR_UNSUPPORTED naming the dtype otherwise. */
forge_status forge_hf_to_f32(float *dst, const void *src, size_t n, const char *dtype);

#endif
