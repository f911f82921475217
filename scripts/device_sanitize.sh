#!/usr/bin/env bash
# device_sanitize.sh: compute-sanitizer over the newest kernels' quick parity
# lists (device_run.sh stage "sanitize"): memcheck for the bf16 flash
# attention and the fp8/tf32 wgmma GEMMs, synccheck and racecheck for the bf16
# flash kernels (cp.async + barrier ordering and shared-memory hazards, e.g.
# the dK/dV kernels' P^T handoff, which the numpy emulator cannot see).
set -u -o pipefail
SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
[ -x "$SAN" ] || { echo "compute-sanitizer not found"; exit 1; }
LOGS=${OUT:-/tmp} # full sanitizer logs (they come back with $OUT)
mkdir -p "$LOGS"
fails=0
for spec in "memcheck flash16" "memcheck gemm_fp8" "synccheck flash16" "racecheck flash16"; do
    set -- $spec
    echo "== $1 on FORGE_GPU_TESTS_ONLY=$2 (quick shapes)"
    FORGE_GPU_TESTS_ONLY=$2 FORGE_GPU_TESTS_QUICK=1 timeout 90 "$SAN" --tool "$1" --error-exitcode 3 \
        build/cuda/forge_gpu_tests > "$LOGS/san-$1-$2.log" 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed, " "$LOGS/san-$1-$2.log" | tail -n 2
    # the first reports, so a failure explains itself in the stage log
    [ $rc -eq 0 ] || grep -m 40 -E "^=========" "$LOGS/san-$1-$2.log"
    echo "   rc=$rc"
    [ $rc -eq 0 ] || fails=1
done
echo "== device_sanitize: $([ $fails = 0 ] && echo PASS || echo FAIL)"
exit $fails
