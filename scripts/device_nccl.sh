#!/usr/bin/env bash
# device_nccl.sh: the NCCL communicator's one-rank gate on the GPU machine (device_run.sh stage "nccl"):
# `mpirun -np 1 forge train` through NCCL (with and without --zero1) must equal a plain run bit for bit
# (tools/dist_test.py --one-rank). Needs the CUDA_MPI=1 NCCL=1 build, carried as forge-nccl, and the machine's
# Open MPI.
set -u -o pipefail
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
FORGE=${FORGE_NCCL_BIN:-build/cuda/forge-nccl}
echo "mpirun: $(command -v mpirun || echo 'not found')  $(mpirun --version 2>/dev/null | head -n 1)"
ldd "$FORGE" | grep -E "mpi|nccl|not found"
python3 tools/dist_test.py --one-rank --device cuda --forge "$FORGE" 2>&1 | tee "$OUT/nccl_one_rank.txt"
