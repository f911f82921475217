/* op_common.c: output allocation and shape checks for the ops. */
#include "op_common.h"

#include <stdio.h>

forge_status op_new_dtype(forge_tape *tape, forge_tensor **out, forge_dtype dtype, int ndim, const int64_t *shape) {
    return forge_pool_tensor(forge_tape_pool(tape), out, dtype, ndim, shape, 0);
}

forge_status op_new(forge_tape *tape, forge_tensor **out, int ndim, const int64_t *shape) {
    return op_new_dtype(tape, out, FORGE_F32, ndim, shape);
}

forge_status op_new_zeros(forge_tape *tape, forge_tensor **out, forge_dtype dtype, int ndim, const int64_t *shape) {
    return forge_pool_tensor_zeros(forge_tape_pool(tape), out, dtype, ndim, shape, 0);
}

forge_status op_new_like(forge_tape *tape, forge_tensor **out, const forge_tensor *like, int64_t last) {
    int64_t shape[FORGE_MAX_DIMS];
    for (int i = 0; i < like->ndim; i++) shape[i] = like->shape[i];
    shape[like->ndim - 1] = last;
    return op_new_dtype(tape, out, like->dtype, like->ndim, shape);
}

forge_status op_working(const char *op, const forge_tensor *param, const forge_bf16 **data) {
    if (!param->working)
        return forge_error(FORGE_ERR_ARG, "%s: a bf16 activation with a parameter that has no bf16 working copy "
                                          "(the model was not created for --precision bf16)", op);
    *data = (const forge_bf16 *)param->working->data;
    return FORGE_OK;
}

forge_status op_check_last(const char *op, const forge_tensor *t, int64_t want, const char *what) {
    if (t->shape[t->ndim - 1] != want) {
        char buf[64];
        return forge_error(FORGE_ERR_ARG, "%s: %s has shape %s, expected last dimension %lld", op, what,
                           forge_shape_str(t, buf, sizeof buf), (long long)want);
    }
    return FORGE_OK;
}
