#!/usr/bin/env python3
"""crash_test.py: kill -9 a CPU training run at random moments, resume it each time, and check that the run
directory never lies.

Builds its own small data (a seeded synthetic text, `forge tokenizer train`, `forge tokenize`) and a tiny config,
trains once without interruption (the reference), then trains the same run again under SIGKILL at seeded random
moments (startup, mid-step, mid-checkpoint, mid-collection, ...), resuming after each kill. After every kill:

  - `latest` (when present) names a complete checkpoint: model.safetensors and state.safetensors are whole
    (header JSON, offsets, sizes), their values finite, the state's step equals the directory's, the tokenizer
    files are whole, and `forge sample` loads it;
  - at most keep + 1 ckpt_* directories exist (the kept ones plus the one being written);
  - log.jsonl's steps run 1, 2, ... without a repeat (only its last line may be torn).

Before that, a second run started on the directory of a running one must be refused, naming the holder.

At the end: the run finished (exit 0), its final model.safetensors and state.safetensors equal the reference's
byte for byte, the log holds every step exactly once with the reference's losses, at most `keep` checkpoint
directories remain and no temporary file is left. Prints one line per check and "N passed, N failed"; exit 1 on
any failure. Python 3 standard library only.

usage: tools/crash_test.py [--forge build/forge] [--kills 40] [--seed 1] [--steps 60] [--keep-dir]
"""
import argparse
import array
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

KEEP = 2  # forge train's default --keep-checkpoints
CONFIG = {"family": "gpt2", "vocab_size": 320, "context_length": 64, "d_model": 64, "n_layers": 2, "n_heads": 4}

passed = failed = 0


