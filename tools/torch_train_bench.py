#!/usr/bin/env python3
"""torch_train_bench.py: the PyTorch baseline of `forge bench train` (issue 17).

Builds the model a forge config describes (configs/*.json: the gpt2 family with
learned positions, layernorm, tanh GELU, biases and tied embeddings; the llama
family with RoPE, RMSNorm, SwiGLU, GQA, no biases, untied head), then times full
training steps on one fixed batch of random tokens the way forge's bench does:
zero grads, forward, loss, backward, global grad-norm clip, AdamW. PyTorch runs
its fast path: torch.compile, bf16 autocast (fp32 master weights), fused AdamW,
scaled_dot_product_attention (cuDNN/flash), TF32 allowed for what stays fp32.

With --serve it is stepped by `forge bench train --baseline`: after the warm-up
it prints "ready", then answers each line "step" on stdin with one timed step's
milliseconds and "end" with the JSON line below (its median over the served
steps), so the two frameworks alternate step by step in one call.

Prints one JSON object on the last line of stdout:
  {"config", "B", "T", "tok_s", "median_ms", "ci_ms": [lo, hi], "reps",
   "peak_mib", "params", "torch", "device", "loss"}
peak_mib is torch.cuda.max_memory_reserved over the timed steps (reserved,
like forge's pool peak, not allocated). Run on a GPU machine:
  python3 tools/torch_train_bench.py --config configs/gpt2-124m.json --batch 16 --seq 1024
"""
import argparse
import json
import math
import random
import statistics
import sys
import time


def load_config(path):
    with open(path) as f:
        c = json.load(f)
    fam = c.get("family", "gpt2")
    d = c["d_model"]
    out = {
        "name": c.get("name", path),
        "family": fam,
        "V": c["vocab_size"],
        "ctx": c["context_length"],
        "C": d,
        "L": c["n_layers"],
        "NH": c["n_heads"],
        "NKV": c.get("n_kv_heads", c["n_heads"]),
        "H": c.get("ffn_hidden", 4 * d),
        "eps": c.get("norm_eps", 1e-5),
        "theta": c.get("rope_theta", 10000.0),
        "bias": c.get("bias", fam == "gpt2"),
        "tied": c.get("tied_embeddings", fam == "gpt2"),
    }
    return out


