/* test_flash16_kernels.c: forge's bf16 flash attention kernels, called directly (not backend ops). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_test.h"

/* ---- flash attention bf16 (flash_attention_bf16.h) ------------------------------------
 *
 * Reference: Q, K, V, dO are random bf16; the float64 reference below runs
 * the materialised math of the CPU backend's attention (scores, causal
 * softmax, P.V; dP, dS = P (dP - rowsum(P dP)), dQ/dK/dV) on exactly those
 * rounded values, generalised to Tq != Tk with bottom-right alignment. When
 * Tq == Tk the CPU reference backend's attention_forward/backward also run
 * on the same values (packed qkv in fp32) and the GPU is compared with them
 * too ("[cpu]" lines). Tolerances (bf16 inputs, bf16 P and dS in the second
 * matmuls, bf16 out):
 * - out (bf16, |out| <= max|v| = 1): 1.5e-2 absolute (a few bf16 ulps at 1);
 * - lse: 2e-3 absolute (fp32 scores of exact bf16 inputs; exp2 approx);
 * - dq, dk, dv: max abs error <= 3e-2 * max|reference| of that tensor (the
 *   bf16 rounding of dS and P is relative to each term; a layout or mask bug
 *   is an O(1) error). Where the exact gradient is ~0 (T = 1: a softmax over one
 *   key has dS = P (dP - D) = 0) the scale is floored at 1e-4: dP and D are O(1)
 *   fp32 sums and their difference keeps ~1e-7 of rounding (measured 4-6e-8 on
 *   the H200), so the bound is 3e-6 absolute there.
 * Rows with no visible key (Tk < Tq) must give out = 0 and lse = -inf. */
#include "../src/backend/cuda/flash_attention_bf16.h"
#include "../src/bench/harness_cuda.h"

static uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* device buffer of `bytes` followed by GUARD sentinel floats; filled with
 * `fill` bytes (0xff: NaN for both bf16 and fp32) or uploaded from host */
static void *fa_dev(parity *P, size_t bytes, const void *host, int fill) {
    size_t total = bytes + GUARD * sizeof(float);
    unsigned char *h = malloc(total);
    void *g = NULL;
    if (!h) return NULL;
    if (host) memcpy(h, host, bytes);
    else memset(h, fill, bytes);
    for (size_t i = 0; i < GUARD; i++) {
        uint32_t u = GUARD_BITS;
        memcpy(h + bytes + i * sizeof u, &u, sizeof u);
    }
    if (P->gpu->mem_alloc(P->gpu, &g, total) != FORGE_OK ||
        P->gpu->copy_to_device(P->gpu, g, h, total) != FORGE_OK) {
        if (g) P->gpu->mem_free(P->gpu, g);
        g = NULL;
    }
    free(h);
    return g;
}

/* copies n values (bf16 if is_bf16, else fp32) back as floats; returns 0 on
 * a copy error; *guard_bad counts overwritten guard floats */
static float *fa_fetch(parity *P, const void *g, size_t n, int is_bf16, size_t *guard_bad) {
    size_t bytes = n * (is_bf16 ? 2 : 4), total = bytes + GUARD * sizeof(float);
    unsigned char *h = malloc(total);
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (!h || !f || P->gpu->copy_to_host(P->gpu, h, g, total) != FORGE_OK) {
        free(h);
        free(f);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (is_bf16) {
            uint16_t v;
            memcpy(&v, h + 2 * i, 2);
            f[i] = bf2f(v);
        } else {
            memcpy(&f[i], h + 4 * i, 4);
        }
    }
    *guard_bad = 0;
    for (size_t i = 0; i < GUARD; i++) {
        uint32_t u;
        memcpy(&u, h + bytes + 4 * i, 4);
        if (u != GUARD_BITS) (*guard_bad)++;
    }
    free(h);
    return f;
}

