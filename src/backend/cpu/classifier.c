/*
 * classifier.c: fused softmax cross-entropy forward + backward on the CPU.
 *
 * For each row n of logits (N, V): losses[n] = logsumexp(row) - row[target],
 * and the row is OVERWRITTEN by (softmax(row) - onehot(target)) * grad_scale.
 * Fusing saves a second (N, V) buffer, which at V = 50257 is the largest
 * activation of a GPT-2 step. The caller passes grad_scale = 1 / (number of
 * counted rows) so the gradient is that of the mean loss.
 *
 * The decision a reader would get wrong: the loss is computed as
 * logsumexp - logit, with the row max subtracted inside the exp, never as
 * -log(softmax[target]); the latter gives log(0) = inf once a wrong class
 * wins by ~100 logits. Rows whose target is ignore_index get loss 0 and a zero
 * gradient row (they still are overwritten). Any other target outside [0, V)
 * is an error, reported before anything is written.
 */
#include <math.h>

#include "cpu_ops.h"
#include "vexp.h"

forge_status cpu_classifier_forward_backward(forge_backend *be, float *losses, float *logits,
                                             const int32_t *targets, int N, int V,
                                             int ignore_index, float grad_scale) {
    if (V <= 0) return forge_error(FORGE_ERR_ARG, "cpu classifier: V must be > 0, got %d", V);
    for (int n = 0; n < N; n++) {
        int y = targets[n];
        if (y != ignore_index && (y < 0 || y >= V))
            return forge_error(FORGE_ERR_ARG,
                               "cpu classifier: targets[%d] = %d is outside [0, %d) and is not the "
                               "ignore_index %d",
                               n, y, V, ignore_index);
    }
    int nt = cpu_threads(be);
    /* losses (N) ; logits (N,V) in: logits, out: dlogits */
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * V;
        int y = targets[n];
        if (y == ignore_index) {
            losses[n] = 0.0f;
            for (int i = 0; i < V; i++) x[i] = 0.0f;
            continue;
        }
        float maxval = -INFINITY;
        for (int i = 0; i < V; i++)
            if (x[i] > maxval) maxval = x[i];
        const float xy = x[y];
        /* the row becomes e^(x - max) in place (one exp per logit, in a loop
         * that vectorises), then its sum in 8 lanes added in a fixed tree */
        for (int i = 0; i < V; i++) x[i] = cpu_vexpf(x[i] - maxval);
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        int i8 = 0;
        for (; i8 + 8 <= V; i8 += 8)
            for (int l = 0; l < 8; l++) acc[l] += x[i8 + l];
        float sum = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
        for (; i8 < V; i8++) sum += x[i8];
        float logsumexp = maxval + logf(sum);
        losses[n] = logsumexp - xy;
        float inv = 1.0f / sum;
        for (int i = 0; i < V; i++) x[i] = (x[i] * inv - (i == y ? 1.0f : 0.0f)) * grad_scale;
    }
    return FORGE_OK;
}
