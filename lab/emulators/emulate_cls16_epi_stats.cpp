/*
 * emulate_cls16_epi_stats.cpp: the logits GEMM's statistics epilogue (FP8_EPI_STATS in
 * src/backend/cuda/gemm_wgmma_fp8_kernel.cuh, its indexing and arithmetic in classifier_bf16_stats.cuh) run on the
 * CPU, to check its lane and warp indexing without a GPU. One consumer warpgroup's 128 x 128 tile of random fp32
 * accumulators goes through:
 *   - fp8_store_tile_tma_epi's fill of each staging box (the fragment of wgmma m64n128: d[4i + 2h + j] is row
 *     warp*16 + lane/4 + 8h, column 8i + 2(lane%4) + j; byte srow + 1024h + ((lane/4 ^ ii) << 4) in the box; the
 *     formula copied from the kernel, so a change there must be made here too),
 *   - the read-back of every box by the 128 threads (cls16s_add_box with the header's cls16s_off, the code the
 *     kernel runs),
 *   - fp8_stats_put's lane merges (the shuffles emulated: every lane reads its partner's value before any merges)
 *     and writes (lane q < 2 of a pair writes box q's two columns),
 * for several M (rows of the tile below M: 128, 81 as GPT-2's last tile, 64, 3) and N (128, 64: a chunk of 64 rows
 * whose second box is past N). Checks: every (row, column) of a box read by exactly one thread; one shared-memory
 * wavefront per warp read (distinct banks or the same word); every column below N written once, none at or past N;
 * m = the column's bf16 max exactly, s within 1e-5 relative of the double-precision sum exp(x - m) (exp2f here, not
 * the hardware ex2). Not part of any make target:
 *   g++ -std=c++17 -O2 -w -Isrc/backend/cuda lab/emulators/emulate_cls16_epi_stats.cpp -o /tmp/emulate_epi_stats &&
 *       /tmp/emulate_epi_stats
 */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#define __device__
#define __forceinline__ inline
static inline float emu_u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t emu_f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
#define __uint_as_float emu_u2f
#include "classifier_bf16_stats.cuh"

