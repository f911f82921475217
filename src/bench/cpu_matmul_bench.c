/*
 * cpu_matmul_bench.c: how close the CPU matmul gets to the machine's FMA peak.
 *
 * The peak is measured, not taken from a spec sheet: one thread runs a loop of
 * independent vector FMAs (16 accumulators, more than latency x issue width,
 * so the loop is throughput-bound) at each vector width compiled in, keeping
 * the faster (Zen 4 splits 512-bit FMAs, so 256-bit can match it).
 * "% of peak" is reported against threads x that single-core figure (the
 * ceiling when every thread has a core to itself) and against one core.
 * On a shared machine other processes only ever slow a run down, so the peak
 * is the best of several runs and each matmul figure is a median.
 *
 * Correctness first: before timing, each op's output is compared with the
 * reference backend on a slice (64 rows of the output; for backward_weight 64
 * output channels), because the naive loop on the full shape would take
 * longer than the whole benchmark.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "../backend/backend.h"
#include "../util/rng.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- single-core FMA peak -------------------------------------------------- */

#define PEAK_ACC 16
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

/* Best of 5 timed runs of about 0.1 s each, in GFLOP/s (best, because other
 * processes only ever slow a run down); `isa` names the width. */
static double measure_peak(const char **isa) {
    double (*loop)(long) = fma_loop_scalar;
    *isa = "scalar fmaf";
#if defined(__AVX2__) && defined(__FMA__)
    loop = fma_loop_256;
    *isa = "AVX2 256-bit FMA";
#endif
    double best = 0.0;
#if defined(__AVX512F__)
    /* some cores (Zen 4) split 512-bit FMAs in two: keep whichever width is faster */
    for (int r = 0; r < 5; r++) {
        double t0 = now_seconds();
        double flops = fma_loop_512(10000000L);
        double g = flops / (now_seconds() - t0) * 1e-9;
        if (g > best) {
            best = g;
            *isa = "AVX-512 512-bit FMA";
        }
    }
#endif
    for (int r = 0; r < 5; r++) {
        double t0 = now_seconds();
        double flops = loop(10000000L);
        double g = flops / (now_seconds() - t0) * 1e-9;
        if (g > best * 1.02) {
            best = g;
            *isa = loop == fma_loop_scalar ? "scalar fmaf" : "AVX2 256-bit FMA";
        }
    }
    return best;
}

/* ---- matmul timing ------------------------------------------------------------ */

typedef enum { OP_FORWARD, OP_BACKWARD_INPUT, OP_BACKWARD_WEIGHT, OP_COUNT } bench_op;
static const char *op_names[OP_COUNT] = {"matmul_forward", "matmul_backward_input",
                                         "matmul_backward_weight"};

typedef struct {
    int N, C, OC;
    float *inp, *weight, *bias, *out, *dout, *dinp, *dweight, *dbias;
} bench_bufs;

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

static double max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* max |fast - ref| / max |ref| over n values with row strides ldf, ldr */
static double rel_err(const float *fast, const float *ref, int rows, int cols, int ldf) {
    double m = 0.0, scale = max_abs(ref, (size_t)rows * cols);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            double d = fabs((double)fast[(size_t)r * ldf + c] - ref[(size_t)r * cols + c]);
            if (d > m) m = d;
        }
    return scale > 0 ? m / scale : m;
}

/* Runs `op` once on the fast backend and a 64-row/channel slice of it on the
 * reference backend; returns max relative error. */
