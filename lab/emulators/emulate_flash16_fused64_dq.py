#!/usr/bin/env python3
# emulate_flash16_fused64_dq.py: plain-Python emulation of the dQ path of the fused backward's D = 64 instance
# (ff_bwd_kernel<64>, src/backend/cuda/flash_attention_bf16_wgmma_bwd_fused.cuh) for one (key block, query tile),
# checked against dQ = dS . K computed directly. Modelled, with the kernel's own address expressions:
# - the resident K box as TMA writes it (128 key rows of 128 B, 128B swizzle) and ff_load_kt's ldmatrix.x4.trans
#   (lane 8m + r gives row r of matrix m; thread t receives rows 2 (t % 4), +1 at column t / 4 of each matrix);
# - both consumers' dS^T A fragments (fw_to_a's layout) stored by ff_store_ds64 into the two 64B-swizzled halves;
# - ff_dq_product64: the m64n32k16 RS wgmma per k16 step, A from the K^T fragments (warp w: rows 16w..; a[m] =
#   rows g + 8 (m & 1), k 2 tq + 8 (m >> 1), +1), B read through wgmma_desc_mn64's canonical MN-major 64B-swizzle
#   layout (start + 512 B per 8 k rows + 64 B per k row + 2 B per n, then the address swizzle bits 4-5 ^= 7-8);
# - the m64n32 accumulator layout (d[4 nn + 2 rr + e]: row 16 w + g + 8 rr, column 8 nn + 2 tq + e);
# - ff_store_dq64 into the staging tile and the writer's two TMA boxes (32 query rows x 32 fp32 columns, 128B
#   swizzle) read back as rows 32c.. of the tile.
# Not modelled: timing, barriers, rounding (values are small integers, every sum exact). The swizzle and fragment
# semantics are those the other kernels run on the H200 (wgmma_desc_mn64: the C192 GEMM's B; ldmatrix.trans: the
# mma.sync flash kernels); this checks that the D = 64 kernel's offsets compose into dS . K, not the hardware.
# usage: python3 lab/emulators/emulate_flash16_fused64_dq.py   (exit 1 on a mismatch)
import random
import sys


def sw128(a):
    return a ^ (((a >> 7) & 7) << 4)


def sw64(a):
    return a ^ (((a >> 7) & 3) << 4)


def main():
    rng = random.Random(7)
    K = [[rng.randint(-4, 4) for _ in range(64)] for _ in range(128)]  # keys x columns
    dS = [[rng.randint(-4, 4) for _ in range(128)] for _ in range(64)]  # queries x keys
    KBASE, DSBASE, STGBASE = 0x0000, 0x8000, 0x10000
    smem = {}  # byte address -> element (16-bit elements keyed by their first byte, fp32 by theirs)
    for key in range(128):  # TMA: K box, 128B swizzle
        for col in range(64):
            smem[KBASE + sw128(key * 128 + col * 2)] = K[key][col]
    # ff_load_kt: per warp w, thread t: kt[kk][m] = (lo, hi)
    kt = {}
    for w in range(4):
        addr = {}
        for lane in range(32):
            m, r = lane // 8, lane % 8
            chunk = 2 * w + (m & 1)
            for kk in range(8):
                key = 16 * kk + 8 * (m >> 1) + r
                addr[(kk, lane)] = KBASE + key * 128 + ((chunk ^ r) << 4)
        for t in range(32):
            g, tq = t // 4, t % 4
            for kk in range(8):
                for m in range(4):
                    r0, r1 = addr[(kk, 8 * m + 2 * tq)], addr[(kk, 8 * m + 2 * tq + 1)]
                    kt[(w, t, kk, m)] = (smem[r0 + 2 * g], smem[r1 + 2 * g])
    # both consumers' dS^T fragments (rows = keys 64c + 16w + g + 8h, queries 16kk + 8jj + 2tq, +1), ff_store_ds64
    for c in range(2):
        for w in range(4):
            for t in range(32):
                g, tq = t // 4, t % 4
                row0 = c * 64 + w * 16
                bt = (DSBASE + (row0 + g) * 64 + 4 * tq) | ((g >> 1) << 4)
                for kk in range(4):
                    for jj in range(2):
                        for h in range(2):
                            key, q = row0 + g + 8 * h, 16 * kk + 8 * jj + 2 * tq
                            a = (bt + (kk >> 1) * 8192 + h * 512) ^ ((2 * (kk & 1) + jj) << 4)
                            smem[a], smem[a + 2] = dS[q][key], dS[q + 1][key]
    bad = 0
    for c in range(2):
        half = DSBASE + c * 8192
        D = [[0] * 32 for _ in range(64)]  # dQ^T rows (columns of K) x the half's 32 queries
        for kk in range(8):
            A = [[0] * 16 for _ in range(64)]
            for w in range(4):
                for t in range(32):
                    g, tq = t // 4, t % 4
                    for m in range(4):
                        lo, hi = kt[(w, t, kk, m)]
                        row, k = 16 * w + g + 8 * (m & 1), 2 * tq + 8 * (m >> 1)
                        A[row][k], A[row][k + 1] = lo, hi
            start = half + kk * 1024
            B = [[smem[sw64(start + (k // 8) * 512 + (k % 8) * 64 + n * 2)] for n in range(32)] for k in range(16)]
            for i in range(64):
                for n in range(32):
                    D[i][n] += sum(A[i][k] * B[k][n] for k in range(16))
        # accumulator fragments -> ff_store_dq64 -> staging
        stg = {}
        for w in range(4):
            for t in range(32):
                g, tq = t // 4, t % 4
                row = STGBASE + (w >> 1) * 4096 + tq * 256 + 4 * (g & 3)
                bt = row | ((((4 * (w & 1) + (g >> 2)) ^ (2 * tq))) << 4)
                for nn in range(4):
                    for rr in range(2):
                        for e in range(2):
                            a = (bt + nn * 1024 + e * 128) ^ ((2 * rr + e) << 4)
                            stg[a] = D[16 * w + g + 8 * rr][8 * nn + 2 * tq + e]
        # the writer's boxes: box j = columns 32j.., 32 rows = queries 32c..
        for j in range(2):
            for r in range(32):
                for cc in range(32):
                    got = stg[STGBASE + j * 4096 + sw128(r * 128 + cc * 4)]
                    q, col = 32 * c + r, 32 * j + cc
                    want = sum(dS[q][key] * K[key][col] for key in range(128))
                    if got != want:
                        bad += 1
    print("fused64 dQ path: %s (%d mismatches of %d)" % ("ok" if bad == 0 else "MISMATCH", bad, 64 * 64))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
