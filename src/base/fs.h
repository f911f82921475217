/* fs.h: file-system helpers shared by the trainer, the data pipeline and the benchmarks. */
#ifndef FORGE_FS_H
#define FORGE_FS_H

#include <stddef.h>

#include "status.h"

/* mkdir -p: creates path and its missing parents. Fails with FORGE_ERR_IO naming
 * the component that could not be created, or a path that exists but is not a
 * directory; FORGE_ERR_ARG for an empty or over-long path. */
forge_status forge_mkdir_p(const char *path);

/* Reads a whole (text) file: *buf is malloc'ed and NUL-terminated, *len excludes the NUL. FORGE_ERR_IO naming the
 * path (cannot open, a directory, a read error), FORGE_ERR_OOM. */
forge_status forge_read_file(const char *path, char **buf, size_t *len);

#endif
