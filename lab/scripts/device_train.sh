#!/usr/bin/env bash
# device_train.sh: end-to-end checks on the GPU machine, run by device_run.sh.
#  1. PyTorch + transformers golden files from forge's committed init
#     (tools/torch_reference.py); they come back in $OUT/golden/ to be committed.
#  2. forge vs the golden files: the CPU reference backend, then the CUDA backend.
#  3. 50 training steps of tiny and gpt-10m on the GPU; losses vs the CPU run of the
#     same init and batches (carried in .carry/ref), 1e-4 relative, at lr 6e-4.
#  4. Peak GPU memory of gpt-10m with 1 vs 8 accumulation steps: must be equal.
set -u -o pipefail
fails=0
mkdir -p "$OUT/golden"
for n in gpt2-tiny llama-tiny; do
    if python3 tools/torch_reference.py "tests/golden/${n}_init.safetensors" "$OUT/golden/${n}_golden.safetensors"; then
        cp "$OUT/golden/${n}_golden.safetensors" tests/golden/
    else
        echo "FAIL torch reference for $n"; fails=1
    fi
done
echo "== golden: CPU reference backend"
build/cuda/forge_tests golden || fails=1
echo "== golden: CUDA backend"
FORGE_GOLDEN_DEVICE=cuda build/cuda/forge_tests golden || fails=1

run_compare() { # name config data batch seqlen
    local name=$1 cfg=$2 data=$3 batch=$4 seq=$5
    echo "== train $name: 50 steps on cuda"
    build/cuda/forge train --device cuda --precision fp32 --config "$cfg" --data "$data" --out "/tmp/gpu-$name" --steps 50 \
        --batch "$batch" --seq-len "$seq" --eval-every 0 --quiet --lr 6e-4 || { fails=1; return; }
    tail -n 1 "/tmp/gpu-$name/log.jsonl"
    python3 tools/compare_losses.py ".carry/ref/${name}_cpu.jsonl" "/tmp/gpu-$name/log.jsonl" --rel 1e-4 || fails=1
}
run_compare tiny tiny .carry/data/fortunes 16 128
run_compare gpt10m gpt-10m .carry/data/ts8192 8 256

echo "== peak memory vs accumulation (gpt-10m, cuda)"
for acc in 1 8; do
    build/cuda/forge train --device cuda --precision fp32 --config gpt-10m --data .carry/data/ts8192 --out "/tmp/gpu-acc$acc" \
        --steps 2 --batch 8 --seq-len 256 --tokens-per-step $((2048 * acc)) --eval-every 0 --quiet || fails=1
done
python3 - <<'PY' || fails=1
import json, sys
peaks = []
for acc in (1, 8):
    recs = [json.loads(l) for l in open(f"/tmp/gpu-acc{acc}/log.jsonl") if '"loss"' in l]
    peaks.append(recs[-1]["peak_mib"])
ok = peaks[0] == peaks[1]
print(f"{'PASS' if ok else 'FAIL'}: peak {peaks[0]} MiB with 1 micro-batch per step, {peaks[1]} MiB with 8")
sys.exit(0 if ok else 1)
PY
exit $fails
