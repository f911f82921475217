/*
 * bench_ops.c: per-op times at one model's training shapes (`forge bench ops`),
 * each op a harness cell (harness.h) on the cpu or cuda backend.
 *
 * The decisions a reader would otherwise get wrong:
 * - The gate compares the backend's output with a reference on the SAME
 *   inputs copied to the host: the matmul cells with a float64 loop
 *   (bench_check.h), every other op with the CPU reference backend
 *   (forge_backend_create_cpu(&ref, 1, 1): plain loops, one thread) in fp32,
 *   against the fp32 tolerance. The fp32 reference is accepted for those ops
 *   because they are short reductions or elementwise maps whose reference
 *   error (a few ulps) is far below the tolerance; the float64 requirement
 *   matters where K is long, which is the matmuls.
 * - Outputs an op overwrites are poisoned with NaN before the check run; the
 *   outputs an op accumulates into (every *_backward) or updates in place
 *   (classifier logits, AdamW param/m/v) are reset to known random start
 *   values instead, and the reference starts from the same values
 *   (bench_check.h says how "unwritten" is detected then).
 * - Inputs come in OPS_SETS random sets, rotated across reps (run(ctx, i % 3)),
 *   so on the GPU a small op's inputs are not all L2-resident from the
 *   previous rep; outputs are shared.
 * - No baselines: this suite reports per-op times (which op dominates a
 *   step), so every passing cell's verdict is "no-baseline". Claims of a
 *   faster kernel belong in suites that time a baseline in the same run.
 * Inputs are random, never zeros.
 */
#include "bench_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/backend.h"
#include "../base/rng.h"
#include "bench_check.h"
#include "bench_session.h"
#include "harness.h"
#ifdef FORGE_WITH_CUDA
#include "../backend/cuda/cuda_backend.h"
#include "harness_cuda.h"
#endif

#define OPS_SETS 3
#define OPS_MAX_BUFS 8

typedef enum {
    BUF_IN,      /* read-only input, OPS_SETS random sets */
    BUF_OUT,     /* overwritten: poisoned with NaN before the check */
    BUF_UPDATE,  /* accumulated into or updated in place: reset to its start values */
    BUF_SCRATCH, /* workspace, contents undefined: not checked */
    BUF_IDS,     /* int32 ids in [0, V), OPS_SETS sets */
    BUF_SPAN,    /* one forge_adamw_span (4 floats' room) covering the N*C parameters, weight decay 0.1 */
    BUF_PROBS    /* input (B*NH, T, T) of causal softmax rows: zero above the
                  * diagonal, rows summing to 1, as attention_forward saves them
                  * (the CUDA backward skips the upper triangle) */
} buf_kind;

typedef struct {
    int B, T, C, NH, HS, V, H, N;
} ops_shape;

typedef struct {
    buf_kind kind;
    size_t n;      /* elements */
    float lo, hi;  /* uniform start values */
} buf_spec;

typedef struct ops_desc ops_desc;
struct ops_desc {
    const char *name;
    int nb;
    buf_spec b[OPS_MAX_BUFS];
    forge_status (*call)(forge_backend *be, const ops_shape *s, void *const *p);
    /* float64 reference (matmul cells): fills ref[i] for every OUT/UPDATE
     * buffer i from the host start values init[]; NULL = CPU reference backend */
    void (*ref64)(const ops_shape *s, void *const *init, double **ref);
    double flops;
};

/* ---- the ops: buffers in call order ------------------------------------------- */

