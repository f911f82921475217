#!/usr/bin/env bash
# device_fwdov.sh: the wgmma forward's consumer schedules with the softmax pinned under P.V (fw_pin_before_wait,
# lab/flash/flash16_fwd_sched.cu), on the GPU machine (device_run.sh stage "fwdov"; OUT set, binaries prebuilt):
#   1. `forge_gpu_tests --only flash16` (forge's kernels through its entries) and `forge-lab test flash16` (every
#      forward schedule and backward variant by name against float64 and the CPU reference);
#   2. `forge-lab bench attention-variants` over the forward cells (forge's, overlap, pingpong, persist,
#      persist_ov, pingpong_n128, persist_n128, persist_ov_n128, one-CTA) and the fwd+bwd cell wgmma2 (the
#      SPLIT backward variant) at issue 18's shapes, one process;
#   3. PyTorch SDPA on cuDNN at the same shapes (tools/sdpa_bench.py, forward only), for the ratios.
# Prints a table (TFLOP/s per cell and shape) last. Budget: ~4 minutes.
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs}"
source lab/scripts/flash_parity.sh
fails=0
flash_parity fwdov 100 || fails=1
rm -rf /tmp/fwdov-results
timeout 200 build/cuda/forge-lab bench attention-variants --reps "${FORGE_FWDOV_REPS:-30}" --results /tmp/fwdov-results \
    --only "flash_bf16_fwd_wgmma|flash_bf16_fwdbwd_wgmma2@" >"$OUT/fwdov_bench.txt" 2>&1 ||
    fails=1
# the suite CSV and its samples (tools/reverify.py re-derives the first from the second)
find /tmp/fwdov-results -name 'attention-variants*.csv' -exec cp {} "$OUT/" \;
timeout 120 python3 tools/sdpa_bench.py --out "$OUT/sdpa_fwd.csv" --reps 30 >"$OUT/fwdov_sdpa.txt" 2>&1 || fails=1
echo "cell | shape | TFLOP/s"
grep -E "^flash_bf16_fwd" "$OUT/fwdov_bench.txt" | awk '{print $1, "|", $2, $3, $4, $5, $6, "|", $(NF-2)}' | sort -k3,8
grep -E "cudnn" "$OUT/fwdov_sdpa.txt"
exit $fails
