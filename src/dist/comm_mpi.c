/* The Open MPI backend: runs each collective as one blocking MPI call on the
 * communication thread, which gives real overlap with the caller's compute
 * (MPI progresses inside the call) without polling from the training loop. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/dist_internal.h"

static MPI_Datatype mpi_type(anvil_dtype t) {
    switch (t) {
    case ANVIL_F32: return MPI_FLOAT;
    case ANVIL_F64: return MPI_DOUBLE;
    case ANVIL_I64: return MPI_INT64_T;
    default: return MPI_BYTE;
    }
}

static MPI_Comm comm_of(const anvil_group *g) { return *(MPI_Comm *)g->impl; }

static int mpi_error(struct anvil_req *r, int code) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    snprintf(r->err, sizeof r->err, "%s", msg);
    return -1;
}

/* MPI counts are int: a vector collective needs every count and every
 * displacement to fit, so it is refused beyond that (2^31 elements per
 * call, 8 GB of floats) rather than silently wrapped. */
static int to_int_counts(struct anvil_req *r, int **counts, int **displs) {
    int n = r->g->size;
    *counts = malloc((size_t)n * sizeof(int));
    *displs = malloc((size_t)n * sizeof(int));
    if (!*counts || !*displs) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (r->counts[i] > INT_MAX || off > INT_MAX) {
            snprintf(r->err, sizeof r->err, "a block of %zu elements at offset %zu exceeds MPI's int counts",
                     r->counts[i], off);
            return -1;
        }
        (*counts)[i] = (int)r->counts[i];
        (*displs)[i] = (int)off;
        off += r->counts[i];
    }
    return 0;
}

static int mpi_run(struct anvil_req *r) {
    MPI_Comm c = comm_of(r->g);
    MPI_Datatype dt = mpi_type(r->t);
    size_t es = anvil_dtype_size(r->t);
    int rc = MPI_SUCCESS;
    switch (r->kind) {
    case OP_ALLREDUCE:
        /* In pieces of at most 2^30 elements so that counts fit an int. */
        for (size_t off = 0; off < r->n && rc == MPI_SUCCESS; off += (size_t)1 << 30) {
            size_t len = r->n - off < ((size_t)1 << 30) ? r->n - off : (size_t)1 << 30;
            rc = MPI_Allreduce(MPI_IN_PLACE, (char *)r->buf + off * es, (int)len, dt, MPI_SUM, c);
        }
        break;
    case OP_BROADCAST:
        for (size_t off = 0; off < r->n && rc == MPI_SUCCESS; off += (size_t)1 << 30) {
            size_t len = r->n - off < ((size_t)1 << 30) ? r->n - off : (size_t)1 << 30;
            rc = MPI_Bcast((char *)r->buf + off * es, (int)len, dt, r->root, c);
        }
        break;
    case OP_BARRIER: rc = MPI_Barrier(c); break;
    case OP_REDUCE_SCATTER:
    case OP_ALLGATHER: {
        int *counts = NULL, *displs = NULL;
        if (to_int_counts(r, &counts, &displs)) {
            free(counts);
            free(displs);
            return -1;
        }
        if (r->kind == OP_REDUCE_SCATTER)
            rc = MPI_Reduce_scatter(r->send, r->recv, counts, dt, MPI_SUM, c);
        else
        {
            /* A rank whose block already sits in place in recv sends nothing extra. */
            const char *mine = (const char *)r->recv + (size_t)displs[r->g->rank] * es;
            rc = MPI_Allgatherv(r->send == mine ? MPI_IN_PLACE : r->send, counts[r->g->rank], dt, r->recv, counts,
                                displs, dt, c);
        }
        free(counts);
        free(displs);
        break;
    }
    case OP_SPLIT: {
        anvil_group *g = calloc(1, sizeof *g);
        MPI_Comm *nc = malloc(sizeof *nc);
        if (!g || !nc) {
            free(g);
            free(nc);
            snprintf(r->err, sizeof r->err, "out of memory");
            return -1;
        }
        rc = MPI_Comm_split(c, r->color, r->key, nc);
        if (rc != MPI_SUCCESS) {
            free(g);
            free(nc);
            break;
        }
        MPI_Comm_set_errhandler(*nc, MPI_ERRORS_RETURN);
        MPI_Comm_rank(*nc, &g->rank);
        MPI_Comm_size(*nc, &g->size);
        g->impl = nc;
        r->result = g;
        break;
    }
    case OP_SEND:
    case OP_RECV: snprintf(r->err, sizeof r->err, "point to point is not queued"); return -1;
    }
    return rc == MPI_SUCCESS ? 0 : mpi_error(r, rc);
}

static void mpi_group_free(anvil_group *g) {
    if (!g->impl) return;
    MPI_Comm_free((MPI_Comm *)g->impl);
    free(g->impl);
    g->impl = NULL;
}

/* Messages larger than an int count are not needed by pipeline stages (one activation, B*T*C floats). */
static int mpi_p2p_start(struct anvil_req *r) {
    if (r->n > INT_MAX) {
        snprintf(r->err, sizeof r->err, "%zu elements exceed MPI's int counts", r->n);
        return -1;
    }
    MPI_Request *q = malloc(sizeof *q);
    if (!q) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    r->handle = q;
    int rc = r->kind == OP_SEND ? MPI_Isend(r->buf, (int)r->n, mpi_type(r->t), r->peer, r->tag, comm_of(r->g), q)
                                : MPI_Irecv(r->buf, (int)r->n, mpi_type(r->t), r->peer, r->tag, comm_of(r->g), q);
    return rc == MPI_SUCCESS ? 0 : mpi_error(r, rc);
}

static int mpi_p2p_test(struct anvil_req *r, int *done) {
    int rc = MPI_Test((MPI_Request *)r->handle, done, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? 0 : mpi_error(r, rc);
}

const dist_backend dist_mpi_backend = {"mpi", mpi_run, mpi_group_free, mpi_p2p_start, mpi_p2p_test};

static MPI_Comm world_comm;
static anvil_group world_group = {.be = &dist_mpi_backend, .name = "world"};

int dist_mpi_init(anvil_group **world, char *host, size_t hostcap) {
    int provided = 0;
    /* The communication thread makes every collective; the watchdog thread
     * talks point to point on its own communicator at the same time. */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return anvil_fail("dist: MPI_Init_thread failed");
    if (provided < MPI_THREAD_MULTIPLE) {
        MPI_Finalize();
        return anvil_fail("dist: this MPI library lacks MPI_THREAD_MULTIPLE (got level %d)", provided);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &world_comm);
    MPI_Comm_set_errhandler(world_comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(world_comm, &world_group.rank);
    MPI_Comm_size(world_comm, &world_group.size);
    world_group.impl = &world_comm;
    int len = 0;
    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_Get_processor_name(name, &len);
    snprintf(host, hostcap, "%s", name);
    *world = &world_group;
    return 0;
}

void dist_mpi_finalize(void) {
    MPI_Comm_free(&world_comm);
    MPI_Finalize();
}

void dist_mpi_abort(int status) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
}
