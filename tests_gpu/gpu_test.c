/* gpu_test.c: reporting and mirrored buffers shared by the GPU test files (gpu_test.h). */
#include "gpu_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


double tol_for_sum(double K) {
    double t = sqrt(K) / 8.0;
    return 1e-4 * (t > 1.0 ? t : 1.0);
}

float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float rand_range(parity *P, float lo, float hi) {
    return lo + (hi - lo) * forge_rng_uniform(&P->rng);
}

/* ---- reporting ----------------------------------------------------------- */

void report(parity *P, int ok, const char *op, const char *shape, double maxerr, double tol,
                   const char *why) {
    if (ok) P->passed++;
    else P->failed++;
    if (ok && P->quiet) return;
    printf("%s %s %s maxerr=%.3g tol=%.3g%s%s\n", ok ? "PASS" : "FAIL", op, shape, maxerr, tol,
           why ? " " : "", why ? why : "");
    fflush(stdout);
}

void report_skip(parity *P, const char *op, const char *shape, const char *why) {
    P->skipped++;
    printf("SKIP %s %s (%s)\n", op, shape, why);
    fflush(stdout);
}

/* Both entries exist? A NULL CPU entry skips; a NULL CUDA entry fails. */
int supported(parity *P, const char *op, const char *shape, const void *cpu_fn,
                     const void *gpu_fn) {
    if (!gpu_fn) {
        report(P, 0, op, shape, INFINITY, 0, "(cuda entry is NULL)");
        return 0;
    }
    if (!cpu_fn) {
        report_skip(P, op, shape, "cpu reference entry is NULL");
        return 0;
    }
    return 1;
}

/* Both calls returned OK? Otherwise one FAIL line with the error message. */
int ran_ok(parity *P, const char *op, const char *shape, forge_status sc, forge_status sg) {
    if (sc == FORGE_OK && sg == FORGE_OK) return 1;
    char why[512];
    snprintf(why, sizeof why, "(%s returned %s: %s)", sc != FORGE_OK ? "cpu" : "cuda",
             forge_status_name(sc != FORGE_OK ? sc : sg), forge_error_message());
    report(P, 0, op, shape, INFINITY, 0, why);
    return 0;
}

/* ---- buffers ------------------------------------------------------------- */

void fbuf_free(parity *P, fbuf *b) {
    if (b->c) P->cpu->mem_free(P->cpu, b->c);
    if (b->g) P->gpu->mem_free(P->gpu, b->g);
    memset(b, 0, sizeof *b);
}

void ibuf_free(parity *P, ibuf *b) {
    if (b->c) P->cpu->mem_free(P->cpu, b->c);
    if (b->g) P->gpu->mem_free(P->gpu, b->g);
    memset(b, 0, sizeof *b);
}

/* Allocates n floats on both sides (+GUARD on the device) and uploads host
 * values (NULL: leave the data unset) plus the guard sentinel. */
int fbuf_upload(parity *P, fbuf *b, size_t n, const float *host) {
    size_t total = n + GUARD;
    float *tmp = malloc(total * sizeof *tmp);
    if (!tmp) return 0;
    b->n = n;
    int ok = P->cpu->mem_alloc(P->cpu, (void **)&b->c, (n ? n : 1) * sizeof(float)) == FORGE_OK &&
             P->gpu->mem_alloc(P->gpu, (void **)&b->g, total * sizeof(float)) == FORGE_OK;
    if (ok) {
        for (size_t i = 0; i < n; i++) tmp[i] = host[i];
        for (size_t i = 0; i < GUARD; i++) tmp[n + i] = bits_to_float(GUARD_BITS);
        if (n) memcpy(b->c, host, n * sizeof(float));
        ok = P->gpu->copy_to_device(P->gpu, b->g, tmp, total * sizeof(float)) == FORGE_OK;
    }
    free(tmp);
    if (!ok) {
        printf("FAIL alloc/upload of %zu floats: %s\n", n, forge_error_message());
        P->failed++;
        fbuf_free(P, b);
    }
    return ok;
}

