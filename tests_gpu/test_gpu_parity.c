/*
 * test_gpu_parity.c: every op of the CUDA backend against the CPU reference
 * backend (forge_cpu_backend_create(.., reference = 1)), forward and
 * backward, on shapes chosen to miss every tile size, plus a device-memory
 * check of the pooled allocator. Standalone (its own main): built by
 * `make cuda` as build/cuda/forge_gpu_tests, run on a GPU machine
 * (scripts/device_run.sh).
 *
 * How a case works:
 * - Inputs are random (forge_rng, fixed seeds), never zeros, and identical
 *   on both sides. ids/targets are random too, with duplicates.
 * - Forward outputs are POISONED with NaN on both sides before the op, so an
 *   element the kernel forgets to write fails the comparison.
 * - Accumulating outputs (every backward, backend.h) are pre-filled with the
 *   same random values on both sides, so "=" instead of "+=" fails.
 * - Every device buffer has GUARD floats after it holding a sentinel; a
 *   write past the end fails the case even when memcheck is not running.
 * - One line per compared output: "PASS|FAIL op[impl] shape maxerr=.. tol=..".
 *   Ops the CPU reference leaves NULL print SKIP; a NULL CUDA entry FAILs.
 *
 * Tolerances (max abs error) are 1e-4 unless stated at the case:
 * - a reduction of length K (matmul, dbias, norm dweight, attention
 *   backward) uses tol_for_sum(K) = 1e-4 * max(1, sqrt(K)/8): fp32 sums in
 *   different orders drift like sqrt(K) ulps of the running sum;
 * - embedding / position / rope are exact up to the last ulp: 1e-6;
 * - sumsq compares relative: tol = 1e-5 * |reference|;
 * - adamw: 1e-5 (updates are lr-sized; a wrong clip factor is far above).
 *
 * Matmul and attention cases run on the default CUDA backend (FORGE_MATMUL
 * from the environment) and again on backends created with FORGE_MATMUL =
 * simt64, simt128, cublas, auto and tf32 (attention always uses the SIMT
 * GEMM; under cublas, auto and tf32 only the matmul ops are repeated). A
 * build without cuBLAS (CUBLAS=0) skips cublas and checks that it is
 * refused; auto there runs forge's kernel.
 * tf32 tolerance (matmul under FORGE_MATMUL=tf32): each operand is rounded
 * to tf32 (10 mantissa bits, round to nearest: relative error <= 2^-11), so
 * a product is off by <= 2^-10 |a||b| and a K-long dot product by <= 2^-10
 * sum_k |a_k||b_k| plus the fp32 summation term tol_for_sum(K). With inputs
 * uniform in [-1, 1], sum |a||b| has mean K/4 and standard deviation
 * 0.217 sqrt(K); the bound uses mean + 6 sd (never exceeded in practice):
 * tol = 2^-10 (K/4 + 1.3 sqrt(K)) + tol_for_sum(K). The measured maxerr is
 * far below it (errors of opposite signs cancel); a wrong layout or a
 * missed K tile is off by O(sqrt(K)/3), far above it.
 * Under tf32, shapes with few output tiles and a long K take split-K
 * (forge_gemm_mma_tf32_splits): {257,768,3072} forward (+bias in the
 * reduction), {1031,200,2100} dX and dW, {1001,45,130} dW (scalar loads).
 * The auto table's cache is checked too (case_matmul_table): a corrupt file
 * is replaced by a valid one holding the measured shape.
 * FORGE_GPU_TESTS_QUICK=1 drops the large shapes (for compute-sanitizer).
 * FORGE_GPU_TESTS_ONLY=flash16 runs only the bf16 flash attention cases;
 * each shape checks the mma.sync kernels by name (flash16_forward.*,
 * flash16_backward.*), the Hopper wgmma ones by name (flash16_forward_wgmma.*,
 * flash16_backward_wgmma.*) and the default entries (flash16_default.*);
 * the wgmma forward also runs in each consumer schedule
 * (flash16_forward_wgmma_ov.* overlap, flash16_forward_wgmma_pp.* pingpong,
 * flash16_forward_wgmma_ps.* persist, flash16_forward_wgmma_pso.* persist_ov,
 * flash16_forward_wgmma_{pp,ps}128.* pingpong / persist with 128-key tiles at
 * D=128; FORGE_FLASH16_FWD_SCHED changes none of the named ones).
 * forge_gemm_fp8_nt / forge_gemm_tf32_nt (called directly, not backend ops)
 * are checked against a double reference of exactly representable values
 * (case_gemm_fp8: tolerances there) and for their FORGE_ERR_UNSUPPORTED
 * refusals; FORGE_GPU_TESTS_ONLY=gemm_fp8 runs only those GEMM cases.
 * forge_gemm_bf16_tn_wgmma_reduce (dW split-K): both reductions exact on exactly representable values, and
 * bit-reproducible / equal to each other on random ones (case_gemm_tn_reduce); FORGE_GPU_TESTS_ONLY=gemm_tn.
 * Ends with "N passed, N failed"; exit status 1 on any failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_test.h"
#include "../src/backend/cuda/cuda_backend.h"
#include "../src/runtime/pool.h"
#include "../tests/ops/attention_memory.h"

/* ---- elementwise ----------------------------------------------------------- */

static void case_elementwise(parity *P, size_t n) {
    forge_backend *C = P->cpu, *G = P->gpu;
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu", n);
    fbuf a = {0}, b = {0}, c = {0}, out = {0}, out2 = {0};
    if (!fbuf_rand(P, &a, n, -3, 3) || !fbuf_rand(P, &b, n, -3, 3) || !fbuf_rand(P, &c, n, -1, 1))
        goto done;

    if (supported(P, "accumulate", shape, C->accumulate, G->accumulate) && fbuf_rand(P, &out, n, -1, 1)) {
        if (ran_ok(P, "accumulate", shape, C->accumulate(C, out.c, a.c, n), G->accumulate(G, out.g, a.g, n)))
            check(P, "accumulate", shape, &out, TOL_EXACT, 0);
        fbuf_free(P, &out);
    }
    if (supported(P, "add_forward", shape, C->add_forward, G->add_forward) && fbuf_poison(P, &out, n)) {
        if (ran_ok(P, "add_forward", shape, C->add_forward(C, out.c, a.c, b.c, n),
                   G->add_forward(G, out.g, a.g, b.g, n)))
            check(P, "add_forward", shape, &out, TOL_EXACT, 0);
        fbuf_free(P, &out);
    }
    if (supported(P, "gelu_forward", shape, C->gelu_forward, G->gelu_forward) && fbuf_poison(P, &out, n)) {
        if (ran_ok(P, "gelu_forward", shape, C->gelu_forward(C, out.c, a.c, n),
                   G->gelu_forward(G, out.g, a.g, n)))
            check(P, "gelu_forward", shape, &out, TOL_DEFAULT, 0);
        fbuf_free(P, &out);
    }
    if (supported(P, "gelu_backward", shape, C->gelu_backward, G->gelu_backward) &&
        fbuf_rand(P, &out, n, -1, 1)) {
        if (ran_ok(P, "gelu_backward", shape, C->gelu_backward(C, out.c, a.c, c.c, n),
                   G->gelu_backward(G, out.g, a.g, c.g, n)))
            check(P, "gelu_backward.dinp", shape, &out, TOL_DEFAULT, 0);
        fbuf_free(P, &out);
    }
    if (supported(P, "swiglu_forward", shape, C->swiglu_forward, G->swiglu_forward) &&
        fbuf_poison(P, &out, n)) {
        if (ran_ok(P, "swiglu_forward", shape, C->swiglu_forward(C, out.c, a.c, b.c, n),
                   G->swiglu_forward(G, out.g, a.g, b.g, n)))
            check(P, "swiglu_forward", shape, &out, TOL_DEFAULT, 0);
        fbuf_free(P, &out);
    }
    if (supported(P, "swiglu_backward", shape, C->swiglu_backward, G->swiglu_backward) &&
        fbuf_rand(P, &out, n, -1, 1) && fbuf_rand(P, &out2, n, -1, 1)) {
        if (ran_ok(P, "swiglu_backward", shape, C->swiglu_backward(C, out.c, out2.c, c.c, a.c, b.c, n),
                   G->swiglu_backward(G, out.g, out2.g, c.g, a.g, b.g, n))) {
            check(P, "swiglu_backward.dgate", shape, &out, TOL_DEFAULT, 0);
            check(P, "swiglu_backward.dup", shape, &out2, TOL_DEFAULT, 0);
        }
    }
done:
    fbuf_free(P, &a);
    fbuf_free(P, &b);
    fbuf_free(P, &c);
    fbuf_free(P, &out);
    fbuf_free(P, &out2);
}

