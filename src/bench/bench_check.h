/*
 * bench_check.h: the pieces bench cells share for their checksum gate
 * (harness.h, step 1): float64 references of the three matmul layouts, and
 * the relative Frobenius error with the "fully written" test.
 *
 * The references read the SAME float inputs the kernel consumed and compute
 * in double, so only the kernel's own rounding remains in the error. They are
 * plain loops (OpenMP over rows, the inner loop an axpy so it vectorises
 * without reassociating), not fast: a few seconds at GPT-2 shapes.
 */
#ifndef FORGE_BENCH_CHECK_H
#define FORGE_BENCH_CHECK_H

#include <stddef.h>

/* out (N,OC) = inp (N,C) . weight (OC,C)^T + bias (OC); bias may be NULL */
void forge_ref64_matmul_forward(double *out, const float *inp, const float *weight, const float *bias, int N,
                                int C, int OC);
/* dinp (N,C) = dinp0 (N,C) + dout (N,OC) . weight (OC,C); dinp0 may be NULL (zero) */
void forge_ref64_matmul_backward_input(double *dinp, const float *dinp0, const float *dout, const float *weight,
                                       int N, int C, int OC);
/* dweight (OC,C) = dweight0 + dout^T . inp ; dbias (OC) = dbias0 + sum_n dout
 * (dbias may be NULL; dweight0/dbias0 may be NULL for zero) */
void forge_ref64_matmul_backward_weight(double *dweight, double *dbias, const float *dweight0,
                                        const float *dbias0, const float *dout, const float *inp, int N, int C,
                                        int OC);

/* Running sums for the gate of one cell (several outputs may be added). */
typedef struct {
    double sum_d2, sum_r2; /* ||out - ref||^2, ||ref||^2 */
    size_t unwritten;      /* elements the kernel did not write */
} forge_check;

/* Adds n outputs. init == NULL: the output was poisoned with NaN before the
 * run, so a NaN left in out counts as unwritten. Otherwise the output started
 * at init (an accumulating or in-place op): an element still bit-equal to
 * init although the reference moved it by more than fp32 rounding of init
 * and by more than 1e-3 of the buffer's RMS update counts as unwritten (the
 * second bound keeps reference rounding noise, e.g. a 1e-9 update where the
 * exact one is 0, from flagging a correct kernel). */
void forge_check_add(forge_check *c, const float *out, const double *ref, const float *init, size_t n);
/* sqrt(sum_d2 / sum_r2) (sqrt(sum_d2) when the reference is all zero); NaN
 * propagates, which the harness treats as garbage */
double forge_check_rel_err(const forge_check *c);

#endif
