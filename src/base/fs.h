/* fs.h: file-system helpers shared by the trainer, the data pipeline and the benchmarks. */
#ifndef FORGE_FS_H
#define FORGE_FS_H

#include "status.h"

/* mkdir -p: creates path and its missing parents. Fails with FORGE_ERR_IO naming
 * the component that could not be created, or a path that exists but is not a
 * directory; FORGE_ERR_ARG for an empty or over-long path. */
forge_status forge_mkdir_p(const char *path);

#endif
