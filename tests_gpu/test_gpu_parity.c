/*
 * test_gpu_parity.c: every op of the backend op list (src/backend/op_list.h) on
 * the CUDA backend against the CPU reference backend (cpu_reference = 1),
 * walked generically by op_walker.c (nothing here is written per op), under
 * every matmul mode for the GEMM-backed ops. Then a few properties no single call shows (determinism, refusals, memory,
 * the pool, the auto matmul table, ops in place, token ids outside the table), and the kernel suites of the bf16/fp8
 * GEMMs and bf16 flash attention (test_gemm_*_kernels.c,
 * test_flash16_kernels.c), which are not backend ops, and whole bf16 training
 * steps with and without programmatic dependent launch (test_gpu_pdl.c); last, a few of those kernels again after
 * cudaDeviceReset (their attributes set again in the new context).
 *
 * Usage: forge_gpu_tests [--quick] [--only ops|flash16|gemm_fp8|gemm_tn|decode|gelu16|pdl|reset]
 * (--quick drops cases over 1e6 elements, for compute-sanitizer). Ends with
 * "N passed, N failed"; exit status 1 on any failure.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_test.h"
#include "op_walker.h"
#include "../src/runtime/pool.h"
#include "../tests/ops/attention_memory.h"

static forge_status gpu_backend(forge_backend **out, forge_matmul_mode mode, const char *cache_path) {
    forge_runtime_options rt;
    forge_runtime_options_default(&rt);
    rt.matmul = mode;
    rt.matmul_cache_path = cache_path;
    return forge_backend_create(out, FORGE_DEVICE_CUDA, &rt);
}

/* The GEMM-backed ops once more on a CUDA backend of another matmul mode. */
static void walk_gemm_ops_with(parity *P, forge_matmul_mode mode, const char *cache_path) {
    forge_backend *gpu = NULL;
    if (gpu_backend(&gpu, mode, cache_path) != FORGE_OK) {
        report(P, 0, "cuda_backend_create", forge_matmul_mode_name(mode), INFINITY, 0, forge_error_message());
        return;
    }
    forge_backend *main_gpu = P->gpu;
    P->gpu = gpu;
    op_walker_walk(P, FORGE_OPF_GEMM);
    P->gpu = main_gpu;
    forge_backend_destroy(gpu);
}

/* ---- properties beyond one call's parity ------------------------------------------------------------------------- */

/* rope in place (out == inp) gives what the CPU reference computes out of place. */
static void case_rope_in_place(parity *P) {
    const int B = 2, T = 67, n_heads = 10, n_rot = 8, HS = 64;
    const float theta = 10000.0f;
    const size_t n = (size_t)B * T * n_heads * HS;
    fbuf inp = {0}, buf = {0};
    const char *shape = "B=2 T=67 n_heads=10 n_rot=8 HS=64";
    if (fbuf_rand(P, &inp, n, -1, 1) && fbuf_upload(P, &buf, n, inp.c) &&
        ran_ok(P, "rope_forward(in-place)", shape,
               P->cpu->rope_forward(P->cpu, buf.c, inp.c, B, T, n_heads, n_rot, HS, theta),
               P->gpu->rope_forward(P->gpu, buf.g, buf.g, B, T, n_heads, n_rot, HS, theta)))
        check(P, "rope_forward(in-place)", shape, &buf, 1e-6, 0);
    fbuf_free(P, &inp);
    fbuf_free(P, &buf);
}

/* The bf16 encoder with ids outside [0, V) (rows 1 and 3): the forward writes NaN rows and the valid rows' sums,
 * the backward skips the bad rows, and poll_errors names the first bad id once (then reads clear). The CPU
 * reference refuses such ids, so the expected values are computed here. */
