/*
 * gemm_wgmma.cu: the Hopper bf16 GEMM's entry points (gemm.h) and the kernels
 * only they launch: the TN "C192" kernel, the split-K reduction pass and the
 * explicit SIMT fallback. The shared kernel body, its epilogue and the launch
 * template are in gemm_wgmma_kernel.cuh (design notes there); this file
 * instantiates the variants of it that the entry points run.
 *
 *   C (M,N) fp32 = A (M,K) . B (N,K)^T [+ bias (N)]     A, B bf16, K-major
 *
 * What each entry runs (the defaults, chosen by measurement: lab/notes/gemm-bf16.md):
 * - forge_gemm_bf16_nt_wgmma: the bf16 ping-pong kernel (forge_gemm_bf16_nt_pp,
 *   gemm_wgmma_fp8.cu) where C takes the TMA store, else the cooperative
 *   kernel of gemm_wgmma_kernel.cuh with the direct store.
 * - forge_gemm_bf16_nt_epi: a bf16 C with bias / GELU / pre_out (no residual)
 *   where the TMA store takes C and pre_out on the bf16 ping-pong kernel
 *   (forge_gemm_bf16_nt_pp_bf16, gemm_wgmma_fp8.cu; the same bits); else, and
 *   _nn_epi: the cooperative kernel with the fused epilogue, stored through TMA
 *   wherever gemm_epi_tma_refusal allows it, else from the registers; tile
 *   width by gemm_pick_bn.
 * - forge_gemm_bf16_tn_wgmma: the C192 kernel where its one-wave plan fills the
 *   SMs with long units (gemm_tn_c192_default), else the cost model's tile and
 *   splits (gemm_plan_tn) with the partials through the TMA store where the
 *   slices allow it, then the reduction pass. forge_gemm_bf16_tn_wgmma_dbias:
 *   the same plan; on the 128 x 256 tile its DBIAS instantiation also writes
 *   the per-split row sums of A (dbias's partials; 1.13x / 1.18x the GEMM +
 *   the separate column sum at the GPT-2 qkv / attention projection dW, H200),
 *   not on C192 (0.81x there) or 128 x 128 (no instantiation).
 * Tensor maps are encoded on the host per call (cuTensorMapEncodeTiled via
 * cudaGetDriverEntryPointByVersion, so the binary needs no -lcuda link) and
 * passed as __grid_constant__ parameters.
 * The entries' pdl argument launches every kernel of the call (the GEMM and its
 * split-K pass) with programmatic dependent launch (pdl.cuh); each kernel waits
 * for its predecessor before it touches global memory, so pdl changes no bits.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_wgmma_kernel.cuh"

extern "C" {
#include "gemm_fp8.h" /* forge_gemm_bf16_nt_pp: the bf16 ping-pong kernel shares the fp8 / tf32 body */
}

#define GEMM_SIMT_TILE 64
#define GEMM_SIMT_BK 16

/* ---- TN on 192 x 192 tiles: the "C192" kernel (its body, gemm_tn_c192_body, and its design notes are in
 * gemm_wgmma_kernel.cuh) ---- */
__global__ void __launch_bounds__(GEMM_THREADS, 1)
    gemm_wgmma_bf16_tn_c192_kernel(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
                                   const gemm_epi_dev ep, int M, int N, int K, int splits, int kps) {
    gemm_tn_c192_body(tm_a, tm_b, ep, M, N, K, splits, kps);
}

/* The split-K second pass: C[i] (+)= sum over s = 0, 1, ..., splits-1 of work[s*mn + i], always in that
 * order, so the result does not depend on which CTA finished first (no atomics). float4 when vec4. */
__global__ void __launch_bounds__(256)
    gemm_splitk_reduce_kernel(float *__restrict__ C, const float *__restrict__ work, size_t mn, int splits,
                              int accumulate, int vec4) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    if (vec4) {
        const size_t n4 = mn / 4;
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
            float4 r = accumulate ? reinterpret_cast<const float4 *>(C)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
            float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int s = 0; s < splits; s++) {
                const float4 w = __ldcs(reinterpret_cast<const float4 *>(work + (size_t)s * mn) + i);
                t.x += w.x;
                t.y += w.y;
                t.z += w.z;
                t.w += w.w;
            }
            r.x += t.x;
            r.y += t.y;
            r.z += t.z;
            r.w += t.w;
            reinterpret_cast<float4 *>(C)[i] = r;
        }
    } else {
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < mn; i += stride) {
            float t = 0.0f;
            for (int s = 0; s < splits; s++) t += __ldcs(work + (size_t)s * mn + i);
            C[i] = accumulate ? C[i] + t : t;
        }
    }
}

/* The fallback: C = A . B^T (+ bias) with fp32 FFMA. 64x64 tile, 256
 * threads, a 4x4 register block each (rows ty + 16i, columns tx + 16j), K
 * in slices of 16 through shared memory; scalar bf16 loads with bounds
 * checks, so any shape and alignment works. Correct, not fast. */
__global__ void __launch_bounds__(256)
    gemm_simt_bf16_kernel(const uint16_t *__restrict__ A, const uint16_t *__restrict__ B, float *__restrict__ C,
                          const float *__restrict__ bias, int M, int N, int K) {
    __shared__ float As[GEMM_SIMT_BK][GEMM_SIMT_TILE + 1];
    __shared__ float Bs[GEMM_SIMT_BK][GEMM_SIMT_TILE + 1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * GEMM_SIMT_TILE, n0 = blockIdx.x * GEMM_SIMT_TILE;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += GEMM_SIMT_BK) {
#pragma unroll
        for (int l = 0; l < GEMM_SIMT_TILE * GEMM_SIMT_BK / 256; l++) {
            const int e = tid + 256 * l, r = e / GEMM_SIMT_BK, kk = e % GEMM_SIMT_BK, k = k0 + kk;
            const int am = m0 + r, bn = n0 + r;
            As[kk][r] = (am < M && k < K) ? __uint_as_float((uint32_t)A[(size_t)am * K + k] << 16) : 0.0f;
            Bs[kk][r] = (bn < N && k < K) ? __uint_as_float((uint32_t)B[(size_t)bn * K + k] << 16) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GEMM_SIMT_BK; kk++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int m = m0 + ty + 16 * i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int n = n0 + tx + 16 * j;
            if (m < M && n < N) C[(size_t)m * N + n] = acc[i][j] + (bias != nullptr ? bias[n] : 0.0f);
        }
    }
}

