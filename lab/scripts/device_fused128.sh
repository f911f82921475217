#!/usr/bin/env bash
# device_fused128.sh: the fused bf16 flash backward (src/backend/cuda/flash_attention_bf16_wgmma_bwd_fused.cu: forge's
# at D = 128; its D = 64 instance the lab's, lab/flash/flash16_bwd_fused64.cu) on the GPU machine (device_run.sh
# stage "fused128"; OUT set, binaries prebuilt):
#   1. `forge-lab test flash16` (flash16_backward_fused128_{asc,desc}.*: the launch orders forced, bitwise forge's;
#      flash16_backward_fused64_{asc,desc}.*: dk / dv bitwise the three kernels', dq within tolerance;
#      flash16_backward_three.*: the three-kernel reference; every other variant as usual);
#   2. compute-sanitizer racecheck (the sanitizer build build/cuda-san/forge-lab when carried, else the product
#      build), synccheck and memcheck over `forge-lab test flash16 --quick`, kernels ff_ only (both instances);
#   3. `forge-lab bench flash16-bwd-fused --reps F3_REPS` (default 20): the three-kernel backward against the fused
#      ones (the lab's older D = 64 designs and the fused kernel's D = 64 instance, forge's at D = 128).
# Prints the parity summary, the sanitizer summaries and the bench lines last. Budget: ~4 minutes.
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs}"
source scripts/device_lib.sh
mkdir -p "$OUT"
SAN=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
fails=0
timeout 200 build/cuda/forge-lab test flash16 >"$OUT/fused128_parity.txt" 2>&1 || fails=1
san=()
for tool in racecheck synccheck memcheck; do
    bin=build/cuda/forge-lab
    [ $tool = racecheck ] && [ -x build/cuda-san/forge-lab ] && bin=build/cuda-san/forge-lab
    timeout 120 "$SAN" --tool $tool --error-exitcode 3 --kernel-name kns=ff_ "$bin" test flash16 --quick \
        >"$OUT/fused128_san_$tool.log" 2>&1
    rc=$?
    [ $rc = 0 ] || fails=1
    san+=("$tool rc=$rc $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/fused128_san_$tool.log" | tail -n 1) | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/fused128_san_$tool.log" | tail -n 1)")
done
timeout 180 build/cuda/forge-lab bench flash16-bwd-fused --reps "${F3_REPS:-20}" >"$OUT/fused128_bench.txt" 2>&1 ||
    fails=1
echo "== parity"
tail -n 1 "$OUT/fused128_parity.txt"
grep -h "^FAIL" "$OUT/fused128_parity.txt" | head -20
grep -c "^PASS flash16_backward_\(fused128\|three\)" "$OUT/fused128_parity.txt"
echo "== sanitizers (kernels ff_, forge-lab test flash16 --quick)"
printf '%s\n' "${san[@]}"
echo "== bench"
cat "$OUT/fused128_bench.txt"
exit $fails
