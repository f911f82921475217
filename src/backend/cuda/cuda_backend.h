/*
 * cuda_backend.h: the CUDA backend's public extras, callable from C.
 * forge_cuda_backend_create itself is declared in backend.h.
 */
#ifndef FORGE_CUDA_BACKEND_H
#define FORGE_CUDA_BACKEND_H

#ifdef __cplusplus
extern "C" {
#endif

#include "../backend.h"

/* Which matmul path this CUDA backend uses, as chosen by the environment
 * variable FORGE_MATMUL (or `forge train --matmul`) when it was created:
 * "simt" (default, also spelled "fp32": hand-written exact fp32 kernel, tile
 * per shape), "simt64" / "simt128" (tile forced, for tests), "cublas"
 * (cublasSgemm in pedantic fp32, the reference path), "tf32" (forge's
 * mma.sync tf32 kernels) or "auto" (per shape the faster of simt and
 * cublas, from a measured, cached table). Returns NULL if be is not a CUDA
 * backend. */
const char *forge_cuda_matmul_impl(forge_backend *be);

#ifdef __cplusplus
}
#endif

#endif
