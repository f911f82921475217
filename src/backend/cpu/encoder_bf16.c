/*
 * encoder_bf16.c: the bf16 token + position embedding (GPT-2 wte, wpe; Llama: wte alone) on the CPU, the
 * reference of encoder_bf16.cu (docs/mixed-precision.md).
 *
 *   forward   out[b,t] = rn(wte[id] + wpe[t])  (the sum in fp32 of two exact bf16 widenings, one rounding);
 *             wpe NULL: out[b,t] = wte[id], copied
 *   backward  dwte[id] += dout[b,t] in row order n = b*T + t; dwpe[t] += dout[b,t] in order b (fp32 accumulators)
 *
 * An id outside [0, V) is refused before anything is written or read (FORGE_ERR_ARG naming it). The backward's
 * threading is embedding.c's: threads own channel slices of every table row, so rows sharing an id add in row
 * order whatever the thread count; dwpe's rows are split by t, each summing the batch in order.
 */
#include "cpu_ops.h"

static forge_status check_ids(const char *op, const int32_t *ids, int N, int V) {
    for (int n = 0; n < N; n++)
        if (ids[n] < 0 || ids[n] >= V)
            return forge_error(FORGE_ERR_ARG, "cpu %s: ids[%d] = %d is outside the table's [0, %d)", op, n,
                               (int)ids[n], V);
    return FORGE_OK;
}

forge_status cpu_encoder_forward_bf16(forge_backend *be, forge_bf16 *out, const int32_t *ids, const forge_bf16 *wte,
                                      const forge_bf16 *wpe, int B, int T, int C, int V) {
    if (B <= 0 || T <= 0 || C <= 0) return FORGE_OK;
    FORGE_TRY(check_ids("encoder_forward_bf16", ids, B * T, V));
    int nt = cpu_threads(be);
    /* out (B,T,C) ; wte (V,C) ; wpe (maxT,C), rows [0,T) */
#pragma omp parallel for collapse(2) num_threads(nt)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const size_t n = (size_t)b * T + t;
            const forge_bf16 *w = wte + (size_t)ids[n] * C;
            forge_bf16 *o = out + n * C;
            if (!wpe) {
                for (int c = 0; c < C; c++) o[c] = w[c];
                continue;
            }
            const forge_bf16 *p = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = forge_bf16_from_f32(forge_bf16_to_f32(w[c]) + forge_bf16_to_f32(p[c]));
        }
    }
    return FORGE_OK;
}

forge_status cpu_encoder_backward_bf16(forge_backend *be, float *dwte, float *dwpe, const forge_bf16 *dout,
                                       const int32_t *ids, int B, int T, int C, int V) {
    if (B <= 0 || T <= 0 || C <= 0) return FORGE_OK;
    const int N = B * T;
    FORGE_TRY(check_ids("encoder_backward_bf16", ids, N, V));
    int nt = cpu_threads(be);
    enum { SLICE = 64 };
    int slices = (C + SLICE - 1) / SLICE;
#pragma omp parallel for num_threads(nt)
    for (int s = 0; s < slices; s++) {
        int c0 = s * SLICE, c1 = c0 + SLICE < C ? c0 + SLICE : C;
        for (int n = 0; n < N; n++) {
            float *d = dwte + (size_t)ids[n] * C;
            const forge_bf16 *g = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) d[c] += forge_bf16_to_f32(g[c]);
        }
    }
    if (!dwpe) return FORGE_OK;
#pragma omp parallel for num_threads(nt)
    for (int t = 0; t < T; t++) {
        float *dp = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const forge_bf16 *g = dout + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) dp[c] += forge_bf16_to_f32(g[c]);
        }
    }
    return FORGE_OK;
}
