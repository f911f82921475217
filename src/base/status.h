/*
 * status.h: how forge reports failure.
 *
 * Every function that can fail returns a forge_status. On failure it has also
 * written a message naming the file, the field and what was expected; the
 * message is kept per thread and read with forge_error_message(). Only the CLI
 * turns a status into an exit code: library code never exits.
 */
#ifndef FORGE_STATUS_H
#define FORGE_STATUS_H

typedef enum {
    FORGE_OK = 0,
    FORGE_ERR_ARG,         /* bad argument or command line */
    FORGE_ERR_CONFIG,      /* bad config file: unknown key, wrong type, out of range */
    FORGE_ERR_IO,          /* missing file, short read, failed write */
    FORGE_ERR_DATA,        /* truncated or corrupt data file */
    FORGE_ERR_OOM,         /* host or device allocation failed */
    FORGE_ERR_NUMERIC,     /* non-finite loss or gradient */
    FORGE_ERR_UNSUPPORTED, /* backend lacks an op, or a shape it cannot do */
    FORGE_ERR_DEVICE,      /* a device runtime call failed */
    FORGE_ERR_INTERRUPTED, /* stopped by a signal; state was saved */
    FORGE_ERR_STALE,       /* a recorded graph no longer matches the memory it uses: record it again */
    FORGE_STATUS_COUNT
} forge_status;

/* Records a printf-style message for this thread and returns `status`, so a
 * failing function can `return forge_error(FORGE_ERR_IO, "...", ...);`. */
forge_status forge_error(forge_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepends context ("while loading model.safetensors: ") to the current
 * message and returns `status` unchanged. */
forge_status forge_error_context(forge_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

const char *forge_error_message(void);
const char *forge_status_name(forge_status status);
void forge_error_clear(void);

/* Exit code the CLI uses for a status: 2 for usage/config errors, 1 otherwise. */
int forge_status_exit_code(forge_status status);

/* Propagates a failing status to the caller. */
#define FORGE_TRY(expr)                      \
    do {                                     \
        forge_status forge_try_s_ = (expr);  \
        if (forge_try_s_ != FORGE_OK)        \
            return forge_try_s_;             \
    } while (0)

#endif
