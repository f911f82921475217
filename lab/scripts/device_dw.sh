#!/usr/bin/env bash
# device_dw.sh: the dW (TN, split-K) GEMM A/B of the partials' store, on the GPU machine, from the repo root with
# OUT set (binaries prebuilt: make cuda ARCH=x86-64-v3). Stage "dw" of device_run.sh (FORGE_T_DW=200).
#   1. FORGE_GPU_TESTS_ONLY=gemm_tn: every split-K reduction exact / bit-identical (PASS_TMA lines included)
#   2. forge bench gemm over the TN groups only (FORGE_BENCH_ONLY) with FORGE_GEMM_TN_TILE=192 (the cost model may
#      take the 192 x 192 tile)
#   3. the same with FORGE_GEMM_TN_TILE=128 (the default plan: 128-row tiles)
#   (FORGE_DW_MODES="tma direct" instead A/Bs FORGE_GEMM_TN_STORE: PASS_TMA against PASS)
# Each bench run measures cuBLAS in the same process, so each forge/cuBLAS ratio is a same-run ratio; the two
# runs' forge timings are compared with that in mind. Logs and CSVs under $OUT; summary printed last.
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs}"
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0
FORGE_GPU_TESTS_ONLY=gemm_tn timeout 60 build/cuda/forge_gpu_tests 2>&1 | tee "$OUT/dw_parity.txt" || fails=1
MODES=${FORGE_DW_MODES:-192 128}
for mode in $MODES; do
    case $mode in tma | direct) var=FORGE_GEMM_TN_STORE ;; *) var=FORGE_GEMM_TN_TILE ;; esac
    env FORGE_BENCH_ONLY="bf16 tn M=" "$var=$mode" timeout 120 build/cuda/forge bench gemm \
        --device cuda --reps 30 --results "$OUT/dw_results_$mode" 2>&1 | tee "$OUT/dw_bench_$mode.txt" || fails=1
done
echo
echo "==== dW A/B (forge_wgmma_bf16 / cublas_bf16, each from its own run)"
for mode in $MODES; do
    echo "-- $mode"
    grep -E "^(forge_wgmma_bf16|cublas_bf16) .* tn M=" "$OUT/dw_bench_$mode.txt" | cut -c1-175
done
grep -E "^[0-9]+ passed" "$OUT/dw_parity.txt" | tail -n 1
exit $fails
