/*
 * tokenizer.c: GPT-2's vocabulary files in and out (encoder.json, vocab.bpe),
 * and the tokenizer object's lifetime. Encoding lives in tokenizer_encode.c,
 * training in tokenizer_train.c.
 *
 * The files spell every token in GPT-2's byte-to-unicode alphabet
 * (openai/gpt-2 src/encoder.py, bytes_to_unicode): each byte is one code point,
 * printable bytes as themselves and the rest shifted to U+0100..U+0143, so a
 * token never contains a space and "a b" in vocab.bpe splits unambiguously.
 * In memory we keep plain bytes. "<|endoftext|>" is spelled literally and must
 * be the last id.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tokenizer_internal.h"
#include "../base/fs.h"

void tok_byte_unicode(uint32_t byte_to_cp[256], uint8_t order[256]) {
    int printable[256] = {0};
    int k = 0;
    for (int b = 0; b < 256; b++) {
        if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
            printable[b] = 1;
            byte_to_cp[b] = (uint32_t)b;
            order[k++] = (uint8_t)b;
        }
    }
    uint32_t extra = 0;
    for (int b = 0; b < 256; b++) {
        if (printable[b]) continue;
        byte_to_cp[b] = 256 + extra++;
        order[k++] = (uint8_t)b;
    }
}

#define CP_LIMIT 0x144 /* one past the largest code point bytes_to_unicode uses */

static void cp_to_byte_table(int16_t cp_to_byte[CP_LIMIT]) {
    uint32_t b2c[256];
    uint8_t order[256];
    tok_byte_unicode(b2c, order);
    for (int c = 0; c < CP_LIMIT; c++) cp_to_byte[c] = -1;
    for (int b = 0; b < 256; b++) cp_to_byte[b2c[b]] = (int16_t)b;
}

/* Decodes a token spelled in the byte-to-unicode alphabet into bytes (out has
 * room for n bytes). Returns 0, or -1 with *bad_cp set to the offending code
 * point (or to UINT32_MAX for malformed UTF-8). */
static int unicode_to_bytes(const char *s, size_t n, const int16_t cp_to_byte[CP_LIMIT], uint8_t *out,
                            size_t *out_n, uint32_t *bad_cp) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        uint32_t cp;
        size_t k_len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                                     : c >= 0xF0 && c <= 0xF4                 ? 4
                                                                              : 0;
        if (k_len == 0 || i + k_len > n) {
            *bad_cp = UINT32_MAX;
            return -1;
        }
        cp = k_len == 1 ? c : (uint32_t)(c & (0x7F >> k_len));
        for (size_t j = 1; j < k_len; j++) {
            uint8_t cc = (uint8_t)s[i + j];
            if ((cc & 0xC0) != 0x80) {
                *bad_cp = UINT32_MAX;
                return -1;
            }
            cp = (cp << 6) | (cc & 0x3F);
        }
        i += k_len;
        if (cp >= CP_LIMIT || cp_to_byte[cp] < 0) {
            *bad_cp = cp;
            return -1;
        }
        out[k++] = (uint8_t)cp_to_byte[cp];
    }
    *out_n = k;
    return 0;
}

forge_tokenizer *tok_alloc(void) { return calloc(1, sizeof(forge_tokenizer)); }

void forge_tokenizer_free(forge_tokenizer *tok) {
    if (!tok) return;
    free(tok->tok_data);
    free(tok->tok_off);
    free(tok->merge_left);
    free(tok->merge_right);
    free(tok->merge_result);
    tok_u64map_free(&tok->pair_map);
    if (tok->re) pcre2_code_free(tok->re);
    free(tok);
}

forge_status tok_finalize(forge_tokenizer *tok) {
    if (tok_u64map_init(&tok->pair_map, (size_t)tok->n_merges) != 0)
        return forge_error(FORGE_ERR_OOM, "out of memory building the merge table (%d merges)", tok->n_merges);
    for (int r = 0; r < tok->n_merges; r++) {
        uint64_t key = ((uint64_t)(uint32_t)tok->merge_left[r] << 32) | (uint32_t)tok->merge_right[r];
        if (tok_u64map_get(&tok->pair_map, key)) continue; /* the lower rank wins */
        if (tok_u64map_put(&tok->pair_map, key, ((uint64_t)r << 32) | (uint32_t)tok->merge_result[r]) != 0)
            return forge_error(FORGE_ERR_OOM, "out of memory building the merge table");
    }
    return tok_compile_regex(&tok->re);
}

