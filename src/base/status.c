/* status.c: the per-thread error message behind forge_status. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define FORGE_ERROR_CAP 2048

static _Thread_local char error_message[FORGE_ERROR_CAP];

forge_status forge_error(forge_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    return status;
}

forge_status forge_error_context(forge_status status, const char *fmt, ...) {
    char prefix[512];
    char previous[FORGE_ERROR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(previous, error_message, sizeof previous);
    /* prefix first, then as much of the old message as still fits */
    size_t np = strlen(prefix), room = sizeof error_message - 1;
    if (np > room) np = room;
    size_t nm = strnlen(previous, sizeof previous - 1);
    if (nm > room - np) nm = room - np;
    memmove(error_message, prefix, np);
    memcpy(error_message + np, previous, nm);
    error_message[np + nm] = '\0';
    return status;
}

const char *forge_error_message(void) { return error_message; }

void forge_error_clear(void) { error_message[0] = '\0'; }

const char *forge_status_name(forge_status status) {
    static const char *names[] = {
        "ok", "bad argument", "bad config", "I/O error", "bad data",
        "out of memory", "numeric error", "unsupported", "device error", "interrupted", "stale graph",
    };
    _Static_assert(sizeof names / sizeof names[0] == FORGE_STATUS_COUNT,
                   "status names out of step with forge_status");
    if ((int)status < 0 || status >= FORGE_STATUS_COUNT) return "unknown";
    return names[status];
}

int forge_status_exit_code(forge_status status) {
    switch (status) {
    case FORGE_OK: return 0;
    case FORGE_ERR_ARG:
    case FORGE_ERR_CONFIG: return 2;
    case FORGE_ERR_INTERRUPTED: return 130;
    default: return 1;
    }
}
