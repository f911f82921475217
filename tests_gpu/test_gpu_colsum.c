/*
 * test_gpu_colsum.c: the bf16 column sums whose first-pass kernel finishes them itself (src/backend/cuda/
 * colsum_ordered.cuh, "the last arrivals finish"), BITWISE against this file's host emulation of the order the
 * kernels define: matmul_backward_weight_bf16's dbias (the 8-wide and the scalar partial kernels),
 * gelu_backward_dbias_bf16's dbias (from the dinp it wrote), layernorm_backward_bf16's dweight and dbias and
 * rmsnorm_backward_bf16's dweight (the fused row kernel, and the scalar column kernel for odd or wide C).
 *
 * The emulation spells out each kernel's sums: the row-chunk partition (reduce.cu's cuda_colsum_chunks, or the fused
 * norm's norm_fused_grid, which depends on the SM count), each partial as its kernel adds it (row lanes, or warps,
 * each over its rows in order, then combined in order), then the finish: sum = 0, sum += partial[r][c] for
 * r = 0, 1, ..., R-1, out[c] += sum, the bits of reduce.cu's separate finish kernel. The walker (--only ops) checks
 * the same ops against the CPU reference within SUM(N); this checks that the order is exactly that one.
 *
 * Shapes: one row; fewer blocks than column units (each finisher takes several units); more units than SMs (F at
 * its cap, half the SMs); C odd or not a multiple of 64 (partial units); dout off 16-byte alignment (the scalar dbias kernel
 * at OC % 8 == 0); C > 1024 (the norms' scalar kernel); the step's shapes (gpt2-124m, gpt-25m; skipped by --quick).
 * Each case runs twice op by op, then recorded as a CUDA graph and replayed twice, every result from the same old
 * outputs: a launch that left the ticket counter off 0 would hand the next one the wrong finishers. All of it on a
 * backend with PDL off (the default) and one with PDL on.
 *
 * Run by forge_gpu_tests (all suites, or --only colsum).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_test.h"
#include "../src/backend/cuda/cuda_backend.h"
#include "../src/backend/options.h"

#define CS_WS_FLOATS ((size_t)4 << 20) /* cuda_ops.h's CUDA_WS_FLOATS: the partials' workspace */
#define CS_LANES 8                     /* a partial block's row lanes (MMB_DBIAS_ROWS, NB_COL_ROWS) or warps (NB_ROWS) */
#define CS_COLS 64                     /* columns of a finish unit (COLSUM_COLS) */

enum { CS_MATMUL, CS_GELU, CS_LN, CS_RMS };

typedef struct {
    int kind;
    int N, C, OC; /* matmul: dout (N, OC), inp (N, C), C = 0: dbias only; gelu: (N, OC); norms: (N, C) */
    int offset;   /* matmul: dout placed this many elements into its buffer */
} cs_case;

static float cs_bf(forge_bf16 h) { return bits_to_float((uint32_t)h << 16); }

/* reduce.cu's cuda_colsum_chunks */
static int cs_chunks(int N, int C, int n_out) {
    long long R = (N + 63) / 64;
    if (R > 128) R = 128;
    const long long fit = (long long)(CS_WS_FLOATS / ((size_t)n_out * (size_t)C));
    return (int)(R < fit ? R : fit);
}

/* norm_bf16_fused.cuh's norm_fused_grid: R blocks of *rows rows */
static int cs_fused_grid(int N, int C, int n_out, int num_sms, int *rows) {
    long long R = (N + 15) / 16;
    const long long fit = (long long)(CS_WS_FLOATS / ((size_t)n_out * (size_t)C));
    if (R > num_sms) R = num_sms;
    if (R > fit) R = fit;
    if (R < 1) R = 1;
    *rows = (int)((N + R - 1) / R);
    return (N + *rows - 1) / *rows;
}

/* The dbias partials of mm_bf16_dbias_partial(8)_kernel (and gelu_backward_dbias_bf16_kernel, over its rounded
 * dinp): chunk r's rows in CS_LANES lanes, lane y adding rows n_begin + y, + CS_LANES, ... in order from 0, then
 * sum = 0 + lane 0 + lane 1 + ... ; partial (R, OC) */
static void cs_dbias_partials(float *partial, const forge_bf16 *dout, int N, int OC, int R) {
    const int rows = (N + R - 1) / R;
    for (int r = 0; r < R; r++) {
        const int n_begin = r * rows, n_end = n_begin + rows < N ? n_begin + rows : N;
        for (int c = 0; c < OC; c++) {
            float sum = 0.0f;
            for (int y = 0; y < CS_LANES; y++) {
                float acc = 0.0f;
                for (int n = n_begin + y; n < n_end; n += CS_LANES) acc += cs_bf(dout[(size_t)n * OC + c]);
                sum += acc;
            }
            partial[(size_t)r * OC + c] = sum;
        }
    }
}

