/*
 * flash_attention_bf16.cu: fused causal attention, bf16 in, fp32 accumulate,
 * on mma.sync m16n8k16 (contract in flash_attention_bf16.h, notes
 * in lab/notes/flash-attention.md).
 *
 * Design (the decisions a reader would otherwise get wrong):
 * - Fragment layouts of m16n8k16 (g = lane/4, t = lane%4): A a0 (row g, cols
 *   2t,2t+1), a1 (row g+8), a2 (row g, cols 2t+8..), a3 (row g+8, cols
 *   2t+8..); B b0 (k 2t,2t+1, n g), b1 (k 2t+8.., n g); C c0,c1 (row g, cols
 *   2t,2t+1), c2,c3 (row g+8). Two C tiles of 8 columns are therefore
 *   exactly one A fragment of 16 columns after bf16 packing: that is how P
 *   (and dS) go from the first matmul's accumulators to the second matmul's A
 *   operand without leaving registers.
 * - Operands whose reduction index is the contiguous one (Q.K^T: d; dO.V^T:
 *   d) come from shared memory with plain ldmatrix; operands whose reduction
 *   index is the row (P.V: key; dS.K: key; P^T.dO and dS^T.Q: query) come
 *   with ldmatrix.trans. Transposed products of the dK/dV kernel swap the
 *   operand roles (S^T = K.Q^T, dP^T = V.dO^T) so no tile is ever moved.
 * - Shared rows are D*2 + 16 bytes: row r starts at bank 4r (mod 32), so the
 *   eight rows an ldmatrix phase reads hit disjoint bank groups.
 * - Softmax runs in the log2 domain with scale*log2(e) folded into one FMA;
 *   a row max of -inf (nothing visible yet) is replaced by 0 so exp2 never
 *   sees inf - inf. lse is stored in natural log; -inf for empty rows, which
 *   the backward maps to 0 (every entry of such a row is masked anyway).
 * - Causal skipping: a query block stops at its last visible key tile; a key
 *   block starts at its first visible query tile. Only tiles that straddle
 *   the diagonal or an edge evaluate the mask (a block-uniform test).
 * - Edges: rows past T are zero-filled by cp.async (src-size 0), masked, and
 *   never stored, so any T works with the same mainloop.
 * - Query blocks are launched last-first: causal work grows with the block
 *   index, so the long blocks start first and the short ones fill the tail.
 * - The mma.sync kernels launch plainly (the Hopper path's fallback); the
 *   delta kernel, which the wgmma backward shares, waits for the previous
 *   kernel first (forge_pdl_wait) and may take programmatic dependent launch.
 */
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "flash_attention_bf16_mma.cuh" /* the shared building blocks, the forward kernel */
#include "kernel_attrs.h"
#include "pdl.cuh"

extern "C" {
#include "flash_attention_bf16.h"
}

/* ---- backward 1: delta = rowsum(dO * O) ---------------------------------------------
 * PACK = 0 (the mma.sync backward): delta (B, H, Tq). PACK = 1 (the wgmma backward's row statistics,
 * forge_flash_bf16_backward_rowstats): the lse*log2e plane (-inf -> 0) then the delta plane, rows of Tq padded
 * to tpad with zeros (FORGE_FLASH_BF16_ROWSTATS). Eight lanes per (row, head), each loading 16 bytes of O and
 * of dO per 64 columns (D / 64 loads of each), four (row, head) items per warp. The sum has one fixed shape: element pairs (2l, 2l + 1) for l = 0..31 give
 * p_l = rn(0 + fma(o_2l, do_2l, rn(o_2l+1 * do_2l+1))) (with D = 128, the pair at 64 + 2l added next), then the
 * 32 p_l combine as a butterfly over l (partners l ^ 16, l ^ 8, l ^ 4, l ^ 2, l ^ 1). Lane j of the eight holds
 * p_4j .. p_4j+3, so the first three butterfly levels are shuffles with lanes j ^ 4, j ^ 2, j ^ 1 and the last
 * two are adds inside the lane. */
