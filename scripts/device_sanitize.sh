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
# racecheck instruments only the wgmma backward kernels fb_dq*, fb_dkdv* (the dK/dV P^T handoff through shared
# memory between the two consumer warpgroups; racecheck over every flash kernel, persistent forward grids
# included, overran 90 s)
for spec in "memcheck flash16" "memcheck gemm_fp8" "synccheck flash16" "racecheck flash16 --kernel-name kns=fb_d"; do
    set -- $spec
    tool=$1 only=$2
    shift 2
    echo "== $tool on FORGE_GPU_TESTS_ONLY=$only (quick shapes) $*"
    FORGE_GPU_TESTS_ONLY=$only FORGE_GPU_TESTS_QUICK=1 timeout 90 "$SAN" --tool "$tool" "$@" --error-exitcode 3 \
        build/cuda/forge_gpu_tests > "$LOGS/san-$tool-$only.log" 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed, " "$LOGS/san-$tool-$only.log" | tail -n 2
    # the first reports, so a failure explains itself in the stage log
    [ $rc -eq 0 ] || grep -m 40 -E "^=========" "$LOGS/san-$tool-$only.log"
    echo "   rc=$rc"
    [ $rc -eq 0 ] || fails=1
done
echo "== device_sanitize: $([ $fails = 0 ] && echo PASS || echo FAIL)"
exit $fails
