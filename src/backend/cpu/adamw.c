/*
 * adamw.c: the AdamW update (Loshchilov & Hutter, https://arxiv.org/abs/1711.05101)
 * and the squared-norm reduction that gradient clipping needs, on the CPU.
 *
 *   g = grad * clip, clip = max_norm / sqrt(sumsq) if that norm exceeds max_norm, else 1
 *   m = b1 m + (1 - b1) g ;  v = b2 v + (1 - b2) g^2
 *   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p),  mhat = m / (1 - b1^step), vhat likewise
 *
 * Weight decay is decoupled (applied to p, not added to g) and eps sits
 * outside the square root, as in torch.optim.AdamW. The decision a reader
 * would get wrong: the clip factor is folded into the gradient read, not
 * applied by scaling the gradient buffers first. The global norm lives in a
 * device scalar that sumsq filled, so neither the clip nor the norm needs a
 * host round trip (on the GPU that would be a synchronisation per step).
 *
 * One call updates every tensor of the flat parameter buffer (its spans, each
 * with its weight decay); the learning rate and bias corrections come from
 * memory (step[3]), as a replayed GPU graph reads them. With param_bf16 the
 * same pass writes the bf16 working copy rn(param after the update)
 * (docs/mixed-precision.md).
 */
#include <math.h>

#include "cpu_ops.h"

forge_status cpu_sum_accumulate(forge_backend *be, float *out_sum, const float *x, size_t n) {
    int nt = cpu_threads(be);
    double sum = 0.0; /* double partials: a float sum of 100k losses loses digits */
#pragma omp parallel for reduction(+ : sum) num_threads(nt)
    for (size_t i = 0; i < n; i++) sum += x[i];
    *out_sum += (float)sum;
    return FORGE_OK;
}

forge_status cpu_sumsq(forge_backend *be, float *out_sumsq, const float *x, size_t n) {
    int nt = cpu_threads(be);
    /* double partial sums: a float sum over 100M squares loses ~3 digits */
    double sum = 0.0;
#pragma omp parallel for reduction(+ : sum) num_threads(nt)
    for (size_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
    *out_sumsq = (float)sum;
    return FORGE_OK;
}

forge_status cpu_adamw(forge_backend *be, float *param, forge_bf16 *param_bf16, const float *grad, float *m, float *v,
                       size_t n, const forge_adamw_span *spans, int n_spans, const float *grad_sumsq,
                       const float *step, forge_adamw_params hp) {
    for (int s = 0; s < n_spans; s++)
        if (spans[s].begin > n || spans[s].n > n - spans[s].begin)
            return forge_error(FORGE_ERR_ARG, "cpu adamw: span %d [%llu, +%u) outside the %zu elements", s,
                               (unsigned long long)spans[s].begin, spans[s].n, n);
    float clip = 1.0f;
    if (grad_sumsq) {
        if (!isfinite(*grad_sumsq)) return FORGE_OK; /* an overflowed step is skipped */
        if (hp.max_grad_norm > 0.0f) {
            float norm = sqrtf(*grad_sumsq);
            if (norm > hp.max_grad_norm) clip = hp.max_grad_norm / norm;
        }
    }
    const float b1 = hp.beta1, b2 = hp.beta2, lr = step[0], bc1 = step[1], bc2 = step[2];
    int nt = cpu_threads(be);
    for (int s = 0; s < n_spans; s++) {
        const size_t lo = (size_t)spans[s].begin, hi = lo + spans[s].n;
        const float wd = spans[s].weight_decay;
#pragma omp parallel for num_threads(nt)
        for (size_t i = lo; i < hi; i++) {
            float g = grad[i] * clip;
            float mi = b1 * m[i] + (1.0f - b1) * g;
            float vi = b2 * v[i] + (1.0f - b2) * g * g;
            m[i] = mi;
            v[i] = vi;
            float mhat = mi / bc1;
            float vhat = vi / bc2;
            float p = param[i] - lr * (mhat / (sqrtf(vhat) + hp.eps) + wd * param[i]);
            param[i] = p;
            if (param_bf16) param_bf16[i] = forge_bf16_from_f32(p);
        }
    }
    return FORGE_OK;
}
