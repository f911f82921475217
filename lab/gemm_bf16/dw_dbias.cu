/*
 * dw_dbias.cu: dW with the bias gradient summed inside the TN GEMM (dw_dbias.h). The kernels are src's bodies with
 * DBIAS on (gemm_wgmma_kernel.cuh: gemm_wgmma_body's 128 x 256 tile, gemm_tn_c192_body); what is here instantiates
 * them, launches them the way the product's TN plan does (gemm_wgmma_launch / gemm_tn_c192_launch, with one more
 * kernel argument: the dbias partial rows) and finishes dbias with reduce.cu's ordered column sum.
 *
 * Why the producer warpgroup's idle warps and not one more wgmma (m64n8k16 of A against a tile of bf16 ones, the
 * row sums in 4 more accumulators per thread): issued in every unit, so as not to put a data-dependent branch
 * around wgmma (which made ptxas serialise a kernel's wgmmas, C7518), that MMA repeats the sum in every N tile of a
 * row block: 3x at the qkv shape, 16x at the MLP projection's C192 tiles, +3% (n8 next to n256) to +8% (C192) of
 * the tensor work on the critical path of every unit, and its smem reads of A (2 KiB per k16 step) are the same
 * as the helper warps'. The helper warps change nothing in the consumers' instruction stream, run only in units
 * of tile column 0 and sit on warps that otherwise only wait; their cost is shared-memory bandwidth (16 KiB
 * (C192: 24 KiB) read per stage beside the wgmmas' reads and the TMA writes) and one more wait per stage before
 * the producer refills it (their reads take a few hundred cycles against ~1000 for the stage's MMAs).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../src/backend/cuda/cuda_ops.h"
#include "../../src/backend/cuda/gemm_wgmma_kernel.cuh"

extern "C" {
#include "dw_dbias.h"
}

/* The 128-row TN kernel (BN 256) with DBIAS: EPI 0 (partials from the registers, or the unsplit epilogue) or
 * GEMM_EPI_TMA_STORE (split partials through the TMA store). */
template <int EPI>
__global__ void __launch_bounds__(GEMM_THREADS, 1)
    lab_tn256_dbias_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                           const __grid_constant__ CUtensorMap tm_c, const gemm_epi_dev ep, int M, int N, int K,
                           int splits, int kps, float *dbias_ws) {
    gemm_wgmma_body<256, 1, 1, EPI, GEMM_BM, true>(tm_a, tm_b, tm_c, ep, M, N, K, splits, kps, nullptr, dbias_ws);
}

__global__ void __launch_bounds__(GEMM_THREADS, 1)
    lab_tn_c192_dbias_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                             const gemm_epi_dev ep, int M, int N, int K, int splits, int kps, float *dbias_ws) {
    gemm_tn_c192_body<true>(tm_a, tm_b, ep, M, N, K, splits, kps, dbias_ws);
}

/* gemm_wgmma_launch<256, GEMM_TN, EPI> with the dbias rows: C += A^T . B at `splits` (unsplit: the epilogue's
 * read-add-store; split: the partials to the workspace's slices, then the pass adds them and C in order), and
 * dbias_ws[s * M + m] = split s's sum of A's row m. */
