#!/usr/bin/env bash
# device_fa2bwd.sh: the fused bf16 flash backward (lab/flash/flash16_bwd_fused.cu) on the GPU machine (device_run.sh
# stage "fa2bwd"), from the repo root with OUT set, build/cuda and build/cuda-san unpacked (scripts/device_prepare.sh):
#   1. `forge-lab test flash16` (float64, forge's wgmma backward, determinism, S forced to 1/2/3);
#   2. `forge-lab bench flash16-bwd-fused --reps 30` (the default backward vs the fused one, interleaved);
#   3. racecheck and synccheck over `forge-lab test flash16 --quick`, limited to the fused kernels (kns=fz_), with
#      build/cuda-san's forge-lab (the 120 s mbarrier-wait bound: racecheck serialises warps); FORGE_FA2BWD_SAN=0
#      skips them (a call without the sanitizer build).
# Racecheck reports of the producer's lse/delta slot (fz_produce, as fb_kv_produce's: ordered by the ring's empty
# barrier) are counted apart; any other report fails. A table last.
set -u -o pipefail
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SAN=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
LAB=build/cuda/forge-lab
LAB_SAN=build/cuda-san/forge-lab
[ -x "$LAB_SAN" ] || LAB_SAN=$LAB
names=()
results=()
fails=0
record() { # NAME RC
    names+=("$1")
    case $2 in 0) results+=(pass) ;; 124 | 137) results+=(timeout); fails=1 ;; *) results+=("fail(rc=$2)"); fails=1 ;; esac
}
timeout 90 "$LAB" test flash16 >"$OUT/fa2bwd-test.log" 2>&1
rc=$?
grep -E "fused|FAIL|passed, " "$OUT/fa2bwd-test.log" | tail -n 30
record test-flash16 $rc
timeout 60 "$LAB" bench flash16-bwd-fused --reps 30 2>&1 | tee "$OUT/fa2bwd-bench.log"
record bench $?
SAN_TOOLS="racecheck synccheck"
[ "${FORGE_FA2BWD_SAN:-1}" = 0 ] && SAN_TOOLS=
for tool in $SAN_TOOLS; do
    log=$OUT/fa2bwd-$tool.log
    timeout 90 "$SAN" --tool $tool --error-exitcode 3 --kernel-name kns=fz_ "$LAB_SAN" test flash16 --quick >"$log" 2>&1
    rc=$?
    if [ $tool = racecheck ] && [ $rc -eq 3 ]; then
        races=$(grep -c "Race reported" "$log")
        known=$(grep "Race reported" "$log" | grep -c "fz_produce")
        [ "$races" -gt 0 ] && [ "$races" -eq "$known" ] && rc=0 && echo "$races fz_produce lse/delta slot report(s)"
    fi
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed, " "$log" | tail -n 3
    [ $rc -eq 0 ] || grep -m 20 -E "^=========" "$log"
    record $tool $rc
done
echo
printf '%-16s %s\n' check result
for i in "${!names[@]}"; do printf '%-16s %s\n' "${names[$i]}" "${results[$i]}"; done
exit $fails
