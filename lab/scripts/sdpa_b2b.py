#!/usr/bin/env python3
"""sdpa_b2b.py (lab): PyTorch SDPA's kernel time without its host cost: N calls queued back to back between one pair
of CUDA events (the GPU never waits for the host once the queue is ahead), median over rounds; and the same call
timed alone after a synchronize, as tools/sdpa_bench.py times it. Causal bf16 forward at the issue-18 shapes.
usage: python3 lab/scripts/sdpa_b2b.py [--backend cudnn|flash] [--calls 20] [--rounds 15]"""
import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from sdpa_bench import SHAPES  # noqa: E402  (the issue-18 shapes, as the paired bench has them)

ap = argparse.ArgumentParser()
ap.add_argument("--backend", default="cudnn")
ap.add_argument("--calls", type=int, default=20)
ap.add_argument("--rounds", type=int, default=15)
a = ap.parse_args()
be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[a.backend]
for B, H, T, D in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = ((torch.rand(B, H, T, D, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16) for _ in range(3))
    with sdpa_kernel([be]):
        f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
        for _ in range(10):
            f()
        torch.cuda.synchronize()
        b2b, alone = [], []
        for _ in range(a.rounds):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            f()  # queue ahead
            s.record()
            for _ in range(a.calls):
                f()
            e.record()
            e.synchronize()
            b2b.append(s.elapsed_time(e) / a.calls)
            for _ in range(3):
                s2, e2 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                s2.record()
                f()
                e2.record()
                e2.synchronize()
                alone.append(s2.elapsed_time(e2))
    fl = 2.0 * B * H * T * T * D
    mb, ma = statistics.median(b2b), statistics.median(alone)
    print(f"{a.backend} fwd ({B},{H},{T},{D}): back to back {mb * 1e3:.1f} us ({fl / mb * 1e-9:.1f} TFLOP/s), "
          f"alone {ma * 1e3:.1f} us, host share {ma - mb:+.4f} ms")
