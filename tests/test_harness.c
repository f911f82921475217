/*
 * test_harness.c: the benchmark harness (src/bench/harness.h).
 *
 * Cells here are synthetic: their "kernel" does nothing and a fake timer
 * returns scripted times, so every median, ratio and verdict is known in
 * advance. The last case runs tools/reverify.py on the CSVs the harness wrote
 * and requires it to agree (and to catch a tampered verdict).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "../src/backend/backend.h"
#include "../src/bench/attention_bench.h"
#include "../src/bench/bench_train.h"
#include "../src/bench/coprocess.h"
#include "../src/bench/harness.h"
#include "../src/bench/op_profile.h"

/* ---- fake timer: stop() returns base_ms * (1 + jitter[k % 5] * spread) ---- */

typedef struct {
    double base_ms, spread;
    long stops;
} fake_timer;

static forge_status fake_start(void *ctx) {
    (void)ctx;
    return FORGE_OK;
}

static forge_status fake_stop(void *ctx, double *ms) {
    static const double jitter[5] = {0.0, 0.02, -0.01, 0.05, 0.01};
    fake_timer *t = ctx;
    *ms = t->base_ms * (1 + jitter[t->stops % 5] * t->spread);
    t->stops++;
    return FORGE_OK;
}

/* ---- synthetic cell ---- */

typedef struct {
    double rel_err;
    int written;
    int poisoned, runs, max_set;
} fake_cell;

static forge_status fc_poison(void *ctx) {
    ((fake_cell *)ctx)->poisoned++;
    return FORGE_OK;
}

static forge_status fc_run(void *ctx, int set) {
    fake_cell *c = ctx;
    c->runs++;
    if (set > c->max_set) c->max_set = set;
    return FORGE_OK;
}

static forge_status fc_check(void *ctx, double *rel_err, int *written) {
    fake_cell *c = ctx;
    *rel_err = c->rel_err;
    *written = c->written;
    return FORGE_OK;
}

static forge_status fc_unsupported(void *ctx, int set) {
    (void)ctx, (void)set;
    return forge_error(FORGE_ERR_UNSUPPORTED, "fake: this shape is not supported");
}

static forge_provenance good_prov(void) {
    forge_provenance p;
    forge_provenance_init_host(&p);
    return p;
}

/* Opens a harness with complete host provenance; dir receives its results folder. NULL (a failed check) if the
 * harness refused. */
static forge_harness *open_with_good_prov(const forge_harness_config *cfg, const forge_bench_timer *timer,
                                          char *dir, size_t dir_size) {
    forge_provenance p = good_prov();
    forge_harness *h = NULL;
    CHECK_OK(forge_harness_open(&h, cfg, &p, timer));
    if (h) snprintf(dir, dir_size, "%s", forge_harness_dir(h));
    return h;
}

/* Runs one synthetic cell whose timed runs take ~ms each (spread 0 = exactly). */
static forge_cell_result run_cell(forge_harness *h, fake_timer *t, const char *name, const char *group,
                                  int baseline, forge_precision prec, double ms, double spread, double rel_err,
                                  int written, const char *counterpart, const char *counterpart_group) {
    fake_cell c = {rel_err, written, 0, 0, 0};
    forge_harness_cell cell = {
        .name = name, .group = group, .is_baseline = baseline, .counterpart = counterpart,
        .counterpart_group = counterpart_group, .precision = prec, .flops = 2e9, .bytes = 1e6,
        .n_input_sets = 3, .ctx = &c, .poison = fc_poison, .run = fc_run, .check = fc_check};
    t->base_ms = ms;
    t->spread = spread;
    forge_cell_result r;
    memset(&r, 0, sizeof r);
    CHECK_OK(forge_harness_run(h, &cell, &r));
    CHECK(c.poisoned == 1);
    return r;
}

/* Minimal RFC 4180 reader: splits one record into at most max fields. */
static int csv_split(const char *line, char fields[][128], int max) {
    int n = 0;
    const char *p = line;
    for (;;) {
        char *out = fields[n < max ? n : max - 1];
        size_t k = 0;
        if (*p == '"') {
            p++;
            while (*p && !(*p == '"' && p[1] != '"')) {
                if (*p == '"') p++;
                if (k < 127) out[k++] = *p;
                p++;
            }
            if (*p == '"') p++;
        } else {
            while (*p && *p != ',' && *p != '\n' && *p != '\r') {
                if (k < 127) out[k++] = *p;
                p++;
            }
        }
        out[k] = '\0';
        n++;
        if (*p != ',') break;
        p++;
    }
    return n;
}

static int csv_col(const char *header, const char *name) {
    char f[64][128];
    int n = csv_split(header, f, 64);
    for (int i = 0; i < n; i++)
        if (strcmp(f[i], name) == 0) return i;
    return -1;
}

