/*
 * classifier.cu: fused softmax cross-entropy on the GPU. For each row n of
 * logits (N,V): losses[n] = logsumexp(logits[n]) - logits[n][target], and
 * logits[n] is OVERWRITTEN by its gradient (softmax - onehot) * grad_scale.
 * Rows whose target == ignore_index get loss 0 and gradient 0.
 *
 * One block per row: a max pass, a sum-of-exp pass and a write pass over the
 * row (a 50257-float row stays in L2 between passes). Block reductions use
 * a fixed tree, so losses are deterministic. The target logit is read before
 * the first barrier, so no thread can have overwritten it yet.
 *
 * The CPU backend rejects a target outside [0, V) that is not ignore_index;
 * checking here on the host would need a sync, so such a row gets a NaN loss,
 * its gradient row is computed without the one-hot, and the id is recorded
 * in ctx->input_error, which the step reads back once (poll_errors) and
 * reports as FORGE_ERR_DATA naming it.
 */
#include "cuda_ops.h"

#define CLS_THREADS 512

/* ---- kernels ------------------------------------------------------------ */

__global__ void __launch_bounds__(CLS_THREADS)
    classifier_kernel(float *__restrict__ losses, float *__restrict__ logits,
                      const int32_t *__restrict__ targets, int V, int ignore_index, float grad_scale,
                      cuda_input_error *err) {
    __shared__ float scratch[32];
    const int n = blockIdx.x;
    float *x = logits + (size_t)n * V;
    const int y = targets[n];
    if (y == ignore_index) { /* uniform over the block */
        for (int i = threadIdx.x; i < V; i += CLS_THREADS) x[i] = 0.0f;
        if (threadIdx.x == 0) losses[n] = 0.0f;
        return;
    }
    const bool y_valid = y >= 0 && y < V;
    if (!y_valid && threadIdx.x == 0) cuda_report_bad_id(err, CUDA_BAD_ID_CLASSIFIER, n, y, V);
    const float x_y = (threadIdx.x == 0 && y_valid) ? x[y] : 0.0f;

    float maxval = -INFINITY;
    for (int i = threadIdx.x; i < V; i += CLS_THREADS) maxval = fmaxf(maxval, x[i]);
    maxval = block_max(maxval, scratch);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += CLS_THREADS) sum += expf(x[i] - maxval);
    sum = block_sum(sum, scratch); /* every thread has read x before this barrier */
    if (threadIdx.x == 0) losses[n] = y_valid ? maxval + logf(sum) - x_y : __int_as_float(0x7fc00000);
    float inv = 1.0f / sum;
    for (int i = threadIdx.x; i < V; i += CLS_THREADS) {
        float p = expf(x[i] - maxval) * inv;
        x[i] = (p - (i == y ? 1.0f : 0.0f)) * grad_scale;
    }
}

/* ---- launchers ---------------------------------------------------------- */

forge_status cuda_classifier_forward_backward(forge_backend *be, float *losses, float *logits,
                                              const int32_t *targets, int N, int V,
                                              int ignore_index, float grad_scale) {
    if (V <= 0) return forge_error(FORGE_ERR_ARG, "cuda classifier: V must be > 0, got %d", V);
    if (N <= 0) return FORGE_OK;
    cuda_ctx *ctx = cuda_get_ctx(be);
    classifier_kernel<<<N, CLS_THREADS, 0, ctx->stream>>>(losses, logits, targets, V, ignore_index, grad_scale,
                                                          ctx->input_error);
    CUDA_LAUNCH_CHECK("classifier_kernel");
    return FORGE_OK;
}