/* ---- launchers ----------------------------------------------------------- */

/* gemm_encode_tiled_fn and gemm_get_encoder (the driver's cuTensorMapEncodeTiled): wgmma_tmap.h. */

static int g_sm_count[GEMM_MAX_DEVICES], g_cc_major[GEMM_MAX_DEVICES], g_cc_minor[GEMM_MAX_DEVICES];

forge_status gemm_device_info(int *dev, int *sm_count) {
    CUDA_TRY(cudaGetDevice(dev));
    if (*dev < 0 || *dev >= GEMM_MAX_DEVICES)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_wgmma: device index %d out of range", *dev);
    if (g_sm_count[*dev] == 0) {
        CUDA_TRY(cudaDeviceGetAttribute(&g_cc_major[*dev], cudaDevAttrComputeCapabilityMajor, *dev));
        CUDA_TRY(cudaDeviceGetAttribute(&g_cc_minor[*dev], cudaDevAttrComputeCapabilityMinor, *dev));
        int sms = 0;
        CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, *dev));
        g_sm_count[*dev] = sms;
    }
    if (g_cc_major[*dev] != 9)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "gemm_wgmma: wgmma/TMA kernels are built for sm_90a only; device %d has compute "
                           "capability %d.%d (use forge_gemm_bf16_nt_simt)",
                           *dev, g_cc_major[*dev], g_cc_minor[*dev]);
    *sm_count = g_sm_count[*dev];
    return FORGE_OK;
}

/* Why the wgmma path cannot take these arguments, or NULL if it can. */
static const char *gemm_wgmma_refusal(const void *A, const void *B, const float *C, int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return "M, N and K must be >= 1";
    if (K % 8 != 0) return "K must be a multiple of 8 (TMA needs 16-byte row strides: K*2 bytes)";
    if ((uintptr_t)A % 16 != 0 || (uintptr_t)B % 16 != 0) return "A and B must be 16-byte aligned (TMA)";
    if ((uintptr_t)C % 4 != 0) return "C must be 4-byte aligned";
    return nullptr;
}

forge_status gemm_encode_kmajor(CUtensorMap *map, gemm_encode_tiled_fn encode, const void *ptr, int rows, int K,
                                int box_rows, const char *what) {
    const cuuint64_t dims[2] = {(cuuint64_t)K, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)K * 2}; /* bytes between rows */
    const cuuint32_t box[2] = {GEMM_BK, (cuuint32_t)box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(ptr), dims, strides, box,
                        elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return forge_error(FORGE_ERR_DEVICE,
                           "gemm_wgmma: cuTensorMapEncodeTiled for %s (%d x %d bf16, box %d x %d, 128B swizzle) "
                           "failed with CUresult %d",
                           what, rows, K, box_rows, GEMM_BK, (int)r);
    return FORGE_OK;
}

/* MN-major operand stored (K, mn) row-major, mn contiguous: TMA dims {mn, K}, row stride mn*2 bytes, boxes
 * of 64 (mn) x 64 (K) with the 128-byte swizzle (64 bf16 = 128 bytes, the swizzle's limit on the inner box), or
 * with box_mn = 32, 32 x 64 boxes with the 64-byte swizzle (the C192 kernel's B, wgmma_desc_mn64). */
forge_status gemm_encode_mnmajor(CUtensorMap *map, gemm_encode_tiled_fn encode, const void *ptr, int mn, int K,
                                 const char *what, int box_mn) {
    const cuuint64_t dims[2] = {(cuuint64_t)mn, (cuuint64_t)K};
    const cuuint64_t strides[1] = {(cuuint64_t)mn * 2};
    const cuuint32_t box[2] = {(cuuint32_t)box_mn, GEMM_BK};
    const cuuint32_t elem_strides[2] = {1, 1};
    CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(ptr), dims, strides, box,
                        elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        box_mn == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return forge_error(FORGE_ERR_DEVICE,
                           "gemm_wgmma: cuTensorMapEncodeTiled for %s (%d x %d bf16 MN-major, box %d x %d, %s "
                           "swizzle) failed with CUresult %d",
                           what, K, mn, box_mn, GEMM_BK, box_mn == 32 ? "64B" : "128B", (int)r);
    return FORGE_OK;
}

/* C (M,N) row-major for the TMA store: dims {N, M}, row stride N*4 bytes fp32 (needs N % 4 == 0) or N*2 bf16
 * (N % 8 == 0), boxes of 128 bytes (32 fp32 or 64 bf16 columns: the 128-byte swizzle's limit) x 64 rows, the
 * staging layout gemm_epilogue writes. */
forge_status gemm_encode_c(CUtensorMap *map, gemm_encode_tiled_fn encode, void *ptr, int M, int N, int bf16) {
    const cuuint64_t dims[2] = {(cuuint64_t)N, (cuuint64_t)M};
    const cuuint64_t strides[1] = {(cuuint64_t)N * (bf16 ? 2 : 4)};
    const cuuint32_t box[2] = {bf16 ? 64u : 32u, 64};
    const cuuint32_t elem_strides[2] = {1, 1};
    CUresult r = encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, ptr, dims,
                        strides, box, elem_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return forge_error(FORGE_ERR_DEVICE,
                           "gemm_wgmma: cuTensorMapEncodeTiled for C (%d x %d %s, box 64 rows x 128 bytes, 128B "
                           "swizzle, TMA store) failed with CUresult %d",
                           M, N, bf16 ? "bf16" : "fp32", (int)r);
    return FORGE_OK;
}