/* random values in [lo, hi) on both sides: inputs, and += outputs */
int fbuf_rand(parity *P, fbuf *b, size_t n, float lo, float hi) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) return 0;
    for (size_t i = 0; i < n; i++) h[i] = rand_range(P, lo, hi);
    int ok = fbuf_upload(P, b, n, h);
    free(h);
    return ok;
}

int fbuf_rand_tril(parity *P, fbuf *b, size_t n, float lo, float hi, int side) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) return 0;
    const size_t sq = (size_t)side * (size_t)side;
    for (size_t i = 0; i < n; i++) {
        const size_t in_mat = sq ? i % sq : 0, row = side ? in_mat / (size_t)side : 0, col = side ? in_mat % (size_t)side : 0;
        h[i] = col <= row ? rand_range(P, lo, hi) : 0.0f;
    }
    int ok = fbuf_upload(P, b, n, h);
    free(h);
    return ok;
}

/* NaN on both sides: forward outputs */
int fbuf_poison(parity *P, fbuf *b, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) return 0;
    for (size_t i = 0; i < n; i++) h[i] = bits_to_float(POISON_BITS);
    int ok = fbuf_upload(P, b, n, h);
    free(h);
    return ok;
}

/* int32 values: uniform in [0, range), each replaced by `special` with
 * probability special_pct/100 (ignore_index rows) */
int ibuf_rand(parity *P, ibuf *b, size_t n, int range, int special, int special_pct) {
    int32_t *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) return 0;
    for (size_t i = 0; i < n; i++) {
        h[i] = (int32_t)forge_rng_below(&P->rng, (uint64_t)range);
        if (special_pct > 0 && (int)forge_rng_below(&P->rng, 100) < special_pct) h[i] = special;
    }
    b->n = n;
    int ok = P->cpu->mem_alloc(P->cpu, (void **)&b->c, (n ? n : 1) * sizeof(int32_t)) == FORGE_OK &&
             P->gpu->mem_alloc(P->gpu, (void **)&b->g, (n ? n : 1) * sizeof(int32_t)) == FORGE_OK;
    if (ok) {
        if (n) memcpy(b->c, h, n * sizeof(int32_t));
        ok = P->gpu->copy_to_device(P->gpu, b->g, h, n * sizeof(int32_t)) == FORGE_OK;
    }
    free(h);
    if (!ok) {
        printf("FAIL alloc/upload of %zu ints: %s\n", n, forge_error_message());
        P->failed++;
        ibuf_free(P, b);
    }
    return ok;
}

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

int ibuf_spans(parity *P, ibuf *b, int count, size_t total) {
    if (count < 1 || (size_t)count > total) {
        printf("FAIL spans: %d spans of %zu elements\n", count, total);
        P->failed++;
        return 0;
    }
    size_t *cut = malloc((size_t)(count + 1) * sizeof *cut);
    forge_adamw_span *sp = malloc((size_t)count * sizeof *sp);
    int ok = cut && sp;
    if (ok) {
        /* count - 1 distinct interior cut points, so every span is non-empty */
        cut[0] = 0;
        cut[count] = total;
        for (int k = 1; k < count; k++) {
            int fresh;
            do {
                cut[k] = 1 + (size_t)forge_rng_below(&P->rng, (uint64_t)(total - 1));
                fresh = 1;
                for (int j = 1; j < k; j++) fresh &= cut[j] != cut[k];
            } while (!fresh);
        }
        qsort(cut + 1, (size_t)(count > 1 ? count - 1 : 0), sizeof *cut, cmp_size);
        for (int k = 0; k < count; k++)
            sp[k] = (forge_adamw_span){.begin = cut[k], .n = (uint32_t)(cut[k + 1] - cut[k]),
                                       .weight_decay = forge_rng_below(&P->rng, 2) ? 0.1f : 0.0f};
    }
    const size_t bytes = (size_t)count * sizeof *sp;
    b->n = bytes / sizeof(int32_t);
    ok = ok && P->cpu->mem_alloc(P->cpu, (void **)&b->c, bytes) == FORGE_OK &&
         P->gpu->mem_alloc(P->gpu, (void **)&b->g, bytes) == FORGE_OK;
    if (ok) {
        memcpy(b->c, sp, bytes);
        ok = P->gpu->copy_to_device(P->gpu, b->g, sp, bytes) == FORGE_OK;
    }
    free(cut);
    free(sp);
    if (!ok) {
        printf("FAIL alloc/upload of %d spans: %s\n", count, forge_error_message());
        P->failed++;
        ibuf_free(P, b);
    }
    return ok;
}