/* ---- embeddings ------------------------------------------------------------ */

static void case_embedding(parity *P, int N, int C, int V) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d C=%d V=%d", N, C, V);
    fbuf table = {0}, dout = {0}, out = {0}, dtable = {0};
    ibuf ids = {0};
    if (!ibuf_rand(P, &ids, N, V, 0, 0) || !fbuf_rand(P, &table, (size_t)V * C, -1, 1) ||
        !fbuf_rand(P, &dout, (size_t)N * C, -1, 1))
        goto done;
    if (supported(P, "embedding_forward", shape, Cb->embedding_forward, G->embedding_forward) &&
        fbuf_poison(P, &out, (size_t)N * C)) {
        if (ran_ok(P, "embedding_forward", shape, Cb->embedding_forward(Cb, out.c, ids.c, table.c, N, C),
                   G->embedding_forward(G, out.g, ids.g, table.g, N, C)))
            check(P, "embedding_forward", shape, &out, TOL_EXACT, 0);
    }
    /* dtable pre-filled: += semantics, and rows of unused ids must stay as they were */
    if (supported(P, "embedding_backward", shape, Cb->embedding_backward, G->embedding_backward) &&
        fbuf_rand(P, &dtable, (size_t)V * C, -1, 1)) {
        if (ran_ok(P, "embedding_backward", shape,
                   Cb->embedding_backward(Cb, dtable.c, dout.c, ids.c, N, C),
                   G->embedding_backward(G, dtable.g, dout.g, ids.g, N, C)))
            check(P, "embedding_backward.dtable", shape, &dtable, TOL_EXACT, 0);
    }
done:
    ibuf_free(P, &ids);
    fbuf_free(P, &table);
    fbuf_free(P, &dout);
    fbuf_free(P, &out);
    fbuf_free(P, &dtable);
}

static void case_position(parity *P, int B, int T, int C, int maxT) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d T=%d C=%d maxT=%d", B, T, C, maxT);
    size_t n = (size_t)B * T * C;
    fbuf inp = {0}, wpe = {0}, out = {0}, dout = {0}, dinp = {0}, dwpe = {0};
    if (!fbuf_rand(P, &inp, n, -1, 1) || !fbuf_rand(P, &wpe, (size_t)maxT * C, -1, 1) ||
        !fbuf_rand(P, &dout, n, -1, 1))
        goto done;
    if (supported(P, "position_forward", shape, Cb->position_forward, G->position_forward) &&
        fbuf_poison(P, &out, n)) {
        if (ran_ok(P, "position_forward", shape, Cb->position_forward(Cb, out.c, inp.c, wpe.c, B, T, C),
                   G->position_forward(G, out.g, inp.g, wpe.g, B, T, C)))
            check(P, "position_forward", shape, &out, TOL_EXACT, 0);
    }
    if (supported(P, "position_backward", shape, Cb->position_backward, G->position_backward) &&
        fbuf_rand(P, &dinp, n, -1, 1) && fbuf_rand(P, &dwpe, (size_t)maxT * C, -1, 1)) {
        if (ran_ok(P, "position_backward", shape,
                   Cb->position_backward(Cb, dinp.c, dwpe.c, dout.c, B, T, C),
                   G->position_backward(G, dinp.g, dwpe.g, dout.g, B, T, C))) {
            check(P, "position_backward.dinp", shape, &dinp, TOL_EXACT, 0);
            check(P, "position_backward.dwpe", shape, &dwpe, TOL_EXACT, 0);
        }
    }
done:
    fbuf_free(P, &inp);
    fbuf_free(P, &wpe);
    fbuf_free(P, &out);
    fbuf_free(P, &dout);
    fbuf_free(P, &dinp);
    fbuf_free(P, &dwpe);
}

/* ---- matmul ---------------------------------------------------------------- */

/* Max abs tolerance of a K-long matmul reduction on the current impl (tf32: see the top of the file). */
static double mm_tol(const parity *P, double K) {
    if (P->impl && strcmp(P->impl, "tf32") == 0) return ldexp(K / 4.0 + 1.3 * sqrt(K), -10) + tol_for_sum(K);
    return tol_for_sum(K);
}

static void case_matmul(parity *P, int N, int C, int OC, int with_bias) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[128], op[96];
    snprintf(shape, sizeof shape, "N=%d C=%d OC=%d bias=%d", N, C, OC, with_bias);
    fbuf inp = {0}, w = {0}, b = {0}, out = {0}, dout = {0}, dinp = {0}, dw = {0}, db = {0};
    if (!fbuf_rand(P, &inp, (size_t)N * C, -1, 1) || !fbuf_rand(P, &w, (size_t)OC * C, -1, 1) ||
        !fbuf_rand(P, &b, OC, -1, 1) || !fbuf_rand(P, &dout, (size_t)N * OC, -1, 1))
        goto done;

    snprintf(op, sizeof op, "matmul_forward[%s]", P->impl);
    if (supported(P, op, shape, Cb->matmul_forward, G->matmul_forward) &&
        fbuf_poison(P, &out, (size_t)N * OC)) {
        if (ran_ok(P, op, shape,
                   Cb->matmul_forward(Cb, out.c, inp.c, w.c, with_bias ? b.c : NULL, N, C, OC),
                   G->matmul_forward(G, out.g, inp.g, w.g, with_bias ? b.g : NULL, N, C, OC)))
            check(P, op, shape, &out, mm_tol(P, C), 0);
    }
    snprintf(op, sizeof op, "matmul_backward_input[%s]", P->impl);
    if (supported(P, op, shape, Cb->matmul_backward_input, G->matmul_backward_input) &&
        fbuf_rand(P, &dinp, (size_t)N * C, -1, 1)) {
        if (ran_ok(P, op, shape, Cb->matmul_backward_input(Cb, dinp.c, dout.c, w.c, N, C, OC),
                   G->matmul_backward_input(G, dinp.g, dout.g, w.g, N, C, OC)))
            check(P, op, shape, &dinp, mm_tol(P, OC), 0);
    }
    snprintf(op, sizeof op, "matmul_backward_weight[%s]", P->impl);
    if (supported(P, op, shape, Cb->matmul_backward_weight, G->matmul_backward_weight) &&
        fbuf_rand(P, &dw, (size_t)OC * C, -1, 1) && fbuf_rand(P, &db, OC, -1, 1)) {
        if (ran_ok(P, op, shape,
                   Cb->matmul_backward_weight(Cb, dw.c, with_bias ? db.c : NULL, dout.c, inp.c, N, C, OC),
                   G->matmul_backward_weight(G, dw.g, with_bias ? db.g : NULL, dout.g, inp.g, N, C, OC))) {
            snprintf(op, sizeof op, "matmul_backward_weight[%s].dweight", P->impl);
            check(P, op, shape, &dw, mm_tol(P, N), 0);
            /* without bias, db must come back untouched */
            snprintf(op, sizeof op, "matmul_backward_weight[%s].dbias", P->impl);
            check(P, op, shape, &db, tol_for_sum(N), 0);
        }
    }
