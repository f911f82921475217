#!/usr/bin/env python3
"""sdpa_bench.py: PyTorch scaled_dot_product_attention baselines for `forge bench attention`.

Times torch.nn.functional.scaled_dot_product_attention (causal, bf16) with its cuDNN and flash
backends (torch.nn.attention.sdpa_kernel) at the issue-18 shapes, forward and forward+backward,
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

With --serve it is the baseline process of `forge bench attention --baseline "python3 tools/sdpa_bench.py"`
(one backend, --backend, cuDNN by default): it prints "ready TORCH_VERSION" and answers, line by line on stdin,
  case B H T D fwd|fwdbwd SEED -> "ok ERR" / "garbage ERR" (inputs from SEED, checked as above, 10 warm-up runs)
  time N                       -> the median milliseconds of N runs, each with its own pair of CUDA events
  b2b N                        -> the milliseconds per run of N runs queued back to back between one pair of
                                  CUDA events (the kernels' own time once the host is ahead of the GPU)
  quit                         -> exits
so forge and PyTorch alternate round by round in one call.

usage: python3 tools/sdpa_bench.py --out results/<dir>/sdpa_external.csv [--forge-csv results/<dir>/attention.csv]
                                   [--reps 30] [--quick]
       python3 tools/sdpa_bench.py --serve [--backend cudnn|flash]
"""
import argparse
import csv
import math
import os
import statistics
import sys

SHAPES = [(16, 12, 1024, 64), (64, 6, 512, 64), (64, 8, 1024, 64), (16, 16, 2048, 128), (8, 16, 4096, 128)]
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


def make_case(torch, F, backend, mode, shape, seed):
    """Inputs of one case and its call (under backend); checked against float64: (once, status, err)."""
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
    return once, ("ok" if err <= TOL else "garbage"), err


def time_case(torch, backend, once, reps):
    """Median milliseconds of reps calls, each timed with its own pair of CUDA events."""
    from torch.nn.attention import sdpa_kernel

    times = []
    with sdpa_kernel([backend]):
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            once()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
    return statistics.median(times)


def time_back_to_back(torch, backend, once, reps):
    """Milliseconds per call of reps calls queued back to back between one pair of CUDA events."""
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel([backend]):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            once()
        e.record()
        e.synchronize()
    return s.elapsed_time(e) / reps


def run_case(torch, F, backend, mode, shape, reps, warmup, seed):
    B, H, T, D = shape
    once, status, err = make_case(torch, F, backend, mode, shape, seed)
    time_case(torch, backend, once, warmup)
    med = time_case(torch, backend, once, reps)
    flops = 2.0 * B * H * T * T * D * (3.5 if mode == "fwdbwd" else 1.0)
    return status, err, med, flops / (med / 1e3) / 1e12


def serve(backend_name):
    """The line protocol of the module docstring (forge bench attention --baseline)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend_name]
    print(f"ready torch {torch.__version__} SDPA {backend_name}", flush=True)
    once = None
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        if w[0] == "case":
            B, H, T, D = (int(x) for x in w[1:5])
            once = None
            torch.cuda.empty_cache()
            try:
                once, status, err = make_case(torch, F, backend, w[5], (B, H, T, D), int(w[6]) % (1 << 62))
                time_case(torch, backend, once, 10)
                print(f"{status} {err:.3e}", flush=True)
            except RuntimeError as exc:  # the backend refuses this shape or build
                print("failed " + str(exc).splitlines()[0][:200], flush=True)
        elif w[0] == "time" and once is not None:
            print(f"{time_case(torch, backend, once, int(w[1])):.6f}", flush=True)
        elif w[0] == "b2b" and once is not None:
            print(f"{time_back_to_back(torch, backend, once, int(w[1])):.6f}", flush=True)
        elif w[0] == "quit":
            return 0
        else:
            print(f"failed: unexpected line {line.strip()[:100]!r}", flush=True)
    return 0


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
        # every forge bf16 flash cell of this mode (mma, q128, wgmma, ...): fwd cells start flash_bf16_fwd_,
        # fwd+bwd cells flash_bf16_fwdbwd
        prefix = "flash_bf16_fwd_" if mode == "fwd" else "flash_bf16_fwdbwd"
        cells = sorted(c for (c, g) in forge if g == group and c.startswith(prefix))
        if not cells:
            print(f"  {group:34s} no forge {prefix}* cell in {forge_csv}")
        for cell in cells:
            fr = forge[(cell, group)]
            if fr.get("status") != "ok" or not fr.get("tflops"):
                print(f"  {group:34s} {cell:24s} vs {row['backend']:5s}: forge cell not ok")
                continue
            ratio = float(fr["tflops"]) / float(row["tflops"])
            print(f"  {group:34s} {cell:24s} {float(fr['tflops']):7.1f} / {row['backend']:5s} "
                  f"{float(row['tflops']):7.1f} TFLOP/s = {ratio:.3f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="CSV to write (put it in the harness results folder)")
    ap.add_argument("--serve", action="store_true", help="the paired baseline of forge bench attention --baseline")
    ap.add_argument("--backend", choices=("cudnn", "flash"), default="cudnn", help="--serve's SDPA backend")
    ap.add_argument("--forge-csv", help="attention.csv of `forge bench attention` to print ratios against")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="the first two shapes only")
    args = ap.parse_args()
    if args.serve:
        return serve(args.backend)
    if not args.out:
        ap.error("--out is required (or --serve)")
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
