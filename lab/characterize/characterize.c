/*
 * characterize.c: the driver of `forge-lab bench characterize` (characterize.h).
 *
 * The decisions a reader would otherwise get wrong:
 * - Two harness runs, two suites. "characterize" holds the library GEMM cells
 *   (char_gemm.h: cuBLAS fp32-pedantic / tf32 / bf16 / fp16 and cuBLASLt fp8
 *   at 2048^3, 4096^3, 8192^3, one group per size) and the matrix-unit cells
 *   (char_mma.h), at `reps` repetitions. "characterize_clock" holds bf16
 *   cuBLAS at 256^3, 512^3 and 4096^3 at >= 300 repetitions: the harness has
 *   one repetition count per run, and the clock-state question needs more
 *   samples at small sizes than throughput needs at large ones.
 * - Acceleration bars are fixed here, before any measurement: each precision
 *   names the next wider one as its counterpart (fp8 -> bf16 -> tf32 -> fp32,
 *   fp16 -> tf32), so "accelerated" (>= 1.5x, harness.c) answers "is it worth
 *   dropping to this format" one step at a time. cublas_fp32 is the group's
 *   baseline, so a "win" (>= 1.10x) means faster than fp32 pedantic.
 * - The per-rep samples are needed here too (the clock findings), but the
 *   harness keeps them private, so the timer the harness gets is a thin wrapper
 *   of the CUDA-event timer that records every elapsed time; the last
 *   res.reps of a cell's recordings are its timed reps (the check run and the
 *   warm-up come first).
 */
#include "characterize.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "../../src/bench/harness.h"
#include "../../src/bench/harness_cuda.h"
#include "../gemm_fp8/bench_opts.h"
#include "char_gemm.h"
#include "char_mma.h"

#define CHAR_DEVICE 0
#define CHAR_SEED 1337
#define CHAR_DEFAULT_REPS 100
#define CHAR_CLOCK_REPS 300
#define CHAR_WARMUP 10
#define CHAR_MAX_LOG 64
#define CHAR_MAX_FINDINGS 256
/* Clock-state thresholds, fixed in advance: a p90/p10 spread above
 * CHAR_SPREAD_WIDE means the median alone does not describe the cell; a
 * balanced 2-cluster split (each cluster >= 10% of reps) that removes at
 * least CHAR_BIMODAL_CUT of the variance with cluster means CHAR_BIMODAL_GAP
 * apart is called bimodal (one normal distribution gives a 64% cut, a uniform
 * one 75%, so 85% needs two separated modes). */
#define CHAR_SPREAD_WIDE 1.10
#define CHAR_BIMODAL_CUT 0.85
#define CHAR_BIMODAL_GAP 0.03

static const int char_sizes[] = {2048, 4096, 8192};
static const int char_clock_sizes[] = {256, 512, 4096};
#define CHAR_N_SIZES ((int)(sizeof char_sizes / sizeof char_sizes[0]))
#define CHAR_N_CLOCK ((int)(sizeof char_clock_sizes / sizeof char_clock_sizes[0]))

/* per kind: baseline of its group, and the counterpart of the acceleration bar */
static const int char_kind_baseline[FORGE_CHAR_GEMM_KIND_COUNT] = {1, 0, 0, 0, 0, 0};
static const char *const char_kind_counterpart[FORGE_CHAR_GEMM_KIND_COUNT] = {
    NULL, "cublas_fp32", "cublas_tf32", "cublas_tf32", "cublas_bf16", "cublas_bf16"};

/* ---- recording timer ----------------------------------------------------------- */

typedef struct {
    forge_bench_timer inner;
    double *buf;
    int n, cap;
} char_rec_timer;

static forge_status char_rec_start(void *ctx) {
    char_rec_timer *t = ctx;
    return t->inner.start(t->inner.ctx);
}

static forge_status char_rec_stop(void *ctx, double *elapsed_ms) {
    char_rec_timer *t = ctx;
    FORGE_TRY(t->inner.stop(t->inner.ctx, elapsed_ms));
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 1024;
        double *b = realloc(t->buf, (size_t)cap * sizeof *b);
        if (!b) return forge_error(FORGE_ERR_OOM, "characterize: out of memory recording %d samples", cap);
        t->buf = b;
        t->cap = cap;
    }
    t->buf[t->n++] = *elapsed_ms;
    return FORGE_OK;
}

