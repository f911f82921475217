/* bench_ops.h: per-op times at a model's training shapes (`forge bench ops`). */
#ifndef FORGE_BENCH_OPS_H
#define FORGE_BENCH_OPS_H

#include <stdio.h>

#include "../backend/options.h"
#include "../base/status.h"

/* Each op at (B, T, C, NH, V) as a harness cell (harness.h) on `device`
 * ("cpu" or "cuda"): checked, then timed (30 reps on cpu, 100 on cuda); the
 * table goes to `out`, the CSVs to <results_root or "results">/<date>_<commit>/
 * ops_<cpu | cuda_<matmul path>>*.csv. FORGE_ERR_NUMERIC if any op fails its check. */
forge_status forge_bench_ops(FILE *out, const forge_runtime_options *rt, int B, int T, int C, int NH, int V,
                             const char *results_root);

#endif
