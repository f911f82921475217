/*
 * test_gpu_parity.c: every op of the CUDA backend against the CPU reference
 * backend (forge_cpu_backend_create(.., reference = 1)), forward and
 * backward, on shapes chosen to miss every tile size, plus a device-memory
 * check of the pooled allocator. Standalone (its own main): built by
 * `make cuda` as build/cuda/forge_gpu_tests, run on a GPU machine
 * (scripts/device_run.sh).
 *
 * How a case works:
 * - Inputs are random (forge_rng, fixed seeds), never zeros, and identical
 *   on both sides. ids/targets are random too, with duplicates.
 * - Forward outputs are POISONED with NaN on both sides before the op, so an
 *   element the kernel forgets to write fails the comparison.
 * - Accumulating outputs (every backward, backend.h) are pre-filled with the
 *   same random values on both sides, so "=" instead of "+=" fails.
 * - Every device buffer has GUARD floats after it holding a sentinel; a
 *   write past the end fails the case even when memcheck is not running.
 * - One line per compared output: "PASS|FAIL op[impl] shape maxerr=.. tol=..".
 *   Ops the CPU reference leaves NULL print SKIP; a NULL CUDA entry FAILs.
 *
 * Tolerances (max abs error) are 1e-4 unless stated at the case:
 * - a reduction of length K (matmul, dbias, norm dweight, attention
 *   backward) uses tol_for_sum(K) = 1e-4 * max(1, sqrt(K)/8): fp32 sums in
 *   different orders drift like sqrt(K) ulps of the running sum;
 * - embedding / position / rope are exact up to the last ulp: 1e-6;
 * - sumsq compares relative: tol = 1e-5 * |reference|;
 * - adamw: 1e-5 (updates are lr-sized; a wrong clip factor is far above).
 *
 * Matmul and attention cases run on the default CUDA backend (FORGE_MATMUL
 * from the environment) and again on backends created with FORGE_MATMUL =
 * simt64, simt128, cublas, auto and tf32 (attention always uses the SIMT
 * GEMM; under cublas, auto and tf32 only the matmul ops are repeated). A
 * build without cuBLAS (CUBLAS=0) skips cublas and checks that it is
 * refused; auto there runs forge's kernel.
 * tf32 tolerance (matmul under FORGE_MATMUL=tf32): each operand is rounded
 * to tf32 (10 mantissa bits, round to nearest: relative error <= 2^-11), so
 * a product is off by <= 2^-10 |a||b| and a K-long dot product by <= 2^-10
 * sum_k |a_k||b_k| plus the fp32 summation term tol_for_sum(K). With inputs
 * uniform in [-1, 1], sum |a||b| has mean K/4 and standard deviation
 * 0.217 sqrt(K); the bound uses mean + 6 sd (never exceeded in practice):
 * tol = 2^-10 (K/4 + 1.3 sqrt(K)) + tol_for_sum(K). The measured maxerr is
 * far below it (errors of opposite signs cancel); a wrong layout or a
 * missed K tile is off by O(sqrt(K)/3), far above it.
 * Under tf32, shapes with few output tiles and a long K take split-K
 * (forge_gemm_mma_tf32_splits): {257,768,3072} forward (+bias in the
 * reduction), {1031,200,2100} dX and dW, {1001,45,130} dW (scalar loads).
 * The auto table's cache is checked too (case_matmul_table): a corrupt file
 * is replaced by a valid one holding the measured shape.
 * FORGE_GPU_TESTS_QUICK=1 drops the large shapes (for compute-sanitizer).
 * FORGE_GPU_TESTS_ONLY=flash16 runs only the bf16 flash attention cases;
 * each shape checks the mma.sync kernels by name (flash16_forward.*,
 * flash16_backward.*), the Hopper wgmma ones by name (flash16_forward_wgmma.*,
 * flash16_backward_wgmma.*) and the default entries (flash16_default.*);
 * the wgmma forward also runs in each consumer schedule
 * (flash16_forward_wgmma_ov.* overlap, flash16_forward_wgmma_pp.* pingpong,
 * flash16_forward_wgmma_ps.* persist, flash16_forward_wgmma_pso.* persist_ov,
 * flash16_forward_wgmma_{pp,ps}128.* pingpong / persist with 128-key tiles at
 * D=128; FORGE_FLASH16_FWD_SCHED changes none of the named ones).
 * forge_gemm_fp8_nt / forge_gemm_tf32_nt (called directly, not backend ops)
 * are checked against a double reference of exactly representable values
 * (case_gemm_fp8: tolerances there) and for their FORGE_ERR_UNSUPPORTED
 * refusals; FORGE_GPU_TESTS_ONLY=gemm_fp8 runs only those GEMM cases.
 * forge_gemm_bf16_tn_wgmma_reduce (dW split-K): both reductions exact on exactly representable values, and
 * bit-reproducible / equal to each other on random ones (case_gemm_tn_reduce); FORGE_GPU_TESTS_ONLY=gemm_tn.
 * Ends with "N passed, N failed"; exit status 1 on any failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "../src/backend/backend.h"
#include "../src/backend/cuda/cuda_backend.h"
#include "../src/backend/cuda/gemm_fp8.h"
#include "../src/core/pool.h"
#include "../src/core/status.h"
#include "../src/util/rng.h"
#include "../tests/ops/attention_memory.h"

#define GUARD 64
#define GUARD_BITS 0x7fbadf0du /* a NaN no kernel produces */
#define POISON_BITS 0xffffffffu
#define TOL_DEFAULT 1e-4
#define TOL_EXACT 1e-6
#define IGNORE_INDEX (-100)

typedef struct {
    forge_backend *cpu, *gpu;
    const char *impl; /* matmul impl of gpu, printed with matmul/attention cases */
    forge_rng rng;
    int quick;
    int passed, failed, skipped;
} parity;

/* one float tensor on both backends: c (CPU reference memory), g (device) */
typedef struct {
    size_t n;
    float *c, *g;
} fbuf;

typedef struct {
    size_t n;
    int32_t *c, *g;
} ibuf;

static double tol_for_sum(double K) {
    double t = sqrt(K) / 8.0;
    return 1e-4 * (t > 1.0 ? t : 1.0);
}

static float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float rand_range(parity *P, float lo, float hi) {
    return lo + (hi - lo) * forge_rng_uniform(&P->rng);
}

/* ---- reporting ----------------------------------------------------------- */

static void report(parity *P, int ok, const char *op, const char *shape, double maxerr, double tol,
                   const char *why) {
    if (ok) P->passed++;
    else P->failed++;
    printf("%s %s %s maxerr=%.3g tol=%.3g%s%s\n", ok ? "PASS" : "FAIL", op, shape, maxerr, tol,
           why ? " " : "", why ? why : "");
    fflush(stdout);
}

static void report_skip(parity *P, const char *op, const char *shape, const char *why) {
    P->skipped++;
    printf("SKIP %s %s (%s)\n", op, shape, why);
    fflush(stdout);
}

/* Both entries exist? A NULL CPU entry skips; a NULL CUDA entry fails. */
static int supported(parity *P, const char *op, const char *shape, const void *cpu_fn,
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
static int ran_ok(parity *P, const char *op, const char *shape, forge_status sc, forge_status sg) {
    if (sc == FORGE_OK && sg == FORGE_OK) return 1;
    char why[512];
    snprintf(why, sizeof why, "(%s returned %s: %s)", sc != FORGE_OK ? "cpu" : "cuda",
             forge_status_name(sc != FORGE_OK ? sc : sg), forge_error_message());
    report(P, 0, op, shape, INFINITY, 0, why);
    return 0;
}

/* ---- buffers ------------------------------------------------------------- */

static void fbuf_free(parity *P, fbuf *b) {
    if (b->c) P->cpu->mem_free(P->cpu, b->c);
    if (b->g) P->gpu->mem_free(P->gpu, b->g);
    memset(b, 0, sizeof *b);
}

static void ibuf_free(parity *P, ibuf *b) {
    if (b->c) P->cpu->mem_free(P->cpu, b->c);
    if (b->g) P->gpu->mem_free(P->gpu, b->g);
    memset(b, 0, sizeof *b);
}

/* Allocates n floats on both sides (+GUARD on the device) and uploads host
 * values (NULL: leave the data unset) plus the guard sentinel. */
static int fbuf_upload(parity *P, fbuf *b, size_t n, const float *host) {
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
static int fbuf_rand(parity *P, fbuf *b, size_t n, float lo, float hi) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) return 0;
    for (size_t i = 0; i < n; i++) h[i] = rand_range(P, lo, hi);
    int ok = fbuf_upload(P, b, n, h);
    free(h);
    return ok;
}

/* NaN on both sides: forward outputs */
static int fbuf_poison(parity *P, fbuf *b, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) return 0;
    for (size_t i = 0; i < n; i++) h[i] = bits_to_float(POISON_BITS);
    int ok = fbuf_upload(P, b, n, h);
    free(h);
    return ok;
}

/* int32 values: uniform in [0, range), each replaced by `special` with
 * probability special_pct/100 (ignore_index rows) */