template <int D, bool PACK>
__global__ void __launch_bounds__(256)
    fa_bwd_delta_kernel(const bf16_t *__restrict__ o, const bf16_t *__restrict__ dout, const float *__restrict__ lse,
                        float *__restrict__ delta, forge_flash_shape s, int tpad) {
    forge_pdl_wait();
    forge_pdl_launch_dependents();
    const size_t w = (size_t)blockIdx.x * 32 + threadIdx.x / 8;
    const int j = threadIdx.x & 7;
    const int T = PACK ? tpad : s.Tq; /* PACK: rows Tq .. tpad - 1 are written as zeros */
    const size_t rows = (size_t)s.B * T * s.H;
    const bool valid = w < rows; /* no early return: the whole warp shuffles */
    const int h = valid ? (int)(w % s.H) : 0;
    const size_t bt = valid ? w / s.H : 0; /* b*T + i */
    const size_t b = bt / T, i = bt % T;
    const bool real = valid && (int)i < s.Tq;
    float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (real) {
        const size_t off = (b * s.Tq + i) * (size_t)s.o_stride + (size_t)h * D + (size_t)j * 8;
        uint4 ua[D / 64], uc[D / 64];
#pragma unroll
        for (int c = 0; c < D / 64; c++) {
            ua[c] = *reinterpret_cast<const uint4 *>(o + off + c * 64);
            uc[c] = *reinterpret_cast<const uint4 *>(dout + off + c * 64);
        }
#pragma unroll
        for (int c = 0; c < D / 64; c++) {
            const uint32_t a[4] = {ua[c].x, ua[c].y, ua[c].z, ua[c].w}, d[4] = {uc[c].x, uc[c].y, uc[c].z, uc[c].w};
#pragma unroll
            for (int k = 0; k < 4; k++) { /* the lower address is the low half */
                const float ax = __uint_as_float(a[k] << 16), ay = __uint_as_float(a[k] & 0xffff0000u);
                const float dx = __uint_as_float(d[k] << 16), dy = __uint_as_float(d[k] & 0xffff0000u);
                p[k] = __fadd_rn(p[k], __fmaf_rn(ax, dx, __fmul_rn(ay, dy)));
            }
        }
    }
#pragma unroll
    for (int x = 4; x > 0; x >>= 1)
#pragma unroll
        for (int k = 0; k < 4; k++) p[k] = __fadd_rn(p[k], __shfl_xor_sync(0xffffffffu, p[k], x));
    const float acc = __fadd_rn(__fadd_rn(p[0], p[2]), __fadd_rn(p[1], p[3]));
    if (!valid || j != 0) return;
    const size_t row = (b * s.H + h) * T + i;
    if (!PACK) {
        delta[row] = acc;
        return;
    }
    const float lv = real ? lse[(b * s.H + h) * s.Tq + i] : 0.0f;
    delta[row] = lv == -INFINITY ? 0.0f : lv * FA_LOG2E;
    delta[(size_t)s.B * s.H * T + row] = acc;
}

/* ---- backward 2: dQ over query blocks ------------------------------------------------ */

