#!/usr/bin/env python3
"""dist_test.py: data-parallel training across processes on the CPU (mpirun, docs/distributed.md).

Builds the small data and config of tools/crash_test.py, then checks:

  - parity: 2 ranks with batch B each (one micro-batch per rank) against 1 process with batch B and 2 accumulation
    steps (--tokens-per-step 2 B T), with and without --zero1: the logged losses agree to LOSS_BOUND and the final
    weights to WEIGHT_BOUND (the bound and why: docs/distributed.md; step 1 is bitwise), and ZeRO-1 agrees with
    the replicated optimizer to ZERO1_BOUND;
  - gradient buckets: 2 ranks with 10 small buckets (--bucket-mb 0.05), and with none (--bucket-mb 0), equal the
    default 2-rank runs bit for bit (log and checkpoint), replicated, ZeRO-1 and ZeRO-1 bf16;
  - a 2-rank run stopped and resumed on 2 ranks equals the uninterrupted 2-rank run bit for bit (log and files);
  - checkpoints cross rank counts: saved on 2 ranks (ZeRO-1), resumed on 1 process, and saved on 1, resumed on 2:
    each continuation matches the uninterrupted run of its own rank count to LOSS_BOUND / WEIGHT_BOUND;
  - failure: kill -9 of one rank mid-run ends the job (non-zero) within the timeout and `latest` loads (then the
    run resumes on one process to the end); a rank stopped with SIGSTOP (a hang) trips the other ranks' watchdog
    (--dist-timeout), which ends the job with a message naming it.

Skips (exit 0, a "skip" line) when mpirun is absent or build/forge was built without MPI. Prints one line per check
and "N passed, N failed"; exit 1 on any failure. Python 3 standard library only.

With --no-mpi-build FORGE is a build without MPI (make MPI=0): it must train on one process as ever, and refuse to
run as one of 2 ranks (rather than train twice into one directory).

On GPUs (not run yet): --device cuda with a CUDA build linked with MPI (make cuda CUDA_MPI=1 [NCCL=1]) runs the
same checks with --device cuda --precision fp32 (each rank on the GPU of its local rank, so 2 GPUs).

--one-rank: only the one-rank gate: `mpirun -np 1` (with and without --zero1, with and without small gradient
buckets) equals a plain run bit for bit. On one GPU with the NCCL build (make cuda CUDA_MPI=1 NCCL=1; --device cuda)
that run goes through NCCL's calls (one rank: identities), the buckets' side stream (fork and join events) and the
op-by-op step, so it is the NCCL path's parity gate on a single H200.

usage: tools/dist_test.py [--forge build/forge] [--keep-dir] [--no-mpi-build] [--device cuda] [--one-rank]
"""
import argparse
import array
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crash_test  # noqa: E402  (its data, config and checkpoint checks)

LOSS_BOUND = 2e-5     # |loss difference| per logged step (the log prints 6 decimals)
WEIGHT_BOUND = 1e-4   # max |weight difference| after the run
ZERO1_BOUND = 1e-5    # ZeRO-1 against the replicated optimizer (only the norm's summation order differs)
BF16_BOUND = 5e-3     # --precision bf16: the same reordering, seen through bf16 roundings of weights and activations
BF16_WEIGHT_BOUND = 0.05  # bf16: an element whose gradient is noise moves up to lr = 3e-3 a step either way
TIMEOUT = 10          # --dist-timeout of the failure runs, seconds
BUCKET_MB = "0.05"    # gradient buckets of 13,056 elements: 10 buckets of the 124,672 parameters, one across the
                      # boundary of the 2 ranks' ZeRO-1 shards
STEPS = 20

passed = failed = 0
DEVICE = []  # --device cuda --precision fp32 on GPUs


def ok(cond, what, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {what}")
    else:
        failed += 1
        print(f"FAIL {what}{': ' + detail if detail else ''}")
    sys.stdout.flush()
    return cond


def mpi_env():
    env = dict(os.environ)
    # Open MPI refuses root without these (CI runs as root); --oversubscribe: 2 ranks may exceed the slots
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    return env


def mpirun(n):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n)]


