#!/usr/bin/env bash
# device_fp8.sh: the fp8 (and tf32) wgmma GEMM rung on the GPU machine (an H200),
# from the repo root, with OUT set to a folder whose files come back. Runs
# standalone (OUT=... bash lab/scripts/device_fp8.sh) or as a device_run.sh stage
# (FORGE_STAGES=fp8 FORGE_T_FP8=200). Binaries are prebuilt (make cuda
# ARCH=x86-64-v3); nothing is compiled here.
#
# 1. forge_gpu_tests with FORGE_GPU_TESTS_ONLY=gemm_fp8: forge_gemm_fp8_nt /
#    forge_gemm_tf32_nt vs a double reference on small odd shapes + refusals
#    ($OUT/fp8_gpu_tests.log; expect "91 passed, 0 failed": 3 refusals + 4 shapes
#    x 21 modes, incl. [e4m3,pipe], [e4m3,chunk64], [e4m3,chunk128], [e4m3,chunk64c2], the rung-4e
#    direct-store and C+4B modes, + 4 cases at M=5760 N=384 K=128), then the
#    same with FORGE_FP8_PROMOTE_VARIANT=chunk64 (the default-mode cases run the
#    chunk64 kernel: the env path; $OUT/fp8_gpu_tests_chunk64.log) and with
#    =serial (the M=5760 cases take BN 192: its 4-stage TMA-store kernel, 3 bf16
#    boxes per tile; $OUT/fp8_gpu_tests_serial.log).
# 2. `forge bench gemm-fp8 --reps 30`: every cell checked against float64 and
#    timed (rung 4e: forge_fp8_e4m3 / _bf16out / forge_wgmma_tf32 take the
#    TMA-store epilogue, their *_direct twins the direct store), in two runs: FORGE_BENCH_FP8_C2=0 (all but the 2-CTA cluster cells,
#    $OUT/fp8_bench.log) and =only (the cluster cells + baseline + bf16,
#    $OUT/fp8_bench_c2.log); each run's new results folder's CSVs are copied to
#    $OUT/fp8_results/<folder>/.
# 3. check_sass.sh: QGMMA in every gemm_wgmma_fp8_kernel, HGMMA in every
#    gemm_wgmma_tf32_kernel instantiation ($OUT/fp8_sass.log; skipped, not
#    failed, without cuobjdump).
# Each step under its own timeout (45 + 45 + 45 + 240 + 120 + 60 s: < 9.3 minutes;
# as a device_run.sh stage: FORGE_T_FP8=580). Prints a
# summary (also $OUT/fp8_summary.txt); exit 1 if any step failed.
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

step gpu-tests 45 "$OUT/fp8_gpu_tests.log" env FORGE_GPU_TESTS_ONLY=gemm_fp8 build/cuda/forge_gpu_tests || fails=1
step gpu-tests-chunk64 45 "$OUT/fp8_gpu_tests_chunk64.log" \
    env FORGE_GPU_TESTS_ONLY=gemm_fp8 FORGE_FP8_PROMOTE_VARIANT=chunk64 build/cuda/forge_gpu_tests || fails=1
# two bench runs: every cell but the 2-CTA cluster ones, then those (+ baseline and bf16 counterpart), so a
# trap in a cluster kernel cannot take the other cells' results with it
step gpu-tests-serial 45 "$OUT/fp8_gpu_tests_serial.log" \
    env FORGE_GPU_TESTS_ONLY=gemm_fp8 FORGE_FP8_PROMOTE_VARIANT=serial build/cuda/forge_gpu_tests || fails=1
step bench 240 "$OUT/fp8_bench.log" env FORGE_BENCH_FP8_C2=0 build/cuda/forge bench gemm-fp8 --reps 30 || fails=1
# its own results root: the same <date>_<commit>/gemm_fp8.csv name would overwrite the main run's
step bench-c2 120 "$OUT/fp8_bench_c2.log" env FORGE_BENCH_FP8_C2=only build/cuda/forge bench gemm-fp8 --reps 30 \
    --results "$OUT/fp8_results_c2" || fails=1
for d in results/*/; do
    case " $RESULTS_BEFORE " in *" $d "*) ;; *)
        mkdir -p "$OUT/fp8_results/$(basename "$d")"
        cp "$d"gemm_fp8* "$OUT/fp8_results/$(basename "$d")/" 2>/dev/null ;;
    esac
done

step sass 60 "$OUT/fp8_sass.log" sh scripts/check_sass.sh build/cuda/forge > /dev/null
rc=$?
grep -E "gemm_wgmma_(fp8|tf32)_kernel|passed" "$OUT/fp8_sass.log"
case $rc in
    0) ;;
    2) echo "sass: skipped (no cuobjdump; see fp8_sass.log)" >> "$SUMMARY" ;;
    *) fails=1 ;;
esac

echo "==== device_fp8 summary"
cat "$SUMMARY"
grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/fp8_gpu_tests.log" | tail -n 1
echo "== device_fp8: $([ $fails = 0 ] && echo PASS || echo FAIL)"
exit $fails
