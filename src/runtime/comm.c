/* comm.c: the single-rank and MPI communicators (comm.h). */
#include "comm.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef FORGE_WITH_MPI
#include <mpi.h>
#include <pthread.h>
#endif

enum { COMM_SINGLE, COMM_MPI };

struct forge_comm {
    int kind;
    int rank, size, local_rank, local_size;
    double timeout_s;
    void *host;      /* staging copy of a device buffer (a non-CPU backend) */
    size_t host_bytes;
    float *recv;     /* the reduce-scatter's received ranges, (size, shard) */
    size_t recv_bytes;
#ifdef FORGE_WITH_MPI
    MPI_Comm world;
    pthread_t watchdog;
    int watchdog_started;
    atomic_llong wait_since_ns; /* when the running collective began; 0 = none running */
    _Atomic(const char *) wait_what;
    atomic_int stop;
#endif
};

int forge_comm_rank(const forge_comm *c) { return c ? c->rank : 0; }
int forge_comm_size(const forge_comm *c) { return c ? c->size : 1; }
int forge_comm_local_rank(const forge_comm *c) { return c ? c->local_rank : 0; }
int forge_comm_local_size(const forge_comm *c) { return c ? c->local_size : 1; }
const char *forge_comm_name(const forge_comm *c) { return c && c->kind == COMM_MPI ? "mpi" : "single"; }

void forge_comm_range(size_t n, int size, int r, size_t *lo, size_t *hi) {
    size_t shard = size > 0 ? (n + (size_t)size - 1) / (size_t)size : n;
    size_t l = (size_t)r * shard;
    if (l > n) l = n;
    *lo = l;
    *hi = l + shard < n ? l + shard : n;
}

forge_status forge_comm_create_single(forge_comm **out) {
    forge_comm *c = calloc(1, sizeof *c);
    if (!c) return forge_error(FORGE_ERR_OOM, "comm: out of host memory");
    c->kind = COMM_SINGLE;
    c->size = c->local_size = 1;
    *out = c;
    return FORGE_OK;
}

forge_status forge_comm_create_nccl(forge_comm **out, double timeout_s) {
    (void)timeout_s;
    *out = NULL;
    return forge_error(FORGE_ERR_UNSUPPORTED,
                       "comm: the NCCL communicator is not built yet: expected the MPI one, which stages CUDA "
                       "buffers through host memory (docs/distributed.md)");
}

#ifndef FORGE_WITH_MPI

int forge_comm_mpi_built(void) { return 0; }

forge_status forge_comm_create_mpi(forge_comm **out, double timeout_s) {
    (void)timeout_s;
    *out = NULL;
    return forge_error(FORGE_ERR_UNSUPPORTED,
                       "comm: this forge was built without MPI: expected a build with MPI (install Open MPI, "
                       "e.g. libopenmpi-dev, and run `make MPI=1`) to run under mpirun");
}

void forge_comm_destroy(forge_comm *c) {
    if (!c) return;
    free(c->host);
    free(c->recv);
    free(c);
}

void forge_comm_abort(forge_comm *c, int code) { (void)c, (void)code; }

#else /* FORGE_WITH_MPI */

int forge_comm_mpi_built(void) { return 1; }

