/*
 * flash_key_tiles.cuh: how many key tiles a block of query rows sees under
 * forge's bottom-right causal mask (query row r sees keys <= r + Tk - Tq), the
 * loop bound every flash kernel that walks keys for a block of queries uses.
 */
#ifndef FORGE_FLASH_KEY_TILES_CUH
#define FORGE_FLASH_KEY_TILES_CUH

/* The tiles of bn keys that hold a key visible to any of the rows query rows from q0 (diag = Tk - Tq): the keys
 * below min(Tk, q0 + rows + diag), in whole tiles; 0 when the block sees none. */
__device__ __forceinline__ int flash_key_tiles(int Tk, int diag, int q0, int rows, int bn) {
    const int kv_end = min(Tk, q0 + rows + diag);
    return kv_end > 0 ? (kv_end + bn - 1) / bn : 0;
}

#endif