forge_status tok_compile_regex(pcre2_code **out) {
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)FORGE_TOKENIZER_PATTERN, PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &errcode, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        return forge_error(FORGE_ERR_UNSUPPORTED, "PCRE2 cannot compile GPT-2's pre-tokenisation regex at offset %zu: %s",
                           (size_t)erroff, (const char *)msg);
    }
    /* JIT is several times faster; without it (PCRE2 built without JIT) the
     * interpreter gives the same matches. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return FORGE_OK;
}

/* ---- loading ---- */

static void line_col(const char *buf, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *p = buf; p < at; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

static const char *json_type_name(const cJSON *item) {
    if (cJSON_IsString(item)) return "a string";
    if (cJSON_IsObject(item)) return "an object";
    if (cJSON_IsArray(item)) return "an array";
    if (cJSON_IsBool(item)) return "a boolean";
    if (cJSON_IsNull(item)) return "null";
    return "a number";
}

typedef struct {
    forge_tokenizer *tok;
    tok_strmap strs;   /* token bytes -> entry (every token but eot) */
    int32_t *ent_id;   /* entry -> id */
    int32_t *id_ent;   /* id -> entry, -1 for eot */
    const char **keys; /* id -> key in encoder.json, for messages */
    int16_t cp_to_byte[CP_LIMIT];
} loader;

/* encoder.json: every key decoded to bytes, then checked as a whole, most
 * telling error first: a byte without a token (which, with ids left as they
 * were, would otherwise surface as some later id being out of range), then ids
 * outside [0, n), then <|endoftext|>. */
static forge_status load_encoder(loader *L, const char *path, cJSON *root) {
    forge_tokenizer *tok = L->tok;
    if (!cJSON_IsObject(root))
        return forge_error(FORGE_ERR_DATA, "%s: expected a JSON object mapping token strings to ids, got %s", path,
                           json_type_name(root));
    int n = cJSON_GetArraySize(root);
    if (n < 257)
        return forge_error(FORGE_ERR_DATA, "%s: has %d tokens; expected at least 257 (256 bytes + <|endoftext|>)",
                           path, n);
    tok->n_vocab = n;
    L->id_ent = malloc((size_t)n * sizeof *L->id_ent);
    L->ent_id = malloc((size_t)n * sizeof *L->ent_id);
    L->keys = calloc((size_t)n, sizeof *L->keys);
    uint8_t *tmp = NULL;
    size_t tmp_cap = 0;
    if (!L->id_ent || !L->ent_id || !L->keys || tok_strmap_init(&L->strs, (size_t)n) != 0)
        return forge_error(FORGE_ERR_OOM, "out of memory loading %s", path);
    int eot = -1;
    const char *far_key = NULL; /* the first key whose id is >= n */
    int far_id = 0;
    forge_status st = FORGE_OK;
    for (cJSON *item = root->child; item; item = item->next) {
        const char *key = item->string ? item->string : "";
        if (!cJSON_IsNumber(item)) {
            st = forge_error(FORGE_ERR_DATA, "%s: key \"%s\": expected an integer id, got %s", path, key,
                             json_type_name(item));
            break;
        }
        double v = item->valuedouble;
        if (!(v >= 0 && v <= INT32_MAX) || v != floor(v)) {
            st = forge_error(FORGE_ERR_DATA, "%s: key \"%s\": id %g is not an integer in [0, %d)", path, key, v, n);
            break;
        }
        int id = (int)v;
        if (id >= n) { /* reported after the byte check below */
            if (!far_key) {
                far_key = key;
                far_id = id;
            }
        } else if (L->keys[id]) {
            st = forge_error(FORGE_ERR_DATA, "%s: id %d is given to two keys, \"%s\" and \"%s\"", path, id,
                             L->keys[id], key);
            break;
        } else {
            L->keys[id] = key;
        }
        if (strcmp(key, FORGE_TOKENIZER_EOT) == 0) {
            if (eot >= 0) {
                st = forge_error(FORGE_ERR_DATA, "%s: key \"%s\" appears twice (ids %d and %d)", path, key, eot, id);
                break;
            }
            eot = id;
            if (id < n) L->id_ent[id] = -1;
            continue;
        }
        size_t klen = strlen(key), blen;
        if (klen == 0) {
            st = forge_error(FORGE_ERR_DATA, "%s: empty key (id %d); every token has at least one byte", path, id);
            break;
        }
        if (klen > tmp_cap) {
            uint8_t *t = realloc(tmp, klen);
            if (!t) {
                st = forge_error(FORGE_ERR_OOM, "out of memory loading %s", path);
                break;
            }
            tmp = t;
            tmp_cap = klen;
        }
        uint32_t bad;
        if (unicode_to_bytes(key, klen, L->cp_to_byte, tmp, &blen, &bad) != 0) {
            if (bad == UINT32_MAX)
                st = forge_error(FORGE_ERR_DATA, "%s: key \"%s\" (id %d) is not valid UTF-8", path, key, id);
            else
                st = forge_error(FORGE_ERR_DATA,
                                 "%s: key \"%s\" (id %d): U+%04X is not in GPT-2's byte-to-unicode alphabet", path,
                                 key, id, (unsigned)bad);
            break;
        }
        int is_new;
        int32_t e = tok_strmap_insert(&L->strs, tmp, blen, tok_hash_bytes(tmp, blen), &is_new);
        if (e < 0) {
            st = forge_error(FORGE_ERR_OOM, "out of memory loading %s", path);
            break;
        }
        if (!is_new) {
            st = forge_error(FORGE_ERR_DATA, "%s: key \"%s\" (id %d) spells the same bytes as id %d", path, key, id,
                             L->ent_id[e]);
            break;
        }
        L->ent_id[e] = id;
        if (id < n) L->id_ent[id] = e;
    }
    free(tmp);
    if (st != FORGE_OK) return st;
    uint32_t b2c[256];
    uint8_t order[256];
    tok_byte_unicode(b2c, order);
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        int32_t e = tok_strmap_find(&L->strs, &byte, 1, tok_hash_bytes(&byte, 1));
        if (e < 0) {
            char shown[8];
            if (b2c[b] < 0x80)
                snprintf(shown, sizeof shown, "%c", (char)b2c[b]);
            else
                snprintf(shown, sizeof shown, "%c%c", (char)(0xC0 | (b2c[b] >> 6)), (char)(0x80 | (b2c[b] & 0x3F)));
            return forge_error(FORGE_ERR_DATA,
                               "%s: no token for byte 0x%02x (the key \"%s\", U+%04X); byte-level BPE needs a token "
                               "for each of the 256 bytes",
                               path, b, shown, (unsigned)b2c[b]);
        }
        tok->byte_id[b] = L->ent_id[e];
    }
    if (far_key) {
        int hole = 0;
        while (hole < n && L->keys[hole]) hole++;
        return forge_error(FORGE_ERR_DATA,
                           "%s: key \"%s\": id %d is not an integer in [0, %d); the %d keys must use the ids 0..%d "
                           "once each (id %d has no key)",
                           path, far_key, far_id, n, n, n - 1, hole);
    }
    if (eot < 0) return forge_error(FORGE_ERR_DATA, "%s: no \"%s\" token", path, FORGE_TOKENIZER_EOT);
    if (eot != n - 1)
        return forge_error(FORGE_ERR_DATA, "%s: \"%s\" is id %d; forge expects it to be the last id, %d", path,
                           FORGE_TOKENIZER_EOT, eot, n - 1);
    /* token bytes in id order */
    size_t total = L->strs.arena_len + FORGE_TOKENIZER_EOT_LEN;
    tok->tok_data = malloc(total);
    tok->tok_off = malloc(((size_t)n + 1) * sizeof *tok->tok_off);
    if (!tok->tok_data || !tok->tok_off) return forge_error(FORGE_ERR_OOM, "out of memory loading %s", path);
    size_t off = 0;
    for (int id = 0; id < n; id++) {
        tok->tok_off[id] = off;
        size_t len;
        const uint8_t *p;
        if (L->id_ent[id] < 0) {
            p = (const uint8_t *)FORGE_TOKENIZER_EOT;
            len = FORGE_TOKENIZER_EOT_LEN;
        } else {
            p = tok_strmap_key(&L->strs, L->id_ent[id], &len);
        }
        memcpy(tok->tok_data + off, p, len);
        off += len;
    }
    tok->tok_off[n] = off;
    return FORGE_OK;
}

