#!/usr/bin/env bash
# device_bwdvar.sh: the bf16 flash backward's variants by name on the GPU machine (device_run.sh stage "bwdvar";
# OUT set, binaries prebuilt), lab/flash/flash16_bwd_dkdv.cu:
#   1. `forge_gpu_tests --only flash16` (forge's kernels through its entries) and `forge-lab test flash16` (every
#      forward schedule and backward variant by name against float64 and the CPU reference);
#   2. `forge-lab bench attention-variants` over the fwd+bwd cells wgmma2_f (forge's backward), wgmma2 (SPLIT),
#      _dkp (PIPE), _rsa (RSA; _dkp and _rsa at D = 128 only) of lab_flash16_backward_dkdv at issue 18's shapes,
#      one process, BWDVAR_REPS reps (default 30); BWDVAR_CELLS overrides the cell filter.
# Prints a table (TFLOP/s per cell and shape, and each cell over wgmma2_f) last. Budget: ~2 minutes.
set -u -o pipefail
: "${OUT:?set OUT to the folder for logs}"
source lab/scripts/flash_parity.sh
fails=0
flash_parity bwdvar 150 || fails=1
rm -rf /tmp/bwdvar-results
timeout 240 build/cuda/forge-lab bench attention-variants --reps "${BWDVAR_REPS:-30}" --results /tmp/bwdvar-results \
    --only "${BWDVAR_CELLS:-flash_bf16_fwdbwd_wgmma2_f@|flash_bf16_fwdbwd_wgmma2@|flash_bf16_fwdbwd_wgmma2_dkp|flash_bf16_fwdbwd_wgmma2_rsa}" \
    >"$OUT/bwdvar_bench.txt" 2>&1 || fails=1
find /tmp/bwdvar-results -name 'attention-variants*.csv' -exec cp {} "$OUT/" \;
python3 - "$OUT/bwdvar_bench.txt" <<'PY'
import re, sys
rows = {}
for line in open(sys.argv[1]):
    if not line.startswith("flash_bf16_"):
        continue
    f = line.split()
    m = re.search(r"ok\s+\S+ / \S+\s+[0-9.e-]+ \[[^]]*\]\s+([0-9.]+)", line)
    if m:
        rows[(f[0], " ".join(f[2:6]))] = float(m.group(1))
base = {s: v for (c, s), v in rows.items() if c == "flash_bf16_fwdbwd_wgmma2_f"}
print(f"{'cell':34} {'shape':26} {'TFLOP/s':>8} {'/ forge':>8}")
for (c, s), v in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    r = v / base[s] if s in base else float("nan")
    print(f"{c:34} {s:26} {v:8.1f} {r:8.3f}")
PY
exit $fails