template <int D>
__global__ void __launch_bounds__(FA_THREADS)
    fa_bwd_dq_kernel(const bf16_t *__restrict__ q, const bf16_t *__restrict__ k, const bf16_t *__restrict__ v,
                     const bf16_t *__restrict__ dout, const float *__restrict__ lse, const float *__restrict__ delta,
                     float *__restrict__ dq, forge_flash_shape s, float sl2, float scale) {
    constexpr int STR = D * 2 + 16;
    constexpr int DK = D / 16;
    constexpr int DN = D / 8;
    constexpr int NN = FA_BN / 8;
    constexpr int TILE = FA_BN * STR;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    const uint32_t sq = fa_smem_u32(fa_smem);
    const uint32_t sdo = sq + FA_BM * STR;
    const uint32_t sk = sdo + FA_BM * STR; /* 2 stages */
    const uint32_t sv = sk + 2 * TILE;     /* 2 stages */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * FA_BM, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / (s.H / s.Hkv);
    const int diag = s.Tk - s.Tq;
    const bf16_t *qb = q + (size_t)b * s.Tq * s.q_stride + (size_t)h * D;
    const bf16_t *dob = dout + (size_t)b * s.Tq * s.o_stride + (size_t)h * D;
    const bf16_t *kb = k + (size_t)b * s.Tk * s.k_stride + (size_t)hk * D;
    const bf16_t *vb = v + (size_t)b * s.Tk * s.v_stride + (size_t)hk * D;

    const int ntiles = flash_key_tiles(s.Tk, diag, q0, FA_BM, FA_BN);

    fa_load_rows<D, FA_BM>(sq, qb, s.q_stride, q0, s.Tq, tid);
    fa_load_rows<D, FA_BM>(sdo, dob, s.o_stride, q0, s.Tq, tid);
    if (ntiles > 0) {
        fa_load_rows<D, FA_BN>(sk, kb, s.k_stride, 0, s.Tk, tid);
        fa_load_rows<D, FA_BN>(sv, vb, s.v_stride, 0, s.Tk, tid);
    }
    fa_commit();

    const int row_lo = q0 + warp * 16 + g;
    float lse2[2], dlt[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row_lo + r * 8;
        const size_t idx = ((size_t)b * s.H + h) * s.Tq + row;
        const float lv = row < s.Tq ? lse[idx] : 0.0f;
        lse2[r] = lv == -INFINITY ? 0.0f : lv * FA_LOG2E;
        dlt[r] = row < s.Tq ? delta[idx] : 0.0f;
    }

    float acc[DN][4];
#pragma unroll
    for (int n = 0; n < DN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[n][e] = 0.0f;
    const uint32_t a_off = (uint32_t)((warp * 16 + (lane & 15)) * STR + (lane >> 4) * 16);
    const uint32_t b_off = (uint32_t)(((lane & 7) + ((lane >> 4) << 3)) * STR + ((lane >> 3) & 1) * 16);
    const uint32_t t_off = (uint32_t)((lane & 15) * STR + (lane >> 4) * 16);

    for (int t = 0; t < ntiles; t++) {
        const int cur = t & 1;
        if (t + 1 < ntiles) {
            fa_load_rows<D, FA_BN>(sk + (cur ^ 1) * TILE, kb, s.k_stride, (t + 1) * FA_BN, s.Tk, tid);
            fa_load_rows<D, FA_BN>(sv + (cur ^ 1) * TILE, vb, s.v_stride, (t + 1) * FA_BN, s.Tk, tid);
        }
        fa_commit();
        fa_wait<1>();
        __syncthreads();

        const uint32_t kt = sk + cur * TILE, vt = sv + cur * TILE;
        float sc[NN][4], dp[NN][4];
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) sc[n][e] = dp[n][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DK; kk++) {
            uint32_t a[4], c[4];
            fa_ldsm_x4(a, sq + a_off + kk * 32);
            fa_ldsm_x4(c, sdo + a_off + kk * 32);
#pragma unroll
            for (int np = 0; np < NN / 2; np++) {
                uint32_t r[4];
                fa_ldsm_x4(r, kt + b_off + np * 16 * STR + kk * 32);
                fa_mma(sc[2 * np], a, r[0], r[1]);
                fa_mma(sc[2 * np + 1], a, r[2], r[3]);
                fa_ldsm_x4(r, vt + b_off + np * 16 * STR + kk * 32);
                fa_mma(dp[2 * np], c, r[0], r[1]);
                fa_mma(dp[2 * np + 1], c, r[2], r[3]);
            }
        }

        const int k0 = t * FA_BN;
        const bool edge = k0 + FA_BN - 1 > q0 + diag || k0 + FA_BN > s.Tk;
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                float p = exp2f(fmaf(sc[n][e], sl2, -lse2[r]));
                if (edge) {
                    const int key = k0 + n * 8 + 2 * tq + (e & 1);
                    if (key > row_lo + r * 8 + diag || key >= s.Tk) p = 0.0f;
                }
                sc[n][e] = p * (dp[n][e] - dlt[r]); /* dS / scale */
            }

#pragma unroll
        for (int kk = 0; kk < FA_BN / 16; kk++) {
            uint32_t a[4];
            fa_c_to_a<NN>(a, sc, kk);
#pragma unroll
            for (int dp2 = 0; dp2 < DN / 2; dp2++) {
                uint32_t r[4];
                fa_ldsm_x4_t(r, kt + t_off + kk * 16 * STR + dp2 * 32);
                fa_mma(acc[2 * dp2], a, r[0], r[1]);
                fa_mma(acc[2 * dp2 + 1], a, r[2], r[3]);
            }
        }
        __syncthreads();
    }
    fa_wait<0>();