static int ibuf_rand(parity *P, ibuf *b, size_t n, int range, int special, int special_pct) {
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

/* Copies the device side back and prints one PASS/FAIL line. rel = 1
 * compares |g - c| <= tol * |c| instead (printed maxerr is then relative). */
static void check(parity *P, const char *op, const char *shape, const fbuf *b, double tol, int rel) {
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
        double err = fabs(g - c);
        if (rel) err /= fabs(c) > 0 ? fabs(c) : 1.0;
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

/* ---- elementwise ----------------------------------------------------------- */

static void case_elementwise(parity *P, size_t n) {
    forge_backend *C = P->cpu, *G = P->gpu;
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu", n);
    fbuf a = {0}, b = {0}, c = {0}, out = {0}, out2 = {0};
    if (!fbuf_rand(P, &a, n, -3, 3) || !fbuf_rand(P, &b, n, -3, 3) || !fbuf_rand(P, &c, n, -1, 1))
        goto done;

    if (supported(P, "accumulate", shape, C->accumulate, G->accumulate) && fbuf_rand(P, &out, n, -1, 1)) {
        if (ran_ok(P, "accumulate", shape, C->accumulate(C, out.c, a.c, n), G->accumulate(G, out.g, a.g, n)))
            check(P, "accumulate", shape, &out, TOL_EXACT, 0);
        fbuf_free(P, &out);
    }
    if (supported(P, "add_forward", shape, C->add_forward, G->add_forward) && fbuf_poison(P, &out, n)) {
        if (ran_ok(P, "add_forward", shape, C->add_forward(C, out.c, a.c, b.c, n),
                   G->add_forward(G, out.g, a.g, b.g, n)))
            check(P, "add_forward", shape, &out, TOL_EXACT, 0);
        fbuf_free(P, &out);
    }
    if (supported(P, "gelu_forward", shape, C->gelu_forward, G->gelu_forward) && fbuf_poison(P, &out, n)) {
        if (ran_ok(P, "gelu_forward", shape, C->gelu_forward(C, out.c, a.c, n),
                   G->gelu_forward(G, out.g, a.g, n)))
            check(P, "gelu_forward", shape, &out, TOL_DEFAULT, 0);
        fbuf_free(P, &out);
    }
    if (supported(P, "gelu_backward", shape, C->gelu_backward, G->gelu_backward) &&
        fbuf_rand(P, &out, n, -1, 1)) {
        if (ran_ok(P, "gelu_backward", shape, C->gelu_backward(C, out.c, a.c, c.c, n),
                   G->gelu_backward(G, out.g, a.g, c.g, n)))
            check(P, "gelu_backward.dinp", shape, &out, TOL_DEFAULT, 0);
        fbuf_free(P, &out);
    }
    if (supported(P, "swiglu_forward", shape, C->swiglu_forward, G->swiglu_forward) &&
        fbuf_poison(P, &out, n)) {
        if (ran_ok(P, "swiglu_forward", shape, C->swiglu_forward(C, out.c, a.c, b.c, n),
                   G->swiglu_forward(G, out.g, a.g, b.g, n)))
            check(P, "swiglu_forward", shape, &out, TOL_DEFAULT, 0);
        fbuf_free(P, &out);
    }
    if (supported(P, "swiglu_backward", shape, C->swiglu_backward, G->swiglu_backward) &&
        fbuf_rand(P, &out, n, -1, 1) && fbuf_rand(P, &out2, n, -1, 1)) {
        if (ran_ok(P, "swiglu_backward", shape, C->swiglu_backward(C, out.c, out2.c, c.c, a.c, b.c, n),
                   G->swiglu_backward(G, out.g, out2.g, c.g, a.g, b.g, n))) {
            check(P, "swiglu_backward.dgate", shape, &out, TOL_DEFAULT, 0);
            check(P, "swiglu_backward.dup", shape, &out2, TOL_DEFAULT, 0);
        }
    }
done:
    fbuf_free(P, &a);
    fbuf_free(P, &b);
    fbuf_free(P, &c);
    fbuf_free(P, &out);
    fbuf_free(P, &out2);
}

/* ---- embeddings ------------------------------------------------------------ */

static void case_embedding(parity *P, int N, int C, int V) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d C=%d V=%d", N, C, V);
    fbuf table = {0}, dout = {0}, out = {0}, dtable = {0};
    ibuf ids = {0};
    if (!ibuf_rand(P, &ids, N, V, 0, 0) || !fbuf_rand(P, &table, (size_t)V * C, -1, 1) ||
        !fbuf_rand(P, &dout, (size_t)N * C, -1, 1))
        goto done;
    if (supported(P, "embedding_forward", shape, Cb->embedding_forward, G->embedding_forward) &&
        fbuf_poison(P, &out, (size_t)N * C)) {
        if (ran_ok(P, "embedding_forward", shape, Cb->embedding_forward(Cb, out.c, ids.c, table.c, N, C),
                   G->embedding_forward(G, out.g, ids.g, table.g, N, C)))
            check(P, "embedding_forward", shape, &out, TOL_EXACT, 0);
    }
    /* dtable pre-filled: += semantics, and rows of unused ids must stay as they were */
    if (supported(P, "embedding_backward", shape, Cb->embedding_backward, G->embedding_backward) &&
        fbuf_rand(P, &dtable, (size_t)V * C, -1, 1)) {
        if (ran_ok(P, "embedding_backward", shape,
                   Cb->embedding_backward(Cb, dtable.c, dout.c, ids.c, N, C),
                   G->embedding_backward(G, dtable.g, dout.g, ids.g, N, C)))
            check(P, "embedding_backward.dtable", shape, &dtable, TOL_EXACT, 0);
    }
done:
    ibuf_free(P, &ids);
    fbuf_free(P, &table);
    fbuf_free(P, &dout);
    fbuf_free(P, &out);
    fbuf_free(P, &dtable);
}

static void case_position(parity *P, int B, int T, int C, int maxT) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d T=%d C=%d maxT=%d", B, T, C, maxT);
    size_t n = (size_t)B * T * C;
    fbuf inp = {0}, wpe = {0}, out = {0}, dout = {0}, dinp = {0}, dwpe = {0};
    if (!fbuf_rand(P, &inp, n, -1, 1) || !fbuf_rand(P, &wpe, (size_t)maxT * C, -1, 1) ||
        !fbuf_rand(P, &dout, n, -1, 1))
        goto done;
    if (supported(P, "position_forward", shape, Cb->position_forward, G->position_forward) &&
        fbuf_poison(P, &out, n)) {
        if (ran_ok(P, "position_forward", shape, Cb->position_forward(Cb, out.c, inp.c, wpe.c, B, T, C),
                   G->position_forward(G, out.g, inp.g, wpe.g, B, T, C)))
            check(P, "position_forward", shape, &out, TOL_EXACT, 0);
    }
    if (supported(P, "position_backward", shape, Cb->position_backward, G->position_backward) &&
        fbuf_rand(P, &dinp, n, -1, 1) && fbuf_rand(P, &dwpe, (size_t)maxT * C, -1, 1)) {
        if (ran_ok(P, "position_backward", shape,
                   Cb->position_backward(Cb, dinp.c, dwpe.c, dout.c, B, T, C),
                   G->position_backward(G, dinp.g, dwpe.g, dout.g, B, T, C))) {
            check(P, "position_backward.dinp", shape, &dinp, TOL_EXACT, 0);
            check(P, "position_backward.dwpe", shape, &dwpe, TOL_EXACT, 0);
        }
    }
done:
    fbuf_free(P, &inp);
    fbuf_free(P, &wpe);
    fbuf_free(P, &out);
    fbuf_free(P, &dout);
    fbuf_free(P, &dinp);
    fbuf_free(P, &dwpe);
}

/* ---- matmul ---------------------------------------------------------------- */

/* Max abs tolerance of a K-long matmul reduction on the current impl (tf32: see the top of the file). */
static double mm_tol(const parity *P, double K) {
    if (P->impl && strcmp(P->impl, "tf32") == 0) return ldexp(K / 4.0 + 1.3 * sqrt(K), -10) + tol_for_sum(K);
    return tol_for_sum(K);
}

static void case_matmul(parity *P, int N, int C, int OC, int with_bias) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[128], op[96];
    snprintf(shape, sizeof shape, "N=%d C=%d OC=%d bias=%d", N, C, OC, with_bias);
    fbuf inp = {0}, w = {0}, b = {0}, out = {0}, dout = {0}, dinp = {0}, dw = {0}, db = {0};
    if (!fbuf_rand(P, &inp, (size_t)N * C, -1, 1) || !fbuf_rand(P, &w, (size_t)OC * C, -1, 1) ||
        !fbuf_rand(P, &b, OC, -1, 1) || !fbuf_rand(P, &dout, (size_t)N * OC, -1, 1))
        goto done;

    snprintf(op, sizeof op, "matmul_forward[%s]", P->impl);
    if (supported(P, op, shape, Cb->matmul_forward, G->matmul_forward) &&
        fbuf_poison(P, &out, (size_t)N * OC)) {
        if (ran_ok(P, op, shape,
                   Cb->matmul_forward(Cb, out.c, inp.c, w.c, with_bias ? b.c : NULL, N, C, OC),
                   G->matmul_forward(G, out.g, inp.g, w.g, with_bias ? b.g : NULL, N, C, OC)))
            check(P, op, shape, &out, mm_tol(P, C), 0);
    }
    snprintf(op, sizeof op, "matmul_backward_input[%s]", P->impl);
    if (supported(P, op, shape, Cb->matmul_backward_input, G->matmul_backward_input) &&
        fbuf_rand(P, &dinp, (size_t)N * C, -1, 1)) {
        if (ran_ok(P, op, shape, Cb->matmul_backward_input(Cb, dinp.c, dout.c, w.c, N, C, OC),
                   G->matmul_backward_input(G, dinp.g, dout.g, w.g, N, C, OC)))
            check(P, op, shape, &dinp, mm_tol(P, OC), 0);
    }
    snprintf(op, sizeof op, "matmul_backward_weight[%s]", P->impl);
    if (supported(P, op, shape, Cb->matmul_backward_weight, G->matmul_backward_weight) &&
        fbuf_rand(P, &dw, (size_t)OC * C, -1, 1) && fbuf_rand(P, &db, OC, -1, 1)) {
        if (ran_ok(P, op, shape,
                   Cb->matmul_backward_weight(Cb, dw.c, with_bias ? db.c : NULL, dout.c, inp.c, N, C, OC),
                   G->matmul_backward_weight(G, dw.g, with_bias ? db.g : NULL, dout.g, inp.g, N, C, OC))) {
            snprintf(op, sizeof op, "matmul_backward_weight[%s].dweight", P->impl);
            check(P, op, shape, &dw, mm_tol(P, N), 0);
            /* without bias, db must come back untouched */
            snprintf(op, sizeof op, "matmul_backward_weight[%s].dbias", P->impl);
            check(P, op, shape, &db, tol_for_sum(N), 0);
        }
    }
done:
    fbuf_free(P, &inp);
    fbuf_free(P, &w);
    fbuf_free(P, &b);
    fbuf_free(P, &out);
    fbuf_free(P, &dout);
    fbuf_free(P, &dinp);
    fbuf_free(P, &dw);
    fbuf_free(P, &db);
}

/* ---- normalisation ------------------------------------------------------------ */

static void case_layernorm(parity *P, int N, int C) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    const float eps = 1e-5f;
    fbuf inp = {0}, w = {0}, b = {0}, out = {0}, mean = {0}, rstd = {0}, dout = {0}, dinp = {0},
         dw = {0}, db = {0};
    if (!fbuf_rand(P, &inp, (size_t)N * C, -2, 2) || !fbuf_rand(P, &w, C, -1, 1) ||
        !fbuf_rand(P, &b, C, -1, 1) || !fbuf_rand(P, &dout, (size_t)N * C, -1, 1))
        goto done;
    if (!supported(P, "layernorm_forward", shape, Cb->layernorm_forward, G->layernorm_forward) ||
        !fbuf_poison(P, &out, (size_t)N * C) || !fbuf_poison(P, &mean, N) || !fbuf_poison(P, &rstd, N))
        goto done;
    if (!ran_ok(P, "layernorm_forward", shape,
                Cb->layernorm_forward(Cb, out.c, mean.c, rstd.c, inp.c, w.c, b.c, N, C, eps),
                G->layernorm_forward(G, out.g, mean.g, rstd.g, inp.g, w.g, b.g, N, C, eps)))
        goto done;
    check(P, "layernorm_forward.out", shape, &out, TOL_DEFAULT, 0);
    check(P, "layernorm_forward.mean", shape, &mean, TOL_DEFAULT, 0);
    check(P, "layernorm_forward.rstd", shape, &rstd, TOL_DEFAULT, 0);
    /* the backward reads each side's own mean/rstd: both were just checked */
    if (supported(P, "layernorm_backward", shape, Cb->layernorm_backward, G->layernorm_backward) &&
        fbuf_rand(P, &dinp, (size_t)N * C, -1, 1) && fbuf_rand(P, &dw, C, -1, 1) &&
        fbuf_rand(P, &db, C, -1, 1)) {
        if (ran_ok(P, "layernorm_backward", shape,
                   Cb->layernorm_backward(Cb, dinp.c, dw.c, db.c, dout.c, inp.c, w.c, mean.c, rstd.c, N, C),
                   G->layernorm_backward(G, dinp.g, dw.g, db.g, dout.g, inp.g, w.g, mean.g, rstd.g, N, C))) {
            check(P, "layernorm_backward.dinp", shape, &dinp, tol_for_sum(C), 0);
            check(P, "layernorm_backward.dweight", shape, &dw, tol_for_sum(N), 0);
            check(P, "layernorm_backward.dbias", shape, &db, tol_for_sum(N), 0);
        }
    }
done:
    fbuf_free(P, &inp);
    fbuf_free(P, &w);
    fbuf_free(P, &b);
    fbuf_free(P, &out);
    fbuf_free(P, &mean);
    fbuf_free(P, &rstd);
    fbuf_free(P, &dout);
    fbuf_free(P, &dinp);
    fbuf_free(P, &dw);
    fbuf_free(P, &db);
}

