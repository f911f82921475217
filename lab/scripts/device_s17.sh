#!/usr/bin/env bash
# device_s17.sh: the tenth session's checks on the GPU machine (device_run.sh stage "s17"), from the repo root with
# OUT set. Each check under its own timeout, its log in $OUT/s17-NAME.log; a table last.
#   traj      the same bf16 training run (gpt-10m and gpt-25m on .carry/data/ts8192, FORGE_S17_STEPS steps,
#             16 x 256, graph replay) with the base binary (.carry/bin-base/forge, unpacked to build/base/forge)
#             and this tree's. Configs in FORGE_S17_BITWISE (default both) must match bit for bit: the logged
#             losses, grad norms and val losses and the final checkpoint's weights and optimizer state (a change
#             that keeps the math); the others are compared within bf16 tolerance instead (the largest relative
#             loss difference is printed; the final val losses must agree within 1%). FORGE_S17_TRAJ_EXTRA flags
#             are given to both
#   flash16   forge_gpu_tests --only flash16 (the bf16 flash kernels against the CPU reference)
#   ops       the op walk of FORGE_S17_OPS
#   gpu       forge_gpu_tests --only S for each suite S of FORGE_S17_ONLY (comma-separated)
#   dwplan    forge-lab bench dw-plan
#   bench     forge bench train --breakdown on FORGE_S17_CASES (no baseline)
#   pdl       forge bench train with --pdl and without, FORGE_S17_ROUNDS alternating rounds
#   paired    the base binary's forge bench train against the PyTorch baseline (tools/torch_train_bench.py) on
#             FORGE_S17_CASES, FORGE_S17_PAIRED_STEPS rounds (the train_bench stage does the same for this tree's)
#   ab        forge bench train with the base binary and this tree's, FORGE_S17_ROUNDS alternating rounds on
#             FORGE_S17_CASES (the first round with --breakdown: both step's ops in one call)
#   labtest   forge-lab test S for each suite S of FORGE_S17_LABTEST (space-separated)
#   labquick  forge-lab test S --quick for each suite S of FORGE_S17_LABTEST
#   labbench  forge-lab bench ARGS for each entry of FORGE_S17_LABBENCH (entries separated by ';')
#   labbase   the same entries with the base binary's forge-lab (.carry/bin-base/forge-lab), then this tree's
#   fgemm     forge bench gemm (forge's GEMM vs cuBLAS, interleaved) on the cells matching FORGE_S17_GEMM_ONLY
#             (default "gpt2": the step's shapes at 32 x 1024 tokens)
#   sanff     compute-sanitizer (each tool of FORGE_S17_SAN_TOOLS, default memcheck synccheck) over forge_gpu_tests
#             --only flash16 --quick, kernels whose name holds FORGE_S17_SAN_KERNEL (default ff_: the fused flash
#             backward and its dQ conversion; fw_fwd_ov: the D = 128 forward)
#   replay    forge bench train on FORGE_S17_CASES, 30 replayed steps, nothing else (a window for FORGE_S17_SMI)
#   ncu       one gpt2-124m step kernel by kernel (lab/scripts/device_ncu_step.sh; NCU_STEP_* as there)
#   ncul      Nsight Compute over `forge-lab bench ARGS` for each ';'-separated entry of FORGE_S17_NCU_ARGS, kernels
#             matching the same entry of FORGE_S17_NCU_K (first FORGE_S17_NCU_COUNT, default 2): speed of light,
#             pipes (tensor, FMA, ALU, MUFU), issue and the per-issue stall reasons ($OUT/s17-ncul<i>.log)
# With FORGE_S17_SMI=1 nvidia-smi samples the SM clock, power and the clock-event reasons every 100 ms for the whole
# stage ($OUT/s17-smi.csv); each check's window is summarised at the end (median / min SM clock, median power).
set -u -o pipefail
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T=build/cuda/forge_gpu_tests
L=build/cuda/forge-lab
F=build/cuda/forge
DATA=.carry/data/ts8192
STEPS=${FORGE_S17_STEPS:-200}
for b in forge forge-lab; do
    if [ -e .carry/bin-base/$b.gz ]; then
        mkdir -p build/base && gunzip -c .carry/bin-base/$b.gz >build/base/$b && chmod +x build/base/$b
    fi
