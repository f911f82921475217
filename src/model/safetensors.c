/*
 * safetensors.c: the .safetensors writer (atomic) and the mmap reader.
 *
 * The reader trusts nothing in the file: the header length is checked against
 * the file size before any JSON is parsed, and each tensor's offsets against
 * the data size, its dtype and shape, and its neighbours, before open() returns.
 */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation refuses headers over 100 MB; so do we. */
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},    {"I32", 4},     {"I16", 2},
    {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},     {"BOOL", 1},    {"F8_E4M3", 1},
    {"F8_E5M2", 1},
};

size_t forge_safetensors_dtype_size(const char *dtype) {
    if (!dtype) return 0;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, dtype) == 0) return st_dtypes[i].size;
    return 0;
}

/* numel of a shape, 0 on overflow past 2^62 (reported by the callers) */
static int shape_numel(int ndim, const int64_t *shape, uint64_t *numel) {
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return 0;
        if (shape[d] != 0 && n > ((uint64_t)1 << 62) / (uint64_t)shape[d]) return 0;
        n *= (uint64_t)shape[d];
    }
    *numel = n;
    return 1;
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    int w = snprintf(buf, cap, "(");
    if (w > 0) used = (size_t)w;
    for (int d = 0; d < ndim && used < cap; d++) {
        w = snprintf(buf + used, cap - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
        if (w > 0) used += (size_t)w;
    }
    if (used < cap) snprintf(buf + used, cap - used, ")");
}

/* ------------------------------------------------------------------ write */

static forge_status check_entries(const char *path, const forge_st_entry *e, int n,
                                  const char *const *mk, const char *const *mv, int n_meta) {
    if (n < 0 || n_meta < 0 || (n > 0 && !e) || (n_meta > 0 && (!mk || !mv)))
        return forge_error(FORGE_ERR_ARG, "%s: forge_safetensors_write: bad entry or metadata arrays", path);
    for (int i = 0; i < n; i++) {
        const char *name = e[i].name;
        if (!name || !name[0] || strcmp(name, "__metadata__") == 0)
            return forge_error(FORGE_ERR_ARG, "%s: tensor %d has an empty or reserved name", path, i);
        for (int j = 0; j < i; j++)
            if (strcmp(e[j].name, name) == 0)
                return forge_error(FORGE_ERR_ARG, "%s: tensor \"%s\" appears twice", path, name);
        size_t es = forge_safetensors_dtype_size(e[i].dtype);
        if (!es)
            return forge_error(FORGE_ERR_ARG, "%s: tensor \"%s\": unknown dtype \"%s\"", path, name,
                               e[i].dtype ? e[i].dtype : "(null)");
        if (e[i].ndim < 0 || e[i].ndim > FORGE_ST_MAX_DIMS)
            return forge_error(FORGE_ERR_ARG, "%s: tensor \"%s\": ndim %d not in [0, %d]", path,
                               name, e[i].ndim, FORGE_ST_MAX_DIMS);
        uint64_t numel;
        char sh[128];
        shape_str(e[i].ndim, e[i].shape, sh, sizeof sh);
        if (!shape_numel(e[i].ndim, e[i].shape, &numel) || numel > (uint64_t)1 << 53)
            return forge_error(FORGE_ERR_ARG, "%s: tensor \"%s\": bad shape %s", path, name, sh);
        if ((uint64_t)e[i].bytes != numel * es)
            return forge_error(FORGE_ERR_ARG,
                               "%s: tensor \"%s\": %zu bytes given, but shape %s of %s needs %llu",
                               path, name, e[i].bytes, sh, e[i].dtype,
                               (unsigned long long)(numel * es));
        if (e[i].bytes && !e[i].data)
            return forge_error(FORGE_ERR_ARG, "%s: tensor \"%s\": data is NULL", path, name);
    }
    for (int i = 0; i < n_meta; i++) {
        if (!mk[i] || !mv[i])
            return forge_error(FORGE_ERR_ARG, "%s: metadata pair %d has a NULL key or value", path, i);
        for (int j = 0; j < i; j++)
            if (strcmp(mk[j], mk[i]) == 0)
                return forge_error(FORGE_ERR_ARG, "%s: metadata key \"%s\" appears twice", path, mk[i]);
    }
    return FORGE_OK;
}

