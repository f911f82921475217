/*
 * gemm_wgmma_fp8.cu: forge's default GEMMs on the wgmma body of gemm_wgmma_fp8_kernel.cuh (API and rules:
 * gemm_fp8.h):
 * - forge_gemm_fp8_nt: the promoted fp8 kernel chosen per shape (fp8_auto_promote: the chunked promotion at
 *   256-wide tiles, or the serial one at 128/192), C through the TMA store wherever C allows it, else directly;
 * - forge_gemm_tf32_nt: the ping-pong schedule at K <= TF32_PP_MAX_K where C takes the TMA store, else the
 *   cooperative one (BN 128 or 256 by fp8_bn_plain);
 * - forge_gemm_bf16_nt_pp: the ping-pong schedule on bf16 operands, + bias (forge_gemm_bf16_nt_wgmma's kernel
 *   wherever C takes the TMA store);
 * - forge_gemm_bf16_nt_pp_bf16: the same schedule with a bf16 C and the cooperative kernel's bias / GELU / pre_out
 *   epilogue (forge_gemm_bf16_nt_epi's kernel for those epilogues wherever C and pre_out take the TMA store).
 * The body's other instantiations (other promotions, fast accumulation, 2-CTA clusters, a forced store or
 * schedule) are the lab's variants (lab/gemm_fp8/).
 * The body waits for the previous kernel (forge_pdl_wait) after its shared-memory prologue, so the bf16 ping-pong
 * launches may take programmatic dependent launch (forge_gemm_bf16_nt_pp_bf16's pdl; pdl.cuh); the fp8 and tf32
 * entries and forge_gemm_bf16_nt_pp launch plainly, where the wait does nothing.
 */
#include "gemm_wgmma_fp8_kernel.cuh"

/* tf32 ping-pong (PP = 1): 128 x 128 tiles, one per consumer warpgroup, alternating; TMA store only */
__global__ void __launch_bounds__(FP8_THREADS, 1)
    gemm_wgmma_tf32_pp_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                              const __grid_constant__ CUtensorMap tm_c, float *__restrict__ C, int M, int N, int K,
                              int vec2) {
    wgmma_nt_body<128, WG_TF32, 0, 0, 1, 1, 1>(tm_a, tm_b, C, 1.0f, M, N, K, vec2, &tm_c);
}

/* bf16 ping-pong: the tf32 ping-pong kernel on bf16 operands (a stage row is still 128 bytes of K: 64 bf16; each
 * 32-byte k-step one wgmma m64n128k16); BIAS adds bias[col] in the epilogue. forge_gemm_bf16_nt_pp; what
 * forge_gemm_bf16_nt_wgmma runs wherever C takes the TMA store (the cooperative kernel idles the tensor pipe in
 * its epilogues, most at short K) */
template <int BIAS>
__global__ void __launch_bounds__(FP8_THREADS, 1)
    gemm_wgmma_bf16_pp_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                              const __grid_constant__ CUtensorMap tm_c, float *__restrict__ C,
                              const float *__restrict__ bias, int M, int N, int K, int vec2) {
    wgmma_nt_body<128, WG_BF16, 0, 0, 1, 1, 1, BIAS>(tm_a, tm_b, C, 1.0f, M, N, K, vec2, &tm_c, bias);
}

/* bf16 ping-pong launch: A (M,K) and B (N,K) bf16, K-major (64 bf16 = 128 bytes of K per box row, the 128-byte
 * swizzle row as for fp8 and tf32); C fp32 through the TMA store */
