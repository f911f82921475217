#!/usr/bin/env python3
"""compare_losses.py: compare the per-step losses of two forge runs (log.jsonl files).

Usage: compare_losses.py REFERENCE.jsonl CANDIDATE.jsonl [--rel 1e-4] [--steps N]
Prints the worst relative difference and exits 1 if any step differs by more than --rel,
or if the candidate has fewer steps than asked for.
"""
import argparse
import json
import sys


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec:
                out[rec["step"]] = rec["loss"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("candidate")
    ap.add_argument("--rel", type=float, default=1e-4)
    ap.add_argument("--steps", type=int, default=0)
    a = ap.parse_args()
    ref, cand = losses(a.reference), losses(a.candidate)
    steps = sorted(ref)[: a.steps] if a.steps else sorted(ref)
    missing = [s for s in steps if s not in cand]
    if missing:
        print(f"FAIL: candidate lacks steps {missing[:5]}")
        return 1
    worst, worst_step = 0.0, None
    for s in steps:
        rel = abs(cand[s] - ref[s]) / max(abs(ref[s]), 1e-12)
        if rel > worst:
            worst, worst_step = rel, s
    ok = worst <= a.rel
    print(f"{'PASS' if ok else 'FAIL'}: {len(steps)} steps, worst relative loss difference {worst:.3e} "
          f"(step {worst_step}), tolerance {a.rel:g}; first {ref[steps[0]]:.6f} vs {cand[steps[0]]:.6f}, "
          f"last {ref[steps[-1]]:.6f} vs {cand[steps[-1]]:.6f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
