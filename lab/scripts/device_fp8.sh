#!/usr/bin/env bash
# device_fp8.sh: the fp8 (and tf32) wgmma GEMM rung on the GPU machine (an H200),
# from the repo root, with OUT set to a folder whose files come back. Runs
# standalone (OUT=... bash lab/scripts/device_fp8.sh) or as a device_run.sh stage
# (FORGE_STAGES=fp8 FORGE_T_FP8=580). Binaries are prebuilt (make cuda lab
# ARCH=x86-64-v3); nothing is compiled here.
#
# 1. parity: `forge_gpu_tests --only gemm_fp8` (the product's forge_gemm_fp8_nt / forge_gemm_tf32_nt, forge's
#    default kernels, vs a double reference on small odd shapes + refusals; $OUT/fp8_gpu_tests.log), then
#    `forge-lab test gemm-fp8` (every fp8 / tf32 variant by name: the promotion variants pipe, chunk64,
#    chunk128, serial, the 144-wide and 2-CTA cluster kernels, the direct / TMA stores, BN 192 at M=5760 N=384;
#    $OUT/fp8_lab_tests.log).
# 2. `forge-lab bench gemm-fp8 --reps 30`: every cell checked against float64 and timed, in two runs:
#    --c2 none (all but the 2-CTA cluster cells, $OUT/fp8_bench.log) and --c2 only (the cluster cells + baseline
#    + bf16, $OUT/fp8_bench_c2.log, its own results root $OUT/fp8_results_c2); the first run's new results
#    folder's CSVs are copied to $OUT/fp8_results/<folder>/.
# 3. check_sass.sh on build/cuda/forge and build/cuda/forge-lab: QGMMA in every gemm_wgmma_fp8_kernel (the
#    product's instantiations in forge, the variants' in forge-lab), HGMMA in every gemm_wgmma_tf32_kernel
#    instantiation ($OUT/fp8_sass.log; skipped, not failed, without cuobjdump).
# Each step under its own timeout (45 + 60 + 240 + 120 + 90 s: < 9.3 minutes; as a device_run.sh stage:
# FORGE_T_FP8=580). Prints a summary (also $OUT/fp8_summary.txt); exit 1 if any step failed.
set -u -o pipefail
OUT=${OUT:-/tmp/forge-fp8-out}
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
RESULTS_BEFORE=$(echo results/*/)
SUMMARY="$OUT/fp8_summary.txt"
: > "$SUMMARY"
fails=0

# step NAME LIMIT_S LOG CMD...: runs CMD under a timeout, tees LOG, records rc and seconds
step() {
    local name=$1 limit=$2 log=$3 t0 rc
    shift 3
    echo "==== $name: $* (timeout ${limit}s)"
    t0=$(date +%s)
    timeout --signal=TERM --kill-after=10 "$limit" "$@" 2>&1 | tee "$log"
    rc=$?
    echo "$name: rc=$rc ($(( $(date +%s) - t0 )) s)" >> "$SUMMARY"
    return $rc
}

step gpu-tests 45 "$OUT/fp8_gpu_tests.log" build/cuda/forge_gpu_tests --only gemm_fp8 || fails=1
step lab-tests 60 "$OUT/fp8_lab_tests.log" build/cuda/forge-lab test gemm-fp8 || fails=1
# two bench runs: every cell but the 2-CTA cluster ones, then those (+ baseline and bf16 counterpart), so a
# trap in a cluster kernel cannot take the other cells' results with it
step bench 240 "$OUT/fp8_bench.log" build/cuda/forge-lab bench gemm-fp8 --reps 30 --c2 none || fails=1
# its own results root: the same <date>_<commit>/gemm_fp8.csv name would overwrite the main run's
step bench-c2 120 "$OUT/fp8_bench_c2.log" build/cuda/forge-lab bench gemm-fp8 --reps 30 --c2 only \
    --results "$OUT/fp8_results_c2" || fails=1
for d in results/*/; do
    case " $RESULTS_BEFORE " in *" $d "*) ;; *)
        mkdir -p "$OUT/fp8_results/$(basename "$d")"
        cp "$d"gemm_fp8* "$OUT/fp8_results/$(basename "$d")/" 2>/dev/null ;;
    esac
done

step sass 90 "$OUT/fp8_sass.log" sh scripts/check_sass.sh build/cuda/forge build/cuda/forge-lab > /dev/null
rc=$?
grep -E "^====|gemm_wgmma_(fp8|tf32)_kernel|passed" "$OUT/fp8_sass.log"
case $rc in
    0) ;;
    2) echo "sass: skipped (no cuobjdump; see fp8_sass.log)" >> "$SUMMARY" ;;
    *) fails=1 ;;
esac

echo "==== device_fp8 summary"
cat "$SUMMARY"
for log in fp8_gpu_tests fp8_lab_tests; do
    echo "$log: $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/$log.log" | tail -n 1)"
done
echo "== device_fp8: $([ $fails = 0 ] && echo PASS || echo FAIL)"
exit $fails
