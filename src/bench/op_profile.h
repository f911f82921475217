/*
 * op_profile.h: where one training step's device time goes, op by op
 * (`forge bench train --breakdown`).
 *
 * Attaching a profile to a backend replaces every op of its table (and the
 * memset/copy entries the step uses) with a wrapper that stamps a mark before
 * and after the call on the backend's stream and then calls the original;
 * detaching puts the table back. Nothing waits while the step runs: the stamps
 * are read afterwards. Per op: calls and the time between its two stamps (the
 * kernels it queued, their launch gaps inside the op included); "between ops"
 * is the rest of the span from the first stamp to the last (launch latency and
 * host work the device waited for). The stamps cost host time themselves (a
 * few microseconds each), so a step that is bound by launches looks a little
 * more so here than it is; the per-op device times are not affected.
 *
 * One profile at a time per process (the wrappers find it through a static
 * pointer); attaching a second one is refused.
 */
#ifndef FORGE_OP_PROFILE_H
#define FORGE_OP_PROFILE_H

#include <stdio.h>

#include "../backend/backend.h"
#include "harness.h"

/* Table slots the profile counts besides the op list. */
enum { FORGE_PROFILE_MEMSET = FORGE_OP_COUNT, FORGE_PROFILE_COPY, FORGE_PROFILE_SLOTS };

/* Calls of one op with the same size and scalar arguments (the op list's SIZE and SCALAR entries, the first
 * FORGE_PROFILE_MAX_ARGS of them, by name). */
#define FORGE_PROFILE_MAX_ARGS 8
typedef struct {
    int slot;
    int n_args;
    const char *names[FORGE_PROFILE_MAX_ARGS];
    double values[FORGE_PROFILE_MAX_ARGS];
    int calls;
    double ms;
} forge_op_profile_shape;

typedef struct {
    int calls[FORGE_PROFILE_SLOTS];
    double ms[FORGE_PROFILE_SLOTS];
    double span_ms;    /* first stamp to last */
    double between_ms; /* span_ms minus the ops' own time */
    int n_calls;
    forge_op_profile_shape *shapes; /* n_shapes groups, first call first; forge_op_profile_result_free */
    int n_shapes;
} forge_op_profile_result;

typedef struct forge_op_profile forge_op_profile;

/* Wraps be's table; marks has room for 2 stamps per call (a call beyond that is refused with FORGE_ERR_ARG
 * naming the capacity). marks is borrowed until detach. */
forge_status forge_op_profile_attach(forge_op_profile **out, forge_backend *be, forge_bench_marks *marks);
/* Restores the table, reads the stamps (this waits for the device) into *r and frees the profile. On success
 * *r owns its shape groups: forge_op_profile_result_free. */
forge_status forge_op_profile_detach(forge_op_profile *p, forge_op_profile_result *r);
void forge_op_profile_result_free(forge_op_profile_result *r);

/* The result as a table, slowest first, ops under min_share of the span folded into one "other" line. */
void forge_op_profile_print(FILE *out, const forge_op_profile_result *r, double min_share);
/* The shape groups as a table, slowest first, at most max_lines, down to min_share of the span. */
void forge_op_profile_print_shapes(FILE *out, const forge_op_profile_result *r, double min_share, int max_lines);
const char *forge_op_profile_slot_name(int slot);

#endif
