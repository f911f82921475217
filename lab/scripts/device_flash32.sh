#!/usr/bin/env bash
# device_flash32.sh: checks of the fused exact-fp32 attention on the GPU
# machine. Run from the repo root with OUT set; binaries prebuilt in
# build/cuda, tokenized data in .carry/data/ts8192 (as device_train.sh).
#  1. GPU parity of the op list (forge_gpu_tests --only ops: the flash ops are
#     in it): forward out/lse and backward dqkv vs the CPU reference, Tq != Tk
#     with fully masked rows, GQA, HS 16/32/64/128, determinism, the HS=130
#     refusal and the op-path peak memory at T = 8192 (< 64 MiB).
#  2. An unknown --attention value must be refused.
#  3. 200 steps of gpt-10m (fp32, batch 8 x 512) with --attention materialised
#     and with --attention flash (the default): losses equal within 1e-5
#     relative (tools/compare_losses.py), and tok/s and peak MiB of both.
#  4. `forge bench ops --device cuda` (gpt-10m shapes, B=8 T=512): per-op
#     times of attention_forward/backward (materialised) next to
#     flash_attention_forward/backward; its results folder copied to $OUT/bench_ops.
# Budget: well under 4 minutes on an H200. Exit status 1 on any failure.
set -u -o pipefail
OUT=${OUT:-/tmp/forge-flash32-out}
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0

echo "== 1. GPU parity: the op list (fused fp32 attention included)"
timeout 150 build/cuda/forge_gpu_tests --only ops 2>&1 | tee "$OUT/parity_flash.log" || fails=1

echo "== 2. --attention bogus is refused"
if timeout 30 build/cuda/forge train --device cuda --config gpt-10m --attention bogus \
    --data .carry/data/ts8192 --out /tmp/flash32-bogus --steps 1 --batch 1 --seq-len 64 --eval-every 0 \
    --quiet > "$OUT/bogus.log" 2>&1; then
    echo "FAIL: --attention bogus was accepted"; fails=1
else
    echo "PASS: refused: $(grep -m1 -- --attention "$OUT/bogus.log")"
fi

echo "== 3. gpt-10m, 200 steps: materialised vs flash"
for mode in materialised flash; do
    rm -rf "/tmp/flash32-$mode"
    timeout 100 build/cuda/forge train --device cuda --precision fp32 --config gpt-10m --attention "$mode" \
        --data .carry/data/ts8192 --out "/tmp/flash32-$mode" --steps 200 --batch 8 --seq-len 512 \
        --eval-every 0 --quiet --lr 6e-4 || { echo "FAIL: training with $mode"; fails=1; }
    cp "/tmp/flash32-$mode/log.jsonl" "$OUT/train_$mode.jsonl" 2>/dev/null
    tail -n 1 "/tmp/flash32-$mode/log.jsonl"
done
python3 tools/compare_losses.py "$OUT/train_materialised.jsonl" "$OUT/train_flash.jsonl" --rel 1e-5 || fails=1
python3 - "$OUT" <<'PY' || fails=1
import json, statistics, sys
out = sys.argv[1]
for mode in ("materialised", "flash"):
    recs = [json.loads(l) for l in open(f"{out}/train_{mode}.jsonl") if '"loss"' in l]
    tps = [r["tokens_per_s"] for r in recs if r["step"] > 10]
    print(f"{mode:13s} median {statistics.median(tps):10.0f} tok/s over steps 11-{recs[-1]['step']}, "
          f"peak {recs[-1]['peak_mib']:.0f} MiB, final loss {recs[-1]['loss']:.6f}")
PY
echo "== 4. forge bench ops (cuda): materialised vs flash attention cells"
timeout 150 build/cuda/forge bench ops --device cuda 2>&1 | tee "$OUT/bench_ops.log" || fails=1
dir=$(grep -o 'results in [^ ;]*' "$OUT/bench_ops.log" | head -1 | cut -d' ' -f3)
[ -n "$dir" ] && [ -d "$dir" ] && cp -r "$dir" "$OUT/bench_ops"

echo "== device_flash32: $([ $fails = 0 ] && echo PASS || echo FAIL)"
exit $fails