template <int BIAS>
static forge_status bf16_pp_launch(const void *A, const void *B, float *C, const float *bias, int M, int N, int K,
                                   int vec2, int dev, int sm_count, cudaStream_t stream, int pdl) {
    typedef fp8_cfg<128, 1> cfg;
    static kernel_attrs_once once; /* per instantiation */
    CUtensorMap tm_a, tm_b, tm_c;
    FORGE_TRY(fp8_encode_c(&tm_c, C, M, N, 0));
    FORGE_TRY(wgmma_encode_2d(&tm_a, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, A, M, K, (unsigned long long)K * 2, FP8_BM,
                              FP8_BK / 2, "gemm_bf16 pp A (bf16, K-major)"));
    FORGE_TRY(wgmma_encode_2d(&tm_b, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, B, N, K, (unsigned long long)K * 2, 128,
                              FP8_BK / 2, "gemm_bf16 pp B (bf16, K-major)"));
    CUDA_TRY(kernel_attrs_set_dev(&once, dev, (const void *)gemm_wgmma_bf16_pp_kernel<BIAS>, (int)cfg::SMEM, 0));
    const long long tiles = (long long)((M + FP8_BM - 1) / FP8_BM) * ((N + 127) / 128);
    if (tiles > 0x7fffffffLL) return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_bf16 pp: %lld tiles overflow int", tiles);
    const int grid = (int)(tiles < sm_count ? tiles : sm_count);
    CUDA_LAUNCH_TRY(forge_pdl_launch(gemm_wgmma_bf16_pp_kernel<BIAS>, grid, FP8_THREADS, cfg::SMEM, stream, pdl, tm_a,
                                     tm_b, tm_c, C, bias, M, N, K, vec2),
                    "gemm_wgmma_bf16_pp_kernel");
    return FORGE_OK;
}

extern "C" forge_status forge_gemm_bf16_nt_pp(const void *A, const void *B, float *C, const float *bias, int M,
                                              int N, int K, void *stream) {
    const char *why = nullptr;
    if (M <= 0 || N <= 0 || K <= 0) why = "M, N and K must be >= 1";
    else if (K % 8 != 0) why = "K must be a multiple of 8 (TMA needs 16-byte row strides: K*2 bytes)";
    else if ((uintptr_t)A % 16 != 0 || (uintptr_t)B % 16 != 0) why = "A and B must be 16-byte aligned (TMA)";
    else if (!fp8_c_tma_ok(C, N, 0))
        why = "the ping-pong schedule stores C through TMA: N must be a multiple of 4 and C 16-byte aligned";
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_bf16 nt pp (M=%d N=%d K=%d): %s", M, N, K, why);
    int dev = 0, sms = 0;
    FORGE_TRY(fp8_device_info(&dev, &sms));
    const int vec2 = N % 2 == 0 && (uintptr_t)C % 8 == 0;
    if (bias != nullptr) return bf16_pp_launch<1>(A, B, C, bias, M, N, K, vec2, dev, sms, (cudaStream_t)stream, 0);
    return bf16_pp_launch<0>(A, B, C, nullptr, M, N, K, vec2, dev, sms, (cudaStream_t)stream, 0);
}

/* bf16 ping-pong with a bf16 C: fp8_store_tile_tma_epi's epilogue (v = acc + bias, pre_out = rn(v) where
 * has_pre, v = gelu(v) where GELU, C = rn(v): the cooperative kernel's sequence, the same bits); C and pre_out
 * through the TMA store (tm_pre unused without has_pre) */
template <int BIAS, int GELU>
__global__ void __launch_bounds__(FP8_THREADS, 1)
    gemm_wgmma_bf16_pp_epi_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                                  const __grid_constant__ CUtensorMap tm_c, const __grid_constant__ CUtensorMap tm_pre,
                                  void *__restrict__ C, const float *__restrict__ bias, int M, int N, int K,
                                  int has_pre) {
    wgmma_nt_body<128, WG_BF16, 1, 0, 1, 1, 1, BIAS, FP8_EPI_ADD | (GELU ? FP8_EPI_GELU : 0)>(
        tm_a, tm_b, C, 1.0f, M, N, K, 0, &tm_c, bias, &tm_pre, has_pre);
}

