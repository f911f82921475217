/*
 * op_walker.c: the generic parity walk (op_walker.h). Nothing here is written
 * per op: each entry of op_list.h says which arguments are inputs (and their
 * value ranges), outputs, accumulated outputs and workspace, how long each is
 * in terms of the entry's sizes, the tolerance of each compared output and the
 * shapes to run; this file turns that into buffers, calls, comparisons and
 * one PASS/FAIL line per output.
 *
 * How an op case works (like ggml's test-backend-ops):
 * - Inputs are random (forge_rng, fixed seeds) in the entry's range and
 *   identical on both sides; ids are uniform in [0, range) with the entry's
 *   share of `special` values (the classifier's ignore_index rows).
 * - OUT buffers are POISONED with NaN on both sides before the call, so an
 *   element the kernel forgets to write fails the comparison; ACC and INOUT
 *   buffers start with the same random values on both sides, so "=" instead
 *   of "+=" fails. An ACC_IF buffer is either, as its case's flag says: an
 *   op that writes a fresh gradient (flag 0) must set every element.
 * - Every device buffer has GUARD floats after it holding a sentinel; a write
 *   past the end fails the case even when memcheck is not running.
 * - An entry with optional arguments (IN_OPT, OUT_OPT, ACC_OPT) runs with
 *   them, and with every subset of them NULL (one optional argument: twice).
 *   A present OUT_OPT is poisoned and compared like OUT.
 * - Ops flagged FORGE_OPF_GEMM run again on a CUDA backend of every other
 *   matmul mode (simt64, simt128, cublas, tf32, auto); under tf32 a GEMM(K)
 *   tolerance is the bound of tf32 operand rounding: each operand is rounded
 *   to 10 mantissa bits (relative error <= 2^-11), so a K-long dot product is
 *   off by <= 2^-10 sum_k |a_k||b_k| plus the fp32 summation term SUM(K);
 *   with inputs uniform in [-1, 1], sum |a||b| has mean K/4 and standard
 *   deviation 0.217 sqrt(K), and the bound takes mean + 6 sd:
 *   2^-10 (K/4 + 1.3 sqrt(K)) + SUM(K).
 * - SUM(K) = 1e-4 * max(1, sqrt(K)/8): fp32 sums of K terms in different
 *   orders drift like sqrt(K) ulps of the running sum.
 * - An op whose CPU entry is NULL prints SKIP; a NULL CUDA entry, or an op
 *   with no cases, FAILs (the coverage line at the end lists them).
 *
 */
#include "op_walker.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the op list, turned into cases ------------------------------------------------------------------------ */

/* An entry's argument A(KIND, ...) becomes the tuple (KIND, ...); FOR_EACH_<MODE>(tuples) applies MODE to each. */
#define TUPLE(...) (__VA_ARGS__)
#define CASE_INIT(...) {__VA_ARGS__},
/* mode_A (t1)(t2)...(tn) expands to mode(t1) ... mode(tn) followed by a last mode_A or mode_B, which the
 * paste with _END turns into an empty macro (the expansion may hold commas: hence the variadic paste) */
#define FOR_EACH(mode, seq) PASTE_END(mode##_A seq)
#define PASTE_END(...) PASTE_END_(__VA_ARGS__)
#define PASTE_END_(...) __VA_ARGS__##_END

/* mode FIELD: the case struct's fields (pointers are filled per side by the walker) */
#define FIELD(kind, ...) FIELD_##kind(__VA_ARGS__)
#define FIELD_A(...) FIELD(__VA_ARGS__) FIELD_B
#define FIELD_B(...) FIELD(__VA_ARGS__) FIELD_A
#define FIELD_A_END
#define FIELD_B_END
#define FIELD_IN(T, name, ...) T *name;
#define FIELD_IN_OPT(T, name, ...) T *name;
#define FIELD_IN_TRIL(T, name, ...) T *name;
#define FIELD_OUT(T, name, ...) T *name;
#define FIELD_OUT_OPT(T, name, ...) T *name;
#define FIELD_ACC(T, name, ...) T *name;
#define FIELD_ACC_OPT(T, name, ...) T *name;
#define FIELD_ACC_IF(T, name, ...) T *name;
#define FIELD_ACC_IF_OPT(T, name, ...) T *name;
#define FIELD_INOUT(T, name, ...) T *name;
#define FIELD_IDS(name, ...) int32_t *name;
#define FIELD_SPANS(name, ...) forge_adamw_span *name;
#define FIELD_SCRATCH(name, ...) float *name;
#define FIELD_SIZE(T, name) T name;
#define FIELD_SCALAR(T, name) T name;
#define FIELD_PARAMS(T, name) T name;
#define FIELD_DIM(name) int name;

