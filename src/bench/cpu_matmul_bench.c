/*
 * cpu_matmul_bench.c: how close the CPU matmul gets to the machine's FMA peak.
 *
 * The peak is measured, not taken from a spec sheet: every thread at once runs
 * a loop of independent vector FMAs (12 accumulator chains, more than latency
 * x issue width, so the loop is throughput-bound and nothing spills) at each
 * vector width compiled in, keeping the faster (Zen 4 splits 512-bit FMAs, so
 * 256-bit can match it). "% of peak" is reported against that all-thread figure
 * (the ceiling of a GEMM on those threads, at the all-core clock) and against
 * one thread alone. On a shared machine other processes only ever slow a run
 * down, so the peak is the best of several runs, each thread timed by its own
 * CPU time, and each matmul figure is a median.
 *
 * Every op x shape is a harness cell (harness.h): the baseline is the same
 * tiled kernel on one thread, the cell the same kernel on every thread, so
 * the ratio column is the thread scaling. Before timing, each cell's full
 * output is compared with a float64 loop over the same inputs (bench_check.h,
 * a few seconds at these shapes); a cell over the fp32 tolerance is garbage.
 * The results land in results/<date>_<commit>/cpu_matmul*.csv.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "bench_check.h"
#include "harness.h"
#include "../backend/backend.h"
#include "../base/rng.h"
#include "../base/clock.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

/* ---- FMA peak ------------------------------------------------------------------ */

/* Independent accumulator chains per thread. A core keeps latency x ports FMAs
 * in flight (Zen 3/4 and recent Intel: 4 cycles x 2 ports = 8), so 12 chains
 * make the loop throughput-bound; 12 accumulators plus the two operands also
 * fit AVX2's 16 ymm registers. 16 would not: GCC keeps three of them on the
 * stack, each FMA then waits on a store and a reload, and the "peak" comes out
 * low enough that a well-tiled GEMM measures above it. */
#define PEAK_ACC 12
static volatile float peak_sink;

#if defined(__AVX512F__)
static double fma_loop_512(long iters) {
    __m512 acc[PEAK_ACC];
    __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (int j = 0; j < PEAK_ACC; j++) acc[j] = _mm512_set1_ps((float)j);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int j = 0; j < PEAK_ACC; j++) acc[j] = _mm512_fmadd_ps(acc[j], x, y);
    }
    __m512 s = acc[0];
    for (int j = 1; j < PEAK_ACC; j++) s = _mm512_add_ps(s, acc[j]);
    peak_sink = _mm512_reduce_add_ps(s);
    return 2.0 * 16 * PEAK_ACC * (double)iters;
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
static double fma_loop_256(long iters) {
    __m256 acc[PEAK_ACC];
    __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    for (int j = 0; j < PEAK_ACC; j++) acc[j] = _mm256_set1_ps((float)j);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int j = 0; j < PEAK_ACC; j++) acc[j] = _mm256_fmadd_ps(acc[j], x, y);
    }
    __m256 s = acc[0];
    for (int j = 1; j < PEAK_ACC; j++) s = _mm256_add_ps(s, acc[j]);
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    peak_sink = lanes[0] + lanes[7];
    return 2.0 * 8 * PEAK_ACC * (double)iters;
}
#endif

static double fma_loop_scalar(long iters) {
    float acc[PEAK_ACC];
    for (int j = 0; j < PEAK_ACC; j++) acc[j] = (float)j;
    for (long it = 0; it < iters; it++)
        for (int j = 0; j < PEAK_ACC; j++) acc[j] = fmaf(acc[j], 0.999999f, 1e-7f);
    float s = 0.0f;
    for (int j = 0; j < PEAK_ACC; j++) s += acc[j];
    peak_sink = s;
    return 2.0 * PEAK_ACC * (double)iters;
}

/* Seconds of CPU time the calling thread has run. */
static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* GFLOP/s of `loop` run on `threads` threads at once: each thread's FLOPs over
 * its own CPU time, summed, the best of 9 runs of about 50 ms each. CPU time
 * rather than wall time, so that a thread that another process pushes off its
 * core for part of the run is not counted as slow (on a shared machine, wall
 * time would make the ceiling whatever the neighbours left); the threads still
 * run together, so the figure is at the all-core clock. */
static double peak_of(double (*loop)(long), long iters, int threads) {
    double best = 0.0;
    for (int r = 0; r < 9; r++) {
        double rate = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : rate)
        {
            double c0 = thread_cpu_seconds();
            double flops = loop(iters);
            rate += flops / (thread_cpu_seconds() - c0) * 1e-9;
        }
        if (rate > best) best = rate;
    }
    return best;
}

