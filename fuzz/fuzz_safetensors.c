/*
 * fuzz_safetensors.c: libFuzzer target for the safetensors reader
 * (src/model/safetensors.c): the 8-byte length, the JSON header, and the
 * tensors' offsets into the data that follows.
 *
 * The input is a whole file image, opened with forge_safetensors_open_memory.
 * When it opens, every entry's bytes must lie inside the image and match its
 * dtype and shape, and every lookup (find, get, meta) must work on what the
 * reader handed out; all entry bytes are read, so ASan sees any pointer past
 * the buffer.
 *
 * The custom mutator knows the layout [8-byte length][JSON header][data]:
 * half the time it mutates the header alone and rewrites the length to match
 * (an edit that changes the header's size would otherwise always fail the
 * length check), else the data alone, else the whole image as bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../src/model/safetensors.h"

#define FAIL(...) FUZZ_FAIL("safetensors", __VA_ARGS__)

#ifndef FORGE_FUZZ_REPLAY
static uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    if (size < 8 || max_size < size || seed % 4 == 3) return LLVMFuzzerMutate(data, size, max_size);
    uint64_t hlen = get_le64(data);
    if (hlen == 0 || hlen > size - 8) return LLVMFuzzerMutate(data, size, max_size);
    size_t rest = size - 8 - (size_t)hlen;
    uint8_t *tail = malloc(rest ? rest : 1);
    if (!tail) return LLVMFuzzerMutate(data, size, max_size);
    memcpy(tail, data + 8 + hlen, rest);
    size_t out;
    if (seed % 4 < 2 || rest == 0) { /* the header; the length follows it */
        size_t nh = LLVMFuzzerMutate(data + 8, (size_t)hlen, max_size - 8 - rest);
        for (int i = 0; i < 8; i++) data[i] = (uint8_t)((uint64_t)nh >> (8 * i));
        memcpy(data + 8 + nh, tail, rest);
        out = 8 + nh + rest;
    } else { /* the data section */
        memcpy(data + 8 + hlen, tail, rest);
        out = 8 + (size_t)hlen + LLVMFuzzerMutate(data + 8 + hlen, rest, max_size - 8 - (size_t)hlen);
    }
    free(tail);
    return out;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    forge_safetensors *st = NULL;
    forge_status s = forge_safetensors_open_memory(&st, data, size, "fuzz.safetensors");
    if (s != FORGE_OK) {
        if (st) FAIL("failed open left a reader");
        if (s != FORGE_ERR_DATA && s != FORGE_ERR_OOM) FAIL("unexpected status %s", forge_status_name(s));
        return 0;
    }
    volatile uint8_t sink = 0;
    int n = forge_safetensors_count(st);
    for (int i = 0; i < n; i++) {
        const forge_st_entry *e = forge_safetensors_entry(st, i);
        if (!e || !e->name || !e->dtype) FAIL("entry %d missing", i);
        size_t es = forge_safetensors_dtype_size(e->dtype);
        if (!es) FAIL("entry %s has unknown dtype %s", e->name, e->dtype);
        if (e->ndim < 0 || e->ndim > FORGE_ST_MAX_DIMS) FAIL("entry %s ndim %d", e->name, e->ndim);
        uint64_t numel = 1;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] < 0) FAIL("entry %s negative dim", e->name);
            numel *= (uint64_t)e->shape[d];
        }
        if (numel * es != e->bytes) FAIL("entry %s: %zu bytes for numel %llu", e->name, e->bytes,
                                         (unsigned long long)numel);
        const uint8_t *p = e->data;
        if (e->bytes && (p < data || p + e->bytes > data + size)) FAIL("entry %s outside the image", e->name);
        for (size_t k = 0; k < e->bytes; k++) sink ^= p[k];
        const forge_st_entry *f = forge_safetensors_find(st, e->name);
        if (f != e) FAIL("find(%s) returns another entry", e->name);
        const forge_st_entry *g = NULL;
        if (forge_safetensors_get(st, e->name, e->dtype, e->ndim, e->shape, &g) != FORGE_OK || g != e)
            FAIL("get(%s) refuses its own dtype and shape: %s", e->name, forge_error_message());
        if (e->ndim < FORGE_ST_MAX_DIMS) {
            int64_t other[FORGE_ST_MAX_DIMS] = {0};
            memcpy(other, e->shape, (size_t)e->ndim * sizeof other[0]);
            other[e->ndim] = 1;
            if (forge_safetensors_get(st, e->name, NULL, e->ndim + 1, other, &g) != FORGE_ERR_DATA)
                FAIL("get(%s) accepts another rank", e->name);
        }
    }
    for (int i = 0; i < forge_safetensors_meta_count(st); i++) {
        const char *k = NULL, *v = NULL;
        if (!forge_safetensors_meta_at(st, i, &k, &v) || !k || !v) FAIL("meta %d missing", i);
        const char *w = forge_safetensors_meta(st, k);
        if (!w) FAIL("meta(%s) not found", k);
        sink ^= (uint8_t)strlen(v);
    }
    (void)sink;
    forge_safetensors_close(st);
    return 0;
}