/* round to nearest even, as __floats2bfloat162_rn (finite inputs) */
static uint16_t bf16_rn(float f) {
    const uint32_t u = emu_f2u(f);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static int failures = 0;
#define CHECK(c, ...)                                                                                              \
    do {                                                                                                           \
        if (!(c)) {                                                                                                \
            if (failures++ < 20) {                                                                                 \
                printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                       \
                printf(__VA_ARGS__);                                                                               \
                printf("\n");                                                                                      \
            }                                                                                                      \
        }                                                                                                          \
    } while (0)

/* one tile: rows tile_row .. of M valid, columns tile_col .. of N */
static void run_tile(std::mt19937 &rng, int valid_rows, int N, int tile_col) {
    std::normal_distribution<float> nd(0.0f, 4.0f);
    float acc[128][128];
    for (int r = 0; r < 128; r++)
        for (int c = 0; c < 128; c++) acc[r][c] = r < valid_rows ? nd(rng) : 0.0f; /* past M: zero-filled A */
    const int M = valid_rows, tm = 3; /* tile_row 0 of the emulated M; the partial's tile index */
    float sm[128][4], ss[128][4];     /* per thread (tid = 32 warp + lane) */
    for (int t = 0; t < 128; t++)
        for (int i = 0; i < 4; i++) sm[t][i] = -INFINITY, ss[t][i] = 0.0f;
    for (int half = 0; half < 2; half++) {
        const int tile_row = 64 * half;
        if (tile_row >= M) break; /* the kernel's warpgroup-uniform skip */
        for (int b = 0; b < 2; b++) {
            if (tile_col + b * 64 >= N) break;
            uint8_t box[8192];
            memset(box, 0xAB, sizeof box);
            int written[8192 / 4] = {0};
            /* the fill (fp8_store_tile_tma_epi) */
            for (int warp = 0; warp < 4; warp++)
                for (int lane = 0; lane < 32; lane++) {
                    const uint32_t srow = (uint32_t)(warp * 16 + lane / 4) * 128u + (uint32_t)(lane % 4) * 4u;
                    const uint32_t sx = (uint32_t)(lane / 4);
                    for (int ii = 0; ii < 8; ii++) {
                        const int i = b * 8 + ii;
                        for (int h = 0; h < 2; h++) {
                            const uint32_t a = srow + 1024u * (uint32_t)h + ((sx ^ (uint32_t)ii) << 4);
                            const int row = tile_row + warp * 16 + lane / 4 + 8 * h, col = 8 * i + 2 * (lane % 4);
                            const uint16_t lo = bf16_rn(acc[row][col] + 0.0f), hi = bf16_rn(acc[row][col + 1] + 0.0f);
                            const uint32_t w = (uint32_t)lo | ((uint32_t)hi << 16);
                            memcpy(box + a, &w, 4);
                            written[a / 4]++;
                        }
                    }
                }
            for (int k = 0; k < 8192 / 4; k++) CHECK(written[k] == 1, "box word %d filled %d times", k, written[k]);
            /* the read-back: coverage and banks */
            int readc[64][64] = {{0}};
            for (int warp = 0; warp < 4; warp++)
                for (int k = 0; k < CLS16S_ROWS; k++) {
                    uint32_t bank_word[32];
                    for (int bk = 0; bk < 32; bk++) bank_word[bk] = 0xffffffffu;
                    for (int lane = 0; lane < 32; lane++) {
                        const uint32_t off = cls16s_off(warp, lane, k);
                        const int r = cls16s_row(lane, k), cb = cls16s_col(warp, lane);
                        const uint32_t want = 128u * r + ((uint32_t)((cb / 8) ^ (r % 8)) << 4) + 2u * (cb % 8);
                        CHECK(off == want && off % 4 == 0, "offset");
                        readc[r][cb]++;
                        readc[r][cb + 1]++;
                        const uint32_t word = off / 4, bank = word % 32;
                        CHECK(bank_word[bank] == 0xffffffffu || bank_word[bank] == word,
                              "bank conflict: warp %d step %d lane %d", warp, k, lane);
                        bank_word[bank] = word;
                    }
                }
            for (int r = 0; r < 64; r++)
                for (int c = 0; c < 64; c++) CHECK(readc[r][c] == 1, "box (%d, %d) read %d times", r, c, readc[r][c]);
            /* the read-back's statistics */
            for (int warp = 0; warp < 4; warp++)
                for (int lane = 0; lane < 32; lane++) {
                    const int t = 32 * warp + lane;
                    const auto ld = [&](uint32_t off) {
                        uint32_t w;
                        memcpy(&w, box + off, 4);
                        return w;
                    };
                    cls16s_add_box(sm[t][2 * b], ss[t][2 * b], sm[t][2 * b + 1], ss[t][2 * b + 1], ld, warp, lane,
                                   M - tile_row);
                }
        }
    }
    /* fp8_stats_put: the merges (xor 1, then xor 2; a shuffle reads the partner's value before the step's merges) */
    for (int x = 1; x <= 2; x *= 2) {
        float pm[128][4], ps[128][4];
        for (int t = 0; t < 128; t++)
            for (int i = 0; i < 4; i++) pm[t][i] = sm[t ^ x][i], ps[t][i] = ss[t ^ x][i];
        for (int t = 0; t < 128; t++)
            for (int i = 0; i < 4; i++) cls16s_merge_lanes(sm[t][i], ss[t][i], pm[t][i], ps[t][i], ((t % 32) & x) != 0);
    }
    /* the writes: part (tm + 1 tiles, N) float2 */
    std::vector<float> part(2 * (size_t)(tm + 1) * N, NAN);
    std::vector<int> wc(N, 0);
    for (int warp = 0; warp < 4; warp++)
        for (int lane = 0; lane < 32; lane++) {
            const int t = 32 * warp + lane, q = lane % 4;
            for (int i = 0; i < 4; i++) /* the 4 lanes of a pair hold the same bits */
                CHECK(emu_f2u(sm[t][i]) == emu_f2u(sm[t - q][i]) && emu_f2u(ss[t][i]) == emu_f2u(ss[t - q][i]),
                      "lanes of a pair differ");
            const int n = tile_col + 64 * q + cls16s_col(warp, lane);
            if (q < 2 && n < N) {
                const float v[4] = {sm[t][2 * q], ss[t][2 * q], sm[t][2 * q + 1], ss[t][2 * q + 1]};
                memcpy(&part[2 * ((size_t)tm * N + n)], v, sizeof v);
                wc[n]++;
                wc[n + 1]++;
            }
        }
    for (int n = 0; n < N; n++) {
        const bool mine = n >= tile_col && n < tile_col + 128;
        CHECK(wc[n] == (mine ? 1 : 0), "column %d written %d times", n, wc[n]);
        if (!mine) continue;
        const int c = n - tile_col;
        float mx = -INFINITY;
        for (int r = 0; r < M && r < 128; r++) mx = fmaxf(mx, emu_u2f((uint32_t)bf16_rn(acc[r][c] + 0.0f) << 16));
        double s = 0.0;
        for (int r = 0; r < M && r < 128; r++)
            s += exp((double)emu_u2f((uint32_t)bf16_rn(acc[r][c] + 0.0f) << 16) - (double)mx);
        const float gm = part[2 * ((size_t)tm * N + n)], gs = part[2 * ((size_t)tm * N + n) + 1];
        CHECK(gm == mx, "column %d: max %g, want %g", n, gm, mx);
        CHECK(fabs(gs - s) <= 1e-5 * s, "column %d: sum %.9g, want %.9g (rel %.2e)", n, gs, s, fabs(gs - s) / s);
    }
}

int main(void) {
    std::mt19937 rng(17);
    const int valid[] = {128, 81, 64, 65, 3};
    const int Ns[][2] = {{128, 0}, {64, 0}, {384, 256}, {256, 128}, {200, 128}}; /* N, tile_col */
    int cases = 0;
    for (int v : valid)
        for (const auto &nc : Ns) {
            run_tile(rng, v, nc[0], nc[1]);
            cases++;
        }
    printf("%d tiles: %s (%d failures)\n", cases, failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