/* The measured FMA peak: all threads at once (the ceiling of a multi-threaded
 * GEMM, at the all-core clock) and one thread alone (which may run at a higher
 * boost clock). `isa` names the vector width that gave it. */
typedef struct {
    double all, one; /* GFLOP/s: every thread together; one thread */
    int threads;
    const char *isa;
} fma_peak;

static fma_peak measure_peak(int threads) {
    fma_peak p = {0.0, 0.0, threads, "scalar fmaf"};
    double (*loop)(long) = fma_loop_scalar;
    long iters = 20000000L;
#if defined(__AVX2__) && defined(__FMA__)
    loop = fma_loop_256;
    p.isa = "AVX2 256-bit FMA";
    iters = 8000000L;
#endif
#if defined(__AVX512F__)
    /* some cores (Zen 4) split 512-bit FMAs in two, so 256-bit can match 512: keep the faster */
    double w512 = peak_of(fma_loop_512, iters / 2, threads), w256 = peak_of(loop, iters, threads);
    if (w512 >= w256) {
        loop = fma_loop_512;
        iters /= 2;
        p.isa = "AVX-512 512-bit FMA";
    }
    p.all = w512 > w256 ? w512 : w256;
#else
    p.all = peak_of(loop, iters, threads);
#endif
    p.one = peak_of(loop, iters, 1);
    return p;
}

/* ---- matmul cells ------------------------------------------------------------ */

typedef enum { OP_FORWARD, OP_BACKWARD_INPUT, OP_BACKWARD_WEIGHT, OP_COUNT } bench_op;
static const char *op_names[OP_COUNT] = {"matmul_forward", "matmul_backward_input",
                                         "matmul_backward_weight"};

/* One shape's buffers, shared by the cells of its three ops. The backward
 * ops ACCUMULATE (+=) into dinp, dweight, dbias, so their "poison" is a reset
 * to known random start values (init_*) and the float64 reference starts from
 * the same values; forward's output is poisoned with NaN. */
typedef struct {
    int N, C, OC;
    float *inp, *weight, *bias, *out, *dout, *dinp, *dweight, *dbias; /* (N,C) (OC,C) (OC) (N,OC) (N,OC) (N,C) (OC,C) (OC) */
    float *init_dinp, *init_dweight, *init_dbias;
    double *ref[OP_COUNT], *ref_dbias; /* float64 references, computed on first use */
} bench_bufs;

typedef struct {
    bench_bufs *b;
    bench_op op;
    forge_backend *be;
} matmul_cell;

static forge_status run_op(forge_backend *be, bench_op op, bench_bufs *b) {
    switch (op) {
    case OP_FORWARD:
        return be->matmul_forward(be, b->out, b->inp, b->weight, b->bias, b->N, b->C, b->OC);
    case OP_BACKWARD_INPUT:
        return be->matmul_backward_input(be, b->dinp, b->dout, b->weight, b->N, b->C, b->OC);
    default:
        return be->matmul_backward_weight(be, b->dweight, b->dbias, b->dout, b->inp, b->N, b->C,
                                          b->OC);
    }
}

static forge_status cell_poison(void *ctx) {
    matmul_cell *m = ctx;
    bench_bufs *b = m->b;
    size_t nc = (size_t)b->N * b->C, noc = (size_t)b->N * b->OC, occ = (size_t)b->OC * b->C;
    if (m->op == OP_FORWARD)
        for (size_t i = 0; i < noc; i++) b->out[i] = NAN;
    else if (m->op == OP_BACKWARD_INPUT)
        memcpy(b->dinp, b->init_dinp, nc * sizeof(float));
    else {
        memcpy(b->dweight, b->init_dweight, occ * sizeof(float));
        memcpy(b->dbias, b->init_dbias, (size_t)b->OC * sizeof(float));
    }
    return FORGE_OK;
}

static forge_status cell_run(void *ctx, int input_set) {
    (void)input_set; /* one input set: every operand here is larger than L2 or the rotation buys nothing on a CPU */
    matmul_cell *m = ctx;
    return run_op(m->be, m->op, m->b);
}

