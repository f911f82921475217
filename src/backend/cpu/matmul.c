/*
 * matmul.c: the three training matmuls on the CPU.
 *
 *   forward          out (N,OC)     = inp (N,C) . weight (OC,C)^T + bias (OC)
 *   backward_input   dinp (N,C)    += dout (N,OC) . weight (OC,C)
 *   backward_weight  dweight (OC,C) += dout^T (OC,N) . inp (N,C);  dbias += sum_n dout
 *
 * All three are one GEMM, C (M,Nc) += A (M,K) . B (K,Nc), with A and B read
 * through (row stride, column stride) pairs, so no operand is ever transposed
 * in memory. The decision a reader would get wrong: the fast path does not try
 * to make the compiler vectorise the naive loop. It follows the BLIS/GotoBLAS
 * structure: copy ("pack") a block of A into MR-row panels and a block of B
 * into NR-column panels, each laid out k-major so the micro-kernel reads both
 * with unit stride, then update an MR x NR tile of C held entirely in vector
 * registers for KC steps of k. Packing is a few percent of the time, and it
 * makes the three layouts (and edge tiles, which are zero-padded) run through
 * the same kernel.
 *
 * The micro-kernel is written once against a handful of vector helpers, defined
 * for AVX-512, for AVX2+FMA, and as plain floats for any other target. The
 * explicit fused multiply-add matters: the build is -std=c11, under which GCC
 * does not contract a*b+c into an FMA.
 *
 * Threads share one packed block of B and take blocks of rows of A (and,
 * when there are few row blocks, shares of the columns of B) from a queue, so
 * a thread that loses its core to another process delays the others by one
 * block at most (see gemm); each thread packs A into its own slice of the
 * context's buffer. The reference path (reference = 1) is the plain triple loop of llm.c's
 * matmul_forward_naive, one thread, float accumulation.
 */
#include <string.h>

#include "cpu_ops.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

/* ---- vector helpers: the only ISA-specific code -------------------------- */
/* MR x NR is the register tile: MR rows of A broadcast against NV vectors of
 * B; MR * NV accumulators plus NV B vectors plus one broadcast must fit in the
 * register file (32 zmm, 16 ymm). */
#if defined(__AVX512F__)
typedef __m512 vec;
#define VW 16
#define NV 2
#define MR 12
static inline vec vzero(void) { return _mm512_setzero_ps(); }
static inline vec vload(const float *p) { return _mm512_load_ps(p); }
static inline vec vloadu(const float *p) { return _mm512_loadu_ps(p); }
static inline void vstoreu(float *p, vec x) { _mm512_storeu_ps(p, x); }
static inline vec vset1(float x) { return _mm512_set1_ps(x); }
static inline vec vadd(vec a, vec b) { return _mm512_add_ps(a, b); }
static inline vec vfma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 vec;
#define VW 8
#define NV 2
#define MR 6
static inline vec vzero(void) { return _mm256_setzero_ps(); }
static inline vec vload(const float *p) { return _mm256_load_ps(p); }
static inline vec vloadu(const float *p) { return _mm256_loadu_ps(p); }
static inline void vstoreu(float *p, vec x) { _mm256_storeu_ps(p, x); }
static inline vec vset1(float x) { return _mm256_set1_ps(x); }
static inline vec vadd(vec a, vec b) { return _mm256_add_ps(a, b); }
static inline vec vfma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
#else
typedef float vec;
#define VW 1
#define NV 8
#define MR 4
static inline vec vzero(void) { return 0.0f; }
static inline vec vload(const float *p) { return *p; }
static inline vec vloadu(const float *p) { return *p; }
static inline void vstoreu(float *p, vec x) { *p = x; }
static inline vec vset1(float x) { return x; }
static inline vec vadd(vec a, vec b) { return a + b; }
static inline vec vfma(vec a, vec b, vec c) { return a * b + c; }
#endif

#define NR (NV * VW)
/* Cache blocks (GotoBLAS): a KC x NC block of B is packed once and shared by
 * all threads; each thread packs an MC x KC block of A and runs its MR-row
 * panels past one KC x NR panel of B at a time. Packing is then
 * O(K (N + M N / NC)), negligible next to the M N K flops. The sizes were
 * picked by measurement on Zen 4 (32 KB L1, 1 MB L2 per core): with AVX-512
 * the B block is 1.5 MB, the A block 288 KB. A larger KC mostly saves the
 * load/store of the C tile that every KC step costs. */
