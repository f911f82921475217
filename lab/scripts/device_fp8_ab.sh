#!/usr/bin/env bash
# device_fp8_ab.sh: an A/B of builds (or of options) on one bench suite, by default the lab's fp8 GEMM bench
# (`forge-lab bench gemm-fp8`), on the GPU machine, from the repo root, with OUT set. Run-to-run drift of the H200
# (clocks under its power limit: cuBLASLt fp8 at 8192^3 measured 1393-1437 TFLOP/s in one session) is as large as
# the differences being judged, so the labels alternate, ROUNDS times:
#   FORGE_AB_BINS="a:path/to/forge-lab b:build/cuda/forge-lab"  label:binary (a binary.gz is unpacked first); the
#                                                         binaries are forge-lab builds for a lab suite, forge builds
#                                                         for a `forge bench` suite
#   FORGE_AB_ARGS_<label>="--opt VALUE ..."               options of that label's runs (e.g. "--c2 none" against
#                                                         "--c2 all": one binary, two labels)
#   FORGE_AB_ENV_<label>="VAR=VALUE ..."                  environment of that label's runs (no FORGE_* variable
#                                                         selects a kernel any more: variants are the lab's cells)
#   FORGE_AB_SUITE=gemm-fp8                               the bench suite: a forge-lab bench command (gemm-fp8,
#                                                         gemm-mma, gemm-bf16-variants, attention-variants) or a
#                                                         forge one (gemm, gemm-epi, attention: run with --device cuda)
#   FORGE_AB_CELLS="cublaslt_fp8_e4m3 forge_fp8_e4m3 ..."  cells (every cell of the suite if empty)
#   FORGE_AB_GROUP="fp8 nt M=8192"                        the shape group (a substring of it)
#   FORGE_AB_ROUNDS=3
# Each bench run writes its own results root $OUT/ab_<round>_<label>/ (its CSVs two levels down, so they come back
# from the device) and log $OUT/ab_<round>_<label>.log; the table printed last has one row per (cell, shape, label)
# with the TFLOP/s of every round and the ratio to the suite's baseline in that run.
set -u -o pipefail
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
BINS=${FORGE_AB_BINS:?set FORGE_AB_BINS}
SUITE=${FORGE_AB_SUITE:-gemm-fp8}
GROUP=${FORGE_AB_GROUP:-fp8 nt M=8192}
ROUNDS=${FORGE_AB_ROUNDS:-3}
DEV=()
case $SUITE in gemm | gemm-epi | attention | ops) DEV=(--device cuda) ;; esac
only=""
for c in ${FORGE_AB_CELLS:-}; do only="${only:+$only|}$c@$GROUP"; done
[ -n "$only" ] || only="@$GROUP"
for b in $BINS; do
    bin=${b#*:}
    if [ "${bin%.gz}" != "$bin" ]; then gunzip -c "$bin" > "${bin%.gz}" && chmod +x "${bin%.gz}"; fi
done
for r in $(seq 1 "$ROUNDS"); do
    for b in $BINS; do
        label=${b%%:*} bin=${b#*:}
        bin=${bin%.gz}
        envv="FORGE_AB_ENV_$label" argv="FORGE_AB_ARGS_$label"
        # shellcheck disable=SC2086
        env ${!envv:-} timeout 120 "$bin" bench "$SUITE" ${DEV[@]+"${DEV[@]}"} --reps 30 --only "$only" \
            --results "$OUT/ab_${r}_$label" ${!argv:-} >"$OUT/ab_${r}_$label.log" 2>&1 || echo "round $r $label: rc=$?"
    done
done
# the suite's table: <results>/<date>_<commit>/<suite>.csv (gemm_fp8.csv, attention-variants.csv, ...)
for f in "$OUT"/ab_*_*/*/*.csv; do
    case $f in *_samples.csv) continue ;; esac
    [ -f "$f" ] || continue
    run=$(basename "$(dirname "$(dirname "$f")")") # ab_<round>_<label>
    # the header and the edge groups (quoted: their names hold commas) are left out of the table
    awk -F, -v run="${run#ab_}" 'FNR > 1 && $3 !~ /^"/ { split($3, g, " [(]"); printf "%s,%s,%s,%s,%.1f,%.3f\n", $2, g[1], run, $8, $19, $21 }' "$f"
done | sort -t, -k1,1 -k2,2 -k3,3 | awk -F, '{ split($3, p, "_"); key = $1 " | " $2 " [" p[2] "]"
    if (key != last) { if (last != "") print line; line = sprintf("%-60s", key); last = key }
    line = line sprintf("  r%s %s %7.1f (%5.3fx)", p[1], $4 == "ok" ? "" : $4, $5, $6) }
    END { if (last != "") print line }'
