#!/usr/bin/env python3
"""prep.py: turns one suite's harness CSVs into gnuplot data files (stdlib only).

Usage: prep.py SUITE_CSV OUT_DIR   (SUITE_CSV and its samples plain or gzipped: tools/results_files.py)
Writes into OUT_DIR:
  cells.dat     one line per passing cell, grouped: x, value, low, high, group index, "group: cell"
                (value is TFLOP/s with its CI when every passing cell has flops > 0, else median ms)
  meta.gp       gnuplot variables: ylabel, logscale flag, number of sample plots
  samples_K.dat rep, ms for sample plot K (the two fastest and the two slowest passing cells:
                small and large problems, where clock-state effects differ)
  hist_K.dat    bin centre, count (20 bins between min and max)
  label_K.txt   the cell's name and group
Garbage and failed cells are excluded: they never enter a figure.
"""
import csv
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from results_files import open_text, samples_of  # noqa: E402


def main(suite_csv, out_dir):
    with open_text(suite_csv) as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    samples = {}
    sp = samples_of(suite_csv)
    if sp:
        with open_text(sp) as f:
            for r in csv.DictReader(f):
                samples.setdefault((r["cell"], r["group"]), []).append((int(r["rep"]), float(r["ms"])))
    os.makedirs(out_dir, exist_ok=True)
    use_tflops = bool(rows) and all(float(r["flops"] or 0) > 0 for r in rows)
    groups = []
    for r in rows:
        if r["group"] not in groups:
            groups.append(r["group"])
    x = 0
    with open(os.path.join(out_dir, "cells.dat"), "w") as f:
        for gi, g in enumerate(groups):
            for r in (r for r in rows if r["group"] == g):
                med, lo, hi = float(r["median_ms"]), float(r["ci_lo_ms"]), float(r["ci_hi_ms"])
                if use_tflops:
                    fl = float(r["flops"])
                    val, low, high = fl / (med / 1000) / 1e12, fl / (hi / 1000) / 1e12, fl / (lo / 1000) / 1e12
                else:
                    val, low, high = med, lo, hi
                label = ("%s: %s" % (g, r["cell"])) if r["cell"] != g else g
                f.write('%d %.17g %.17g %.17g %d "%s"\n' % (x, val, low, high, gi, label.replace('"', "'")))
                x += 1
            x += 1  # a gap between groups
    meds = sorted(rows, key=lambda r: float(r["median_ms"]))
    picks = []
    for r in meds[:2] + meds[-2:]:
        if r not in picks and (r["cell"], r["group"]) in samples:
            picks.append(r)
    for k, r in enumerate(picks):
        xs = [ms for _, ms in sorted(samples[(r["cell"], r["group"])])]
        with open(os.path.join(out_dir, "samples_%d.dat" % k), "w") as f:
            for i, ms in enumerate(xs):
                f.write("%d %.17g\n" % (i, ms))
        lo, hi = min(xs), max(xs)
        nb = 20
        width = (hi - lo) / nb if hi > lo else 1.0
        counts = [0] * nb
        for v in xs:
            counts[min(int((v - lo) / width), nb - 1) if hi > lo else 0] += 1
        with open(os.path.join(out_dir, "hist_%d.dat" % k), "w") as f:
            for b, c in enumerate(counts):
                f.write("%.17g %d %.17g\n" % (lo + (b + 0.5) * width, c, width))
        with open(os.path.join(out_dir, "label_%d.txt" % k), "w") as f:
            f.write("%s [%s], median %.4g ms" % (r["cell"], r["group"], float(r["median_ms"])))
    with open(os.path.join(out_dir, "meta.gp"), "w") as f:
        f.write('ylabel = "%s"\n' % ("TFLOP/s (median, 95% bootstrap CI)" if use_tflops
                                      else "median ms (95% bootstrap CI), log scale"))
        f.write("use_log = %d\n" % (0 if use_tflops else 1))
        f.write("n_cells = %d\n" % len(rows))
        f.write("n_samples = %d\n" % len(picks))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
