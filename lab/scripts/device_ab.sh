#!/usr/bin/env bash
# device_ab.sh: repeated A/B of a few bench cells in one device call (stage "ab" of device_run.sh), from the repo
# root with OUT set. AB_SUITE (default attention) is run AB_RUNS times (default 3) with --only "$AB_ONLY"
# (required: '|'-separated "name@group" substrings), each run its own process and results folder under
# $OUT/ab_<i>; the selected cells' table lines of every run are printed last, so run-to-run spread and the
# A/B difference can be read side by side.
# AB_SUITE is a `forge bench` suite (attention, gemm, gemm-epi, ops: run as `build/cuda/forge bench SUITE --device
# cuda`) or a `forge-lab bench` command (attention-variants, gemm-bf16-variants, gemm-fp8, gemm-mma: run as
# `build/cuda/forge-lab bench SUITE`); AB_ARGS adds options to every run (e.g. "--c2 none", "--tn-splits 4").
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs}"
: "${AB_ONLY:?set AB_ONLY to the --only patterns of the cells to compare}"
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SUITE=${AB_SUITE:-attention}
RUNS=${AB_RUNS:-3}
LAB=build/cuda/forge-lab
if [ -x "$LAB" ] && "$LAB" --help | awk '$1 == "bench" {print $2}' | grep -qx -- "$SUITE"; then
    CMD=("$LAB" bench "$SUITE")
else
    CMD=(build/cuda/forge bench "$SUITE" --device cuda)
fi
# shellcheck disable=SC2206
EXTRA=(${AB_ARGS:-})
fails=0
for i in $(seq 1 "$RUNS"); do
    timeout 120 "${CMD[@]}" --reps 30 --only "$AB_ONLY" --results "$OUT/ab_$i" ${EXTRA[@]+"${EXTRA[@]}"} \
        >"$OUT/ab_$i.txt" 2>&1 || fails=1
done
echo "==== A/B: ${CMD[*]}, --only $AB_ONLY, $RUNS runs"
for i in $(seq 1 "$RUNS"); do
    echo "-- run $i"
    grep -E " ok | garbage | failed " "$OUT/ab_$i.txt" | grep -vE "^\s*$" | cut -c1-160
done
exit $fails