/* Copies the device side back and prints one PASS/FAIL line. rel = 1
 * compares |g - c| <= tol * |c| instead (printed maxerr is then relative). */
void check(parity *P, const char *op, const char *shape, const fbuf *b, double tol, int rel) {
    size_t total = b->n + GUARD;
    float *h = malloc(total * sizeof *h);
    if (!h) {
        report(P, 0, op, shape, INFINITY, tol, "(out of host memory)");
        return;
    }
    if (P->gpu->copy_to_host(P->gpu, h, b->g, total * sizeof(float)) != FORGE_OK) {
        char why[512];
        snprintf(why, sizeof why, "(copy_to_host: %s)", forge_error_message());
        report(P, 0, op, shape, INFINITY, tol, why);
        free(h);
        return;
    }
    double maxerr = 0.0;
    size_t worst = 0, bad_guard = 0;
    for (size_t i = 0; i < b->n; i++) {
        double c = b->c[i], g = h[i];
        /* an infinity matches only the same infinity (a row of a flash lse with no visible key is -inf) */
        double err = (isinf(c) || isinf(g)) ? (c == g ? 0.0 : INFINITY) : fabs(g - c);
        if (rel && err > 0.0 && !isinf(err)) err /= fabs(c) > 0 ? fabs(c) : 1.0;
        if (!(err <= maxerr)) { /* NaN counts as worst */
            maxerr = isnan(err) ? INFINITY : err;
            worst = i;
            if (isnan(err)) break;
        }
    }
    for (size_t i = 0; i < GUARD; i++) {
        uint32_t u;
        memcpy(&u, &h[b->n + i], sizeof u);
        if (u != GUARD_BITS) bad_guard++;
    }
    char why[256] = "";
    int ok = maxerr <= tol && bad_guard == 0;
    if (bad_guard)
        snprintf(why, sizeof why, "(%zu guard floats after the buffer were overwritten)", bad_guard);
    else if (!ok)
        snprintf(why, sizeof why, "(worst at [%zu]: cuda %.9g vs cpu %.9g)", worst, (double)h[worst],
                 (double)b->c[worst]);
    report(P, ok, op, shape, maxerr, tol, why[0] ? why : NULL);
    free(h);
}

/* ---- bf16 buffers ---------------------------------------------------------------------------------------------- */

#define GUARD_BF16 0x7fbdu /* a NaN no kernel produces */

static int bbuf_upload(parity *P, bbuf *b, size_t n, const forge_bf16 *host) {
    size_t total = n + GUARD;
    forge_bf16 *tmp = malloc(total * sizeof *tmp);
    if (!tmp) return 0;
    b->n = n;
    int ok = P->cpu->mem_alloc(P->cpu, (void **)&b->c, (n ? n : 1) * sizeof(forge_bf16)) == FORGE_OK &&
             P->gpu->mem_alloc(P->gpu, (void **)&b->g, total * sizeof(forge_bf16)) == FORGE_OK;
    if (ok) {
        for (size_t i = 0; i < n; i++) tmp[i] = host[i];
        for (size_t i = 0; i < GUARD; i++) tmp[n + i] = GUARD_BF16;
        if (n) memcpy(b->c, host, n * sizeof(forge_bf16));
        ok = P->gpu->copy_to_device(P->gpu, b->g, tmp, total * sizeof(forge_bf16)) == FORGE_OK;
    }
    free(tmp);
    if (!ok) {
        printf("FAIL alloc/upload of %zu bf16: %s\n", n, forge_error_message());
        P->failed++;
        bbuf_free(P, b);
    }
    return ok;
}

