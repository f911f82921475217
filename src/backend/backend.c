/*
 * backend.c: the factory every caller goes through, and what the op list
 * (op_list.h) says about each op at run time: its name, dtype, flags and its
 * entry in a backend's table.
 */
#include "backend.h"
#include "devices.h"

#include <stddef.h>

forge_status forge_backend_create(forge_backend **out, forge_device_kind kind, const forge_runtime_options *options) {
    if (!out) return forge_error(FORGE_ERR_ARG, "forge_backend_create: out is NULL");
    *out = NULL;
    forge_runtime_options o;
    if (options) o = *options;
    else forge_runtime_options_default(&o);
    o.device = kind;
    switch (kind) {
    case FORGE_DEVICE_CPU: return forge_cpu_backend_create(out, &o);
    case FORGE_DEVICE_CUDA: return forge_cuda_backend_create(out, &o);
    default: break;
    }
    return forge_error(FORGE_ERR_ARG, "forge_backend_create: unknown device kind %d (expected cpu or cuda)", (int)kind);
}

forge_status forge_backend_create_cpu(forge_backend **out, int threads, int reference) {
    forge_runtime_options o;
    forge_runtime_options_default(&o);
    o.threads = threads;
    o.cpu_reference = reference;
    return forge_backend_create(out, FORGE_DEVICE_CPU, &o);
}

void forge_backend_destroy(forge_backend *be) {
    if (be && be->destroy) be->destroy(be);
}

#define OP_NAME(name, dtype, flags, args, cases) #name,
#define OP_DTYPE(name, dtype, flags, args, cases) dtype,
#define OP_FLAGS(name, dtype, flags, args, cases) flags,
static const char *const OP_NAMES[FORGE_OP_COUNT] = {FORGE_OP_LIST(OP_NAME, FORGE_OP_NOTHING, FORGE_OP_NOTHING)};
static const forge_dtype OP_DTYPES[FORGE_OP_COUNT] = {FORGE_OP_LIST(OP_DTYPE, FORGE_OP_NOTHING, FORGE_OP_NOTHING)};
static const unsigned OP_FLAG_BITS[FORGE_OP_COUNT] = {FORGE_OP_LIST(OP_FLAGS, FORGE_OP_NOTHING, FORGE_OP_NOTHING)};

const char *forge_op_name(forge_op op) { return (unsigned)op < FORGE_OP_COUNT ? OP_NAMES[op] : "?"; }
forge_dtype forge_op_dtype(forge_op op) { return (unsigned)op < FORGE_OP_COUNT ? OP_DTYPES[op] : FORGE_DTYPE_COUNT; }
unsigned forge_op_flags(forge_op op) { return (unsigned)op < FORGE_OP_COUNT ? OP_FLAG_BITS[op] : 0u; }

const void *forge_backend_op(const forge_backend *be, forge_op op) {
#define OP_ENTRY(name, dtype, flags, args, cases) \
    case FORGE_OP_##name: return (const void *)be->name;
    switch (op) {
        FORGE_OP_LIST(OP_ENTRY, FORGE_OP_NOTHING, FORGE_OP_NOTHING)
    default: return NULL;
    }
#undef OP_ENTRY
}
