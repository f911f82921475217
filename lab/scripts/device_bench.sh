#!/usr/bin/env bash
# device_bench.sh: benchmarks on the GPU machine, run by device_run.sh: the per-op times and the training
# throughput with forge's default GEMM path (--matmul fp32) and with cuBLAS (--matmul cublas).
set -u -o pipefail
fails=0
build/cuda/forge bench ops --device cuda || fails=1
build/cuda/forge bench ops --device cuda --matmul cublas || fails=1
build/cuda/forge bench train --device cuda --steps 30 || fails=1 # bf16, the default on cuda
build/cuda/forge bench train --device cuda --steps 30 --matmul cublas || fails=1
exit $fails
