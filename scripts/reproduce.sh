#!/bin/sh
# reproduce.sh: regenerates the benchmark figures from the committed harness CSVs
# (lab/results/**/<suite>.csv + <suite>_samples.csv.gz; plain CSVs are read too),
# with gnuplot and python3's standard library only: no GPU, no build.
# `make reproduce` runs it. RESULTS (default lab/results) and FIGURES (default
# docs/figures) override the folders.
# Figures per suite CSV: <run>_<suite>_cells.png (every passing cell, grouped,
# with CI error bars) and <run>_<suite>_samples_K.png (per-rep samples and
# histogram of the two fastest and two slowest cells); <run> is the CSV's
# folder relative to RESULTS with '/' as '_'.
set -eu
RESULTS=${RESULTS:-lab/results}
RESULTS=${RESULTS%/}
FIGURES=${FIGURES:-docs/figures}
here=$(cd "$(dirname "$0")" && pwd)
command -v gnuplot >/dev/null || { echo "reproduce: gnuplot not found (Debian: apt-get install gnuplot-nox)"; exit 1; }
command -v python3 >/dev/null || { echo "reproduce: python3 not found"; exit 1; }
[ -d "$RESULTS" ] || { echo "reproduce: no folder $RESULTS"; exit 1; }
mkdir -p "$FIGURES"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the suite CSVs (findings, PyTorch timings, samples and ncu pages are not suites)
python3 "$here/../tools/results_files.py" "$RESULTS" > "$tmp/suites.txt"
n=0
while IFS= read -r csv; do
    rel=${csv#"$RESULTS"/}
    run=$(dirname "$rel" | tr / _)
    suite=$(basename "$rel")
    suite=${suite%.gz}
    suite=${suite%.csv}
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
done < "$tmp/suites.txt"
if [ "$n" -eq 0 ]; then echo "reproduce: no figures (no suite CSVs under $RESULTS)"; fi
