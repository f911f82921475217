/* op_profile.c: the op-by-op breakdown of a step (op_profile.h). */
#include "op_profile.h"

#include <stdlib.h>
#include <string.h>

/* A call's size and scalar arguments (the op list's SIZE and SCALAR entries), in the list's order. */
typedef struct {
    const char *names[FORGE_PROFILE_MAX_ARGS];
    double values[FORGE_PROFILE_MAX_ARGS];
    int n;
} call_args;

struct forge_op_profile {
    forge_backend *be;
    forge_backend saved; /* the table as it was: the wrappers call through it */
    forge_bench_marks *marks;
    int *slot_of_call;   /* the op slot of call i: stamps 2i (before) and 2i + 1 (after) */
    call_args *args;     /* call i's sizes */
    int n, cap;
    forge_status failed; /* the first stamp that could not be recorded */
};

static forge_op_profile *active;

/* Stamps the start of a call; returns its index, or -1 when out of room (the call still runs). */
static int stamp_begin(int slot) {
    forge_op_profile *p = active;
    if (p->n >= p->cap) {
        if (p->failed == FORGE_OK)
            p->failed = forge_error(FORGE_ERR_ARG, "op profile: more than %d calls (the marks' capacity %d / 2)",
                                    p->cap, p->marks->capacity);
        return -1;
    }
    const int i = p->n++;
    p->slot_of_call[i] = slot;
    p->args[i].n = 0;
    forge_status s = p->marks->record(p->marks->ctx, 2 * i);
    if (s != FORGE_OK && p->failed == FORGE_OK) p->failed = s;
    return i;
}

/* Records one size or scalar argument of call i (the first FORGE_PROFILE_MAX_ARGS are kept). */
static void record_arg(int i, const char *name, double value) {
    if (i < 0) return;
    call_args *a = &active->args[i];
    if (a->n == FORGE_PROFILE_MAX_ARGS) return;
    a->names[a->n] = name;
    a->values[a->n++] = value;
}

static void stamp_end(int i) {
    if (i < 0) return;
    forge_status s = active->marks->record(active->marks->ctx, 2 * i + 1);
    if (s != FORGE_OK && active->failed == FORGE_OK) active->failed = s;
}

/* One wrapper per op. The list is walked with A() turned into a parenthesised tuple, so an entry's arguments
 * are a sequence (kind, ...) (kind, ...) ...; PROF_DECLS and PROF_PASSES walk it twice, once for the parameter
 * list (op_list.h's FORGE_ARG_DECL) and once for the call (", name"). */
#define PROF_TUPLE(...) (__VA_ARGS__)
#define PROF_EMPTY()
#define PROF_CAT(a, b) PROF_CAT_(a, b)
#define PROF_CAT_(a, b) a##b
/* Each step leaves "PROF_D (kind, ...)" unexpanded (PROF_EMPTY() stands between the name and its parenthesis
 * during the walk), so the walk's result holds no bare comma until the final paste; after it, PROF_D expands. */
#define PROF_DECLS(seq) PROF_CAT(PROF_DECL_A seq, _END)
#define PROF_DECL_A(...) PROF_D PROF_EMPTY()(__VA_ARGS__) PROF_DECL_B
#define PROF_DECL_B(...) PROF_D PROF_EMPTY()(__VA_ARGS__) PROF_DECL_A
#define PROF_DECL_A_END
#define PROF_DECL_B_END
#define PROF_D(...) FORGE_ARG_DECL(__VA_ARGS__)
#define PROF_PASSES(seq) PROF_CAT(PROF_PASS_A seq, _END)
#define PROF_PASS_A(...) PROF_P PROF_EMPTY()(__VA_ARGS__) PROF_PASS_B
#define PROF_PASS_B(...) PROF_P PROF_EMPTY()(__VA_ARGS__) PROF_PASS_A
#define PROF_PASS_A_END
#define PROF_PASS_B_END
#define PROF_P(...) PROF_PASS(__VA_ARGS__)
#define PROF_PASS(kind, ...) PROF_PASS_##kind(__VA_ARGS__)
#define PROF_PASS_IN(T, name, ...) , name
#define PROF_PASS_IN_OPT(T, name, ...) , name
#define PROF_PASS_IN_TRIL(T, name, ...) , name
#define PROF_PASS_OUT(T, name, ...) , name
#define PROF_PASS_OUT_OPT(T, name, ...) , name
#define PROF_PASS_ACC(T, name, ...) , name
#define PROF_PASS_ACC_OPT(T, name, ...) , name
#define PROF_PASS_ACC_IF(T, name, ...) , name
#define PROF_PASS_ACC_IF_OPT(T, name, ...) , name
#define PROF_PASS_INOUT(T, name, ...) , name
#define PROF_PASS_IDS(name, ...) , name
#define PROF_PASS_SPANS(name, ...) , name
#define PROF_PASS_SCRATCH(name, ...) , name
#define PROF_PASS_SIZE(T, name) , name
#define PROF_PASS_SCALAR(T, name) , name
#define PROF_PASS_PARAMS(T, name) , name
#define PROF_PASS_DIM(name)