/* Looks a vocab.bpe token up; -1 with a message on failure. */
static int32_t merge_token(loader *L, const char *path, int line, const char *enc_path, const char *s, size_t n,
                           uint8_t *buf, size_t *blen, forge_status *st) {
    uint32_t bad;
    if (unicode_to_bytes(s, n, L->cp_to_byte, buf, blen, &bad) != 0) {
        *st = forge_error(FORGE_ERR_DATA, "%s:%d: token \"%.*s\" is not spelled in GPT-2's byte-to-unicode alphabet",
                          path, line, (int)(n > 80 ? 80 : n), s);
        return -1;
    }
    int32_t e = tok_strmap_find(&L->strs, buf, *blen, tok_hash_bytes(buf, *blen));
    if (e < 0) {
        *st = forge_error(FORGE_ERR_DATA, "%s:%d: unknown token \"%.*s\" (not in %s)", path, line,
                          (int)(n > 80 ? 80 : n), s, enc_path);
        return -1;
    }
    return L->ent_id[e];
}

static forge_status load_merges(loader *L, const char *path, const char *enc_path, const char *text, size_t len) {
    forge_tokenizer *tok = L->tok;
    size_t cap = 1024;
    tok->merge_left = malloc(cap * sizeof(int32_t));
    tok->merge_right = malloc(cap * sizeof(int32_t));
    tok->merge_result = malloc(cap * sizeof(int32_t));
    tok_u64map seen = {0};
    uint8_t *buf = malloc(len + 1);
    if (!tok->merge_left || !tok->merge_right || !tok->merge_result || !buf || tok_u64map_init(&seen, 1024) != 0) {
        free(buf);
        tok_u64map_free(&seen);
        return forge_error(FORGE_ERR_OOM, "out of memory loading %s", path);
    }
    forge_status st = FORGE_OK;
    int line = 0;
    for (size_t pos = 0; pos < len && st == FORGE_OK;) {
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + 1;
        line++;
        if (n > 0 && s[n - 1] == '\r') n--;
        if (line == 1 && n > 0 && s[0] == '#') continue; /* "#version: 0.2" */
        if (n == 0) continue;
        const char *sp = memchr(s, ' ', n);
        if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1))) {
            st = forge_error(FORGE_ERR_DATA, "%s:%d: expected two tokens separated by one space, got \"%.*s\"", path,
                             line, (int)(n > 80 ? 80 : n), s);
            break;
        }
        size_t la = (size_t)(sp - s), lb = n - la - 1, ba, bb;
        int32_t a = merge_token(L, path, line, enc_path, s, la, buf, &ba, &st);
        if (a < 0) break;
        int32_t b = merge_token(L, path, line, enc_path, sp + 1, lb, buf + ba, &bb, &st);
        if (b < 0) break;
        int32_t e = tok_strmap_find(&L->strs, buf, ba + bb, tok_hash_bytes(buf, ba + bb));
        if (e < 0) {
            st = forge_error(FORGE_ERR_DATA, "%s:%d: merge \"%.*s %.*s\" makes \"%.*s%.*s\", which is not in %s", path,
                             line, (int)la, s, (int)lb, sp + 1, (int)la, s, (int)lb, sp + 1, enc_path);
            break;
        }
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        uint64_t *prev = tok_u64map_get(&seen, key);
        if (prev) {
            st = forge_error(FORGE_ERR_DATA, "%s:%d: merge \"%.*s %.*s\" repeats line %d", path, line, (int)la, s,
                             (int)lb, sp + 1, (int)*prev);
            break;
        }
        if ((size_t)tok->n_merges == cap) {
            cap *= 2;
            int32_t *l = realloc(tok->merge_left, cap * sizeof *l);
            if (l) tok->merge_left = l;
            int32_t *r = realloc(tok->merge_right, cap * sizeof *r);
            if (r) tok->merge_right = r;
            int32_t *m = realloc(tok->merge_result, cap * sizeof *m);
            if (m) tok->merge_result = m;
            if (!l || !r || !m) {
                st = forge_error(FORGE_ERR_OOM, "out of memory loading %s", path);
                break;
            }
        }
        if (tok_u64map_put(&seen, key, (uint64_t)line) != 0 || tok->n_merges == INT32_MAX) {
            st = forge_error(FORGE_ERR_OOM, "out of memory loading %s", path);
            break;
        }
        tok->merge_left[tok->n_merges] = a;
        tok->merge_right[tok->n_merges] = b;
        tok->merge_result[tok->n_merges] = L->ent_id[e];
        tok->n_merges++;
    }
    free(buf);
    tok_u64map_free(&seen);
    return st;
}

