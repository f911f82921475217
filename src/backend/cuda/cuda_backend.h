/*
 * cuda_backend.h: the CUDA backend's public extras, callable from C (its
 * constructor is reached through forge_backend_create, backend.h).
 */
#ifndef FORGE_CUDA_BACKEND_H
#define FORGE_CUDA_BACKEND_H

#ifdef __cplusplus
extern "C" {
#endif

#include "../backend.h"

/* The backend's cudaStream_t (every op runs on it), for code that must order its own work with the ops'
 * (the benchmark harness's timing events); NULL if be is not a CUDA backend. */
void *forge_cuda_backend_stream(forge_backend *be);
/* The backend's side stream (backend.h: side_fork, side_join), on which the NCCL communicator runs the
 * collectives that overlap the ops; NULL if be is not a CUDA backend. */
void *forge_cuda_backend_side_stream(forge_backend *be);
/* The CUDA device index the backend was created on; -1 if be is not a CUDA backend. */
int forge_cuda_backend_device(forge_backend *be);

#ifdef __cplusplus
}
#endif

#endif
