/* loader.c: random and sequential batches over a split's shards (see loader.h). */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* mmap, pwrite, fsync, clock_gettime */
#endif
#include "loader.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../base/rng.h"
#include "shards.h"

struct forge_loader {
    int B, T;
    uint64_t seed;
    uint64_t batches_drawn;
    int n_shards;
    forge_shard *shards;  /* (n_shards) */
    uint64_t *start_cum;  /* (n_shards + 1) prefix sums of random window starts per shard */
    uint64_t *window_cum; /* (n_shards + 1) prefix sums of sequential windows per shard */
};


/* ------------------------------------------------------------ shard listing */

typedef struct {
    char *name;
    unsigned long long number;
} shard_name;

static int shard_name_cmp(const void *a, const void *b) {
    const shard_name *x = a, *y = b;
    if (x->number != y->number) return x->number < y->number ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void free_names(shard_name *names, int n) {
    for (int i = 0; i < n; i++) free(names[i].name);
    free(names);
}

/* Sorted shard file names (not paths) of `split` in `dir`. */
static forge_status list_shards(const char *dir, const char *split, shard_name **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(dir);
    if (!d)
        return forge_error(FORGE_ERR_IO,
                           "%s: cannot open data directory: %s; run `forge tokenize` first", dir,
                           strerror(errno));
    shard_name *names = NULL;
    int n = 0, cap = 0;
    forge_status r = FORGE_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned long long number;
        if (!forge_shard_name_parse(e->d_name, split, &number)) continue;
        char path[4096];
        int len = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (len < 0 || (size_t)len >= sizeof path) {
            r = forge_error(FORGE_ERR_ARG, "%s/%s: path too long", dir, e->d_name);
            break;
        }
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue; /* dangling link, directory */
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            shard_name *grown = realloc(names, (size_t)cap * sizeof *names);
            if (!grown) {
                r = forge_error(FORGE_ERR_OOM, "%s: out of memory listing shards", dir);
                break;
            }
            names = grown;
        }
        size_t nl = strlen(e->d_name) + 1;
        names[n].name = malloc(nl);
        if (!names[n].name) {
            r = forge_error(FORGE_ERR_OOM, "%s: out of memory listing shards", dir);
            break;
        }
        memcpy(names[n].name, e->d_name, nl);
        names[n].number = number;
        n++;
    }
    closedir(d);
    if (r != FORGE_OK) {
        free_names(names, n);
        return r;
    }
    if (n == 0) {
        free(names);
        return forge_error(FORGE_ERR_IO, "no %s_*.bin shards in %s; run `forge tokenize` first",
                           split, dir);
    }
    qsort(names, (size_t)n, sizeof *names, shard_name_cmp);
    *out = names;
    *n_out = n;
    return FORGE_OK;
}

/* ------------------------------------------------------------------- loader */

void forge_loader_free(forge_loader *ld) {
    if (!ld) return;
    for (int i = 0; i < ld->n_shards; i++) forge_shard_close(&ld->shards[i]);
    free(ld->shards);
    free(ld->start_cum);
    free(ld->window_cum);
    free(ld);
}

forge_status forge_loader_open(forge_loader **out, const char *dir, const char *split, int B, int T,
                               uint64_t seed, int vocab_size) {
    *out = NULL;
    if (!split || !split[0] || strchr(split, '/'))
        return forge_error(FORGE_ERR_ARG,
                           "loader: split must be a name such as \"train\" or "
                           "\"val\", got \"%s\"",
                           split ? split : "(null)");
    if (B <= 0 || T <= 0)
        return forge_error(FORGE_ERR_ARG,
                           "loader: batch size B and sequence length T must be positive, got "
                           "B=%d T=%d",
                           B, T);
    shard_name *names;
    int n;
    FORGE_TRY(list_shards(dir, split, &names, &n));

    forge_loader *ld = calloc(1, sizeof *ld);
    forge_status r = FORGE_OK;
    if (ld) {
        ld->shards = calloc((size_t)n, sizeof *ld->shards);
        ld->start_cum = calloc((size_t)n + 1, sizeof *ld->start_cum);
        ld->window_cum = calloc((size_t)n + 1, sizeof *ld->window_cum);
    }
    if (!ld || !ld->shards || !ld->start_cum || !ld->window_cum) {
        free_names(names, n);
        forge_loader_free(ld);
        return forge_error(FORGE_ERR_OOM, "%s: out of memory opening %d shards", dir, n);
    }
    ld->B = B;
    ld->T = T;
    ld->seed = seed;

    uint64_t longest = 0;
    int longest_i = 0;
    for (int i = 0; i < n && r == FORGE_OK; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i].name);
        r = forge_shard_open(&ld->shards[i], path, vocab_size);
        if (r != FORGE_OK) break;
        ld->n_shards = i + 1;
        uint64_t nt = ld->shards[i].n_tokens;
        if (nt > longest) {
            longest = nt;
            longest_i = i;
        }
        uint64_t starts = nt > (uint64_t)T ? nt - (uint64_t)T : 0;
        uint64_t windows = nt > (uint64_t)T ? (nt - 1) / (uint64_t)T : 0;
        ld->start_cum[i + 1] = ld->start_cum[i] + starts;
        ld->window_cum[i + 1] = ld->window_cum[i] + windows;
    }
    if (r == FORGE_OK && ld->start_cum[n] == 0)
        r = forge_error(FORGE_ERR_DATA,
                        "%s: no %s shard holds T+1 = %d tokens for one window (the longest, %s, "
                        "has %llu); use a shorter sequence length or more data",
                        dir, split, T + 1, names[longest_i].name, (unsigned long long)longest);
    free_names(names, n);
    if (r != FORGE_OK) {
        forge_loader_free(ld);
        return r;
    }
    *out = ld;
    return FORGE_OK;
}

