#!/usr/bin/env bash
# device_sankernel.sh: compute-sanitizer racecheck, synccheck and memcheck limited to one kernel (device_run.sh
# stage "sankernel"), over `forge_gpu_tests --only SANK_SUITE --quick` (default flash16), for a kernel just
# promoted (the full sweep is scripts/device_sanitize.sh). SANK_KERNEL: a substring of the kernel's name (required;
# --kernel-name kns=...). racecheck runs the sanitizer build (build/cuda-san: a 120 s mbarrier-wait timeout), the
# other two the product build. Each log in $OUT/san-<tool>.log; a summary last.
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs}"
: "${SANK_KERNEL:?set SANK_KERNEL to a substring of the kernel name}"
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SAN=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
SUITE=${SANK_SUITE:-flash16}
fails=0
summary=()
for tool in racecheck synccheck memcheck; do
    dir=build/cuda
    [ $tool = racecheck ] && [ -x build/cuda-san/forge_gpu_tests ] && dir=build/cuda-san
    log="$OUT/san-$tool.log"
    timeout 200 "$SAN" --tool $tool --error-exitcode 3 --kernel-name "kns=$SANK_KERNEL" \
        "$dir/forge_gpu_tests" --only "$SUITE" --quick >"$log" 2>&1
    rc=$?
    [ $rc = 0 ] || fails=1
    summary+=("$tool rc=$rc $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1) | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1)")
done
echo "== sankernel: kernel ~ $SANK_KERNEL, forge_gpu_tests --only $SUITE --quick"
printf '%s\n' "${summary[@]}"
exit $fails
