#!/usr/bin/env bash
# device_s15.sh: the eighth session's checks and A/B runs on the GPU machine (device_run.sh stage "s15"), from the
# repo root with OUT set. Each check under its own timeout, its log in $OUT/s15-NAME.log; a table last.
#   traj      the same bf16 training run (gpt-10m and gpt-25m on .carry/data/ts8192, FORGE_S15_STEPS steps,
#             16 x 256, graph replay) with the base binary (.carry/bin-base/forge, unpacked to build/base/forge)
#             and this tree's: the logged losses, grad norms and val losses and the final checkpoint's weights
#             and optimizer state must be bitwise equal (a change that keeps the math), FORGE_S15_TRAJ_EXTRA flags given to both
#   flash16   forge_gpu_tests --only flash16 (the bf16 flash kernels against the CPU reference)
#   ops       the op walk of FORGE_S15_OPS
#   gpu       forge_gpu_tests --only S for each suite S of FORGE_S15_ONLY (comma-separated)
#   dwplan    forge-lab bench dw-plan
#   bench     forge bench train --breakdown on FORGE_S15_CASES (no baseline)
#   pdl       forge bench train with --pdl and without, FORGE_S15_ROUNDS alternating rounds
set -u -o pipefail
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T=build/cuda/forge_gpu_tests
L=build/cuda/forge-lab
F=build/cuda/forge
DATA=.carry/data/ts8192
STEPS=${FORGE_S15_STEPS:-200}
if [ -e .carry/bin-base/forge.gz ]; then
    mkdir -p build/base && gunzip -c .carry/bin-base/forge.gz >build/base/forge && chmod +x build/base/forge
fi
names=() results=() secs=()
check() { # NAME TIMEOUT CMD...
    local name=$1 lim=$2 t0 rc
    shift 2
    t0=$(date +%s)
    timeout "$lim" "$@" >"$OUT/s15-$name.log" 2>&1
    rc=$?
    names+=("$name")
    case $rc in 0) results+=(pass) ;; 124 | 137) results+=("timeout($lim)") ;; *) results+=("fail(rc=$rc)") ;; esac
    secs+=("$(($(date +%s) - t0))")
    echo "== $name: ${results[-1]}"
    grep -E "passed, |FAIL|bitwise|differ" "$OUT/s15-$name.log" | tail -n 6
}
traj() { # the base and this tree's binary on the same runs; losses compared bit for bit
    local fails=0 cfg bin
    for cfg in gpt-10m gpt-25m; do
        for bin in base tree; do
            local exe=$F
            [ "$bin" = base ] && exe=build/base/forge
            # shellcheck disable=SC2086
            "$exe" train --device cuda --precision bf16 --config "$cfg" --data "$DATA" --out "/tmp/s15-$cfg-$bin" \
                --steps "$STEPS" --batch 16 --seq-len 256 --eval-every 100 --eval-batches 4 --lr 6e-4 --seed 1337 \
                --quiet ${FORGE_S15_TRAJ_EXTRA:-} >"$OUT/s15-traj-$cfg-$bin.log" 2>&1 || {
                echo "FAIL train $cfg $bin"
                tail -n 5 "$OUT/s15-traj-$cfg-$bin.log"
                fails=1
            }
        done
        python3 - "/tmp/s15-$cfg-base/log.jsonl" "/tmp/s15-$cfg-tree/log.jsonl" "$cfg" <<'PY' || fails=1
import json, sys
def load(p):
    return [json.loads(l) for l in open(p)]
a, b, cfg = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
keys = ("loss", "grad_norm", "val_loss")
rows = lambda r: [(x.get("step"), k, x[k]) for x in r for k in keys if k in x]
ra, rb = rows(a), rows(b)
diff = [(x, y) for x, y in zip(ra, rb) if x != y]
ok = len(ra) == len(rb) and not diff and len(ra) > 0
print(f"{cfg}: {len(ra)} logged values, base vs tree {'bitwise equal' if ok else 'differ'}"
      + ("" if ok else f" (first: {diff[:2]}, lengths {len(ra)} / {len(rb)})"))
sys.exit(0 if ok else 1)
PY
        local ck f
        ck=$(basename "$(ls -d "/tmp/s15-$cfg-tree"/ckpt_* | tail -n 1)")
        for f in model.safetensors state.safetensors; do
            if cmp -s "/tmp/s15-$cfg-base/$ck/$f" "/tmp/s15-$cfg-tree/$ck/$f"; then
                echo "$cfg: $ck/$f bitwise equal"
            else
                echo "$cfg: $ck/$f differ"
                fails=1
            fi
        done
    done
    return $fails
}
pdl_ab() { # alternating rounds of the bench with PDL (the default) and without
    local r
    for r in $(seq 1 "${FORGE_S15_ROUNDS:-3}"); do
        for mode in on off; do
            local extra=""
            [ "$mode" = on ] && extra=--pdl
            echo "== round $r pdl $mode"
            # shellcheck disable=SC2086
            "$F" bench train --device cuda --precision bf16 --cases "${FORGE_S15_CASES:-gpt2-124m:16x1024}" \
                --steps 20 --results "/tmp/s15-pdl-$r-$mode" $extra 2>&1 | grep -E "tok/s|^gpt|median"
        done
    done
}
export F DATA STEPS OUT
export -f traj pdl_ab
for c in ${FORGE_S15_CHECKS:-traj flash16 dwplan bench}; do
    case $c in
        traj) check traj 150 bash -c traj ;;
        flash16) check flash16 100 "$T" --only flash16 ;;
        ops) check ops 100 "$T" --op "${FORGE_S15_OPS:?}" ;;
        gpu) for suite in ${FORGE_S15_ONLY//,/ }; do check "gpu-$suite" 150 "$T" --only "$suite"; done ;;
        dwplan) check dwplan 120 "$L" bench dw-plan --reps 20 ;;
        bench) check bench 90 "$F" bench train --device cuda --precision bf16 \
            --cases "${FORGE_S15_CASES:-gpt2-124m:16x1024}" --steps 12 --breakdown --results /tmp/s15-bench ;;
        pdl) check pdl 300 bash -c pdl_ab ;;
    esac
done
for f in "$OUT"/s15-dwplan.log "$OUT"/s15-bench.log "$OUT"/s15-pdl.log; do
    [ -e "$f" ] && { echo "---- $(basename "$f")"; grep -vE "^\s*$" "$f" | tail -n 70; }
done
echo
printf '%-18s %-16s %s\n' check result seconds
for i in "${!names[@]}"; do printf '%-18s %-16s %s\n' "${names[$i]}" "${results[$i]}" "${secs[$i]}"; done
for r in "${results[@]}"; do [ "$r" = pass ] || exit 1; done
exit 0
