#!/usr/bin/env bash
# device_pdl_trigger.sh (as run in call4; a record, not a lab script: the build it compares needed a temporary
# `&& !defined(FORGE_PDL_TRIGGER_AT_EXIT)` on forge_pdl_launch_dependents' asm in src/backend/cuda/pdl.cuh, built
# with `make BUILD=build-pdlx EXTRA_NVFLAGS=-DFORGE_PDL_TRIGGER_AT_EXIT build-pdlx/cuda/forge` and carried as
# .carry/bin-pdlx/forge.gz). FORGE_PDL_ROUNDS rounds (default 3), each running `forge bench train` on
# FORGE_PDL_CASES three ways in turn: PDL off, --pdl with the trigger right after each kernel's wait
# (build/cuda/forge), --pdl with no explicit trigger (build/cuda-pdlx/forge).
set -u
: "${OUT:?set OUT}"
mkdir -p build/cuda-pdlx
gunzip -c .carry/bin-pdlx/forge.gz >build/cuda-pdlx/forge && chmod +x build/cuda-pdlx/forge
CASES=${FORGE_PDL_CASES:-gpt2-124m:16x1024,gpt-25m:16x1024}
for r in $(seq 1 "${FORGE_PDL_ROUNDS:-3}"); do
    for v in off start exit; do
        exe=build/cuda/forge extra=()
        [ "$v" = start ] && extra=(--pdl)
        [ "$v" = exit ] && exe=build/cuda-pdlx/forge && extra=(--pdl)
        "$exe" bench train --device cuda --precision bf16 --cases "$CASES" --steps 20 ${extra[@]+"${extra[@]}"} \
            --results /tmp/pdl-$v >"$OUT/pdl-$v-$r.log" 2>&1 || echo "round $r $v failed"
        grep -E "tok/s" "$OUT/pdl-$v-$r.log" | sed "s/^/$v r$r /"
    done
done
echo "== median tok/s per variant and case (rounds alternate, so each variant saw the same clocks on average)"
python3 - "$OUT" <<'PY'
import glob, re, statistics, sys
rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/pdl-*-*.log")):
    v = f.rsplit("/", 1)[1].split("-")[1]
    for line in open(f):
        m = re.match(r"^(\S+)\s+B=(\d+)\s+T=(\d+)\s+\|\s+(\d+) tok/s", line)
        if m:
            rows.setdefault((m.group(1), v), []).append(int(m.group(4)))
for (case, v), xs in sorted(rows.items()):
    base = rows.get((case, "off"))
    rel = statistics.median(xs) / statistics.median(base) if base else float("nan")
    print(f"{case:10s} {v:6s} median {statistics.median(xs):9.0f} tok/s over {len(xs)} runs, {rel:.4f}x PDL off")
PY