/* The norms' partials, dw (R, C) then (mean != NULL: LayerNorm) db (R, C): dw = fmaf(dout, x-hat, dw) and db += dout
 * over a lane's rows in order, x-hat = (x - mean) rstd or x rstd. fused (norm_backward_fused_bf16_kernel): block r
 * takes rows [r rows, (r + 1) rows), warp w its rows begin + w, + CS_LANES, ..., and the warps combine as
 * ((w0 + w1) + w2) + ...; else (norm_param_partial_bf16_kernel): chunk r the same rows in CS_LANES lanes, combined
 * from 0 as ((0 + l0) + l1) + ... (the bits differ only for a -0 sum). */
static void cs_norm_partials(float *partial, int fused, const forge_bf16 *dout, const forge_bf16 *inp,
                             const float *mean, const float *rstd, int N, int C, int R, int rows) {
    for (int r = 0; r < R; r++) {
        const int n_begin = r * rows, n_end = n_begin + rows < N ? n_begin + rows : N;
        for (int c = 0; c < C; c++) {
            float tw = 0.0f, tb = 0.0f;
            for (int y = 0; y < CS_LANES; y++) {
                float dw = 0.0f, db = 0.0f;
                for (int n = n_begin + y; n < n_end; n += CS_LANES) {
                    const size_t o = (size_t)n * C + c;
                    const float g = cs_bf(dout[o]), x = cs_bf(inp[o]);
                    const float xh = mean ? (x - mean[n]) * rstd[n] : x * rstd[n];
                    dw = fmaf(g, xh, dw);
                    db += g;
                }
                if (fused && y == 0) {
                    tw = dw;
                    tb = db;
                } else {
                    tw = tw + dw;
                    tb = tb + db;
                }
            }
            partial[(size_t)r * C + c] = tw;
            if (mean) partial[((size_t)R + r) * C + c] = tb;
        }
    }
}

/* out[c] = old[c] + (sum over r in order from 0 of partial[r][c]): reduce.cu's colsum_finish_kernel */
static void cs_finish(float *out, const float *old, const float *partial, int R, int C) {
    for (int c = 0; c < C; c++) {
        float sum = 0.0f;
        for (int r = 0; r < R; r++) sum += partial[(size_t)r * C + c];
        out[c] = old[c] + sum;
    }
}

/* ---- one case -------------------------------------------------------------------------------------------------- */

typedef struct {
    forge_bf16 *dout, *inp, *dinp; /* device; dout_at: dout + offset */
    float *weight, *mean, *rstd, *out0, *out1, *dweight;
    const forge_bf16 *dout_at;
} cs_dev;

static forge_status cs_call(forge_backend *be, const cs_case *k, const cs_dev *d) {
    switch (k->kind) {
    case CS_MATMUL:
        return be->matmul_backward_weight_bf16(be, k->C > 0 ? d->dweight : NULL, d->out0, d->dout_at, d->inp, k->N,
                                               k->C, k->OC);
    case CS_GELU: return be->gelu_backward_dbias_bf16(be, d->dinp, d->out0, d->inp, d->dout, k->N, k->OC);
    case CS_LN:
        return be->layernorm_backward_bf16(be, d->dinp, d->out0, d->out1, d->dout, d->inp, d->weight, d->mean, d->rstd,
                                           k->N, k->C, 0);
    default:
        return be->rmsnorm_backward_bf16(be, d->dinp, d->out0, d->dout, d->inp, d->weight, d->rstd, k->N, k->C, 0);
    }
}

static const char *const CS_OP[4] = {"matmul_backward_weight_bf16.dbias", "gelu_backward_dbias_bf16.dbias",
                                     "layernorm_backward_bf16.dweight+dbias", "rmsnorm_backward_bf16.dweight"};

