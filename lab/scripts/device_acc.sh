#!/usr/bin/env bash
# device_acc.sh: the dX residual / C += epilogue through the TMA store (GEMM_EPI_RES) on the GPU machine: the lab's
# store test (default entry = TMA forced, direct = TMA, bitwise, residual rows included) and the C += groups of
# the epilogue bench with the register-store variant next to the default (interleaved, paired ratios). Under 3
# minutes. Writes $OUT/acc_test.log, $OUT/acc_bench.log (+ the results folder device_run.sh copies).
set -u -o pipefail
OUT=${OUT:-/tmp/forge-acc-out}
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0
timeout 60 build/cuda/forge-lab test gemm-bf16 >"$OUT/acc_test.log" 2>&1 || fails=1
grep -E "epi_store.*(residual|FAIL)|passed, " "$OUT/acc_test.log" | tail -n 12
timeout 120 build/cuda/forge-lab bench gemm-bf16-variants --only "C +=" --reps 30 >"$OUT/acc_bench.log" 2>&1 || fails=1
grep -E "^(cell|forge|cublas)|C \+=" "$OUT/acc_bench.log" | tail -n 30
exit $fails
