/* run_dir.c: the run directory's lock, checkpoint collection and log cut. */
#include "run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- lock ---------------------------------------------------------------- */

forge_status forge_run_dir_lock(const char *run_dir, int *fd_out) {
    char path[4200];
    *fd_out = -1;
    snprintf(path, sizeof path, "%s/%s", run_dir, FORGE_RUN_LOCK_FILE);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return forge_error(FORGE_ERR_IO, "%s: cannot open the run lock: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char holder[512] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        close(fd);
        if (err != EWOULDBLOCK)
            return forge_error(FORGE_ERR_IO, "%s: cannot lock: %s", path, strerror(err));
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\r\n")] = '\0';
        return forge_error(FORGE_ERR_IO,
                           "%s is in use by another run (%s, holding %s); wait for it to finish or choose "
                           "another --out",
                           run_dir, holder[0] ? holder : "holder not recorded yet", path);
    }
    char host[256] = "?", when[64] = "?", info[512];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int len = snprintf(info, sizeof info, "pid %ld on %s, started %s\n", (long)getpid(), host, when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, info, (size_t)len, 0) != len) {
        int err = errno;
        close(fd);
        return forge_error(FORGE_ERR_IO, "%s: cannot write the run lock: %s", path, strerror(err));
    }
    *fd_out = fd;
    return FORGE_OK;
}

void forge_run_dir_unlock(int fd) {
    if (fd >= 0) close(fd); /* closing the descriptor releases the flock */
}

/* ---- checkpoints ----------------------------------------------------------- */

int forge_run_dir_checkpoint_step(const char *name) {
    if (strncmp(name, "ckpt_", 5) != 0 || !name[5]) return -1;
    long step = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        step = step * 10 + (*p - '0');
        if (step > INT_MAX) return -1;
    }
    return (int)step;
}

typedef struct {
    char name[256];
    int step;
    int complete;
} ckpt_entry;

static int is_regular(const char *dir, const char *name, const char *file) {
    char path[4400];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s/%s", dir, name, file);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The ckpt_* directories of run_dir (malloc'ed array, *n entries; NULL + 0 if none or unreadable). */
static ckpt_entry *scan(const char *run_dir, int *n) {
    *n = 0;
    DIR *d = opendir(run_dir);
    if (!d) return NULL;
    ckpt_entry *list = NULL;
    int cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int step = forge_run_dir_checkpoint_step(de->d_name);
        if (step < 0 || strlen(de->d_name) >= sizeof list[0].name) continue;
        char path[4400];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", run_dir, de->d_name);
        if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            ckpt_entry *grown = realloc(list, (size_t)cap * sizeof *list);
            if (!grown) break;
            list = grown;
        }
        ckpt_entry *e = &list[(*n)++];
        snprintf(e->name, sizeof e->name, "%s", de->d_name);
        e->step = step;
        e->complete = is_regular(run_dir, e->name, "model.safetensors") &&
                      is_regular(run_dir, e->name, "state.safetensors");
    }
    closedir(d);
    return list;
}

int forge_run_dir_count_checkpoints(const char *run_dir, char *newest, size_t cap) {
    int n;
    ckpt_entry *list = scan(run_dir, &n);
    int best = -1;
    if (cap) newest[0] = '\0';
    for (int i = 0; i < n; i++)
        if (list[i].step > best) {
            best = list[i].step;
            if (cap) snprintf(newest, cap, "%s", list[i].name);
        }
    free(list);
    return n;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

static forge_status remove_tree(const char *path) {
    if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return forge_error(FORGE_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
    return FORGE_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Removes the temporary leftovers (*.tmp files or directories) inside one directory. */
static forge_status remove_tmp_inside(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return FORGE_OK;
    forge_status s = FORGE_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!ends_with(de->d_name, ".tmp")) continue;
        char path[4400];
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
        forge_status r = remove_tree(path);
        if (s == FORGE_OK) s = r;
    }
    closedir(d);
    return s;
}

static int by_step_desc(const void *a, const void *b) {
    const ckpt_entry *x = a, *y = b;
    return (y->step > x->step) - (y->step < x->step);
}

void forge_run_dir_pointer(const char *run_dir, const char *pointer, char *name, size_t cap) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", run_dir, pointer);
    name[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(name, (int)cap, f)) name[0] = '\0';
    fclose(f);
    name[strcspn(name, "\r\n")] = '\0';
}

