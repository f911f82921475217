#!/usr/bin/env bash
# device_fp8.sh: the fp8 GEMM rung on the GPU machine (an H200), from the repo
# root, with OUT set to a folder whose files come back. Binaries are prebuilt
# (make cuda ARCH=x86-64-v3); nothing is compiled here.
#
# 0. forge_gpu_tests with FORGE_GPU_TESTS_ONLY=gemm_fp8: forge_gemm_fp8_nt /
#    forge_gemm_tf32_nt vs a double reference on small odd shapes + refusals
#    ($OUT/gpu_tests_fp8.log; "N passed, 0 failed").
# 1. `forge bench gemm-fp8 --reps 30`: every cell checked against float64 and
#    timed (cuBLASLt fp8 baseline, forge fp8 e4m3 / e5m2xe4m3 promoted,
#    fast-accum, bf16 out, forge bf16 on the same values). Log in
#    $OUT/gemm_fp8.log, the CSVs (results/<date>_<commit>/gemm_fp8*.csv) copied
#    to $OUT.
# 2. check_sass.sh: QGMMA present in every gemm_wgmma_fp8_kernel instantiation
#    (needs cuobjdump; skipped, not failed, when there is none).
# Each step under its own timeout; whole script < 3 minutes. Exit 1 if the
# tests or the bench failed (a cell garbage or failed) or the SASS check failed.
set -u -o pipefail
OUT=${OUT:-/tmp/forge-fp8-out}
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0

t0=$(date +%s)
FORGE_GPU_TESTS_ONLY=gemm_fp8 timeout --signal=TERM --kill-after=10 60 build/cuda/forge_gpu_tests 2>&1 | tee "$OUT/gpu_tests_fp8.log"
rc=$?
echo "gpu tests (gemm_fp8 only): rc=$rc ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/summary.txt"
[ $rc -eq 0 ] || fails=1

t0=$(date +%s)
timeout --signal=TERM --kill-after=10 150 build/cuda/forge bench gemm-fp8 --reps 30 2>&1 | tee "$OUT/gemm_fp8.log"
rc=$?
echo "gemm-fp8 bench: rc=$rc ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/summary.txt"
[ $rc -eq 0 ] || fails=1
for f in results/*/gemm_fp8*.csv; do
    [ -f "$f" ] && cp "$f" "$OUT/"
done

timeout 60 sh scripts/check_sass.sh build/cuda/forge > "$OUT/check_sass.log" 2>&1
rc=$?
grep -E "gemm_wgmma_fp8|passed" "$OUT/check_sass.log"
case $rc in
    0) echo "check_sass: pass" | tee -a "$OUT/summary.txt" ;;
    2) echo "check_sass: skipped (no cuobjdump or binary; see check_sass.log)" | tee -a "$OUT/summary.txt" ;;
    *) echo "check_sass: FAIL (rc=$rc)" | tee -a "$OUT/summary.txt"; fails=1 ;;
esac
exit $fails
