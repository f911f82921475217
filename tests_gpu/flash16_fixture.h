/*
 * flash16_fixture.h: the test fixture of forge's bf16 flash attention
 * kernels (src/backend/cuda/flash_attention_bf16.h), shared by
 * tests_gpu/test_flash16_kernels.c (the kernels forge runs) and the lab's
 * `forge-lab test flash16` (the variants): one case's inputs, its float64
 * reference, device buffers with guard floats, and the comparisons. Header-only
 * (static inline): each user compiles its own copy, so the lab needs nothing
 * of the tests_gpu build but gpu_test.h.
 *
 * Reference: Q, K, V, dO are random bf16; the float64 reference below runs
 * the materialised math of the CPU backend's attention (scores, causal
 * softmax, P.V; dP, dS = P (dP - rowsum(P dP)), dQ/dK/dV) on exactly those
 * rounded values, generalised to Tq != Tk with bottom-right alignment. When
 * Tq == Tk the CPU reference backend's attention_forward/backward also run
 * on the same values (packed qkv in fp32) and the GPU is compared with them
 * too ("[cpu]" lines, tests_gpu only). Tolerances (bf16 inputs, bf16 P and dS in the second
 * matmuls, bf16 out):
 * - out (bf16, |out| <= max|v| = 1): 1.5e-2 absolute (a few bf16 ulps at 1);
 * - lse: 2e-3 absolute (fp32 scores of exact bf16 inputs; exp2 approx);
 * - dq, dk, dv: max abs error <= 3e-2 * max|reference| of that tensor (the
 *   bf16 rounding of dS and P is relative to each term; a layout or mask bug
 *   is an O(1) error). Where the exact gradient is ~0 (T = 1: a softmax over one
 *   key has dS = P (dP - D) = 0) the scale is floored at 1e-4: dP and D are O(1)
 *   fp32 sums and their difference keeps ~1e-7 of rounding (measured 4-6e-8,
 *   lab/notes/flash.md), so the bound is 3e-6 absolute there.
 * Rows with no visible key (Tk < Tq) must give out = 0 and lse = -inf. */
#ifndef FORGE_FLASH16_FIXTURE_H
#define FORGE_FLASH16_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "../src/backend/cuda/flash_attention_bf16.h"
#include "../src/bench/harness_cuda.h"

static inline uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* device buffer of `bytes` followed by GUARD sentinel floats; filled with
 * `fill` bytes (0xff: NaN for both bf16 and fp32) or uploaded from host */