/* The header JSON, padded with spaces to a multiple of 8; malloc'ed. */
static char *build_header(const forge_st_entry *e, int n, const char *const *mk,
                          const char *const *mv, int n_meta, size_t *len_out) {
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    if (ok && n_meta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        ok = meta != NULL;
        for (int i = 0; ok && i < n_meta; i++) ok = cJSON_AddStringToObject(meta, mk[i], mv[i]) != NULL;
    }
    uint64_t offset = 0;
    for (int i = 0; ok && i < n; i++) {
        cJSON *t = cJSON_AddObjectToObject(root, e[i].name);
        cJSON *shape = t ? cJSON_AddArrayToObject(t, "shape") : NULL;
        ok = t && cJSON_AddStringToObject(t, "dtype", e[i].dtype) && shape;
        for (int d = 0; ok && d < e[i].ndim; d++) {
            cJSON *v = cJSON_CreateNumber((double)e[i].shape[d]);
            ok = v && cJSON_AddItemToArray(shape, v);
        }
        double offs[2] = {(double)offset, (double)(offset + e[i].bytes)};
        cJSON *o = ok ? cJSON_CreateDoubleArray(offs, 2) : NULL;
        ok = o && cJSON_AddItemToObject(t, "data_offsets", o);
        offset += e[i].bytes;
    }
    char *json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!json) return NULL;
    size_t len = strlen(json);
    size_t padded = (len + 7) / 8 * 8;
    char *out = malloc(padded + 1);
    if (out) {
        memcpy(out, json, len);
        memset(out + len, ' ', padded - len);
        out[padded] = '\0';
        *len_out = padded;
    }
    cJSON_free(json);
    return out;
}

/* fsync the directory holding path so the rename itself is durable. */
static void sync_parent_dir(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, sizeof dir, ".");
    } else if (slash == path) {
        snprintf(dir, sizeof dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) return;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    (void)fsync(fd); /* best effort: some filesystems refuse fsync on directories */
    close(fd);
}

forge_status forge_safetensors_write(const char *path, const forge_st_entry *entries, int n,
                                     const char *const *meta_keys,
                                     const char *const *meta_values, int n_meta) {
    if (!path || !path[0]) return forge_error(FORGE_ERR_ARG, "forge_safetensors_write: empty path");
    FORGE_TRY(check_entries(path, entries, n, meta_keys, meta_values, n_meta));

    size_t header_len = 0;
    char *header = build_header(entries, n, meta_keys, meta_values, n_meta, &header_len);
    if (!header) return forge_error(FORGE_ERR_OOM, "%s: out of memory building the header", path);

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) {
        free(header);
        return forge_error(FORGE_ERR_OOM, "%s: out of memory", path);
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);

    forge_status s = FORGE_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        s = forge_error(FORGE_ERR_IO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(header);
        free(tmp);
        return s; /* nothing created, nothing to remove */
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)header_len >> (8 * i));
    const char *failed = NULL;
    if (fwrite(len8, 1, 8, f) != 8 || fwrite(header, 1, header_len, f) != header_len)
        failed = "header";
    for (int i = 0; !failed && i < n; i++)
        if (entries[i].bytes && fwrite(entries[i].data, 1, entries[i].bytes, f) != entries[i].bytes)
            failed = entries[i].name;
    int err = errno;
    if (!failed && fflush(f) != 0) {
        failed = "flush";
        err = errno;
    }
    if (!failed && fsync(fileno(f)) != 0) {
        failed = "fsync";
        err = errno;
    }
    if (fclose(f) != 0 && !failed) {
        failed = "close";
        err = errno;
    }
    if (failed) {
        s = forge_error(FORGE_ERR_IO, "%s: writing %s failed at \"%s\": %s; %s left unchanged",
                        path, tmp, failed, strerror(err), path);
    } else if (rename(tmp, path) != 0) {
        s = forge_error(FORGE_ERR_IO, "%s: cannot rename %s over it: %s; %s left unchanged", path,
                        tmp, strerror(errno), path);
    }
    if (s != FORGE_OK) remove(tmp);
    else sync_parent_dir(path);
    free(header);
    free(tmp);
    return s;
}

/* ------------------------------------------------------------------- read */

struct forge_safetensors {
    char *path;
    void *map;            /* whole file, read-only; NULL when the image is borrowed (open_memory) */
    size_t map_bytes;
    int count;
    forge_st_entry *entries;
    char *strings;        /* names and dtypes, NUL-separated */
    int n_meta;
    char **meta;          /* key0, value0, key1, value1, ... */
};

