/* comm.c: the single-rank, MPI and NCCL (CUDA builds with CUDA_MPI=1 NCCL=1) communicators (comm.h). */
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
#ifdef FORGE_WITH_NCCL /* the CUDA build with CUDA_MPI=1 NCCL=1: MPI starts the job, NCCL moves device memory */
#ifndef FORGE_WITH_MPI
#error "NCCL=1 needs MPI to start the job and hand out NCCL's id: build with CUDA_MPI=1"
#endif
#include <nccl.h>

#include "../backend/cuda/cuda_backend.h"
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
#ifdef FORGE_WITH_NCCL
    int use_nccl;    /* CUDA buffers go through NCCL (made at the first collective, on the backend's device) */
    int nccl_ready;
    ncclComm_t nccl;
    void *stream;    /* the CUDA backend's stream: NCCL runs in order with the step's kernels */
    void *side;      /* its side stream: the pieces of a bucketed reduction, beside the kernels */
    int side_pending; /* pieces issued on the side stream since the last join */
#endif
};

int forge_comm_rank(const forge_comm *c) { return c ? c->rank : 0; }
int forge_comm_size(const forge_comm *c) { return c ? c->size : 1; }
int forge_comm_local_rank(const forge_comm *c) { return c ? c->local_rank : 0; }
int forge_comm_local_size(const forge_comm *c) { return c ? c->local_size : 1; }
const char *forge_comm_name(const forge_comm *c) {
#ifdef FORGE_WITH_NCCL
    if (c && c->use_nccl) return "nccl, started by mpi";
#endif
    return c && c->kind == COMM_MPI ? "mpi" : "single";
}

int forge_comm_active(const forge_comm *c) {
    if (!c) return 0;
#ifdef FORGE_WITH_NCCL
    if (c->use_nccl) return 1; /* one rank too: the one-GPU gate runs NCCL's calls (identities with one rank) */
#endif
    return c->size > 1;
}

int forge_comm_pieces_overlap(const forge_comm *c, const forge_backend *be) {
#ifdef FORGE_WITH_NCCL
    return c && c->use_nccl && be && be->kind == FORGE_DEVICE_CUDA;
#else
    (void)c, (void)be;
    return 0;
#endif
}

int forge_comm_nccl_built(void) {
#ifdef FORGE_WITH_NCCL
    return 1;
#else
    return 0;
#endif
}

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

#ifndef FORGE_WITH_NCCL
forge_status forge_comm_create_nccl(forge_comm **out, double timeout_s) {
    (void)timeout_s;
    *out = NULL;
    return forge_error(FORGE_ERR_UNSUPPORTED,
                       "comm: this forge was built without NCCL: expected `make cuda CUDA_MPI=1 NCCL=1`, or the MPI "
                       "communicator, which stages CUDA buffers through host memory (docs/distributed.md)");
}
#endif

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
#ifdef FORGE_WITH_NCCL
    if (c->nccl_ready) ncclCommDestroy(c->nccl);
#endif
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

#ifdef FORGE_WITH_NCCL
forge_status forge_comm_create_nccl(forge_comm **out, double timeout_s) {
    FORGE_TRY(forge_comm_create_mpi(out, timeout_s));
    (*out)->use_nccl = 1;
    return FORGE_OK;
}

static forge_status nccl_failed(forge_comm *c, ncclResult_t r, const char *what) {
    return forge_error(FORGE_ERR_DEVICE, "comm: rank %d of %d: %s failed: %s", c->rank, c->size, what,
                       ncclGetErrorString(r));
}

/* Whether be's buffers go through NCCL; the NCCL communicator is made the first time (every rank reaches the same
 * first collective), on the device the backend runs on: rank 0's id broadcast over MPI. */
static forge_status nccl_use(forge_comm *c, forge_backend *be, int *use) {
    *use = c->use_nccl && be->kind == FORGE_DEVICE_CUDA;
    if (!*use || c->nccl_ready) return FORGE_OK;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) return nccl_failed(c, r, "ncclGetUniqueId");
    }
    MPI_TRY(c, "the NCCL id's broadcast (MPI_Bcast)", MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->world));
    wait_begin(c, "NCCL set-up (ncclCommInitRank)");
    ncclResult_t r = ncclCommInitRank(&c->nccl, c->size, id, c->rank);
    wait_end(c);
    if (r != ncclSuccess) return nccl_failed(c, r, "ncclCommInitRank");
    c->stream = forge_cuda_backend_stream(be);
    c->side = forge_cuda_backend_side_stream(be);
    c->nccl_ready = 1;
    return FORGE_OK;
}