done
names=() results=() secs=() t_start=() t_end=()
if [ "${FORGE_S17_SMI:-0}" = 1 ]; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
        --format=csv,noheader,nounits -lms 100 >"$OUT/s17-smi.csv" 2>/dev/null &
    smi_pid=$!
fi
check() { # NAME TIMEOUT CMD...
    local name=$1 lim=$2 t0 rc
    shift 2
    t0=$(date +%s)
    t_start+=("$(date +%s.%N)")
    timeout "$lim" "$@" >"$OUT/s17-$name.log" 2>&1
    rc=$?
    t_end+=("$(date +%s.%N)")
    names+=("$name")
    case $rc in 0) results+=(pass) ;; 124 | 137) results+=("timeout($lim)") ;; *) results+=("fail(rc=$rc)") ;; esac
    secs+=("$(($(date +%s) - t0))")
    echo "== $name: ${results[-1]}"
    grep -E "passed, |FAIL|bitwise|differ|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/s17-$name.log" | tail -n 6
}
traj() { # the base and this tree's binary on the same runs; losses compared bit for bit
    local fails=0 cfg bin
    for cfg in gpt-10m gpt-25m; do
        for bin in base tree; do
            local exe=$F
            [ "$bin" = base ] && exe=build/base/forge
            # shellcheck disable=SC2086
            "$exe" train --device cuda --precision bf16 --config "$cfg" --data "$DATA" --out "/tmp/s17-$cfg-$bin" \
                --steps "$STEPS" --batch 16 --seq-len 256 --eval-every 100 --eval-batches 4 --lr 6e-4 --seed 1337 \
                --quiet ${FORGE_S17_TRAJ_EXTRA:-} >"$OUT/s17-traj-$cfg-$bin.log" 2>&1 || {
                echo "FAIL train $cfg $bin"
                tail -n 5 "$OUT/s17-traj-$cfg-$bin.log"
                fails=1
            }
        done
        local bitwise=0
        case " ${FORGE_S17_BITWISE-gpt-10m gpt-25m} " in *" $cfg "*) bitwise=1 ;; esac
        python3 - "/tmp/s17-$cfg-base/log.jsonl" "/tmp/s17-$cfg-tree/log.jsonl" "$cfg" "$bitwise" <<'PY' || fails=1
import json, sys
def load(p):
    return [json.loads(l) for l in open(p)]
a, b, cfg, bitwise = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
keys = ("loss", "grad_norm", "val_loss")
rows = lambda r: [(x.get("step"), k, x[k]) for x in r for k in keys if k in x]
ra, rb = rows(a), rows(b)
diff = [(x, y) for x, y in zip(ra, rb) if x != y]
same = len(ra) == len(rb) and len(ra) > 0
rel = max((abs(x[2] - y[2]) / max(abs(x[2]), 1e-12) for x, y in zip(ra, rb) if x[1] != "grad_norm"), default=0.0)
va = [x["val_loss"] for x in a if "val_loss" in x]
vb = [x["val_loss"] for x in b if "val_loss" in x]
vrel = abs(va[-1] - vb[-1]) / va[-1] if va and vb else float("inf")
if bitwise:
    ok = same and not diff
    print(f"{cfg}: {len(ra)} logged values, base vs tree {'bitwise equal' if ok else 'differ'}"
          + ("" if ok else f" (first: {diff[:2]}, lengths {len(ra)} / {len(rb)})"))