/* scaled = 1: tol is relative to max|ref|; -inf references must match exactly */
static void fa_compare(parity *P, const char *op, const char *shape, const float *got, const double *ref, size_t n,
                       size_t guard_bad, double tol, int scaled) {
    double amax = 0.0;
    if (scaled) {
        for (size_t i = 0; i < n; i++)
            if (isfinite(ref[i]) && fabs(ref[i]) > amax) amax = fabs(ref[i]);
        tol *= amax > 1e-4 ? amax : 1e-4; /* floor: see the tolerance note above (T = 1) */
    }
    double maxerr = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        double err;
        if (isinf(ref[i])) err = (got[i] == ref[i]) ? 0.0 : INFINITY;
        else err = fabs((double)got[i] - ref[i]);
        if (!(err <= maxerr)) {
            maxerr = isnan(err) ? INFINITY : err;
            worst = i;
            if (isnan(err)) break;
        }
    }
    char why[256] = "";
    int ok = maxerr <= tol && guard_bad == 0;
    if (guard_bad) snprintf(why, sizeof why, "(%zu guard floats after the buffer were overwritten)", guard_bad);
    else if (!ok && n)
        snprintf(why, sizeof why, "(worst at [%zu]: cuda %.9g vs ref %.9g)", worst, (double)got[worst], ref[worst]);
    report(P, ok, op, shape, maxerr, tol, why[0] ? why : NULL);
}

/* fetch n device values (bf16 or fp32) into host floats and compare them with ref (fa_compare's rules) */
static void fa_check_dev(parity *P, const char *name, const char *shape, const void *g, size_t n, int is_bf16,
                         const double *ref, double tol, int scaled) {
    size_t bad = 0;
    float *x = fa_fetch(P, g, n, is_bf16, &bad);
    if (!x) {
        report(P, 0, name, shape, INFINITY, 0, "(copy back failed)");
        return;
    }
    fa_compare(P, name, shape, x, ref, n, bad, tol, scaled);
    free(x);
}

typedef struct {
    int B, Tq, Tk, H, Hkv, D;
    long long qs, ks, vs;         /* host token strides of q, k, v (elements) */
    const float *q, *k, *v, *dO;  /* rounded values; dO dense (B,Tq,H,D) */
} fa_ref_in;

/* float64 materialised attention: out, lse (B,H,Tq), dq (B,Tq,H,D), dk, dv (B,Tk,Hkv,D) */
static void fa_reference(const fa_ref_in *in, double *out, double *lse, double *dq, double *dk, double *dv) {
    const int D = in->D, G = in->H / in->Hkv;
    const double scale = 1.0 / sqrt((double)D);
    double *p = malloc(((size_t)in->Tk + 1) * sizeof *p), *dp = malloc(((size_t)in->Tk + 1) * sizeof *dp);
    memset(dk, 0, (size_t)in->B * in->Tk * in->Hkv * D * sizeof *dk);
    memset(dv, 0, (size_t)in->B * in->Tk * in->Hkv * D * sizeof *dv);
    for (int b = 0; b < in->B; b++)
        for (int h = 0; h < in->H; h++) {
            const int hk = h / G;
            for (int i = 0; i < in->Tq; i++) {
                const float *qi = in->q + ((size_t)b * in->Tq + i) * in->qs + (size_t)h * D;
                const float *doi = in->dO + (((size_t)b * in->Tq + i) * in->H + h) * D;
                const size_t orow = (((size_t)b * in->Tq + i) * in->H + h) * D;
                int last = i + in->Tk - in->Tq;
                if (last > in->Tk - 1) last = in->Tk - 1;
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j <= last; j++) {
                    const float *kj = in->k + ((size_t)b * in->Tk + j) * in->ks + (size_t)hk * D;
                    double s = 0.0;
                    for (int d = 0; d < D; d++) s += (double)qi[d] * kj[d];
                    p[j] = s * scale;
                    if (p[j] > m) m = p[j];
                }
                for (int j = 0; j <= last; j++) {
                    p[j] = exp(p[j] - m);
                    sum += p[j];
                }
                lse[((size_t)b * in->H + h) * in->Tq + i] = last >= 0 ? m + log(sum) : -INFINITY;
                for (int d = 0; d < D; d++) {
                    out[orow + d] = 0.0;
                    dq[orow + d] = 0.0;
                }
                double delta = 0.0;
                for (int j = 0; j <= last; j++) {
                    const float *vj = in->v + ((size_t)b * in->Tk + j) * in->vs + (size_t)hk * D;
                    p[j] /= sum;
                    double t = 0.0;
                    for (int d = 0; d < D; d++) {
                        out[orow + d] += p[j] * vj[d];
                        t += (double)doi[d] * vj[d];
                    }
                    dp[j] = t;
                    delta += p[j] * t;
                }
                for (int j = 0; j <= last; j++) {
                    const float *kj = in->k + ((size_t)b * in->Tk + j) * in->ks + (size_t)hk * D;
                    const double ds = p[j] * (dp[j] - delta) * scale;
                    const size_t krow = (((size_t)b * in->Tk + j) * in->Hkv + hk) * D;
                    for (int d = 0; d < D; d++) {
                        dq[orow + d] += ds * kj[d];
                        dk[krow + d] += ds * qi[d];
                        dv[krow + d] += p[j] * doi[d];
                    }
                }
            }
        }
    free(p);
    free(dp);
}