/* The outputs against want (n_out x cols floats): one PASS/FAIL line naming the run. */
static void cs_compare(parity *P, forge_backend *be, const cs_case *k, const cs_dev *d, const char *shape,
                       const char *run, const float *want, float *got, int cols, int n_out) {
    char op[128];
    snprintf(op, sizeof op, "%s[%s]", CS_OP[k->kind], run);
    if (be->copy_to_host(be, got, d->out0, (size_t)cols * sizeof *got) != FORGE_OK ||
        (n_out == 2 && be->copy_to_host(be, got + cols, d->out1, (size_t)cols * sizeof *got) != FORGE_OK)) {
        report(P, 0, op, shape, INFINITY, 0, forge_error_message());
        return;
    }
    size_t wrong = 0, first = 0;
    for (size_t i = 0; i < (size_t)n_out * cols; i++)
        if (memcmp(&got[i], &want[i], sizeof *got) != 0 && wrong++ == 0) first = i;
    char why[200] = "";
    if (wrong)
        snprintf(why, sizeof why, "(%zu of %zu differ from the emulated order; first: output %zu column %zu, %.9g "
                 "against %.9g)", wrong, (size_t)n_out * cols, first / (size_t)cols, first % (size_t)cols,
                 (double)got[first], (double)want[first]);
    report(P, wrong == 0, op, shape, (double)wrong, 0, wrong ? why : NULL);
}

/* the old outputs back into the device buffers */
static forge_status cs_reset(forge_backend *be, const cs_dev *d, const float *old, int cols, int n_out) {
    forge_status s = be->copy_to_device(be, d->out0, old, (size_t)cols * sizeof *old);
    if (s == FORGE_OK && n_out == 2) s = be->copy_to_device(be, d->out1, old + cols, (size_t)cols * sizeof *old);
    return s;
}

