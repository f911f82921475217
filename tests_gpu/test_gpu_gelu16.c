/*
 * test_gpu_gelu16.c: gelu_backward_bf16 on the CUDA backend over every bf16 bit pattern of x (all 65536: zeros,
 * subnormals, the table's window and both sides of it, infinities, NaNs), against the CPU reference
 * (cpu_gelu_backward_bf16) BITWISE: the CUDA kernel reads gelu'(x) from a table built on the device
 * (src/backend/cuda/gelu_grad_table.cuh), and the table's values must be the bits computing gelu'(x) gives. A NaN
 * matches any NaN; every other result must have the reference's 16 bits (so +0 and -0 differ).
 *
 * Cases: dout constant 1 (the output is gelu'(x) rounded), random bf16 dout in [-2, 2] and with random exponents
 * (2^-30 .. 2^30, both signs); accumulate = 0 (written) and 1 (added to random old values; the written form gets the same old values and must ignore them); the patterns in order
 * (a chunk of 8 shares its sign and exponent: all in the window or all outside) and permuted (chunks mixing both);
 * n = 65536 + 5 (a tail after the 8-wide chunks); the three pointers 16-byte aligned (the table kernel) and offset
 * by 3 elements (the element-by-element kernel); n = 64 x 65536 + 5 (64 permutations: more chunks than the grid's
 * threads, so the kernel's loop runs its two-chunk iterations and a last single chunk); tiny n (7, 8, 13). Elements past the end and before the start
 * of dinp are guards that must stay unchanged.
 *
 * Then gelu_backward_dbias_bf16 against the two passes it fuses (gelu_backward_bf16, then matmul_backward_weight_bf16's
 * bias gradient), dinp and dbias bitwise, and its dbias against a host model of the partition (row chunks, row
 * lanes, lane and chunk order: g16_dbias_model) bitwise, at shapes with several row chunks, a partial column tile,
 * OC % 8 != 0 (the fallback), OC = 8, row lanes with row counts that are not multiples of the kernels' row unrolls,
 * and gpt2-124m's widths (N = 16384 x 768 and 3072, 9000 x 2304: skipped by --quick).
 *
 * Run by forge_gpu_tests (all suites, or --only gelu16).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

#define G16_GUARD 16
#define G16_GUARD_BITS 0x7fbdu

static uint32_t g16_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 32);
}

/* a random bf16 with |v| in [2^-30, 2^31), either sign */
static forge_bf16 g16_wide(uint64_t *s) {
    const uint32_t r = g16_next(s);
    const uint32_t exp = 127u - 30u + r % 61u, man = (r >> 8) & 0x7fu, sign = (r >> 15) & 1u;
    return (forge_bf16)((sign << 15) | (exp << 7) | man);
}

static int g16_same(forge_bf16 a, forge_bf16 b) {
    const int na = (a & 0x7fffu) > 0x7f80u, nb = (b & 0x7fffu) > 0x7f80u;
    return na || nb ? na && nb : a == b;
}

/* One call on both backends: x, dout, dinp (old values) of n elements, placed `off` elements into their device
 * buffers (off = 0: 16-byte aligned). */