/* packed = 1 (needs Tq == Tk): q/k/v are slices of one (B,T,(H+2Hkv)*D)
 * buffer; otherwise separate buffers with token strides padded by 8. */
static void case_flash16(parity *P, int B, int Tq, int Tk, int H, int Hkv, int D, int packed) {
    char shape[128];
    snprintf(shape, sizeof shape, "B=%d Tq=%d Tk=%d H=%d Hkv=%d D=%d %s", B, Tq, Tk, H, Hkv, D,
             packed ? "packed" : "strided");
    const long long C = (long long)(H + 2 * Hkv) * D;
    const long long qs = packed ? C : (long long)H * D + 8, ks = packed ? C : (long long)Hkv * D + 8;
    const size_t nq = (size_t)B * Tq * qs, nk = (size_t)B * Tk * ks; /* packed: nq is the whole buffer */
    const size_t no = (size_t)B * Tq * H * D, nkv = (size_t)B * Tk * Hkv * D, nl = (size_t)B * H * Tq;
    uint16_t *hq = malloc(nq * 2), *hk = malloc((nk ? nk : 1) * 2), *hv = malloc((nk ? nk : 1) * 2),
             *hdo = malloc(no * 2);
    float *fq = malloc(nq * 4), *fk = malloc((nk ? nk : 1) * 4), *fv = malloc((nk ? nk : 1) * 4),
          *fdo = malloc(no * 4);
    double *rout = malloc(no * 8), *rlse = malloc(nl * 8), *rdq = malloc(no * 8), *rdk = malloc((nkv + 1) * 8),
           *rdv = malloc((nkv + 1) * 8);
    void *gq = NULL, *gk = NULL, *gv = NULL, *gdo = NULL, *gout = NULL, *glse = NULL, *gdq = NULL, *gdk = NULL,
         *gdv = NULL, *gdelta = NULL;
    if (!hq || !hk || !hv || !hdo || !fq || !fk || !fv || !fdo || !rout || !rlse || !rdq || !rdk || !rdv) {
        report(P, 0, "flash16", shape, INFINITY, 0, "(out of host memory)");
        goto done;
    }
    for (size_t i = 0; i < nq; i++) fq[i] = bf2f(hq[i] = f2bf(rand_range(P, -1.5f, 1.5f)));
    if (!packed)
        for (size_t i = 0; i < nk; i++) {
            fk[i] = bf2f(hk[i] = f2bf(rand_range(P, -1.5f, 1.5f)));
            fv[i] = bf2f(hv[i] = f2bf(rand_range(P, -1.0f, 1.0f)));
        }
    for (size_t i = 0; i < no; i++) fdo[i] = bf2f(hdo[i] = f2bf(rand_range(P, -1.0f, 1.0f)));

    fa_ref_in in = {B, Tq, Tk, H, Hkv, D, qs, ks, ks, fq, packed ? fq + (size_t)H * D : fk,
                    packed ? fq + (size_t)(H + Hkv) * D : fv, fdo};
    fa_reference(&in, rout, rlse, rdq, rdk, rdv);

    gq = fa_dev(P, nq * 2, hq, 0);
    if (!packed) {
        gk = fa_dev(P, nk * 2, hk, 0);
        gv = fa_dev(P, nk * 2, hv, 0);
    }
    gdo = fa_dev(P, no * 2, hdo, 0);
    gout = fa_dev(P, no * 2, NULL, 0xff);
    glse = fa_dev(P, nl * 4, NULL, 0xff);
    gdq = fa_dev(P, no * 4, NULL, 0xff);
    gdk = fa_dev(P, nkv * 4, NULL, 0xff);
    gdv = fa_dev(P, nkv * 4, NULL, 0xff);
    gdelta = fa_dev(P, nl * 4, NULL, 0xff);
    if (!gq || (!packed && (!gk || !gv)) || !gdo || !gout || !glse || !gdq || !gdk || !gdv || !gdelta) {
        report(P, 0, "flash16", shape, INFINITY, 0, "(device alloc/upload failed)");
        goto done;
    }
    const uint16_t *dq_ = gq;
    const void *dk_ = packed ? (const void *)(dq_ + (size_t)H * D) : gk;
    const void *dv_ = packed ? (const void *)(dq_ + (size_t)(H + Hkv) * D) : gv;
    forge_flash_shape fs = {B, Tq, Tk, H, Hkv, D, qs, ks, ks, (long long)H * D};
    void *stream = forge_cuda_backend_stream(P->gpu);
    /* the mma.sync forward by name: the default entry runs the wgmma one, which has its own
     * flash16_forward_wgmma lines below */
    forge_status st = forge_flash_bf16_forward_rows(&fs, gq, dk_, dv_, gout, glse, 64, stream);
    if (st == FORGE_OK)
        st = forge_flash_bf16_backward_mma(&fs, gq, dk_, dv_, gout, gdo, glse, gdelta, gdq, gdk, gdv, stream);
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    if (st != FORGE_OK) {
        char why[512];
        snprintf(why, sizeof why, "(%s: %s)", forge_status_name(st), forge_error_message());
        report(P, 0, "flash16", shape, INFINITY, 0, why);
        goto done;
    }
    struct {
        const char *name;
        void *g;
        size_t n;
        int bf;
        const double *ref;
        double tol;
        int scaled;
    } outs[] = {
        {"flash16_forward.out", gout, no, 1, rout, 1.5e-2, 0},
        {"flash16_forward.lse", glse, nl, 0, rlse, 2e-3, 0},
        {"flash16_backward.dq", gdq, no, 0, rdq, 3e-2, 1},
        {"flash16_backward.dk", gdk, nkv, 0, rdk, 3e-2, 1},
        {"flash16_backward.dv", gdv, nkv, 0, rdv, 3e-2, 1},
    };
    float *got[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int i = 0; i < 5; i++) {
        size_t bad = 0;
        got[i] = fa_fetch(P, outs[i].g, outs[i].n, outs[i].bf, &bad);
        if (!got[i]) {
            report(P, 0, outs[i].name, shape, INFINITY, 0, "(copy back failed)");
            continue;
        }
        fa_compare(P, outs[i].name, shape, got[i], outs[i].ref, outs[i].n, bad, outs[i].tol, outs[i].scaled);
    }

    /* the CPU reference backend itself (Tq == Tk): packed fp32 qkv of the same values */
    if (Tq == Tk && Tq > 0 && P->cpu->attention_forward && P->cpu->attention_backward) {
        const int T = Tq;
        float *qkv = malloc((size_t)B * T * C * 4), *o = malloc(no * 4), *att = malloc((size_t)B * H * T * T * 4),
              *scr = malloc((size_t)B * H * T * T * 4), *dqkv = calloc((size_t)B * T * C, 4);
        double *r = malloc(((size_t)B * T * C + no) * 8);
        if (qkv && o && att && scr && dqkv && r) {
            for (size_t bt = 0; bt < (size_t)B * T; bt++)
                for (int c = 0; c < H * D; c++) {
                    qkv[bt * C + c] = in.q[bt * qs + c];
                    if (c < Hkv * D) {
                        qkv[bt * C + H * D + c] = in.k[bt * ks + c];
                        qkv[bt * C + (H + Hkv) * D + c] = in.v[bt * ks + c];
                    }
                }
            if (P->cpu->attention_forward(P->cpu, o, att, qkv, B, T, H, Hkv, D) == FORGE_OK &&
                P->cpu->attention_backward(P->cpu, dqkv, scr, fdo, qkv, att, B, T, H, Hkv, D) == FORGE_OK) {
                for (size_t i = 0; i < no; i++) r[i] = o[i];
                if (got[0]) fa_compare(P, "flash16_forward.out[cpu]", shape, got[0], r, no, 0, 1.5e-2, 0);
                /* dq from the packed gradient, (B,T,H,D) */
                for (size_t bt = 0; bt < (size_t)B * T; bt++)
                    for (int c = 0; c < H * D; c++) r[bt * H * D + c] = dqkv[bt * C + c];
                if (got[2]) fa_compare(P, "flash16_backward.dq[cpu]", shape, got[2], r, no, 0, 3e-2, 1);
                for (int w = 0; w < 2; w++) {
                    for (size_t bt = 0; bt < (size_t)B * T; bt++)
                        for (int c = 0; c < Hkv * D; c++)
                            r[bt * Hkv * D + c] = dqkv[bt * C + (size_t)(H + w * Hkv) * D + c];
                    if (got[3 + w])
                        fa_compare(P, w ? "flash16_backward.dv[cpu]" : "flash16_backward.dk[cpu]", shape,
                                   got[3 + w], r, nkv, 0, 3e-2, 1);
                }
            } else {
                report(P, 0, "flash16[cpu]", shape, INFINITY, 0, forge_error_message());
            }
        }
        free(qkv);
        free(o);
        free(att);
        free(scr);
        free(dqkv);
        free(r);
    }
    for (int i = 0; i < 5; i++) free(got[i]);

    /* the forward variants on the same inputs: the 8-warp mma.sync one (q_rows = 128) and the Hopper wgmma
     * one (TMA + wgmma, FA3-style) in each consumer schedule, named explicitly so FORGE_FLASH16_FWD_SCHED
     * changes none: base (flash16_forward_wgmma), overlap (_ov: softmax under the previous tile's P.V),
     * pingpong (_pp: overlap + the two consumer warpgroups taking turns to issue), persist (_ps: pingpong
     * on one CTA per SM walking the work items), persist_ov (_pso: overlap the same way) and pingpong /
     * persist with 128-key tiles at D = 128 (_pp128, _ps128; the same kernels as _pp, _ps at D = 64) */
    static const char *const fwd_variants[8] = {
        "flash16_forward_q128",     "flash16_forward_wgmma",     "flash16_forward_wgmma_ov",
        "flash16_forward_wgmma_pp", "flash16_forward_wgmma_ps",  "flash16_forward_wgmma_pso",
        "flash16_forward_wgmma_pp128", "flash16_forward_wgmma_ps128"};
    static const int fwd_sched[8] = {0,
                                     FORGE_FLASH16_SCHED_BASE,
                                     FORGE_FLASH16_SCHED_OVERLAP,
                                     FORGE_FLASH16_SCHED_PINGPONG,
                                     FORGE_FLASH16_SCHED_PERSIST,
                                     FORGE_FLASH16_SCHED_PERSIST_OV,
                                     FORGE_FLASH16_SCHED_PINGPONG_N128,
                                     FORGE_FLASH16_SCHED_PERSIST_N128};
    for (int var = 0; var < 8; var++) {
        const char *vname = fwd_variants[var];
        char nout[64], nlse[64];
        snprintf(nout, sizeof nout, "%s.out", vname);
        snprintf(nlse, sizeof nlse, "%s.lse", vname);
        void *gout2 = fa_dev(P, no * 2, NULL, 0xff), *glse2 = fa_dev(P, nl * 4, NULL, 0xff);
        if (!gout2 || !glse2)
            st = FORGE_ERR_OOM;
        else if (var == 0)
            st = forge_flash_bf16_forward_rows(&fs, gq, dk_, dv_, gout2, glse2, 128, stream);
        else
            st = forge_flash_bf16_forward_wgmma_sched(&fs, gq, dk_, dv_, gout2, glse2, fwd_sched[var], stream);
        if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
        if (st != FORGE_OK) {
            report(P, 0, vname, shape, INFINITY, 0, forge_error_message());
        } else {
            fa_check_dev(P, nout, shape, gout2, no, 1, rout, 1.5e-2, 0);
            fa_check_dev(P, nlse, shape, glse2, nl, 0, rlse, 2e-3, 0);
        }
        if (gout2) P->gpu->mem_free(P->gpu, gout2);
        if (glse2) P->gpu->mem_free(P->gpu, glse2);
    }

    /* the Hopper wgmma backward (flash_attention_bf16_wgmma_bwd.cu) on the same inputs, out and lse of the
     * forward above; same tolerances as the mma.sync backward. A refusal (FORGE_ERR_UNSUPPORTED) is a failure:
     * every shape here (D = 64 / 128, Tq, Tk > 0, 16-byte strides) is one it must take on sm_90. Each variant
     * by name (FORGE_FLASH16_BWD_DKDV changes none): the unpipelined kernels (flash16_backward_wgmma.*), at
     * D = 128 (D = 64 has one dK/dV kernel) the pipelined dK/dV (flash16_backward_wgmma_dkp.*), and PIPE_DQ
     * (flash16_backward_wgmma_pq.*: that and, at D = 64, the pipelined dQ kernel). */
    static const int bwd_var[3] = {FORGE_FLASH16_DKDV_SPLIT, FORGE_FLASH16_DKDV_PIPE, FORGE_FLASH16_DKDV_PIPE_DQ};
    static const char *const bwd_name[3] = {"flash16_backward_wgmma", "flash16_backward_wgmma_dkp",
                                            "flash16_backward_wgmma_pq"};
    for (int var = 0; var < 3; var++) {
        if (var == 1 && D != 128) continue;
        const char *vname = bwd_name[var];
        char ndq[64], ndk[64], ndv[64];
        snprintf(ndq, sizeof ndq, "%s.dq", vname);
        snprintf(ndk, sizeof ndk, "%s.dk", vname);
        snprintf(ndv, sizeof ndv, "%s.dv", vname);
        void *gdq2 = fa_dev(P, no * 4, NULL, 0xff), *gdk2 = fa_dev(P, nkv * 4, NULL, 0xff),
             *gdv2 = fa_dev(P, nkv * 4, NULL, 0xff), *gdelta2 = fa_dev(P, nl * 4, NULL, 0xff);
        if (!gdq2 || !gdk2 || !gdv2 || !gdelta2)
            st = FORGE_ERR_OOM;
        else
            st = forge_flash_bf16_backward_wgmma_dkdv(&fs, gq, dk_, dv_, gout, gdo, glse, gdelta2, gdq2, gdk2, gdv2,
                                                      bwd_var[var], stream);
        if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
        if (st != FORGE_OK) {
            char why[512];
            snprintf(why, sizeof why, "(%s: %s)", forge_status_name(st), forge_error_message());
            report(P, 0, vname, shape, INFINITY, 0, why);
        } else {
            fa_check_dev(P, ndq, shape, gdq2, no, 0, rdq, 3e-2, 1);
            fa_check_dev(P, ndk, shape, gdk2, nkv, 0, rdk, 3e-2, 1);
            fa_check_dev(P, ndv, shape, gdv2, nkv, 0, rdv, 3e-2, 1);
        }
        void *gw[4] = {gdq2, gdk2, gdv2, gdelta2};
        for (int i = 0; i < 4; i++)
            if (gw[i]) P->gpu->mem_free(P->gpu, gw[i]);
    }

    /* the default entries (forge_flash_bf16_forward / _backward: wgmma unless FORGE_FLASH16_FWD / _BWD say mma,
     * mma.sync where wgmma refuses), as a caller gets them */
    {
        void *go = fa_dev(P, no * 2, NULL, 0xff), *gl = fa_dev(P, nl * 4, NULL, 0xff),
             *gq3 = fa_dev(P, no * 4, NULL, 0xff), *gk3 = fa_dev(P, nkv * 4, NULL, 0xff),
             *gv3 = fa_dev(P, nkv * 4, NULL, 0xff), *gd3 = fa_dev(P, nl * 4, NULL, 0xff);
        st = go && gl && gq3 && gk3 && gv3 && gd3 ? forge_flash_bf16_forward(&fs, gq, dk_, dv_, go, gl, stream)
                                                  : FORGE_ERR_OOM;
        if (st == FORGE_OK)
            st = forge_flash_bf16_backward(&fs, gq, dk_, dv_, go, gdo, gl, gd3, gq3, gk3, gv3, stream);
        if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
        if (st != FORGE_OK) {
            report(P, 0, "flash16_default", shape, INFINITY, 0, forge_error_message());
        } else {
            fa_check_dev(P, "flash16_default.out", shape, go, no, 1, rout, 1.5e-2, 0);
            fa_check_dev(P, "flash16_default.dq", shape, gq3, no, 0, rdq, 3e-2, 1);
            fa_check_dev(P, "flash16_default.dk", shape, gk3, nkv, 0, rdk, 3e-2, 1);
            fa_check_dev(P, "flash16_default.dv", shape, gv3, nkv, 0, rdv, 3e-2, 1);
        }
        void *gd[6] = {go, gl, gq3, gk3, gv3, gd3};
        for (int i = 0; i < 6; i++)
            if (gd[i]) P->gpu->mem_free(P->gpu, gd[i]);
    }
done:
    free(hq), free(hk), free(hv), free(hdo), free(fq), free(fk), free(fv), free(fdo);
    free(rout), free(rlse), free(rdq), free(rdk), free(rdv);
    void *gs[] = {gq, gk, gv, gdo, gout, glse, gdq, gdk, gdv, gdelta};
    for (int i = 0; i < 10; i++)
        if (gs[i]) P->gpu->mem_free(P->gpu, gs[i]);
}

