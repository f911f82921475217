#!/usr/bin/env bash
# device_parity_suites.sh: named suites of forge_gpu_tests on the GPU machine (device_run.sh stage "parity_suites"):
# `forge_gpu_tests --only S` for each S of FORGE_PARITY_SUITES (default "decode flash16"), for a call that checks
# changed kernels without the whole parity run.
set -u -o pipefail
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0
for suite in ${FORGE_PARITY_SUITES:-decode flash16}; do
    echo "== forge_gpu_tests --only $suite"
    build/cuda/forge_gpu_tests --only "$suite" >"$OUT/parity-$suite.log" 2>&1 || fails=1
    grep -E "^FAIL|passed, " "$OUT/parity-$suite.log" | tail -n 12
done
exit $fails
