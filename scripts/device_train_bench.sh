#!/usr/bin/env bash
# device_train_bench.sh: `forge bench train` on the GPU in bf16, each case timed, then one step op by op
# (--breakdown), then stepped in turn with the PyTorch baseline (tools/torch_train_bench.py: torch.compile,
# bf16 autocast, fused AdamW, SDPA) for the paired ratio. Settings (this is a script, not the product):
#   FORGE_BENCH_CASES     CONFIG:BxT list (default: the issue's three targets)
#   FORGE_BENCH_STEPS     timed steps and paired rounds (default 20)
#   FORGE_BENCH_BASELINE  the baseline command ("" for none)
#   FORGE_BENCH_EXTRA     more forge flags (e.g. --matmul cublas)
set -u
cd "$(dirname "$0")/.."
CASES=${FORGE_BENCH_CASES:-gpt2-124m:16x1024,gpt-10m:32x512,gpt-25m:16x1024}
STEPS=${FORGE_BENCH_STEPS:-20}
BASE=${FORGE_BENCH_BASELINE-python3 tools/torch_train_bench.py}
args=(bench train --device cuda --precision bf16 --cases "$CASES" --steps "$STEPS" --breakdown)
[ -n "$BASE" ] && args+=(--baseline "$BASE")
# shellcheck disable=SC2206
[ -n "${FORGE_BENCH_EXTRA:-}" ] && args+=($FORGE_BENCH_EXTRA)
echo "forge ${args[*]}"
build/cuda/forge "${args[@]}"
