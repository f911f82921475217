/*
 * check_sums.cuh: the last step every bench check kernel shares (gemm, gemm-epi, gemm-fp8, attention):
 * a 256-thread block reduces its threads' partial sums of the gate (sum d^2, sum r^2, poisoned count) in
 * shared memory and adds the block's totals to the device accumulator. S is any struct with fields
 * double d2, r2 and unsigned long long unwritten.
 */
#ifndef FORGE_BENCH_CHECK_SUMS_CUH
#define FORGE_BENCH_CHECK_SUMS_CUH

template <typename S>
__device__ __forceinline__ void bench_check_commit(S *sums, double d2, double r2, unsigned long long un) {
    __shared__ double sd[256], sr[256];
    __shared__ unsigned long long su[256];
    sd[threadIdx.x] = d2;
    sr[threadIdx.x] = r2;
    su[threadIdx.x] = un;
    __syncthreads();
    for (int s = 128; s > 0; s /= 2) {
        if ((int)threadIdx.x < s) {
            sd[threadIdx.x] += sd[threadIdx.x + s];
            sr[threadIdx.x] += sr[threadIdx.x + s];
            su[threadIdx.x] += su[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(&sums->d2, sd[0]);
        atomicAdd(&sums->r2, sr[0]);
        atomicAdd(&sums->unwritten, su[0]);
    }
}

#endif