#define P(i) ((float *)p[i])
#define PC(i) ((const float *)p[i])
static forge_status call_mm_fwd(forge_backend *be, const ops_shape *s, void *const *p, int OC) {
    return be->matmul_forward(be, P(0), PC(1), PC(2), PC(3), s->N, s->C, OC);
}
static forge_status call_qkv(forge_backend *be, const ops_shape *s, void *const *p) {
    return call_mm_fwd(be, s, p, 3 * s->C);
}
static forge_status call_fc(forge_backend *be, const ops_shape *s, void *const *p) {
    return call_mm_fwd(be, s, p, s->H);
}
static forge_status call_fc_dx(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->matmul_backward_input(be, P(0), PC(1), PC(2), s->N, s->C, s->H);
}
static forge_status call_fc_dw(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->matmul_backward_weight(be, P(0), P(1), PC(2), PC(3), s->N, s->C, s->H);
}
static forge_status call_lm_head(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->matmul_forward(be, P(0), PC(1), PC(2), NULL, s->N, s->C, s->V);
}
static forge_status call_ln_fwd(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->layernorm_forward(be, P(0), P(1), P(2), PC(3), PC(4), PC(5), s->N, s->C, 1e-5f);
}
static forge_status call_ln_bwd(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->layernorm_backward(be, P(0), P(1), P(2), PC(3), PC(4), PC(5), PC(6), PC(7), s->N, s->C);
}
static forge_status call_gelu_fwd(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->gelu_forward(be, P(0), PC(1), (size_t)s->N * s->H);
}
static forge_status call_gelu_bwd(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->gelu_backward(be, P(0), PC(1), PC(2), (size_t)s->N * s->H);
}
static forge_status call_residual(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->add_forward(be, P(0), PC(1), PC(2), (size_t)s->N * s->C);
}
static forge_status call_att_fwd(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->attention_forward(be, P(0), P(1), PC(2), s->B, s->T, s->NH, s->NH, s->HS);
}
static forge_status call_att_bwd(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->attention_backward(be, P(0), P(1), PC(2), PC(3), PC(4), s->B, s->T, s->NH, s->NH, s->HS);
}
static forge_status call_flash_fwd(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->flash_attention_forward(be, P(0), P(1), PC(2), s->B, s->T, s->NH, s->NH, s->HS);
}
static forge_status call_flash_bwd(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->flash_attention_backward(be, P(0), P(1), PC(2), PC(3), PC(4), PC(5), s->B, s->T, s->NH, s->NH,
                                        s->HS);
}
static forge_status call_classifier(forge_backend *be, const ops_shape *s, void *const *p) {
    return be->classifier_forward_backward(be, P(0), P(1), (const int32_t *)p[2], s->N, s->V, -1, 1e-4f);
}
static forge_status call_adamw(forge_backend *be, const ops_shape *s, void *const *p) {
    forge_adamw_params hp = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .max_grad_norm = 1.0f};
    return be->adamw(be, P(0), NULL, PC(1), P(2), P(3), (size_t)s->N * s->C, (const forge_adamw_span *)p[5], 1,
                     PC(4), PC(6), hp);
}
#undef P
#undef PC

#define F(i) ((const float *)init[i])
static void ref_qkv(const ops_shape *s, void *const *init, double **ref) {
    forge_ref64_matmul_forward(ref[0], F(1), F(2), F(3), s->N, s->C, 3 * s->C);
}
static void ref_fc(const ops_shape *s, void *const *init, double **ref) {
    forge_ref64_matmul_forward(ref[0], F(1), F(2), F(3), s->N, s->C, s->H);
}
static void ref_fc_dx(const ops_shape *s, void *const *init, double **ref) {
    forge_ref64_matmul_backward_input(ref[0], F(0), F(1), F(2), s->N, s->C, s->H);
}
static void ref_fc_dw(const ops_shape *s, void *const *init, double **ref) {
    forge_ref64_matmul_backward_weight(ref[0], ref[1], F(0), F(1), F(2), F(3), s->N, s->C, s->H);
}
static void ref_lm_head(const ops_shape *s, void *const *init, double **ref) {
    forge_ref64_matmul_forward(ref[0], F(1), F(2), NULL, s->N, s->C, s->V);
}
#undef F