/* The split-K second pass over ep.work's splits slices into ep.C (C += when accumulate). */
forge_status gemm_splitk_reduce_launch(const gemm_epi_dev &ep, int M, int N, int splits, int accumulate,
                                       cudaStream_t stream, int pdl, int sm_count) {
    float *C = (float *)ep.C, *work = ep.work;
    const size_t mn = (size_t)M * N;
    const int vec4 = mn % 4 == 0 && (uintptr_t)C % 16 == 0 && (uintptr_t)work % 16 == 0;
    const size_t n = vec4 ? mn / 4 : mn;
    size_t blocks = (n + 255) / 256;
    if (blocks > (size_t)sm_count * 8) blocks = (size_t)sm_count * 8;
    CUDA_LAUNCH_TRY(forge_pdl_launch(gemm_splitk_reduce_kernel, (unsigned)blocks, 256, 0, stream, pdl, C, work, mn,
                                     splits, accumulate, vec4),
                    "gemm_splitk_reduce_kernel");
    return FORGE_OK;
}

/* TN on the C192 kernel (192 x 192 tiles, two consumer warpgroups splitting N), splits as given, then the pass */
static forge_status gemm_tn_c192_launch(const void *A, const void *B, gemm_epi_dev ep, int M, int N, int K,
                                        int accumulate, int splits, cudaStream_t stream, int pdl, int dev,
                                        int sm_count) {
    static kernel_attrs_once once;
    gemm_encode_tiled_fn encode = nullptr;
    FORGE_TRY(gemm_get_encoder(&encode));
    CUtensorMap tm_a, tm_b;
    FORGE_TRY(gemm_encode_mnmajor(&tm_a, encode, A, M, K, "A"));
    FORGE_TRY(gemm_encode_mnmajor(&tm_b, encode, B, N, K, "B (32-wide boxes)", GEMM_C192_B_BOX));
    CUDA_TRY(
        kernel_attrs_set_dev(&once, dev, (const void *)gemm_wgmma_bf16_tn_c192_kernel, (int)GEMM_C192_SMEM, 0));
    const int ktiles = (K + GEMM_BK - 1) / GEMM_BK;
    const int kps = (ktiles + splits - 1) / splits;
    const long long units = (long long)((M + GEMM_C192_BM - 1) / GEMM_C192_BM) *
                            ((N + GEMM_C192_BN - 1) / GEMM_C192_BN) * splits;
    if (units > 0x7fffffffLL)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_wgmma: %lld work units overflow int", units);
    const int grid = (int)(units < sm_count ? units : sm_count);
    ep.vec2 = N % 2 == 0 && (uintptr_t)ep.C % 8 == 0 && (uintptr_t)ep.res % 8 == 0 && (uintptr_t)ep.work % 8 == 0;
    CUDA_LAUNCH_TRY(forge_pdl_launch(gemm_wgmma_bf16_tn_c192_kernel, grid, GEMM_THREADS, GEMM_C192_SMEM, stream, pdl,
                                     tm_a, tm_b, ep, M, N, K, splits, kps),
                    "gemm_wgmma_bf16_tn_c192_kernel");
    if (splits > 1) return gemm_splitk_reduce_launch(ep, M, N, splits, accumulate, stream, pdl, sm_count);
    return FORGE_OK;
}

/* Picks BN for a non-split launch of (LAYOUT, EPI). */
static int gemm_pick_bn(int M, int N, int sm_count);
template <int LAYOUT, int EPI>
static forge_status gemm_launch_auto_bn(const void *A, const void *B, const gemm_epi_dev &ep, int M, int N, int K,
                                        cudaStream_t stream, int pdl, int dev, int sm_count) {
    if (gemm_pick_bn(M, N, sm_count) == 128)
        return gemm_wgmma_launch<128, LAYOUT, EPI>(A, B, ep, M, N, K, 0, 1, stream, pdl, dev, sm_count);
    return gemm_wgmma_launch<256, LAYOUT, EPI>(A, B, ep, M, N, K, 0, 1, stream, pdl, dev, sm_count);
}

/* Tile width for a non-split launch: 128x256 unless that leaves SMs idle that 128x128 tiles would use. */
static int gemm_pick_bn(int M, int N, int sm_count) {
    const long long tiles_m = (M + GEMM_BM - 1) / GEMM_BM;
    const long long t256 = tiles_m * ((N + 255) / 256), t128 = tiles_m * ((N + 127) / 128);
    return (t256 < sm_count && t128 > t256) ? 128 : 256;
}

/* ---- NT / NN: the fused epilogues -------------------------------------------------------------------------- */

/* Why a fused epilogue cannot be used with these arguments (layout GEMM_NT or GEMM_NN) whatever the store, or
 * NULL. */
static const char *gemm_epi_refusal(int layout, const void *C, const forge_gemm_epilogue *e) {
    const uintptr_t c_align = e->out_bf16 ? 2 : 4;
    if (layout == GEMM_NN && (e->bias != nullptr || e->gelu || e->pre_out != nullptr))
        return "bias, gelu and pre_out are forward (nt) epilogues; nn takes residual and dgelu_pre";
    if (layout == GEMM_NT && e->dgelu_pre != nullptr) return "dgelu_pre is the dX (nn) epilogue";
    if (e->pre_out != nullptr && !e->gelu) return "pre_out is only written with gelu (it is v before GELU)";
    if (layout == GEMM_NT && e->out_bf16 && e->residual == C)
        return "residual == C (C +=) needs an fp32 C on nt; its residual is fp32";
    /* nn bf16: residual and dgelu_pre are bf16 like C */
    const uintptr_t in_align = layout == GEMM_NN && e->out_bf16 ? 2 : 4;
    if ((uintptr_t)C % c_align != 0 || (uintptr_t)e->pre_out % c_align != 0)
        return "C and pre_out must be aligned to their element size";
    if ((uintptr_t)e->bias % 4 != 0 || (uintptr_t)e->residual % in_align != 0 ||
        (uintptr_t)e->dgelu_pre % in_align != 0)
        return "bias, residual and dgelu_pre must be aligned to their element size";
    return nullptr;
}