static forge_status cell_check(void *ctx, double *rel_err, int *fully_written) {
    matmul_cell *m = ctx;
    bench_bufs *b = m->b;
    int N = b->N, C = b->C, OC = b->OC;
    double **ref = &b->ref[m->op];
    if (!*ref) {
        size_t n = m->op == OP_FORWARD ? (size_t)N * OC : m->op == OP_BACKWARD_INPUT ? (size_t)N * C : (size_t)OC * C;
        *ref = malloc(n * sizeof(double));
        if (m->op == OP_BACKWARD_WEIGHT && !b->ref_dbias) b->ref_dbias = malloc((size_t)OC * sizeof(double));
        if (!*ref || (m->op == OP_BACKWARD_WEIGHT && !b->ref_dbias))
            return forge_error(FORGE_ERR_OOM, "bench matmul: no memory for the float64 reference of %s",
                               op_names[m->op]);
        if (m->op == OP_FORWARD)
            forge_ref64_matmul_forward(*ref, b->inp, b->weight, b->bias, N, C, OC);
        else if (m->op == OP_BACKWARD_INPUT)
            forge_ref64_matmul_backward_input(*ref, b->init_dinp, b->dout, b->weight, N, C, OC);
        else
            forge_ref64_matmul_backward_weight(*ref, b->ref_dbias, b->init_dweight, b->init_dbias, b->dout, b->inp,
                                               N, C, OC);
    }
    forge_check chk = {0, 0, 0};
    if (m->op == OP_FORWARD)
        forge_check_add(&chk, b->out, *ref, NULL, (size_t)N * OC);
    else if (m->op == OP_BACKWARD_INPUT)
        forge_check_add(&chk, b->dinp, *ref, b->init_dinp, (size_t)N * C);
    else {
        forge_check_add(&chk, b->dweight, *ref, b->init_dweight, (size_t)OC * C);
        forge_check_add(&chk, b->dbias, b->ref_dbias, b->init_dbias, (size_t)OC);
    }
    *rel_err = forge_check_rel_err(&chk);
    *fully_written = chk.unwritten == 0;
    return FORGE_OK;
}

static void bufs_free(bench_bufs *b) {
    free(b->inp);
    for (int i = 0; i < OP_COUNT; i++) free(b->ref[i]);
    free(b->ref_dbias);
    memset(b, 0, sizeof *b);
}

static forge_status bufs_init(bench_bufs *b, int N, int C, int OC) {
    memset(b, 0, sizeof *b);
    b->N = N, b->C = C, b->OC = OC;
    size_t nc = (size_t)N * C, noc = (size_t)N * OC, occ = (size_t)OC * C;
    float *all = malloc((3 * nc + 2 * noc + 3 * occ + 3 * (size_t)OC) * sizeof(float));
    if (!all) return forge_error(FORGE_ERR_OOM, "bench matmul: no memory for N=%d C=%d OC=%d", N, C, OC);
    b->inp = all;
    b->dinp = b->inp + nc;
    b->init_dinp = b->dinp + nc;
    b->out = b->init_dinp + nc;
    b->dout = b->out + noc;
    b->weight = b->dout + noc;
    b->dweight = b->weight + occ;
    b->init_dweight = b->dweight + occ;
    b->bias = b->init_dweight + occ;
    b->dbias = b->bias + OC;
    b->init_dbias = b->dbias + OC;
    /* inputs and start values uniform in [-1, 1), never zero-filled */
    forge_rng rng;
    forge_rng_seed(&rng, 1234, 1);
    float *fill[] = {b->inp, b->dout, b->weight, b->bias, b->init_dinp, b->init_dweight, b->init_dbias};
    size_t len[] = {nc, noc, occ, (size_t)OC, nc, occ, (size_t)OC};
    for (int k = 0; k < 7; k++)
        for (size_t i = 0; i < len[k]; i++) fill[k][i] = 2.0f * forge_rng_uniform(&rng) - 1.0f;
    return FORGE_OK;
}

static const char *MATMUL_RECIPE =
    "cpu_matmul: PCG32 forge_rng_seed(1234, 1); in order inp (N,C), dout (N,OC), weight (OC,C), bias (OC), "
    "dinp0 (N,C), dweight0 (OC,C), dbias0 (OC), each 2*forge_rng_uniform-1; one input set";