forge_status forge_run_dir_collect(const char *run_dir, int step, int keep) {
    char latest[256], best[256], path[4400];
    forge_run_dir_pointer(run_dir, "latest", latest, sizeof latest);
    forge_run_dir_pointer(run_dir, "best", best, sizeof best);
    int n;
    ckpt_entry *list = scan(run_dir, &n);
    if (n > 1) qsort(list, (size_t)n, sizeof *list, by_step_desc);
    forge_status s = FORGE_OK;
    int kept = 0;
    for (int i = 0; i < n; i++) {
        const ckpt_entry *e = &list[i];
        int keep_it = strcmp(e->name, latest) == 0 || (best[0] && strcmp(e->name, best) == 0);
        if (!keep_it && e->complete && e->step <= step && kept < keep) keep_it = 1;
        if (e->complete && e->step <= step && kept < keep) kept++;
        snprintf(path, sizeof path, "%s/%s", run_dir, e->name);
        forge_status r = keep_it ? remove_tmp_inside(path) : remove_tree(path);
        if (s == FORGE_OK) s = r;
    }
    free(list);
    static const char *leftovers[] = {"latest.tmp", "best.tmp", "log.jsonl.tmp"};
    for (size_t i = 0; i < sizeof leftovers / sizeof leftovers[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", run_dir, leftovers[i]);
        if (unlink(path) != 0 && errno != ENOENT && s == FORGE_OK)
            s = forge_error(FORGE_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
    }
    return s;
}

/* ---- log ------------------------------------------------------------------- */

/* The "step" of a log line, or -1 when it has none. */
static long line_step(const char *line) {
    const char *p = strstr(line, "\"step\":");
    if (!p) return -1;
    char *end;
    errno = 0;
    long v = strtol(p + 7, &end, 10);
    return errno || end == p + 7 ? -1 : v;
}

forge_status forge_run_dir_cut_log(const char *log_path, int step, int *dropped) {
    if (dropped) *dropped = 0;
    FILE *in = fopen(log_path, "r");
    if (!in) {
        if (errno == ENOENT) return FORGE_OK;
        return forge_error(FORGE_ERR_IO, "%s: cannot read: %s", log_path, strerror(errno));
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", log_path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        int err = errno;
        fclose(in);
        return forge_error(FORGE_ERR_IO, "%s: cannot create %s: %s", log_path, tmp, strerror(err));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int ok = 1, cut = 0;
    while ((len = getline(&line, &cap, in)) > 0) {
        long s = line_step(line);
        if (line[len - 1] != '\n' || s > step) {
            cut++;
            continue;
        }
        if (fwrite(line, 1, (size_t)len, out) != (size_t)len) ok = 0;
    }
    int read_err = ferror(in);
    free(line);
    fclose(in);
    int err = 0;
    if (fflush(out) != 0 || ferror(out)) ok = 0, err = errno;
    if (ok && fsync(fileno(out)) != 0) ok = 0, err = errno;
    if (fclose(out) != 0 && ok) ok = 0, err = errno;
    if (read_err) {
        unlink(tmp);
        return forge_error(FORGE_ERR_IO, "%s: read error", log_path);
    }
    if (!ok || rename(tmp, log_path) != 0) {
        if (ok) err = errno;
        unlink(tmp);
        return forge_error(FORGE_ERR_IO, "%s: cannot rewrite it through %s: %s; the log is unchanged", log_path,
                           tmp, strerror(err));
    }
    if (dropped) *dropped = cut;
    return FORGE_OK;
}