done:
    fbuf_free(P, &inp);
    fbuf_free(P, &w);
    fbuf_free(P, &b);
    fbuf_free(P, &out);
    fbuf_free(P, &dout);
    fbuf_free(P, &dinp);
    fbuf_free(P, &dw);
    fbuf_free(P, &db);
}

/* ---- normalisation ------------------------------------------------------------ */

static void case_layernorm(parity *P, int N, int C) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    const float eps = 1e-5f;
    fbuf inp = {0}, w = {0}, b = {0}, out = {0}, mean = {0}, rstd = {0}, dout = {0}, dinp = {0},
         dw = {0}, db = {0};
    if (!fbuf_rand(P, &inp, (size_t)N * C, -2, 2) || !fbuf_rand(P, &w, C, -1, 1) ||
        !fbuf_rand(P, &b, C, -1, 1) || !fbuf_rand(P, &dout, (size_t)N * C, -1, 1))
        goto done;
    if (!supported(P, "layernorm_forward", shape, Cb->layernorm_forward, G->layernorm_forward) ||
        !fbuf_poison(P, &out, (size_t)N * C) || !fbuf_poison(P, &mean, N) || !fbuf_poison(P, &rstd, N))
        goto done;
    if (!ran_ok(P, "layernorm_forward", shape,
                Cb->layernorm_forward(Cb, out.c, mean.c, rstd.c, inp.c, w.c, b.c, N, C, eps),
                G->layernorm_forward(G, out.g, mean.g, rstd.g, inp.g, w.g, b.g, N, C, eps)))
        goto done;
    check(P, "layernorm_forward.out", shape, &out, TOL_DEFAULT, 0);
    check(P, "layernorm_forward.mean", shape, &mean, TOL_DEFAULT, 0);
    check(P, "layernorm_forward.rstd", shape, &rstd, TOL_DEFAULT, 0);
    /* the backward reads each side's own mean/rstd: both were just checked */
    if (supported(P, "layernorm_backward", shape, Cb->layernorm_backward, G->layernorm_backward) &&
        fbuf_rand(P, &dinp, (size_t)N * C, -1, 1) && fbuf_rand(P, &dw, C, -1, 1) &&
        fbuf_rand(P, &db, C, -1, 1)) {
        if (ran_ok(P, "layernorm_backward", shape,
                   Cb->layernorm_backward(Cb, dinp.c, dw.c, db.c, dout.c, inp.c, w.c, mean.c, rstd.c, N, C),
                   G->layernorm_backward(G, dinp.g, dw.g, db.g, dout.g, inp.g, w.g, mean.g, rstd.g, N, C))) {
            check(P, "layernorm_backward.dinp", shape, &dinp, tol_for_sum(C), 0);
            check(P, "layernorm_backward.dweight", shape, &dw, tol_for_sum(N), 0);
            check(P, "layernorm_backward.dbias", shape, &db, tol_for_sum(N), 0);
        }
    }
done:
    fbuf_free(P, &inp);
    fbuf_free(P, &w);
    fbuf_free(P, &b);
    fbuf_free(P, &out);
    fbuf_free(P, &mean);
    fbuf_free(P, &rstd);
    fbuf_free(P, &dout);
    fbuf_free(P, &dinp);
    fbuf_free(P, &dw);
    fbuf_free(P, &db);
}

static void case_rmsnorm(parity *P, int N, int C) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    const float eps = 1e-5f;
    fbuf inp = {0}, w = {0}, out = {0}, rstd = {0}, dout = {0}, dinp = {0}, dw = {0};
    if (!fbuf_rand(P, &inp, (size_t)N * C, -2, 2) || !fbuf_rand(P, &w, C, -1, 1) ||
        !fbuf_rand(P, &dout, (size_t)N * C, -1, 1))
        goto done;
    if (!supported(P, "rmsnorm_forward", shape, Cb->rmsnorm_forward, G->rmsnorm_forward) ||
        !fbuf_poison(P, &out, (size_t)N * C) || !fbuf_poison(P, &rstd, N))
        goto done;
    if (!ran_ok(P, "rmsnorm_forward", shape, Cb->rmsnorm_forward(Cb, out.c, rstd.c, inp.c, w.c, N, C, eps),
                G->rmsnorm_forward(G, out.g, rstd.g, inp.g, w.g, N, C, eps)))
        goto done;
    check(P, "rmsnorm_forward.out", shape, &out, TOL_DEFAULT, 0);
    check(P, "rmsnorm_forward.rstd", shape, &rstd, TOL_DEFAULT, 0);
    if (supported(P, "rmsnorm_backward", shape, Cb->rmsnorm_backward, G->rmsnorm_backward) &&
        fbuf_rand(P, &dinp, (size_t)N * C, -1, 1) && fbuf_rand(P, &dw, C, -1, 1)) {
        if (ran_ok(P, "rmsnorm_backward", shape,
                   Cb->rmsnorm_backward(Cb, dinp.c, dw.c, dout.c, inp.c, w.c, rstd.c, N, C),
                   G->rmsnorm_backward(G, dinp.g, dw.g, dout.g, inp.g, w.g, rstd.g, N, C))) {
            check(P, "rmsnorm_backward.dinp", shape, &dinp, tol_for_sum(C), 0);
            check(P, "rmsnorm_backward.dweight", shape, &dw, tol_for_sum(N), 0);
        }
    }
done:
    fbuf_free(P, &inp);
    fbuf_free(P, &w);
    fbuf_free(P, &out);
    fbuf_free(P, &rstd);
    fbuf_free(P, &dout);
    fbuf_free(P, &dinp);
    fbuf_free(P, &dw);
}

/* ---- rope ------------------------------------------------------------------------ */