def train(forge, ranks, data, cfg, out, extra=(), timeout=300):
    cmd = [forge, "train", "--data", data, "--config", cfg, "--out", out, "--steps", str(STEPS), "--batch", "4",
           "--seq-len", "64", "--tokens-per-step", "512", "--ckpt-every", "5", "--eval-every", "10",
           "--eval-batches", "2", "--threads", "1", "--quiet", "--dist-timeout", str(TIMEOUT * 6)] + DEVICE + list(extra)
    if DEVICE and "--precision" in extra:  # the bf16 case: its own precision
        cmd = [c for i, c in enumerate(cmd) if not (c == "fp32" and cmd[i - 1] == "--precision")]
        i = cmd.index("--precision")
        del cmd[i]
    if ranks > 0:
        cmd = mpirun(ranks) + cmd
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                          env=mpi_env(), timeout=timeout)


def losses(out):
    """{step: loss} of log.jsonl."""
    res = {}
    for line in open(os.path.join(out, "log.jsonl")):
        rec = json.loads(line)
        if "loss" in rec:
            res[rec["step"]] = rec["loss"]
    return res


def values(path):
    _, data = crash_test.read_safetensors(path)
    a = array.array("f")
    a.frombytes(data)
    return a


def max_diff(a, b):
    if len(a) != len(b):
        return float("inf")
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def compare_runs(what, ref, other, loss_bound, weight_bound, first_bitwise=False):
    la, lb = losses(ref), losses(other)
    steps_ok = sorted(la) == sorted(lb) == list(range(1, STEPS + 1))
    dl = max((abs(la[s] - lb[s]) for s in la if s in lb), default=float("inf"))
    ok(steps_ok and dl <= loss_bound, f"{what}: losses of every step within {loss_bound:g} (max {dl:.2g})",
       "" if steps_ok else f"steps {sorted(la)[:3]}.. vs {sorted(lb)[:3]}..")
    if first_bitwise:
        ok(la.get(1) == lb.get(1), f"{what}: step 1 loss identical", f"{la.get(1)} vs {lb.get(1)}")
    last = f"ckpt_{STEPS:06d}"
    # the same files as a single process: the same tensors (names, shapes, dtypes) and the same trainer state
    heads = []
    for run in (ref, other):
        h = {}
        for f in ("model.safetensors", "state.safetensors"):
            header, _ = crash_test.read_safetensors(os.path.join(run, last, f))
            h[f] = {k: (v if k == "__metadata__" else (v["dtype"], v["shape"])) for k, v in header.items()}
        h["files"] = sorted(os.listdir(os.path.join(run, last)))
        heads.append(h)
    ok(heads[0] == heads[1], f"{what}: the checkpoint holds the same files, tensors and trainer state")
    dw = max_diff(values(os.path.join(ref, last, "model.safetensors")),
                  values(os.path.join(other, last, "model.safetensors")))
    dm = max_diff(values(os.path.join(ref, last, "state.safetensors")),
                  values(os.path.join(other, last, "state.safetensors")))
    ok(dw <= weight_bound and dm <= weight_bound,
       f"{what}: final weights and moments within {weight_bound:g} (max {dw:.2g}, {dm:.2g})")


def same_files(a, b, name):
    return open(os.path.join(a, name), "rb").read() == open(os.path.join(b, name), "rb").read()


def rank_pids(out):
    """{rank: pid} of the forge processes training into `out` (their environment names their rank)."""
    res = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if len(argv) < 2 or not argv[0].endswith(b"forge") or argv[1] != b"train" or out.encode() not in argv:
            continue
        for kv in env:
            if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                res[int(kv.split(b"=")[1])] = int(pid)
    return res


