#!/usr/bin/env python3
"""reverify.py: independent re-verifier of forge benchmark results.

Usage:
    python3 tools/reverify.py [RESULTS_DIR_OR_CSV ...]   # a run folder, a suite CSV, a tree (default lab/results)
    python3 tools/reverify.py --tolerances               # print the precision table it assumes

For every suite CSV (<suite>.csv next to <suite>_samples.csv; either may be gzipped, as the committed runs
under lab/results keep their samples: tools/results_files.py finds and opens them) it re-derives,
from the per-rep samples alone and with no code shared with the harness:
    median, min, max, the bootstrap 95% CI of the median, TFLOP/s and GB/s,
    the pass/garbage status (rel_err vs tolerance, fully_written),
    each group's strongest baseline, ratio_vs_best_baseline and the verdict,
    accel_ratio and accel_verdict against the named counterpart,
and compares them with what the harness wrote. Floats must agree exactly (the
harness prints %.17g, which round-trips a double) or to 1e-12 relative. It
prints one line per cell and ends with "N passed, N failed"; exit status 1 on
any mismatch. Pure standard library (no numpy), so it runs anywhere.

The rules, mirrored from src/bench/harness.c (its top comment states them):
    median      sorted ascending; odd n: x[n//2]; even n: (x[n/2-1] + x[n/2]) / 2
    bootstrap   PCG32 (src/base/rng.c) seeded with (seed, stream 0x626f6f74
                "boot"); R = 10000 resamples; each draws n indices with
                forge_rng_below(n) (rejection sampling on 64-bit draws) from one
                stream, in order, and takes the median; the medians are sorted
                and CI = [m[floor(0.025 R)], m[floor(0.975 R)]]
    TFLOP/s     flops / (median_ms / 1000) / 1e12 (0 if flops == 0); GB/s with bytes, 1e9
    garbage     not (rel_err <= tolerance) (NaN is garbage) or fully_written == 0
    verdicts    best baseline = the fastest passing baseline (by speedup) in the
                group (first on a tie); ratio = speedup(cell, best): throughput ratio when
                both state FLOPs, else best / cell; win >= 1.10
    accel       accel_ratio = speedup(cell, counterpart): throughput ratio when both state
                FLOPs, else counterpart median / cell median; verdict only
                when the cell's format is narrower (bits below); >= 1.5
    paired      (CSVs with a timing column) a cell timed "interleaved" in the same flush
                (batch) as its group's best baseline, with as many samples: q_r = the
                speedup of rep r alone (throughput ratio, else baseline ms / cell ms);
                paired_ratio = median(q), [paired_ci_lo, paired_ci_hi] = bootstrap CI of q
                by the rules above; otherwise the three fields are empty. "sequential"
                cells have batch 0.
"""
import csv
import math
import operator
import os
import sys

from results_files import DEFAULT_RESULTS, open_text, samples_of, strip_csv, suite_csvs

# Must equal forge_precision_tolerance() in src/bench/harness.c (the unit test checks it).
TOLERANCES = {"fp32": 1e-5, "tf32": 1e-3, "bf16": 1e-2, "fp16": 5e-3, "fp8": 5e-2}
PRECISIONS = ["fp32", "tf32", "bf16", "fp16", "fp8"]
BITS = {"fp32": 32, "tf32": 19, "bf16": 16, "fp16": 16, "fp8": 8}
RESAMPLES = 10000
WIN_RATIO = 1.10
ACCEL_RATIO = 1.5
MIN_REPS = 30

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1
PCG_MULT = 6364136223846793005


class Pcg32:
    """PCG32 exactly as src/base/rng.c (pcg32_random_r)."""

    def __init__(self, seed, stream):
        self.state = 0
        self.inc = ((stream << 1) | 1) & M64
        self.u32()
        self.state = (self.state + seed) & M64
        self.u32()

    def u32(self):
        old = self.state
        self.state = (old * PCG_MULT + self.inc) & M64
        xorshifted = (((old >> 18) ^ old) >> 27) & M32
        rot = old >> 59
        return ((xorshifted >> rot) | (xorshifted << ((-rot) & 31))) & M32

    def u64(self):
        hi = self.u32()
        return (hi << 32) | self.u32()

    def below(self, n):
        limit = M64 - M64 % n
        while True:
            x = self.u64()
            if x < limit:
                return x % n


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


