/* op_common.h: helpers shared by the op files (private to src/ops/). */
#ifndef FORGE_OP_COMMON_H
#define FORGE_OP_COMMON_H

#include "ops.h"

/* Fails with FORGE_ERR_UNSUPPORTED if the backend has no `entry`. */
#define OP_REQUIRE(be, entry)                                                              \
    do {                                                                                   \
        if (!(be)->entry)                                                                  \
            return forge_error(FORGE_ERR_UNSUPPORTED, "backend %s does not support %s",    \
                               (be)->name, #entry);                                        \
    } while (0)

/* A fresh transient tensor of like's dtype shaped like `like` but with the last dim = last. */
forge_status op_new_like(forge_tape *tape, forge_tensor **out, const forge_tensor *like, int64_t last);
/* A fresh transient f32 tensor; op_new_dtype of another dtype (bf16 activations). */
forge_status op_new(forge_tape *tape, forge_tensor **out, int ndim, const int64_t *shape);
forge_status op_new_dtype(forge_tape *tape, forge_tensor **out, forge_dtype dtype, int ndim, const int64_t *shape);
/* A zeroed transient tensor (a gradient the op itself accumulates into). */
forge_status op_new_zeros(forge_tape *tape, forge_tensor **out, forge_dtype dtype, int ndim, const int64_t *shape);

/* The bf16 step (docs/mixed-precision.md): an activation in bf16 selects an op's bf16 kernels, which read the
 * parameters' bf16 working copy (t->working) for GEMM operands and embedding tables, and their fp32 masters for
 * biases and norm weights. */
static inline int op_is_bf16(const forge_tensor *t) { return t->dtype == FORGE_BF16; }
static inline forge_bf16 *forge_bf16p(const forge_tensor *t) { return (forge_bf16 *)t->data; }
/* Records out = a + b (computed by the caller, e.g. a fused residual norm) on the tape: its rule adds out's
 * gradient into a's and b's, in their dtype. */
forge_status op_record_add(forge_tape *tape, forge_tensor *out, forge_tensor *a, forge_tensor *b);
/* The working copy of a parameter a bf16 op reads, or FORGE_ERR_ARG naming the op. */
forge_status op_working(const char *op, const forge_tensor *param, const forge_bf16 **data);
/* rows = numel / last dim */
static inline int op_rows(const forge_tensor *t) { return (int)(t->numel / (size_t)t->shape[t->ndim - 1]); }
static inline int op_cols(const forge_tensor *t) { return (int)t->shape[t->ndim - 1]; }
forge_status op_check_last(const char *op, const forge_tensor *t, int64_t want, const char *what);
static inline float *op_grad_data(forge_tensor *g) { return g ? (float *)g->data : NULL; }

#endif
