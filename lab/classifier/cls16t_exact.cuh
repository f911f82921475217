/*
 * cls16t_exact.cuh: the bf16 classifier's transposed-chunk column passes with the C library's exp (expf) and a
 * branch per element (cls16t_add, cls16t_grad): the passes forge ran before classifier_bf16_fast.cuh's, kept as the
 * lab's bitwise reference at every width (RL rows a lane, LW lanes a stream, UNROLL ids ahead, AHEAD), timed by
 * `forge-lab bench cls16t-passes`.
 */
#ifndef FORGE_LAB_CLS16T_EXACT_CUH
#define FORGE_LAB_CLS16T_EXACT_CUH

#include "../../src/backend/cuda/classifier_bf16_passes.cuh"

template <int RL, int LW, int UNROLL, bool AHEAD = false>
__global__ void __launch_bounds__(LW * CLS16T_WARPS)
    cls16t_partial_kernel(float *__restrict__ part, const uint16_t *__restrict__ xt, int rows, int V, int per_split) {
    static_assert(RL <= CLS16T_WARPS && 32 % LW == 0, "a block's threads cover its rows; streams tile a warp");
    constexpr int RB = RL * LW, NW = RL / 2;
    __shared__ float sm[CLS16T_WARPS][RB], ss[CLS16T_WARPS][RB];
    const int lane = threadIdx.x % LW, w = threadIdx.x / LW, r = blockIdx.x * RB + RL * lane;
    const int v0 = blockIdx.y * per_split, v1 = min(V, v0 + per_split);
    float m[RL], s[RL];
#pragma unroll
    for (int i = 0; i < RL; i++) m[i] = -INFINITY, s[i] = 0.0f;
    constexpr unsigned NEG_INF2 = 0xff80ff80u; /* past v1: -inf pairs */
    unsigned nx[UNROLL][NW];
    if constexpr (AHEAD)
        if (r < rows) cls16t_load_ids<RL, UNROLL>(nx, xt, rows, r, v0 + w, v1, NEG_INF2);
    if (r < rows)
        for (int v = v0 + w; v < v1; v += UNROLL * CLS16T_WARPS) {
            unsigned x[UNROLL][NW];
            if constexpr (AHEAD) { /* this step's ids were loaded a step ago; the next step's go out now */
#pragma unroll
                for (int u = 0; u < UNROLL; u++)
#pragma unroll
                    for (int j = 0; j < NW; j++) x[u][j] = nx[u][j];
                cls16t_load_ids<RL, UNROLL>(nx, xt, rows, r, v + UNROLL * CLS16T_WARPS, v1, NEG_INF2);
            } else {
                cls16t_load_ids<RL, UNROLL>(x, xt, rows, r, v, v1, NEG_INF2);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                if (v + u * CLS16T_WARPS >= v1) break;
#pragma unroll
                for (int j = 0; j < NW; j++) {
                    cls16t_add(m[2 * j], s[2 * j], __uint_as_float(x[u][j] << 16));
                    cls16t_add(m[2 * j + 1], s[2 * j + 1], __uint_as_float(x[u][j] & 0xffff0000u));
                }
            }
        }
    cls16t_end_partial<RL, RB>(part, sm, ss, m, s, w, lane, rows);
}

template <int RL, int LW, int UNROLL, bool AHEAD = false>
__global__ void __launch_bounds__(LW * CLS16T_WARPS)
    cls16t_grad_kernel(float *__restrict__ losses, uint16_t *__restrict__ xt, const float *__restrict__ part,
                       const int32_t *__restrict__ targets, int n0, int rows, int V, int per_split, int splits,
                       int ignore_index, float grad_scale, cuda_input_error *err) {
    constexpr int RB = RL * LW, NW = RL / 2;
    const int lane = threadIdx.x % LW, w = threadIdx.x / LW, r = blockIdx.x * RB + RL * lane;
    if (r >= rows) return;
    int y[RL];
    bool ig[RL];
#pragma unroll
    for (int i = 0; i < RL; i++) y[i] = targets[n0 + r + i], ig[i] = y[i] == ignore_index;
    const int v0 = blockIdx.y * per_split, v1 = min(V, v0 + per_split);
    float M[RL], S[RL], inv[RL];
#pragma unroll
    for (int i = 0; i < RL; i++) cls16t_total(part, rows, r + i, splits, M[i], S[i]);
#pragma unroll
    for (int i = 0; i < RL; i++) inv[i] = 1.0f / S[i];
    unsigned nx[UNROLL][NW];
    if constexpr (AHEAD) cls16t_load_ids<RL, UNROLL>(nx, xt, rows, r, v0 + w, v1, 0u);
    for (int v = v0 + w; v < v1; v += UNROLL * CLS16T_WARPS) {
        unsigned x[UNROLL][NW];
        if constexpr (AHEAD) { /* the next step's ids are other addresses than this step's stores */
#pragma unroll
            for (int u = 0; u < UNROLL; u++)
#pragma unroll
                for (int j = 0; j < NW; j++) x[u][j] = nx[u][j];
            cls16t_load_ids<RL, UNROLL>(nx, xt, rows, r, v + UNROLL * CLS16T_WARPS, v1, 0u);
        } else {
            cls16t_load_ids<RL, UNROLL>(x, xt, rows, r, v, v1, 0u);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const int vu = v + u * CLS16T_WARPS;
            if (vu >= v1) break;
            unsigned d[NW];
#pragma unroll
            for (int j = 0; j < NW; j++) {
                const int a = 2 * j, b = 2 * j + 1;
                const uint16_t d0 =
                    ig[a] ? 0 : cls16t_grad(__uint_as_float(x[u][j] << 16), M[a], inv[a], vu == y[a], grad_scale);
                const uint16_t d1 = ig[b] ? 0
                                          : cls16t_grad(__uint_as_float(x[u][j] & 0xffff0000u), M[b], inv[b],
                                                        vu == y[b], grad_scale);
                d[j] = (unsigned)d0 | ((unsigned)d1 << 16);
            }
            cls16t_store<RL>(xt + (size_t)vu * rows + r, d);
        }
    }
    if (blockIdx.y == 0 && w == 0) cls16t_put_losses<RL>(losses, y, M, S, n0 + r, V, ignore_index, err);
}

#endif
