/*
 * flash_attention_bf16_wgmma_bwd.cu: the Hopper (sm_90a) backward of forge's
 * bf16 flash attention on TMA + wgmma (entry and contract in
 * flash_attention_bf16.h, notes in lab/notes/flash.md). At D = 64 the same
 * three kernels and results contract as the mma.sync backward in
 * flash_attention_bf16.cu: the row statistics lse*log2e and delta =
 * rowsum(dO * O) (that file's kernel, packed for the kernels here), dQ
 * parallel over query blocks, dK/dV parallel over key blocks; no atomics. At
 * D = 128 the row statistics and one fused kernel over key blocks that runs
 * the dK/dV kernel's tile and adds each block's dQ share in a fixed order
 * (flash_attention_bf16_wgmma_bwd_fused.cu, whose header explains it): 5
 * matmul passes instead of 7, measured 1.10-1.13x the three kernels there, while at
 * D = 64 the fused kernels measured slower (lab/notes/flash.md).
 *
 * Design (the decisions a reader would otherwise get wrong; the wgmma
 * fragment layouts, descriptors and tensor-map conventions are those of the
 * forward, flash_attention_bf16_wgmma.cu, whose header explains them):
 * - Every kernel: CTA = 3 warpgroups, warpgroup 0 the producer (TMA), 1 and
 *   2 consumers. Rows a CTA owns stay in shared memory (resident); 64-row
 *   tiles of the other side stream through a ring of STAGES stages.
 *   dQ: 128 queries per CTA, 64 per consumer. dK/dV (fb_dkdv_kernel): 128
 *   keys per CTA, 64 per consumer, each computing all four products with dK
 *   and dV in its registers (at D = 128 that is 128 fp32 accumulator
 *   registers a thread, which fits in the consumers' 240 only because their
 *   waits are mbar_wait_wide: wgmma_common.cuh says why).
 * - At D = 64 the dK/dV consumer reads its 64 rows of K and V once into
 *   register A fragments and issues S^T and dP^T from them (fb_dkdv_kernel<64,
 *   1>): only Q and dO stream from shared memory into the products (an SS
 *   m64n64k16 reads 4 KiB in the 32 cycles it takes, the whole 128 B/clk of an
 *   SM's shared memory). At D = 128 the 64 more registers do not fit.
 * - Every streamed tile is 64 rows, loaded as D/64 boxes of 64 rows x 64
 *   columns (8 KiB, 128B swizzle), box j at j * 8 KiB. That one layout is
 *   both the K-major B operand of S = A.B^T (k16 step kk at (kk/4) * 8 KiB +
 *   (kk%4) * 32 B) and the MN-major B operand of the second product, whose
 *   reduction runs over the tile's 64 rows (step kk at kk * 2 KiB, LBO = 8 KiB
 *   to the next 64 columns: wgmma_desc_mn), exactly as the forward reads V.
 *   So no tile is transposed or loaded twice: K serves S = Q.K^T and
 *   dQ += dS.K; Q serves S^T = K.Q^T and dK += dS^T.Q; dO serves dP^T =
 *   V.dO^T and dV += P^T.dO. A 128-row streamed tile would break the
 *   MN-major view at D = 128 (its two 64-row halves of a column block would
 *   not be adjacent), which is why the streamed side is 64 rows.
 * - The resident side (Q and dO in dQ; K and V in dK/dV) is 128 rows per box
 *   (16 KiB per 64 columns) like the forward's Q; consumer c reads rows
 *   64c.. at + c * 8 KiB (a multiple of the 1 KiB swizzle atom).
 * - Per streamed tile a dQ or dK/dV consumer issues its two S-like
 *   products (S and dP, or S^T and dP^T) as two commit groups, waits for the
 *   first (wait_group 1), computes P while the second runs, waits for it,
 *   computes dS, packs P and dS into bf16 A fragments, issues the register-A
 *   products and waits for everything before the stage is released. Nothing
 *   is written to a register an in-flight wgmma reads or writes, and the code
 *   between a wgmma and its wait has no branch (see FB_BIG).
 * - P = exp2(S * scale*log2e - lse*log2e): lse of a row that sees no key is
 *   -inf and is replaced by 0; every entry of such a row is masked anyway.
 *   dS is kept unscaled (P * (dP - delta)); dQ and dK are multiplied by
 *   scale at the store.
 * - The first kernel (forge_flash_bf16_backward_rowstats) packs lse*log2e
 *   and delta = rowsum(dO * O) per (b, h) in rows of Tq padded to 128 with
 *   zeros (the caller's `delta` scratch). dK/dV: the 64 streamed queries'
 *   256 + 256 bytes go into shared memory next to the tile by two bulk
 *   copies that complete on the stage's full barrier with the TMA tiles (one
 *   producer thread does all of a stage's loads). The consumers read them
 *   with plain loads; each warp's lane 0 releases the stage after
 *   __syncwarp, as for the tiles. compute-sanitizer's racecheck reports that
 *   release against the next bulk copy into the slot (a write-after-read it
 *   does not see ordered); lab/notes/flash.md has what was tried. dQ reads
 *   its two rows' pair from global memory once.
 * - GQA without atomics: a dK/dV CTA owns one kv head and loops over the
 *   G = H/Hkv query heads of its group inside the ring (iteration it: head
 *   hk*G + it/nq, query tile t_first + it%nq), like the mma.sync kernel.
 * - Causal (bottom-right, diag = Tk - Tq): a dQ CTA stops at its last visible
 *   key tile, a dK/dV CTA starts at its first visible query tile; a
 *   consumer whose 64 rows see none of a tile skips its MMAs but still waits
 *   for and releases the stage (see the forward); only tiles straddling the
 *   diagonal or an edge evaluate the mask. Rows past Tq / Tk are zero-filled
 *   by TMA, masked where they are columns, and never stored.
 * - Tq == 0 or Tk == 0 are refused (a tensor map cannot have a 0 dim); the
 *   default entry (forge_flash_bf16_backward) then runs the mma.sync backward.
 * - The kernels and their launch steps are in
 *   flash_attention_bf16_wgmma_bwd.cuh (the lab runs other instances of
 *   them); this file holds the host steps and the entry. The kernel forge
 *   runs (ff_bwd_kernel<D> on fb_dkdv_kernel<64, 1>'s / <128, 0>'s tile) was
 *   chosen by measurement against the dQ + dK/dV pair (fb_dq_kernel<D>,
 *   fb_dkdv_kernel: the lab's reference now) and the lab's pipelined, split and
 *   other fused ones (lab/notes/flash.md).
 */
