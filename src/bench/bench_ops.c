/*
 * bench_ops.c: per-op times at one model's training shapes (`forge bench ops`).
 *
 * Each op runs 3 warm-up launches, then 15 batches of 10 launches, each batch
 * ended by a synchronize; the reported time is the median batch / 10. This is
 * a first look for the kernel table in the notes (which op dominates a step),
 * not a claim: claims go through the benchmark harness with its checksum gate.
 * Inputs are random, never zeros.
 */
#include "bench_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../backend/backend.h"
#include "../util/rng.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { OPS_LARGE = 0, OPS_A, OPS_B, OPS_C, OPS_D, OPS_E, OPS_N_BUFS };

typedef struct {
    forge_backend *be;
    int B, T, C, NH, HS, V, H, N;
    float *buf[OPS_N_BUFS]; /* each max_floats long */
    int32_t *ids;
    float *scalar;
} ops_ctx;

typedef forge_status (*op_fn)(ops_ctx *c);

#define F(i) (c->buf[i])
static forge_status op_matmul_qkv(ops_ctx *c) {
    return c->be->matmul_forward(c->be, F(OPS_A), F(OPS_B), F(OPS_C), F(OPS_D), c->N, c->C, 3 * c->C);
}
static forge_status op_matmul_fc(ops_ctx *c) {
    return c->be->matmul_forward(c->be, F(OPS_A), F(OPS_B), F(OPS_C), F(OPS_D), c->N, c->C, c->H);
}
static forge_status op_matmul_fc_dx(ops_ctx *c) {
    return c->be->matmul_backward_input(c->be, F(OPS_A), F(OPS_B), F(OPS_C), c->N, c->C, c->H);
}
static forge_status op_matmul_fc_dw(ops_ctx *c) {
    return c->be->matmul_backward_weight(c->be, F(OPS_A), F(OPS_D), F(OPS_B), F(OPS_C), c->N, c->C, c->H);
}
static forge_status op_lm_head(ops_ctx *c) {
    return c->be->matmul_forward(c->be, F(OPS_LARGE), F(OPS_B), F(OPS_C), NULL, c->N, c->C, c->V);
}
static forge_status op_layernorm_fwd(ops_ctx *c) {
    return c->be->layernorm_forward(c->be, F(OPS_A), F(OPS_D), F(OPS_E), F(OPS_B), F(OPS_C), F(OPS_C), c->N,
                                    c->C, 1e-5f);
}
static forge_status op_layernorm_bwd(ops_ctx *c) {
    return c->be->layernorm_backward(c->be, F(OPS_A), F(OPS_D), F(OPS_E), F(OPS_B), F(OPS_C), F(OPS_C),
                                     F(OPS_D), F(OPS_E), c->N, c->C);
}
static forge_status op_gelu_fwd(ops_ctx *c) {
    return c->be->gelu_forward(c->be, F(OPS_A), F(OPS_B), (size_t)c->N * c->H);
}
static forge_status op_gelu_bwd(ops_ctx *c) {
    return c->be->gelu_backward(c->be, F(OPS_A), F(OPS_B), F(OPS_C), (size_t)c->N * c->H);
}
static forge_status op_attention_fwd(ops_ctx *c) {
    return c->be->attention_forward(c->be, F(OPS_A), F(OPS_LARGE), F(OPS_B), c->B, c->T, c->NH, c->NH, c->HS);
}
static forge_status op_attention_bwd(ops_ctx *c) {
    /* scratch shares the large buffer's second half */
    size_t att = (size_t)c->B * c->NH * c->T * c->T;
    return c->be->attention_backward(c->be, F(OPS_A), F(OPS_LARGE) + att, F(OPS_C), F(OPS_B), F(OPS_LARGE), c->B,
                                     c->T, c->NH, c->NH, c->HS);
}
static forge_status op_classifier(ops_ctx *c) {
    return c->be->classifier_forward_backward(c->be, F(OPS_A), F(OPS_LARGE), c->ids, c->N, c->V, -1, 1e-4f);
}
static forge_status op_residual(ops_ctx *c) {
    return c->be->add_forward(c->be, F(OPS_A), F(OPS_B), F(OPS_C), (size_t)c->N * c->C);
}
static forge_status op_adamw(ops_ctx *c) {
    forge_adamw_params hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1};
    size_t n = (size_t)c->N * c->C; /* ~ a 1.5M-parameter slice */
    return c->be->adamw_update(c->be, F(OPS_A), F(OPS_B), F(OPS_C), F(OPS_D), n, c->scalar, hp);
}
#undef F