const char *gemm_epi_tma_refusal(int layout, const void *C, int N, const forge_gemm_epilogue *e) {
    /* nn's bf16 residual (C = rn(C + d)) is loaded chunk by chunk like dgelu_pre (GEMM_EPI_RES, BN 128); an fp32
     * residual (C += d) stays on the register store, which measured faster there (lab/notes/gemm-bf16.md) */
    if (e->residual != nullptr && (layout != GEMM_NN || !e->out_bf16 || e->dgelu_pre != nullptr))
        return "the TMA store takes bias, gelu, pre_out and bf16 out (nt), dgelu_pre or a bf16 residual (nn): not "
               "this residual (stored from the registers)";
    if (e->residual != nullptr && (uintptr_t)e->residual % 16 != 0)
        return "the TMA store with a residual needs a 16-byte aligned residual";
    if (e->pre_out != nullptr && (uintptr_t)e->pre_out % 16 != 0)
        return "the TMA store with pre_out needs a 16-byte aligned pre_out";
    if (e->dgelu_pre != nullptr && (uintptr_t)e->dgelu_pre % 16 != 0)
        return "the TMA store with dgelu_pre needs a 16-byte aligned dgelu_pre";
    if (!e->out_bf16 && (N % 4 != 0 || (uintptr_t)C % 16 != 0))
        return "the TMA store of an fp32 C needs N % 4 == 0 and a 16-byte aligned C (TMA's 16-byte row stride and "
               "base)";
    if (e->out_bf16 && (N % 8 != 0 || (uintptr_t)C % 16 != 0))
        return "the TMA store of a bf16 C needs N % 8 == 0 and a 16-byte aligned C (TMA's 16-byte row stride and "
               "base)";
    return nullptr;
}

static gemm_epi_dev gemm_epi_from(void *C, const forge_gemm_epilogue *e) {
    gemm_epi_dev ep = {};
    ep.C = C;
    ep.bias = e->bias;
    ep.res = (const float *)e->residual; /* bf16 in the nn bf16 form: the kernel's GEMM_EPI_BF16_IN reads it so */
    ep.pre = e->pre_out;
    ep.dpre = (const float *)e->dgelu_pre;
    return ep;
}

forge_status gemm_bf16_nt_epi_launch(const void *A_bf16, const void *B_bf16, void *C, int M, int N, int K,
                                     const forge_gemm_epilogue *epi, int tma_store, cudaStream_t st, int pdl) {
    forge_gemm_epilogue plain;
    memset(&plain, 0, sizeof plain);
    const forge_gemm_epilogue *e = epi != nullptr ? epi : &plain;
    /* the fp32 rules of gemm_wgmma_refusal; a bf16 C only needs 2-byte alignment */
    const char *why = gemm_wgmma_refusal(A_bf16, B_bf16, e->out_bf16 ? nullptr : (const float *)C, M, N, K);
    if (why == nullptr) why = gemm_epi_refusal(GEMM_NT, C, e);
    if (why == nullptr && tma_store) why = gemm_epi_tma_refusal(GEMM_NT, C, N, e);
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_wgmma nt epilogue (M=%d N=%d K=%d): %s", M, N, K, why);
    int dev = 0, sm_count = 0;
    FORGE_TRY(gemm_device_info(&dev, &sm_count));
    const gemm_epi_dev ep = gemm_epi_from(C, e);
    const int flags = (e->gelu ? GEMM_EPI_GELU : 0) | (e->out_bf16 ? GEMM_EPI_BF16 : 0);
    if (tma_store) {
        constexpr int T = GEMM_EPI_TMA_STORE;
        switch (flags) {
        case 0: return gemm_launch_auto_bn<GEMM_NT, T>(A_bf16, B_bf16, ep, M, N, K, st, pdl, dev, sm_count);
        case GEMM_EPI_GELU:
            return gemm_launch_auto_bn<GEMM_NT, T | GEMM_EPI_GELU>(A_bf16, B_bf16, ep, M, N, K, st, pdl, dev,
                                                                   sm_count);
        case GEMM_EPI_BF16:
            return gemm_launch_auto_bn<GEMM_NT, T | GEMM_EPI_BF16>(A_bf16, B_bf16, ep, M, N, K, st, pdl, dev,
                                                                   sm_count);
        default:
            return gemm_launch_auto_bn<GEMM_NT, T | GEMM_EPI_GELU | GEMM_EPI_BF16>(A_bf16, B_bf16, ep, M, N, K, st,
                                                                                   pdl, dev, sm_count);
        }
    }
    switch (flags) {
    case 0: return gemm_launch_auto_bn<GEMM_NT, 0>(A_bf16, B_bf16, ep, M, N, K, st, pdl, dev, sm_count);
    case GEMM_EPI_GELU:
        return gemm_launch_auto_bn<GEMM_NT, GEMM_EPI_GELU>(A_bf16, B_bf16, ep, M, N, K, st, pdl, dev, sm_count);
    case GEMM_EPI_BF16:
        return gemm_launch_auto_bn<GEMM_NT, GEMM_EPI_BF16>(A_bf16, B_bf16, ep, M, N, K, st, pdl, dev, sm_count);
    default:
        return gemm_launch_auto_bn<GEMM_NT, GEMM_EPI_GELU | GEMM_EPI_BF16>(A_bf16, B_bf16, ep, M, N, K, st, pdl, dev,
                                                                          sm_count);
    }
}