template <int EPI>
static forge_status lab_tn256_dbias_launch(const void *A, const void *B, float *C, int M, int N, int K,
                                           void *workspace, int splits, float *dbias_ws, cudaStream_t stream, int pdl,
                                           int dev, int sm_count) {
    typedef gemm_cfg<256> cfg;
    constexpr bool TMA = (EPI & GEMM_EPI_TMA_STORE) != 0;
    static int smem_set[GEMM_MAX_DEVICES];
    gemm_epi_dev ep = {};
    ep.C = C;
    ep.work = splits > 1 ? (float *)workspace : nullptr;
    ep.res = splits == 1 ? C : nullptr;
    gemm_encode_tiled_fn encode = nullptr;
    FORGE_TRY(gemm_get_encoder(&encode));
    CUtensorMap tm_a, tm_b, tm_c;
    FORGE_TRY(gemm_encode_mnmajor(&tm_a, encode, A, M, K, "A"));
    FORGE_TRY(gemm_encode_mnmajor(&tm_b, encode, B, N, K, "B"));
    memset(&tm_c, 0, sizeof tm_c);
    if constexpr (TMA) {
        if (splits < 2 || !gemm_tn_tma_partials_ok(M, N, splits, workspace))
            return forge_error(FORGE_ERR_ARG, "lab dw dbias: TMA-stored partials need a split the slices allow");
        FORGE_TRY(gemm_encode_c(&tm_c, encode, ep.work, splits * M, N, 0)); /* the splits' slices, stacked */
    }
    const size_t smem = TMA ? cfg::SMEM_TMA_STORE : cfg::SMEM;
    if (!smem_set[dev]) {
        CUDA_TRY(cudaFuncSetAttribute(lab_tn256_dbias_kernel<EPI>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem));
        smem_set[dev] = 1;
    }
    const int ktiles = (K + GEMM_BK - 1) / GEMM_BK;
    const int kps = (ktiles + splits - 1) / splits;
    const long long units = (long long)((M + GEMM_BM - 1) / GEMM_BM) * ((N + 255) / 256) * splits;
    if (units > 0x7fffffffLL) return forge_error(FORGE_ERR_UNSUPPORTED, "lab dw dbias: %lld units overflow int", units);
    const int grid = (int)(units < sm_count ? units : sm_count);
    /* gemm_wgmma_launch's rule for an fp32 C (no pre / dpre) */
    ep.vec2 = N % 2 == 0 && (uintptr_t)ep.C % 8 == 0 && (uintptr_t)ep.res % 8 == 0 && (uintptr_t)ep.work % 8 == 0;
    CUDA_LAUNCH_TRY(forge_pdl_launch(lab_tn256_dbias_kernel<EPI>, grid, GEMM_THREADS, smem, stream, pdl, tm_a, tm_b,
                                     tm_c, ep, M, N, K, splits, kps, dbias_ws),
                    "lab_tn256_dbias_kernel");
    if (splits > 1) return gemm_splitk_reduce_launch(ep, M, N, splits, 1, stream, pdl, sm_count);
    return FORGE_OK;
}

/* gemm_tn_c192_launch (gemm_wgmma.cu) with the dbias rows, C += */
static forge_status lab_tn_c192_dbias_launch(const void *A, const void *B, float *C, int M, int N, int K,
                                             void *workspace, int splits, float *dbias_ws, cudaStream_t stream,
                                             int pdl, int dev, int sm_count) {
    static int smem_set[GEMM_MAX_DEVICES];
    gemm_epi_dev ep = {};
    ep.C = C;
    ep.work = splits > 1 ? (float *)workspace : nullptr;
    ep.res = splits == 1 ? C : nullptr;
    gemm_encode_tiled_fn encode = nullptr;
    FORGE_TRY(gemm_get_encoder(&encode));
    CUtensorMap tm_a, tm_b;
    FORGE_TRY(gemm_encode_mnmajor(&tm_a, encode, A, M, K, "A"));
    FORGE_TRY(gemm_encode_mnmajor(&tm_b, encode, B, N, K, "B (32-wide boxes)", GEMM_C192_B_BOX));
    if (!smem_set[dev]) {
        CUDA_TRY(cudaFuncSetAttribute(lab_tn_c192_dbias_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)GEMM_C192_SMEM));
        smem_set[dev] = 1;
    }
    const int ktiles = (K + GEMM_BK - 1) / GEMM_BK;
    const int kps = (ktiles + splits - 1) / splits;
    const long long units = (long long)((M + GEMM_C192_BM - 1) / GEMM_C192_BM) *
                            ((N + GEMM_C192_BN - 1) / GEMM_C192_BN) * splits;
    if (units > 0x7fffffffLL) return forge_error(FORGE_ERR_UNSUPPORTED, "lab dw dbias: %lld units overflow int", units);
    const int grid = (int)(units < sm_count ? units : sm_count);
    ep.vec2 = N % 2 == 0 && (uintptr_t)ep.C % 8 == 0 && (uintptr_t)ep.res % 8 == 0 && (uintptr_t)ep.work % 8 == 0;
    CUDA_LAUNCH_TRY(forge_pdl_launch(lab_tn_c192_dbias_kernel, grid, GEMM_THREADS, GEMM_C192_SMEM, stream, pdl, tm_a,
                                     tm_b, ep, M, N, K, splits, kps, dbias_ws),
                    "lab_tn_c192_dbias_kernel");
    if (splits > 1) return gemm_splitk_reduce_launch(ep, M, N, splits, 1, stream, pdl, sm_count);
    return FORGE_OK;
}

