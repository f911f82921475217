/*
 * harness.h: the benchmark harness every `forge bench` suite uses.
 *
 * A number forge reports must be one a reader can trust and re-derive, so a
 * suite never times a kernel directly. It describes CELLS (one kernel, one
 * shape, one precision) and the harness:
 *   1. runs the cell's check first: the output is poisoned, the kernel runs
 *      once, and the cell's checker compares every element with a float64
 *      reference computed from the SAME ROUNDED INPUTS the kernel consumed
 *      (input quantisation cancels; only the kernel's own error remains). A
 *      cell over its precision's tolerance, or with an unwritten output, is
 *      `garbage`: reported, written to the CSV, excluded from every summary.
 *   2. times it: warm-up, then R repetitions (default 100, never fewer than
 *      30) with the timer the suite provides (CUDA events on the GPU), rotating
 *      among the cell's input sets so L2-resident inputs do not flatter it.
 *   3. reports the median, a bootstrap 95% CI of the median (fixed seed, 10^4
 *      resamples, PCG32 indices: tools/reverify.py re-derives it exactly),
 *      min and max, and keeps every per-rep sample in a second CSV.
 *   4. compares cells within a GROUP against the group's baselines measured
 *      in the same run: a cell "wins" only at >= 1.10x the strongest passing
 *      baseline; a lower-precision cell counts as "accelerated" only at >= 1.5x
 *      its named higher-precision counterpart.
 * A run records provenance (commit + dirty flag, suite-config hash, input-
 * recipe hash, seed, GPU, SM count, driver, toolkit, clocks at start and end);
 * a run missing any field is refused, not written.
 */
#ifndef FORGE_HARNESS_H
#define FORGE_HARNESS_H

#include <stdint.h>
#include <stdio.h>

#include "../base/status.h"

/* How the harness orders the timed runs of the cells it is given.
 * SEQUENTIAL: each cell is checked, warmed up and timed before the next cell starts (its reps back to back).
 * INTERLEAVED: forge_harness_run checks the cell and queues it; forge_harness_flush then warms every queued cell
 * up and times them in rounds, one run of each per round, each round in its own random order (PCG32 seeded from
 * the harness seed and the flush number, so no cell always follows the same kernel). Every cell then sees the
 * same device state: a GPU's clocks fall as it heats within one cell's reps, by more than the effects a suite
 * measures (docs/results.md), so back-to-back cells are timed at different clocks and their ratio measures
 * the order as much as the kernels. Rep r of every cell in one flush
 * comes from round r, which makes a per-round (paired) ratio meaningful; the harness reports it (see the CSV's
 * paired_* columns). */
typedef enum { FORGE_ORDER_DEFAULT = 0, FORGE_ORDER_SEQUENTIAL, FORGE_ORDER_INTERLEAVED } forge_timing_order;
const char *forge_timing_order_name(forge_timing_order o);
/* "sequential" / "interleaved" -> the order; anything else is a FORGE_ERR_ARG naming what was expected. */
forge_status forge_timing_order_parse(const char *s, forge_timing_order *out);

typedef enum {
    FORGE_PREC_FP32 = 0,
    FORGE_PREC_TF32,
    FORGE_PREC_BF16,
    FORGE_PREC_FP16,
    FORGE_PREC_FP8,
    FORGE_PREC_COUNT
} forge_precision;

const char *forge_precision_name(forge_precision p);
/* The one place tolerances live: relative Frobenius error ||out - ref|| / ||ref||
 * allowed for a kernel whose inputs are in precision p (fp32 1e-5, tf32 1e-3,
 * bf16 1e-2, fp16 5e-3, fp8 5e-2 unless a later measurement says otherwise). */
double forge_precision_tolerance(forge_precision p);

/* What the harness times with. The CUDA implementation records events on the
 * suite's stream; the CPU one reads a monotonic clock. */
typedef struct {
    void *ctx;
    forge_status (*start)(void *ctx);
    forge_status (*stop)(void *ctx, double *elapsed_ms); /* waits for completion */
} forge_bench_timer;

