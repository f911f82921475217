/*
 * harness.c: the benchmark harness (see harness.h for the contract).
 *
 * The decisions a reader would otherwise get wrong:
 * - A cell is checked BEFORE it is timed, and a garbage cell is never timed:
 *   it appears in the table and the CSV with status "garbage" and empty
 *   timing columns, and it takes part in no verdict.
 * - A cell whose own callbacks fail (poison/run/check return an error, e.g.
 *   FORGE_ERR_UNSUPPORTED) is recorded with status "failed" and its message;
 *   forge_harness_run still returns FORGE_OK so a suite carries on with its
 *   next cell. Only a failure of the harness itself (bad arguments, out of
 *   memory, the timer) is returned.
 * - Every statistic is re-derived by tools/reverify.py from the samples CSV,
 *   so each is computed by one exact, documented rule (floats are written
 *   with %.17g, which round-trips a double exactly):
 *     median      sort a copy ascending; odd n: x[n/2]; even n:
 *                 (x[n/2-1] + x[n/2]) / 2.
 *     bootstrap   PCG32 seeded forge_rng_seed(&rng, cfg->seed, 0x626f6f74)
 *                 (0x626f6f74 is "boot"); R = 10000 resamples; resample r draws n
 *                 indices i_j = forge_rng_below(&rng, n) (j = 0..n-1, one
 *                 stream shared by all resamples in order) and takes the
 *                 median of x[i_0..i_{n-1}] (x = the samples in rep order).
 *                 The R medians are sorted ascending; the CI is
 *                 [m[floor(0.025 * R)], m[floor(0.975 * R)]] = [m[250], m[9750]].
 *     TFLOP/s     flops / (median_ms / 1000) / 1e12; GB/s bytes / (median_ms
 *                 / 1000) / 1e9 (0 when flops or bytes is 0).
 *     garbage     !(rel_err <= tolerance) (so NaN is garbage) or an output
 *                 element left unwritten.
 *     verdicts    per group, the strongest baseline is the passing baseline
 *                 cell with the smallest median (first in run order on a
 *                 tie); ratio = speedup(cell, best) (throughput ratio when
 *                 both state FLOPs, else best_median / cell_median); a non-baseline
 *                 passing cell "win"s at ratio >= 1.10, else "no-win";
 *                 baselines are "baseline", garbage cells "garbage", failed
 *                 cells "failed", passing cells of a group with no passing
 *                 baseline "no-baseline" (ratio empty).
 *     acceleration a passing cell naming a counterpart (looked up by name in
 *                 counterpart_group, default its own group) that also passed
 *                 gets accel_ratio = speedup(cell, counterpart); if the
 *                 cell's format is narrower (bits: fp32 32, tf32 19, bf16 16,
 *                 fp16 16, fp8 8) its accel_verdict is "accelerated" at
 *                 >= 1.5 else "not-accelerated", otherwise empty. A named
 *                 counterpart that is missing or did not pass gives
 *                 "no-counterpart"; no counterpart named gives empty fields.
 *     order       SEQUENTIAL: a cell's warm-up and reps run back to back,
 *                 then the next cell's. INTERLEAVED (forge_harness_flush):
 *                 the queued cells' warm-ups in queue order, then round r =
 *                 0..reps-1 runs every cell once in a Fisher-Yates order drawn
 *                 from PCG32(seed + flush number, stream "ordr"); rep r of
 *                 every cell is its run in round r. The CSV's timing column
 *                 says which, batch which flush (0: sequential).
 *     paired      a cell timed in the same flush as its group's best baseline:
 *                 q_r = speedup of round r alone (throughput ratio when both
 *                 state FLOPs, else baseline ms / cell ms); paired_ratio =
 *                 median(q), its CI the bootstrap above applied to q. Empty
 *                 otherwise. It answers "is this cell faster than the baseline
 *                 under the same clocks", which two medians of a drifting
 *                 device do not.
 */
#include "harness.h"

#include "../base/fs.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../base/rng.h"

/* ---- precision table --------------------------------------------------------- */

static const char *const precision_names[FORGE_PREC_COUNT] = {"fp32", "tf32", "bf16", "fp16", "fp8"};
/* Relative Frobenius error allowed per input precision: a few units of the
 * format's rounding (2^-24 fp32, 2^-11 tf32/fp16, 2^-8 bf16, 2^-4 e4m3)
 * grown by sqrt(K)-style accumulation at the sizes we run. */
static const double precision_tolerances[FORGE_PREC_COUNT] = {1e-5, 1e-3, 1e-2, 5e-3, 5e-2};
static const int precision_bits[FORGE_PREC_COUNT] = {32, 19, 16, 16, 8};
_Static_assert(FORGE_PREC_COUNT == 5, "precision tables must list every forge_precision");

const char *forge_precision_name(forge_precision p) {
    return (p >= 0 && p < FORGE_PREC_COUNT) ? precision_names[p] : "unknown";
}

double forge_precision_tolerance(forge_precision p) {
    return (p >= 0 && p < FORGE_PREC_COUNT) ? precision_tolerances[p] : 0.0;
}

