/*
 * gemm_bench_cells.h: the pieces of `forge bench gemm` (gemm_bench_cells.cu) that a suite timing other variants
 * of the same bf16 kernels on the same shapes reuses (the lab's `forge-lab bench gemm-bf16-variants`): the shape
 * tables, the cells and their callbacks, and the two group loops, which take the suite's choice of cells.
 *
 * - Plain groups: one per GB_SHAPES entry, C = A.B in the entry's layout (gb_layout); gc_cell.kind is GB_CUBLAS
 *   (the baseline), GB_WGMMA (forge's entry of the layout) or GB_AUTO (forge_gemm_bf16_nt, the dispatching entry),
 *   run by gb_run; a suite's own kinds (from GB_KIND_SUITE on) run through its own callback.
 * - Epilogue groups: one per GE_GROUPS entry, cells ge_cell (run, poison and check below), the same result
 *   computed fused, as the GEMM then separate passes, or by cuBLAS(Lt); ge_cells_of lists `forge bench gemm`'s.
 *   A GE_FUSED cell runs forge_gemm_bf16_{nt,nn}_epi, whose store (TMA or direct) is the library's choice: the
 *   cell's `tma` says which store it stands for, and the suite runs it only where the library takes that one
 *   (ge_cell_store_matches). A GE_SUITE cell runs the suite's callback.
 * Plain C declarations (C linkage); gemm_cells_common.h has the shared inputs, reference, gate and session.
 */
#ifndef FORGE_GEMM_BENCH_CELLS_H
#define FORGE_GEMM_BENCH_CELLS_H

#include "gemm_cells_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "../../backend/cuda/gemm.h"

/* NT: C = A (M,K) . B (N,K)^T (forward). NN: C = A (M,K) . B (K,N) (dX = dY.W). TN: C = A (K,M)^T . B (K,N)
 * (dW = dY^T.X, split-K). Same element counts per operand in every layout. Stored as gc_shape's a_mn = (TN),
 * b_mn = (NN or TN); a TN shape carries the split-K workspace as its work. */
typedef enum { GB_NT = 0, GB_NN, GB_TN } gb_layout;
extern const char *const GB_LAYOUT_NAME[3]; /* "nt", "nn", "tn" */

typedef struct {
    gb_layout layout;
    int M, N, K;
    int bias; /* NT: forge cells add the bias (cuBLAS does not: it is the plain-GEMM baseline) */
    int odd;  /* an edge-case shape: the dispatching entry instead of the forced wgmma path */
    const char *what;
} gb_shape_spec;
extern const gb_shape_spec GB_SHAPES[];
extern const int GB_N_SHAPES;

/* The input recipe of both group kinds (the harness's provenance). */
extern const char GB_RECIPE[];

/* gc_cell.kind of the plain groups: cuBLAS, forge's entry of the layout (NT forge_gemm_bf16_nt_wgmma, NN
 * forge_gemm_bf16_nn_wgmma, TN forge_gemm_bf16_tn_wgmma on the shape's workspace), forge_gemm_bf16_nt. A suite's
 * own kinds start at GB_KIND_SUITE. */
enum { GB_CUBLAS = 0, GB_WGMMA, GB_AUTO, GB_KIND_SUITE = 16 };
/* The harness run callback of those three kinds (ctx: a gc_cell; use_bias: the NT bias). */
forge_status gb_run(void *ctx, int set);

#define GB_MAX_CELLS 16
typedef struct {
    gc_cell cell;
    const char *name; /* must live until the group is flushed */
    int baseline;
} gb_cell_spec;

/* A suite's choice of plain groups and cells. */
typedef struct {
    /* the bytes of a TN shape's split-K workspace (e.g. forge_gemm_bf16_tn_workspace) */
    forge_status (*tn_workspace)(int M, int N, int K, size_t *bytes);
    /* whether the suite times shape sp (NULL: every shape); asked before its buffers are made */
    int (*wants)(const gb_shape_spec *sp);
    /* the cells of shape sp on sh into out (at most GB_MAX_CELLS); returns how many */
    int (*cells)(const gb_shape_spec *sp, gc_shape *sh, gb_cell_spec *out);
    /* the run callback of every cell (gb_run, or one that hands the three kinds above to it) */
    forge_status (*run)(void *ctx, int set);
} gb_plain_suite;

/* One group per wanted shape of GB_SHAPES ("bf16 <layout> M=.. N=.. K=.. (<what>)"), inputs seeded per shape
 * index, the cells checked and timed, flushed before the buffers go. */
