/* bench_session.c: provenance and timer set-up shared by the backend suites. */
#include "bench_session.h"

#include <string.h>

#ifdef FORGE_WITH_CUDA
#include "harness_cuda.h"
#endif

forge_status forge_bench_session_begin(forge_bench_session *bs, forge_backend *be) {
    memset(bs, 0, sizeof *bs);
    forge_provenance_init_host(&bs->prov);
    bs->timer = forge_cpu_bench_timer();
    bs->cuda = be->kind == FORGE_DEVICE_CUDA;
    if (!bs->cuda) return FORGE_OK;
#ifdef FORGE_WITH_CUDA
    bs->device = forge_cuda_backend_device(be);
    FORGE_TRY(forge_cuda_provenance(&bs->prov, bs->device));
    FORGE_TRY(forge_cuda_bench_timer_create(&bs->timer, forge_cuda_backend_stream(be)));
    bs->timer_is_cuda = 1;
    return FORGE_OK;
#else
    return forge_error(FORGE_ERR_UNSUPPORTED, "bench: a cuda backend in a build without FORGE_WITH_CUDA");
#endif
}

forge_status forge_bench_session_end(forge_bench_session *bs, forge_harness *h, forge_status s) {
#ifdef FORGE_WITH_CUDA
    if (s == FORGE_OK && bs->cuda && h) s = forge_cuda_provenance_end(forge_harness_provenance(h), bs->device);
    if (bs->timer_is_cuda) forge_cuda_bench_timer_destroy(&bs->timer);
#endif
    bs->timer_is_cuda = 0;
    if (s == FORGE_OK && h) return forge_harness_close(h);
    forge_harness_free(h);
    return s;
}
