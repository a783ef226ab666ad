/* Shared between the front end of src/dist (comm.c: requests, the
 * communication thread) and its backends. Not part of the public contract. */
#ifndef ANVIL_DIST_INTERNAL_H
#define ANVIL_DIST_INTERNAL_H

#include <stdint.h>

#include "dist/comm.h"

typedef enum {
    OP_ALLREDUCE,
    OP_REDUCE_SCATTER,
    OP_ALLGATHER,
    OP_BROADCAST,
    OP_BARRIER,
    OP_SPLIT,
    OP_SEND, /* point to point: posted from the caller's thread, never queued */
    OP_RECV
} dist_op_kind;

typedef struct dist_backend dist_backend;

/* A group carries the backend that runs its collectives: MPI's on host memory, a device backend's
 * (NCCL) on the kernels' device memory. Groups split from it run on the same one. */
struct anvil_group {
    const dist_backend *be;
    void *impl; /* the backend's handle (an MPI_Comm for MPI) */
    int rank, size;
    char name[32];
};

struct anvil_req {
    dist_op_kind kind;
    anvil_group *g;
    void *buf;        /* allreduce, broadcast: in place */
    const void *send; /* reduce-scatter, allgather */
    void *recv;
    size_t n;
    size_t *counts; /* a copy, group size entries */
    anvil_dtype t;
    int root;
    int color, key;        /* split */
    anvil_group *result;   /* split */
    int peer, tag;         /* send, recv */
    void *handle;          /* send, recv: the backend's request */
    char what[64];
    uint64_t seq;
    int done, rc;
    char err[256];
    struct anvil_req *next;
};

struct dist_backend {
    const char *name;
    /* Runs one collective to completion on the calling thread. On failure
     * writes a message to r->err and returns -1. */
    int (*run)(struct anvil_req *r);
    void (*group_free)(anvil_group *g);
    /* Point to point: starts a send or receive without blocking, and tests whether it completed
     * (*done). Same error convention as run. */
    int (*p2p_start)(struct anvil_req *r);
    int (*p2p_test)(struct anvil_req *r, int *done);
};

extern const dist_backend dist_local_backend;

/* MPI backend (comm_mpi.c). */
int dist_mpi_init(anvil_group **world, char *host, size_t hostcap);
void dist_mpi_finalize(void);
void dist_mpi_abort(int status);
extern const dist_backend dist_mpi_backend;

/* The collective the communication thread is running, for the watchdog:
 * copies it into the arguments and returns 1, or returns 0 when idle. */
int dist_current_op(uint64_t *seq, double *started, char *what, size_t whatcap, char *group, size_t groupcap,
                    int *group_size);
/* The last collective completed (0 before the first). */
uint64_t dist_last_done(void);

/* Watchdog (watchdog.c), MPI only. */
int dist_watchdog_start(double timeout_s, const char *host);
void dist_watchdog_stop(void);

#endif