#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row_lo + r * 8;
        if (row >= s.Tq) continue;
        float *dst = dq + (((size_t)b * s.Tq + row) * s.H + h) * D;
#pragma unroll
        for (int n = 0; n < DN; n++)
            *(float2 *)(dst + n * 8 + 2 * tq) = make_float2(acc[n][2 * r] * scale, acc[n][2 * r + 1] * scale);
    }
}

/* ---- backward 3: dK, dV over key blocks ----------------------------------------------- */

/* BQ queries per streamed tile: 32 at D=128 keeps dK + dV (128 fp32) plus S^T
 * and dP^T (2 x 16) in registers without spilling; 64 at D=64. */
template <int D> struct fa_dkdv_cfg {
    static constexpr int BQ = D == 128 ? 32 : 64;
};

template <int D>
__global__ void __launch_bounds__(FA_THREADS)
    fa_bwd_dkdv_kernel(const bf16_t *__restrict__ q, const bf16_t *__restrict__ k, const bf16_t *__restrict__ v,
                       const bf16_t *__restrict__ dout, const float *__restrict__ lse,
                       const float *__restrict__ delta, float *__restrict__ dk, float *__restrict__ dv,
                       forge_flash_shape s, float sl2, float scale) {
    constexpr int BQ = fa_dkdv_cfg<D>::BQ;
    constexpr int STR = D * 2 + 16;
    constexpr int DK = D / 16;
    constexpr int DN = D / 8;
    constexpr int NN = BQ / 8;
    constexpr int QT = BQ * STR;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    const uint32_t sk = fa_smem_u32(fa_smem);
    const uint32_t sv = sk + FA_BM * STR;
    const uint32_t sq = sv + FA_BM * STR; /* 2 stages */
    const uint32_t sdo = sq + 2 * QT;     /* 2 stages */
    float *s_lse = (float *)(fa_smem + FA_BM * STR * 2 + 4 * QT); /* [2][BQ] */
    float *s_dlt = s_lse + 2 * BQ;                                /* [2][BQ] */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
    const int k0 = blockIdx.x * FA_BM, hk = blockIdx.y, b = blockIdx.z;
    const int G = s.H / s.Hkv;
    const int diag = s.Tk - s.Tq;
    const bf16_t *kb = k + (size_t)b * s.Tk * s.k_stride + (size_t)hk * D;
    const bf16_t *vb = v + (size_t)b * s.Tk * s.v_stride + (size_t)hk * D;

    /* first query that sees any key of this block: k0 - diag */
    const int qstart = max(0, k0 - diag);
    const int t_first = qstart / BQ;
    const int nq = qstart < s.Tq ? (s.Tq + BQ - 1) / BQ - t_first : 0;
    const int total = G * nq;

    fa_load_rows<D, FA_BM>(sk, kb, s.k_stride, k0, s.Tk, tid);
    fa_load_rows<D, FA_BM>(sv, vb, s.v_stride, k0, s.Tk, tid);
    fa_commit();

    /* iteration it: query head hk*G + it/nq, query tile t_first + it%nq */
    auto load_q = [&](int it, int st) {
        const int h = hk * G + it / nq;
        const int qt0 = (t_first + it % nq) * BQ;
        const bf16_t *qb = q + (size_t)b * s.Tq * s.q_stride + (size_t)h * D;
        const bf16_t *dob = dout + (size_t)b * s.Tq * s.o_stride + (size_t)h * D;
        fa_load_rows<D, BQ>(sq + st * QT, qb, s.q_stride, qt0, s.Tq, tid);
        fa_load_rows<D, BQ>(sdo + st * QT, dob, s.o_stride, qt0, s.Tq, tid);
        if (tid < BQ) {
            const int row = qt0 + tid;
            const size_t idx = ((size_t)b * s.H + h) * s.Tq + row;
            const float lv = row < s.Tq ? lse[idx] : 0.0f;
            s_lse[st * BQ + tid] = lv == -INFINITY ? 0.0f : lv * FA_LOG2E;
            s_dlt[st * BQ + tid] = row < s.Tq ? delta[idx] : 0.0f;
        }
    };
    if (total > 0) load_q(0, 0);
    fa_commit();

    float adk[DN][4], adv[DN][4];
#pragma unroll
    for (int n = 0; n < DN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) adk[n][e] = adv[n][e] = 0.0f;
    const int key_lo = k0 + warp * 16 + g; /* this thread's keys: key_lo, key_lo + 8 */
    const uint32_t a_off = (uint32_t)((warp * 16 + (lane & 15)) * STR + (lane >> 4) * 16);
    const uint32_t b_off = (uint32_t)(((lane & 7) + ((lane >> 4) << 3)) * STR + ((lane >> 3) & 1) * 16);
    const uint32_t t_off = (uint32_t)((lane & 15) * STR + (lane >> 4) * 16);

    for (int it = 0; it < total; it++) {
        const int cur = it & 1;
        if (it + 1 < total) load_q(it + 1, cur ^ 1);
        fa_commit();
        fa_wait<1>();
        __syncthreads();

        const uint32_t qt = sq + cur * QT, dt = sdo + cur * QT;
        const float *ls = s_lse + cur * BQ, *dl = s_dlt + cur * BQ;
        float st[NN][4], dpt[NN][4];
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) st[n][e] = dpt[n][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DK; kk++) {
            uint32_t a[4], c[4];
            fa_ldsm_x4(a, sk + a_off + kk * 32);
            fa_ldsm_x4(c, sv + a_off + kk * 32);
#pragma unroll
            for (int np = 0; np < NN / 2; np++) {
                uint32_t r[4];
                fa_ldsm_x4(r, qt + b_off + np * 16 * STR + kk * 32);
                fa_mma(st[2 * np], a, r[0], r[1]);
                fa_mma(st[2 * np + 1], a, r[2], r[3]);
                fa_ldsm_x4(r, dt + b_off + np * 16 * STR + kk * 32);
                fa_mma(dpt[2 * np], c, r[0], r[1]);
                fa_mma(dpt[2 * np + 1], c, r[2], r[3]);
            }
        }

        const int qt0 = (t_first + it % nq) * BQ;
        const bool edge = k0 + FA_BM - 1 > qt0 + diag || qt0 + BQ > s.Tq;
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = n * 8 + 2 * tq + (e & 1); /* query within the tile */
                float p = exp2f(fmaf(st[n][e], sl2, -ls[col]));
                if (edge) {
                    const int query = qt0 + col;
                    if (key_lo + (e >> 1) * 8 > query + diag || query >= s.Tq) p = 0.0f;
                }
                st[n][e] = p;
                dpt[n][e] = p * (dpt[n][e] - dl[col]); /* dS^T / scale */
            }

