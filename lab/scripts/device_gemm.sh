#!/usr/bin/env bash
# device_gemm.sh: the GEMM suites on the GPU machine, run by device_run.sh
# (FORGE_STAGES="... gemm ..."): `forge bench gemm` (plain layouts + the fused
# epilogue groups, cuBLAS in the same run), optionally `forge-lab bench gemm-mma`
# (mma.sync bf16/tf32 rung incl. the tf32 NN/TN layouts the trainer's --matmul tf32 uses)
# and `forge-lab bench gemm-bf16-variants` (the bf16 wgmma GEMM's variants next to
# the default in the same groups), then compute-sanitizer memcheck over the
# epilogue edge shapes (`forge bench gemm-epi --quick`).
set -u -o pipefail
fails=0
build/cuda/forge bench gemm --device cuda --reps 30 || fails=1
# the mma.sync ladder (unchanged since its measurement) only on request: it costs a minute of device time
[ "${FORGE_GEMM_MMA:-0}" = 1 ] && { build/cuda/forge-lab bench gemm-mma --reps 20 || fails=1; }
# the bf16 variants only on request (FORGE_GEMM_VARIANTS=1; FORGE_GEMM_VARIANTS_ARGS, e.g. "--tn-splits 4 --only 'bf16 tn'")
if [ "${FORGE_GEMM_VARIANTS:-0}" = 1 ]; then
    # shellcheck disable=SC2086
    eval "build/cuda/forge-lab bench gemm-bf16-variants --reps 30 ${FORGE_GEMM_VARIANTS_ARGS:-}" || fails=1
fi
SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
if [ -x "$SAN" ]; then
    timeout 70 "$SAN" --tool memcheck --error-exitcode 3 \
        build/cuda/forge bench gemm-epi --device cuda --reps 30 --quick --results /tmp/forge-gemm-memcheck \
        > /tmp/memcheck_epi.log 2>&1 || fails=1
    tail -n 3 /tmp/memcheck_epi.log
fi
echo "== device_gemm: $([ $fails = 0 ] && echo PASS || echo FAIL)"
exit $fails
