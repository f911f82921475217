/*
 * attention_memory.h: peak pool memory of one attention forward + backward
 * through the real op path (ops/attention.c, tape, pool), shared by the CPU
 * suite (tests/test_flash.c) and the GPU parity binary.
 *
 * The figure is the peak above what was in use before the op (the input
 * qkv), so it is what the op itself costs: out, its saved tensor (lse or the
 * probabilities), out's gradient, qkv's gradient and the backward's scratch.
 */
#ifndef FORGE_TEST_ATTENTION_MEMORY_H
#define FORGE_TEST_ATTENTION_MEMORY_H

#include <stdlib.h>

#include "../../src/runtime/pool.h"
#include "../../src/runtime/tape.h"
#include "../../src/ops/ops.h"
#include "../../src/base/rng.h"

/* flash = 1: forge_op_flash_attention, else the materialised forge_op_attention.
 * *peak = peak bytes in use beyond the inputs. */
static inline forge_status attention_peak_bytes(forge_backend *be, int flash, int B, int T, int NH, int NKV,
                                                int HS, size_t *peak) {
    forge_pool *pool = NULL;
    forge_tape *tape = NULL;
    float *host = NULL;
    FORGE_TRY(forge_pool_create(&pool, be));
    forge_status s = forge_tape_create(&tape, pool);
    int64_t shape[3] = {B, T, (int64_t)(NH + 2 * NKV) * HS};
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS, nout = (size_t)B * T * NH * HS;
    forge_tensor *qkv = NULL, *out = NULL, *dout = NULL;
    if (s == FORGE_OK) s = forge_pool_tensor(pool, &qkv, FORGE_F32, 3, shape, 0);
    if (s == FORGE_OK) {
        host = malloc((n > nout ? n : nout) * sizeof(float));
        if (!host) s = forge_error(FORGE_ERR_OOM, "attention_peak_bytes: no host memory");
    }
    if (s == FORGE_OK) {
        forge_rng rng;
        forge_rng_seed(&rng, 77, 1);
        for (size_t i = 0; i < n; i++) host[i] = (float)(forge_rng_uniform(&rng) * 2.0 - 1.0);
        s = be->copy_to_device(be, qkv->data, host, n * sizeof(float));
        qkv->requires_grad = 1;
    }
    if (s == FORGE_OK) s = be->synchronize(be);
    size_t base = 0;
    if (s == FORGE_OK) {
        forge_pool_reset_peak(pool);
        base = forge_pool_get_stats(pool).bytes_in_use;
        forge_tape_set_recording(tape, 1);
        s = flash ? forge_op_flash_attention(tape, &out, qkv, NH, NKV, HS)
                  : forge_op_attention(tape, &out, qkv, NH, NKV, HS);
    }
    if (s == FORGE_OK) s = forge_tape_grad(tape, out, &dout);
    if (s == FORGE_OK) s = be->copy_to_device(be, dout->data, host, nout * sizeof(float));
    if (s == FORGE_OK) s = forge_tape_backward(tape);
    if (s == FORGE_OK) s = be->synchronize(be);
    if (s == FORGE_OK) *peak = forge_pool_get_stats(pool).peak_in_use - base;
    free(host);
    if (tape) {
        forge_tape_reset(tape);
        forge_tape_destroy(tape);
    }
    forge_pool_destroy(pool);
    return s;
}

#endif