/* ---- what the driver keeps per cell -------------------------------------------- */

typedef struct {
    char name[48], group[48], suite[24];
    forge_char_gemm_kind kind;
    int n, is_baseline;
    const char *counterpart;
    forge_precision precision;
    forge_cell_result res;
    double *samples; /* res.reps timed samples in rep order, NULL unless ok */
} char_entry;

typedef struct {
    cudaStream_t stream;
    int stream_ok;
    forge_char_gemm *g;
    forge_bench_timer cuda_timer;
    char_rec_timer rec;
    char_entry log[CHAR_MAX_LOG];
    int n_log;
    forge_char_finding findings[CHAR_MAX_FINDINGS];
    int n_findings;
    int mma_begin, mma_end; /* findings[mma_begin..mma_end) came from char_mma, which printed them */
    char dir[1024];
} char_state;

static void char_state_free(char_state *st) {
    for (int i = 0; i < st->n_log; i++) free(st->log[i].samples);
    free(st->rec.buf);
    forge_cuda_bench_timer_destroy(&st->cuda_timer);
    forge_char_gemm_free(st->g);
    if (st->stream_ok) cudaStreamDestroy(st->stream);
}

static forge_char_finding *char_finding_add(char_state *st) {
    if (st->n_findings >= CHAR_MAX_FINDINGS) return NULL;
    forge_char_finding *f = &st->findings[st->n_findings++];
    memset(f, 0, sizeof *f);
    f->expected = f->got = NAN;
    f->kept_bits = -1;
    return f;
}

static const char *char_cell_status(forge_cell_status s) {
    return s == FORGE_CELL_OK        ? "ok"
           : s == FORGE_CELL_GARBAGE ? "garbage"
           : s == FORGE_CELL_SKIPPED ? "skipped"
                                     : "failed";
}

/* Prepares, checks and times one GEMM cell; keeps its result and samples. */
static forge_status char_run_cell(char_state *st, forge_harness *h, FILE *out, const char *suite,
                                  const char *group_prefix, forge_char_gemm_kind kind, int n, int is_baseline,
                                  const char *counterpart) {
    if (st->n_log >= CHAR_MAX_LOG) return forge_error(FORGE_ERR_ARG, "characterize: more than %d cells", CHAR_MAX_LOG);
    forge_harness_cell cell;
    FORGE_TRY(forge_char_gemm_prepare(st->g, kind, n, &cell));
    char_entry *e = &st->log[st->n_log];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", cell.name);
    snprintf(e->group, sizeof e->group, "%s %d^3", group_prefix, n);
    snprintf(e->suite, sizeof e->suite, "%s", suite);
    e->kind = kind;
    e->n = n;
    e->is_baseline = is_baseline;
    e->counterpart = counterpart;
    e->precision = cell.precision;
    cell.group = e->group;
    cell.is_baseline = is_baseline;
    cell.counterpart = counterpart;
    st->rec.n = 0;
    FORGE_TRY(forge_harness_run(h, &cell, &e->res));
    st->n_log++;
    if (e->res.status == FORGE_CELL_OK && e->res.reps > 0 && st->rec.n >= e->res.reps) {
        e->samples = malloc((size_t)e->res.reps * sizeof *e->samples);
        if (e->samples)
            memcpy(e->samples, st->rec.buf + (st->rec.n - e->res.reps), (size_t)e->res.reps * sizeof *e->samples);
    }
    if (out) {
        if (e->res.status == FORGE_CELL_OK)
            fprintf(out, "  %-22s %-16s ok       %8.2f TFLOP/s  median %.4g ms  rel_err %.2e  (%d input sets)\n",
                    e->name, e->group, e->res.tflops, e->res.median_ms, e->res.rel_err, cell.n_input_sets);
        else
            fprintf(out, "  %-22s %-16s %-8s rel_err %.2e (tolerance %.0e); see the table below\n", e->name,
                    e->group, char_cell_status(e->res.status), e->res.rel_err, e->res.tolerance);
        fflush(out);
    }
    return FORGE_OK;
}

