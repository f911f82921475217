/*
 * wgmma_common.cuh: the device helpers every Hopper (sm_90a) GEMM kernel of
 * forge shares: shared-memory addresses, mbarriers (init / arrive /
 * arrive.expect_tx / a parity wait that traps instead of hanging), 2D TMA
 * loads and stores (with the stores' bulk-group commit / wait), wgmma
 * shared-memory descriptors of the 128-byte-swizzled layouts TMA writes,
 * wgmma fence / commit / wait, and setmaxnreg. Used by gemm_wgmma_kernel.cuh (bf16)
 * and gemm_wgmma_fp8.cu (fp8, tf32); the host-side tensor-map encoder is in
 * wgmma_tmap.h.
 *
 * Everything is __forceinline__ in a header (not a separately compiled unit)
 * because each helper is a handful of PTX instructions inside a hot loop, and
 * forge builds without relocatable device code.
 */
#ifndef FORGE_WGMMA_COMMON_CUH
#define FORGE_WGMMA_COMMON_CUH

#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime.h>

/* An mbarrier wait that has not completed after this long traps (mbar_wait; mbar_wait_wide faults): a protocol
 * bug or a failed TMA becomes an error at the host's next synchronising call instead of a hung process. Overridable at
 * build time (make cuda EXTRA_NVFLAGS=-DWGMMA_WAIT_TIMEOUT_NS=...) for sanitizer runs, where racecheck's
 * serialisation of warps can keep a spinning consumer waiting on a producer warp for longer. */
#ifndef WGMMA_WAIT_TIMEOUT_NS
#define WGMMA_WAIT_TIMEOUT_NS 10000000000ull /* 10 s */
#endif

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ uint64_t gemm_globaltimer(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/* n arrivals at once (one thread standing for n of the barrier's expected arrivals) */
__device__ __forceinline__ void mbar_arrive_n(uint32_t bar, uint32_t n) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(n) : "memory");
}

__device__ __forceinline__ uint32_t mbar_try_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    return done;
}

/* Waits for the phase of `bar` with parity `parity` to complete; after WGMMA_WAIT_TIMEOUT_NS (a protocol bug or
 * a failed TMA must not hang) it traps (TRAP) or faults with a store to global address 0 (the host then sees "an
 * illegal memory access was encountered" at its next synchronising call, sticky like the trap). */
template <bool TRAP> __device__ __forceinline__ void mbar_wait_timed(uint32_t bar, uint32_t parity) {
    if (mbar_try_wait(bar, parity)) return;
    const uint64_t t0 = gemm_globaltimer();
    while (!mbar_try_wait(bar, parity)) {
        if (gemm_globaltimer() - t0 > WGMMA_WAIT_TIMEOUT_NS) {
            if constexpr (TRAP)
                __trap();
            else
                asm volatile("st.global.u32 [%0], %1;" ::"l"(0ull), "r"(0u) : "memory");
        }
    }
}

/* The wait every wgmma kernel uses: traps on the timeout. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) { mbar_wait_timed<true>(bar, parity); }

/* mbar_wait for a consumer warpgroup that needs more registers than the kernel's entry count (168 at 384
 * threads) after its setmaxnreg.inc: the timeout faults instead of trapping. ptxas (CUDA 13.0) compiles a region
 * that can reach a trap within the entry register count even after a setmaxnreg.inc: with the trap, the flash
 * backward's consumers got ~170 of their 240 registers and every kernel that needed more spilled and serialised
 * its wgmmas (C7512); with the store they compile within 240. Measured (lab/notes/flash.md, thirteenth session):
 * kernels that fit in 168 anyway can schedule differently with it, so the others keep mbar_wait. */
__device__ __forceinline__ void mbar_wait_wide(uint32_t bar, uint32_t parity) { mbar_wait_timed<false>(bar, parity); }

/* 2D tiled TMA load: box at (c0 = K element, c1 = row) of `tmap` into shared
 * memory at dst, completing `bytes` of transactions on mbarrier `bar`. */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *tmap, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
            "r"(dst),
        "l"((uint64_t)tmap), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

/* 2D tiled TMA store of the box at (c0 = column, c1 = row) of `tmap` from shared memory at src; the parts of
 * the box outside the tensor are not written. Completion is tracked by bulk groups (commit / wait_group) of the
 * issuing thread. */
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *tmap, int c0, int c1, uint32_t src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"((uint64_t)tmap),
                 "r"(c0), "r"(c1), "r"(src)
                 : "memory");
}

