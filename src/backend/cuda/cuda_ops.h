/*
 * cuda_ops.h: private header of the CUDA backend: its context, every op it
 * puts in the forge_backend table (one .cu file per op family), the shared
 * GEMM launcher (matmul.cu, also used by attention.cu), the deterministic
 * column-reduction helper (reduce.cu) and the warp/block reductions.
 *
 * The decisions a reader would otherwise get wrong:
 * - Everything runs on ONE non-default stream held in the context; no op
 *   synchronises with the host (only copy_to_host and synchronize do).
 * - No float atomics anywhere: every reduction (dbias, dweight of the norms,
 *   dwpe, dtable, dK/dV of grouped-query attention, sumsq) has a fixed
 *   summation order, so two runs give bit-identical results. Cross-block
 *   reductions write per-block partials into ctx->ws and a second kernel sums
 *   them in order, which is why ops share one workspace: they are serialised
 *   on the stream, so one op's partials are dead before the next op starts.
 * - The context is not re-entrant: drive one backend from one host thread.
 */
#ifndef FORGE_CUDA_OPS_H
#define FORGE_CUDA_OPS_H

#ifndef FORGE_NO_CUBLAS
#include <cublas_v2.h>
#endif
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_check.h"

/* cuBLAS is optional: `make cuda CUBLAS=0` defines FORGE_NO_CUBLAS and links
 * no cuBLAS library. The handle type stays so the context layout is the same
 * in both builds; without cuBLAS it is always NULL. */
#ifdef FORGE_NO_CUBLAS
typedef void *cublasHandle_t;
#endif

/* The three training layouts, as keys of the per-shape table. */
typedef enum {
    CUDA_MM_NT = 0, /* forward:          out (M=N, N=OC)  = inp . W^T,  K = C  */
    CUDA_MM_NN,     /* backward input:   dinp (M=N, N=C) += dout . W,   K = OC */
    CUDA_MM_TN      /* backward weight:  dW (M=OC, N=C)  += dout^T . inp, K = N */
} cuda_mm_layout;

struct cuda_mm_table; /* matmul_table.cu */

/* Floats of workspace: partial sums of the two-pass reductions. 16 MiB. */
#define CUDA_WS_FLOATS ((size_t)4 << 20)
/* Partials of the one-launch reductions (sum_accumulate, sumsq): a fixed grid, so the sum order never changes. */
#define CUDA_SUMSQ_BLOCKS 1024

/* The first bad input a kernel met since the last poll_errors (device memory, zeroed at creation): a token id
 * outside [0, V), or a decode position read from device memory outside the cache's [0, V) rows (V holds the row
 * count). Kernels claim it with atomicCAS on `found` and fill the rest; the table's poll_errors reads it back (one
 * small copy, where the step synchronises anyway) and clears it. */
enum { CUDA_BAD_ID_EMBEDDING = 1, CUDA_BAD_ID_CLASSIFIER = 2, CUDA_BAD_POSITION = 3 };
typedef struct {
    int found; /* 0, or which op found it (CUDA_BAD_ID_*) */
    int row, id, V;
} cuda_input_error;

#ifdef __CUDACC__
/* Records (op, row, id, V) unless an earlier error is recorded; every later one is dropped. */
__device__ __forceinline__ void cuda_report_bad_id(cuda_input_error *err, int op, int row, int id, int V) {
    if (atomicCAS(&err->found, 0, -1) == 0) {
        err->row = row;
        err->id = id;
        err->V = V;
        __threadfence();
        atomicExch(&err->found, op);
    }
}
#endif