static void case_rope(parity *P, int B, int T, int n_heads, int n_rot, int HS) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[128];
    snprintf(shape, sizeof shape, "B=%d T=%d heads=%d rot=%d HS=%d", B, T, n_heads, n_rot, HS);
    const float theta = 10000.0f;
    size_t n = (size_t)B * T * n_heads * HS;
    fbuf inp = {0}, out = {0}, dout = {0}, dinp = {0}, inplace = {0};
    if (!fbuf_rand(P, &inp, n, -1, 1) || !fbuf_rand(P, &dout, n, -1, 1)) goto done;
    if (supported(P, "rope_forward", shape, Cb->rope_forward, G->rope_forward) && fbuf_poison(P, &out, n)) {
        if (ran_ok(P, "rope_forward", shape, Cb->rope_forward(Cb, out.c, inp.c, B, T, n_heads, n_rot, HS, theta),
                   G->rope_forward(G, out.g, inp.g, B, T, n_heads, n_rot, HS, theta)))
            check(P, "rope_forward", shape, &out, TOL_EXACT, 0);
        /* in place (out == inp), allowed by the CPU reference: same result expected.
         * The CPU side runs out of place into inplace.c, the GPU in place. */
        if (fbuf_upload(P, &inplace, n, inp.c)) {
            if (ran_ok(P, "rope_forward(in-place)", shape,
                       Cb->rope_forward(Cb, inplace.c, inp.c, B, T, n_heads, n_rot, HS, theta),
                       G->rope_forward(G, inplace.g, inplace.g, B, T, n_heads, n_rot, HS, theta)))
                check(P, "rope_forward(in-place)", shape, &inplace, TOL_EXACT, 0);
        }
    }
    if (supported(P, "rope_backward", shape, Cb->rope_backward, G->rope_backward) &&
        fbuf_rand(P, &dinp, n, -1, 1)) {
        if (ran_ok(P, "rope_backward", shape,
                   Cb->rope_backward(Cb, dinp.c, dout.c, B, T, n_heads, n_rot, HS, theta),
                   G->rope_backward(G, dinp.g, dout.g, B, T, n_heads, n_rot, HS, theta)))
            check(P, "rope_backward.dinp", shape, &dinp, TOL_EXACT, 0);
    }
done:
    fbuf_free(P, &inp);
    fbuf_free(P, &out);
    fbuf_free(P, &dout);
    fbuf_free(P, &dinp);
    fbuf_free(P, &inplace);
}

/* ---- attention ----------------------------------------------------------------------- */

static void case_attention(parity *P, int B, int T, int NH, int NKV, int HS) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[128], op[96];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS;
    size_t natt = (size_t)B * NH * T * T;
    fbuf qkv = {0}, out = {0}, att = {0}, dout = {0}, dqkv = {0}, scratch = {0}, att_in = {0};
    if (!fbuf_rand(P, &qkv, nqkv, -1, 1) || !fbuf_rand(P, &dout, nout, -1, 1)) goto done;

    snprintf(op, sizeof op, "attention_forward[%s]", P->impl);
    if (!supported(P, op, shape, Cb->attention_forward, G->attention_forward) ||
        !fbuf_poison(P, &out, nout) || !fbuf_poison(P, &att, natt))
        goto done;
    if (!ran_ok(P, op, shape, Cb->attention_forward(Cb, out.c, att.c, qkv.c, B, T, NH, NKV, HS),
                G->attention_forward(G, out.g, att.g, qkv.g, B, T, NH, NKV, HS)))
        goto done;
    snprintf(op, sizeof op, "attention_forward[%s].out", P->impl);
    check(P, op, shape, &out, TOL_DEFAULT, 0);
    snprintf(op, sizeof op, "attention_forward[%s].att", P->impl);
    check(P, op, shape, &att, TOL_DEFAULT, 0);

    /* both backwards read the CPU's probabilities, so only the backward is compared */
    snprintf(op, sizeof op, "attention_backward[%s]", P->impl);
    if (supported(P, op, shape, Cb->attention_backward, G->attention_backward) &&
        fbuf_upload(P, &att_in, natt, att.c) && fbuf_rand(P, &dqkv, nqkv, -1, 1) &&
        fbuf_poison(P, &scratch, natt)) {
        if (ran_ok(P, op, shape,
                   Cb->attention_backward(Cb, dqkv.c, scratch.c, dout.c, qkv.c, att_in.c, B, T, NH, NKV, HS),
                   G->attention_backward(G, dqkv.g, scratch.g, dout.g, qkv.g, att_in.g, B, T, NH, NKV, HS))) {
            snprintf(op, sizeof op, "attention_backward[%s].dqkv", P->impl);
            check(P, op, shape, &dqkv, 2.0 * tol_for_sum((double)T * (NH / NKV)), 0);
        }
    }
done:
    fbuf_free(P, &qkv);
    fbuf_free(P, &out);
    fbuf_free(P, &att);
    fbuf_free(P, &dout);
    fbuf_free(P, &dqkv);
    fbuf_free(P, &scratch);
    fbuf_free(P, &att_in);
}

/* ---- fused (flash) attention, fp32 ------------------------------------------------------ */

/* lse holds -INFINITY for rows that see no key: both sides must agree on
 * which rows those are, and the finite rows within tol. */
static void check_lse(parity *P, const char *op, const char *shape, const fbuf *b, double tol) {
    size_t total = b->n + GUARD;
    float *h = malloc(total * sizeof *h);
    if (!h || P->gpu->copy_to_host(P->gpu, h, b->g, total * sizeof(float)) != FORGE_OK) {
        report(P, 0, op, shape, INFINITY, tol, "(copy_to_host failed)");
        free(h);
        return;
    }
    double maxerr = 0.0;
    size_t worst = 0, bad_guard = 0, inf_rows = 0;
    for (size_t i = 0; i < b->n; i++) {
        double c = b->c[i], g = h[i], err;
        if (isinf(c) || isinf(g)) {
            err = (c == g) ? 0.0 : INFINITY;
            inf_rows += isinf(c) != 0;
        } else {
            err = fabs(g - c);
        }
        if (!(err <= maxerr)) {
            maxerr = isnan(err) ? INFINITY : err;
            worst = i;
        }
    }
    for (size_t i = 0; i < GUARD; i++) {
        uint32_t u;
        memcpy(&u, &h[b->n + i], sizeof u);
        if (u != GUARD_BITS) bad_guard++;
    }
    char why[256];
    snprintf(why, sizeof why, "(%zu rows with no visible key; worst at [%zu]: cuda %.9g vs cpu %.9g%s)",
             inf_rows, worst, (double)h[worst], (double)b->c[worst], bad_guard ? "; GUARD OVERWRITTEN" : "");
    report(P, maxerr <= tol && bad_guard == 0, op, shape, maxerr, tol, why);
    free(h);
}

/* Forward (out, lse) and backward (dQ into qkv_q, dK/dV into qkv_kv) of the
 * general Tq/Tk entry against the CPU reference. Tq == Tk uses ONE packed
 * qkv and ONE dqkv, as the trainer does. The backward runs on the CPU's
 * forward results on both sides, so it is compared on its own. */