static inline void *fa_dev(parity *P, size_t bytes, const void *host, int fill) {
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
static inline float *fa_fetch(parity *P, const void *g, size_t n, int is_bf16, size_t *guard_bad) {
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
static inline void fa_compare(parity *P, const char *op, const char *shape, const float *got, const double *ref,
                              size_t n, size_t guard_bad, double tol, int scaled) {
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
static inline void fa_check_dev(parity *P, const char *name, const char *shape, const void *g, size_t n,
                                int is_bf16, const double *ref, double tol, int scaled) {
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
static inline void fa_reference(const fa_ref_in *in, double *out, double *lse, double *dq, double *dk, double *dv) {
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

/* One case: inputs (Q, K, V, dO random bf16), the float64 reference and the device buffers.
 * packed = 1 (needs Tq == Tk): q/k/v are slices of one (B,T,(H+2Hkv)*D) buffer; otherwise separate buffers
 * with token strides padded by 8. */
typedef struct {
    int B, Tq, Tk, H, Hkv, D, packed;
    char shape[128];
    forge_flash_shape fs;
    long long C, qs, ks;          /* packed row width; host token strides of q and k/v */
    size_t nq, nk, no, nkv, nl;   /* elements: q (packed: the whole buffer), k / v, out / dq, dk / dv, lse */
    uint16_t *hq, *hk, *hv, *hdo; /* bf16 inputs */
    float *fq, *fk, *fv, *fdo;    /* the same values */
    fa_ref_in in;
    double *rout, *rlse, *rdq, *rdk, *rdv; /* the float64 reference */
    void *gq, *gk, *gv, *gdo;     /* device inputs (gk, gv NULL when packed) */
    const void *q, *k, *v;        /* device Q, K, V (slices of gq when packed) */
    void *gout, *glse;            /* out, lse of the mma.sync forward (fa_case_forward_mma) */
    void *stream;                 /* the CUDA backend's */
} fa_case;

static inline void fa_case_free(parity *P, fa_case *c) {
    free(c->hq), free(c->hk), free(c->hv), free(c->hdo), free(c->fq), free(c->fk), free(c->fv), free(c->fdo);
    free(c->rout), free(c->rlse), free(c->rdq), free(c->rdk), free(c->rdv);
    void *gs[] = {c->gq, c->gk, c->gv, c->gdo, c->gout, c->glse};
    for (int i = 0; i < 6; i++)
        if (gs[i]) P->gpu->mem_free(P->gpu, gs[i]);
    memset(c, 0, sizeof *c);
}

/* Inputs, reference, device inputs. Returns 1, or 0 after reporting a failure (call fa_case_free either way).
 * shape_inputs, when given, rewrites the random bf16 inputs (c->hq / c->hk / c->hv and their float copies c->fq /
 * c->fk / c->fv) before the reference and the upload. */
static inline int fa_case_init_shaped(parity *P, fa_case *c, int B, int Tq, int Tk, int H, int Hkv, int D,
                                      int packed, void (*shape_inputs)(fa_case *)) {
    memset(c, 0, sizeof *c);
    c->B = B, c->Tq = Tq, c->Tk = Tk, c->H = H, c->Hkv = Hkv, c->D = D, c->packed = packed;
    snprintf(c->shape, sizeof c->shape, "B=%d Tq=%d Tk=%d H=%d Hkv=%d D=%d %s", B, Tq, Tk, H, Hkv, D,
             packed ? "packed" : "strided");
    c->C = (long long)(H + 2 * Hkv) * D;
    c->qs = packed ? c->C : (long long)H * D + 8;
    c->ks = packed ? c->C : (long long)Hkv * D + 8;
    c->nq = (size_t)B * Tq * c->qs, c->nk = (size_t)B * Tk * c->ks;
    c->no = (size_t)B * Tq * H * D, c->nkv = (size_t)B * Tk * Hkv * D, c->nl = (size_t)B * H * Tq;
    const size_t nq = c->nq, nk = c->nk, no = c->no, nkv = c->nkv, nl = c->nl;
    c->hq = malloc(nq * 2), c->hk = malloc((nk ? nk : 1) * 2), c->hv = malloc((nk ? nk : 1) * 2);
    c->hdo = malloc(no * 2);
    c->fq = malloc(nq * 4), c->fk = malloc((nk ? nk : 1) * 4), c->fv = malloc((nk ? nk : 1) * 4);
    c->fdo = malloc(no * 4);
    c->rout = malloc(no * 8), c->rlse = malloc(nl * 8), c->rdq = malloc(no * 8), c->rdk = malloc((nkv + 1) * 8);
    c->rdv = malloc((nkv + 1) * 8);
    if (!c->hq || !c->hk || !c->hv || !c->hdo || !c->fq || !c->fk || !c->fv || !c->fdo || !c->rout || !c->rlse ||
        !c->rdq || !c->rdk || !c->rdv) {
        report(P, 0, "flash16", c->shape, INFINITY, 0, "(out of host memory)");
        return 0;
    }
    for (size_t i = 0; i < nq; i++) c->fq[i] = bf2f(c->hq[i] = f2bf(rand_range(P, -1.5f, 1.5f)));
    if (!packed)
        for (size_t i = 0; i < nk; i++) {
            c->fk[i] = bf2f(c->hk[i] = f2bf(rand_range(P, -1.5f, 1.5f)));
            c->fv[i] = bf2f(c->hv[i] = f2bf(rand_range(P, -1.0f, 1.0f)));
        }
    for (size_t i = 0; i < no; i++) c->fdo[i] = bf2f(c->hdo[i] = f2bf(rand_range(P, -1.0f, 1.0f)));
    if (shape_inputs) shape_inputs(c);

    fa_ref_in in = {B, Tq, Tk, H, Hkv, D, c->qs, c->ks, c->ks, c->fq, packed ? c->fq + (size_t)H * D : c->fk,
                    packed ? c->fq + (size_t)(H + Hkv) * D : c->fv, c->fdo};
    c->in = in;
    fa_reference(&c->in, c->rout, c->rlse, c->rdq, c->rdk, c->rdv);

    c->gq = fa_dev(P, nq * 2, c->hq, 0);
    if (!packed) {
        c->gk = fa_dev(P, nk * 2, c->hk, 0);
        c->gv = fa_dev(P, nk * 2, c->hv, 0);
    }
    c->gdo = fa_dev(P, no * 2, c->hdo, 0);
    if (!c->gq || (!packed && (!c->gk || !c->gv)) || !c->gdo) {
        report(P, 0, "flash16", c->shape, INFINITY, 0, "(device alloc/upload failed)");
        return 0;
    }
    const uint16_t *dq_ = c->gq;
    c->q = c->gq;
    c->k = packed ? (const void *)(dq_ + (size_t)H * D) : c->gk;
    c->v = packed ? (const void *)(dq_ + (size_t)(H + Hkv) * D) : c->gv;
    forge_flash_shape fs = {B, Tq, Tk, H, Hkv, D, c->qs, c->ks, c->ks, (long long)H * D};
    c->fs = fs;
    c->stream = forge_cuda_backend_stream(P->gpu);
    return 1;
}

static inline int fa_case_init(parity *P, fa_case *c, int B, int Tq, int Tk, int H, int Hkv, int D, int packed) {
    return fa_case_init_shaped(P, c, B, Tq, Tk, H, Hkv, D, packed, NULL);
}

/* The mma.sync forward by name (forge_flash_bf16_forward_mma) into c->gout, c->glse (NaN-poisoned first):
 * the out and lse every backward case of the fixture starts from. Not synchronised. */
static inline forge_status fa_case_forward_mma(parity *P, fa_case *c) {
    if (!c->gout) c->gout = fa_dev(P, c->no * 2, NULL, 0xff);
    if (!c->glse) c->glse = fa_dev(P, c->nl * 4, NULL, 0xff);
    if (!c->gout || !c->glse) return FORGE_ERR_OOM;
    return forge_flash_bf16_forward_mma(&c->fs, c->q, c->k, c->v, c->gout, c->glse, c->stream);
}

/* The report of a failed call: its status and message. */
static inline void fa_case_failed(parity *P, const fa_case *c, const char *name, forge_status st) {
    char why[512];
    snprintf(why, sizeof why, "(%s: %s)", forge_status_name(st), forge_error_message());
    report(P, 0, name, c->shape, INFINITY, 0, why);
}

/* Fresh NaN-poisoned outputs of one forward (out, lse) or backward (dq, dk, dv, delta) under test. */
typedef struct {
    void *out, *lse;
} fa_fwd_out;
typedef struct {
    void *dq, *dk, *dv, *delta;
} fa_bwd_out;

static inline int fa_case_fwd_out(parity *P, const fa_case *c, fa_fwd_out *o) {
    o->out = fa_dev(P, c->no * 2, NULL, 0xff);
    o->lse = fa_dev(P, c->nl * 4, NULL, 0xff);
    return o->out && o->lse;
}
static inline int fa_case_bwd_out(parity *P, const fa_case *c, fa_bwd_out *o) {
    o->dq = fa_dev(P, c->no * 4, NULL, 0xff);
    o->dk = fa_dev(P, c->nkv * 4, NULL, 0xff);
    o->dv = fa_dev(P, c->nkv * 4, NULL, 0xff);
    o->delta = fa_dev(P, FORGE_FLASH_BF16_BWD_SCRATCH(c->B, c->H, c->Tq, c->D) * 4, NULL, 0xff);
    return o->dq && o->dk && o->dv && o->delta;
}

/* st: the status of the forward `name` that wrote o (FORGE_ERR_OOM if fa_case_fwd_out failed). Synchronises,
 * then name.out (1.5e-2 absolute) and name.lse (2e-3 absolute) against the reference; frees o. */
static inline void fa_case_check_fwd(parity *P, const fa_case *c, const char *name, forge_status st,
                                     fa_fwd_out *o) {
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    if (st != FORGE_OK) {
        fa_case_failed(P, c, name, st);
    } else {
        char nout[64], nlse[64];
        snprintf(nout, sizeof nout, "%s.out", name);
        snprintf(nlse, sizeof nlse, "%s.lse", name);
        fa_check_dev(P, nout, c->shape, o->out, c->no, 1, c->rout, 1.5e-2, 0);
        fa_check_dev(P, nlse, c->shape, o->lse, c->nl, 0, c->rlse, 2e-3, 0);
    }
    if (o->out) P->gpu->mem_free(P->gpu, o->out);
    if (o->lse) P->gpu->mem_free(P->gpu, o->lse);
    o->out = o->lse = NULL;
}

/* The same for the backward `name`: name.dq, .dk, .dv within 3e-2 * max|reference| of that tensor. */
static inline void fa_case_check_bwd(parity *P, const fa_case *c, const char *name, forge_status st,
                                     fa_bwd_out *o) {
    if (st == FORGE_OK) st = P->gpu->synchronize(P->gpu);
    if (st != FORGE_OK) {
        fa_case_failed(P, c, name, st);
    } else {
        char ndq[64], ndk[64], ndv[64];
        snprintf(ndq, sizeof ndq, "%s.dq", name);
        snprintf(ndk, sizeof ndk, "%s.dk", name);
        snprintf(ndv, sizeof ndv, "%s.dv", name);
        fa_check_dev(P, ndq, c->shape, o->dq, c->no, 0, c->rdq, 3e-2, 1);
        fa_check_dev(P, ndk, c->shape, o->dk, c->nkv, 0, c->rdk, 3e-2, 1);
        fa_check_dev(P, ndv, c->shape, o->dv, c->nkv, 0, c->rdv, 3e-2, 1);
    }
    void *g[4] = {o->dq, o->dk, o->dv, o->delta};
    for (int i = 0; i < 4; i++)
        if (g[i]) P->gpu->mem_free(P->gpu, g[i]);
    memset(o, 0, sizeof *o);
}

/* The shapes every flash16 suite runs (B, Tq, Tk, H, Hkv, D, packed); quick runs skip Tq > 300. The two
 * 2 x 200 GQA shapes (3 query heads a kv head, 4 query tiles each) run more tiles through a dK/dV CTA than its ring
 * has stages, at each D, so a quick run under compute-sanitizer's racecheck sees every stage reused. 200 x 37: two
 * whole query tiles that see no key (Tq - Tk >= 128; 100 x 37 has none), which no key block stores. */
static const int FA_CASE_SHAPES[][7] = {
    {2, 67, 67, 4, 2, 64, 1},    {1, 1, 1, 2, 1, 64, 1},      {1, 1, 1, 2, 2, 128, 0},
    {1, 130, 130, 4, 4, 128, 1}, {2, 200, 200, 6, 2, 128, 0}, {2, 200, 200, 6, 2, 64, 1},
    {1, 100, 37, 4, 2, 64, 0},   {1, 100, 37, 2, 1, 128, 0},  {1, 37, 100, 2, 1, 128, 0},
    {1, 256, 256, 2, 2, 64, 1},  {1, 129, 200, 3, 3, 64, 0},  {2, 513, 513, 4, 1, 128, 1},
    {1, 1000, 1000, 2, 2, 64, 1}, {1, 200, 37, 4, 2, 64, 0},
    /* more work units (3 a head) than an H200's 132 SMs: persistent D = 128 CTAs that run two units, GQA 3:1 */
    {2, 700, 700, 24, 8, 128, 0},
};

/* A head dim without a compiled tile (D = 96) and 16-byte aligned dummies: what the refusal cases pass. */
static inline forge_flash_shape fa_refuse_shape(void) {
    forge_flash_shape fs = {1, 16, 16, 2, 2, 96, 2 * 96, 2 * 96, 2 * 96, 2 * 96};
    return fs;
}

/* report op.refuse: st must be FORGE_ERR_UNSUPPORTED */
static inline void fa_expect_refusal(parity *P, const char *op, forge_status st) {
    report(P, st == FORGE_ERR_UNSUPPORTED, op, "D=96", 0, 0,
           st == FORGE_ERR_UNSUPPORTED ? NULL : "(expected FORGE_ERR_UNSUPPORTED)");
}

#endif
