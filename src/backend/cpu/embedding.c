/*
 * embedding.c: token embedding lookup and learned position embedding (GPT-2
 * wte / wpe) on the CPU, and the decode step's one-row encoder (decode_embed).
 *
 * The decision a reader would get wrong: embedding_backward scatters into
 * dtable[ids[n]], and the same id appears many times in a batch, so threads
 * must not split the rows n (two threads would += the same table row). They
 * split the channels instead: each thread owns a column slice of every
 * table row, and rows are added in order n = 0..N-1, so the result is the
 * same for any thread count. position_backward is safe to split by t: each
 * t owns one row of dwpe and sums the batch in order.
 */
#include "cpu_ops.h"

/* Every id in [0, V): a token id outside the table is an error naming it, never a read past the table. */
static forge_status check_ids(const char *op, const int32_t *ids, int N, int V) {
    for (int n = 0; n < N; n++)
        if (ids[n] < 0 || ids[n] >= V)
            return forge_error(FORGE_ERR_ARG, "cpu %s: ids[%d] = %d is outside the table's [0, %d)", op, n,
                               (int)ids[n], V);
    return FORGE_OK;
}

forge_status cpu_embedding_forward(forge_backend *be, float *out, const int32_t *ids,
                                   const float *table, int N, int C, int V) {
    FORGE_TRY(check_ids("embedding_forward", ids, N, V));
    int nt = cpu_threads(be);
    /* out (N,C) ; table (V,C) */
#pragma omp parallel for num_threads(nt)
    for (int n = 0; n < N; n++) {
        const float *row = table + (size_t)ids[n] * C;
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = row[c];
    }
    return FORGE_OK;
}

forge_status cpu_embedding_backward(forge_backend *be, float *dtable, const float *dout,
                                    const int32_t *ids, int N, int C, int V) {
    FORGE_TRY(check_ids("embedding_backward", ids, N, V));
    int nt = cpu_threads(be);
    enum { SLICE = 64 };
    int slices = (C + SLICE - 1) / SLICE;
#pragma omp parallel for num_threads(nt)
    for (int s = 0; s < slices; s++) {
        int c0 = s * SLICE, c1 = c0 + SLICE < C ? c0 + SLICE : C;
        for (int n = 0; n < N; n++) {
            float *d = dtable + (size_t)ids[n] * C;
            const float *g = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
    return FORGE_OK;
}

/* out (C) = wte[*id] + wpe[*pos] (wpe NULL: the wte row): position_forward's add on the decode step's rows */
forge_status cpu_decode_embed(forge_backend *be, float *out, const int32_t *id, const int32_t *pos, const float *wte,
                              const float *wpe, int C, int V, int maxT) {
    (void)be;
    FORGE_TRY(check_ids("decode_embed", id, 1, V));
    if (wpe && (*pos < 0 || *pos >= maxT))
        return forge_error(FORGE_ERR_ARG, "cpu decode_embed: position %d is outside the table's [0, %d)", (int)*pos,
                           maxT);
    const float *row = wte + (size_t)*id * C;
    if (!wpe) {
        for (int c = 0; c < C; c++) out[c] = row[c];
        return FORGE_OK;
    }
    const float *p = wpe + (size_t)*pos * C;
    for (int c = 0; c < C; c++) out[c] = row[c] + p[c];
    return FORGE_OK;
}

forge_status cpu_position_forward(forge_backend *be, float *out, const float *inp, const float *wpe,
                                  int B, int T, int C) {
    int nt = cpu_threads(be);
    /* out, inp (B,T,C) ; wpe (maxT,C), rows [0,T) used */
#pragma omp parallel for collapse(2) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t off = ((size_t)b * T + t) * C;
            const float *p = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) out[off + c] = inp[off + c] + p[c];
        }
    }
    return FORGE_OK;
}

forge_status cpu_position_backward(forge_backend *be, float *dinp, float *dwpe, const float *dout,
                                   int B, int T, int C) {
    int nt = cpu_threads(be);
#pragma omp parallel for num_threads(nt)
    for (int t = 0; t < T; t++) {
        float *dp = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            size_t off = ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) {
                dinp[off + c] += dout[off + c];
                dp[c] += dout[off + c];
            }
        }
    }
    return FORGE_OK;
}