static const char_entry *char_find(const char_state *st, const char *suite, const char *name, int n) {
    for (int i = 0; i < st->n_log; i++)
        if (st->log[i].n == n && strcmp(st->log[i].name, name) == 0 && strcmp(st->log[i].suite, suite) == 0)
            return &st->log[i];
    return NULL;
}

/* ---- the clock-state statistics ------------------------------------------------- */

static int char_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    double median, p10, p90, spread; /* spread = p90 / p10 */
    double cut;                      /* variance removed by the best balanced 2-cluster split */
    double lo_mean, hi_mean;         /* the two clusters' means */
    int lo_n, hi_n;
    double tail;                     /* max / median */
    int bimodal, wide;
} char_dist;

/* Percentiles by nearest rank on the sorted samples: x[round(q (n - 1))].
 * The 2-cluster split is exact 2-means in one dimension: the best cut of the
 * sorted samples, restricted to cuts leaving >= 10% of the reps on each side. */
static int char_distribution(const double *samples, int n, char_dist *d) {
    memset(d, 0, sizeof *d);
    if (n < 10) return 0;
    double *x = malloc((size_t)n * sizeof *x);
    double *s1 = malloc((size_t)(n + 1) * sizeof *s1), *s2 = malloc((size_t)(n + 1) * sizeof *s2);
    if (!x || !s1 || !s2) {
        free(x), free(s1), free(s2);
        return 0;
    }
    memcpy(x, samples, (size_t)n * sizeof *x);
    qsort(x, (size_t)n, sizeof *x, char_cmp_double);
    d->median = (n % 2) ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
    d->p10 = x[(int)floor(0.10 * (n - 1) + 0.5)];
    d->p90 = x[(int)floor(0.90 * (n - 1) + 0.5)];
    d->spread = d->p10 > 0 ? d->p90 / d->p10 : NAN;
    d->tail = d->median > 0 ? x[n - 1] / d->median : NAN;
    /* prefix sums of (x - median), centred for accuracy */
    s1[0] = s2[0] = 0;
    for (int i = 0; i < n; i++) {
        double v = x[i] - d->median;
        s1[i + 1] = s1[i] + v;
        s2[i + 1] = s2[i] + v * v;
    }
    double total = s2[n] - s1[n] * s1[n] / n;
    int min_side = (int)ceil(0.10 * n), best_i = -1;
    double best = INFINITY;
    for (int i = min_side; i <= n - min_side; i++) {
        double l1 = s1[i], l2 = s2[i], r1 = s1[n] - s1[i], r2 = s2[n] - s2[i];
        double within = (l2 - l1 * l1 / i) + (r2 - r1 * r1 / (n - i));
        if (within < best) best = within, best_i = i;
    }
    if (best_i > 0 && total > 0) {
        d->cut = 1.0 - best / total;
        d->lo_n = best_i;
        d->hi_n = n - best_i;
        d->lo_mean = d->median + s1[best_i] / best_i;
        d->hi_mean = d->median + (s1[n] - s1[best_i]) / (n - best_i);
        d->bimodal = d->cut >= CHAR_BIMODAL_CUT && d->lo_mean > 0 && d->hi_mean / d->lo_mean - 1 >= CHAR_BIMODAL_GAP;
    }
    d->wide = d->spread > CHAR_SPREAD_WIDE;
    free(x), free(s1), free(s2);
    return 1;
}

