/*
 * gemm_gelu.cuh: the tanh-GELU of the bf16 GEMMs' fused epilogues, shared by the cooperative kernel
 * (gemm_wgmma_kernel.cuh) and the bf16 ping-pong kernel (gemm_wgmma_fp8_kernel.cuh): both call this one function,
 * so their GELU outputs agree bit for bit.
 */
#ifndef FORGE_GEMM_GELU_CUH
#define FORGE_GEMM_GELU_CUH

/* tanh-GELU as elementwise.cu computes it, rewritten without tanhf: 0.5 x (1 + tanh u) = x sigmoid(2u), so one
 * ex2 and one reciprocal per element instead of tanhf's ~20 instructions (the epilogue does not overlap the
 * tensor cores, so its instruction count is paid in full). e = inf (x << 0) gives x * 0 = -0, e = 0 gives x. */
#define GEMM_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GEMM_GELU_C 0.044715f
__device__ __forceinline__ float gemm_gelu(float x) {
    const float u = GEMM_GELU_K * fmaf(GEMM_GELU_C * x, x * x, x);
    return __fdividef(x, 1.0f + __expf(-2.0f * u));
}

#endif
