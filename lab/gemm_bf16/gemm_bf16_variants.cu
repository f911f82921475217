/*
 * gemm_bf16_variants.cu: the bf16 wgmma GEMM's variants (gemm_bf16_variants.h): explicit TN split reductions and
 * tiles, and the NT / NN fused epilogues with the store forced. The kernels, the cost model and the launchers are
 * src's (gemm_wgmma_kernel.cuh, gemm_wgmma.cu); this file instantiates only the 192-row TN tile, which no default
 * runs, and owns the plans and workspace layouts of the in-kernel reduction and stream-K.
 */
#include <stdint.h>
#include <string.h>

#include "../../src/backend/cuda/gemm_wgmma_kernel.cuh"

extern "C" {
#include "gemm_bf16_variants.h"
}

/* The 192 x 192 tile of the three-warpgroup kernel as a cost-model candidate: 1.125 = its 36864 MACs per
 * k-element against 32768, in one-wave plans only (where it can cover the 64 tiles of the GPT-2 MLP dW at 2 splits
 * where 128 x 256 needs 72 x 5 units = 2.7 waves). */
static const gemm_tn_tile LAB_TN_TILE_192 = {192, 192, 1.125, 1};

extern "C" const char *lab_gemm_tn_reduce_name(lab_gemm_tn_reduce reduce) {
    static const char *const names[LAB_GEMM_TN_N_MODES] = {"default", "pass",  "inkernel", "streamk",
                                                           "pass_tma", "t192", "c192",     "model192"};
    return (int)reduce >= 0 && reduce < LAB_GEMM_TN_N_MODES ? names[reduce] : "?";
}

/* s splits forced (> 0) onto a plan: capped at GEMM_MAX_SPLITS, the K slices and max_slices (at least 1), then
 * renormalised so that no split is empty; s == 0 keeps `plan`. */
static int lab_tn_force_splits(int plan, int s, int K, long long max_slices) {
    if (s <= 0) return plan;
    const long long ktiles = (K + GEMM_BK - 1) / GEMM_BK;
    long long cap = ktiles < GEMM_MAX_SPLITS ? ktiles : GEMM_MAX_SPLITS;
    if (max_slices < cap) cap = max_slices < 1 ? 1 : max_slices;
    const long long f = s < cap ? s : cap, kps = (ktiles + f - 1) / f;
    return (int)((ktiles + kps - 1) / kps);
}

/* The cost model's plan (with the 192 tile among the candidates when allow192), splits forced as above. */
static void lab_tn_plan(int M, int N, int K, int accumulate, int sm_count, long long max_slices, int allow192,
                        int forced, int *bm, int *bn, int *splits) {
    const gemm_tn_tile tiles[3] = {GEMM_TN_TILES[0], GEMM_TN_TILES[1], LAB_TN_TILE_192};
    gemm_plan_tn(M, N, K, accumulate, sm_count, max_slices, tiles, allow192 ? 3 : 2, bm, bn, splits);
    *splits = lab_tn_force_splits(*splits, forced, K, max_slices);
}

/* The in-kernel reduction's workspace: one int counter per tile (rounded up to 256 bytes, so the slots stay
 * 16-byte aligned), then tiles x splits slots of GEMM_BM x bn fp32 in fragment order (padded tiles included). */
static long long lab_tn_tiles(int M, int N, int bn) {
    return (long long)((M + GEMM_BM - 1) / GEMM_BM) * ((N + bn - 1) / bn);
}
static size_t lab_tn_fixup_cnt_bytes(long long tiles) { return (size_t)((tiles * 4 + 255) / 256 * 256); }
static size_t lab_tn_fixup_bytes(int M, int N, int bn, int splits) {
    const long long tiles = lab_tn_tiles(M, N, bn);
    return lab_tn_fixup_cnt_bytes(tiles) + (size_t)tiles * splits * GEMM_BM * bn * sizeof(float);
}

/* Stream-K: tile width 256 (128 when N <= 128), grid = min(SMs, tiles x ktiles) so every CTA's range holds >= 1
 * iteration, workspace = the tile counters + 2 slots per CTA (gemm_fixup_slot). */