static void case_flash(parity *P, int B, int Tq, int Tk, int NH, int NKV, int HS) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[128], op[96];
    snprintf(shape, sizeof shape, "B=%d Tq=%d Tk=%d NH=%d NKV=%d HS=%d", B, Tq, Tk, NH, NKV, HS);
    int same = Tq == Tk;
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    size_t nq = (size_t)B * Tq * row, nk = (size_t)B * Tk * row;
    size_t nout = (size_t)B * Tq * NH * HS, nlse = (size_t)B * NH * Tq;
    fbuf qq = {0}, qk = {0}, out = {0}, lse = {0}, dout = {0}, out_in = {0}, lse_in = {0};
    fbuf dq = {0}, dk = {0}, scratch = {0};
    if (!fbuf_rand(P, &qq, nq, -1.5f, 1.5f) || (!same && !fbuf_rand(P, &qk, nk, -1.5f, 1.5f)) ||
        !fbuf_rand(P, &dout, nout, -1, 1))
        goto done;
    const fbuf *kv = same ? &qq : &qk;

    snprintf(op, sizeof op, "flash_attention_forward_ext");
    if (!supported(P, op, shape, Cb->flash_attention_forward_ext, G->flash_attention_forward_ext) ||
        !fbuf_poison(P, &out, nout) || !fbuf_poison(P, &lse, nlse))
        goto done;
    if (!ran_ok(P, op, shape,
                Cb->flash_attention_forward_ext(Cb, out.c, lse.c, qq.c, kv->c, B, Tq, Tk, NH, NKV, HS),
                G->flash_attention_forward_ext(G, out.g, lse.g, qq.g, kv->g, B, Tq, Tk, NH, NKV, HS)))
        goto done;
    check(P, "flash_attention_forward.out", shape, &out, TOL_DEFAULT, 0);
    check_lse(P, "flash_attention_forward.lse", shape, &lse, TOL_DEFAULT);

    snprintf(op, sizeof op, "flash_attention_backward_ext");
    if (!supported(P, op, shape, Cb->flash_attention_backward_ext, G->flash_attention_backward_ext) ||
        !fbuf_upload(P, &out_in, nout, out.c) || !fbuf_upload(P, &lse_in, nlse, lse.c) ||
        !fbuf_rand(P, &dq, nq, -1, 1) || (!same && !fbuf_rand(P, &dk, nk, -1, 1)) ||
        !fbuf_poison(P, &scratch, nlse))
        goto done;
    fbuf *dkv = same ? &dq : &dk;
    if (!ran_ok(P, op, shape,
                Cb->flash_attention_backward_ext(Cb, dq.c, dkv->c, scratch.c, dout.c, qq.c, kv->c, out_in.c,
                                                 lse_in.c, B, Tq, Tk, NH, NKV, HS),
                G->flash_attention_backward_ext(G, dq.g, dkv->g, scratch.g, dout.g, qq.g, kv->g, out_in.g,
                                                lse_in.g, B, Tq, Tk, NH, NKV, HS)))
        goto done;
    /* dK/dV sum up to Tq * group terms, but each is small (P ~ 1/T): a numpy
     * emulation of these kernels at T = 1031 is 5e-6 off in dV (max |dV| 2.7),
     * so the flat fp32 tolerance holds with a margin */
    double tol = TOL_DEFAULT;
    check(P, same ? "flash_attention_backward.dqkv" : "flash_attention_backward.dqkv_q", shape, &dq, tol, 0);
    if (!same) check(P, "flash_attention_backward.dqkv_kv", shape, &dk, tol, 0);
done:
    fbuf_free(P, &qq);
    fbuf_free(P, &qk);
    fbuf_free(P, &out);
    fbuf_free(P, &lse);
    fbuf_free(P, &dout);
    fbuf_free(P, &out_in);
    fbuf_free(P, &lse_in);
    fbuf_free(P, &dq);
    fbuf_free(P, &dk);
    fbuf_free(P, &scratch);
}

/* Two runs of the GPU forward + backward give identical bits (no atomics). */
static void case_flash_deterministic(parity *P, int B, int T, int NH, int NKV, int HS) {
    forge_backend *G = P->gpu;
    char shape[128];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    fbuf qkv = {0}, dout = {0}, out = {0}, lse = {0}, d1 = {0}, d2 = {0}, scr = {0};
    float *h1 = malloc(nqkv * sizeof(float)), *h2 = malloc(nqkv * sizeof(float));
    int ok = h1 && h2 && fbuf_rand(P, &qkv, nqkv, -1.5f, 1.5f) && fbuf_rand(P, &dout, nout, -1, 1) &&
             fbuf_poison(P, &out, nout) && fbuf_poison(P, &lse, nl) && fbuf_rand(P, &d1, nqkv, -1, 1) &&
             fbuf_upload(P, &d2, nqkv, d1.c) && fbuf_poison(P, &scr, nl);
    if (ok) {
        ok = G->flash_attention_forward(G, out.g, lse.g, qkv.g, B, T, NH, NKV, HS) == FORGE_OK &&
             G->flash_attention_backward(G, d1.g, scr.g, dout.g, qkv.g, out.g, lse.g, B, T, NH, NKV, HS) ==
                 FORGE_OK &&
             G->flash_attention_backward(G, d2.g, scr.g, dout.g, qkv.g, out.g, lse.g, B, T, NH, NKV, HS) ==
                 FORGE_OK &&
             G->copy_to_host(G, h1, d1.g, nqkv * sizeof(float)) == FORGE_OK &&
             G->copy_to_host(G, h2, d2.g, nqkv * sizeof(float)) == FORGE_OK;
        if (!ok) report(P, 0, "flash_attention_deterministic", shape, INFINITY, 0, forge_error_message());
        else {
            int same = memcmp(h1, h2, nqkv * sizeof(float)) == 0;
            report(P, same, "flash_attention_deterministic", shape, same ? 0.0 : 1.0, 0.0,
                   same ? NULL : "(two backward runs differ)");
        }
    }
    free(h1);
    free(h2);
    fbuf_free(P, &qkv);
    fbuf_free(P, &dout);
    fbuf_free(P, &out);
    fbuf_free(P, &lse);
    fbuf_free(P, &d1);
    fbuf_free(P, &d2);
    fbuf_free(P, &scr);
}

/* Head sizes above the largest fused fp32 kernel are refused, never miscomputed. */
static void case_flash_unsupported(parity *P) {
    float *x = NULL;
    int ok = P->gpu->mem_alloc(P->gpu, (void **)&x, 4096 * sizeof(float)) == FORGE_OK;
    forge_status s = ok ? P->gpu->flash_attention_forward(P->gpu, x, x + 2048, x + 1024, 1, 4, 2, 1, 130)
                        : FORGE_ERR_OOM;
    report(P, s == FORGE_ERR_UNSUPPORTED, "flash_attention_forward", "HS=130 (expect FORGE_ERR_UNSUPPORTED)",
           s == FORGE_ERR_UNSUPPORTED ? 0.0 : 1.0, 0.0, s == FORGE_ERR_UNSUPPORTED ? NULL : forge_status_name(s));
    if (x) P->gpu->mem_free(P->gpu, x);
}

/* Extra memory of the op path at T = 8192 (B=1, NH=4, HS=64) is O(T): the
 * materialised form would need 2 x 1 GiB of (B,NH,T,T) buffers. */
static void case_flash_memory(parity *P) {
    int B = 1, T = 8192, NH = 4, NKV = 4, HS = 64;
    size_t peak = 0, limit = (size_t)64 << 20;
    forge_status s = attention_peak_bytes(P->gpu, 1, B, T, NH, NKV, HS, &peak);
    char shape[192];
    snprintf(shape, sizeof shape,
             "B=%d T=%d NH=%d HS=%d: op-path peak %.1f MiB (limit 64 MiB; materialised needs >= %.0f MiB)", B, T,
             NH, HS, peak / 1048576.0, 2.0 * B * NH * (double)T * T * 4 / 1048576.0);
    if (s != FORGE_OK) report(P, 0, "flash_attention_memory", shape, INFINITY, 0, forge_error_message());
    else report(P, peak < limit, "flash_attention_memory", shape, (double)peak, (double)limit, NULL);
}

