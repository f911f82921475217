#!/usr/bin/env bash
# device_clschunk.sh: the bf16 classifier's chunk size, A/B on the GPU machine (device_run.sh stage "clschunk"),
# from the repo root with OUT set. Variant forge binaries (the same tree with other FORGE_CLS_BF16_* constants in
# src/backend/op_list.h, built on the build machine) are carried gzipped in .carry/var/forge-<name>.gz; each runs
# `forge bench train` with the op breakdown, in rounds that alternate with build/cuda/forge (the baseline), so
# drift shows. A table last: per run the step's median ms and the classifier op's ms.
set -u -o pipefail
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
CASES=${FORGE_CLSCHUNK_CASES:-gpt2-124m:16x1024}
ROUNDS=${FORGE_CLSCHUNK_ROUNDS:-2}
mkdir -p build/var
bins=(base)
for f in .carry/var/forge-*.gz; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .gz)
    gunzip -c "$f" >"build/var/$n" && chmod +x "build/var/$n"
    bins+=("${n#forge-}")
done
rows=()
for r in $(seq 1 "$ROUNDS"); do
    for b in "${bins[@]}"; do
        exe=build/cuda/forge
        [ "$b" = base ] || exe=build/var/forge-$b
        log=$OUT/clschunk-$b-r$r.log
        (cd "$OUT" && timeout 120 "$OLDPWD/$exe" bench train --device cuda --precision bf16 --cases "$CASES" \
            --steps 12 --breakdown) >"$log" 2>&1
        rc=$?
        while read -r line; do
            model=$(echo "$line" | awk '{print $1}')
            ms=$(grep -E "^$model B=" "$log" | grep -E " ok " | head -n 1 | sed -E 's/.* ([0-9.]+) \[.*/\1/')
            cls=$(awk -v m="$model" '$0 ~ "^-- "m" .*op by op" {f=1} f && $1 == "classifier_bf16" {print $3; exit}' "$log")
            rows+=("$(printf '%-8s r%-2s %-10s %8s %10s  rc=%s' "$b" "$r" "$model" "$ms" "$cls" "$rc")")
        done < <(grep -E "^[a-z0-9-]+ +B=[0-9]+ +T=[0-9]+ +\| +[0-9]+ tok/s" "$log")
        grep -E "tok/s" "$log" | tail -n 2
    done
done
echo
printf '%-8s %-3s %-10s %8s %10s\n' binary rnd model step_ms cls_ms
printf '%s\n' "${rows[@]}"