else:
    ok = same and vrel <= 0.01
    print(f"{cfg}: {len(ra)} logged values, {len(diff)} differ (tolerance run): largest relative loss difference "
          f"{rel:.3e}, final val loss {va[-1] if va else None} vs {vb[-1] if vb else None} ({vrel:.3e}) "
          + ("within 1%" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
        local ck f
        ck=$(basename "$(ls -d "/tmp/s17-$cfg-tree"/ckpt_* | tail -n 1)")
        [ "$bitwise" = 1 ] || continue
        for f in model.safetensors state.safetensors; do
            if cmp -s "/tmp/s17-$cfg-base/$ck/$f" "/tmp/s17-$cfg-tree/$ck/$f"; then
                echo "$cfg: $ck/$f bitwise equal"
            else
                echo "$cfg: $ck/$f differ"
                fails=1
            fi
        done
    done
    return $fails
}
pdl_ab() { # alternating rounds of the bench with --pdl and without (the default)
    local r
    for r in $(seq 1 "${FORGE_S17_ROUNDS:-3}"); do
        for mode in on off; do
            local extra=""
            [ "$mode" = on ] && extra=--pdl
            echo "== round $r pdl $mode"
            # shellcheck disable=SC2086
            "$F" bench train --device cuda --precision bf16 --cases "${FORGE_S17_CASES:-gpt2-124m:16x1024}" \
                --steps 20 --results "/tmp/s17-pdl-$r-$mode" $extra 2>&1 | grep -E "tok/s|^gpt|median"
        done
    done
}
base_ab() { # alternating rounds of the bench with the base binary and this tree's
    local r bin
    for r in $(seq 1 "${FORGE_S17_ROUNDS:-3}"); do
        for bin in base tree; do
            local exe=$F extra=""
            [ "$bin" = base ] && exe=build/base/forge
            [ "$r" = 1 ] && extra=--breakdown
            echo "== round $r $bin"
            # shellcheck disable=SC2086
            "$exe" bench train --device cuda --precision bf16 --cases "${FORGE_S17_CASES:-gpt2-124m:16x1024}" \
                --steps 20 --results "/tmp/s17-ab-$r-$bin" $extra 2>&1 | grep -E "tok/s|^gpt|median|^  [a-z(]"
        done
    done
}
export F DATA STEPS OUT
export -f traj pdl_ab base_ab
for c in ${FORGE_S17_CHECKS:-traj flash16 dwplan bench}; do
    case $c in
        traj) check traj 150 bash -c traj ;;
        flash16) check flash16 100 "$T" --only flash16 ;;
        ops) check ops 100 "$T" --op "${FORGE_S17_OPS:?}" ;;
        gpu) for suite in ${FORGE_S17_ONLY//,/ }; do check "gpu-$suite" 150 "$T" --only "$suite"; done ;;
        dwplan) check dwplan 120 "$L" bench dw-plan --reps 20 ;;
        bench) check bench 90 "$F" bench train --device cuda --precision bf16 \
            --cases "${FORGE_S17_CASES:-gpt2-124m:16x1024}" --steps 12 --breakdown --results /tmp/s17-bench ;;
        pdl) check pdl 300 bash -c pdl_ab ;;
        ab) check ab "${FORGE_S17_T_AB:-300}" bash -c base_ab ;;
        labtest) for suite in ${FORGE_S17_LABTEST:?}; do check "lab-$suite" 150 "$L" test "$suite"; done ;;
        labquick) for suite in ${FORGE_S17_LABTEST:?}; do check "labq-$suite" 150 "$L" test "$suite" --quick; done ;;
        labbench)
            IFS=';' read -r -a benches <<<"${FORGE_S17_LABBENCH:?}"
            for b in "${benches[@]}"; do
                # shellcheck disable=SC2086
                set -- $b
                check "bench-$1" "${FORGE_S17_T_LABBENCH:-150}" "$L" bench "$@"
            done
            ;;
        labbase)
            IFS=';' read -r -a benches <<<"${FORGE_S17_LABBENCH:?}"
            for b in "${benches[@]}"; do
                # shellcheck disable=SC2086
                set -- $b
                check "bench-base-$1" "${FORGE_S17_T_LABBENCH:-150}" build/base/forge-lab bench "$@"
                check "bench-$1" "${FORGE_S17_T_LABBENCH:-150}" "$L" bench "$@"
            done
            ;;
        fgemm) check fgemm 200 "$F" bench gemm --device cuda --reps 20 --only "${FORGE_S17_GEMM_ONLY:-gpt2}" \
            --results /tmp/s17-fgemm ;;
        sanff)
            san=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
            for tool in ${FORGE_S17_SAN_TOOLS:-memcheck synccheck}; do
                check "san-$tool" 120 "$san" --tool "$tool" --error-exitcode 3 \
                    --kernel-name "kns=${FORGE_S17_SAN_KERNEL:-ff_}" "$T" --only flash16 --quick
            done
            ;;
        replay) check replay 120 "$F" bench train --device cuda --precision bf16 \
            --cases "${FORGE_S17_CASES:-gpt2-124m:16x1024}" --steps 30 --results /tmp/s17-replay ;;
        ncu) check ncu 200 bash lab/scripts/device_ncu_step.sh ;;
        ncul)
            m=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
            for p in xu fma alu fmaheavy; do m="$m,sm__inst_executed_pipe_$p.avg.pct_of_peak_sustained_active"; done
            m="$m,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_active.avg.per_cycle_active"
            for r in barrier branch_resolving dispatch_stall gmma long_scoreboard math_pipe_throttle membar \
                mio_throttle no_instruction short_scoreboard wait selected sleeping lg_throttle tex_throttle; do
                m="$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
            done
            IFS=';' read -r -a nargs <<<"${FORGE_S17_NCU_ARGS:?}"
            IFS=';' read -r -a nks <<<"${FORGE_S17_NCU_K:?}"
            for i in "${!nargs[@]}"; do
                # shellcheck disable=SC2086
                check "ncul$i" 200 "$(command -v ncu || echo "$CUDA_HOME/bin/ncu")" --clock-control none \
                    --section SpeedOfLight --metrics "$m" -k "regex:${nks[$i]}" \
                    --launch-count "${FORGE_S17_NCU_COUNT:-2}" "$L" bench ${nargs[$i]}
            done
            ;;
        paired) check paired 200 build/base/forge bench train --device cuda --precision bf16 \
            --cases "${FORGE_S17_CASES:-gpt2-124m:16x1024}" --steps "${FORGE_S17_PAIRED_STEPS:-16}" \
            --baseline "python3 tools/torch_train_bench.py" --results /tmp/s17-paired ;;
    esac
