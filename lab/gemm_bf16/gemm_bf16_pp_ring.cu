/*
 * gemm_bf16_pp_ring.cu: the bf16 ping-pong kernel's bf16 epilogues with a staging ring (lab_gemm_bf16_nt_pp_ring,
 * gemm_bf16_variants.h; measurements: lab/notes/gemm-bf16.md, the tenth session). The kernel is src's body
 * (gemm_wgmma_fp8_kernel.cuh, wgmma_nt_body) with its lab-only EPI_NB argument: each consumer warpgroup stages
 * C and pre_out through a ring of nb boxes of 8 KiB (the product: 2, renumbered at every 64-row tile half) and
 * waits before a fill only for the store that last used that box, nb fills earlier; the ring stages pay for the
 * boxes (nb 2 / 4 / 6 / 8: 6 / 5 / 4 / 3 stages of 32 KiB). The MMAs (order, scale-d, K tail) and the epilogue's
 * arithmetic are the product's (forge_gemm_bf16_nt_pp_bf16), so the bits are too; only the waits move.
 *
 * The decision a reader would otherwise get wrong: nb = 2 is not the product. It has the product's 6 stages and 2
 * boxes but numbers fills across tile halves and tiles, so the second half's first fill waits for the store of
 * fill f - 2 only, not for all of them (the product's wait_group.read 0 there waits for the store it issued just
 * before). It isolates that one wait.
 */
#include <stdint.h>
#include <string.h>

#include "../../src/backend/cuda/gemm_wgmma_fp8_kernel.cuh"

extern "C" {
#include "gemm_bf16_variants.h"
}

/* gemm_wgmma_bf16_pp_epi_kernel<BIAS, GELU> (gemm_wgmma_fp8.cu) with the staging ring of NB boxes */
template <int BIAS, int GELU, int NB>
__global__ void __launch_bounds__(FP8_THREADS, 1)
    gemm_wgmma_bf16_pp_ring_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                                   const __grid_constant__ CUtensorMap tm_c, const __grid_constant__ CUtensorMap tm_pre,
                                   void *__restrict__ C, const float *__restrict__ bias, int M, int N, int K,
                                   int has_pre) {
    wgmma_nt_body<128, WG_BF16, 1, 0, 1, 1, 1, BIAS, FP8_EPI_ADD | (GELU ? FP8_EPI_GELU : 0), NB>(
        tm_a, tm_b, C, 1.0f, M, N, K, 0, &tm_c, bias, &tm_pre, has_pre);
}

/* bf16_pp_epi_launch (gemm_wgmma_fp8.cu) for the ring kernel: the same tensor maps and grid, a plain launch */
template <int BIAS, int GELU, int NB>
static forge_status lab_pp_ring_launch(const void *A, const void *B, void *C, const float *bias, void *pre, int M,
                                       int N, int K, int dev, int sm_count, cudaStream_t stream) {
    typedef fp8_cfg<128, 1, NB> cfg;
    static int smem_set[FP8_MAX_DEVICES]; /* per instantiation */
    CUtensorMap tm_a, tm_b, tm_c, tm_pre;
    memset(&tm_pre, 0, sizeof tm_pre); /* without pre_out: passed, never read */
    FORGE_TRY(fp8_encode_c(&tm_c, C, M, N, 1));
    if (pre != nullptr) FORGE_TRY(fp8_encode_c(&tm_pre, pre, M, N, 1));
    FORGE_TRY(wgmma_encode_2d(&tm_a, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, A, M, K, (unsigned long long)K * 2, FP8_BM,
                              FP8_BK / 2, "gemm_bf16 pp ring A (bf16, K-major)"));
    FORGE_TRY(wgmma_encode_2d(&tm_b, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, B, N, K, (unsigned long long)K * 2, 128,
                              FP8_BK / 2, "gemm_bf16 pp ring B (bf16, K-major)"));
    if (!smem_set[dev]) {
        CUDA_TRY(cudaFuncSetAttribute(gemm_wgmma_bf16_pp_ring_kernel<BIAS, GELU, NB>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cfg::SMEM));
        smem_set[dev] = 1;
    }
    const long long tiles = (long long)((M + FP8_BM - 1) / FP8_BM) * ((N + 127) / 128);
    if (tiles > 0x7fffffffLL)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_bf16 pp ring: %lld tiles overflow int", tiles);
    const int grid = (int)(tiles < sm_count ? tiles : sm_count);
    gemm_wgmma_bf16_pp_ring_kernel<BIAS, GELU, NB><<<grid, FP8_THREADS, cfg::SMEM, stream>>>(
        tm_a, tm_b, tm_c, tm_pre, C, bias, M, N, K, pre != nullptr);
    CUDA_LAUNCH_CHECK("gemm_wgmma_bf16_pp_ring_kernel");
    return FORGE_OK;
}

