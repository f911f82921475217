#!/usr/bin/env bash
# device_bench.sh: benchmarks on the GPU machine, run by device_run.sh.
set -u -o pipefail
fails=0
build/cuda/forge bench ops --device cuda || fails=1
FORGE_MATMUL=cublas build/cuda/forge bench ops --device cuda || fails=1
build/cuda/forge bench train --device cuda --steps 30 || fails=1
FORGE_MATMUL=cublas build/cuda/forge bench train --device cuda --steps 30 || fails=1
exit $fails
