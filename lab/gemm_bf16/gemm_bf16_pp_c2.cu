/*
 * gemm_bf16_pp_c2.cu: the bf16 ping-pong epilogue kernel on 2-CTA clusters with B multicast (lab variant;
 * gemm_bf16_variants.h: lab_gemm_bf16_nt_pp_bf16_c2; measurements: lab/notes/gemm-bf16.md).
 *
 * The kernel is src's body (gemm_wgmma_fp8_kernel.cuh's wgmma_nt_body with CL = 2 on the bf16 ping-pong path, the
 * product's gemm_wgmma_bf16_pp_epi_kernel otherwise): the two CTAs of a cluster take row-blocks 2p and 2p+1 of one
 * column-block, each loads its own A (128 x 64 bf16 a stage) and one 64-row half of the shared B, multicast into
 * both CTAs. Why: 128 x 128 tiles read 64 FLOP per byte from L2, and the K = 768 forward shapes move ~9-11 TB/s of
 * L2 -> SM traffic on the product kernel (lab/notes/gemm-bf16.md, tenth session); sharing B cuts it by a quarter
 * (per CTA pair and stage 2 x 16 + 16 KiB instead of 2 x 32). The tile pairing across the two CTAs and the
 * barrier protocol: fp8_pp_tile and fp8_cluster_rank in the header. Per tile the same MMAs in the same K order and
 * the same epilogue as the product kernel, so the same bits (forge-lab test gemm-bf16 checks them).
 *
 * Host side: as forge_gemm_bf16_nt_pp_bf16 (the same argument rules and epilogue forms), except B's tensor map has
 * 64-row boxes (each CTA loads half of the 128-row tile) and the grid is 2 x min(row-block pairs x column-blocks,
 * cudaOccupancyMaxActiveClusters): an SM left over in a GPC cannot host half a cluster, and a persistent grid past
 * the resident clusters would run the extra clusters after the others.
 */
#include <stdint.h>
#include <string.h>

#include "../../src/backend/cuda/gemm_wgmma_fp8_kernel.cuh"

extern "C" {
#include "gemm_bf16_variants.h"
}

/* The product's gemm_wgmma_bf16_pp_epi_kernel<BIAS, GELU> on 2-CTA clusters (CL = 2); `_c2` as the fp8 lab's
 * cluster kernels (scripts/check_sass.sh) */
template <int BIAS, int GELU>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(FP8_THREADS, 1)
    gemm_wgmma_bf16_pp_epi_kernel_c2(const __grid_constant__ CUtensorMap tm_a,
                                     const __grid_constant__ CUtensorMap tm_b,
                                     const __grid_constant__ CUtensorMap tm_c,
                                     const __grid_constant__ CUtensorMap tm_pre, void *__restrict__ C,
                                     const float *__restrict__ bias, int M, int N, int K, int has_pre) {
    wgmma_nt_body<128, WG_BF16, 1, 0, 2, 1, 1, BIAS, FP8_EPI_ADD | (GELU ? FP8_EPI_GELU : 0)>(
        tm_a, tm_b, C, 1.0f, M, N, K, 0, &tm_c, bias, &tm_pre, has_pre);
}

/* The clusters of the <BIAS, GELU> kernel that fit at once on `dev` (cached per device and instantiation);
 * FORGE_ERR_UNSUPPORTED when none does. */
template <int BIAS, int GELU> static forge_status pp_c2_max_clusters(int dev, int sm_count, int *out) {
    typedef fp8_cfg<128, 1> cfg;
    static int smem_set[FP8_MAX_DEVICES], max_clusters[FP8_MAX_DEVICES];
    if (!smem_set[dev]) {
        CUDA_TRY(cudaFuncSetAttribute(gemm_wgmma_bf16_pp_epi_kernel_c2<BIAS, GELU>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cfg::SMEM));
        smem_set[dev] = 1;
    }
    if (max_clusters[dev] == 0) {
        cudaLaunchConfig_t lc = {};
        lc.gridDim = dim3(2 * (unsigned)(sm_count / 2), 1, 1);
        lc.blockDim = dim3(FP8_THREADS, 1, 1);
        lc.dynamicSmemBytes = cfg::SMEM; /* cluster dims: compile time (__cluster_dims__) */
        int n = 0;
        CUDA_TRY(cudaOccupancyMaxActiveClusters(&n, (const void *)gemm_wgmma_bf16_pp_epi_kernel_c2<BIAS, GELU>,
                                                &lc));
        if (n <= 0)
            return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_bf16 pp c2: no 2-CTA cluster of this kernel fits (%d)",
                               n);
        max_clusters[dev] = n;
    }
    *out = max_clusters[dev];
    return FORGE_OK;
}