/* the shard i with cum[i] <= u < cum[i+1] (cum has n+1 entries, cum[n] > u) */
static int find_shard(const uint64_t *cum, int n, uint64_t u) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (cum[mid + 1] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* window of T+1 tokens at `start` of shard s -> inputs (T), targets (T) */
static void copy_window(const forge_shard *s, uint64_t start, int T, int32_t *inputs,
                        int32_t *targets) {
    forge_shard_read(s, start, (size_t)T, inputs);
    forge_shard_read(s, start + 1, (size_t)T, targets);
}

forge_status forge_loader_next(forge_loader *ld, int32_t *inputs, int32_t *targets) {
    uint64_t k = ld->batches_drawn;
    forge_rng rng;
    forge_rng_seed(&rng, forge_hash64(ld->seed ^ forge_hash64(k)), k);
    uint64_t total = ld->start_cum[ld->n_shards];
    for (int b = 0; b < ld->B; b++) {
        uint64_t u = forge_rng_below(&rng, total);
        int i = find_shard(ld->start_cum, ld->n_shards, u);
        copy_window(&ld->shards[i], u - ld->start_cum[i], ld->T, inputs + (size_t)b * ld->T,
                    targets + (size_t)b * ld->T);
    }
    ld->batches_drawn = k + 1;
    return FORGE_OK;
}

uint64_t forge_loader_state(const forge_loader *ld) { return ld->batches_drawn; }

forge_status forge_loader_seek(forge_loader *ld, uint64_t batches_drawn) {
    ld->batches_drawn = batches_drawn;
    return FORGE_OK;
}

/* (a * b) mod m for a < m, without overflowing: double-and-add over b's bits */
static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) {
    uint64_t r = 0;
    while (b) {
        if (b & 1) r = r >= m - a ? r - (m - a) : r + a; /* (r + a) mod m */
        a = a >= m - a ? a - (m - a) : a + a;            /* (2a) mod m */
        b >>= 1;
    }
    return r;
}

forge_status forge_loader_val_batch(const forge_loader *ld, uint64_t index, int32_t *inputs,
                                    int32_t *targets) {
    uint64_t W = ld->window_cum[ld->n_shards];
    uint64_t B = (uint64_t)ld->B;
    uint64_t first = mulmod(index % W, B, W);
    for (uint64_t b = 0; b < B; b++) {
        uint64_t w = (first + b) % W;
        int i = find_shard(ld->window_cum, ld->n_shards, w);
        uint64_t start = (w - ld->window_cum[i]) * (uint64_t)ld->T;
        copy_window(&ld->shards[i], start, ld->T, inputs + b * (uint64_t)ld->T,
                    targets + b * (uint64_t)ld->T);
    }
    return FORGE_OK;
}

uint64_t forge_loader_val_num_batches(const forge_loader *ld) {
    uint64_t W = ld->window_cum[ld->n_shards];
    return (W + (uint64_t)ld->B - 1) / (uint64_t)ld->B;
}

int forge_loader_num_shards(const forge_loader *ld) { return ld->n_shards; }

const char *forge_loader_shard_path(const forge_loader *ld, int i) {
    return i >= 0 && i < ld->n_shards ? ld->shards[i].path : NULL;
}

uint64_t forge_loader_num_tokens(const forge_loader *ld) {
    uint64_t n = 0;
    for (int i = 0; i < ld->n_shards; i++) n += ld->shards[i].n_tokens;
    return n;
}
