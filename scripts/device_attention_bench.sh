#!/usr/bin/env bash
# device_attention_bench.sh: forge's bf16 flash attention paired with PyTorch SDPA on cuDNN in the same call
# (device_run.sh stage "attention_bench"): `forge bench attention --device cuda --baseline "python3
# tools/sdpa_bench.py"` at issue 18's shapes, forward and forward + backward, round by round (the ratio and its CI
# per case). Settings (this is a script, not the product):
#   FORGE_ATTN_ROUNDS   paired rounds (default 20)
#   FORGE_ATTN_REPS     calls per round on each side (default 10)
#   FORGE_ATTN_BACKEND  the SDPA backend of the baseline, cudnn (default) or flash
set -u
cd "$(dirname "$0")/.."
base="python3 tools/sdpa_bench.py --backend ${FORGE_ATTN_BACKEND:-cudnn}"
args=(bench attention --device cuda --baseline "$base" --steps "${FORGE_ATTN_ROUNDS:-20}" --reps "${FORGE_ATTN_REPS:-10}")
echo "forge ${args[*]}"
build/cuda/forge "${args[@]}"
