/* shards.c: writing and memory-mapping llm.c-format token shards (see shards.h). */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* mmap, pwrite, fsync, clock_gettime */
#endif
#include "shards.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ helpers */

static char *dup_string(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static int32_t get_le32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* write() all of buf at the current offset, retrying short writes and EINTR */
static int write_all(int fd, const uint8_t *buf, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, buf, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += k;
        n -= (size_t)k;
    }
    return 0;
}

static int pwrite_all(int fd, const uint8_t *buf, size_t n, off_t off) {
    while (n > 0) {
        ssize_t k = pwrite(fd, buf, n, off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

/* fsync the directory holding path, so the rename itself is durable.
 * Best effort: some filesystems refuse fsync on a directory. */
static void fsync_parent_dir(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) return;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

/* ------------------------------------------------------------------ writer */

#define WRITER_BUF_TOKENS 65536

struct forge_shard_writer {
    char *path;
    char *tmp_path;
    int fd;
    int vocab_size;
    int token_bytes;
    uint64_t count;
    size_t buf_used; /* bytes in buf */
    uint8_t buf[WRITER_BUF_TOKENS * 4];
};

forge_status forge_shard_writer_open(forge_shard_writer **out, const char *path, int vocab_size) {
    *out = NULL;
    if (vocab_size <= 0)
        return forge_error(FORGE_ERR_ARG, "%s: vocab_size must be positive, got %d", path,
                           vocab_size);
    forge_shard_writer *w = calloc(1, sizeof *w);
    if (!w) return forge_error(FORGE_ERR_OOM, "%s: cannot allocate a shard writer", path);
    w->fd = -1;
    w->vocab_size = vocab_size;
    w->token_bytes = vocab_size <= 65536 ? 2 : 4;
    w->path = dup_string(path);
    size_t tmp_len = strlen(path) + 32;
    w->tmp_path = malloc(tmp_len);
    if (!w->path || !w->tmp_path) {
        forge_shard_writer_abort(w);
        return forge_error(FORGE_ERR_OOM, "%s: cannot allocate a shard writer", path);
    }
    snprintf(w->tmp_path, tmp_len, "%s.tmp.%ld", path, (long)getpid());
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (w->fd < 0) {
        int e = errno;
        forge_shard_writer_abort(w);
        return forge_error(FORGE_ERR_IO, "%s: cannot create shard (temp file %s.tmp.*): %s", path,
                           path, strerror(e));
    }
    /* header placeholder: the count is patched in at close */
    uint8_t header[FORGE_SHARD_HEADER_BYTES] = {0};
    if (write_all(w->fd, header, sizeof header) != 0) {
        int e = errno;
        forge_shard_writer_abort(w);
        return forge_error(FORGE_ERR_IO, "%s: cannot write shard header: %s", path, strerror(e));
    }
    *out = w;
    return FORGE_OK;
}

static forge_status writer_flush(forge_shard_writer *w) {
    if (w->buf_used == 0) return FORGE_OK;
    if (write_all(w->fd, w->buf, w->buf_used) != 0)
        return forge_error(FORGE_ERR_IO, "%s: write failed (disk full?): %s", w->tmp_path,
                           strerror(errno));
    w->buf_used = 0;
    return FORGE_OK;
}

forge_status forge_shard_writer_append(forge_shard_writer *w, const int32_t *tokens, size_t n) {
    if ((uint64_t)n > (uint64_t)INT32_MAX - w->count)
        return forge_error(FORGE_ERR_ARG,
                           "%s: a shard holds at most %d tokens (header[2] is int32); already "
                           "%llu, appending %zu",
                           w->path, INT32_MAX, (unsigned long long)w->count, n);
    for (size_t i = 0; i < n; i++) {
        int32_t t = tokens[i];
        if (t < 0 || t >= w->vocab_size)
            return forge_error(FORGE_ERR_ARG,
                               "%s: token %d at position %llu is outside the vocabulary [0, %d)",
                               w->path, (int)t, (unsigned long long)(w->count + i), w->vocab_size);
    }
    for (size_t i = 0; i < n; i++) {
        if (w->buf_used + 4 > sizeof w->buf) FORGE_TRY(writer_flush(w));
        uint8_t *p = w->buf + w->buf_used;
        uint32_t t = (uint32_t)tokens[i];
        if (w->token_bytes == 2) {
            p[0] = (uint8_t)t;
            p[1] = (uint8_t)(t >> 8);
        } else {
            put_le32(p, t);
        }
        w->buf_used += (size_t)w->token_bytes;
    }
    w->count += n;
    return FORGE_OK;
}

uint64_t forge_shard_writer_count(const forge_shard_writer *w) { return w->count; }

void forge_shard_writer_abort(forge_shard_writer *w) {
    if (!w) return;
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->tmp_path);
    }
    free(w->path);
    free(w->tmp_path);
    free(w);
}

forge_status forge_shard_writer_close(forge_shard_writer *w) {
    forge_status s = writer_flush(w);
    if (s != FORGE_OK) {
        forge_shard_writer_abort(w);
        return s;
    }
    uint8_t header[12];
    put_le32(header + 0, FORGE_SHARD_MAGIC);
    put_le32(header + 4, w->token_bytes == 2 ? FORGE_SHARD_VERSION_U16 : FORGE_SHARD_VERSION_U32);
    put_le32(header + 8, (uint32_t)w->count);
    const char *what = NULL;
    if (pwrite_all(w->fd, header, sizeof header, 0) != 0)
        what = "patching the header";
    else if (fsync(w->fd) != 0)
        what = "fsync";
    if (what) {
        int e = errno;
        forge_status r =
            forge_error(FORGE_ERR_IO, "%s: %s failed: %s", w->tmp_path, what, strerror(e));
        forge_shard_writer_abort(w);
        return r;
    }
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) {
        int e = errno;
        unlink(w->tmp_path);
        forge_status r =
            forge_error(FORGE_ERR_IO, "%s: close failed: %s", w->tmp_path, strerror(e));
        forge_shard_writer_abort(w);
        return r;
    }
    if (rename(w->tmp_path, w->path) != 0) {
        int e = errno;
        unlink(w->tmp_path);
        forge_status r = forge_error(FORGE_ERR_IO, "%s: cannot rename %s onto it: %s", w->path,
                                     w->tmp_path, strerror(e));
        forge_shard_writer_abort(w);
        return r;
    }
    fsync_parent_dir(w->path);
    forge_shard_writer_abort(w); /* fd is -1: only frees */
    return FORGE_OK;
}