/* Every multi-byte token must be the result of some merge: encoding reaches
 * a token only through one, so a vocab.bpe that makes fewer (an empty or cut
 * file) would silently give a tokenizer that never emits the others. A
 * byte-level vocabulary (257 ids, no merges) passes. */
static forge_status check_merges_cover(loader *L, const char *bpe_name, const char *enc_name) {
    forge_tokenizer *tok = L->tok;
    int n = tok->n_vocab, multi = n - 257;
    uint8_t *made = calloc((size_t)n, 1);
    if (!made) return forge_error(FORGE_ERR_OOM, "out of memory loading %s", bpe_name);
    int covered = 0;
    for (int r = 0; r < tok->n_merges; r++) {
        int32_t id = tok->merge_result[r];
        if (!made[id]) covered++;
        made[id] = 1;
    }
    forge_status st = FORGE_OK;
    if (covered < multi) {
        int id = 0;
        while (id < n - 1 && (made[id] || tok->tok_off[id + 1] - tok->tok_off[id] == 1)) id++;
        st = forge_error(FORGE_ERR_DATA,
                         "%s: its %d merges make %d of the %d multi-byte tokens of %s (%d ids = 256 bytes + %d + "
                         "<|endoftext|>); no merge makes \"%s\" (id %d), so encoding could never produce it",
                         bpe_name, tok->n_merges, covered, multi, enc_name, n, multi, L->keys[id], id);
    }
    free(made);
    return st;
}