def failure_run(forge, data, cfg, out, sig, what):
    """Starts 2 ranks, sends `sig` to rank 1 once a checkpoint exists; (exit code, seconds after the signal, output)."""
    cmd = mpirun(2) + [forge, "train", "--data", data, "--config", cfg, "--out", out, "--steps", "100000",
                       "--batch", "4", "--seq-len", "64", "--tokens-per-step", "512", "--ckpt-every", "3",
                       "--eval-every", "0", "--threads", "1", "--quiet", "--dist-timeout", str(TIMEOUT)] + DEVICE
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                         env=mpi_env(), start_new_session=True)
    t_end = time.time() + 60
    pids = {}
    while time.time() < t_end and p.poll() is None:
        pids = rank_pids(os.path.abspath(out)) or rank_pids(out)
        if len(pids) == 2 and os.path.exists(os.path.join(out, "latest")):
            break
        time.sleep(0.1)
    if len(pids) != 2 or p.poll() is not None:
        p.kill()
        out_text = p.communicate()[0]
        return None, 0, f"the ranks never started or wrote a checkpoint: {out_text[-500:]}"
    time.sleep(0.7)  # mid-run: between checkpoints, inside some step
    t0 = time.time()
    os.kill(pids[1], sig)
    try:
        out_text = p.communicate(timeout=TIMEOUT + 30)[0]
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out_text = p.communicate()[0]
        return None, time.time() - t0, f"mpirun still running {TIMEOUT + 30} s after the signal ({what})"
    for pid in pids.values():  # a stopped rank that mpirun could not end
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return p.returncode, time.time() - t0, out_text