static void char_clock_findings(char_state *st) {
    for (int i = 0; i < st->n_log; i++) {
        const char_entry *e = &st->log[i];
        char_dist d;
        if (!e->samples || !char_distribution(e->samples, e->res.reps, &d)) continue;
        forge_char_finding *f = char_finding_add(st);
        if (!f) return;
        snprintf(f->name, sizeof f->name, "clock %.20s %d^3 (%.18s)", e->name, e->n, e->suite);
        f->expected = CHAR_SPREAD_WIDE;
        f->got = d.spread;
        if (d.bimodal) {
            const int in_lo = d.median <= (d.lo_mean + d.hi_mean) / 2;
            snprintf(f->note, sizeof f->note,
                     "bimodal: %.3g ms x%d / %.3g ms x%d (2-means cuts %.0f%% of variance); median sits in the %s "
                     "mode, hiding %.0f%% of reps %.2fx %s",
                     d.lo_mean, d.lo_n, d.hi_mean, d.hi_n, 100 * d.cut, in_lo ? "fast" : "slow",
                     100.0 * (in_lo ? d.hi_n : d.lo_n) / e->res.reps, d.hi_mean / d.lo_mean,
                     in_lo ? "slower" : "faster");
        } else if (d.wide) {
            snprintf(f->note, sizeof f->note,
                     "unimodal but wide: p10 %.3g p90 %.3g ms (2-means cut %.0f%%), max %.2fx median; quote the "
                     "CI and distribution, not the median alone",
                     d.p10, d.p90, 100 * d.cut, d.tail);
        } else {
            snprintf(f->note, sizeof f->note,
                     "tight: p10 %.4g p90 %.4g ms (2-means cut %.0f%%), max %.2fx median; the median represents "
                     "the cell",
                     d.p10, d.p90, 100 * d.cut, d.tail);
        }
    }
    /* small vs large in one line: the clock suite's smallest and largest sizes */
    const char_entry *small = char_find(st, "characterize_clock", "cublas_bf16", char_clock_sizes[0]);
    const char_entry *large = char_find(st, "characterize_clock", "cublas_bf16", char_clock_sizes[CHAR_N_CLOCK - 1]);
    char_dist ds, dl;
    if (small && large && small->samples && large->samples &&
        char_distribution(small->samples, small->res.reps, &ds) &&
        char_distribution(large->samples, large->res.reps, &dl)) {
        forge_char_finding *f = char_finding_add(st);
        if (!f) return;
        snprintf(f->name, sizeof f->name, "clock spread small vs large (bf16 %d^3 vs %d^3)", small->n, large->n);
        f->expected = dl.spread;
        f->got = ds.spread;
        snprintf(f->note, sizeof f->note,
                 "p90/p10 at %d^3 (got) vs %d^3 (expected); %s at the small size, %s at the large one",
                 small->n, large->n, ds.bimodal ? "bimodal" : ds.wide ? "wide" : "tight",
                 dl.bimodal ? "bimodal" : dl.wide ? "wide" : "tight");
    }
}

/* Acceleration ratios (counterpart median / cell median) and the fp8
 * fast-accumulation error, per size. */
static void char_gemm_findings(char_state *st) {
    for (int si = 0; si < CHAR_N_SIZES; si++) {
        const int n = char_sizes[si];
        for (int k = 0; k < FORGE_CHAR_GEMM_KIND_COUNT; k++) {
            const char *cp = char_kind_counterpart[k];
            if (!cp) continue;
            const char_entry *c = char_find(st, "characterize", forge_char_gemm_kind_name(k), n);
            const char_entry *b = char_find(st, "characterize", cp, n);
            if (!c || !b) continue;
            forge_char_finding *f = char_finding_add(st);
            if (!f) return;
            snprintf(f->name, sizeof f->name, "accel %.22s vs %.12s %d^3", c->name, b->name, n);
            f->expected = 1.5;
            if (c->res.status == FORGE_CELL_OK && b->res.status == FORGE_CELL_OK) {
                f->got = b->res.median_ms / c->res.median_ms;
                snprintf(f->note, sizeof f->note, "%s: %.1f vs %.1f TFLOP/s (bar 1.5x)",
                         f->got >= 1.5 ? "accelerated" : "not accelerated", c->res.tflops, b->res.tflops);
            } else {
                snprintf(f->note, sizeof f->note, "no verdict: %s is %s, %s is %s", c->name,
                         char_cell_status(c->res.status), b->name, char_cell_status(b->res.status));
            }
        }
        const char_entry *p = char_find(st, "characterize", "cublaslt_fp8", n);
        const char_entry *q = char_find(st, "characterize", "cublaslt_fp8_fastacc", n);
        if (p && q && !isnan(p->res.rel_err) && !isnan(q->res.rel_err)) {
            forge_char_finding *f = char_finding_add(st);
            if (!f) return;
            snprintf(f->name, sizeof f->name, "fp8 fast-accum error %d^3", n);
            f->expected = p->res.rel_err;
            f->got = q->res.rel_err;
            char speed[32] = "not timed (a cell did not pass)";
            if (p->res.status == FORGE_CELL_OK && q->res.status == FORGE_CELL_OK)
                snprintf(speed, sizeof speed, "%.2fx", p->res.median_ms / q->res.median_ms);
            snprintf(f->note, sizeof f->note,
                     "rel_err with CUBLASLT_MATMUL_DESC_FAST_ACCUM 1 (got) vs 0 (expected), same e4m3 inputs, fp32 "
                     "out: %.1fx; speed %s",
                     p->res.rel_err > 0 ? q->res.rel_err / p->res.rel_err : NAN, speed);
        }
    }
}

