#!/usr/bin/env bash
# device_s14.sh: the seventh session's kernel checks and A/B benches on the GPU machine (device_run.sh stage "s14"),
# from the repo root with OUT set: the GELU backward table and its dbias fusion, the norm backward's ring, the bf16
# ping-pong epilogue, the classifier's fast passes. Each command under its own timeout, its log in $OUT; a table last.
set -u -o pipefail
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T=build/cuda/forge_gpu_tests
L=build/cuda/forge-lab
names=() results=() secs=()
check() { # NAME TIMEOUT CMD...
    local name=$1 lim=$2 t0 rc
    shift 2
    t0=$(date +%s)
    timeout "$lim" "$@" >"$OUT/s14-$name.log" 2>&1
    rc=$?
    names+=("$name")
    case $rc in 0) results+=(pass) ;; 124 | 137) results+=("timeout($lim)") ;; *) results+=("fail(rc=$rc)") ;; esac
    secs+=("$(($(date +%s) - t0))")
    echo "== $name: ${results[-1]}"
    grep -E "passed, |FAIL" "$OUT/s14-$name.log" | tail -n 4
}
for c in ${FORGE_S14_CHECKS:-gelu16 gemm_tn gemm_lab ops bench_gelu bench_gelu_dbias bench_norm bench_cls bench_pp}; do
    case $c in
        gelu16) check gelu16 60 "$T" --only gelu16 ;;
        gemm_tn) check gemm_tn 120 "$T" --only gemm_tn ;;
        gemm_lab) check gemm_lab 120 "$L" test gemm-bf16 ;;
        ops) check ops 150 "$T" --op "${FORGE_S14_OPS:-gelu_backward_bf16,gelu_backward_dbias_bf16,layernorm_backward_bf16,rmsnorm_backward_bf16}" ;;
        bench_gelu) check bench_gelu 60 "$L" bench gelu16-bwd --reps 30 ;;
        bench_gelu_dbias) check bench_gelu_dbias 60 "$L" bench gelu16-bwd-dbias --reps 30 ;;
        bench_norm) check bench_norm 90 "$L" bench norm16-bwd --reps 30 ;;
        bench_cls) check bench_cls 90 "$L" bench cls16t-passes --reps 30 ;;
        bench_pp) check bench_pp 120 "$L" bench pp-bf16-epi --reps 30 ;;
    esac
done
for f in "$OUT"/s14-bench_*.log; do [ -e "$f" ] && { echo "---- $(basename "$f")"; grep -vE "^\s*$" "$f" | tail -n 40; }; done
echo
printf '%-18s %-16s %s\n' check result seconds
for i in "${!names[@]}"; do printf '%-18s %-16s %s\n' "${names[$i]}" "${results[$i]}" "${secs[$i]}"; done
