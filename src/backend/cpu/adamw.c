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
 * device scalar that sumsq_accumulate filled, so neither the clip nor the norm
 * needs a host round trip (on the GPU that would be a synchronisation per step).
 *
 * adamw_update_bf16 is the same update (the same code) that also writes the
 * bf16 working copy of the parameters, rn(param after the update), in the
 * same pass (docs/mixed-precision.md).
 */
#include <math.h>

#include "cpu_ops.h"

forge_status cpu_sumsq_accumulate(forge_backend *be, float *out_sumsq, const float *x, size_t n) {
    int nt = cpu_threads(be);
    /* double partial sums: a float sum over 100M squares loses ~3 digits */
    double sum = 0.0;
#pragma omp parallel for reduction(+ : sum) num_threads(nt)
    for (size_t i = 0; i < n; i++) sum += (double)x[i] * x[i];
    *out_sumsq += (float)sum;
    return FORGE_OK;
}

/* The update of both entries: param_bf16 NULL (adamw_update) or the bf16 copy rn(param) written in the same pass
 * (adamw_update_bf16). */
static forge_status adamw_run(forge_backend *be, const char *op, float *param, forge_bf16 *param_bf16,
                              const float *grad, float *m, float *v, size_t n, const float *grad_sumsq,
                              forge_adamw_params hp) {
    if (hp.step < 1) return forge_error(FORGE_ERR_ARG, "cpu %s: step is 1-based, got %d", op, hp.step);
    float clip = 1.0f;
    if (grad_sumsq && hp.max_grad_norm > 0.0f) {
        float norm = sqrtf(*grad_sumsq);
        if (norm > hp.max_grad_norm) clip = hp.max_grad_norm / norm;
    }
    float b1 = hp.beta1, b2 = hp.beta2;
    float bc1 = 1.0f - powf(b1, (float)hp.step);
    float bc2 = 1.0f - powf(b2, (float)hp.step);
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * clip;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        float p = param[i] - hp.lr * (mhat / (sqrtf(vhat) + hp.eps) + hp.weight_decay * param[i]);
        param[i] = p;
        if (param_bf16) param_bf16[i] = forge_bf16_from_f32(p);
    }
    return FORGE_OK;
}

forge_status cpu_adamw_update(forge_backend *be, float *param, const float *grad, float *m, float *v, size_t n,
                              const float *grad_sumsq, forge_adamw_params hp) {
    return adamw_run(be, "adamw_update", param, NULL, grad, m, v, n, grad_sumsq, hp);
}

forge_status cpu_adamw_update_bf16(forge_backend *be, float *param, forge_bf16 *param_bf16, const float *grad,
                                   float *m, float *v, size_t n, const float *grad_sumsq, forge_adamw_params hp) {
    return adamw_run(be, "adamw_update_bf16", param, param_bf16, grad, m, v, n, grad_sumsq, hp);
}