#pragma unroll
        for (int kk = 0; kk < BQ / 16; kk++) {
            uint32_t ap[4], as[4];
            fa_c_to_a<NN>(ap, st, kk);
            fa_c_to_a<NN>(as, dpt, kk);
#pragma unroll
            for (int dp2 = 0; dp2 < DN / 2; dp2++) {
                uint32_t r[4];
                fa_ldsm_x4_t(r, dt + t_off + kk * 16 * STR + dp2 * 32);
                fa_mma(adv[2 * dp2], ap, r[0], r[1]);
                fa_mma(adv[2 * dp2 + 1], ap, r[2], r[3]);
                fa_ldsm_x4_t(r, qt + t_off + kk * 16 * STR + dp2 * 32);
                fa_mma(adk[2 * dp2], as, r[0], r[1]);
                fa_mma(adk[2 * dp2 + 1], as, r[2], r[3]);
            }
        }
        __syncthreads();
    }
    fa_wait<0>();

#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = key_lo + r * 8;
        if (key >= s.Tk) continue;
        const size_t off = (((size_t)b * s.Tk + key) * s.Hkv + hk) * D;
#pragma unroll
        for (int n = 0; n < DN; n++) {
            *(float2 *)(dk + off + n * 8 + 2 * tq) = make_float2(adk[n][2 * r] * scale, adk[n][2 * r + 1] * scale);
            *(float2 *)(dv + off + n * 8 + 2 * tq) = make_float2(adv[n][2 * r], adv[n][2 * r + 1]);
        }
    }
}