/* encoder_json[encoder_len] must be a NUL: cJSON (1.7.15 at
 * least; DaveGamble/cJSON#800) reads the byte after a length-delimited text that
 * ends just after a ',' in an object (found by fuzz_tokenizer; docs/fuzzing.md). */
static forge_status load_terminated(forge_tokenizer **out, const char *encoder_json, size_t encoder_len,
                                    const char *encoder_name, const char *vocab_bpe, size_t vocab_len,
                                    const char *vocab_name) {
    forge_status st = FORGE_OK;
    loader L;
    memset(&L, 0, sizeof L);
    cp_to_byte_table(L.cp_to_byte);
    L.tok = tok_alloc();
    cJSON *root = NULL;
    if (!L.tok) {
        st = forge_error(FORGE_ERR_OOM, "out of memory loading %s", encoder_name);
        goto done;
    }
    root = cJSON_ParseWithLength(encoder_json, encoder_len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        int line = 0, col = 0;
        if (at && at >= encoder_json && at <= encoder_json + encoder_len) line_col(encoder_json, at, &line, &col);
        st = forge_error(FORGE_ERR_DATA, "%s:%d:%d: malformed JSON (expected an object of \"token\": id pairs)",
                         encoder_name, line, col);
        goto done;
    }
    st = load_encoder(&L, encoder_name, root);
    if (st == FORGE_OK)
        st = load_merges(&L, vocab_name, encoder_name, vocab_bpe, vocab_len);
    if (st == FORGE_OK) st = check_merges_cover(&L, vocab_name, encoder_name);
    if (st == FORGE_OK) st = tok_finalize(L.tok);
done:
    cJSON_Delete(root);
    tok_strmap_free(&L.strs);
    free(L.ent_id);
    free(L.id_ent);
    free(L.keys);
    if (st != FORGE_OK) {
        forge_tokenizer_free(L.tok);
        return st;
    }
    *out = L.tok;
    return FORGE_OK;
}

