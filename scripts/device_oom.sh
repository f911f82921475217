#!/usr/bin/env bash
# device_oom.sh: a batch that cannot fit the device at start (device_run.sh stage "oom"): gpt2-124m with
# batch 512 x 1024 must stop with exit status 1 and a message naming the batch and the memory asked for, not a
# CUDA error code.
set -u -o pipefail
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
DATA=${FORGE_GATE_DATA:-.carry/data/ts8192}
log=${OUT:-/tmp}/oom.log
build/cuda/forge train --device cuda --config gpt2-124m --data "$DATA" --out /tmp/forge-oom --steps 1 \
    --batch 512 --seq-len 1024 --eval-every 0 >"$log" 2>&1
rc=$?
tail -n 3 "$log"
if [ $rc -eq 1 ] && grep -q "batch 512 x seq-len 1024" "$log" && grep -q "out of device memory" "$log" &&
    ! grep -qiE "cudaError|error code" "$log"; then
    echo "oom: PASS (exit 1, the message names the batch and the allocation)"
    exit 0
fi
echo "oom: FAIL (exit $rc)"
exit 1
