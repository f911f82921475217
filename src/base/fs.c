/* fs.c: mkdir -p. */
#include "fs.h"

#include <errno.h>
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
