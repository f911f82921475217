#!/bin/sh
# check_sass.sh [BINARY...]: which matrix unit each kernel really uses, in the product and in the kernel lab.
#
# Disassembles each BINARY (default: build/cuda/forge build/cuda/forge-lab) with `cuobjdump --dump-sass`, splits
# the listing per function, counts the matrix / FMA opcodes of each (HMMA: mma.sync tensor cores; HGMMA: wgmma
# f16/bf16/tf32; QGMMA: wgmma fp8; IMMA: integer mma; FFMA: fp32 FMA), prints a table per binary, and checks
# every kernel named in EXPECT below. The first EXPECT line whose pattern (an awk extended regular expression)
# matches the function's mangled name says which opcode must be present and where the kernel lives:
#   forge  a kernel of the product (src/): required in build/cuda/forge. forge-lab links the product's library
#          (build/cuda/libforge.a), so where such a kernel is in forge-lab too, its opcode is checked there as well,
#          but it is not required there.
#   lab    a kernel of the lab (lab/: variants, characterization): required in build/cuda/forge-lab; found in the
#          product it fails ("lab kernel in the product": src/ must not include lab/).
# A BINARY whose file name starts with "forge-lab" is checked as the lab, any other as the product. A kernel whose
# SASS lacks its opcode fails, and its opcode counts say what it got instead (e.g. a "wgmma" kernel that ptxas
# lowered to HMMA). An EXPECT pattern that matches no function of the binary it lives in fails too (the kernel is
# missing), unless its line ends with "optional".
#
# Ends with "N passed, N failed" over all binaries. Exit 0 when all pass, 1 on any failure, 2 when cuobjdump is
# not found (set CUOBJDUMP=/path/to/cuobjdump; the PyPI wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm
# carry one and the nvdisasm it needs on PATH) or a binary is missing.
#
# To add a kernel: one line (pattern, opcode, where), most specific patterns first. Patterns match the mangled
# name, so a template instantiation is named by its arguments: fa_fwd_kernel<64, 128> is _Z13fa_fwd_kernelILi64ELi128E
# (ILi<n>E: an int argument, Lb0E / Lb1E: false / true).
EXPECT='
char_probe_wgmma_bf16 HGMMA lab
char_probe_wgmma_fp8  QGMMA lab
char_probe_mma_       HMMA  lab
char_wgmma_bf16       HGMMA lab
char_wgmma_fp8        QGMMA lab
char_mma_             HMMA  lab
char_ffma             FFMA  lab
gemm_wgmma_fp8_kernel_c2                         QGMMA lab
gemm_wgmma_fp8_kernelILi[0-9]+ELi[01]ELi[01]ELi[02456]E QGMMA lab
gemm_wgmma_bf16_tn_kernelILi192ELi0ELi192E       HGMMA lab
gemm_mma_kernelILb0E                             HMMA  lab
fa_fwd_kernelILi[0-9]+ELi128E                    HMMA  lab
fw_fwd_ov_kernelILi128ELi128ELb1E                HGMMA forge
fw_fwd_ov_kernel                                 HGMMA lab
fw_fwd_kernel                                    HGMMA lab
fb_dkdv_kernelILi64ELi0E                         HGMMA lab
fbl_dkdv_split_kernel                            HGMMA lab
gemm_wgmma_bf16_kernel HGMMA forge
gemm_wgmma_fp8_kernel  QGMMA forge
gemm_wgmma_tf32_kernel HGMMA forge
gemm_wgmma_tf32_pp_kernel HGMMA forge
gemm_wgmma_bf16_pp_kernel HGMMA forge
gemm_wgmma_bf16_nn_kernel HGMMA forge
gemm_wgmma_bf16_tn_kernel HGMMA forge
gemm_wgmma_bf16_tn_c192_kernel HGMMA forge
gemm_simt_bf16_kernel  FFMA  forge
gemm_mma_kernel        HMMA  forge
_Z[0-9]+gemm_kernelI   FFMA  forge
fa_fwd_kernel          HMMA  forge
fa_bwd_dkdv_kernel     HMMA  forge
fa_bwd_dq_kernel       HMMA  forge
fw_fwd64_kernel        HGMMA forge
ff_bwd_kernel          HGMMA forge
fb_dq_kernel           HGMMA lab
fb_dkdv_kernel         HGMMA lab
flash_fwd2?_kernel     FFMA  forge
flash_bwd_dq2?_kernel  FFMA  forge
flash_bwd_dkv2?_kernel FFMA  forge
'

