/*
 * classifier_bf16.c: the lm head's forward and backward fused, bf16, on the
 * CPU: the reference of the CUDA entry (docs/mixed-precision.md).
 *
 * Rows are taken in chunks of FORGE_CLS_BF16_ROWS(N, V, chunk_rows) (op_list.h), so the
 * (N, V) logits never exist whole; the chunk's bf16 logits live in the
 * scratch. Per row n of a chunk:
 *   logits[v] = rn(sum_c inp[n,c] wte[v,c])                 (fp32 sum in c order)
 *   loss[n]   = m + log(sum_v exp(x_v - m)) - x_target      (fp32, the sum compensated; 0 for an ignore row)
 *   dl[v]     = rn((exp(x_v - m) / sum - onehot) grad_scale) (0 for an ignore row; in place of the logits)
 *   dinp[n]   = rn(dinp[n] + sum_v dl[v] wte[v])            (fp32 sum in v order, one rounding; +0 in place of
 *                                                            dinp[n] when written: accumulate = 0)
 * and dwte[v] += dl[n,v] inp[n], one row n at a time in row order (fp32).
 * Each result has one writer (rows for the logits, the loss and dinp, vocabulary
 * rows for dwte) and a fixed summation order, so nothing depends on the thread
 * count, and the chunk size changes no result: every sum runs inside one row
 * or walks the rows in order.
 *
 * A target outside [0, V) that is not ignore_index is an error, reported
 * before anything is written.
 */
#include <math.h>

#include "cpu_ops.h"

static inline float bf(forge_bf16 h) { return forge_bf16_to_f32(h); }

forge_status cpu_classifier_bf16(forge_backend *be, float *losses, forge_bf16 *dinp, float *dwte, float *scratch,
                                 const forge_bf16 *inp, const forge_bf16 *wte, const int32_t *targets, int N, int C,
                                 int V, int ignore_index, float grad_scale, int accumulate, int chunk_rows) {
    if (N < 0 || C <= 0 || V <= 0)
        return forge_error(FORGE_ERR_ARG, "cpu classifier_bf16: need N >= 0, C > 0, V > 0, got N=%d C=%d V=%d", N,
                           C, V);
    for (int n = 0; n < N; n++) {
        const int y = targets[n];
        if (y != ignore_index && (y < 0 || y >= V))
            return forge_error(FORGE_ERR_ARG,
                               "cpu classifier_bf16: targets[%d] = %d is outside [0, %d) and is not the ignore_index "
                               "%d",
                               n, y, V, ignore_index);
    }
    const int nt = cpu_threads(be);
    const int R = FORGE_CLS_BF16_ROWS(N, V, chunk_rows);
    /* scratch: the chunk's logits / dlogits (R,V) bf16, then a row accumulator (R,C) fp32 */
    forge_bf16 *lg = (forge_bf16 *)scratch;
    float *acc = scratch + ((size_t)R * V + 1) / 2;

    for (int n0 = 0; n0 < N; n0 += R) {
        const int rows = N - n0 < R ? N - n0 : R;
        /* logits, then the loss and dlogits of each row */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int r = 0; r < rows; r++) {
            const int n = n0 + r, y = targets[n];
            forge_bf16 *x = lg + (size_t)r * V;
            const forge_bf16 *in = inp + (size_t)n * C;
            if (y == ignore_index) {
                losses[n] = 0.0f;
                for (int v = 0; v < V; v++) x[v] = 0; /* +0.0 */
                continue;
            }
            for (int v = 0; v < V; v++) {
                const forge_bf16 *w = wte + (size_t)v * C;
                float s = 0.0f;
                for (int c = 0; c < C; c++) s += bf(in[c]) * bf(w[c]);
                x[v] = forge_bf16_from_f32(s);
            }
            float maxval = -INFINITY;
            for (int v = 0; v < V; v++)
                if (bf(x[v]) > maxval) maxval = bf(x[v]);
            /* compensated (Kahan) fp32 sum: V can be ~10^6 terms of nearly one size, whose plain running sum
             * drifts by ~1e-3 relative (each term rounded to the growing sum's ulp the same way) */
            float sum = 0.0f, comp = 0.0f;
            for (int v = 0; v < V; v++) {
                const float y = expf(bf(x[v]) - maxval) - comp, t = sum + y;
                comp = (t - sum) - y;
                sum = t;
            }
            losses[n] = maxval + logf(sum) - bf(x[y]);
            const float inv = 1.0f / sum;
            for (int v = 0; v < V; v++) {
                const float p = expf(bf(x[v]) - maxval) * inv;
                x[v] = forge_bf16_from_f32((p - (v == y ? 1.0f : 0.0f)) * grad_scale);
            }
        }
        /* dinp: a row's sum over the vocabulary in v order, then one rounding (NULL: the loss only) */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int r = 0; r < (dinp ? rows : 0); r++) {
            const int n = n0 + r;
            const forge_bf16 *x = lg + (size_t)r * V;
            float *a = acc + (size_t)r * C;
            for (int c = 0; c < C; c++) a[c] = 0.0f;
            for (int v = 0; v < V; v++) {
                const float g = bf(x[v]);
                const forge_bf16 *w = wte + (size_t)v * C;
                for (int c = 0; c < C; c++) a[c] += g * bf(w[c]);
            }
            forge_bf16 *di = dinp + (size_t)n * C;
            for (int c = 0; c < C; c++) di[c] = forge_bf16_from_f32((accumulate ? bf(di[c]) : 0.0f) + a[c]);
        }
        /* dwte: each vocabulary row adds the chunk's rows in order (NULL: not wanted) */
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int v = 0; v < (dwte ? V : 0); v++) {
            float *dw = dwte + (size_t)v * C;
            for (int r = 0; r < rows; r++) {
                const float g = bf(lg[(size_t)r * V + v]);
                const forge_bf16 *in = inp + (size_t)(n0 + r) * C;
                for (int c = 0; c < C; c++) dw[c] += g * bf(in[c]);
            }
        }
    }
    return FORGE_OK;
}