static void case_rmsnorm(parity *P, int N, int C) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    const float eps = 1e-5f;
    fbuf inp = {0}, w = {0}, out = {0}, rstd = {0}, dout = {0}, dinp = {0}, dw = {0};
    if (!fbuf_rand(P, &inp, (size_t)N * C, -2, 2) || !fbuf_rand(P, &w, C, -1, 1) ||
        !fbuf_rand(P, &dout, (size_t)N * C, -1, 1))
        goto done;
    if (!supported(P, "rmsnorm_forward", shape, Cb->rmsnorm_forward, G->rmsnorm_forward) ||
        !fbuf_poison(P, &out, (size_t)N * C) || !fbuf_poison(P, &rstd, N))
        goto done;
    if (!ran_ok(P, "rmsnorm_forward", shape, Cb->rmsnorm_forward(Cb, out.c, rstd.c, inp.c, w.c, N, C, eps),
                G->rmsnorm_forward(G, out.g, rstd.g, inp.g, w.g, N, C, eps)))
        goto done;
    check(P, "rmsnorm_forward.out", shape, &out, TOL_DEFAULT, 0);
    check(P, "rmsnorm_forward.rstd", shape, &rstd, TOL_DEFAULT, 0);
    if (supported(P, "rmsnorm_backward", shape, Cb->rmsnorm_backward, G->rmsnorm_backward) &&
        fbuf_rand(P, &dinp, (size_t)N * C, -1, 1) && fbuf_rand(P, &dw, C, -1, 1)) {
        if (ran_ok(P, "rmsnorm_backward", shape,
                   Cb->rmsnorm_backward(Cb, dinp.c, dw.c, dout.c, inp.c, w.c, rstd.c, N, C),
                   G->rmsnorm_backward(G, dinp.g, dw.g, dout.g, inp.g, w.g, rstd.g, N, C))) {
            check(P, "rmsnorm_backward.dinp", shape, &dinp, tol_for_sum(C), 0);
            check(P, "rmsnorm_backward.dweight", shape, &dw, tol_for_sum(N), 0);
        }
    }
done:
    fbuf_free(P, &inp);
    fbuf_free(P, &w);
    fbuf_free(P, &out);
    fbuf_free(P, &rstd);
    fbuf_free(P, &dout);
    fbuf_free(P, &dinp);
    fbuf_free(P, &dw);
}

/* ---- rope ------------------------------------------------------------------------ */

static void case_rope(parity *P, int B, int T, int n_heads, int n_rot, int HS) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[128];
    snprintf(shape, sizeof shape, "B=%d T=%d heads=%d rot=%d HS=%d", B, T, n_heads, n_rot, HS);
    const float theta = 10000.0f;
    size_t n = (size_t)B * T * n_heads * HS;
    fbuf inp = {0}, out = {0}, dout = {0}, dinp = {0}, inplace = {0};
    if (!fbuf_rand(P, &inp, n, -1, 1) || !fbuf_rand(P, &dout, n, -1, 1)) goto done;
    if (supported(P, "rope_forward", shape, Cb->rope_forward, G->rope_forward) && fbuf_poison(P, &out, n)) {
        if (ran_ok(P, "rope_forward", shape, Cb->rope_forward(Cb, out.c, inp.c, B, T, n_heads, n_rot, HS, theta),
                   G->rope_forward(G, out.g, inp.g, B, T, n_heads, n_rot, HS, theta)))
            check(P, "rope_forward", shape, &out, TOL_EXACT, 0);
        /* in place (out == inp), allowed by the CPU reference: same result expected.
         * The CPU side runs out of place into inplace.c, the GPU in place. */
        if (fbuf_upload(P, &inplace, n, inp.c)) {
            if (ran_ok(P, "rope_forward(in-place)", shape,
                       Cb->rope_forward(Cb, inplace.c, inp.c, B, T, n_heads, n_rot, HS, theta),
                       G->rope_forward(G, inplace.g, inplace.g, B, T, n_heads, n_rot, HS, theta)))
                check(P, "rope_forward(in-place)", shape, &inplace, TOL_EXACT, 0);
        }
    }
    if (supported(P, "rope_backward", shape, Cb->rope_backward, G->rope_backward) &&
        fbuf_rand(P, &dinp, n, -1, 1)) {
        if (ran_ok(P, "rope_backward", shape,
                   Cb->rope_backward(Cb, dinp.c, dout.c, B, T, n_heads, n_rot, HS, theta),
                   G->rope_backward(G, dinp.g, dout.g, B, T, n_heads, n_rot, HS, theta)))
            check(P, "rope_backward.dinp", shape, &dinp, TOL_EXACT, 0);
    }
done:
    fbuf_free(P, &inp);
    fbuf_free(P, &out);
    fbuf_free(P, &dout);
    fbuf_free(P, &dinp);
    fbuf_free(P, &inplace);
}

/* ---- attention ----------------------------------------------------------------------- */

static void case_attention(parity *P, int B, int T, int NH, int NKV, int HS) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[128], op[96];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS;
    size_t natt = (size_t)B * NH * T * T;
    fbuf qkv = {0}, out = {0}, att = {0}, dout = {0}, dqkv = {0}, scratch = {0}, att_in = {0};
    if (!fbuf_rand(P, &qkv, nqkv, -1, 1) || !fbuf_rand(P, &dout, nout, -1, 1)) goto done;

    snprintf(op, sizeof op, "attention_forward[%s]", P->impl);
    if (!supported(P, op, shape, Cb->attention_forward, G->attention_forward) ||
        !fbuf_poison(P, &out, nout) || !fbuf_poison(P, &att, natt))
        goto done;
    if (!ran_ok(P, op, shape, Cb->attention_forward(Cb, out.c, att.c, qkv.c, B, T, NH, NKV, HS),
                G->attention_forward(G, out.g, att.g, qkv.g, B, T, NH, NKV, HS)))
        goto done;
    snprintf(op, sizeof op, "attention_forward[%s].out", P->impl);
    check(P, op, shape, &out, TOL_DEFAULT, 0);
    snprintf(op, sizeof op, "attention_forward[%s].att", P->impl);
    check(P, op, shape, &att, TOL_DEFAULT, 0);

    /* both backwards read the CPU's probabilities, so only the backward is compared */
    snprintf(op, sizeof op, "attention_backward[%s]", P->impl);
    if (supported(P, op, shape, Cb->attention_backward, G->attention_backward) &&
        fbuf_upload(P, &att_in, natt, att.c) && fbuf_rand(P, &dqkv, nqkv, -1, 1) &&
        fbuf_poison(P, &scratch, natt)) {
        if (ran_ok(P, op, shape,
                   Cb->attention_backward(Cb, dqkv.c, scratch.c, dout.c, qkv.c, att_in.c, B, T, NH, NKV, HS),
                   G->attention_backward(G, dqkv.g, scratch.g, dout.g, qkv.g, att_in.g, B, T, NH, NKV, HS))) {
            snprintf(op, sizeof op, "attention_backward[%s].dqkv", P->impl);
            check(P, op, shape, &dqkv, 2.0 * tol_for_sum((double)T * (NH / NKV)), 0);
        }
    }
done:
    fbuf_free(P, &qkv);
    fbuf_free(P, &out);
    fbuf_free(P, &att);
    fbuf_free(P, &dout);
    fbuf_free(P, &dqkv);
    fbuf_free(P, &scratch);
    fbuf_free(P, &att_in);
}

/* ---- fused (flash) attention, fp32 ------------------------------------------------------ */

/* lse holds -INFINITY for rows that see no key: both sides must agree on
 * which rows those are, and the finite rows within tol. */
static void check_lse(parity *P, const char *op, const char *shape, const fbuf *b, double tol) {
    size_t total = b->n + GUARD;
    float *h = malloc(total * sizeof *h);
    if (!h || P->gpu->copy_to_host(P->gpu, h, b->g, total * sizeof(float)) != FORGE_OK) {
        report(P, 0, op, shape, INFINITY, tol, "(copy_to_host failed)");
        free(h);
        return;
    }
    double maxerr = 0.0;
    size_t worst = 0, bad_guard = 0, inf_rows = 0;
    for (size_t i = 0; i < b->n; i++) {
        double c = b->c[i], g = h[i], err;
        if (isinf(c) || isinf(g)) {
            err = (c == g) ? 0.0 : INFINITY;
            inf_rows += isinf(c) != 0;
        } else {
            err = fabs(g - c);
        }
        if (!(err <= maxerr)) {
            maxerr = isnan(err) ? INFINITY : err;
            worst = i;
        }
    }
    for (size_t i = 0; i < GUARD; i++) {
        uint32_t u;
        memcpy(&u, &h[b->n + i], sizeof u);
        if (u != GUARD_BITS) bad_guard++;
    }
    char why[256];
    snprintf(why, sizeof why, "(%zu rows with no visible key; worst at [%zu]: cuda %.9g vs cpu %.9g%s)",
             inf_rows, worst, (double)h[worst], (double)b->c[worst], bad_guard ? "; GUARD OVERWRITTEN" : "");
    report(P, maxerr <= tol && bad_guard == 0, op, shape, maxerr, tol, why);
    free(h);
}

/* Forward (out, lse) and backward (dQ into qkv_q, dK/dV into qkv_kv) of the
 * general Tq/Tk entry against the CPU reference. Tq == Tk uses ONE packed
 * qkv and ONE dqkv, as the trainer does. The backward runs on the CPU's
 * forward results on both sides, so it is compared on its own. */
static void case_flash(parity *P, int B, int Tq, int Tk, int NH, int NKV, int HS) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[128], op[96];
    snprintf(shape, sizeof shape, "B=%d Tq=%d Tk=%d NH=%d NKV=%d HS=%d", B, Tq, Tk, NH, NKV, HS);
    int same = Tq == Tk;
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    size_t nq = (size_t)B * Tq * row, nk = (size_t)B * Tk * row;
    size_t nout = (size_t)B * Tq * NH * HS, nlse = (size_t)B * NH * Tq;
    fbuf qq = {0}, qk = {0}, out = {0}, lse = {0}, dout = {0}, out_in = {0}, lse_in = {0};
    fbuf dq = {0}, dk = {0}, scratch = {0};
    if (!fbuf_rand(P, &qq, nq, -1.5f, 1.5f) || (!same && !fbuf_rand(P, &qk, nk, -1.5f, 1.5f)) ||
        !fbuf_rand(P, &dout, nout, -1, 1))
        goto done;
    const fbuf *kv = same ? &qq : &qk;

    snprintf(op, sizeof op, "flash_attention_forward_ext");
    if (!supported(P, op, shape, Cb->flash_attention_forward_ext, G->flash_attention_forward_ext) ||
        !fbuf_poison(P, &out, nout) || !fbuf_poison(P, &lse, nlse))
        goto done;
    if (!ran_ok(P, op, shape,
                Cb->flash_attention_forward_ext(Cb, out.c, lse.c, qq.c, kv->c, B, Tq, Tk, NH, NKV, HS),
                G->flash_attention_forward_ext(G, out.g, lse.g, qq.g, kv->g, B, Tq, Tk, NH, NKV, HS)))
        goto done;
    check(P, "flash_attention_forward.out", shape, &out, TOL_DEFAULT, 0);
    check_lse(P, "flash_attention_forward.lse", shape, &lse, TOL_DEFAULT);

    snprintf(op, sizeof op, "flash_attention_backward_ext");
    if (!supported(P, op, shape, Cb->flash_attention_backward_ext, G->flash_attention_backward_ext) ||
        !fbuf_upload(P, &out_in, nout, out.c) || !fbuf_upload(P, &lse_in, nlse, lse.c) ||
        !fbuf_rand(P, &dq, nq, -1, 1) || (!same && !fbuf_rand(P, &dk, nk, -1, 1)) ||
        !fbuf_poison(P, &scratch, nlse))
        goto done;
    fbuf *dkv = same ? &dq : &dk;
    if (!ran_ok(P, op, shape,
                Cb->flash_attention_backward_ext(Cb, dq.c, dkv->c, scratch.c, dout.c, qq.c, kv->c, out_in.c,
                                                 lse_in.c, B, Tq, Tk, NH, NKV, HS),
                G->flash_attention_backward_ext(G, dq.g, dkv->g, scratch.g, dout.g, qq.g, kv->g, out_in.g,
                                                lse_in.g, B, Tq, Tk, NH, NKV, HS)))
        goto done;
    /* dK/dV sum up to Tq * group terms, but each is small (P ~ 1/T): a numpy
     * emulation of these kernels at T = 1031 is 5e-6 off in dV (max |dV| 2.7),
     * so the flat fp32 tolerance holds with a margin */
    double tol = TOL_DEFAULT;
    check(P, same ? "flash_attention_backward.dqkv" : "flash_attention_backward.dqkv_q", shape, &dq, tol, 0);
    if (!same) check(P, "flash_attention_backward.dqkv_kv", shape, &dk, tol, 0);