/* The product's TN plan for dW (OC, C) += dout^T . inp (forge_gemm_bf16_tn_wgmma with accumulate, the workspace
 * max_slices holds): kind 192 (C192) or the 128-row tile's width, its splits, and whether the split partials go
 * through the TMA store. */
typedef struct {
    int bn, splits, tma;
} lab_dwb_plan;

static lab_dwb_plan lab_dwb_plan_of(int N, int C, int OC, long long max_slices, int sm_count) {
    lab_dwb_plan p = {256, 1, 0};
    const int one_wave = gemm_tn_one_wave_splits(OC, C, N, sm_count, max_slices);
    if (gemm_tn_c192_default(OC, C, N, sm_count, one_wave)) {
        p.bn = 192;
        p.splits = one_wave;
        return p;
    }
    int bm = GEMM_BM;
    gemm_plan_tn(OC, C, N, 1, sm_count, max_slices, GEMM_TN_TILES, 2, &bm, &p.bn, &p.splits);
    p.tma = p.splits > 1; /* forge_gemm_bf16_tn_wgmma's allow_tma, then gemm_tn_tma_partials_ok at the call */
    return p;
}

/* Why the product's matmul_backward_weight_bf16 would not run the wgmma GEMM at these arguments, or NULL (its rules,
 * then gemm.h's) */
static const char *lab_dwb_refusal(const float *dweight, const forge_bf16 *dout, const forge_bf16 *inp, int N, int C,
                                   int OC) {
    if (C <= 0) return "C = 0: no weight gradient to fuse with";
    if (OC % 8 != 0 || C % 8 != 0) return "OC and C must be multiples of 8";
    if ((uintptr_t)dout % 16 != 0 || (uintptr_t)inp % 16 != 0 || (uintptr_t)dweight % 4 != 0)
        return "dout and inp must be 16-byte aligned, dweight 4-byte";
    return gemm_wgmma_refusal_bwd(GEMM_TN, dout, inp, dweight, OC, C, N);
}

extern "C" int lab_dw_dbias_plan(int N, int C, int OC, char *buf, size_t len) {
    /* the shape's rules only: 16-byte aligned stand-ins for the pointers (only their alignment is read) */
    const forge_bf16 *al16 = reinterpret_cast<const forge_bf16 *>(uintptr_t{256});
    const char *why = N <= 0 || OC <= 0 ? "empty"
                                        : lab_dwb_refusal(reinterpret_cast<const float *>(al16), al16, al16, N, C, OC);
    int dev = 0, sm_count = 0;
    if (why == nullptr && gemm_device_info(&dev, &sm_count) != FORGE_OK) {
        forge_error_clear();
        why = "no Hopper device";
    }
    if (why != nullptr) {
        snprintf(buf, len, "%s", why);
        return -1;
    }
    /* the workspace the product sizes for its plans (forge_gemm_bf16_tn_workspace), so the same max_slices */
    size_t need = 0;
    if (forge_gemm_bf16_tn_workspace(OC, C, N, &need) != FORGE_OK) {
        forge_error_clear();
        snprintf(buf, len, "no workspace size");
        return -1;
    }
    const long long max_slices = need / ((size_t)OC * C * sizeof(float));
    const lab_dwb_plan p = lab_dwb_plan_of(N, C, OC, max_slices, sm_count);
    const int tma = p.tma && OC % GEMM_BM == 0 && C % 4 == 0;
    if (p.bn == 192) snprintf(buf, len, "c192 s%d", p.splits);
    else snprintf(buf, len, "128x%d s%d%s", p.bn, p.splits, tma ? " tma" : "");
    return p.bn == 128 ? 0 : 1;
}

