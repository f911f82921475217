/*
 * norm_bf16.c: the bf16 LayerNorm and RMSNorm on the CPU, plain loops, the reference of norm_bf16.cu
 * (docs/mixed-precision.md). Activations (inp, res, out, dout, dinp) are bf16; weight, bias, the saved mean and
 * rstd and the parameter gradients are fp32. All arithmetic is fp32 on the exactly widened bf16 values; a result
 * is rounded once, where it is stored (res and out; dinp after its add: dinp = rn(dinp + dx), or rn(0 + dx) when
 * the backward writes a fresh gradient (accumulate = 0): the bits of an add into a zeroed one).
 *
 *   layernorm  out = rn((x - mean) rstd weight + bias), mean = sum x / C, rstd = 1/sqrt(sum (x - mean)^2 / C + eps)
 *              (two passes, as layernorm.c: not E[x^2] - mean^2)
 *              dx = rstd (g - mean(g) - x-hat mean(g x-hat)), g = weight dout, x-hat = (x - mean) rstd
 *              dweight += sum_n dout x-hat, dbias += sum_n dout
 *   rmsnorm    out = rn(x rstd weight), rstd = 1/sqrt(sum x^2 / C + eps)
 *              dx = rstd (g - x-hat mean(g x-hat)), x-hat = x rstd;  dweight += sum_n dout x-hat
 *   residual_* res = rn(a + b), then the norm of res's bf16 values (res may be a or b: each element of a and b is
 *              read before res's is written)
 *
 * The decision a reader would get wrong: every sum over a row's C channels runs in ONE fixed order, the one the
 * CUDA kernel's warp uses, so mean, rstd and every per-row value come out bit-identical on both (and so do the
 * bf16 outputs: a different order moves mean/rstd by ~sqrt(C) fp32 ulps, and an output that cancels to near zero,
 * x-hat w + b or dinp + dx, carries that as an absolute error worth many of its own bf16 ulps). The order:
 * element c goes to lane partial (c / 8) % 32, each partial adds its elements in index order (a lane of the warp
 * owns the 8-wide chunks l, l + 32, l + 64, ... and reads them as 16-byte vectors), then five xor butterflies
 * p[l] = p[l] + p[l ^ o], o = 16, 8, 4, 2, 1 (warp_sum), after which every partial holds the total. Products that
 * meet a sum are explicit fmaf's; the rest round as written (ISO C: no contraction), as the kernel's __fmul_rn do.
 *
 * Threads split rows for the per-row work and channel slices for dweight/dbias (each slice walks the rows in
 * order), as layernorm.c: nothing depends on the thread count.
 */
#include <math.h>
#include <string.h>

#include "cpu_ops.h"

#define ROW_LANES 32 /* the warp */
#define ROW_VEC 8    /* bf16 per 16-byte chunk */

static inline float bf(forge_bf16 h) { return forge_bf16_to_f32(h); }
static inline int row_lane(int c) { return (c / ROW_VEC) % ROW_LANES; }

/* the xor butterflies over the lane partials: every partial ends with the total, as warp_sum's lanes do */
static float row_total(float p[ROW_LANES]) {
    for (int o = ROW_LANES / 2; o > 0; o /= 2) {
        float q[ROW_LANES];
        for (int l = 0; l < ROW_LANES; l++) q[l] = p[l] + p[l ^ o];
        memcpy(p, q, sizeof q);
    }
    return p[0];
}

/* res = rn(a + b) over one row */
static void residual_row(forge_bf16 *res, const forge_bf16 *a, const forge_bf16 *b, int C) {
    for (int c = 0; c < C; c++) res[c] = forge_bf16_from_f32(bf(a[c]) + bf(b[c]));
}

static void layernorm_row(forge_bf16 *out, float *mean, float *rstd, const forge_bf16 *x, const float *weight,
                          const float *bias, int C, float eps) {
    float p[ROW_LANES] = {0};
    for (int c = 0; c < C; c++) p[row_lane(c)] += bf(x[c]);
    const float m = row_total(p) / C;
    memset(p, 0, sizeof p);
    for (int c = 0; c < C; c++) {
        const float d = bf(x[c]) - m;
        p[row_lane(c)] = fmaf(d, d, p[row_lane(c)]);
    }
    const float s = 1.0f / sqrtf(row_total(p) / C + eps);
    for (int c = 0; c < C; c++) out[c] = forge_bf16_from_f32(fmaf((bf(x[c]) - m) * s, weight[c], bias[c]));
    *mean = m;
    *rstd = s;
}

static void rmsnorm_row(forge_bf16 *out, float *rstd, const forge_bf16 *x, const float *weight, int C, float eps) {
    float p[ROW_LANES] = {0};
    for (int c = 0; c < C; c++) p[row_lane(c)] = fmaf(bf(x[c]), bf(x[c]), p[row_lane(c)]);
    const float s = 1.0f / sqrtf(row_total(p) / C + eps);
    for (int c = 0; c < C; c++) out[c] = forge_bf16_from_f32(bf(x[c]) * s * weight[c]);
    *rstd = s;
}

static forge_status check_c(const char *op, int C) {
    return C > 0 ? FORGE_OK : forge_error(FORGE_ERR_ARG, "cpu %s: C must be > 0, got %d", op, C);
}

forge_status cpu_layernorm_forward_bf16(forge_backend *be, forge_bf16 *out, float *mean, float *rstd,
                                        const forge_bf16 *inp, const float *weight, const float *bias, int N, int C,
                                        float eps) {
    FORGE_TRY(check_c("layernorm_forward_bf16", C));
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++)
        layernorm_row(out + (size_t)n * C, mean + n, rstd + n, inp + (size_t)n * C, weight, bias, C, eps);
    return FORGE_OK;
}

