#!/usr/bin/env bash
# device_tnsweep.sh: the split count of the dW (TN) GEMM swept on the GPU
# machine. `forge bench gemm` once per FORGE_GEMM_TN_SPLITS=S (results in
# /tmp, not results/: a sweep is not the suite's record), then the dW rows of
# every run side by side. The cost model's own choice is the S=model row.
# Run from the repo root with OUT set; binaries prebuilt in build/cuda.
set -u -o pipefail
OUT=${OUT:-/tmp/forge-tnsweep-out}
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0
for S in ${FORGE_TNSWEEP_SPLITS:-model 2 3 4 6 8 11}; do
    if [ "$S" = model ]; then unset FORGE_GEMM_TN_SPLITS; else export FORGE_GEMM_TN_SPLITS=$S; fi
    timeout 60 build/cuda/forge bench gemm --device cuda --reps 20 --results "/tmp/tnsweep-$S" \
        > "$OUT/tnsweep_$S.log" 2>&1 || fails=1
    echo "== S=$S"
    grep -E "^(cublas_bf16|forge_wgmma_bf16|forge_wgmma_bf16_fixup) +bf16 tn M=(3072|768|2304) " "$OUT/tnsweep_$S.log" |
        awk '{printf "   %-24s %-32s %8s TFLOP/s %s\n", $1, $3" "$4" "$5" "$6, $(NF-2), $(NF-1)}'
done
unset FORGE_GEMM_TN_SPLITS
echo "== device_tnsweep: $([ $fails = 0 ] && echo PASS || echo FAIL)"
exit $fails
