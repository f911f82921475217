#!/usr/bin/env bash
# device_ncu_step.sh: the kernels of one bf16 training step, each timed by Nsight Compute (gpu__time_duration,
# --clock-control none: the device's method), grouped by kernel name: where the step's device time goes below the
# op level of `forge bench train --breakdown`. Run on the GPU machine from the repo root with OUT set.
# The first step of `forge bench train` (a warm-up step) is profiled: NCU_STEP_COUNT kernels from its start.
#   NCU_STEP_CASE   CONFIG:BxT (default gpt2-124m:16x1024)
#   NCU_STEP_COUNT  kernels to profile (default 800: one gpt2-124m step is about 700)
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NCU=$(command -v ncu || echo "$CUDA_HOME/bin/ncu")
CASE=${NCU_STEP_CASE:-gpt2-124m:16x1024}
COUNT=${NCU_STEP_COUNT:-800}
"$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base --launch-count "$COUNT" \
    build/cuda/forge bench train --device cuda --precision bf16 --cases "$CASE" --steps 1 \
    --results "$OUT/ncu_results" >"$OUT/ncu_step.csv" 2>"$OUT/ncu_step.err"
echo "ncu exit $?"
python3 lab/scripts/ncu_step_table.py "$OUT/ncu_step.csv"
