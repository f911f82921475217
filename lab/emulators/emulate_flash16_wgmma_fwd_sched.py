#!/usr/bin/env python3
# emulate_flash16_wgmma_fwd_sched.py: emulation of the consumer schedules of fw_fwd_ov_kernel
# (src/backend/cuda/flash_attention_bf16_wgmma.cu, FORGE_FLASH16_FWD_SCHED=overlap | pingpong), checked against
# float64 causal attention (bottom-right, any Tq / Tk, GQA does not change the schedule: one (b, h) per run).
# Modelled, in the kernel's program order per agent: the producer (ring of STAGES stages, full / empty mbarriers
# with phase parities, empty counting the 8 consumer warps as 2 x 4 arrivals), the two consumer warpgroups
# (nt, first_masked, prologue / loop / epilogue, the stage each wgmma reads, release after the last reader,
# the skipped-tile loop) and the pingpong named barriers (256 = one warpgroup's bar.sync + the other's
# bar.arrive; the initial arrive; warpgroup 1's dropped last arrive), and persistent CTAs (FORGE_FLASH16_FWD_SCHED=
# persist: paired units of fw_unit_items, the ring running on across items, the Q buffer with qbar / qempty,
# the producer's tile 0 before the next Q). A random interleaving of the three
# agents runs each case many times: a state where no agent can move is reported as a deadlock, a stage the
# producer overwrites while a warpgroup still reads it as a race, a tile whose keys need the mask but skip it
# (t < first_masked) as a mask error, and out / lse are compared with float64 (P rounded to bf16 with --bf16).
# Not modelled: the fragment / descriptor layouts (the same as fw_fwd_kernel's, which passed GPU parity), timing.
# Also prints the causal load balance of persist's paired units on 132 SMs at the bench shapes.
# usage: python3 lab/emulators/emulate_flash16_wgmma_fwd_sched.py [--bf16]   (one line per case, exit 1 on a failure)
import math
import random
import sys

import numpy as np

from bf16_round import round_bf16

BM = 128
LOG2E = 1.4426950408889634
ROUND = "--bf16" in sys.argv


def bf(x):
    if not ROUND:
        return np.asarray(x, dtype=np.float64)
    return round_bf16(x)


class Fail(Exception):
    pass


class Mbar:
    def __init__(self, count):
        self.count, self.pending, self.phase = count, count, 0  # phase = completed phases

    def arrive(self, n=1):
        self.pending -= n
        if self.pending < 0:
            raise Fail("mbarrier over-arrived")
        if self.pending == 0:
            self.phase += 1
            self.pending = self.count

    def done(self, parity):  # try_wait.parity: the phase with this parity has completed
        return (self.phase & 1) != parity


class NamedBar:
    """bar.sync / bar.arrive with 256 threads: a generation completes when 2 x 128 have arrived"""

    def __init__(self):
        self.arrived, self.gen = 0, 0

    def arrive(self):
        self.arrived += 128
        if self.arrived > 256:
            raise Fail("named barrier: more than 256 arrivals in one generation")
        if self.arrived == 256:
            self.arrived, self.gen = 0, self.gen + 1