/* mode LOCAL: the sizes and scalars as locals, so the entry's length and tolerance expressions read them */
#define LOCAL(kind, ...) LOCAL_##kind(__VA_ARGS__)
#define LOCAL_A(...) LOCAL(__VA_ARGS__) LOCAL_B
#define LOCAL_B(...) LOCAL(__VA_ARGS__) LOCAL_A
#define LOCAL_A_END
#define LOCAL_B_END
#define LOCAL_IN(...)
#define LOCAL_IN_OPT(...)
#define LOCAL_IN_TRIL(...)
#define LOCAL_OUT(...)
#define LOCAL_OUT_OPT(...)
#define LOCAL_ACC(...)
#define LOCAL_ACC_OPT(...)
#define LOCAL_ACC_IF(...)
#define LOCAL_ACC_IF_OPT(...)
#define LOCAL_INOUT(...)
#define LOCAL_IDS(...)
#define LOCAL_SPANS(...)
#define LOCAL_SCRATCH(...)
#define LOCAL_SIZE(T, name) const T name = c_->name;
#define LOCAL_SCALAR(T, name) const T name = c_->name;
#define LOCAL_PARAMS(T, name)
#define LOCAL_DIM(name) const int name = c_->name;

/* mode DESC: one buffer descriptor per pointer argument */
#define DESC(kind, ...) DESC_##kind(__VA_ARGS__)
#define DESC_A(...) DESC(__VA_ARGS__) DESC_B
#define DESC_B(...) DESC(__VA_ARGS__) DESC_A
#define DESC_A_END
#define DESC_B_END
/* the element type of an argument of type T * */
#define ELEM_OF(T) _Generic((T *)0, float *: FORGE_F32, forge_bf16 *: FORGE_BF16, int32_t *: FORGE_I32)
#define DESC_BUF(role_, T, nm_, len_, lo_, hi_, tol_)                                                         \
    d[n_++] = (arg_desc){.role = role_, .name = #nm_, .offset = offsetof(case_t, nm_), .len = (size_t)(len_),     \
                         .lo = (lo_), .hi = (hi_), .elem = ELEM_OF(T), tol_};
