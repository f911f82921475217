/*
 * emulate_cls16t.cpp: the bf16 classifier's column passes run on the CPU, to check the lab's variants' logic
 * without a GPU: the pair baseline (lab/classifier/cls16t_pair.cuh), forge's passes and ahead form
 * (src/backend/cuda/classifier_bf16_passes.cuh), walk and the fast passes (lab/classifier/cls16t_fast.cuh; ex2 is
 * exp2f here, not the hardware approximation), compiled by the host compiler from the same headers. A block's
 * threads run as OS threads with a std::barrier for __syncthreads (__shared__ arrays become statics: blocks run one
 * after another). Small chunks (one range with partial batches and streams without ids, 3 and 16 ranges), ignored
 * rows and one id past V; the checks of `forge-lab bench cls16t-passes` (bitwise for the exact variants, tolerances
 * for the fast ones). Not part of any make target (-w: the CUDA attributes mean nothing to g++):
 *   g++ -std=c++20 -O2 -w -I/usr/local/cuda/include -Isrc/backend/cuda lab/emulators/emulate_cls16t.cpp \
 *       -o /tmp/emulate_cls16t -lpthread && /tmp/emulate_cls16t
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <barrier>
#include <thread>
#include <vector>
#include <functional>
#include <cstring>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <atomic>
#include <memory>

static thread_local uint3 emu_tid, emu_bid;
static std::barrier<> *emu_bar;
#undef threadIdx
#undef blockIdx
#define threadIdx emu_tid
#define blockIdx emu_bid
#undef __shared__
#define __shared__ static
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __forceinline__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __syncthreads() emu_bar->arrive_and_wait()
static inline float emu_u2f(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned emu_f2u(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float emu_i2f(int u) { float f; memcpy(&f, &u, 4); return f; }
#define __uint_as_float emu_u2f
#define __float_as_uint emu_f2u
#define __int_as_float emu_i2f
static inline int min(int a, int b) { return a < b ? a : b; }
#include "../../src/backend/cuda/cuda_ops.h"
static std::atomic<int> emu_bad{0};
static inline void cuda_report_bad_id(cuda_input_error *err, int op, int row, int id, int V) {
    int z = 0;
    if (emu_bad.compare_exchange_strong(z, 1)) { err->row = row; err->id = id; err->V = V; err->found = op; }
}
#include "../classifier/cls16t_fast.cuh"
#include "../classifier/cls16t_pair.cuh"

static void launch(dim3 grid, dim3 block, const std::function<void()> &f) {
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            std::barrier<> bar(block.x);
            emu_bar = &bar;
            std::vector<std::thread> th;
            for (unsigned t = 0; t < block.x; t++)
                th.emplace_back([&, t] { emu_tid = make_uint3(t, 0, 0); emu_bid = make_uint3(bx, by, 0); f(); });
            for (auto &x : th) x.join();
        }
}

struct chunk { float *losses, *part; uint16_t *xt; const int32_t *targets; int rows, V, splits, per_split; cuda_input_error *err; };
#define GS (1.0f / 16384.0f)
static void run_pair(const chunk &c) {
    dim3 grid((c.rows + 63) / 64, c.splits), block(256);
    launch(grid, block, [&] { cls16t_pair_partial_kernel<4>(c.part, c.xt, c.rows, c.V, c.per_split); });
    launch(grid, block, [&] { cls16t_pair_grad_kernel<4>(c.losses, c.xt, c.part, c.targets, 0, c.rows, c.V, c.per_split, c.splits, -1, GS, c.err); });
}
enum { F, W, X };
template <bool AHEAD, int P1, int P2, bool FOLD = false> static void run(const chunk &c) {
    dim3 grid = cls16t_grid<2, 32>(c.rows, c.splits), block = cls16t_block<32>();
    launch(grid, block, [&] {
        if constexpr (P1 == F) cls16t_partial_kernel<2, 32, 4, AHEAD>(c.part, c.xt, c.rows, c.V, c.per_split);
        else cls16f_partial_kernel<2, 32, 4, AHEAD, P1 == W>(c.part, c.xt, c.rows, c.V, c.per_split);
    });
    launch(grid, block, [&] {
        if constexpr (P2 == F) cls16t_grad_kernel<2, 32, 4, AHEAD>(c.losses, c.xt, c.part, c.targets, 0, c.rows, c.V, c.per_split, c.splits, -1, GS, c.err);
        else cls16f_grad_kernel<2, 32, 4, AHEAD, FOLD, P2 == W>(c.losses, c.xt, c.part, c.targets, 0, c.rows, c.V, c.per_split, c.splits, -1, GS, c.err);
    });
}
struct var { const char *name; int exact; void (*f)(const chunk &); };
static const var VARS[] = {
    {"pair", 1, run_pair}, {"forge", 1, run<false, F, F>}, {"ahead", 1, run<true, F, F>}, {"walk", 1, run<false, W, W>},
    {"fast p1", 0, run<false, X, F>}, {"fast p2", 0, run<false, F, X>}, {"fast", 0, run<false, X, X>},
    {"fast fold", 0, run<false, X, X, true>}, {"fast ahead", 0, run<true, X, X>}, {"fast fold ahead", 0, run<true, X, X, true>},
};
static uint16_t bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
static int ord(unsigned h) { return h & 0x8000u ? -(int)(h & 0x7fffu) : (int)h; }
int main() {
    int shapes[][2] = {{136, 37}, {136, 5}, {200, 3001}, {72, 20000}};
    int fails = 0;
    for (auto &sh : shapes) {
        int rows = sh[0], V = sh[1];
        size_t n = (size_t)rows * V;
        int splits = cls16t_splits(V), per_split = cls16t_per_split(V, splits);
        std::vector<uint16_t> pristine(n);
        for (size_t i = 0; i < n; i++) {
            uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull; z = (z ^ (z >> 27)) * 0x94d049bb133111ebull; z ^= z >> 31;
            pristine[i] = bf((float)(z >> 40) * (1.0f / 16777216.0f) * 16.0f - 8.0f);
        }
        std::vector<int32_t> t(rows);
        for (int r = 0; r < rows; r++) t[r] = (int32_t)(((uint64_t)r * 2654435761u) % (uint64_t)V);
        for (int r = 3; r < rows; r += 7) t[r] = -1;
        t[5] = V + 5;
        std::vector<uint16_t> ref, xt;
        std::vector<float> refl, refp;
        for (const var &v : VARS) {
            xt = pristine;
            std::vector<float> losses(rows, NAN), part(2 * (size_t)splits * rows, NAN);
            cuda_input_error err = {0, 0, 0, 0};
            emu_bad = 0;
            chunk c = {losses.data(), part.data(), xt.data(), t.data(), rows, V, splits, per_split, &err};
            v.f(c);
            if (&v == VARS) { ref = xt; refl = losses; refp = part; printf("%d x %d: splits %d, bad id reported: row %d id %d\n", rows, V, splits, err.row, err.id); continue; }
            size_t ndiff = 0, nbad = 0; int maxulp = 0;
            for (size_t i = 0; i < n; i++) if (xt[i] != ref[i]) {
                ndiff++; int u = abs(ord(xt[i]) - ord(ref[i])); maxulp = std::max(maxulp, u);
                float a = emu_u2f((unsigned)xt[i] << 16), b = emu_u2f((unsigned)ref[i] << 16);
                if (u > 1 && fabsf(a - b) > 1e-6f * GS) nbad++;
            }
            double ml = 0, mp = 0; int lbad = 0, pbad = 0, lneq = 0, pneq = 0;
            for (int i = 0; i < rows; i++) { float a = losses[i], b = refl[i]; if ((std::isnan(a) && std::isnan(b)) || a == b) continue; lneq++; double d = fabs((double)a - b); if (!(d <= 1e-4 + 1e-5 * fabs(b))) lbad++; else ml = std::max(ml, d); }
            for (size_t i = 0; i < part.size(); i++) { float a = part[i], b = refp[i]; if ((std::isnan(a) && std::isnan(b)) || a == b) continue; pneq++; double d = fabs((double)a - b); if (!(d <= 1e-4 + 1e-5 * fabs(b))) pbad++; else mp = std::max(mp, d / fabs(b)); }
            bool pass = v.exact ? (ndiff == 0 && lneq == 0 && pneq == 0) : (nbad == 0 && lbad == 0 && pbad == 0);
            fails += !pass;
            printf("  %-16s dlogits %zu differ (max %d ulp, %zu past tol), losses %d differ (%d past, max %.2g), partials %d differ (%d past, max rel %.2g), bad id %d/%d: %s\n",
                   v.name, ndiff, maxulp, nbad, lneq, lbad, ml, pneq, pbad, mp, err.row, err.id, pass ? (v.exact ? "bits PASS" : "tol PASS") : "FAIL");
        }
    }
    printf("%d failed\n", fails);
    return fails != 0;
}