typedef struct {
    int device;
    int num_sms;
    cudaStream_t stream;
    cudaStream_t side;         /* the side stream (backend.h): collectives beside the ops; highest priority */
    cudaEvent_t fork_event, join_event; /* recorded on stream / side, waited for by the other (no timing) */
    forge_matmul_mode matmul;  /* how the matmul ops run (the runtime options'; AUTO without cuBLAS runs FP32) */
    const char *cache_dir, *matmul_cache_path; /* AUTO's table (runtime options; the caller's strings) */
    cublasHandle_t cublas; /* NULL unless matmul is CUBLAS or AUTO */
    struct cuda_mm_table *mm_table; /* AUTO only: the per-shape choices */
    float *ws;             /* (CUDA_WS_FLOATS) device workspace for partial sums */
    float *tn_ws;          /* the bf16 dW GEMM's split-K slices (cuda_tn_workspace), grown to its plans */
    size_t tn_ws_bytes;
    cuda_input_error *input_error; /* device memory: see cuda_input_error */
    unsigned *reduce_done; /* device counter of the one-launch reductions (adamw.cu): 0 between launches */
    unsigned ws_generation; /* bumped when a workspace a recorded graph may use is replaced (tn_ws, rope_cs) */
    float *rope_cs;         /* rope.cu's cos/sin table (rope_T, rope_HS / 2, 2) for rope_theta, or NULL */
    size_t rope_cs_floats;  /* its allocation */
    int rope_T, rope_HS;
    float rope_theta;
    float *gelu_grad_table;     /* gelu' of a window of bf16 values (gelu_grad_table.cuh), built at creation */
    int gelu_bwd_blocks_per_sm; /* the bf16 GELU backward's resident blocks per SM (its grid) */
    int gelu_dbias_blocks_per_sm; /* the same for the GELU backward with the bias gradient */
    int pdl; /* the bf16 step's kernels launch with programmatic dependent launch (pdl.cuh): the runtime options'
              * pdl on a device of compute capability 9.x; 0 = every kernel launched plainly */
} cuda_ctx;

/* elementwise_bf16.cu: allocates and builds ctx->gelu_grad_table (a kernel on ctx->stream, at creation: never
 * inside a captured step) and sets gelu_bwd_blocks_per_sm and gelu_dbias_blocks_per_sm. */
forge_status cuda_gelu_grad_table_init(cuda_ctx *ctx);

/* At least `bytes` of split-K workspace for the bf16 dW GEMM (forge_gemm_bf16_tn_workspace's plan), in
 * ctx->tn_ws. Grows by reallocation, which waits for the device: that happens in a run's first step (the
 * shapes of a model's dW GEMMs do not change), never in a steady one. */
forge_status cuda_tn_workspace(cuda_ctx *ctx, size_t bytes);

/* graph.cu: the backend table's graph entries */
forge_status cuda_capture_begin(forge_backend *be);
forge_status cuda_capture_end(forge_backend *be, void **graph);
forge_status cuda_graph_launch(forge_backend *be, void *graph);
void cuda_graph_destroy(forge_backend *be, void *graph);

static inline cuda_ctx *cuda_get_ctx(forge_backend *be) { return (cuda_ctx *)be->ctx; }

/* Blocks for a grid-stride loop over n elements with `threads` per block. */
static inline unsigned cuda_grid_for(const cuda_ctx *ctx, size_t n, int threads) {
    size_t blocks = (n + (size_t)threads - 1) / (size_t)threads;
    size_t cap = (size_t)ctx->num_sms * 32;
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    return (unsigned)blocks;
}

/* ---- shared GEMM (matmul.cu) -------------------------------------------
 * C[z] (M,N) (+)= alpha * A[z] (M,K) . B[z] (K,N) (+ bias (N)), for z in
 * [0, batch). Batch z splits as zb = z / zdiv, zh = z % zdiv; operand bases
 * are offset by zb*x_sb + zh*x_sh, except B's head index is zh / b_hdiv
 * (grouped-query attention reads kv head h / (NH/NKV)). nseg > 1
 * concatenates nseg K ranges, segment s offset by s*a_seg / s*b_seg: that is
 * how dK, dV of one kv head sum over the query heads of its group inside one
 * thread, with no atomics. Layout of A: a_kmajor ? A[m*lda + k] : A[k*lda + m].
 * Layout of B: b_kmajor ? B[n*ldb + k] : B[k*ldb + n].                     */
enum {
    GEMM_TRI_NONE = 0,
    GEMM_TRI_A_LOWER, /* A[m][k] == 0 for k > m: K loop stops at the tile's last row */
    GEMM_TRI_A_UPPER, /* A[m][k] == 0 for k < m: K loop starts at the tile's first row */
    GEMM_TRI_C_LOWER  /* only C[m][n], n <= m, is needed: tiles wholly above are skipped */
};

