#!/usr/bin/env bash
# device_sanitize.sh: compute-sanitizer over the GPU parity suite and one training step of each matmul mode the
# trainer has (device_run.sh stage "sanitize"), from the repo root with OUT set and the binaries of
# scripts/device_prepare.sh unpacked: build/cuda (the product) and build/cuda-san (the same code built with
# WGMMA_WAIT_TIMEOUT_NS = 120 s: racecheck serialises warps, and the default 10 s mbarrier-wait trap can fire in a
# warp-specialised kernel under it).
#   memcheck   forge_gpu_tests --quick (every op of the list, the properties, the kernel suites), and one step
#   synccheck  the same
#   racecheck  the op walk (--only ops --quick), the bf16 flash backward (ff_bwd_kernel), the D = 64 forward
#              (fw_fwd64_kernel), the D = 128 forward (fw_fwd_ov_kernel), the dW C192 kernel,
#              and one step (with build/cuda-san)
# One training step: gpt-10m, batch 2 x 64, in each precision the trainer has (fp32, fp32 with tf32 GEMMs, bf16),
# on the tokenized TinyStories of .carry/data/ts8192. SAN_TOOLS="memcheck synccheck racecheck" picks the tools. Every sanitizer log comes back under $OUT; a summary table last.
set -u -o pipefail
SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
[ -x "$SAN" ] || { echo "compute-sanitizer not found"; exit 1; }
OUT=${OUT:-/tmp/forge-sanitize}
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SAN_BIN=build/cuda-san
[ -x "$SAN_BIN/forge_gpu_tests" ] || SAN_BIN=build/cuda
DATA=${FORGE_GATE_DATA:-.carry/data/ts8192}
T=${FORGE_T_SAN_EACH:-150}
names=()
results=()
fails=0

# run NAME TOOL BINARY_DIR ARGS...: the tool over BINARY_DIR/ARGS, its log in $OUT/san-NAME.log; KERNELS=kns=...
# limits the tool to the kernels whose name holds the string, KERNELS_EXCLUDE=kns=... leaves those out
run() {
    local name=$1 tool=$2 dir=$3
    shift 3
    local extra=()
    [ -n "${KERNELS:-}" ] && extra=(--kernel-name "$KERNELS")
    [ -n "${KERNELS_EXCLUDE:-}" ] && extra+=(--kernel-name-exclude "$KERNELS_EXCLUDE")
    local log="$OUT/san-$name.log"
    echo "== $name: $tool $dir/$*"
    timeout "$T" "$SAN" --tool "$tool" --error-exitcode 3 "${extra[@]}" "$dir/$@" >"$log" 2>&1
    local rc=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^[0-9]+ passed, [0-9]+ failed" "$log" | tail -n 2
    [ $rc -eq 0 ] || grep -m 30 -E "^=========" "$log"
    names+=("$name")
    case $rc in 0) results+=(pass) ;; 124 | 137) results+=("timeout(${T}s)"); fails=1 ;; *) results+=("fail(rc=$rc)"); fails=1 ;; esac
}

step_args() { # one training step of gpt-10m: $1 = fp32 | tf32 | bf16
    local flags="--precision fp32 --matmul fp32"
    [ "$1" = tf32 ] && flags="--precision fp32 --matmul tf32"
    [ "$1" = bf16 ] && flags="--precision bf16"
    echo "forge train --device cuda $flags --config gpt-10m --data $DATA --out /tmp/forge-san-$1 --steps 1 \
--batch 2 --seq-len 64 --eval-every 0 --quiet"
}

# SAN_TOOLS picks the tools (one device call has 10 minutes: split them over calls)
TOOLS=${SAN_TOOLS:-memcheck synccheck racecheck}
want() { case " $TOOLS " in *" $1 "*) return 0 ;; esac; return 1; }
if want memcheck; then
    run memcheck-tests memcheck build/cuda forge_gpu_tests --quick
    for p in fp32 tf32 bf16; do
        # shellcheck disable=SC2046
        run "memcheck-step-$p" memcheck build/cuda $(step_args "$p")
    done
fi
if want synccheck; then
    run synccheck-tests synccheck build/cuda forge_gpu_tests --quick
    for p in fp32 tf32 bf16; do
        # shellcheck disable=SC2046
        run "synccheck-step-$p" synccheck build/cuda $(step_args "$p")
    done
fi
if want racecheck; then
    # racecheck instruments every shared-memory access: the fp32 SIMT GEMM (gemm_kernel, matmul.cu, which the
    # attention ops run too) outruns a stage over the whole walk, so it is checked on its own, over one small step
    KERNELS_EXCLUDE=kns=gemm_kernel run racecheck-ops racecheck "$SAN_BIN" forge_gpu_tests --only ops --quick
    # shellcheck disable=SC2046
    KERNELS=kns=gemm_kernel run racecheck-simt-gemm racecheck "$SAN_BIN" forge train --device cuda --matmul fp32 \
        --config gpt-10m --data "$DATA" --out /tmp/forge-san-simt --steps 1 --batch 1 --seq-len 16 --eval-every 0 \
        --quiet
    # the bf16 flash backward (ff_bwd_kernel: the dS^T exchange and the dQ staging between the consumer and writer
    # warps through shared memory, the row statistics' slots; ff_dq_bf16; racecheck over every flash kernel,
    # persistent forward grids included, outruns the stage) and the dW C192 kernel
    KERNELS=kns=ff_ run racecheck-flash16-bwd racecheck "$SAN_BIN" forge_gpu_tests --only flash16 --quick
    # the D = 64 forward's two CTAs per SM (fw_fwd64_kernel: a producer warp and 5-stage K/V ring per CTA)
    KERNELS=kns=fw_fwd64 run racecheck-flash16-fwd64 racecheck "$SAN_BIN" forge_gpu_tests --only flash16 --quick
    # the D = 128 forward (fw_fwd_ov_kernel: persistent CTAs, a 3-stage K/V ring and Q buffer carried across work
    # items, the warpgroups' ping-pong named barriers, the softmax pinned under P.V by a shared-memory store)
    KERNELS=kns=fw_fwd_ov run racecheck-flash16-fwd128 racecheck "$SAN_BIN" forge_gpu_tests --only flash16 --quick
    KERNELS=kns=gemm_wgmma_bf16_tn_c192 run racecheck-gemm-tn racecheck "$SAN_BIN" forge_gpu_tests --only gemm_tn --quick
    for p in fp32 tf32 bf16; do
        # shellcheck disable=SC2046
        KERNELS_EXCLUDE=kns=gemm_kernel run "racecheck-step-$p" racecheck "$SAN_BIN" $(step_args "$p")
    done
fi

echo
echo "== sanitize summary"
printf '%-24s %s\n' check result
for i in "${!names[@]}"; do printf '%-24s %s\n' "${names[$i]}" "${results[$i]}"; done
echo "device_sanitize: $([ $fails = 0 ] && echo PASS || echo FAIL)"
exit $fails
