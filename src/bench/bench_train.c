/* bench_train.c: training steps on random tokens, timed end to end. */
#include "bench_train.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../backend/backend.h"
#include "../model/model.h"
#include "../train/optimizer.h"
#include "../util/rng.h"
#include "bench.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double forge_train_flops_per_token(long long params, int n_layers, int seq_len, int d_model) {
    return 6.0 * (double)params + 12.0 * n_layers * (double)seq_len * d_model;
}

typedef struct {
    const char *config;
    int B, T;
} bench_case;

static forge_status bench_one(FILE *out, forge_backend *be, const char *configs_dir, const bench_case *bc,
                              int steps, double peak_flops) {
    forge_model_config cfg;
    FORGE_TRY(forge_config_resolve(&cfg, bc->config, configs_dir));
    int B = bc->B, T = bc->T < cfg.context_length ? bc->T : cfg.context_length;
    forge_pool *pool = NULL;
    forge_tape *tape = NULL;
    forge_model *m = NULL;
    forge_optimizer *opt = NULL;
    forge_tensor *ids = NULL, *tgt = NULL;
    int32_t *host = malloc((size_t)B * T * 2 * sizeof(int32_t));
    double *times = malloc((size_t)steps * sizeof(double));
    forge_status s = host && times ? FORGE_OK : forge_error(FORGE_ERR_OOM, "bench: out of host memory");
    int64_t shape[2] = {B, T};
    if (s == FORGE_OK) s = forge_pool_create(&pool, be);
    if (s == FORGE_OK) s = forge_tape_create(&tape, pool);
    if (s == FORGE_OK) s = forge_model_create(&m, &cfg, pool, 1);
    forge_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    if (s == FORGE_OK) s = forge_optimizer_create(&opt, m, ac);
    if (s == FORGE_OK) s = forge_pool_tensor(pool, &ids, FORGE_I32, 2, shape, 1);
    if (s == FORGE_OK) s = forge_pool_tensor(pool, &tgt, FORGE_I32, 2, shape, 1);
    forge_rng rng;
    forge_rng_seed(&rng, 7, 0);
    for (int i = 0; host && i < B * T * 2; i++) host[i] = (int32_t)forge_rng_below(&rng, (uint64_t)cfg.vocab_size);
    if (s == FORGE_OK) s = be->copy_to_device(be, ids->data, host, (size_t)B * T * sizeof(int32_t));
    if (s == FORGE_OK) s = be->copy_to_device(be, tgt->data, host + B * T, (size_t)B * T * sizeof(int32_t));
    for (int step = -1; step < steps && s == FORGE_OK; step++) { /* step -1 is the warm-up */
        double t0 = now_s();
        forge_tensor *losses;
        s = forge_model_zero_grad(m);
        if (s == FORGE_OK) s = forge_model_forward(m, tape, ids, tgt, 1.0f / (B * T), &losses);
        if (s == FORGE_OK) s = forge_tape_backward(tape);
        forge_tape_reset(tape);
        if (s == FORGE_OK) s = forge_optimizer_grad_norm(opt);
        if (s == FORGE_OK) s = forge_optimizer_update(opt, 1e-4f);
        if (s == FORGE_OK) s = be->synchronize(be);
        if (step >= 0) times[step] = now_s() - t0;
    }
    if (s == FORGE_OK) {
        qsort(times, (size_t)steps, sizeof *times, cmp_double);
        double med = times[steps / 2];
        double tok_s = B * T / med;
        double flops = forge_train_flops_per_token((long long)m->n_elements, cfg.n_layers, T, cfg.d_model);
        forge_pool_stats ps = forge_pool_get_stats(pool);
        fprintf(out, "%-10s %-5s B=%-3d T=%-5d params %10zu | step %8.2f ms (min %.2f, max %.2f) | %9.0f tok/s | "
                     "peak %7.1f MiB | %6.1f GFLOP/s | MFU %5.1f%%\n",
                cfg.name, be->name, B, T, m->n_elements, med * 1e3, times[0] * 1e3, times[steps - 1] * 1e3,
                tok_s, ps.peak_reserved / 1048576.0, flops * tok_s / 1e9,
                peak_flops > 0 ? 100.0 * flops * tok_s / peak_flops : 0.0);
        fflush(out);
    }
    forge_optimizer_free(opt);
    forge_model_free(m);
    forge_tape_destroy(tape);
    forge_pool_destroy(pool);
    free(host);
    free(times);
    return s;
}

forge_status forge_bench_train(FILE *out, const char *device, const char *configs_dir, int steps) {
    forge_backend *be;
    FORGE_TRY(forge_backend_create(&be, device));
    int cuda = strcmp(device, "cuda") == 0;
    double peak = cuda ? 67e12 : forge_bench_cpu_peak_flops();
    fprintf(out, "== forge bench train (%s, fp32; MFU against %.1f GFLOP/s%s; median of %d steps)\n", be->name,
            peak / 1e9, cuda ? ", the H200's dense fp32 datasheet rate" : ", the measured FMA peak of all threads",
            steps);
    static const bench_case cpu_cases[] = {{"tiny", 16, 128}, {"gpt-10m", 4, 256}};
    static const bench_case cuda_cases[] = {{"gpt-10m", 32, 512}, {"gpt2-124m", 8, 1024}};
    const bench_case *cases = cuda ? cuda_cases : cpu_cases;
    forge_status s = FORGE_OK;
    for (int i = 0; i < 2 && s == FORGE_OK; i++) s = bench_one(out, be, configs_dir, &cases[i], steps, peak);
    forge_backend_destroy(be);
    return s;
}
