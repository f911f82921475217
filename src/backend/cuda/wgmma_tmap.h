/*
 * wgmma_tmap.h: host side of forge's TMA users: the driver's
 * cuTensorMapEncodeTiled, fetched at run time (cudaGetDriverEntryPointByVersion)
 * so that no binary needs a -lcuda link, and a 2D encoder for the row-major,
 * 128-byte-swizzled tiles the wgmma kernels read. CUDA C++ only (the CUtensorMap
 * types); the device half is wgmma_common.cuh.
 */
#ifndef FORGE_WGMMA_TMAP_H
#define FORGE_WGMMA_TMAP_H

#include <cuda.h>

extern "C" {
#include "../../base/status.h"
}

/* cuTensorMapEncodeTiled's signature (cuda.h). */
typedef CUresult (*gemm_encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                         const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                                         CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                         CUtensorMapFloatOOBfill);

/* The driver's cuTensorMapEncodeTiled (cached process-wide after the first call; racing callers store the
 * same pointer). FORGE_ERR_DEVICE when the driver has none (TMA needs a CUDA 12+ driver). */
forge_status gemm_get_encoder(gemm_encode_tiled_fn *out);

/* A 2D tensor map of a row-major (rows, cols) matrix of `type` with `row_bytes` between rows (a multiple of 16),
 * boxes of box_cols x box_rows elements, the 128-byte swizzle (box_cols * element size must be <= 128 bytes),
 * 256-byte L2 promotion and zero fill outside the matrix. FORGE_ERR_DEVICE naming `what` if the driver refuses. */
forge_status wgmma_encode_2d(CUtensorMap *map, CUtensorMapDataType type, const void *ptr, int rows, int cols,
                             unsigned long long row_bytes, int box_rows, int box_cols, const char *what);

/* The flash-attention kernels' 3D map of a (B, T, cols) bf16 tensor whose tokens are `stride` elements apart:
 * boxes of 64 columns x box_rows tokens x 1 batch, 128B swizzle, zero fill past T (per batch) and past cols, so
 * a box never reads into the next batch. FORGE_ERR_UNSUPPORTED naming `entry`, `what` and the layout if the
 * driver refuses it (the caller then takes its mma.sync path, `fallback`). */
forge_status wgmma_encode_tokens(CUtensorMap *map, const void *ptr, int B, int T, int cols, long long stride,
                                 int box_rows, const char *what, const char *entry, const char *fallback);

#endif
