#!/usr/bin/env bash
# device_real_run.sh: the "train a real model" runs of the README on the GPU machine (device_run.sh stage
# "real_run"): GPT-2-tokenized TinyStories (.carry/data/ts-gpt2, made on the build machine with
# `forge tokenize --tokenizer ../shared/data/gpt2-tokenizer`), bf16, trained until the val loss (over the whole val
# split) stops improving (--early-stop), then three samples and the evaluation of the best checkpoint, and the
# KV-cached sampling speed (greedy, 256 tokens) against the full forward. Logs and the run directories' log.jsonl
# come back in $OUT; the loss curves are drawn on the build machine (`forge plot`).
#   FORGE_REAL_RUNS  which runs (default "gpt-10m-v50k gpt2-124m")
set -u -o pipefail
. scripts/device_lib.sh
RUNS=/tmp/forge-real-runs
rm -rf "$RUNS" && mkdir -p "$RUNS"
# gpt-10m's shape with GPT-2's 50257-id vocabulary (gpt-10m itself has 8192 ids)
cat >"$RUNS/gpt-10m-v50k.json" <<'JSON'
{"name": "gpt-10m-v50k", "family": "gpt2", "vocab_size": 50257, "context_length": 512, "d_model": 384, "n_layers": 6,
 "n_heads": 6}
JSON
fails=0
for run in ${FORGE_REAL_RUNS:-gpt-10m-v50k gpt2-124m}; do
    case $run in
        gpt-10m-v50k) cfg=$RUNS/gpt-10m-v50k.json
            args=(--batch 32 --seq-len 512 --lr 1.5e-3 --steps 3000 --eval-every 50 --early-stop 3) ;;
        gpt2-124m) cfg=gpt2-124m args=(--batch 16 --seq-len 1024 --lr 8e-4 --steps 1600 --eval-every 100 --early-stop 2) ;;
        *) echo "unknown run $run"; fails=1; continue ;;
    esac
    echo "== $run: forge train --config $cfg ${args[*]}"
    t0=$SECONDS
    if ! "$FORGE" train --device cuda --config "$cfg" --data "$DATA" --out "$RUNS/$run" "${args[@]}" \
        --eval-batches 1000 --seed 1337 >"$OUT/train-$run.log" 2>&1; then
        echo "FAIL train $run"
        fails=1
    fi
    echo "wall $((SECONDS - t0)) s (start-up, training, evaluations, checkpoints)"
    head -n 3 "$OUT/train-$run.log"
    grep -E "^done|^best|^early|val loss" "$OUT/train-$run.log" | tail -n 4
    cp "$RUNS/$run/log.jsonl" "$OUT/$run.jsonl"
    best=$RUNS/$run/$(cat "$RUNS/$run/best" 2>/dev/null || echo "")
    "$FORGE" sample --device cuda --ckpt "$best" --prompt "Once upon a time" --tokens 120 --count 3 \
        --temperature 0.8 --top-k 40 --seed 1 >"$OUT/samples-$run.txt" 2>&1 || fails=1
    "$FORGE" eval --device cuda --ckpt "$best" --data "$DATA" >"$OUT/eval-$run.txt" 2>&1 || fails=1
    tail -n 1 "$OUT/eval-$run.txt"
    sample_speed "$best" "$OUT/sample-speed-$run.txt" || fails=1
done
python3 - "$OUT" ${FORGE_REAL_RUNS:-gpt-10m-v50k gpt2-124m} <<'PY'
import json, math, sys
out = sys.argv[1]
print(f"{'run':14} {'steps':>6} {'tokens':>11} {'best val':>9} {'at step':>8} {'final val':>9} {'ppl':>7} {'tok/s':>9}")
for run in sys.argv[2:]:
    try:
        rows = [json.loads(l) for l in open(f"{out}/{run}.jsonl")]
    except OSError:
        print(f"{run:14} (no log)")
        continue
    val = [(r["val_loss"], r["step"]) for r in rows if "val_loss" in r]
    steps = [r for r in rows if "loss" in r]
    best = min(val)
    tok = sorted(r["tokens_per_s"] for r in steps[10:])
    print(f"{run:14} {steps[-1]['step']:6d} {steps[-1]['tokens']:11.0f} {best[0]:9.4f} {best[1]:8d} {val[-1][0]:9.4f} "
          f"{math.exp(val[-1][0]):7.2f} {tok[len(tok) // 2]:9.0f}")
PY
exit $fails
