#!/usr/bin/env python3
# emulate_flash16_wgmma_bwd.py: numpy emulation of the data flow of src/backend/cuda/flash_attention_bf16_wgmma_bwd.cu
# (fb_dq_kernel, fb_dkdv_kernel<64>, fb_dkdv_split_kernel<128>), checked against float64 attention gradients.
# Modelled: the 3D TMA boxes (64 columns x R rows, zero fill past T and past the columns) written with the 128B
# swizzle into a byte-addressed shared memory; the wgmma shared-memory descriptors as the kernels build them
# (K-major: start + 8-row groups 1024 B apart, rows 128 B; MN-major: LBO 8 KiB per 64 columns, SBO 1 KiB per 8
# k rows), read back through the same address swizzle; the accumulator and register-A fragment layouts of
# m64nNk16 (fb_to_a); the producer's iteration order (GQA heads, t_first / nq), the lse/delta slots, the causal /
# edge masks with their FB_BIG bounds, the skip tests, the split kernel's P^T handoff buffer and the masked stores.
# Not modelled: timing, barriers (everything runs in program order), fp32 rounding. Arithmetic is float64; with
# --bf16 inputs and the P / dS packs are rounded to bf16 and the parity suite's 3e-2 (relative to max|ref|) applies.
# The layout model is the one the forward (flash_attention_bf16_wgmma.cu) uses and that passed GPU parity; this
# script checks that the backward's offsets, masks and loops are consistent with it, not the hardware itself.
# usage: python3 lab/emulators/emulate_flash16_wgmma_bwd.py [--bf16]   (one line per case, exit 1 on a mismatch)
import math
import sys

import numpy as np

from bf16_round import round_bf16

BR, BS, STAGES = 128, 64, 4
BIG = 1 << 30
LOG2E = 1.4426950408889634
ROUND = False


def bf(x):
    if not ROUND:
        return np.asarray(x, dtype=np.float64)
    return round_bf16(x)


def sw(addr):
    """128B swizzle on a byte address (bases are 1024-aligned): 16-byte chunk bits 4-6 ^= bits 7-9"""
    return addr ^ (((addr >> 7) & 7) << 4)