forge_status forge_bench_ops(FILE *out, const char *device, int B, int T, int C, int NH, int V) {
    ops_ctx c;
    memset(&c, 0, sizeof c);
    FORGE_TRY(forge_backend_create(&c.be, device));
    forge_backend *be = c.be;
    c.B = B, c.T = T, c.C = C, c.NH = NH, c.HS = C / NH, c.V = V, c.H = 4 * C, c.N = B * T;
    size_t small = (size_t)c.N * 4 * C + 4 * (size_t)C * C, att = (size_t)B * NH * T * T;
    size_t large = (size_t)c.N * V > 2 * att ? (size_t)c.N * V : 2 * att;
    forge_status s = FORGE_OK;
    float *host = malloc(large * sizeof(float));
    int32_t *hids = malloc((size_t)c.N * sizeof(int32_t));
    if (!host || !hids) s = forge_error(FORGE_ERR_OOM, "bench ops: out of host memory");
    forge_rng rng;
    forge_rng_seed(&rng, 11, 0);
    for (size_t i = 0; s == FORGE_OK && i < large; i++) host[i] = forge_rng_uniform(&rng) * 0.2f - 0.1f;
    for (int i = 0; s == FORGE_OK && i < c.N; i++) hids[i] = (int32_t)forge_rng_below(&rng, (uint64_t)V);
    for (int i = 0; i < OPS_N_BUFS && s == FORGE_OK; i++) {
        size_t n = i == OPS_LARGE ? large : small;
        s = be->mem_alloc(be, (void **)&c.buf[i], n * sizeof(float));
        if (s == FORGE_OK) s = be->copy_to_device(be, c.buf[i], host, n * sizeof(float));
    }
    if (s == FORGE_OK) s = be->mem_alloc(be, (void **)&c.ids, (size_t)c.N * sizeof(int32_t));
    if (s == FORGE_OK) s = be->copy_to_device(be, c.ids, hids, (size_t)c.N * sizeof(int32_t));
    if (s == FORGE_OK) s = be->mem_alloc(be, (void **)&c.scalar, sizeof(float));
    if (s == FORGE_OK) s = be->copy_to_device(be, c.scalar, host, sizeof(float));
    struct {
        const char *name;
        op_fn fn;
        double flops;
    } ops[] = {
        {"matmul_forward qkv", op_matmul_qkv, 2.0 * c.N * C * 3 * C},
        {"matmul_forward fc", op_matmul_fc, 2.0 * c.N * C * c.H},
        {"matmul_backward_input fc", op_matmul_fc_dx, 2.0 * c.N * C * c.H},
        {"matmul_backward_weight fc", op_matmul_fc_dw, 2.0 * c.N * C * c.H},
        {"matmul_forward lm_head", op_lm_head, 2.0 * c.N * C * V},
        {"layernorm_forward", op_layernorm_fwd, 0},
        {"layernorm_backward", op_layernorm_bwd, 0},
        {"gelu_forward", op_gelu_fwd, 0},
        {"gelu_backward", op_gelu_bwd, 0},
        {"add_forward (residual)", op_residual, 0},
        {"attention_forward", op_attention_fwd, 4.0 * B * NH * (double)T * T * c.HS},
        {"attention_backward", op_attention_bwd, 8.0 * B * NH * (double)T * T * c.HS},
        {"classifier_forward_backward", op_classifier, 0},
        {"adamw_update (N*C params)", op_adamw, 0},
    };
    if (s == FORGE_OK)
        fprintf(out, "== forge bench ops (%s) at B=%d T=%d C=%d NH=%d V=%d: median of 15 x 10 launches\n",
                be->name, B, T, C, NH, V);
    fflush(out);
    double samples[15];
    for (size_t k = 0; k < sizeof ops / sizeof ops[0] && s == FORGE_OK; k++) {
        for (int w = 0; w < 3 && s == FORGE_OK; w++) s = ops[k].fn(&c);
        if (s == FORGE_OK) s = be->synchronize(be);
        for (int r = 0; r < 15 && s == FORGE_OK; r++) {
            double t0 = now_s();
            for (int i = 0; i < 10 && s == FORGE_OK; i++) s = ops[k].fn(&c);
            if (s == FORGE_OK) s = be->synchronize(be);
            samples[r] = (now_s() - t0) / 10;
        }
        if (s != FORGE_OK) break;
        qsort(samples, 15, sizeof samples[0], cmp_double);
        double med = samples[7];
        fprintf(out, "%-30s %10.1f us  (min %8.1f, max %8.1f)", ops[k].name, med * 1e6, samples[0] * 1e6,
                samples[14] * 1e6);
        if (ops[k].flops > 0) fprintf(out, "  %8.1f GFLOP/s", ops[k].flops / med / 1e9);
        fprintf(out, "\n");
        fflush(out);
    }
    for (int i = 0; i < OPS_N_BUFS; i++)
        if (c.buf[i]) be->mem_free(be, c.buf[i]);
    if (c.ids) be->mem_free(be, c.ids);
    if (c.scalar) be->mem_free(be, c.scalar);
    free(host);
    free(hids);
    forge_backend_destroy(be);
    return s;
}
