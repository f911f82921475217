/*
 * sampler.c: temperature, top-k and nucleus (top-p) sampling.
 *
 * Probabilities are p_i = exp((logit_i - max) / T), left unnormalised: every
 * filter only needs sums, so "renormalise" is just drawing u * (sum of what is
 * kept). Filtering sorts (p, id) pairs, which is the O(V log V) part.
 *
 * With top-p alone, tokens with p_i / sum < (1 - top_p) / (V - 1) are dropped
 * before the sort (the trick in llama2.c's sample_topp): if the nucleus had to
 * reach such a token, the tokens from it down would be at most V - 1 tokens
 * each no more likely than it, so together less than 1 - top_p, while the
 * tokens above it sum to less than top_p; the two cannot add to 1. On a trained
 * model this shrinks the sort from V pairs to a few hundred.
 *
 * scratch layout: [V, 2V) holds p_i; the front first holds the top-k heap,
 * then the (p, id) pairs, packed in id order. Pair j lands at [2j, 2j+1], which
 * only overwrites p entries of ids <= j, all already read, so the two never
 * collide. With top-k, tokens below the k-th largest p are dropped before the
 * sort (ties with it are kept, then cut to k in id order).
 */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>

/* descending p, then ascending id: a total order, so qsort is deterministic */
static int cmp_pair_desc(const void *a, const void *b) {
    const float *x = a, *y = b;
    if (x[0] != y[0]) return x[0] > y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* The k-th largest of p (V,), 1 <= k < V, with a min-heap of the k largest
 * seen so far in heap (k,): O(V log k) at worst, about O(V) on real logits
 * since most values lose to the heap's minimum at once. */
static float kth_largest(const float *p, int V, int k, float *heap) {
    for (int i = 0; i < k; i++) { /* heapify the first k */
        int c = i;
        heap[c] = p[i];
        while (c > 0 && heap[(c - 1) / 2] > heap[c]) {
            float t = heap[c];
            heap[c] = heap[(c - 1) / 2];
            heap[(c - 1) / 2] = t;
            c = (c - 1) / 2;
        }
    }
    for (int i = k; i < V; i++) {
        if (!(p[i] > heap[0])) continue;
        heap[0] = p[i]; /* replace the minimum and sift it down */
        int c = 0;
        for (;;) {
            int l = 2 * c + 1, r = l + 1, m = c;
            if (l < k && heap[l] < heap[m]) m = l;
            if (r < k && heap[r] < heap[m]) m = r;
            if (m == c) break;
            float t = heap[c];
            heap[c] = heap[m];
            heap[m] = t;
            c = m;
        }
    }
    return heap[0];
}

int32_t forge_sample_token(const float *logits, int V, float temperature, int top_k, float top_p,
                           forge_rng *rng, float *scratch) {
    if (!logits || V <= 0 || V > FORGE_SAMPLE_MAX_VOCAB) return -1;

    int best = -1;
    float best_logit = -INFINITY;
    for (int i = 0; i < V; i++)
        if (!isnan(logits[i]) && (best < 0 || logits[i] > best_logit)) {
            best = i;
            best_logit = logits[i];
        }
    if (best < 0) return 0; /* every logit NaN */

    int k = (top_k <= 0 || top_k >= V) ? V : top_k;
    int use_p = top_p < 1.0f; /* NaN compares false: no filter */
    if (!(temperature > 0.0f) || V == 1 || k == 1 || (use_p && !(top_p > 0.0f)) ||
        isinf(best_logit))
        return best;
    if (!rng || !scratch) return -1;

    float *p = scratch + V; /* (V,) unnormalised probabilities, the argmax exactly 1 */
    float inv_t = 1.0f / temperature;
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        p[i] = isnan(logits[i]) ? 0.0f : expf((logits[i] - best_logit) * inv_t);
        sum += p[i];
    }
    float u = forge_rng_uniform(rng);

    if (k == V && !use_p) {
        double r = u * sum, cum = 0.0;
        int last = best;
        for (int i = 0; i < V; i++) {
            if (p[i] <= 0.0f) continue;
            cum += p[i];
            last = i;
            if (r < cum) return i;
        }
        return last; /* rounding left r just past the total */
    }

    /* Prefilters, so the sort sees few pairs: with top-k, anything below the
     * k-th largest p; with top-p alone, the bound in the header comment (the
     * factor keeps float rounding from dropping a boundary token). */
    double cutoff = 0.0;
    if (k < V)
        cutoff = kth_largest(p, V, k, scratch);
    else
        cutoff = (1.0 - (double)top_p) / (double)(V - 1) * sum * (1.0 - 1e-6);
    float *pairs = scratch; /* (n, 2) */
    int n = 0;
    for (int i = 0; i < V; i++) {
        float pi = p[i];
        if (pi <= 0.0f || (pi < cutoff && i != best)) continue;
        pairs[2 * n] = pi;
        pairs[2 * n + 1] = (float)i;
        n++;
    }
    qsort(pairs, (size_t)n, 2 * sizeof(float), cmp_pair_desc);
    if (k < n) n = k;

    /* top-k renormalises over the k it keeps; without top-k the total is all V */
    double kept = sum;
    if (k < V) {
        kept = 0.0;
        for (int j = 0; j < n; j++) kept += pairs[2 * j];
    }
    if (use_p) {
        double target = (double)top_p * kept, cum = 0.0;
        for (int j = 0; j < n; j++) {
            cum += pairs[2 * j];
            if (cum >= target) {
                n = j + 1;
                break;
            }
        }
    }
    double total = 0.0;
    for (int j = 0; j < n; j++) total += pairs[2 * j];
    double r = u * total, cum = 0.0;
    for (int j = 0; j < n; j++) {
        cum += pairs[2 * j];
        if (r < cum) return (int32_t)pairs[2 * j + 1];
    }
    return (int32_t)pairs[2 * (n - 1) + 1];
}
