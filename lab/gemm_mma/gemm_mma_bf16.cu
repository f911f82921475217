/*
 * gemm_mma_bf16.cu: lab_gemm_mma_bf16_nt (gemm_mma_lab.h), the bf16 instantiation of the mma.sync GEMM kernel
 * of src/backend/cuda/gemm_mma_kernel.cuh (gemm_mma_kernel<false, false, false, VEC>) through its launcher.
 */
#include "../../src/backend/cuda/gemm_mma_kernel.cuh"

extern "C" {
#include "gemm_mma_lab.h"
}

extern "C" forge_status lab_gemm_mma_bf16_nt(const void *A_bf16, const void *B_bf16, float *C, const float *bias,
                                             int M, int N, int K, void *stream) {
    return gemm_mma_launch<false>(0, 0, A_bf16, B_bf16, C, bias, M, N, K, 0, 1, nullptr, 0, stream,
                                  "lab_gemm_mma_bf16_nt");
}