static void char_tf32_probe(char_state *st, FILE *out, int n) {
    double r[3];
    forge_status s = forge_char_gemm_probe_tf32(st->g, n, r);
    forge_char_finding *f = char_finding_add(st);
    if (!f) return;
    snprintf(f->name, sizeof f->name, "tf32 conversion of fp32 data (cuBLAS FAST_TF32, %d^3)", n);
    if (s != FORGE_OK) {
        snprintf(f->note, sizeof f->note, "probe failed: %.140s", forge_error_message());
        forge_error_clear();
        if (out) fprintf(out, "  tf32 probe failed: %s\n", f->note);
        return;
    }
    /* expected: error vs the round-to-nearest-even model; got: vs truncation */
    f->expected = r[1];
    f->got = r[2];
    const double best = r[1] < r[2] ? r[1] : r[2], other = r[1] < r[2] ? r[2] : r[1];
    const char *verdict = best * 10 <= other ? (r[1] < r[2] ? "round-to-nearest-even" : "truncation")
                                             : "neither model clearly";
    snprintf(f->note, sizeof f->note,
             "rel_err vs ref of RNE-tf32 inputs (expected) / truncated-tf32 (got) / exact fp32 %.2e: cuBLAS "
             "converts by %s",
             r[0], verdict);
}

/* ---- output --------------------------------------------------------------------- */


