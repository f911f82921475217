#!/usr/bin/env bash
# device_fused64.sh: the fused bf16 flash backward's D = 64 instance (ff_bwd_kernel<64>, lab/flash/flash16_bwd_fused64.cu)
# on the GPU machine (device_run.sh stage "fused64"; OUT set, binaries prebuilt):
#   1. `forge-lab test flash16` (flash16_backward_fused64_{asc,desc}.*: against float64, dk / dv bitwise forge's
#      three-kernel backward, dq within tolerance, determinism; flash16_backward_fused64.refuse at D = 128 and
#      .refuse_args; every other variant as usual);
#   2. compute-sanitizer racecheck (build/cuda-san/forge-lab when carried, else the product build), synccheck and
#      memcheck over `forge-lab test flash16 --quick`, kernels ff_ only (both instances);
#   3. `forge-lab bench flash16-bwd-fused --reps F64_REPS` (default 20): its last three shapes are forge's
#      three-kernel backward against the fused D = 64 one at (16,12,1024,64), (64,6,512,64), (64,8,1024,64).
# Prints the parity summary, the sanitizer summaries and the bench lines last. Budget: ~5 minutes.
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs}"
source scripts/device_lib.sh
mkdir -p "$OUT"
SAN=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
fails=0
timeout 200 build/cuda/forge-lab test flash16 >"$OUT/fused64_parity.txt" 2>&1 || fails=1
san=()
for tool in racecheck synccheck memcheck; do
    bin=build/cuda/forge-lab
    [ $tool = racecheck ] && [ -x build/cuda-san/forge-lab ] && bin=build/cuda-san/forge-lab
    timeout 120 "$SAN" --tool $tool --error-exitcode 3 --kernel-name kns=ff_ "$bin" test flash16 --quick \
        >"$OUT/fused64_san_$tool.log" 2>&1
    rc=$?
    [ $rc = 0 ] || fails=1
    san+=("$tool rc=$rc $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/fused64_san_$tool.log" | tail -n 1) | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/fused64_san_$tool.log" | tail -n 1)")
done
timeout 180 build/cuda/forge-lab bench flash16-bwd-fused --reps "${F64_REPS:-20}" >"$OUT/fused64_bench.txt" 2>&1 ||
    fails=1
echo "== parity"
tail -n 1 "$OUT/fused64_parity.txt"
grep -h "^FAIL" "$OUT/fused64_parity.txt" | head -20
grep -c "^PASS flash16_backward_fused64" "$OUT/fused64_parity.txt"
echo "== sanitizers (kernels ff_, forge-lab test flash16 --quick)"
printf '%s\n' "${san[@]}"
echo "== bench"
cat "$OUT/fused64_bench.txt"
exit $fails
