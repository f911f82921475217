/*
 * provenance.c: the build-time provenance fields (commit, dirty flag,
 * compiler) and the host description a CPU suite records.
 *
 * The decision a reader would otherwise get wrong: FORGE_GIT_COMMIT and
 * FORGE_GIT_DIRTY are macros the Makefile passes on every compile, but only
 * this file reads them, and the Makefile rebuilds this object on every make
 * (a FORCE prerequisite). Otherwise an unchanged object would keep the commit
 * of the build that first compiled it and results would name a stale commit.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef FORGE_GIT_COMMIT
#define FORGE_GIT_COMMIT "unknown"
#endif
#ifndef FORGE_GIT_DIRTY
#define FORGE_GIT_DIRTY 1
#endif

/* "model name : AMD EPYC ..." from /proc/cpuinfo, or "unknown-cpu" */
static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown-cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t len = strcspn(v, "\r\n");
        if (len == 0) continue;
        if (len >= n) len = n - 1;
        memcpy(out, v, len);
        out[len] = '\0';
        break;
    }
    fclose(f);
}

void forge_provenance_init_host(forge_provenance *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->commit, sizeof p->commit, "%s", FORGE_GIT_COMMIT);
    p->dirty = FORGE_GIT_DIRTY ? 1 : 0;
    snprintf(p->toolkit, sizeof p->toolkit, "cc %s", __VERSION__);
    cpu_model(p->gpu_name, sizeof p->gpu_name);
#ifdef _OPENMP
    p->sm_count = omp_get_max_threads();
#else
    p->sm_count = 1;
#endif
    snprintf(p->driver, sizeof p->driver, "none");
    p->clock_sm_mhz_start = p->clock_sm_mhz_end = -1;
    p->clock_mem_mhz_start = p->clock_mem_mhz_end = -1;
}
