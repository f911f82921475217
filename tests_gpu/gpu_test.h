/*
 * gpu_test.h: what every GPU test file shares: the state of a run (the CPU
 * reference backend, the CUDA backend, counters), one-line PASS/FAIL/SKIP
 * reporting, and buffers mirrored on both backends (random inputs, NaN-poisoned
 * outputs, guard floats after every device buffer) with their comparison.
 */
#ifndef FORGE_GPU_TEST_H
#define FORGE_GPU_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "../src/backend/backend.h"
#include "../src/base/dtype.h"
#include "../src/base/rng.h"
#include "../src/base/status.h"


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
    const char *op_filter; /* NULL, or a comma-separated list of op names: the op walk visits only these */
    int quiet; /* print FAIL and SKIP lines only */
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

/* one bf16 tensor on both backends (16-bit patterns, forge_bf16) */
typedef struct {
    size_t n;
    forge_bf16 *c, *g;
} bbuf;

double tol_for_sum(double K);
float bits_to_float(uint32_t u);
float rand_range(parity *P, float lo, float hi);
void report(parity *P, int ok, const char *op, const char *shape, double maxerr, double tol, const char *why);
void report_skip(parity *P, const char *op, const char *shape, const char *why);
int supported(parity *P, const char *op, const char *shape, const void *cpu_fn, const void *gpu_fn);
int ran_ok(parity *P, const char *op, const char *shape, forge_status sc, forge_status sg);
void fbuf_free(parity *P, fbuf *b);
void ibuf_free(parity *P, ibuf *b);
int fbuf_upload(parity *P, fbuf *b, size_t n, const float *host);
int fbuf_rand(parity *P, fbuf *b, size_t n, float lo, float hi);
int fbuf_poison(parity *P, fbuf *b, size_t n);
/* random in [lo, hi) on and below the diagonal of each trailing (side, side) matrix, 0 above it */
int fbuf_rand_tril(parity *P, fbuf *b, size_t n, float lo, float hi, int side);
int ibuf_rand(parity *P, ibuf *b, size_t n, int range, int special, int special_pct);
/* count forge_adamw_spans (4 int32 each) cutting [0, total) at random points, weight decay 0 or 0.1 each */
int ibuf_spans(parity *P, ibuf *b, int count, size_t total);
void check(parity *P, const char *op, const char *shape, const fbuf *b, double tol, int rel);

/* bf16 buffers: random values rounded to bf16 (identical bits on both sides), NaN-poisoned, guarded like fbuf */
int bbuf_rand(parity *P, bbuf *b, size_t n, float lo, float hi);
int bbuf_poison(parity *P, bbuf *b, size_t n);
void bbuf_free(parity *P, bbuf *b);
/* Copies the device side back and prints one PASS/FAIL line: |g - c| <= tol, or with ulps, <= tol bf16 ulps of
 * the reference value (2^(e-7) for c in [2^e, 2^(e+1)); bit equality for c == 0). */
void check_bf16(parity *P, const char *op, const char *shape, const bbuf *b, double tol, int ulps);
/* The same with an absolute allowance on top of the ulps (ulps only): |g - c| <= tol ulp(c) + ulps_abs; the error
 * reported is in ulps of c beyond ulps_abs. */
void check_bf16_tol(parity *P, const char *op, const char *shape, const bbuf *b, double tol, int ulps,
                    double ulps_abs);

/* the kernel-level suites (each its own file), run by test_gpu_parity.c's main */
void run_gemm_fp8_cases(parity *P);
void run_gemm_tn_cases(parity *P);
void run_flash16_cases(parity *P);
void run_decode_cases(parity *P); /* the KV-cache decode path against the forward (test_gpu_decode.c) */
void run_gelu16_cases(parity *P);  /* gelu_backward_bf16 over every bf16 x, bitwise (test_gpu_gelu16.c) */
void run_pdl_cases(parity *P);     /* bf16 training steps with PDL on = off, bitwise (test_gpu_pdl.c) */
/* single cases of the suites above, for the device-reset group (test_gpu_parity.c): one bf16 flash shape (every
 * Hopper entry against the float64 reference), one forge_gemm_bf16_tn, one forge_gemm_bf16_nt_epi (its bf16 forms) */
void case_flash16(parity *P, int B, int Tq, int Tk, int H, int Hkv, int D, int packed);
void case_gemm_tn_default(parity *P, int M, int N, int K, int accumulate);
void case_nt_epi_bf16(parity *P, int M, int N, int K);

#endif
