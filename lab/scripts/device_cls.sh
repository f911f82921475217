#!/usr/bin/env bash
# device_cls.sh: the bf16 classifier's column passes (forge's, ahead, walk, the fast ex2 passes), interleaved (device_run.sh stage "cls"):
# `forge-lab bench cls16t-passes --reps 30`, from the repo root with OUT set and build/cuda unpacked.
set -u -o pipefail
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 120 build/cuda/forge-lab bench cls16t-passes --reps 30 2>&1 | tee "$OUT/cls-passes.log"