forge_status forge_shard_write(const char *path, const int32_t *tokens, size_t n, int vocab_size) {
    forge_shard_writer *w;
    FORGE_TRY(forge_shard_writer_open(&w, path, vocab_size));
    forge_status s = forge_shard_writer_append(w, tokens, n);
    if (s != FORGE_OK) {
        forge_shard_writer_abort(w);
        return s;
    }
    return forge_shard_writer_close(w);
}

/* ------------------------------------------------------------------ reader */

void forge_shard_close(forge_shard *s) {
    if (s->map) munmap(s->map, s->map_len);
    free(s->path);
    memset(s, 0, sizeof *s);
}

/* Returns the index of the first token >= vocab_size, or n if none. Scans in
 * blocks with a branch-free max so the common (clean) case vectorises. */
static uint64_t first_token_at_or_above(const forge_shard *s, uint32_t vocab_size) {
    const uint64_t block = 65536;
    for (uint64_t b = 0; b < s->n_tokens; b += block) {
        uint64_t e = b + block < s->n_tokens ? b + block : s->n_tokens;
        uint32_t mx = 0;
        if (s->token_bytes == 2) {
            for (uint64_t i = b; i < e; i++) {
                uint32_t t = (uint32_t)s->data[2 * i] | (uint32_t)s->data[2 * i + 1] << 8;
                mx = t > mx ? t : mx;
            }
        } else {
            for (uint64_t i = b; i < e; i++) {
                uint32_t t = (uint32_t)forge_shard_token(s, i);
                mx = t > mx ? t : mx;
            }
        }
        if (mx >= vocab_size)
            for (uint64_t i = b; i < e; i++)
                if ((uint32_t)forge_shard_token(s, i) >= vocab_size) return i;
    }
    return s->n_tokens;
}

/* Validates the file image h[0..size) (s->path set, s->map as the caller left
 * it): magic, version, exact size, and the tokens against vocab_size. h is not
 * read when size is below the header's. */
