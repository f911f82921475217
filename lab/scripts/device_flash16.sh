#!/usr/bin/env bash
# device_flash16.sh: the bf16 flash attention work of issue 6 on the GPU
# machine. Run from the repo root with OUT set (binaries prebuilt in
# build/cuda). Three steps, each logged to $OUT, all run even if one fails:
#   1. the flash16 GPU parity cases (FORGE_GPU_TESTS_ONLY=flash16), then again
#      with FORGE_FLASH16_FWD=mma FORGE_FLASH16_BWD=mma (the flash16_default.*
#      lines then check the default entries routed to the mma.sync kernels;
#      the by-name lines run in both);
#   2. forge bench attention --device cuda (harness CSVs in results/<date>_<commit>/);
#   3. tools/sdpa_bench.py: PyTorch SDPA cuDNN/flash at the same shapes, CSV
#      next to the harness CSVs, forge/cuDNN ratios printed.
# FORGE_FLASH16_PARITY=0 skips step 1 (when the full parity stage ran in the
# same call: it holds every flash16 line already).
# The results folder is copied to $OUT. Budget: < 5 minutes (the unfused
# fp32 baseline at T = 4096 dominates the bench).
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs and results}"
mkdir -p "$OUT"
fails=0
if [ "${FORGE_FLASH16_PARITY:-1}" != 0 ]; then
    FORGE_GPU_TESTS_ONLY=flash16 timeout 75 build/cuda/forge_gpu_tests 2>&1 | tee "$OUT/flash16_parity.txt" || fails=1
    FORGE_FLASH16_FWD=mma FORGE_FLASH16_BWD=mma FORGE_GPU_TESTS_ONLY=flash16 timeout 75 build/cuda/forge_gpu_tests 2>&1 |
        tee "$OUT/flash16_parity_mma_default.txt" || fails=1
fi
timeout 150 build/cuda/forge bench attention --device cuda --reps 30 2>&1 | tee "$OUT/attention_bench.txt" || fails=1
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
