#!/usr/bin/env python3
"""results_files.py: finds and opens forge's harness result files, plain or gzipped.

The bench writes <results>/<date>_<commit>/<suite>.csv, <suite>_samples.csv (one line per rep) and
<suite>_provenance.json. The committed runs under lab/results/ keep the per-rep samples gzipped
(<suite>_samples.csv.gz); every reader here takes either form, so tools/reverify.py, tools/ratio_table.py
and scripts/plots/prep.py read a fresh results/ folder and the committed lab/results/ alike.

Usage as a program: python3 tools/results_files.py [DIR_OR_CSV ...]
prints the suite CSVs under each path (default: lab/results), one per line; scripts/reproduce.sh uses it.
Pure standard library.
"""
import gzip
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the committed runs (relative to the repository root); the bench's own default output is results/
DEFAULT_RESULTS = os.path.relpath(os.path.join(ROOT, "lab", "results"))
HEADER = "suite,cell,group,"  # the first columns of every harness suite CSV
# files next to suite CSVs that are not suite CSVs: per-rep samples, probe findings (characterize), another
# program's timings (tools/sdpa_bench.py)
NOT_SUITES = ("_samples", "_findings", "_external")


def strip_csv(path):
    """path without its .csv / .csv.gz ending, or None when it is neither."""
    for ext in (".csv.gz", ".csv"):
        if path.endswith(ext):
            return path[: -len(ext)]
    return None


def existing(stem_csv):
    """The file for stem_csv ('x.csv'): 'x.csv' if present, else 'x.csv.gz' if present, else None."""
    for p in (stem_csv, stem_csv + ".gz"):
        if os.path.exists(p):
            return p
    return None


def open_text(path):
    """Opens a CSV or text result for reading, gunzipping *.gz transparently."""
    if path.endswith(".gz"):
        return gzip.open(path, "rt", newline="")
    return open(path, newline="")


def samples_of(suite_csv):
    """The samples file of a suite CSV (plain or gzipped), or None."""
    return existing(strip_csv(suite_csv) + "_samples.csv")


def is_suite_csv(path):
    stem = strip_csv(path)
    if stem is None or stem.endswith(NOT_SUITES):
        return False
    with open_text(path) as f:
        return f.readline().startswith(HEADER)


def suite_csvs(path):
    """The suite CSVs under path: a suite CSV (or its samples file) itself, or every one below a folder,
    in sorted order. Other CSVs (ncu source pages, PyTorch timings) are passed over by their header."""
    if os.path.isfile(path):
        stem = strip_csv(path)
        if stem is not None and stem.endswith("_samples"):
            return [p for p in [existing(stem[: -len("_samples")] + ".csv")] if p]
        return [path]
    out = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        out += [os.path.join(root, n) for n in sorted(files) if is_suite_csv(os.path.join(root, n))]
    return out


def main(argv):
    for p in argv[1:] or [DEFAULT_RESULTS]:
        for f in suite_csvs(p):
            print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
