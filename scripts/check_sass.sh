#!/bin/sh
# check_sass.sh [BINARY_OR_OBJECT]: which matrix unit each kernel really uses.
#
# Disassembles BINARY (default build/cuda/forge) with `cuobjdump --dump-sass`,
# splits the listing per function, counts the matrix / FMA opcodes of each
# (HMMA: mma.sync tensor cores; HGMMA: wgmma f16/bf16/tf32; QGMMA: wgmma fp8;
# IMMA: integer mma; FFMA: fp32 FMA), prints a table, and checks every kernel
# named in EXPECT below: the first EXPECT line whose pattern is a substring of
# the function's (mangled) name says which opcode must be present. A kernel
# whose SASS lacks its opcode fails, and its opcode counts say what it got
# instead (e.g. a "wgmma" kernel that ptxas lowered to HMMA). An EXPECT
# pattern that matches no function at all fails too (the kernel is missing
# from the binary), unless the line ends with "optional".
#
# Ends with "N passed, N failed". Exit 0 when all pass, 1 on any failure,
# 2 when cuobjdump is not found (set CUOBJDUMP=/path/to/cuobjdump; Triton's
# wheel carries one under triton/backends/nvidia/bin/) or the binary is
# missing.
#
# To add forge's GEMM kernels later: one line per kernel (name substring,
# required opcode), most specific patterns first.
EXPECT='
char_probe_wgmma_bf16 HGMMA
char_probe_wgmma_fp8  QGMMA
char_probe_mma_       HMMA
char_wgmma_bf16       HGMMA
char_wgmma_fp8        QGMMA
char_mma_             HMMA
char_ffma             FFMA
gemm_wgmma_bf16_kernel HGMMA
gemm_wgmma_fp8_kernel  QGMMA
gemm_wgmma_tf32_kernel HGMMA
gemm_wgmma_tf32_pp_kernel HGMMA
gemm_wgmma_bf16_pp_kernel HGMMA
gemm_wgmma_bf16_nn_kernel HGMMA
gemm_wgmma_bf16_tn_kernel HGMMA
gemm_wgmma_bf16_tn_c192_kernel HGMMA
gemm_simt_bf16_kernel  FFMA
gemm_mma_kernel        HMMA
'

BIN=${1:-build/cuda/forge}
if [ ! -f "$BIN" ]; then
    echo "check_sass: $BIN not found (build it with: make cuda)" >&2
    exit 2
fi

CUOBJ=${CUOBJDUMP:-}
if [ -z "$CUOBJ" ]; then
    for c in cuobjdump "${CUDA_HOME:-/usr/local/cuda}/bin/cuobjdump" /usr/local/cuda/bin/cuobjdump; do
        if command -v "$c" >/dev/null 2>&1; then CUOBJ=$(command -v "$c"); break; fi
    done
fi
if [ -z "$CUOBJ" ] || ! [ -x "$CUOBJ" ]; then
    echo "cuobjdump not found"
    exit 2
fi

SASS=$(mktemp)
trap 'rm -f "$SASS"' EXIT INT TERM
if ! "$CUOBJ" --dump-sass "$BIN" >"$SASS" 2>&1; then
    echo "check_sass: $CUOBJ --dump-sass $BIN failed:" >&2
    head -5 "$SASS" >&2
    exit 2
fi

DEMANGLE=$(command -v cu++filt || command -v c++filt || echo cat)

# Per function: name and opcode counts (an opcode is the first word of an
# instruction, after an optional @predicate, up to its first '.').
awk -v expect="$EXPECT" -v demangle="$DEMANGLE" '
function flush() {
    if (fn == "") return
    nf++
    names[nf] = fn
    for (k = 1; k <= nops; k++) cnt[nf, ops[k]] = c[ops[k]] + 0
    for (k = 1; k <= nops; k++) c[ops[k]] = 0
}
function short(name,   cmd, out) {
    if (demangle == "cat") return name
    cmd = "echo \047" name "\047 | " demangle
    cmd | getline out
    close(cmd)
    sub(/\(.*$/, "", out)
    return out
}
BEGIN {
    nops = split("HMMA HGMMA QGMMA IMMA FFMA", ops, " ")
    for (k = 1; k <= nops; k++) c[ops[k]] = 0
    ne = 0
    n = split(expect, lines, "\n")
    for (i = 1; i <= n; i++) {
        m = split(lines[i], f, " ")
        if (m < 2) continue
        ne++
        pat[ne] = f[1]; req[ne] = f[2]; opt[ne] = (m >= 3 && f[3] == "optional")
        hits[ne] = 0
    }
    fn = ""
}
/Function : / {
    flush()
    fn = $0
    sub(/.*Function : /, "", fn)
    sub(/[ \t\r]+$/, "", fn)
    next
}
fn != "" && /\/\*[0-9a-f]+\*\// {
    line = $0
    sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]*/, "", line)
    sub(/^@!?U?P[T0-9]+[ \t]+/, "", line)
    split(line, w, /[ \t]/)
    op = w[1]
    sub(/\..*$/, "", op)
    sub(/;$/, "", op)
    if (op in c) c[op]++
}
END {
    flush()
    for (k = 1; k <= nops; k++) c[ops[k]] = 0
    printf "%-44s %6s %6s %6s %6s %6s  %-6s %s\n", "kernel", "HMMA", "HGMMA", "QGMMA", "IMMA", "FFMA", "needs", "result"
    pass = 0; fail = 0
    for (i = 1; i <= nf; i++) {
        e = 0
        for (j = 1; j <= ne; j++) if (index(names[i], pat[j]) > 0) { e = j; break }
        verdict = ""
        need = "-"
        if (e > 0) {
            hits[e]++
            need = req[e]
            if (cnt[i, req[e]] > 0) { verdict = "pass"; pass++ }
            else { verdict = "FAIL (no " req[e] ")"; fail++ }
        }
        nm = short(names[i])
        if (length(nm) > 44) nm = substr(nm, 1, 41) "..."
        printf "%-44s %6d %6d %6d %6d %6d  %-6s %s\n", nm, cnt[i, "HMMA"], cnt[i, "HGMMA"], cnt[i, "QGMMA"], \
            cnt[i, "IMMA"], cnt[i, "FFMA"], need, verdict
    }
    for (j = 1; j <= ne; j++)
        if (hits[j] == 0 && !opt[j]) {
            printf "FAIL: no function matches expected pattern \"%s\" (needs %s)\n", pat[j], req[j]
            fail++
        }
    if (nf == 0) { print "FAIL: no functions in the SASS listing"; fail++ }
    printf "%d passed, %d failed\n", pass, fail
    exit(fail > 0 ? 1 : 0)
}' "$SASS"
