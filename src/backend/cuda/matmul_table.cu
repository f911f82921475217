/*
 * matmul_table.cu: the auto matmul mode, the per-shape choice between forge's
 * exact fp32 SIMT GEMM and cuBLAS pedantic fp32 (both exact fp32, no TF32).
 *
 * The decisions a reader would otherwise get wrong:
 * - Shapes are not known when the backend is created, so a (layout, M, N, K)
 *   is looked up on its first matmul call. A cached shape costs a host-side
 *   search; an unknown one is measured right there: scratch buffers of the
 *   shape (never the caller's, so nothing the model computes is touched),
 *   MM_WARMUP runs of each path, then MM_REPS runs of each, alternating
 *   between the paths, each timed with CUDA events on the backend's stream;
 *   median per path. That synchronises the stream,
 *   but only on the first use of a shape (the first training step); every
 *   later call is a table lookup, with no host sync.
 * - Each shape's row is printed (stderr) the first time it is used in this
 *   process, measured or cached, so a run's log says which GEMM ran where.
 * - cuBLAS is chosen only when it is at least MM_MARGIN faster: on a tie
 *   forge's own kernel wins, and timing noise does not flip a near-tie.
 * - The cache file: the runtime options' matmul_cache_path if set, else
 *   cache_dir/matmul-<gpu>-drv<driver>-<MM_KERNELS>.tsv (the CLI passes
 *   $XDG_CACHE_HOME/forge or ~/.cache/forge), else none. Its first line is a key (GPU name, driver, cuBLAS
 *   version, forge kernel version MM_KERNELS, which is bumped by hand when
 *   matmul.cu's SIMT kernel or tile rule changes, never per commit); a
 *   different key, or any malformed row, discards the file's rows with a
 *   printed note and the shapes are measured again. Writes go to a
 *   temporary file in the same directory, then rename(): a reader never
 *   sees half a file. A cache that cannot be written is a warning, not an
 *   error (the run goes on with the in-memory table).
 * - A shape whose scratch buffers do not fit in device memory runs on forge
 *   (printed), and is not cached.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_ops.h"

extern "C" {
#include "../../base/fs.h"
}

#define MM_KERNELS "simt-v1" /* forge's fp32 kernel version: bump when matmul.cu's kernel/tile rule changes */
#define MM_WARMUP 2
#define MM_REPS 5
#define MM_MARGIN 0.97 /* cuBLAS must take <= 97% of forge's time */

typedef struct {
    int layout, M, N, K;
    double forge_ms, cublas_ms; /* < 0: not measured (out of memory) */
    int use_cublas;
    int shown; /* printed in this process */
} mm_row;

struct cuda_mm_table {
    mm_row *rows;
    int n, cap;
    char path[4096]; /* "" when there is no cache file */
    char key[512];
};

static const char *mm_layout_name(int layout) {
    return layout == CUDA_MM_NT ? "NT" : layout == CUDA_MM_NN ? "NN" : "TN";
}

static int mm_choose_cublas(double forge_ms, double cublas_ms) {
    return forge_ms > 0 && cublas_ms > 0 && cublas_ms <= MM_MARGIN * forge_ms;
}

static forge_status mm_push(struct cuda_mm_table *t, const mm_row *r) {
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 32;
        mm_row *p = (mm_row *)realloc(t->rows, (size_t)cap * sizeof *p);
        if (!p) return forge_error(FORGE_ERR_OOM, "matmul auto: out of host memory for %d table rows", cap);
        t->rows = p;
        t->cap = cap;
    }
    t->rows[t->n++] = *r;
    return FORGE_OK;
}

/* GPU names have spaces ("NVIDIA <model>"): keep [A-Za-z0-9.-], the rest becomes '-'. */
static void mm_sanitize(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src[i] && i + 1 < cap; i++) {
        char c = src[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
        dst[i] = ok ? c : '-';
    }
    dst[i] = '\0';
}

