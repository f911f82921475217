/*
 * gemm_fp8_variants.cu: the lab's variants of forge's wgmma fp8 / tf32 GEMM (API: gemm_fp8_lab.h; measurements:
 * lab/notes/gemm-fp8.md): the kernel body's instantiations that forge_gemm_fp8_nt and forge_gemm_tf32_nt never
 * pick (the other promotion mainloops, fp8 fast accumulation, the 2-CTA cluster kernels) and the default kernels
 * with a forced store (fp8, tf32) or schedule (tf32), with their launchers and dispatch. The body, its device code
 * (the variants' mainloops included, as branches of it) and the shared launch machinery are
 * src/backend/cuda/gemm_wgmma_fp8_kernel.cuh's.
 *
 * The decisions a reader would otherwise get wrong:
 * - Tile widths are fixed per variant where the registers or the chunking dictate them: pipelined 128 (d, t, t1
 *   must fit 240 registers), chunk128 and the chunk64 / fast-accumulation clusters 256 (the chunks split a 256-wide
 *   tile), chunk64 with A in registers 192, the 144-wide variants 144; fast accumulation takes fp8_bn_plain's rule
 *   (tf32's), the serial promotion fp8_bn_serial's (forge's).
 * - 2-CTA clusters (gemm_wgmma_fp8_kernel_c2): B's tensor map has BN/2-row boxes (each CTA multicasts one half);
 *   the grid is 2 x min(row-block pairs x column-blocks, cudaOccupancyMaxActiveClusters), since an SM left over in
 *   a GPC cannot host half a cluster and a grid past that would run the extra clusters after the others, not
 *   persistently.
 * - The default kernels this file launches (a forced store or schedule) are the same instantiations of the same
 *   templates as src's, so the same code; this translation unit has its own copies of their launchers.
 */
#include "../../src/backend/cuda/gemm_wgmma_fp8_kernel.cuh"

extern "C" {
#include "gemm_fp8_lab.h"
}

/* fp8 on 2-CTA clusters (B multicast): same template arguments; `_c2` keeps the name matched by check_sass.sh */
template <int BN, int AT, int OUT_BF16, int PROMOTE, int TMA_C>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(FP8_THREADS, 1)
    gemm_wgmma_fp8_kernel_c2(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                             const __grid_constant__ CUtensorMap tm_c, void *__restrict__ Cv, float scale, int M, int N,
                             int K, int vec2) {
    wgmma_nt_body<BN, AT, OUT_BF16, PROMOTE, 2, TMA_C>(tm_a, tm_b, Cv, scale, M, N, K, vec2, &tm_c);
}

/* CL = 2 (gemm_wgmma_fp8_kernel_c2): B's tensor map has BN/2-row boxes (each CTA multicasts one half); the grid
 * is 2 x min(row-block pairs x column-blocks, the clusters that fit at once: cudaOccupancyMaxActiveClusters, as
 * an SM left over in a GPC cannot host half a cluster; a grid past that would run the extra clusters after the
 * others, not persistently). */
template <int BN, int AT, int OUT_BF16, int PROMOTE, int TMA_C>
static forge_status fp8_launch_c2_t(const void *A, const void *B, void *C, float scale, int M, int N, int K, int vec2,
                                    int dev, int sm_count, cudaStream_t stream) {
    typedef fp8_cfg<BN, TMA_C> cfg;
    static int smem_set[FP8_MAX_DEVICES];
    static int max_clusters[FP8_MAX_DEVICES];
    void (*kernel)(const CUtensorMap, const CUtensorMap, const CUtensorMap, void *, float, int, int, int, int) =
        gemm_wgmma_fp8_kernel_c2<BN, AT, OUT_BF16, PROMOTE, TMA_C>;
    CUtensorMap tm_a, tm_b, tm_c;
    memset(&tm_c, 0, sizeof tm_c); /* direct store: passed, never read */
    if constexpr (TMA_C) FORGE_TRY(fp8_encode_c(&tm_c, C, M, N, OUT_BF16, BN == 144));
    FORGE_TRY(wgmma_encode_2d(&tm_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, A, M, K, (unsigned long long)K, FP8_BM, FP8_BK,
                              "gemm_fp8 A (fp8, K-major)"));
    FORGE_TRY(wgmma_encode_2d(&tm_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, B, N, K, (unsigned long long)K, BN / 2, FP8_BK,
                              "gemm_fp8 B (fp8, K-major, half-tile multicast boxes)"));
    if (!smem_set[dev]) {
        CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cfg::SMEM));
        smem_set[dev] = 1;
    }
    if (max_clusters[dev] == 0) {
        cudaLaunchConfig_t lc = {};
        lc.gridDim = dim3(2 * (unsigned)(sm_count / 2), 1, 1);
        lc.blockDim = dim3(FP8_THREADS, 1, 1);
        lc.dynamicSmemBytes = cfg::SMEM; /* cluster dims: compile time (__cluster_dims__) */
        int n = 0;
        CUDA_TRY(cudaOccupancyMaxActiveClusters(&n, (const void *)kernel, &lc));
        if (n <= 0)
            return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_fp8: no 2-CTA cluster of this kernel fits (%d)", n);
        max_clusters[dev] = n;
    }
    const long long units = (long long)((M + 2 * FP8_BM - 1) / (2 * FP8_BM)) * ((N + BN - 1) / BN);
    if (units > 0x3fffffffLL) return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_fp8: %lld tile pairs overflow", units);
    const int clusters = (int)(units < max_clusters[dev] ? units : max_clusters[dev]);
    kernel<<<2 * clusters, FP8_THREADS, cfg::SMEM, stream>>>(tm_a, tm_b, tm_c, C, scale, M, N, K, vec2);
    CUDA_LAUNCH_CHECK("gemm_wgmma_fp8_kernel_c2");
    return FORGE_OK;
}

