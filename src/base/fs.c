/* fs.c: mkdir -p, reading a whole file. */
#include "fs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

forge_status forge_mkdir_p(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return forge_error(FORGE_ERR_ARG, "directory \"%s\": bad path", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return forge_error(FORGE_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
        buf[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return forge_error(FORGE_ERR_IO, "%s: exists and is not a directory", path);
    return FORGE_OK;
}

forge_status forge_read_file(const char *path, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return forge_error(FORGE_ERR_IO, "%s: cannot open text file: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
        fclose(f);
        return forge_error(FORGE_ERR_IO, "%s: is a directory, expected a text file", path);
    }
    size_t cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : 65536, n = 0;
    char *b = malloc(cap);
    if (!b) {
        fclose(f);
        return forge_error(FORGE_ERR_OOM, "%s: cannot allocate %zu bytes to read it", path, cap);
    }
    for (;;) {
        if (n + 1 >= cap) { /* keep room for the NUL; files may grow or be pipes */
            char *g = realloc(b, cap * 2);
            if (!g) {
                free(b);
                fclose(f);
                return forge_error(FORGE_ERR_OOM, "%s: cannot allocate %zu bytes to read it", path,
                                   cap * 2);
            }
            b = g;
            cap *= 2;
        }
        size_t k = fread(b + n, 1, cap - 1 - n, f);
        n += k;
        if (k == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(b);
        return forge_error(FORGE_ERR_IO, "%s: read failed after %zu bytes", path, n);
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return FORGE_OK;
}
