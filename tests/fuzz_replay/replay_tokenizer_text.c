/* fuzz/fuzz_tokenizer_text.c compiled into the test binary for tests/test_parsers.c's corpus replay (fuzz/fuzz.h). */
#define FORGE_FUZZ_REPLAY 1
#define LLVMFuzzerTestOneInput forge_fuzz_tokenizer_text
#define LLVMFuzzerInitialize forge_fuzz_tokenizer_text_init
#include "../../fuzz/fuzz_tokenizer_text.c"