/* Grows a host scratch buffer to at least `bytes`. */
static forge_status grow(void **buf, size_t *cap, size_t bytes, const char *what) {
    if (*cap >= bytes) return FORGE_OK;
    void *p = realloc(*buf, bytes);
    if (!p) return forge_error(FORGE_ERR_OOM, "comm: out of host memory for the %s (%zu bytes)", what, bytes);
    *buf = p;
    *cap = bytes;
    return FORGE_OK;
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Aborts the job when a collective has waited past the timeout: a dead or hung rank must not leave the others
 * blocked forever (MPI collectives have no timeout of their own). */
static void *watchdog_main(void *arg) {
    forge_comm *c = arg;
    const struct timespec tick = {0, 100 * 1000 * 1000};
    while (!atomic_load(&c->stop)) {
        nanosleep(&tick, NULL);
        long long since = atomic_load(&c->wait_since_ns);
        if (!since) continue;
        double waited = (double)(now_ns() - since) * 1e-9;
        if (waited <= c->timeout_s) continue;
        const char *what = atomic_load(&c->wait_what);
        fprintf(stderr,
                "forge: error: rank %d of %d: %s waited %.1f s, longer than --dist-timeout %g s: another rank died, "
                "failed or hangs; aborting every rank\n",
                c->rank, c->size, what ? what : "a collective", waited, c->timeout_s);
        fflush(stderr);
        MPI_Abort(c->world, 1);
        _exit(1); /* MPI_Abort does not return; this is in case it did */
    }
    return NULL;
}

static void wait_begin(forge_comm *c, const char *what) {
    atomic_store(&c->wait_what, what);
    atomic_store(&c->wait_since_ns, now_ns());
}

static void wait_end(forge_comm *c) { atomic_store(&c->wait_since_ns, 0); }

static forge_status mpi_failed(forge_comm *c, int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    return forge_error(FORGE_ERR_DEVICE, "comm: rank %d of %d: %s failed: %s", c->rank, c->size, what, msg);
}

#define MPI_TRY(c, what, call)                                \
    do {                                                      \
        wait_begin(c, what);                                  \
        int mpi_rc_ = (call);                                 \
        wait_end(c);                                          \
        if (mpi_rc_ != MPI_SUCCESS) return mpi_failed(c, mpi_rc_, what); \
    } while (0)

forge_status forge_comm_create_mpi(forge_comm **out, double timeout_s) {
    *out = NULL;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    /* MULTIPLE: the watchdog thread may call MPI_Abort while the main thread waits in a collective */
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return forge_error(FORGE_ERR_DEVICE, "comm: MPI_Init_thread failed");
    forge_comm *c = calloc(1, sizeof *c);
    if (!c) return forge_error(FORGE_ERR_OOM, "comm: out of host memory");
    c->kind = COMM_MPI;
    c->timeout_s = timeout_s;
    c->world = MPI_COMM_WORLD;
    /* errors come back as codes, turned into forge_status messages, instead of killing the job unexplained */
    MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->world, &c->rank);
    MPI_Comm_size(c->world, &c->size);
    MPI_Comm node;
    if (MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &c->local_rank);
        MPI_Comm_size(node, &c->local_size);
        MPI_Comm_free(&node);
    } else {
        c->local_rank = c->rank;
        c->local_size = c->size;
    }
    atomic_init(&c->wait_since_ns, 0);
    atomic_init(&c->wait_what, NULL);
    atomic_init(&c->stop, 0);
    if (timeout_s > 0 && pthread_create(&c->watchdog, NULL, watchdog_main, c) == 0) c->watchdog_started = 1;
    else if (timeout_s > 0) {
        free(c);
        return forge_error(FORGE_ERR_DEVICE, "comm: cannot start the collective watchdog thread");
    }
    *out = c;
    return FORGE_OK;
}