/* Waits for the NCCL call just queued, under the watchdog: an NCCL collective whose peer died never completes. */
static forge_status nccl_wait(forge_comm *c, forge_backend *be, ncclResult_t r, const char *what) {
    if (r != ncclSuccess) return nccl_failed(c, r, what);
    wait_begin(c, what);
    forge_status s = be->synchronize(be);
    wait_end(c);
    return s;
}

/* NCCL's reduce-scatter and all-gather take equal counts: a block that N does not divide goes through a padded
 * device copy of N * ceil(n / N) elements (allocated per call: the backend, not the communicator, owns device
 * memory, and it is gone before the communicator; the fast path, n % N == 0, works in place). */
static forge_status nccl_reduce_scatter(forge_comm *c, forge_backend *be, float *buf, size_t n) {
    const size_t N = (size_t)c->size, shard = (n + N - 1) / N;
    size_t lo, hi;
    forge_comm_range(n, c->size, c->rank, &lo, &hi);
    const char *what = "reduce-scatter (ncclReduceScatter)";
    if (shard * N == n)
        return nccl_wait(c, be, ncclReduceScatter(buf, buf + lo, shard, ncclFloat, ncclSum, c->nccl, c->stream), what);
    float *tmp;
    FORGE_TRY(be->mem_alloc(be, (void **)&tmp, shard * N * sizeof(float)));
    forge_status s = be->copy_device(be, tmp, buf, n * sizeof(float));
    if (s == FORGE_OK) s = be->memset_zero(be, tmp + n, (shard * N - n) * sizeof(float));
    if (s == FORGE_OK)
        s = nccl_wait(c, be, ncclReduceScatter(tmp, tmp + (size_t)c->rank * shard, shard, ncclFloat, ncclSum, c->nccl,
                                               c->stream), what);
    if (s == FORGE_OK && hi > lo) s = be->copy_device(be, buf + lo, tmp + lo, (hi - lo) * sizeof(float));
    if (s == FORGE_OK) s = be->synchronize(be);
    be->mem_free(be, tmp);
    return s;
}

static forge_status nccl_all_gather(forge_comm *c, forge_backend *be, void *buf, size_t n, size_t eb) {
    const size_t N = (size_t)c->size, shard = (n + N - 1) / N;
    size_t lo, hi;
    forge_comm_range(n, c->size, c->rank, &lo, &hi);
    const char *what = "all-gather (ncclAllGather)";
    char *b = buf;
    if (shard * N == n)
        return nccl_wait(c, be, ncclAllGather(b + lo * eb, b, shard * eb, ncclUint8, c->nccl, c->stream), what);
    char *tmp;
    FORGE_TRY(be->mem_alloc(be, (void **)&tmp, shard * N * eb));
    forge_status s = hi > lo ? be->copy_device(be, tmp + lo * eb, b + lo * eb, (hi - lo) * eb) : FORGE_OK;
    if (s == FORGE_OK)
        s = nccl_wait(c, be, ncclAllGather(tmp + (size_t)c->rank * shard * eb, tmp, shard * eb, ncclUint8, c->nccl,
                                           c->stream), what);
    if (s == FORGE_OK) s = be->copy_device(be, b, tmp, n * eb);
    if (s == FORGE_OK) s = be->synchronize(be);
    be->mem_free(be, tmp);
    return s;
}

/* A piece of a bucketed reduction on the side stream, after everything issued so far on the backend's stream,
 * not waited for (forge_comm_reduce_join does): an all-reduce of [b0, b1), or with scatter one ncclReduce per rank
 * whose range of the n-element block meets [b0, b1), rooted at that rank, in place (one NCCL group). */
