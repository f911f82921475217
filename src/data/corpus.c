/* corpus.c: the fortunes corpus (see corpus.h). */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* mmap, pwrite, fsync, clock_gettime */
#endif
#include "corpus.h"
#include "../base/fs.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char SEPARATOR[] = "\n<|endoftext|>\n";

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Writes the entries of one fortunes file's text; counts them in *n_docs. */
static int write_entries(FILE *out, const char *text, size_t len, size_t *n_docs) {
    size_t start = 0, pos = 0;
    while (pos <= len) {
        /* the line [pos, eol) */
        const char *nl = pos < len ? memchr(text + pos, '\n', len - pos) : NULL;
        size_t eol = nl ? (size_t)(nl - text) : len;
        size_t line_len = eol - pos;
        if (line_len > 0 && text[eol - 1] == '\r') line_len--;
        int is_sep = line_len == 1 && text[pos] == '%';
        if (is_sep || eol == len) {
            size_t end = is_sep ? pos : len; /* the entry is [start, end) */
            while (end > start && is_space(text[end - 1])) end--;
            size_t begin = start;
            while (begin < end && (text[begin] == '\n' || text[begin] == '\r')) begin++;
            if (end > begin) {
                if (fwrite(text + begin, 1, end - begin, out) != end - begin ||
                    fputs(SEPARATOR, out) == EOF)
                    return -1;
                (*n_docs)++;
            }
            start = eol + 1;
        }
        if (eol == len) break;
        pos = eol + 1;
    }
    return 0;
}

forge_status forge_corpus_fortunes_from(const char *dir, const char *out_path, size_t *n_docs) {
    size_t count = 0;
    if (n_docs) *n_docs = 0;
    DIR *d = opendir(dir);
    if (!d)
        return forge_error(
            FORGE_ERR_IO,
            "%s: cannot open the fortunes directory: %s; install Debian's `fortunes` "
            "package (apt-get install fortunes) or pass --data",
            dir, strerror(errno));
    /* collect candidate names, then sort: readdir order is arbitrary */
    char **names = NULL;
    size_t n = 0, cap = 0;
    forge_status r = FORGE_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        if (nm[0] == '.' || ends_with(nm, ".dat") || ends_with(nm, ".u8")) continue;
        char path[4096];
        int len = snprintf(path, sizeof path, "%s/%s", dir, nm);
        if (len < 0 || (size_t)len >= sizeof path) continue;
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue; /* dirs, links to dirs */
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **g = realloc(names, cap * sizeof *names);
            if (!g) {
                r = forge_error(FORGE_ERR_OOM, "%s: out of memory listing files", dir);
                break;
            }
            names = g;
        }
        names[n] = malloc(strlen(nm) + 1);
        if (!names[n]) {
            r = forge_error(FORGE_ERR_OOM, "%s: out of memory listing files", dir);
            break;
        }
        strcpy(names[n++], nm);
    }
    closedir(d);
    if (r == FORGE_OK && n == 0)
        r = forge_error(FORGE_ERR_IO,
                        "%s: no fortune files found (only indexes or directories); install "
                        "Debian's `fortunes` package (apt-get install fortunes) or pass --data",
                        dir);
    if (r != FORGE_OK) {
        for (size_t i = 0; i < n; i++) free(names[i]);
        free(names);
        return r;
    }
    qsort(names, n, sizeof *names, cmp_str);

    size_t tmp_len = strlen(out_path) + 32;
    char *tmp = malloc(tmp_len);
    FILE *out = NULL;
    if (!tmp) {
        r = forge_error(FORGE_ERR_OOM, "%s: out of memory", out_path);
    } else {
        snprintf(tmp, tmp_len, "%s.tmp.%ld", out_path, (long)getpid());
        out = fopen(tmp, "wb");
        if (!out)
            r = forge_error(FORGE_ERR_IO, "%s: cannot create corpus file: %s", out_path,
                            strerror(errno));
    }
    for (size_t i = 0; i < n && r == FORGE_OK; i++) {
        char path[4096], *text = NULL;
        size_t len = 0;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        r = forge_read_file(path, &text, &len);
        if (r != FORGE_OK) break;
        if (write_entries(out, text, len, &count) != 0)
            r = forge_error(FORGE_ERR_IO, "%s: write failed (disk full?): %s", tmp,
                            strerror(errno));
        free(text);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (out) {
        if (r == FORGE_OK && (fflush(out) != 0 || fsync(fileno(out)) != 0))
            r = forge_error(FORGE_ERR_IO, "%s: flush failed: %s", tmp, strerror(errno));
        if (fclose(out) != 0 && r == FORGE_OK)
            r = forge_error(FORGE_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
        if (r == FORGE_OK && count == 0)
            r = forge_error(FORGE_ERR_DATA, "%s: the fortune files hold no entries", dir);
        if (r == FORGE_OK && rename(tmp, out_path) != 0)
            r = forge_error(FORGE_ERR_IO, "%s: cannot rename %s onto it: %s", out_path, tmp,
                            strerror(errno));
        if (r != FORGE_OK) unlink(tmp);
    }
    free(tmp);
    if (r == FORGE_OK && n_docs) *n_docs = count;
    return r;
}

forge_status forge_corpus_fortunes(const char *out_path, size_t *n_docs) {
    return forge_corpus_fortunes_from(FORGE_FORTUNES_DIR, out_path, n_docs);
}