_INDEX_CACHE = {}


def bootstrap_indices(n, seed, resamples):
    """The resample index lists: they depend only on (seed, n, R), not on the
    samples, so they are drawn once and shared by every cell with n reps.
    PCG32 is inlined here (the hot loop); Pcg32 above is the readable form."""
    key = (n, seed, resamples)
    if key in _INDEX_CACHE:
        return _INDEX_CACHE[key]
    rng = Pcg32(seed, 0x626F6F74)  # "boot"
    state, inc = rng.state, rng.inc
    limit = M64 - M64 % n
    getters = []
    for _ in range(resamples):
        idx = []
        for _ in range(n):
            while True:
                old = state
                state = (old * PCG_MULT + inc) & M64
                xs_ = (((old >> 18) ^ old) >> 27) & M32
                rot = old >> 59
                hi = ((xs_ >> rot) | (xs_ << ((-rot) & 31))) & M32
                old = state
                state = (old * PCG_MULT + inc) & M64
                xs_ = (((old >> 18) ^ old) >> 27) & M32
                rot = old >> 59
                lo = ((xs_ >> rot) | (xs_ << ((-rot) & 31))) & M32
                v = (hi << 32) | lo
                if v < limit:
                    break
            idx.append(v % n)
        getters.append(operator.itemgetter(*idx) if n > 1 else (lambda xs: (xs[0],)))
    _INDEX_CACHE[key] = getters
    return getters


def bootstrap_ci(xs, seed, resamples=RESAMPLES):
    """Bootstrap 95% CI of the median, exactly as forge_harness_bootstrap_ci."""
    n = len(xs)
    half, odd = n // 2, n % 2
    meds = []
    for take in bootstrap_indices(n, seed, resamples):
        d = sorted(take(xs))
        meds.append(d[half] if odd else (d[half - 1] + d[half]) / 2)
    meds.sort()
    ilo = math.floor(0.025 * resamples)
    ihi = min(math.floor(0.975 * resamples), resamples - 1)
    return meds[ilo], meds[ihi]


