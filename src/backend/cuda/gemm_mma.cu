/*
 * gemm_mma.cu: forge's warp-level tensor-core tf32 GEMM (rung 2; the kernel and its launcher:
 * gemm_mma_kernel.cuh; contract: gemm_mma.h): the entry point of the tf32 trainer's dX and dW (and of its forward
 * where the wgmma kernel refuses), its split-K rule and the split-K reduction kernel.
 */
#include "gemm_mma_kernel.cuh"

/* C (+)= sum over s of work[s] (+ bias), s in order 0..S-1: the split-K reduction, deterministic (no atomics). */
__global__ void gemm_mma_splitk_reduce_kernel(float *__restrict__ C, const float *__restrict__ work,
                                              const float *__restrict__ bias, size_t mn, int N, int S,
                                              int accumulate) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < mn; i += (size_t)gridDim.x * blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < S; s++) v += work[(size_t)s * mn + i];
        if (bias != nullptr) v += bias[i % (size_t)N];
        C[i] = accumulate ? C[i] + v : v;
    }
}

extern "C" forge_status forge_gemm_mma_tf32(const float *A, int a_mn, const float *B, int b_mn, float *C,
                                            const float *bias, int M, int N, int K, int accumulate, int splits,
                                            float *work, size_t work_floats, void *stream) {
    return gemm_mma_launch<true>(a_mn != 0, b_mn != 0, A, B, C, bias, M, N, K, accumulate, splits, work, work_floats,
                                 stream, "forge_gemm_mma_tf32");
}

extern "C" int forge_gemm_mma_tf32_splits(int M, int N, int K, int num_sms, size_t work_floats) {
    if (M <= 0 || N <= 0 || K <= 0 || num_sms <= 0) return 1;
    const long long tiles = (long long)((M + MMA_BM - 1) / MMA_BM) * ((N + MMA_BN - 1) / MMA_BN);
    if (tiles >= num_sms) return 1; /* one CTA per SM already: splitting only adds the reduction */
    long long s = (2LL * num_sms + tiles - 1) / tiles; /* two CTAs per SM fit (110.6 KB smem, <= 128 registers) */
    const long long ktiles = (K + MMA_ROW_BYTES / 4 - 1) / (MMA_ROW_BYTES / 4);
    if (s > ktiles / MMA_SPLIT_MIN_KTILES) s = ktiles / MMA_SPLIT_MIN_KTILES;
    const long long fit = (long long)(work_floats / ((size_t)M * (size_t)N));
    if (s > fit) s = fit;
    if (s > MMA_SPLIT_MAX) s = MMA_SPLIT_MAX;
    return s > 1 ? (int)s : 1;
}
