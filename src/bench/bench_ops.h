/* bench_ops.h: per-op times at a model's training shapes (`forge bench ops`). */
#ifndef FORGE_BENCH_OPS_H
#define FORGE_BENCH_OPS_H

#include <stdio.h>

#include "../core/status.h"

forge_status forge_bench_ops(FILE *out, const char *device, int B, int T, int C, int NH, int V);

#endif