static void run_flash_cases(parity *P) {
    static const int shapes[][6] = {
        /* B, Tq, Tk, NH, NKV, HS */
        {1, 1, 1, 2, 1, 64},       {2, 67, 67, 6, 2, 64},   {2, 67, 67, 6, 6, 64},
        {1, 130, 130, 6, 3, 64},   {1, 257, 257, 4, 1, 64}, {2, 200, 200, 4, 2, 128},
        {1, 129, 129, 2, 2, 128},  {1, 1, 1, 2, 2, 128},    {2, 67, 67, 4, 2, 32},
        {2, 67, 67, 4, 2, 16},     {1, 100, 37, 4, 2, 64},  {1, 150, 10, 2, 1, 128},
        {1, 70, 0, 2, 1, 64},      {1, 50, 130, 4, 2, 64},  {1, 1031, 1031, 4, 2, 64},
        {1, 700, 700, 2, 1, 128},
        /* head sizes on the zero-padded path: 6 and 8 (the test models), odd 7, 100 */
        {2, 67, 67, 6, 2, 6},      {2, 67, 67, 4, 2, 8},    {1, 45, 30, 3, 3, 7},
        {1, 150, 150, 4, 2, 100},
    };
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < n; i++) {
        if (P->quick && shapes[i][1] > 300) continue;
        case_flash(P, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], shapes[i][5]);
    }
    case_flash_deterministic(P, 2, 333, 4, 2, 64);
    case_flash_deterministic(P, 1, 300, 4, 1, 128);
    case_flash_unsupported(P);
    if (!P->quick) case_flash_memory(P);
}

/* ---- classifier ---------------------------------------------------------------------- */

static void case_classifier(parity *P, int N, int V, int ignore_pct, int unit_scale) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[128];
    snprintf(shape, sizeof shape, "N=%d V=%d ignore=%d%% grad_scale=%s", N, V, ignore_pct,
             unit_scale ? "1" : "1/valid");
    fbuf logits = {0}, losses = {0};
    ibuf targets = {0};
    if (!ibuf_rand(P, &targets, N, V, IGNORE_INDEX, ignore_pct) ||
        !fbuf_rand(P, &logits, (size_t)N * V, -5, 5) || !fbuf_poison(P, &losses, N))
        goto done;
    int valid = 0;
    for (int n = 0; n < N; n++) valid += targets.c[n] != IGNORE_INDEX;
    float grad_scale = unit_scale ? 1.0f : 1.0f / (float)(valid > 0 ? valid : 1);
    if (supported(P, "classifier_forward_backward", shape, Cb->classifier_forward_backward,
                  G->classifier_forward_backward) &&
        ran_ok(P, "classifier_forward_backward", shape,
               Cb->classifier_forward_backward(Cb, losses.c, logits.c, targets.c, N, V, IGNORE_INDEX,
                                               grad_scale),
               G->classifier_forward_backward(G, losses.g, logits.g, targets.g, N, V, IGNORE_INDEX,
                                              grad_scale))) {
        check(P, "classifier_forward_backward.losses", shape, &losses, TOL_DEFAULT, 0);
        check(P, "classifier_forward_backward.dlogits", shape, &logits, 1e-6, 0);
    }
done:
    ibuf_free(P, &targets);
    fbuf_free(P, &logits);
    fbuf_free(P, &losses);
}

/* ---- optimizer --------------------------------------------------------------------------- */

static void case_sumsq(parity *P, size_t n) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    char shape[64];
    snprintf(shape, sizeof shape, "n=%zu", n);
    fbuf x = {0}, s = {0};
    float start = 3.5f;
    if (!fbuf_rand(P, &x, n, -1, 1) || !fbuf_upload(P, &s, 1, &start)) goto done;
    if (supported(P, "sumsq_accumulate", shape, Cb->sumsq_accumulate, G->sumsq_accumulate) &&
        ran_ok(P, "sumsq_accumulate", shape, Cb->sumsq_accumulate(Cb, s.c, x.c, n),
               G->sumsq_accumulate(G, s.g, x.g, n)))
        check(P, "sumsq_accumulate(rel)", shape, &s, 1e-5, 1);
done:
    fbuf_free(P, &x);
    fbuf_free(P, &s);
}

/* clip_mode: 0 clip active, 1 clip inactive (norm below max), 2 clipping
 * disabled (max_grad_norm = 0), 3 grad_sumsq NULL */
static void case_adamw(parity *P, size_t n, int step, int clip_mode) {
    forge_backend *Cb = P->cpu, *G = P->gpu;
    static const char *modes[] = {"clip-active", "clip-inactive", "clip-disabled", "sumsq-null"};
    char shape[128];
    snprintf(shape, sizeof shape, "n=%zu step=%d %s", n, step, modes[clip_mode]);
    fbuf param = {0}, grad = {0}, m = {0}, v = {0}, sumsq = {0};
    forge_adamw_params hp = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.1f, .max_grad_norm = 1.0f, .step = step};
    float ss = 0.0f;
    if (!fbuf_rand(P, &param, n, -1, 1) || !fbuf_rand(P, &grad, n, -1, 1) || !fbuf_rand(P, &m, n, -0.1f, 0.1f) ||
        !fbuf_rand(P, &v, n, 1e-4f, 1e-2f))
        goto done;
    for (size_t i = 0; i < n; i++) ss += grad.c[i] * grad.c[i];
    if (clip_mode == 1) hp.max_grad_norm = 2.0f * sqrtf(ss) + 1.0f;
    if (clip_mode == 2) hp.max_grad_norm = 0.0f;
    if (!fbuf_upload(P, &sumsq, 1, &ss)) goto done;
    const float *sc = clip_mode == 3 ? NULL : sumsq.c, *sg = clip_mode == 3 ? NULL : sumsq.g;
    if (supported(P, "adamw_update", shape, Cb->adamw_update, G->adamw_update) &&
        ran_ok(P, "adamw_update", shape, Cb->adamw_update(Cb, param.c, grad.c, m.c, v.c, n, sc, hp),
               G->adamw_update(G, param.g, grad.g, m.g, v.g, n, sg, hp))) {
        check(P, "adamw_update.param", shape, &param, 1e-5, 0);
        check(P, "adamw_update.m", shape, &m, 1e-5, 0);
        check(P, "adamw_update.v", shape, &v, 1e-5, 0);
    }
done:
    fbuf_free(P, &param);
    fbuf_free(P, &grad);
    fbuf_free(P, &m);
    fbuf_free(P, &v);
    fbuf_free(P, &sumsq);
}

/* ---- device memory: the pool recycles every micro-batch ------------------------------------ */

/* A fake training step: persistent params and grads, then `steps`
 * micro-batches that each allocate activations and scratch, touch them on the
 * device, accumulate into the grads and release everything transient. */
