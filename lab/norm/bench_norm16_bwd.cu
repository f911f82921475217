/*
 * bench_norm16_bwd.cu: `forge-lab bench norm16-bwd [--reps N]`: the bf16 norm backward's fused kernel (dinp and the
 * dweight/dbias partials in one pass, then reduce.cu's ordered finish), interleaved round by round on the same
 * inputs, at gpt2-124m's LayerNorm (N = 16384, C = 768, accumulate = 1 and 0) and gpt-25m's RMSNorm (N = 16384,
 * C = 512, accumulate = 1). Contenders:
 *   baseline  the fused kernel with one row per warp loaded ahead in registers (lab/norm/norm16_bwd_v0.cuh), then
 *             reduce.cu's cuda_colsum_finish per output (the previous default)
 *   src       the public op through the CUDA backend (norm_bf16.cu: norm_bf16_fused.cuh's ring with its default
 *             stages, then norm_fused_finish: both outputs in one launch, loads batched)
 *   src+colsum the src kernel with the baseline's finish (what the kernel alone gains)
 *   stages S  the ring kernel with S row slots per warp (lab instantiations of norm_bf16_fused.cuh), finished as src
 *   2/SM st S the ring kernel with S slots on twice the blocks (2 per SM, half the rows each: another partition,
 *             so dweight/dbias sum in another order and are checked within tolerance only)
 * Before each timed run dinp is restored and the L2 flushed (a 256 MB memset), outside the timing; each timing is
 * cudaEvents around the kernel and its finish launches on the backend's stream. Per contender: its resident
 * blocks per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor; the grid is 1 or 2 per SM), the median us, the
 * HBM bandwidth it implies (dout, inp read, dinp written, accumulate: dinp read too), the median per-round ratio
 * baseline / contender with a 95% bootstrap CI, and the bits of its outputs against the baseline's: dinp must be
 * bitwise equal (PASS/FAIL; also checked against the CPU backend for the src op), dweight/dbias "equal" (same bits)
 * or "tol" (another summation order: |diff| / max(1, |value|) within the op walker's SUM(N)) or FAIL. Exit status 1
 * on any FAIL.
 * Measurements: lab/notes/norm.md.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "../lab.h"
#include "../lab_stats.h"
#include "norm16_bwd_v0.cuh"
#include "norm_lab.h"

#define NBB_TRY(x)                                                                                                 \
    do {                                                                                                           \
        cudaError_t e_ = (x);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "forge-lab bench norm16-bwd: %s: %s\n", #x, cudaGetErrorString(e_));                 \
            return 1;                                                                                              \
        }                                                                                                          \
    } while (0)

#define NBB_FLUSH_BYTES ((size_t)256 << 20)

typedef struct {
    const char *name;
    int ln, N, C, acc;
} nbb_shape;

typedef struct {
    forge_bf16 *dinp;
    float *dweight, *dbias;
    const forge_bf16 *dout, *inp;
    const float *weight, *mean, *rstd;
} nbb_args;

/* contenders: 0 baseline, 1 src, then these lab ones (those whose ring fits and which differ from src): S row slots
 * per warp (0: the default's), with the default grid (1 block per SM) or 2 blocks per SM (another partition of the
 * rows: dweight/dbias in another order), finished by norm_fused_finish or (colsum) by reduce.cu's two
 * cuda_colsum_finish launches as the baseline is */
typedef struct {
    int stages, per_sm, colsum;
} nbb_lab;
static const nbb_lab NBB_LAB[] = {{0, 1, 1}, {2, 1, 0}, {3, 1, 0}, {4, 1, 0}, {5, 1, 0},
                                  {6, 1, 0}, {8, 1, 0}, {2, 2, 0}, {3, 2, 0}};
#define NBB_NLAB ((int)(sizeof NBB_LAB / sizeof NBB_LAB[0]))
#define NBB_SM_SMEM (228 * 1024) /* shared memory of an SM; each block reserves 1 KB more */

template <int CH>
static int nbb_stages(nbb_lab l) {
    return l.stages ? l.stages : norm_fused_stages<CH>();
}