done:
    fbuf_free(P, &qq);
    fbuf_free(P, &qk);
    fbuf_free(P, &out);
    fbuf_free(P, &lse);
    fbuf_free(P, &dout);
    fbuf_free(P, &out_in);
    fbuf_free(P, &lse_in);
    fbuf_free(P, &dq);
    fbuf_free(P, &dk);
    fbuf_free(P, &scratch);
}

/* Two runs of the GPU forward + backward give identical bits (no atomics). */
static void case_flash_deterministic(parity *P, int B, int T, int NH, int NKV, int HS) {
    forge_backend *G = P->gpu;
    char shape[128];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    fbuf qkv = {0}, dout = {0}, out = {0}, lse = {0}, d1 = {0}, d2 = {0}, scr = {0};
    float *h1 = malloc(nqkv * sizeof(float)), *h2 = malloc(nqkv * sizeof(float));
    int ok = h1 && h2 && fbuf_rand(P, &qkv, nqkv, -1.5f, 1.5f) && fbuf_rand(P, &dout, nout, -1, 1) &&
             fbuf_poison(P, &out, nout) && fbuf_poison(P, &lse, nl) && fbuf_rand(P, &d1, nqkv, -1, 1) &&
             fbuf_upload(P, &d2, nqkv, d1.c) && fbuf_poison(P, &scr, nl);
    if (ok) {
        ok = G->flash_attention_forward(G, out.g, lse.g, qkv.g, B, T, NH, NKV, HS) == FORGE_OK &&
             G->flash_attention_backward(G, d1.g, scr.g, dout.g, qkv.g, out.g, lse.g, B, T, NH, NKV, HS) ==
                 FORGE_OK &&
             G->flash_attention_backward(G, d2.g, scr.g, dout.g, qkv.g, out.g, lse.g, B, T, NH, NKV, HS) ==
                 FORGE_OK &&
             G->copy_to_host(G, h1, d1.g, nqkv * sizeof(float)) == FORGE_OK &&
             G->copy_to_host(G, h2, d2.g, nqkv * sizeof(float)) == FORGE_OK;
        if (!ok) report(P, 0, "flash_attention_deterministic", shape, INFINITY, 0, forge_error_message());
        else {
            int same = memcmp(h1, h2, nqkv * sizeof(float)) == 0;
            report(P, same, "flash_attention_deterministic", shape, same ? 0.0 : 1.0, 0.0,
                   same ? NULL : "(two backward runs differ)");
        }
    }
    free(h1);
    free(h2);
    fbuf_free(P, &qkv);
    fbuf_free(P, &dout);
    fbuf_free(P, &out);
    fbuf_free(P, &lse);
    fbuf_free(P, &d1);
    fbuf_free(P, &d2);
    fbuf_free(P, &scr);
}

/* Head sizes above the largest fused fp32 kernel are refused, never miscomputed. */
static void case_flash_unsupported(parity *P) {
    float *x = NULL;
    int ok = P->gpu->mem_alloc(P->gpu, (void **)&x, 4096 * sizeof(float)) == FORGE_OK;
    forge_status s = ok ? P->gpu->flash_attention_forward(P->gpu, x, x + 2048, x + 1024, 1, 4, 2, 1, 130)
                        : FORGE_ERR_OOM;
    report(P, s == FORGE_ERR_UNSUPPORTED, "flash_attention_forward", "HS=130 (expect FORGE_ERR_UNSUPPORTED)",
           s == FORGE_ERR_UNSUPPORTED ? 0.0 : 1.0, 0.0, s == FORGE_ERR_UNSUPPORTED ? NULL : forge_status_name(s));
    if (x) P->gpu->mem_free(P->gpu, x);
}

/* Extra memory of the op path at T = 8192 (B=1, NH=4, HS=64) is O(T): the
 * materialised form would need 2 x 1 GiB of (B,NH,T,T) buffers. */
static void case_flash_memory(parity *P) {
    int B = 1, T = 8192, NH = 4, NKV = 4, HS = 64;
    size_t peak = 0, limit = (size_t)64 << 20;
    forge_status s = attention_peak_bytes(P->gpu, 1, B, T, NH, NKV, HS, &peak);
    char shape[192];
    snprintf(shape, sizeof shape,
             "B=%d T=%d NH=%d HS=%d: op-path peak %.1f MiB (limit 64 MiB; materialised needs >= %.0f MiB)", B, T,
             NH, HS, peak / 1048576.0, 2.0 * B * NH * (double)T * T * 4 / 1048576.0);
    if (s != FORGE_OK) report(P, 0, "flash_attention_memory", shape, INFINITY, 0, forge_error_message());
    else report(P, peak < limit, "flash_attention_memory", shape, (double)peak, (double)limit, NULL);
}

static void run_flash_cases(parity *P) {
    static const int shapes[][6] = {
        /* B, Tq, Tk, NH, NKV, HS */
        {1, 1, 1, 2, 1, 64},       {2, 67, 67, 6, 2, 64},   {2, 67, 67, 6, 6, 64},
        {1, 130, 130, 6, 3, 64},   {1, 257, 257, 4, 1, 64}, {2, 200, 200, 4, 2, 128},
        {1, 129, 129, 2, 2, 128},  {1, 1, 1, 2, 2, 128},    {2, 67, 67, 4, 2, 32},
        {2, 67, 67, 4, 2, 16},     {1, 100, 37, 4, 2, 64},  {1, 150, 10, 2, 1, 128},
        {1, 70, 0, 2, 1, 64},      {1, 50, 130, 4, 2, 64},  {1, 1031, 1031, 4, 2, 64},
        {1, 700, 700, 2, 1, 128},
        /* head sizes on the zero-padded path: 6 and 8 (the test models), odd 7, 100 */
        {2, 67, 67, 6, 2, 6},      {2, 67, 67, 4, 2, 8},    {1, 45, 30, 3, 3, 7},
        {1, 150, 150, 4, 2, 100},
    };
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < n; i++) {
        if (P->quick && shapes[i][1] > 300) continue;
        case_flash(P, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], shapes[i][5]);
    }
    case_flash_deterministic(P, 2, 333, 4, 2, 64);
    case_flash_deterministic(P, 1, 300, 4, 1, 128);
    case_flash_unsupported(P);
    if (!P->quick) case_flash_memory(P);
}

/* ---- classifier ---------------------------------------------------------------------- */

static void case_classifier(parity *P, int N, int V, int ignore_pct, int unit_scale) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[128];
    snprintf(shape, sizeof shape, "N=%d V=%d ignore=%d%% grad_scale=%s", N, V, ignore_pct,
             unit_scale ? "1" : "1/valid");
    fbuf logits = {0}, losses = {0};
    ibuf targets = {0};
    if (!ibuf_rand(P, &targets, N, V, IGNORE_INDEX, ignore_pct) ||
        !fbuf_rand(P, &logits, (size_t)N * V, -5, 5) || !fbuf_poison(P, &losses, N))
        goto done;
    int valid = 0;
    for (int n = 0; n < N; n++) valid += targets.c[n] != IGNORE_INDEX;
    float grad_scale = unit_scale ? 1.0f : 1.0f / (float)(valid > 0 ? valid : 1);
    if (supported(P, "classifier_forward_backward", shape, Cb->classifier_forward_backward,
                  G->classifier_forward_backward) &&
        ran_ok(P, "classifier_forward_backward", shape,
               Cb->classifier_forward_backward(Cb, losses.c, logits.c, targets.c, N, V, IGNORE_INDEX,
                                               grad_scale),
               G->classifier_forward_backward(G, losses.g, logits.g, targets.g, N, V, IGNORE_INDEX,
                                              grad_scale))) {
        check(P, "classifier_forward_backward.losses", shape, &losses, TOL_DEFAULT, 0);
        check(P, "classifier_forward_backward.dlogits", shape, &logits, 1e-6, 0);
    }
done:
    ibuf_free(P, &targets);
    fbuf_free(P, &logits);
    fbuf_free(P, &losses);
}

/* ---- optimizer --------------------------------------------------------------------------- */

static void case_sumsq(parity *P, size_t n) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu", n);
    fbuf x = {0}, s = {0};
    float start = 3.5f;
    if (!fbuf_rand(P, &x, n, -1, 1) || !fbuf_upload(P, &s, 1, &start)) goto done;
    if (supported(P, "sumsq_accumulate", shape, Cb->sumsq_accumulate, G->sumsq_accumulate) &&
        ran_ok(P, "sumsq_accumulate", shape, Cb->sumsq_accumulate(Cb, s.c, x.c, n),
               G->sumsq_accumulate(G, s.g, x.g, n)))
        check(P, "sumsq_accumulate(rel)", shape, &s, 1e-5, 1);
done:
    fbuf_free(P, &x);
    fbuf_free(P, &s);
}

/* clip_mode: 0 clip active, 1 clip inactive (norm below max), 2 clipping
 * disabled (max_grad_norm = 0), 3 grad_sumsq NULL */
static void case_adamw(parity *P, size_t n, int step, int clip_mode) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    static const char *modes[] = {"clip-active", "clip-inactive", "clip-disabled", "sumsq-null"};
    char shape[128];
    snprintf(shape, sizeof shape, "n=%zu step=%d %s", n, step, modes[clip_mode]);
    fbuf param = {0}, grad = {0}, m = {0}, v = {0}, sumsq = {0};
    forge_adamw_params hp = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.1f, .max_grad_norm = 1.0f, .step = step};
    float ss = 0.0f;
    if (!fbuf_rand(P, &param, n, -1, 1) || !fbuf_rand(P, &grad, n, -1, 1) || !fbuf_rand(P, &m, n, -0.1f, 0.1f) ||
        !fbuf_rand(P, &v, n, 1e-4f, 1e-2f))
        goto done;
    for (size_t i = 0; i < n; i++) ss += grad.c[i] * grad.c[i];
    if (clip_mode == 1) hp.max_grad_norm = 2.0f * sqrtf(ss) + 1.0f;
    if (clip_mode == 2) hp.max_grad_norm = 0.0f;
    if (!fbuf_upload(P, &sumsq, 1, &ss)) goto done;
    const float *sc = clip_mode == 3 ? NULL : sumsq.c, *sg = clip_mode == 3 ? NULL : sumsq.g;
    if (supported(P, "adamw_update", shape, Cb->adamw_update, G->adamw_update) &&
        ran_ok(P, "adamw_update", shape, Cb->adamw_update(Cb, param.c, grad.c, m.c, v.c, n, sc, hp),
               G->adamw_update(G, param.g, grad.g, m.g, v.g, n, sg, hp))) {
        check(P, "adamw_update.param", shape, &param, 1e-5, 0);
        check(P, "adamw_update.m", shape, &m, 1e-5, 0);
        check(P, "adamw_update.v", shape, &v, 1e-5, 0);
    }
done:
    fbuf_free(P, &param);
    fbuf_free(P, &grad);
    fbuf_free(P, &m);
    fbuf_free(P, &v);
    fbuf_free(P, &sumsq);
}

/* ---- device memory: the pool recycles every micro-batch ------------------------------------ */

/* A fake training step: persistent params and grads, then `steps`
 * micro-batches that each allocate activations and scratch, touch them on the
 * device, accumulate into the grads and release everything transient. */
