#!/usr/bin/env bash
# device_flash32opt.sh: the v2 (register-blocked) fp32 flash kernels vs v1 on
# the GPU machine. Run from the repo root with OUT set; binaries prebuilt in
# build/cuda.
#  1. GPU parity of the flash ops with v2 (default) and with FORGE_FLASH_KERNEL=v1.
#  2. forge bench ops (all op cells; the four attention rows matter) with v2 and
#     v1 at gpt-10m (B=8 T=512 HS=64), T=1024 (B=4) and HS=128 (C=768, B=4 T=512).
#  3. The attention rows of each run side by side ($OUT/summary.txt).
# Exit status 1 if a parity run fails.
set -u -o pipefail
OUT=${OUT:-/tmp/forge-flash32opt-out}
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fails=0
for k in v2 v1; do
    echo "== parity flash ($k)"
    FORGE_FLASH_KERNEL=$k FORGE_GPU_TESTS_ONLY=flash timeout 150 build/cuda/forge_gpu_tests \
        > "$OUT/parity_$k.log" 2>&1 || fails=1
    grep -E "passed|FAIL" "$OUT/parity_$k.log" | tail -5
done
: > "$OUT/summary.txt"
for shape in "8 512 384 6" "4 1024 384 6" "4 512 768 6"; do
    set -- $shape
    for k in v2 v1; do
        tag="B$1_T$2_C$3_$k"
        FORGE_FLASH_KERNEL=$k timeout 170 build/cuda/forge bench ops --device cuda --ops-batch "$1" \
            --ops-seq "$2" --ops-embd "$3" --ops-heads "$4" > "$OUT/bench_$tag.log" 2>&1
        echo "== $tag (rc $?)" | tee -a "$OUT/summary.txt"
        grep -E "^(flash_)?attention_(forward|backward) " "$OUT/bench_$tag.log" | tee -a "$OUT/summary.txt"
    done
done
echo "== device_flash32opt: parity $([ $fails = 0 ] && echo PASS || echo FAIL)"
exit $fails
