#!/usr/bin/env bash
# device_s30.sh: the call planned in the twenty-third session (lab/notes/flash.md, "2026-12-04 twenty-third session",
# items 1-5), on the GPU machine from the repo root with OUT set, carry [".carry/bin", ".carry/lib", ".carry/v"]
# (variant percall built as the notes say; the n32 kernel and its bench left the lab at 46be5ac). In order:
#   1. lab/scripts/device_variants.sh: forge_gpu_tests --only reset, --only gemm_tn, --only flash16, a recorded
#      gpt2-124m bf16 step (forge bench train), forge-lab test flash16 --quick, forge-lab bench flash16-host and
#      with the tree, then with each variant;
#   2. lab/scripts/sdpa_b2b.py (cuDNN's forward back to back and alone);
#   3. scripts/device_attention_bench.sh (forge against cuDNN) again and again while S30_BUDGET seconds (default
#      540, inside the device tool's 600) leave room for one more run as long as the last, at most S30_MAX_RUNS
#      (default 12); the loop ends at the first run without a result (the next would fail the same way).
# A shorter call: S30_CHECKS (device_s17.sh's checks), S30_LABBENCH, S30_VARS, S30_B2B_TIMEOUT. The device tool
# returns at most 8 files: every log goes into $OUT/s30-logs.tgz, the short table is printed last and saved as
# $OUT/s30-table.txt.
set -u
O=${OUT:?set OUT}
t0=$(date +%s)
export LD_LIBRARY_PATH="$PWD/.carry/lib:/usr/local/cuda/lib64"
budget=${S30_BUDGET:-540}
L=/tmp/s30-logs
mkdir -p "$O" "$L"
OUT=$O FORGE_S17_CHECKS="${S30_CHECKS:-gpu flash16 bench labquick labbench}" FORGE_S17_ONLY="reset,gemm_tn" \
    FORGE_S17_LABTEST=flash16 FORGE_S17_LABBENCH="${S30_LABBENCH:-flash16-host --reps 30}" \
    VARS="${S30_VARS:-percall}" bash lab/scripts/device_variants.sh >"$L/s30-variants.log" 2>&1
timeout "${S30_B2B_TIMEOUT:-90}" python3 lab/scripts/sdpa_b2b.py >"$L/s30-b2b.log" 2>&1
n=0 last=60
while [ $(($(date +%s) - t0 + last + 15)) -lt "$budget" ] && [ "$n" -lt "${S30_MAX_RUNS:-12}" ]; do
    n=$((n + 1))
    s=$(date +%s)
    FORGE_ATTN_ROUNDS=${S30_ROUNDS:-12} FORGE_ATTN_REPS=${S30_REPS:-8} timeout 200 bash scripts/device_attention_bench.sh \
        >"$L/s30-attn$n.log" 2>&1
    last=$(($(date +%s) - s))
    grep -q "speed-up" "$L/s30-attn$n.log" || break
done
# what device_run.sh / device_variants.sh left in $OUT (logs, archives) joins the logs
for f in "$O"/*; do [ -f "$f" ] && mv "$f" "$L/"; done
python3 - "$L" <<'EOF' | tee "$O/s30-table.txt"
import glob, os, re, sys
o = sys.argv[1]
def lines(path):
    try:
        return open(path, errors="replace").read().splitlines()
    except OSError:
        return []
print("== checks (device_s17.sh; pass / fail / timeout)")
for l in lines(os.path.join(o, "run.log")):
    if re.match(r"^(gpu-|flash16|bench |labq-|bench-)\S*\s+(pass|fail|timeout)", l):
        print("  " + l)
# the tree's bench output is in run.log (device_s17.sh's labbench checks), each variant's in var-NAME-I.log
tree = lines(os.path.join(o, "run.log"))
variants = [(os.path.basename(p)[4:-4], lines(p)) for p in sorted(glob.glob(os.path.join(o, "var-*.log")))]
def show(title, keep):
    print(title)
    for name, ls in [("tree", tree)] + variants:
        for l in ls:
            if keep(l):
                print("  %-10s %s" % (name, l[:150]))
show("== host exposure of a call timed alone (flash16-host, the forward at the five shapes)",
     lambda l: l.startswith("forward (") or "D = 64 forward's parameters" in l)
print("== cuDNN's forward back to back / alone (sdpa_b2b.py)")
for l in lines(os.path.join(o, "s30-b2b.log")):
    if l.startswith("cudnn") or "Error" in l:
        print("  " + l[:160])
print("== forge / cuDNN forward speed-up per attention_bench run (the bar: >= 1.10x at every shape)")
for p in sorted(glob.glob(os.path.join(o, "s30-attn*.log")), key=lambda p: int(re.sub(r"\D", "", os.path.basename(p)) or 0)):
    r = [re.search(r"^(fwd|fwd\+bwd)\s+\(([^)]*)\).*?speed-up ([0-9.]+)x", l) for l in lines(p)]
    fwd = ["(%s) %s" % (m.group(2).replace(" ", ""), m.group(3)) for m in r if m and m.group(1) == "fwd"]
    fb = [m.group(3) for m in r if m and m.group(1) == "fwd+bwd"]
    q = [re.search(r"^(fwd|fwd\+bwd)\s.*back to back:.*speed-up ([0-9.]+)x", l) for l in lines(p)]
    qf = [m.group(2) for m in q if m and m.group(1) == "fwd"]
    qb = [m.group(2) for m in q if m and m.group(1) == "fwd+bwd"]
    print("  %s: fwd %s | fwd+bwd %s" % (os.path.basename(p), ", ".join(fwd) or "no result", ", ".join(fb)))
    if qf:
        print("  %s back to back: fwd %s | fwd+bwd %s" % (" " * len(os.path.basename(p)), ", ".join(qf), ", ".join(qb)))
EOF
tar czf "$O/s30-logs.tgz" -C "$L" .