extern "C" forge_status lab_matmul_backward_weight_bf16_fused_dbias(forge_backend *be, float *dweight, float *dbias,
                                                                    const forge_bf16 *dout, const forge_bf16 *inp,
                                                                    int N, int C, int OC) {
    if (N < 0 || C < 0 || OC < 0)
        return forge_error(FORGE_ERR_ARG, "lab matmul_backward_weight_bf16_fused_dbias: sizes must be >= 0, got "
                                          "N=%d C=%d OC=%d", N, C, OC);
    if (N == 0 || OC == 0) return FORGE_OK;
    if (dbias == NULL) return be->matmul_backward_weight_bf16(be, dweight, dbias, dout, inp, N, C, OC);
    const char *why = lab_dwb_refusal(dweight, dout, inp, N, C, OC);
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "lab matmul_backward_weight_bf16_fused_dbias (N=%d C=%d OC=%d): %s",
                           N, C, OC, why);
    cuda_ctx *ctx = cuda_get_ctx(be);
    int dev = 0, sm_count = 0;
    FORGE_TRY(gemm_device_info(&dev, &sm_count));
    /* matmul_backward_weight_bf16's workspace, then forge_gemm_bf16_tn_wgmma's plan at what it holds */
    size_t need = 0;
    FORGE_TRY(forge_gemm_bf16_tn_workspace(OC, C, N, &need));
    FORGE_TRY(cuda_tn_workspace(ctx, need));
    const long long max_slices = gemm_tn_max_slices(OC, C, ctx->tn_ws, ctx->tn_ws_bytes);
    const lab_dwb_plan p = lab_dwb_plan_of(N, C, OC, max_slices, sm_count);
    if (p.bn == 128)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "lab matmul_backward_weight_bf16_fused_dbias (N=%d C=%d OC=%d): the product's plan is the "
                           "128 x 128 tile (%d splits), which has no DBIAS instantiation",
                           N, C, OC, p.splits);
    if ((size_t)p.splits * OC > CUDA_WS_FLOATS)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "lab matmul_backward_weight_bf16_fused_dbias: %d partial rows of OC = %d exceed ctx->ws",
                           p.splits, OC);
    const cudaStream_t st = ctx->stream;
    if (p.bn == 192)
        FORGE_TRY(lab_tn_c192_dbias_launch(dout, inp, dweight, OC, C, N, ctx->tn_ws, p.splits, ctx->ws, st, ctx->pdl,
                                           dev, sm_count));
    else if (p.tma && gemm_tn_tma_partials_ok(OC, C, p.splits, ctx->tn_ws))
        FORGE_TRY(lab_tn256_dbias_launch<GEMM_EPI_TMA_STORE>(dout, inp, dweight, OC, C, N, ctx->tn_ws, p.splits,
                                                             ctx->ws, st, ctx->pdl, dev, sm_count));
    else
        FORGE_TRY(lab_tn256_dbias_launch<0>(dout, inp, dweight, OC, C, N, ctx->tn_ws, p.splits, ctx->ws, st,
                                            ctx->pdl, dev, sm_count));
    /* after the GEMM and its split pass on the stream (pdl: the finish waits for them) */
    return cuda_colsum_finish(ctx, dbias, ctx->ws, p.splits, OC);
}

extern "C" forge_status lab_dw_dbias_poison_ws(forge_backend *be) {
    cuda_ctx *ctx = cuda_get_ctx(be);
    CUDA_TRY(cudaMemsetAsync(ctx->ws, 0xFF, CUDA_WS_FLOATS * sizeof(float), ctx->stream));
    return FORGE_OK;
}