template <bool LN, bool ACC, int CH>
static bool nbb_lab_ok(nbb_lab l) {
    int smem = 0;
    switch (nbb_stages<CH>(l)) {
    case 2: smem = norm_fused_smem<LN, ACC, CH, 2>(); break;
    case 3: smem = norm_fused_smem<LN, ACC, CH, 3>(); break;
    case 4: smem = norm_fused_smem<LN, ACC, CH, 4>(); break;
    case 5: smem = norm_fused_smem<LN, ACC, CH, 5>(); break;
    case 6: smem = norm_fused_smem<LN, ACC, CH, 6>(); break;
    case 8: smem = norm_fused_smem<LN, ACC, CH, 8>(); break;
    default: return false;
    }
    if (l.per_sm == 1) return smem <= NB_SMEM_MAX && (l.colsum || nbb_stages<CH>(l) != norm_fused_stages<CH>());
    return l.per_sm * (smem + 1024) <= NBB_SM_SMEM;
}

template <bool LN, bool ACC, int CH, int S>
static cudaError_t nbb_launch_stages(cuda_ctx *ctx, unsigned R, const nbb_args *a, int N, int C, int rpb) {
    if constexpr (norm_fused_smem<LN, ACC, CH, S>() <= NB_SMEM_MAX)
        return norm_fused_launch<LN, ACC, CH, S>(ctx->stream, 0, R, a->dinp, ctx->ws, a->dout, a->inp, a->weight,
                                                 a->mean, a->rstd, N, C, rpb);
    else
        return cudaErrorInvalidValue;
}

/* contender v of shape (LN, ACC, CH): the kernel and the finish launches on ctx's stream */
template <bool LN, bool ACC, int CH>
static int nbb_run_t(forge_backend *be, int v, const nbb_args *a, int N, int C) {
    cuda_ctx *ctx = cuda_get_ctx(be);
    if (v == 1) {
        const forge_status st =
            LN ? be->layernorm_backward_bf16(be, a->dinp, a->dweight, a->dbias, a->dout, a->inp, a->weight, a->mean,
                                             a->rstd, N, C, ACC ? 1 : 0)
               : be->rmsnorm_backward_bf16(be, a->dinp, a->dweight, a->dout, a->inp, a->weight, a->rstd, N, C,
                                           ACC ? 1 : 0);
        if (st != FORGE_OK) {
            fprintf(stderr, "forge-lab bench norm16-bwd: the op: %s\n", forge_error_message());
            return 1;
        }
        return 0;
    }
    const int per_sm = v >= 2 ? NBB_LAB[v - 2].per_sm : 1;
    int rpb;
    const int R = norm_fused_grid(N, C, LN ? 2 : 1, per_sm * ctx->num_sms, &rpb);
    if (v == 0) {
        nb0_fused_kernel<LN, ACC, CH><<<R, NB_THREADS, 0, ctx->stream>>>(a->dinp, ctx->ws, a->dout, a->inp, a->weight,
                                                                         a->mean, a->rstd, N, C, rpb);
        NBB_TRY(cudaGetLastError());
    } else {
        cudaError_t e = cudaErrorInvalidValue;
        switch (nbb_stages<CH>(NBB_LAB[v - 2])) {
        case 2: e = nbb_launch_stages<LN, ACC, CH, 2>(ctx, R, a, N, C, rpb); break;
        case 3: e = nbb_launch_stages<LN, ACC, CH, 3>(ctx, R, a, N, C, rpb); break;
        case 4: e = nbb_launch_stages<LN, ACC, CH, 4>(ctx, R, a, N, C, rpb); break;
        case 5: e = nbb_launch_stages<LN, ACC, CH, 5>(ctx, R, a, N, C, rpb); break;
        case 6: e = nbb_launch_stages<LN, ACC, CH, 6>(ctx, R, a, N, C, rpb); break;
        case 8: e = nbb_launch_stages<LN, ACC, CH, 8>(ctx, R, a, N, C, rpb); break;
        }
        NBB_TRY(e);
    }
    if (v >= 2 && !NBB_LAB[v - 2].colsum) {
        NBB_TRY(norm_fused_finish(ctx->stream, 0, LN, a->dweight, a->dbias, ctx->ws, R, C));
    } else if (cuda_colsum_finish(ctx, a->dweight, ctx->ws, R, C) != FORGE_OK ||
               (LN && cuda_colsum_finish(ctx, a->dbias, ctx->ws + (size_t)R * C, R, C) != FORGE_OK)) {
        fprintf(stderr, "forge-lab bench norm16-bwd: finish: %s\n", forge_error_message());
        return 1;
    }
    return 0;
}