/* head dims without a compiled tile are refused with FORGE_ERR_UNSUPPORTED */
static void case_flash16_refuse(parity *P) {
    forge_flash_shape fs = {1, 16, 16, 2, 2, 96, 2 * 96, 2 * 96, 2 * 96, 2 * 96};
    static __attribute__((aligned(16))) char dummy[16];
    forge_status st = forge_flash_bf16_forward(&fs, dummy, dummy, dummy, dummy, (float *)dummy, NULL);
    report(P, st == FORGE_ERR_UNSUPPORTED, "flash16_forward.refuse", "D=96", 0, 0,
           st == FORGE_ERR_UNSUPPORTED ? NULL : "(expected FORGE_ERR_UNSUPPORTED)");
    st = forge_flash_bf16_forward_wgmma(&fs, dummy, dummy, dummy, dummy, (float *)dummy, NULL);
    report(P, st == FORGE_ERR_UNSUPPORTED, "flash16_forward_wgmma.refuse", "D=96", 0, 0,
           st == FORGE_ERR_UNSUPPORTED ? NULL : "(expected FORGE_ERR_UNSUPPORTED)");
    st = forge_flash_bf16_forward_wgmma_sched(&fs, dummy, dummy, dummy, dummy, (float *)dummy,
                                              FORGE_FLASH16_SCHED_PINGPONG, NULL);
    report(P, st == FORGE_ERR_UNSUPPORTED, "flash16_forward_wgmma_pp.refuse", "D=96", 0, 0,
           st == FORGE_ERR_UNSUPPORTED ? NULL : "(expected FORGE_ERR_UNSUPPORTED)");
    float *fd = (float *)dummy;
    st = forge_flash_bf16_backward_wgmma(&fs, dummy, dummy, dummy, dummy, dummy, fd, fd, fd, fd, fd, NULL);
    report(P, st == FORGE_ERR_UNSUPPORTED, "flash16_backward_wgmma.refuse", "D=96", 0, 0,
           st == FORGE_ERR_UNSUPPORTED ? NULL : "(expected FORGE_ERR_UNSUPPORTED)");
}

void run_flash16_cases(parity *P) {
    static const int shapes[][7] = {
        /* B, Tq, Tk, H, Hkv, D, packed */
        {2, 67, 67, 4, 2, 64, 1},   {1, 1, 1, 2, 1, 64, 1},     {1, 1, 1, 2, 2, 128, 0},
        {1, 130, 130, 4, 4, 128, 1}, {2, 200, 200, 6, 2, 128, 0}, {1, 100, 37, 4, 2, 64, 0},
        {1, 100, 37, 2, 1, 128, 0}, {1, 37, 100, 2, 1, 128, 0}, {1, 256, 256, 2, 2, 64, 1},
        {1, 129, 200, 3, 3, 64, 0}, {2, 513, 513, 4, 1, 128, 1}, {1, 1000, 1000, 2, 2, 64, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (P->quick && shapes[i][1] > 300) continue;
        case_flash16(P, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], shapes[i][5],
                     shapes[i][6]);
    }
    case_flash16_refuse(P);
}