/* Whether forge_gemm_bf16_nt_epi runs these arguments on the bf16 ping-pong kernel (forge_gemm_bf16_nt_pp_bf16): a
 * bf16 C with bias or not, GELU with pre_out, without, or no GELU, no residual, where the TMA store takes C and
 * pre_out (N % 8 == 0, 16-byte aligned) and the arguments are valid. One warpgroup's epilogue runs under the other
 * warpgroup's MMAs, where the cooperative kernel idles the tensor pipe (the ping-pong kernel's fp32 products
 * measured ahead at every shape; the bf16 epilogues' A/B is forge-lab bench pp-bf16-epi: lab/notes/gemm-bf16.md).
 * The same bits as the cooperative kernel's TMA-store epilogue. */
static int gemm_nt_epi_pingpong(const void *A, const void *B, const void *C, int M, int N, int K,
                                const forge_gemm_epilogue *e) {
    return e->out_bf16 && e->residual == nullptr && e->dgelu_pre == nullptr &&
           gemm_wgmma_refusal(A, B, nullptr, M, N, K) == nullptr && gemm_epi_refusal(GEMM_NT, C, e) == nullptr &&
           gemm_epi_tma_refusal(GEMM_NT, C, N, e) == nullptr;
}

extern "C" forge_status forge_gemm_bf16_nt_epi(const void *A_bf16, const void *B_bf16, void *C, int M, int N, int K,
                                               const forge_gemm_epilogue *epi, void *stream, int pdl) {
    forge_gemm_epilogue plain;
    memset(&plain, 0, sizeof plain);
    const forge_gemm_epilogue *e = epi != nullptr ? epi : &plain;
    if (gemm_nt_epi_pingpong(A_bf16, B_bf16, C, M, N, K, e))
        return forge_gemm_bf16_nt_pp_bf16(A_bf16, B_bf16, C, e->bias, e->gelu ? e->pre_out : nullptr, e->gelu, M, N,
                                          K, stream, pdl);
    return gemm_bf16_nt_epi_launch(A_bf16, B_bf16, C, M, N, K, e, gemm_epi_tma_refusal(GEMM_NT, C, N, e) == nullptr,
                                   (cudaStream_t)stream, pdl);
}

extern "C" const char *forge_gemm_bf16_epi_store(int nn, const void *C, int N, const forge_gemm_epilogue *epi) {
    forge_gemm_epilogue plain;
    memset(&plain, 0, sizeof plain);
    return gemm_epi_tma_refusal(nn ? GEMM_NN : GEMM_NT, C, N, epi != nullptr ? epi : &plain) == nullptr ? "tma"
                                                                                                         : "direct";
}

extern "C" forge_status forge_gemm_bf16_nt_wgmma(const void *A_bf16, const void *B_bf16, float *C, const float *bias,
                                                 int M, int N, int K, void *stream) {
    const char *why = gemm_wgmma_refusal(A_bf16, B_bf16, C, M, N, K);
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_wgmma (M=%d N=%d K=%d): %s; forge_gemm_bf16_nt falls back "
                           "to the SIMT kernel for such arguments", M, N, K, why);
    /* A product (+ bias) whose C takes the TMA store runs on the ping-pong kernel (128 x 128 per warpgroup, one's
     * epilogue, bias included, under the other's MMAs): faster than the cooperative kernel at every measured shape
     * (lab/notes/gemm-bf16.md). The rest, whose C the TMA store refuses, on the cooperative kernel with the
     * direct store. */
    if (N % 4 == 0 && (uintptr_t)C % 16 == 0) return forge_gemm_bf16_nt_pp(A_bf16, B_bf16, C, bias, M, N, K, stream);
    forge_gemm_epilogue e;
    memset(&e, 0, sizeof e);
    e.bias = bias;
    return forge_gemm_bf16_nt_epi(A_bf16, B_bf16, C, M, N, K, &e, stream, 0);
}

const char *gemm_wgmma_refusal_bwd(int layout, const void *A, const void *B, const float *C, int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return "M, N and K must be >= 1";
    if (layout == GEMM_NN && K % 8 != 0)
        return "K must be a multiple of 8 (A = dY (M,K) is K-contiguous; TMA needs 16-byte row strides: K*2 bytes)";
    if (layout == GEMM_TN && M % 8 != 0)
        return "M must be a multiple of 8 (A = dY (K,M) is M-contiguous; TMA needs 16-byte row strides: M*2 bytes)";
    if (N % 8 != 0) return "N must be a multiple of 8 (B (K,N) is N-contiguous; TMA needs 16-byte row strides: N*2 bytes)";
    if ((uintptr_t)A % 16 != 0 || (uintptr_t)B % 16 != 0) return "A and B must be 16-byte aligned (TMA)";
    if ((uintptr_t)C % 4 != 0) return "C must be 4-byte aligned";
    return nullptr;
}

