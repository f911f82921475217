#!/bin/sh
# reproduce.sh: regenerates every figure in docs/figures/ from the committed
# benchmark CSVs (results/<date>_<commit>/<suite>.csv + <suite>_samples.csv),
# with gnuplot and python3's standard library only: no GPU, no build.
# `make reproduce` runs it. RESULTS and FIGURES override the folders.
# Figures per suite run: <run>_<suite>_cells.png (every passing cell, grouped,
# with CI error bars) and <run>_<suite>_samples_K.png (per-rep samples and
# histogram of the two fastest and two slowest cells).
set -eu
RESULTS=${RESULTS:-results}
FIGURES=${FIGURES:-docs/figures}
here=$(cd "$(dirname "$0")" && pwd)
command -v gnuplot >/dev/null || { echo "reproduce: gnuplot not found (Debian: apt-get install gnuplot-nox)"; exit 1; }
command -v python3 >/dev/null || { echo "reproduce: python3 not found"; exit 1; }
mkdir -p "$FIGURES"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
for csv in "$RESULTS"/*/*.csv; do
    [ -e "$csv" ] || continue
    # findings hold no timings; *_external.csv holds another program's timings (PyTorch SDPA), not harness output
    case "$csv" in *_samples.csv | *_findings.csv | *_external.csv) continue ;; esac
    run=$(basename "$(dirname "$csv")")
    suite=$(basename "$csv" .csv)
    stem="$FIGURES/${run}_${suite}"
    dir="$tmp/${run}_${suite}"
    python3 "$here/plots/prep.py" "$csv" "$dir"
    cells=$(sed -n 's/^n_cells = //p' "$dir/meta.gp")
    if [ "$cells" -gt 0 ]; then
        gnuplot -e "dir='$dir'; out='${stem}_cells.png'; title_text='$suite, run $run: passing cells'" \
            "$here/plots/cells.gp"
        echo "reproduce: ${stem}_cells.png"
        n=$((n + 1))
    fi
    k=0
    while [ -e "$dir/samples_$k.dat" ]; do
        label=$(sed "s/'/ /g" "$dir/label_$k.txt")
        gnuplot -e "dat='$dir/samples_$k.dat'; hist='$dir/hist_$k.dat'; out='${stem}_samples_$k.png'; title_text='$suite: $label'" \
            "$here/plots/samples.gp"
        echo "reproduce: ${stem}_samples_$k.png"
        n=$((n + 1))
        k=$((k + 1))
    done
done
if [ "$n" -eq 0 ]; then echo "reproduce: no figures (no CSVs under $RESULTS/*/)"; fi
