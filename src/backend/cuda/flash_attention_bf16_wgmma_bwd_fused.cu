/*
 * flash_attention_bf16_wgmma_bwd_fused.cu: the fused Hopper (sm_90a) backward forge runs at D = 64 and 128
 * (fb_launch_fused, called by the entries in flash_attention_bf16_wgmma_bwd.cu, whose header explains the
 * kernels it builds on; measurements in lab/notes/flash.md): ff_bwd_kernel<D> and its launch step, templates in
 * flash_attention_bf16_wgmma_bwd_fused.cuh (that header says what differs at D = 64; the design below is D = 128's).
 * One kernel per 128-key block computes dK and dV and
 * adds the block's share of dQ from a single S^T / dP^T recomputation per (key block, query tile): 5 matmul
 * passes of T^2 D / 2 instead of the 7 of the dQ + dK/dV kernels (the lab's reference now). Deterministic, with no
 * unordered reduction: the contributions to a dQ tile are added in one key-block order by an ordered hand-off.
 *
 * Design:
 * - Grid (key blocks, Hkv, B), 384 threads: fb_dkdv_kernel<128, 0>'s CTA. Warpgroup 0: thread 0 is
 *   fb_kv_produce (K, V resident; Q, dO and the row statistics through a ring of 3 stages), threads 32 and 64
 *   the dQ writers (below). Consumer warpgroup c owns keys 64c..64c+63 of the block and per (query head, query
 *   tile) iteration runs fb_dkdv_kernel's tile: S^T, dP^T, P^T, dS^T, then dV += P^T.dO and dK += dS^T.Q,
 *   waited (issued before dS^T is stored for dQ, so that they run under the store). So dk and dv are bitwise the
 *   dK/dV kernel's.
 * - dQ: both consumers store their dS^T (bf16) into one 128-key buffer (ff_store_ds: dS as an MN-major A
 *   operand), and consumer c computes dQ[:, 64c .. 64c + 63] (64 queries x 64 columns, 32 fp32 registers) =
 *   dS (64 x 128 keys) . K[:, 64c ..] (the resident K box c read MN-major), 8 k16 steps, after dV and dK are
 *   waited: S^T and dP^T are dead by then, so the peak stays the dK/dV kernel's. Two dS buffers (full: 8 warps
 *   after their fence.proxy.async; empty: 8 warps after their dQ product).
 * - The dQ tile times scale leaves through shared memory: consumer c writes its 16 KiB staging tile
 *   (ff_store_dq) and arrives on stgfull[c] (4 warps); writer c waits for the tile's turn, then for the staging
 *   tile, issues its two boxes as a TMA store (the tile's first contribution) or fp32 reduce-add
 *   (cp.reduce.async.bulk.tensor) into the fp32 dq, releases the staging tile (stgempty[c]) once the bulk group
 *   has read it, and passes the turn on once the group is complete. With bf16 gradients the fp32 dq is the
 *   scratch's accumulator and ff_dq_bf16 stores it as fb_grad_store2 does (rn(0 + d) or rn(old + d)).
 * - The turn: one counter per (b, h, query tile, column half), zeroed before the launch. A tile is visited by key
 *   blocks first = min(nkb - 1, (last row + diag) / 128) down to 0; block kb adds when its half's counter reads
 *   first - kb, then adds 1 (ld.acquire.gpu spin; after the group's completion fence.proxy.async.global and
 *   red.release.gpu). So dq = ((c_first + c_first-1) + ...) + c_0 in one order on every run. Block kb + 1
 *   reaches a tile two iterations before block kb (its first tile is two later), so the turn is normally there.
 * - Progress: a block waits only for higher blocks of its (kv head, batch). blockIdx.x maps to kb ascending
 *   (the longest causal blocks start first) when the key blocks fit on the SMs at once, else descending (desc),
 *   so a block never waits for one that has not started, given that blocks start in blockIdx order
 *   (FlashAttention-3's deterministic mode assumes the same). Ascending is safe when they fit: the blocks of
 *   earlier (hk, b) have all started and finish on their own.
 * - Rows of query tiles that see no key (Tq > Tk) get no contribution: zeroed by the host (fp32) or stored as
 *   d = 0 by ff_dq_bf16.
 * - Shared memory (bytes): K, V 2 x 32 Ki; ring 3 x 32 Ki; dS 2 x 16 Ki; staging 2 x 16 Ki; slots 3 x 512;
 *   15 mbarriers; 1 KiB alignment slack: 232,056 of 232,448. Registers: 40 for the producer warpgroup (the
 *   writers' loop), 232 for the consumers.
 */
#include <stdint.h>

#include "flash_attention_bf16_wgmma_bwd_fused.cuh" /* ff_bwd_kernel<D>, ff_launch<D> */

forge_status fb_launch_fused(const fb_call &c, float *scratch, int order, const char *entry) {
    const forge_flash_shape &s = c.s;
    if (s.D != 64 && s.D != 128)
        return forge_error(FORGE_ERR_UNSUPPORTED, "%s: the fused backward is compiled for D = 64 and 128, got D=%d",
                           entry, s.D);
    uint32_t *turns = (uint32_t *)(scratch + FORGE_FLASH_BF16_ROWSTATS(s.B, s.H, s.Tq));
    float *dq32 = c.g.bf16 ? scratch + FORGE_FLASH_BF16_ROWSTATS(s.B, s.H, s.Tq) + FORGE_FLASH_BF16_TURNS(s.B, s.H, s.Tq)
                           : (float *)c.g.dq;
    return s.D == 64 ? ff_launch<64>(c, turns, dq32, order, entry) : ff_launch<128>(c, turns, dq32, order, entry);
}