forge_status gemm_bf16_nn_epi_launch(const void *A_bf16, const void *B_bf16, void *C, int M, int N, int K,
                                     const forge_gemm_epilogue *epi, int tma_store, cudaStream_t st, int pdl) {
    forge_gemm_epilogue plain;
    memset(&plain, 0, sizeof plain);
    const forge_gemm_epilogue *e = epi != nullptr ? epi : &plain;
    const char *why = gemm_wgmma_refusal_bwd(GEMM_NN, A_bf16, B_bf16, (const float *)C, M, N, K);
    if (why == nullptr) why = gemm_epi_refusal(GEMM_NN, C, e);
    if (why == nullptr && tma_store) why = gemm_epi_tma_refusal(GEMM_NN, C, N, e);
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_wgmma nn (M=%d N=%d K=%d): %s", M, N, K, why);
    int dev = 0, sm_count = 0;
    FORGE_TRY(gemm_device_info(&dev, &sm_count));
    const gemm_epi_dev ep = gemm_epi_from(C, e);
    /* bf16 dX: bf16 C, residual and dgelu_pre, all stored through TMA where allowed: the plain product (the first
     * gradient of a tensor), the GELU backward (dgelu_pre, BN 128) and the residual (C = rn(C + d), BN 128: the
     * register store's scattered 4-byte loads and stores measured 2.9x slower, lab/notes/gemm-bf16.md) */
    if (e->out_bf16 && tma_store && e->residual != nullptr)
        return gemm_wgmma_launch<128, GEMM_NN, GEMM_EPI_RES | GEMM_EPI_BF16 | GEMM_EPI_BF16_IN | GEMM_EPI_TMA_STORE>(
            A_bf16, B_bf16, ep, M, N, K, 0, 1, st, pdl, dev, sm_count);
    if (e->out_bf16 && tma_store && e->dgelu_pre != nullptr)
        return gemm_wgmma_launch<128, GEMM_NN, GEMM_EPI_DGELU | GEMM_EPI_BF16 | GEMM_EPI_BF16_IN | GEMM_EPI_TMA_STORE>(
            A_bf16, B_bf16, ep, M, N, K, 0, 1, st, pdl, dev, sm_count);
    if (e->out_bf16 && tma_store)
        return gemm_launch_auto_bn<GEMM_NN, GEMM_EPI_BF16 | GEMM_EPI_TMA_STORE>(A_bf16, B_bf16, ep, M, N, K, st, pdl,
                                                                                dev, sm_count);
    if (e->out_bf16 && e->dgelu_pre != nullptr)
        return gemm_launch_auto_bn<GEMM_NN, GEMM_EPI_DGELU | GEMM_EPI_BF16 | GEMM_EPI_BF16_IN>(A_bf16, B_bf16, ep, M,
                                                                                                N, K, st, pdl, dev,
                                                                                                sm_count);
    if (e->out_bf16)
        return gemm_launch_auto_bn<GEMM_NN, GEMM_EPI_BF16 | GEMM_EPI_BF16_IN>(A_bf16, B_bf16, ep, M, N, K, st, pdl,
                                                                              dev, sm_count);
    /* dgelu + TMA store: BN 128 only (the chunk loads of dgelu_pre next to 128 accumulators would spill) */
    if (e->dgelu_pre != nullptr && tma_store)
        return gemm_wgmma_launch<128, GEMM_NN, GEMM_EPI_DGELU | GEMM_EPI_TMA_STORE>(A_bf16, B_bf16, ep, M, N, K, 0,
                                                                                    1, st, pdl, dev, sm_count);
    if (e->dgelu_pre != nullptr)
        return gemm_launch_auto_bn<GEMM_NN, GEMM_EPI_DGELU>(A_bf16, B_bf16, ep, M, N, K, st, pdl, dev, sm_count);
    if (tma_store)
        return gemm_launch_auto_bn<GEMM_NN, GEMM_EPI_TMA_STORE>(A_bf16, B_bf16, ep, M, N, K, st, pdl, dev, sm_count);
    return gemm_launch_auto_bn<GEMM_NN, 0>(A_bf16, B_bf16, ep, M, N, K, st, pdl, dev, sm_count);
}

extern "C" forge_status forge_gemm_bf16_nn_epi(const void *A_bf16, const void *B_bf16, void *C, int M, int N,
                                               int K, const forge_gemm_epilogue *epi, void *stream, int pdl) {
    forge_gemm_epilogue plain;
    memset(&plain, 0, sizeof plain);
    const forge_gemm_epilogue *e = epi != nullptr ? epi : &plain;
    const int tma = gemm_epi_tma_refusal(GEMM_NN, C, N, e) == nullptr;
    return gemm_bf16_nn_epi_launch(A_bf16, B_bf16, C, M, N, K, e, tma, (cudaStream_t)stream, pdl);
}

extern "C" forge_status forge_gemm_bf16_nn_wgmma(const void *A_bf16, const void *B_bf16, float *C, int M, int N,
                                                 int K, int accumulate, void *stream, int pdl) {
    forge_gemm_epilogue e;
    memset(&e, 0, sizeof e);
    e.residual = accumulate ? C : nullptr; /* C += the product: read C, add, store, in the epilogue */
    return forge_gemm_bf16_nn_epi(A_bf16, B_bf16, C, M, N, K, &e, stream, pdl);
}

/* ---- TN (dW): the default plan --------------------------------------------------------------------------- */

const gemm_tn_tile GEMM_TN_TILES[2] = {{GEMM_BM, 256, 1.0, 0}, {GEMM_BM, 128, 0.68, 0}};

long long gemm_tn_max_slices(int M, int N, const void *workspace, size_t workspace_bytes) {
    return workspace == nullptr ? 0 : (long long)(workspace_bytes / ((size_t)M * N * sizeof(float)));
}

int gemm_tn_c192_default(int M, int N, int K, int sm_count, int splits) {
    const long long tiles =
        (long long)((M + GEMM_C192_BM - 1) / GEMM_C192_BM) * ((N + GEMM_C192_BN - 1) / GEMM_C192_BN);
    const long long ktiles = (K + GEMM_BK - 1) / GEMM_BK;
    const long long kps = (ktiles + splits - 1) / splits;
    return tiles * splits * 10 >= (long long)sm_count * 9 && tiles * splits <= sm_count && kps >= 64;
}

gemm_tn_default gemm_tn_default_plan(int M, int N, int K, int accumulate, int sm_count, long long max_slices) {
    gemm_tn_default p = {0, GEMM_BM, 256, gemm_tn_one_wave_splits(M, N, K, sm_count, max_slices)};
    p.c192 = gemm_tn_c192_default(M, N, K, sm_count, p.splits);
    if (!p.c192) gemm_plan_tn(M, N, K, accumulate != 0, sm_count, max_slices, GEMM_TN_TILES, 2, &p.bm, &p.bn, &p.splits);
    return p;
}

