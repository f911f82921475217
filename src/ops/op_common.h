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

/* A fresh transient f32 tensor shaped like `like` but with the last dim = last. */
forge_status op_new_like(forge_tape *tape, forge_tensor **out, const forge_tensor *like, int64_t last);
forge_status op_new(forge_tape *tape, forge_tensor **out, int ndim, const int64_t *shape);
/* rows = numel / last dim */
static inline int op_rows(const forge_tensor *t) { return (int)(t->numel / (size_t)t->shape[t->ndim - 1]); }
static inline int op_cols(const forge_tensor *t) { return (int)t->shape[t->ndim - 1]; }
forge_status op_check_last(const char *op, const forge_tensor *t, int64_t want, const char *what);
static inline float *op_grad_data(forge_tensor *g) { return g ? (float *)g->data : NULL; }

#endif
