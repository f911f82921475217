#!/usr/bin/env bash
# device_ncu_source.sh: one Nsight Compute report per named cell with the per-SASS-instruction view (where the
# warps stall), on the GPU machine, from the repo root, with OUT set; binaries prebuilt (make cuda lab
# ARCH=x86-64-v3).
#   FORGE_NCU_CELLS="name|suite|cell@group|kernel-regex|skip ..." (space-separated entries, '~' for a space inside
#   one, since the attention groups' names hold a '+' (fwd+bwd); names as in device_profile.sh's PROFILES). suite: a `forge bench` suite (gemm, gemm-epi, attention: run as
#   `forge bench SUITE --device cuda`) or a `forge-lab bench` command (gemm-fp8, gemm-mma, gemm-bf16-variants,
#   attention-variants); cell@group is its --only. Per entry: $OUT/<name>.ncu-rep (sections WarpStateStats,
#   SourceCounters, SpeedOfLight; --clock-control none), $OUT/<name>_source.csv (ncu --page source --print-source
#   sass: stall samples per instruction) and $OUT/<name>_raw.csv (every metric, incl. the smsp__pcsamp stall
#   reasons).
# Read the CSVs off the device (e.g. sort the source page by its stall-sample column).
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs}"
: "${FORGE_NCU_CELLS:?set FORGE_NCU_CELLS}"
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NCU=$(command -v ncu || echo "$CUDA_HOME/bin/ncu")
# FORGE_BIN / FORGE_LAB_BIN: another build of forge / forge-lab (a .gz is unpacked first)
unpack() { if [ "${1%.gz}" != "$1" ]; then gunzip -c "$1" >"${1%.gz}" && chmod +x "${1%.gz}"; fi; echo "${1%.gz}"; }
FORGE=$(unpack "${FORGE_BIN:-build/cuda/forge}")
LAB=$(unpack "${FORGE_LAB_BIN:-build/cuda/forge-lab}")
LAB_SUITES=" $("$LAB" --help 2>/dev/null | awk '$1 == "bench" {print $2}' | tr '\n' ' ') "
fails=0
for e in $FORGE_NCU_CELLS; do
    IFS='|' read -r name suite only kre skip <<<"${e//\~/ }"
    echo "==== $name: $suite, cell $only, kernels /$kre/ skip $skip"
    case $LAB_SUITES in *" $suite "*) cmd=("$LAB" bench "$suite") ;; *) cmd=("$FORGE" bench "$suite" --device cuda) ;; esac
    timeout 150 "$NCU" --clock-control none --section WarpStateStats \
        --section SourceCounters --section SpeedOfLight --import-source no -k "regex:$kre" --launch-skip "$skip" \
        --launch-count 1 -f -o "$OUT/$name" "${cmd[@]}" --reps 5 --only "$only" \
        --results /tmp/forge-ncu-results >"$OUT/$name.log" 2>&1 || { echo "   ncu failed"; fails=1; continue; }
    "$NCU" -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass >"$OUT/${name}_source.csv" 2>&1 || fails=1
    "$NCU" -i "$OUT/$name.ncu-rep" --page raw --csv >"$OUT/${name}_raw.csv" 2>&1 || fails=1
    echo "   $(wc -l <"$OUT/${name}_source.csv") source lines"
    [ "${FORGE_NCU_KEEP:-0}" = 1 ] || rm -f "$OUT/$name.ncu-rep" # 9 MB each; FORGE_NCU_KEEP=1 keeps them
done
exit $fails
