#!/usr/bin/env bash
# device_profile.sh: Nsight Compute over the cells where forge is still behind its baseline (issues 5 and 6), on
# the GPU machine, from the repo root, with OUT set. Binaries prebuilt (make cuda lab ARCH=x86-64-v3).
#
# Each profile is one bench process with --only selecting ONE cell, so the kernels ncu sees
# are that cell's: its gate run (skipped: --launch-skip), then warm-up and timed runs (the first COUNT of
# those, matched by a kernel-name regex that leaves out the harness's reference / check kernels). ncu runs with
# --clock-control none (the device's method: never touch clocks) and these sections: SpeedOfLight,
# ComputeWorkloadAnalysis (pipe utilisation, tensor pipe included), MemoryWorkloadAnalysis (L2 / DRAM),
# WarpStateStats (stall reasons), LaunchStats, Occupancy. One text report per profile in $OUT/ncu_<name>.txt;
# a short table of duration, SM / memory throughput and the top stall per kernel is printed last.
# A profile's suite is a `forge bench` suite (gemm, attention: forge's defaults, run as `build/cuda/forge bench
# SUITE --device cuda`) or a `forge-lab bench` command (gemm-fp8, attention-variants: the variants by name, run as
# `build/cuda/forge-lab bench SUITE`).
# Budget: ~15-25 s per profile (bench set-up + a few replayed kernels); FORGE_PROFILE_LIST picks a subset.
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs}"
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NCU=$(command -v ncu || echo "$CUDA_HOME/bin/ncu")
FORGE=build/cuda/forge
LAB=build/cuda/forge-lab
LAB_SUITES=" $("$LAB" --help 2>/dev/null | awk '$1 == "bench" {print $2}' | tr '\n' ' ') "
SECTIONS=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
    --section WarpStateStats --section LaunchStats --section Occupancy)
# FORGE_PROFILE_SOURCE=1: also SourceCounters (the top stall locations by SASS line; a few more replay passes)
[ "${FORGE_PROFILE_SOURCE:-0}" = 1 ] && SECTIONS+=(--section SourceCounters)
# cuBLAS / cuBLASLt kernel names on sm_90 (nvjet_*, sm90_xmma_*, cutlass*, their split-K reductions). The gemm-fp8
# suite plans cuBLASLt (a probe launch) only for shapes whose cublaslt cell is selected, so skip 1 is its gate run
# (the first profile of session 4 caught another shape's probe before this was so).
LIB_RE='nvjet|xmma|cutlass|splitK|Reduce'

# name suite cell@group kernel-regex skip count
PROFILES=(
    "dw_fc_forge|gemm|forge_wgmma_bf16@bf16 tn M=3072 N=768 K=32768|gemm_wgmma_bf16_tn|gemm_splitk_reduce|2|2"
    "dw_fc_cublas|gemm|cublas_bf16@bf16 tn M=3072 N=768 K=32768|$LIB_RE|2|2"
    "nt8192_forge|gemm|forge_wgmma_bf16@bf16 nt M=8192 N=8192|gemm_wgmma_bf16_kernel|1|1"
    "nt8192_cublas|gemm|cublas_bf16@bf16 nt M=8192 N=8192|$LIB_RE|1|1"
    "fp8_8192_forge|gemm-fp8|forge_fp8_e4m3@fp8 nt M=8192|gemm_wgmma_fp8|1|1"
    "fp8_8192_cublaslt|gemm-fp8|cublaslt_fp8_e4m3@fp8 nt M=8192|$LIB_RE|1|1"
    "fp8_8192_pipe144|gemm-fp8|forge_fp8_e4m3_pipe144@fp8 nt M=8192|gemm_wgmma_fp8|1|1"
    "fp8_8192_fastacc|gemm-fp8|forge_fp8_e4m3_fastacc@fp8 nt M=8192|gemm_wgmma_fp8|1|1"
    "fp8_8192_pipe144_c2|gemm-fp8|forge_fp8_e4m3_pipe144_c2@fp8 nt M=8192|gemm_wgmma_fp8|1|1"
    "tf32_tall_forge|gemm-fp8|forge_wgmma_tf32@tf32 nt M=65536|gemm_wgmma_tf32|1|1"
    "tf32_tall_cublas|gemm-fp8|cublas_tf32@tf32 nt M=65536|$LIB_RE|1|1"
    "flash_fwd_default|attention|flash_bf16_fwd_default@fwd B=8 H=16 T=4096|fw_fwd|1|1"
    "flash_bwd_default|attention|flash_bf16_fwdbwd_default@fwd+bwd B=8 H=16 T=4096|ff_bwd|1|1"
    "flash_fwdbwd_all|attention|flash_bf16_fwdbwd_default@fwd+bwd B=8 H=16 T=4096|fw_fwd|fa_bwd_delta|ff_bwd|3|3"
    "flash_fwdbwd_all2048|attention|flash_bf16_fwdbwd_default@fwd+bwd B=16 H=16 T=2048|fw_fwd|fa_bwd_delta|ff_bwd|3|3"
    "flash_fwd_gpt2|attention|flash_bf16_fwd_default@fwd B=16 H=12 T=1024|fw_fwd|1|1"
    "flash_bwd_gpt2|attention|flash_bf16_fwdbwd_default@fwd+bwd B=16 H=12 T=1024|ff_bwd|1|1"
    "flash_fwd_512|attention|flash_bf16_fwd_default@fwd B=64 H=6 T=512|fw_fwd|1|1"
    "flash_bwd_512|attention|flash_bf16_fwdbwd_default@fwd+bwd B=64 H=6 T=512|ff_bwd|1|1"
    "flash_fwd_1024|attention|flash_bf16_fwd_default@fwd B=64 H=8 T=1024|fw_fwd|1|1"
    "flash_bwd_1024|attention|flash_bf16_fwdbwd_default@fwd+bwd B=64 H=8 T=1024|ff_bwd|1|1"
    "flash_fwd_2048|attention|flash_bf16_fwd_default@fwd B=16 H=16 T=2048|fw_fwd|1|1"
    "flash_bwd_2048d|attention|flash_bf16_fwdbwd_default@fwd+bwd B=16 H=16 T=2048|ff_bwd|1|1"
    "flash_fwd_base|attention-variants|flash_bf16_fwd_wgmma@fwd B=8 H=16 T=4096|fw_fwd|1|1"
    "flash_fwd_pp|attention-variants|flash_bf16_fwd_wgmma_pp@fwd B=8 H=16 T=4096|fw_fwd|1|1"
    "flash_bwd|attention-variants|flash_bf16_fwdbwd_wgmma2@fwd+bwd B=8 H=16 T=4096|fb_d|2|2"
    "flash_bwd_dkp|attention-variants|flash_bf16_fwdbwd_wgmma2_dkp@fwd+bwd B=8 H=16 T=4096|fb_d|2|2"
    "flash_bwd_2048|attention-variants|flash_bf16_fwdbwd_wgmma2@fwd+bwd B=16 H=16 T=2048|fb_d|2|2"
    "flash_bwd_dkp_2048|attention-variants|flash_bf16_fwdbwd_wgmma2_dkp@fwd+bwd B=16 H=16 T=2048|fb_d|2|2"
)
# tensor-pipe utilisation, where this ncu knows the metric (an unknown --metrics name would fail every run)
"$NCU" --query-metrics --chip gh100 >"$OUT/ncu_query_metrics.log" 2>&1
TENSOR_METRICS=$(awk '{print $1}' "$OUT/ncu_query_metrics.log" |
    grep -E '^sm__pipe_tensor_op_(gmma|hmma)_cycles_active$' | sed 's/$/.avg.pct_of_peak_sustained_active/' | paste -sd, -)