static void cs_case_run(parity *P, forge_backend *be, const char *backend, const cs_case *k, int num_sms) {
    const int norm = k->kind == CS_LN || k->kind == CS_RMS, ln = k->kind == CS_LN;
    const int cols = norm ? k->C : k->OC, n_out = ln ? 2 : 1;
    const int width = k->kind == CS_MATMUL || k->kind == CS_GELU ? k->OC : k->C; /* dout's row */
    const size_t n = (size_t)k->N * width, n_inp = k->kind == CS_MATMUL ? (size_t)k->N * k->C : n;
    /* the kernels' partition: R and the blocks of the first pass (the matmul's; the others' depend on the path) */
    const int fused = norm && k->C % 8 == 0 && k->C <= 1024;
    int rows = 0, R;
    if (fused) {
        R = cs_fused_grid(k->N, k->C, n_out, num_sms, &rows);
    } else {
        R = cs_chunks(k->N, cols, n_out);
        rows = (k->N + R - 1) / R;
    }
    const int units = (n_out * cols + CS_COLS - 1) / CS_COLS;
    char shape[192];
    snprintf(shape, sizeof shape, "%s N=%d %s=%d%s%s R=%d units=%d (%s)", backend, k->N, norm ? "C" : "OC", cols,
             k->kind == CS_MATMUL && k->C > 0 ? " with dW" : "", k->offset ? " dout+1" : "", R, units,
             norm ? (fused ? "fused kernel" : "column kernel") : k->kind == CS_GELU ? "gelu kernel" : "dbias kernel");

    forge_bf16 *h_dout = malloc((n + (size_t)k->offset) * sizeof *h_dout), *h_inp = malloc((n_inp ? n_inp : 1) * 2);
    forge_bf16 *h_dinp = malloc(n * sizeof *h_dinp);
    float *h_w = malloc((size_t)(norm ? k->C : 1) * sizeof(float)), *h_mean = malloc((size_t)k->N * sizeof(float));
    float *h_rstd = malloc((size_t)k->N * sizeof(float)), *old = malloc((size_t)n_out * cols * sizeof(float));
    float *want = malloc((size_t)n_out * cols * sizeof(float)), *got = malloc((size_t)n_out * cols * sizeof(float));
    float *partial = malloc((size_t)n_out * R * cols * sizeof(float));
    cs_dev d;
    memset(&d, 0, sizeof d);
    int ok = h_dout && h_inp && h_dinp && h_w && h_mean && h_rstd && old && want && got && partial;
    if (!ok) {
        report(P, 0, CS_OP[k->kind], shape, INFINITY, 0, "(host out of memory)");
        goto done;
    }
    for (size_t i = 0; i < n + (size_t)k->offset; i++) h_dout[i] = forge_bf16_from_f32(rand_range(P, -1, 1));
    for (size_t i = 0; i < n_inp; i++)
        h_inp[i] = forge_bf16_from_f32(rand_range(P, k->kind == CS_GELU ? -5 : -2, k->kind == CS_GELU ? 5 : 2));
    for (int c = 0; norm && c < k->C; c++) h_w[c] = rand_range(P, -1, 1);
    for (int i = 0; i < k->N; i++) {
        h_mean[i] = rand_range(P, -0.5f, 0.5f);
        h_rstd[i] = rand_range(P, 0.5f, 2.0f);
    }
    for (int i = 0; i < n_out * cols; i++) old[i] = rand_range(P, -1, 1);
    ok = be->mem_alloc(be, (void **)&d.dout, (n + (size_t)k->offset) * sizeof *d.dout) == FORGE_OK &&
         be->mem_alloc(be, (void **)&d.inp, (n_inp ? n_inp : 1) * sizeof *d.inp) == FORGE_OK &&
         be->mem_alloc(be, (void **)&d.dinp, n * sizeof *d.dinp) == FORGE_OK &&
         be->mem_alloc(be, (void **)&d.weight, (size_t)(norm ? k->C : 1) * sizeof(float)) == FORGE_OK &&
         be->mem_alloc(be, (void **)&d.mean, (size_t)k->N * sizeof(float)) == FORGE_OK &&
         be->mem_alloc(be, (void **)&d.rstd, (size_t)k->N * sizeof(float)) == FORGE_OK &&
         be->mem_alloc(be, (void **)&d.out0, (size_t)cols * sizeof(float)) == FORGE_OK &&
         be->mem_alloc(be, (void **)&d.out1, (size_t)cols * sizeof(float)) == FORGE_OK &&
         be->mem_alloc(be, (void **)&d.dweight, (size_t)(k->C > 0 ? k->C : 1) * k->OC * sizeof(float)) == FORGE_OK;
    if (ok) {
        d.dout_at = d.dout + k->offset;
        ok = be->copy_to_device(be, d.dout, h_dout, (n + (size_t)k->offset) * sizeof *h_dout) == FORGE_OK &&
             be->copy_to_device(be, d.inp, h_inp, n_inp * sizeof *h_inp) == FORGE_OK &&
             be->copy_to_device(be, d.weight, h_w, (size_t)(norm ? k->C : 0) * sizeof(float)) == FORGE_OK &&
             be->copy_to_device(be, d.mean, h_mean, (size_t)k->N * sizeof(float)) == FORGE_OK &&
             be->copy_to_device(be, d.rstd, h_rstd, (size_t)k->N * sizeof(float)) == FORGE_OK &&
             be->memset_zero(be, d.dweight, (size_t)(k->C > 0 ? k->C : 1) * k->OC * sizeof(float)) == FORGE_OK;
    }
    if (!ok) {
        report(P, 0, CS_OP[k->kind], shape, INFINITY, 0, forge_error_message());
        goto done;
    }

    /* op by op, twice; the expected values from the first call's inputs (gelu: the dinp it wrote) */
    for (int rep = 0; rep < 2 && ok; rep++) {
        forge_status s = cs_reset(be, &d, old, cols, n_out);
        if (s == FORGE_OK) s = cs_call(be, k, &d);
        if (s != FORGE_OK) {
            report(P, 0, CS_OP[k->kind], shape, INFINITY, 0, forge_error_message());
            ok = 0;
            break;
        }
        if (rep == 0) {
            if (k->kind == CS_GELU) {
                if (be->copy_to_host(be, h_dinp, d.dinp, n * sizeof *h_dinp) != FORGE_OK) {
                    report(P, 0, CS_OP[k->kind], shape, INFINITY, 0, forge_error_message());
                    ok = 0;
                    break;
                }
                cs_dbias_partials(partial, h_dinp, k->N, k->OC, R);
            } else if (k->kind == CS_MATMUL) {
                cs_dbias_partials(partial, h_dout + k->offset, k->N, k->OC, R);
            } else {
                cs_norm_partials(partial, fused, h_dout, h_inp, ln ? h_mean : NULL, h_rstd, k->N, k->C, R, rows);
            }
            for (int p = 0; p < n_out; p++)
                cs_finish(want + (size_t)p * cols, old + (size_t)p * cols, partial + (size_t)p * R * cols, R, cols);
        }
        cs_compare(P, be, k, &d, shape, rep == 0 ? "call 1" : "call 2", want, got, cols, n_out);
    }

    /* recorded once, replayed twice */
    if (ok) {
        void *graph = NULL;
        forge_status s = be->capture_begin(be);
        if (s == FORGE_OK) {
            const forge_status sc = cs_call(be, k, &d);
            s = be->capture_end(be, &graph);
            if (sc != FORGE_OK) s = sc;
        }
        for (int rep = 0; rep < 2 && s == FORGE_OK; rep++) {
            s = cs_reset(be, &d, old, cols, n_out);
            if (s == FORGE_OK) s = be->graph_launch(be, graph);
            if (s == FORGE_OK) cs_compare(P, be, k, &d, shape, rep == 0 ? "replay 1" : "replay 2", want, got, cols,
                                          n_out);
        }
        if (s != FORGE_OK) report(P, 0, CS_OP[k->kind], shape, INFINITY, 0, forge_error_message());
        if (graph) be->graph_destroy(be, graph);
    }

done:;
    void *dev[] = {d.dout, d.inp, d.dinp, d.weight, d.mean, d.rstd, d.out0, d.out1, d.dweight};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) be->mem_free(be, dev[i]);
    free(h_dout);
    free(h_inp);
    free(h_dinp);
    free(h_w);
    free(h_mean);
    free(h_rstd);
    free(old);
    free(want);
    free(got);
    free(partial);
}

