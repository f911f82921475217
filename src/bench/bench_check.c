/* bench_check.c: float64 matmul references and the gate's error measure (bench_check.h). */
#include "bench_check.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void forge_ref64_matmul_forward(double *out, const float *inp, const float *weight, const float *bias, int N,
                                int C, int OC) {
    /* transpose the weight once so the inner loop runs along OC contiguously */
    double *wt = malloc((size_t)C * OC * sizeof *wt);
    if (!wt) {
        for (size_t i = 0; i < (size_t)N * OC; i++) out[i] = NAN;
        return;
    }
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++)
        for (int oc = 0; oc < OC; oc++) wt[(size_t)c * OC + oc] = weight[(size_t)oc * C + c];
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        double *o = out + (size_t)n * OC;
        for (int oc = 0; oc < OC; oc++) o[oc] = bias ? bias[oc] : 0.0;
        for (int c = 0; c < C; c++) {
            double a = inp[(size_t)n * C + c];
            const double *w = wt + (size_t)c * OC;
            for (int oc = 0; oc < OC; oc++) o[oc] += a * w[oc];
        }
    }
    free(wt);
}

void forge_ref64_matmul_backward_input(double *dinp, const float *dinp0, const float *dout, const float *weight,
                                       int N, int C, int OC) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        double *d = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) d[c] = dinp0 ? dinp0[(size_t)n * C + c] : 0.0;
        for (int oc = 0; oc < OC; oc++) {
            double a = dout[(size_t)n * OC + oc];
            const float *w = weight + (size_t)oc * C;
            for (int c = 0; c < C; c++) d[c] += a * (double)w[c];
        }
    }
}

void forge_ref64_matmul_backward_weight(double *dweight, double *dbias, const float *dweight0,
                                        const float *dbias0, const float *dout, const float *inp, int N, int C,
                                        int OC) {
#pragma omp parallel for schedule(static)
    for (int oc = 0; oc < OC; oc++) {
        double *d = dweight + (size_t)oc * C;
        double b = dbias0 ? dbias0[oc] : 0.0;
        for (int c = 0; c < C; c++) d[c] = dweight0 ? dweight0[(size_t)oc * C + c] : 0.0;
        for (int n = 0; n < N; n++) {
            double a = dout[(size_t)n * OC + oc];
            const float *x = inp + (size_t)n * C;
            b += a;
            for (int c = 0; c < C; c++) d[c] += a * (double)x[c];
        }
        if (dbias) dbias[oc] = b;
    }
}

void forge_check_add(forge_check *c, const float *out, const double *ref, const float *init, size_t n) {
    double d2 = 0, r2 = 0, moved2 = 0;
    size_t unwritten = 0;
    if (init)
        for (size_t i = 0; i < n; i++) moved2 += (ref[i] - init[i]) * (ref[i] - init[i]);
    /* an update smaller than 1e-3 of the typical one may be rounding noise of
     * the reference that a correct kernel legitimately rounds away */
    double typical = n ? 1e-3 * sqrt(moved2 / (double)n) : 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)out[i] - ref[i];
        d2 += d * d;
        r2 += ref[i] * ref[i];
        if (!init) {
            unwritten += isnan(out[i]) ? 1 : 0;
        } else if (memcmp(&out[i], &init[i], sizeof(float)) == 0) {
            double moved = fabs(ref[i] - (double)init[i]);
            unwritten += moved > 4 * FLT_EPSILON * fabs((double)init[i]) && moved > typical && moved > FLT_MIN;
        }
    }
    c->sum_d2 += d2;
    c->sum_r2 += r2;
    c->unwritten += unwritten;
}

double forge_check_rel_err(const forge_check *c) {
    return c->sum_r2 > 0 ? sqrt(c->sum_d2 / c->sum_r2) : sqrt(c->sum_d2);
}