/* Reads the cache: rows only when the key matches and every row parses. */
static void mm_load(struct cuda_mm_table *t) {
    FILE *f = fopen(t->path, "r");
    if (!f) return; /* no cache yet */
    char line[1024];
    int lineno = 0, bad = 0;
    if (!fgets(line, sizeof line, f)) {
        fclose(f);
        fprintf(stderr, "matmul auto: warning: cache %s is empty: re-measuring every shape\n", t->path);
        return;
    }
    line[strcspn(line, "\r\n")] = '\0';
    if (strncmp(line, "# forge matmul table ", 21) != 0) {
        fclose(f);
        fprintf(stderr, "matmul auto: warning: cache %s is corrupt (line 1 is not a forge matmul table key): "
                        "re-measuring every shape\n", t->path);
        return;
    }
    if (strcmp(line, t->key) != 0) {
        fclose(f);
        fprintf(stderr, "matmul auto: cache %s has another key (\"%s\", expected \"%s\"): re-measuring\n", t->path,
                line, t->key);
        return;
    }
    lineno = 1;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] == '\0') continue;
        char lay[8], choice[16];
        mm_row r;
        memset(&r, 0, sizeof r);
        if (sscanf(line, "%7s %d %d %d %lf %lf %15s", lay, &r.M, &r.N, &r.K, &r.forge_ms, &r.cublas_ms, choice) != 7 ||
            r.M <= 0 || r.N <= 0 || r.K <= 0 || !(r.forge_ms > 0) || !(r.cublas_ms > 0) ||
            (strcmp(choice, "forge") != 0 && strcmp(choice, "cublas") != 0)) {
            bad = lineno;
            break;
        }
        if (strcmp(lay, "NT") == 0) r.layout = CUDA_MM_NT;
        else if (strcmp(lay, "NN") == 0) r.layout = CUDA_MM_NN;
        else if (strcmp(lay, "TN") == 0) r.layout = CUDA_MM_TN;
        else {
            bad = lineno;
            break;
        }
        r.use_cublas = mm_choose_cublas(r.forge_ms, r.cublas_ms);
        if (mm_push(t, &r) != FORGE_OK) {
            bad = lineno;
            break;
        }
    }
    fclose(f);
    if (bad) {
        fprintf(stderr,
                "matmul auto: warning: cache %s line %d is corrupt (expected \"layout M N K forge_ms cublas_ms "
                "forge|cublas\"): ignoring the file, re-measuring every shape\n",
                t->path, bad);
        t->n = 0;
    }
}

/* Rewrites the cache atomically (temporary file + rename). Failure: a warning. */
static void mm_save(const struct cuda_mm_table *t) {
    if (!t->path[0]) return;
    char dir[4096], tmp[4200];
    snprintf(dir, sizeof dir, "%s", t->path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (forge_mkdir_p(dir) != FORGE_OK) {
            fprintf(stderr, "matmul auto: warning: cannot create %s (%s): the table is not cached\n", dir,
                    forge_error_message());
            return;
        }
    }
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", t->path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "matmul auto: warning: cannot write %s (%s): the table is not cached\n", tmp, strerror(errno));
        return;
    }
    fprintf(f, "%s\n", t->key);
    for (int i = 0; i < t->n; i++) {
        const mm_row *r = &t->rows[i];
        if (r->forge_ms <= 0 || r->cublas_ms <= 0) continue;
        fprintf(f, "%s\t%d\t%d\t%d\t%.6f\t%.6f\t%s\n", mm_layout_name(r->layout), r->M, r->N, r->K, r->forge_ms,
                r->cublas_ms, r->use_cublas ? "cublas" : "forge");
    }
    int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, t->path) != 0) {
        fprintf(stderr, "matmul auto: warning: cannot write %s (%s): the table is not cached\n", t->path,
                strerror(errno));
        unlink(tmp);
    }
}

forge_status cuda_mm_table_open(cuda_ctx *ctx) {
    struct cuda_mm_table *t = (struct cuda_mm_table *)calloc(1, sizeof *t);
    if (!t) return forge_error(FORGE_ERR_OOM, "matmul auto: out of host memory");
    ctx->mm_table = t;
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, ctx->device));
    int driver = 0, cublas_v = 0;
    CUDA_TRY(cudaDriverGetVersion(&driver));
#ifndef FORGE_NO_CUBLAS
    if (ctx->cublas) cublasGetVersion(ctx->cublas, &cublas_v);