def run_cta(heads, items, Tq, Tk, BN, STAGES, PP, rng):
    """one CTA walking `items` (q0, head index) in order; heads[i] = (q, k, v) of one (b, h)"""
    D = heads[0][0].shape[1]
    sl2 = LOG2E / math.sqrt(D)
    diag = Tk - Tq

    def ntiles_of(q0):
        kv_end = min(Tk, q0 + BM + diag)
        return (kv_end + BN - 1) // BN if kv_end > 0 else 0

    full = [Mbar(1) for _ in range(STAGES)]
    empty = [Mbar(8) for _ in range(STAGES)]
    qbar, qempty = Mbar(1), Mbar(8)
    ring = [None] * STAGES  # (item, tile) a stage holds
    qbuf = [None]  # the item whose Q is in shared memory
    holders = [set() for _ in range(STAGES)]
    qholders = set()
    nbar = [NamedBar(), NamedBar()]
    results = {}

    def producer():
        stage, phase, nq = 0, 0, 0
        for it, (q0, _) in enumerate(items):
            ntiles = ntiles_of(q0)
            if ntiles == 0:
                continue
            for t in range(ntiles):
                yield lambda s=stage, ph=phase: empty[s].done(ph ^ 1)
                if holders[stage]:
                    raise Fail(f"race: tile {t} overwrites stage {stage} still read by {holders[stage]}")
                ring[stage] = (it, t)
                full[stage].arrive()  # arrive.expect_tx + the TMA bytes, completed at once
                stage += 1
                if stage == STAGES:
                    stage, phase = 0, phase ^ 1
                if t == 0:
                    yield lambda p=(nq & 1) ^ 1: qempty.done(p)
                    if qholders:
                        raise Fail(f"race: Q of item {it} overwrites Q still read by {qholders}")
                    qbuf[0] = it
                    qbar.arrive()
            nq += 1

    def consumer(c):
        st = {"stage": 0, "phase": 0, "qphase": 0}

        def advance():
            st["stage"] += 1
            if st["stage"] == STAGES:
                st["stage"], st["phase"] = 0, st["phase"] ^ 1

        def release(s):
            holders[s].discard(c)
            empty[s].arrive(4)

        if PP and c == 1:
            nbar[0].arrive()
        for it, (q0, hd) in enumerate(items):
            q, k, v = heads[hd]
            ntiles = ntiles_of(q0)
            last_item = it == len(items) - 1
            wrow0 = q0 + c * 64
            rows = np.arange(wrow0, wrow0 + 64)
            vis = wrow0 + 63 + diag
            nt = 0 if vis < 0 else min(ntiles, vis // BN + 1)
            first_masked = min(int((wrow0 + diag + 1) / BN), Tk // BN)  # C division truncates
            qq = np.zeros((64, D))
            for i, r in enumerate(rows):
                if r < Tq:
                    qq[i] = q[r]
            o = np.zeros((64, D))
            m = np.full(64, -np.inf)
            l = np.zeros(64)
            pp = {"left": ntiles + 1, "no_arrive_at": 1 if (c == 1 and last_item) else 0}

            def tile(s, t):
                if ring[s] != (it, t):
                    raise Fail(f"wg {c} reads stage {s} expecting {(it, t)}, holds {ring[s]}")
                keys = np.arange(t * BN, t * BN + BN)
                kt = np.array([k[j] if j < Tk else np.zeros(D) for j in keys])  # TMA zero fill
                vt = np.array([v[j] if j < Tk else np.zeros(D) for j in keys])
                return keys, kt, vt

            def qk(s, t):
                if qbuf[0] != it:
                    raise Fail(f"wg {c} item {it} reads the Q of item {qbuf[0]}")
                qholders.add(c)
                keys, kt, _ = tile(s, t)
                holders[s].add(c)
                sc = qq @ kt.T
                need = (keys[None, :] > rows[:, None] + diag) | (keys[None, :] >= Tk)
                if t >= first_masked:
                    sc = np.where(need, -np.inf, sc)
                elif need.any():
                    raise Fail(f"wg {c} tile {t} skips the mask (first_masked {first_masked}) but needs it")
                return sc

            def softmax(sc):
                mx = sc.max(axis=1)
                mnew = np.maximum(m, mx * sl2)
                muse = np.where(mnew == -np.inf, 0.0, mnew)
                alpha = np.exp2(m - muse)
                m[:] = mnew
                p = np.exp2(sc * sl2 - muse[:, None])
                l[:] = l * alpha + p.sum(axis=1)
                return p, alpha

            def pv(p, s, t):
                _, _, vt = tile(s, t)
                return bf(p) @ vt

            def pp_begin():
                if PP:
                    g = nbar[c].gen
                    nbar[c].arrive()
                    return lambda: nbar[c].gen > g
                return lambda: True

            def pp_end():
                if PP:
                    if pp["left"] != pp["no_arrive_at"]:
                        nbar[c ^ 1].arrive()
                    pp["left"] -= 1

            if ntiles > 0:
                yield lambda p=st["qphase"]: qbar.done(p)
            if nt > 0:
                yield lambda s=st["stage"], ph=st["phase"]: full[s].done(ph)
                yield pp_begin()
                sc = qk(st["stage"], 0)
                pp_end()
                p, alpha = softmax(sc)
                pstage, pt = st["stage"], 0
                advance()
                for t in range(1, nt):
                    yield lambda s=st["stage"], ph=st["phase"]: full[s].done(ph)
                    yield pp_begin()
                    sc = qk(st["stage"], t)
                    acc = pv(p, pstage, pt)  # issued with S_t, read until the wait below
                    pp_end()
                    yield lambda: True  # the other agents run while both groups are in flight
                    p_new, alpha = softmax(sc)
                    o = o + acc
                    release(pstage)
                    o = o * alpha[:, None]
                    p = p_new
                    pstage, pt = st["stage"], t
                    advance()
            if ntiles > 0:
                qholders.discard(c)
                qempty.arrive(4)
                st["qphase"] ^= 1
            if nt > 0:
                pstage2 = STAGES - 1 if st["stage"] == 0 else st["stage"] - 1
                assert pstage2 == pstage
                yield pp_begin()
                o = o + pv(p, pstage, pt)
                pp_end()
                yield lambda: True
                release(pstage)
            for t in range(nt, ntiles):
                yield lambda s=st["stage"], ph=st["phase"]: full[s].done(ph)
                if ring[st["stage"]] != (it, t):
                    raise Fail(f"wg {c} skips stage {st['stage']} expecting {(it, t)}, holds {ring[st['stage']]}")
                yield pp_begin()
                pp_end()
                release(st["stage"])
                advance()
            if PP and nt == 0:
                yield pp_begin()
                pp_end()
            if PP and pp["left"] != 0:
                raise Fail(f"wg {c} item {it}: {pp['left']} PP phases left")
            results[(it, c)] = (hd, rows, o, m.copy(), l.copy())

    agents = [producer(), consumer(0), consumer(1)]
    conds = [lambda: True] * 3
    live = [True] * 3
    while any(live):
        ready = [i for i in range(3) if live[i] and conds[i]()]
        if not ready:
            raise Fail(f"deadlock (items {items})")
        i = rng.choice(ready)
        try:
            conds[i] = next(agents[i])
        except StopIteration:
            live[i] = False
    if PP and (nbar[0].arrived or nbar[1].arrived):
        raise Fail(f"named barrier left with arrivals {nbar[0].arrived}, {nbar[1].arrived}")
    return results


def reference(q, k, v, Tq, Tk):
    D = q.shape[1]
    s = (q @ k.T) / math.sqrt(D)
    i = np.arange(Tq)[:, None]
    j = np.arange(Tk)[None, :]
    s = np.where(j <= i + Tk - Tq, s, -np.inf)
    mx = s.max(axis=1, initial=-np.inf)
    mu = np.where(mx == -np.inf, 0.0, mx)
    p = np.exp(s - mu[:, None])
    lsum = p.sum(axis=1)
    out = np.where(lsum[:, None] > 0, (p @ v) / np.where(lsum > 0, lsum, 1)[:, None], 0.0)
    lse = np.where(lsum > 0, mu + np.log(np.where(lsum > 0, lsum, 1)), -np.inf)
    return out, lse


def unit_items(u, np_, nqt, paired):
    """fw_unit_items / fw_unit_item: the (q0, head) items of unit u"""
    p, hb = u % np_, u // np_
    its = [((nqt - 1 - p) * BM, hb)]
    if paired and 2 * p != nqt - 1:
        its.append((p * BM, hb))
    return its


def cta_items(Tq, nheads, grid):
    """grid None: one CTA per query tile (unpaired units); else `grid` persistent CTAs striding paired units"""
    nqt = (Tq + BM - 1) // BM
    paired = grid is not None
    np_ = (nqt + 1) // 2 if paired else nqt
    nunits = np_ * nheads
    g = nunits if grid is None else min(grid, nunits)
    return [[it for u in range(i, nunits, g) for it in unit_items(u, np_, nqt, paired)] for i in range(g)]


def balance(B, H, T, D, sms=132):
    """max / mean causal tiles per CTA of persist (paired units) vs plain striding of single query tiles"""
    BN = 128 if D == 64 else 64

    def tiles(q0):
        return (min(T, q0 + BM) + BN - 1) // BN

    nqt = (T + BM - 1) // BM
    paired = [sum(tiles(q0) for q0, _ in items) for items in cta_items(T, B * H, sms)]
    single = [0] * sms
    for w in range(nqt * B * H):
        single[w % sms] += tiles((nqt - 1 - w % nqt) * BM)
    return max(paired) / (sum(paired) / sms), max(single) / (sum(single) / sms)


def case(Tq, Tk, D, PP, seed, reps, nheads, grid, n128=False):
    """grid None: one CTA per query tile (overlap / pingpong); else `grid` persistent CTAs striding paired units;
    n128: 128-key tiles at D = 128 too, 3 stages (the *_n128 schedules)"""
    BN = 128 if (D == 64 or n128) else 64
    STAGES = 3 if (D == 128 and BN == 128) else 4
    rng = random.Random(seed)
    g = np.random.default_rng(seed)
    heads = [tuple(bf(g.uniform(-1, 1, (T, D))) for T in (Tq, Tk, Tk)) for _ in range(nheads)]
    refs = [reference(q, k, v, Tq, Tk) for q, k, v in heads]
    ctas = cta_items(Tq, nheads, grid)
    err = 0.0
    for _ in range(reps):
        out = np.zeros((nheads, Tq, D))
        lse = np.zeros((nheads, Tq))
        for items in ctas:
            res = run_cta(heads, items, Tq, Tk, BN, STAGES, PP, rng)
            for (it, c), (hd, rows, o, m, l) in res.items():
                for i, r in enumerate(rows):
                    if r >= Tq:
                        continue
                    out[hd, r] = o[i] / l[i] if l[i] > 0 else 0.0
                    lse[hd, r] = (m[i] + math.log2(l[i])) / LOG2E if l[i] > 0 else -np.inf
        for hd, (ref_o, ref_l) in enumerate(refs):
            if np.isnan(out[hd]).any() or np.isnan(lse[hd]).any():
                raise Fail("NaN")
            if not np.array_equal(np.isinf(lse[hd]), np.isinf(ref_l)):
                raise Fail("-inf lse rows differ")
            fin = ~np.isinf(ref_l)
            e = max(np.abs(out[hd] - ref_o).max() if out[hd].size else 0.0,
                    np.abs(lse[hd][fin] - ref_l[fin]).max() if fin.any() else 0.0)
            err = max(err, e)
    return err


def main():
    tol = 3e-2 if ROUND else 1e-12
    shapes = [(67, 67, 64), (1, 1, 64), (1, 1, 128), (130, 130, 128), (200, 200, 128), (100, 37, 64),
              (100, 37, 128), (37, 100, 128), (256, 256, 64), (129, 200, 64), (513, 513, 128), (1000, 1000, 64),
              (300, 40, 128), (40, 700, 64), (640, 640, 128), (383, 1100, 128), (200, 100, 64), (330, 250, 128)]
    bad = 0
    for Tq, Tk, D in shapes:
        for sched, PP, grid, n128 in (("overlap", False, None, False), ("pingpong", True, None, False),
                                      ("persist/1", True, 1, False), ("persist/3", True, 3, False),
                                      ("persist_ov/2", False, 2, False), ("pingpong_n128", True, None, True),
                                      ("persist_n128/2", True, 2, True)):
            if n128 and D == 64:
                continue  # the same kernels as pingpong / persist
            name = f"Tq={Tq} Tk={Tk} D={D} {sched}"
            try:
                e = case(Tq, Tk, D, PP, seed=Tq * 7919 + Tk * 31 + D + PP, reps=2, nheads=3, grid=grid, n128=n128)
                ok = e <= tol
                print(f"{'ok  ' if ok else 'FAIL'} {name}: max abs err {e:.3g}")
                bad += not ok
            except Fail as ex:
                print(f"FAIL {name}: {ex}")
                bad += 1
    for shp in ((64, 6, 512, 64), (64, 8, 1024, 64), (16, 16, 2048, 128), (8, 16, 4096, 128)):
        p, q = balance(*shp)
        print(f"balance (B,H,T,D)={shp}, 132 CTAs: max/mean tiles per CTA {p:.3f} paired units "
              f"(single-tile striding would be {q:.3f})")
    print(f"{'all ok' if bad == 0 else f'{bad} failed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
