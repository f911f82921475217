/*
 * attention_bench.c: the entry of `forge bench attention`. The cells live in
 * src/bench/cuda/attention_cells.cu (every cell is a GPU kernel); this file
 * only decides whether the suite can run in this build and on this device.
 */
#include <string.h>

#include "attention_bench.h"

/* Both entries time GPU kernels only: any device but cuda is refused, naming the command (what) and the device. */
static forge_status attention_device(const char *what, const char *device) {
    if (!device || strcmp(device, "cuda") != 0)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: times GPU kernels only; run it with --device cuda (got --device %s)", what,
                           device ? device : "(none)");
    return FORGE_OK;
}

forge_status forge_bench_attention(FILE *out, const char *device, int reps, int quick) {
    FORGE_TRY(attention_device("forge bench attention", device));
#ifdef FORGE_WITH_CUDA
    return forge_bench_attention_cuda(out, reps, quick);
#else
    (void)out;
    (void)reps;
    (void)quick;
    return forge_error(FORGE_ERR_UNSUPPORTED,
                       "forge bench attention: this is the CPU-only build; build the CUDA one (make cuda) and run "
                       "build/cuda/forge bench attention --device cuda");
#endif
}

forge_status forge_bench_attention_paired(FILE *out, const char *device, const char *command, int rounds,
                                          int per_round) {
    FORGE_TRY(attention_device("forge bench attention --baseline", device));
#ifdef FORGE_WITH_CUDA
    return forge_bench_attention_paired_cuda(out, command, rounds, per_round);
#else
    (void)out;
    (void)command;
    (void)rounds;
    (void)per_round;
    return forge_error(FORGE_ERR_UNSUPPORTED,
                       "forge bench attention --baseline: this is the CPU-only build; build the CUDA one (make cuda)");
#endif
}