const char *forge_safetensors_path(const forge_safetensors *st) { return st->path; }
int forge_safetensors_count(const forge_safetensors *st) { return st->count; }
const forge_st_entry *forge_safetensors_entry(const forge_safetensors *st, int i) {
    return (i >= 0 && i < st->count) ? &st->entries[i] : NULL;
}

const forge_st_entry *forge_safetensors_find(const forge_safetensors *st, const char *name) {
    for (int i = 0; i < st->count; i++)
        if (strcmp(st->entries[i].name, name) == 0) return &st->entries[i];
    return NULL;
}

forge_status forge_safetensors_get(const forge_safetensors *st, const char *name,
                                   const char *dtype, int ndim, const int64_t *shape,
                                   const forge_st_entry **out) {
    const forge_st_entry *e = forge_safetensors_find(st, name);
    if (!e) return forge_error(FORGE_ERR_DATA, "%s: no tensor \"%s\" (the file has %d tensors)",
                               st->path, name, st->count);
    if (dtype && strcmp(e->dtype, dtype) != 0)
        return forge_error(FORGE_ERR_DATA, "%s: tensor \"%s\" has dtype %s, expected %s", st->path,
                           name, e->dtype, dtype);
    if (shape) {
        int same = e->ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = e->shape[d] == shape[d];
        if (!same) {
            char got[128], want[128];
            shape_str(e->ndim, e->shape, got, sizeof got);
            shape_str(ndim, shape, want, sizeof want);
            return forge_error(FORGE_ERR_DATA, "%s: tensor \"%s\" has shape %s, expected %s",
                               st->path, name, got, want);
        }
    }
    *out = e;
    return FORGE_OK;
}

const char *forge_safetensors_meta(const forge_safetensors *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[2 * i], key) == 0) return st->meta[2 * i + 1];
    return NULL;
}
int forge_safetensors_meta_count(const forge_safetensors *st) { return st->n_meta; }
int forge_safetensors_meta_at(const forge_safetensors *st, int i, const char **key,
                              const char **value) {
    if (i < 0 || i >= st->n_meta) return 0;
    if (key) *key = st->meta[2 * i];
    if (value) *value = st->meta[2 * i + 1];
    return 1;
}

void forge_safetensors_close(forge_safetensors *st) {
    if (!st) return;
    if (st->map) munmap(st->map, st->map_bytes);
    for (int i = 0; i < 2 * st->n_meta; i++) free(st->meta[i]);
    free(st->meta);
    free(st->entries);
    free(st->strings);
    free(st->path);
    free(st);
}