static int lab_tn_streamk_bn(int N) { return N <= 128 ? 128 : 256; }
static size_t lab_tn_streamk_bytes(int M, int N, int K, int sm_count) {
    const int bn = lab_tn_streamk_bn(N);
    const long long tiles = lab_tn_tiles(M, N, bn);
    const long long iters = tiles * ((K + GEMM_BK - 1) / GEMM_BK);
    const long long grid = iters < sm_count ? iters : sm_count;
    return lab_tn_fixup_cnt_bytes(tiles) + (size_t)(2 * grid) * GEMM_BM * bn * sizeof(float);
}

extern "C" forge_status lab_gemm_bf16_tn_workspace(int M, int N, int K, int splits, size_t *bytes) {
    *bytes = 0;
    FORGE_TRY(forge_gemm_bf16_tn_workspace(M, N, K, bytes)); /* DEFAULT, PASS_C192 */
    if (M <= 0 || N <= 0 || K <= 0) return FORGE_OK;
    int dev = 0, sm_count = 0;
    FORGE_TRY(gemm_device_info(&dev, &sm_count));
    size_t need = *bytes;
    for (int acc = 0; acc < 2; acc++) {
        /* the model's plan (PASS, PASS_TMA, INKERNEL), with the 192 tile (MODEL192, PASS_T192), the one-wave
         * splits (PASS_T192, PASS_C192); the fixup's padded slots at the largest of them */
        int bm = 0, bn = 0, s = 1, bm192 = 0, bn192 = 0, s192 = 1;
        lab_tn_plan(M, N, K, acc, sm_count, GEMM_MAX_SPLITS, 0, splits, &bm, &bn, &s);
        lab_tn_plan(M, N, K, acc, sm_count, GEMM_MAX_SPLITS, 1, splits, &bm192, &bn192, &s192);
        const int s1 = lab_tn_force_splits(gemm_tn_one_wave_splits(M, N, K, sm_count, GEMM_MAX_SPLITS), splits, K,
                                           GEMM_MAX_SPLITS);
        if (s192 > s) s = s192;
        if (s1 > s) s = s1;
        size_t b = s > 1 ? (size_t)s * M * N * sizeof(float) : 0;
        const size_t f = s > 1 ? lab_tn_fixup_bytes(M, N, bn, s) : 0;
        if (f > b) b = f;
        if (b > need) need = b;
    }
    const size_t sk = lab_tn_streamk_bytes(M, N, K, sm_count);
    *bytes = need > sk ? need : sk;
    return FORGE_OK;
}

/* The 192-row three-warpgroup kernel at `splits` (the pass reduces split partials). */
static forge_status lab_tn_t192_run(const void *A, const void *B, float *C, int M, int N, int K, int accumulate,
                                    void *workspace, int splits, cudaStream_t stream, int dev, int sm_count) {
    gemm_epi_dev ep = {};
    ep.C = C;
    ep.work = splits > 1 ? (float *)workspace : nullptr;
    ep.res = splits == 1 && accumulate ? C : nullptr;
    return gemm_wgmma_launch<192, GEMM_TN, 0, 192>(A, B, ep, M, N, K, accumulate != 0, splits, stream, 0, dev,
                                                   sm_count);
}

/* Stream-K over the tiles x K-tiles iterations (tile counters and two slots per CTA in the workspace). */
static forge_status lab_tn_streamk_run(const void *A, const void *B, float *C, int M, int N, int K, int accumulate,
                                       void *workspace, size_t workspace_bytes, cudaStream_t stream, int dev,
                                       int sm_count) {
    const size_t need = lab_tn_streamk_bytes(M, N, K, sm_count);
    if (workspace == nullptr || workspace_bytes < need)
        return forge_error(FORGE_ERR_ARG,
                           "lab gemm_bf16 tn stream-K (M=%d N=%d K=%d): workspace of %zu bytes, needs %zu "
                           "(lab_gemm_bf16_tn_workspace)",
                           M, N, K, workspace == nullptr ? (size_t)0 : workspace_bytes, need);
    const int bn = lab_tn_streamk_bn(N);
    const long long tiles = lab_tn_tiles(M, N, bn);
    gemm_epi_dev ep = {};
    ep.C = C;
    ep.res = accumulate ? C : nullptr; /* a whole tile's epilogue or the fixup adds C */
    ep.tile_cnt = (int *)workspace;
    ep.work = (float *)((char *)workspace + lab_tn_fixup_cnt_bytes(tiles));
    ep.streamk = 1;
    CUDA_TRY(cudaMemsetAsync(workspace, 0, (size_t)tiles * sizeof(int), stream));
    const long long iters = tiles * ((K + GEMM_BK - 1) / GEMM_BK);
    return gemm_tn_launch(bn, 0, A, B, ep, M, N, K, accumulate != 0, 1, stream, 0, dev, sm_count, iters);
}