/* The third walk records the SIZE and SCALAR arguments of call i (record_arg). */
#define PROF_RECORDS(seq) PROF_CAT(PROF_REC_A seq, _END)
#define PROF_REC_A(...) PROF_R PROF_EMPTY()(__VA_ARGS__) PROF_REC_B
#define PROF_REC_B(...) PROF_R PROF_EMPTY()(__VA_ARGS__) PROF_REC_A
#define PROF_REC_A_END
#define PROF_REC_B_END
#define PROF_R(...) PROF_REC(__VA_ARGS__)
#define PROF_REC(kind, ...) PROF_REC_##kind(__VA_ARGS__)
#define PROF_REC_IN(T, name, ...)
#define PROF_REC_IN_OPT(T, name, ...)
#define PROF_REC_IN_TRIL(T, name, ...)
#define PROF_REC_OUT(T, name, ...)
#define PROF_REC_OUT_OPT(T, name, ...)
#define PROF_REC_ACC(T, name, ...)
#define PROF_REC_ACC_OPT(T, name, ...)
#define PROF_REC_ACC_IF(T, name, ...)
#define PROF_REC_ACC_IF_OPT(T, name, ...)
#define PROF_REC_INOUT(T, name, ...)
#define PROF_REC_IDS(name, ...)
#define PROF_REC_SPANS(name, ...)
#define PROF_REC_SCRATCH(name, ...)
#define PROF_REC_SIZE(T, name) record_arg(i, #name, (double)(name));
#define PROF_REC_SCALAR(T, name) record_arg(i, #name, (double)(name));
#define PROF_REC_PARAMS(T, name)
#define PROF_REC_DIM(name)

#define PROF_WRAPPER(name, dtype, flags, args, cases)                     \
    static forge_status prof_##name(forge_backend *be PROF_DECLS(args)) { \
        const int i = stamp_begin(FORGE_OP_##name);                       \
        PROF_RECORDS(args)                                                \
        forge_status s = active->saved.name(be PROF_PASSES(args));        \
        stamp_end(i);                                                     \
        return s;                                                         \
    }
FORGE_OP_LIST(PROF_WRAPPER, PROF_TUPLE, FORGE_OP_NOTHING)

static forge_status prof_memset_zero(forge_backend *be, void *dst, size_t bytes) {
    const int i = stamp_begin(FORGE_PROFILE_MEMSET);
    forge_status s = active->saved.memset_zero(be, dst, bytes);
    stamp_end(i);
    return s;
}

static forge_status prof_copy_device(forge_backend *be, void *dst, const void *src, size_t bytes) {
    const int i = stamp_begin(FORGE_PROFILE_COPY);
    forge_status s = active->saved.copy_device(be, dst, src, bytes);
    stamp_end(i);
    return s;
}

/* Every op the backend has (a NULL entry stays NULL: unsupported). */
#define PROF_BIND(name, dtype, flags, args, cases) \
    if (be->name) be->name = prof_##name;

forge_status forge_op_profile_attach(forge_op_profile **out, forge_backend *be, forge_bench_marks *marks) {
    *out = NULL;
    if (active) return forge_error(FORGE_ERR_ARG, "op profile: another profile is attached");
    if (!marks || marks->capacity < 2)
        return forge_error(FORGE_ERR_ARG, "op profile: the marks need room for at least one call (2 stamps)");
    forge_op_profile *p = calloc(1, sizeof *p);
    if (p) p->slot_of_call = malloc((size_t)(marks->capacity / 2) * sizeof(int));
    if (p) p->args = malloc((size_t)(marks->capacity / 2) * sizeof(call_args));
    if (!p || !p->slot_of_call || !p->args) {
        if (p) {
            free(p->slot_of_call);
            free(p->args);
            free(p);
        }
        return forge_error(FORGE_ERR_OOM, "op profile: %d calls", marks->capacity / 2);
    }
    p->be = be;
    p->saved = *be;
    p->marks = marks;
    p->cap = marks->capacity / 2;
    active = p;
    FORGE_OP_LIST(PROF_BIND, FORGE_OP_NOTHING, FORGE_OP_NOTHING)
    if (be->memset_zero) be->memset_zero = prof_memset_zero;
    if (be->copy_device) be->copy_device = prof_copy_device;
    *out = p;
    return FORGE_OK;
}