template <int BIAS, int GELU>
static forge_status bf16_pp_epi_launch(const void *A, const void *B, void *C, const float *bias, void *pre, int M,
                                       int N, int K, int dev, int sm_count, cudaStream_t stream, int pdl) {
    typedef fp8_cfg<128, 1> cfg;
    static kernel_attrs_once once; /* per instantiation */
    CUtensorMap tm_a, tm_b, tm_c, tm_pre;
    memset(&tm_pre, 0, sizeof tm_pre); /* without pre_out: passed, never read */
    FORGE_TRY(fp8_encode_c(&tm_c, C, M, N, 1));
    if (pre != nullptr) FORGE_TRY(fp8_encode_c(&tm_pre, pre, M, N, 1));
    FORGE_TRY(wgmma_encode_2d(&tm_a, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, A, M, K, (unsigned long long)K * 2, FP8_BM,
                              FP8_BK / 2, "gemm_bf16 pp A (bf16, K-major)"));
    FORGE_TRY(wgmma_encode_2d(&tm_b, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, B, N, K, (unsigned long long)K * 2, 128,
                              FP8_BK / 2, "gemm_bf16 pp B (bf16, K-major)"));
    CUDA_TRY(kernel_attrs_set_dev(&once, dev, (const void *)gemm_wgmma_bf16_pp_epi_kernel<BIAS, GELU>,
                                  (int)cfg::SMEM, 0));
    const long long tiles = (long long)((M + FP8_BM - 1) / FP8_BM) * ((N + 127) / 128);
    if (tiles > 0x7fffffffLL) return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_bf16 pp: %lld tiles overflow int", tiles);
    const int grid = (int)(tiles < sm_count ? tiles : sm_count);
    CUDA_LAUNCH_TRY(forge_pdl_launch(gemm_wgmma_bf16_pp_epi_kernel<BIAS, GELU>, grid, FP8_THREADS, cfg::SMEM, stream,
                                     pdl, tm_a, tm_b, tm_c, tm_pre, C, bias, M, N, K, pre != nullptr),
                    "gemm_wgmma_bf16_pp_epi_kernel");
    return FORGE_OK;
}

extern "C" forge_status forge_gemm_bf16_nt_pp_bf16(const void *A, const void *B, void *C, const float *bias,
                                                   void *pre_out, int gelu, int M, int N, int K, void *stream,
                                                   int pdl) {
    const char *why = bf16_pp_refusal(A, B, C, bias, pre_out, gelu, M, N, K);
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_bf16 nt pp bf16 (M=%d N=%d K=%d): %s", M, N, K, why);
    int dev = 0, sms = 0;
    FORGE_TRY(fp8_device_info(&dev, &sms));
    const cudaStream_t st = (cudaStream_t)stream;
    if (bias != nullptr)
        return gelu ? bf16_pp_epi_launch<1, 1>(A, B, C, bias, pre_out, M, N, K, dev, sms, st, pdl)
                    : bf16_pp_epi_launch<1, 0>(A, B, C, bias, nullptr, M, N, K, dev, sms, st, pdl);
    return gelu ? bf16_pp_epi_launch<0, 1>(A, B, C, nullptr, pre_out, M, N, K, dev, sms, st, pdl)
                : bf16_pp_epi_launch<0, 0>(A, B, C, nullptr, nullptr, M, N, K, dev, sms, st, pdl);
}

extern "C" forge_status forge_gemm_fp8_nt(const void *A, forge_fp8_format a_fmt, const void *B,
                                          forge_fp8_format b_fmt, void *C, forge_gemm_out c_type, float a_scale,
                                          float b_scale, int M, int N, int K, void *stream) {
    fp8_call k;
    FORGE_TRY(fp8_call_init(&k, A, a_fmt, B, b_fmt, C, c_type, a_scale, b_scale, M, N, K, stream));
    const int tc = fp8_c_tma_ok(C, N, k.out_bf16), promote = fp8_auto_promote(M, N, k.sms);
    return fp8_with_types(a_fmt, k.out_bf16, [&](auto at, auto out) {
        return fp8_launch_promoted<decltype(at)::value, decltype(out)::value>(promote, A, B, C, M, N, K, tc, k);
    });
}

extern "C" forge_status forge_gemm_tf32_nt(const float *A, const float *B, float *C, int M, int N, int K,
                                           void *stream) {
    FORGE_TRY(tf32_nt_check(A, B, C, M, N, K));
    const int tc = fp8_c_tma_ok(C, N, 0);
    int dev = 0, sms = 0;
    FORGE_TRY(fp8_device_info(&dev, &sms));
    return tf32_launch_sched(tf32_pingpong_rule(tc, K), A, B, C, M, N, K, tc, dev, sms, (cudaStream_t)stream);
}
