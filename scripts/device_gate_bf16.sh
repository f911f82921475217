#!/usr/bin/env bash
# device_gate_bf16.sh: the bf16 loss-trajectory gate on the GPU machine (device_run.sh stage "gate_bf16").
# gpt-10m on the tokenized TinyStories of .carry/data/ts8192, 1000 steps, batch 16 x 256, lr 6e-4, eval every
# 250 steps, the same seed (so the same init and batches) in --precision fp32 and --precision bf16, and bf16
# twice. Passes when:
#   - the final val loss of bf16 is within 1% (relative) of fp32's;
#   - the mean absolute per-step loss difference over the last 100 steps is within 1% of fp32's mean loss there;
#   - the two bf16 runs log bitwise identical losses (deterministic);
#   - the steps replayed as a CUDA graph (the default) log the same losses and val losses bit for bit as the same
#     run op by op (--no-graph), also with 2 micro-batches a step and an evaluation every 10 steps between the
#     replays (short runs of FORGE_GATE_GRAPH_STEPS, default 60).
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
GSTEPS=${FORGE_GATE_GRAPH_STEPS:-60}
# name:precision:steps:extra flags
for run in fp32:fp32:$STEPS: bf16:bf16:$STEPS: bf16-again:bf16:$STEPS: bf16-nograph:bf16:$STEPS:--no-graph \
    accum-graph:bf16:$GSTEPS:--tokens-per-step=8192,--eval-every=10 \
    accum-nograph:bf16:$GSTEPS:--tokens-per-step=8192,--eval-every=10,--no-graph; do
    IFS=: read -r name precision steps extra <<<"$run"
    extra=${extra//,/ }
    extra=${extra//=/ }
    echo "== train $name (--precision $precision $extra)"
    # shellcheck disable=SC2086
    if ! "$FORGE" train --device cuda --precision "$precision" --config gpt-10m --data "$DATA" --out "$RUNS/$name" \
        --steps "$steps" --batch 16 --seq-len 256 --eval-every 250 --eval-batches 8 --lr 6e-4 --seed 1337 \
        --quiet $extra >"$OUT/train-$name.log" 2>&1; then
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
d, _ = load("bf16-nograph")
graph_same = all(b[s]["loss"] == d[s]["loss"] and b[s]["grad_norm"] == d[s]["grad_norm"] for s in b) and len(b) == len(d)
e, ev = load("accum-graph")
f, fv = load("accum-nograph")
accum_same = len(e) == len(f) > 0 and all(e[s]["loss"] == f[s]["loss"] for s in e) and ev == fv and len(ev) > 1
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
print(f"{'graph = op by op, bitwise':34} {'yes' if graph_same else 'no':>10} {'':8} {'PASS' if graph_same else 'FAIL'}")
print(f"{'graph = op by op, accum 2 + evals':34} {'yes' if accum_same else 'no':>10} {'':8} {'PASS' if accum_same else 'FAIL'}")
tok_ng = tok(d)
print(f"tokens/s (median of steps 11+): bf16 graph {tok(b):.0f}, bf16 op by op {tok_ng:.0f}")
ok &= graph_same and accum_same
print("gate_bf16:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
exit $fails