static forge_status pool_run_steps(forge_backend *be, int steps, forge_pool_stats *out) {
    forge_pool *pool;
    FORGE_TRY(forge_pool_create(&pool, be));
    forge_status s = FORGE_OK;
    const int64_t wshape[2] = {96, 200};
    forge_tensor *w = NULL, *gw = NULL;
    if ((s = forge_pool_tensor_zeros(pool, &w, FORGE_F32, 2, wshape, 1)) != FORGE_OK) goto done;
    if ((s = forge_pool_tensor_zeros(pool, &gw, FORGE_F32, 2, wshape, 1)) != FORGE_OK) goto done;
    for (int step = 0; step < steps; step++) {
        forge_tensor *acts[12];
        for (int i = 0; i < 12; i++) {
            /* sizes from 4 KiB to several MiB, some sharing a size class */
            int64_t shape[2] = {96, 200 * (1 + (i % 5)) + 37 * i};
            if (i == 11) shape[1] = 1 << 14;
            if ((s = forge_pool_tensor_zeros(pool, &acts[i], FORGE_F32, 2, shape, 0)) != FORGE_OK) goto done;
        }
        void *scratch;
        size_t scratch_bytes = (size_t)3 << 20, scratch_block = 0;
        if ((s = forge_pool_block(pool, &scratch, scratch_bytes, &scratch_block)) != FORGE_OK) goto done;
        if ((s = be->memset_zero(be, scratch, scratch_bytes)) != FORGE_OK) goto done;
        /* gw += acts[0] (same shape as w): real device work on pool memory */
        if ((s = be->accumulate(be, forge_f32(gw), forge_f32(acts[0]), gw->numel)) != FORGE_OK) goto done;
        forge_pool_block_release(pool, scratch, scratch_block);
        forge_pool_release_transient(pool);
    }
    s = be->synchronize(be);
    *out = forge_pool_get_stats(pool);
done:
    forge_pool_destroy(pool);
    return s;
}

static void case_pool(parity *P) {
    forge_pool_stats one, eight;
    forge_status s1 = pool_run_steps(P->gpu, 1, &one);
    if (s1 != FORGE_OK) {
        report(P, 0, "pool_accumulation", "steps=1", INFINITY, 0, forge_error_message());
        return;
    }
    forge_status s8 = pool_run_steps(P->gpu, 8, &eight);
    if (s8 != FORGE_OK) {
        report(P, 0, "pool_accumulation", "steps=8", INFINITY, 0, forge_error_message());
        return;
    }
    char shape[256];
    snprintf(shape, sizeof shape,
             "steps=1 vs 8: peak_in_use %zu vs %zu, peak_reserved %zu vs %zu, backend_allocs %zu vs %zu",
             one.peak_in_use, eight.peak_in_use, one.peak_reserved, eight.peak_reserved,
             one.backend_allocs, eight.backend_allocs);
    int ok = one.peak_in_use == eight.peak_in_use && one.peak_reserved == eight.peak_reserved &&
             one.backend_allocs == eight.backend_allocs && eight.cache_hits > 0;
    report(P, ok, "pool_accumulation", shape, ok ? 0.0 : 1.0, 0.0, NULL);
}

/* ---- driver -------------------------------------------------------------------------------- */

static void run_matmul_cases(parity *P) {
    static const int shapes[][3] = {
        {1, 45, 29}, {37, 45, 29}, {37, 768, 29}, {130, 129, 131}, {64, 64, 64},
        {257, 768, 3072}, {257, 3072, 768}, {1031, 200, 2100},
        {1001, 45, 130}, /* tf32: dW (130x45, K = 1001) takes split-K with scalar loads */
    };
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < n; i++) {
        if (P->quick && (long long)shapes[i][0] * shapes[i][1] * shapes[i][2] > 50000000LL) continue;
        case_matmul(P, shapes[i][0], shapes[i][1], shapes[i][2], 1);
        case_matmul(P, shapes[i][0], shapes[i][1], shapes[i][2], 0);
    }
}

static void run_attention_cases(parity *P) {
    static const int shapes[][5] = {
        /* B, T, NH, NKV, HS */
        {2, 67, 6, 2, 64}, {2, 67, 6, 6, 64}, {2, 67, 6, 2, 6}, {2, 67, 6, 6, 6},
        {1, 1, 2, 1, 8},   {1, 130, 6, 3, 64}, {2, 200, 4, 2, 32}, {1, 257, 4, 1, 64},
    };
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < n; i++) {
        if (P->quick && shapes[i][1] > 130) continue;
        case_attention(P, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4]);
    }
}

/* A second CUDA backend with FORGE_MATMUL = impl, for the GEMM-backed ops. */
static void run_with_impl(parity *P, const char *impl, int with_attention) {
    const char *saved = getenv("FORGE_MATMUL");
    char *saved_copy = saved ? strdup(saved) : NULL;
    setenv("FORGE_MATMUL", impl, 1);
    forge_backend *gpu = NULL;
    forge_status s = forge_cuda_backend_create(&gpu, 0);
    if (saved_copy) setenv("FORGE_MATMUL", saved_copy, 1);
    else unsetenv("FORGE_MATMUL");
    free(saved_copy);
    if (s != FORGE_OK) {
        report(P, 0, "cuda_backend_create", impl, INFINITY, 0, forge_error_message());
        return;
    }
    forge_backend *main_gpu = P->gpu;
    const char *main_impl = P->impl;
    P->gpu = gpu;
    P->impl = forge_cuda_matmul_impl(gpu);
    run_matmul_cases(P);
    if (with_attention) run_attention_cases(P);
    P->gpu = main_gpu;
    P->impl = main_impl;
    forge_backend_destroy(gpu);
}