/* ---- launchers ---------------------------------------------------------------------- */

extern "C" forge_status forge_flash_check_shape(const char *what, const forge_flash_shape *s, const void *const *ptrs,
                                               int nptrs) {
    if (s == nullptr) return forge_error(FORGE_ERR_ARG, "%s: NULL shape", what);
    if (s->B < 0 || s->Tq < 0 || s->Tk < 0 || s->H <= 0 || s->Hkv <= 0 || s->H % s->Hkv != 0)
        return forge_error(FORGE_ERR_ARG,
                           "%s: need B, Tq, Tk >= 0 and H, Hkv > 0 with Hkv dividing H, got B=%d Tq=%d Tk=%d "
                           "H=%d Hkv=%d",
                           what, s->B, s->Tq, s->Tk, s->H, s->Hkv);
    if (s->D != 64 && s->D != 128)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: head dim D=%d has no compiled tile (tiles exist for D = 64 and 128; use the "
                           "unfused attention for other head dims)",
                           what, s->D);
    if (s->q_stride % 8 || s->k_stride % 8 || s->v_stride % 8 || s->o_stride % 8 ||
        s->q_stride < (long long)s->H * s->D || s->k_stride < (long long)s->Hkv * s->D ||
        s->v_stride < (long long)s->Hkv * s->D || s->o_stride < (long long)s->H * s->D)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: token strides must be multiples of 8 elements (16-byte cp.async) and hold every "
                           "head, got q=%lld k=%lld v=%lld o=%lld for H=%d Hkv=%d D=%d",
                           what, s->q_stride, s->k_stride, s->v_stride, s->o_stride, s->H, s->Hkv, s->D);
    if (s->B > 65535 || s->H > 65535)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: B=%d and H=%d must each be <= 65535 (grid.y/z)", what, s->B,
                           s->H);
    for (int i = 0; i < nptrs; i++)
        if (ptrs[i] == nullptr || (uintptr_t)ptrs[i] % 16 != 0)
            return forge_error(FORGE_ERR_UNSUPPORTED, "%s: pointer %d is NULL or not 16-byte aligned (%p)", what, i,
                               ptrs[i]);
    return FORGE_OK;
}

/* What both layouts of the first backward kernel need (`what` names the entry): D = 64 or 128, O and dO rows
 * 16-byte aligned. */
