/* Collective communication between the processes of a job.
 *
 * One interface, two backends today: a world of one process, which needs no
 * MPI at run time and turns every collective into a copy or nothing, and
 * Open MPI, chosen when the process was started by mpirun (`anvil launch`).
 * Each group carries its backend (the groups split from it inherit it), so a
 * device backend (NCCL, on the kernels' device memory) slots in per group
 * behind the same calls, and their callers do not change.
 *
 * Non-blocking calls return a request at once and a dedicated communication
 * thread runs the collectives one after another, in submission order, while
 * the caller computes; that is what lets gradient reduction overlap the
 * backward pass. Because every rank submits the same collectives in the
 * same order, the queue never reorders what MPI sees.
 *
 * A watchdog thread times every collective. One that has not completed
 * within the timeout is reported on one line (which collective, which group,
 * which ranks answered and which did not, with their hosts) and the whole job
 * is aborted with ANVIL_EXIT_COLLECTIVE_TIMEOUT: a hung or stopped rank never
 * leaves the others waiting forever. */
#ifndef ANVIL_DIST_COMM_H
#define ANVIL_DIST_COMM_H

#include <stddef.h>

#include "core/exit.h"

typedef enum { ANVIL_F32, ANVIL_F64, ANVIL_I64, ANVIL_U8 } anvil_dtype;

typedef struct anvil_group anvil_group; /* a process group: the world or a sub-communicator */
typedef struct anvil_req anvil_req;     /* a collective in flight */

typedef struct {
    double timeout_s; /* collective timeout; <= 0 disables the watchdog */
} anvil_dist_config;

/* Starts the runtime once per process. Under mpirun (OMPI_COMM_WORLD_SIZE
 * set) or srun --mpi=pmix (PMIX_RANK set) this initializes MPI with thread support and starts the communication
 * and watchdog threads; otherwise it sets up a world of one. Returns 0 or -1
 * after anvil_fail. */
int anvil_dist_init(const anvil_dist_config *cfg);
/* Stops the threads and finalizes MPI. Safe to call when never initialized. */
void anvil_dist_finalize(void);
/* Whether the MPI backend is in use (even with a world of one). */
int anvil_dist_is_mpi(void);

int anvil_dist_rank(void);
int anvil_dist_world_size(void);
const char *anvil_dist_host(void);
/* This rank's host key: anvil_dist_host(), unless ANVIL_HOST_KEY is set. That variable is a test
 * hook, letting the ranks of one machine act as several hosts: a comma-separated list, rank r
 * taking its r-th entry (ranks beyond the list, its last). */
void anvil_dist_host_key(char *out, size_t cap);
/* Collective over the world: for every rank r, leader[r] is the lowest rank with r's host key
 * (leader has world-size entries). 0, or -1 after anvil_fail. */
int anvil_dist_host_leaders(int *leader);
/* Sends the whole job down with `status` (MPI_Abort), or exits when alone. */
void anvil_dist_abort(int status);

/* The group of every process; valid between init and finalize. */
anvil_group *anvil_dist_world(void);
/* Collective over parent: processes passing the same color form one new
 * group, ordered by key. name labels the group in watchdog reports. */
anvil_group *anvil_group_split(anvil_group *parent, int color, int key, const char *name);
void anvil_group_free(anvil_group *g);
int anvil_group_rank(const anvil_group *g);
int anvil_group_size(const anvil_group *g);
const char *anvil_group_name(const anvil_group *g);

/* Non-blocking collectives. `what` names the operation in error and
 * watchdog messages (copied). Buffers must stay untouched until the wait.
 * Element counts are per rank of the group; counts arrays have
 * anvil_group_size entries and blocks are laid out rank after rank. */

/* Sum of buf over the group, in place. */
anvil_req *anvil_iallreduce(anvil_group *g, void *buf, size_t n, anvil_dtype t, const char *what);
/* send holds sum(counts) elements; rank r receives the sum of block r in recv. */
anvil_req *anvil_ireduce_scatter(anvil_group *g, const void *send, void *recv, const size_t *counts, anvil_dtype t,
                                 const char *what);
/* Rank r contributes counts[r] elements; every rank receives all blocks in recv. */
anvil_req *anvil_iallgather(anvil_group *g, const void *send, void *recv, const size_t *counts, anvil_dtype t,
                            const char *what);
anvil_req *anvil_ibroadcast(anvil_group *g, void *buf, size_t n, anvil_dtype t, int root, const char *what);
anvil_req *anvil_ibarrier(anvil_group *g, const char *what);
/* Point to point between two ranks of g (pipeline stages), n elements, matched by tag. Unlike the
 * collectives these are posted at once from the calling thread, not queued, so they never wait
 * behind collectives of other groups. anvil_wait polls them and, past the collective timeout,
 * aborts the job with ANVIL_EXIT_COLLECTIVE_TIMEOUT and one line naming the peer. Buffers stay
 * untouched until anvil_wait. */
anvil_req *anvil_isend(anvil_group *g, const void *buf, size_t n, anvil_dtype t, int dest, int tag, const char *what);
anvil_req *anvil_irecv(anvil_group *g, void *buf, size_t n, anvil_dtype t, int src, int tag, const char *what);

/* Waits for a request and frees it: 0, or -1 after anvil_fail when the
 * collective failed. A NULL request (submission failed) returns -1. */
int anvil_wait(anvil_req *r);

/* Blocking forms: submit and wait. */
int anvil_allreduce(anvil_group *g, void *buf, size_t n, anvil_dtype t, const char *what);
int anvil_reduce_scatter(anvil_group *g, const void *send, void *recv, const size_t *counts, anvil_dtype t,
                         const char *what);
int anvil_allgather(anvil_group *g, const void *send, void *recv, const size_t *counts, anvil_dtype t,
                    const char *what);
int anvil_broadcast(anvil_group *g, void *buf, size_t n, anvil_dtype t, int root, const char *what);
int anvil_barrier(anvil_group *g, const char *what);

size_t anvil_dtype_size(anvil_dtype t);

#endif