/* The in-kernel fixed-order reduction at the pass's plan (bn, splits), splits cut to what the padded slots of
 * the workspace fit; unsplit after the cut, the plain unsplit launch. */
static forge_status lab_tn_inkernel_run(const void *A, const void *B, float *C, int M, int N, int K, int accumulate,
                                        void *workspace, size_t workspace_bytes, int bn, int splits,
                                        cudaStream_t stream, int dev, int sm_count) {
    const long long tiles = lab_tn_tiles(M, N, bn);
    const size_t cnt = lab_tn_fixup_cnt_bytes(tiles), slot = (size_t)GEMM_BM * bn * sizeof(float);
    if (splits > 1) {
        /* cut to what the padded slots fit, then renormalised so that no split is empty (an empty unit would
         * publish stale registers) */
        const long long fit = workspace_bytes > cnt ? (long long)((workspace_bytes - cnt) / (slot * tiles)) : 0;
        if (fit < splits) splits = fit < 2 ? 1 : (int)fit;
        const int ktiles = (K + GEMM_BK - 1) / GEMM_BK;
        const int kps = (ktiles + splits - 1) / splits;
        splits = (ktiles + kps - 1) / kps;
    }
    if (splits < 2)
        return gemm_tn_split_run(A, B, C, M, N, K, accumulate, workspace, bn, 1, 0, stream, 0, dev, sm_count);
    gemm_epi_dev ep = {};
    ep.C = C;
    ep.tile_cnt = (int *)workspace;
    ep.work = (float *)((char *)workspace + cnt);
    ep.res = accumulate ? C : nullptr; /* the last split's epilogue adds C */
    CUDA_TRY(cudaMemsetAsync(workspace, 0, (size_t)tiles * sizeof(int), stream));
    return gemm_tn_launch(bn, 0, A, B, ep, M, N, K, accumulate != 0, splits, stream, 0, dev, sm_count, 0);
}

extern "C" forge_status lab_gemm_bf16_tn_reduce(const void *A_bf16, const void *B_bf16, float *C, int M, int N,
                                                int K, int accumulate, void *workspace, size_t workspace_bytes,
                                                lab_gemm_tn_reduce reduce, int splits, void *stream) {
    const char *why = gemm_wgmma_refusal_bwd(GEMM_TN, A_bf16, B_bf16, C, M, N, K);
    if (why == nullptr && workspace != nullptr && (uintptr_t)workspace % 16 != 0)
        why = "the split-K workspace must be 16-byte aligned";
    if (why == nullptr && ((int)reduce < 0 || reduce >= LAB_GEMM_TN_N_MODES)) why = "unknown reduce mode";
    if (why == nullptr && (splits < 0 || splits > GEMM_MAX_SPLITS)) why = "splits must be 0 (the plan's) .. 32";
    if (why == nullptr && splits > 0 && (reduce == LAB_GEMM_TN_DEFAULT || reduce == LAB_GEMM_TN_STREAMK))
        why = "default and streamk take no forced splits";
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "lab gemm_bf16 tn %s (M=%d N=%d K=%d): %s",
                           lab_gemm_tn_reduce_name(reduce), M, N, K, why);
    if (reduce == LAB_GEMM_TN_DEFAULT)
        return forge_gemm_bf16_tn_wgmma(A_bf16, B_bf16, C, M, N, K, accumulate, workspace, workspace_bytes, stream,
                                        0);
    int dev = 0, sm_count = 0;
    FORGE_TRY(gemm_device_info(&dev, &sm_count));
    const cudaStream_t st = (cudaStream_t)stream;
    if (reduce == LAB_GEMM_TN_STREAMK)
        return lab_tn_streamk_run(A_bf16, B_bf16, C, M, N, K, accumulate, workspace, workspace_bytes, st, dev,
                                  sm_count);
    const long long max_slices = gemm_tn_max_slices(M, N, workspace, workspace_bytes);
    /* the splits that put the 192 x 192 tiles (C192, T192) on one wave of units */
    const int one_wave = gemm_tn_one_wave_splits(M, N, K, sm_count, max_slices);
    const int one_wave_run = lab_tn_force_splits(one_wave, splits, K, max_slices);
    if (reduce == LAB_GEMM_TN_PASS_C192 ||
        (reduce == LAB_GEMM_TN_MODEL192 && gemm_tn_c192_default(M, N, K, sm_count, one_wave)))
        return gemm_tn_c192_run(A_bf16, B_bf16, C, M, N, K, accumulate, workspace, one_wave_run, st, 0, dev,
                                sm_count);
    int bm = GEMM_BM, bn = 256, s = 1;
    lab_tn_plan(M, N, K, accumulate != 0, sm_count, max_slices,
                reduce == LAB_GEMM_TN_PASS_T192 || reduce == LAB_GEMM_TN_MODEL192, splits, &bm, &bn, &s);
    if (reduce == LAB_GEMM_TN_PASS_T192 && bm != 192) { /* forced where the model prefers another tile */
        s = one_wave_run;
        bm = bn = 192;
    }
    if (bm == 192) return lab_tn_t192_run(A_bf16, B_bf16, C, M, N, K, accumulate, workspace, s, st, dev, sm_count);
    if (reduce == LAB_GEMM_TN_INKERNEL)
        return lab_tn_inkernel_run(A_bf16, B_bf16, C, M, N, K, accumulate, workspace, workspace_bytes, bn, s, st, dev,
                                   sm_count);
    return gemm_tn_split_run(A_bf16, B_bf16, C, M, N, K, accumulate, workspace, bn, s,
                             reduce == LAB_GEMM_TN_PASS_TMA || reduce == LAB_GEMM_TN_MODEL192, st, 0, dev, sm_count);
}