/* ---- statistics -------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median of x[0..n), sorting x in place */
static double median_inplace(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return (n % 2) ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

double forge_harness_median(const double *samples, int n) {
    if (n <= 0) return NAN;
    double *x = malloc((size_t)n * sizeof *x);
    if (!x) return NAN;
    memcpy(x, samples, (size_t)n * sizeof *x);
    double m = median_inplace(x, n);
    free(x);
    return m;
}

void forge_harness_bootstrap_ci(const double *samples, int n, uint64_t seed, int resamples, double *lo,
                                double *hi) {
    *lo = *hi = NAN;
    if (n <= 0 || resamples <= 0) return;
    double *draw = malloc((size_t)n * sizeof *draw);
    double *med = malloc((size_t)resamples * sizeof *med);
    if (!draw || !med) {
        free(draw);
        free(med);
        return;
    }
    forge_rng rng;
    forge_rng_seed(&rng, seed, 0x626f6f74 /* "boot" */);
    for (int r = 0; r < resamples; r++) {
        for (int j = 0; j < n; j++) draw[j] = samples[forge_rng_below(&rng, (uint64_t)n)];
        med[r] = median_inplace(draw, n);
    }
    qsort(med, (size_t)resamples, sizeof *med, cmp_double);
    int ilo = (int)floor(0.025 * resamples), ihi = (int)floor(0.975 * resamples);
    if (ihi > resamples - 1) ihi = resamples - 1;
    *lo = med[ilo];
    *hi = med[ihi];
    free(draw);
    free(med);
}

#define HARNESS_RESAMPLES 10000
#define HARNESS_ORDER_STREAM 0x6f726472 /* "ordr": the interleaved rounds' shuffles */
#define HARNESS_WIN_RATIO 1.10
#define HARNESS_ACCEL_RATIO 1.5

/* ---- the harness object ------------------------------------------------------ */

typedef struct {
    char *name, *group, *counterpart, *counterpart_group;
    int is_baseline;
    forge_precision precision;
    double flops, bytes;
    forge_cell_result res;
    double *samples; /* res.reps of them, rep order; NULL unless OK */
    int fully_written; /* the check found no poison left (0 if never checked) */
    char note[256];  /* why a cell failed or is garbage */
    int batch;       /* INTERLEAVED: which flush timed it (1, 2, ...); 0: timed sequentially */
    /* filled by close */
    double ratio, accel_ratio; /* NAN when not applicable */
    double paired_ratio, paired_lo, paired_hi; /* per-round ratio vs the best baseline: NAN unless both interleaved
                                                * in one flush */
    const char *verdict, *accel_verdict;
} harness_cell;

/* A checked cell waiting for forge_harness_flush (INTERLEAVED order). */
typedef struct {
    int cell; /* index into forge_harness.cells (the array may move; the index does not) */
    void *ctx;
    forge_status (*run)(void *ctx, int input_set);
    int n_sets;
} pending_cell;

struct forge_harness {
    char *suite, *results_root, *dir;
    FILE *out;
    uint64_t seed;
    int reps, warmup;
    char config_hash[17], recipe_hash[17];
    char date[32]; /* UTC, ISO 8601 */
    forge_provenance prov;
    forge_bench_timer timer;
    harness_cell *cells;
    int n_cells, cap_cells;
    forge_timing_order order; /* SEQUENTIAL or INTERLEAVED (resolved at open) */
    pending_cell *pending;
    int n_pending, cap_pending, batches;
};

static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static char *dup_str(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static forge_status check_provenance(const forge_provenance *p) {
    const char *missing = NULL;
    if (!p) missing = "provenance (NULL)";
    else if (!p->commit[0]) missing = "commit";
    else if (!p->gpu_name[0]) missing = "gpu_name";
    else if (p->sm_count <= 0) missing = "sm_count (expected > 0)";
    else if (!p->driver[0]) missing = "driver";
    else if (!p->toolkit[0]) missing = "toolkit";
    if (missing)
        return forge_error(FORGE_ERR_ARG,
                           "harness: provenance field %s is missing; a run without full provenance is "
                           "refused, not written",
                           missing);
    return FORGE_OK;
}

forge_provenance *forge_harness_provenance(forge_harness *h) { return h ? &h->prov : NULL; }

const char *forge_harness_dir(const forge_harness *h) { return h ? h->dir : NULL; }

void forge_harness_free(forge_harness *h) {
    if (!h) return;
    for (int i = 0; i < h->n_cells; i++) {
        harness_cell *c = &h->cells[i];
        free(c->name);
        free(c->group);
        free(c->counterpart);
        free(c->counterpart_group);
        free(c->samples);
    }
    free(h->cells);
    free(h->pending);
    free(h->suite);
    free(h->results_root);
    free(h->dir);
    free(h);
}

/* `forge bench --results DIR`: the root of every suite that does not name its own (set once, before the suites
 * run, by the CLI's one thread) */
static const char *harness_default_root;

void forge_harness_set_default_root(const char *dir) { harness_default_root = dir && dir[0] ? dir : NULL; }

/* `forge bench --order`, same rules as the root */
static forge_timing_order harness_default_order;

void forge_harness_set_default_order(forge_timing_order order) { harness_default_order = order; }

const char *forge_timing_order_name(forge_timing_order o) {
    return o == FORGE_ORDER_INTERLEAVED ? "interleaved" : "sequential";
}

forge_status forge_timing_order_parse(const char *s, forge_timing_order *out) {
    if (s && strcmp(s, "sequential") == 0) {
        *out = FORGE_ORDER_SEQUENTIAL;
        return FORGE_OK;
    }
    if (s && strcmp(s, "interleaved") == 0) {
        *out = FORGE_ORDER_INTERLEAVED;
        return FORGE_OK;
    }
    return forge_error(FORGE_ERR_ARG, "timing order \"%s\": expected sequential or interleaved", s ? s : "");
}

forge_timing_order forge_harness_order(const forge_harness *h) { return h ? h->order : FORGE_ORDER_SEQUENTIAL; }

forge_status forge_harness_open(forge_harness **out, const forge_harness_config *cfg,
                                const forge_provenance *prov, const forge_bench_timer *timer) {
    *out = NULL;
    if (!cfg || !cfg->suite || !cfg->suite[0])
        return forge_error(FORGE_ERR_ARG, "harness: config field suite is missing (expected a name like \"gemm\")");
    if (strpbrk(cfg->suite, "/ \t\n"))
        return forge_error(FORGE_ERR_ARG, "harness: config field suite \"%s\" must be one word (a file name)",
                           cfg->suite);
    if (!timer || !timer->start || !timer->stop)
        return forge_error(FORGE_ERR_ARG, "harness: timer with start and stop is required");
    FORGE_TRY(check_provenance(prov));
    forge_harness *h = calloc(1, sizeof *h);
    if (!h) return forge_error(FORGE_ERR_OOM, "harness: out of memory");
    h->prov = *prov;
    h->prov.commit[sizeof h->prov.commit - 1] = '\0';
    h->prov.gpu_name[sizeof h->prov.gpu_name - 1] = '\0';
    h->prov.driver[sizeof h->prov.driver - 1] = '\0';
    h->prov.toolkit[sizeof h->prov.toolkit - 1] = '\0';
    h->timer = *timer;
    h->out = cfg->out;
    h->seed = cfg->seed;
    h->reps = cfg->reps <= 0 ? 100 : cfg->reps < 30 ? 30 : cfg->reps;
    h->warmup = cfg->warmup <= 0 ? 10 : cfg->warmup;
    h->order = cfg->order == FORGE_ORDER_DEFAULT      ? FORGE_ORDER_SEQUENTIAL /* the suite never flushes */
               : harness_default_order != FORGE_ORDER_DEFAULT ? harness_default_order
                                                              : cfg->order;
    snprintf(h->config_hash, sizeof h->config_hash, "%016llx", (unsigned long long)fnv1a64(cfg->config_text));
    snprintf(h->recipe_hash, sizeof h->recipe_hash, "%016llx", (unsigned long long)fnv1a64(cfg->input_recipe));
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(h->date, sizeof h->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    char day[16];
    strftime(day, sizeof day, "%Y-%m-%d", &tm);
    h->suite = dup_str(cfg->suite);
    h->results_root = dup_str(cfg->results_root && cfg->results_root[0] ? cfg->results_root
                              : harness_default_root ? harness_default_root
                                                     : "results");
    size_t dn = strlen(h->results_root ? h->results_root : "") + strlen(h->prov.commit) + 40;
    h->dir = malloc(dn);
    if (!h->suite || !h->results_root || !h->dir) {
        forge_harness_free(h);
        return forge_error(FORGE_ERR_OOM, "harness: out of memory");
    }
    snprintf(h->dir, dn, "%s/%s_%s%s", h->results_root, day, h->prov.commit, h->prov.dirty ? "-dirty" : "");
    forge_status s = forge_mkdir_p(h->dir);
    if (s != FORGE_OK) {
        forge_harness_free(h);
        return s;
    }
    *out = h;
    return FORGE_OK;
}

/* ---- one cell ---------------------------------------------------------------- */

/* Doubles *arr's capacity *cap (first: first elements); 0 when out of memory (*arr and *cap unchanged). */
static int grow_array(void **arr, int *cap, int first, size_t elem) {
    const int n = *cap ? 2 * *cap : first;
    void *p = realloc(*arr, (size_t)n * elem);
    if (!p) return 0;
    *arr = p;
    *cap = n;
    return 1;
}

static harness_cell *find_cell(forge_harness *h, const char *name, const char *group) {
    for (int i = 0; i < h->n_cells; i++)
        if (strcmp(h->cells[i].name, name) == 0 && strcmp(h->cells[i].group, group) == 0) return &h->cells[i];
    return NULL;
}

static const char *harness_cell_filter;

void forge_harness_set_cell_filter(const char *patterns) { harness_cell_filter = patterns; }

int forge_harness_cell_selected(const char *name, const char *group) {
    const char *only = harness_cell_filter;
    if (!only || !only[0]) return 1;
    char key[512];
    snprintf(key, sizeof key, "%s@%s", name, group);
    for (const char *p = only; *p;) {
        const char *bar = strchr(p, '|');
        const size_t n = bar ? (size_t)(bar - p) : strlen(p);
        char pat[256];
        if (n > 0 && n < sizeof pat) {
            memcpy(pat, p, n);
            pat[n] = '\0';
            if (strstr(key, pat)) return 1;
        }
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

/* One timed run (warm-up: the time is dropped). */
static forge_status time_run(forge_harness *h, void *ctx, forge_status (*run)(void *, int), int set, double *ms) {
    forge_status s = h->timer.start(h->timer.ctx);
    if (s == FORGE_OK) s = run(ctx, set);
    if (s == FORGE_OK) s = h->timer.stop(h->timer.ctx, ms);
    return s;
}

/* One timed run kept as sample rep; a time that is negative or not finite is the timer's failure. */
static forge_status time_rep(forge_harness *h, void *ctx, forge_status (*run)(void *, int), int set, int rep,
                             double *ms) {
    forge_status s = time_run(h, ctx, run, set, ms);
    if (s == FORGE_OK && !(*ms >= 0 && isfinite(*ms)))
        s = forge_error(FORGE_ERR_DEVICE, "timer returned %g ms at rep %d", *ms, rep);
    return s;
}

/* A cell whose timing failed: recorded as failed with the message, no samples kept. */
static void fail_timing(harness_cell *hc, forge_status s) {
    snprintf(hc->note, sizeof hc->note, "%s while timing: %s", forge_status_name(s), forge_error_message());
    forge_error_clear();
    hc->res.status = FORGE_CELL_FAILED;
    free(hc->samples);
    hc->samples = NULL;
}

/* 3. statistics of a cell's h->reps samples */
static void finish_stats(const forge_harness *h, harness_cell *hc) {
    forge_cell_result *r = &hc->res;
    const int n = h->reps;
    r->status = FORGE_CELL_OK;
    r->reps = n;
    r->median_ms = forge_harness_median(hc->samples, n);
    forge_harness_bootstrap_ci(hc->samples, n, h->seed, HARNESS_RESAMPLES, &r->ci_lo_ms, &r->ci_hi_ms);
    r->min_ms = r->max_ms = hc->samples[0];
    for (int i = 1; i < n; i++) {
        if (hc->samples[i] < r->min_ms) r->min_ms = hc->samples[i];
        if (hc->samples[i] > r->max_ms) r->max_ms = hc->samples[i];
    }
    r->tflops = hc->flops > 0 ? hc->flops / (r->median_ms / 1000) / 1e12 : 0;
    r->gbps = hc->bytes > 0 ? hc->bytes / (r->median_ms / 1000) / 1e9 : 0;
}

forge_status forge_harness_run(forge_harness *h, const forge_harness_cell *cell, forge_cell_result *result) {
    if (!h || !cell) return forge_error(FORGE_ERR_ARG, "harness: run needs a harness and a cell");
    const char *missing = !cell->name || !cell->name[0] ? "name"
                          : !cell->group                ? "group"
                          : !cell->poison               ? "poison"
                          : !cell->run                  ? "run"
                          : !cell->check                ? "check"
                                                        : NULL;
    if (missing)
        return forge_error(FORGE_ERR_ARG, "harness: cell %s: field %s is missing", cell->name ? cell->name : "?",
                           missing);
    if (cell->precision < 0 || cell->precision >= FORGE_PREC_COUNT)
        return forge_error(FORGE_ERR_ARG, "harness: cell %s: precision %d is not a forge_precision", cell->name,
                           (int)cell->precision);
    if (cell->tolerance < 0)
        return forge_error(FORGE_ERR_ARG, "harness: cell %s: tolerance %g must be >= 0", cell->name,
                           cell->tolerance);
    if (!forge_harness_cell_selected(cell->name, cell->group)) {
        if (result) {
            memset(result, 0, sizeof *result);
            result->status = FORGE_CELL_SKIPPED;
            result->rel_err = result->median_ms = result->ci_lo_ms = result->ci_hi_ms = NAN;
            result->min_ms = result->max_ms = result->tflops = result->gbps = NAN;
        }
        return FORGE_OK; /* not selected by the cell filter (--only): not run, not recorded */
    }
    if (find_cell(h, cell->name, cell->group))
        return forge_error(FORGE_ERR_ARG, "harness: cell %s appears twice in group \"%s\"", cell->name,
                           cell->group);
    if (h->n_cells == h->cap_cells && !grow_array((void **)&h->cells, &h->cap_cells, 32, sizeof *h->cells))
        return forge_error(FORGE_ERR_OOM, "harness: out of memory for cell %s", cell->name);
    harness_cell *hc = &h->cells[h->n_cells];
    memset(hc, 0, sizeof *hc);
    hc->name = dup_str(cell->name);
    hc->group = dup_str(cell->group);
    hc->counterpart = dup_str(cell->counterpart);
    hc->counterpart_group = dup_str(cell->counterpart ? (cell->counterpart_group ? cell->counterpart_group : cell->group) : NULL);
    if (!hc->name || !hc->group || (cell->counterpart && (!hc->counterpart || !hc->counterpart_group))) {
        free(hc->name), free(hc->group), free(hc->counterpart), free(hc->counterpart_group);
        return forge_error(FORGE_ERR_OOM, "harness: out of memory for cell %s", cell->name);
    }
    h->n_cells++;
    hc->is_baseline = cell->is_baseline;
    hc->precision = cell->precision;
    hc->flops = cell->flops;
    hc->bytes = cell->bytes;
    forge_cell_result *r = &hc->res;
    r->status = FORGE_CELL_FAILED;
    r->rel_err = NAN;
    r->tolerance = cell->tolerance > 0 ? cell->tolerance : forge_precision_tolerance(cell->precision);
    r->median_ms = r->ci_lo_ms = r->ci_hi_ms = r->min_ms = r->max_ms = NAN;
    r->tflops = r->gbps = NAN;
    r->reps = 0;
    int n_sets = cell->n_input_sets > 0 ? cell->n_input_sets : 1;
    double ms = 0;

    /* 1. the gate: poison, one run on input set 0, synchronise, check */
    forge_status s = cell->poison(cell->ctx);
    if (s == FORGE_OK) s = h->timer.start(h->timer.ctx);
    if (s == FORGE_OK) s = cell->run(cell->ctx, 0);
    if (s == FORGE_OK) s = h->timer.stop(h->timer.ctx, &ms);
    double rel_err = NAN;
    int written = 0;
    if (s == FORGE_OK) s = cell->check(cell->ctx, &rel_err, &written);
    if (s != FORGE_OK) {
        snprintf(hc->note, sizeof hc->note, "%s: %s", forge_status_name(s), forge_error_message());
        forge_error_clear();
        if (result) *result = *r;
        return FORGE_OK;
    }
    r->rel_err = rel_err;
    hc->fully_written = written ? 1 : 0;
    if (!(rel_err <= r->tolerance) || !written) {
        r->status = FORGE_CELL_GARBAGE;
        snprintf(hc->note, sizeof hc->note, "%s%s%s", !(rel_err <= r->tolerance) ? "error over tolerance" : "",
                 (!(rel_err <= r->tolerance) && !written) ? "; " : "", written ? "" : "output not fully written");
        if (result) *result = *r;
        return FORGE_OK;
    }

    /* 2. INTERLEAVED: queue it for forge_harness_flush */
    if (h->order == FORGE_ORDER_INTERLEAVED) {
        if (h->n_pending == h->cap_pending &&
            !grow_array((void **)&h->pending, &h->cap_pending, 16, sizeof *h->pending))
            return forge_error(FORGE_ERR_OOM, "harness: out of memory queueing cell %s", cell->name);
        h->pending[h->n_pending++] = (pending_cell){(int)(hc - h->cells), cell->ctx, cell->run, n_sets};
        if (result) {
            *result = *r;
            result->status = FORGE_CELL_OK; /* passed its gate; the timings come with the flush */
        }
        return FORGE_OK;
    }

    /* 2. SEQUENTIAL: warm-up, then reps individually timed runs rotating over the input sets */
    for (int w = 0; w < h->warmup && s == FORGE_OK; w++) s = time_run(h, cell->ctx, cell->run, w % n_sets, &ms);
    hc->samples = malloc((size_t)h->reps * sizeof *hc->samples);
    if (!hc->samples) return forge_error(FORGE_ERR_OOM, "harness: out of memory for %d samples", h->reps);
    for (int rep = 0; rep < h->reps && s == FORGE_OK; rep++)
        s = time_rep(h, cell->ctx, cell->run, rep % n_sets, rep, &hc->samples[rep]);
    if (s != FORGE_OK) {
        fail_timing(hc, s);
        if (result) *result = *r;
        return FORGE_OK;
    }
    finish_stats(h, hc);
    if (result) *result = *r;
    return FORGE_OK;
}

forge_status forge_harness_flush(forge_harness *h, int *n_bad) {
    if (n_bad) *n_bad = 0;
    if (!h) return forge_error(FORGE_ERR_ARG, "harness: flush needs a harness");
    const int n = h->n_pending;
    if (n <= 0) return FORGE_OK;
    /* a cell that fails while being timed leaves the rounds (alive 0); the others go on */
    int *alive = malloc((size_t)n * sizeof *alive);
    if (!alive) return forge_error(FORGE_ERR_OOM, "harness: out of memory for %d queued cells", n);
    for (int j = 0; j < n; j++) alive[j] = 1;
    const int batch = ++h->batches;
    for (int j = 0; j < n; j++) {
        harness_cell *hc = &h->cells[h->pending[j].cell];
        hc->samples = malloc((size_t)h->reps * sizeof *hc->samples);
        if (!hc->samples) {
            for (int k = 0; k < j; k++) {
                free(h->cells[h->pending[k].cell].samples);
                h->cells[h->pending[k].cell].samples = NULL;
            }
            free(alive);
            return forge_error(FORGE_ERR_OOM, "harness: out of memory for %d x %d samples", n, h->reps);
        }
    }
    double ms = 0;
    for (int w = 0; w < h->warmup; w++)
        for (int j = 0; j < n; j++) {
            const pending_cell *p = &h->pending[j];
            if (!alive[j]) continue;
            const forge_status s = time_run(h, p->ctx, p->run, w % p->n_sets, &ms);
            if (s != FORGE_OK) fail_timing(&h->cells[p->cell], s), alive[j] = 0;
        }
    /* each round in its own random order (PCG32 from the seed, one stream per flush): a cell's time depends on
     * the clocks the kernel before it left, so no cell may always follow the same one (a fixed rotation would
     * keep every cell's predecessor fixed) */
    int *order = malloc((size_t)n * sizeof *order);
    if (!order) {
        free(alive);
        return forge_error(FORGE_ERR_OOM, "harness: out of memory for %d queued cells", n);
    }
    forge_rng rng;
    forge_rng_seed(&rng, h->seed + (uint64_t)batch, HARNESS_ORDER_STREAM);
    for (int rep = 0; rep < h->reps; rep++) {
        for (int i = 0; i < n; i++) order[i] = i;
        for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
            const int k = (int)forge_rng_below(&rng, (uint64_t)i + 1), t = order[i];
            order[i] = order[k];
            order[k] = t;
        }
        for (int i = 0; i < n; i++) {
            const int j = order[i];
            const pending_cell *p = &h->pending[j];
            if (!alive[j]) continue;
            harness_cell *hc = &h->cells[p->cell];
            const forge_status s = time_rep(h, p->ctx, p->run, rep % p->n_sets, rep, &hc->samples[rep]);
            if (s != FORGE_OK) fail_timing(hc, s), alive[j] = 0;
        }
    }
    free(order);
    int bad = 0;
    for (int j = 0; j < n; j++) {
        harness_cell *hc = &h->cells[h->pending[j].cell];
        if (alive[j]) {
            hc->batch = batch;
            finish_stats(h, hc);
        } else {
            bad++;
        }
    }
    free(alive);
    h->n_pending = 0;
    if (n_bad) *n_bad = bad;
    return FORGE_OK;
}

/* ---- verdicts ---------------------------------------------------------------- */

static const char *cell_status_name(forge_cell_status s) {
    return s == FORGE_CELL_OK ? "ok" : s == FORGE_CELL_GARBAGE ? "garbage" : "failed";
}


/* How much faster a is than b. Cells that state their FLOPs are compared by
 * throughput (they may do different work per run, like the matrix-unit
 * ceilings); otherwise by time. tools/reverify.py evaluates the same expression. */
static double speedup(const harness_cell *a, const harness_cell *b) {
    if (a->flops > 0 && b->flops > 0) return (a->flops / a->res.median_ms) / (b->flops / b->res.median_ms);
    return b->res.median_ms / a->res.median_ms;
}

/* The per-round ratio of c to b when one flush timed both (rep r of each from round r): median and bootstrap CI
 * of speedup per round, by the same rules as a cell's time. NAN otherwise. */
static void paired_ratio(const forge_harness *h, harness_cell *c, const harness_cell *b) {
    c->paired_ratio = c->paired_lo = c->paired_hi = NAN;
    if (c->batch == 0 || c->batch != b->batch || c->res.reps != b->res.reps || !c->samples || !b->samples) return;
    const int n = c->res.reps;
    double *q = malloc((size_t)n * sizeof *q);
    if (!q) return; /* left empty: the CSV shows it was not computed, and reverify expects it */
    const int by_flops = c->flops > 0 && b->flops > 0;
    for (int r = 0; r < n; r++)
        q[r] = by_flops ? (c->flops / c->samples[r]) / (b->flops / b->samples[r]) : b->samples[r] / c->samples[r];
    c->paired_ratio = forge_harness_median(q, n);
    forge_harness_bootstrap_ci(q, n, h->seed, HARNESS_RESAMPLES, &c->paired_lo, &c->paired_hi);
    free(q);
}

static void compute_verdicts(forge_harness *h) {
    for (int i = 0; i < h->n_cells; i++) {
        harness_cell *c = &h->cells[i];
        c->ratio = c->accel_ratio = NAN;
        c->paired_ratio = c->paired_lo = c->paired_hi = NAN;
        c->accel_verdict = "";
        if (c->res.status == FORGE_CELL_GARBAGE) {
            c->verdict = "garbage";
            continue;
        }
        if (c->res.status != FORGE_CELL_OK) {
            c->verdict = "failed";
            continue;
        }
        const harness_cell *best = NULL;
        for (int j = 0; j < h->n_cells; j++) {
            const harness_cell *b = &h->cells[j];
            if (b->is_baseline && b->res.status == FORGE_CELL_OK && strcmp(b->group, c->group) == 0 &&
                (!best || speedup(b, best) > 1.0))
                best = b;
        }
        if (!best) {
            c->verdict = "no-baseline";
        } else {
            c->ratio = speedup(c, best);
            paired_ratio(h, c, best);
            c->verdict = c->is_baseline ? "baseline" : c->ratio >= HARNESS_WIN_RATIO ? "win" : "no-win";
        }
        if (c->counterpart) {
            const harness_cell *cp = find_cell(h, c->counterpart, c->counterpart_group);
            if (!cp || cp->res.status != FORGE_CELL_OK) {
                c->accel_verdict = "no-counterpart";
            } else {
                c->accel_ratio = speedup(c, cp);
                if (precision_bits[c->precision] < precision_bits[cp->precision])
                    c->accel_verdict = c->accel_ratio >= HARNESS_ACCEL_RATIO ? "accelerated" : "not-accelerated";
            }
        }
    }
}

/* ---- output ------------------------------------------------------------------ */

static void print_table(forge_harness *h) {
    FILE *o = h->out;
    if (!o) return;
    int wn = 4, wg = 5;
    for (int i = 0; i < h->n_cells; i++) {
        int a = (int)strlen(h->cells[i].name), b = (int)strlen(h->cells[i].group);
        if (a > wn) wn = a;
        if (b > wg) wg = b;
    }
    if (wn > 40) wn = 40;
    if (wg > 48) wg = 48;
    int paired = 0;
    for (int i = 0; i < h->n_cells; i++) paired |= h->cells[i].batch > 0;
    fprintf(o, "== %s: %d cells, %d reps each after %d warm-up, %s; median [95%% bootstrap CI]; results in %s/\n",
            h->suite, h->n_cells, h->reps, h->warmup,
            h->order == FORGE_ORDER_INTERLEAVED ? "interleaved (one rep of each cell per round)" : "sequential",
            h->dir);
    if (paired)
        fprintf(o, "   paired: the median per-round ratio to the group's best baseline [95%% bootstrap CI]\n");
    fprintf(o, "%-*s  %-*s  %-4s  %-7s  %-19s  %-30s  %9s  %6s  %s%s\n", wn, "cell", wg, "group", "prec", "status",
            "rel_err / tol", "median ms [CI]", "TFLOP/s", "ratio", paired ? "paired [CI]            " : "",
            "verdict");
    for (int i = 0; i < h->n_cells; i++) {
        const harness_cell *c = &h->cells[i];
        char err[32], med[48], tf[16], ratio[16];
        snprintf(err, sizeof err, "%.2e / %.0e", c->res.rel_err, c->res.tolerance);
        if (c->res.status == FORGE_CELL_OK)
            snprintf(med, sizeof med, "%.4g [%.4g, %.4g]", c->res.median_ms, c->res.ci_lo_ms, c->res.ci_hi_ms);
        else
            snprintf(med, sizeof med, "-");
        if (c->res.status == FORGE_CELL_OK && c->flops > 0)
            snprintf(tf, sizeof tf, "%.4g", c->res.tflops);
        else
            snprintf(tf, sizeof tf, "-");
        if (!isnan(c->ratio))
            snprintf(ratio, sizeof ratio, "%.2fx", c->ratio);
        else
            snprintf(ratio, sizeof ratio, "-");
        char pr[48] = "";
        if (paired && !isnan(c->paired_ratio))
            snprintf(pr, sizeof pr, "%.3fx [%.3f, %.3f]", c->paired_ratio, c->paired_lo, c->paired_hi);
        else if (paired)
            snprintf(pr, sizeof pr, "-");
        fprintf(o, "%-*.*s  %-*.*s  %-4s  %-7s  %-19s  %-30s  %9s  %6s  %-*s%s%s", wn, wn, c->name, wg, wg, c->group,
                forge_precision_name(c->precision), cell_status_name(c->res.status), err, med, tf, ratio,
                paired ? 23 : 0, pr, paired ? "  " : "", c->verdict);
        if (c->counterpart) {
            if (!isnan(c->accel_ratio))
                fprintf(o, "  (%.2fx vs %s%s%s)", c->accel_ratio, c->counterpart, c->accel_verdict[0] ? ": " : "",
                        c->accel_verdict);
            else
                fprintf(o, "  (vs %s: %s)", c->counterpart, c->accel_verdict);
        }
        if (c->note[0]) fprintf(o, "  [%s]", c->note);
        fprintf(o, "\n");
    }
    fflush(o);
}

void forge_csv_str(FILE *f, const char *s) {
    if (!s) s = "";
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void forge_csv_num(FILE *f, double x) {
    if (!isnan(x)) fprintf(f, "%.17g", x);
}

static forge_status open_out(FILE **f, const forge_harness *h, const char *suffix, char *path, size_t n) {
    snprintf(path, n, "%s/%s%s", h->dir, h->suite, suffix);
    *f = fopen(path, "w");
    if (!*f) return forge_error(FORGE_ERR_IO, "harness: cannot write %s: %s", path, strerror(errno));
    return FORGE_OK;
}

static forge_status close_out(FILE *f, const char *path) {
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return forge_error(FORGE_ERR_IO, "harness: write to %s failed", path);
    return FORGE_OK;
}

static forge_status write_results_csv(forge_harness *h) {
    char path[1200];
    FILE *f;
    FORGE_TRY(open_out(&f, h, ".csv", path, sizeof path));
    const forge_provenance *p = &h->prov;
    fputs("suite,cell,group,precision,is_baseline,counterpart,counterpart_group,status,rel_err,tolerance,reps,"
          "median_ms,ci_lo_ms,ci_hi_ms,min_ms,max_ms,flops,bytes,tflops,gbps,ratio_vs_best_baseline,verdict,"
          "accel_ratio,accel_verdict,timing,batch,paired_ratio,paired_ci_lo,paired_ci_hi,commit,dirty,config_hash,recipe_hash,seed,gpu,sm_count,driver,toolkit,"
          "clock_sm_start,clock_sm_end,clock_mem_start,clock_mem_end,date,fully_written,note\n",
          f);
    for (int i = 0; i < h->n_cells; i++) {
        const harness_cell *c = &h->cells[i];
        const forge_cell_result *r = &c->res;
        forge_csv_str(f, h->suite), fputc(',', f);
        forge_csv_str(f, c->name), fputc(',', f);
        forge_csv_str(f, c->group), fputc(',', f);
        forge_csv_str(f, forge_precision_name(c->precision)), fputc(',', f);
        fprintf(f, "%d,", c->is_baseline ? 1 : 0);
        forge_csv_str(f, c->counterpart), fputc(',', f);
        forge_csv_str(f, c->counterpart_group), fputc(',', f);
        forge_csv_str(f, cell_status_name(r->status)), fputc(',', f);
        forge_csv_num(f, r->rel_err), fputc(',', f);
        forge_csv_num(f, r->tolerance), fputc(',', f);
        fprintf(f, "%d,", r->reps);
        forge_csv_num(f, r->median_ms), fputc(',', f);
        forge_csv_num(f, r->ci_lo_ms), fputc(',', f);
        forge_csv_num(f, r->ci_hi_ms), fputc(',', f);
        forge_csv_num(f, r->min_ms), fputc(',', f);
        forge_csv_num(f, r->max_ms), fputc(',', f);
        forge_csv_num(f, c->flops), fputc(',', f);
        forge_csv_num(f, c->bytes), fputc(',', f);
        forge_csv_num(f, r->tflops), fputc(',', f);
        forge_csv_num(f, r->gbps), fputc(',', f);
        forge_csv_num(f, c->ratio), fputc(',', f);
        forge_csv_str(f, c->verdict), fputc(',', f);
        forge_csv_num(f, c->accel_ratio), fputc(',', f);
        forge_csv_str(f, c->accel_verdict), fputc(',', f);
        forge_csv_str(f, c->batch > 0 ? "interleaved" : "sequential"), fputc(',', f);
        fprintf(f, "%d,", c->batch);
        forge_csv_num(f, c->paired_ratio), fputc(',', f);
        forge_csv_num(f, c->paired_lo), fputc(',', f);
        forge_csv_num(f, c->paired_hi), fputc(',', f);
        forge_csv_str(f, p->commit), fputc(',', f);
        fprintf(f, "%d,", p->dirty ? 1 : 0);
        fprintf(f, "%s,%s,%llu,", h->config_hash, h->recipe_hash, (unsigned long long)h->seed);
        forge_csv_str(f, p->gpu_name), fputc(',', f);
        fprintf(f, "%d,", p->sm_count);
        forge_csv_str(f, p->driver), fputc(',', f);
        forge_csv_str(f, p->toolkit), fputc(',', f);
        fprintf(f, "%d,%d,%d,%d,%s,", p->clock_sm_mhz_start, p->clock_sm_mhz_end, p->clock_mem_mhz_start,
                p->clock_mem_mhz_end, h->date);
        fprintf(f, "%d,", c->fully_written);
        forge_csv_str(f, c->note);
        fputc('\n', f);
    }
    return close_out(f, path);
}

static forge_status write_samples_csv(forge_harness *h) {
    char path[1200];
    FILE *f;
    FORGE_TRY(open_out(&f, h, "_samples.csv", path, sizeof path));
    fputs("suite,cell,group,rep,ms\n", f);
    for (int i = 0; i < h->n_cells; i++) {
        const harness_cell *c = &h->cells[i];
        if (!c->samples) continue;
        for (int k = 0; k < c->res.reps; k++) {
            forge_csv_str(f, h->suite), fputc(',', f);
            forge_csv_str(f, c->name), fputc(',', f);
            forge_csv_str(f, c->group);
            fprintf(f, ",%d,%.17g\n", k, c->samples[k]);
        }
    }
    return close_out(f, path);
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static forge_status write_provenance_json(forge_harness *h) {
    char path[1200];
    FILE *f;
    FORGE_TRY(open_out(&f, h, "_provenance.json", path, sizeof path));
    const forge_provenance *p = &h->prov;
    fprintf(f, "{\n  \"suite\": ");
    json_str(f, h->suite);
    fprintf(f, ",\n  \"commit\": ");
    json_str(f, p->commit);
    fprintf(f, ",\n  \"dirty\": %d,\n  \"config_hash\": \"%s\",\n  \"recipe_hash\": \"%s\",\n  \"seed\": %llu,\n",
            p->dirty ? 1 : 0, h->config_hash, h->recipe_hash, (unsigned long long)h->seed);
    fprintf(f, "  \"gpu\": ");
    json_str(f, p->gpu_name);
    fprintf(f, ",\n  \"sm_count\": %d,\n  \"driver\": ", p->sm_count);
    json_str(f, p->driver);
    fprintf(f, ",\n  \"toolkit\": ");
    json_str(f, p->toolkit);
    fprintf(f,
            ",\n  \"clock_sm_start\": %d,\n  \"clock_sm_end\": %d,\n  \"clock_mem_start\": %d,\n"
            "  \"clock_mem_end\": %d,\n  \"date\": \"%s\",\n  \"reps\": %d,\n  \"warmup\": %d,\n"
            "  \"bootstrap_resamples\": %d,\n  \"timing_order\": \"%s\"",
            p->clock_sm_mhz_start, p->clock_sm_mhz_end, p->clock_mem_mhz_start, p->clock_mem_mhz_end, h->date,
            h->reps, h->warmup, HARNESS_RESAMPLES, forge_timing_order_name(h->order));
    fprintf(f, "\n}\n");
    return close_out(f, path);
}

forge_status forge_harness_close(forge_harness *h) {
    if (!h) return FORGE_OK;
    /* cells still queued: their contexts may be freed by now, so they are not timed but recorded as failed */
    const int unflushed = h->n_pending;
    for (int j = 0; j < unflushed; j++) {
        harness_cell *hc = &h->cells[h->pending[j].cell];
        hc->res.status = FORGE_CELL_FAILED;
        snprintf(hc->note, sizeof hc->note, "queued for interleaved timing but never flushed (suite bug)");
    }
    h->n_pending = 0;
    /* provenance is checked again: a suite may have edited it (end clocks) */
    forge_status s = check_provenance(&h->prov);
    if (s == FORGE_OK) {
        compute_verdicts(h);
        print_table(h);
        s = write_results_csv(h);
    }
    if (s == FORGE_OK) s = write_samples_csv(h);
    if (s == FORGE_OK) s = write_provenance_json(h);
    forge_harness_free(h);
    if (s == FORGE_OK && unflushed > 0)
        s = forge_error(FORGE_ERR_ARG, "harness: %d cell(s) were queued for interleaved timing and never flushed",
                        unflushed);
    return s;
}

/* ---- CPU timer --------------------------------------------------------------- */

/* The CPU timer keeps its start time per thread: a harness times one run at a
 * time, so start/stop pairs on one thread never interleave. */
static _Thread_local struct timespec cpu_timer_t0;

static forge_status cpu_timer_start(void *ctx) {
    (void)ctx;
    clock_gettime(CLOCK_MONOTONIC, &cpu_timer_t0);
    return FORGE_OK;
}

static forge_status cpu_timer_stop(void *ctx, double *elapsed_ms) {
    (void)ctx;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *elapsed_ms = (double)(t1.tv_sec - cpu_timer_t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - cpu_timer_t0.tv_nsec) * 1e-6;
    return FORGE_OK;
}

forge_bench_timer forge_cpu_bench_timer(void) {
    forge_bench_timer t = {NULL, cpu_timer_start, cpu_timer_stop};
    return t;
}

/* ---- CPU marks --------------------------------------------------------------- */

static forge_status cpu_marks_record(void *ctx, int slot) {
    clock_gettime(CLOCK_MONOTONIC, (struct timespec *)ctx + slot);
    return FORGE_OK;
}

static forge_status cpu_marks_elapsed(void *ctx, int a, int b, double *ms) {
    const struct timespec *t = ctx;
    *ms = (double)(t[b].tv_sec - t[a].tv_sec) * 1e3 + (double)(t[b].tv_nsec - t[a].tv_nsec) * 1e-6;
    return FORGE_OK;
}

forge_status forge_cpu_bench_marks_create(forge_bench_marks *out, int capacity) {
    memset(out, 0, sizeof *out);
    if (capacity < 1) return forge_error(FORGE_ERR_ARG, "forge_cpu_bench_marks_create: capacity %d < 1", capacity);
    out->ctx = calloc((size_t)capacity, sizeof(struct timespec));
    if (!out->ctx) return forge_error(FORGE_ERR_OOM, "forge_cpu_bench_marks_create: %d stamps", capacity);
    out->capacity = capacity;
    out->record = cpu_marks_record;
    out->elapsed = cpu_marks_elapsed;
    out->destroy = free;
    return FORGE_OK;
}
