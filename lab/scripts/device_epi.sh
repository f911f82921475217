#!/usr/bin/env bash
# device_epi.sh: the fused GEMM epilogues (issue 5) on the GPU machine, from the repo root, binaries prebuilt
# (make cuda ARCH=x86-64-v3). Writes under $OUT:
#   gemm_epi.log, gemm_epi*.csv   `forge bench gemm-epi --reps 30`: every epilogue cell through the harness
#                                 (float64 gate, medians, CIs, ratio vs the group's baseline)
#   memcheck_epi.log              compute-sanitizer memcheck over the edge groups (`forge bench gemm-epi --quick`):
#                                 the scalar / odd-shape load and store paths of every fused epilogue
#   sass.log                      scripts/check_sass.sh build/cuda/forge (HGMMA in every wgmma kernel instantiation
#                                 of the product, where the epilogues live)
#   epi_variants.log, gemm_bf16_variants*.csv   only with FORGE_EPI_VARIANTS=1: `forge-lab bench gemm-bf16-variants
#                                 --only "@epi "`: the epilogue groups with the lab's variants (the direct store
#                                 forced where the library takes the TMA store, the dW C += with the in-kernel
#                                 reduction and stream-K) next to the default cells of the same groups (+150 s)
# Each stage has its own timeout; the whole script stays under 4 minutes (FORGE_EPI_VARIANTS=1: under 7, so
# FORGE_T_EPI=420 as a device_run.sh stage). Exit 1 if a stage failed.
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
# copied now (the memcheck run below writes its quick-shape CSVs under /tmp, not results/)
[ -n "$csv_dir" ] && cp "$csv_dir"/gemm_epi* "$OUT"/ 2>/dev/null

t0=$SECONDS
SAN=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
if [ -x "$SAN" ]; then
    timeout 70 "$SAN" --tool memcheck --error-exitcode 3 \
        build/cuda/forge bench gemm-epi --device cuda --reps 30 --quick --results /tmp/forge-epi-memcheck \
        > "$OUT/memcheck_epi.log" 2>&1
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

if [ "${FORGE_EPI_VARIANTS:-0}" = 1 ]; then
    t0=$SECONDS
    timeout 150 build/cuda/forge-lab bench gemm-bf16-variants --reps 30 --only "@epi " \
        --results /tmp/forge-epi-variants > "$OUT/epi_variants.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && fails=1
    cp /tmp/forge-epi-variants/*/gemm_bf16_variants* "$OUT"/ 2>/dev/null
    summary+="epi variants     rc=$rc  $((SECONDS - t0)) s"$'\n'
fi

sed -n '/^== /,$p' "$OUT/gemm_epi.log" | cut -c1-230 | tail -100
grep -E "ERROR SUMMARY|Invalid|out of bounds" "$OUT/memcheck_epi.log" 2>/dev/null | head -5
printf '%s' "$summary" | tee "$OUT/summary_epi.txt"
exit $fails
