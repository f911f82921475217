#!/usr/bin/env python3
"""ratio_table.py: one line per cell of harness result CSVs, for reading runs side by side.

Usage: python3 tools/ratio_table.py [--group REGEX] [--cell REGEX] [CSV_OR_DIR ...]   (default lab/results)
Prints: the run folder, timing order, group, cell, TFLOP/s, ratio to the group's best baseline, and (cells timed
interleaved with that baseline) the paired per-round ratio with its 95% bootstrap CI. Reads what the harness wrote;
tools/reverify.py is what checks it. Plain or gzipped CSVs (tools/results_files.py).
"""
import csv
import os
import re
import sys

from results_files import DEFAULT_RESULTS, open_text, strip_csv, suite_csvs


def main(argv):
    group_re = cell_re = None
    paths = []
    i = 1
    while i < len(argv):
        if argv[i] in ("--group", "--cell") and i + 1 < len(argv):
            if argv[i] == "--group":
                group_re = re.compile(argv[i + 1])
            else:
                cell_re = re.compile(argv[i + 1])
            i += 2
            continue
        if argv[i] in ("-h", "--help"):
            print(__doc__)
            return 0
        paths.append(argv[i])
        i += 1
    paths = paths or [DEFAULT_RESULTS]
    fmt = "%-34s %-11s %-52s %-30s %8s %7s  %s"
    print(fmt % ("run", "timing", "group", "cell", "TFLOP/s", "ratio", "paired [95% CI]"))
    for p in paths:
        for f in suite_csvs(p):
            with open_text(f) as fh:
                for r in csv.DictReader(fh):
                    if group_re and not group_re.search(r["group"]):
                        continue
                    if cell_re and not cell_re.search(r["cell"]):
                        continue
                    run = os.path.basename(os.path.dirname(os.path.abspath(f))) + "/" + os.path.basename(strip_csv(f))
                    tf = "%.1f" % float(r["tflops"]) if r.get("tflops") else "-"
                    ratio = "%.3f" % float(r["ratio_vs_best_baseline"]) if r.get("ratio_vs_best_baseline") else "-"
                    paired = "-"
                    if r.get("paired_ratio"):
                        paired = "%.3f [%.3f, %.3f]" % (float(r["paired_ratio"]), float(r["paired_ci_lo"]),
                                                        float(r["paired_ci_hi"]))
                    print(fmt % (run[-34:], r.get("timing", "sequential"), r["group"][:52], r["cell"][:30], tf,
                                 ratio, paired))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