template <bool LN, bool ACC, int CH, int S>
static int nbb_occ_stages() {
    int n = 0;
    if constexpr (norm_fused_smem<LN, ACC, CH, S>() <= NB_SMEM_MAX) {
        auto kern = norm_backward_fused_bf16_kernel<LN, ACC, CH, S>;
        constexpr int smem = norm_fused_smem<LN, ACC, CH, S>();
        if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, NB_THREADS, smem) != cudaSuccess)
            n = -1;
    }
    return n;
}

/* resident blocks per SM of contender v's kernel (-1: the query failed) */
template <bool LN, bool ACC, int CH>
static int nbb_occ_t(int v) {
    if (v == 0) {
        int n = 0;
        return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, nb0_fused_kernel<LN, ACC, CH>, NB_THREADS, 0) ==
                       cudaSuccess
                   ? n
                   : -1;
    }
    switch (v == 1 ? norm_fused_stages<CH>() : nbb_stages<CH>(NBB_LAB[v - 2])) {
    case 2: return nbb_occ_stages<LN, ACC, CH, 2>();
    case 3: return nbb_occ_stages<LN, ACC, CH, 3>();
    case 4: return nbb_occ_stages<LN, ACC, CH, 4>();
    case 5: return nbb_occ_stages<LN, ACC, CH, 5>();
    case 6: return nbb_occ_stages<LN, ACC, CH, 6>();
    case 8: return nbb_occ_stages<LN, ACC, CH, 8>();
    }
    return -1;
}

/* the shapes' template arguments: (LN, ACC, CH = ceil(C / 256)) */
#define NBB_DISPATCH(fn, ...)                                                                                      \
    (s->ln && s->acc && ch == 3    ? fn<true, true, 3>(__VA_ARGS__)                                              \
     : s->ln && !s->acc && ch == 3 ? fn<true, false, 3>(__VA_ARGS__)                                             \
     : !s->ln && s->acc && ch == 2 ? fn<false, true, 2>(__VA_ARGS__)                                             \
                                   : fn<false, true, 2>(__VA_ARGS__))

static bool nbb_supported(const nbb_shape *s) {
    const int ch = (s->C + 255) / 256;
    return (s->ln && ch == 3) || (!s->ln && s->acc && ch == 2);
}

static int nbb_run(forge_backend *be, const nbb_shape *s, int v, const nbb_args *a) {
    const int ch = (s->C + 255) / 256;
    return NBB_DISPATCH(nbb_run_t, be, v, a, s->N, s->C);
}

static bool nbb_present(const nbb_shape *s, int v) {
    if (v < 2) return true;
    const int ch = (s->C + 255) / 256;
    return NBB_DISPATCH(nbb_lab_ok, NBB_LAB[v - 2]);
}

static int nbb_occ(const nbb_shape *s, int v) {
    const int ch = (s->C + 255) / 256;
    return NBB_DISPATCH(nbb_occ_t, v);
}

