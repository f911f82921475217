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
# included, overran 90 s) and the dW C192 kernel. Build for it with a long mbarrier-wait timeout
# (make cuda EXTRA_NVFLAGS=-DWGMMA_WAIT_TIMEOUT_NS=120000000000ull): racecheck serialises warps, and the default
# 10 s trap fired once in a warp-specialised kernel (lab/notes/2026-12-01.md, session 5). The gemm_fp8 list is not
# racechecked: its 2-CTA cluster kernels crash racecheck ("failed to handle a hardware exception") even when not
# instrumented.
for spec in "memcheck flash16" "memcheck gemm_fp8" "synccheck flash16" "racecheck flash16 --kernel-name kns=fb_d" \
    "racecheck gemm_tn --kernel-name kns=gemm_wgmma_bf16_tn_c192"; do
    set -- $spec
    tool=$1 only=$2
    shift 2
    echo "== $tool on forge_gpu_tests --only $only --quick $*"
    timeout 90 "$SAN" --tool "$tool" "$@" --error-exitcode 3 \
        build/cuda/forge_gpu_tests --only "$only" --quick > "$LOGS/san-$tool-$only.log" 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed, " "$LOGS/san-$tool-$only.log" | tail -n 2
    # racecheck: the reports whose write side is the dK/dV producer's lse/delta slot (fb_kv_produce) are known and
    # judged a racecheck limitation (lab/notes/2026-12-01.md, session 4: ordered by the ring's empty barrier, arrived
    # on by one lane per warp after __syncwarp); any other report fails the stage
    if [ "$tool" = racecheck ] && [ $rc -eq 3 ]; then
        races=$(grep -c "Race reported" "$LOGS/san-$tool-$only.log")
        known=$(grep "Race reported" "$LOGS/san-$tool-$only.log" | grep -c "fb_kv_produce")
        if [ "$races" -gt 0 ] && [ "$races" -eq "$known" ] &&
            grep -qE "^[0-9]+ passed, 0 failed" "$LOGS/san-$tool-$only.log"; then
            echo "   racecheck: $races report(s), all the known lse/delta slot of fb_kv_produce" \
                "(lab/notes/2026-12-01.md): not counted"
            rc=0
        fi
    fi
    # the first reports, so a failure explains itself in the stage log
    [ $rc -eq 0 ] || grep -m 40 -E "^=========" "$LOGS/san-$tool-$only.log"
    echo "   rc=$rc"
    [ $rc -eq 0 ] || fails=1
done
echo "== device_sanitize: $([ $fails = 0 ] && echo PASS || echo FAIL)"
exit $fails