/* FORGE_MATMUL=auto's cache: a corrupt file must be ignored (re-measured) and rewritten whole. */
static void case_matmul_table(parity *P) {
    const char *path = "/tmp/forge_gpu_tests_matmul_table.tsv";
    FILE *f = fopen(path, "w");
    if (!f) {
        report(P, 0, "matmul_table", path, INFINITY, 0, "(cannot write the test cache file)");
        return;
    }
    fputs("this is not a forge matmul table\n", f);
    fclose(f);
    /* a fresh auto backend opens the table at creation: the environment is read then */
    const char *saved = getenv("FORGE_MATMUL");
    char *saved_copy = saved ? strdup(saved) : NULL;
    setenv("FORGE_MATMUL_CACHE", path, 1);
    setenv("FORGE_MATMUL", "auto", 1);
    forge_backend *gpu = NULL;
    forge_status s = forge_cuda_backend_create(&gpu, 0);
    unsetenv("FORGE_MATMUL_CACHE");
    if (saved_copy) setenv("FORGE_MATMUL", saved_copy, 1);
    else unsetenv("FORGE_MATMUL");
    free(saved_copy);
    if (s != FORGE_OK) {
        report(P, 0, "cuda_backend_create", "auto (table test)", INFINITY, 0, forge_error_message());
        return;
    }
    forge_backend *main_gpu = P->gpu;
    const char *main_impl = P->impl;
    P->gpu = gpu;
    P->impl = forge_cuda_matmul_impl(gpu);
    case_matmul(P, 130, 129, 131, 1);
    P->gpu = main_gpu;
    P->impl = main_impl;
    forge_backend_destroy(gpu);
    f = fopen(path, "r");
    char line[512] = "";
    int rows = 0, key_ok = 0;
    if (f) {
        if (fgets(line, sizeof line, f)) key_ok = strncmp(line, "# forge matmul table v1 ", 24) == 0;
        while (fgets(line, sizeof line, f)) rows++;
        fclose(f);
    }
    /* 130x129x131 runs NT, NN and TN once each: three measured rows (unless cuBLAS is absent: then auto is forge
     * and writes nothing, and the corrupt file stays) */
#ifdef FORGE_NO_CUBLAS
    (void)key_ok;
    report(P, 1, "matmul_table[no cublas]", path, rows, 0, "(auto runs forge only: no table)");
#else
    report(P, key_ok && rows == 3, "matmul_table[auto] corrupt cache -> rewritten", path, rows, 3,
           key_ok ? NULL : "(first line is not the table key)");
#endif
}
int main(void) {
    parity P;
    memset(&P, 0, sizeof P);
    const char *q = getenv("FORGE_GPU_TESTS_QUICK");
    P.quick = q && *q && strcmp(q, "0") != 0;
    forge_rng_seed(&P.rng, 1234, 7);

    if (forge_cpu_backend_create(&P.cpu, 0, 1) != FORGE_OK) {
        printf("cannot create the CPU reference backend: %s\n0 passed, 1 failed\n", forge_error_message());
        return 1;
    }
    if (forge_cuda_backend_create(&P.gpu, 0) != FORGE_OK) {
        printf("cannot create the CUDA backend: %s\n0 passed, 1 failed\n", forge_error_message());
        forge_backend_destroy(P.cpu);
        return 1;
    }
    P.impl = forge_cuda_matmul_impl(P.gpu);
    printf("gpu parity: cpu=%s cuda matmul=%s%s\n", P.cpu->name, P.impl, P.quick ? " (quick shapes)" : "");

    /* FORGE_GPU_TESTS_ONLY=flash: only the fused fp32 attention cases; =flash16: only the bf16 ones;
     * =gemm_fp8: only the fp8/tf32 GEMM cases */
    const char *only = getenv("FORGE_GPU_TESTS_ONLY");
    if (only && (strcmp(only, "flash") == 0 || strcmp(only, "flash16") == 0 || strcmp(only, "gemm_fp8") == 0 ||
                 strcmp(only, "gemm_tn") == 0)) {
        if (strcmp(only, "gemm_tn") == 0)
            run_gemm_tn_cases(&P);
        else if (strcmp(only, "flash") == 0)
            run_flash_cases(&P);
        else if (strcmp(only, "flash16") == 0)
            run_flash16_cases(&P);
        else
            run_gemm_fp8_cases(&P);
        forge_backend_destroy(P.gpu);
        forge_backend_destroy(P.cpu);
        printf("%d passed, %d failed\n", P.passed, P.failed);
        return P.failed ? 1 : 0;
    }

    static const size_t ew_sizes[] = {1, 37, 4097, 1000003};
    for (size_t i = 0; i < sizeof ew_sizes / sizeof ew_sizes[0]; i++) {
        if (P.quick && ew_sizes[i] > 100000) continue;
        case_elementwise(&P, ew_sizes[i]);
    }

    case_embedding(&P, 1, 45, 1000);
    case_embedding(&P, 37, 768, 1000);
    case_embedding(&P, 257, 45, 50); /* many repeated ids */
    case_embedding(&P, 257, 1031, 1000);
    if (!P.quick) case_embedding(&P, 4099, 64, 7); /* ~585 rows per id */

    case_position(&P, 2, 67, 45, 80);
    case_position(&P, 2, 67, 768, 67);
    case_position(&P, 1, 1, 45, 1);

    run_matmul_cases(&P);
    run_gemm_fp8_cases(&P);
    run_gemm_tn_cases(&P);

    static const int norm_shapes[][2] = {{1, 45}, {37, 768}, {257, 45}, {4099, 45}, {257, 3072}, {9000, 96}};
    for (size_t i = 0; i < sizeof norm_shapes / sizeof norm_shapes[0]; i++) {
        if (P.quick && (long long)norm_shapes[i][0] * norm_shapes[i][1] > 300000) continue;
        case_layernorm(&P, norm_shapes[i][0], norm_shapes[i][1]);
        case_rmsnorm(&P, norm_shapes[i][0], norm_shapes[i][1]);
    }

    case_rope(&P, 2, 67, 10, 8, 64); /* packed qkv: NH=6, NKV=2: q+k rotate, v copied */
    case_rope(&P, 2, 67, 10, 8, 6);
    case_rope(&P, 2, 67, 6, 6, 64);
    case_rope(&P, 1, 1, 3, 0, 2);
    if (!P.quick) case_rope(&P, 1, 2048, 4, 2, 128); /* large angles */

    run_attention_cases(&P);
    run_flash_cases(&P);

    case_classifier(&P, 37, 1000, 25, 0);
    case_classifier(&P, 1, 1000, 0, 1);
    case_classifier(&P, 64, 1001, 10, 1);
    case_classifier(&P, 8, 7, 50, 0);
    if (!P.quick) case_classifier(&P, 5, 50257, 20, 0);

    static const size_t sq_sizes[] = {1, 37, 4097, 1000003};
    for (size_t i = 0; i < sizeof sq_sizes / sizeof sq_sizes[0]; i++) {
        if (P.quick && sq_sizes[i] > 100000) continue;
        case_sumsq(&P, sq_sizes[i]);
    }
    for (int mode = 0; mode < 4; mode++) {
        case_adamw(&P, 37, 1, mode);
        case_adamw(&P, 100003, 10, mode);
    }

    case_pool(&P);

    run_flash16_cases(&P);

    /* the GEMM-backed ops once more under each matmul path */
    if (strcmp(P.impl, "simt64") != 0) run_with_impl(&P, "simt64", 1);
    if (strcmp(P.impl, "simt128") != 0) run_with_impl(&P, "simt128", 1);
#ifndef FORGE_NO_CUBLAS
    if (strcmp(P.impl, "cublas") != 0) run_with_impl(&P, "cublas", 0);
#else
    {
        /* a build without cuBLAS must refuse it, never fall back silently */
        forge_backend *nb = NULL;
        setenv("FORGE_MATMUL", "cublas", 1);
        forge_status ns = forge_cuda_backend_create(&nb, 0);
        unsetenv("FORGE_MATMUL");
        report(&P, ns == FORGE_ERR_UNSUPPORTED, "cuda_backend_create[cublas, CUBLAS=0]", "refused", 0, 0,
               ns == FORGE_ERR_UNSUPPORTED ? NULL : "(expected FORGE_ERR_UNSUPPORTED)");
        if (nb) forge_backend_destroy(nb);
    }
#endif
    if (strcmp(P.impl, "tf32") != 0) run_with_impl(&P, "tf32", 0);
    if (strcmp(P.impl, "auto") != 0) {
        /* the auto table of this run goes to a scratch file, never the user's cache */
        const char *c = getenv("FORGE_MATMUL_CACHE");
        if (!c || !*c) setenv("FORGE_MATMUL_CACHE", "/tmp/forge_gpu_tests_matmul_auto.tsv", 1);
        run_with_impl(&P, "auto", 0);
        if (!c || !*c) unsetenv("FORGE_MATMUL_CACHE");
        case_matmul_table(&P);
    }

    forge_backend_destroy(P.gpu);
    forge_backend_destroy(P.cpu);
    if (P.skipped) printf("%d skipped (cpu reference entry missing)\n", P.skipped);
    printf("%d passed, %d failed\n", P.passed, P.failed);
    return P.failed ? 1 : 0;
}