#endif
    char gpu[256];
    mm_sanitize(gpu, sizeof gpu, prop.name);
    snprintf(t->key, sizeof t->key, "# forge matmul table v1 gpu=%s driver=%d cublas=%d kernels=%s", gpu, driver,
             cublas_v, MM_KERNELS);

    if (ctx->matmul_cache_path && *ctx->matmul_cache_path)
        snprintf(t->path, sizeof t->path, "%s", ctx->matmul_cache_path);
    else if (ctx->cache_dir && *ctx->cache_dir)
        snprintf(t->path, sizeof t->path, "%s/matmul-%s-drv%d-%s.tsv", ctx->cache_dir, gpu, driver, MM_KERNELS);
    if (t->path[0]) mm_load(t);
    fprintf(stderr,
            "matmul auto: per-shape choice forge simt fp32 vs cuBLAS pedantic fp32 (cuBLAS only if <= %.0f%% of "
            "forge's time); cache %s (%d shapes); each shape is printed at its first use:\n"
            "matmul auto: layout      M      N      K   forge_ms  cublas_ms  choice\n",
            100.0 * MM_MARGIN, t->path[0] ? t->path : "(none: no cache directory given)", t->n);
    return FORGE_OK;
}

void cuda_mm_table_close(cuda_ctx *ctx) {
    if (!ctx->mm_table) return;
    free(ctx->mm_table->rows);
    free(ctx->mm_table);
    ctx->mm_table = NULL;
}

static int mm_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Both paths' medians of MM_REPS event-timed runs, after MM_WARMUP untimed runs of each. The runs alternate
 * (rep r: forge then cuBLAS when r is even, cuBLAS then forge when odd) so both see the same clocks: timed one
 * path after the other, the second meets a warmer GPU (forge bench's A/A control measured one cuBLAS kernel
 * 0.93x / 1.05x "against itself" that way at 8192^3). ms[0] forge, ms[1] cuBLAS. */
static forge_status mm_time_pair(cuda_ctx *ctx, cuda_mm_layout layout, float *C, const float *A, const float *B,
                                 int M, int N, int K, double ms[2]) {
    cudaEvent_t ev[2][MM_REPS][2]; /* [path][rep][start, stop] */
    cudaEvent_t *flat = &ev[0][0][0];
    const int n_ev = 4 * MM_REPS;
    int made = 0;
    forge_status s = FORGE_OK;
    for (; made < n_ev; made++) {
        cudaError_t e = cudaEventCreate(&flat[made]);
        if (e != cudaSuccess) {
            s = forge_error(FORGE_ERR_DEVICE, "matmul auto: cudaEventCreate failed: %s", cudaGetErrorString(e));
            break;
        }
    }
    for (int r = 0; s == FORGE_OK && r < MM_WARMUP; r++)
        for (int p = 0; s == FORGE_OK && p < 2; p++) s = cuda_matmul_run_layout(ctx, layout, p, C, A, B, M, N, K);
    for (int r = 0; s == FORGE_OK && r < MM_REPS; r++)
        for (int i = 0; s == FORGE_OK && i < 2; i++) {
            const int p = (r & 1) ? 1 - i : i;
            if (cudaEventRecord(ev[p][r][0], ctx->stream) != cudaSuccess)
                s = forge_error(FORGE_ERR_DEVICE, "matmul auto: cudaEventRecord failed");
            if (s == FORGE_OK) s = cuda_matmul_run_layout(ctx, layout, p, C, A, B, M, N, K);
            if (s == FORGE_OK && cudaEventRecord(ev[p][r][1], ctx->stream) != cudaSuccess)
                s = forge_error(FORGE_ERR_DEVICE, "matmul auto: cudaEventRecord failed");
        }
    if (s == FORGE_OK) {
        cudaError_t e = cudaStreamSynchronize(ctx->stream);
        if (e != cudaSuccess)
            s = forge_error(FORGE_ERR_DEVICE, "matmul auto: timing %s %dx%dx%d (forge and cuBLAS): %s",
                            mm_layout_name(layout), M, N, K, cudaGetErrorString(e));
    }
    for (int p = 0; s == FORGE_OK && p < 2; p++) {
        double t[MM_REPS];
        for (int r = 0; r < MM_REPS; r++) {
            float f = 0.0f;
            cudaEventElapsedTime(&f, ev[p][r][0], ev[p][r][1]);
            t[r] = f;
        }
        qsort(t, MM_REPS, sizeof t[0], mm_cmp_double);
        /* > 0 marks a measured row; cudaEventElapsedTime resolves ~0.5 us */
        ms[p] = t[MM_REPS / 2] > 1e-6 ? t[MM_REPS / 2] : 1e-6;
    }
    for (int i = 0; i < made; i++) cudaEventDestroy(flat[i]);
    return s;
}