/* tma_c: the TMA-store epilogue (the caller checked fp8_c_tma_ok), else the direct store */
template <int BN, int AT, int OUT_BF16, int PROMOTE>
static forge_status fp8_launch_c2(const void *A, const void *B, void *C, float scale, int M, int N, int K, int vec2,
                                  int tma_c, int dev, int sm_count, cudaStream_t stream) {
    if (tma_c)
        return fp8_launch_c2_t<BN, AT, OUT_BF16, PROMOTE, 1>(A, B, C, scale, M, N, K, vec2, dev, sm_count, stream);
    return fp8_launch_c2_t<BN, AT, OUT_BF16, PROMOTE, 0>(A, B, C, scale, M, N, K, vec2, dev, sm_count, stream);
}

/* ---- dispatch and entry points ---- */

/* The kernel of `accum` for one A format and output type; tc: the TMA-store epilogue (fp8_c_tma_ok checked) */
template <int AT, int OUT_BF16>
static forge_status lab_fp8_dispatch(lab_fp8_accum accum, const void *A, const void *B, void *C, int M, int N, int K,
                                     int tc, const fp8_call &k) {
    const float scale = k.scale;
    const int vec2 = k.vec2, dev = k.dev, sms = k.sms;
    const cudaStream_t st = k.st;
    switch (accum) {
    case LAB_FP8_PROMOTE:
        return fp8_launch_promoted<AT, OUT_BF16>(fp8_auto_promote(M, N, sms), A, B, C, M, N, K, tc, k);
    case LAB_FP8_PROMOTE_SERIAL: return fp8_launch_promoted<AT, OUT_BF16>(FP8_SERIAL, A, B, C, M, N, K, tc, k);
    case LAB_FP8_PROMOTE_CHUNK64: return fp8_launch_promoted<AT, OUT_BF16>(FP8_CHUNK64, A, B, C, M, N, K, tc, k);
    case LAB_FP8_FAST_ACCUM:
        return fp8_bn_plain(M, N, sms) == 128
                   ? fp8_launch<128, AT, OUT_BF16, 0>(A, B, C, scale, M, N, K, vec2, tc, dev, sms, st)
                   : fp8_launch<256, AT, OUT_BF16, 0>(A, B, C, scale, M, N, K, vec2, tc, dev, sms, st);
    case LAB_FP8_PROMOTE_PIPELINED: /* 128 only: d, t and t1 must fit 240 registers */
        return fp8_launch<128, AT, OUT_BF16, FP8_PIPELINED>(A, B, C, scale, M, N, K, vec2, tc, dev, sms, st);
    case LAB_FP8_PROMOTE_CHUNK128: /* 256 only: the chunks split a 256-wide tile */
        return fp8_launch<256, AT, OUT_BF16, FP8_CHUNK128>(A, B, C, scale, M, N, K, vec2, tc, dev, sms, st);
    case LAB_FP8_PROMOTE_CHUNK64_C2:
        return fp8_launch_c2<256, AT, OUT_BF16, FP8_CHUNK64>(A, B, C, scale, M, N, K, vec2, tc, dev, sms, st);
    case LAB_FP8_FAST_ACCUM_C2:
        return fp8_launch_c2<256, AT, OUT_BF16, 0>(A, B, C, scale, M, N, K, vec2, tc, dev, sms, st);
    case LAB_FP8_PROMOTE_CHUNK64_RA: /* 192 only: the registers (see the mainloop) */
        return fp8_launch<192, AT, OUT_BF16, FP8_CHUNK64_RA>(A, B, C, scale, M, N, K, vec2, tc, dev, sms, st);
    case LAB_FP8_PROMOTE_PIPE144:
        return fp8_launch<144, AT, OUT_BF16, FP8_PIPELINED>(A, B, C, scale, M, N, K, vec2, tc, dev, sms, st);
    case LAB_FP8_PROMOTE_PIPE144_C2:
        return fp8_launch_c2<144, AT, OUT_BF16, FP8_PIPELINED>(A, B, C, scale, M, N, K, vec2, tc, dev, sms, st);
    case LAB_FP8_PROMOTE_SERIAL144:
        return fp8_launch<144, AT, OUT_BF16, FP8_SERIAL_ROT>(A, B, C, scale, M, N, K, vec2, tc, dev, sms, st);
    case LAB_FP8_PROMOTE_SERIAL144_C2:
        return fp8_launch_c2<144, AT, OUT_BF16, FP8_SERIAL_ROT>(A, B, C, scale, M, N, K, vec2, tc, dev, sms, st);
    }
    return forge_error(FORGE_ERR_ARG, "lab gemm_fp8: unknown accumulation mode %d", (int)accum);
}