static forge_status char_write_findings(const char_state *st) {
    char path[1100];
    snprintf(path, sizeof path, "%s/characterize_findings.csv", st->dir);
    FILE *f = fopen(path, "w");
    if (!f) return forge_error(FORGE_ERR_IO, "characterize: cannot write %s: %s", path, strerror(errno));
    fputs("name,expected,got,kept_bits,note\n", f);
    for (int i = 0; i < st->n_findings; i++) {
        const forge_char_finding *x = &st->findings[i];
        char name[sizeof x->name + 1], note[sizeof x->note + 1];
        snprintf(name, sizeof name, "%.*s", (int)sizeof x->name, x->name); /* NUL-terminated copies */
        snprintf(note, sizeof note, "%.*s", (int)sizeof x->note, x->note);
        forge_csv_str(f, name), fputc(',', f);
        forge_csv_num(f, x->expected), fputc(',', f);
        forge_csv_num(f, x->got), fputc(',', f);
        fprintf(f, "%d,", x->kept_bits);
        forge_csv_str(f, note);
        fputc('\n', f);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return forge_error(FORGE_ERR_IO, "characterize: write to %s failed", path);
    return FORGE_OK;
}

static void char_print_findings(const char_state *st, FILE *out) {
    for (int i = 0; i < st->n_findings; i++) {
        if (i >= st->mma_begin && i < st->mma_end) continue; /* char_mma printed its own */
        const forge_char_finding *x = &st->findings[i];
        fprintf(out, "FINDING: %.64s: expected %.6g, got %.6g", x->name, x->expected, x->got);
        if (x->kept_bits >= 0) fprintf(out, ", kept_bits %d", x->kept_bits);
        fprintf(out, "; %.160s\n", x->note);
    }
}

static void char_print_summary(const char_state *st, FILE *out) {
    fprintf(out, "\n== characterize summary: median TFLOP/s; verdict against the counterpart at the 1.5x bar\n");
    fprintf(out, "%-22s %-16s %9s  %s\n", "cell", "group", "TFLOP/s", "verdict");
    for (int i = 0; i < st->n_log; i++) {
        const char_entry *e = &st->log[i];
        char verdict[160];
        if (e->res.status == FORGE_CELL_GARBAGE) {
            snprintf(verdict, sizeof verdict, "garbage (rel_err %.2e > %.0e)", e->res.rel_err, e->res.tolerance);
        } else if (e->res.status == FORGE_CELL_SKIPPED) {
            snprintf(verdict, sizeof verdict, "skipped (--only)");
        } else if (e->res.status != FORGE_CELL_OK) {
            snprintf(verdict, sizeof verdict, "failed (see the harness table)");
        } else if (strcmp(e->suite, "characterize_clock") == 0) {
            char_dist d;
            if (e->samples && char_distribution(e->samples, e->res.reps, &d))
                snprintf(verdict, sizeof verdict, "clock: p90/p10 %.2f, %s", d.spread,
                         d.bimodal ? "bimodal" : d.wide ? "wide" : "tight");
            else
                snprintf(verdict, sizeof verdict, "clock");
        } else if (e->is_baseline) {
            snprintf(verdict, sizeof verdict, "baseline");
        } else {
            const char_entry *b = e->counterpart ? char_find(st, e->suite, e->counterpart, e->n) : NULL;
            if (!b || b->res.status != FORGE_CELL_OK) {
                snprintf(verdict, sizeof verdict, "no-counterpart (%s)", e->counterpart ? e->counterpart : "-");
            } else {
                double r = b->res.median_ms / e->res.median_ms;
                snprintf(verdict, sizeof verdict, "%s %.2fx vs %s", r >= 1.5 ? "accelerated" : "not-accelerated", r,
                         b->name);
            }
        }
        char tf[24];
        if (e->res.status == FORGE_CELL_OK)
            snprintf(tf, sizeof tf, "%.1f", e->res.tflops);
        else
            snprintf(tf, sizeof tf, "-");
        fprintf(out, "%-22s %-16s %9s  %s\n", e->name, e->group, tf, verdict);
    }
    fflush(out);
}

/* ---- the run ----------------------------------------------------------------------- */

#define CHAR_CUDA(call)                                                                          \
    do {                                                                                         \
        cudaError_t char_e_ = (call);                                                            \
        if (char_e_ != cudaSuccess)                                                              \
            return forge_error(FORGE_ERR_DEVICE, "%s failed at %s:%d: %s", #call, __FILE__, \
                               __LINE__, cudaGetErrorString(char_e_));                           \
    } while (0)

static forge_status char_open(forge_harness **h, const char *suite, const char *results_root, const char *config,
                              const char *recipe, int reps, FILE *out, const forge_bench_timer *timer) {
    forge_provenance prov;
    forge_provenance_init_host(&prov);
    FORGE_TRY(forge_cuda_provenance(&prov, CHAR_DEVICE));
    forge_harness_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.suite = suite;
    cfg.results_root = results_root;
    cfg.config_text = config;
    cfg.input_recipe = recipe;
    cfg.seed = CHAR_SEED;
    cfg.reps = reps;
    cfg.warmup = CHAR_WARMUP;
    cfg.out = out;
    return forge_harness_open(h, &cfg, &prov, timer);
}

static forge_status char_close(forge_harness *h) {
    forge_status s = forge_cuda_provenance_end(forge_harness_provenance(h), CHAR_DEVICE);
    if (s != FORGE_OK) {
        forge_harness_free(h);
        return s;
    }
    return forge_harness_close(h);
}

/* The main suite: GEMM cells, the tf32 probe, the matrix-unit cells. */
static forge_status char_main_suite(char_state *st, FILE *out, int reps, const char *results_root,
                                    const forge_bench_timer *timer, forge_status *mma_status) {
    char config[2048], recipe[1024];
    snprintf(config, sizeof config,
             "suite characterize; gemm M=N=K in {2048, 4096, 8192}; layout TN (A (M,K) row-major, Bt (N,K) "
             "row-major), C (M,N) fp32; cells cublas_fp32 (cublasGemmEx CUBLAS_COMPUTE_32F_PEDANTIC, baseline), "
             "cublas_tf32 (CUBLAS_COMPUTE_32F_FAST_TF32, inputs pre-rounded to tf32) -> cublas_fp32, cublas_bf16 "
             "(COMPUTE_32F) -> cublas_tf32, cublas_fp16 (COMPUTE_32F) -> cublas_tf32, cublaslt_fp8 (cublasLtMatmul "
             "e4m3 TN, A/B scale pointers = 1.0f, FAST_ACCUM 0, best heuristic algo) -> cublas_bf16, "
             "cublaslt_fp8_fastacc (FAST_ACCUM 1) -> cublas_bf16; 64 MiB workspace; input sets ceil(2 L2 / input "
             "bytes) clamped to [2,16] when inputs + output fit in L2, else 1; reps %d, warmup %d, seed %d; tf32 "
             "conversion probe at 2048; then the matrix-unit cells of char_mma",
             reps, CHAR_WARMUP, CHAR_SEED);
    snprintf(recipe, sizeof recipe, "GEMM cells: %s. Matrix-unit cells: as lab/characterize/char_mma.cu generates them",
             forge_char_gemm_recipe());
    forge_harness *h = NULL;
    FORGE_TRY(char_open(&h, "characterize", results_root, config, recipe, reps, out, timer));
    snprintf(st->dir, sizeof st->dir, "%s", forge_harness_dir(h));
    if (out) fprintf(out, "== characterize: library GEMM cells (results in %s/)\n", st->dir);
    forge_status s = FORGE_OK;
    for (int si = 0; si < CHAR_N_SIZES && s == FORGE_OK; si++) {
        for (int k = 0; k < FORGE_CHAR_GEMM_KIND_COUNT && s == FORGE_OK; k++) {
            s = char_run_cell(st, h, out, "characterize", "gemm", (forge_char_gemm_kind)k, char_sizes[si],
                              char_kind_baseline[k], char_kind_counterpart[k]);
            if (s == FORGE_OK && si == 0 && k == FORGE_CHAR_GEMM_CUBLAS_FP32) char_tf32_probe(st, out, char_sizes[0]);
        }
    }
    if (s != FORGE_OK) { /* the harness itself failed: nothing trustworthy to write */
        forge_harness_free(h);
        return s;
    }
    /* the matrix-unit part: its failure is reported, but the GEMM cells are still written */
    if (out) fprintf(out, "== characterize: matrix-unit cells and accumulator probes (char_mma)\n");
    if (out) fflush(out);
    st->rec.n = 0;
    *mma_status = forge_char_mma_run_on_stream(h, out, (void *)st->stream);
    if (*mma_status != FORGE_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", forge_error_message());
        if (out) fprintf(out, "characterize: the matrix-unit part failed: %s\n", msg);
        forge_error(*mma_status, "matrix-unit part (forge_char_mma_run_on_stream): %s", msg);
    }
    int n_mma = forge_char_mma_findings(st->findings + st->n_findings, CHAR_MAX_FINDINGS - st->n_findings);
    if (n_mma > CHAR_MAX_FINDINGS - st->n_findings) n_mma = CHAR_MAX_FINDINGS - st->n_findings;
    st->mma_begin = st->n_findings;
    if (n_mma > 0) st->n_findings += n_mma;
    st->mma_end = st->n_findings;
    return char_close(h);
}

static forge_status char_clock_suite(char_state *st, FILE *out, int reps, const char *results_root,
                                     const forge_bench_timer *timer) {
    char config[512];
    snprintf(config, sizeof config,
             "suite characterize_clock; cublas_bf16 (cublasGemmEx bf16 in, fp32 out, COMPUTE_32F, layout TN) at "
             "M=N=K in {256, 512, 4096}, one group each, each run timed alone with CUDA events and a host "
             "synchronisation between runs; reps %d, warmup %d, seed %d",
             reps, CHAR_WARMUP, CHAR_SEED);
    forge_harness *h = NULL;
    FORGE_TRY(char_open(&h, "characterize_clock", results_root, config, forge_char_gemm_recipe(), reps, out, timer));
    if (out) fprintf(out, "== characterize_clock: per-rep distributions, small vs large (%d reps)\n", reps);
    forge_status s = FORGE_OK;
    for (int i = 0; i < CHAR_N_CLOCK && s == FORGE_OK; i++)
        s = char_run_cell(st, h, out, "characterize_clock", "clock", FORGE_CHAR_GEMM_CUBLAS_BF16, char_clock_sizes[i],
                          1, NULL);
    if (s != FORGE_OK) {
        forge_harness_free(h);
        return s;
    }
    return char_close(h);
}

static forge_status char_run(char_state *st, FILE *out, int reps, const char *results_root) {
    CHAR_CUDA(cudaSetDevice(CHAR_DEVICE));
    CHAR_CUDA(cudaStreamCreate(&st->stream)); /* blocking: ordered after legacy-stream copies */
    st->stream_ok = 1;
    FORGE_TRY(forge_char_gemm_create(&st->g, CHAR_DEVICE, (void *)st->stream, CHAR_SEED));
    FORGE_TRY(forge_cuda_bench_timer_create(&st->cuda_timer, (void *)st->stream));
    st->rec.inner = st->cuda_timer;
    forge_bench_timer timer = {&st->rec, char_rec_start, char_rec_stop};

    forge_status mma_status = FORGE_OK;
    FORGE_TRY(char_main_suite(st, out, reps, results_root, &timer, &mma_status));
    int clock_reps = reps > CHAR_CLOCK_REPS ? reps : CHAR_CLOCK_REPS;
    FORGE_TRY(char_clock_suite(st, out, clock_reps, results_root, &timer));

    char_gemm_findings(st);
    char_clock_findings(st);
    if (out) char_print_findings(st, out);
    FORGE_TRY(char_write_findings(st));
    if (out) {
        fprintf(out, "findings: %d in %s/characterize_findings.csv\n", st->n_findings, st->dir);
        char_print_summary(st, out);
    }
    if (mma_status != FORGE_OK)
        return forge_error(mma_status, "characterize: the matrix-unit part failed (GEMM results were written to %s/)",
                           st->dir);
    char bad[512] = "";
    int n_bad = 0;
    for (int i = 0; i < st->n_log; i++) {
        /* fp8 fast accumulation is lossy by design: over tolerance it is a
         * finding (its rel_err is in the CSVs), not a broken run */
        if (st->log[i].res.status == FORGE_CELL_OK ||
            (st->log[i].kind == FORGE_CHAR_GEMM_CUBLASLT_FP8_FASTACC && st->log[i].res.status == FORGE_CELL_GARBAGE))
            continue;
        size_t len = strlen(bad);
        if (len + 64 < sizeof bad)
            snprintf(bad + len, sizeof bad - len, "%s%s [%s] %s", n_bad ? ", " : "", st->log[i].name,
                     st->log[i].group, char_cell_status(st->log[i].res.status));
        n_bad++;
    }
    if (n_bad)
        return forge_error(FORGE_ERR_NUMERIC, "characterize: %d library GEMM cell(s) did not pass: %s (all results "
                           "were written to %s/)", n_bad, bad, st->dir);
    return FORGE_OK;
}

forge_status lab_characterize_run(FILE *out, int reps, const char *results_root) {
#ifdef FORGE_NO_CUBLAS
    (void)reps, (void)results_root, (void)out;
    return forge_error(FORGE_ERR_UNSUPPORTED,
                       "forge-lab bench characterize: skipped: its GEMM cells are cuBLAS/cuBLASLt and this forge was "
                       "built without cuBLAS (make cuda CUBLAS=0); rebuild with cuBLAS to characterize the GPU");
#endif
    if (reps <= 0) reps = CHAR_DEFAULT_REPS;
    char_state *st = calloc(1, sizeof *st);
    if (!st) return forge_error(FORGE_ERR_OOM, "characterize: out of memory");
    forge_status s = char_run(st, out, reps, results_root);
    char_state_free(st);
    return s;
}

int lab_bench_characterize(int argc, char **argv) {
    lab_fp8_bench_opts o;
    const char *usage = "[--reps N (default 100)] [--results DIR] [--order sequential|interleaved] [--only PATTERNS]";
    if (lab_fp8_bench_opts_parse(&o, argc, argv, "bench characterize", usage, NULL) != 0) return 2;
    return lab_fp8_bench_exit("bench characterize", lab_characterize_run(stdout, o.reps, o.results));
}