static uint64_t nbb_lcg(uint64_t *x) {
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 11;
}
static float nbb_uniform(uint64_t *x, float lo, float hi) {
    return lo + (hi - lo) * (float)((double)nbb_lcg(x) * (1.0 / 9007199254740992.0));
}
static forge_bf16 nbb_bf16(float f) { /* round to nearest even (no NaN here) */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (forge_bf16)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* max |got - ref| / max(1, |ref|) (dweight, dbias are sums of N terms of size ~1: hundreds at N 16384, where the
 * walker's absolute SUM(N) would be tight); *same = bitwise equal */
static double nbb_maxdiff(const std::vector<float> &got, const std::vector<float> &ref, bool *same) {
    double m = 0.0;
    *same = memcmp(got.data(), ref.data(), ref.size() * 4) == 0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double d = fabs((double)got[i] - (double)ref[i]) / fmax(1.0, fabs((double)ref[i]));
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static int nbb_shape_run(forge_backend *be, forge_backend *cpu, const nbb_shape *s, int reps) {
    if (!nbb_supported(s)) {
        fprintf(stderr, "forge-lab bench norm16-bwd: %s: no instantiation for C = %d\n", s->name, s->C);
        return 1;
    }
    cuda_ctx *ctx = cuda_get_ctx(be);
    const size_t n = (size_t)s->N * s->C;
    const int N = s->N, C = s->C;
    std::vector<forge_bf16> h_dout(n), h_inp(n), h_dinp(n);
    std::vector<float> h_w(C), h_mean(N), h_rstd(N);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        h_dout[i] = nbb_bf16(nbb_uniform(&x, -1.0f, 1.0f));
        h_inp[i] = nbb_bf16(nbb_uniform(&x, -2.0f, 2.0f));
        h_dinp[i] = nbb_bf16(nbb_uniform(&x, -1.0f, 1.0f));
    }
    for (int c = 0; c < C; c++) h_w[c] = nbb_uniform(&x, -1.0f, 1.0f);
    for (int r = 0; r < N; r++) {
        h_mean[r] = s->ln ? nbb_uniform(&x, -0.5f, 0.5f) : 0.0f;
        h_rstd[r] = nbb_uniform(&x, 0.5f, 2.0f);
    }
    forge_bf16 *d_dout, *d_inp, *d_dinp, *d_pristine;
    float *d_w, *d_mean, *d_rstd, *d_dw, *d_db;
    void *d_flush;
    NBB_TRY(cudaMalloc(&d_dout, n * 2));
    NBB_TRY(cudaMalloc(&d_inp, n * 2));
    NBB_TRY(cudaMalloc(&d_dinp, n * 2));
    NBB_TRY(cudaMalloc(&d_pristine, n * 2));
    NBB_TRY(cudaMalloc(&d_w, (size_t)C * 4));
    NBB_TRY(cudaMalloc(&d_mean, (size_t)N * 4));
    NBB_TRY(cudaMalloc(&d_rstd, (size_t)N * 4));
    NBB_TRY(cudaMalloc(&d_dw, (size_t)C * 4));
    NBB_TRY(cudaMalloc(&d_db, (size_t)C * 4));
    NBB_TRY(cudaMalloc(&d_flush, NBB_FLUSH_BYTES));
    NBB_TRY(cudaMemcpy(d_dout, h_dout.data(), n * 2, cudaMemcpyHostToDevice));
    NBB_TRY(cudaMemcpy(d_inp, h_inp.data(), n * 2, cudaMemcpyHostToDevice));
    NBB_TRY(cudaMemcpy(d_pristine, h_dinp.data(), n * 2, cudaMemcpyHostToDevice));
    NBB_TRY(cudaMemcpy(d_w, h_w.data(), (size_t)C * 4, cudaMemcpyHostToDevice));
    NBB_TRY(cudaMemcpy(d_mean, h_mean.data(), (size_t)N * 4, cudaMemcpyHostToDevice));
    NBB_TRY(cudaMemcpy(d_rstd, h_rstd.data(), (size_t)N * 4, cudaMemcpyHostToDevice));
    const nbb_args a = {d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd};
    const int nv = 2 + NBB_NLAB;

    /* outputs of each contender from the same start (dinp pristine, dweight = dbias = 0) */
    std::vector<std::vector<forge_bf16>> o_dinp(nv);
    std::vector<std::vector<float>> o_dw(nv), o_db(nv);
    for (int v = 0; v < nv; v++) {
        if (!nbb_present(s, v)) continue;
        NBB_TRY(cudaMemcpy(d_dinp, d_pristine, n * 2, cudaMemcpyDeviceToDevice));
        NBB_TRY(cudaMemset(d_dw, 0, (size_t)C * 4));
        NBB_TRY(cudaMemset(d_db, 0, (size_t)C * 4));
        NBB_TRY(cudaDeviceSynchronize());
        if (nbb_run(be, s, v, &a)) return 1;
        NBB_TRY(cudaStreamSynchronize(ctx->stream));
        o_dinp[v].resize(n);
        o_dw[v].resize(C);
        o_db[v].resize(C);
        NBB_TRY(cudaMemcpy(o_dinp[v].data(), d_dinp, n * 2, cudaMemcpyDeviceToHost));
        NBB_TRY(cudaMemcpy(o_dw[v].data(), d_dw, (size_t)C * 4, cudaMemcpyDeviceToHost));
        NBB_TRY(cudaMemcpy(o_db[v].data(), d_db, (size_t)C * 4, cudaMemcpyDeviceToHost));
    }
    /* the CPU backend's op on the same inputs: dinp must match to the bit, dweight/dbias within SUM(N) */
    bool cpu_dinp = false;
    double cpu_dw = 0.0, cpu_db = 0.0;
    if (cpu) {
        std::vector<forge_bf16> c_dinp(h_dinp);
        std::vector<float> c_dw(C, 0.0f), c_db(C, 0.0f);
        const forge_status st =
            s->ln ? cpu->layernorm_backward_bf16(cpu, c_dinp.data(), c_dw.data(), c_db.data(), h_dout.data(),
                                                 h_inp.data(), h_w.data(), h_mean.data(), h_rstd.data(), N, C, s->acc)
                  : cpu->rmsnorm_backward_bf16(cpu, c_dinp.data(), c_dw.data(), h_dout.data(), h_inp.data(),
                                               h_w.data(), h_rstd.data(), N, C, s->acc);
        if (st != FORGE_OK) {
            fprintf(stderr, "forge-lab bench norm16-bwd: the CPU op: %s\n", forge_error_message());
            return 1;
        }
        bool same;
        cpu_dinp = memcmp(c_dinp.data(), o_dinp[1].data(), n * 2) == 0;
        cpu_dw = nbb_maxdiff(o_dw[1], c_dw, &same);
        cpu_db = s->ln ? nbb_maxdiff(o_db[1], c_db, &same) : 0.0;
    }

    cudaEvent_t e0, e1;
    NBB_TRY(cudaEventCreate(&e0));
    NBB_TRY(cudaEventCreate(&e1));
    std::vector<std::vector<double>> t(nv);
    for (int r = -2; r < reps; r++)
        for (int v = 0; v < nv; v++) {
            if (!nbb_present(s, v)) continue;
            NBB_TRY(cudaMemcpyAsync(d_dinp, d_pristine, n * 2, cudaMemcpyDeviceToDevice, ctx->stream));
            NBB_TRY(cudaMemsetAsync(d_flush, r & 0xff, NBB_FLUSH_BYTES, ctx->stream));
            NBB_TRY(cudaEventRecord(e0, ctx->stream));
            if (nbb_run(be, s, v, &a)) return 1;
            NBB_TRY(cudaEventRecord(e1, ctx->stream));
            NBB_TRY(cudaEventSynchronize(e1));
            float ms = 0;
            NBB_TRY(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0) t[v].push_back(1e3 * ms);
        }

    const double tol = 1e-4 * (sqrt((double)N) / 8.0 > 1.0 ? sqrt((double)N) / 8.0 : 1.0); /* the walker's SUM(N) */
    const double bytes = (double)n * 2 * (s->acc ? 4 : 3);
    int bad = 0;
    printf("%s (N %d, C %d, accumulate %d, %d SMs), median of %d interleaved rounds:\n", s->name, N, C, s->acc,
           ctx->num_sms, reps);
    printf("  %-11s %6s %9s %8s %24s  %-6s %-26s %s\n", "contender", "blk/SM", "us", "GB/s", "baseline/it [95% CI]",
           "dinp", "dweight", s->ln ? "dbias" : "");
    for (int v = 0; v < nv; v++) {
        if (!nbb_present(s, v)) continue;
        char name[32];
        if (v < 2)
            snprintf(name, sizeof name, "%s", v == 0 ? "baseline" : "src");
        else if (NBB_LAB[v - 2].colsum)
            snprintf(name, sizeof name, "src+colsum");
        else if (NBB_LAB[v - 2].per_sm == 1)
            snprintf(name, sizeof name, "stages %d", NBB_LAB[v - 2].stages);
        else
            snprintf(name, sizeof name, "%d/SM st %d", NBB_LAB[v - 2].per_sm, NBB_LAB[v - 2].stages);
        std::vector<double> ratio;
        for (int i = 0; i < reps; i++) ratio.push_back(t[0][i] / t[v][i]);
        double lo, hi;
        lab_median_ci(ratio, &lo, &hi);
        const double us = lab_median(t[v]);
        const bool dinp_ok = memcmp(o_dinp[v].data(), o_dinp[0].data(), n * 2) == 0;
        bool same_w, same_b = true;
        const double dw = nbb_maxdiff(o_dw[v], o_dw[0], &same_w);
        const double db = s->ln ? nbb_maxdiff(o_db[v], o_db[0], &same_b) : 0.0;
        char sw[48], sb[48];
        snprintf(sw, sizeof sw, "%s", same_w ? "equal" : dw <= tol ? "tol" : "FAIL");
        snprintf(sb, sizeof sb, "%s", !s->ln ? "" : same_b ? "equal" : db <= tol ? "tol" : "FAIL");
        if (!same_w) snprintf(sw + strlen(sw), sizeof sw - strlen(sw), " (max %.2g)", dw);
        if (s->ln && !same_b) snprintf(sb + strlen(sb), sizeof sb - strlen(sb), " (max %.2g)", db);
        bad |= !dinp_ok || (!same_w && !(dw <= tol)) || (!same_b && !(db <= tol));
        printf("  %-11s %6d %9.1f %8.0f %8.3fx [%.3f, %.3f]  %-6s %-26s %s\n", name, nbb_occ(s, v), us,
               bytes / us * 1e-3, lab_median(ratio), lo, hi, dinp_ok ? "PASS" : "FAIL", sw, sb);
    }
    if (cpu) {
        printf("  src vs the CPU backend: dinp %s, dweight max scaled diff %.2g, dbias %.2g (SUM(N) = %.2g)\n",
               cpu_dinp ? "PASS (bitwise)" : "FAIL", cpu_dw, cpu_db, tol);
        bad |= !cpu_dinp || !(cpu_dw <= tol) || !(cpu_db <= tol);
    }
    printf("  (dinp: bits vs baseline; dweight/dbias: equal = same bits as baseline, tol = |diff| / max(1, |value|)\n"
           "   within the walker's SUM(N) = %.2g, the max in parentheses)\n",
           tol);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    void *all[] = {d_dout, d_inp, d_dinp, d_pristine, d_w, d_mean, d_rstd, d_dw, d_db, d_flush};
    for (void *p : all) cudaFree(p);
    return bad;
}

extern "C" int lab_bench_norm16_bwd(int argc, char **argv) {
    int reps = 0;
    if (lab_reps_args(argc, argv, "norm16-bwd", 30, 3, &reps)) return 2;
    forge_backend *be = NULL, *cpu = NULL;
    if (forge_backend_create(&be, FORGE_DEVICE_CUDA, NULL) != FORGE_OK) {
        fprintf(stderr, "forge-lab bench norm16-bwd: cannot create the CUDA backend: %s\n", forge_error_message());
        return 1;
    }
    if (forge_backend_create_cpu(&cpu, 0, 0) != FORGE_OK) {
        fprintf(stderr, "forge-lab bench norm16-bwd: no CPU backend (%s): skipping the CPU check\n",
                forge_error_message());
        cpu = NULL;
    }
    static const nbb_shape shapes[] = {
        {"gpt2-124m LayerNorm", 1, 16384, 768, 1},
        {"gpt2-124m LayerNorm", 1, 16384, 768, 0},
        {"gpt-25m RMSNorm", 0, 16384, 512, 1},
    };
    int rc = 0;
    for (const nbb_shape &s : shapes) rc |= nbb_shape_run(be, cpu, &s, reps);
    if (cpu) forge_backend_destroy(cpu);
    forge_backend_destroy(be);
    return rc;
}