static void case_encoder_bf16_bad_ids(parity *P) {
    const int B = 2, T = 3, C = 40, V = 10, N = B * T;
    const char *shape = "B=2 T=3 C=40 V=10, ids[1] = 10, ids[3] = -2";
    bbuf wte = {0}, wpe = {0}, out = {0}, dout = {0};
    fbuf dwte = {0};
    ibuf ids = {0};
    forge_bf16 *h = malloc((size_t)N * C * sizeof *h);
    float *hw = malloc((size_t)V * C * sizeof *hw);
    int ok = h && hw && bbuf_rand(P, &wte, (size_t)V * C, -1, 1) && bbuf_rand(P, &wpe, (size_t)T * C, -1, 1) &&
             bbuf_poison(P, &out, (size_t)N * C) && bbuf_rand(P, &dout, (size_t)N * C, -1, 1) &&
             fbuf_rand(P, &dwte, (size_t)V * C, -1, 1) && ibuf_rand(P, &ids, N, V, 0, 0);
    if (ok) {
        ids.c[1] = V;
        ids.c[3] = -2;
        ok = P->gpu->copy_to_device(P->gpu, ids.g, ids.c, N * sizeof(int32_t)) == FORGE_OK;
        (void)P->gpu->poll_errors(P->gpu); /* clear anything an earlier case left */
    }
    forge_status st = ok ? P->gpu->encoder_forward_bf16(P->gpu, out.g, ids.g, wte.g, wpe.g, B, T, C, V) : FORGE_OK;
    forge_status polled = ok && st == FORGE_OK ? P->gpu->poll_errors(P->gpu) : FORGE_OK;
    /* the first bad row a thread records: either one */
    int named = polled == FORGE_ERR_DATA && (strstr(forge_error_message(), "token id 10 at row 1") != NULL ||
                                             strstr(forge_error_message(), "token id -2 at row 3") != NULL);
    ok = ok && st == FORGE_OK && named && P->gpu->poll_errors(P->gpu) == FORGE_OK &&
         P->gpu->copy_to_host(P->gpu, h, out.g, (size_t)N * C * sizeof *h) == FORGE_OK;
    size_t wrong = 0;
    for (int n = 0; ok && n < N; n++)
        for (int c = 0; c < C; c++) {
            const float got = forge_bf16_to_f32(h[(size_t)n * C + c]);
            const int id = ids.c[n];
            if (id < 0 || id >= V) wrong += !isnan(got);
            else
                wrong += got != forge_bf16_to_f32(forge_bf16_from_f32(forge_bf16_to_f32(wte.c[(size_t)id * C + c]) +
                                                                      forge_bf16_to_f32(wpe.c[(size_t)(n % T) * C + c])));
        }
    report(P, ok && wrong == 0, "encoder_forward_bf16(bad ids)", shape, (double)wrong, 0,
           !ok ? (named ? "(launch, poll or copy failed)" : "(poll_errors did not name a bad id and its row)")
               : wrong ? "(valid rows differ or bad rows not NaN)" : NULL);

    /* backward: dwte += dout rows 0, 2, 4, 5 at their ids, in row order; rows 1 and 3 skipped */
    ok = ok && P->gpu->encoder_backward_bf16(P->gpu, dwte.g, NULL, dout.g, ids.g, B, T, C, V) == FORGE_OK;
    named = ok && P->gpu->poll_errors(P->gpu) == FORGE_ERR_DATA;
    ok = ok && named && P->gpu->copy_to_host(P->gpu, hw, dwte.g, (size_t)V * C * sizeof *hw) == FORGE_OK;
    for (int n = 0; ok && n < N; n++)
        if (ids.c[n] >= 0 && ids.c[n] < V)
            for (int c = 0; c < C; c++) dwte.c[(size_t)ids.c[n] * C + c] += forge_bf16_to_f32(dout.c[(size_t)n * C + c]);
    wrong = 0;
    for (size_t i = 0; ok && i < (size_t)V * C; i++) wrong += hw[i] != dwte.c[i];
    report(P, ok && wrong == 0, "encoder_backward_bf16(bad ids)", shape, (double)wrong, 0,
           !ok ? "(launch, poll_errors or copy failed)" : wrong ? "(dwte differs from the valid rows' sums)" : NULL);
    free(h);
    free(hw);
    bbuf_free(P, &wte);
    bbuf_free(P, &wpe);
    bbuf_free(P, &out);
    bbuf_free(P, &dout);
    fbuf_free(P, &dwte);
    ibuf_free(P, &ids);
}

