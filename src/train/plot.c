/* plot.c: loss curves of runs through gnuplot (plot.h). */
#include "plot.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../base/fs.h"

/* One run's log as two data files, "x loss" per line: dir/run<i>.train and dir/run<i>.val. *has_tokens = 0 if a
 * line lacks "tokens"; *n_train and *n_val count the points. */
static forge_status run_to_data(const char *run, int i, const char *dir, int *has_tokens, int *n_train,
                                int *n_val) {
    char log[1200], tp[1200], vp[1200];
    snprintf(log, sizeof log, "%s/log.jsonl", run);
    snprintf(tp, sizeof tp, "%s/run%d.train", dir, i);
    snprintf(vp, sizeof vp, "%s/run%d.val", dir, i);
    char *text = NULL;
    size_t len = 0;
    FORGE_TRY(forge_read_file(log, &text, &len));
    FILE *ft = fopen(tp, "w"), *fv = fopen(vp, "w");
    forge_status s = ft && fv ? FORGE_OK : forge_error(FORGE_ERR_IO, "plot: cannot write %s: %s", tp, strerror(errno));
    *n_train = *n_val = 0;
    for (char *line = text, *next; s == FORGE_OK && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (!*line) continue;
        cJSON *j = cJSON_Parse(line);
        if (!j) continue; /* a torn last line of an interrupted run */
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step");
        const cJSON *tk = cJSON_GetObjectItemCaseSensitive(j, "tokens");
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(j, "loss");
        const cJSON *vl = cJSON_GetObjectItemCaseSensitive(j, "val_loss");
        if (cJSON_IsNumber(st) && (cJSON_IsNumber(lo) || cJSON_IsNumber(vl))) {
            if (!cJSON_IsNumber(tk)) *has_tokens = 0;
            const double x = cJSON_IsNumber(tk) ? tk->valuedouble : st->valuedouble;
            if (cJSON_IsNumber(lo)) {
                fprintf(ft, "%.17g %.9g %.17g\n", x, lo->valuedouble, st->valuedouble);
                ++*n_train;
            }
            if (cJSON_IsNumber(vl)) {
                fprintf(fv, "%.17g %.9g %.17g\n", x, vl->valuedouble, st->valuedouble);
                ++*n_val;
            }
        }
        cJSON_Delete(j);
    }
    free(text);
    if (ft && fclose(ft) != 0 && s == FORGE_OK) s = forge_error(FORGE_ERR_IO, "plot: cannot write %s", tp);
    if (fv && fclose(fv) != 0 && s == FORGE_OK) s = forge_error(FORGE_ERR_IO, "plot: cannot write %s", vp);
    if (s == FORGE_OK && *n_train == 0 && *n_val == 0)
        s = forge_error(FORGE_ERR_IO, "plot: %s holds no loss (a log.jsonl of forge train was expected)", log);
    return s;
}

/* A title for a run: its directory name. */
static const char *run_name(const char *run) {
    size_t n = strlen(run);
    while (n > 1 && run[n - 1] == '/') n--;
    const char *p = run + n;
    while (p > run && p[-1] != '/') p--;
    return p;
}

forge_status forge_plot_runs(const char *const *runs, int n, const char *png) {
    if (n < 1) return forge_error(FORGE_ERR_ARG, "plot: no run directory given");
    /* the paths go into gnuplot's script between double quotes */
    for (int i = 0; i <= n; i++) {
        const char *p = i < n ? runs[i] : png;
        if (strpbrk(p, "\"'\\\n"))
            return forge_error(FORGE_ERR_ARG, "plot: %s: a path with quotes, backslashes or newlines is not supported",
                               p);
    }
    char dir[] = "/tmp/forge-plot-XXXXXX";
    if (!mkdtemp(dir)) return forge_error(FORGE_ERR_IO, "plot: cannot make a temporary directory: %s", strerror(errno));
    forge_status s = FORGE_OK;
    int has_tokens = 1;
    int *nt = calloc((size_t)n, sizeof *nt), *nv = calloc((size_t)n, sizeof *nv);
    if (!nt || !nv) s = forge_error(FORGE_ERR_OOM, "plot: out of host memory");
    for (int i = 0; i < n && s == FORGE_OK; i++) s = run_to_data(runs[i], i, dir, &has_tokens, &nt[i], &nv[i]);
    char gp[1200];
    snprintf(gp, sizeof gp, "%s/plot.gp", dir);
    FILE *f = s == FORGE_OK ? fopen(gp, "w") : NULL;
    if (s == FORGE_OK && !f) s = forge_error(FORGE_ERR_IO, "plot: cannot write %s: %s", gp, strerror(errno));
    if (f) {
        const int col = has_tokens ? 1 : 3; /* x: tokens, or steps when a log predates the tokens field */
        fprintf(f, "set terminal pngcairo size 1000,600 font \"sans,10\"\nset output \"%s\"\n", png);
        fprintf(f, "set xlabel \"%s\"\nset ylabel \"loss (nats per token)\"\nset grid\nset key top right\n",
                has_tokens ? "tokens trained on" : "step");
        fprintf(f, "set title \"forge: training and val loss\"\nplot ");
        int first = 1;
        for (int i = 0; i < n; i++) {
            if (nt[i]) {
                fprintf(f, "%s\"%s/run%d.train\" using %d:2 with lines lc %d title \"%s train\"", first ? "" : ", ",
                        dir, i, col, i + 1, run_name(runs[i]));
                first = 0;
            }
            if (nv[i]) {
                fprintf(f, "%s\"%s/run%d.val\" using %d:2 with linespoints lc %d pt 7 dt 2 title \"%s val\"",
                        first ? "" : ", ", dir, i, col, i + 1, run_name(runs[i]));
                first = 0;
            }
        }
        fprintf(f, "\n");
        if (fclose(f) != 0) s = forge_error(FORGE_ERR_IO, "plot: cannot write %s", gp);
    }
    if (s == FORGE_OK) {
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>&1", gp);
        FILE *p = popen(cmd, "r");
        char msg[512] = "";
        size_t got = p ? fread(msg, 1, sizeof msg - 1, p) : 0;
        msg[got] = '\0';
        const int rc = p ? pclose(p) : -1;
        /* pclose gives a wait status: the shell's 127 means no gnuplot; any other failure is gnuplot's own */
        const int code = rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
        if (code == 127 || !p)
            s = forge_error(FORGE_ERR_IO, "plot: gnuplot not found (install it: apt-get install gnuplot-nox): %.300s",
                            msg);
        else if (rc != 0)
            s = forge_error(FORGE_ERR_IO, "plot: gnuplot failed (exit %d) writing %s: %.300s", code, png, msg);
        else if (access(png, R_OK) != 0)
            s = forge_error(FORGE_ERR_IO, "plot: gnuplot wrote no %s", png);
    }
    for (int i = 0; i < n; i++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/run%d.train", dir, i);
        unlink(p);
        snprintf(p, sizeof p, "%s/run%d.val", dir, i);
        unlink(p);
    }
    unlink(gp);
    rmdir(dir);
    free(nt);
    free(nv);
    return s;
}