/* Fills the op table for shape s (the sizes depend on it). */
static int ops_table(ops_desc *o, const ops_shape *s) {
    size_t N = (size_t)s->N, C = (size_t)s->C, H = (size_t)s->H, V = (size_t)s->V;
    size_t att = (size_t)s->B * s->NH * s->T * s->T;
    double T = s->T;
    const float a = -1.0f, b = 1.0f;
    int k = 0;
    o[k++] = (ops_desc){"matmul_forward qkv", 4,
                        {{BUF_OUT, N * 3 * C, 0, 0}, {BUF_IN, N * C, a, b}, {BUF_IN, 3 * C * C, a, b},
                         {BUF_IN, 3 * C, a, b}},
                        call_qkv, ref_qkv, 2.0 * N * C * 3 * C};
    o[k++] = (ops_desc){"matmul_forward fc", 4,
                        {{BUF_OUT, N * H, 0, 0}, {BUF_IN, N * C, a, b}, {BUF_IN, H * C, a, b}, {BUF_IN, H, a, b}},
                        call_fc, ref_fc, 2.0 * N * C * H};
    o[k++] = (ops_desc){"matmul_backward_input fc", 3,
                        {{BUF_UPDATE, N * C, a, b}, {BUF_IN, N * H, a, b}, {BUF_IN, H * C, a, b}},
                        call_fc_dx, ref_fc_dx, 2.0 * N * C * H};
    o[k++] = (ops_desc){"matmul_backward_weight fc", 4,
                        {{BUF_UPDATE, H * C, a, b}, {BUF_UPDATE, H, a, b}, {BUF_IN, N * H, a, b},
                         {BUF_IN, N * C, a, b}},
                        call_fc_dw, ref_fc_dw, 2.0 * N * C * H};
    o[k++] = (ops_desc){"matmul_forward lm_head", 3,
                        {{BUF_OUT, N * V, 0, 0}, {BUF_IN, N * C, a, b}, {BUF_IN, V * C, a, b}},
                        call_lm_head, ref_lm_head, 2.0 * N * C * V};
    o[k++] = (ops_desc){"layernorm_forward", 6,
                        {{BUF_OUT, N * C, 0, 0}, {BUF_OUT, N, 0, 0}, {BUF_OUT, N, 0, 0}, {BUF_IN, N * C, a, b},
                         {BUF_IN, C, 0.5f, 1.5f}, {BUF_IN, C, a, b}},
                        call_ln_fwd, NULL, 0};
    o[k++] = (ops_desc){"layernorm_backward", 8,
                        {{BUF_UPDATE, N * C, a, b}, {BUF_UPDATE, C, a, b}, {BUF_UPDATE, C, a, b},
                         {BUF_IN, N * C, a, b}, {BUF_IN, N * C, a, b}, {BUF_IN, C, 0.5f, 1.5f},
                         {BUF_IN, N, -0.1f, 0.1f}, {BUF_IN, N, 0.5f, 2.0f}},
                        call_ln_bwd, NULL, 0};
    o[k++] = (ops_desc){"gelu_forward", 2, {{BUF_OUT, N * H, 0, 0}, {BUF_IN, N * H, -3, 3}}, call_gelu_fwd, NULL, 0};
    o[k++] = (ops_desc){"gelu_backward", 3,
                        {{BUF_UPDATE, N * H, a, b}, {BUF_IN, N * H, -3, 3}, {BUF_IN, N * H, a, b}},
                        call_gelu_bwd, NULL, 0};
    o[k++] = (ops_desc){"add_forward (residual)", 3,
                        {{BUF_OUT, N * C, 0, 0}, {BUF_IN, N * C, a, b}, {BUF_IN, N * C, a, b}},
                        call_residual, NULL, 0};
    o[k++] = (ops_desc){"attention_forward", 3,
                        {{BUF_OUT, N * C, 0, 0}, {BUF_OUT, att, 0, 0}, {BUF_IN, N * 3 * C, a, b}},
                        call_att_fwd, NULL, 4.0 * s->B * s->NH * T * T * s->HS};
    o[k++] = (ops_desc){"attention_backward", 5,
                        {{BUF_UPDATE, N * 3 * C, a, b}, {BUF_SCRATCH, att, 0, 0}, {BUF_IN, N * C, a, b},
                         {BUF_IN, N * 3 * C, a, b}, {BUF_PROBS, att, 0.1f, 1.0f}},
                        call_att_bwd, NULL, 8.0 * s->B * s->NH * T * T * s->HS};
    /* fused attention: FLOPs counted as for the materialised cells (full T x T,
     * no causal halving, no recompute) so the TFLOP/s compare one to one. The
     * backward's out and lse are independent random inputs, not a forward's
     * results: the cell times and checks the function on the same inputs,
     * and lse in [1, 3] keeps exp(s - lse) finite. */
    size_t bht = (size_t)s->B * s->NH * s->T;
    o[k++] = (ops_desc){"flash_attention_forward", 3,
                        {{BUF_OUT, N * C, 0, 0}, {BUF_OUT, bht, 0, 0}, {BUF_IN, N * 3 * C, a, b}},
                        call_flash_fwd, NULL, 4.0 * s->B * s->NH * T * T * s->HS};
    o[k++] = (ops_desc){"flash_attention_backward", 6,
                        {{BUF_UPDATE, N * 3 * C, a, b}, {BUF_SCRATCH, bht, 0, 0}, {BUF_IN, N * C, a, b},
                         {BUF_IN, N * 3 * C, a, b}, {BUF_IN, N * C, a, b}, {BUF_IN, bht, 1.0f, 3.0f}},
                        call_flash_bwd, NULL, 8.0 * s->B * s->NH * T * T * s->HS};
    o[k++] = (ops_desc){"classifier_forward_backward", 3,
                        {{BUF_OUT, N, 0, 0}, {BUF_UPDATE, N * V, -4, 4}, {BUF_IDS, N, 0, 0}}, call_classifier,
                        NULL, 0};
    o[k++] = (ops_desc){"adamw (N*C params)", 7,
                        {{BUF_UPDATE, N * C, a, b}, {BUF_IN, N * C, -0.01f, 0.01f}, {BUF_UPDATE, N * C, -0.01f, 0.01f},
                         {BUF_UPDATE, N * C, 0.0f, 1e-4f}, {BUF_IN, 1, 0.5f, 2.0f}, {BUF_SPAN, 4, 0, 0},
                         {BUF_IN, 3, 0.5f, 1.0f}},
                        call_adamw, NULL, 0};
    return k;
}
#define OPS_MAX 18