static void g16_case(parity *P, const char *what, const forge_bf16 *x, const forge_bf16 *g, const forge_bf16 *d0,
                     size_t n, size_t off, int accumulate) {
    char shape[160];
    snprintf(shape, sizeof shape, "%s n=%zu offset=%zu accumulate=%d", what, n, off, accumulate);
    const size_t total = G16_GUARD + off + n + G16_GUARD; /* the buffers' elements: guards on both sides */
    forge_bf16 *hx = malloc(total * sizeof *hx), *hg = malloc(total * sizeof *hg), *hd = malloc(total * sizeof *hd);
    forge_bf16 *ref = malloc((n ? n : 1) * sizeof *ref), *got = malloc(total * sizeof *got);
    forge_bf16 *gx = NULL, *gg = NULL, *gd = NULL;
    int ok = hx && hg && hd && ref && got;
    if (ok) {
        for (size_t i = 0; i < total; i++) hx[i] = hg[i] = hd[i] = G16_GUARD_BITS;
        const size_t b = G16_GUARD + off;
        memcpy(hx + b, x, n * sizeof *x);
        memcpy(hg + b, g, n * sizeof *g);
        memcpy(hd + b, d0, n * sizeof *d0);
        memcpy(ref, d0, n * sizeof *d0);
        ok = P->gpu->mem_alloc(P->gpu, (void **)&gx, total * sizeof *gx) == FORGE_OK &&
             P->gpu->mem_alloc(P->gpu, (void **)&gg, total * sizeof *gg) == FORGE_OK &&
             P->gpu->mem_alloc(P->gpu, (void **)&gd, total * sizeof *gd) == FORGE_OK &&
             P->gpu->copy_to_device(P->gpu, gx, hx, total * sizeof *hx) == FORGE_OK &&
             P->gpu->copy_to_device(P->gpu, gg, hg, total * sizeof *hg) == FORGE_OK &&
             P->gpu->copy_to_device(P->gpu, gd, hd, total * sizeof *hd) == FORGE_OK;
        if (!ok) {
            report(P, 0, "gelu_backward_bf16[all patterns]", shape, INFINITY, 0, "(device alloc or upload failed)");
        } else {
            ok = ran_ok(P, "gelu_backward_bf16[all patterns]", shape,
                        P->cpu->gelu_backward_bf16(P->cpu, ref, x, g, n, accumulate),
                        P->gpu->gelu_backward_bf16(P->gpu, gd + b, gx + b, gg + b, n, accumulate));
            if (ok && P->gpu->copy_to_host(P->gpu, got, gd, total * sizeof *got) != FORGE_OK) {
                report(P, 0, "gelu_backward_bf16[all patterns]", shape, INFINITY, 0, "(copy_to_host failed)");
                ok = 0;
            }
        }
    } else {
        report(P, 0, "gelu_backward_bf16[all patterns]", shape, INFINITY, 0, "(host out of memory)");
    }
    if (ok) {
        const size_t b = G16_GUARD + off;
        size_t wrong = 0, first = 0, guards = 0;
        for (size_t i = 0; i < n; i++)
            if (!g16_same(got[b + i], ref[i]) && wrong++ == 0) first = i;
        for (size_t i = 0; i < total; i++)
            if ((i < b || i >= b + n) && got[i] != G16_GUARD_BITS) guards++;
        char why[200] = "";
        if (wrong)
            snprintf(why, sizeof why, "(%zu differ; first at %zu: x=0x%04x dout=0x%04x old=0x%04x: cuda 0x%04x, cpu "
                     "0x%04x)", wrong, first, x[first], g[first], d0[first], got[b + first], ref[first]);
        else if (guards)
            snprintf(why, sizeof why, "(%zu guard elements around dinp overwritten)", guards);
        report(P, wrong == 0 && guards == 0, "gelu_backward_bf16[all patterns]", shape, (double)(wrong + guards), 0,
               why[0] ? why : NULL);
    }
    if (gx) P->gpu->mem_free(P->gpu, gx);
    if (gg) P->gpu->mem_free(P->gpu, gg);
    if (gd) P->gpu->mem_free(P->gpu, gd);
    free(hx);
    free(hg);
    free(hd);
    free(ref);
    free(got);
}

/* The bias gradient's bits as the CUDA backend's partition gives them, from the stored dinp d (N, OC): R row chunks
 * of rows_per_chunk = ceil(N / R) rows, R = ceil(N / 64) capped at 128 and at the workspace's (4 << 20) / OC
 * (reduce.cu's cuda_colsum_chunks); in chunk r, row lane l (of 8) adds column c of the rows r rows_per_chunk + l,
 * + 8, ... in order from 0; the chunk's partial adds the lanes in lane order from 0; the finish adds the partials in
 * chunk order from 0 and adds that to the old dbias. out[c] = that (fp32 as the kernels add: no reassociation). */
