/*
 * gemm_gelu.cuh: the tanh-GELU of the bf16 GEMMs' fused epilogues, shared by the cooperative kernel
 * (gemm_wgmma_kernel.cuh) and the bf16 ping-pong kernel (gemm_wgmma_fp8_kernel.cuh): both call this one function,
 * so their GELU outputs agree bit for bit.
 */
#ifndef FORGE_GEMM_GELU_CUH
#define FORGE_GEMM_GELU_CUH

/* tanh-GELU as elementwise.cu computes it, rewritten without tanhf: 0.5 x (1 + tanh u) = x sigmoid(2u) with
 * u = sqrt(2/pi) x (1 + 0.044715 x^2), so gelu(x) = x / (1 + 2^y), y = -2 sqrt(2/pi) log2(e) x (1 + 0.044715 x^2):
 * one hardware ex2 and one hardware reciprocal (both .approx.ftz: no subnormal fix-up or range-scaling code
 * around them) and five FMA-pipe instructions per value. The epilogue does not overlap the tensor cores, so its
 * instruction count is paid in full. 2^y = inf (x << 0) gives rcp 0 and x * 0 = -0; 2^y = 0 gives x. */
#define GEMM_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GEMM_GELU_C 0.044715f
#define GEMM_GELU_Y -2.302208198144325f /* -2 sqrt(2/pi) log2(e) */
__device__ __forceinline__ float gemm_gelu(float x) {
    const float y = (GEMM_GELU_Y * x) * fmaf(GEMM_GELU_C * x, x, 1.0f);
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(y));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
    return x * r;
}

#endif
