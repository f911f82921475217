#!/usr/bin/env bash
# device_binab.sh: A/B of two forge binaries in one device call (device_run.sh stage "binab"): build/cuda/forge_a
# (A, the baseline, carried as .carry/bin/forge_a.gz) against build/cuda/forge (B), alternating A, B, A, B, ...
# for BINAB_ROUNDS rounds (default 5), each run its own process:
#   - `forge bench attention --device cuda --reps 30 --only BINAB_ATTN` (default: forge's fwd+bwd cells), and
#   - `forge bench train --device cuda --precision bf16 --cases BINAB_CASES --steps BINAB_STEPS` (default
#     gpt2-124m:16x1024, 20 steps; BINAB_CASES="" skips it).
# Prints, last, per cell: A's and B's medians over the rounds (of each run's own median ms, or its tok/s) and the
# median, min and max of the per-round B speed-ups (> 1: B faster).
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs}"
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ROUNDS=${BINAB_ROUNDS:-5}
ATTN=${BINAB_ATTN:-flash_bf16_fwdbwd_default}
CASES=${BINAB_CASES-gpt2-124m:16x1024}
STEPS=${BINAB_STEPS:-20}
fails=0
# B's flash parity first (forge's kernels through its entries, against float64 and the CPU reference)
if [ -x build/cuda/forge_gpu_tests ]; then
    timeout 100 build/cuda/forge_gpu_tests --only flash16 >"$OUT/binab_parity.txt" 2>&1 || fails=1
    tail -n 1 "$OUT/binab_parity.txt"
    grep "^FAIL" "$OUT/binab_parity.txt" | head
fi
for r in $(seq 1 "$ROUNDS"); do
    for side in a b; do
        bin=build/cuda/forge
        [ $side = a ] && bin=build/cuda/forge_a
        timeout 100 "$bin" bench attention --device cuda --reps 30 --only "$ATTN" --results "/tmp/binab_$side$r" \
            >"$OUT/binab_attn_${side}_$r.txt" 2>&1 || fails=1
        if [ -n "$CASES" ]; then
            timeout 150 "$bin" bench train --device cuda --precision bf16 --cases "$CASES" --steps "$STEPS" \
                >"$OUT/binab_train_${side}_$r.txt" 2>&1 || fails=1
        fi
    done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import re, sys, statistics, glob, os
out, rounds = sys.argv[1], int(sys.argv[2])
def attn(path):
    d = {}
    for line in open(path):
        if line.startswith("flash_bf16_"):
            f = line.split()
            m = re.search(r"ok\s+\S+ / \S+\s+([0-9.]+) \[", line)
            if m:
                d[" ".join(f[0:6])] = float(m.group(1))
    return d
def train(path):
    d = {}
    for line in open(path):
        m = re.match(r"(\S+)\s+B=(\d+)\s+T=(\d+)\s+\|\s+([0-9,.]+) tok/s", line)
        if m:
            d[f"{m.group(1)} {m.group(2)}x{m.group(3)}"] = float(m.group(4).replace(",", ""))
    return d
rows = []
for kind, fn, higher in (("attn", attn, False), ("train", train, True)):
    per = {}
    for r in range(1, rounds + 1):
        pa, pb = f"{out}/binab_{kind}_a_{r}.txt", f"{out}/binab_{kind}_b_{r}.txt"
        if not (os.path.exists(pa) and os.path.exists(pb)):
            continue
        a, b = fn(pa), fn(pb)
        for k in a:
            if k in b:
                per.setdefault(k, []).append((a[k], b[k]))
    for k, v in per.items():
        ra = [x for x, _ in v]; rb = [y for _, y in v]
        sp = [(y / x) if higher else (x / y) for x, y in v]
        rows.append((kind, k, statistics.median(ra), statistics.median(rb), statistics.median(sp), min(sp), max(sp), len(v)))
print("binab: A = build/cuda/forge_a, B = build/cuda/forge; B speed-up = A ms / B ms (attention) or B tok/s / A tok/s (train)")
print(f"{'kind':6} {'cell':60} {'A':>10} {'B':>10} {'B speed-up':>10} {'min':>6} {'max':>6} n")
for kind, k, a, b, s, lo, hi, n in rows:
    print(f"{kind:6} {k:60} {a:10.4f} {b:10.4f} {s:10.3f} {lo:6.3f} {hi:6.3f} {n}")
PY
exit $fails
