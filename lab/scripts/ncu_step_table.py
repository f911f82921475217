#!/usr/bin/env python3
"""ncu_step_table.py CSV: Nsight Compute's --csv output of gpu__time_duration.sum (one row per kernel launch)
grouped by kernel name: launches, total microseconds, share, in falling order (device_ncu_step.sh)."""
import csv
import io
import sys
from collections import defaultdict


def main():
    text = open(sys.argv[1], errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        print("no ncu table in", sys.argv[1])
        return 1
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    total = defaultdict(float)
    calls = defaultdict(int)
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r.get("Kernel Name", "?")
        short = name.split("(")[0][:90]
        try:
            v = float(r["Metric Value"].replace(",", ""))
        except ValueError:
            continue
        total[short] += v / 1000.0  # ns -> us
        calls[short] += 1
    all_us = sum(total.values())
    print(f"{len(rows)} launches, {all_us / 1000:.3f} ms of kernel time")
    print(f"{'kernel':90s} {'calls':>6s} {'us':>10s} {'share':>7s}")
    for k in sorted(total, key=total.get, reverse=True):
        if total[k] / all_us < 0.003:
            continue
        print(f"{k:90s} {calls[k]:6d} {total[k]:10.1f} {100 * total[k] / all_us:6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