int gemm_tn_default_dbias(const gemm_tn_default &p, int M, size_t rows_floats) {
    return !p.c192 && p.bn == 256 && (size_t)p.splits * M <= rows_floats;
}

int gemm_tn_one_wave_splits(int M, int N, int K, int sm_count, long long max_slices) {
    const long long tiles = (long long)((M + 191) / 192) * ((N + 191) / 192);
    const long long ktiles = (K + GEMM_BK - 1) / GEMM_BK;
    long long s = sm_count / (tiles > 0 ? tiles : 1);
    if (s > GEMM_MAX_SPLITS) s = GEMM_MAX_SPLITS;
    if (s > max_slices) s = max_slices;
    if (s > ktiles) s = ktiles;
    if (s < 1) s = 1;
    const long long kps = (ktiles + s - 1) / s;
    return (int)((ktiles + kps - 1) / kps);
}

void gemm_plan_tn(int M, int N, int K, int accumulate, int sm_count, long long max_slices, const gemm_tn_tile *tiles,
                  int n_tiles, int *bm_out, int *bn_out, int *splits_out) {
    const long long ktiles = (K + GEMM_BK - 1) / GEMM_BK;
    const double mn_bytes = 4.0 * (double)M * (double)N;
    const double slice_us = 0.6, bw_bytes_per_us = 3.5e6;
    long long cap = ktiles < GEMM_MAX_SPLITS ? ktiles : GEMM_MAX_SPLITS;
    if (max_slices < cap) cap = max_slices < 1 ? 1 : max_slices;
    double best = -1.0;
    int best_bn = tiles[0].bn, best_s = 1, best_bm = tiles[0].bm;
    for (int bi = 0; bi < n_tiles; bi++) {
        const int bn = tiles[bi].bn, bm = tiles[bi].bm;
        const long long n_mn = (long long)((M + bm - 1) / bm) * ((N + bn - 1) / bn);
        for (long long s = 1; s <= cap; s++) {
            const long long kps = (ktiles + s - 1) / s;
            if ((ktiles + kps - 1) / kps != s) continue; /* an empty split: the same as a smaller s */
            const long long units = n_mn * s, waves = (units + sm_count - 1) / sm_count;
            if (tiles[bi].one_wave && waves > 1) continue;
            double t = (double)waves * (double)kps * tiles[bi].slice_cost;
            if (s > 1) t += (2.0 * s + 1.0 + accumulate) * mn_bytes / bw_bytes_per_us / slice_us;
            if (best < 0.0 || t < best) {
                best = t;
                best_bn = bn;
                best_bm = bm;
                best_s = (int)s;
            }
        }
    }
    *bm_out = best_bm;
    *bn_out = best_bn;
    *splits_out = best_s;
}

forge_status gemm_tn_c192_run(const void *A, const void *B, float *C, int M, int N, int K, int accumulate,
                              void *workspace, int splits, cudaStream_t stream, int pdl, int dev, int sm_count) {
    gemm_epi_dev ep = {};
    ep.C = C;
    ep.work = splits > 1 ? (float *)workspace : nullptr;
    ep.res = splits == 1 && accumulate ? C : nullptr;
    return gemm_tn_c192_launch(A, B, ep, M, N, K, accumulate != 0, splits, stream, pdl, dev, sm_count);
}

forge_status gemm_tn_launch(int bn, int tma_partials, const void *A, const void *B, const gemm_epi_dev &ep, int M,
                            int N, int K, int accumulate, int splits, cudaStream_t stream, int pdl, int dev,
                            int sm_count, long long sk_iters, float *dbias_ws) {
    if (bn != 128 && bn != 256) return forge_error(FORGE_ERR_ARG, "gemm_wgmma tn: tile width %d (128 or 256)", bn);
    if (!tma_partials) {
        if (bn == 128)
            return gemm_wgmma_launch<128, GEMM_TN, 0>(A, B, ep, M, N, K, accumulate, splits, stream, pdl, dev,
                                                      sm_count, sk_iters, dbias_ws);
        return gemm_wgmma_launch<256, GEMM_TN, 0>(A, B, ep, M, N, K, accumulate, splits, stream, pdl, dev, sm_count,
                                                  sk_iters, dbias_ws);
    }
    if (bn == 128)
        return gemm_wgmma_launch<128, GEMM_TN, GEMM_EPI_TMA_STORE>(A, B, ep, M, N, K, accumulate, splits, stream, pdl,
                                                                   dev, sm_count, sk_iters, dbias_ws);
    return gemm_wgmma_launch<256, GEMM_TN, GEMM_EPI_TMA_STORE>(A, B, ep, M, N, K, accumulate, splits, stream, pdl,
                                                               dev, sm_count, sk_iters, dbias_ws);
}

int gemm_tn_tma_partials_ok(int M, int N, int splits, const void *workspace) {
    return splits > 1 && M % GEMM_BM == 0 && N % 4 == 0 && (uintptr_t)workspace % 16 == 0 &&
           (long long)splits * M <= 0x7fffffffLL; /* the stacked map's rows: int */
}

forge_status gemm_tn_split_run(const void *A, const void *B, float *C, int M, int N, int K, int accumulate,
                               void *workspace, int bn, int splits, int allow_tma, cudaStream_t stream, int pdl,
                               int dev, int sm_count, float *dbias_ws) {
    gemm_epi_dev ep = {};
    ep.C = C;
    /* unsplit, C += is the epilogue's read-add-store; split, the reduction pass adds C */
    ep.work = splits > 1 ? (float *)workspace : nullptr;
    ep.res = splits == 1 && accumulate ? C : nullptr;
    const int tma = allow_tma && gemm_tn_tma_partials_ok(M, N, splits, workspace);
    return gemm_tn_launch(bn, tma, A, B, ep, M, N, K, accumulate != 0, splits, stream, pdl, dev, sm_count, 0,
                          dbias_ws);
}