static void g16_dbias_model(float *out, const float *old, const forge_bf16 *d, int N, int OC) {
    long long R = (N + 63) / 64;
    if (R > 128) R = 128;
    if (R > (long long)((4u << 20) / (unsigned)OC)) R = (long long)((4u << 20) / (unsigned)OC);
    const int rpc = (int)((N + R - 1) / R);
    float *tot = malloc((size_t)OC * sizeof *tot), *part = malloc((size_t)OC * sizeof *part),
          *lane = malloc((size_t)OC * sizeof *lane);
    if (!tot || !part || !lane) {
        for (int c = 0; c < OC; c++) out[c] = NAN;
    } else {
        for (int c = 0; c < OC; c++) tot[c] = 0.0f;
        for (long long r = 0; r < R; r++) {
            const int n_begin = (int)r * rpc, n_end = n_begin + rpc < N ? n_begin + rpc : N;
            for (int c = 0; c < OC; c++) part[c] = 0.0f;
            for (int l = 0; l < 8; l++) {
                for (int c = 0; c < OC; c++) lane[c] = 0.0f;
                for (int n = n_begin + l; n < n_end; n += 8)
                    for (int c = 0; c < OC; c++) lane[c] += forge_bf16_to_f32(d[(size_t)n * OC + c]);
                for (int c = 0; c < OC; c++) part[c] += lane[c];
            }
            for (int c = 0; c < OC; c++) tot[c] += part[c];
        }
        for (int c = 0; c < OC; c++) out[c] = old[c] + tot[c];
    }
    free(tot);
    free(part);
    free(lane);
}

/* gelu_backward_dbias_bf16 against the two passes it fuses (gelu_backward_bf16, then matmul_backward_weight_bf16's
 * bias gradient with C = 0) on the CUDA backend: dinp and dbias bitwise equal (the same partition and order of the
 * partial sums), from the same old dbias; and the fused dbias bitwise equal to g16_dbias_model's from its dinp. */
