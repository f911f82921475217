/* backend_nocuda.c: linked into CPU-only builds in place of the CUDA backend. */
#include "devices.h"

forge_status forge_cuda_backend_create(forge_backend **out, const forge_runtime_options *options) {
    (void)out;
    (void)options;
    return forge_error(FORGE_ERR_UNSUPPORTED,
                       "this forge was built without CUDA: build it with `make cuda` on a machine "
                       "with nvcc, and run build/cuda/forge");
}