template <int BIAS, int GELU>
static forge_status pp_c2_launch(const void *A, const void *B, void *C, const float *bias, void *pre, int M, int N,
                                 int K, int dev, int sm_count, cudaStream_t stream, int pdl) {
    typedef fp8_cfg<128, 1> cfg;
    CUtensorMap tm_a, tm_b, tm_c, tm_pre;
    memset(&tm_pre, 0, sizeof tm_pre); /* without pre_out: passed, never read */
    FORGE_TRY(fp8_encode_c(&tm_c, C, M, N, 1));
    if (pre != nullptr) FORGE_TRY(fp8_encode_c(&tm_pre, pre, M, N, 1));
    FORGE_TRY(wgmma_encode_2d(&tm_a, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, A, M, K, (unsigned long long)K * 2, FP8_BM,
                              FP8_BK / 2, "gemm_bf16 pp c2 A (bf16, K-major)"));
    /* 64-row boxes: each CTA of the pair multicasts one half of the 128-row B tile */
    FORGE_TRY(wgmma_encode_2d(&tm_b, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, B, N, K, (unsigned long long)K * 2, 64,
                              FP8_BK / 2, "gemm_bf16 pp c2 B (bf16, K-major, half-tile multicast boxes)"));
    int max_clusters = 0;
    FORGE_TRY((pp_c2_max_clusters<BIAS, GELU>(dev, sm_count, &max_clusters)));
    const long long units = (long long)((M + 2 * FP8_BM - 1) / (2 * FP8_BM)) * ((N + 127) / 128);
    if (units > 0x3fffffffLL)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_bf16 pp c2: %lld tile pairs overflow", units);
    const int clusters = (int)(units < max_clusters ? units : max_clusters);
    CUDA_LAUNCH_TRY(forge_pdl_launch(gemm_wgmma_bf16_pp_epi_kernel_c2<BIAS, GELU>, 2 * clusters, FP8_THREADS,
                                     cfg::SMEM, stream, pdl, tm_a, tm_b, tm_c, tm_pre, C, bias, M, N, K,
                                     pre != nullptr),
                    "gemm_wgmma_bf16_pp_epi_kernel_c2");
    return FORGE_OK;
}

extern "C" forge_status lab_gemm_bf16_nt_pp_bf16_c2(const void *A, const void *B, void *C, const float *bias,
                                                    void *pre_out, int gelu, int M, int N, int K, void *stream,
                                                    int pdl) {
    /* forge_gemm_bf16_nt_pp_bf16's rules */
    const char *why = bf16_pp_refusal(A, B, C, bias, pre_out, gelu, M, N, K);
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_bf16 nt pp bf16 c2 (M=%d N=%d K=%d): %s", M, N, K, why);
    int dev = 0, sms = 0;
    FORGE_TRY(fp8_device_info(&dev, &sms));
    const cudaStream_t st = (cudaStream_t)stream;
    if (bias != nullptr)
        return gelu ? pp_c2_launch<1, 1>(A, B, C, bias, pre_out, M, N, K, dev, sms, st, pdl)
                    : pp_c2_launch<1, 0>(A, B, C, bias, nullptr, M, N, K, dev, sms, st, pdl);
    return gelu ? pp_c2_launch<0, 1>(A, B, C, nullptr, pre_out, M, N, K, dev, sms, st, pdl)
                : pp_c2_launch<0, 0>(A, B, C, nullptr, nullptr, M, N, K, dev, sms, st, pdl);
}

extern "C" forge_status lab_gemm_bf16_pp_c2_clusters(int *clusters) {
    int dev = 0, sms = 0;
    *clusters = 0;
    FORGE_TRY(fp8_device_info(&dev, &sms));
    return pp_c2_max_clusters<1, 1>(dev, sms, clusters);
}
