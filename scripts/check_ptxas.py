#!/usr/bin/env python3
"""check_ptxas.py BUILD_DIR ALLOWLIST: the CI gate on CUDA kernel resources.

Reads every *.ptxas.txt under BUILD_DIR (the stderr of `nvcc -Xptxas -v`,
which the Makefile saves next to each object), prints one row per compiled
function (registers, shared memory, stack frame, spill stores/loads), and
fails when a function has spills or a non-zero stack frame, unless a line of
ALLOWLIST names it. A stack frame or spill means a register array indexed at
run time or register pressure past the cap: local memory traffic in the
inner loop, which is what this gate exists to catch.

It also fails a function that ptxas reports as having its wgmma serialised
(info C7518, "wgmma.mma_async instructions are serialized due to ..."): ptxas
then waits for every wgmma before the next, so the kernel runs but its
asynchronous MMA pipeline is gone (the usual cause: different wgmma groups in
flight on different control-flow paths). Column "wgmma": "SERIAL" for those.

ALLOWLIST lines: `name_substring  # reason` (allows a stack frame / spills) or
`C7518: name_substring  # reason` (allows serialised wgmma); blank lines and
lines starting with '#' are ignored. The substring is matched against the demangled and the
mangled name. Ends with "N passed, N failed" (counting functions); exit 1 on
any failure or when no report was found.
"""
import os
import re
import shutil
import subprocess
import sys

RE_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
RE_PROPS = re.compile(r"Function properties for (\S+)")
RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
RE_USED = re.compile(r"Used (\d+) registers")
RE_SMEM = re.compile(r"(\d+) bytes smem")
RE_SERIAL = re.compile(r"\(C7518\).*function '([^']+)'")


def demangle_all(names):
    """Mangled -> short readable name (no return type, no parameter list)."""
    out = {n: n for n in names}
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if tool and names:
        try:
            res = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True)
            for n, d in zip(names, res.stdout.splitlines()):
                out[n] = d
        except (OSError, subprocess.CalledProcessError):
            pass
    for n, d in out.items():
        d = re.sub(r"^void ", "", d)
        depth, cut = 0, len(d)
        for i, ch in enumerate(d):  # drop the parameter list: first '(' outside <...>
            if ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
            elif ch == "(" and depth == 0:
                cut = i
                break
        out[n] = d[:cut] if cut > 0 else d
    return out


def parse_report(path):
    """Functions of one report: dicts with name, arch, kind, regs, smem, stack, spill_st, spill_ld."""
    funcs = {}
    order = []
    entry_arch = {}
    serialized = set()
    current = None
    with open(path, errors="replace") as f:
        for line in f:
            m = RE_SERIAL.search(line)
            if m:
                serialized.add(m.group(1))
                continue
            m = RE_ENTRY.search(line)
            if m:
                entry_arch[m.group(1)] = m.group(2)
                continue
            m = RE_PROPS.search(line)
            if m:
                current = m.group(1)
                if current not in funcs:
                    funcs[current] = {"name": current, "regs": 0, "smem": 0, "stack": 0,
                                      "spill_st": 0, "spill_ld": 0}
                    order.append(current)
                continue
            m = RE_FRAME.search(line)
            if m and current:
                funcs[current]["stack"] = int(m.group(1))
                funcs[current]["spill_st"] = int(m.group(2))
                funcs[current]["spill_ld"] = int(m.group(3))
                continue
            m = RE_USED.search(line)
            if m and current:
                funcs[current]["regs"] = int(m.group(1))
                s = RE_SMEM.search(line)
                if s:
                    funcs[current]["smem"] = int(s.group(1))
    result = []
    for n in order:
        fn = funcs[n]
        fn["kind"] = "kernel" if n in entry_arch else "device fn"
        fn["arch"] = entry_arch.get(n, "")
        fn["serial"] = n in serialized
        result.append(fn)
    return result


def read_allowlist(path):
    entries = []
    with open(path) as f:
        for raw in f:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            pattern, _, reason = line.partition("#")
            pattern = pattern.strip()
            if pattern:
                entries.append((pattern, reason.strip() or "(no reason given)"))
    return entries


def main(argv):
    if len(argv) != 3:
        print("usage: check_ptxas.py BUILD_DIR ALLOWLIST", file=sys.stderr)
        return 2
    build_dir, allow_path = argv[1], argv[2]
    allow = read_allowlist(allow_path)
    reports = []
    for root, _, files in os.walk(build_dir):
        for fname in sorted(files):
            if fname.endswith(".ptxas.txt"):
                reports.append(os.path.join(root, fname))
    reports.sort()
    if not reports:
        print(f"no *.ptxas.txt under {build_dir}: build with `make cuda` first")
        print("0 passed, 1 failed")
        return 1

    rows = []
    for rep in reports:
        for fn in parse_report(rep):
            fn["file"] = os.path.relpath(rep, build_dir).replace(".ptxas.txt", ".cu")
            rows.append(fn)
    names = demangle_all([r["name"] for r in rows])

    passed = failed = 0
    table = []
    for r in rows:
        short = names[r["name"]]
        bad = r["stack"] > 0 or r["spill_st"] > 0 or r["spill_ld"] > 0
        status = "ok"
        if bad:
            hit = next((reason for pat, reason in allow
                        if not pat.startswith("C7518:") and (pat in short or pat in r["name"])), None)
            if hit is not None:
                status = "allowed: " + (hit if len(hit) <= 48 else hit[:45] + "...")
            else:
                status = "FAIL"
        if r["serial"] and status != "FAIL":
            hit = next((reason for pat, reason in allow if pat.startswith("C7518:") and
                        (pat[6:].strip() in short or pat[6:].strip() in r["name"])), None)
            if hit is not None:
                status = "allowed C7518: " + (hit if len(hit) <= 42 else hit[:39] + "...")
            else:
                status = "FAIL (wgmma serialized, C7518)"
        if status.startswith("FAIL"):
            failed += 1
        else:
            passed += 1
        table.append((r["file"], short, r["kind"], r["regs"], r["smem"], r["stack"], r["spill_st"],
                      r["spill_ld"], "SERIAL" if r["serial"] else "-", status))

    headers = ("file", "function", "kind", "regs", "smem", "stack", "spill_st", "spill_ld", "wgmma", "status")
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *table)] if table else [len(h) for h in headers]
    fmt = "  ".join("{:<%d}" % w if i in (0, 1, 2, 8, 9) else "{:>%d}" % w for i, w in enumerate(widths))
    print(fmt.format(*headers))
    print(fmt.format(*("-" * w for w in widths)))
    for row in table:
        print(fmt.format(*row))
    if not table:
        print(f"no functions found in {len(reports)} report(s): was nvcc run with -Xptxas -v?")
        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