/* bf16 ops in place: rope (out == inp) and the residual norms (res == a, res == b) give the reference's bits. */
static void case_bf16_in_place(parity *P) {
    const int B = 2, T = 67, n_heads = 10, n_rot = 8, HS = 64, N = 37, C = 768;
    const size_t n = (size_t)B * T * n_heads * HS, nc = (size_t)N * C;
    bbuf x = {0}, y = {0}, a = {0}, b = {0}, out = {0};
    fbuf w = {0}, bias = {0}, mean = {0}, rstd = {0};
    const char *shape = "B=2 T=67 n_heads=10 n_rot=8 HS=64";
    if (bbuf_rand(P, &x, n, -1, 1) &&
        ran_ok(P, "rope_forward_bf16(in-place)", shape,
               P->cpu->rope_forward_bf16(P->cpu, x.c, x.c, B, T, n_heads, n_rot, HS, 10000.0f),
               P->gpu->rope_forward_bf16(P->gpu, x.g, x.g, B, T, n_heads, n_rot, HS, 10000.0f)))
        check_bf16(P, "rope_forward_bf16(in-place)", shape, &x, 1, 1);
    /* the backward in place, written (the trainer's form: dqkv rotated back where it lies) */
    if (bbuf_rand(P, &y, n, -1, 1) &&
        ran_ok(P, "rope_backward_bf16(in-place)", shape,
               P->cpu->rope_backward_bf16(P->cpu, y.c, y.c, B, T, n_heads, n_rot, HS, 10000.0f, 0),
               P->gpu->rope_backward_bf16(P->gpu, y.g, y.g, B, T, n_heads, n_rot, HS, 10000.0f, 0)))
        check_bf16(P, "rope_backward_bf16(in-place)", shape, &y, 1, 1);
    shape = "N=37 C=768";
    if (bbuf_rand(P, &a, nc, -2, 2) && bbuf_rand(P, &b, nc, -1, 1) && bbuf_poison(P, &out, nc) &&
        fbuf_rand(P, &w, C, -1, 1) && fbuf_rand(P, &bias, C, -1, 1) && fbuf_poison(P, &mean, N) &&
        fbuf_poison(P, &rstd, N)) {
        if (ran_ok(P, "residual_layernorm_forward_bf16(res = a)", shape,
                   P->cpu->residual_layernorm_forward_bf16(P->cpu, a.c, out.c, mean.c, rstd.c, a.c, b.c, w.c, bias.c,
                                                           N, C, 1e-5f),
                   P->gpu->residual_layernorm_forward_bf16(P->gpu, a.g, out.g, mean.g, rstd.g, a.g, b.g, w.g, bias.g,
                                                           N, C, 1e-5f))) {
            check_bf16(P, "residual_layernorm_forward_bf16(res = a).res", shape, &a, 0, 1);
            check_bf16(P, "residual_layernorm_forward_bf16(res = a).out", shape, &out, 0, 1);
            check(P, "residual_layernorm_forward_bf16(res = a).rstd", shape, &rstd, TOL_EXACT, 0);
        }
        if (ran_ok(P, "residual_rmsnorm_forward_bf16(res = b)", shape,
                   P->cpu->residual_rmsnorm_forward_bf16(P->cpu, b.c, out.c, rstd.c, a.c, b.c, w.c, N, C, 1e-5f),
                   P->gpu->residual_rmsnorm_forward_bf16(P->gpu, b.g, out.g, rstd.g, a.g, b.g, w.g, N, C, 1e-5f))) {
            check_bf16(P, "residual_rmsnorm_forward_bf16(res = b).res", shape, &b, 0, 1);
            check_bf16(P, "residual_rmsnorm_forward_bf16(res = b).out", shape, &out, 0, 1);
        }
    }
    bbuf_free(P, &x);
    bbuf_free(P, &y);
    bbuf_free(P, &a);
    bbuf_free(P, &b);
    bbuf_free(P, &out);
    fbuf_free(P, &w);
    fbuf_free(P, &bias);
    fbuf_free(P, &mean);
    fbuf_free(P, &rstd);
}

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
static void case_flash_unsupported(parity *P) {
    float *x = NULL;
    int ok = P->gpu->mem_alloc(P->gpu, (void **)&x, 4096 * sizeof(float)) == FORGE_OK;
    forge_status s = ok ? P->gpu->flash_attention_forward(P->gpu, x, x + 2048, x + 1024, 1, 4, 2, 1, 130)
                        : FORGE_ERR_OOM;
    report(P, s == FORGE_ERR_UNSUPPORTED, "flash_attention_forward", "HS=130 (expect FORGE_ERR_UNSUPPORTED)",
           s == FORGE_ERR_UNSUPPORTED ? 0.0 : 1.0, 0.0, s == FORGE_ERR_UNSUPPORTED ? NULL : forge_status_name(s));
    if (x) P->gpu->mem_free(P->gpu, x);
}
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

/* ---- device memory: the pool recycles every micro-batch ---- */

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