forge_status forge_bench_cpu_matmul(FILE *out, int reps) {
    if (reps < 1) return forge_error(FORGE_ERR_ARG, "bench: reps must be >= 1, got %d", reps);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    fma_peak pk = measure_peak(threads);
    fprintf(out,
            "cpu matmul bench: %d threads; measured FMA peak %.1f GFLOP/s on %d threads (%.1f per core), "
            "%.1f on 1 thread alone (%s, %d independent accumulators per thread, per-thread CPU time, best of 9)\n",
            threads, pk.all, threads, pk.all / threads, pk.one, pk.isa, PEAK_ACC);
    fprintf(out,
            "  each op x shape: baseline = the same tiled kernel on 1 thread, cell = %d threads (ratio = scaling);\n"
            "  gate: relative Frobenius error vs a float64 loop on the same inputs (fp32 tolerance)\n",
            threads);

    static const int shapes[][3] = {{2048, 768, 768}, {2048, 768, 3072}, {4096, 768, 3072},
                                    {512, 128, 384},  {1000, 333, 777}};
    enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };
    char config[512];
    int len = snprintf(config, sizeof config, "cpu_matmul threads=%d ops=forward,backward_input,backward_weight shapes=",
                       threads);
    for (int i = 0; i < N_SHAPES && len < (int)sizeof config; i++)
        len += snprintf(config + len, sizeof config - (size_t)len, "%dx%dx%d;", shapes[i][0], shapes[i][1],
                        shapes[i][2]);
    forge_provenance prov;
    forge_provenance_init_host(&prov);
    forge_bench_timer timer = forge_cpu_bench_timer();
    forge_harness_config cfg = {.suite = "cpu_matmul", .results_root = NULL, .config_text = config,
                                .input_recipe = MATMUL_RECIPE, .seed = 1234, .reps = reps, .warmup = 2,
                                .out = out};
    forge_backend *fast = NULL, *one = NULL;
    forge_harness *h = NULL;
    FORGE_TRY(forge_backend_create_cpu(&fast, threads, 0));
    forge_status s = forge_backend_create_cpu(&one, 1, 0);
    if (s == FORGE_OK) s = forge_harness_open(&h, &cfg, &prov, &timer);
    char names[N_SHAPES][OP_COUNT][2][40], groups[N_SHAPES][OP_COUNT][64];
    forge_cell_result res[N_SHAPES][OP_COUNT][2];
    memset(res, 0, sizeof res);
    bench_bufs b;
    memset(&b, 0, sizeof b);
    for (int i = 0; s == FORGE_OK && i < N_SHAPES; i++) {
        s = bufs_init(&b, shapes[i][0], shapes[i][1], shapes[i][2]);
        for (int op = 0; op < OP_COUNT && s == FORGE_OK; op++) {
            snprintf(groups[i][op], sizeof groups[i][op], "%s N=%d C=%d OC=%d", op_names[op], b.N, b.C, b.OC);
            for (int v = 0; v < 2 && s == FORGE_OK; v++) {
                matmul_cell mc = {&b, (bench_op)op, v == 0 ? one : fast};
                snprintf(names[i][op][v], sizeof names[i][op][v], "tiled_%dt", v == 0 ? 1 : threads);
                forge_harness_cell cell = {.name = names[i][op][v], .group = groups[i][op], .is_baseline = v == 0,
                                           .precision = FORGE_PREC_FP32, .flops = 2.0 * b.N * b.C * b.OC,
                                           .n_input_sets = 1, .ctx = &mc, .poison = cell_poison,
                                           .run = cell_run, .check = cell_check};
                s = forge_harness_run(h, &cell, &res[i][op][v]);
            }
        }
        bufs_free(&b);
    }
    if (s == FORGE_OK) {
        s = forge_harness_close(h);
        h = NULL;
    }
    forge_harness_free(h);
    int bad = 0;
    for (int i = 0; i < N_SHAPES; i++)
        for (int op = 0; op < OP_COUNT; op++)
            for (int v = 0; v < 2; v++) bad += forge_cell_bad(&res[i][op][v]);
    if (s == FORGE_OK && bad)
        s = forge_error(FORGE_ERR_NUMERIC, "bench matmul: %d cells failed the check (garbage or failed above)", bad);
    if (s == FORGE_OK) {
        fprintf(out, "  fraction of peak (%.1f GFLOP/s, the measured FMA peak of %d threads; %.1f of 1 thread):\n",
                pk.all, threads, pk.one);
        for (int i = 0; i < N_SHAPES; i++)
            for (int op = 0; op < OP_COUNT; op++) {
                const forge_cell_result *r = &res[i][op][1];
                if (r->status != FORGE_CELL_OK) continue;
                double g = r->tflops * 1e3;
                fprintf(out, "  %-40s %8.1f GFLOP/s  %5.1f%% of %d-thread peak  %6.1f%% of 1-thread peak\n",
                        groups[i][op], g, 100.0 * g / pk.all, threads, 100.0 * g / pk.one);
            }
    }
    forge_backend_destroy(one);
    forge_backend_destroy(fast);
    return s;
}

double forge_bench_cpu_peak_flops(void) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    return measure_peak(threads).all * 1e9;
}