static forge_status check_op(forge_backend *fast, forge_backend *ref, bench_op op, bench_bufs *b,
                             double *err) {
    int N = b->N, C = b->C, OC = b->OC;
    int r = N < 64 ? N : 64, ro = OC < 64 ? OC : 64;
    float *tmp = calloc((size_t)N * (C > OC ? C : OC) + (size_t)ro * C + OC + 1, sizeof(float));
    if (!tmp) return forge_error(FORGE_ERR_OOM, "bench: no memory for the reference check");
    forge_status s = FORGE_OK;
    if (op == OP_FORWARD) {
        s = run_op(fast, op, b);
        if (s == FORGE_OK) s = ref->matmul_forward(ref, tmp, b->inp, b->weight, b->bias, r, C, OC);
        *err = rel_err(b->out, tmp, r, OC, OC);
    } else if (op == OP_BACKWARD_INPUT) {
        memset(b->dinp, 0, (size_t)N * C * sizeof(float));
        s = run_op(fast, op, b);
        if (s == FORGE_OK) s = ref->matmul_backward_input(ref, tmp, b->dout, b->weight, r, C, OC);
        *err = rel_err(b->dinp, tmp, r, C, C);
    } else {
        /* dweight rows [0, ro) depend only on dout columns [0, ro): copy them out */
        memset(b->dweight, 0, (size_t)OC * C * sizeof(float));
        memset(b->dbias, 0, (size_t)OC * sizeof(float));
        s = run_op(fast, op, b);
        float *dout_sub = tmp, *dw = tmp + (size_t)N * ro, *db = dw + (size_t)ro * C;
        for (int n = 0; n < N; n++)
            memcpy(dout_sub + (size_t)n * ro, b->dout + (size_t)n * OC, (size_t)ro * sizeof(float));
        if (s == FORGE_OK) s = ref->matmul_backward_weight(ref, dw, db, dout_sub, b->inp, N, C, ro);
        double e1 = rel_err(b->dweight, dw, ro, C, C), e2 = rel_err(b->dbias, db, 1, ro, ro);
        *err = e1 > e2 ? e1 : e2;
    }
    free(tmp);
    return s;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static forge_status bench_shape(FILE *out, forge_backend *fast, forge_backend *ref, int N, int C,
                                int OC, int reps, double peak, int threads) {
    bench_bufs b = {.N = N, .C = C, .OC = OC};
    size_t nc = (size_t)N * C, noc = (size_t)N * OC, occ = (size_t)OC * C;
    float *all = malloc((2 * nc + 2 * noc + 2 * occ + 2 * (size_t)OC) * sizeof(float));
    double *times = malloc((size_t)(reps > 0 ? reps : 1) * sizeof(double));
    if (!all || !times) {
        free(all);
        free(times);
        return forge_error(FORGE_ERR_OOM, "bench: no memory for N=%d C=%d OC=%d", N, C, OC);
    }
    b.inp = all;
    b.dinp = b.inp + nc;
    b.out = b.dinp + nc;
    b.dout = b.out + noc;
    b.weight = b.dout + noc;
    b.dweight = b.weight + occ;
    b.bias = b.dweight + occ;
    b.dbias = b.bias + OC;
    forge_rng rng;
    forge_rng_seed(&rng, 1234, 1);
    for (size_t i = 0; i < nc; i++) b.inp[i] = 2.0f * forge_rng_uniform(&rng) - 1.0f;
    for (size_t i = 0; i < noc; i++) b.dout[i] = 2.0f * forge_rng_uniform(&rng) - 1.0f;
    for (size_t i = 0; i < occ; i++) b.weight[i] = 2.0f * forge_rng_uniform(&rng) - 1.0f;
    for (int i = 0; i < OC; i++) b.bias[i] = 2.0f * forge_rng_uniform(&rng) - 1.0f;

    forge_status s = FORGE_OK;
    double flops = 2.0 * N * C * OC;
    for (int op = 0; op < OP_COUNT && s == FORGE_OK; op++) {
        double err = 0.0;
        s = check_op(fast, ref, (bench_op)op, &b, &err);
        if (s != FORGE_OK) break;
        if (!(err <= 1e-4)) {
            s = forge_error(FORGE_ERR_NUMERIC,
                            "bench: %s N=%d C=%d OC=%d disagrees with the reference: max rel err %.3g",
                            op_names[op], N, C, OC, err);
            break;
        }
        s = run_op(fast, (bench_op)op, &b); /* warm-up */
        for (int r = 0; r < reps && s == FORGE_OK; r++) {
            double t0 = now_seconds();
            s = run_op(fast, (bench_op)op, &b);
            times[r] = now_seconds() - t0;
        }
        if (s != FORGE_OK) break;
        qsort(times, (size_t)reps, sizeof(double), cmp_double);
        double t = times[reps / 2];
        double g = flops / t * 1e-9;
        fprintf(out, "%-23s N=%5d C=%5d OC=%5d  %8.3f ms  %7.1f GFLOP/s  %5.1f%% of %dx peak  %6.1f%% of 1-core peak  err %.1e\n",
                op_names[op], N, C, OC, t * 1e3, g, 100.0 * g / (threads * peak), threads,
                100.0 * g / peak, err);
    }
    free(all);
    free(times);
    return s;
}

forge_status forge_bench_cpu_matmul(FILE *out, int reps) {
    if (reps < 1) return forge_error(FORGE_ERR_ARG, "bench: reps must be >= 1, got %d", reps);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    const char *isa;
    double peak = measure_peak(&isa);
    fprintf(out, "cpu matmul bench: %d threads, single-core peak %.1f GFLOP/s (%s, %d accumulators)\n",
            threads, peak, isa, PEAK_ACC);
    fprintf(out, "  %d x peak = %.1f GFLOP/s; median of %d reps after a warm-up\n", threads,
            threads * peak, reps);

    forge_backend *fast = NULL, *ref = NULL;
    FORGE_TRY(forge_cpu_backend_create(&fast, threads, 0));
    forge_status s = forge_cpu_backend_create(&ref, 1, 1);
    static const int shapes[][3] = {{2048, 768, 768}, {2048, 768, 3072}, {4096, 768, 3072},
                                    {512, 128, 384},  {1000, 333, 777}};
    for (size_t i = 0; s == FORGE_OK && i < sizeof shapes / sizeof shapes[0]; i++)
        s = bench_shape(out, fast, ref, shapes[i][0], shapes[i][1], shapes[i][2], reps, peak, threads);
    forge_backend_destroy(ref);
    forge_backend_destroy(fast);
    return s;
}

double forge_bench_cpu_peak_flops(void) {
    const char *isa;
    return measure_peak(&isa) * 1e9 * omp_get_max_threads();
}