#ifndef KC
#define KC 384
#endif
#ifndef MC_MAX
#define MC_MAX (MR * 16)
#endif
#ifndef NC
#define NC (NR * 32)
#endif

size_t cpu_matmul_pack_floats(int threads) {
    return (size_t)KC * NC + (size_t)threads * ((size_t)MC_MAX * KC + 16);
}

/* A strided operand: element (i, k) is at p[i * rs + k * cs]. */
typedef struct {
    const float *p;
    long rs, cs;
} operand;

/* Packs rows [i0, i0+mb) x k [k0, k0+kc) of A into MR-row panels, k-major:
 * dst[panel][k][0..MR). Rows past mb are zero so edge tiles need no masks.
 * The loop order follows whichever stride of A is 1, so reads are contiguous. */
static void pack_a(float *restrict dst, operand a, int i0, int mb, int k0, int kc) {
    for (int p = 0; p < mb; p += MR) {
        int mr = mb - p < MR ? mb - p : MR;
        if (a.rs == 1 && mr == MR) {
            for (int k = 0; k < kc; k++) {
                const float *src = a.p + (long)(k0 + k) * a.cs + (i0 + p);
                for (int i = 0; i < MR; i++) dst[k * MR + i] = src[i];
            }
        } else {
            for (int i = 0; i < mr; i++) {
                const float *src = a.p + (long)(i0 + p + i) * a.rs + (long)k0 * a.cs;
                for (int k = 0; k < kc; k++) dst[k * MR + i] = src[k * a.cs];
            }
            for (int i = mr; i < MR; i++)
                for (int k = 0; k < kc; k++) dst[k * MR + i] = 0.0f;
        }
        dst += MR * kc;
    }
}

/* Packs k [k0, k0+kc) x columns [j0, j0+NR) of B into one NR-column panel,
 * k-major: dst[k][0..NR). Columns past nb are zero. */
static void pack_b_panel(float *restrict dst, operand b, int k0, int kc, int j0, int nr) {
    if (b.cs == 1) {
        for (int k = 0; k < kc; k++) {
            const float *src = b.p + (long)(k0 + k) * b.rs + j0;
            float *d = dst + k * NR;
            for (int j = 0; j < nr; j++) d[j] = src[j];
            for (int j = nr; j < NR; j++) d[j] = 0.0f;
        }
    } else {
        for (int j = 0; j < nr; j++) {
            const float *src = b.p + (long)k0 * b.rs + (long)(j0 + j) * b.cs;
            for (int k = 0; k < kc; k++) dst[k * NR + j] = src[k * b.rs];
        }
        for (int j = nr; j < NR; j++)
            for (int k = 0; k < kc; k++) dst[k * NR + j] = 0.0f;
    }
}

/* c (mr, nr; row stride ldc) += a_panel (kc, MR)^T . b_panel (kc, NR).
 * The accumulators are indexed only by compile-time constants inside fully
 * unrolled loops, so they live in registers. */
static void micro_kernel(int kc, const float *restrict ap, const float *restrict bp,
                         float *restrict c, long ldc, int mr, int nr) {
    vec acc[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) acc[i][v] = vzero();

    for (int k = 0; k < kc; k++) {
        vec b[NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++) b[v] = vload(bp + v * VW);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            vec a = vset1(ap[i]);
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++) acc[i][v] = vfma(a, b[v], acc[i][v]);
        }
        ap += MR;
        bp += NR;
    }

    if (mr == MR && nr == NR) {
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++)
                vstoreu(c + i * ldc + v * VW, vadd(vloadu(c + i * ldc + v * VW), acc[i][v]));
    } else {
        float tile[MR * NR];
        for (int i = 0; i < MR; i++)
            for (int v = 0; v < NV; v++) vstoreu(tile + i * NR + v * VW, acc[i][v]);
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++) c[i * ldc + j] += tile[i * NR + j];
    }
}

/* c (M, Nc; row stride ldc) = init + A (M, K) . B (K, Nc) when init is set
 * (init->row: a row broadcast to every row of c, NULL: zeros), else
 * c += A . B.
 *
 * Threads first pack the shared KC x NC block of B together, then take work
 * items (a block of at most MC_MAX rows of A, and when there are few row
 * blocks a share of the B panels) one at a time from a shared queue
 * (schedule(dynamic)). The queue is what keeps a preempted thread cheap: with
 * a static split, a thread that loses its core to another process holds half
 * the block and the other thread waits at the barrier for all of it; here
 * the running thread takes the remaining items and waits for at most the one
 * item the preempted thread holds. Items are sized so each thread gets about
 * ITEMS_PER_THREAD of them.
 *
 * Every element of c is summed in the same order whatever the thread count
 * or item split: its micro-kernel accumulates k in order within a KC block
 * and adds the blocks to c in k order, and the tile sizes depend only on
 * MR, NR and KC. So the results are bitwise the same on any number of threads
 * (tests/test_ops_forward.c checks 1, 2 and 3). */
