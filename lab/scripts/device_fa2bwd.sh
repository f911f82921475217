#!/usr/bin/env bash
# device_fa2bwd.sh: the fused bf16 flash backward (src/backend/cuda/flash_attention_bf16_wgmma_bwd_fused.cu, forge's
# default at D = 64) on the GPU machine (device_run.sh stage "fa2bwd"), from the repo root with OUT set, build/cuda
# and build/cuda-san unpacked (scripts/device_prepare.sh):
#   1. `forge_gpu_tests --only flash16` (the default entries, the fused backward by name with S by the rule and
#      forced to 1/2/3 against float64 and the three-kernel backward, determinism, the refusals);
#   2. `forge-lab bench flash16-bwd-fused --reps 30` (the three-kernel backward vs the fused one, interleaved);
#   3. racecheck and synccheck over `forge_gpu_tests --only flash16 --quick`, limited to the fused kernels
#      (kns=fz_), with build/cuda-san's binary (the 120 s mbarrier-wait bound: racecheck serialises warps).
# Racecheck reports of the producer's lse/delta slot (fz_produce, as fb_kv_produce's: ordered by the ring's empty
# barrier) are counted apart; any other report fails. A table last.
set -u -o pipefail
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SAN=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
TESTS=build/cuda/forge_gpu_tests
TESTS_SAN=build/cuda-san/forge_gpu_tests
[ -x "$TESTS_SAN" ] || TESTS_SAN=$TESTS
names=()
results=()
fails=0
record() { # NAME RC
    names+=("$1")
    case $2 in 0) results+=(pass) ;; 124 | 137) results+=(timeout); fails=1 ;; *) results+=("fail(rc=$2)"); fails=1 ;; esac
}
timeout 90 "$TESTS" --only flash16 >"$OUT/fa2bwd-test.log" 2>&1
rc=$?
grep -E "^FAIL|passed, " "$OUT/fa2bwd-test.log" | tail -n 30
record test-flash16 $rc
timeout 60 build/cuda/forge-lab bench flash16-bwd-fused --reps 30 2>&1 | tee "$OUT/fa2bwd-bench.log"
record bench $?
for tool in racecheck synccheck; do
    log=$OUT/fa2bwd-$tool.log
    timeout 90 "$SAN" --tool $tool --error-exitcode 3 --kernel-name kns=fz_ "$TESTS_SAN" --only flash16 --quick \
        >"$log" 2>&1
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