#define DESC_IN(T, name, len, lo, hi) DESC_BUF(ARG_IN, T, name, len, lo, hi, .tol = 0)
#define DESC_IN_OPT(T, name, len, lo, hi) DESC_BUF(ARG_IN_OPT, T, name, len, lo, hi, .tol = 0)
#define DESC_IN_TRIL(T, name, len, lo, hi, n) DESC_BUF(ARG_IN_TRIL, T, name, len, lo, hi, .tril_n = (n))
#define DESC_OUT(T, name, len, tol) DESC_BUF(ARG_OUT, T, name, len, 0, 0, PTOL_##tol)
#define DESC_OUT_OPT(T, name, len, tol) DESC_BUF(ARG_OUT_OPT, T, name, len, 0, 0, PTOL_##tol)
#define DESC_ACC(T, name, len, tol) DESC_BUF(ARG_ACC, T, name, len, -1, 1, PTOL_##tol)
#define DESC_ACC_OPT(T, name, len, tol) DESC_BUF(ARG_ACC_OPT, T, name, len, -1, 1, PTOL_##tol)
/* accumulated when the case's flag is nonzero, else written in full: pre-filled, or poisoned like OUT */
#define DESC_ACC_IF(T, name, len, tol, flag) DESC_BUF((flag) ? ARG_ACC : ARG_OUT, T, name, len, -1, 1, PTOL_##tol)
#define DESC_ACC_IF_OPT(T, name, len, tol, flag)                                                                  \
    DESC_BUF((flag) ? ARG_ACC_OPT : ARG_OUT_OPT, T, name, len, -1, 1, PTOL_##tol)
#define DESC_INOUT(T, name, len, lo, hi, tol) DESC_BUF(ARG_INOUT, T, name, len, lo, hi, PTOL_##tol)
#define DESC_IDS(nm_, len_, range_, special_, pct_)                                                             \
    d[n_++] = (arg_desc){.role = ARG_IDS, .name = #nm_, .offset = offsetof(case_t, nm_), .len = (size_t)(len_),   \
                         .elem = FORGE_I32, .id_range = (range_), .id_special = (special_), .id_pct = (pct_)};
#define DESC_SPANS(nm_, total_, count_)                                                                         \
    d[n_++] = (arg_desc){.role = ARG_SPANS, .name = #nm_, .offset = offsetof(case_t, nm_),                        \
                         .len = (size_t)(count_) * (sizeof(forge_adamw_span) / sizeof(int32_t)), .elem = FORGE_I32, \
                         .span_total = (size_t)(total_)};
#define DESC_SCRATCH(name, len) DESC_BUF(ARG_SCRATCH, float, name, len, 0, 0, .tol = 0)
#define DESC_SIZE(T, name)
#define DESC_SCALAR(T, name)
#define DESC_PARAMS(T, name)
#define DESC_DIM(name)
/* the tolerance kinds of op_list.h */
#define PTOL_EXACT .tol = 1e-6
#define PTOL_ABS(x) .tol = (x)
#define PTOL_SUM(K) .tol = tol_for_sum((double)(K))
#define PTOL_SUMS(f, K) .tol = (f) * tol_for_sum((double)(K))
#define PTOL_GEMM(K) .tol = tol_for_sum((double)(K)), .gemm_k = (double)(K)
#define PTOL_REL(x) .tol = (x), .rel = 1
#define PTOL_ULP(k) .tol = (k), .ulps = 1
#define PTOL_ULP_SUMS(k, f, K) .tol = (k), .ulps = 1, .ulps_abs = (f) * tol_for_sum((double)(K))

/* mode CALL: the case's fields as the op's arguments */
#define CALL(kind, ...) CALL_##kind(__VA_ARGS__)
#define CALL_A(...) CALL(__VA_ARGS__) CALL_B
#define CALL_B(...) CALL(__VA_ARGS__) CALL_A
#define CALL_A_END
#define CALL_B_END
#define CALL_IN(T, name, ...) , c_->name
#define CALL_IN_OPT(T, name, ...) , c_->name
#define CALL_IN_TRIL(T, name, ...) , c_->name
#define CALL_OUT(T, name, ...) , c_->name
#define CALL_OUT_OPT(T, name, ...) , c_->name
#define CALL_ACC(T, name, ...) , c_->name
#define CALL_ACC_OPT(T, name, ...) , c_->name
#define CALL_ACC_IF(T, name, ...) , c_->name
#define CALL_ACC_IF_OPT(T, name, ...) , c_->name
#define CALL_INOUT(T, name, ...) , c_->name
#define CALL_IDS(name, ...) , c_->name
#define CALL_SPANS(name, ...) , c_->name
#define CALL_SCRATCH(name, ...) , c_->name
#define CALL_SIZE(T, name) , c_->name
#define CALL_SCALAR(T, name) , c_->name
#define CALL_PARAMS(T, name) , c_->name
#define CALL_DIM(name)

/* mode SHOW: the sizes, scalars and test dimensions, "N=37 C=768" */
#define SHOW(kind, ...) SHOW_##kind(__VA_ARGS__)
#define SHOW_A(...) SHOW(__VA_ARGS__) SHOW_B
#define SHOW_B(...) SHOW(__VA_ARGS__) SHOW_A
#define SHOW_A_END
#define SHOW_B_END
#define SHOW_VALUE(fmt, name, value)                                                                              \
    if (len < cap) len += (size_t)snprintf(buf + len, cap - len, "%s" #name "=" fmt, len ? " " : "", value);
#define SHOW_IN(...)
#define SHOW_IN_OPT(...)
#define SHOW_IN_TRIL(...)
#define SHOW_OUT(...)
#define SHOW_OUT_OPT(...)
#define SHOW_ACC(...)
#define SHOW_ACC_OPT(...)
#define SHOW_ACC_IF(...)
#define SHOW_ACC_IF_OPT(...)
#define SHOW_INOUT(...)
#define SHOW_IDS(...)
#define SHOW_SPANS(...)
#define SHOW_SCRATCH(...)
#define SHOW_SIZE(T, name) SHOW_VALUE("%lld", name, (long long)c_->name)
#define SHOW_SCALAR(T, name) SHOW_VALUE("%g", name, (double)c_->name)
#define SHOW_PARAMS(T, name)
#define SHOW_DIM(name) SHOW_VALUE("%d", name, c_->name)

#define OP_TEST(name, dtype, flags, args, cases)                                                                  \
    typedef struct {                                                                                              \
        FOR_EACH(FIELD, args)                                                                                     \
    } case_##name;                                                                                                \
    static const case_##name cases_##name[] = {cases};                                                            \
    static int layout_##name(const void *cv, arg_desc *d) {                                                       \
        typedef case_##name case_t;                                                                               \
        const case_t *c_ = (const case_t *)cv;                                                                    \
        FOR_EACH(LOCAL, args)                                                                                     \
        int n_ = 0;                                                                                               \
        FOR_EACH(DESC, args)                                                                                      \
        return n_;                                                                                                \
    }                                                                                                             \
    static forge_status call_##name(forge_backend *be, const void *cv) {                                          \
        const case_##name *c_ = (const case_##name *)cv;                                                          \
        return be->name(be FOR_EACH(CALL, args));                                                                 \
    }                                                                                                             \
    static void show_##name(const void *cv, char *buf, size_t cap) {                                              \
        const case_##name *c_ = (const case_##name *)cv;                                                          \
        size_t len = 0;                                                                                           \
        buf[0] = '\0';                                                                                            \
        FOR_EACH(SHOW, args)                                                                                      \
    }
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-variable"
#endif
FORGE_OP_LIST(OP_TEST, TUPLE, CASE_INIT)
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#define OP_ROW(name, dtype, flags, args, cases)                                                                   \
    {FORGE_OP_##name, sizeof(case_##name), cases_##name, (int)(sizeof cases_##name / sizeof cases_##name[0]),     \
     layout_##name, call_##name, show_##name},
const op_cases OP_WALKER_CASES[FORGE_OP_COUNT] = {FORGE_OP_LIST(OP_ROW, TUPLE, CASE_INIT)};

/* ---- the walker ------------------------------------------------------------------------------------------------ */

#define QUICK_MAX_ELEMENTS 1000000

/* Max abs tolerance of a K-long GEMM reduction under the GPU backend's matmul mode (the top of the file). */
static double gemm_tol(const parity *P, const arg_desc *a) {
    if (a->gemm_k <= 0) return a->tol;
    if (P->gpu->options.matmul == FORGE_MATMUL_TF32)
        return ldexp(a->gemm_k / 4.0 + 1.3 * sqrt(a->gemm_k), -10) + tol_for_sum(a->gemm_k);
    return a->tol;
}

static void set_ptr(void *c, size_t offset, void *ptr) { memcpy((char *)c + offset, &ptr, sizeof ptr); }

static int is_optional(arg_role role) { return role == ARG_IN_OPT || role == ARG_OUT_OPT || role == ARG_ACC_OPT; }

/* The optional arguments of case k (at most 31 counted). */
static int n_optional(const op_cases *oc, int k) {
    arg_desc d[MAX_ARGS];
    int n = oc->layout((const char *)oc->cases + (size_t)k * oc->case_size, d), count = 0;
    for (int i = 0; i < n; i++) count += is_optional(d[i].role);
    return count < 31 ? count : 31;
}

/* One case of one op, with the optional arguments present (with_opt) or NULL. */
void op_walker_run_case(parity *P, const op_cases *oc, int k, int with_opt) {
    op_walker_run_case_opt(P, oc, k, with_opt ? ~0u : 0u);
}

/* One case of one op; optional argument j present iff bit j of present_mask is set. */
void op_walker_run_case_opt(parity *P, const op_cases *oc, int k, unsigned present_mask) {
    const char *name = forge_op_name(oc->op);
    const void *proto = (const char *)oc->cases + (size_t)k * oc->case_size;
    char op[96], shape[288], dims[160], nulls[96] = "";
    oc->show(proto, dims, sizeof dims);
    arg_desc d[MAX_ARGS];
    int n = oc->layout(proto, d), n_opt = 0, n_null = 0;
    int present[MAX_ARGS]; /* per argument: 0 for an optional argument passed as NULL */
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        total += d[i].len;
        present[i] = 1;
        if (is_optional(d[i].role)) {
            present[i] = n_opt < 31 && ((present_mask >> n_opt) & 1u);
            n_opt++;
            if (!present[i]) {
                size_t used = strlen(nulls);
                snprintf(nulls + used, sizeof nulls - used, "%s%s", n_null++ ? ", " : "", d[i].name);
            }
        }
    }
    if (n_opt == 0 && present_mask != ~0u) return; /* no optional argument: run once, as "all present" */
    if (P->quick && total > QUICK_MAX_ELEMENTS) return;
    snprintf(op, sizeof op, "%s[%s]", name, forge_matmul_mode_name(P->gpu->options.matmul));
    if (n_null == 0) snprintf(shape, sizeof shape, "%s", dims);
    else if (n_null == n_opt) snprintf(shape, sizeof shape, "%s (optional args NULL)", dims);
    else snprintf(shape, sizeof shape, "%s (NULL: %s)", dims, nulls);

    void *cc = malloc(oc->case_size), *gc = malloc(oc->case_size);
    fbuf f[MAX_ARGS];
    bbuf h[MAX_ARGS];
    ibuf ids[MAX_ARGS];
    memset(f, 0, sizeof f);
    memset(h, 0, sizeof h);
    memset(ids, 0, sizeof ids);
    int ok = cc && gc;
    if (ok) {
        memcpy(cc, proto, oc->case_size);
        memcpy(gc, proto, oc->case_size);
    }
    for (int i = 0; i < n && ok; i++) {
        const arg_desc *a = &d[i];
        if (!present[i]) {
            set_ptr(cc, a->offset, NULL);
            set_ptr(gc, a->offset, NULL);
            continue;
        }
        const int poisoned = a->role == ARG_OUT || a->role == ARG_OUT_OPT || a->role == ARG_SCRATCH;
        if (a->role == ARG_SPANS) {
            ok = ibuf_spans(P, &ids[i], a->len / (sizeof(forge_adamw_span) / sizeof(int32_t)), a->span_total);
            if (ok) set_ptr(cc, a->offset, ids[i].c), set_ptr(gc, a->offset, ids[i].g);
        } else if (a->elem == FORGE_I32) {
            ok = ibuf_rand(P, &ids[i], a->len, a->id_range, a->id_special, a->id_pct);
            if (ok) set_ptr(cc, a->offset, ids[i].c), set_ptr(gc, a->offset, ids[i].g);
        } else if (a->elem == FORGE_BF16) {
            ok = a->role == ARG_IN_TRIL ? 0 /* not built: no bf16 op takes a causal matrix */
                 : poisoned           ? bbuf_poison(P, &h[i], a->len)
                                      : bbuf_rand(P, &h[i], a->len, (float)a->lo, (float)a->hi);
            if (ok) set_ptr(cc, a->offset, h[i].c), set_ptr(gc, a->offset, h[i].g);
        } else {
            ok = poisoned                   ? fbuf_poison(P, &f[i], a->len)
                 : a->role == ARG_IN_TRIL ? fbuf_rand_tril(P, &f[i], a->len, (float)a->lo, (float)a->hi, a->tril_n)
                                          : fbuf_rand(P, &f[i], a->len, (float)a->lo, (float)a->hi);
            if (ok) set_ptr(cc, a->offset, f[i].c), set_ptr(gc, a->offset, f[i].g);
        }
        if (!ok) break;
    }
    if (ok && ran_ok(P, op, shape, oc->call(P->cpu, cc), oc->call(P->gpu, gc))) {
        for (int i = 0; i < n; i++) {
            const arg_desc *a = &d[i];
            int compared = present[i] && (a->role == ARG_OUT || a->role == ARG_OUT_OPT || a->role == ARG_ACC ||
                                          a->role == ARG_INOUT || a->role == ARG_ACC_OPT);
            if (!compared) continue;
            char what[160];
            snprintf(what, sizeof what, "%s.%s", op, a->name);
            if (a->elem == FORGE_BF16) check_bf16_tol(P, what, shape, &h[i], a->tol, a->ulps, a->ulps_abs);
            else check(P, what, shape, &f[i], gemm_tol(P, a), a->rel);
        }
    } else if (!ok) {
        report(P, 0, op, shape, INFINITY, 0, "(could not set up the case's buffers)");
    }
    for (int i = 0; i < n; i++) {
        fbuf_free(P, &f[i]);
        bbuf_free(P, &h[i]);
        ibuf_free(P, &ids[i]);
    }
    free(cc);
    free(gc);
}