/* Time stamps for a breakdown of one run (op_profile.h): record(ctx, i) stamps slot i in [0, capacity) on the
 * suite's stream without waiting (a CUDA event; on the CPU the monotonic clock, ops being synchronous there);
 * elapsed(ctx, a, b, &ms) waits for slot b, then gives the time from stamp a to stamp b. */
typedef struct {
    void *ctx;
    int capacity;
    forge_status (*record)(void *ctx, int slot);
    forge_status (*elapsed)(void *ctx, int a, int b, double *ms);
    void (*destroy)(void *ctx);
} forge_bench_marks;

forge_status forge_cpu_bench_marks_create(forge_bench_marks *out, int capacity);

/* Provenance: every field is required (non-empty strings, sm_count > 0). */
typedef struct {
    char commit[64];       /* git commit, built in at compile time */
    int dirty;             /* 1 if the tree had uncommitted changes */
    char gpu_name[128];    /* or the CPU model for CPU suites */
    int sm_count;          /* or the CPU thread count */
    char driver[64];       /* or "none" for CPU suites */
    char toolkit[64];      /* CUDA runtime version, or the C compiler */
    int clock_sm_mhz_start, clock_sm_mhz_end;   /* -1 if unreadable (recorded as such) */
    int clock_mem_mhz_start, clock_mem_mhz_end;
} forge_provenance;

typedef struct {
    const char *suite;        /* "gemm", "characterize", "attention", "ops", "train" */
    const char *results_root; /* NULL: the default (forge_harness_set_default_root, else "results"); writes
                               * <root>/<date>_<commit>/<suite>.csv */
    const char *config_text;  /* the suite's configuration, hashed into provenance */
    const char *input_recipe; /* how inputs are generated, hashed into provenance */
    uint64_t seed;
    int reps;                 /* default 100; values below 30 are raised to 30 */
    int warmup;               /* default 10 */
    FILE *out;                /* human-readable table (stdout) */
    forge_timing_order order; /* DEFAULT: the suite never flushes, so it is timed SEQUENTIAL whatever the CLI
                               * says; SEQUENTIAL or INTERLEAVED: the suite's choice, which `forge bench --order`
                               * overrides (forge_harness_set_default_order) */
} forge_harness_config;

typedef struct {
    const char *name;         /* "forge_wgmma_bf16", "cublas_bf16", ... */
    const char *group;        /* cells compared together: "bf16 4096x4096x4096" */
    int is_baseline;          /* a baseline of its group */
    const char *counterpart;  /* for the acceleration bar: name of the higher-precision
                               * cell in the same group's shape (NULL if none) */
    const char *counterpart_group; /* group of the counterpart (NULL: same group) */
    forge_precision precision;
    double flops;             /* work per run, for TFLOP/s (0 if not meaningful) */
    double bytes;             /* bytes moved per run, for GB/s (0 if not meaningful) */
    int n_input_sets;         /* rotation: run(ctx, i % n_input_sets) */
    void *ctx;
    /* poison the output(s) before the check run */
    forge_status (*poison)(void *ctx);
    /* one run of the kernel on input set i; asynchronous is fine */
    forge_status (*run)(void *ctx, int input_set);
    /* after one run on input set 0 (synchronised): relative error vs the
     * float64 reference of the same rounded inputs, and whether every output
     * element was written (no poison left) */
    forge_status (*check)(void *ctx, double *rel_err, int *fully_written);
    /* tolerance override (0 = the precision's default); must be justified in
     * the suite's source next to the cell */
    double tolerance;
} forge_harness_cell;

/* SKIPPED: not selected by the cell filter, --only (not run, not recorded, not a failure) */
typedef enum { FORGE_CELL_OK = 0, FORGE_CELL_GARBAGE, FORGE_CELL_FAILED, FORGE_CELL_SKIPPED } forge_cell_status;

typedef struct {
    forge_cell_status status;
    double rel_err, tolerance;
    double median_ms, ci_lo_ms, ci_hi_ms, min_ms, max_ms;
    int reps;
    double tflops, gbps;
} forge_cell_result;

/* A cell that counts against its suite: garbage or failed (OK and SKIPPED do not). */
static inline int forge_cell_bad(const forge_cell_result *r) {
    return r->status == FORGE_CELL_GARBAGE || r->status == FORGE_CELL_FAILED;
}

typedef struct forge_harness forge_harness;