static forge_status fa_delta_check(const char *what, const forge_flash_shape *s, const void *o, const void *dout) {
    if (s == nullptr) return forge_error(FORGE_ERR_ARG, "%s: NULL shape", what);
    if (s->D != 64 && s->D != 128)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: needs D = 64 or 128 (compiled tiles), got D=%d", what, s->D);
    if ((uintptr_t)o % 16 != 0 || (uintptr_t)dout % 16 != 0 || s->o_stride % 8 != 0)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: O and dO need 16-byte aligned rows (pointers 16-byte aligned, o_stride a multiple of "
                           "8), got o_stride=%lld",
                           what, s->o_stride);
    return FORGE_OK;
}

extern "C" forge_status forge_flash_bf16_backward_delta(const forge_flash_shape *s, const void *o, const void *dout,
                                                       float *delta, void *stream, int pdl) {
    FORGE_TRY(fa_delta_check("forge_flash_bf16_backward_delta", s, o, dout));
    const size_t rows = (size_t)s->B * s->Tq * s->H;
    if (rows == 0) return FORGE_OK;
    CUDA_LAUNCH_TRY(forge_pdl_launch(s->D == 64 ? fa_bwd_delta_kernel<64, false> : fa_bwd_delta_kernel<128, false>,
                                     (unsigned)((rows + 31) / 32), 256, 0, (cudaStream_t)stream, pdl,
                                     (const bf16_t *)o, (const bf16_t *)dout, (const float *)nullptr, delta, *s,
                                     s->Tq),
                    "fa_bwd_delta_kernel");
    return FORGE_OK;
}

extern "C" forge_status forge_flash_bf16_backward_rowstats(const forge_flash_shape *s, const void *o,
                                                          const void *dout, const float *lse, float *rows,
                                                          void *stream, int pdl) {
    FORGE_TRY(fa_delta_check("forge_flash_bf16_backward_rowstats", s, o, dout));
    const int tpad = (int)FORGE_FLASH_BF16_ROWS_TPAD(s->Tq);
    const size_t n = (size_t)s->B * tpad * s->H;
    if (n == 0) return FORGE_OK;
    CUDA_LAUNCH_TRY(forge_pdl_launch(s->D == 64 ? fa_bwd_delta_kernel<64, true> : fa_bwd_delta_kernel<128, true>,
                                     (unsigned)((n + 31) / 32), 256, 0, (cudaStream_t)stream, pdl,
                                     (const bf16_t *)o, (const bf16_t *)dout, lse, rows, *s, tpad),
                    "fa_bwd_delta_kernel<packed>");
    return FORGE_OK;
}

template <int D> constexpr int fa_dq_smem() { return (2 * FA_BM + 4 * FA_BN) * (D * 2 + 16); }
template <int D> constexpr int fa_dkdv_smem() {
    return (2 * FA_BM + 4 * fa_dkdv_cfg<D>::BQ) * (D * 2 + 16) + 4 * fa_dkdv_cfg<D>::BQ * (int)sizeof(float);
}

template <int D>
static forge_status fa_backward_t(const forge_flash_shape *s, const void *q, const void *k, const void *v,
                                  const void *o, const void *dout, const float *lse, float *delta, float *dq,
                                  float *dk, float *dv, cudaStream_t st) {
    const float scale = 1.0f / sqrtf((float)D);
    const float sl2 = scale * FA_LOG2E;
    if (s->Tq > 0) {
        FORGE_TRY(forge_flash_bf16_backward_delta(s, o, dout, delta, st, 0));
        auto kq = fa_bwd_dq_kernel<D>;
        static kernel_attrs_once once_dq;
        CUDA_TRY(kernel_attrs_set(&once_dq, (const void *)kq, fa_dq_smem<D>(), 0));
        dim3 grid((unsigned)((s->Tq + FA_BM - 1) / FA_BM), (unsigned)s->H, (unsigned)s->B);
        kq<<<grid, FA_THREADS, fa_dq_smem<D>(), st>>>((const bf16_t *)q, (const bf16_t *)k, (const bf16_t *)v,
                                                      (const bf16_t *)dout, lse, delta, dq, *s, sl2, scale);
        CUDA_LAUNCH_CHECK("fa_bwd_dq_kernel");
    }
    if (s->Tk > 0) {
        auto kk = fa_bwd_dkdv_kernel<D>;
        static kernel_attrs_once once_dkdv;
        CUDA_TRY(kernel_attrs_set(&once_dkdv, (const void *)kk, fa_dkdv_smem<D>(), 0));
        dim3 grid((unsigned)((s->Tk + FA_BM - 1) / FA_BM), (unsigned)s->Hkv, (unsigned)s->B);
        kk<<<grid, FA_THREADS, fa_dkdv_smem<D>(), st>>>((const bf16_t *)q, (const bf16_t *)k, (const bf16_t *)v,
                                                        (const bf16_t *)dout, lse, delta, dk, dv, *s, sl2, scale);
        CUDA_LAUNCH_CHECK("fa_bwd_dkdv_kernel");
    }
    return FORGE_OK;
}