static forge_status pool_run_steps(forge_backend *be, int steps, forge_pool_stats *out) {
    forge_pool *pool;
    FORGE_TRY(forge_pool_create(&pool, be));
    forge_status s = FORGE_OK;
    const int64_t wshape[2] = {96, 200};
    forge_tensor *w = NULL, *gw = NULL;
    if ((s = forge_pool_tensor_zeros(pool, &w, FORGE_F32, 2, wshape, 1)) != FORGE_OK) goto done;
    if ((s = forge_pool_tensor_zeros(pool, &gw, FORGE_F32, 2, wshape, 1)) != FORGE_OK) goto done;
    for (int step = 0; step < steps; step++) {
        forge_tensor *acts[12];
        for (int i = 0; i < 12; i++) {
            /* sizes from 4 KiB to several MiB, some sharing a size class */
            int64_t shape[2] = {96, 200 * (1 + (i % 5)) + 37 * i};
            if (i == 11) shape[1] = 1 << 14;
            if ((s = forge_pool_tensor_zeros(pool, &acts[i], FORGE_F32, 2, shape, 0)) != FORGE_OK) goto done;
        }
        void *scratch;
        size_t scratch_bytes = (size_t)3 << 20, scratch_block = 0;
        if ((s = forge_pool_block(pool, &scratch, scratch_bytes, &scratch_block)) != FORGE_OK) goto done;
        if ((s = be->memset_zero(be, scratch, scratch_bytes)) != FORGE_OK) goto done;
        /* gw += acts[0] (same shape as w): real device work on pool memory */
        if ((s = be->accumulate(be, forge_f32(gw), forge_f32(acts[0]), gw->numel)) != FORGE_OK) goto done;
        forge_pool_block_release(pool, scratch, scratch_block);
        forge_pool_release_transient(pool);
    }
    s = be->synchronize(be);
    *out = forge_pool_get_stats(pool);
done:
    forge_pool_destroy(pool);
    return s;
}

static void case_pool(parity *P) {
    forge_pool_stats one, eight;
    forge_status s1 = pool_run_steps(P->gpu, 1, &one);
    if (s1 != FORGE_OK) {
        report(P, 0, "pool_accumulation", "steps=1", INFINITY, 0, forge_error_message());
        return;
    }
    forge_status s8 = pool_run_steps(P->gpu, 8, &eight);
    if (s8 != FORGE_OK) {
        report(P, 0, "pool_accumulation", "steps=8", INFINITY, 0, forge_error_message());
        return;
    }
    char shape[256];
    snprintf(shape, sizeof shape,
             "steps=1 vs 8: peak_in_use %zu vs %zu, peak_reserved %zu vs %zu, backend_allocs %zu vs %zu",
             one.peak_in_use, eight.peak_in_use, one.peak_reserved, eight.peak_reserved,
             one.backend_allocs, eight.backend_allocs);
    int ok = one.peak_in_use == eight.peak_in_use && one.peak_reserved == eight.peak_reserved &&
             one.backend_allocs == eight.backend_allocs && eight.cache_hits > 0;
    report(P, ok, "pool_accumulation", shape, ok ? 0.0 : 1.0, 0.0, NULL);
}

/* ---- driver -------------------------------------------------------------------------------- */

/* ---- forge_gemm_fp8_nt / forge_gemm_tf32_nt (not backend ops: called directly) ----
 * Values m/8 with m uniform in -8..8: exact in e4m3, e5m2, bf16 and tf32, so a double reference of the same
 * values is exact; products and sums are multiples of 2^-6. Compared as relative Frobenius error (printed as
 * maxerr): promoted fp8 <= 1e-3 (QGMMA truncates within a 128-K stage), fast accum and bf16 output <= 1e-2,
 * tf32 <= 1e-5 (exact inputs, fp32 accumulation). C is poisoned first (an unwritten element is a NaN: FAIL). */

static uint8_t fp8_encode(double v, int e5m2) { /* v = m/8, |m| <= 8 */
    if (v == 0.0) return 0;
    const uint8_t sign = v < 0 ? 0x80 : 0;
    int e;
    const double f = frexp(fabs(v), &e); /* |v| = f * 2^e, f in [0.5, 1) */
    const int exp = e - 1, mbits = e5m2 ? 2 : 3;
    const int man = (int)((f * 2.0 - 1.0) * (1 << mbits));
    return (uint8_t)(sign | ((exp + (e5m2 ? 15 : 7)) << mbits) | man);
}

/* case_gemm_fp8's modes: the 2-CTA cluster ones (fp8_mode_cluster) run last */
enum { N_MODES = 36 };
static int fp8_mode_cluster(int mode) { return (mode >= 12 && mode <= 14) || mode == 28 || mode == 29 || mode == 32; }

