#!/usr/bin/env bash
# device_sample_speed.sh: `forge sample`'s decoding speed on the GPU (device_run.sh stage "sample_speed"): a model
# trained briefly on GPT-2-tokenized TinyStories (.carry/data/ts-gpt2; the weights only need to be a real
# checkpoint), then greedy decoding of 256 new tokens with the KV cache and with the full forward pass per token;
# the tok/s lines (stderr's last) go to $OUT/sample-speed.txt.
#   FORGE_SAMPLE_CONFIGS  which configs (default gpt2-124m)
#   FORGE_SAMPLE_STEPS    training steps before sampling (default 100)
set -u -o pipefail
. scripts/device_lib.sh
RUNS=/tmp/forge-sample-speed
rm -rf "$RUNS" && mkdir -p "$RUNS"
fails=0
for cfg in ${FORGE_SAMPLE_CONFIGS:-gpt2-124m}; do
    if ! "$FORGE" train --device cuda --config "$cfg" --data "$DATA" --out "$RUNS/$cfg" --batch 16 --seq-len 1024 \
        --steps "${FORGE_SAMPLE_STEPS:-100}" --lr 6e-4 --seed 1337 >"$OUT/sample-train-$cfg.log" 2>&1; then
        echo "FAIL train $cfg"
        tail -n 5 "$OUT/sample-train-$cfg.log"
        fails=1
        continue
    fi
    sample_speed "$RUNS/$cfg" "$OUT/sample-speed.txt" "$cfg" || fails=1
done
exit $fails