def report(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {what}")
    else:
        failed += 1
        print(f"FAIL {what}{': ' + detail if detail else ''}")
    sys.stdout.flush()
    return ok


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", **kw)


def make_data(forge, work, seed):
    """A seeded synthetic corpus (~120 KB), a 320-id BPE and its shards."""
    rng = random.Random(seed)
    names = ["Tim", "Sue", "Max", "Lily", "Ben", "the cat", "a dog", "the bird", "Mom", "the old man"]
    verbs = ["saw", "liked", "found", "lost", "helped", "chased", "hugged", "painted", "ate", "wanted"]
    things = ["a red ball", "the big tree", "a small box", "the blue sky", "some cake", "a shiny key",
              "the river", "a funny hat", "the garden", "a long stick"]
    ends = ["It was a good day.", "They were happy.", "Then it rained.", "Everyone laughed.", "The end."]
    stories = []
    for _ in range(420):
        sents = [f"{rng.choice(names).capitalize()} {rng.choice(verbs)} {rng.choice(things)}."
                 for _ in range(rng.randint(3, 7))]
        stories.append("Once upon a time, " + " ".join(sents) + " " + rng.choice(ends))
    text = os.path.join(work, "text.txt")
    with open(text, "w") as f:
        f.write("\n<|endoftext|>\n".join(stories) + "\n")
    data = os.path.join(work, "data")
    for cmd in ([forge, "tokenizer", "train", "--vocab", "320", "--out", data, text],
                [forge, "tokenize", "--tokenizer", data, "--out", data, text]):
        r = run(cmd)
        if r.returncode != 0:
            raise SystemExit(f"crash_test: {' '.join(cmd)} failed:\n{r.stdout}")
    cfg = os.path.join(work, "crash.json")
    with open(cfg, "w") as f:
        json.dump(CONFIG, f)
    return data, cfg


def train_cmd(forge, cfg, data, out, steps, resume, with_config=True):
    cmd = [forge, "train", "--data", data, "--out", out, "--steps", str(steps), "--batch", "8", "--seq-len", "64",
           "--ckpt-every", "2", "--eval-every", "5", "--eval-batches", "2", "--threads", "1", "--quiet"]
    # a resumed run takes the checkpoint's config; giving the same one must be accepted too
    return cmd + (["--resume", out] if resume else []) + (["--config", cfg] if not resume or with_config else [])


def read_safetensors(path):
    """(header dict, data bytes) of a whole safetensors file; raises ValueError when torn or malformed."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: {len(raw)} bytes, shorter than the length field")
    n = int.from_bytes(raw[:8], "little")
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} past the end ({len(raw)} bytes)")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    end = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        numel = 1
        for d in t["shape"]:
            numel *= d
        if t["dtype"] != "F32" or e - b != 4 * numel or b != end:
            raise ValueError(f"{path}: tensor {name}: offsets {b}..{e}, shape {t['shape']}, dtype {t['dtype']}")
        end = e
    if end != len(data):
        raise ValueError(f"{path}: tensors end at {end}, the file holds {len(data)} data bytes")
    values = array.array("f")
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    bad = sum(1 for x in values if not math.isfinite(x))
    if bad:
        raise ValueError(f"{path}: {bad} non-finite values")
    return header, data


def check_checkpoint(forge, out):
    """'' when `latest` is absent or names a complete, loadable checkpoint; else what is wrong."""
    latest = os.path.join(out, "latest")
    if not os.path.exists(latest):
        return ""
    name = open(latest).read().strip()
    m = re.fullmatch(r"ckpt_(\d+)", name)
    if not m:
        return f"latest holds {name!r}"
    ckpt = os.path.join(out, name)
    try:
        read_safetensors(os.path.join(ckpt, "model.safetensors"))
        header, _ = read_safetensors(os.path.join(ckpt, "state.safetensors"))
        meta = header.get("__metadata__", {})
        if int(meta.get("step", -1)) != int(m.group(1)) or meta.get("adamw_step") != meta.get("step"):
            return f"{name}/state.safetensors: step {meta.get('step')}, adamw_step {meta.get('adamw_step')}"
        json.load(open(os.path.join(ckpt, "encoder.json")))
        bpe = open(os.path.join(ckpt, "vocab.bpe")).read()
        if not bpe.startswith("#version") or not bpe.endswith("\n"):
            return f"{name}/vocab.bpe is torn"
    except (OSError, ValueError) as e:
        return f"{name}: {e}"
    r = run([forge, "sample", "--ckpt", out, "--tokens", "2", "--threads", "1"])
    if r.returncode != 0:
        return f"forge sample --ckpt {out}: exit {r.returncode}: {r.stdout.strip()[-300:]}"
    return ""


def log_steps(out):
    """(step lines' steps, val lines' steps, losses by step, torn lines) of log.jsonl."""
    steps, vals, losses, torn = [], [], {}, 0
    path = os.path.join(out, "log.jsonl")
    if not os.path.exists(path):
        return steps, vals, losses, torn
    lines = open(path).read().split("\n")
    for i, line in enumerate(lines):
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            torn += 1
            if i != len(lines) - 1:  # only the last line, being written when killed, may be partial
                torn += 100
            continue
        if "val_loss" in rec:
            vals.append(rec["step"])
        else:
            steps.append(rec["step"])
            losses[rec["step"]] = rec["loss"]
    return steps, vals, losses, torn


def checkpoint_dirs(out):
    return sorted(d for d in os.listdir(out) if d.startswith("ckpt_"))


def leftovers(out):
    found = []
    for root, dirs, files in os.walk(out):
        found += [os.path.join(root, x) for x in dirs + files if x.endswith(".tmp")]
    return found


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--forge", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                    "forge"))
    ap.add_argument("--kills", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--keep-dir", action="store_true", help="keep the work directory")
    return ap.parse_args()


def crash_test(a):
    forge = os.path.abspath(a.forge)
    if not report(os.access(forge, os.X_OK), f"{forge} exists (make cpu)"):
        return
    t0 = time.time()
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="forge-crash-")
    try:
        data, cfg = make_data(forge, work, a.seed)
        ref, out = os.path.join(work, "ref"), os.path.join(work, "crash")

        # The reference, uninterrupted; one-step runs first to measure the start-up: the faster of two, since the
        # first pays for cold caches, and a start-up measured too long lets a resumed run finish before its kill.
        startup = None
        for i in range(2):
            t = time.time()
            r = run(train_cmd(forge, cfg, data, os.path.join(work, f"one{i}"), 1, False))
            startup = min(time.time() - t, startup if startup is not None else float("inf"))
        t = time.time()
        r = run(train_cmd(forge, cfg, data, ref, a.steps, False))
        per_step = max((time.time() - t - startup) / max(a.steps - 1, 1), 1e-3)
        if not report(r.returncode == 0, f"reference run: {a.steps} steps uninterrupted", r.stdout[-500:]):
            return
        print(f"     start-up {startup:.2f} s, {per_step * 1000:.0f} ms per step (with its checkpoint)")

        # Two runs on one --out: the second is refused, naming the first (its pid) while the first holds the lock.
        locked = os.path.join(work, "locked")
        first = subprocess.Popen(train_cmd(forge, cfg, data, locked, a.steps, False), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline and first.poll() is None:
            lock = os.path.join(locked, "lock")
            if os.path.exists(lock) and f"pid {first.pid} " in open(lock).read():
                break
            time.sleep(0.005)
        second = run(train_cmd(forge, cfg, data, locked, a.steps, False))
        holding = first.poll() is None
        first.send_signal(signal.SIGKILL)
        first.wait()
        report(holding and (second.returncode == 1 and "in use by another run" in second.stdout and
                               f"pid {first.pid} " in second.stdout),
               "a second run on the same --out is refused, naming the first's pid (exit 1)",
               f"first still running: {holding}; second: exit {second.returncode}: {second.stdout.strip()[-300:]}")

        # The same run under SIGKILL. The delay before each kill is drawn so that the remaining work is spread
        # over the remaining kills and the final cycle, from 0 (a kill during start-up) upwards.
        kills = cycles = 0
        finished = False
        while not finished:
            cycles += 1
            resume = os.path.exists(os.path.join(out, "latest"))
            done = 0
            if resume:
                m = re.fullmatch(r"ckpt_(\d+)", open(os.path.join(out, "latest")).read().strip())
                done = int(m.group(1)) if m else 0
            log = open(os.path.join(work, f"cycle{cycles:03d}.log"), "w")
            p = subprocess.Popen(train_cmd(forge, cfg, data, out, a.steps, resume, cycles % 2 == 0), stdout=log,
                                 stderr=subprocess.STDOUT)
            if kills < a.kills:
                share = (a.steps - done) * per_step / (a.kills - kills + 2)
                delay = rng.uniform(0, startup + 2 * share)
                try:
                    p.wait(timeout=delay)
                except subprocess.TimeoutExpired:
                    p.send_signal(signal.SIGKILL)
                    p.wait()
                    kills += 1
                    log.close()
                    problem = check_checkpoint(forge, out)
                    steps, _, _, torn = log_steps(out)
                    dirs = checkpoint_dirs(out) if os.path.isdir(out) else []
                    if steps != list(range(1, len(steps) + 1)) or torn > 1:
                        problem += f" log.jsonl steps {steps} ({torn} torn)"
                    if len(dirs) > KEEP + 1:
                        problem += f" {len(dirs)} checkpoint directories: {dirs}"
                    latest = open(os.path.join(out, "latest")).read().strip() if os.path.exists(
                        os.path.join(out, "latest")) else "none"
                    report(not problem, f"kill {kills:2d} after {delay:.2f} s: latest {latest} loads, "
                                        f"{len(dirs)} checkpoint dir(s), log steps 1..{len(steps)}", problem)
                    continue
            else:
                p.wait(timeout=600)
            log.close()
            text = open(log.name, errors="replace").read()
            finished = report(p.returncode == 0, f"cycle {cycles}: the run finishes after {kills} kills (exit 0)",
                              f"exit {p.returncode}: {text[-800:]}")
            if not finished:
                return

        report(kills >= min(a.kills, 20), f"the run was killed {kills} times (asked {a.kills}, at least 20)")

        # The end state equals the uninterrupted run's.
        final = f"ckpt_{a.steps:06d}"
        for f in ("model.safetensors", "state.safetensors"):
            x, y = os.path.join(ref, final, f), os.path.join(out, final, f)
            same = os.path.exists(x) and os.path.exists(y) and open(x, "rb").read() == open(y, "rb").read()
            report(same, f"final {f} bit-identical to the uninterrupted run's")
        steps, vals, losses, torn = log_steps(out)
        rsteps, rvals, rlosses, _ = log_steps(ref)
        report(steps == list(range(1, a.steps + 1)) and vals == rvals and torn == 0,
               f"log.jsonl: steps 1..{a.steps} once each, no repeat after {kills} resumes",
               f"steps {steps}, val steps {vals} (reference {rvals}), {torn} torn")
        report(losses == rlosses, "log.jsonl: every step's loss equals the uninterrupted run's",
               str([(s, losses.get(s), rlosses[s]) for s in rlosses if losses.get(s) != rlosses[s]][:5]))
        dirs = checkpoint_dirs(out)
        report(len(dirs) <= KEEP and final in dirs and dirs == checkpoint_dirs(ref),
               f"at most {KEEP} checkpoint directories remain ({' '.join(dirs)})",
               f"crash run {dirs}, reference {checkpoint_dirs(ref)}")
        left = leftovers(out)
        report(not left, "no temporary leftovers in the run directory", " ".join(left))
        print(f"     {cycles} cycles, {kills} kills, {time.time() - t0:.1f} s")
    finally:
        if a.keep_dir:
            print(f"     work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main():
    try:
        crash_test(parse_args())
    except Exception as e:  # a broken harness is a failure too, not a traceback without a summary
        report(False, "crash test harness", f"{type(e).__name__}: {e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
