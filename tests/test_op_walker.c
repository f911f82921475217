/*
 * test_op_walker.c: the generic parity walk of the op list (tests_gpu/op_walker.h),
 * on the CPU: the threaded, tiled CPU backend against the plain reference
 * loops, every op and every case op_list.h gives (quick: cases up to 1e6
 * elements). The GPU suite walks the CUDA backend the same way; running the
 * walker here keeps it, and every list entry's description, checked in CI.
 */
#include <string.h>

#include "../tests_gpu/op_walker.h"
#include "test.h"

void suite_op_walker(void) {
    TEST_CASE("every op of the list: threaded CPU backend vs the reference");
    parity P;
    memset(&P, 0, sizeof P);
    P.quick = 1;
    P.quiet = 1; /* FAIL and SKIP lines only */
    forge_rng_seed(&P.rng, 1234, 7);
    CHECK_OK(forge_backend_create_cpu(&P.cpu, 1, 1));
    CHECK_OK(forge_backend_create_cpu(&P.gpu, 2, 0));
    if (!test_case_failed()) {
        op_walker_walk(&P, 0);
        CHECK_MSG(P.failed == 0 && P.passed > 100, "%d passed, %d failed (lines above)", P.passed, P.failed);
    }
    forge_backend_destroy(P.cpu);
    forge_backend_destroy(P.gpu);
}
