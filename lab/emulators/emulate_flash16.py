#!/usr/bin/env python3
# emulate_flash16.py: numpy emulation of the lane-level data flow of src/backend/cuda/flash_attention_bf16.cu
# (fa_fwd_kernel, fa_bwd_dq_kernel, fa_bwd_dkdv_kernel): padded shared rows, cp.async zero-fill, ldmatrix
# (plain and .trans) lane mapping, PTX m16n8k16 fragment layouts, C->A register reuse of P and dS, quad
# shuffles of the online softmax, causal/edge masks and block skipping. No GPU needed. Arithmetic is float64
# with no bf16 rounding, so the kernel's indexing is checked against exact attention to ~1e-12.
# With --bf16 the inputs, the P/dS packs and out are rounded to bf16 as on the GPU, and the errors are
# checked against the parity suite's tolerances instead (gradients relative to max|reference|).
# usage: python3 lab/emulators/emulate_flash16.py [--bf16]   (one line per case, exit 1 on a mismatch)
import math
import sys

import numpy as np

from bf16_round import round_bf16

BM = BN = 64
NW = 4  # warps
ROUND = False  # --bf16: round inputs, the P/dS packs and out to bf16 as the kernel does


def bf(x):
    """round to bf16, nearest even (as fa_pack / __floats2bfloat162_rn), returned as float64"""
    if not ROUND:
        return x
    return round_bf16(x)