template <int NB>
static forge_status lab_pp_ring_nb(const void *A, const void *B, void *C, const float *bias, void *pre, int gelu,
                                   int M, int N, int K, int dev, int sms, cudaStream_t st) {
    if (bias != nullptr)
        return gelu ? lab_pp_ring_launch<1, 1, NB>(A, B, C, bias, pre, M, N, K, dev, sms, st)
                    : lab_pp_ring_launch<1, 0, NB>(A, B, C, bias, nullptr, M, N, K, dev, sms, st);
    return gelu ? lab_pp_ring_launch<0, 1, NB>(A, B, C, nullptr, pre, M, N, K, dev, sms, st)
                : lab_pp_ring_launch<0, 0, NB>(A, B, C, nullptr, nullptr, M, N, K, dev, sms, st);
}

extern "C" forge_status lab_gemm_bf16_nt_pp_ring(const void *A, const void *B, void *C, const float *bias,
                                                 void *pre_out, int gelu, int M, int N, int K, int nb, void *stream) {
    /* forge_gemm_bf16_nt_pp_bf16's rules */
    const char *why = nullptr;
    if (M <= 0 || N <= 0 || K <= 0) why = "M, N and K must be >= 1";
    else if (K % 8 != 0) why = "K must be a multiple of 8 (TMA needs 16-byte row strides: K*2 bytes)";
    else if ((uintptr_t)A % 16 != 0 || (uintptr_t)B % 16 != 0) why = "A and B must be 16-byte aligned (TMA)";
    else if (!fp8_c_tma_ok(C, N, 1))
        why = "the ping-pong schedule stores C through TMA: N must be a multiple of 8 and C 16-byte aligned";
    else if (pre_out != nullptr && !gelu) why = "pre_out is the pre-activation of GELU: give it with gelu only";
    else if (pre_out != nullptr && (uintptr_t)pre_out % 16 != 0)
        why = "pre_out goes through the TMA store: it must be 16-byte aligned";
    else if ((uintptr_t)bias % 4 != 0) why = "bias must be 4-byte aligned";
    else if (nb != 2 && nb != 4 && nb != 6 && nb != 8) why = "nb (staging boxes per warpgroup) is 2, 4, 6 or 8";
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "lab gemm_bf16 nt pp ring (M=%d N=%d K=%d nb=%d): %s", M, N, K,
                           nb, why);
    int dev = 0, sms = 0;
    FORGE_TRY(fp8_device_info(&dev, &sms));
    const cudaStream_t st = (cudaStream_t)stream;
    switch (nb) {
    case 2: return lab_pp_ring_nb<2>(A, B, C, bias, pre_out, gelu, M, N, K, dev, sms, st);
    case 4: return lab_pp_ring_nb<4>(A, B, C, bias, pre_out, gelu, M, N, K, dev, sms, st);
    case 6: return lab_pp_ring_nb<6>(A, B, C, bias, pre_out, gelu, M, N, K, dev, sms, st);
    default: return lab_pp_ring_nb<8>(A, B, C, bias, pre_out, gelu, M, N, K, dev, sms, st);
    }
}