def build(cfg, torch, nn, F):
    class RMSNorm(nn.Module):
        def __init__(self, C, eps):
            super().__init__()
            self.w = nn.Parameter(torch.ones(C))
            self.eps = eps

        def forward(self, x):
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
            return (y * self.w).to(x.dtype)

    def norm(C):
        return nn.LayerNorm(C, eps=cfg["eps"]) if cfg["family"] == "gpt2" else RMSNorm(C, cfg["eps"])

    def rope_tables(T, HS):
        inv = 1.0 / (cfg["theta"] ** (torch.arange(0, HS, 2, dtype=torch.float32) / HS))
        ang = torch.outer(torch.arange(T, dtype=torch.float32), inv)
        return torch.cos(ang), torch.sin(ang)

    def rope(x, cos, sin):  # x (B, h, T, HS), pairs (2i, 2i+1)
        x2 = x.float().unflatten(-1, (-1, 2))
        a, b = x2[..., 0], x2[..., 1]
        y = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
        return y.to(x.dtype)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            C, NH, NKV, H, bias = cfg["C"], cfg["NH"], cfg["NKV"], cfg["H"], cfg["bias"]
            self.HS = C // NH
            self.n1, self.n2 = norm(C), norm(C)
            self.qkv = nn.Linear(C, (NH + 2 * NKV) * self.HS, bias=bias)
            self.proj = nn.Linear(C, C, bias=bias)
            if cfg["family"] == "gpt2":
                self.fc = nn.Linear(C, H, bias=bias)
            else:
                self.fc = nn.Linear(C, 2 * H, bias=bias)
            self.fc2 = nn.Linear(H, C, bias=bias)

        def forward(self, x, cos, sin):
            B, T, C = x.shape
            NH, NKV, HS = cfg["NH"], cfg["NKV"], self.HS
            q, k, v = self.qkv(self.n1(x)).split([NH * HS, NKV * HS, NKV * HS], dim=-1)
            q = q.view(B, T, NH, HS).transpose(1, 2)
            k = k.view(B, T, NKV, HS).transpose(1, 2)
            v = v.view(B, T, NKV, HS).transpose(1, 2)
            if cfg["family"] != "gpt2":
                q, k = rope(q, cos, sin), rope(k, cos, sin)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=NKV != NH)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            h = self.fc(self.n2(x))
            if cfg["family"] == "gpt2":
                h = F.gelu(h, approximate="tanh")
            else:
                g, u = h.chunk(2, dim=-1)
                h = F.silu(g) * u
            return x + self.fc2(h)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(cfg["V"], cfg["C"])
            self.wpe = nn.Embedding(cfg["ctx"], cfg["C"]) if cfg["family"] == "gpt2" else None
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["L"]))
            self.nf = norm(cfg["C"])
            self.head = None if cfg["tied"] else nn.Linear(cfg["C"], cfg["V"], bias=False)
            HS = cfg["C"] // cfg["NH"]
            cos, sin = rope_tables(cfg["ctx"], HS)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
            for p in self.parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, ids, targets):
            B, T = ids.shape
            x = self.wte(ids)
            if self.wpe is not None:
                x = x + self.wpe(torch.arange(T, device=ids.device))
            cos, sin = self.cos[:T], self.sin[:T]
            for b in self.blocks:
                x = b(x, cos, sin)
            x = self.nf(x)
            logits = x @ (self.wte.weight if self.head is None else self.head.weight).t()
            return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))

    return GPT()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="a forge config JSON (configs/NAME.json)")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--reps", type=int, default=30, help="timed steps (after --warmup)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps (compilation happens in the first)")
    ap.add_argument("--no-compile", action="store_true", help="eager mode (for a machine without a compiler)")
    ap.add_argument("--serve", action="store_true", help="step on request from stdin (forge bench train --baseline)")
    a = ap.parse_args()

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    cfg = load_config(a.config)
    dev = "cuda"
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = build(cfg, torch, nn, F).to(dev)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    g = torch.Generator(device="cpu").manual_seed(7)
    ids = torch.randint(0, cfg["V"], (a.batch, a.seq), generator=g).to(dev)
    tgt = torch.randint(0, cfg["V"], (a.batch, a.seq), generator=g).to(dev)
    fwd = model if a.no_compile else torch.compile(model)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(ids, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        return loss

    for _ in range(a.warmup):
        loss = step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed():
        start.record()
        out = step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        return out

    if a.serve:
        # stdout carries the protocol only; anything torch prints goes to stderr
        print("ready", flush=True)
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "step":
                loss = timed()
                print(f"{times[-1]:.6f}", flush=True)
            elif cmd == "end":
                break
            else:
                print(f"unknown command {cmd!r}", file=sys.stderr)
                return 2
        if not times:
            loss = timed()
        a.reps = len(times)
    else:
        for _ in range(a.reps):
            loss = timed()
    med = statistics.median(times)
    # bootstrap 95% CI of the median
    rnd = random.Random(1)
    boots = sorted(statistics.median(rnd.choices(times, k=len(times))) for _ in range(1000))
    res = {
        "config": cfg["name"], "B": a.batch, "T": a.seq, "tok_s": a.batch * a.seq / (med / 1000),
        "median_ms": med, "ci_ms": [boots[25], boots[974]], "reps": a.reps,
        "peak_mib": torch.cuda.max_memory_reserved() / 1048576.0, "params": params,
        "torch": torch.__version__, "device": torch.cuda.get_device_name(), "loss": float(loss.detach()),
        "compiled": not a.no_compile,
    }
    print(json.dumps(res))
    return 0 if math.isfinite(res["loss"]) else 1


if __name__ == "__main__":
    sys.exit(main())
