#!/usr/bin/env python3
"""ptx_diff.py: compare the PTX of every kernel between two builds, by kernel name.

Usage: tools/ptx_diff.py BEFORE_DIR AFTER_DIR [--only-after]

Each DIR holds .ptx files (nvcc -ptx of each .cu, one file each; which file a kernel lives in does not
matter). Every `.entry` (and `.func`) body is cut out under its mangled name, normalised (comments, .loc and
.file lines dropped, whitespace folded, branch labels' module-position index and
internal symbols' path hash dropped) and hashed. The report lists the kernels whose PTX differs, and
those present on one side only. With --only-after, kernels only in BEFORE are not listed (a move of variant
kernels out of the product leaves those behind on purpose). Exit status 1 if any kernel present on both
sides differs, else 0.

Why: a refactor that moves kernels between files or folders must not change a default kernel's code; the
PTX, not the source text, is what says so.
"""
import hashlib
import os
import re
import sys

LABEL = re.compile(r"\$L__BB\d+_")
INTERNAL = re.compile(r"_INTERNAL_[0-9a-f]{8}_")
ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?(\.entry|\.func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)")


def bodies(path):
    out = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    i = 0
    while i < len(lines):
        m = ENTRY.match(lines[i])
        if not m:
            i += 1
            continue
        name = m.group(2)
        depth, started, buf = 0, False, []
        while i < len(lines):
            line = lines[i]
            i += 1
            stripped = line.split("//", 1)[0].strip()
            if not stripped or stripped.startswith(".loc") or stripped.startswith(".file"):
                continue
            # branch labels are numbered by the function's position in its module ($L__BB<index>_<block>):
            # a kernel moved to another file changes its index, not its code
            # and a file-static symbol's name holds a hash of the file's path (_INTERNAL_<hash>_)
            buf.append(INTERNAL.sub("_INTERNAL_", LABEL.sub("$L__BB_", " ".join(stripped.split()))))
            depth += stripped.count("{") - stripped.count("}")
            if "{" in stripped:
                started = True
            if started and depth == 0:
                break
            if not started and stripped.endswith(";"):
                break  # a declaration (prototype), not a body
        if started:
            out[name] = hashlib.sha256("\n".join(buf).encode()).hexdigest()
    return out


def collect(d):
    kernels = {}
    for root, _, files in os.walk(d):
        for fn in sorted(files):
            if fn.endswith(".ptx"):
                for name, h in bodies(os.path.join(root, fn)).items():
                    kernels.setdefault(name, set()).add(h)
    return kernels


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    before, after = collect(argv[1]), collect(argv[2])
    only_after = "--only-after" in argv
    same = [k for k in after if k in before and after[k] == before[k]]
    diff = sorted(k for k in after if k in before and after[k] != before[k])
    new = sorted(k for k in after if k not in before)
    gone = sorted(k for k in before if k not in after)
    for k in diff:
        print(f"DIFFERS  {k}")
    for k in new:
        print(f"NEW      {k}")
    if not only_after:
        for k in gone:
            print(f"GONE     {k}")
    print(f"{len(same)} identical, {len(diff)} differ, {len(new)} only after, {len(gone)} only before")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