static forge_status nccl_reduce_piece(forge_comm *c, forge_backend *be, float *buf, size_t n, size_t b0, size_t b1,
                                      int scatter) {
    FORGE_TRY(be->side_fork(be));
    c->side_pending = 1;
    ncclResult_t r;
    if (!scatter) {
        r = ncclAllReduce(buf + b0, buf + b0, b1 - b0, ncclFloat, ncclSum, c->nccl, c->side);
        return r == ncclSuccess ? FORGE_OK : nccl_failed(c, r, "a bucket's all-reduce (ncclAllReduce)");
    }
    r = ncclGroupStart();
    for (int k = 0; k < c->size && r == ncclSuccess; k++) {
        size_t lo, hi;
        forge_comm_range(n, c->size, k, &lo, &hi);
        size_t x0 = lo > b0 ? lo : b0, x1 = hi < b1 ? hi : b1;
        if (x1 > x0) r = ncclReduce(buf + x0, buf + x0, x1 - x0, ncclFloat, ncclSum, k, c->nccl, c->side);
    }
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess) r = e;
    return r == ncclSuccess ? FORGE_OK : nccl_failed(c, r, "a bucket's reduce to its shards' owners (ncclReduce)");
}
#endif /* FORGE_WITH_NCCL */

/* The MPI reduce-scatter of elements [b0, b1) of an n-element block: rank r receives every rank's copy of
 * [b0, b1) intersected with its range of the block (forge_comm_range) and sums them itself, in rank order, so the
 * result depends neither on the library's reduction algorithm nor on how the block was cut into pieces (every
 * element is ((x_0 + x_1) + x_2) + ... whatever b0 and b1); the rest of buf is left as it was. */
static forge_status reduce_owned(forge_comm *c, forge_backend *be, float *buf, size_t n, size_t b0, size_t b1) {
    if (n > (size_t)INT_MAX)
        return forge_error(FORGE_ERR_ARG, "comm: a block of %zu elements: expected at most %d (MPI counts are int)",
                           n, INT_MAX);
    const int size = c->size;
    int *counts = malloc((size_t)size * sizeof(int)), *displs = malloc((size_t)size * sizeof(int));
    int *rcounts = malloc((size_t)size * sizeof(int)), *rdispls = malloc((size_t)size * sizeof(int));
    float *host = NULL;
    size_t mlo = b0, mhi = b0;
    forge_status s = counts && displs && rcounts && rdispls ? FORGE_OK
                                                            : forge_error(FORGE_ERR_OOM, "comm: out of host memory");
    for (int r = 0; s == FORGE_OK && r < size; r++) {
        size_t lo, hi;
        forge_comm_range(n, size, r, &lo, &hi);
        size_t x0 = lo > b0 ? lo : b0, x1 = hi < b1 ? hi : b1;
        if (x1 < x0) x1 = x0;
        counts[r] = (int)(x1 - x0);
        displs[r] = (int)x0;
        if (r == c->rank) mlo = x0, mhi = x1;
    }
    const size_t mine = mhi - mlo;
    if (s == FORGE_OK) s = grow((void **)&c->recv, &c->recv_bytes, (size_t)size * mine * sizeof(float) + 4,
                                "reduce-scatter buffer");
    if (s == FORGE_OK)
        s = stage_in(c, be, buf, b1 * sizeof(float), b0 * sizeof(float), (b1 - b0) * sizeof(float), (void **)&host);
    if (s == FORGE_OK) {
        for (int r = 0; r < size; r++) {
            rcounts[r] = (int)mine;
            rdispls[r] = (int)((size_t)r * mine);
        }
        /* every rank sends rank r its piece r: r receives the size copies of its piece and sums them itself */
        wait_begin(c, "reduce-scatter (MPI_Alltoallv)");
        int rc = MPI_Alltoallv(host, counts, displs, MPI_FLOAT, c->recv, rcounts, rdispls, MPI_FLOAT, c->world);
        wait_end(c);
        if (rc != MPI_SUCCESS) s = mpi_failed(c, rc, "reduce-scatter (MPI_Alltoallv)");
    }
    if (s == FORGE_OK) {
        const float *recv = c->recv;
        float *dst = host + mlo;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < mine; i++) {
            float acc = recv[i];
            for (int r = 1; r < size; r++) acc += recv[(size_t)r * mine + i];
            dst[i] = acc;
        }
        s = stage_out(be, buf, host, mlo * sizeof(float), mine * sizeof(float));
    }
    free(rcounts);
    free(rdispls);
    free(counts);
    free(displs);
    return s;
}