[ $# -gt 0 ] || set -- build/cuda/forge build/cuda/forge-lab
for b in "$@"; do
    if [ ! -f "$b" ]; then
        echo "check_sass: $b not found (build it with: make cuda lab)" >&2
        exit 2
    fi
done

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

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM

# the dumps in parallel (the lab's takes ~30 s on a build machine core)
i=0
for b in "$@"; do
    i=$((i + 1))
    ("$CUOBJ" --dump-sass "$b" >"$TMP/sass$i" 2>&1; echo $? >"$TMP/rc$i") &
done
wait
i=0
for b in "$@"; do
    i=$((i + 1))
    if [ "$(cat "$TMP/rc$i")" != 0 ]; then
        echo "check_sass: $CUOBJ --dump-sass $b failed:" >&2
        head -5 "$TMP/sass$i" >&2
        exit 2
    fi
done

DEMANGLE=$(command -v cu++filt || command -v c++filt || echo cat)

# check_one SASS ROLE LABEL: the table of one binary; its pass and fail counts are appended to $TMP/totals.
# Per function: name and opcode counts (an opcode is the first word of an instruction, after an optional
# @predicate, up to its first '.').
check_one() {
    awk -v expect="$EXPECT" -v demangle="$DEMANGLE" -v role="$2" -v label="$3" -v tmp="$TMP" '
function flush() {
    if (fn == "") return
    nf++
    names[nf] = fn
    for (k = 1; k <= nops; k++) cnt[nf, ops[k]] = c[ops[k]] + 0
    for (k = 1; k <= nops; k++) c[ops[k]] = 0
}
BEGIN {
    nops = split("HMMA HGMMA QGMMA IMMA FFMA", ops, " ")
    for (k = 1; k <= nops; k++) c[ops[k]] = 0
    ne = 0
    n = split(expect, lines, "\n")
    for (i = 1; i <= n; i++) {
        m = split(lines[i], f, " ")
        if (m < 3) continue
        ne++
        pat[ne] = f[1]; req[ne] = f[2]; home[ne] = f[3]; opt[ne] = (m >= 4 && f[4] == "optional")
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
    # demangled names for the table, all in one demangler process
    if (demangle != "cat" && nf > 0) {
        mf = tmp "/mangled"; df = tmp "/demangled"
        printf "" > mf
        for (i = 1; i <= nf; i++) print names[i] > mf
        close(mf)
        system(demangle " < \"" mf "\" > \"" df "\"")
        for (i = 1; i <= nf && (getline d < df) > 0; i++) { sub(/\(.*$/, "", d); short[i] = d }
        close(df)
    }
    print "==== " label " (" (role == "lab" ? "the lab" : "the product") ")"
    printf "%-44s %6s %6s %6s %6s %6s  %-6s %s\n", "kernel", "HMMA", "HGMMA", "QGMMA", "IMMA", "FFMA", "needs", "result"
    pass = 0; fail = 0
    for (i = 1; i <= nf; i++) {
        e = 0
        for (j = 1; j <= ne; j++) if (names[i] ~ pat[j]) { e = j; break }
        verdict = ""
        need = "-"
        if (e > 0 && home[e] == "lab" && role != "lab") {
            verdict = "FAIL (lab kernel in the product)"; fail++
        } else if (e > 0) {
            if (home[e] == role) hits[e]++
            need = req[e]
            if (cnt[i, req[e]] > 0) { verdict = "pass"; pass++ }
            else { verdict = "FAIL (no " req[e] ")"; fail++ }
        }
        nm = (i in short) && short[i] != "" ? short[i] : names[i]
        if (length(nm) > 44) nm = substr(nm, 1, 41) "..."
        printf "%-44s %6d %6d %6d %6d %6d  %-6s %s\n", nm, cnt[i, "HMMA"], cnt[i, "HGMMA"], cnt[i, "QGMMA"], \
            cnt[i, "IMMA"], cnt[i, "FFMA"], need, verdict
    }
    for (j = 1; j <= ne; j++)
        if (home[j] == role && hits[j] == 0 && !opt[j]) {
            printf "FAIL: no function of %s matches expected pattern \"%s\" (needs %s)\n", label, pat[j], req[j]
            fail++
        }
    if (nf == 0) { print "FAIL: no functions in the SASS listing of " label; fail++ }
    printf "-- %s: %d passed, %d failed\n\n", label, pass, fail
    print pass, fail >> (tmp "/totals")
}' "$1"
}

# check_overlap SASS LABEL: in every kernel whose mangled name matches OVERLAP, the exps of the softmax that the
# source puts between wgmma.wait_group 1 and wait_group 0 must be there in the SASS (MUFU.EX2 after a
# "WARPGROUP.DEPBAR.LE gsb0, 0x1" and before the next "... 0x0"): ptxas otherwise issues the second wait right
# after the first, and nothing overlaps (fw_pin_before_wait, src/backend/cuda/flash_wgmma_common.cuh).
OVERLAP='fw_fwd_ov_kernel'
check_overlap() {
    awk -v pat="$OVERLAP" -v label="$2" -v tmp="$TMP" '
function flush() {
    if (fn != "" && fn ~ pat) {
        if (between > 0) { printf "overlap  %-60s %4d exps between the waits  pass\n", fn, between; pass++ }
        else { printf "overlap  %-60s    0 exps between the waits  FAIL\n", fn; fail++ }
    }
    between = 0; inwin = 0
}
/Function : / { flush(); fn = $0; sub(/.*Function : /, "", fn); sub(/[ \t\r]+$/, "", fn); next }
/WARPGROUP\.DEPBAR\.LE gsb0, 0x1/ { inwin = 1; next }
/WARPGROUP\.DEPBAR\.LE gsb0, 0x0/ { inwin = 0; next }
inwin && /MUFU\.EX2/ { between++ }
END { flush(); printf "-- %s overlap: %d passed, %d failed\n\n", label, pass, fail; print pass + 0, fail + 0 >> (tmp "/totals") }
' "$1"
}

i=0
for b in "$@"; do
    i=$((i + 1))
    case $(basename "$b") in forge-lab*) role=lab ;; *) role=forge ;; esac
    check_one "$TMP/sass$i" "$role" "$b"
    check_overlap "$TMP/sass$i" "$b"
done
awk '{ p += $1; f += $2 } END { printf "%d passed, %d failed\n", p, f; exit(f > 0 ? 1 : 0) }' "$TMP/totals"
