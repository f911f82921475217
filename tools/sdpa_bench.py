#!/usr/bin/env python3
"""sdpa_bench.py: PyTorch scaled_dot_product_attention baselines for `forge bench attention`.

Times torch.nn.functional.scaled_dot_product_attention (causal, bf16) with its cuDNN and flash
backends (torch.nn.attention.sdpa_kernel) at the issue-6 shapes, forward and forward+backward,
and writes one CSV next to the harness CSVs. FLOPs follow forge's convention: forward
2*B*H*T^2*D (causal), backward 2.5x forward, so fwd+bwd counts 3.5x.

Method (the same rules as the harness, reimplemented here because PyTorch is Python):
- inputs uniform [-1, 1) in bf16 (torch generator, fixed seed), layout (B, H, T, D);
- check first: out (and dQ, dK, dV for fwd+bwd) vs a float64 causal attention (autograd)
  on the slices (b, h) = (0, 0) and (B-1, H-1); relative Frobenius error, largest over the
  tensors, must be <= 1e-2 (forge's bf16 tolerance) or the row is `garbage`;
- 10 warm-up runs, then --reps (>= 30) runs each timed with its own pair of CUDA events;
  the median is reported.
With --forge-csv results/<dir>/attention.csv the script prints forge / cuDNN and forge /
flash TFLOP/s ratios per shape (the issue's bar: forge fwd+bwd >= 1.10x cuDNN).

usage: python3 tools/sdpa_bench.py --out results/<dir>/sdpa_external.csv [--forge-csv results/<dir>/attention.csv]
                                   [--reps 30] [--quick]
"""
import argparse
import csv
import math
import os
import statistics
import sys

SHAPES = [(64, 6, 512, 64), (64, 8, 1024, 64), (16, 16, 2048, 128), (8, 16, 4096, 128)]
TOL = 1e-2


def reference(q, k, v, dout, want_grads):
    """float64 causal attention on slices (0,0) and (B-1,H-1): out [, dq, dk, dv] per slice."""
    import torch

    B, H = q.shape[0], q.shape[1]
    res = []
    for b, h in ((0, 0), (B - 1, H - 1)):
        qs, ks, vs = (x[b, h].detach().double().requires_grad_(want_grads) for x in (q, k, v))
        T, D = qs.shape
        s = (qs @ ks.T) / math.sqrt(D)
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
        o = torch.softmax(s, dim=-1) @ vs
        item = [o.detach()]
        if want_grads:
            o.backward(dout[b, h].double())
            item += [qs.grad, ks.grad, vs.grad]
        res.append(((b, h), item))
    return res


def rel_err(got, ref):
    d = (got.double() - ref).norm().item()
    r = ref.norm().item()
    return d / r if r > 0 else d


def run_case(torch, F, backend, mode, shape, reps, warmup, seed):
    B, H, T, D = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda: (torch.rand(B, H, T, D, generator=gen, device="cuda") * 2 - 1).to(torch.bfloat16)
    q, k, v, dout = mk(), mk(), mk(), mk()
    bwd = mode == "fwdbwd"
    if bwd:
        for x in (q, k, v):
            x.requires_grad_(True)

    def once():
        if bwd:
            q.grad = k.grad = v.grad = None
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.backward(dout)
            return o
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel([backend]):
        o = once()
        torch.cuda.synchronize()
        err = 0.0
        for (b, h), item in reference(q, k, v, dout, bwd):
            got = [o[b, h]] + ([q.grad[b, h], k.grad[b, h], v.grad[b, h]] if bwd else [])
            for g, r in zip(got, item):
                e = rel_err(g, r)
                err = e if not (e <= err) else err
        status = "ok" if err <= TOL else "garbage"
        for _ in range(warmup):
            once()
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            once()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
    med = statistics.median(times)
    flops = 2.0 * B * H * T * T * D * (3.5 if bwd else 1.0)
    return status, err, med, flops / (med / 1e3) / 1e12


def forge_ratios(forge_csv, rows):
    with open(forge_csv, newline="") as f:
        forge = {(r["cell"], r["group"]): r for r in csv.DictReader(f)}
    print("\nforge / PyTorch SDPA (TFLOP/s ratios; bar: fwd+bwd >= 1.10x cuDNN)")
    for row in rows:
        if row["status"] != "ok":
            continue
        B, H, T, D = row["B"], row["H"], row["T"], row["D"]
        mode = row["mode"]
        group = f"{'fwd' if mode == 'fwd' else 'fwd+bwd'} B={B} H={H} T={T} D={D}"
        cells = (["flash_bf16_fwd", "flash_bf16_fwd_q128", "flash_bf16_fwd_wgmma"] if mode == "fwd" else
                 ["flash_bf16_fwdbwd", "flash_bf16_fwdbwd_wgmma", "flash_bf16_fwdbwd_wgmma2"])
        for cell in cells:
            fr = forge.get((cell, group))
            if not fr or fr.get("status") != "ok" or not fr.get("tflops"):
                print(f"  {group:34s} {cell:24s} vs {row['backend']:5s}: forge cell missing or not ok")
                continue
            ratio = float(fr["tflops"]) / float(row["tflops"])
            print(f"  {group:34s} {cell:24s} {float(fr['tflops']):7.1f} / {row['backend']:5s} "
                  f"{float(row['tflops']):7.1f} TFLOP/s = {ratio:.3f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="CSV to write (put it in the harness results folder)")
    ap.add_argument("--forge-csv", help="attention.csv of `forge bench attention` to print ratios against")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="the two smaller shapes only")
    args = ap.parse_args()
    reps = max(args.reps, 30)

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend

    backends = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]
    shapes = SHAPES[:2] if args.quick else SHAPES
    rows = []
    print(f"sdpa bench: torch {torch.__version__}, {torch.cuda.get_device_name()}, reps {reps}")
    for i, shape in enumerate(shapes):
        for mode in ("fwd", "fwdbwd"):
            for name, be in backends:
                try:
                    status, err, med, tf = run_case(torch, F, be, mode, shape, reps, args.warmup, 1234 + i)
                except RuntimeError as exc:  # backend not available for this shape/build
                    status, err, med, tf = "failed: " + str(exc).splitlines()[0][:120], float("nan"), float("nan"), float("nan")
                B, H, T, D = shape
                row = {"backend": name, "mode": mode, "B": B, "H": H, "T": T, "D": D, "status": status,
                       "rel_err": err, "reps": reps, "median_ms": med, "tflops": tf}
                rows.append(row)
                print(f"  {name:5s} {mode:6s} B={B:<3d} H={H:<3d} T={T:<5d} D={D:<4d} {status:8s} "
                      f"rel_err={err:.2e} median={med:9.4f} ms {tf:7.1f} TFLOP/s", flush=True)
                torch.cuda.empty_cache()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.out}")
    if args.forge_csv:
        forge_ratios(args.forge_csv, rows)
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
