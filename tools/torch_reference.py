#!/usr/bin/env python3
"""torch_reference.py: an independent reference for forge, in PyTorch + Hugging Face.

Loads a forge checkpoint's model.safetensors (Hugging Face tensor names; the forge config JSON
is in its metadata), builds the same model with `transformers` (GPT2LMHeadModel or
LlamaForCausalLM), and writes a golden file with:
  input_ids, targets  (B, T) int32, drawn from a fixed seed
  logits              (B, T, V) float32
  loss                (1,) mean cross-entropy
  grad.<name>         the gradient of the mean loss for every parameter (HF names)
  adamw_losses        (10,) losses of 10 AdamW steps on that batch (forge's AdamW:
                      betas 0.9/0.95, eps 1e-8 outside the sqrt, decoupled weight decay 0.1
                      on rank >= 2 tensors only, global-norm clipping at 1.0, constant lr)
Everything runs in float64-free fp32 on the CPU, deterministic.

Usage: python3 tools/torch_reference.py INIT.safetensors OUT.safetensors [--batch 2 --seq 16]
Run where PyTorch and transformers exist (the GPU machine has both). The forge test suite
(tests/test_golden.c) compares forge's CPU backend against the files this writes.
"""
import argparse
import json
import math

import torch
from safetensors import safe_open
from safetensors.torch import save_file


def build_model(cfg):
    import transformers
    V, C, L, NH = cfg["vocab_size"], cfg["d_model"], cfg["n_layers"], cfg["n_heads"]
    if cfg["family"] == "gpt2":
        assert cfg["norm"] == "layernorm" and cfg["positions"] == "learned" and cfg["activation"] == "gelu"
        assert cfg["bias"] and cfg["tied_embeddings"] and cfg["n_kv_heads"] == NH
        hf = transformers.GPT2Config(vocab_size=V, n_positions=cfg["context_length"], n_embd=C, n_layer=L,
                                     n_head=NH, n_inner=cfg["ffn_hidden"], activation_function="gelu_new",
                                     layer_norm_epsilon=cfg["norm_eps"], resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0, tie_word_embeddings=True)
        model = transformers.GPT2LMHeadModel(hf)
    else:
        assert cfg["norm"] == "rmsnorm" and cfg["positions"] == "rope" and cfg["activation"] == "swiglu"
        assert not cfg["bias"]
        hf = transformers.LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=cfg["ffn_hidden"],
                                      num_hidden_layers=L, num_attention_heads=NH,
                                      num_key_value_heads=cfg["n_kv_heads"],
                                      max_position_embeddings=cfg["context_length"],
                                      rms_norm_eps=cfg["norm_eps"], rope_theta=cfg["rope_theta"],
                                      attention_bias=False, mlp_bias=False,
                                      tie_word_embeddings=bool(cfg["tied_embeddings"]))
        model = transformers.LlamaForCausalLM(hf)
    model.config._attn_implementation = "eager"
    return model.float().eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("init")
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)

    with safe_open(args.init, "pt") as f:
        cfg = json.loads(f.metadata()["forge_config"])
        state = {k: f.get_tensor(k) for k in f.keys()}
    model = build_model(cfg)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # GPT-2's causal-mask buffers ("attn.bias") and tied lm_head are not in forge's file
    missing = [k for k in missing if not k.endswith(".attn.bias") and not k.endswith("masked_bias")
               and not (k == "lm_head.weight" and cfg["tied_embeddings"])]
    assert not missing and not unexpected, (missing, unexpected)

    g = torch.Generator().manual_seed(1234)
    V = cfg["vocab_size"]
    ids = torch.randint(0, V, (args.batch, args.seq), generator=g)
    targets = torch.randint(0, V, (args.batch, args.seq), generator=g)

    def loss_of(m):
        logits = m(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        return logits, loss

    logits, loss = loss_of(model)
    loss.backward()
    out = {"input_ids": ids.to(torch.int32), "targets": targets.to(torch.int32),
           "logits": logits.detach().contiguous(), "loss": loss.detach().reshape(1)}
    named = dict(model.named_parameters())
    for name in state:
        out["grad." + name] = named[name].grad.detach().clone().contiguous()

    # 10 AdamW steps, written out so every detail is forge's (not torch.optim's defaults)
    params = [p for _, p in model.named_parameters()]
    m_state = [torch.zeros_like(p) for p in params]
    v_state = [torch.zeros_like(p) for p in params]
    b1, b2, eps, wd = 0.9, 0.95, 1e-8, 0.1
    losses = []
    for step in range(1, args.steps + 1):
        model.zero_grad(set_to_none=True)
        _, l = loss_of(model)
        losses.append(l.item())
        l.backward()
        with torch.no_grad():
            norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params)).item()
            clip = 1.0 / norm if norm > 1.0 else 1.0
            for p, m, v in zip(params, m_state, v_state):
                gr = p.grad * clip
                m.mul_(b1).add_(gr, alpha=1 - b1)
                v.mul_(b2).addcmul_(gr, gr, value=1 - b2)
                mhat = m / (1 - b1 ** step)
                vhat = v / (1 - b2 ** step)
                decay = wd if p.dim() >= 2 else 0.0
                p.sub_(args.lr * (mhat / (vhat.sqrt() + eps) + decay * p))
    out["adamw_losses"] = torch.tensor(losses, dtype=torch.float32)
    meta = {"lr": repr(args.lr), "torch": torch.__version__, "family": cfg["family"]}
    save_file(out, args.out, metadata=meta)
    print(f"{args.out}: loss {loss.item():.6f}, adamw losses {losses[0]:.5f} -> {losses[-1]:.5f}")


if __name__ == "__main__":
    main()