typedef struct {
    int M, N, K;
    int lda, ldb, ldc;
    int a_kmajor, b_kmajor;
    int batch, zdiv, b_hdiv;
    long long a_sb, a_sh, b_sb, b_sh, c_sb, c_sh;
    int nseg;
    long long a_seg, b_seg;
    int tri;
    int accumulate; /* 1: C += result; 0: C = result */
    float alpha;
    const float *bias; /* (N) or NULL */
} cuda_gemm_params;

/* A plain (unbatched, one-segment) parameter set: callers then fill the rest. */
cuda_gemm_params cuda_gemm_plain(int M, int N, int K, int a_kmajor, int lda, int b_kmajor, int ldb,
                                 int ldc, int accumulate);
forge_status cuda_gemm(cuda_ctx *ctx, float *C, const float *A, const float *B,
                       const cuda_gemm_params *p, const char *what);

/* ---- deterministic column sums (reduce.cu) -----------------------------
 * A column reduction over N rows runs as R row chunks, each writing a
 * partial row into ctx->ws, then out[c] += sum_r partial[r][c] in order r.
 * cuda_colsum_chunks picks R from N and C alone (never from the device), so
 * the summation order is the same on every GPU. Returns 0 when even one
 * chunk's n_out*C floats do not fit the workspace.                         */
int cuda_colsum_chunks(int N, int C, int n_out);
forge_status cuda_colsum_finish(cuda_ctx *ctx, float *out, const float *partials, int R, int C);

#ifdef __CUDACC__
/* xor butterflies: every lane ends with the same, order-fixed result */
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* blockDim.x a multiple of 32, at most 1024; scratch holds 32 floats. Every
 * thread gets the result. Contains __syncthreads: call from all threads. */
__device__ __forceinline__ float block_sum(float v, float *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float *scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}
#endif

/* ---- matmul.cu --------------------------------------------------------- */
/* One training-layout GEMM (no bias, no dbias) on the given path: SIMT (tile
 * per shape) or cuBLAS pedantic fp32. A, B, C as the layout's op takes them:
 * NT (C=out, A=inp, B=W), NN (C=dinp, A=dout, B=W), TN (C=dW, A=dout, B=inp).
 * The per-shape table times both paths with it. */
forge_status cuda_matmul_run_layout(cuda_ctx *ctx, cuda_mm_layout layout, int use_cublas, float *C, const float *A,
                                    const float *B, int M, int N, int K);

/* ---- matmul_table.cu: the per-shape choice of the auto matmul mode ----------
 * cuda_mm_table_open loads (or starts) the cache file and prints where it
 * is; cuda_mm_choose returns the cached choice for (layout, M, N, K), or
 * measures both paths once (synchronising the stream: first use of a shape
 * only), prints the row, and rewrites the cache atomically. */
forge_status cuda_mm_table_open(cuda_ctx *ctx);
void cuda_mm_table_close(cuda_ctx *ctx);
forge_status cuda_mm_choose(cuda_ctx *ctx, cuda_mm_layout layout, int M, int N, int K, int *use_cublas);


/* ---- rope.cu: RoPE's argument checks, and its cos/sin table (T, HS/2, 2) (angles in double, rounded once to float,
 * as the CPU's), shared by the fp32 and bf16 entries: *cs = the table, kept in ctx->rope_cs across calls (built
 * into ctx->ws instead while the stream is being recorded and no table is kept yet) ---------------------------- */
forge_status cuda_rope_check_args(const char *op, int n_heads, int n_rot, int HS, float theta);
forge_status cuda_rope_table(cuda_ctx *ctx, int T, int HS, float theta, const char *op, const float **cs);

/* ---- every op of op_list.h: cuda_NAME(forge_backend *be, ...), one .cu file per family (elementwise,
 * embedding, matmul, layernorm, rmsnorm, rope, attention, flash_attention, classifier, adamw; the bf16 entries
 * in *_bf16.cu) ------------------------------------------------------------------------------------------------ */
FORGE_OP_LIST(FORGE_OP_PROTOTYPE_CUDA, FORGE_ARG_DECL, FORGE_OP_NOTHING)

#endif
