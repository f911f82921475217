/* test_core.c: status messages, the pooled allocator, the autograd tape. */
#include <string.h>

#include "../src/backend/backend.h"
#include "../src/runtime/comm.h"
#include "../src/runtime/pool.h"
#include "../src/runtime/tape.h"
#include "../src/ops/ops.h"
#include "test.h"

static void test_status(void) {
    TEST_CASE("status: message, context and exit codes");
    forge_status s = forge_error(FORGE_ERR_CONFIG, "x.json: key \"%s\" bad", "d_model");
    CHECK(s == FORGE_ERR_CONFIG);
    forge_error_context(s, "loading %s: ", "x.json");
    CHECK(strcmp(forge_error_message(), "loading x.json: x.json: key \"d_model\" bad") == 0);
    CHECK(forge_status_exit_code(FORGE_ERR_CONFIG) == 2);
    CHECK(forge_status_exit_code(FORGE_ERR_IO) == 1);
    CHECK(forge_status_exit_code(FORGE_OK) == 0);
}

static void test_pool_recycles(void) {
    TEST_CASE("pool: memory recycled every micro-batch; peak independent of accumulation");
    forge_backend *be;
    CHECK_OK(forge_backend_create_cpu(&be, 1, 1));
    size_t peaks[2];
    int accum[2] = {1, 8};
    for (int k = 0; k < 2; k++) {
        forge_pool *pool;
        CHECK_OK(forge_pool_create(&pool, be));
        for (int micro = 0; micro < accum[k]; micro++) {
            int64_t shapes[3][2] = {{17, 33}, {17, 128}, {1, 4000}};
            for (int i = 0; i < 3; i++) {
                forge_tensor *t;
                CHECK_OK(forge_pool_tensor(pool, &t, FORGE_F32, 2, shapes[i], 0));
            }
            forge_pool_release_transient(pool);
        }
        forge_pool_stats st = forge_pool_get_stats(pool);
        peaks[k] = st.peak_reserved;
        CHECK(st.bytes_in_use == 0);
        if (accum[k] == 8) CHECK(st.backend_allocs == 3 && st.cache_hits == 21);
        forge_pool_destroy(pool);
    }
    CHECK(peaks[0] == peaks[1]);
    forge_backend_destroy(be);
}

static void test_pool_persistent(void) {
    TEST_CASE("pool: persistent tensors survive release_transient; zeros are zero");
    forge_backend *be;
    CHECK_OK(forge_backend_create_cpu(&be, 1, 1));
    forge_pool *pool;
    CHECK_OK(forge_pool_create(&pool, be));
    int64_t shape[1] = {1000};
    forge_tensor *p, *t;
    CHECK_OK(forge_pool_tensor_zeros(pool, &p, FORGE_F32, 1, shape, 1));
    CHECK_OK(forge_pool_tensor(pool, &t, FORGE_F32, 1, shape, 0));
    for (int i = 0; i < 1000; i++) CHECK(forge_f32(p)[i] == 0.0f);
    forge_pool_release_transient(pool);
    forge_pool_stats st = forge_pool_get_stats(pool);
    CHECK(st.bytes_in_use >= 4000 && st.bytes_in_use < 8000);
    int64_t bad[1] = {0};
    CHECK(forge_pool_tensor(pool, &t, FORGE_F32, 1, bad, 0) == FORGE_ERR_ARG);
    forge_pool_destroy(pool);
    forge_backend_destroy(be);
}

static void test_pool_pins(void) {
    TEST_CASE("pool: the blocks a recording used are pinned: reusable between replays, kept by trim, checked free");
    forge_backend *be;
    CHECK_OK(forge_backend_create_cpu(&be, 1, 1));
    forge_pool *pool;
    CHECK_OK(forge_pool_create(&pool, be));
    int64_t small[1] = {1000}, big[1] = {300000};
    forge_tensor *keep, *a, *b;
    CHECK_OK(forge_pool_tensor(pool, &keep, FORGE_F32, 1, small, 1)); /* before the recording: not pinned */
    forge_pool_record_begin(pool);
    CHECK_OK(forge_pool_tensor(pool, &a, FORGE_F32, 1, big, 0));
    CHECK_OK(forge_pool_tensor(pool, &b, FORGE_F32, 1, small, 1)); /* outlives the recording: its holder's */
    void *scratch = a->data;
    forge_pool_release(pool, a);
    CHECK_OK(forge_pool_record_end(pool));
    CHECK(forge_pool_pinned_free(pool));
    /* handed out again (an evaluation between replays): not free until released */
    CHECK_OK(forge_pool_tensor(pool, &a, FORGE_F32, 1, big, 0));
    CHECK(a->data == scratch && !forge_pool_pinned_free(pool));
    forge_pool_release(pool, a);
    CHECK(forge_pool_pinned_free(pool));
    /* trim returns the unpinned cached blocks only: the scratch stays reserved, at the same address */
    forge_pool_release(pool, b);
    size_t before = forge_pool_get_stats(pool).bytes_reserved;
    forge_pool_trim(pool);
    size_t after = forge_pool_get_stats(pool).bytes_reserved;
    CHECK(after < before && after >= 300000 * sizeof(float));
    CHECK_OK(forge_pool_tensor(pool, &a, FORGE_F32, 1, big, 0));
    CHECK(a->data == scratch);
    forge_pool_release(pool, a);
    forge_pool_unpin(pool);
    forge_pool_trim(pool);
    CHECK(forge_pool_get_stats(pool).bytes_reserved == keep->block_bytes);
    forge_pool_destroy(pool);
    forge_backend_destroy(be);
}