class Smem:
    def __init__(self, nbytes):
        self.m = np.full(nbytes // 2, np.nan)  # one float per bf16 slot

    def ldsm(self, addrs, trans):  # addrs[lane] = byte address of a row of 8 bf16; returns regs[lane][j] = (lo, hi)
        out = [[None] * 4 for _ in range(32)]
        for j in range(4):
            rowaddr = [addrs[8 * j + r] for r in range(8)]
            for a in rowaddr:
                assert a % 16 == 0, a
            for t in range(32):
                if not trans:
                    base = rowaddr[t // 4] // 2 + 2 * (t % 4)
                    out[t][j] = (self.m[base], self.m[base + 1])
                else:
                    c = t // 4
                    out[t][j] = (self.m[rowaddr[2 * (t % 4)] // 2 + c], self.m[rowaddr[2 * (t % 4) + 1] // 2 + c])
        return out


def fill_rows(sm, dst, src, row0, limit, D, nrows):
    STR = D * 2 + 16
    for r in range(nrows):
        row = row0 + r
        vals = src[row] if row < limit else np.zeros(D)
        sm.m[(dst + r * STR) // 2:(dst + r * STR) // 2 + D] = vals


def mma(c, a, b0, b1):
    # c: (32,4) accum, a: list[32] of 4 pairs, b0/b1: list[32] of pairs
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for t in range(32):
        g, q = t // 4, t % 4
        A[g, 2 * q:2 * q + 2] = a[t][0]
        A[g + 8, 2 * q:2 * q + 2] = a[t][1]
        A[g, 2 * q + 8:2 * q + 10] = a[t][2]
        A[g + 8, 2 * q + 8:2 * q + 10] = a[t][3]
        B[2 * q:2 * q + 2, g] = b0[t]
        B[2 * q + 8:2 * q + 10, g] = b1[t]
    Cm = np.zeros((16, 8))
    for t in range(32):
        g, q = t // 4, t % 4
        Cm[g, 2 * q:2 * q + 2] = c[t, 0:2]
        Cm[g + 8, 2 * q:2 * q + 2] = c[t, 2:4]
    Dm = A @ B + Cm
    for t in range(32):
        g, q = t // 4, t % 4
        c[t, 0:2] = Dm[g, 2 * q:2 * q + 2]
        c[t, 2:4] = Dm[g + 8, 2 * q:2 * q + 2]


def c_to_a(c, kk):  # c: (32, NT, 4) -> list[32] of 4 pairs
    c = bf(c)
    return [((c[t, 2 * kk, 0], c[t, 2 * kk, 1]), (c[t, 2 * kk, 2], c[t, 2 * kk, 3]),
             (c[t, 2 * kk + 1, 0], c[t, 2 * kk + 1, 1]), (c[t, 2 * kk + 1, 2], c[t, 2 * kk + 1, 3])) for t in range(32)]


def regs4(r):  # ldsm result -> per-lane 4 pairs (A fragment)
    return [tuple(r[t]) for t in range(32)]


def col(r, j):
    return [r[t][j] for t in range(32)]


def offs(D, warp):
    STR = D * 2 + 16
    a_off = [(warp * 16 + (l & 15)) * STR + (l >> 4) * 16 for l in range(32)]
    b_off = [((l & 7) + ((l >> 4) << 3)) * STR + ((l >> 3) & 1) * 16 for l in range(32)]
    t_off = [(l & 15) * STR + (l >> 4) * 16 for l in range(32)]
    return a_off, b_off, t_off


def shfl_quad_max(x):
    y = np.maximum(x, x[[l ^ 1 for l in range(32)]])
    return np.maximum(y, y[[l ^ 2 for l in range(32)]])


def shfl_quad_sum(x):
    y = x + x[[l ^ 1 for l in range(32)]]
    return y + y[[l ^ 2 for l in range(32)]]


def fwd(Q, K, V, D, QR=64):
    """Q (Tq,D), K/V (Tk,D) of one (b,h): out (Tq,D), lse (Tq) as fa_fwd_kernel<D, QR> computes them."""
    Tq, Tk = Q.shape[0], K.shape[0]
    STR = D * 2 + 16
    TILE = BN * STR
    sl2 = (1.0 / math.sqrt(D)) * math.log2(math.e)
    diag = Tk - Tq
    out = np.full((Tq, D), np.nan)
    lse = np.full(Tq, np.nan)
    nblk = (Tq + QR - 1) // QR
    for bx in range(nblk):
        q0 = (nblk - 1 - bx) * QR
        sm = Smem(QR * STR + 4 * TILE)
        sq, sk = 0, QR * STR
        sv = sk + 2 * TILE
        kv_end = min(Tk, q0 + QR + diag)
        ntiles = (kv_end + BN - 1) // BN if kv_end > 0 else 0
        fill_rows(sm, sq, Q, q0, Tq, D, QR)
        for warp in range(QR // 16):
            a_off, b_off, t_off = offs(D, warp)
            qf = [regs4(sm.ldsm([sq + a_off[l] + kk * 32 for l in range(32)], False)) for kk in range(D // 16)]
            o = np.zeros((32, D // 8, 4))
            m = np.full((32, 2), -np.inf)
            lsum = np.zeros((32, 2))
            g = np.arange(32) // 4
            tq = np.arange(32) % 4
            row_lo = q0 + warp * 16 + g
            for t in range(ntiles):
                cur = t & 1
                fill_rows(sm, sk + cur * TILE, K, t * BN, Tk, D, BN)
                fill_rows(sm, sv + cur * TILE, V, t * BN, Tk, D, BN)
                sc = np.zeros((32, BN // 8, 4))
                kt = sk + cur * TILE
                for kk in range(D // 16):
                    for np_ in range(BN // 16):
                        r = sm.ldsm([kt + b_off[l] + np_ * 16 * STR + kk * 32 for l in range(32)], False)
                        mma(sc[:, 2 * np_], qf[kk], col(r, 0), col(r, 1))
                        mma(sc[:, 2 * np_ + 1], qf[kk], col(r, 2), col(r, 3))
                k0 = t * BN
                if k0 + BN - 1 > q0 + diag or k0 + BN > Tk:
                    for n in range(BN // 8):
                        for e in range(4):
                            key = k0 + n * 8 + 2 * tq + (e & 1)
                            row = row_lo + (e >> 1) * 8
                            sc[(key > row + diag) | (key >= Tk), n, e] = -np.inf
                for r in range(2):
                    mx = np.max(sc[:, :, 2 * r:2 * r + 2].reshape(32, -1), axis=1)
                    mx = shfl_quad_max(mx)
                    mnew = np.maximum(m[:, r], mx * sl2)
                    muse = np.where(mnew == -np.inf, 0.0, mnew)
                    alpha = np.exp2(m[:, r] - muse)
                    m[:, r] = mnew
                    p = np.exp2(sc[:, :, 2 * r:2 * r + 2] * sl2 - muse[:, None, None])
                    sc[:, :, 2 * r:2 * r + 2] = p
                    lsum[:, r] = lsum[:, r] * alpha + p.reshape(32, -1).sum(axis=1)
                    o[:, :, 2 * r:2 * r + 2] *= alpha[:, None, None]
                vt = sv + cur * TILE
                for kk in range(BN // 16):
                    a = c_to_a(sc, kk)
                    for dp in range(D // 16):
                        r = sm.ldsm([vt + t_off[l] + kk * 16 * STR + dp * 32 for l in range(32)], True)
                        mma(o[:, 2 * dp], a, col(r, 0), col(r, 1))
                        mma(o[:, 2 * dp + 1], a, col(r, 2), col(r, 3))
            for r in range(2):
                lr = shfl_quad_sum(lsum[:, r])
                for l in range(32):
                    row = row_lo[l] + r * 8
                    if row >= Tq:
                        continue
                    inv = 1.0 / lr[l] if lr[l] > 0 else 0.0
                    for n in range(D // 8):
                        out[row, n * 8 + 2 * tq[l]:n * 8 + 2 * tq[l] + 2] = bf(o[l, n, 2 * r:2 * r + 2] * inv)
                    if tq[l] == 0:
                        lse[row] = (m[l, r] + math.log2(lr[l])) * math.log(2) if lr[l] > 0 else -np.inf
    return out, lse


def bwd_dq(Q, K, V, dO, lse, delta, D):
    Tq, Tk = Q.shape[0], K.shape[0]
    STR = D * 2 + 16
    TILE = BN * STR
    scale = 1.0 / math.sqrt(D)
    sl2 = scale * math.log2(math.e)
    diag = Tk - Tq
    dq = np.full((Tq, D), np.nan)
    nblk = (Tq + BM - 1) // BM
    for bx in range(nblk):
        q0 = (nblk - 1 - bx) * BM
        sm = Smem(2 * BM * STR + 4 * TILE)
        sq, sdo = 0, BM * STR
        sk = sdo + BM * STR
        sv = sk + 2 * TILE
        kv_end = min(Tk, q0 + BM + diag)
        ntiles = (kv_end + BN - 1) // BN if kv_end > 0 else 0
        fill_rows(sm, sq, Q, q0, Tq, D, BM)
        fill_rows(sm, sdo, dO, q0, Tq, D, BM)
        for warp in range(NW):
            a_off, b_off, t_off = offs(D, warp)
            g = np.arange(32) // 4
            tq = np.arange(32) % 4
            row_lo = q0 + warp * 16 + g
            lse2 = np.zeros((32, 2))
            dlt = np.zeros((32, 2))
            for r in range(2):
                for l in range(32):
                    row = row_lo[l] + r * 8
                    lv = lse[row] if row < Tq else 0.0
                    lse2[l, r] = 0.0 if lv == -np.inf else lv * math.log2(math.e)
                    dlt[l, r] = delta[row] if row < Tq else 0.0
            acc = np.zeros((32, D // 8, 4))
            for t in range(ntiles):
                cur = t & 1
                fill_rows(sm, sk + cur * TILE, K, t * BN, Tk, D, BN)
                fill_rows(sm, sv + cur * TILE, V, t * BN, Tk, D, BN)
                kt, vt = sk + cur * TILE, sv + cur * TILE
                sc = np.zeros((32, BN // 8, 4))
                dp = np.zeros((32, BN // 8, 4))
                for kk in range(D // 16):
                    a = regs4(sm.ldsm([sq + a_off[l] + kk * 32 for l in range(32)], False))
                    c = regs4(sm.ldsm([sdo + a_off[l] + kk * 32 for l in range(32)], False))
                    for np_ in range(BN // 16):
                        r = sm.ldsm([kt + b_off[l] + np_ * 16 * STR + kk * 32 for l in range(32)], False)
                        mma(sc[:, 2 * np_], a, col(r, 0), col(r, 1))
                        mma(sc[:, 2 * np_ + 1], a, col(r, 2), col(r, 3))
                        r = sm.ldsm([vt + b_off[l] + np_ * 16 * STR + kk * 32 for l in range(32)], False)
                        mma(dp[:, 2 * np_], c, col(r, 0), col(r, 1))
                        mma(dp[:, 2 * np_ + 1], c, col(r, 2), col(r, 3))
                k0 = t * BN
                edge = k0 + BN - 1 > q0 + diag or k0 + BN > Tk
                with np.errstate(over="ignore", invalid="ignore"):
                    for n in range(BN // 8):
                        for e in range(4):
                            r = e >> 1
                            p = np.exp2(sc[:, n, e] * sl2 - lse2[:, r])
                            if edge:
                                key = k0 + n * 8 + 2 * tq + (e & 1)
                                p = np.where((key > row_lo + r * 8 + diag) | (key >= Tk), 0.0, p)
                            sc[:, n, e] = p * (dp[:, n, e] - dlt[:, r])
                for kk in range(BN // 16):
                    a = c_to_a(sc, kk)
                    for d2 in range(D // 16):
                        r = sm.ldsm([kt + t_off[l] + kk * 16 * STR + d2 * 32 for l in range(32)], True)
                        mma(acc[:, 2 * d2], a, col(r, 0), col(r, 1))
                        mma(acc[:, 2 * d2 + 1], a, col(r, 2), col(r, 3))
            for r in range(2):
                for l in range(32):
                    row = row_lo[l] + r * 8
                    if row >= Tq:
                        continue
                    for n in range(D // 8):
                        dq[row, n * 8 + 2 * tq[l]:n * 8 + 2 * tq[l] + 2] = acc[l, n, 2 * r:2 * r + 2] * scale
    return dq


def bwd_dkdv(Qs, K, V, dOs, lses, deltas, D):
    """Qs/dOs/lses/deltas: lists over the group's query heads."""
    G = len(Qs)
    Tq, Tk = Qs[0].shape[0], K.shape[0]
    BQ = 32 if D == 128 else 64
    STR = D * 2 + 16
    QT = BQ * STR
    scale = 1.0 / math.sqrt(D)
    sl2 = scale * math.log2(math.e)
    diag = Tk - Tq
    dk = np.full((Tk, D), np.nan)
    dv = np.full((Tk, D), np.nan)
    for bx in range((Tk + BM - 1) // BM):
        k0 = bx * BM
        sm = Smem(2 * BM * STR + 4 * QT)
        sk, sv = 0, BM * STR
        sq = sv + BM * STR
        sdo = sq + 2 * QT
        s_lse = np.zeros((2, BQ))
        s_dlt = np.zeros((2, BQ))
        qstart = max(0, k0 - diag)
        t_first = qstart // BQ
        nq = (Tq + BQ - 1) // BQ - t_first if qstart < Tq else 0
        total = G * nq
        fill_rows(sm, sk, K, k0, Tk, D, BM)
        fill_rows(sm, sv, V, k0, Tk, D, BM)

        def load_q(it, st):
            h = it // nq
            qt0 = (t_first + it % nq) * BQ
            fill_rows(sm, sq + st * QT, Qs[h], qt0, Tq, D, BQ)
            fill_rows(sm, sdo + st * QT, dOs[h], qt0, Tq, D, BQ)
            for tid in range(BQ):
                row = qt0 + tid
                lv = lses[h][row] if row < Tq else 0.0
                s_lse[st, tid] = 0.0 if lv == -np.inf else lv * math.log2(math.e)
                s_dlt[st, tid] = deltas[h][row] if row < Tq else 0.0

        adk = np.zeros((NW, 32, D // 8, 4))
        adv = np.zeros((NW, 32, D // 8, 4))
        for it in range(total):
            cur = it & 1
            load_q(it, cur)
            qt, dt = sq + cur * QT, sdo + cur * QT
            qt0 = (t_first + it % nq) * BQ
            for warp in range(NW):
                a_off, b_off, t_off = offs(D, warp)
                g = np.arange(32) // 4
                tq = np.arange(32) % 4
                key_lo = k0 + warp * 16 + g
                st = np.zeros((32, BQ // 8, 4))
                dpt = np.zeros((32, BQ // 8, 4))
                for kk in range(D // 16):
                    a = regs4(sm.ldsm([sk + a_off[l] + kk * 32 for l in range(32)], False))
                    c = regs4(sm.ldsm([sv + a_off[l] + kk * 32 for l in range(32)], False))
                    for np_ in range(BQ // 16):
                        r = sm.ldsm([qt + b_off[l] + np_ * 16 * STR + kk * 32 for l in range(32)], False)
                        mma(st[:, 2 * np_], a, col(r, 0), col(r, 1))
                        mma(st[:, 2 * np_ + 1], a, col(r, 2), col(r, 3))
                        r = sm.ldsm([dt + b_off[l] + np_ * 16 * STR + kk * 32 for l in range(32)], False)
                        mma(dpt[:, 2 * np_], c, col(r, 0), col(r, 1))
                        mma(dpt[:, 2 * np_ + 1], c, col(r, 2), col(r, 3))
                edge = k0 + BM - 1 > qt0 + diag or qt0 + BQ > Tq
                with np.errstate(over="ignore", invalid="ignore"):
                    for n in range(BQ // 8):
                        for e in range(4):
                            cl = n * 8 + 2 * tq + (e & 1)
                            p = np.exp2(st[:, n, e] * sl2 - s_lse[cur, cl])
                            if edge:
                                query = qt0 + cl
                                p = np.where((key_lo + (e >> 1) * 8 > query + diag) | (query >= Tq), 0.0, p)
                            st[:, n, e] = p
                            dpt[:, n, e] = p * (dpt[:, n, e] - s_dlt[cur, cl])
                for kk in range(BQ // 16):
                    ap = c_to_a(st, kk)
                    as_ = c_to_a(dpt, kk)
                    for d2 in range(D // 16):
                        r = sm.ldsm([dt + t_off[l] + kk * 16 * STR + d2 * 32 for l in range(32)], True)
                        mma(adv[warp, :, 2 * d2], ap, col(r, 0), col(r, 1))
                        mma(adv[warp, :, 2 * d2 + 1], ap, col(r, 2), col(r, 3))
                        r = sm.ldsm([qt + t_off[l] + kk * 16 * STR + d2 * 32 for l in range(32)], True)
                        mma(adk[warp, :, 2 * d2], as_, col(r, 0), col(r, 1))
                        mma(adk[warp, :, 2 * d2 + 1], as_, col(r, 2), col(r, 3))
        for warp in range(NW):
            for r in range(2):
                for l in range(32):
                    key = k0 + warp * 16 + l // 4 + r * 8
                    if key >= Tk:
                        continue
                    c0 = 2 * (l % 4)
                    for n in range(D // 8):
                        dk[key, n * 8 + c0:n * 8 + c0 + 2] = adk[warp, l, n, 2 * r:2 * r + 2] * scale
                        dv[key, n * 8 + c0:n * 8 + c0 + 2] = adv[warp, l, n, 2 * r:2 * r + 2]
    return dk, dv


def reference(Q, K, V, dO):
    Tq, D = Q.shape
    Tk = K.shape[0]
    s = Q @ K.T / math.sqrt(D)
    vis = np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + Tk - Tq
    s = np.where(vis, s, -np.inf)
    m = s.max(axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(vis, np.exp(s - m), 0.0)
    l = e.sum(axis=1, keepdims=True)
    P = np.where(l > 0, e / np.where(l > 0, l, 1), 0.0)
    out = P @ V
    lse = np.where(l[:, 0] > 0, m[:, 0] + np.log(np.where(l[:, 0] > 0, l[:, 0], 1)), -np.inf)
    dP = dO @ V.T
    dS = P * (dP - (P * dP).sum(axis=1, keepdims=True)) / math.sqrt(D)
    return out, lse, dS @ K, dS.T @ Q, P.T @ dO


def main():
    global ROUND
    ROUND = "--bf16" in sys.argv
    rng = np.random.default_rng(1)
    cases = [(67, 67, 64, 2), (1, 1, 64, 1), (100, 37, 64, 1), (37, 100, 128, 2), (130, 130, 128, 1),
             (129, 200, 64, 1), (64, 64, 128, 3)]
    # exact: indexing only; --bf16: the parity suite's tolerances (tests_gpu/test_gpu_parity.c)
    tol = {"q128": 0.0, "out": 1.5e-2, "lse": 2e-3, "dq": 3e-2, "dk": 3e-2, "dv": 3e-2} if ROUND else None
    bad = 0
    for Tq, Tk, D, G in cases:
        Qs = [bf(rng.uniform(-1.5, 1.5, (Tq, D))) for _ in range(G)]
        dOs = [bf(rng.uniform(-1, 1, (Tq, D))) for _ in range(G)]
        K = bf(rng.uniform(-1.5, 1.5, (Tk, D)))
        V = bf(rng.uniform(-1, 1, (Tk, D)))
        dk_ref = np.zeros((Tk, D))
        dv_ref = np.zeros((Tk, D))
        errs = {}
        lses, deltas = [], []
        dq_scale = 0.0
        for h in range(G):
            out, lse = fwd(Qs[h], K, V, D)
            out2, lse2 = fwd(Qs[h], K, V, D, QR=128)  # the 8-warp variant must agree bit for bit
            ro, rl, rdq, rdk, rdv = reference(Qs[h], K, V, dOs[h])
            errs["q128"] = max(errs.get("q128", 0), 0.0 if (np.array_equal(out, out2) and
                                                           np.array_equal(lse, lse2)) else np.inf)
            dk_ref += rdk
            dv_ref += rdv
            delta = (out * dOs[h]).sum(axis=1)
            dq = bwd_dq(Qs[h], K, V, dOs[h], lse, delta, D)
            fin = np.isfinite(rl)
            errs["out"] = max(errs.get("out", 0), np.abs(out - ro).max())
            errs["lse"] = max(errs.get("lse", 0), np.abs(lse[fin] - rl[fin]).max() if fin.any() else 0.0,
                              0.0 if np.array_equal(np.isinf(lse), ~fin) else np.inf)
            errs["dq"] = max(errs.get("dq", 0), np.abs(dq - rdq).max())
            dq_scale = max(dq_scale, np.abs(rdq).max())
            lses.append(lse)
            deltas.append(delta)
        dk, dv = bwd_dkdv(Qs, K, V, dOs, lses, deltas, D)
        errs["dk"] = np.abs(dk - dk_ref).max()
        errs["dv"] = np.abs(dv - dv_ref).max()
        if ROUND:  # gradients relative to max|reference|, as the parity suite
            errs["dq"] /= max(dq_scale, 1e-6)
            errs["dk"] /= max(np.abs(dk_ref).max(), 1e-6)
            errs["dv"] /= max(np.abs(dv_ref).max(), 1e-6)
        ok = all(errs[k] <= (tol[k] if tol else 1e-9) for k in errs)
        bad += not ok
        print(("PASS" if ok else "FAIL"), f"Tq={Tq} Tk={Tk} D={D} G={G}",
              " ".join(f"{k}={v:.2e}" for k, v in errs.items()), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