#include <math.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "flash_attention_bf16_wgmma_bwd.cuh" /* the kernels and their launch steps */
#include "wgmma_tmap.h"

extern "C" {
#include "flash_attention_bf16.h"
}

#define FB_ENTRY "forge_flash_bf16_backward_wgmma" /* named in errors */

/* the shared 3D token map (wgmma_tmap.cu), naming the entry and its fallback in a refusal */
static forge_status fb_encode(CUtensorMap *map, const void *ptr, int B, int T, int cols, long long stride, int box_rows,
                              const char *what, const char *entry) {
    return wgmma_encode_tokens(map, ptr, B, T, cols, stride, box_rows, what, entry, "mma.sync backward");
}

/* The packed row statistics (FORGE_FLASH_BF16_ROWSTATS floats at rows) as a 3D fp32 map: dims (Tq padded, B * H,
 * 2 planes), box (64, 1, 2), so one tensor copy lands a 64-query tile's lse*log2e then its delta (512 B, the slot
 * fb_kv_produce fills). */
static forge_status fb_encode_rows(CUtensorMap *map, const float *rows, const forge_flash_shape *s, const char *entry) {
    gemm_encode_tiled_fn encode = nullptr;
    FORGE_TRY(gemm_get_encoder(&encode));
    const cuuint64_t tpad = FORGE_FLASH_BF16_ROWS_TPAD(s->Tq), heads = (cuuint64_t)s->B * s->H;
    const cuuint64_t dims[3] = {tpad, heads, 2};
    const cuuint64_t strides[2] = {tpad * 4, tpad * heads * 4};
    const cuuint32_t box[3] = {FB_BS, 1, 2};
    const cuuint32_t elem_strides[3] = {1, 1, 1};
    const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<float *>(rows), dims, strides, box,
                              elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                              CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: cuTensorMapEncodeTiled for the row statistics (%llu rows of %llu floats, 2 planes, "
                           "box %d x 1 x 2) failed with CUresult %d; use the mma.sync backward",
                           entry, (unsigned long long)heads, (unsigned long long)tpad, FB_BS, (int)r);
    return FORGE_OK;
}

forge_status fb_backward_begin(const char *what, const forge_flash_shape *s, const void *q, const void *k,
                               const void *v, const void *out_bf16, const void *dout_bf16, const float *lse,
                               float *delta, float *dq, float *dk, float *dv, int *launch) {
    *launch = 0;
    const void *ptrs[10] = {q, k, v, out_bf16, dout_bf16, lse, delta, dq, dk, dv};
    FORGE_TRY(forge_flash_check_shape(what, s, ptrs, 10));
    if (s->B == 0) return FORGE_OK;
    if (s->Tq == 0 || s->Tk == 0)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: needs Tq > 0 and Tk > 0 (a tensor map cannot have a 0 dim), got Tq=%d Tk=%d; use "
                           "the mma.sync backward",
                           what, s->Tq, s->Tk);
    int dev = 0, major = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major != 9)
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: needs an sm_90a (Hopper) device for wgmma/TMA, found compute capability %d.x; use "
                           "the mma.sync backward",
                           what, major);
    *launch = 1;
    return FORGE_OK;
}