forge_status forge_tokenizer_load_memory(forge_tokenizer **out, const char *encoder_json, size_t encoder_len,
                                         const char *encoder_name, const char *vocab_bpe, size_t vocab_len,
                                         const char *vocab_name) {
    if (!out || (!encoder_json && encoder_len) || (!vocab_bpe && vocab_len))
        return forge_error(FORGE_ERR_ARG, "forge_tokenizer_load_memory: NULL argument");
    *out = NULL;
    if (!encoder_name) encoder_name = "encoder.json";
    if (!vocab_name) vocab_name = "vocab.bpe";
    char *enc = malloc(encoder_len + 1);
    if (!enc) return forge_error(FORGE_ERR_OOM, "out of memory loading %s", encoder_name);
    if (encoder_len) memcpy(enc, encoder_json, encoder_len);
    enc[encoder_len] = '\0';
    forge_status st = load_terminated(out, enc, encoder_len, encoder_name, vocab_bpe ? vocab_bpe : "", vocab_len,
                                      vocab_name);
    free(enc);
    return st;
}

forge_status forge_tokenizer_load_files(forge_tokenizer **out, const char *encoder_json, const char *vocab_bpe) {
    if (!out || !encoder_json || !vocab_bpe)
        return forge_error(FORGE_ERR_ARG, "forge_tokenizer_load_files: NULL argument");
    *out = NULL;
    char *enc_text = NULL, *bpe_text = NULL;
    size_t enc_len, bpe_len;
    FORGE_TRY(forge_read_file(encoder_json, &enc_text, &enc_len));
    forge_status st = forge_read_file(vocab_bpe, &bpe_text, &bpe_len);
    if (st == FORGE_OK)
        st = load_terminated(out, enc_text, enc_len, encoder_json, bpe_text, bpe_len, vocab_bpe); /* NUL-terminated */
    free(enc_text);
    free(bpe_text);
    return st;
}

static int join_path(char *buf, size_t cap, const char *dir, const char *name) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    return n > 0 && (size_t)n < cap;
}

forge_status forge_tokenizer_load(forge_tokenizer **out, const char *dir) {
    if (!out || !dir) return forge_error(FORGE_ERR_ARG, "forge_tokenizer_load: NULL argument");
    *out = NULL;
    char enc[4096], bpe[4096];
    if (!join_path(enc, sizeof enc, dir, "encoder.json") || !join_path(bpe, sizeof bpe, dir, "vocab.bpe"))
        return forge_error(FORGE_ERR_ARG, "tokenizer directory path too long: %s", dir);
    /* Hugging Face's GPT2Tokenizer saves the same two files as vocab.json and merges.txt: read them when
     * GPT-2's names are absent, so a save_pretrained directory brings its tokenizer along. */
    char hf_enc[4096], hf_bpe[4096];
    if (access(enc, F_OK) != 0 && join_path(hf_enc, sizeof hf_enc, dir, "vocab.json") &&
        join_path(hf_bpe, sizeof hf_bpe, dir, "merges.txt") && access(hf_enc, F_OK) == 0)
        return forge_tokenizer_load_files(out, hf_enc, hf_bpe);
    return forge_tokenizer_load_files(out, enc, bpe);
}

/* ---- saving ---- */

static forge_status make_dirs(const char *dir) {
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) return forge_error(FORGE_ERR_ARG, "bad tokenizer directory \"%s\"", dir);
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return forge_error(FORGE_ERR_IO, "cannot create directory %s: %s", path, strerror(errno));
        path[i] = c;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return forge_error(FORGE_ERR_IO, "%s exists and is not a directory", dir);
    return FORGE_OK;
}

/* Writes bytes spelled in the byte-to-unicode alphabet, JSON-escaped if asked. */
static void put_spelled(FILE *f, const uint8_t *p, size_t n, const uint32_t b2c[256], int json) {
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = b2c[p[i]];
        if (cp < 0x80) {
            if (json && (cp == '"' || cp == '\\')) fputc('\\', f);
            fputc((int)cp, f);
        } else {
            fputc((int)(0xC0 | (cp >> 6)), f);
            fputc((int)(0x80 | (cp & 0x3F)), f);
        }
    }
}

