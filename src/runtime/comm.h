/*
 * comm.h: the communicator of a data-parallel run (docs/distributed.md).
 *
 * A run of N ranks (one process and one device each, started by mpirun) holds
 * one communicator; a run without mpirun holds none: every function takes
 * NULL as the single-rank communicator (rank 0 of 1, collectives that do
 * nothing), so the trainer has one code path. Buffers are the
 * given backend's memory: host memory on the CPU; device memory elsewhere, staged
 * through a host buffer by the MPI communicator, or handed to NCCL as they are
 * by the NCCL one (forge_comm_create_nccl).
 *
 * Every collective splits an n-element block into N contiguous ranges
 * (forge_comm_range: ceil(n / N) elements each, the last ones shorter or
 * empty): the shards of ZeRO-1. The sums are computed by forge itself, in
 * rank order ((x_0 + x_1) + x_2) + ..., whatever algorithm the MPI library
 * would pick, so every rank gets the same bits and a run's numbers depend only
 * on N, never on the library or the network.
 *
 * Timeouts: MPI collectives have none, so a watchdog thread aborts the whole job
 * (MPI_Abort, with a message naming the collective and the rank) when one has
 * waited longer than the timeout given at creation: a rank that died or hangs
 * never leaves the others waiting forever.
 */
#ifndef FORGE_COMM_H
#define FORGE_COMM_H

#include <stddef.h>

#include "../backend/backend.h"
#include "../base/status.h"

typedef struct forge_comm forge_comm;

/* The single-rank communicator (rank 0 of 1): every collective is a no-op. */
forge_status forge_comm_create_single(forge_comm **out);
/* Whether this build has the MPI communicator (make MPI=1, the default where mpicc is found). */
int forge_comm_mpi_built(void);
/* Initialises MPI and makes the communicator of MPI_COMM_WORLD; collectives that wait longer than timeout_s
 * seconds abort the job (timeout_s <= 0: never). FORGE_ERR_UNSUPPORTED in a build without MPI. */
forge_status forge_comm_create_mpi(forge_comm **out, double timeout_s);
/* MPI to start the job and NCCL for CUDA device memory (the CUDA build with CUDA_MPI=1 NCCL=1; elsewhere
 * FORGE_ERR_UNSUPPORTED naming what to use instead). Buffers of another backend still go through MPI. NCCL sums
 * in its own (ring) order: every rank gets the same bits, but they depend on N and NCCL's algorithm choice. */
forge_status forge_comm_create_nccl(forge_comm **out, double timeout_s);
int forge_comm_nccl_built(void);
/* Finalises MPI where it was initialised. NULL is fine. */
void forge_comm_destroy(forge_comm *c);
/* Ends every rank of the job now with exit status code (MPI_Abort); the single-rank one returns. */
void forge_comm_abort(forge_comm *c, int code);

int forge_comm_rank(const forge_comm *c);
int forge_comm_size(const forge_comm *c);
/* The rank among the ranks of this host, and how many there are (the device index, the CPU threads). */
int forge_comm_local_rank(const forge_comm *c);
int forge_comm_local_size(const forge_comm *c);
/* Whether the collectives do anything: more than one rank, or NCCL (whose calls run even for one rank, so a
 * one-GPU run checks the NCCL path against a plain run, bit for bit). The trainer uses a communicator only then. */
int forge_comm_active(const forge_comm *c);
const char *forge_comm_name(const forge_comm *c); /* "single", "mpi", "nccl, started by mpi" */

/* Rank r's range [*lo, *hi) of an n-element block split over size ranks. */
void forge_comm_range(size_t n, int size, int r, size_t *lo, size_t *hi);

/* In place, on be's memory, over every rank: buf (n floats) becomes the rank-order sum of every rank's buf. */
forge_status forge_comm_all_reduce_sum(forge_comm *c, forge_backend *be, float *buf, size_t n);
/* In place: this rank's range of buf (n floats) becomes the rank-order sum of that range over the ranks; the
 * rest of buf is left as it was. */
forge_status forge_comm_reduce_scatter_sum(forge_comm *c, forge_backend *be, float *buf, size_t n);
/* One piece of a reduction cut into pieces (the gradient buckets of a data-parallel step, docs/distributed.md):
 * elements [b0, b1) of the n-float block buf, in place. scatter = 0: every rank gets the sums of [b0, b1) (the
 * piece of forge_comm_all_reduce_sum); scatter = 1: each rank gets the sums of [b0, b1) within its range of the
 * whole block (forge_comm_range(n, ...)), the rest left as it was (the piece of forge_comm_reduce_scatter_sum, so
 * ZeRO-1's shards do not depend on the pieces). MPI: forge's rank-order sums, done when it returns; every element
 * gets the bits the whole-block collective gives it, however the block is cut. NCCL: issued on the backend's side
 * stream after everything issued so far on its stream, and not waited for: the ops issued next overlap it (NCCL
 * sums in its own order, which depends on the piece's size). Every rank issues the same pieces in the same order;
 * forge_comm_reduce_join ends the sequence. */
forge_status forge_comm_reduce_piece(forge_comm *c, forge_backend *be, float *buf, size_t n, size_t b0, size_t b1,
                                     int scatter);
/* Whether forge_comm_reduce_piece runs beside be's ops (NCCL with a CUDA backend: the side stream) rather than
 * being done when it returns. */
int forge_comm_pieces_overlap(const forge_comm *c, const forge_backend *be);
/* After the last piece: the backend's stream waits for every piece issued since the last join, and the host waits
 * for them under the watchdog (NCCL); nothing where the pieces were done when issued (MPI, one rank). */
forge_status forge_comm_reduce_join(forge_comm *c, forge_backend *be);
/* In place: every rank's range of buf (n elements of elem_bytes: 4 or 2) is copied to every other rank. */
forge_status forge_comm_all_gather(forge_comm *c, forge_backend *be, void *buf, size_t n, size_t elem_bytes);
/* Root's bytes of buf to every rank. */
forge_status forge_comm_broadcast(forge_comm *c, forge_backend *be, void *buf, size_t bytes, int root);
/* This rank's range of a distributed n-float block (shard: its hi - lo floats, be's memory) into host_full
 * (n floats, host memory) on root; host_full is ignored elsewhere. */
forge_status forge_comm_gather(forge_comm *c, forge_backend *be, const float *shard, size_t n, float *host_full,
                               int root);
/* *any = 1 on every rank when flag is set on at least one (a stop request every rank must agree on). */
forge_status forge_comm_any(forge_comm *c, int flag, int *any);
forge_status forge_comm_barrier(forge_comm *c);

#endif
