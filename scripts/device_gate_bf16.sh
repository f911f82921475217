#!/usr/bin/env bash
# device_gate_bf16.sh: the bf16 loss-trajectory gate on the GPU machine (device_run.sh stage "gate_bf16").
# gpt-10m on the tokenized TinyStories of .carry/data/ts8192, 1000 steps, batch 16 x 256, lr 6e-4, eval every
# 250 steps, the same seed (so the same init and batches) in --precision fp32 and --precision bf16, and bf16
# twice. Passes when:
#   - the final val loss of bf16 is within 1% (relative) of fp32's;
#   - the mean absolute per-step loss difference over the last 100 steps is within 1% of fp32's mean loss there;
#   - the two bf16 runs log bitwise identical losses (deterministic).
# Prints the tokens/s of each run and a summary table last.
set -u -o pipefail
OUT=${OUT:-/tmp/forge-gate-bf16}
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
FORGE=${FORGE_BIN:-build/cuda/forge}
DATA=${FORGE_GATE_DATA:-.carry/data/ts8192}
STEPS=${FORGE_GATE_BF16_STEPS:-1000}
RUNS=/tmp/forge-gate-bf16-runs
rm -rf "$RUNS" && mkdir -p "$RUNS"
fails=0
for run in fp32:fp32 bf16:bf16 bf16-again:bf16; do
    name=${run%%:*} precision=${run##*:}
    echo "== train $name (--precision $precision)"
    if ! "$FORGE" train --device cuda --precision "$precision" --config gpt-10m --data "$DATA" --out "$RUNS/$name" \
        --steps "$STEPS" --batch 16 --seq-len 256 --eval-every 250 --eval-batches 8 --lr 6e-4 --seed 1337 \
        --quiet >"$OUT/train-$name.log" 2>&1; then
        echo "FAIL train $name"
        tail -n 20 "$OUT/train-$name.log"
        fails=1
    fi
    head -n 2 "$OUT/train-$name.log"
    cp "$RUNS/$name/log.jsonl" "$OUT/$name.jsonl" 2>/dev/null
done
python3 - "$RUNS" <<'PY' || fails=1
import json, statistics, sys
runs = sys.argv[1]
def load(name):
    steps, val = {}, {}
    for line in open(f"{runs}/{name}/log.jsonl"):
        r = json.loads(line)
        if "loss" in r: steps[r["step"]] = r
        if "val_loss" in r: val[r["step"]] = r["val_loss"]
    return steps, val
a, av = load("fp32")
b, bv = load("bf16")
c, _ = load("bf16-again")
last = max(a)
final_rel = abs(bv[last] - av[last]) / av[last]
tail = [s for s in sorted(a) if s > last - 100]
mean_diff = statistics.mean(abs(b[s]["loss"] - a[s]["loss"]) for s in tail)
mean_rel = mean_diff / statistics.mean(a[s]["loss"] for s in tail)
same = all(b[s]["loss"] == c[s]["loss"] for s in b)
tok = lambda r: statistics.median(r[s]["tokens_per_s"] for s in sorted(r)[10:])
print(f"tokens/s (median of steps 11+): fp32 {tok(a):.0f}, bf16 {tok(b):.0f}")
print(f"val loss at step {last}: fp32 {av[last]:.4f}, bf16 {bv[last]:.4f}")
rows = [("final val loss, relative", final_rel, 0.01), ("mean |dloss| last 100, relative", mean_rel, 0.01)]
ok = True
print(f"{'check':34} {'value':>10} {'bound':>8} result")
for name, v, bound in rows:
    print(f"{name:34} {v:10.3e} {bound:8.0e} {'PASS' if v <= bound else 'FAIL'}")
    ok &= v <= bound
print(f"{'bf16 twice, bitwise equal losses':34} {'yes' if same else 'no':>10} {'':8} {'PASS' if same else 'FAIL'}")
ok &= same
print("gate_bf16:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
exit $fails
