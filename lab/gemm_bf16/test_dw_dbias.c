/*
 * test_dw_dbias.c: `forge-lab test dw-dbias [--quick]`: matmul_backward_weight_bf16 with dbias (the backend's product
 * op, which sums dbias inside the dW GEMM on the 128 x 256 plans: dw_dbias.h) against the GEMM without dbias and a
 * float64 reference. Ends with "N passed, N failed"; exit status 1 on any failure.
 *
 * Per shape (N tokens, C, OC): dout and inp uniform in [-1, 1) truncated to bf16; dweight starts as 1 + (i % 7) / 8
 * and dbias as (i % 5) / 4 - 0.5 (the op accumulates). Run 0: the op with dbias NULL (the GEMM alone), then the op
 * with C = 0 (the separate column-sum pass alone: the unfused dbias). Runs 1 and 2: the op with dbias, ctx->ws set
 * to NaN before each (a partial row the GEMM fails to write shows). Checks:
 * - dweight of run 1 bitwise equal to run 0's (dbias changes nothing in dW's plan or its consumers' code), no NaN;
 * - dbias of run 1 within SUM(N) of the float64 reference dbias0 + sum_n dout, and run 0's unfused dbias too (the
 *   reference's sanity). SUM(N) = tol_for_sum(N) = 1e-4 * max(1, sqrt(N) / 8), op_list.h's tolerance for
 *   matmul_backward_weight_bf16's dbias: both paths add the same N bf16 values (|v| <= 1) in fp32 in different
 *   orders (the fused one K-ordered per lane within a split, the split rows in order; the unfused one in row chunks
 *   and lanes), so the values are equal up to rounding, whose error grows like sqrt(N) for random signs;
 * - runs 1 and 2 bitwise equal (dweight and dbias).
 * Shapes: the GPT-2 124M dW shapes at N = 16384 (qkv 2304 x 768: 128 x 256 at 2 splits with the TMA-stored
 * partials, fused; attention projection 768 x 768: 128 x 256 at 7, fused; MLP projection 768 x 3072: C192 at 2, the
 * separate pass) and small odd ones whose plans (on 132 SMs) cover the register-stored partials with M % 128 != 0 (a
 * partly loaded A box), the TMA-stored partials at another split count, C192 with M % 192 != 0, both tiles unsplit
 * (the epilogue's C +=), token counts that are not multiples of 64 (the zero-filled K tail), C not a multiple of
 * the tile width, and a 128 x 128 plan (the separate pass); the plan each shape got is printed ("fused" where the
 * GEMM sums dbias), so on another SM count a shape may test another plan.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "../../tests_gpu/gpu_test.h"
#include "dw_dbias.h"

static uint16_t dwb_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static float dwb_widen(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float dwb_uniform(parity *P) { return (float)(forge_rng_u32(&P->rng) >> 8) / 16777216.0f * 2.0f - 1.0f; }

static void dwb_case(parity *P, int N, int C, int OC) {
    const char *op = "dw_dbias";
    char plan[96], shape[160], sub[320];
    const int kind = lab_dw_dbias_plan(N, C, OC, plan, sizeof plan);
    snprintf(shape, sizeof shape, "N=%d C=%d OC=%d [%s%s]", N, C, OC, plan, kind == 1 ? " fused" : "");
    if (kind < 0) {
        report_skip(P, op, shape, "the op does not run the wgmma GEMM here");
        return;
    }
    const size_t dn = (size_t)N * OC, xn = (size_t)N * C, wn = (size_t)OC * C;
    uint16_t *hd = malloc(dn * 2), *hx = malloc(xn * 2);
    float *w0 = malloc(wn * 4), *b0 = malloc((size_t)OC * 4), *hw[3] = {malloc(wn * 4), malloc(wn * 4), malloc(wn * 4)};
    float *hb[3] = {malloc((size_t)OC * 4), malloc((size_t)OC * 4), malloc((size_t)OC * 4)};
    double *ref = calloc((size_t)OC, sizeof *ref);
    void *dd = NULL, *dx = NULL, *dw[3] = {NULL, NULL, NULL}, *db[3] = {NULL, NULL, NULL};
    int ok = hd && hx && w0 && b0 && ref && hw[0] && hw[1] && hw[2] && hb[0] && hb[1] && hb[2];
    ok = ok && cudaMalloc(&dd, dn * 2) == cudaSuccess && cudaMalloc(&dx, xn * 2) == cudaSuccess;
    for (int r = 0; r < 3 && ok; r++)
        ok = cudaMalloc(&dw[r], wn * 4) == cudaSuccess && cudaMalloc(&db[r], (size_t)OC * 4) == cudaSuccess;
    if (!ok) {
        report(P, 0, op, shape, INFINITY, 0, "(allocation failed)");
        goto done;
    }
    for (size_t i = 0; i < dn; i++) hd[i] = dwb_bf16(dwb_uniform(P));
    for (size_t i = 0; i < xn; i++) hx[i] = dwb_bf16(dwb_uniform(P));
    for (size_t i = 0; i < wn; i++) w0[i] = 1.0f + (float)(i % 7) / 8.0f;
    for (int o = 0; o < OC; o++) b0[o] = (float)(o % 5) / 4.0f - 0.5f;
    ok = cudaMemcpy(dd, hd, dn * 2, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(dx, hx, xn * 2, cudaMemcpyHostToDevice) == cudaSuccess;
    /* run 0: the GEMM alone, then the separate column sum alone; 1 and 2: the op with dbias */
    for (int r = 0; r < 3 && ok; r++) {
        ok = cudaMemcpy(dw[r], w0, wn * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMemcpy(db[r], b0, (size_t)OC * 4, cudaMemcpyHostToDevice) == cudaSuccess;
        if (!ok) break;
        forge_status s;
        if (r == 0) {
            s = P->gpu->matmul_backward_weight_bf16(P->gpu, dw[r], NULL, dd, dx, N, C, OC);
            if (s == FORGE_OK) s = P->gpu->matmul_backward_weight_bf16(P->gpu, NULL, db[r], dd, NULL, N, 0, OC);
        } else {
            s = lab_dw_dbias_poison_ws(P->gpu);
            if (s == FORGE_OK) s = P->gpu->matmul_backward_weight_bf16(P->gpu, dw[r], db[r], dd, dx, N, C, OC);
        }
        if (s != FORGE_OK) {
            snprintf(sub, sizeof sub, "(run %d returned %s: %s)", r, forge_status_name(s), forge_error_message());
            report(P, 0, op, shape, INFINITY, 0, sub);
            goto done;
        }
        ok = cudaDeviceSynchronize() == cudaSuccess &&
             cudaMemcpy(hw[r], dw[r], wn * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
             cudaMemcpy(hb[r], db[r], (size_t)OC * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
    }
    if (!ok) {
        report(P, 0, op, shape, INFINITY, 0, "(kernel or copy failed)");
        goto done;
    }
    {
        size_t w_bits = 0, w_nan = 0, rerun_bits = 0;
        for (size_t i = 0; i < wn; i++) {
            w_bits += memcmp(&hw[1][i], &hw[0][i], 4) != 0;
            w_nan += isnan(hw[1][i]) != 0;
            rerun_bits += memcmp(&hw[2][i], &hw[1][i], 4) != 0;
        }
        for (int o = 0; o < OC; o++) rerun_bits += memcmp(&hb[2][o], &hb[1][o], 4) != 0;
        for (size_t n = 0; n < (size_t)N; n++) /* n outer: dout is (N, OC) rows */
            for (int o = 0; o < OC; o++) ref[o] += (double)dwb_widen(hd[n * OC + o]);
        const double tol = tol_for_sum((double)N);
        double err_op = 0.0, err_unfused = 0.0;
        for (int o = 0; o < OC; o++) {
            const double r = ref[o] + (double)b0[o];
            const double eo = fabs((double)hb[1][o] - r), eu = fabs((double)hb[0][o] - r);
            if (!(eo <= err_op)) err_op = eo; /* NaN sticks */
            if (!(eu <= err_unfused)) err_unfused = eu;
        }
        snprintf(sub, sizeof sub, "%s: dweight vs the GEMM without dbias, %zu elements' bits differ, %zu NaN", shape,
                 w_bits, w_nan);
        report(P, w_bits == 0 && w_nan == 0, op, sub, (double)(w_bits + w_nan), 0.0, NULL);
        snprintf(sub, sizeof sub, "%s: dbias vs float64 (SUM(N))", shape);
        report(P, err_op <= tol, op, sub, err_op, tol, NULL);
        snprintf(sub, sizeof sub, "%s: the separate pass's dbias vs float64 (SUM(N))", shape);
        report(P, err_unfused <= tol, op, sub, err_unfused, tol, NULL);
        snprintf(sub, sizeof sub, "%s: run to run, %zu elements' bits differ (dweight, dbias)", shape, rerun_bits);
        report(P, rerun_bits == 0, op, sub, (double)rerun_bits, 0.0, NULL);
    }
done:
    cudaFree(dd), cudaFree(dx);
    for (int r = 0; r < 3; r++) cudaFree(dw[r]), cudaFree(db[r]), free(hw[r]), free(hb[r]);
    free(hd), free(hx), free(w0), free(b0), free(ref);
}

int lab_test_dw_dbias(int argc, char **argv) {
    parity P;
    memset(&P, 0, sizeof P);
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            P.quick = 1;
        } else {
            fprintf(stderr, "usage: forge-lab test dw-dbias [--quick]\n");
            return 2;
        }
    }
    forge_rng_seed(&P.rng, 1234, 11);
    if (forge_backend_create(&P.gpu, FORGE_DEVICE_CUDA, NULL) != FORGE_OK) {
        printf("cannot create the CUDA backend: %s\n0 passed, 1 failed\n", forge_error_message());
        return 1;
    }
    printf("forge-lab test dw-dbias%s\n", P.quick ? " (quick shapes)" : "");
    /* {N, C, OC}; the plans on 132 SMs: GPT-2 124M qkv (128x256 s2 tma), attention projection (128x256 s7 tma),
     * MLP projection (c192 s2); OC = 136 (128x256 s7, partials from the registers: M % 128 = 8), OC = 384 (128x256
     * s6 tma), OC = 1000 (c192 s2, M % 192 = 40; and 128x256 s1), OC = 1160 (c192 s1), and a 128 x 128 plan (the
     * separate pass) */
    static const int shapes[][3] = {{16384, 768, 2304}, {16384, 768, 768}, {16384, 3072, 768}, {8200, 2056, 136},
                                    {9000, 1544, 384},  {9000, 2056, 1000}, {1000, 3080, 1000}, {4100, 3080, 1160},
                                    {4104, 264, 136}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (P.quick && i > 0 && i < 3) continue; /* quick: qkv of the GPT-2 shapes */
        dwb_case(&P, shapes[i][0], shapes[i][1], shapes[i][2]);
    }
    forge_backend_destroy(P.gpu);
    printf("%d passed, %d failed\n", P.passed, P.failed);
    return P.failed ? 1 : 0;
}