int bbuf_rand(parity *P, bbuf *b, size_t n, float lo, float hi) {
    forge_bf16 *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) return 0;
    for (size_t i = 0; i < n; i++) h[i] = forge_bf16_from_f32(rand_range(P, lo, hi));
    int ok = bbuf_upload(P, b, n, h);
    free(h);
    return ok;
}

int bbuf_poison(parity *P, bbuf *b, size_t n) {
    forge_bf16 *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) return 0;
    for (size_t i = 0; i < n; i++) h[i] = 0xffffu;
    int ok = bbuf_upload(P, b, n, h);
    free(h);
    return ok;
}

void bbuf_free(parity *P, bbuf *b) {
    if (b->c) P->cpu->mem_free(P->cpu, b->c);
    if (b->g) P->gpu->mem_free(P->gpu, b->g);
    memset(b, 0, sizeof *b);
}

/* one bf16 unit in the last place at c: 2^(e - 7) for |c| in [2^e, 2^(e+1)) */
static double bf16_ulp(double c) {
    int e;
    frexp(fabs(c), &e); /* |c| = m 2^e, m in [0.5, 1): the leading power is 2^(e-1) */
    return ldexp(1.0, e - 1 - 7);
}

void check_bf16(parity *P, const char *op, const char *shape, const bbuf *b, double tol, int ulps) {
    check_bf16_tol(P, op, shape, b, tol, ulps, 0.0);
}

void check_bf16_tol(parity *P, const char *op, const char *shape, const bbuf *b, double tol, int ulps,
                    double ulps_abs) {
    size_t total = b->n + GUARD;
    forge_bf16 *h = malloc(total * sizeof *h);
    if (!h || P->gpu->copy_to_host(P->gpu, h, b->g, total * sizeof(forge_bf16)) != FORGE_OK) {
        report(P, 0, op, shape, INFINITY, tol, "(copy_to_host failed)");
        free(h);
        return;
    }
    double maxerr = 0.0;
    size_t worst = 0, bad_guard = 0;
    for (size_t i = 0; i < b->n; i++) {
        double c = forge_bf16_to_f32(b->c[i]), g = forge_bf16_to_f32(h[i]), err;
        /* an absolute tolerance compares zeros like any value; in ulps, a zero reference takes an exact zero or a
         * difference within the absolute allowance */
        const double over = ulps ? fabs(g - c) - ulps_abs : fabs(g - c); /* the part beyond the allowance */
        if (isinf(c) || isinf(g)) err = (c == g) ? 0.0 : INFINITY;
        else if (!ulps) err = fabs(g - c);
        else if (c == 0.0) err = (c == g || over <= 0.0) ? 0.0 : INFINITY;
        else err = over <= 0.0 ? 0.0 : over / bf16_ulp(c); /* NaN stays NaN */
        if (!(err <= maxerr)) {
            maxerr = isnan(err) ? INFINITY : err;
            worst = i;
            if (isnan(err)) break;
        }
    }
    for (size_t i = 0; i < GUARD; i++) bad_guard += h[b->n + i] != GUARD_BF16;
    char why[256] = "";
    int ok = maxerr <= tol && bad_guard == 0;
    if (bad_guard) snprintf(why, sizeof why, "(%zu guard bf16 after the buffer were overwritten)", bad_guard);
    else if (!ok)
        snprintf(why, sizeof why, "(worst at [%zu]: cuda %.9g vs cpu %.9g%s)", worst,
                 (double)forge_bf16_to_f32(h[worst]), (double)forge_bf16_to_f32(b->c[worst]), ulps ? ", in ulps" : "");
    report(P, ok, op, shape, maxerr, tol, why[0] ? why : NULL);
    free(h);
}