typedef struct {
    const float *row; /* NULL: zeros */
} gemm_init;

#define ITEMS_PER_THREAD 4

static void gemm(forge_backend *be, float *c, long ldc, operand a, operand b, int M, int Nc, int K,
                 const gemm_init *init) {
    cpu_ctx *ctx = (cpu_ctx *)be->ctx;
    int nt = ctx->threads;
    if (M <= 0 || Nc <= 0) return;
    /* row blocks: a multiple of MR, at most MC_MAX, about ITEMS_PER_THREAD x nt of them when M allows */
    int want = ITEMS_PER_THREAD * nt;
    int mc = (M + want - 1) / want;
    mc = (mc + MR - 1) / MR * MR;
    if (mc > MC_MAX) mc = MC_MAX;
    int blocks_m = (M + mc - 1) / mc;
    float *bpack = ctx->pack;

#pragma omp parallel num_threads(nt)
    {
        int thread = 0;
#ifdef _OPENMP
        thread = omp_get_thread_num();
#endif
        float *apack = ctx->pack + (size_t)KC * NC + (size_t)thread * ((size_t)MC_MAX * KC + 16);
        for (int j0 = 0; j0 < Nc; j0 += NC) {
            int nc = Nc - j0 < NC ? Nc - j0 : NC;
            int panels = (nc + NR - 1) / NR;
            /* few row blocks: split the panels too, so every thread has items */
            int splits_n = blocks_m >= want ? 1 : (want + blocks_m - 1) / blocks_m;
            if (splits_n > panels) splits_n = panels;
            if (K <= 0) { /* nothing to multiply: c is only initialised */
                if (init) {
#pragma omp for schedule(dynamic)
                    for (int i = 0; i < M; i++) {
                        float *row = c + (long)i * ldc + j0;
                        if (init->row) memcpy(row, init->row + j0, (size_t)nc * sizeof(float));
                        else memset(row, 0, (size_t)nc * sizeof(float));
                    }
                }
                continue;
            }
            for (int k0 = 0; k0 < K; k0 += KC) {
                int kc = K - k0 < KC ? K - k0 : KC;
#pragma omp for schedule(dynamic, 4)
                for (int q = 0; q < panels; q++) {
                    int nr = nc - q * NR < NR ? nc - q * NR : NR;
                    pack_b_panel(bpack + (size_t)q * NR * kc, b, k0, kc, j0 + q * NR, nr);
                }
                /* implicit barrier: B is packed */
#pragma omp for schedule(dynamic, 1)
                for (int item = 0; item < blocks_m * splits_n; item++) {
                    int i0 = (item / splits_n) * mc, part = item % splits_n;
                    int mb = M - i0 < mc ? M - i0 : mc;
                    int q0 = panels * part / splits_n, q1 = panels * (part + 1) / splits_n;
                    if (init && k0 == 0) {
                        /* this item's tile of c starts as the broadcast row (or zeros) */
                        int c0 = j0 + q0 * NR, c1 = j0 + q1 * NR < j0 + nc ? j0 + q1 * NR : j0 + nc;
                        for (int i = i0; i < i0 + mb; i++) {
                            float *row = c + (long)i * ldc;
                            if (init->row) memcpy(row + c0, init->row + c0, (size_t)(c1 - c0) * sizeof(float));
                            else memset(row + c0, 0, (size_t)(c1 - c0) * sizeof(float));
                        }
                    }
                    pack_a(apack, a, i0, mb, k0, kc);
                    for (int q = q0; q < q1; q++) {
                        int nr = nc - q * NR < NR ? nc - q * NR : NR;
                        for (int ir = 0; ir < mb; ir += MR) {
                            int mr = mb - ir < MR ? mb - ir : MR;
                            micro_kernel(kc, apack + (size_t)ir * kc, bpack + (size_t)q * NR * kc,
                                         c + (long)(i0 + ir) * ldc + j0 + q * NR, ldc, mr, nr);
                        }
                    }
                }
                /* implicit barrier: nobody still reads B when it is repacked */
            }
        }
    }
}

static forge_status check_sizes(const char *op, int N, int C, int OC) {
    if (N < 0 || C < 0 || OC < 0)
        return forge_error(FORGE_ERR_ARG, "cpu %s: sizes must be >= 0, got N=%d C=%d OC=%d", op, N,
                           C, OC);
    return FORGE_OK;
}