done
for f in "$OUT"/s17-bench-*.log "$OUT"/s17-fgemm.log "$OUT"/s17-replay.log "$OUT"/s17-ncu.log "$OUT"/s17-ncul*.log "$OUT"/s17-dwplan.log "$OUT"/s17-bench.log "$OUT"/s17-pdl.log "$OUT"/s17-ab.log "$OUT"/s17-paired.log; do
    [ -e "$f" ] || continue
    echo "---- $(basename "$f")"
    case $f in
        *-ncu.log) head -n 30 "$f" | cut -c1-120 ;;
        *-ncul*.log) grep -E "^  [a-z_].*\(|Duration|pct_of_peak|per_cycle|stalled" "$f" | awk '$NF != "0" && $NF != "0.00"' |
            sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | cut -c1-110 ;;
        *-fgemm.log) grep -E "gpt2|ratio" "$f" | tail -n 40 | cut -c1-160 ;;
        *-bench-*.log) grep -E "ratio|speed|x \[|us|FAIL" "$f" | tail -n 30 ;;
        *) grep -E "tok/s|^== round|paired" "$f" | tail -n 40 ;;
    esac
done
if [ -n "${smi_pid:-}" ]; then
    kill "$smi_pid" 2>/dev/null
    echo "---- SM clock (MHz) and power (W) per check, nvidia-smi every 100 ms"
    for i in "${!names[@]}"; do
        python3 - "$OUT/s17-smi.csv" "${t_start[$i]}" "${t_end[$i]}" "${names[$i]}" <<'PY'
import csv, datetime, statistics, sys
path, t0, t1, name = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
clk, pw, why = [], [], {}
for row in csv.reader(open(path)):
    try:
        t = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except (ValueError, IndexError):
        continue
    if t0 <= t <= t1:
        clk.append(float(row[1])); pw.append(float(row[3])); r = row[5].strip(); why[r] = why.get(r, 0) + 1
if clk:
    print(f"{name:<18} samples {len(clk):4d}  SM clock median {statistics.median(clk):6.0f} min {min(clk):6.0f}  "
          f"power median {statistics.median(pw):6.1f} max {max(pw):6.1f}  reasons {dict(sorted(why.items()))}")
else:
    print(f"{name:<18} no samples")
PY
    done
fi
echo
printf '%-18s %-16s %s\n' check result seconds
for i in "${!names[@]}"; do printf '%-18s %-16s %s\n' "${names[$i]}" "${results[$i]}" "${secs[$i]}"; done
for r in "${results[@]}"; do [ "$r" = pass ] || exit 1; done
exit 0