/* Opens dir/name and reads its header line into header; NULL (after a failed check) if either fails. */
static FILE *open_csv(const char *dir, const char *name, char *header, size_t header_size) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (f && fgets(header, (int)header_size, f) == NULL) {
        CHECK_MSG(0, "%s has no header line", path);
        fclose(f);
        f = NULL;
    }
    return f;
}

/* ---- a drifting device: every timed run is slower than the last by `drift` (a GPU heating up), and costs what
 * the cell that ran last costs ---- */

typedef struct {
    double drift, next_ms;
    long stops;
} drift_timer;

typedef struct {
    drift_timer *t;
    double cost_ms;
    int runs;
} drift_cell;

static forge_status drift_stop(void *ctx, double *ms) {
    drift_timer *t = ctx;
    *ms = t->next_ms * (1 + t->drift * (double)t->stops++);
    return FORGE_OK;
}

static forge_status dc_run(void *ctx, int set) {
    drift_cell *c = ctx;
    (void)set;
    c->t->next_ms = c->cost_ms;
    c->runs++;
    return FORGE_OK;
}

static forge_status dc_noop(void *ctx) {
    (void)ctx;
    return FORGE_OK;
}

static forge_status dc_check(void *ctx, double *rel_err, int *written) {
    (void)ctx;
    *rel_err = 0;
    *written = 1;
    return FORGE_OK;
}

/* Runs cells a (baseline, 1.00 ms) and b (0.98 ms: 1.0204x faster) on a device drifting 0.2% per run, in the given
 * order; returns b's ratio and (interleaved) its paired ratio and CI; dir receives the results folder. */
static void drift_pair(forge_timing_order order, double *ratio, double *paired, double *lo, double *hi, char *dir,
                       size_t dir_size) {
    drift_timer dt = {0.002, 0, 0};
    forge_bench_timer timer = {&dt, fake_start, drift_stop};
    forge_harness_config cfg = {.suite = "drift", .results_root = test_tmpdir(), .config_text = "c",
                                .input_recipe = "r", .seed = 7, .reps = 30, .warmup = 2, .order = order};
    *ratio = *paired = *lo = *hi = NAN;
    forge_harness *h = open_with_good_prov(&cfg, &timer, dir, dir_size);
    if (!h) return;
    CHECK(forge_harness_order(h) == order);
    drift_cell a = {&dt, 1.00, 0}, b = {&dt, 0.98, 0};
    forge_harness_cell ca = {.name = "a", .group = "g", .is_baseline = 1, .precision = FORGE_PREC_FP32,
                             .flops = 1e9, .n_input_sets = 1, .ctx = &a, .poison = dc_noop, .run = dc_run,
                             .check = dc_check};
    forge_harness_cell cb = ca;
    cb.name = "b";
    cb.is_baseline = 0;
    cb.ctx = &b;
    forge_cell_result r;
    CHECK_OK(forge_harness_run(h, &ca, &r));
    CHECK(r.status == FORGE_CELL_OK);
    CHECK_OK(forge_harness_run(h, &cb, &r));
    CHECK(r.status == FORGE_CELL_OK);
    if (order == FORGE_ORDER_INTERLEAVED) {
        CHECK_MSG(isnan(r.median_ms) && b.runs == 1, "queued: checked only (%d runs)", b.runs);
    }
    int bad = -1;
    CHECK_OK(forge_harness_flush(h, &bad));
    CHECK(bad == 0);
    CHECK_MSG(a.runs == 1 + 2 + 30 && b.runs == 1 + 2 + 30, "runs %d / %d, expected 33", a.runs, b.runs);
    CHECK_OK(forge_harness_close(h));
    char header[4096], line[4096];
    FILE *f = open_csv(dir, "drift.csv", header, sizeof header);
    if (!f) return;
    const int ccell = csv_col(header, "cell"), crat = csv_col(header, "ratio_vs_best_baseline"),
              ctim = csv_col(header, "timing"), cpr = csv_col(header, "paired_ratio"),
              clo = csv_col(header, "paired_ci_lo"), chi = csv_col(header, "paired_ci_hi");
    CHECK(ccell >= 0 && crat >= 0 && ctim >= 0 && cpr >= 0 && clo >= 0 && chi >= 0);
    while (fgets(line, sizeof line, f)) {
        char fl[64][128];
        csv_split(line, fl, 64);
        CHECK(strcmp(fl[ctim], order == FORGE_ORDER_INTERLEAVED ? "interleaved" : "sequential") == 0);
        if (strcmp(fl[ccell], "b") != 0) continue;
        *ratio = atof(fl[crat]);
        if (fl[cpr][0]) *paired = atof(fl[cpr]), *lo = atof(fl[clo]), *hi = atof(fl[chi]);
    }
    fclose(f);
}

static int have_python3(void) {
    return access("tools/reverify.py", R_OK) == 0 && system("python3 -c 'import csv' >/dev/null 2>&1") == 0;
}