/* ---- reference: plain loops (llm.c matmul_forward_naive) ----------------- */

static void forward_naive(float *out, const float *inp, const float *weight, const float *bias,
                          int N, int C, int OC) {
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {
            float val = bias ? bias[o] : 0.0f;
            for (int i = 0; i < C; i++) val += inp[(size_t)n * C + i] * weight[(size_t)o * C + i];
            out[(size_t)n * OC + o] = val;
        }
    }
}

static void backward_input_naive(float *dinp, const float *dout, const float *weight, int N, int C,
                                 int OC) {
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < C; i++) {
            float sum = 0.0f;
            for (int o = 0; o < OC; o++) sum += dout[(size_t)n * OC + o] * weight[(size_t)o * C + i];
            dinp[(size_t)n * C + i] += sum;
        }
    }
}

static void backward_weight_naive(float *dweight, float *dbias, const float *dout, const float *inp,
                                  int N, int C, int OC) {
    for (int o = 0; o < OC; o++) {
        for (int i = 0; i < C; i++) {
            float sum = 0.0f;
            for (int n = 0; n < N; n++) sum += dout[(size_t)n * OC + o] * inp[(size_t)n * C + i];
            dweight[(size_t)o * C + i] += sum;
        }
        if (dbias) {
            float sum = 0.0f;
            for (int n = 0; n < N; n++) sum += dout[(size_t)n * OC + o];
            dbias[o] += sum;
        }
    }
}

/* ---- entry points --------------------------------------------------------- */

forge_status cpu_matmul_forward(forge_backend *be, float *out, const float *inp, const float *weight,
                                const float *bias, int N, int C, int OC) {
    FORGE_TRY(check_sizes("matmul_forward", N, C, OC));
    if (cpu_is_reference(be)) {
        forward_naive(out, inp, weight, bias, N, C, OC);
        return FORGE_OK;
    }
    /* out starts as the broadcast bias (inside the GEMM's parallel region, so
     * no extra fork and join), then the GEMM accumulates into it */
    operand a = {inp, C, 1}, b = {weight, 1, C}; /* A = inp (N, C); B(k, j) = weight[j][k] */
    gemm_init init = {bias};
    gemm(be, out, OC, a, b, N, OC, C, &init);
    return FORGE_OK;
}

forge_status cpu_matmul_backward_input(forge_backend *be, float *dinp, const float *dout,
                                       const float *weight, int N, int C, int OC) {
    FORGE_TRY(check_sizes("matmul_backward_input", N, C, OC));
    if (cpu_is_reference(be)) {
        backward_input_naive(dinp, dout, weight, N, C, OC);
        return FORGE_OK;
    }
    /* A = dout (N, OC); B = weight (OC, C) as stored */
    operand a = {dout, OC, 1}, b = {weight, C, 1};
    gemm(be, dinp, C, a, b, N, C, OC, NULL);
    return FORGE_OK;
}

forge_status cpu_matmul_backward_weight(forge_backend *be, float *dweight, float *dbias,
                                        const float *dout, const float *inp, int N, int C, int OC) {
    FORGE_TRY(check_sizes("matmul_backward_weight", N, C, OC));
    if (cpu_is_reference(be)) {
        backward_weight_naive(dweight, dbias, dout, inp, N, C, OC);
        return FORGE_OK;
    }
    /* A(o, n) = dout[n][o], i.e. dout^T read in place; B = inp (N, C) */
    operand a = {dout, 1, OC}, b = {inp, C, 1};
    gemm(be, dweight, C, a, b, OC, C, N, NULL);
    if (dbias) {
        /* threads own disjoint slices of dbias; rows are summed in order */
        int nt = cpu_threads(be);
        enum { SLICE = 256 };
        int slices = (OC + SLICE - 1) / SLICE;
#pragma omp parallel for schedule(dynamic) num_threads(nt)
        for (int s = 0; s < slices; s++) {
            int o0 = s * SLICE, o1 = o0 + SLICE < OC ? o0 + SLICE : OC;
            float sum[SLICE];
            for (int o = o0; o < o1; o++) sum[o - o0] = 0.0f;
            for (int n = 0; n < N; n++)
                for (int o = o0; o < o1; o++) sum[o - o0] += dout[(size_t)n * OC + o];
            for (int o = o0; o < o1; o++) dbias[o] += sum[o - o0];
        }
    }
    return FORGE_OK;
}