def no_mpi_build(forge):
    work = tempfile.mkdtemp(prefix="forge-nompi-")
    try:
        data, cfg = crash_test.make_data(forge, work, 1)
        out = os.path.join(work, "one")
        global STEPS
        STEPS = 3
        r = train(forge, 0, data, cfg, out)
        ok(r.returncode == 0 and sorted(losses(out)) == [1, 2, 3], "without MPI: trains on one process",
           r.stdout[-600:])
        if shutil.which("mpirun"):
            r = train(forge, 2, data, cfg, os.path.join(work, "two"), timeout=60)
            ok(r.returncode != 0 and "built without MPI" in r.stdout,
               "without MPI: mpirun -np 2 is refused, naming the build", r.stdout[-600:])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def one_rank_gate(forge, data, cfg, d):
    r = train(forge, 0, data, cfg, d("plain"))
    ok(r.returncode == 0, "train plain (no mpirun)", r.stdout[-800:])
    last = f"ckpt_{STEPS:06d}"
    # with NCCL the small buckets run on the side stream during the backward (identities with one rank)
    for extra in ([], ["--zero1"], ["--bucket-mb", BUCKET_MB], ["--zero1", "--bucket-mb", BUCKET_MB]):
        out = d("np1" + "_".join(extra))
        r = train(forge, 1, data, cfg, out, extra)
        same = r.returncode == 0 and losses(out) == losses(d("plain")) and all(
            same_files(d("plain"), out, f"{last}/{f}") for f in ("model.safetensors", "state.safetensors"))
        ok(same, f"mpirun -np 1 {' '.join(extra)}: the plain run bit for bit", r.stdout[-800:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--forge", default="build/forge")
    ap.add_argument("--keep-dir", action="store_true")
    ap.add_argument("--no-mpi-build", action="store_true")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--one-rank", action="store_true")
    args = ap.parse_args()
    if args.device == "cuda":
        DEVICE.extend(["--device", "cuda", "--precision", "fp32"])
    forge = os.path.abspath(args.forge)
    if args.no_mpi_build:
        return no_mpi_build(forge)
    if not shutil.which("mpirun"):
        print("skip dist_test: mpirun not found (install openmpi-bin)")
        print("0 passed, 0 failed")
        return 0
    probe = subprocess.run(mpirun(2) + [forge, "train", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=mpi_env())
    if "--zero1" not in probe.stdout:
        print(f"FAIL {forge} has no data-parallel options: {probe.stdout[-300:]}")
        print("0 passed, 1 failed")
        return 1
    work = tempfile.mkdtemp(prefix="forge-dist-")
    t_start = time.time()
    try:
        data, cfg = crash_test.make_data(forge, work, 1)
        d = lambda name: os.path.join(work, name)  # noqa: E731
        one_rank_gate(forge, data, cfg, d)
        if args.one_rank:
            print(f"{passed} passed, {failed} failed")
            return 1 if failed else 0

        # the references: 1 process with 2 micro-batches, 2 ranks with one each (replicated and ZeRO-1)
        runs = {"one": (0, []), "two": (2, []), "two_zero1": (2, ["--zero1"])}
        for name, (ranks, extra) in runs.items():
            r = train(forge, ranks, data, cfg, d(name), extra)
            if not ok(r.returncode == 0, f"train {name} ({ranks or 1} rank(s) {' '.join(extra)})", r.stdout[-800:]):
                return 1
        compare_runs("2 ranks vs 1 process x 2 micro-batches", d("one"), d("two"), LOSS_BOUND, WEIGHT_BOUND, True)
        compare_runs("2 ranks ZeRO-1 vs 1 process x 2 micro-batches", d("one"), d("two_zero1"), LOSS_BOUND,
                     WEIGHT_BOUND, True)
        compare_runs("ZeRO-1 vs replicated optimizer on 2 ranks", d("two"), d("two_zero1"), ZERO1_BOUND, ZERO1_BOUND)
        last = f"ckpt_{STEPS:06d}"
        bitwise = all(same_files(d("two"), d("two_zero1"), f"{last}/{f}")
                      for f in ("model.safetensors", "state.safetensors"))
        print(f"note ZeRO-1 and replicated checkpoints {'identical bit for bit' if bitwise else 'differ (within bound)'}")

        # gradient buckets: each bucket reduced during the backward once final gives every element the bits of the
        # reduction of the whole block after the backward (the default 25 MiB is one bucket here; 0 = none)
        for name, extra, ref in (("two_nobuckets", ["--bucket-mb", "0"], "two"),
                                 ("two_buckets", ["--bucket-mb", BUCKET_MB], "two"),
                                 ("two_zero1_nobuckets", ["--zero1", "--bucket-mb", "0"], "two_zero1"),
                                 ("two_zero1_buckets", ["--zero1", "--bucket-mb", BUCKET_MB], "two_zero1")):
            r = train(forge, 2, data, cfg, d(name), extra)
            buckets = [line for line in r.stdout.splitlines() if line.startswith("gradient buckets")]
            same = r.returncode == 0 and losses(d(name)) == losses(d(ref)) and all(
                same_files(d(ref), d(name), f"{last}/{f}") for f in ("model.safetensors", "state.safetensors"))
            ok(same, f"2 ranks {' '.join(extra)}: identical to the {ref} run bit for bit "
               f"({buckets[0].split(',')[0] if buckets else 'no bucket line'})", r.stdout[-800:])

        # the bf16 step (CPU reference of the mixed-precision path): ZeRO-1 re-rounds the working copy from the
        # gathered masters
        for name, ranks, extra in (("one_bf16", 0, []), ("two_zero1_bf16", 2, ["--zero1"])):
            r = train(forge, ranks, data, cfg, d(name), extra + ["--precision", "bf16"])
            ok(r.returncode == 0, f"train {name}", r.stdout[-800:])
        compare_runs("bf16: 2 ranks ZeRO-1 vs 1 process x 2 micro-batches", d("one_bf16"), d("two_zero1_bf16"),
                     BF16_BOUND, BF16_WEIGHT_BOUND, True)
        r = train(forge, 2, data, cfg, d("two_zero1_bf16_buckets"),
                  ["--zero1", "--bucket-mb", BUCKET_MB, "--precision", "bf16"])
        same = r.returncode == 0 and losses(d("two_zero1_bf16_buckets")) == losses(d("two_zero1_bf16")) and all(
            same_files(d("two_zero1_bf16"), d("two_zero1_bf16_buckets"), f"{last}/{f}")
            for f in ("model.safetensors", "state.safetensors"))
        ok(same, "bf16: 2 ranks ZeRO-1 with buckets: identical to the unbucketed run bit for bit", r.stdout[-800:])

        # stop at step 10 and resume on the same 2 ranks: the uninterrupted run, bit for bit
        for extra in ([], ["--zero1"]):
            tag = "ZeRO-1" if extra else "replicated"
            out = d("resume2" + "".join(extra))
            r1 = train(forge, 2, data, cfg, out, extra + ["--stop-after", "10"])
            r2 = train(forge, 2, data, cfg, out, extra + ["--resume", out])
            ref = d("two_zero1" if extra else "two")
            same = r1.returncode == 0 and r2.returncode == 0 and losses(out) == losses(ref) and all(
                same_files(ref, out, f"{last}/{f}") for f in ("model.safetensors", "state.safetensors"))
            ok(same, f"2 ranks ({tag}) stopped at step 10 and resumed on 2: identical to the uninterrupted run",
               (r1.stdout + r2.stdout)[-600:])

        # across rank counts: saved on 2 (ZeRO-1) resumed on 1, saved on 1 resumed on 2
        out = d("two_to_one")
        r1 = train(forge, 2, data, cfg, out, ["--zero1", "--stop-after", "10"])
        r2 = train(forge, 0, data, cfg, out, ["--resume", out])
        if ok(r1.returncode == 0 and r2.returncode == 0, "saved on 2 ranks (ZeRO-1), resumed on 1 process",
              (r1.stdout + r2.stdout)[-600:]):
            first = losses(out)
            ok(all(first[s] == losses(d("two_zero1"))[s] for s in range(1, 11)),
               "saved on 2 ranks: steps 1-10 are the 2-rank run's")
            compare_runs("saved on 2 ranks, resumed on 1: continuation", d("two_zero1"), out, LOSS_BOUND, WEIGHT_BOUND)
        out = d("one_to_two")
        r1 = train(forge, 0, data, cfg, out, ["--stop-after", "10"])
        r2 = train(forge, 2, data, cfg, out, ["--zero1", "--resume", out])
        if ok(r1.returncode == 0 and r2.returncode == 0, "saved on 1 process, resumed on 2 ranks (ZeRO-1)",
              (r1.stdout + r2.stdout)[-600:]):
            compare_runs("saved on 1, resumed on 2 ranks: continuation", d("one"), out, LOSS_BOUND, WEIGHT_BOUND)

        # failure: kill -9 of rank 1 mid-run
        out = d("killed")
        code, secs, text = failure_run(forge, data, cfg, out, signal.SIGKILL, "kill -9")
        ok(code is not None and code != 0 and secs <= TIMEOUT + 5,
           f"kill -9 of rank 1: the job exits non-zero within the timeout ({code}, {secs:.1f} s)", text[-600:])
        why = crash_test.check_checkpoint(forge, out)
        ok(why == "" and os.path.exists(os.path.join(out, "latest")), "kill -9 of rank 1: latest loads", why)
        r = subprocess.run([forge, "train", "--resume", out, "--steps", str(int(open(os.path.join(out, "latest"))
                            .read().strip()[5:]) + 2), "--threads", "1", "--quiet", "--data", data],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ok(r.returncode == 0, "kill -9 of rank 1: the run resumes on 1 process", r.stdout[-600:])

        # failure: rank 1 hangs (SIGSTOP): rank 0's watchdog aborts the job after --dist-timeout
        out = d("hung")
        code, secs, text = failure_run(forge, data, cfg, out, signal.SIGSTOP, "SIGSTOP")
        ok(code is not None and code != 0 and secs <= TIMEOUT + 10 and "--dist-timeout" in text,
           f"a hung rank: the watchdog ends the job non-zero after the timeout ({code}, {secs:.1f} s)", text[-600:])
        why = crash_test.check_checkpoint(forge, out)
        ok(why == "", "a hung rank: latest loads", why)
    finally:
        if args.keep_dir:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, {failed} failed ({time.time() - t_start:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