/* The auto matmul mode's cache: a corrupt file must be ignored (re-measured) and rewritten whole. */
static void case_matmul_table(parity *P) {
    const char *path = "/tmp/forge_gpu_tests_matmul_table.tsv";
    FILE *f = fopen(path, "w");
    if (!f) {
        report(P, 0, "matmul_table", path, INFINITY, 0, "(cannot write the test cache file)");
        return;
    }
    fputs("this is not a forge matmul table\n", f);
    fclose(f);
    /* a fresh auto backend opens the table at creation */
    forge_backend *gpu = NULL;
    if (gpu_backend(&gpu, FORGE_MATMUL_AUTO, path) != FORGE_OK) {
        report(P, 0, "cuda_backend_create", "auto (table test)", INFINITY, 0, forge_error_message());
        return;
    }
    forge_backend *main_gpu = P->gpu;
    P->gpu = gpu;
    /* the list's 130 x 129 x 131 case runs NT, NN and TN once each: three measured rows */
    for (int o = FORGE_OP_matmul_forward; o <= FORGE_OP_matmul_backward_weight; o++) {
        const op_cases *oc = &OP_WALKER_CASES[o];
        for (int k = 0; k < oc->n_cases; k++) {
            char dims[160];
            oc->show((const char *)oc->cases + (size_t)k * oc->case_size, dims, sizeof dims);
            if (strcmp(dims, "N=130 C=129 OC=131") == 0) op_walker_run_case(P, oc, k, 1);
        }
    }
    P->gpu = main_gpu;
    forge_backend_destroy(gpu);
    f = fopen(path, "r");
    char line[512] = "";
    int rows = 0, key_ok = 0;
    if (f) {
        if (fgets(line, sizeof line, f)) key_ok = strncmp(line, "# forge matmul table v1 ", 24) == 0;
        while (fgets(line, sizeof line, f)) rows++;
        fclose(f);
    }
    /* without cuBLAS auto is forge alone and writes nothing: the corrupt file stays */
#ifdef FORGE_NO_CUBLAS
    (void)key_ok;
    report(P, 1, "matmul_table[no cublas]", path, rows, 0, "(auto runs forge only: no table)");
#else
    report(P, key_ok && rows == 3, "matmul_table[auto] corrupt cache -> rewritten", path, rows, 3,
           key_ok ? NULL : "(first line is not the table key)");
#endif
}

/* The bf16 classifier with target ids outside [0, V) (rows 5 and 77 of 256: the transposed chunk, whose softmax
 * statistics come from the logits GEMM's epilogue; GPT-2's V, 50257 = 392 x 128 + 81, and ignored rows): the bad
 * rows' losses are NaN, poll_errors names one of them, and every other row's loss and dinp row match the CPU
 * reference run with the bad rows ignored (the CPU reference refuses such ids) within the op's tolerances. */