forge_status forge_op_profile_detach(forge_op_profile *p, forge_op_profile_result *r) {
    memset(r, 0, sizeof *r);
    *p->be = p->saved;
    active = NULL;
    forge_status s = p->failed;
    double own = 0;
    if (p->n > 0) {
        r->shapes = calloc((size_t)p->n, sizeof *r->shapes);
        if (!r->shapes && s == FORGE_OK) s = forge_error(FORGE_ERR_OOM, "op profile: %d shape groups", p->n);
    }
    for (int i = 0; i < p->n && s == FORGE_OK; i++) {
        double ms = 0;
        s = p->marks->elapsed(p->marks->ctx, 2 * i, 2 * i + 1, &ms);
        r->calls[p->slot_of_call[i]]++;
        r->ms[p->slot_of_call[i]] += ms;
        own += ms;
        /* the group of calls with this op and these arguments (a linear search: a step has a few dozen) */
        const call_args *a = &p->args[i];
        int g = 0;
        for (; g < r->n_shapes; g++) {
            forge_op_profile_shape *h = &r->shapes[g];
            if (h->slot != p->slot_of_call[i] || h->n_args != a->n) continue;
            int same = 1;
            for (int k = 0; k < a->n && same; k++) same = h->values[k] == a->values[k];
            if (same) break;
        }
        forge_op_profile_shape *h = &r->shapes[g];
        if (g == r->n_shapes) {
            r->n_shapes++;
            h->slot = p->slot_of_call[i];
            h->n_args = a->n;
            for (int k = 0; k < a->n; k++) {
                h->names[k] = a->names[k];
                h->values[k] = a->values[k];
            }
        }
        h->calls++;
        h->ms += ms;
    }
    if (s == FORGE_OK && p->n > 0) s = p->marks->elapsed(p->marks->ctx, 0, 2 * p->n - 1, &r->span_ms);
    r->n_calls = p->n;
    r->between_ms = r->span_ms - own;
    free(p->slot_of_call);
    free(p->args);
    free(p);
    if (s != FORGE_OK) forge_op_profile_result_free(r);
    return s;
}

void forge_op_profile_result_free(forge_op_profile_result *r) {
    free(r->shapes);
    r->shapes = NULL;
    r->n_shapes = 0;
}

const char *forge_op_profile_slot_name(int slot) {
    if (slot == FORGE_PROFILE_MEMSET) return "memset_zero";
    if (slot == FORGE_PROFILE_COPY) return "copy_device";
    return slot >= 0 && slot < FORGE_OP_COUNT ? forge_op_name((forge_op)slot) : "?";
}

void forge_op_profile_print(FILE *out, const forge_op_profile_result *r, double min_share) {
    int order[FORGE_PROFILE_SLOTS], n = 0;
    for (int i = 0; i < FORGE_PROFILE_SLOTS; i++)
        if (r->calls[i]) order[n++] = i;
    for (int i = 1; i < n; i++) /* insertion sort, slowest first */
        for (int j = i; j > 0 && r->ms[order[j]] > r->ms[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    const double span = r->span_ms > 0 ? r->span_ms : 1;
    fprintf(out, "  %-34s %6s %10s %7s\n", "op", "calls", "ms", "share");
    int other_calls = 0;
    double other_ms = 0;
    for (int k = 0; k < n; k++) {
        const int i = order[k];
        if (r->ms[i] / span < min_share) {
            other_calls += r->calls[i];
            other_ms += r->ms[i];
            continue;
        }
        fprintf(out, "  %-34s %6d %10.3f %6.1f%%\n", forge_op_profile_slot_name(i), r->calls[i], r->ms[i],
                100 * r->ms[i] / span);
    }
    if (other_calls)
        fprintf(out, "  %-34s %6d %10.3f %6.1f%%\n", "(other ops)", other_calls, other_ms, 100 * other_ms / span);
    fprintf(out, "  %-34s %6s %10.3f %6.1f%%\n", "(between ops: launches, host)", "", r->between_ms,
            100 * r->between_ms / span);
    fprintf(out, "  %-34s %6d %10.3f %6.1f%%\n", "step span", r->n_calls, r->span_ms, 100.0);
}

void forge_op_profile_print_shapes(FILE *out, const forge_op_profile_result *r, double min_share, int max_lines) {
    if (!r->shapes || r->n_shapes == 0) return;
    int *order = malloc((size_t)r->n_shapes * sizeof *order);
    if (!order) return; /* a printout only: nothing to report it to */
    for (int i = 0; i < r->n_shapes; i++) order[i] = i;
    for (int i = 1; i < r->n_shapes; i++) /* insertion sort, slowest first */
        for (int j = i; j > 0 && r->shapes[order[j]].ms > r->shapes[order[j - 1]].ms; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    const double span = r->span_ms > 0 ? r->span_ms : 1;
    fprintf(out, "  %-34s %6s %10s %10s %7s  %s\n", "op", "calls", "ms", "us/call", "share", "arguments");
    for (int k = 0; k < r->n_shapes && k < max_lines; k++) {
        const forge_op_profile_shape *h = &r->shapes[order[k]];
        if (h->ms / span < min_share) break;
        char args[256];
        int len = 0;
        args[0] = 0;
        for (int a = 0; a < h->n_args && len < (int)sizeof args; a++)
            len += snprintf(args + len, sizeof args - (size_t)len, "%s%s=%g", a ? " " : "", h->names[a], h->values[a]);
        fprintf(out, "  %-34s %6d %10.3f %10.1f %6.1f%%  %s\n", forge_op_profile_slot_name(h->slot), h->calls, h->ms,
                1000 * h->ms / h->calls, 100 * h->ms / span, args);
    }
    free(order);
}