/* ---- one op as a harness cell ------------------------------------------------- */

typedef struct {
    const ops_desc *op;
    const ops_shape *s;
    forge_backend *be, *ref;
    int V;
    void *dev[OPS_MAX_BUFS][OPS_SETS];  /* device buffers (non-input kinds: [0] only) */
    void *init[OPS_MAX_BUFS][OPS_SETS]; /* host start values (IN, IDS: every set; UPDATE: [0]) */
    float *nan_fill;                    /* host NaNs, as long as the longest OUT buffer */
} ops_cell;

/* rows of T: zero after the diagonal, normalised to sum 1 */
static void causal_rows(float *x, size_t n, int T) {
    for (size_t r = 0; r < n / (size_t)T; r++) {
        float *row = x + r * (size_t)T;
        int t = (int)(r % (size_t)T);
        double sum = 0;
        for (int j = 0; j <= t; j++) sum += row[j];
        for (int j = 0; j < T; j++) row[j] = j <= t ? (float)(row[j] / sum) : 0.0f;
    }
}

static int is_input(buf_kind k) { return k == BUF_IN || k == BUF_IDS || k == BUF_PROBS || k == BUF_SPAN; }
static int buf_sets(buf_kind k) { return is_input(k) ? OPS_SETS : 1; }

static void ops_cell_free(ops_cell *c) {
    for (int i = 0; i < c->op->nb; i++)
        for (int k = 0; k < OPS_SETS; k++) {
            if (c->dev[i][k]) c->be->mem_free(c->be, c->dev[i][k]);
            free(c->init[i][k]);
        }
    free(c->nan_fill);
}

static forge_status ops_cell_init(ops_cell *c, forge_rng *rng) {
    size_t max_out = 1;
    for (int i = 0; i < c->op->nb; i++) {
        const buf_spec *b = &c->op->b[i];
        if (b->kind == BUF_OUT && b->n > max_out) max_out = b->n;
        for (int k = 0; k < buf_sets(b->kind); k++) {
            FORGE_TRY(c->be->mem_alloc(c->be, &c->dev[i][k], b->n * sizeof(float)));
            if (b->kind == BUF_OUT || b->kind == BUF_SCRATCH) continue;
            c->init[i][k] = malloc(b->n * sizeof(float));
            if (!c->init[i][k]) return forge_error(FORGE_ERR_OOM, "bench ops: %s: out of host memory", c->op->name);
            if (b->kind == BUF_SPAN) {
                const forge_adamw_span sp = {0, (uint32_t)((size_t)c->s->N * c->s->C), 0.1f};
                memcpy(c->init[i][k], &sp, sizeof sp);
            } else if (b->kind == BUF_IDS) {
                int32_t *ids = c->init[i][k];
                for (size_t j = 0; j < b->n; j++) ids[j] = (int32_t)forge_rng_below(rng, (uint64_t)c->V);
            } else {
                float *x = c->init[i][k];
                for (size_t j = 0; j < b->n; j++) x[j] = b->lo + (b->hi - b->lo) * forge_rng_uniform(rng);
                if (b->kind == BUF_PROBS) causal_rows(x, b->n, c->s->T);
            }
            if (b->kind != BUF_UPDATE)
                FORGE_TRY(c->be->copy_to_device(c->be, c->dev[i][k], c->init[i][k], b->n * sizeof(float)));
        }
    }
    c->nan_fill = malloc(max_out * sizeof(float));
    if (!c->nan_fill) return forge_error(FORGE_ERR_OOM, "bench ops: out of host memory");
    for (size_t j = 0; j < max_out; j++) c->nan_fill[j] = NAN;
    return FORGE_OK;
}