extern "C" forge_status lab_gemm_bf16_tn_plan(const void *A_bf16, const void *B_bf16, float *C, int M, int N, int K,
                                              int accumulate, void *workspace, size_t workspace_bytes, int bn,
                                              int splits, void *stream) {
    const char *why = gemm_wgmma_refusal_bwd(GEMM_TN, A_bf16, B_bf16, C, M, N, K);
    if (why == nullptr && bn != 128 && bn != 256 && bn != 192) why = "tile width must be 128, 256 or 192";
    if (why == nullptr && (splits < 1 || splits > GEMM_MAX_SPLITS)) why = "splits must be 1 .. 32";
    if (why == nullptr && workspace != nullptr && (uintptr_t)workspace % 16 != 0)
        why = "the split-K workspace must be 16-byte aligned";
    const long long max_slices = gemm_tn_max_slices(M, N, workspace, workspace_bytes);
    if (why == nullptr && splits > 1 && max_slices < splits) why = "the workspace holds fewer than splits slices";
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "lab gemm_bf16 tn plan %d/%d (M=%d N=%d K=%d): %s", bn, splits, M,
                           N, K, why);
    int dev = 0, sm_count = 0;
    FORGE_TRY(gemm_device_info(&dev, &sm_count));
    const int s = lab_tn_force_splits(splits, splits, K, max_slices);
    const cudaStream_t st = (cudaStream_t)stream;
    if (bn == 192) return gemm_tn_c192_run(A_bf16, B_bf16, C, M, N, K, accumulate, workspace, s, st, 0, dev, sm_count);
    return gemm_tn_split_run(A_bf16, B_bf16, C, M, N, K, accumulate, workspace, bn, s, 1, st, 0, dev, sm_count);
}

extern "C" forge_status lab_gemm_bf16_nt_epi_store(const void *A_bf16, const void *B_bf16, void *C, int M, int N,
                                                   int K, const forge_gemm_epilogue *epi, int tma_store,
                                                   void *stream) {
    return gemm_bf16_nt_epi_launch(A_bf16, B_bf16, C, M, N, K, epi, tma_store, (cudaStream_t)stream, 0);
}

extern "C" forge_status lab_gemm_bf16_nn_epi_store(const void *A_bf16, const void *B_bf16, void *C, int M, int N,
                                                   int K, const forge_gemm_epilogue *epi, int tma_store,
                                                   void *stream) {
    return gemm_bf16_nn_epi_launch(A_bf16, B_bf16, C, M, N, K, epi, tma_store, (cudaStream_t)stream, 0);
}