void forge_comm_destroy(forge_comm *c) {
    if (!c) return;
    if (c->kind == COMM_MPI) {
        if (c->watchdog_started) {
            atomic_store(&c->stop, 1);
            pthread_join(c->watchdog, NULL);
        }
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
    free(c->host);
    free(c->recv);
    free(c);
}

void forge_comm_abort(forge_comm *c, int code) {
    if (!c || c->kind != COMM_MPI) return;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(c->world, code ? code : 1);
}

/* Per-rank counts and displacements (in elements) of an n-element block: the ranges of forge_comm_range. */
static forge_status range_table(forge_comm *c, size_t n, int **counts, int **displs) {
    if (n > (size_t)INT_MAX)
        return forge_error(FORGE_ERR_ARG, "comm: a block of %zu elements: expected at most %d (MPI counts are int)",
                           n, INT_MAX);
    *counts = malloc((size_t)c->size * sizeof(int));
    *displs = malloc((size_t)c->size * sizeof(int));
    if (!*counts || !*displs) {
        free(*counts);
        free(*displs);
        return forge_error(FORGE_ERR_OOM, "comm: out of host memory");
    }
    for (int r = 0; r < c->size; r++) {
        size_t lo, hi;
        forge_comm_range(n, c->size, r, &lo, &hi);
        (*counts)[r] = (int)(hi - lo);
        (*displs)[r] = (int)lo;
    }
    return FORGE_OK;
}

/* A host view of be's buffer: itself on the CPU, else the staging copy, filled from [from, from + bytes). */
static forge_status stage_in(forge_comm *c, forge_backend *be, void *buf, size_t total, size_t from, size_t bytes,
                             void **host) {
    if (be->kind == FORGE_DEVICE_CPU) {
        *host = buf;
        return FORGE_OK;
    }
    FORGE_TRY(grow(&c->host, &c->host_bytes, total ? total : 1, "staging buffer"));
    if (bytes) FORGE_TRY(be->copy_to_host(be, (char *)c->host + from, (const char *)buf + from, bytes));
    *host = c->host;
    return FORGE_OK;
}

static forge_status stage_out(forge_backend *be, void *buf, const void *host, size_t from, size_t bytes) {
    if (be->kind == FORGE_DEVICE_CPU || !bytes) return FORGE_OK;
    return be->copy_to_device(be, (char *)buf + from, (const char *)host + from, bytes);
}

forge_status forge_comm_reduce_scatter_sum(forge_comm *c, forge_backend *be, float *buf, size_t n) {
    if (!c || c->size == 1) return FORGE_OK;
    int *counts, *displs;
    FORGE_TRY(range_table(c, n, &counts, &displs));
    size_t lo, hi;
    forge_comm_range(n, c->size, c->rank, &lo, &hi);
    const size_t shard = (n + (size_t)c->size - 1) / (size_t)c->size, mine = hi - lo;
    int *rcounts = malloc((size_t)c->size * sizeof(int)), *rdispls = malloc((size_t)c->size * sizeof(int));
    float *host = NULL;
    forge_status s = rcounts && rdispls ? FORGE_OK : forge_error(FORGE_ERR_OOM, "comm: out of host memory");
    if (s == FORGE_OK) s = grow((void **)&c->recv, &c->recv_bytes, (size_t)c->size * shard * sizeof(float) + 4,
                                "reduce-scatter buffer");
    if (s == FORGE_OK) s = stage_in(c, be, buf, n * sizeof(float), 0, n * sizeof(float), (void **)&host);
    if (s == FORGE_OK) {
        for (int r = 0; r < c->size; r++) {
            rcounts[r] = (int)mine;
            rdispls[r] = (int)((size_t)r * shard);
        }
        /* every rank sends rank r its range r: r receives the size copies of its range and sums them itself, in
         * rank order, so the result does not depend on the library's reduction algorithm */
        wait_begin(c, "reduce-scatter (MPI_Alltoallv)");
        int rc = MPI_Alltoallv(host, counts, displs, MPI_FLOAT, c->recv, rcounts, rdispls, MPI_FLOAT, c->world);
        wait_end(c);
        if (rc != MPI_SUCCESS) s = mpi_failed(c, rc, "reduce-scatter (MPI_Alltoallv)");
    }
    if (s == FORGE_OK) {
        const float *recv = c->recv;
        const int size = c->size;
        float *dst = host + lo;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < mine; i++) {
            float acc = recv[i];
            for (int r = 1; r < size; r++) acc += recv[(size_t)r * shard + i];
            dst[i] = acc;
        }
        s = stage_out(be, buf, host, lo * sizeof(float), mine * sizeof(float));
    }
    free(rcounts);
    free(rdispls);
    free(counts);
    free(displs);
    return s;
}

forge_status forge_comm_all_gather(forge_comm *c, forge_backend *be, void *buf, size_t n, size_t elem_bytes) {
    if (!c || c->size == 1) return FORGE_OK;
    if (elem_bytes != 4 && elem_bytes != 2)
        return forge_error(FORGE_ERR_ARG, "comm: all-gather of %zu-byte elements: expected 4 or 2", elem_bytes);
    int *counts, *displs;
    FORGE_TRY(range_table(c, n, &counts, &displs));
    size_t lo, hi;
    forge_comm_range(n, c->size, c->rank, &lo, &hi);
    void *host = NULL;
    forge_status s = stage_in(c, be, buf, n * elem_bytes, lo * elem_bytes, (hi - lo) * elem_bytes, &host);
    if (s == FORGE_OK) {
        wait_begin(c, "all-gather (MPI_Allgatherv)");
        int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host, counts, displs,
                                elem_bytes == 4 ? MPI_FLOAT : MPI_UINT16_T, c->world);
        wait_end(c);
        if (rc != MPI_SUCCESS) s = mpi_failed(c, rc, "all-gather (MPI_Allgatherv)");
    }
    if (s == FORGE_OK) s = stage_out(be, buf, host, 0, n * elem_bytes);
    free(counts);
    free(displs);
    return s;
}