static void g16_dbias_case(parity *P, int N, int OC) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d OC=%d", N, OC);
    const char *op = "gelu_backward_dbias_bf16[vs two passes]";
    const size_t n = (size_t)N * OC;
    forge_bf16 *hx = malloc(n * sizeof *hx), *hg = malloc(n * sizeof *hg), *h0 = malloc(n * sizeof *h0),
               *h1 = malloc(n * sizeof *h1);
    float *hb = malloc((size_t)OC * sizeof *hb), *b0 = malloc((size_t)OC * sizeof *b0),
          *b1 = malloc((size_t)OC * sizeof *b1);
    forge_bf16 *gx = NULL, *gg = NULL, *gd0 = NULL, *gd1 = NULL;
    float *gb0 = NULL, *gb1 = NULL;
    int ok = hx && hg && h0 && h1 && hb && b0 && b1;
    if (ok) {
        for (size_t i = 0; i < n; i++) {
            hx[i] = forge_bf16_from_f32(rand_range(P, -5, 5));
            hg[i] = forge_bf16_from_f32(rand_range(P, -1, 1));
        }
        for (int o = 0; o < OC; o++) hb[o] = rand_range(P, -1, 1);
        ok = P->gpu->mem_alloc(P->gpu, (void **)&gx, n * sizeof *gx) == FORGE_OK &&
             P->gpu->mem_alloc(P->gpu, (void **)&gg, n * sizeof *gg) == FORGE_OK &&
             P->gpu->mem_alloc(P->gpu, (void **)&gd0, n * sizeof *gd0) == FORGE_OK &&
             P->gpu->mem_alloc(P->gpu, (void **)&gd1, n * sizeof *gd1) == FORGE_OK &&
             P->gpu->mem_alloc(P->gpu, (void **)&gb0, (size_t)OC * sizeof *gb0) == FORGE_OK &&
             P->gpu->mem_alloc(P->gpu, (void **)&gb1, (size_t)OC * sizeof *gb1) == FORGE_OK &&
             P->gpu->copy_to_device(P->gpu, gx, hx, n * sizeof *hx) == FORGE_OK &&
             P->gpu->copy_to_device(P->gpu, gg, hg, n * sizeof *hg) == FORGE_OK &&
             P->gpu->copy_to_device(P->gpu, gb0, hb, (size_t)OC * sizeof *hb) == FORGE_OK &&
             P->gpu->copy_to_device(P->gpu, gb1, hb, (size_t)OC * sizeof *hb) == FORGE_OK;
    }
    if (!ok) {
        report(P, 0, op, shape, INFINITY, 0, "(alloc or upload failed)");
    } else {
        forge_status s0 = P->gpu->gelu_backward_bf16(P->gpu, gd0, gx, gg, n, 0);
        if (s0 == FORGE_OK) s0 = P->gpu->matmul_backward_weight_bf16(P->gpu, NULL, gb0, gd0, NULL, N, 0, OC);
        const forge_status s1 = P->gpu->gelu_backward_dbias_bf16(P->gpu, gd1, gb1, gx, gg, N, OC);
        ok = ran_ok(P, op, shape, s0, s1);
        if (ok && (P->gpu->copy_to_host(P->gpu, h0, gd0, n * sizeof *h0) != FORGE_OK ||
                   P->gpu->copy_to_host(P->gpu, h1, gd1, n * sizeof *h1) != FORGE_OK ||
                   P->gpu->copy_to_host(P->gpu, b0, gb0, (size_t)OC * sizeof *b0) != FORGE_OK ||
                   P->gpu->copy_to_host(P->gpu, b1, gb1, (size_t)OC * sizeof *b1) != FORGE_OK)) {
            report(P, 0, op, shape, INFINITY, 0, "(copy_to_host failed)");
            ok = 0;
        }
        if (ok) {
            size_t wd = 0, wb = 0;
            for (size_t i = 0; i < n; i++) wd += h0[i] != h1[i];
            for (int o = 0; o < OC; o++) wb += memcmp(&b0[o], &b1[o], sizeof(float)) != 0;
            char why[96];
            snprintf(why, sizeof why, "(%zu dinp and %zu dbias values differ)", wd, wb);
            report(P, wd == 0 && wb == 0, op, shape, (double)(wd + wb), 0, wd || wb ? why : NULL);
            g16_dbias_model(b0, hb, h1, N, OC);
            size_t wm = 0;
            for (int o = 0; o < OC; o++) wm += memcmp(&b0[o], &b1[o], sizeof(float)) != 0;
            snprintf(why, sizeof why, "(%zu dbias values differ from the partition's)", wm);
            report(P, wm == 0, "gelu_backward_dbias_bf16[partition bits]", shape, (double)wm, 0, wm ? why : NULL);
        }
    }
    void *dev[] = {gx, gg, gd0, gd1, gb0, gb1};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) P->gpu->mem_free(P->gpu, dev[i]);
    free(hx);
    free(hg);
    free(h0);
    free(h1);
    free(hb);
    free(b0);
    free(b1);
}