static forge_status shard_check(forge_shard *s, const uint8_t *h, uint64_t size, int vocab_size) {
    const char *path = s->path;
    if (size < FORGE_SHARD_HEADER_BYTES)
        return forge_error(FORGE_ERR_DATA,
                           "%s: truncated: file has %llu bytes, less than the %d-byte header", path,
                           (unsigned long long)size, FORGE_SHARD_HEADER_BYTES);
    int32_t magic = get_le32(h), version = get_le32(h + 4), count = get_le32(h + 8);
    if (magic != FORGE_SHARD_MAGIC)
        return forge_error(FORGE_ERR_DATA,
                           "%s: header[0] (magic) is %d, expected %d: not a token shard", path,
                           (int)magic, FORGE_SHARD_MAGIC);
    if (version != FORGE_SHARD_VERSION_U16 && version != FORGE_SHARD_VERSION_U32)
        return forge_error(FORGE_ERR_DATA,
                           "%s: header[1] (version) is %d, expected 1 (uint16 tokens) or 2 (uint32 "
                           "tokens)",
                           path, (int)version);
    if (count < 0)
        return forge_error(FORGE_ERR_DATA, "%s: header[2] (token count) is negative (%d)", path,
                           (int)count);
    s->version = version;
    s->token_bytes = version == FORGE_SHARD_VERSION_U16 ? 2 : 4;
    s->n_tokens = (uint64_t)count;
    s->data = h + FORGE_SHARD_HEADER_BYTES;
    uint64_t payload = s->n_tokens * (uint64_t)s->token_bytes;
    uint64_t expected = FORGE_SHARD_HEADER_BYTES + payload;
    if (size < expected)
        return forge_error(FORGE_ERR_DATA,
                           "%s: truncated: header says %llu tokens (%llu bytes) but file has %llu "
                           "bytes",
                           path, (unsigned long long)s->n_tokens, (unsigned long long)expected,
                           (unsigned long long)size);
    if (size > expected)
        return forge_error(FORGE_ERR_DATA,
                           "%s: %llu bytes of trailing data: header says %llu tokens (%llu bytes) "
                           "but file has %llu bytes",
                           path, (unsigned long long)(size - expected),
                           (unsigned long long)s->n_tokens, (unsigned long long)expected,
                           (unsigned long long)size);
    if (vocab_size > 0 && (s->token_bytes == 4 || vocab_size < 65536)) { /* else every uint16 fits */
        uint64_t bad = first_token_at_or_above(s, (uint32_t)vocab_size);
        if (bad < s->n_tokens)
            return forge_error(FORGE_ERR_DATA,
                               "%s: token %u at position %llu is >= the vocabulary size %d (shard "
                               "written with another tokenizer?)",
                               path, (unsigned)forge_shard_token(s, bad), (unsigned long long)bad,
                               vocab_size);
    }
    return FORGE_OK;
}

forge_status forge_shard_open_memory(forge_shard *s, const void *data, size_t len, const char *name,
                                     int vocab_size) {
    memset(s, 0, sizeof *s);
    if (!name) name = "<memory>";
    if (!data && len) return forge_error(FORGE_ERR_ARG, "%s: forge_shard_open_memory: NULL data", name);
    s->path = dup_string(name);
    if (!s->path) return forge_error(FORGE_ERR_OOM, "%s: out of memory", name);
    forge_status r = shard_check(s, data, (uint64_t)len, vocab_size);
    if (r != FORGE_OK) forge_shard_close(s);
    return r;
}

forge_status forge_shard_open(forge_shard *s, const char *path, int vocab_size) {
    memset(s, 0, sizeof *s);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return forge_error(FORGE_ERR_IO, "%s: cannot open shard: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return forge_error(FORGE_ERR_IO, "%s: cannot stat shard: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return forge_error(FORGE_ERR_IO, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size > (uint64_t)SIZE_MAX) {
        close(fd);
        return forge_error(FORGE_ERR_DATA, "%s: %llu bytes is too large to map", path,
                           (unsigned long long)size);
    }
    void *map = NULL;
    if (size >= FORGE_SHARD_HEADER_BYTES) { /* shorter: shard_check refuses it unread */
        map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        int map_errno = errno;
        if (map == MAP_FAILED) {
            close(fd);
            return forge_error(FORGE_ERR_IO, "%s: mmap of %llu bytes failed: %s", path,
                               (unsigned long long)size, strerror(map_errno));
        }
        s->map = map;
        s->map_len = (size_t)size;
    }
    close(fd); /* the mapping keeps the file */
    s->path = dup_string(path);
    if (!s->path) {
        forge_shard_close(s);
        return forge_error(FORGE_ERR_OOM, "%s: out of memory", path);
    }
    forge_status r = shard_check(s, map, size, vocab_size);
    if (r != FORGE_OK) forge_shard_close(s);
    return r;
}

void forge_shard_read(const forge_shard *s, uint64_t start, size_t n, int32_t *out) {
    if (s->token_bytes == 2) {
        const uint8_t *p = s->data + 2 * start;
        for (size_t i = 0; i < n; i++)
            out[i] = (int32_t)((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8);
    } else {
        for (size_t i = 0; i < n; i++) out[i] = forge_shard_token(s, start + i);
    }
}

/* ------------------------------------------------------------------ naming */

forge_status forge_shard_path(char *buf, size_t size, const char *dir, const char *split,
                              int index) {
    int n = snprintf(buf, size, "%s/%s_%03d.bin", dir, split, index);
    if (n < 0 || (size_t)n >= size)
        return forge_error(FORGE_ERR_ARG, "%s: path of shard %s_%03d.bin is too long", dir, split,
                           index);
    return FORGE_OK;
}

int forge_shard_name_parse(const char *name, const char *split, unsigned long long *index) {
    size_t ls = strlen(split), ln = strlen(name);
    if (ln < ls + 1 + 1 + 4 || strncmp(name, split, ls) != 0 || name[ls] != '_') return 0;
    if (strcmp(name + ln - 4, ".bin") != 0) return 0;
    unsigned long long v = 0;
    for (size_t i = ls + 1; i < ln - 4; i++) {
        if (name[i] < '0' || name[i] > '9') return 0;
        v = v * 10 + (unsigned long long)(name[i] - '0');
    }
    *index = v;
    return 1;
}