/* a JSON number that is a non-negative integer below 2^53 */
static int json_u53(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

typedef struct {
    uint64_t begin, end;
    int index;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Fills st's tables from the parsed header; data is the first byte after it. */
static forge_status parse_header(forge_safetensors *st, const cJSON *root, const uint8_t *data,
                                 uint64_t data_bytes) {
    const char *p = st->path;
    if (!cJSON_IsObject(root))
        return forge_error(FORGE_ERR_DATA, "%s: header is not a JSON object", p);
    int n = 0;
    size_t strings_bytes = 0;
    const cJSON *meta = NULL;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (meta) return forge_error(FORGE_ERR_DATA, "%s: \"__metadata__\" appears twice", p);
            meta = it;
            continue;
        }
        n++;
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        strings_bytes += strlen(it->string) + 1 + (cJSON_IsString(dt) ? strlen(dt->valuestring) + 1 : 0);
    }

    if (meta) {
        if (!cJSON_IsObject(meta))
            return forge_error(FORGE_ERR_DATA, "%s: \"__metadata__\" must be an object of strings", p);
        int m = cJSON_GetArraySize(meta);
        st->meta = calloc((size_t)(2 * m + 1), sizeof *st->meta);
        if (!st->meta) return forge_error(FORGE_ERR_OOM, "%s: out of memory", p);
        for (const cJSON *it = meta->child; it; it = it->next) {
            if (!cJSON_IsString(it))
                return forge_error(FORGE_ERR_DATA, "%s: metadata \"%s\" must be a string", p, it->string);
            char *k = strdup(it->string), *v = strdup(it->valuestring);
            st->meta[2 * st->n_meta] = k;
            st->meta[2 * st->n_meta + 1] = v;
            st->n_meta++;
            if (!k || !v) return forge_error(FORGE_ERR_OOM, "%s: out of memory", p);
        }
    }

    st->entries = calloc((size_t)n + 1, sizeof *st->entries);
    st->strings = malloc(strings_bytes + 1);
    span *spans = calloc((size_t)n + 1, sizeof *spans);
    if (!st->entries || !st->strings || !spans) {
        free(spans);
        return forge_error(FORGE_ERR_OOM, "%s: out of memory for %d tensor entries", p, n);
    }
    char *sp = st->strings;
    forge_status s = FORGE_OK;
    for (const cJSON *it = root->child; it && s == FORGE_OK; it = it->next) {
        if (it == meta) continue;
        const char *name = it->string;
        forge_st_entry *e = &st->entries[st->count];
        if (!cJSON_IsObject(it)) {
            s = forge_error(FORGE_ERR_DATA, "%s: tensor \"%s\": entry is not an object", p, name);
            break;
        }
        for (int j = 0; j < st->count; j++)
            if (strcmp(st->entries[j].name, name) == 0) {
                s = forge_error(FORGE_ERR_DATA, "%s: tensor \"%s\" appears twice", p, name);
                break;
            }
        if (s != FORGE_OK) break;
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        size_t es = cJSON_IsString(dt) ? forge_safetensors_dtype_size(dt->valuestring) : 0;
        if (!es) {
            s = forge_error(FORGE_ERR_DATA, "%s: tensor \"%s\": missing or unknown \"dtype\" %s%s%s", p,
                            name, cJSON_IsString(dt) ? "\"" : "",
                            cJSON_IsString(dt) ? dt->valuestring : "", cJSON_IsString(dt) ? "\"" : "");
            break;
        }
        if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > FORGE_ST_MAX_DIMS) {
            s = forge_error(FORGE_ERR_DATA,
                            "%s: tensor \"%s\": \"shape\" must be an array of at most %d integers",
                            p, name, FORGE_ST_MAX_DIMS);
            break;
        }
        e->ndim = cJSON_GetArraySize(sh);
        for (int d = 0; d < e->ndim && s == FORGE_OK; d++) {
            uint64_t v = 0;
            if (!json_u53(cJSON_GetArrayItem(sh, d), &v))
                s = forge_error(FORGE_ERR_DATA, "%s: tensor \"%s\": shape[%d] is not a non-negative integer",
                                p, name, d);
            e->shape[d] = (int64_t)v;
        }
        if (s != FORGE_OK) break;
        uint64_t begin, end, numel = 0;
        if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
            !json_u53(cJSON_GetArrayItem(off, 0), &begin) || !json_u53(cJSON_GetArrayItem(off, 1), &end)) {
            s = forge_error(FORGE_ERR_DATA,
                            "%s: tensor \"%s\": \"data_offsets\" must be [begin, end], two non-negative integers",
                            p, name);
            break;
        }
        if (begin > end || end > data_bytes) {
            s = forge_error(FORGE_ERR_DATA,
                            "%s: tensor \"%s\": data_offsets [%llu, %llu] out of range: the data "
                            "section is %llu bytes (truncated file?)",
                            p, name, (unsigned long long)begin, (unsigned long long)end,
                            (unsigned long long)data_bytes);
            break;
        }
        char shs[128];
        shape_str(e->ndim, e->shape, shs, sizeof shs);
        if (!shape_numel(e->ndim, e->shape, &numel) || numel > data_bytes || numel * es != end - begin) {
            s = forge_error(FORGE_ERR_DATA,
                            "%s: tensor \"%s\": shape %s of %s needs %llu bytes but data_offsets "
                            "[%llu, %llu] hold %llu",
                            p, name, shs, dt->valuestring,
                            (unsigned long long)(numel <= data_bytes ? numel * es : 0),
                            (unsigned long long)begin, (unsigned long long)end,
                            (unsigned long long)(end - begin));
            break;
        }
        size_t nl = strlen(name) + 1, dl = strlen(dt->valuestring) + 1;
        memcpy(sp, name, nl);
        e->name = sp;
        sp += nl;
        memcpy(sp, dt->valuestring, dl);
        e->dtype = sp;
        sp += dl;
        e->data = data + begin;
        e->bytes = (size_t)(end - begin);
        spans[st->count] = (span){begin, end, st->count};
        st->count++;
    }
    if (s == FORGE_OK) {
        qsort(spans, (size_t)st->count, sizeof *spans, cmp_span);
        /* compare each non-empty span with the previous non-empty one; empty
         * tensors ([x, x]) occupy no bytes and may sit anywhere */
        int prev = -1;
        for (int i = 0; i < st->count; i++) {
            if (spans[i].begin == spans[i].end) continue;
            if (prev >= 0 && spans[i].begin < spans[prev].end) {
                s = forge_error(FORGE_ERR_DATA,
                                "%s: tensors \"%s\" [%llu, %llu] and \"%s\" [%llu, %llu] overlap", p,
                                st->entries[spans[prev].index].name,
                                (unsigned long long)spans[prev].begin,
                                (unsigned long long)spans[prev].end,
                                st->entries[spans[i].index].name, (unsigned long long)spans[i].begin,
                                (unsigned long long)spans[i].end);
                break;
            }
            prev = i;
        }
    }
    free(spans);
    return s;
}