void run_gelu16_cases(parity *P) {
    /* the fused bias gradient: several row chunks, column tiles with a remainder, OC % 8 != 0 (the two-pass
     * fallback), one 8-column tile, row lanes whose row count is not a multiple of the kernels' row unrolls (2053:
     * 7 or 8 rows a lane; 333: 7; 9000: 8 or 9), gpt2-124m's fc, qkv and projection widths */
    static const int dbias_shapes[][2] = {{37, 40},    {1001, 264},  {9000, 136},   {4099, 3072},
                                          {130, 131},  {2053, 8},    {333, 2304},   {9000, 2304},
                                          {16384, 768}, {16384, 3072}};
    if (supported(P, "gelu_backward_dbias_bf16[vs two passes]", "", (const void *)P->cpu->gelu_backward_dbias_bf16,
                  (const void *)P->gpu->gelu_backward_dbias_bf16))
        for (size_t i = 0; i < sizeof dbias_shapes / sizeof dbias_shapes[0]; i++)
            if (!P->quick || (size_t)dbias_shapes[i][0] * dbias_shapes[i][1] <= 1000000)
                g16_dbias_case(P, dbias_shapes[i][0], dbias_shapes[i][1]);

    if (!supported(P, "gelu_backward_bf16[all patterns]", "", (const void *)P->cpu->gelu_backward_bf16,
                   (const void *)P->gpu->gelu_backward_bf16))
        return;
    const size_t n = 65536 + 5;
    forge_bf16 *xs = malloc(n * sizeof *xs), *xp = malloc(n * sizeof *xp), *one = malloc(n * sizeof *one);
    forge_bf16 *gr = malloc(n * sizeof *gr), *gw = malloc(n * sizeof *gw), *old = malloc(n * sizeof *old);
    if (!xs || !xp || !one || !gr || !gw || !old) {
        report(P, 0, "gelu_backward_bf16[all patterns]", "", INFINITY, 0, "(host out of memory)");
    } else {
        uint64_t s = 0x2545f4914f6cdd1dull;
        for (size_t i = 0; i < n; i++) {
            xs[i] = (forge_bf16)(i & 0xffffu);             /* every pattern in order; the tail repeats 0..4 */
            xp[i] = (forge_bf16)((i * 40503u) & 0xffffu); /* an odd multiplier: every pattern, chunks mixed */
            one[i] = 0x3f80u;                              /* 1.0 */
            gr[i] = forge_bf16_from_f32(((float)(g16_next(&s) >> 8) * (1.0f / 16777216.0f)) * 4.0f - 2.0f);
            gw[i] = g16_wide(&s);
            old[i] = forge_bf16_from_f32(((float)(g16_next(&s) >> 8) * (1.0f / 16777216.0f)) * 2.0f - 1.0f);
        }
        static const size_t offs[2] = {0, 3};
        for (int o = 0; o < 2; o++)
            for (int acc = 0; acc < 2; acc++) {
                const forge_bf16 *d0 = old; /* accumulate = 0 must not read it */
                g16_case(P, "x in order, dout 1", xs, one, d0, n, offs[o], acc);
                g16_case(P, "x in order, dout in [-2,2]", xs, gr, d0, n, offs[o], acc);
                g16_case(P, "x permuted, dout in [-2,2]", xp, gr, d0, n, offs[o], acc);
                g16_case(P, "x permuted, dout 2^-30..2^30", xp, gw, d0, n, offs[o], acc);
            }
        /* 64 permutations of the patterns back to back (+ a tail): more chunks than the grid has threads, so the
         * kernel's two-chunk iterations and a last single chunk run too */
        const size_t nb = (size_t)64 * 65536 + 5;
        forge_bf16 *xb = malloc(nb * sizeof *xb), *gb = malloc(nb * sizeof *gb), *ob = malloc(nb * sizeof *ob);
        if (!xb || !gb || !ob) {
            report(P, 0, "gelu_backward_bf16[all patterns]", "64 x 65536", INFINITY, 0, "(host out of memory)");
        } else {
            for (size_t i = 0; i < nb; i++) {
                xb[i] = (forge_bf16)(((uint32_t)i * 40503u + (uint32_t)(i >> 16) * 7919u) & 0xffffu);
                gb[i] = g16_wide(&s);
                ob[i] = forge_bf16_from_f32(((float)(g16_next(&s) >> 8) * (1.0f / 16777216.0f)) * 2.0f - 1.0f);
            }
            for (int acc = 0; acc < 2; acc++)
                g16_case(P, "x 64 permutations, dout 2^-30..2^30", xb, gb, ob, nb, 0, acc);
        }
        free(xb);
        free(gb);
        free(ob);
        /* tiny calls: one block, a chunk or none, a tail; x from the permuted patterns */
        static const size_t tiny[3] = {7, 8, 13};
        for (int t = 0; t < 3; t++)
            for (int acc = 0; acc < 2; acc++)
                g16_case(P, "tiny, x permuted", xp + 1000, gr, old, tiny[t], 0, acc);
    }
    free(xs);
    free(xp);
    free(one);
    free(gr);
    free(gw);
    free(old);
}