static void case_gemm_fp8(parity *P, int M, int N, int K, int mode) {
    /* mode 0: e4m3 x e4m3 fp32 out; 1: e5m2 x e4m3; 2: bf16 out; 3: fast accum; 4: tf32; 5, 6: modes 0, 1 with
     * pipelined promotion (the shapes' K/128 tile counts 1, 3, 5 and 8 cover both of its drains); 7, 8, 9: modes
     * 0, 1, 2 with chunk64 promotion (BN 256: N = 8, 200, 192 one partial column tile, 999 four, the last partial;
     * K/128 = 1, 3, 5, 8 stages: 1 is the tile with no previous chunk 3 to retire); 10, 11:
     * modes 0, 1 with chunk128 promotion; 12, 13: modes 0, 1 with chunk64 on 2-CTA clusters (B multicast; M = 1,
     * 128, 257 leave the second CTA of the last pair a phantom row-block); 14: fast accum on 2-CTA clusters.
     * Epilogue (rung 4e): modes 0-11 take the default store, the TMA-store epilogue where C allows it (fp32:
     * N % 4 == 0, bf16: N % 8 == 0, C 16-byte aligned: N = 8, 200, 192 here; boxes clipped at M and N, boxes
     * wholly outside skipped: M = 1, 130, N = 8, 200) and the direct store at N = 999; 15-18: modes 0, 2, 4, 7 with
     * FORGE_GEMM_STORE_DIRECT (the direct store on the TMA-capable shapes too); 19, 20: modes 0 and 4 with C at
     * a 4-byte offset from a 16-byte boundary (fp32 N % 4 == 0 but C not 16-byte aligned: the default must fall
     * back to the direct store, and write exactly C's M x N elements); 21, 22: tf32 on the ping-pong schedule
     * (refused where N % 4 != 0) and on the cooperative one (mode 4 takes ping-pong at K <= 1024 where C allows
     * the TMA store); 23, 24: modes 0, 1 with chunk64 and A from registers (ldmatrix of the swizzled stage, two
     * buffers: a wrong address or a buffer read before its load shows as a wrong result; K/128 = 1, 3, 5, 8 cover
     * the odd tail and the unrolled pair); 25, 26, 27: modes 0, 1, 2 with the pipelined promotion at BN 144 (a
     * 144-column tile: N = 8, 200, 192 one or two partial column tiles, 999 = 6 x 144 + 135, 1408 = 9 x 144 + 112;
     * the direct store always); 28, 29: modes 0, 1 with it on 2-CTA clusters (72-row B halves multicast); 30, 31:
     * modes 0, 1 with the rotated serial promotion at BN 144 (K/128 = 1: no loop iteration); 32: mode 0 with it on
     * 2-CTA clusters; 33: mode 25 with FORGE_GEMM_STORE_TMA (16-column unswizzled staging boxes, 9 per 144-wide
     * tile; refused where C does not allow the TMA store: falls back to direct); 34: bf16 A and B on the ping-pong
     * kernel (forge_gemm_bf16_nt_pp; the same exact values, tolerance as tf32; refused where N % 4 != 0); 35: mode
     * 34 with a bias (N exact values m/8, added in the epilogue; columns past N must not read it). */
    static const char *const names[N_MODES] = {
        "gemm_fp8[e4m3]",           "gemm_fp8[e5m2xe4m3]",         "gemm_fp8[e4m3,bf16out]",
        "gemm_fp8[e4m3,fastacc]",   "gemm_tf32",                   "gemm_fp8[e4m3,pipe]",
        "gemm_fp8[e5m2xe4m3,pipe]", "gemm_fp8[e4m3,chunk64]",      "gemm_fp8[e5m2xe4m3,chunk64]",
        "gemm_fp8[e4m3,bf16out,chunk64]", "gemm_fp8[e4m3,chunk128]", "gemm_fp8[e5m2xe4m3,chunk128]",
        "gemm_fp8[e4m3,chunk64c2]", "gemm_fp8[e5m2xe4m3,chunk64c2]", "gemm_fp8[e4m3,fastacc,c2]",
        "gemm_fp8[e4m3,direct]",    "gemm_fp8[e4m3,bf16out,direct]", "gemm_tf32[direct]",
        "gemm_fp8[e4m3,chunk64,direct]", "gemm_fp8[e4m3,C+4B]",   "gemm_tf32[C+4B]",
        "gemm_tf32[pp]",            "gemm_tf32[coop]",             "gemm_fp8[e4m3,chunk64ra]",
        "gemm_fp8[e5m2xe4m3,chunk64ra]", "gemm_fp8[e4m3,pipe144]", "gemm_fp8[e5m2xe4m3,pipe144]",
        "gemm_fp8[e4m3,bf16out,pipe144]", "gemm_fp8[e4m3,pipe144c2]", "gemm_fp8[e5m2xe4m3,pipe144c2]",
        "gemm_fp8[e4m3,serial144]", "gemm_fp8[e5m2xe4m3,serial144]", "gemm_fp8[e4m3,serial144c2]",
        "gemm_fp8[e4m3,pipe144,tma]", "gemm_bf16[pp]", "gemm_bf16[pp,bias]"};
    static const double tols[N_MODES] = {1e-3, 1e-3, 1e-2, 1e-2, 1e-5, 1e-3, 1e-3, 1e-3, 1e-3, 1e-2, 1e-3,
                                         1e-3, 1e-3, 1e-3, 1e-2, 1e-3, 1e-2, 1e-5, 1e-3, 1e-3, 1e-5,
                                         1e-5, 1e-5, 1e-3, 1e-3, 1e-3, 1e-3, 1e-2, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-5, 1e-5};
    const int a_e5m2 =
        mode == 1 || mode == 6 || mode == 8 || mode == 11 || mode == 13 || mode == 24 || mode == 26 || mode == 29 || mode == 31;
    const int out_bf16 = mode == 2 || mode == 9 || mode == 16 || mode == 27;
    const int tf32 = mode == 4 || mode == 17 || mode == 20 || mode == 21 || mode == 22;
    const int bf16in = mode == 34 || mode == 35, with_bias = mode == 35;
    const forge_gemm_store store = mode >= 15 && mode <= 18 ? FORGE_GEMM_STORE_DIRECT
                                   : mode == 33             ? FORGE_GEMM_STORE_TMA
                                                            : FORGE_GEMM_STORE_AUTO;
    const size_t c_off = mode == 19 || mode == 20 ? 4 : 0; /* bytes: C 4 bytes past cudaMalloc's 256-byte alignment */
    const forge_fp8_accum accum = mode == 3                ? FORGE_FP8_FAST_ACCUM
                                  : mode == 5 || mode == 6 ? FORGE_FP8_PROMOTE_PIPELINED
                                  : (mode >= 7 && mode <= 9) || mode == 18 ? FORGE_FP8_PROMOTE_CHUNK64
                                  : mode == 10 || mode == 11 ? FORGE_FP8_PROMOTE_CHUNK128
                                  : mode == 12 || mode == 13 ? FORGE_FP8_PROMOTE_CHUNK64_C2
                                  : mode == 14               ? FORGE_FP8_FAST_ACCUM_C2
                                  : mode == 23 || mode == 24 ? FORGE_FP8_PROMOTE_CHUNK64_RA
                                  : (mode >= 25 && mode <= 27) || mode == 33 ? FORGE_FP8_PROMOTE_PIPE144
                                  : mode == 28 || mode == 29 ? FORGE_FP8_PROMOTE_PIPE144_C2
                                  : mode == 30 || mode == 31 ? FORGE_FP8_PROMOTE_SERIAL144
                                  : mode == 32               ? FORGE_FP8_PROMOTE_SERIAL144_C2
                                                             : FORGE_FP8_PROMOTE;
    char shape[64];
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d", M, N, K);
    const size_t an = (size_t)M * K, bn = (size_t)N * K, cn = (size_t)M * N;
    double *a = malloc(an * sizeof *a), *b = malloc(bn * sizeof *b);
    uint8_t *a8 = malloc(an), *b8 = malloc(bn);
    float *a32 = malloc(an * 4), *b32 = malloc(bn * 4), *c = malloc(cn * 4);
    uint16_t *a16 = malloc(an * 2), *b16 = malloc(bn * 2); /* bf16: the top half of the fp32 bits (exact here) */
    float *bias = malloc((size_t)N * 4);
    void *dBias = NULL;
    uint16_t *c16 = (uint16_t *)c;
    void *dA = NULL, *dB = NULL, *dC = NULL;
    int ok = a && b && a8 && b8 && a32 && b32 && c && a16 && b16 && bias;
    for (int n = 0; ok && n < N; n++) bias[n] = (float)(((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0);
    for (size_t i = 0; ok && i < an; i++) {
        a[i] = ((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0;
        a8[i] = fp8_encode(a[i], a_e5m2);
        a32[i] = (float)a[i];
        uint32_t u;
        memcpy(&u, &a32[i], 4);
        a16[i] = (uint16_t)(u >> 16);
    }
    for (size_t i = 0; ok && i < bn; i++) {
        b[i] = ((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0;
        b8[i] = fp8_encode(b[i], 0);
        b32[i] = (float)b[i];
        uint32_t u;
        memcpy(&u, &b32[i], 4);
        b16[i] = (uint16_t)(u >> 16);
    }
    const size_t ea = tf32 ? 4 : bf16in ? 2 : 1;
    const void *ha = tf32 ? (const void *)a32 : bf16in ? (const void *)a16 : (const void *)a8;
    const void *hb = tf32 ? (const void *)b32 : bf16in ? (const void *)b16 : (const void *)b8;
    /* C: cn * 4 bytes at c_off into the allocation, plus 16 guard bytes after it (poisoned like C: a write past
     * C's M x N elements shows as a guard byte changed) */
    if (ok) ok = cudaMalloc(&dA, an * ea) == cudaSuccess && cudaMalloc(&dB, bn * ea) == cudaSuccess &&
                 cudaMalloc(&dC, c_off + cn * 4 + 16) == cudaSuccess;
    if (ok) ok = cudaMemcpy(dA, ha, an * ea, cudaMemcpyHostToDevice) == cudaSuccess &&
                 cudaMemcpy(dB, hb, bn * ea, cudaMemcpyHostToDevice) == cudaSuccess &&
                 cudaMemset(dC, 0xFF, c_off + cn * 4 + 16) == cudaSuccess;
    if (ok && with_bias)
        ok = cudaMalloc(&dBias, (size_t)N * 4) == cudaSuccess &&
             cudaMemcpy(dBias, bias, (size_t)N * 4, cudaMemcpyHostToDevice) == cudaSuccess;
    if (!ok) {
        report(P, 0, names[mode], shape, INFINITY, tols[mode], "(host or device allocation failed)");
        goto done;
    }
    const float sa = 0.5f, sb = 0.25f;
    forge_status s;
    void *dCv = (char *)dC + c_off;
    if (bf16in)
        s = forge_gemm_bf16_nt_pp(dA, dB, (float *)dCv, with_bias ? (const float *)dBias : NULL, M, N, K, NULL);
    else if (tf32)
        s = forge_gemm_tf32_nt_sched(dA, dB, (float *)dCv, M, N, K, store,
                                     mode == 21   ? FORGE_GEMM_SCHED_PINGPONG
                                     : mode == 22 ? FORGE_GEMM_SCHED_COOP
                                                  : FORGE_GEMM_SCHED_AUTO,
                                     NULL);
    else
        s = forge_gemm_fp8_nt_store(dA, a_e5m2 ? FORGE_FP8_E5M2 : FORGE_FP8_E4M3, dB, FORGE_FP8_E4M3, dCv,
                                    out_bf16 ? FORGE_GEMM_OUT_BF16 : FORGE_GEMM_OUT_F32, sa, sb, M, N, K, accum, store,
                                    NULL);
    if ((mode == 21 || bf16in) && N % 4 != 0) { /* ping-pong stores through TMA only: a refusal, not a fallback */
        report(P, s == FORGE_ERR_UNSUPPORTED, names[mode], shape, s == FORGE_ERR_UNSUPPORTED ? 0.0 : INFINITY,
               tols[mode], "(expects FORGE_ERR_UNSUPPORTED: N % 4 != 0)");
        goto done;
    }
    if (s != FORGE_OK) {
        char why[512];
        snprintf(why, sizeof why, "(returned %s: %s)", forge_status_name(s), forge_error_message());
        report(P, 0, names[mode], shape, INFINITY, tols[mode], why);
        goto done;
    }
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpy(c, dCv, cn * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
        report(P, 0, names[mode], shape, INFINITY, tols[mode], "(kernel or copy failed)");
        goto done;
    }
    {
        /* the bytes around C must still be poison: c_off before it, 16 after its M x N elements (4 or 2 bytes) */
        unsigned char guard[32];
        const size_t c_bytes = cn * (out_bf16 ? 2 : 4);
        int intact = cudaMemcpy(guard, (char *)dCv + c_bytes, 16, cudaMemcpyDeviceToHost) == cudaSuccess &&
                     (c_off == 0 || cudaMemcpy(guard + 16, dC, c_off, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (size_t g = 0; intact && g < 16 + c_off; g++) intact = guard[g] == 0xFF;
        if (!intact) {
            report(P, 0, names[mode], shape, INFINITY, tols[mode], "(wrote outside C, or the guard copy failed)");
            goto done;
        }
    }
    const double scale = tf32 || bf16in ? 1.0 : (double)sa * sb;
    double d2 = 0.0, r2 = 0.0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double r = 0.0;
            for (int k = 0; k < K; k++) r += a[(size_t)m * K + k] * b[(size_t)n * K + k];
            r *= scale;
            if (with_bias) r += bias[n];
            double v;
            if (out_bf16) {
                uint32_t u = (uint32_t)c16[(size_t)m * N + n] << 16;
                float f;
                memcpy(&f, &u, 4);
                v = f;
            } else {
                v = c[(size_t)m * N + n];
            }
            d2 += (v - r) * (v - r); /* NaN (poison) propagates: FAIL */
            r2 += r * r;
        }
    const double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    report(P, rel <= tols[mode], names[mode], shape, rel, tols[mode], NULL);
done:
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cudaFree(dBias);
    free(a), free(b), free(a8), free(b8), free(a32), free(b32), free(c), free(a16), free(b16), free(bias);
}

/* Arguments the fp8 / tf32 paths must refuse with FORGE_ERR_UNSUPPORTED (checked before any device work). */
static void case_gemm_fp8_refusals(parity *P) {
    static uint8_t dummy[64] __attribute__((aligned(16)));
    const forge_status k20 = forge_gemm_fp8_nt(dummy, FORGE_FP8_E4M3, dummy, FORGE_FP8_E4M3, dummy,
                                               FORGE_GEMM_OUT_F32, 1.0f, 1.0f, 4, 4, 20, FORGE_FP8_PROMOTE, NULL);
    report(P, k20 == FORGE_ERR_UNSUPPORTED, "gemm_fp8[refuse]", "K=20 (K % 16 != 0)", 0, 0, NULL);
    const forge_status b5 = forge_gemm_fp8_nt(dummy, FORGE_FP8_E4M3, dummy, FORGE_FP8_E5M2, dummy,
                                              FORGE_GEMM_OUT_F32, 1.0f, 1.0f, 4, 4, 16, FORGE_FP8_PROMOTE, NULL);
    report(P, b5 == FORGE_ERR_UNSUPPORTED, "gemm_fp8[refuse]", "B e5m2 (not built)", 0, 0, NULL);
    const forge_status t6 = forge_gemm_tf32_nt((const float *)dummy, (const float *)dummy, (float *)dummy, 4, 4, 6,
                                               NULL);
    report(P, t6 == FORGE_ERR_UNSUPPORTED, "gemm_tf32[refuse]", "K=6 (K % 4 != 0)", 0, 0, NULL);
}

/* ---- forge_gemm_bf16_tn_wgmma_reduce: the split-K reductions (dW = A (K,M)^T . B (K,N)) ----
 * exact: values m/8 (|m| <= 8, exact in bf16), so every partial and every sum is a multiple of 2^-6 below 2^17:
 * exact in fp32 in any order; PASS, PASS_TMA (TMA-stored partials where M % 128 == 0, else PASS), PASS_T192
 * (192 x 192 tiles), PASS_C192 (the same tiles, two warpgroups splitting N), DEFAULT, INKERNEL and STREAMK must all
 * equal the double reference exactly; random: PASS_TMA bit-identical to PASS, PASS_T192, PASS_C192 and DEFAULT
 * within fp32 summation error of it (a wrong slot, a lost split or a read of an unwritten slot shows as a nonzero
 * error). random: uniform bf16 values, INKERNEL run
 * twice must give the same bits, and equal PASS element for element (both sum splits 0..S-1 in order, then C).
 * accumulate: C starts as 1 + (i % 7) / 8 and the product is added. C is poisoned (NaN) otherwise. */
#include "../src/backend/cuda/gemm.h"

static uint16_t tn_bf16_bits(float f) { /* exact values only (m/8 or already-rounded) */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* max over i of |x[i] - ref[i]| / scale (scale 0: 1); a NaN sticks */
static double tn_max_rel_diff(const float *x, const float *ref, size_t n, double scale) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)x[i] - (double)ref[i]) / (scale > 0.0 ? scale : 1.0);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static void case_gemm_tn_reduce(parity *P, int M, int N, int K, int accumulate) {
    char shape[96];
    snprintf(shape, sizeof shape, "M=%d N=%d K=%d%s", M, N, K, accumulate ? " C+=" : "");
    const size_t an = (size_t)K * M, bn = (size_t)K * N, cn = (size_t)M * N;
    float *a = malloc(an * 4), *b = malloc(bn * 4), *c0 = malloc(cn * 4), *cp = malloc(cn * 4),
          *cf = malloc(cn * 4), *cf2 = malloc(cn * 4), *cs = malloc(cn * 4), *cs2 = malloc(cn * 4),
          *ct = malloc(cn * 4), *c192 = malloc(cn * 4), *cc192 = malloc(cn * 4),
          *cdef = malloc(cn * 4);
    uint16_t *a16 = malloc(an * 2), *b16 = malloc(bn * 2);
    void *dA = NULL, *dB = NULL, *dC = NULL, *dW = NULL;
    size_t wbytes = 0;
    int ok = a && b && c0 && cp && cf && cf2 && cs && cs2 && ct && c192 && cc192 && cdef && a16 && b16 &&
             forge_gemm_bf16_tn_workspace(M, N, K, &wbytes) == FORGE_OK &&
             cudaMalloc(&dA, an * 2) == cudaSuccess && cudaMalloc(&dB, bn * 2) == cudaSuccess &&
             cudaMalloc(&dC, cn * 4) == cudaSuccess && cudaMalloc(&dW, wbytes ? wbytes : 16) == cudaSuccess;
    if (!ok) {
        report(P, 0, "gemm_tn_reduce", shape, INFINITY, 0, "(allocation or workspace query failed)");
        goto done;
    }
    for (size_t i = 0; i < cn; i++) c0[i] = accumulate ? 1.0f + (float)(i % 7) / 8.0f : NAN;
    for (int pass = 0; pass < 2 && ok; pass++) { /* 0: exact values, 1: random bf16 */
        for (size_t i = 0; i < an; i++) {
            a[i] = pass == 0 ? (float)((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0f
                             : (float)(forge_rng_u32(&P->rng) >> 8) / 16777216.0f * 2.0f - 1.0f;
            a16[i] = tn_bf16_bits(a[i]); /* random: truncated to bf16 (the same bits both runs see) */
        }
        for (size_t i = 0; i < bn; i++) {
            b[i] = pass == 0 ? (float)((int)(forge_rng_u32(&P->rng) % 17) - 8) / 8.0f
                             : (float)(forge_rng_u32(&P->rng) >> 8) / 16777216.0f * 2.0f - 1.0f;
            b16[i] = tn_bf16_bits(b[i]);
        }
        ok = cudaMemcpy(dA, a16, an * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(dB, b16, bn * 2, cudaMemcpyHostToDevice) == cudaSuccess;
        float *outs[9] = {cp, cf, cf2, cs, cs2, ct, c192, cc192, cdef};
        const forge_gemm_tn_reduce modes[9] = {FORGE_GEMM_TN_REDUCE_PASS,      FORGE_GEMM_TN_REDUCE_INKERNEL,
                                               FORGE_GEMM_TN_REDUCE_INKERNEL,  FORGE_GEMM_TN_REDUCE_STREAMK,
                                               FORGE_GEMM_TN_REDUCE_STREAMK,   FORGE_GEMM_TN_REDUCE_PASS_TMA,
                                               FORGE_GEMM_TN_REDUCE_PASS_T192, FORGE_GEMM_TN_REDUCE_PASS_C192,
                                               FORGE_GEMM_TN_REDUCE_DEFAULT};
        for (int r = 0; r < 9 && ok; r++) {
            ok = cudaMemcpy(dC, c0, cn * 4, cudaMemcpyHostToDevice) == cudaSuccess;
            if (!ok) break;
            /* poison the workspace: a slot read before it is written shows (NaN) */
            ok = cudaMemset(dW, 0xFF, wbytes ? wbytes : 16) == cudaSuccess;
            forge_status st = forge_gemm_bf16_tn_wgmma_reduce(dA, dB, dC, M, N, K, accumulate, dW, wbytes, modes[r], NULL);
            if (st != FORGE_OK) {
                char why[512];
                snprintf(why, sizeof why, "(returned %s: %s)", forge_status_name(st), forge_error_message());
                report(P, 0, "gemm_tn_reduce", shape, INFINITY, 0, why);
                goto done;
            }
            ok = cudaDeviceSynchronize() == cudaSuccess &&
                 cudaMemcpy(outs[r], dC, cn * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
        }
        if (!ok) {
            report(P, 0, "gemm_tn_reduce", shape, INFINITY, 0, "(kernel or copy failed)");
            goto done;
        }
        char sub[224];
        if (pass == 0) {
            double worst = 0.0, *ref = calloc(cn, sizeof *ref);
            if (ref == NULL) {
                report(P, 0, "gemm_tn_reduce", shape, INFINITY, 0, "(host allocation failed)");
                goto done;
            }
            for (int k = 0; k < K; k++) /* k outer: both operands are (K, mn) rows */
                for (int m = 0; m < M; m++) {
                    const double am = a[(size_t)k * M + m];
                    double *rr = ref + (size_t)m * N;
                    const float *bk = b + (size_t)k * N;
                    for (int n = 0; n < N; n++) rr[n] += am * (double)bk[n];
                }
            for (size_t i = 0; i < cn; i++) {
                const double r = ref[i] + (accumulate ? (double)c0[i] : 0.0);
                const double e1 = fabs(cp[i] - r), e2 = fabs(cf[i] - r), e3 = fabs(cs[i] - r), e4 = fabs(ct[i] - r),
                             e5 = fabs(c192[i] - r), e6 = fabs(cc192[i] - r), e7 = fabs(cdef[i] - r);
                double e = e1 > e2 ? (e1 > e3 ? e1 : e3) : (e2 > e3 ? e2 : e3);
                if (!(e4 <= e)) e = e4;
                if (!(e5 <= e)) e = e5;
                if (!(e6 <= e)) e = e6;
                if (!(e7 <= e)) e = e7;
                if (!(e <= worst)) worst = e; /* NaN sticks */
            }
            free(ref);
            snprintf(sub, sizeof sub, "%s exact pass+inkernel+streamk+pass_tma+pass_t192+pass_c192+default", shape);
            report(P, worst == 0.0, "gemm_tn_reduce", sub, worst, 0.0, NULL);
        } else {
            size_t diff_runs = 0, diff_modes = 0, diff_tma = 0;
            for (size_t i = 0; i < cn; i++) {
                if (memcmp(&cf[i], &cf2[i], 4) != 0) diff_runs++;
                if (!(cf[i] == cp[i])) diff_modes++;
                if (memcmp(&ct[i], &cp[i], 4) != 0) diff_tma++;
            }
            /* PASS_TMA stores the same partials another way: bit-identical to PASS */
            snprintf(sub, sizeof sub, "%s random: pass_tma vs pass %zu bits differ", shape, diff_tma);
            report(P, diff_tma == 0, "gemm_tn_reduce", sub, (double)diff_tma, 0.0, NULL);
            snprintf(sub, sizeof sub, "%s random: inkernel run-to-run %zu bits differ, vs pass %zu", shape,
                     diff_runs, diff_modes);
            report(P, diff_runs == 0 && diff_modes == 0, "gemm_tn_reduce", sub, (double)(diff_runs + diff_modes),
                   0.0, NULL);
            /* stream-K cuts K elsewhere, so its sums round differently from the pass: bit-reproducible run to
             * run, and within fp32 summation error of the pass (relative to the largest |C|) */
            size_t sk_runs = 0;
            double scale = 0.0, sk_err = 0.0;
            for (size_t i = 0; i < cn; i++) {
                if (memcmp(&cs[i], &cs2[i], 4) != 0) sk_runs++;
                if (fabs(cp[i]) > scale) scale = fabs(cp[i]);
            }
            sk_err = tn_max_rel_diff(cs, cp, cn, scale);
            snprintf(sub, sizeof sub, "%s random: streamk run-to-run %zu bits differ, vs pass rel", shape, sk_runs);
            report(P, sk_runs == 0 && sk_err <= 1e-5, "gemm_tn_reduce", sub, sk_err, 1e-5, NULL);
            /* the 192 x 192 tiles (three warpgroups: T192; two splitting N: C192, the same K split) and DEFAULT (one
             * of C192 / PASS_TMA / PASS by the shape) split K elsewhere too: within fp32 summation error of the pass;
             * how many bits C192 differs from T192 is printed */
            size_t c192_bits = 0;
            for (size_t i = 0; i < cn; i++)
                if (memcmp(&cc192[i], &c192[i], 4) != 0) c192_bits++;
            const double t192_err = tn_max_rel_diff(c192, cp, cn, scale);
            const double c192_err = tn_max_rel_diff(cc192, cp, cn, scale);
            const double def_err = tn_max_rel_diff(cdef, cp, cn, scale);
            snprintf(sub, sizeof sub, "%s random: pass_t192 vs pass rel", shape);
            report(P, t192_err <= 1e-5, "gemm_tn_reduce", sub, t192_err, 1e-5, NULL);
            snprintf(sub, sizeof sub, "%s random: pass_c192 vs pass rel (%zu bits differ from pass_t192)", shape,
                     c192_bits);
            report(P, c192_err <= 1e-5, "gemm_tn_reduce", sub, c192_err, 1e-5, NULL);
            snprintf(sub, sizeof sub, "%s random: default vs pass rel", shape);
            report(P, def_err <= 1e-5, "gemm_tn_reduce", sub, def_err, 1e-5, NULL);
        }
    }
done:
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dW);
    free(a), free(b), free(c0), free(cp), free(cf), free(cf2), free(cs), free(cs2), free(ct), free(c192), free(cc192);
    free(cdef), free(a16), free(b16);
}

static void run_gemm_tn_cases(parity *P) {
    /* {M, N, K, accumulate}: 4 tiles with many splits; M % 128 = 8 and N % 256 = 8 (padded slots, skipped
     * boxes) with a K tail; one tile; the GPT-2 dW fc shape (3072 x 768) at K = 1024; 512 tiles of 2 K-tiles
     * (stream-K: ~7.8 iterations per CTA, so whole tiles between the shared ones, both slots of a CTA in use) */
    static const int shapes[][4] = {{256, 512, 8192, 0}, {136, 264, 4104, 1}, {128, 256, 2048, 0},
                                    {3072, 768, 1024, 1}, {4096, 4096, 128, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (P->quick && (long long)shapes[i][0] * shapes[i][1] * shapes[i][2] > 300000000LL) continue;
        case_gemm_tn_reduce(P, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
    }
}

static void run_gemm_fp8_cases(parity *P) {
    case_gemm_fp8_refusals(P);
    /* the last two: >= 132 tiles of 128 x 256, so tf32 and fast accum take BN 256, and a last column tile with at
     * most 128 columns left (1408 = 5 x 256 + 128, TMA store; 1290 = 5 x 256 + 10, direct store): the half-width
     * MMA of fp8_plain_tile */
    static const int shapes[][3] = {{1, 8, 16},        {130, 200, 272},  {257, 999, 528},
                                    {128, 192, 1024},  {2944, 1408, 32}, {2945, 1290, 48}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (P->quick && (long long)shapes[i][0] * shapes[i][1] * shapes[i][2] > 20000000LL) continue;
        for (int mode = 0; mode < N_MODES; mode++)
            if (!fp8_mode_cluster(mode)) case_gemm_fp8(P, shapes[i][0], shapes[i][1], shapes[i][2], mode);
    }
    /* BN 192 (serial promotion only): on a 132-SM H200 fp8_pick_bn takes 192 at M=5760 N=384 (135 tiles of 128
     * = 2 waves, 90 of 192 = 1), but FORGE_FP8_PROMOTE picks chunk64 there unless FORGE_FP8_PROMOTE_VARIANT=serial:
     * run FORGE_FP8_PROMOTE_VARIANT=serial FORGE_GPU_TESTS_ONLY=gemm_fp8 to cover the BN 192 kernels, whose TMA
     * epilogue has 4 stages and, with bf16 out, an odd box count per tile (3). Both epilogues, fp32 and bf16
     * out. */
    /* tf32 ping-pong with several 128 x 128 tiles per warpgroup (512 / 520 tiles on 132 SMs) and ktiles = 4 (not a
     * multiple of the 6 stages): the ring slots and parities each warpgroup computes for its alternate tiles, and the
     * order barriers, over many turns; 4100 rows leave a partial last row-block */
    case_gemm_fp8(P, 4096, 1024, 100, 21);
    if (!P->quick) case_gemm_fp8(P, 4100, 1040, 128, 21);
    /* the same for the bf16 ping-pong kernel (64 bf16 per stage: K = 200 is 4 K-tiles, the last 8 wide; 264 is 5) */
    case_gemm_fp8(P, 4096, 1024, 200, 34);
    if (!P->quick) case_gemm_fp8(P, 4100, 1040, 264, 34);
    if (!P->quick) case_gemm_fp8(P, 4100, 1036, 264, 35); /* + bias; 1036 = 8 x 128 + 12: a partial column tile */
    /* the 144-wide pipelined promotion over many tiles per CTA: 17 x 11 = 187 tiles of 128 x 144 on 132 SMs, 9
     * K-tiles (odd: the tail stage; K % 128 = 16) against 6 stages, so the ring's slots and parities carry across
     * tiles; the last column tile is 60 wide */
    if (!P->quick) case_gemm_fp8(P, 2176, 1500, 1040, 25);
    if (!P->quick) case_gemm_fp8(P, 2176, 1500, 1040, 30);
    if (!P->quick) case_gemm_fp8(P, 2176, 1500, 1040, 33);
    if (!P->quick) {
        static const int modes192[] = {0, 2, 15, 16};
        for (size_t j = 0; j < sizeof modes192 / sizeof modes192[0]; j++) case_gemm_fp8(P, 5760, 384, 128, modes192[j]);
    }
    /* the 2-CTA cluster modes last: a protocol bug there traps (mbarrier timeout) and takes the CUDA context,
     * so every case after it fails; this keeps the other modes' verdicts */
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (P->quick && (long long)shapes[i][0] * shapes[i][1] * shapes[i][2] > 20000000LL) continue;
        for (int mode = 0; mode < N_MODES; mode++)
            if (fp8_mode_cluster(mode)) case_gemm_fp8(P, shapes[i][0], shapes[i][1], shapes[i][2], mode);
    }
    /* the same many-tile shape on 2-CTA clusters: 17 row-blocks, so the last pair's second CTA is a phantom */
    if (!P->quick) case_gemm_fp8(P, 2176, 1500, 1040, 28);
    if (!P->quick) case_gemm_fp8(P, 2176, 1500, 1040, 32);
}

static void run_matmul_cases(parity *P) {
    static const int shapes[][3] = {
        {1, 45, 29}, {37, 45, 29}, {37, 768, 29}, {130, 129, 131}, {64, 64, 64},
        {257, 768, 3072}, {257, 3072, 768}, {1031, 200, 2100},
        {1001, 45, 130}, /* tf32: dW (130x45, K = 1001) takes split-K with scalar loads */
    };
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < n; i++) {
        if (P->quick && (long long)shapes[i][0] * shapes[i][1] * shapes[i][2] > 50000000LL) continue;
        case_matmul(P, shapes[i][0], shapes[i][1], shapes[i][2], 1);
        case_matmul(P, shapes[i][0], shapes[i][1], shapes[i][2], 0);
    }
}

static void run_attention_cases(parity *P) {
    static const int shapes[][5] = {
        /* B, T, NH, NKV, HS */
        {2, 67, 6, 2, 64}, {2, 67, 6, 6, 64}, {2, 67, 6, 2, 6}, {2, 67, 6, 6, 6},
        {1, 1, 2, 1, 8},   {1, 130, 6, 3, 64}, {2, 200, 4, 2, 32}, {1, 257, 4, 1, 64},
    };
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < n; i++) {
        if (P->quick && shapes[i][1] > 130) continue;
        case_attention(P, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4]);
    }
}

/* A second CUDA backend with FORGE_MATMUL = impl, for the GEMM-backed ops. */
static void run_with_impl(parity *P, const char *impl, int with_attention) {
    const char *saved = getenv("FORGE_MATMUL");
    char *saved_copy = saved ? strdup(saved) : NULL;
    setenv("FORGE_MATMUL", impl, 1);
    forge_backend *gpu = NULL;
    forge_status s = forge_cuda_backend_create(&gpu, 0);
    if (saved_copy) setenv("FORGE_MATMUL", saved_copy, 1);
    else unsetenv("FORGE_MATMUL");
    free(saved_copy);
    if (s != FORGE_OK) {
        report(P, 0, "cuda_backend_create", impl, INFINITY, 0, forge_error_message());
        return;
    }
    forge_backend *main_gpu = P->gpu;
    const char *main_impl = P->impl;
    P->gpu = gpu;
    P->impl = forge_cuda_matmul_impl(gpu);
    run_matmul_cases(P);
    if (with_attention) run_attention_cases(P);
    P->gpu = main_gpu;
    P->impl = main_impl;
    forge_backend_destroy(gpu);
}

/* FORGE_MATMUL=auto's cache: a corrupt file must be ignored (re-measured) and rewritten whole. */
static void case_matmul_table(parity *P) {
    const char *path = "/tmp/forge_gpu_tests_matmul_table.tsv";
    FILE *f = fopen(path, "w");
    if (!f) {
        report(P, 0, "matmul_table", path, INFINITY, 0, "(cannot write the test cache file)");
        return;
    }
    fputs("this is not a forge matmul table\n", f);
    fclose(f);
    /* a fresh auto backend opens the table at creation: the environment is read then */
    const char *saved = getenv("FORGE_MATMUL");
    char *saved_copy = saved ? strdup(saved) : NULL;
    setenv("FORGE_MATMUL_CACHE", path, 1);
    setenv("FORGE_MATMUL", "auto", 1);
    forge_backend *gpu = NULL;
    forge_status s = forge_cuda_backend_create(&gpu, 0);
    unsetenv("FORGE_MATMUL_CACHE");
    if (saved_copy) setenv("FORGE_MATMUL", saved_copy, 1);
    else unsetenv("FORGE_MATMUL");
    free(saved_copy);
    if (s != FORGE_OK) {
        report(P, 0, "cuda_backend_create", "auto (table test)", INFINITY, 0, forge_error_message());
        return;
    }
    forge_backend *main_gpu = P->gpu;
    const char *main_impl = P->impl;
    P->gpu = gpu;
    P->impl = forge_cuda_matmul_impl(gpu);
    case_matmul(P, 130, 129, 131, 1);
    P->gpu = main_gpu;
    P->impl = main_impl;
    forge_backend_destroy(gpu);
    f = fopen(path, "r");
    char line[512] = "";
    int rows = 0, key_ok = 0;
    if (f) {
        if (fgets(line, sizeof line, f)) key_ok = strncmp(line, "# forge matmul table v1 ", 24) == 0;
        while (fgets(line, sizeof line, f)) rows++;
        fclose(f);
    }
    /* 130x129x131 runs NT, NN and TN once each: three measured rows (unless cuBLAS is absent: then auto is forge
     * and writes nothing, and the corrupt file stays) */
#ifdef FORGE_NO_CUBLAS
    (void)key_ok;
    report(P, 1, "matmul_table[no cublas]", path, rows, 0, "(auto runs forge only: no table)");
#else
    report(P, key_ok && rows == 3, "matmul_table[auto] corrupt cache -> rewritten", path, rows, 3,
           key_ok ? NULL : "(first line is not the table key)");
#endif
}

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

static void run_flash16_cases(parity *P) {
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

int main(void) {
    parity P;
    memset(&P, 0, sizeof P);
    const char *q = getenv("FORGE_GPU_TESTS_QUICK");
    P.quick = q && *q && strcmp(q, "0") != 0;
    forge_rng_seed(&P.rng, 1234, 7);

    if (forge_cpu_backend_create(&P.cpu, 0, 1) != FORGE_OK) {
        printf("cannot create the CPU reference backend: %s\n0 passed, 1 failed\n", forge_error_message());
        return 1;
    }
    if (forge_cuda_backend_create(&P.gpu, 0) != FORGE_OK) {
        printf("cannot create the CUDA backend: %s\n0 passed, 1 failed\n", forge_error_message());
        forge_backend_destroy(P.cpu);
        return 1;
    }
    P.impl = forge_cuda_matmul_impl(P.gpu);
    printf("gpu parity: cpu=%s cuda matmul=%s%s\n", P.cpu->name, P.impl, P.quick ? " (quick shapes)" : "");

    /* FORGE_GPU_TESTS_ONLY=flash: only the fused fp32 attention cases; =flash16: only the bf16 ones;
     * =gemm_fp8: only the fp8/tf32 GEMM cases */
    const char *only = getenv("FORGE_GPU_TESTS_ONLY");
    if (only && (strcmp(only, "flash") == 0 || strcmp(only, "flash16") == 0 || strcmp(only, "gemm_fp8") == 0 ||
                 strcmp(only, "gemm_tn") == 0)) {
        if (strcmp(only, "gemm_tn") == 0)
            run_gemm_tn_cases(&P);
        else if (strcmp(only, "flash") == 0)
            run_flash_cases(&P);
        else if (strcmp(only, "flash16") == 0)
            run_flash16_cases(&P);
        else
            run_gemm_fp8_cases(&P);
        forge_backend_destroy(P.gpu);
        forge_backend_destroy(P.cpu);
        printf("%d passed, %d failed\n", P.passed, P.failed);
        return P.failed ? 1 : 0;
    }

    static const size_t ew_sizes[] = {1, 37, 4097, 1000003};
    for (size_t i = 0; i < sizeof ew_sizes / sizeof ew_sizes[0]; i++) {
        if (P.quick && ew_sizes[i] > 100000) continue;
        case_elementwise(&P, ew_sizes[i]);
    }

    case_embedding(&P, 1, 45, 1000);
    case_embedding(&P, 37, 768, 1000);
    case_embedding(&P, 257, 45, 50); /* many repeated ids */
    case_embedding(&P, 257, 1031, 1000);
    if (!P.quick) case_embedding(&P, 4099, 64, 7); /* ~585 rows per id */

    case_position(&P, 2, 67, 45, 80);
    case_position(&P, 2, 67, 768, 67);
    case_position(&P, 1, 1, 45, 1);

    run_matmul_cases(&P);
    run_gemm_fp8_cases(&P);
    run_gemm_tn_cases(&P);

    static const int norm_shapes[][2] = {{1, 45}, {37, 768}, {257, 45}, {4099, 45}, {257, 3072}, {9000, 96}};
    for (size_t i = 0; i < sizeof norm_shapes / sizeof norm_shapes[0]; i++) {
        if (P.quick && (long long)norm_shapes[i][0] * norm_shapes[i][1] > 300000) continue;
        case_layernorm(&P, norm_shapes[i][0], norm_shapes[i][1]);
        case_rmsnorm(&P, norm_shapes[i][0], norm_shapes[i][1]);
    }

    case_rope(&P, 2, 67, 10, 8, 64); /* packed qkv: NH=6, NKV=2: q+k rotate, v copied */
    case_rope(&P, 2, 67, 10, 8, 6);
    case_rope(&P, 2, 67, 6, 6, 64);
    case_rope(&P, 1, 1, 3, 0, 2);
    if (!P.quick) case_rope(&P, 1, 2048, 4, 2, 128); /* large angles */

    run_attention_cases(&P);
    run_flash_cases(&P);

    case_classifier(&P, 37, 1000, 25, 0);
    case_classifier(&P, 1, 1000, 0, 1);
    case_classifier(&P, 64, 1001, 10, 1);
    case_classifier(&P, 8, 7, 50, 0);
    if (!P.quick) case_classifier(&P, 5, 50257, 20, 0);

    static const size_t sq_sizes[] = {1, 37, 4097, 1000003};
    for (size_t i = 0; i < sizeof sq_sizes / sizeof sq_sizes[0]; i++) {
        if (P.quick && sq_sizes[i] > 100000) continue;
        case_sumsq(&P, sq_sizes[i]);
    }
    for (int mode = 0; mode < 4; mode++) {
        case_adamw(&P, 37, 1, mode);
        case_adamw(&P, 100003, 10, mode);
    }

    case_pool(&P);

    run_flash16_cases(&P);

    /* the GEMM-backed ops once more under each matmul path */
    if (strcmp(P.impl, "simt64") != 0) run_with_impl(&P, "simt64", 1);
    if (strcmp(P.impl, "simt128") != 0) run_with_impl(&P, "simt128", 1);
#ifndef FORGE_NO_CUBLAS
    if (strcmp(P.impl, "cublas") != 0) run_with_impl(&P, "cublas", 0);
#else
    {
        /* a build without cuBLAS must refuse it, never fall back silently */
        forge_backend *nb = NULL;
        setenv("FORGE_MATMUL", "cublas", 1);
        forge_status ns = forge_cuda_backend_create(&nb, 0);
        unsetenv("FORGE_MATMUL");
        report(&P, ns == FORGE_ERR_UNSUPPORTED, "cuda_backend_create[cublas, CUBLAS=0]", "refused", 0, 0,
               ns == FORGE_ERR_UNSUPPORTED ? NULL : "(expected FORGE_ERR_UNSUPPORTED)");
        if (nb) forge_backend_destroy(nb);
    }
#endif
    if (strcmp(P.impl, "tf32") != 0) run_with_impl(&P, "tf32", 0);
    if (strcmp(P.impl, "auto") != 0) {
        /* the auto table of this run goes to a scratch file, never the user's cache */
        const char *c = getenv("FORGE_MATMUL_CACHE");
        if (!c || !*c) setenv("FORGE_MATMUL_CACHE", "/tmp/forge_gpu_tests_matmul_auto.tsv", 1);
        run_with_impl(&P, "auto", 0);
        if (!c || !*c) unsetenv("FORGE_MATMUL_CACHE");
        case_matmul_table(&P);
    }

    forge_backend_destroy(P.gpu);
    forge_backend_destroy(P.cpu);
    if (P.skipped) printf("%d skipped (cpu reference entry missing)\n", P.skipped);
    printf("%d passed, %d failed\n", P.passed, P.failed);
    return P.failed ? 1 : 0;
}