forge_status fb_backward_prepare(fb_call *c, const char *entry, const forge_flash_shape *s, const void *q,
                                 const void *k, const void *v, const void *out_bf16, const void *dout_bf16,
                                 const float *lse, float *delta, float *dq, float *dk, float *dv, void *stream,
                                 int pdl) {
    const int D = s->D;
    c->s = *s;
    FORGE_TRY(fb_encode(&c->q_res, q, s->B, s->Tq, s->H * D, s->q_stride, FB_BR, "Q (128-row boxes)", entry));
    FORGE_TRY(fb_encode(&c->do_res, dout_bf16, s->B, s->Tq, s->H * D, s->o_stride, FB_BR, "dO (128-row boxes)",
                        entry));
    FORGE_TRY(fb_encode(&c->k_str, k, s->B, s->Tk, s->Hkv * D, s->k_stride, FB_BS, "K (64-row boxes)", entry));
    FORGE_TRY(fb_encode(&c->v_str, v, s->B, s->Tk, s->Hkv * D, s->v_stride, FB_BS, "V (64-row boxes)", entry));
    FORGE_TRY(fb_encode(&c->q_str, q, s->B, s->Tq, s->H * D, s->q_stride, FB_BS, "Q (64-row boxes)", entry));
    FORGE_TRY(fb_encode(&c->do_str, dout_bf16, s->B, s->Tq, s->H * D, s->o_stride, FB_BS, "dO (64-row boxes)",
                        entry));
    FORGE_TRY(fb_encode(&c->k_res, k, s->B, s->Tk, s->Hkv * D, s->k_stride, FB_BR, "K (128-row boxes)", entry));
    FORGE_TRY(fb_encode(&c->v_res, v, s->B, s->Tk, s->Hkv * D, s->v_stride, FB_BR, "V (128-row boxes)", entry));
    FORGE_TRY(fb_encode_rows(&c->rows_map, delta, s, entry));
    c->rows = delta;
    c->g = {dq, dk, dv, 0, 0, 0, 0, 0};
    c->scale = 1.0f / sqrtf((float)D);
    c->sl2 = c->scale * FB_LOG2E;
    c->st = (cudaStream_t)stream;
    c->pdl = pdl;
    return forge_flash_bf16_backward_rowstats(s, out_bf16, dout_bf16, lse, delta, c->st, pdl);
}

/* What forge runs, with the gradients stored as g says (`entry` names the caller): the fused kernel
 * (flash_attention_bf16_wgmma_bwd_fused.cu) at D = 64 and 128, measured faster than the dQ and dK/dV kernels at
 * both (lab/notes/flash.md); those two stay the lab's parity reference (lab_flash16_backward_three). */
static forge_status fb_backward_run(const char *entry, const forge_flash_shape *s, const void *q, const void *k,
                                    const void *v, const void *out_bf16, const void *dout_bf16, const float *lse,
                                    float *delta, const forge_flash_grads *g, void *stream, int pdl) {
    int launch = 0;
    /* the pointer checks of every entry (16-byte aligned) cover the bf16 pair stores too */
    FORGE_TRY(fb_backward_begin(entry, s, q, k, v, out_bf16, dout_bf16, lse, delta, (float *)g->dq, (float *)g->dk,
                                (float *)g->dv, &launch));
    if (!launch) return FORGE_OK;
    fb_call c;
    FORGE_TRY(fb_backward_prepare(&c, entry, s, q, k, v, out_bf16, dout_bf16, lse, delta, (float *)g->dq,
                                  (float *)g->dk, (float *)g->dv, stream, pdl));
    c.g = *g;
    return fb_launch_fused(c, delta, FB_FUSED_BY_RULE, entry);
}

extern "C" forge_status forge_flash_bf16_backward_wgmma(const forge_flash_shape *s, const void *q, const void *k,
                                                        const void *v, const void *out_bf16, const void *dout_bf16,
                                                        const float *lse, float *delta, float *dq, float *dk,
                                                        float *dv, void *stream) {
    const forge_flash_grads g = {dq, dk, dv, 0, 0, 0, 0, 0};
    return fb_backward_run(FB_ENTRY, s, q, k, v, out_bf16, dout_bf16, lse, delta, &g, stream, 0);
}

extern "C" forge_status forge_flash_bf16_backward_into(const forge_flash_shape *s, const void *q, const void *k,
                                                       const void *v, const void *out_bf16, const void *dout_bf16,
                                                       const float *lse, float *delta, const forge_flash_grads *g,
                                                       void *stream, int pdl) {
    const char *entry = "forge_flash_bf16_backward_into";
    if (s == NULL || g == NULL) return forge_error(FORGE_ERR_ARG, "%s: NULL shape or gradients", entry);
    if (g->bf16 && (g->dq_stride % 2 != 0 || g->dk_stride % 2 != 0 || g->dv_stride % 2 != 0 ||
                    g->dq_stride < (long long)s->H * s->D || g->dk_stride < (long long)s->Hkv * s->D ||
                    g->dv_stride < (long long)s->Hkv * s->D))
        return forge_error(FORGE_ERR_UNSUPPORTED,
                           "%s: bf16 gradients need even token strides that hold every head, got dq=%lld dk=%lld "
                           "dv=%lld for H=%d Hkv=%d D=%d",
                           entry, g->dq_stride, g->dk_stride, g->dv_stride, s->H, s->Hkv, s->D);
    return fb_backward_run(entry, s, q, k, v, out_bf16, dout_bf16, lse, delta, g, stream, pdl);
}