forge_status gb_plain_groups(gc_session *ss, const gb_plain_suite *suite);
/* `forge bench gemm`'s cells of shape sp: cuBLAS (the baseline), forge's entry (forge_wgmma_bf16, or
 * forge_bf16_auto on the odd shapes), and on the square NT shapes cuBLAS again as the A/A control. */
int gb_cells_default(const gb_shape_spec *sp, gc_shape *sh, gb_cell_spec *out);

/* ---- fused epilogues ---- */

typedef enum { GE_G_BIAS_GELU = 0, GE_G_RESID, GE_G_BF16, GE_G_DGELU, GE_G_ACC, GE_G_EDGE, GE_G_STORE } ge_group_kind;

typedef struct {
    gb_layout layout;
    int M, N, K;
    ge_group_kind kind;
    const char *what;
} ge_group_spec;
extern const ge_group_spec GE_GROUPS[];
extern const int GE_N_GROUPS;

typedef enum {
    GE_FUSED = 0,          /* forge_gemm_bf16_{nt,nn}_epi with the cell's epilogue */
    GE_FORGE_PASSES,       /* forge GEMM (plain, or + bias in its epilogue), then one pass per remaining operation */
    GE_CUBLAS_PASSES,      /* cuBLAS GEMM (beta 0), then one pass per operation */
    GE_CUBLASLT_GELU_BIAS, /* cuBLASLt with CUBLASLT_EPILOGUE_GELU_BIAS */
    GE_CUBLAS_BF16,        /* cuBLAS with a bf16 C */
    GE_CUBLAS_BETA1,       /* cuBLAS C = A.B + C */
    GE_FORGE_ACC,          /* forge_gemm_bf16_{nn,tn}_wgmma with accumulate = 1 (C += in the epilogue / reduction) */
    GE_SUITE               /* the suite's own: ge_cell.suite_run */
} ge_kind;

struct ge_bufs; /* per-shape buffers of the epilogue groups (R, P, pre_out, the cuBLASLt plan) */

typedef struct ge_cell {
    gc_shape *sh;
    struct ge_bufs *b;
    int kind; /* ge_kind */
    int bias, gelu, pre, res, dgelu, bf16;
    int bias_in_gemm; /* GE_FORGE_PASSES: the bias rides the GEMM's (plain) epilogue */
    int acc;          /* C starts as bias rows and the cell adds A.B (check: ref + bias) */
    int tma;          /* GE_FUSED: the store the cell stands for (1 TMA, 0 direct); GE_SUITE: the suite's parameter */
    forge_status (*suite_run)(const struct ge_cell *c, int set); /* GE_SUITE */
} ge_cell;

typedef struct {
    ge_cell cell;
    const char *name; /* must live until the group is flushed */
    int baseline;
} ge_cell_spec;
#define GE_MAX_CELLS 16

/* The cell's fused epilogue: bias, residual R, pre_out, dgelu_pre P, gelu and bf16 out as its flags say. */
forge_gemm_epilogue ge_epilogue(const ge_cell *c);
/* 1 unless c is a GE_FUSED cell whose store (c->tma) is not the one forge_gemm_bf16_{nt,nn}_epi take for it
 * (forge_gemm_bf16_epi_store). */
int ge_cell_store_matches(const ge_cell *c);
/* `forge bench gemm`'s cells of group g on sh and b: its rows whose store is the library's (ge_cell_store_matches);
 * returns how many (at most GE_MAX_CELLS). */
int ge_cells_default(const ge_group_spec *g, gc_shape *sh, struct ge_bufs *b, ge_cell_spec *out);

/* A suite's choice of epilogue groups and cells. */
typedef struct {
    forge_status (*tn_workspace)(int M, int N, int K, size_t *bytes);
    int (*wants)(const ge_group_spec *g); /* NULL: every group */
    /* the cells of group g into out (at most GE_MAX_CELLS); returns how many */
    int (*cells)(const ge_group_spec *g, gc_shape *sh, struct ge_bufs *b, ge_cell_spec *out);
} ge_suite;

/* One group per wanted GE_GROUPS entry ("epi bf16 <layout> M=.. N=.. K=.. (<what>)"); quick: only the small
 * (edge) groups, M*N <= 2^21 (every fused load / store path, small enough for compute-sanitizer). */
forge_status ge_epi_groups(gc_session *ss, int quick, const ge_suite *suite);

/* config text of a suite: head, then (with_plain) the plain shapes, then the epilogue groups */
void gb_config_text(char *config, size_t size, const char *head, int with_plain);

#ifdef __cplusplus
}
#endif

#endif
