#!/usr/bin/env bash
# device_gemm.sh: the GEMM suites on the GPU machine, run by device_run.sh
# (FORGE_STAGES="... gemm ..."): `forge bench gemm` (plain layouts + the fused
# epilogue groups, cuBLAS in the same run), `forge bench gemm-mma` (mma.sync
# bf16/tf32 rung incl. the tf32 NN/TN layouts the trainer's --matmul tf32 uses),
# then compute-sanitizer memcheck over the epilogue edge shapes.
set -u -o pipefail
fails=0
build/cuda/forge bench gemm --device cuda --reps 30 || fails=1
# the mma.sync ladder (unchanged since its measurement) only on request: it costs a minute of device time
[ "${FORGE_GEMM_MMA:-0}" = 1 ] && { build/cuda/forge bench gemm-mma --device cuda --reps 20 || fails=1; }
SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
if [ -x "$SAN" ]; then
    FORGE_GEMM_EPI_QUICK=1 timeout 70 "$SAN" --tool memcheck --error-exitcode 3 \
        build/cuda/forge bench gemm-epi --device cuda --reps 30 > /tmp/memcheck_epi.log 2>&1 || fails=1
    tail -n 3 /tmp/memcheck_epi.log
fi
echo "== device_gemm: $([ $fails = 0 ] && echo PASS || echo FAIL)"
exit $fails
