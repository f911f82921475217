/* tensor.c: dtype metadata (dtype.h) and shape printing. */
#include "tensor.h"

#include <stdio.h>

size_t forge_dtype_size(forge_dtype dtype) {
    static const size_t sizes[] = {4, 4, 2, 2};
    _Static_assert(sizeof sizes / sizeof sizes[0] == FORGE_DTYPE_COUNT, "dtype table out of step");
    return dtype < FORGE_DTYPE_COUNT ? sizes[dtype] : 0;
}

const char *forge_dtype_name(forge_dtype dtype) {
    static const char *names[] = {"f32", "i32", "u16", "bf16"};
    _Static_assert(sizeof names / sizeof names[0] == FORGE_DTYPE_COUNT, "dtype table out of step");
    return dtype < FORGE_DTYPE_COUNT ? names[dtype] : "?";
}

const char *forge_shape_str(const forge_tensor *t, char *buf, size_t cap) {
    size_t n = 0;
    n += snprintf(buf + n, cap - n, "(");
    for (int i = 0; i < t->ndim && n < cap; i++)
        n += snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, ")");
    return buf;
}
