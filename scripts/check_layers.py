#!/usr/bin/env python3
"""check_layers.py: the layers of src/ include only downwards (docs/architecture.md).

base < backend < runtime < ops, data < model < train < bench: a file of one layer may include its own layer and
the ones below, never one above; nothing outside src/backend/cuda/ includes cuda_ops.h (the backend context);
nothing in src/ includes lab/. Prints each violation and "N passed, N failed"; exit 1 on any violation.
"""
import glob
import os
import re
import sys

RANK = {"base": 0, "backend": 1, "runtime": 2, "ops": 3, "data": 3, "model": 4, "train": 5, "bench": 6}
PRIVATE = {"src/backend/cuda/cuda_ops.h": "src/backend/cuda/"}


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    os.chdir(root)
    checked, bad = 0, []
    for f in sorted(glob.glob("src/**/*", recursive=True)):
        if not f.endswith((".c", ".h", ".cu", ".cuh")):
            continue
        layer = f.split("/")[1]
        if layer not in RANK:
            bad.append(f"{f}: src/{layer} is not a known layer")
            continue
        for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', open(f, encoding="utf-8").read(), re.M):
            inc = os.path.normpath(os.path.join(os.path.dirname(f), m.group(1)))
            checked += 1
            if not inc.startswith("src/"):
                bad.append(f"{f}: includes {inc}, outside src/")
                continue
            to = inc.split("/")[1]
            if RANK.get(to, 99) > RANK[layer]:
                bad.append(f"{f}: {layer} includes {inc}, a higher layer ({to})")
            owner = PRIVATE.get(inc)
            if owner and not f.startswith(owner):
                bad.append(f"{f}: includes {inc}, private to {owner}")
    for b in bad:
        print("FAIL " + b)
    print(f"{checked - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
