#!/usr/bin/env bash
# device_sample_speed.sh: `forge sample`'s decoding speed on the GPU (device_run.sh stage "sample_speed"): a model
# trained briefly on GPT-2-tokenized TinyStories (.carry/data/ts-gpt2; the weights only need to be a real
# checkpoint), then greedy decoding of 256 new tokens with the KV cache and with the full forward pass per token;
# the tok/s lines (stderr's last) go to $OUT/sample-speed.txt.
#   FORGE_SAMPLE_CONFIGS  which configs (default gpt2-124m)
#   FORGE_SAMPLE_STEPS    training steps before sampling (default 100)
set -u -o pipefail
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
FORGE=${FORGE_BIN:-build/cuda/forge}
DATA=.carry/data/ts-gpt2
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
    for mode in "" --no-kv-cache; do
        line=$("$FORGE" sample --device cuda --ckpt "$RUNS/$cfg" --prompt "Once upon a time" --tokens 256 \
            --temperature 0 $mode 2>&1 >"$RUNS/out.txt" | tail -n 1) || fails=1
        echo "$cfg ${mode:-kv-cache}: $line" | tee -a "$OUT/sample-speed.txt"
    done
    head -c 600 "$RUNS/out.txt" >"$OUT/sample-text-$cfg.txt"
done
exit $fails
