/*
 * flash16_lab_ring.cuh: what the lab's producer-less backward kernels (flash16_bwd_2cta.cu, flash16_bwd_3wg.cu)
 * share for the ring a consumer warp refills between its tiles.
 */
#ifndef FORGE_LAB_FLASH16_LAB_RING_CUH
#define FORGE_LAB_FLASH16_LAB_RING_CUH

#include <stdint.h>

/* 1 if the phase of `bar` with parity `parity` has completed; never suspends the thread (test_wait, unlike
 * try_wait); acquire at CTA scope when it returns 1 */
__device__ __forceinline__ uint32_t lab_mbar_test(uint32_t bar, uint32_t parity) {
    uint32_t done;
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return done;
}

#endif