def num(s):
    """A CSV float field; empty means not applicable (None)."""
    s = (s or "").strip()
    if s == "":
        return None
    return float(s)


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if a == b:
        return True
    return abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def verify_suite(csv_path, samples_path):
    """Returns (passed, failed) cell counts, printing one line per cell."""
    with open_text(csv_path) as f:
        rows = list(csv.DictReader(f))
    samples = {}
    if samples_path:
        with open_text(samples_path) as f:
            for r in csv.DictReader(f):
                samples.setdefault((r["cell"], r["group"]), []).append((int(r["rep"]), float(r["ms"])))
    suite_name = os.path.basename(strip_csv(csv_path))
    problems = {}  # (cell, group) -> list of messages
    notes = {}
    derived = {}

    def bad(key, msg):
        problems.setdefault(key, []).append(msg)

    # pass 1: per-cell statistics and status
    for r in rows:
        key = (r["cell"], r["group"])
        if key in derived:
            bad(key, "cell appears twice in its group")
        d = {"status": None, "median": None}
        derived[key] = d
        for field in ("commit", "gpu", "driver", "toolkit", "config_hash", "recipe_hash", "seed", "date"):
            if not r.get(field, "").strip():
                bad(key, "provenance field %s is empty" % field)
        if int(r.get("sm_count") or 0) <= 0:
            bad(key, "provenance field sm_count is not > 0")
        prec = r["precision"]
        if prec not in TOLERANCES:
            bad(key, "unknown precision %r" % prec)
            continue
        tol = num(r["tolerance"])
        if tol != TOLERANCES[prec]:
            notes.setdefault(key, []).append("tolerance override %r (table %r)" % (tol, TOLERANCES[prec]))
        reps_samples = [ms for _, ms in sorted(samples.get(key, []))]
        rep_ids = sorted(i for i, _ in samples.get(key, []))
        if r["status"] == "failed":
            d["status"] = "failed"
            if reps_samples:
                bad(key, "failed cell has %d samples" % len(reps_samples))
            continue
        rel_err = num(r["rel_err"])
        written = r.get("fully_written", "1").strip() != "0"
        garbage = not (rel_err is not None and not math.isnan(rel_err) and tol is not None and rel_err <= tol) or not written
        d["status"] = "garbage" if garbage else "ok"
        if r["status"] != d["status"]:
            bad(key, "status %s, derived %s (rel_err %r, tolerance %r, fully_written %d)" % (
                r["status"], d["status"], rel_err, tol, written))
        if garbage:
            if reps_samples:
                bad(key, "garbage cell was timed (%d samples)" % len(reps_samples))
            for field in ("median_ms", "ci_lo_ms", "ci_hi_ms", "min_ms", "max_ms", "ratio_vs_best_baseline"):
                if num(r[field]) is not None:
                    bad(key, "garbage cell has %s = %s" % (field, r[field]))
            continue
        n = len(reps_samples)
        if n < MIN_REPS:
            bad(key, "%d samples, fewer than %d" % (n, MIN_REPS))
            if n == 0:
                continue
        if rep_ids != list(range(n)):
            bad(key, "rep indices are not 0..%d" % (n - 1))
        if int(r["reps"]) != n:
            bad(key, "reps %s but %d samples" % (r["reps"], n))
        med = median(reps_samples)
        lo, hi = bootstrap_ci(reps_samples, int(r["seed"]))
        flops, byts = num(r["flops"]) or 0.0, num(r["bytes"]) or 0.0
        want = {
            "median_ms": med, "ci_lo_ms": lo, "ci_hi_ms": hi,
            "min_ms": min(reps_samples), "max_ms": max(reps_samples),
            "tflops": flops / (med / 1000) / 1e12 if flops > 0 else 0.0,
            "gbps": byts / (med / 1000) / 1e9 if byts > 0 else 0.0,
        }
        for field, v in want.items():
            if not same(num(r[field]), v):
                bad(key, "%s: csv %s, derived %.17g" % (field, r[field], v))
        if not (lo <= med <= hi):
            bad(key, "CI [%r, %r] does not contain the median %r" % (lo, hi, med))
        d["median"] = med

    # pass 2: verdicts (uses derived medians and statuses only)
    for r in rows:
        key = (r["cell"], r["group"])
        d = derived.get(key)
        if d is None or d["status"] is None:
            continue
        ratio, verdict, accel_ratio, accel_verdict = None, d["status"], None, ""
        best_row = None

        def speedup(a_row, a, b_row, b):
            # the harness's speedup(): throughput ratio when both cells state FLOPs, else time ratio
            fa, fb = num(a_row["flops"]) or 0.0, num(b_row["flops"]) or 0.0
            if fa > 0 and fb > 0:
                return (fa / a["median"]) / (fb / b["median"])
            return b["median"] / a["median"]

        if d["status"] == "ok":
            best, best_row = None, None
            for b in rows:
                db = derived.get((b["cell"], b["group"]))
                if (b["group"] == r["group"] and b["is_baseline"] == "1" and db and db["status"] == "ok"
                        and db["median"] is not None and (best is None or speedup(b, db, best_row, best) > 1.0)):
                    best, best_row = db, b
            if best is None:
                verdict = "no-baseline"
            else:
                ratio = speedup(r, d, best_row, best)
                verdict = "baseline" if r["is_baseline"] == "1" else ("win" if ratio >= WIN_RATIO else "no-win")
            cp_name = r["counterpart"]
            if cp_name:
                cp = derived.get((cp_name, r["counterpart_group"] or r["group"]))
                if cp is None or cp["status"] != "ok" or cp["median"] is None:
                    accel_verdict = "no-counterpart"
                else:
                    cp_row = next(x for x in rows if (x["cell"], x["group"]) == (cp_name, r["counterpart_group"] or r["group"]))
                    accel_ratio = speedup(r, d, cp_row, cp)
                    if BITS.get(r["precision"], 0) < BITS.get(cp_row["precision"], 0):
                        accel_verdict = "accelerated" if accel_ratio >= ACCEL_RATIO else "not-accelerated"
        checks = [("ratio_vs_best_baseline", num(r["ratio_vs_best_baseline"]), ratio),
                  ("accel_ratio", num(r["accel_ratio"]), accel_ratio)]
        if "timing" in r:  # harness CSVs since the interleaved order (older ones have no such columns)
            batch = int(r["batch"] or 0)
            if (r["timing"] == "interleaved") != (batch > 0) or r["timing"] not in ("interleaved", "sequential"):
                bad(key, "timing %r with batch %d" % (r["timing"], batch))
            pr = plo = phi = None
            if d["status"] == "ok" and ratio is not None and batch > 0 and best_row is not None \
                    and int(best_row["batch"] or 0) == batch:
                mine = [ms for _, ms in sorted(samples.get(key, []))]
                theirs = [ms for _, ms in sorted(samples.get((best_row["cell"], best_row["group"]), []))]
                if mine and len(mine) == len(theirs):
                    # speedup() of one round's two samples
                    q = [speedup(r, {"median": a}, best_row, {"median": b}) for a, b in zip(mine, theirs)]
                    pr = median(q)
                    plo, phi = bootstrap_ci(q, int(r["seed"]))
            checks += [("paired_ratio", num(r["paired_ratio"]), pr), ("paired_ci_lo", num(r["paired_ci_lo"]), plo),
                       ("paired_ci_hi", num(r["paired_ci_hi"]), phi)]
        for field, got, want in checks:
            if not same(got, want):
                bad(key, "%s: csv %r, derived %r" % (field, got, want))
        if r["verdict"] != verdict:
            bad(key, "verdict: csv %s, derived %s" % (r["verdict"], verdict))
        if r["accel_verdict"] != accel_verdict:
            bad(key, "accel_verdict: csv %r, derived %r" % (r["accel_verdict"], accel_verdict))

    # samples of cells the CSV does not list
    for key in samples:
        if key not in derived:
            bad(key, "samples for a cell missing from %s" % os.path.basename(csv_path))
    passed = failed = 0
    for key in list(derived) + [k for k in problems if k not in derived]:
        label = "%s/%s [%s]" % (suite_name, key[0], key[1])
        extra = ("  (" + "; ".join(notes[key]) + ")") if key in notes else ""
        if key in problems:
            failed += 1
            print("FAIL %s: %s" % (label, "; ".join(problems[key])))
        else:
            passed += 1
            row = next(x for x in rows if (x["cell"], x["group"]) == key)
            print("ok   %s: %s %s%s" % (label, row["status"], row["verdict"], extra))
    return passed, failed


def main(argv):
    if len(argv) == 2 and argv[1] == "--tolerances":
        print(" ".join("%s %.17g" % (p, TOLERANCES[p]) for p in PRECISIONS))
        return 0
    if len(argv) > 1 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    paths = argv[1:] or [DEFAULT_RESULTS]
    pairs = []
    for p in paths:
        if not os.path.exists(p):
            print("reverify: %s does not exist" % p)
            return 2
        pairs += [(c, samples_of(c)) for c in suite_csvs(p)]
    if not pairs:
        print("reverify: no suite CSVs under %s" % " ".join(paths))
        return 1
    passed = failed = 0
    for csv_path, samples_path in pairs:
        print("== %s" % csv_path)
        if not samples_path:
            print("FAIL %s: no samples file %s_samples.csv[.gz]" % (csv_path, strip_csv(csv_path)))
            failed += 1
            continue
        p, f = verify_suite(csv_path, samples_path)
        passed += p
        failed += f
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