/* ---- TN (dW): the entry points ------------------------------------------------------------------------------ */

extern "C" forge_status forge_gemm_bf16_tn_workspace(int M, int N, int K, size_t *bytes) {
    *bytes = 0;
    if (M <= 0 || N <= 0 || K <= 0) return FORGE_OK;
    int dev = 0, sm_count = 0;
    FORGE_TRY(gemm_device_info(&dev, &sm_count));
    /* the splits of either plan (C192's one wave, the cost model's), with accumulate or without: accumulate only
     * moves the reduction's cost */
    int splits = gemm_tn_one_wave_splits(M, N, K, sm_count, GEMM_MAX_SPLITS);
    for (int acc = 0; acc < 2; acc++) {
        int bm = 0, bn = 0, s = 1;
        gemm_plan_tn(M, N, K, acc, sm_count, GEMM_MAX_SPLITS, GEMM_TN_TILES, 2, &bm, &bn, &s);
        if (s > splits) splits = s;
    }
    *bytes = splits > 1 ? (size_t)splits * M * N * sizeof(float) : 0;
    return FORGE_OK;
}

extern "C" forge_status forge_gemm_bf16_tn_wgmma_dbias(const void *A_bf16, const void *B_bf16, float *C, int M,
                                                       int N, int K, int accumulate, void *workspace,
                                                       size_t workspace_bytes, float *dbias_ws, size_t dbias_ws_floats,
                                                       int *dbias_rows, void *stream, int pdl) {
    if (dbias_rows != nullptr) *dbias_rows = 0;
    const char *why = gemm_wgmma_refusal_bwd(GEMM_TN, A_bf16, B_bf16, C, M, N, K);
    if (why == nullptr && workspace != nullptr && (uintptr_t)workspace % 16 != 0)
        why = "the split-K workspace must be 16-byte aligned";
    if (why != nullptr)
        return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_wgmma tn (M=%d N=%d K=%d): %s", M, N, K, why);
    int dev = 0, sm_count = 0;
    FORGE_TRY(gemm_device_info(&dev, &sm_count));
    const cudaStream_t st = (cudaStream_t)stream;
    const gemm_tn_default p =
        gemm_tn_default_plan(M, N, K, accumulate, sm_count, gemm_tn_max_slices(M, N, workspace, workspace_bytes));
    if (p.c192)
        return gemm_tn_c192_run(A_bf16, B_bf16, C, M, N, K, accumulate, workspace, p.splits, st, pdl, dev, sm_count);
    /* the row sums where the plan carries them and the caller's rows are 16-byte aligned */
    float *rows = dbias_ws != nullptr && dbias_rows != nullptr && (uintptr_t)dbias_ws % 16 == 0 &&
                          gemm_tn_default_dbias(p, M, dbias_ws_floats)
                      ? dbias_ws
                      : nullptr;
    FORGE_TRY(gemm_tn_split_run(A_bf16, B_bf16, C, M, N, K, accumulate, workspace, p.bn, p.splits, 1, st, pdl, dev,
                                sm_count, rows));
    if (rows != nullptr) *dbias_rows = p.splits;
    return FORGE_OK;
}

extern "C" forge_status forge_gemm_bf16_tn_wgmma(const void *A_bf16, const void *B_bf16, float *C, int M, int N,
                                                 int K, int accumulate, void *workspace, size_t workspace_bytes,
                                                 void *stream, int pdl) {
    return forge_gemm_bf16_tn_wgmma_dbias(A_bf16, B_bf16, C, M, N, K, accumulate, workspace, workspace_bytes, nullptr,
                                          0, nullptr, stream, pdl);
}

/* ---- NT: the dispatching entry and the SIMT fallback --------------------------------------------------------- */

extern "C" forge_status forge_gemm_bf16_nt_simt(const void *A_bf16, const void *B_bf16, float *C, const float *bias,
                                                int M, int N, int K, void *stream) {
    if (M < 0 || N < 0 || K < 0) return forge_error(FORGE_ERR_ARG, "gemm_simt: negative size M=%d N=%d K=%d", M, N, K);
    if (M == 0 || N == 0) return FORGE_OK;
    const dim3 grid((N + GEMM_SIMT_TILE - 1) / GEMM_SIMT_TILE, (M + GEMM_SIMT_TILE - 1) / GEMM_SIMT_TILE);
    if (grid.y > 65535) return forge_error(FORGE_ERR_UNSUPPORTED, "gemm_simt: M=%d needs more than 65535 row blocks", M);
    gemm_simt_bf16_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>((const uint16_t *)A_bf16, (const uint16_t *)B_bf16,
                                                                 C, bias, M, N, K);
    CUDA_LAUNCH_CHECK("gemm_simt_bf16_kernel");
    return FORGE_OK;
}

extern "C" const char *forge_gemm_bf16_nt_path(const void *A_bf16, const void *B_bf16, const float *C, int M, int N,
                                               int K) {
    return gemm_wgmma_refusal(A_bf16, B_bf16, C, M, N, K) == nullptr ? "wgmma" : "simt";
}

extern "C" forge_status forge_gemm_bf16_nt(const void *A_bf16, const void *B_bf16, float *C, const float *bias, int M,
                                           int N, int K, void *stream) {
    if (gemm_wgmma_refusal(A_bf16, B_bf16, C, M, N, K) == nullptr)
        return forge_gemm_bf16_nt_wgmma(A_bf16, B_bf16, C, bias, M, N, K, stream);
    return forge_gemm_bf16_nt_simt(A_bf16, B_bf16, C, bias, M, N, K, stream);
}