/* *tc: the TMA-store epilogue (1) or the direct store (0) for `store`; FORGE_ERR_ARG for an unknown mode */
static forge_status lab_resolve_store(lab_gemm_store store, const void *C, int N, int out_bf16, const char *what,
                                      int *tc) {
    *tc = 0;
    if (store != LAB_GEMM_STORE_AUTO && store != LAB_GEMM_STORE_DIRECT && store != LAB_GEMM_STORE_TMA)
        return forge_error(FORGE_ERR_ARG, "%s: unknown store mode %d (expected LAB_GEMM_STORE_AUTO, _DIRECT or _TMA)",
                           what, (int)store);
    *tc = store != LAB_GEMM_STORE_DIRECT && fp8_c_tma_ok(C, N, out_bf16);
    return FORGE_OK;
}

extern "C" forge_status lab_gemm_fp8_nt(const void *A, forge_fp8_format a_fmt, const void *B, forge_fp8_format b_fmt,
                                        void *C, forge_gemm_out c_type, float a_scale, float b_scale, int M, int N,
                                        int K, lab_fp8_accum accum, lab_gemm_store store, void *stream) {
    fp8_call k;
    FORGE_TRY(fp8_call_init(&k, A, a_fmt, B, b_fmt, C, c_type, a_scale, b_scale, M, N, K, stream));
    if ((int)accum < (int)LAB_FP8_PROMOTE || (int)accum > (int)LAB_FP8_PROMOTE_SERIAL144_C2)
        return forge_error(FORGE_ERR_ARG, "lab gemm_fp8: unknown accumulation mode %d", (int)accum);
    int tc = 0;
    FORGE_TRY(lab_resolve_store(store, C, N, k.out_bf16, "lab gemm_fp8", &tc));
    return fp8_with_types(a_fmt, k.out_bf16, [&](auto at, auto out) {
        return lab_fp8_dispatch<decltype(at)::value, decltype(out)::value>(accum, A, B, C, M, N, K, tc, k);
    });
}

extern "C" forge_status lab_gemm_tf32_nt(const float *A, const float *B, float *C, int M, int N, int K,
                                         lab_gemm_store store, lab_gemm_sched sched, void *stream) {
    FORGE_TRY(tf32_nt_check(A, B, C, M, N, K));
    if (sched != LAB_GEMM_SCHED_AUTO && sched != LAB_GEMM_SCHED_COOP && sched != LAB_GEMM_SCHED_PINGPONG)
        return forge_error(FORGE_ERR_ARG, "lab gemm_tf32: unknown schedule %d (expected LAB_GEMM_SCHED_AUTO, _COOP or "
                           "_PINGPONG)", (int)sched);
    int tc = 0;
    FORGE_TRY(lab_resolve_store(store, C, N, 0, "lab gemm_tf32", &tc));
    int dev = 0, sms = 0;
    FORGE_TRY(fp8_device_info(&dev, &sms));
    const int pingpong = sched == LAB_GEMM_SCHED_AUTO ? tf32_pingpong_rule(tc, K) : sched == LAB_GEMM_SCHED_PINGPONG;
    if (pingpong && !tc)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "gemm_tf32 nt (M=%d N=%d K=%d): the ping-pong schedule stores C through TMA, which needs "
                           "N %% 4 == 0 and C 16-byte aligned (and a store mode other than direct)",
                           M, N, K);
    return tf32_launch_sched(pingpong, A, B, C, M, N, K, tc, dev, sms, (cudaStream_t)stream);
}