void run_colsum_cases(parity *P) {
    static const cs_case cases[] = {
        /* matmul dbias: N, C (0: dbias only), OC, dout offset */
        {CS_MATMUL, 1, 0, 8, 0},       /* one row, one block */
        {CS_MATMUL, 3, 0, 1000, 0},    /* 4 blocks, 16 units: each finisher takes 4 */
        {CS_MATMUL, 37, 0, 131, 0},    /* OC odd: the scalar kernel */
        {CS_MATMUL, 200, 0, 264, 1},   /* dout off 16 bytes: the scalar kernel at OC % 8 == 0 */
        {CS_MATMUL, 1001, 64, 768, 0}, /* after the dW GEMM */
        {CS_MATMUL, 4099, 0, 3072, 0},
        {CS_MATMUL, 700, 0, 9001, 0},   /* 141 units (> the SMs), the scalar kernel */
        {CS_MATMUL, 2048, 0, 20000, 0}, /* 313 units, the 8-wide kernel */
        {CS_MATMUL, 16384, 0, 2304, 0}, /* gpt2-124m's qkv */
        /* gelu dbias: N, OC (the fallback at OC % 8 != 0: gelu, then the dbias kernel) */
        {CS_GELU, 1, 0, 8, 0},
        {CS_GELU, 5, 0, 4096, 0}, /* 16 work items: fewer blocks than its 64 units */
        {CS_GELU, 130, 0, 131, 0},
        {CS_GELU, 333, 0, 3072, 0},
        {CS_GELU, 16384, 0, 3072, 0}, /* gpt2-124m's fc */
        /* norms: N, C */
        {CS_LN, 1, 8, 0, 0},
        {CS_LN, 3, 256, 0, 0}, /* one block, 8 units */
        {CS_LN, 37, 768, 0, 0},
        {CS_LN, 5000, 1024, 0, 0},
        {CS_LN, 37, 131, 0, 0},   /* C odd: the column kernel */
        {CS_LN, 1000, 1100, 0, 0}, /* C > 1024: the column kernel */
        {CS_LN, 2, 4100, 0, 0},    /* 129 blocks, 129 units */
        {CS_LN, 16384, 768, 0, 0}, /* gpt2-124m */
        {CS_RMS, 1, 8, 0, 0},
        {CS_RMS, 77, 520, 0, 0},
        {CS_RMS, 70, 9000, 0, 0}, /* 141 units (> the SMs) */
        {CS_RMS, 16384, 512, 0, 0}, /* gpt-25m */
    };
    int num_sms = 0;
    const int dev = forge_cuda_backend_device(P->gpu);
    if (dev < 0 || cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        num_sms <= 0) {
        report(P, 0, "colsum", "", INFINITY, 0, "(cannot read the device's SM count)");
        return;
    }
    forge_runtime_options rt;
    forge_runtime_options_default(&rt);
    rt.pdl = 1;
    forge_backend *pdl_be = NULL;
    if (forge_backend_create(&pdl_be, FORGE_DEVICE_CUDA, &rt) != FORGE_OK) {
        report(P, 0, "cuda_backend_create", "pdl on (colsum)", INFINITY, 0, forge_error_message());
        pdl_be = NULL;
    }
    for (int b = 0; b < 2; b++) {
        forge_backend *be = b == 0 ? P->gpu : pdl_be;
        if (!be) continue;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const cs_case *k = &cases[i];
            const size_t elems = (size_t)k->N * (k->kind == CS_MATMUL || k->kind == CS_GELU ? k->OC : k->C);
            if (P->quick && elems > 1000000) continue;
            cs_case_run(P, be, b == 0 ? "pdl off" : "pdl on", k, num_sms);
        }
    }
    if (pdl_be) forge_backend_destroy(pdl_be);
}