forge_status forge_comm_reduce_scatter_sum(forge_comm *c, forge_backend *be, float *buf, size_t n) {
    if (!forge_comm_active(c)) return FORGE_OK;
#ifdef FORGE_WITH_NCCL
    int nccl;
    FORGE_TRY(nccl_use(c, be, &nccl));
    if (nccl) return nccl_reduce_scatter(c, be, buf, n);
#endif
    return reduce_owned(c, be, buf, n, 0, n);
}

forge_status forge_comm_all_gather(forge_comm *c, forge_backend *be, void *buf, size_t n, size_t elem_bytes) {
    if (!forge_comm_active(c)) return FORGE_OK;
    if (elem_bytes != 4 && elem_bytes != 2)
        return forge_error(FORGE_ERR_ARG, "comm: all-gather of %zu-byte elements: expected 4 or 2", elem_bytes);
#ifdef FORGE_WITH_NCCL
    int nccl;
    FORGE_TRY(nccl_use(c, be, &nccl));
    if (nccl) return nccl_all_gather(c, be, buf, n, elem_bytes);
#endif
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
    if (!forge_comm_active(c)) return FORGE_OK;
#ifdef FORGE_WITH_NCCL
    int nccl;
    FORGE_TRY(nccl_use(c, be, &nccl));
    if (nccl)
        return nccl_wait(c, be, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c->nccl, c->stream),
                         "all-reduce (ncclAllReduce)");
#endif
    /* the two halves of a ring all-reduce, with forge's own rank-order sum in between */
    FORGE_TRY(forge_comm_reduce_scatter_sum(c, be, buf, n));
    return forge_comm_all_gather(c, be, buf, n, sizeof(float));
}

forge_status forge_comm_reduce_piece(forge_comm *c, forge_backend *be, float *buf, size_t n, size_t b0, size_t b1,
                                     int scatter) {
    if (!forge_comm_active(c)) return FORGE_OK;
    if (b0 > b1 || b1 > n)
        return forge_error(FORGE_ERR_ARG, "comm: piece [%zu, %zu) of a %zu-element block: expected b0 <= b1 <= n", b0,
                           b1, n);
    if (b1 == b0) return FORGE_OK;
#ifdef FORGE_WITH_NCCL
    int nccl;
    FORGE_TRY(nccl_use(c, be, &nccl));
    if (nccl) return nccl_reduce_piece(c, be, buf, n, b0, b1, scatter);
#endif
    if (scatter) return reduce_owned(c, be, buf, n, b0, b1);
    return forge_comm_all_reduce_sum(c, be, buf + b0, b1 - b0);
}

forge_status forge_comm_reduce_join(forge_comm *c, forge_backend *be) {
#ifdef FORGE_WITH_NCCL
    if (c && c->side_pending) {
        c->side_pending = 0;
        FORGE_TRY(be->side_join(be));
        /* the host waits here, under the watchdog, rather than at the next collective: a piece whose peer died
         * never completes, and the message names what hung */
        wait_begin(c, "the gradient buckets' reductions (NCCL, side stream)");
        forge_status s = be->side_synchronize(be);
        wait_end(c);
        return s;
    }
#endif
    (void)c, (void)be;
    return FORGE_OK;
}

forge_status forge_comm_broadcast(forge_comm *c, forge_backend *be, void *buf, size_t bytes, int root) {
    if (!forge_comm_active(c)) return FORGE_OK;
#ifdef FORGE_WITH_NCCL
    int nccl;
    FORGE_TRY(nccl_use(c, be, &nccl));
    if (nccl)
        return nccl_wait(c, be, ncclBroadcast(buf, buf, bytes, ncclUint8, root, c->nccl, c->stream),
                         "broadcast (ncclBroadcast)");
#endif
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
forge_status forge_comm_reduce_piece(forge_comm *c, forge_backend *be, float *buf, size_t n, size_t b0, size_t b1,
                                     int scatter) {
    (void)c, (void)be, (void)buf, (void)n, (void)b0, (void)b1, (void)scatter;
    return FORGE_OK;
}
forge_status forge_comm_reduce_join(forge_comm *c, forge_backend *be) {
    (void)c, (void)be;
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