static forge_status ops_poison(void *ctx) {
    ops_cell *c = ctx;
    for (int i = 0; i < c->op->nb; i++) {
        const buf_spec *b = &c->op->b[i];
        if (b->kind == BUF_OUT) FORGE_TRY(c->be->copy_to_device(c->be, c->dev[i][0], c->nan_fill, b->n * sizeof(float)));
        if (b->kind == BUF_UPDATE)
            FORGE_TRY(c->be->copy_to_device(c->be, c->dev[i][0], c->init[i][0], b->n * sizeof(float)));
    }
    return FORGE_OK;
}

static forge_status ops_run(void *ctx, int set) {
    ops_cell *c = ctx;
    void *p[OPS_MAX_BUFS];
    for (int i = 0; i < c->op->nb; i++) p[i] = c->dev[i][buf_sets(c->op->b[i].kind) > 1 ? set : 0];
    return c->op->call(c->be, c->s, p);
}

static forge_status ops_check(void *ctx, double *rel_err, int *fully_written) {
    ops_cell *c = ctx;
    const ops_desc *op = c->op;
    void *host[OPS_MAX_BUFS] = {0}, *init0[OPS_MAX_BUFS] = {0};
    double *ref[OPS_MAX_BUFS] = {0};
    float *out = NULL;
    forge_status s = c->be->synchronize(c->be);
    /* host buffers for the reference: inputs and start values are set 0's */
    for (int i = 0; i < op->nb && s == FORGE_OK; i++) {
        const buf_spec *b = &op->b[i];
        init0[i] = c->init[i][0];
        if (b->kind == BUF_OUT || b->kind == BUF_UPDATE) {
            ref[i] = malloc(b->n * sizeof(double));
            if (!ref[i]) s = forge_error(FORGE_ERR_OOM, "bench ops: %s: no memory for the reference", op->name);
        }
        if (!op->ref64 && !is_input(b->kind)) {
            host[i] = malloc(b->n * sizeof(float));
            if (!host[i]) s = forge_error(FORGE_ERR_OOM, "bench ops: %s: no memory for the reference", op->name);
            else if (b->kind == BUF_UPDATE) memcpy(host[i], c->init[i][0], b->n * sizeof(float));
        } else {
            host[i] = c->init[i][0];
        }
    }
    if (s == FORGE_OK && op->ref64) {
        op->ref64(c->s, init0, ref);
    } else if (s == FORGE_OK) {
        s = op->call(c->ref, c->s, host);
        for (int i = 0; i < op->nb && s == FORGE_OK; i++)
            if (ref[i])
                for (size_t j = 0; j < op->b[i].n; j++) ref[i][j] = ((const float *)host[i])[j];
    }
    /* compare every output the op writes, as one vector */
    forge_check chk = {0, 0, 0};
    for (int i = 0; i < op->nb && s == FORGE_OK; i++) {
        const buf_spec *b = &op->b[i];
        if (!ref[i]) continue;
        free(out);
        out = malloc(b->n * sizeof(float));
        if (!out) {
            s = forge_error(FORGE_ERR_OOM, "bench ops: %s: no memory for the output copy", op->name);
            break;
        }
        s = c->be->copy_to_host(c->be, out, c->dev[i][0], b->n * sizeof(float));
        if (s == FORGE_OK) forge_check_add(&chk, out, ref[i], b->kind == BUF_UPDATE ? c->init[i][0] : NULL, b->n);
    }
    free(out);
    for (int i = 0; i < op->nb; i++) {
        free(ref[i]);
        if (host[i] != c->init[i][0]) free(host[i]);
    }
    *rel_err = forge_check_rel_err(&chk);
    *fully_written = chk.unwritten == 0;
    return s;
}

