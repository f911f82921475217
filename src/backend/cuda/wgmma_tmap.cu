/*
 * wgmma_tmap.cu: the tensor-map encoder of forge's TMA kernels (wgmma_tmap.h).
 */
#include <stddef.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "wgmma_tmap.h"

static gemm_encode_tiled_fn g_encode_tiled;

forge_status gemm_get_encoder(gemm_encode_tiled_fn *out) {
    if (g_encode_tiled == nullptr) {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        CUDA_TRY(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || fn == nullptr)
            return forge_error(FORGE_ERR_DEVICE,
                               "gemm_wgmma: the driver has no cuTensorMapEncodeTiled (query result %d); TMA "
                               "needs a CUDA 12+ driver",
                               (int)q);
        g_encode_tiled = (gemm_encode_tiled_fn)fn;
    }
    *out = g_encode_tiled;
    return FORGE_OK;
}

forge_status wgmma_encode_2d(CUtensorMap *map, CUtensorMapDataType type, const void *ptr, int rows, int cols,
                             unsigned long long row_bytes, int box_rows, int box_cols, const char *what) {
    gemm_encode_tiled_fn encode = nullptr;
    FORGE_TRY(gemm_get_encoder(&encode));
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)row_bytes};
    const cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    CUresult r = encode(map, type, 2, const_cast<void *>(ptr), dims, strides, box, elem_strides,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return forge_error(FORGE_ERR_DEVICE,
                           "cuTensorMapEncodeTiled for %s (%d x %d, data type %d, row stride %llu B, box %d x %d, "
                           "128B swizzle) failed with CUresult %d",
                           what, rows, cols, (int)type, row_bytes, box_rows, box_cols, (int)r);
    return FORGE_OK;
}

forge_status wgmma_encode_tokens(CUtensorMap *map, const void *ptr, int B, int T, int cols, long long stride,
                                 int box_rows, const char *what, const char *entry, const char *fallback) {
    gemm_encode_tiled_fn encode = nullptr;
    FORGE_TRY(gemm_get_encoder(&encode));
    const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t strides[2] = {(cuuint64_t)stride * 2, (cuuint64_t)stride * 2 * (cuuint64_t)T};
    const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void *>(ptr), dims, strides, box,
                        elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: cuTensorMapEncodeTiled for %s (B=%d T=%d cols=%d, token stride %lld elements, box 64 "
                           "x %d, 128B swizzle) failed with CUresult %d; use the %s",
                           entry, what, B, T, cols, stride, box_rows, (int)r, fallback);
    return FORGE_OK;
}
