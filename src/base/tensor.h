/*
 * tensor.h: forge's tensor: a typed, shaped view of device memory.
 *
 * The data pointer belongs to a backend (host memory for the CPU backend,
 * device memory for CUDA); a tensor never mixes devices. The dtype lives in
 * the tensor so that bf16 storage and fp8 can be added without changing any
 * signature. Shapes are up to 4-D, row-major, last dimension contiguous.
 *
 * Ownership: tensors are handed out by a forge_pool (pool.h). Parameters live
 * for the whole run; activations and their gradients are released together
 * when the tape is reset after each micro-batch.
 */
#ifndef FORGE_TENSOR_H
#define FORGE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#define FORGE_MAX_DIMS 4

typedef struct forge_tensor forge_tensor;
struct forge_tensor {
    forge_dtype dtype;
    int ndim;
    int64_t shape[FORGE_MAX_DIMS];
    size_t numel;
    void *data;            /* backend memory */
    forge_tensor *grad;    /* same shape: F32 for parameters, the tensor's dtype for activations; NULL until
                            * backward needs it */
    forge_tensor *working; /* a parameter of a bf16 step: its bf16 working copy (same shape), which the ops read
                            * and the optimizer rewrites; NULL otherwise */
    int requires_grad;     /* 1 for parameters and anything computed from them */
    int persistent;        /* 1 for parameters: not released by tape reset */
    int grad_borrowed;     /* grad is another tensor's gradient, lent read-only for one backward rule (tape.h:
                            * forge_tape_grad_lend): this tensor does not own it, and the pool never frees it
                            * through this tensor */
    size_t block_bytes;    /* size of the pool block behind data */
    forge_tensor *next_live; /* pool bookkeeping: list of live tensors */
};

static inline float *forge_f32(const forge_tensor *t) { return (float *)t->data; }
static inline int32_t *forge_i32(const forge_tensor *t) { return (int32_t *)t->data; }
static inline size_t forge_tensor_bytes(const forge_tensor *t) {
    return t->numel * forge_dtype_size(t->dtype);
}

/* Formats "(2, 3, 4)" into buf; returns buf. */
const char *forge_shape_str(const forge_tensor *t, char *buf, size_t cap);

#endif