extern "C" forge_status forge_flash_bf16_forward_mma(const forge_flash_shape *s, const void *q, const void *k,
                                                     const void *v, void *out_bf16, float *lse, void *stream) {
    return fa_forward_rows<64>("forge_flash_bf16_forward_mma", s, q, k, v, out_bf16, lse, stream);
}

/* The wgmma forward (flash_attention_bf16_wgmma.cu) wherever it runs: it measured faster than this file's forward
 * at every bench shape (lab/notes/flash.md). Where it refuses (FORGE_ERR_UNSUPPORTED: not an sm_90 device, a
 * layout TMA cannot describe) the mma.sync forward above takes the call. */
extern "C" forge_status forge_flash_bf16_forward(const forge_flash_shape *s, const void *q, const void *k,
                                                 const void *v, void *out_bf16, float *lse, void *stream, int pdl) {
    const forge_status st = forge_flash_bf16_forward_wgmma(s, q, k, v, out_bf16, lse, stream, pdl);
    if (st != FORGE_ERR_UNSUPPORTED) return st;
    forge_error_clear(); /* a shape / device the wgmma path refuses: the mma.sync forward takes it */
    return forge_flash_bf16_forward_mma(s, q, k, v, out_bf16, lse, stream);
}

extern "C" forge_status forge_flash_bf16_backward_mma(const forge_flash_shape *s, const void *q, const void *k,
                                                      const void *v, const void *out_bf16, const void *dout_bf16,
                                                      const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                      void *stream) {
    const void *ptrs[10] = {q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv};
    FORGE_TRY(forge_flash_check_shape("forge_flash_bf16_backward_mma", s, ptrs, 10));
    if (s->B == 0) return FORGE_OK;
    cudaStream_t st = (cudaStream_t)stream;
    return s->D == 64 ? fa_backward_t<64>(s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, st)
                      : fa_backward_t<128>(s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, st);
}

/* The wgmma backward (flash_attention_bf16_wgmma_bwd.cu) wherever it runs: with it, forward + backward measured
 * faster than with this file's backward at every bench shape (lab/notes/flash.md). Where it refuses
 * (FORGE_ERR_UNSUPPORTED: not an sm_90 device, Tq == 0 or Tk == 0, a layout TMA cannot describe) the mma.sync
 * backward takes the call. */
extern "C" forge_status forge_flash_bf16_backward(const forge_flash_shape *s, const void *q, const void *k,
                                                  const void *v, const void *out_bf16, const void *dout_bf16,
                                                  const float *lse, float *delta, float *dq, float *dk, float *dv,
                                                  void *stream) {
    const char *what = "forge_flash_bf16_backward";
    const void *ptrs[10] = {q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv};
    FORGE_TRY(forge_flash_check_shape(what, s, ptrs, 10));
    if (s->B == 0) return FORGE_OK;
    const forge_status ws =
        forge_flash_bf16_backward_wgmma(s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream);
    if (ws != FORGE_ERR_UNSUPPORTED) return ws;
    forge_error_clear(); /* a shape / device the wgmma path refuses: the mma.sync backward takes it */
    return forge_flash_bf16_backward_mma(s, q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv, stream);
}
