#!/usr/bin/env bash
# device_gate.sh: the 200-step gate of issue 5's integration, on the GPU machine.
# Run from the repo root with OUT set (binaries prebuilt in build/cuda, the
# tokenized data in .carry/data/ts8192, as for lab/scripts/device_train.sh).
#
# gpt-10m, 200 steps at lr 6e-4, batch 16 x seq 256 (4096 tokens/step), no
# eval, same seed and data order in every run:
#   simt        --matmul simt: the previous kernels (matmul.cu's SIMT
#               kernel is unchanged by the integration), the reference
#   fp32        --matmul fp32: the default path, must be bit-identical
#               (tolerance 0: it is the same kernel; anything else is a bug)
#   auto-cold   --matmul auto with an empty cache ($OUT/matmul-table.tsv):
#               measures and prints the per-shape table, then trains
#   auto-warm   --matmul auto again: every shape from the cache ("cached" in
#               the log), identical choices, so bit-identical to auto-cold
#   tf32        --matmul tf32: forge's tensor-core tf32 kernels
# Tolerances (worst relative loss difference vs simt over the 200 steps):
#   fp32 0; auto-cold and auto-warm 1e-5 (exact fp32 in another summation
#   order where cuBLAS is chosen); tf32 2e-2 (operands rounded to 2^-11
#   relative; the trajectory drifts, the gate only catches broken kernels:
#   a wrong layout or a missed K tile moves the loss by far more). The
#   measured tf32 drift is printed; tighten the tolerance once it is known.
# Budget: ~184k tok/s on SIMT -> 200 x 4096 tokens ~ 5 s per run plus start;
# the whole gate should take well under 2 minutes. Summary table printed LAST.
set -u -o pipefail
OUT=${OUT:-/tmp/forge-gate-out}
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
FORGE=${FORGE_BIN:-build/cuda/forge}
DATA=${FORGE_GATE_DATA:-.carry/data/ts8192}
STEPS=${FORGE_GATE_STEPS:-200}
CACHE="$OUT/matmul-table.tsv" # the auto runs' table (--matmul-cache), never the user's
rm -f "$CACHE"
# checkpoints stay out of $OUT (what comes back is size-limited); only the logs are copied there
RUNS=/tmp/forge-gate-runs
rm -rf "$RUNS" && mkdir -p "$RUNS"

names=()
results=()
fails=0

train() { # name command... (the common training options are appended)
    local name=$1
    shift
    echo "== train $name: $*"
    local t0=$(date +%s)
    if "$@" --device cuda --config gpt-10m --data "$DATA" --out "$RUNS/run-$name" --steps "$STEPS" --batch 16 \
        --seq-len 256 --eval-every 0 --quiet --lr 6e-4 --seed 1337 >"$OUT/train-$name.log" 2>&1; then
        echo "   done in $(($(date +%s) - t0)) s; $(grep -c '"loss"' "$RUNS/run-$name/log.jsonl") steps logged"
        grep -E '^matmul auto' "$OUT/train-$name.log" || true
        return 0
    fi
    echo "FAIL train $name:"
    tail -n 20 "$OUT/train-$name.log"
    fails=1
    return 1
}

compare() { # name tolerance [reference]
    local name=$1 tol=$2 ref=${3:-simt} line
    line=$(python3 tools/compare_losses.py "$RUNS/run-$ref/log.jsonl" "$RUNS/run-$name/log.jsonl" --rel "$tol" 2>&1)
    local rc=$?
    echo "   $name vs $ref: $line"
    [ $rc -eq 0 ] || fails=1
    local worst
    worst=$(echo "$line" | sed -n 's/.*difference \([0-9.e+-]*\).*/\1/p')
    names+=("$name vs $ref")
    results+=("$([ $rc -eq 0 ] && echo PASS || echo FAIL)|${worst:-?}|$tol")
}

tok_s() { # median tokens/s of a run's logged steps (steps 10.. to skip warm-up)
    python3 - "$RUNS/run-$1/log.jsonl" <<'PY' 2>/dev/null || echo "?"
import json, sys, statistics
v = [json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if '"loss"' in l]
print(f"{statistics.median(v[10:] or v):.0f}")
PY
}

train simt "$FORGE" train --matmul simt
train fp32 "$FORGE" train --matmul fp32 && compare fp32 0
train auto-cold "$FORGE" train --matmul auto --matmul-cache "$CACHE" && compare auto-cold 1e-5
train auto-warm "$FORGE" train --matmul auto --matmul-cache "$CACHE" && compare auto-warm 1e-5 &&
    compare auto-warm 0 auto-cold
if ! grep -q '(cached)' "$OUT/train-auto-warm.log" 2>/dev/null; then
    echo "FAIL auto-warm did not read the cache (no '(cached)' rows)"
    fails=1
fi
train tf32 "$FORGE" train --matmul tf32 && compare tf32 2e-2

echo
echo "== per-shape table (from $CACHE)"
cat "$CACHE" 2>/dev/null || echo "(none written)"
echo
echo "== summary: gpt-10m, $STEPS steps, lr 6e-4, batch 16 x 256"
printf '%-22s %-6s %-12s %-8s\n' "comparison" "result" "worst_rel" "tol"
for i in "${!names[@]}"; do
    IFS='|' read -r r w t <<<"${results[$i]}"
    printf '%-22s %-6s %-12s %-8s\n' "${names[$i]}" "$r" "$w" "$t"
done
printf '%-22s' "tokens/s (median):"
for r in simt fp32 auto-warm tf32; do printf ' %s=%s' "$r" "$(tok_s $r)"; done
echo
for d in "$RUNS"/run-*; do [ -f "$d/log.jsonl" ] && cp "$d/log.jsonl" "$OUT/$(basename "$d").jsonl"; done
echo "gate: $([ $fails -eq 0 ] && echo PASS || echo FAIL)"
exit $fails