/* Validates the whole file image bytes[0..size) into st (st->path set). */
static forge_status parse_file_image(forge_safetensors *st, const uint8_t *bytes, uint64_t size) {
    const char *path = st->path;
    if (size < 8)
        return forge_error(FORGE_ERR_DATA,
                           "%s: %llu bytes is too short for a safetensors file (8-byte header "
                           "length missing; truncated?)",
                           path, (unsigned long long)size);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)bytes[i] << (8 * i);
    if (hlen < 2 || hlen > ST_MAX_HEADER || hlen > size - 8)
        return forge_error(FORGE_ERR_DATA,
                           "%s: header length %llu is impossible for a file of %llu bytes (truncated "
                           "or not a safetensors file)",
                           path, (unsigned long long)hlen, (unsigned long long)size);
    /* cJSON gets a NUL-terminated copy, not the header in place: cJSON (1.7.15
     * at least; DaveGamble/cJSON#800) reads the byte after a length-delimited
     * text that ends just after a ',' in an object, which for a header running
     * to the end of a page-sized file is past the mapping (found by
     * fuzz_safetensors; docs/fuzzing.md). The copy's NUL is that byte. */
    char *text = malloc((size_t)hlen + 1);
    if (!text) return forge_error(FORGE_ERR_OOM, "%s: out of memory for a %llu-byte header", path,
                                  (unsigned long long)hlen);
    memcpy(text, bytes + 8, (size_t)hlen);
    text[hlen] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen, &end, 0);
    forge_status s = FORGE_OK;
    if (!root) {
        long at = (end && end >= text && end <= text + hlen) ? (long)(end - text) : -1;
        s = forge_error(FORGE_ERR_DATA, "%s: header is not valid JSON (error at header byte %ld)", path, at);
    }
    /* only padding may follow the JSON value */
    for (const char *q = end; root && q && q < text + hlen; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            s = forge_error(FORGE_ERR_DATA,
                            "%s: header has trailing bytes after the JSON (at header byte %ld)",
                            path, (long)(q - text));
            break;
        }
    if (s == FORGE_OK) s = parse_header(st, root, bytes + 8 + hlen, size - 8 - hlen);
    cJSON_Delete(root);
    free(text);
    return s;
}

/* A reader over bytes[0..size) named name; map (owned, munmapped at close) or NULL. */
static forge_status open_image(forge_safetensors **out, const uint8_t *bytes, uint64_t size,
                               void *map, const char *name) {
    forge_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(name))) {
        if (map) munmap(map, (size_t)size);
        free(st);
        return forge_error(FORGE_ERR_OOM, "%s: out of memory", name);
    }
    st->map = map;
    st->map_bytes = (size_t)size;
    forge_status s = parse_file_image(st, bytes, size);
    if (s != FORGE_OK) {
        forge_safetensors_close(st);
        return s;
    }
    *out = st;
    return FORGE_OK;
}

forge_status forge_safetensors_open_memory(forge_safetensors **out, const void *data, size_t len,
                                           const char *name) {
    if (!out || (!data && len))
        return forge_error(FORGE_ERR_ARG, "forge_safetensors_open_memory: NULL argument");
    *out = NULL;
    return open_image(out, data, (uint64_t)len, NULL, name ? name : "<memory>");
}

forge_status forge_safetensors_open(forge_safetensors **out, const char *path) {
    if (!out || !path) return forge_error(FORGE_ERR_ARG, "forge_safetensors_open: NULL argument");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return forge_error(FORGE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return forge_error(FORGE_ERR_IO, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return forge_error(FORGE_ERR_IO, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) { /* mmap of an empty file fails; parse_file_image words the error */
        close(fd);
        static const uint8_t none[8];
        return open_image(out, none, size, NULL, path);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (map == MAP_FAILED) return forge_error(FORGE_ERR_IO, "%s: cannot mmap: %s", path, strerror(err));
    return open_image(out, map, size, map, path);
}