forge_status cpu_residual_layernorm_forward_bf16(forge_backend *be, forge_bf16 *res, forge_bf16 *out, float *mean,
                                                 float *rstd, const forge_bf16 *a, const forge_bf16 *b,
                                                 const float *weight, const float *bias, int N, int C, float eps) {
    FORGE_TRY(check_c("residual_layernorm_forward_bf16", C));
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        const size_t off = (size_t)n * C;
        residual_row(res + off, a + off, b + off, C);
        layernorm_row(out + off, mean + n, rstd + n, res + off, weight, bias, C, eps);
    }
    return FORGE_OK;
}

forge_status cpu_rmsnorm_forward_bf16(forge_backend *be, forge_bf16 *out, float *rstd, const forge_bf16 *inp,
                                      const float *weight, int N, int C, float eps) {
    FORGE_TRY(check_c("rmsnorm_forward_bf16", C));
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) rmsnorm_row(out + (size_t)n * C, rstd + n, inp + (size_t)n * C, weight, C, eps);
    return FORGE_OK;
}

forge_status cpu_residual_rmsnorm_forward_bf16(forge_backend *be, forge_bf16 *res, forge_bf16 *out, float *rstd,
                                               const forge_bf16 *a, const forge_bf16 *b, const float *weight, int N,
                                               int C, float eps) {
    FORGE_TRY(check_c("residual_rmsnorm_forward_bf16", C));
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        const size_t off = (size_t)n * C;
        residual_row(res + off, a + off, b + off, C);
        rmsnorm_row(out + off, rstd + n, res + off, weight, C, eps);
    }
    return FORGE_OK;
}

/* dweight[c] += sum_n dout[n,c] x-hat[n,c] and (dbias non-NULL) dbias[c] += sum_n dout[n,c], rows in order;
 * x-hat = (x - mean) rstd, or x rstd when mean is NULL (RMSNorm) */
static void norm_param_grads(int nt, float *dweight, float *dbias, const forge_bf16 *dout, const forge_bf16 *inp,
                             const float *mean, const float *rstd, int N, int C) {
    enum { SLICE = 64 };
    int slices = (C + SLICE - 1) / SLICE;
#pragma omp parallel for num_threads(nt)
    for (int sl = 0; sl < slices; sl++) {
        int c0 = sl * SLICE, c1 = c0 + SLICE < C ? c0 + SLICE : C;
        float dw[SLICE] = {0}, db[SLICE] = {0};
        for (int n = 0; n < N; n++) {
            const forge_bf16 *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
            const float m = mean ? mean[n] : 0.0f, s = rstd[n];
            for (int c = c0; c < c1; c++) {
                const float xh = (bf(x[c]) - m) * s;
                dw[c - c0] = fmaf(bf(g[c]), xh, dw[c - c0]);
                db[c - c0] += bf(g[c]);
            }
        }
        for (int c = c0; c < c1; c++) {
            dweight[c] += dw[c - c0];
            if (dbias) dbias[c] += db[c - c0];
        }
    }
}

forge_status cpu_layernorm_backward_bf16(forge_backend *be, forge_bf16 *dinp, float *dweight, float *dbias,
                                         const forge_bf16 *dout, const forge_bf16 *inp, const float *weight,
                                         const float *mean, const float *rstd, int N, int C, int accumulate) {
    FORGE_TRY(check_c("layernorm_backward_bf16", C));
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        const forge_bf16 *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        forge_bf16 *dx = dinp + (size_t)n * C;
        const float m = mean[n], s = rstd[n];
        float p1[ROW_LANES] = {0}, p2[ROW_LANES] = {0};
        for (int c = 0; c < C; c++) {
            const float xh = (bf(x[c]) - m) * s, dn = weight[c] * bf(g[c]);
            p1[row_lane(c)] += dn;
            p2[row_lane(c)] = fmaf(dn, xh, p2[row_lane(c)]);
        }
        const float dn_mean = row_total(p1) / C, dn_xh_mean = row_total(p2) / C;
        for (int c = 0; c < C; c++) {
            const float xh = (bf(x[c]) - m) * s, dn = weight[c] * bf(g[c]);
            const float d = fmaf(-xh, dn_xh_mean, dn - dn_mean) * s;
            dx[c] = forge_bf16_from_f32((accumulate ? bf(dx[c]) : 0.0f) + d);
        }
    }
    norm_param_grads(nt, dweight, dbias, dout, inp, mean, rstd, N, C);
    return FORGE_OK;
}

forge_status cpu_rmsnorm_backward_bf16(forge_backend *be, forge_bf16 *dinp, float *dweight, const forge_bf16 *dout,
                                       const forge_bf16 *inp, const float *weight, const float *rstd, int N, int C,
                                       int accumulate) {
    FORGE_TRY(check_c("rmsnorm_backward_bf16", C));
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        const forge_bf16 *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        forge_bf16 *dx = dinp + (size_t)n * C;
        const float s = rstd[n];
        float p[ROW_LANES] = {0};
        for (int c = 0; c < C; c++) {
            const float xh = bf(x[c]) * s, dn = weight[c] * bf(g[c]);
            p[row_lane(c)] = fmaf(dn, xh, p[row_lane(c)]);
        }
        const float dn_xh_mean = row_total(p) / C;
        for (int c = 0; c < C; c++) {
            const float xh = bf(x[c]) * s, dn = weight[c] * bf(g[c]);
            dx[c] = forge_bf16_from_f32((accumulate ? bf(dx[c]) : 0.0f) + fmaf(-xh, dn_xh_mean, dn) * s);
        }
    }
    norm_param_grads(nt, dweight, NULL, dout, inp, NULL, rstd, N, C);
    return FORGE_OK;
}