forge_status forge_comm_all_reduce_sum(forge_comm *c, forge_backend *be, float *buf, size_t n) {
    if (!c || c->size == 1) return FORGE_OK;
    /* the two halves of a ring all-reduce, with forge's own rank-order sum in between */
    FORGE_TRY(forge_comm_reduce_scatter_sum(c, be, buf, n));
    return forge_comm_all_gather(c, be, buf, n, sizeof(float));
}

forge_status forge_comm_broadcast(forge_comm *c, forge_backend *be, void *buf, size_t bytes, int root) {
    if (!c || c->size == 1) return FORGE_OK;
    if (bytes > (size_t)INT_MAX)
        return forge_error(FORGE_ERR_ARG, "comm: broadcast of %zu bytes: expected at most %d", bytes, INT_MAX);
    void *host;
    FORGE_TRY(stage_in(c, be, buf, bytes, 0, c->rank == root ? bytes : 0, &host));
    MPI_TRY(c, "broadcast (MPI_Bcast)", MPI_Bcast(host, (int)bytes, MPI_BYTE, root, c->world));
    return stage_out(be, buf, host, 0, bytes);
}

forge_status forge_comm_gather(forge_comm *c, forge_backend *be, const float *shard, size_t n, float *host_full,
                               int root) {
    size_t lo, hi;
    forge_comm_range(n, forge_comm_size(c), forge_comm_rank(c), &lo, &hi);
    if (!c || c->size == 1) return (hi - lo) ? be->copy_to_host(be, host_full, shard, n * sizeof(float)) : FORGE_OK;
    int *counts, *displs;
    FORGE_TRY(range_table(c, n, &counts, &displs));
    void *host = NULL;
    forge_status s = stage_in(c, be, (void *)shard, (hi - lo) * sizeof(float), 0, (hi - lo) * sizeof(float), &host);
    if (s == FORGE_OK) {
        wait_begin(c, "gather (MPI_Gatherv)");
        int rc = MPI_Gatherv(host, (int)(hi - lo), MPI_FLOAT, host_full, counts, displs, MPI_FLOAT, root, c->world);
        wait_end(c);
        if (rc != MPI_SUCCESS) s = mpi_failed(c, rc, "gather (MPI_Gatherv)");
    }
    free(counts);
    free(displs);
    return s;
}

forge_status forge_comm_any(forge_comm *c, int flag, int *any) {
    *any = flag != 0;
    if (!c || c->size == 1) return FORGE_OK;
    int mine = flag != 0;
    MPI_TRY(c, "stop agreement (MPI_Allreduce)", MPI_Allreduce(&mine, any, 1, MPI_INT, MPI_MAX, c->world));
    return FORGE_OK;
}

forge_status forge_comm_barrier(forge_comm *c) {
    if (!c || c->size == 1) return FORGE_OK;
    MPI_TRY(c, "barrier (MPI_Barrier)", MPI_Barrier(c->world));
    return FORGE_OK;
}

#endif /* FORGE_WITH_MPI */

#ifndef FORGE_WITH_MPI
/* Without MPI only the single-rank communicator exists: every collective is a no-op, gather a copy. */
forge_status forge_comm_reduce_scatter_sum(forge_comm *c, forge_backend *be, float *buf, size_t n) {
    (void)c, (void)be, (void)buf, (void)n;
    return FORGE_OK;
}
forge_status forge_comm_all_gather(forge_comm *c, forge_backend *be, void *buf, size_t n, size_t elem_bytes) {
    (void)c, (void)be, (void)buf, (void)n, (void)elem_bytes;
    return FORGE_OK;
}
forge_status forge_comm_all_reduce_sum(forge_comm *c, forge_backend *be, float *buf, size_t n) {
    (void)c, (void)be, (void)buf, (void)n;
    return FORGE_OK;
}
forge_status forge_comm_broadcast(forge_comm *c, forge_backend *be, void *buf, size_t bytes, int root) {
    (void)c, (void)be, (void)buf, (void)bytes, (void)root;
    return FORGE_OK;
}
forge_status forge_comm_gather(forge_comm *c, forge_backend *be, const float *shard, size_t n, float *host_full,
                               int root) {
    (void)c, (void)root;
    return n ? be->copy_to_host(be, host_full, shard, n * sizeof(float)) : FORGE_OK;
}
forge_status forge_comm_any(forge_comm *c, int flag, int *any) {
    (void)c;
    *any = flag != 0;
    return FORGE_OK;
}
forge_status forge_comm_barrier(forge_comm *c) {
    (void)c;
    return FORGE_OK;
}
#endif
