/*
 * op_walker.h: the generic parity walk over the backend op list
 * (src/backend/op_list.h): for every op and every case the list gives, the
 * same random inputs on the reference backend (parity.cpu) and the backend
 * under test (parity.gpu), then every output compared within the entry's
 * tolerance (op_walker.c says how). The GPU suite walks the CUDA backend; the
 * CPU suite (tests/test_op_walker.c) walks the threaded CPU backend, so the
 * walker itself runs in CI.
 */
#ifndef FORGE_OP_WALKER_H
#define FORGE_OP_WALKER_H

#include "gpu_test.h"

typedef enum {
    ARG_IN, ARG_IN_OPT, ARG_IN_TRIL, ARG_OUT, ARG_OUT_OPT, ARG_ACC, ARG_ACC_OPT, ARG_INOUT, ARG_IDS, ARG_SPANS, ARG_SCRATCH
} arg_role;

typedef struct {
    arg_role role;
    const char *name;
    size_t offset; /* of the pointer in the case struct */
    size_t len;    /* elements */
    double lo, hi; /* fill range: IN, IN_OPT, INOUT, and the pre-fill of ACC */
    double tol;    /* compared outputs: max abs error, or relative with rel */
    int rel;
    int ulps;      /* tol is in units in the last place of the reference value (bf16 outputs) */
    double ulps_abs; /* with ulps: an absolute allowance on top of the ulps (ULP_SUMS) */
    forge_dtype elem; /* the buffer's element type: FORGE_F32, FORGE_BF16 or FORGE_I32 */
    double gemm_k; /* > 0: a GEMM(K) tolerance, widened under tf32 */
    int id_range, id_special, id_pct;
    int tril_n; /* IN_TRIL: the side of its trailing square matrices */
    size_t span_total; /* SPANS: the elements the spans cut up */
} arg_desc;

#define MAX_ARGS 16

typedef struct {
    forge_op op;
    size_t case_size;
    const void *cases;
    int n_cases;
    int (*layout)(const void *c, arg_desc *d);
    forge_status (*call)(forge_backend *be, const void *c);
    void (*show)(const void *c, char *buf, size_t cap);
} op_cases;


/* The cases of every op of the list, in enum order. */
extern const op_cases OP_WALKER_CASES[FORGE_OP_COUNT];

/* Every case of every op (flag_mask: only ops with one of these flags, e.g. FORGE_OPF_GEMM; 0: all). */
void op_walker_walk(parity *P, unsigned flag_mask);
/* Case k of one op, with the optional arguments present (with_opt = 1) or NULL. */
void op_walker_run_case(parity *P, const op_cases *oc, int k, int with_opt);
/* Case k with optional argument j (in argument order) present iff bit j of present_mask is set. */
void op_walker_run_case_opt(parity *P, const op_cases *oc, int k, unsigned present_mask);

#endif