/* The issuing thread's bulk groups: commit its uncommitted TMA stores as one group; wait until at most N of its
 * groups still READ their shared-memory source (the source may then be overwritten); wait until all of its
 * groups are complete (the writes performed: before the CTA exits). */
__device__ __forceinline__ void tma_store_commit(void) { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void tma_store_wait_read(void) {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void tma_store_wait_all(void) { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap *tmap) {
    asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)tmap) : "memory");
}

/* Shared-memory matrix descriptor of a K-major, 128B-swizzled operand whose
 * 8-row groups are 1024 bytes apart (PTX ISA, "Matrix Descriptor Format"):
 * bits 0-13 address>>4, 16-29 LBO>>4 (unused with this swizzle: 1),
 * 32-45 SBO>>4 = 64, 62-63 swizzle mode 1 = 128B. */
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr) {
    return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)64 << 32) |
           ((uint64_t)1 << 62);
}

/* Descriptor of an MN-major, 128B-swizzled operand as TMA writes it from 64 (MN) x 64 (K) boxes: each K row
 * is 64 MN elements = 128 bytes, 8 K rows = 1024 bytes (SBO), and the next 64-wide MN block (the next box) is
 * GEMM_MN_BOX_BYTES = 8192 bytes further (LBO). Canonical MN-major SWIZZLE_128B layout of the PTX ISA:
 * ((8,8,m),(8,k)) : ((1,8,LBO),(64,SBO)) in elements. A k16 step starts 16 rows = 2048 bytes further. */
__device__ __forceinline__ uint64_t wgmma_desc_mn(uint32_t smem_addr) {
    return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | ((uint64_t)(8192 >> 4) << 16) | ((uint64_t)64 << 32) |
           ((uint64_t)1 << 62);
}

/* The descriptor of the operand `bytes` further than the one desc describes (a k16 step, the next box): one add
 * on the low word instead of a descriptor re-derived from the address. Exact for any desc of this file and any
 * bytes that keep the address in shared memory: its field is bits 4-17 of the address (shared memory ends below
 * 2^18 bytes), so the add never carries out of it, and the high word (SBO, swizzle) does not change. */
__device__ __forceinline__ uint64_t wgmma_desc_step(uint64_t desc, uint32_t bytes) {
    const uint32_t lo = (uint32_t)desc + (bytes >> 4), hi = (uint32_t)(desc >> 32);
    return ((uint64_t)hi << 32) | lo;
}

/* The same for 32-wide MN boxes with the 64-byte swizzle (32 MN x 64 K bf16 = 4096 bytes per box): each K row
 * is 32 MN elements = 64 bytes, 8 K rows = 512 bytes (SBO), the next 32-wide MN block 4096 bytes further (LBO),
 * layout type 2 (64B swizzle). Canonical MN-major SWIZZLE_64B: ((8,4,m),(8,k)) : ((1,8,LBO),(32,SBO)) in
 * elements. A k16 step starts 16 rows = 1024 bytes further. */
__device__ __forceinline__ uint64_t wgmma_desc_mn64(uint32_t smem_addr) {
    return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | ((uint64_t)(4096 >> 4) << 16) | ((uint64_t)(512 >> 4) << 32) |
           ((uint64_t)2 << 62);
}

