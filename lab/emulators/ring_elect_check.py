#!/usr/bin/env python3
"""ring_elect_check.py (lab, no GPU): the producer-less ring of lab/flash/flash16_fwd64_n32.cu (fw3_fwd_kernel) run
under random interleavings of its 8 consumer warps, checking that every refill happens only after all 8 warps
released the stage's previous tile, that a warp always finds the tile it waits for in the stage (never the
previous or the next round's), and that no interleaving deadlocks.

The model, one action per scheduling step of a random runnable warp:
- thread 0 (warp 0) first loads tiles 0 .. STAGES-1 (each lands after a random delay);
- warp w, for t in 0 .. ntiles-1: waits until tile t has landed in stage t % STAGES; reads it if t < nt[w] (the
  warpgroup's visible tiles: warps 0-3 see nt0, warps 4-7 nt1 >= nt0); releases: arrives on the stage's empty
  barrier (round t // STAGES), then, if t + STAGES < ntiles, counts (fetch-add); the warp whose count is 8r + 7
  waits for the round's 8 arrivals (the empty barrier's phase) and loads tile t + STAGES into the stage.
The model is sequentially consistent, so it checks the protocol's counting (a warp that counted a tile without
waiting for it would let a refill land over a tile still in use: that mutation fails here), not the memory
ordering: the elected warp's wait on the empty barrier is what orders the other warps' reads before its refill
under the relaxed count, and a model in which the eighth count implies the eight arrivals cannot see it removed.
usage: python3 lab/emulators/ring_elect_check.py [--trials N]"""
import argparse
import random


def run(rng, stages, ntiles, nt0, nt1):
    W = 8
    nt = [nt0] * 4 + [nt1] * 4
    content = [None] * stages  # tile id loaded (landed) in each stage
    pending = []  # (land_step, stage, tile)
    arrivals = {}  # (stage, round) -> count
    cnt = [0] * stages
    released = {}  # tile -> warps that released it
    step = 0

    def load(st, t):
        pending.append((step + rng.randint(1, 6), st, t))

    for t in range(min(stages, ntiles)):
        load(t, t)
    # per-warp state: (t, phase) where phase in "wait_full", "release", "elect_wait"
    state = [[0, "wait_full"] for _ in range(W)]
    done = [ntiles == 0] * W
    while not all(done):
        step += 1
        for p in [p for p in pending if p[0] <= step]:
            pending.remove(p)
            _, st, t = p
            assert content[st] is None or content[st] == t - stages, f"stage {st}: tile {t} lands over {content[st]}"
            content[st] = t
        runnable = []
        for w in range(W):
            if done[w]:
                continue
            t, ph = state[w]
            st, r = t % stages, t // stages
            if ph == "wait_full" and content[st] == t:
                runnable.append(w)
            elif ph == "release":
                runnable.append(w)
            elif ph == "elect_wait" and arrivals.get((st, r), 0) == W:
                runnable.append(w)
        if not runnable:
            if pending:
                continue
            raise AssertionError(f"deadlock at step {step}: {state}")
        w = rng.choice(runnable)
        t, ph = state[w]
        st, r = t % stages, t // stages
        if ph == "wait_full":
            assert content[st] == t
            state[w][1] = "release"  # reads the tile (t < nt[w]) or only waited for it
        elif ph == "release":
            arrivals[(st, r)] = arrivals.get((st, r), 0) + 1
            released.setdefault(t, set()).add(w)
            elect = False
            if t + stages < ntiles:
                old = cnt[st]
                cnt[st] += 1
                elect = old % 8 == 7
            if elect:
                state[w][1] = "elect_wait"
            else:
                state[w] = [t + 1, "wait_full"]
        elif ph == "elect_wait":
            assert released.get(t, set()) == set(range(W)), f"refill of stage {st} before all released tile {t}"
            load(st, t + stages)
            state[w] = [t + 1, "wait_full"]
        if state[w][0] >= ntiles:
            done[w] = True
    assert not pending or all(p[2] < ntiles for p in pending)
    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3000)
    a = ap.parse_args()
    rng = random.Random(20261204)
    n = 0
    for _ in range(a.trials):
        stages = rng.choice([2, 3, 5, 7])
        ntiles = rng.randint(0, 40)
        nt1 = rng.randint(0, ntiles)
        nt0 = rng.randint(0, nt1)
        run(rng, stages, ntiles, nt0, nt1)
        n += 1
    print(f"ring_elect_check: {n} random interleavings (stages 2-7, 0-40 tiles), no early refill, no wrong tile, "
          "no deadlock")


if __name__ == "__main__":
    main()