/* Checks provenance (refuses a run missing any field) and prepares the CSVs. */
forge_status forge_harness_open(forge_harness **out, const forge_harness_config *cfg,
                                const forge_provenance *prov, const forge_bench_timer *timer);
/* Checks, then times one cell; the result is also kept for the verdicts. With a cell filter set (--only: substrings
 * separated by '|', matched against "name@group") a cell matching none of them is neither run nor recorded:
 * FORGE_OK with result->status FORGE_CELL_SKIPPED and NaN timings.
 * INTERLEAVED order: only the check runs here; a passing cell is queued (result: status OK, timings NaN) and its
 * ctx must stay valid until forge_harness_flush. */
forge_status forge_harness_run(forge_harness *h, const forge_harness_cell *cell, forge_cell_result *result);
/* Times the queued cells interleaved (see forge_timing_order) and empties the queue; a no-op when nothing is
 * queued (so SEQUENTIAL suites may call it too). *n_bad (may be NULL) receives how many queued cells failed while
 * being timed. A suite calls it before it frees what the queued cells' contexts point at; forge_harness_close
 * records cells still queued as failed (their contexts may be gone) and returns an error. */
forge_status forge_harness_flush(forge_harness *h, int *n_bad);
forge_timing_order forge_harness_order(const forge_harness *h);
/* Whether the cell filter (forge_harness_set_cell_filter) selects the cell (always 1 without one): for a suite to skip set-up
 * that only unselected cells need (e.g. a baseline library's plan, whose probe launches would also show up in a
 * profiler's kernel count). */
int forge_harness_cell_selected(const char *name, const char *group);
/* Computes verdicts (ratio vs strongest baseline, win / accelerated), prints
 * the summary table, writes <suite>.csv and <suite>_samples.csv. */
forge_status forge_harness_close(forge_harness *h);

/* Median and bootstrap CI exactly as the harness computes them (exposed for
 * tests and for the re-verifier's reference). samples are not modified. */
double forge_harness_median(const double *samples, int n);
void forge_harness_bootstrap_ci(const double *samples, int n, uint64_t seed, int resamples,
                                double *lo, double *hi);

/* The harness's own copy of the provenance, for a suite to record the end
 * clocks into before close (forge_cuda_provenance_end). */
forge_provenance *forge_harness_provenance(forge_harness *h);
/* The results root of suites whose config leaves results_root NULL (`forge bench --results DIR`); NULL or "" restores
 * "results". Not thread-safe: call before any harness opens. */
void forge_harness_set_default_root(const char *dir);
/* `forge bench --order`: overrides every suite's own order (DEFAULT restores the suites' choices). Same caveat. */
void forge_harness_set_default_order(forge_timing_order order);
/* `forge bench --only PATTERNS`: '|'-separated substrings; a cell runs only if one of them occurs in "name@group"
 * (so "forge_wgmma_bf16@" selects a cell by name, "K=32768 (gpt2 dW mlp fc)" a group, "cublas_bf16@bf16 tn" both).
 * Meant for profilers (ncu over one shape instead of a whole suite); NULL or "": every cell runs. Same caveat. */
void forge_harness_set_cell_filter(const char *patterns);

/* The results folder: <results_root>/<YYYY-MM-DD>_<commit>[-dirty] (UTC date). */
const char *forge_harness_dir(const forge_harness *h);
/* Discards a harness without writing anything (error paths); close frees too. */
void forge_harness_free(forge_harness *h);

/* A monotonic-clock timer for CPU suites (start/stop pairs must not
 * interleave on one thread). */
forge_bench_timer forge_cpu_bench_timer(void);

/* CSV fields as the harness writes them: RFC 4180 quoting (a field with a
 * comma, quote, CR or LF is quoted, quotes doubled); numbers as %.17g, which
 * round-trips a double, and NaN (not applicable) as an empty field. */
void forge_csv_str(FILE *f, const char *s);
void forge_csv_num(FILE *f, double x);

/* Fills the build-time fields (commit, dirty, toolkit for CPU); the CUDA side
 * fills the GPU fields (forge_cuda_provenance in the CUDA backend). */
void forge_provenance_init_host(forge_provenance *p);

#endif