class Smem:
    def __init__(self, nbytes):
        self.m = np.full(nbytes // 2, np.nan)

    def tma(self, dst, src, c0, r0, box_rows):
        """fw_tma_load_3d of one batch's (T, cols) tensor: box 64 cols x box_rows rows at (c0, r0), zero fill"""
        T, cols = src.shape
        r = np.arange(box_rows)[:, None]
        c = np.arange(64)[None, :]
        rows, cc = r0 + r, c0 + c
        ok = (rows < T) & (cc < cols)
        vals = np.where(ok, src[np.minimum(rows, T - 1), np.minimum(cc, cols - 1)], 0.0)
        self.m[sw(dst + r * 128 + c * 2) // 2] = vals

    def kmajor(self, start, nrows):
        """wgmma_desc(start): nrows x 16 operand, K-major, 8-row groups 1024 B apart (SBO), rows 128 B"""
        m = np.arange(nrows)[:, None]
        k = np.arange(16)[None, :]
        return self.m[sw(start + (m // 8) * 1024 + (m % 8) * 128 + k * 2) // 2]

    def mnmajor(self, start, n_cols):
        """wgmma_desc_mn(start): n_cols x 16 operand (element (n, k)), MN-major, LBO 8 KiB per 64 n, SBO 1 KiB"""
        n = np.arange(n_cols)[:, None]
        k = np.arange(16)[None, :]
        return self.m[sw(start + (n // 64) * 8192 + (k // 8) * 1024 + (k % 8) * 128 + (n % 64) * 2) // 2]


# accumulator layout of m64nN: thread t (warp w, g = lane/4, tq = lane%4), register 4n+e -> (row, col)
T128 = np.arange(128)
W_, G_, TQ_ = T128 // 32, (T128 % 32) // 4, T128 % 4


def acc_rc(N):
    i = np.arange(N // 2)[None, :]
    n, e = i // 4, i % 4
    row = 16 * W_[:, None] + G_[:, None] + 8 * (e >> 1)
    col = 8 * n + 2 * TQ_[:, None] + (e & 1)
    return row, col  # (128, N/2) each


ROW64, COL64 = acc_rc(64)


def to_regs(M):
    r, c = acc_rc(M.shape[1])
    return M[r, c]


def from_regs(R, N):
    r, c = acc_rc(N)
    M = np.full((64, N), np.nan)
    M[r, c] = R
    return M


def to_a(regs):
    """fb_to_a<64>: 64 x 64 accumulator registers -> per k16 step the A matrix (64 x 16) the fragments encode"""
    pk = bf(regs)
    As = []
    for kk in range(4):
        A = np.full((64, 16), np.nan)
        for j in range(4):
            lo, hi = pk[:, 8 * kk + 2 * j], pk[:, 8 * kk + 2 * j + 1]
            row = 16 * W_ + G_ + 8 * (j & 1)  # a0 row g, a1 row g+8, a2 row g, a3 row g+8
            k = 2 * TQ_ + 8 * (j >> 1)  # a0, a1 k 2t..; a2, a3 k 2t+8..
            A[row, k], A[row, k + 1] = lo, hi
        As.append(A)
    return As


def ss(sm, a, a_box, b, b_box, D, nb=64):
    """fb_ss<D>: 64 x nb = sum over kk of A(64x16 at a + (kk/4)*a_box + (kk%4)*32) . B(nb x16 ...)^T"""
    acc = np.zeros((64, nb))
    for kk in range(D // 16):
        A = sm.kmajor(a + (kk // 4) * a_box + (kk % 4) * 32, 64)
        B = sm.kmajor(b + (kk // 4) * b_box + (kk % 4) * 32, nb)
        acc += A @ B.T
    return acc


def rs(sm, acc, As, b, D):
    """fb_rs<D>: acc (64 x D) += sum over kk of A_kk (registers) . B_kk^T, B MN-major at b + kk*2048"""
    for kk in range(4):
        acc += As[kk] @ sm.mnmajor(b + kk * 2048, D).T
    return acc


def exp2(x):
    with np.errstate(over="ignore"):
        return np.exp2(x)


def dq_kernel(S, q, k, v, do, lse, delta, dq):
    B, Tq, Tk, H, Hkv, D = S
    DH = D // 64
    RES, TILE = BR * D * 2, BS * D * 2
    sq, sdo = 0, RES
    sring = 2 * RES
    sl2 = LOG2E / math.sqrt(D)
    diag = Tk - Tq
    nbx = (Tq + BR - 1) // BR
    for bx in range(nbx):
        for h in range(H):
            for b in range(B):
                q0 = (nbx - 1 - bx) * BR
                hk = h // (H // Hkv)
                kv_end = min(Tk, q0 + BR + diag)
                ntiles = (kv_end + BS - 1) // BS if kv_end > 0 else 0
                sm = Smem(2 * RES + STAGES * 2 * TILE)
                if ntiles > 0:
                    for j in range(DH):
                        sm.tma(sq + j * BR * 128, q[b], h * D + 64 * j, q0, BR)
                        sm.tma(sdo + j * BR * 128, do[b], h * D + 64 * j, q0, BR)
                for c in range(2):
                    wrow0 = q0 + c * 64
                    row_lo = wrow0 + W_ * 16 + G_  # (128,)
                    lse2, dlt = [], []
                    for r in range(2):
                        row = row_lo + r * 8
                        lv = np.where(row < Tq, lse[b, h, np.minimum(row, Tq - 1)], 0.0)
                        lse2.append(np.where(lv == -np.inf, 0.0, lv * LOG2E))
                        dlt.append(np.where(row < Tq, delta[b, h, np.minimum(row, Tq - 1)], 0.0))
                    acc = np.zeros((64, D))
                    qa, doa = sq + c * 8192, sdo + c * 8192
                    for t in range(ntiles):
                        stage = t % STAGES
                        kt = sring + stage * 2 * TILE
                        vt = kt + TILE
                        for j in range(DH):  # producer, in program order
                            sm.tma(kt + j * 8192, k[b], hk * D + 64 * j, t * BS, BS)
                            sm.tma(vt + j * 8192, v[b], hk * D + 64 * j, t * BS, BS)
                        k0 = t * BS
                        if not (k0 <= wrow0 + 63 + diag):
                            continue
                        sc = to_regs(ss(sm, qa, BR * 128, kt, 8192, D))
                        dp = to_regs(ss(sm, doa, BR * 128, vt, 8192, D))
                        edge = k0 + BS - 1 > wrow0 + diag or k0 + BS > Tk
                        vis = [np.where(edge, row_lo + r * 8 + diag - k0, BIG) for r in range(2)]
                        lim = Tk - k0 if edge else BIG
                        jj = COL64
                        e1 = np.arange(32)[None, :] % 4 >> 1
                        L2 = np.where(e1 == 1, lse2[1][:, None], lse2[0][:, None])
                        VIS = np.where(e1 == 1, vis[1][:, None], vis[0][:, None])
                        DL = np.where(e1 == 1, dlt[1][:, None], dlt[0][:, None])
                        p = exp2(sc * sl2 - L2)
                        p = np.where((jj > VIS) | (jj >= lim), 0.0, p)
                        ds = p * (dp - DL)
                        acc = rs(sm, acc, to_a(ds), kt, D)
                    accr = to_regs(acc)  # (128, D/2)
                    rr, cc = acc_rc(D)
                    for i in range(D // 2):
                        row = q0 + c * 64 + rr[:, i]
                        ok = row < Tq
                        dq[b, row[ok], h, cc[ok, i]] = accr[ok, i] / math.sqrt(D)


def kv_block(S, k0):
    B, Tq, Tk, H, Hkv, D = S
    G = H // Hkv
    diag = Tk - Tq
    qstart = max(0, k0 - diag)
    t_first = qstart // BS
    nq = (Tq + BS - 1) // BS - t_first if qstart < Tq else 0
    return G, diag, t_first, nq, G * nq


def produce_stage(sm, S, b, hk, G, t_first, nq, it, qt, dt, slot, lse, delta, q, do):
    B, Tq, Tk, H, Hkv, D = S
    h = hk * G + it // nq
    qt0 = (t_first + it % nq) * BS
    for j in range(D // 64):
        sm.tma(qt + j * 8192, q[b], h * D + 64 * j, qt0, BS)
        sm.tma(dt + j * 8192, do[b], h * D + 64 * j, qt0, BS)
    for r in range(64):
        row = qt0 + r
        lv = lse[b, h, row] if row < Tq else 0.0
        slot[r] = 0.0 if lv == -np.inf else lv * LOG2E
        slot[64 + r] = delta[b, h, row] if row < Tq else 0.0
    return qt0


def p_transposed(st, ls, qt0, key_lo, diag, edge, Tq, sl2):
    """fb_p_transposed on (128, 32) registers"""
    e = np.arange(32)[None, :] % 4
    jj = COL64
    vis0 = np.where(edge, key_lo - diag - qt0, -BIG)
    vis1 = np.where(edge, key_lo + 8 - diag - qt0, -BIG)
    VIS = np.where((e >> 1) == 1, vis1[:, None], vis0[:, None])
    lim = Tq - qt0 if edge else BIG
    p = exp2(st * sl2 - ls[jj])
    return np.where((jj < VIS) | (jj >= lim), 0.0, p)


def store_kv(S, out, acc, k0, b, hk, f):
    B, Tq, Tk, H, Hkv, D = S
    accr = to_regs(acc)
    rr, cc = acc_rc(D)
    for i in range(D // 2):
        key = k0 + rr[:, i]
        ok = key < Tk
        out[b, key[ok], hk, cc[ok, i]] = accr[ok, i] * f


def dkdv_kernel(S, q, k, v, do, lse, delta, dk, dv):
    B, Tq, Tk, H, Hkv, D = S
    RES, TILE = BR * D * 2, BS * D * 2
    sk, sv, sring = 0, RES, 2 * RES
    sl2 = LOG2E / math.sqrt(D)
    for bx in range((Tk + BR - 1) // BR):
        for hk in range(Hkv):
            for b in range(B):
                k0 = bx * BR
                G, diag, t_first, nq, total = kv_block(S, k0)
                sm = Smem(2 * RES + STAGES * 2 * TILE)
                slots = np.full((STAGES, 128), np.nan)
                if total > 0:
                    for j in range(D // 64):
                        sm.tma(sk + j * BR * 128, k[b], hk * D + 64 * j, k0, BR)
                        sm.tma(sv + j * BR * 128, v[b], hk * D + 64 * j, k0, BR)
                accs = [[np.zeros((64, D)), np.zeros((64, D))] for _ in range(2)]  # [c][dk, dv]
                for it in range(total):
                    stage = it % STAGES
                    qt = sring + stage * 2 * TILE
                    dt = qt + TILE
                    qt0 = produce_stage(sm, S, b, hk, G, t_first, nq, it, qt, dt, slots[stage], lse, delta, q, do)
                    ls, dl = slots[stage][:64], slots[stage][64:]
                    for c in range(2):
                        wk0 = k0 + c * 64
                        if not (wk0 <= qt0 + BS - 1 + diag and wk0 < Tk):
                            continue
                        key_lo = wk0 + W_ * 16 + G_
                        edge = wk0 + 63 > qt0 + diag or qt0 + BS > Tq
                        ka, va = sk + c * 8192, sv + c * 8192
                        st = to_regs(ss(sm, ka, BR * 128, qt, 8192, D))
                        dpt = to_regs(ss(sm, va, BR * 128, dt, 8192, D))
                        st = p_transposed(st, ls, qt0, key_lo, diag, edge, Tq, sl2)
                        dpt = st * (dpt - dl[COL64])
                        accs[c][1] = rs(sm, accs[c][1], to_a(st), dt, D)
                        accs[c][0] = rs(sm, accs[c][0], to_a(dpt), qt, D)
                for c in range(2):
                    store_kv(S, dk, accs[c][0], k0 + c * 64, b, hk, 1 / math.sqrt(D))
                    store_kv(S, dv, accs[c][1], k0 + c * 64, b, hk, 1.0)


def dkdv_split_kernel(S, q, k, v, do, lse, delta, dk, dv):
    B, Tq, Tk, H, Hkv, D = S
    KV, TILE = BS * D * 2, BS * D * 2
    sk, sv, sring = 0, KV, 2 * KV
    sl2 = LOG2E / math.sqrt(D)
    for bx in range((Tk + BS - 1) // BS):
        for hk in range(Hkv):
            for b in range(B):
                k0 = bx * BS
                G, diag, t_first, nq, total = kv_block(S, k0)
                sm = Smem(2 * KV + STAGES * 2 * TILE)
                slots = np.full((STAGES, 128), np.nan)
                sp = np.full(32 * 128, np.nan)
                if total > 0:
                    for j in range(D // 64):
                        sm.tma(sk + j * BS * 128, k[b], hk * D + 64 * j, k0, BS)
                        sm.tma(sv + j * BS * 128, v[b], hk * D + 64 * j, k0, BS)
                acc = [np.zeros((64, D)), np.zeros((64, D))]  # c = 0: dV, c = 1: dK
                key_lo = k0 + W_ * 16 + G_
                for it in range(total):
                    stage = it % STAGES
                    qt = sring + stage * 2 * TILE
                    dt = qt + TILE
                    qt0 = produce_stage(sm, S, b, hk, G, t_first, nq, it, qt, dt, slots[stage], lse, delta, q, do)
                    ls, dl = slots[stage][:64], slots[stage][64:]
                    assert k0 <= qt0 + BS - 1 + diag, "split kernel: a tile without a visible key"
                    # warpgroup 1 (c = 0) runs first in program order: S^T, P^T, handoff, dV
                    sacc = to_regs(ss(sm, sk, BS * 128, qt, 8192, D))
                    edge = k0 + 63 > qt0 + diag or qt0 + BS > Tq
                    sacc = p_transposed(sacc, ls, qt0, key_lo, diag, edge, Tq, sl2)
                    for i in range(32):
                        sp[i * 128 + T128] = sacc[:, i]
                    acc[0] = rs(sm, acc[0], to_a(sacc), dt, D)
                    # warpgroup 2 (c = 1): dP^T, dS^T from the handoff, dK
                    sacc = to_regs(ss(sm, sv, BS * 128, dt, 8192, D))
                    pt = np.stack([sp[i * 128 + T128] for i in range(32)], axis=1)
                    sacc = pt * (sacc - dl[COL64])
                    acc[1] = rs(sm, acc[1], to_a(sacc), qt, D)
                store_kv(S, dv, acc[0], k0, b, hk, 1.0)
                store_kv(S, dk, acc[1], k0, b, hk, 1 / math.sqrt(D))


def reference(S, q, k, v, do):
    B, Tq, Tk, H, Hkv, D = S
    G = H // Hkv
    scale = 1 / math.sqrt(D)
    lse = np.full((B, H, Tq), -np.inf)
    out = np.zeros((B, Tq, H, D))
    dq = np.zeros((B, Tq, H, D))
    dk = np.zeros((B, Tk, Hkv, D))
    dv = np.zeros((B, Tk, Hkv, D))
    for b in range(B):
        for h in range(H):
            hk = h // G
            Q = q[b][:, h * D:(h + 1) * D]
            K = k[b][:, hk * D:(hk + 1) * D]
            V = v[b][:, hk * D:(hk + 1) * D]
            dO = do[b][:, h * D:(h + 1) * D]
            s = Q @ K.T * scale
            mask = np.arange(Tk)[None, :] > np.arange(Tq)[:, None] + Tk - Tq
            s[mask] = -np.inf
            m = s.max(axis=1, keepdims=True)
            m[m == -np.inf] = 0
            e = np.exp(s - m)
            ssum = e.sum(axis=1, keepdims=True)
            P = np.where(ssum > 0, e / np.where(ssum > 0, ssum, 1), 0)
            lse[b, h] = np.where(ssum[:, 0] > 0, m[:, 0] + np.log(np.where(ssum[:, 0] > 0, ssum[:, 0], 1)), -np.inf)
            O = P @ V
            out[b, :, h] = O
            dP = dO @ V.T
            delta = (dO * O).sum(axis=1, keepdims=True)
            dS = P * (dP - delta) * scale
            dq[b, :, h] = dS @ K
            dk[b, :, hk] += dS.T @ Q
            dv[b, :, hk] += P.T @ dO
    return out, lse, dq, dk, dv


def run_case(S, rng):
    B, Tq, Tk, H, Hkv, D = S
    q = bf(rng.uniform(-1.5, 1.5, (B, Tq, H * D)))
    k = bf(rng.uniform(-1.5, 1.5, (B, Tk, Hkv * D)))
    v = bf(rng.uniform(-1.0, 1.0, (B, Tk, Hkv * D)))
    do = bf(rng.uniform(-1.0, 1.0, (B, Tq, H * D)))
    out, lse, rdq, rdk, rdv = reference(S, q, k, v, do)
    # the kernels read O only through delta (the mma.sync file's kernel): delta = rowsum(dO * bf16(O))
    delta = np.einsum("bthd,bthd->bht", do.reshape(B, Tq, H, D), bf(out))
    dq = np.full((B, Tq, H, D), np.nan)
    dk = np.full((B, Tk, Hkv, D), np.nan)
    dv = np.full((B, Tk, Hkv, D), np.nan)
    dq_kernel(S, q, k, v, do, lse, delta, dq)
    if D == 64:
        dkdv_kernel(S, q, k, v, do, lse, delta, dk, dv)
    else:
        dkdv_split_kernel(S, q, k, v, do, lse, delta, dk, dv)
    ok = True
    msgs = []
    for name, got, ref in (("dq", dq, rdq), ("dk", dk, rdk), ("dv", dv, rdv)):
        if np.isnan(got).any():
            msgs.append(f"{name}: {int(np.isnan(got).sum())} unwritten/NaN")
            ok = False
            continue
        err = np.abs(got - ref).max()
        scale = max(np.abs(ref).max(), 1e-30)
        tol = 3e-2 * scale if ROUND else 1e-9 * max(scale, 1.0)
        if not err <= tol:
            ok = False
        msgs.append(f"{name} maxerr {err:.3g} (tol {tol:.3g})")
    print(f"{'ok  ' if ok else 'FAIL'} B={B} Tq={Tq} Tk={Tk} H={H} Hkv={Hkv} D={D}: " + ", ".join(msgs))
    return ok


def main():
    global ROUND
    ROUND = "--bf16" in sys.argv
    rng = np.random.default_rng(7)
    cases = [
        (2, 67, 67, 4, 2, 64), (1, 1, 1, 2, 1, 64), (1, 1, 1, 2, 2, 128), (1, 130, 130, 4, 4, 128),
        (1, 200, 200, 6, 2, 128), (1, 100, 37, 4, 2, 64), (1, 100, 37, 2, 1, 128), (1, 37, 100, 2, 1, 128),
        (1, 256, 256, 2, 2, 64), (1, 129, 200, 3, 3, 64), (1, 300, 300, 2, 1, 128), (1, 70, 250, 2, 2, 64),
        (1, 128, 129, 2, 2, 64), (1, 128, 129, 2, 1, 128), (2, 192, 64, 4, 2, 128),
    ]
    bad = 0
    for S in cases:
        bad += not run_case(S, rng)
    print(f"{len(cases) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