/* y = sum((a*b-ish): out = gelu(x W^T) + x ; checks the tape's accumulation on a
 * tensor used twice against finite differences of the whole composition. */
static void test_tape_composition(void) {
    TEST_CASE("tape: a tensor used twice accumulates both gradients (finite differences)");
    forge_backend *be;
    CHECK_OK(forge_backend_create_cpu(&be, 1, 1));
    forge_pool *pool;
    forge_tape *tape;
    CHECK_OK(forge_pool_create(&pool, be));
    CHECK_OK(forge_tape_create(&tape, pool));
    int64_t xs[2] = {3, 5}, ws[2] = {5, 5};
    forge_tensor *x, *w;
    CHECK_OK(forge_pool_tensor(pool, &x, FORGE_F32, 2, xs, 1));
    CHECK_OK(forge_pool_tensor(pool, &w, FORGE_F32, 2, ws, 1));
    x->requires_grad = w->requires_grad = 1;
    for (int i = 0; i < 15; i++) forge_f32(x)[i] = 0.1f * (float)((i * 7) % 11) - 0.5f;
    for (int i = 0; i < 25; i++) forge_f32(w)[i] = 0.05f * (float)((i * 5) % 13) - 0.3f;
    float R[15];
    for (int i = 0; i < 15; i++) R[i] = 0.3f + 0.1f * (float)(i % 4);
    /* objective L = sum(R * (gelu(x W^T) + x)) */
#define OBJECTIVE(result)                                                \
    do {                                                                 \
        forge_tensor *h_, *g_, *y_;                                      \
        CHECK_OK(forge_op_matmul(tape, &h_, x, w, NULL));                \
        CHECK_OK(forge_op_gelu(tape, &g_, h_));                          \
        CHECK_OK(forge_op_add(tape, &y_, g_, x));                        \
        double l_ = 0;                                                   \
        for (int i_ = 0; i_ < 15; i_++) l_ += R[i_] * forge_f32(y_)[i_]; \
        result = l_;                                                     \
        last_y = y_;                                                     \
    } while (0)
    forge_tensor *last_y = NULL;
    double L;
    OBJECTIVE(L);
    (void)L;
    forge_tensor *dy;
    CHECK_OK(forge_tape_grad(tape, last_y, &dy));
    memcpy(dy->data, R, sizeof R);
    CHECK_OK(forge_tape_backward(tape));
    float gx[15];
    memcpy(gx, x->grad->data, sizeof gx);
    forge_tape_reset(tape);
    CHECK(x->grad == NULL); /* transient grads of persistent tensors are dropped */
    forge_tape_set_recording(tape, 0);
    double max_err = 0;
    for (int i = 0; i < 15; i++) {
        float keep = forge_f32(x)[i];
        double lp, lm, h = 1e-2;
        forge_f32(x)[i] = keep + (float)h;
        OBJECTIVE(lp);
        forge_tape_reset(tape);
        forge_f32(x)[i] = keep - (float)h;
        OBJECTIVE(lm);
        forge_tape_reset(tape);
        forge_f32(x)[i] = keep;
        double num = (lp - lm) / (2 * h);
        double err = fabs(num - gx[i]);
        if (err > max_err) max_err = err;
    }
#undef OBJECTIVE
    CHECK_MSG(max_err < 2e-3, "max |analytic - numeric| = %g", max_err);
    CHECK(forge_tape_size(tape) == 0);
    forge_tape_destroy(tape);
    forge_pool_destroy(pool);
    forge_backend_destroy(be);
}