static void mm_print(const mm_row *r, const char *how) {
    if (r->forge_ms > 0 && r->cublas_ms > 0)
        fprintf(stderr, "matmul auto: %-6s %6d %6d %6d %10.4f %10.4f  %-6s (%s)\n", mm_layout_name(r->layout), r->M,
                r->N, r->K, r->forge_ms, r->cublas_ms, r->use_cublas ? "cublas" : "forge", how);
    else
        fprintf(stderr, "matmul auto: %-6s %6d %6d %6d %10s %10s  %-6s (%s)\n", mm_layout_name(r->layout), r->M, r->N,
                r->K, "-", "-", "forge", how);
}

/* Measures one shape on scratch buffers. Out of device memory: forge, not cached. */
static forge_status mm_measure(cuda_ctx *ctx, mm_row *r) {
    const size_t na = (size_t)r->M * r->K, nb = (size_t)r->N * r->K, nc = (size_t)r->M * r->N;
    float *A = NULL, *B = NULL, *C = NULL;
    forge_status s = FORGE_OK;
    if (cudaMalloc((void **)&A, na * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&B, nb * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&C, nc * sizeof(float)) != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        r->forge_ms = r->cublas_ms = -1;
        r->use_cublas = 0;
        goto done;
    }
    /* 0x3c3c3c3c ~ 0.0115: finite, nonzero inputs (power, hence clocks, is data-dependent) */
    if (cudaMemsetAsync(A, 0x3c, na * sizeof(float), ctx->stream) != cudaSuccess ||
        cudaMemsetAsync(B, 0x3c, nb * sizeof(float), ctx->stream) != cudaSuccess ||
        cudaMemsetAsync(C, 0, nc * sizeof(float), ctx->stream) != cudaSuccess) {
        s = forge_error(FORGE_ERR_DEVICE, "matmul auto: cudaMemsetAsync of the scratch buffers failed");
        goto done;
    }
    double ms[2];
    s = mm_time_pair(ctx, (cuda_mm_layout)r->layout, C, A, B, r->M, r->N, r->K, ms);
    if (s == FORGE_OK) r->forge_ms = ms[0], r->cublas_ms = ms[1];
    r->use_cublas = s == FORGE_OK && mm_choose_cublas(r->forge_ms, r->cublas_ms);
done:
    /* cudaFree synchronises the device: fine, this is the once-per-shape path */
    if (A) cudaFree(A);
    if (B) cudaFree(B);
    if (C) cudaFree(C);
    return s;
}

forge_status cuda_mm_choose(cuda_ctx *ctx, cuda_mm_layout layout, int M, int N, int K, int *use_cublas) {
    struct cuda_mm_table *t = ctx->mm_table;
    *use_cublas = 0;
    if (!t) return forge_error(FORGE_ERR_ARG, "matmul auto: the per-shape table was not opened");
    for (int i = 0; i < t->n; i++) {
        mm_row *r = &t->rows[i];
        if (r->layout == (int)layout && r->M == M && r->N == N && r->K == K) {
            if (!r->shown) {
                mm_print(r, "cached");
                r->shown = 1;
            }
            *use_cublas = r->use_cublas;
            return FORGE_OK;
        }
    }
    mm_row r;
    memset(&r, 0, sizeof r);
    r.layout = (int)layout;
    r.M = M;
    r.N = N;
    r.K = K;
    FORGE_TRY(mm_measure(ctx, &r));
    r.shown = 1;
    mm_print(&r, r.forge_ms > 0 ? "measured" : "scratch buffers do not fit: not measured");
    FORGE_TRY(mm_push(t, &r));
    if (r.forge_ms > 0) mm_save(t);
    *use_cublas = r.use_cublas;
    return FORGE_OK;
}
