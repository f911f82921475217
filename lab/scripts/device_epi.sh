#!/usr/bin/env bash
# device_epi.sh: the fused GEMM epilogues (issue 5) on the GPU machine, from the repo root, binaries prebuilt
# (make cuda ARCH=x86-64-v3). Writes under $OUT:
#   gemm_epi.log, gemm_epi*.csv   `forge bench gemm-epi --reps 30`: every epilogue cell through the harness
#                                 (float64 gate, medians, CIs, ratio vs the group's baseline)
#   memcheck_epi.log              compute-sanitizer memcheck over the edge groups (FORGE_GEMM_EPI_QUICK=1):
#                                 the scalar / odd-shape load and store paths of every fused epilogue
#   sass.log                      scripts/check_sass.sh (HGMMA in every wgmma kernel instantiation)
# Each stage has its own timeout; the whole script stays under 4 minutes. Exit 1 if a stage failed.
set -u -o pipefail
OUT=${OUT:-/tmp/forge-epi-out}
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0
summary=""

t0=$SECONDS
timeout 150 build/cuda/forge bench gemm-epi --device cuda --reps 30 > "$OUT/gemm_epi.log" 2>&1
rc=$?
[ $rc -ne 0 ] && fails=1
summary+="bench gemm-epi   rc=$rc  $((SECONDS - t0)) s"$'\n'
csv_dir=$(ls -td results/*/ 2>/dev/null | while read -r d; do [ -f "$d/gemm_epi.csv" ] && { echo "$d"; break; }; done)
# copied now: the memcheck run below writes the same results/<date>_<commit>/gemm_epi*.csv names
[ -n "$csv_dir" ] && cp "$csv_dir"/gemm_epi* "$OUT"/ 2>/dev/null

t0=$SECONDS
SAN=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
if [ -x "$SAN" ]; then
    FORGE_GEMM_EPI_QUICK=1 timeout 70 "$SAN" --tool memcheck --error-exitcode 3 \
        build/cuda/forge bench gemm-epi --device cuda --reps 30 > "$OUT/memcheck_epi.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && fails=1
else
    rc=skipped
fi
summary+="memcheck (edges) rc=$rc  $((SECONDS - t0)) s"$'\n'

t0=$SECONDS
if command -v cuobjdump > /dev/null 2>&1 || [ -x "$CUDA_HOME/bin/cuobjdump" ]; then
    CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || echo "$CUDA_HOME/bin/cuobjdump")} \
        timeout 60 scripts/check_sass.sh build/cuda/forge > "$OUT/sass.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && fails=1
else
    rc=skipped
fi
summary+="check_sass       rc=$rc  $((SECONDS - t0)) s"$'\n'

sed -n '/^== /,$p' "$OUT/gemm_epi.log" | cut -c1-230 | tail -100
grep -E "ERROR SUMMARY|Invalid|out of bounds" "$OUT/memcheck_epi.log" 2>/dev/null | head -5
printf '%s' "$summary" | tee "$OUT/summary_epi.txt"
exit $fails
