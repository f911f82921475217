#!/usr/bin/env bash
# device_fp8_ab.sh: an A/B of forge builds on the fp8 GEMM bench, on the GPU machine, from the repo root, with OUT
# set. Run-to-run drift of the H200 (clocks under its power limit: cuBLASLt fp8 at 8192^3 measured 1393-1437
# TFLOP/s in one session) is as large as the differences being judged, so the builds alternate, ROUNDS times:
#   FORGE_AB_BINS="a:path/to/forge b:build/cuda/forge"   label:binary (a binary.gz is unpacked first)
#   FORGE_AB_ENV_<label>="VAR=VALUE ..."                  environment of that label's runs (e.g. FORGE_FP8_STORE=tma:
#                                                         one binary, two labels)
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
GROUP=${FORGE_AB_GROUP:-fp8 nt M=8192}
ROUNDS=${FORGE_AB_ROUNDS:-3}
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
        envv="FORGE_AB_ENV_$label"
        # shellcheck disable=SC2086
        env ${!envv:-} FORGE_BENCH_ONLY="$only" timeout 120 "$bin" bench gemm-fp8 --reps 30 --results "$OUT/ab_${r}_$label" \
            >"$OUT/ab_${r}_$label.log" 2>&1 || echo "round $r $label: rc=$?"
    done
done
for f in "$OUT"/ab_*_*/*/gemm_fp8.csv; do
    run=$(basename "$(dirname "$(dirname "$f")")") # ab_<round>_<label>
    # edge groups (quoted: their names hold commas) are left out of the table
    awk -F, -v run="${run#ab_}" '$1 == "gemm_fp8" && $3 !~ /^"/ { split($3, g, " [(]"); printf "%s,%s,%s,%s,%.1f,%.3f\n", $2, g[1], run, $8, $19, $21 }' "$f"
done | sort -t, -k1,1 -k2,2 -k3,3 | awk -F, '{ split($3, p, "_"); key = $1 " | " $2 " [" p[2] "]"
    if (key != last) { if (last != "") print line; line = sprintf("%-60s", key); last = key }
    line = line sprintf("  r%s %s %7.1f (%5.3fx)", p[1], $4 == "ok" ? "" : $4, $5, $6) }
    END { if (last != "") print line }'
