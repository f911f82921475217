/* bench_opts.c: option parsing of the lab's Hopper benchmark commands (bench_opts.h). */
#include "bench_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/base/status.h"
#include "../../src/bench/harness.h"

/* argv[*i] is `name` or `name=VALUE`: *value is the value (the next word for the first form) and 1 is returned;
 * 0 if it is another option; -1 if the value is missing. */
static int opt_value(int argc, char **argv, int *i, const char *name, const char **value) {
    const size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return 0;
    if (argv[*i][n] == '=') {
        *value = argv[*i] + n + 1;
        return 1;
    }
    if (argv[*i][n] != '\0') return 0;
    if (*i + 1 >= argc) return -1;
    *value = argv[++*i];
    return 1;
}

static int usage_error(const char *command, const char *usage, const char *what, const char *arg) {
    fprintf(stderr, "forge-lab %s: %s%s\nusage: forge-lab %s %s\n", command, what, arg, command, usage);
    return 2;
}

int lab_fp8_bench_opts_parse(lab_fp8_bench_opts *o, int argc, char **argv, const char *command, const char *usage,
                             const char *own_opt) {
    memset(o, 0, sizeof *o);
    const char *order = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = opt_value(argc, argv, &i, "--reps", &v)) != 0) {
            char *end = NULL;
            const long x = r > 0 ? strtol(v, &end, 10) : 0;
            if (r < 0 || end == v || *end != '\0' || x < 1 || x > 100000)
                return usage_error(command, usage, "--reps needs an integer in 1..100000, got ", r > 0 ? v : "nothing");
            o->reps = (int)x;
        } else if ((r = opt_value(argc, argv, &i, "--results", &v)) != 0) {
            if (r < 0) return usage_error(command, usage, "option needs a value: ", "--results");
            o->results = v;
        } else if ((r = opt_value(argc, argv, &i, "--only", &v)) != 0) {
            if (r < 0) return usage_error(command, usage, "option needs a value: ", "--only");
            forge_harness_set_cell_filter(v);
        } else if ((r = opt_value(argc, argv, &i, "--order", &v)) != 0) {
            if (r < 0) return usage_error(command, usage, "option needs a value: ", "--order");
            order = v;
        } else if (own_opt && (r = opt_value(argc, argv, &i, own_opt, &v)) != 0) {
            if (r < 0) return usage_error(command, usage, "option needs a value: ", own_opt);
            o->own = v;
        } else {
            return usage_error(command, usage, "unknown argument ", argv[i]);
        }
    }
    forge_harness_set_default_root(o->results);
    if (order) {
        forge_timing_order t;
        if (forge_timing_order_parse(order, &t) != FORGE_OK)
            return usage_error(command, usage, forge_error_message(), "");
        forge_harness_set_default_order(t);
    }
    return 0;
}

int lab_fp8_bench_exit(const char *command, int s) {
    if (s == FORGE_OK) return 0;
    fprintf(stderr, "forge-lab %s: %s: %s\n", command, forge_status_name((forge_status)s), forge_error_message());
    return 1;
}