void suite_harness(void) {
    TEST_CASE("median: odd, even, unsorted input left unmodified");
    {
        double a[5] = {5, 1, 4, 2, 3};
        CHECK(forge_harness_median(a, 5) == 3);
        CHECK(a[0] == 5 && a[4] == 3);
        double b[4] = {4, 1, 3, 2};
        CHECK(forge_harness_median(b, 4) == 2.5);
        double c[1] = {7};
        CHECK(forge_harness_median(c, 1) == 7);
    }

    TEST_CASE("bootstrap CI: contains the median, deterministic for the seed");
    {
        double x[41];
        for (int i = 0; i < 41; i++) x[i] = 1.0 + 0.01 * ((i * 17) % 41); /* 1.00 .. 1.40, shuffled */
        double med = forge_harness_median(x, 41);
        CHECK_NEAR(med, 1.20, 1e-12);
        double lo, hi, lo2, hi2, lo3, hi3;
        forge_harness_bootstrap_ci(x, 41, 42, 10000, &lo, &hi);
        forge_harness_bootstrap_ci(x, 41, 42, 10000, &lo2, &hi2);
        forge_harness_bootstrap_ci(x, 41, 7, 10000, &lo3, &hi3);
        CHECK(lo <= med && med <= hi);
        CHECK(lo < hi);
        CHECK(lo >= 1.0 && hi <= 1.4);
        CHECK(lo == lo2 && hi == hi2);
        CHECK(lo3 <= med && med <= hi3);
        /* the median of 41 uniform-ish values: CI about +-0.08 wide, not the whole range */
        CHECK(hi - lo < 0.25);
        double k[30];
        for (int i = 0; i < 30; i++) k[i] = 2.5;
        forge_harness_bootstrap_ci(k, 30, 1, 10000, &lo, &hi);
        CHECK(lo == 2.5 && hi == 2.5);
    }

    TEST_CASE("precision table: names and tolerances");
    {
        CHECK(strcmp(forge_precision_name(FORGE_PREC_BF16), "bf16") == 0);
        CHECK(forge_precision_tolerance(FORGE_PREC_FP32) == 1e-5);
        CHECK(forge_precision_tolerance(FORGE_PREC_FP8) == 5e-2);
    }

    TEST_CASE("provenance with a missing field is refused and nothing is written");
    {
        const char *root = test_tmpdir();
        fake_timer ft = {1, 0, 0};
        forge_bench_timer timer = {&ft, fake_start, fake_stop};
        forge_harness_config cfg = {.suite = "unit", .results_root = root, .config_text = "c",
                                    .input_recipe = "r", .seed = 1};
        const char *fields[] = {"commit", "gpu_name", "sm_count", "driver", "toolkit"};
        for (int f = 0; f < 5; f++) {
            forge_provenance p = good_prov();
            if (f == 0) p.commit[0] = '\0';
            if (f == 1) p.gpu_name[0] = '\0';
            if (f == 2) p.sm_count = 0;
            if (f == 3) p.driver[0] = '\0';
            if (f == 4) p.toolkit[0] = '\0';
            forge_harness *h = NULL;
            forge_status s = forge_harness_open(&h, &cfg, &p, &timer);
            CHECK_MSG(s == FORGE_ERR_ARG, "missing %s: status %d", fields[f], (int)s);
            CHECK(h == NULL);
            CHECK_MSG(strstr(forge_error_message(), fields[f]) != NULL, "message \"%s\" does not name %s",
                      forge_error_message(), fields[f]);
        }
        char cmd[700];
        snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", root);
        CHECK_MSG(system(cmd) == 0, "a refused run created files under %s", root);
        forge_provenance p = good_prov();
        CHECK(p.commit[0] && p.gpu_name[0] && p.sm_count > 0 && strcmp(p.driver, "none") == 0 && p.toolkit[0]);
        CHECK(p.clock_sm_mhz_start == -1 && p.clock_mem_mhz_end == -1);
    }

    TEST_CASE("full run: gate, reps, verdicts, CSVs, re-verifier");
    {
        const char *root = test_tmpdir();
        fake_timer ft = {1, 0, 0};
        forge_bench_timer timer = {&ft, fake_start, fake_stop};
        forge_harness_config cfg = {.suite = "unit", .results_root = root, .config_text = "shapes: 1",
                                    .input_recipe = "uniform(-1,1) pcg32", .seed = 1234, .reps = 5,
                                    .warmup = 2, .out = NULL};
        char dir[1024];
        forge_harness *h = open_with_good_prov(&cfg, &timer, dir, sizeof dir);
        if (!h) return;

        /* group g: two baselines (best = 8 ms), a garbage "baseline" that would
         * be fastest, a win at exactly 1.10x, a no-win just below, an
         * unwritten output, and a failing cell */
        forge_cell_result r;
        r = run_cell(h, &ft, "base_slow", "g", 1, FORGE_PREC_FP32, 10.0, 1, 1e-7, 1, NULL, NULL);
        CHECK(r.status == FORGE_CELL_OK);
        CHECK_MSG(r.reps == 30, "reps %d, expected 5 raised to 30", r.reps);
        CHECK(r.ci_lo_ms <= r.median_ms && r.median_ms <= r.ci_hi_ms);
        CHECK(r.min_ms <= r.ci_lo_ms && r.ci_hi_ms <= r.max_ms);
        CHECK(r.min_ms == 10.0 * 0.99 && r.max_ms == 10.0 * 1.05);
        r = run_cell(h, &ft, "base_fast", "g", 1, FORGE_PREC_FP32, 8.8, 0, 1e-7, 1, NULL, NULL);
        CHECK(r.median_ms == 8.8);
        CHECK_NEAR(r.tflops, 2e9 / 8.8e-3 / 1e12, 1e-12);
        r = run_cell(h, &ft, "base_garbage", "g", 1, FORGE_PREC_FP32, 0.1, 0, 2e-5, 1, NULL, NULL);
        CHECK(r.status == FORGE_CELL_GARBAGE);
        CHECK(r.reps == 0 && isnan(r.median_ms));
        r = run_cell(h, &ft, "win_exact", "g", 0, FORGE_PREC_FP32, 8.0, 0, 1e-6, 1, NULL, NULL);
        CHECK(r.status == FORGE_CELL_OK);
        r = run_cell(h, &ft, "nowin", "g", 0, FORGE_PREC_FP32, 8.1, 0, 1e-6, 1, NULL, NULL);
        r = run_cell(h, &ft, "unwritten", "g", 0, FORGE_PREC_FP32, 1.0, 0, 0.0, 0, NULL, NULL);
        CHECK(r.status == FORGE_CELL_GARBAGE);
        r = run_cell(h, &ft, "nan_err", "g", 0, FORGE_PREC_FP32, 1.0, 0, NAN, 1, NULL, NULL);
        CHECK(r.status == FORGE_CELL_GARBAGE);
        {
            fake_cell c = {0, 1, 0, 0, 0};
            forge_harness_cell cell = {.name = "unsupported", .group = "g", .precision = FORGE_PREC_FP32,
                                       .n_input_sets = 1, .ctx = &c, .poison = fc_poison,
                                       .run = fc_unsupported, .check = fc_check};
            CHECK_OK(forge_harness_run(h, &cell, &r));
            CHECK(r.status == FORGE_CELL_FAILED);
        }
        /* a duplicate name in one group is refused */
        {
            fake_cell c = {0, 1, 0, 0, 0};
            forge_harness_cell cell = {.name = "nowin", .group = "g", .precision = FORGE_PREC_FP32,
                                       .n_input_sets = 1, .ctx = &c, .poison = fc_poison, .run = fc_run,
                                       .check = fc_check};
            CHECK(forge_harness_run(h, &cell, &r) == FORGE_ERR_ARG);
        }
        /* group g16: bf16 cells against the fp32 "win_exact" (8 ms) in group g,
         * no baseline here; one name needs CSV quoting */
        r = run_cell(h, &ft, "bf16_fast", "g16", 0, FORGE_PREC_BF16, 8.0 / 1.5, 0, 5e-3, 1, "win_exact", "g");
        CHECK(r.status == FORGE_CELL_OK); /* 5e-3 is inside bf16's 1e-2 */
        r = run_cell(h, &ft, "bf16_slow", "g16", 0, FORGE_PREC_BF16, 6.0, 0, 5e-3, 1, "win_exact", "g");
        r = run_cell(h, &ft, "odd, \"name\"", "g16", 0, FORGE_PREC_BF16, 6.0, 0, 5e-3, 1, "unwritten", "g");
        /* the rotation reaches every input set */
        {
            fake_cell c = {0, 1, 0, 0, 0};
            forge_harness_cell cell = {.name = "rot", .group = "g16", .precision = FORGE_PREC_FP32,
                                       .n_input_sets = 4, .ctx = &c, .poison = fc_poison, .run = fc_run,
                                       .check = fc_check};
            ft.base_ms = 3;
            ft.spread = 1;
            CHECK_OK(forge_harness_run(h, &cell, &r));
            CHECK(c.max_set == 3);
            CHECK_MSG(c.runs == 1 + 2 + 30, "runs %d: 1 check + 2 warm-up + 30 reps expected", c.runs);
        }
        CHECK_OK(forge_harness_close(h));

        /* read back the results CSV and check each verdict */
        char path[1200], line[4096], header[4096];
        FILE *f = open_csv(dir, "unit.csv", header, sizeof header);
        if (!f) return;
        int ccell = csv_col(header, "cell"), cverd = csv_col(header, "verdict"), cacc = csv_col(header, "accel_verdict");
        int cratio = csv_col(header, "ratio_vs_best_baseline"), cstat = csv_col(header, "status");
        CHECK(ccell == 1 && cverd >= 0 && cacc >= 0 && cratio >= 0 && cstat >= 0);
        CHECK(csv_col(header, "commit") >= 0 && csv_col(header, "config_hash") >= 0 &&
              csv_col(header, "clock_mem_end") >= 0 && csv_col(header, "median_ms") >= 0);
        char hf[64][128];
        int ncols = csv_split(header, hf, 64);
        static const struct {
            const char *cell, *verdict, *accel;
        } want[] = {
            {"base_slow", "baseline", ""},       {"base_fast", "baseline", ""},
            {"base_garbage", "garbage", ""},     {"win_exact", "win", ""},
            {"nowin", "no-win", ""},             {"unwritten", "garbage", ""},
            {"nan_err", "garbage", ""},          {"unsupported", "failed", ""},
            {"bf16_fast", "no-baseline", "accelerated"}, {"bf16_slow", "no-baseline", "not-accelerated"},
            {"odd, \"name\"", "no-baseline", "no-counterpart"}, {"rot", "no-baseline", ""},
        };
        int rows = 0;
        while (fgets(line, sizeof line, f)) {
            char fl[64][128];
            int n = csv_split(line, fl, 64);
            CHECK_MSG(n == ncols, "row %d has %d fields, header %d", rows, n, ncols);
            if (rows < (int)(sizeof want / sizeof want[0])) {
                CHECK_MSG(strcmp(fl[ccell], want[rows].cell) == 0, "row %d cell %s", rows, fl[ccell]);
                CHECK_MSG(strcmp(fl[cverd], want[rows].verdict) == 0, "%s: verdict %s, expected %s", fl[ccell],
                          fl[cverd], want[rows].verdict);
                CHECK_MSG(strcmp(fl[cacc], want[rows].accel) == 0, "%s: accel %s, expected %s", fl[ccell], fl[cacc],
                          want[rows].accel);
            }
            if (strcmp(fl[ccell], "win_exact") == 0) CHECK(strtod(fl[cratio], NULL) == 8.8 / 8.0);
            if (strcmp(fl[ccell], "base_slow") == 0) CHECK(strtod(fl[cratio], NULL) < 1.0);
            rows++;
        }
        fclose(f);
        CHECK_MSG(rows == 12, "%d rows, expected 12", rows);

        /* samples: 30 per passing cell (8 passing cells), none for garbage */
        snprintf(path, sizeof path, "%s/unit_samples.csv", dir);
        f = fopen(path, "r");
        CHECK_MSG(f != NULL, "cannot open %s", path);
        if (!f) return;
        CHECK(fgets(line, sizeof line, f) && strcmp(line, "suite,cell,group,rep,ms\n") == 0);
        int samples = 0, garbage_samples = 0;
        while (fgets(line, sizeof line, f)) {
            char fl[8][128];
            CHECK(csv_split(line, fl, 8) == 5);
            if (strcmp(fl[1], "base_garbage") == 0 || strcmp(fl[1], "unwritten") == 0) garbage_samples++;
            samples++;
        }
        fclose(f);
        CHECK_MSG(samples == 8 * 30, "%d samples, expected 240", samples);
        CHECK(garbage_samples == 0);
        snprintf(path, sizeof path, "%s/unit_provenance.json", dir);
        f = fopen(path, "r");
        CHECK_MSG(f != NULL, "no %s", path);
        if (f) fclose(f);

        /* the independent re-verifier agrees, and catches a tampered verdict */
        if (!have_python3()) {
            test_case_skip("python3 or tools/reverify.py (run from the repo root) not found: re-verifier not run");
        } else {
            char cmd[3000];
            snprintf(cmd, sizeof cmd, "python3 tools/reverify.py '%s' > '%s/reverify.log' 2>&1", dir, root);
            int rc = system(cmd);
            if (rc != 0) {
                snprintf(cmd, sizeof cmd, "cat '%s/reverify.log'", root);
                if (system(cmd) != 0) printf("(no log)\n");
            }
            CHECK_MSG(rc == 0, "tools/reverify.py %s failed (rc %d)", dir, rc);
            snprintf(cmd, sizeof cmd,
                     "cp -r '%s' '%s/tampered' && sed -i 's/,no-win,/,win,/' '%s/tampered/unit.csv' && "
                     "! python3 tools/reverify.py '%s/tampered' > /dev/null 2>&1",
                     dir, root, root, root);
            CHECK_MSG(system(cmd) == 0, "tools/reverify.py accepted a tampered verdict");
            /* its precision table is the harness's */
            snprintf(cmd, sizeof cmd,
                     "python3 tools/reverify.py --tolerances | grep -qx 'fp32 %.17g tf32 %.17g bf16 %.17g "
                     "fp16 %.17g fp8 %.17g'",
                     forge_precision_tolerance(FORGE_PREC_FP32), forge_precision_tolerance(FORGE_PREC_TF32),
                     forge_precision_tolerance(FORGE_PREC_BF16), forge_precision_tolerance(FORGE_PREC_FP16),
                     forge_precision_tolerance(FORGE_PREC_FP8));
            CHECK_MSG(system(cmd) == 0, "tools/reverify.py tolerance table differs from the harness's");
        }
    }

    TEST_CASE("cell filter (--only): only matching cells run and are recorded");
    {
        const char *root = test_tmpdir();
        fake_timer ft = {1, 0, 0};
        forge_bench_timer timer = {&ft, fake_start, fake_stop};
        forge_harness_config cfg = {.suite = "only", .results_root = root, .config_text = "c",
                                    .input_recipe = "r", .seed = 1, .reps = 30, .warmup = 1};
        char dir[1024];
        forge_harness *h = open_with_good_prov(&cfg, &timer, dir, sizeof dir);
        if (!h) return;
        forge_harness_set_cell_filter("nomatch|keep@g1|in g2");
        CHECK(forge_harness_cell_selected("keep", "g1") && forge_harness_cell_selected("x", "cells in g2"));
        CHECK(!forge_harness_cell_selected("keep", "g3") && !forge_harness_cell_selected("drop", "g1"));
        const char *names[4] = {"keep", "drop", "any", "keep"};
        const char *groups[4] = {"g1", "g1", "cells in g2", "g3"};
        const int want_runs[4] = {1 + 1 + 30, 0, 1 + 1 + 30, 0};
        for (int i = 0; i < 4; i++) {
            fake_cell c = {1e-7, 1, 0, 0, 0};
            forge_harness_cell cell = {.name = names[i], .group = groups[i], .is_baseline = 1,
                                       .precision = FORGE_PREC_FP32, .flops = 1e9, .n_input_sets = 1, .ctx = &c,
                                       .poison = fc_poison, .run = fc_run, .check = fc_check};
            forge_cell_result r;
            memset(&r, 0, sizeof r);
            CHECK_OK(forge_harness_run(h, &cell, &r));
            CHECK_MSG(c.runs == want_runs[i], "%s@%s: %d runs, expected %d", names[i], groups[i], c.runs,
                      want_runs[i]);
            CHECK(want_runs[i] ? r.status == FORGE_CELL_OK : (r.status == FORGE_CELL_SKIPPED && isnan(r.median_ms)));
            CHECK(!forge_cell_bad(&r));
        }
        forge_harness_set_cell_filter(NULL);
        CHECK(forge_harness_cell_selected("drop", "g1")); /* no filter: everything runs */
        CHECK_OK(forge_harness_close(h));
        char path[1200], line[4096];
        snprintf(path, sizeof path, "%s/only.csv", dir);
        FILE *f = fopen(path, "r");
        CHECK_MSG(f != NULL, "cannot open %s", path);
        if (f) {
            int rows = -1; /* the header */
            while (fgets(line, sizeof line, f)) rows++;
            fclose(f);
            CHECK_MSG(rows == 2, "%d rows in %s, expected the 2 selected cells", rows, path);
        }
    }

    TEST_CASE("interleaved order: a drifting device misleads sequential timing, not interleaved");
    {
        char dir[1024];
        double ratio, paired, lo, hi;
        drift_pair(FORGE_ORDER_SEQUENTIAL, &ratio, &paired, &lo, &hi, dir, sizeof dir);
        /* b ran after a, 33 runs further into the drift: it looks slower though it is 2% faster */
        CHECK_MSG(ratio < 1.0, "sequential ratio %.4f: the drift should have hidden b's 2%%", ratio);
        CHECK(isnan(paired));
        drift_pair(FORGE_ORDER_INTERLEAVED, &ratio, &paired, &lo, &hi, dir, sizeof dir);
        CHECK_MSG(fabs(ratio - 1.0 / 0.98) < 0.003, "interleaved ratio %.4f, expected ~%.4f", ratio, 1.0 / 0.98);
        CHECK_MSG(fabs(paired - 1.0 / 0.98) < 0.003 && lo <= paired && paired <= hi && lo > 1.0,
                  "paired %.4f [%.4f, %.4f], expected ~%.4f with a CI above 1", paired, lo, hi, 1.0 / 0.98);
        if (!have_python3()) {
            test_case_skip("python3 or tools/reverify.py not found: re-verifier not run");
        } else {
            char cmd[3000];
            snprintf(cmd, sizeof cmd, "python3 tools/reverify.py '%s' > /dev/null 2>&1", dir);
            CHECK_MSG(system(cmd) == 0, "tools/reverify.py rejected the interleaved run %s", dir);
            /* a paired ratio that does not follow from the samples is caught */
            snprintf(cmd, sizeof cmd,
                     "d='%s' && cp -r \"$d\" \"$d.t\" && python3 - \"$d.t/drift.csv\" <<'PY' && "
                     "! python3 tools/reverify.py \"$d.t\" > /dev/null 2>&1\n"
                     "import csv, sys\n"
                     "rows = list(csv.DictReader(open(sys.argv[1])))\n"
                     "for r in rows:\n"
                     "    if r['cell'] == 'b': r['paired_ratio'] = '1.5'\n"
                     "w = csv.DictWriter(open(sys.argv[1], 'w', newline=''), fieldnames=list(rows[0]))\n"
                     "w.writeheader(); w.writerows(rows)\n"
                     "PY",
                     dir);
            CHECK_MSG(system(cmd) == 0, "tools/reverify.py accepted a tampered paired_ratio");
        }
    }

    TEST_CASE("interleaved order: parse, CLI override, unflushed cells fail the close");
    {
        forge_timing_order o = FORGE_ORDER_DEFAULT;
        CHECK_OK(forge_timing_order_parse("interleaved", &o));
        CHECK(o == FORGE_ORDER_INTERLEAVED);
        CHECK_OK(forge_timing_order_parse("sequential", &o));
        CHECK(o == FORGE_ORDER_SEQUENTIAL);
        CHECK(forge_timing_order_parse("random", &o) == FORGE_ERR_ARG);
        CHECK(strstr(forge_error_message(), "expected sequential or interleaved") != NULL);
        forge_error_clear();
        drift_timer dt = {0, 0, 0};
        forge_bench_timer timer = {&dt, fake_start, drift_stop};
        forge_harness_config cfg = {.suite = "order", .results_root = test_tmpdir(), .config_text = "c",
                                    .input_recipe = "r", .seed = 1, .reps = 30, .warmup = 1,
                                    .order = FORGE_ORDER_INTERLEAVED};
        char dir[1024];
        /* the CLI's choice wins over a suite's, but never makes a suite that cannot flush interleaved */
        forge_harness_set_default_order(FORGE_ORDER_SEQUENTIAL);
        forge_harness *h = open_with_good_prov(&cfg, &timer, dir, sizeof dir);
        CHECK(h && forge_harness_order(h) == FORGE_ORDER_SEQUENTIAL);
        forge_harness_free(h);
        forge_harness_set_default_order(FORGE_ORDER_INTERLEAVED);
        cfg.order = FORGE_ORDER_DEFAULT;
        h = open_with_good_prov(&cfg, &timer, dir, sizeof dir);
        CHECK(h && forge_harness_order(h) == FORGE_ORDER_SEQUENTIAL);
        forge_harness_free(h);
        forge_harness_set_default_order(FORGE_ORDER_DEFAULT);
        cfg.order = FORGE_ORDER_INTERLEAVED;
        h = open_with_good_prov(&cfg, &timer, dir, sizeof dir);
        if (!h) return;
        CHECK(forge_harness_order(h) == FORGE_ORDER_INTERLEAVED);
        drift_cell a = {&dt, 1.0, 0};
        forge_harness_cell ca = {.name = "a", .group = "g", .is_baseline = 1, .precision = FORGE_PREC_FP32,
                                 .n_input_sets = 1, .ctx = &a, .poison = dc_noop, .run = dc_run, .check = dc_check};
        forge_cell_result r;
        CHECK_OK(forge_harness_run(h, &ca, &r));
        CHECK(forge_harness_close(h) == FORGE_ERR_ARG); /* a was queued and never flushed */
        CHECK(strstr(forge_error_message(), "never flushed") != NULL);
        forge_error_clear();
        CHECK_MSG(a.runs == 1, "an unflushed cell must not be run at close (%d runs)", a.runs);
    }

    TEST_CASE("CPU timer measures a monotonic, non-negative interval");
    {
        forge_bench_timer t = forge_cpu_bench_timer();
        double ms = -1;
        CHECK_OK(t.start(t.ctx));
        volatile double x = 0;
        for (int i = 0; i < 100000; i++) x += i;
        CHECK_OK(t.stop(t.ctx, &ms));
        CHECK(ms >= 0 && ms < 1000);
    }

    TEST_CASE("op profile: counts every call per op, restores the table, refuses a second profile and overflow");
    {
        forge_backend *be = NULL;
        CHECK_OK(forge_backend_create_cpu(&be, 1, 1));
        if (!be) return;
        const void *acc0 = (const void *)be->accumulate, *ms0 = (const void *)be->memset_zero;
        forge_bench_marks marks;
        CHECK_OK(forge_cpu_bench_marks_create(&marks, 8)); /* room for 4 calls */
        forge_op_profile *p = NULL, *q = NULL;
        CHECK_OK(forge_op_profile_attach(&p, be, &marks));
        CHECK(forge_op_profile_attach(&q, be, &marks) == FORGE_ERR_ARG && q == NULL);
        forge_error_clear();
        float a[5] = {1, 2, 3, 4, 5}, b[5] = {1, 1, 1, 1, 1}, g[5];
        CHECK_OK(be->accumulate(be, a, b, 5));
        CHECK_OK(be->accumulate(be, a, b, 5));
        CHECK_OK(be->gelu_forward(be, g, a, 5));
        CHECK_OK(be->memset_zero(be, b, sizeof b));
        CHECK(a[0] == 3 && a[4] == 7 && b[2] == 0); /* the wrapped ops did their work */
        forge_op_profile_result r;
        CHECK_OK(forge_op_profile_detach(p, &r));
        CHECK(r.calls[FORGE_OP_accumulate] == 2 && r.calls[FORGE_OP_gelu_forward] == 1 &&
              r.calls[FORGE_PROFILE_MEMSET] == 1 && r.n_calls == 4);
        CHECK(r.span_ms >= 0 && r.between_ms >= -1e-9 && r.ms[FORGE_OP_accumulate] >= 0);
        CHECK((const void *)be->accumulate == acc0 && (const void *)be->memset_zero == ms0);
        CHECK(strcmp(forge_op_profile_slot_name(FORGE_OP_gelu_forward), "gelu_forward") == 0);
        /* calls grouped by op and size: accumulate (n = 5) twice, gelu_forward once, memset (no sizes) once */
        CHECK(r.n_shapes == 3 && r.shapes[0].slot == FORGE_OP_accumulate && r.shapes[0].calls == 2 &&
              r.shapes[0].n_args == 1 && strcmp(r.shapes[0].names[0], "n") == 0 && r.shapes[0].values[0] == 5);
        CHECK(r.shapes[2].slot == FORGE_PROFILE_MEMSET && r.shapes[2].n_args == 0);
        forge_op_profile_result_free(&r);
        /* a fifth call does not fit: it still runs, and detach reports the overflow */
        CHECK_OK(forge_op_profile_attach(&p, be, &marks));
        for (int i = 0; i < 5; i++) CHECK_OK(be->accumulate(be, a, b, 5));
        CHECK(forge_op_profile_detach(p, &r) == FORGE_ERR_ARG);
        CHECK(strstr(forge_error_message(), "more than 4 calls") != NULL);
        forge_error_clear();
        CHECK((const void *)be->accumulate == acc0);
        marks.destroy(marks.ctx);
        forge_backend_destroy(be);
    }

    TEST_CASE("coprocess: line protocol, exit status, a helper that ends early");
    {
        forge_coprocess c;
        char line[64];
        CHECK_OK(forge_coprocess_start(&c, "echo ready; read a; echo \"got $a\"; exit 3"));
        CHECK_OK(forge_coprocess_recv(&c, line, sizeof line));
        CHECK(strcmp(line, "ready") == 0);
        CHECK_OK(forge_coprocess_send(&c, "step"));
        CHECK_OK(forge_coprocess_recv(&c, line, sizeof line));
        CHECK(strcmp(line, "got step") == 0);
        CHECK(forge_coprocess_recv(&c, line, sizeof line) == FORGE_ERR_IO);
        forge_error_clear();
        CHECK(forge_coprocess_finish(&c) == FORGE_ERR_IO);
        CHECK(strstr(forge_error_message(), "status 3") != NULL);
        forge_error_clear();
    }

    TEST_CASE("bench train --baseline: rounds stepped in turn with a stand-in baseline, --breakdown, --cases");
    {
        /* the stand-in answers every step with 2 ms and ends with the JSON line */
        const char *fake = "sh -c 'echo ready; while read c; do if [ \"$c\" = end ]; then "
                           "echo \"{\\\"median_ms\\\": 2.0, \\\"peak_mib\\\": 5, \\\"torch\\\": \\\"fake\\\"}\"; "
                           "exit 0; fi; echo 2.0; done' --";
        forge_runtime_options rt;
        forge_runtime_options_default(&rt);
        rt.threads = 1;
        forge_harness_set_default_root(test_tmpdir());
        /* the whole output: the breakdown's tables list more or fewer ops with the timings (ops under 0.5% are
         * folded), so a fixed prefix can end before the paired line */
        static char text[1 << 16];
        FILE *out = tmpfile();
        forge_bench_train_options o = {.steps = 3, .cases = "tiny:2x16", .breakdown = 1, .baseline = fake};
        CHECK_OK(forge_bench_train(out, &rt, "configs", &o));
        rewind(out);
        size_t n = out ? fread(text, 1, sizeof text - 1, out) : 0;
        text[n] = 0;
        CHECK_MSG(strstr(text, "step span") != NULL && strstr(text, "matmul_forward") != NULL,
                  "breakdown table missing: %.300s", text);
        CHECK_MSG(strstr(text, "baseline") != NULL && strstr(text, "torch fake") != NULL &&
                  strstr(text, "peak forge") != NULL, "paired line missing (%zu bytes): %.300s", n, text);
        if (out) fclose(out);
        o.cases = "tiny:2by16";
        CHECK(forge_bench_train(stdout, &rt, "configs", &o) == FORGE_ERR_ARG);
        CHECK(strstr(forge_error_message(), "CONFIG:BxT") != NULL);
        forge_error_clear();
        forge_harness_set_default_root(NULL);
    }
    /* the paired attention bench times GPU kernels only: any other device is refused by name, before a baseline
     * process is started */
    CHECK_ERR_MSG(forge_bench_attention_paired(stdout, "cpu", "false", 20, 10), FORGE_ERR_UNSUPPORTED,
                  "--device cuda", "cpu");
    forge_error_clear();
}