/* Minimum traffic of one run: inputs read, outputs written, updates both. */
static double ops_bytes(const ops_desc *op) {
    double bytes = 0;
    for (int i = 0; i < op->nb; i++) {
        buf_kind k = op->b[i].kind;
        double n = (double)op->b[i].n * 4;
        bytes += k == BUF_UPDATE ? 2 * n : k == BUF_SCRATCH ? 0 : n;
    }
    return bytes;
}

static const char *OPS_RECIPE =
    "ops: PCG32 forge_rng_seed(11, 0); per op in table order, per buffer in call order, per input set 0..2: "
    "inputs and start values lo + (hi - lo) * forge_rng_uniform (ranges in bench_ops.c ops_table), ids "
    "forge_rng_below(V); overwritten outputs poisoned with NaN";

forge_status forge_bench_ops(FILE *out, const forge_runtime_options *rt, int B, int T, int C, int NH, int V,
                             const char *results_root) {
    forge_backend *be = NULL, *ref = NULL;
    FORGE_TRY(forge_backend_create(&be, rt->device, rt));
    forge_status s = forge_backend_create_cpu(&ref, 1, 1);
    ops_shape sh = {B, T, C, NH, C / NH, V, 4 * C, B * T};
    int cuda = be->kind == FORGE_DEVICE_CUDA;
    /* one results file per backend variant: a cuBLAS run and a forge-GEMM run
     * of the same commit land in the same folder */
    char suite[64] = "ops_cpu";
    if (cuda) snprintf(suite, sizeof suite, "ops_cuda_%s", forge_matmul_mode_name(be->options.matmul));
    forge_bench_session bs = {0};
    if (s == FORGE_OK) s = forge_bench_session_begin(&bs, be);
    char config[256];
    snprintf(config, sizeof config, "ops backend=%s B=%d T=%d C=%d NH=%d V=%d input_sets=%d", be->name, B, T, C,
             NH, V, OPS_SETS);
    forge_harness_config cfg = {.suite = suite, .results_root = results_root, .config_text = config,
                                .input_recipe = OPS_RECIPE, .seed = 11, .reps = cuda ? 100 : 30,
                                .warmup = cuda ? 10 : 3, .out = out};
    forge_harness *h = NULL;
    if (s == FORGE_OK) s = forge_harness_open(&h, &cfg, &bs.prov, &bs.timer);
    if (s == FORGE_OK) {
        fprintf(out,
                "== forge bench ops (%s) at B=%d T=%d C=%d NH=%d V=%d: per-op times, no baselines (verdict "
                "no-baseline);\n   check vs a float64 loop (matmuls) or the CPU reference backend (other ops)\n",
                be->name, B, T, C, NH, V);
        fflush(out);
    }
    ops_desc ops[OPS_MAX];
    int n_ops = ops_table(ops, &sh);
    forge_rng rng;
    forge_rng_seed(&rng, 11, 0);
    int bad = 0;
    /* the tf32 matmul mode: the matmul ops are gated at the tf32 tolerance */
    const int tf32 = cuda && be->options.matmul == FORGE_MATMUL_TF32;
    for (int k = 0; k < n_ops && s == FORGE_OK; k++) {
        ops_cell c;
        memset(&c, 0, sizeof c);
        c.op = &ops[k], c.s = &sh, c.be = be, c.ref = ref, c.V = V;
        s = ops_cell_init(&c, &rng);
        const forge_precision prec =
            tf32 && strncmp(ops[k].name, "matmul_", 7) == 0 ? FORGE_PREC_TF32 : FORGE_PREC_FP32;
        forge_harness_cell cell = {.name = ops[k].name, .group = ops[k].name, .precision = prec,
                                   .flops = ops[k].flops, .bytes = ops_bytes(&ops[k]), .n_input_sets = OPS_SETS,
                                   .ctx = &c, .poison = ops_poison, .run = ops_run, .check = ops_check};
        forge_cell_result r;
        if (s == FORGE_OK) s = forge_harness_run(h, &cell, &r);
        if (s == FORGE_OK && forge_cell_bad(&r)) bad++;
        ops_cell_free(&c);
    }
    s = forge_bench_session_end(&bs, h, s);
    if (s == FORGE_OK && bad)
        s = forge_error(FORGE_ERR_NUMERIC, "bench ops: %d ops failed the check (garbage or failed above)", bad);
    forge_backend_destroy(ref);
    forge_backend_destroy(be);
    return s;
}
