#!/usr/bin/env bash
# device_flash16.sh: the bf16 flash attention on the GPU machine. Run from the repo root with OUT set (binaries
# prebuilt in build/cuda: make cuda lab ARCH=x86-64-v3). Steps, each logged to $OUT, all run even if one fails:
#   1. parity: `forge_gpu_tests --only flash16` (the product's flash16 cases: forge's default kernels through the
#      entry points), then `forge-lab test flash16` (every kernel and variant by name: mma.sync, q128, the wgmma
#      forward schedules, the backward dK/dV and dQ pipelines);
#   2. `forge bench attention --device cuda` (forge's default cells) and `forge-lab bench attention-variants` (every
#      kernel and variant by name), both against the unfused fp32 attention; harness CSVs in
#      results/<date>_<commit>/ (attention.csv, attention-variants.csv);
#   3. tools/sdpa_bench.py: PyTorch SDPA cuDNN/flash at the same shapes, CSV next to the harness CSVs, forge/cuDNN
#      ratios of the default cells printed.
# FORGE_FLASH16_PARITY=0 skips step 1 (when the parity and lab stages ran in the same call: they hold every flash16
# line already); FORGE_FLASH16_VARIANTS=0 skips the variants bench.
# The results folder is copied to $OUT. Budget: < 7 minutes (the unfused fp32 baseline at T = 4096 dominates each
# bench; as a device_run.sh stage FORGE_T_FLASH16=420).
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs and results}"
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0
if [ "${FORGE_FLASH16_PARITY:-1}" != 0 ]; then
    timeout 75 build/cuda/forge_gpu_tests --only flash16 2>&1 | tee "$OUT/flash16_parity.txt" || fails=1
    timeout 75 build/cuda/forge-lab test flash16 2>&1 | tee "$OUT/flash16_parity_variants.txt" || fails=1
fi
timeout 120 build/cuda/forge bench attention --device cuda --reps 30 2>&1 | tee "$OUT/attention_bench.txt" || fails=1
if [ "${FORGE_FLASH16_VARIANTS:-1}" != 0 ]; then
    timeout 150 build/cuda/forge-lab bench attention-variants --reps 30 2>&1 | tee "$OUT/attention_variants_bench.txt" ||
        fails=1
fi
dir=$(ls -td results/*/ 2>/dev/null | while read -r d; do [ -f "$d/attention.csv" ] && echo "$d" && break; done)
if [ -n "$dir" ]; then
    timeout 60 python3 tools/sdpa_bench.py --out "${dir%/}/sdpa_external.csv" --forge-csv "${dir%/}/attention.csv" --reps 30 \
        2>&1 | tee "$OUT/sdpa_bench.txt" || fails=1
    cp -r "$dir" "$OUT/" || fails=1
else
    echo "no results/*/attention.csv: the attention bench did not write its CSV" | tee -a "$OUT/sdpa_bench.txt"
    fails=1
fi
exit $fails
