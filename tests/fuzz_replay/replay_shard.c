/* fuzz/fuzz_shard.c compiled into the test binary for tests/test_parsers.c's corpus replay (fuzz/fuzz.h). */
#define FORGE_FUZZ_REPLAY 1
#define LLVMFuzzerTestOneInput forge_fuzz_shard
#include "../../fuzz/fuzz_shard.c"