static forge_status close_checked(FILE *f, const char *path) {
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    return bad ? forge_error(FORGE_ERR_IO, "write error on %s: %s", path, strerror(errno)) : FORGE_OK;
}

forge_status forge_tokenizer_save(const forge_tokenizer *tok, const char *dir) {
    if (!tok || !dir) return forge_error(FORGE_ERR_ARG, "forge_tokenizer_save: NULL argument");
    FORGE_TRY(make_dirs(dir));
    char enc[4096], bpe[4096];
    if (!join_path(enc, sizeof enc, dir, "encoder.json") || !join_path(bpe, sizeof bpe, dir, "vocab.bpe"))
        return forge_error(FORGE_ERR_ARG, "tokenizer directory path too long: %s", dir);
    uint32_t b2c[256];
    uint8_t order[256];
    tok_byte_unicode(b2c, order);

    FILE *f = fopen(enc, "wb");
    if (!f) return forge_error(FORGE_ERR_IO, "cannot create %s: %s", enc, strerror(errno));
    fputc('{', f);
    int eot = tok->n_vocab - 1;
    for (int id = 0; id < tok->n_vocab; id++) {
        fputs(id ? ", \"" : "\"", f);
        if (id == eot)
            fputs(FORGE_TOKENIZER_EOT, f);
        else
            put_spelled(f, tok->tok_data + tok->tok_off[id], tok->tok_off[id + 1] - tok->tok_off[id], b2c, 1);
        fprintf(f, "\": %d", id);
    }
    fputc('}', f);
    FORGE_TRY(close_checked(f, enc));

    f = fopen(bpe, "wb");
    if (!f) return forge_error(FORGE_ERR_IO, "cannot create %s: %s", bpe, strerror(errno));
    fputs("#version: 0.2\n", f);
    for (int r = 0; r < tok->n_merges; r++) {
        int32_t a = tok->merge_left[r], b = tok->merge_right[r];
        put_spelled(f, tok->tok_data + tok->tok_off[a], tok->tok_off[a + 1] - tok->tok_off[a], b2c, 0);
        fputc(' ', f);
        put_spelled(f, tok->tok_data + tok->tok_off[b], tok->tok_off[b + 1] - tok->tok_off[b], b2c, 0);
        fputc('\n', f);
    }
    return close_checked(f, bpe);
}

/* ---- accessors and decoding ---- */

int forge_tokenizer_vocab_size(const forge_tokenizer *tok) { return tok ? tok->n_vocab : 0; }

int32_t forge_tokenizer_eot(const forge_tokenizer *tok) { return tok ? tok->n_vocab - 1 : -1; }

const uint8_t *forge_tokenizer_token_bytes(const forge_tokenizer *tok, int32_t id, size_t *len) {
    if (!tok || id < 0 || id >= tok->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = tok->tok_off[id + 1] - tok->tok_off[id];
    return tok->tok_data + tok->tok_off[id];
}

forge_status forge_tokenizer_decode(const forge_tokenizer *tok, const int32_t *ids, size_t n_ids, char **text,
                                    size_t *len) {
    if (!tok || !text || !len || (!ids && n_ids))
        return forge_error(FORGE_ERR_ARG, "forge_tokenizer_decode: NULL argument");
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_vocab)
            return forge_error(FORGE_ERR_ARG, "decode: ids[%zu] = %d is outside the vocabulary [0, %d)", i, ids[i],
                               tok->n_vocab);
        total += tok->tok_off[ids[i] + 1] - tok->tok_off[ids[i]];
    }
    char *s = malloc(total + 1);
    if (!s) return forge_error(FORGE_ERR_OOM, "decode: out of memory for %zu bytes", total + 1);
    size_t off = 0;
    for (size_t i = 0; i < n_ids; i++) {
        size_t a = tok->tok_off[ids[i]], b = tok->tok_off[ids[i] + 1];
        memcpy(s + off, tok->tok_data + a, b - a);
        off += b - a;
    }
    s[off] = '\0';
    *text = s;
    *len = off;
    return FORGE_OK;
}