# FORGE_PROFILE_METRICS: more metrics (comma-separated), e.g. the MUFU / FMA / ALU pipes' shares
# (each kept only where this ncu knows its base name)
KNOWN_EXTRA=""
for m in ${FORGE_PROFILE_METRICS//,/ }; do
    grep -qE "^${m%%.*}[[:space:]]" "$OUT/ncu_query_metrics.log" && KNOWN_EXTRA="$KNOWN_EXTRA,$m"
done
ALL_METRICS=$(echo "$TENSOR_METRICS$KNOWN_EXTRA" | sed 's/^,*//; s/,*$//')
EXTRA=()
[ -n "$ALL_METRICS" ] && EXTRA=(--metrics "$ALL_METRICS")
echo "metrics: ${ALL_METRICS:-none found}"
LIST=${FORGE_PROFILE_LIST:-}
fails=0
for p in "${PROFILES[@]}"; do
    IFS='|' read -r -a f <<<"$p"
    n=${#f[@]}
    name=${f[0]} suite=${f[1]} only=${f[2]} skip=${f[$((n - 2))]} count=${f[$((n - 1))]}
    kre=$(IFS='|'; echo "${f[*]:3:$((n - 5))}")
    if [ -n "$LIST" ] && ! echo " $LIST " | grep -q " $name "; then continue; fi
    echo "==== profile $name: $suite, cell $only, kernels /$kre/ skip $skip count $count"
    t0=$(date +%s)
    case $LAB_SUITES in *" $suite "*) cmd=("$LAB" bench "$suite") ;; *) cmd=("$FORGE" bench "$suite" --device cuda) ;; esac
    timeout 120 "$NCU" --clock-control none "${SECTIONS[@]}" ${EXTRA[@]+"${EXTRA[@]}"} \
        -k "regex:$kre" --launch-skip "$skip" --launch-count "$count" \
        "${cmd[@]}" --reps 30 --only "$only" --results /tmp/forge-profile-results >"$OUT/ncu_$name.txt" 2>&1
    rc=$?
    echo "   rc=$rc ($(($(date +%s) - t0)) s), $(grep -c 'Section: GPU Speed Of Light' "$OUT/ncu_$name.txt") kernel(s) profiled"
    [ $rc = 0 ] || fails=1
done

echo
echo "==== profile summary (per profiled kernel: duration, SM / memory throughput %, tensor pipe, top stall)"
for f in "$OUT"/ncu_*.txt; do
    [ -f "$f" ] || continue
    awk -v file="$(basename "$f" .txt)" '
        function flush() {
            if (kname != "")
                printf "%-18s %-30s dur %-12s SM %5s%%  mem %5s%%  tensor %-12s cyc/issue %s%s\n", file, kname, dur, sm,
                    mem, tp, cpi, ex
            dur = sm = mem = cpi = tp = ex = ""
        }
        /^  [A-Za-z_].*\(.*\)x\(.*\)/ { flush(); kname = $1; sub(/[(<].*/, "", kname) }
        /^    Duration/ { dur = $NF " " $(NF-1) }
        /^    Compute \(SM\) Throughput/ { sm = $NF }
        /^    Memory Throughput/ { mem = $NF }
        /sm__pipe_tensor_op_(gmma|hmma)_cycles_active/ { tp = tp $NF "% " }
        /sm__inst_executed_pipe_|smsp__issue_active|sm__pipe_fma_cycles/ { ex = ex " " $1 "=" $NF }
        /^    Warp Cycles Per Issued Instruction/ { cpi = $NF }
        END { flush() }' "$f"
done
exit $fails