__device__ __forceinline__ void wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* The full[s] (one arrival: the producer's expect_tx) and empty[s] (empty_arrivals) barriers of a STAGES ring at
 * bars (full[s] at +8s, empty[s] at +8(STAGES+s)), by one thread, made visible to the async (TMA) proxy; the
 * caller synchronises the CTA (or cluster) afterwards. */
template <int STAGES> __device__ __forceinline__ void wgmma_ring_init(uint32_t bars, uint32_t empty_arrivals) {
#pragma unroll
    for (int s = 0; s < STAGES; s++) {
        mbar_init(bars + 8 * s, 1);
        mbar_init(bars + 8 * (STAGES + s), empty_arrivals);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* A consumer's step after committing a stage's MMAs (one group in flight per stage): with release_prev, retire the
 * previous stage's group (wait_group 1) and release that stage (lane 0 of each warp arrives on its empty barrier),
 * then move to the next stage of the ring. */
template <int STAGES>
__device__ __forceinline__ void wgmma_ring_step(uint32_t bars, bool release_prev, int lane, int &prev, int &stage,
                                                uint32_t &phase) {
    wgmma_commit();
    if (release_prev) {
        wgmma_wait<1>();
        if (lane == 0) mbar_arrive(bars + 8 * (STAGES + prev));
    }
    prev = stage;
    if (++stage == STAGES) {
        stage = 0;
        phase ^= 1;
    }
}

/* Keeps the compiler from moving reads of the accumulators above a
 * wgmma.wait_group: an empty asm that "modifies" each register. */
template <int R> __device__ __forceinline__ void wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* This thread's warpgroup (threadIdx.x / 128), as a value the compiler knows is warp-uniform (a shuffle from lane
 * 0): shared-memory addresses and wgmma descriptors derived from it then live in uniform registers, so a wgmma
 * takes its descriptor without an R2UR move in front of it (ncu of the fp8 kernel: that move's latency stalled the
 * first wgmma of every stage). */
__device__ __forceinline__ int wgmma_warpgroup_index(void) { return __shfl_sync(0xffffffffu, (int)(threadIdx.x / 128), 0); }
/* This thread's warp (threadIdx.x / 32), warp-uniform to the compiler the same way: for kernels whose per-warp
 * offsets (a warp's rows of a tile) feed shared-memory addresses and descriptors too. */
__device__ __forceinline__ int wgmma_warp_index(void) { return __shfl_sync(0xffffffffu, (int)(threadIdx.x / 32), 0); }

/* Warp-specialised register split (PTX setmaxnreg): the producer warpgroup gives registers back, the
 * consumers take them; every warp of the warpgroup must execute the same one. */
template <int R> __device__ __forceinline__ void wgmma_setmaxnreg_dec(void) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R> __device__ __forceinline__ void wgmma_setmaxnreg_inc(void) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}

/* ---- wgmma inline-asm operand lists --------------------------------------------
 * A wgmma statement names every accumulator register: WG_ACC<N> expands to the N operands "+f"(d[0]) ..
 * "+f"(d[N-1]) of the caller's array d (WG_OUT<N>: "=f", for a scale-d 0 MMA whose d is written only), WG_REGS<N>
 * to the placeholder text "%0, %1, .., %(N-1)" that goes between the braces, so each instruction wrapper states
 * only what differs (shape, types, the operands after the accumulators, starting at %N). */
#define WG_D8(C, i)                                                                                                \
    C(d[(i)]), C(d[(i) + 1]), C(d[(i) + 2]), C(d[(i) + 3]), C(d[(i) + 4]), C(d[(i) + 5]), C(d[(i) + 6]),       \
        C(d[(i) + 7])
#define WG_D32(C) WG_D8(C, 0), WG_D8(C, 8), WG_D8(C, 16), WG_D8(C, 24)
#define WG_D48(C) WG_D32(C), WG_D8(C, 32), WG_D8(C, 40)
#define WG_D64(C) WG_D32(C), WG_D8(C, 32), WG_D8(C, 40), WG_D8(C, 48), WG_D8(C, 56)
#define WG_D72(C) WG_D64(C), WG_D8(C, 64)
#define WG_D96(C) WG_D64(C), WG_D8(C, 64), WG_D8(C, 72), WG_D8(C, 80), WG_D8(C, 88)
#define WG_D128(C) WG_D96(C), WG_D8(C, 96), WG_D8(C, 104), WG_D8(C, 112), WG_D8(C, 120)
#define WG_ACC32 WG_D32("+f")
#define WG_ACC48 WG_D48("+f")
#define WG_ACC64 WG_D64("+f")
#define WG_ACC72 WG_D72("+f")
#define WG_ACC96 WG_D96("+f")
#define WG_ACC128 WG_D128("+f")
#define WG_OUT32 WG_D32("=f")
#define WG_OUT64 WG_D64("=f")
#define WG_OUT72 WG_D72("=f")
#define WG_REGS32 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_REGS48 WG_REGS32 "," \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define WG_REGS64 WG_REGS32 "," \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_REGS72 WG_REGS64 "," \
    "%64, %65, %66, %67, %68, %69, %70, %71"
#define WG_REGS96 WG_REGS64 "," \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define WG_REGS128 WG_REGS96 "," \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

/* d (64 x 128 fp32, 64 registers per thread) (+)= A (64x16 bf16, smem desc) . B (128x16 bf16, smem desc)^T; TA / TB
 * are wgmma's imm-trans-a / imm-trans-b (0: K-major in shared memory, 1: MN-major). Used by gemm_wgmma_kernel.cuh's
 * 128-wide tiles and gemm_wgmma_fp8.cu's bf16 ping-pong. */
template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_REGS64 "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
                 : WG_ACC64
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB));
}

#endif