static void case_classifier_bf16_bad_ids(parity *P) {
    const int N = 256, C = 64, V = 50257;
    const float gs = 0.25f;
    const char *shape = "N=256 C=64 V=50257, targets[5] = 50257, targets[77] = -3";
    const size_t ns = FORGE_CLS_BF16_SCRATCH(N, C, V, 0);
    fbuf loss = {0}, scr = {0};
    bbuf inp = {0}, wte = {0}, dinp = {0};
    ibuf ids = {0};
    float *hl = malloc((size_t)N * sizeof *hl);
    forge_bf16 *hd = malloc((size_t)N * C * sizeof *hd);
    int ok = hl && hd && fbuf_poison(P, &loss, N) && fbuf_poison(P, &scr, ns) &&
             bbuf_rand(P, &inp, (size_t)N * C, -1, 1) && bbuf_rand(P, &wte, (size_t)V * C, -0.1f, 0.1f) &&
             bbuf_poison(P, &dinp, (size_t)N * C) && ibuf_rand(P, &ids, N, V, IGNORE_INDEX, 10);
    if (ok) {
        ids.c[5] = V;
        ids.c[77] = -3;
        ok = P->gpu->copy_to_device(P->gpu, ids.g, ids.c, N * sizeof(int32_t)) == FORGE_OK;
        ids.c[5] = ids.c[77] = IGNORE_INDEX; /* the reference's targets */
        (void)P->gpu->poll_errors(P->gpu);
    }
    ok = ok && P->cpu->classifier_bf16(P->cpu, loss.c, dinp.c, NULL, scr.c, inp.c, wte.c, ids.c, N, C, V,
                                       IGNORE_INDEX, gs, 0, 0) == FORGE_OK;
    ok = ok && P->gpu->classifier_bf16(P->gpu, loss.g, dinp.g, NULL, scr.g, inp.g, wte.g, ids.g, N, C, V,
                                       IGNORE_INDEX, gs, 0, 0) == FORGE_OK;
    const forge_status polled = ok ? P->gpu->poll_errors(P->gpu) : FORGE_OK;
    const int named = polled == FORGE_ERR_DATA && (strstr(forge_error_message(), "target id 50257 at row 5") != NULL ||
                                                   strstr(forge_error_message(), "target id -3 at row 77") != NULL);
    ok = ok && named && P->gpu->copy_to_host(P->gpu, hl, loss.g, (size_t)N * sizeof *hl) == FORGE_OK &&
         P->gpu->copy_to_host(P->gpu, hd, dinp.g, (size_t)N * C * sizeof *hd) == FORGE_OK;
    const double tl = FORGE_CLS_BF16_LOSS_TOL(C), td = FORGE_CLS_BF16_DINP_TOL(gs);
    double worst = 0;
    size_t wrong = 0;
    for (int n = 0; ok && n < N; n++) {
        if (n == 5 || n == 77) {
            wrong += !isnan(hl[n]);
            continue;
        }
        const double e = fabs((double)hl[n] - loss.c[n]);
        worst = e > worst ? e : worst;
        wrong += !(e <= tl);
        for (int c = 0; c < C; c++) {
            const double d = fabs((double)forge_bf16_to_f32(hd[(size_t)n * C + c]) -
                                  forge_bf16_to_f32(dinp.c[(size_t)n * C + c]));
            wrong += !(d <= td);
        }
    }
    report(P, ok && wrong == 0, "classifier_bf16(bad ids)", shape, worst, tl,
           !ok ? (named ? "(launch, poll or copy failed)" : "(poll_errors did not name a bad target and its row)")
               : wrong ? "(valid rows differ from the reference or bad rows' losses not NaN)" : NULL);
    free(hl);
    free(hd);
    fbuf_free(P, &loss);
    fbuf_free(P, &scr);
    bbuf_free(P, &inp);
    bbuf_free(P, &wte);
    bbuf_free(P, &dinp);
    ibuf_free(P, &ids);
}

/* ---- the kernels after a device reset ---- */

/* Kernel attributes (the dynamic shared-memory limit, the carveout) belong to a CUDA context, and forge sets each
 * kernel's once per context (src/backend/cuda/kernel_attrs.h). After cudaDeviceReset the device's next primary
 * context starts without them: the kernels that need more than 48 KiB of shared memory (the bf16 flash forwards and
 * backwards, the wgmma GEMMs) must get them again there, or their launches fail. Each kernel runs once before the
 * reset (so that it was set in the old context even when this group runs alone) and once after. The reset frees
 * every allocation and stream, so the backend is destroyed first and created again; this group runs last. */
static void reset_kernels(parity *P) {
    case_flash16(P, 1, 130, 130, 2, 1, 64, 0);  /* the D = 64 forward (two CTAs an SM: the carveout), backward */
    case_flash16(P, 1, 130, 130, 2, 2, 128, 1); /* the D = 128 forward and backward */
    case_gemm_tn_default(P, 136, 264, 4104, 1);
    case_nt_epi_bf16(P, 257, 8, 8);
}

static void case_device_reset(parity *P) {
    reset_kernels(P);
    forge_backend_destroy(P->gpu);
    P->gpu = NULL;
    const cudaError_t e = cudaDeviceReset();
    forge_status s = e == cudaSuccess ? gpu_backend(&P->gpu, FORGE_MATMUL_FP32, NULL) : FORGE_ERR_DEVICE;
    report(P, s == FORGE_OK, "device_reset", "cudaDeviceReset, then a new CUDA backend", 0, 0,
           e != cudaSuccess ? cudaGetErrorString(e) : s != FORGE_OK ? forge_error_message() : NULL);
    if (s == FORGE_OK) reset_kernels(P);
}