static void test_unsupported_op(void) {
    TEST_CASE("ops: a backend without an entry reports unsupported, naming it");
    forge_backend *be;
    CHECK_OK(forge_backend_create_cpu(&be, 1, 1));
    forge_pool *pool;
    forge_tape *tape;
    CHECK_OK(forge_pool_create(&pool, be));
    CHECK_OK(forge_tape_create(&tape, pool));
    int64_t s[2] = {2, 4};
    forge_tensor *x, *y;
    CHECK_OK(forge_pool_tensor(pool, &x, FORGE_F32, 2, s, 0));
    __typeof__(be->gelu_forward) saved = be->gelu_forward;
    be->gelu_forward = NULL;
    CHECK(forge_op_gelu(tape, &y, x) == FORGE_ERR_UNSUPPORTED);
    CHECK(strstr(forge_error_message(), "gelu_forward") != NULL);
    be->gelu_forward = saved;
    forge_tape_destroy(tape);
    forge_pool_destroy(pool);
    forge_backend_destroy(be);
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_bf16(void) {
    TEST_CASE("bf16: round to nearest even, exact widening, NaN and infinities");
    CHECK(forge_bf16_from_f32(1.0f) == 0x3f80 && forge_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(forge_bf16_from_f32(bits_f32(0x3f808000u)) == 0x3f80); /* a tie: to the even 0x3f80 */
    CHECK(forge_bf16_from_f32(bits_f32(0x3f818000u)) == 0x3f82); /* a tie: to the even 0x3f82 */
    CHECK(forge_bf16_from_f32(bits_f32(0x3f808001u)) == 0x3f81); /* above the tie: up */
    CHECK(forge_bf16_from_f32(bits_f32(0xbf807fffu)) == 0xbf80); /* below the tie, negative: down in magnitude */
    CHECK(forge_bf16_from_f32(bits_f32(0x7f7fffffu)) == 0x7f80); /* FLT_MAX rounds to +inf */
    CHECK(forge_bf16_from_f32(bits_f32(0xff800000u)) == 0xff80); /* -inf stays */
    const forge_bf16 nan = forge_bf16_from_f32(bits_f32(0x7f800001u)); /* a signalling NaN whose top half is inf */
    CHECK(isnan(forge_bf16_to_f32(nan)));
    CHECK(forge_bf16_from_f32(bits_f32(0x00010000u)) == 0x0001); /* subnormals keep their top half */
    for (uint32_t u = 0; u < 0x7f800000u; u += 0x00012345u) { /* every bf16 widens and narrows back exactly */
        const forge_bf16 h = (forge_bf16)(u >> 16);
        CHECK(forge_bf16_from_f32(forge_bf16_to_f32(h)) == h);
        const float f = bits_f32(u);
        if (u >= 0x00800000u && u < 0x7f7f0000u) /* normal, and not rounding up past FLT_MAX: half an ulp */
            CHECK(fabsf(forge_round_bf16(f) - f) <= ldexpf(fabsf(f), -8));
    }
}

static void test_comm_ranges(void) {
    TEST_CASE("comm: the ranks' ranges tile the block in order (ceil(n / N) each, shorter or empty at the end)");
    static const size_t ns[] = {0, 1, 2, 7, 8, 9, 124672, 1000003};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int size = 1; size <= 9; size++) {
            size_t next = 0, shard = (ns[i] + (size_t)size - 1) / (size_t)size;
            for (int r = 0; r < size; r++) {
                size_t lo, hi;
                forge_comm_range(ns[i], size, r, &lo, &hi);
                CHECK_MSG(lo == next && hi >= lo && hi - lo <= shard && hi <= ns[i], "n %zu size %d rank %d: [%zu, %zu)",
                          ns[i], size, r, lo, hi);
                next = hi;
            }
            CHECK_MSG(next == ns[i], "n %zu size %d: the ranges end at %zu", ns[i], size, next);
        }
}

static void test_comm_single(void) {
    TEST_CASE("comm: the single-rank communicator is rank 0 of 1 and its collectives leave the data as it is");
    forge_comm *c;
    forge_backend *be;
    CHECK_OK(forge_comm_create_single(&c));
    CHECK_OK(forge_backend_create_cpu(&be, 1, 0));
    CHECK(forge_comm_rank(c) == 0 && forge_comm_size(c) == 1 && forge_comm_local_size(c) == 1);
    CHECK(strcmp(forge_comm_name(c), "single") == 0);
    float x[5] = {1, -2, 3.5f, 0, 1e-30f}, y[5];
    memcpy(y, x, sizeof x);
    CHECK_OK(forge_comm_all_reduce_sum(c, be, x, 5));
    CHECK_OK(forge_comm_reduce_scatter_sum(c, be, x, 5));
    CHECK_OK(forge_comm_all_gather(c, be, x, 5, sizeof(float)));
    CHECK_OK(forge_comm_broadcast(c, be, x, sizeof x, 0));
    CHECK(memcmp(x, y, sizeof x) == 0);
    float full[5] = {0};
    CHECK_OK(forge_comm_gather(c, be, x, 5, full, 0));
    CHECK(memcmp(full, y, sizeof y) == 0);
    int any = -1;
    CHECK_OK(forge_comm_any(c, 0, &any));
    CHECK(any == 0);
    CHECK_OK(forge_comm_any(c, 3, &any));
    CHECK(any == 1);
    CHECK_OK(forge_comm_barrier(c));
    forge_comm_abort(c, 1); /* returns: one rank has no job to end */
    forge_comm_destroy(c);
    forge_backend_destroy(be);
    CHECK(forge_comm_create_nccl(&c, 1.0) == FORGE_ERR_UNSUPPORTED && c == NULL);
    CHECK(strstr(forge_error_message(), "NCCL") != NULL);
    forge_error_clear();
}

void suite_core(void) {
    test_bf16();
    test_status();
    test_pool_recycles();
    test_pool_persistent();
    test_pool_pins();
    test_tape_composition();
    test_unsupported_op();
    test_comm_ranges();
    test_comm_single();
}
