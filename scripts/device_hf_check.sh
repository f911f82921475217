#!/usr/bin/env bash
# device_hf_check.sh: tools/hf_check.py on the GPU machine (device_run.sh stage "hf_check"): forge's checkpoints
# into transformers and transformers' save_pretrained directories into forge, forge on CUDA (fp32), torch on the GPU.
set -u -o pipefail
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
python3 tools/hf_check.py --forge "${FORGE_BIN:-build/cuda/forge}" --device cuda --work /tmp/forge-hf-check \
    ${FORGE_HF_CHECK_ARGS:-} 2>&1 | tee "$OUT/hf_check.txt"