/* ---- driver ------------------------------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    parity P;
    memset(&P, 0, sizeof P);
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) P.quick = 1;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
        else if (strcmp(argv[i], "--op") == 0 && i + 1 < argc) P.op_filter = argv[++i];
        else {
            printf("usage: forge_gpu_tests [--quick] [--only ops|flash16|gemm_fp8|gemm_tn|decode|gelu16|pdl|reset]"
                   " [--op NAME,...]\n"
                   "  --op: the op walk only, of the named ops (every case, default matmul mode)\n"
                   "0 passed, 1 failed\n");
            return 2;
        }
    }
    forge_rng_seed(&P.rng, 1234, 7);
    if (forge_backend_create_cpu(&P.cpu, 0, 1) != FORGE_OK) {
        printf("cannot create the CPU reference backend: %s\n0 passed, 1 failed\n", forge_error_message());
        return 1;
    }
    if (gpu_backend(&P.gpu, FORGE_MATMUL_FP32, NULL) != FORGE_OK) {
        printf("cannot create the CUDA backend: %s\n0 passed, 1 failed\n", forge_error_message());
        forge_backend_destroy(P.cpu);
        return 1;
    }
    printf("gpu parity: cpu=%s cuda=%s, %d ops in the list%s\n", P.cpu->name, P.gpu->name, (int)FORGE_OP_COUNT,
           P.quick ? " (quick shapes)" : "");
    int all = only == NULL && !P.op_filter;
    if (P.op_filter) {
        op_walker_walk(&P, 0);
        if (strstr(P.op_filter, "classifier_bf16") != NULL) case_classifier_bf16_bad_ids(&P);
        if (strstr(P.op_filter, "residual_") != NULL) case_bf16_in_place(&P);
    }
    if (all || (only && strcmp(only, "ops") == 0)) {
        op_walker_walk(&P, 0);
        static const forge_matmul_mode other_modes[] = {FORGE_MATMUL_FP32_TILE64, FORGE_MATMUL_FP32_TILE128,
#ifndef FORGE_NO_CUBLAS
                                                        FORGE_MATMUL_CUBLAS,
#endif
                                                        FORGE_MATMUL_TF32};
        for (size_t i = 0; i < sizeof other_modes / sizeof other_modes[0]; i++)
            walk_gemm_ops_with(&P, other_modes[i], NULL);
        /* the auto table of this run goes to a scratch file, never the user's cache */
        walk_gemm_ops_with(&P, FORGE_MATMUL_AUTO, "/tmp/forge_gpu_tests_matmul_auto.tsv");
        case_matmul_table(&P);
#ifdef FORGE_NO_CUBLAS
        {
            /* a build without cuBLAS must refuse it, never fall back silently */
            forge_backend *nb = NULL;
            forge_status ns = gpu_backend(&nb, FORGE_MATMUL_CUBLAS, NULL);
            report(&P, ns == FORGE_ERR_UNSUPPORTED, "cuda_backend_create[cublas, CUBLAS=0]", "refused", 0, 0,
                   ns == FORGE_ERR_UNSUPPORTED ? NULL : "(expected FORGE_ERR_UNSUPPORTED)");
            if (nb) forge_backend_destroy(nb);
        }
#endif
        case_rope_in_place(&P);
        case_bf16_in_place(&P);
        case_encoder_bf16_bad_ids(&P);
        case_classifier_bf16_bad_ids(&P);
        case_flash_deterministic(&P, 2, 333, 4, 2, 64);
        case_flash_deterministic(&P, 1, 300, 4, 1, 128);
        case_flash_unsupported(&P);
        if (!P.quick) case_flash_memory(&P);
        case_pool(&P);
    }
    if (all || (only && strcmp(only, "gemm_fp8") == 0)) run_gemm_fp8_cases(&P);
    if (all || (only && strcmp(only, "gemm_tn") == 0)) run_gemm_tn_cases(&P);
    if (all || (only && strcmp(only, "flash16") == 0)) run_flash16_cases(&P);
    if (all || (only && strcmp(only, "decode") == 0)) run_decode_cases(&P);
    if (all || (only && strcmp(only, "gelu16") == 0)) run_gelu16_cases(&P);
    if (all || (only && strcmp(only, "pdl") == 0)) run_pdl_cases(&P);
    if (all || (only && strcmp(only, "reset") == 0)) case_device_reset(&P);

    forge_backend_destroy(P.gpu);
    forge_backend_destroy(P.cpu);
    if (P.skipped) printf("%d skipped (cpu reference entry missing)\n", P.skipped);
    printf("%d passed, %d failed\n", P.passed, P.failed);
    return P.failed ? 1 : 0;
}