/* whether name is one of the comma-separated names of list */
static int in_list(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        p += len + (end ? 1 : 0);
    }
    return 0;
}

/* Every case of every op (flag_mask: only ops with one of these flags; 0: all; P->op_filter: only those named). */
void op_walker_walk(parity *P, unsigned flag_mask) {
    for (int o = 0; o < FORGE_OP_COUNT; o++) {
        const op_cases *oc = &OP_WALKER_CASES[o];
        if (flag_mask && !(forge_op_flags(oc->op) & flag_mask)) continue;
        const char *name = forge_op_name(oc->op);
        if (P->op_filter && !in_list(P->op_filter, name)) continue;
        if (!supported(P, name, "(all cases)", forge_backend_op(P->cpu, oc->op), forge_backend_op(P->gpu, oc->op)))
            continue;
        if (oc->n_cases == 0) {
            report(P, 0, name, "(coverage)", INFINITY, 0, "(op_list.h gives this op no cases)");
            continue;
        }
        for (int k = 0; k < oc->n_cases; k++) {
            /* every subset of the optional arguments, all present first, all NULL last */
            const unsigned full = (1u << n_optional(oc, k)) - 1u;
            op_walker_run_case(P, oc, k, 1);
            for (unsigned mask = full; mask-- > 0;) op_walker_run_case_opt(P, oc, k, mask);
        }
    }
}

