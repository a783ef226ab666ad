/* The front end of src/dist: requests, the submission queue and the
 * communication thread, and the world-of-one backend. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "dist/dist_internal.h"
#include "obs/trace.h"

static struct {
    int up;
    const dist_backend *be;
    anvil_group *world;
    char host[64];
    int threaded; /* a communication thread runs the queue (MPI); otherwise collectives run inline */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* queue non-empty, or stop */
    pthread_cond_t done_cv; /* some request completed */
    struct anvil_req *head, *tail;
    int stop;
    uint64_t next_seq, last_done;
    struct anvil_req *running;
    double running_since;
    double timeout_s; /* for point to point, which the watchdog does not see; <= 0: none */
} D = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .done_cv = PTHREAD_COND_INITIALIZER};

size_t anvil_dtype_size(anvil_dtype t) {
    switch (t) {
    case ANVIL_F32: return 4;
    case ANVIL_F64: case ANVIL_I64: return 8;
    default: return 1;
    }
}

static const char *op_name(dist_op_kind k) {
    static const char *const names[] = {"all-reduce", "reduce-scatter", "all-gather", "broadcast",
                                        "barrier",    "split",          "send",       "receive"};
    return names[k];
}

/* Bytes a collective moves through this rank: the buffer, or every block. */
static double op_bytes(const struct anvil_req *r) {
    size_t n = r->n;
    if (r->kind == OP_REDUCE_SCATTER || r->kind == OP_ALLGATHER) {
        n = 0;
        for (int i = 0; i < r->g->size; i++) n += r->counts[i];
    }
    return r->kind == OP_BARRIER || r->kind == OP_SPLIT ? 0 : (double)(n * anvil_dtype_size(r->t));
}

/* The collective's span (cat: comm, or comm_wait for the caller's wait on it), when profiling. */
static void trace_op(const struct anvil_req *r, double t0, const char *cat) {
    if (t0 < 0) return;
    char name[96];
    snprintf(name, sizeof name, "%s%s '%s'", strcmp(cat, "comm") ? "wait " : "", op_name(r->kind), r->what);
    anvil_trace_end(t0, cat, name, -1, op_bytes(r));
}

/* Runs a collective, traced. */
static int run_op(struct anvil_req *r) {
    double t0 = anvil_trace_begin();
    int rc = r->g->be->run(r);
    trace_op(r, t0, "comm");
    return rc;
}

static int local_run(struct anvil_req *r) {
    size_t es = anvil_dtype_size(r->t);
    switch (r->kind) {
    case OP_REDUCE_SCATTER:
    case OP_ALLGATHER:
        if (r->recv != r->send) memmove(r->recv, r->send, r->counts[0] * es);
        return 0;
    case OP_SPLIT: {
        anvil_group *g = calloc(1, sizeof *g);
        if (!g) {
            snprintf(r->err, sizeof r->err, "out of memory");
            return -1;
        }
        g->size = 1;
        r->result = g;
        return 0;
    }
    default: return 0; /* a sum, broadcast or barrier over one process changes nothing */
    }
}

static void local_group_free(anvil_group *g) { (void)g; }

/* A world of one has no peer to talk to. */
static int local_p2p(struct anvil_req *r) {
    snprintf(r->err, sizeof r->err, "no peer rank %d in a group of one", r->peer);
    return -1;
}

static int local_p2p_test(struct anvil_req *r, int *done) {
    *done = 1;
    return local_p2p(r);
}

const dist_backend dist_local_backend = {"local", local_run, local_group_free, local_p2p, local_p2p_test};

static void *comm_thread(void *arg) {
    (void)arg;
    anvil_trace_thread_name("comm");
    pthread_mutex_lock(&D.mu);
    for (;;) {
        while (!D.head && !D.stop) pthread_cond_wait(&D.cv, &D.mu);
        if (!D.head) break;
        struct anvil_req *r = D.head;
        D.head = r->next;
        if (!D.head) D.tail = NULL;
        D.running = r;
        D.running_since = anvil_now();
        pthread_mutex_unlock(&D.mu);
        int rc = run_op(r);
        pthread_mutex_lock(&D.mu);
        r->rc = rc;
        r->done = 1;
        D.running = NULL;
        D.last_done = r->seq;
        pthread_cond_broadcast(&D.done_cv);
    }
    pthread_mutex_unlock(&D.mu);
    return NULL;
}

int dist_current_op(uint64_t *seq, double *started, char *what, size_t whatcap, char *group, size_t groupcap,
                    int *group_size) {
    pthread_mutex_lock(&D.mu);
    struct anvil_req *r = D.running;
    if (r) {
        *seq = r->seq;
        *started = D.running_since;
        snprintf(what, whatcap, "%s '%s'", op_name(r->kind), r->what);
        snprintf(group, groupcap, "%s", r->g->name);
        *group_size = r->g->size;
    }
    pthread_mutex_unlock(&D.mu);
    return r != NULL;
}

uint64_t dist_last_done(void) {
    pthread_mutex_lock(&D.mu);
    uint64_t s = D.last_done;
    pthread_mutex_unlock(&D.mu);
    return s;
}

int anvil_dist_init(const anvil_dist_config *cfg) {
    if (D.up) return 0;
    /* srun --mpi=pmix starts the ranks directly: they see PMIx's variables, not mpirun's. */
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE"), *pmix = getenv("PMIX_RANK");
    if ((ws && *ws) || (pmix && *pmix)) {
        if (dist_mpi_init(&D.world, D.host, sizeof D.host)) return -1;
        D.be = &dist_mpi_backend;
        D.threaded = 1;
        D.stop = 0;
        if (pthread_create(&D.thread, NULL, comm_thread, NULL)) {
            dist_mpi_finalize();
            return anvil_fail("dist: cannot start the communication thread");
        }
        D.timeout_s = cfg ? cfg->timeout_s : 0.0;
        if (cfg && cfg->timeout_s > 0 && dist_watchdog_start(cfg->timeout_s, D.host)) {
            anvil_dist_finalize();
            return -1;
        }
    } else {
        static anvil_group world1 = {.be = &dist_local_backend, .size = 1, .name = "world"};
        D.world = &world1;
        D.be = &dist_local_backend;
        D.threaded = 0;
        if (gethostname(D.host, sizeof D.host - 1)) snprintf(D.host, sizeof D.host, "localhost");
    }
    D.up = 1;
    return 0;
}

void anvil_dist_finalize(void) {
    if (!D.be) return;
    if (D.threaded) {
        pthread_mutex_lock(&D.mu);
        D.stop = 1;
        pthread_cond_broadcast(&D.cv);
        pthread_mutex_unlock(&D.mu);
        pthread_join(D.thread, NULL);
        dist_watchdog_stop();
        dist_mpi_finalize();
    }
    D.be = NULL;
    D.world = NULL;
    D.up = 0;
}

int anvil_dist_is_mpi(void) { return D.be == &dist_mpi_backend; }
int anvil_dist_rank(void) { return D.world ? D.world->rank : 0; }
int anvil_dist_world_size(void) { return D.world ? D.world->size : 1; }
const char *anvil_dist_host(void) { return D.host; }
anvil_group *anvil_dist_world(void) { return D.world; }

void anvil_dist_host_key(char *out, size_t cap) {
    const char *list = getenv("ANVIL_HOST_KEY");
    if (!list || !list[0]) {
        snprintf(out, cap, "%s", D.host);
        return;
    }
    const char *k = list;
    for (int i = 0; i < anvil_dist_rank(); i++) {
        const char *comma = strchr(k, ',');
        if (!comma) break;
        k = comma + 1;
    }
    snprintf(out, cap, "%.*s", (int)strcspn(k, ","), k);
}

#define HOST_KEY_BYTES 64

int anvil_dist_host_leaders(int *leader) {
    int world = anvil_dist_world_size();
    char *keys = calloc((size_t)world, HOST_KEY_BYTES);
    size_t *counts = malloc((size_t)world * sizeof *counts);
    if (!keys || !counts) {
        free(keys);
        free(counts);
        return anvil_fail("host keys: out of memory");
    }
    char mine[HOST_KEY_BYTES] = {0};
    anvil_dist_host_key(mine, sizeof mine);
    for (int r = 0; r < world; r++) counts[r] = HOST_KEY_BYTES;
    int rc = world > 1 ? anvil_allgather(D.world, mine, keys, counts, ANVIL_U8, "host keys") : 0;
    if (world == 1) memcpy(keys, mine, sizeof mine);
    for (int r = 0; !rc && r < world; r++) {
        int q = 0;
        while (strncmp(keys + (size_t)q * HOST_KEY_BYTES, keys + (size_t)r * HOST_KEY_BYTES, HOST_KEY_BYTES)) q++;
        leader[r] = q;
    }
    free(keys);
    free(counts);
    return rc;
}
int anvil_group_rank(const anvil_group *g) { return g->rank; }
int anvil_group_size(const anvil_group *g) { return g->size; }
const char *anvil_group_name(const anvil_group *g) { return g->name; }

void anvil_dist_abort(int status) {
    if (anvil_dist_is_mpi()) dist_mpi_abort(status);
    exit(status);
}

static struct anvil_req *req_new(dist_op_kind kind, anvil_group *g, anvil_dtype t, const char *what) {
    if (!D.up || !g) {
        anvil_fail("dist: %s '%s' before anvil_dist_init", op_name(kind), what);
        return NULL;
    }
    struct anvil_req *r = calloc(1, sizeof *r);
    if (!r) {
        anvil_fail("dist: out of memory for a request");
        return NULL;
    }
    r->kind = kind;
    r->g = g;
    r->t = t;
    snprintf(r->what, sizeof r->what, "%s", what ? what : "");
    return r;
}

static anvil_req *submit(struct anvil_req *r) {
    if (!r) return NULL;
    if (!D.threaded) {
        r->seq = ++D.next_seq;
        r->rc = run_op(r);
        r->done = 1;
        D.last_done = r->seq;
        return r;
    }
    pthread_mutex_lock(&D.mu);
    r->seq = ++D.next_seq;
    if (D.tail) D.tail->next = r;
    else D.head = r;
    D.tail = r;
    pthread_cond_signal(&D.cv);
    pthread_mutex_unlock(&D.mu);
    return r;
}

static int copy_counts(struct anvil_req *r, const size_t *counts) {
    r->counts = malloc((size_t)r->g->size * sizeof *counts);
    if (!r->counts) return anvil_fail("dist: out of memory for counts");
    memcpy(r->counts, counts, (size_t)r->g->size * sizeof *counts);
    return 0;
}

/* Waits for a request without freeing it: 0, or -1 after anvil_fail. */
static int wait_done(struct anvil_req *r) {
    if (D.threaded) {
        double t0 = anvil_trace_begin();
        pthread_mutex_lock(&D.mu);
        while (!r->done) pthread_cond_wait(&D.done_cv, &D.mu);
        pthread_mutex_unlock(&D.mu);
        trace_op(r, t0, "comm_wait");
    }
    if (!r->rc) return 0;
    return anvil_fail("dist: %s '%s' in group '%s' failed on rank %d: %s", op_name(r->kind), r->what, r->g->name,
                      anvil_dist_rank(), r->err);
}

static void req_free(struct anvil_req *r) {
    free(r->counts);
    free(r->handle);
    free(r);
}

/* Polls a send or receive to completion. Past the collective timeout the job is aborted as the
 * watchdog would (exit 76), with one line naming the peer that never matched it: point to point is
 * not on the communication thread, so the watchdog does not see it. */
static int p2p_wait(struct anvil_req *r) {
    double start = anvil_now();
    for (int done = 0;;) {
        if (r->g->be->p2p_test(r, &done)) return -1;
        if (done) return 0;
        if (D.timeout_s > 0 && anvil_now() - start > D.timeout_s) {
            fprintf(stderr,
                    "anvil: point-to-point timeout on rank %d (%s): %s '%s' %s rank %d of group '%s' has not "
                    "completed after %.1f s; aborting the job (exit %d)\n",
                    anvil_dist_rank(), D.host, op_name(r->kind), r->what, r->kind == OP_SEND ? "to" : "from",
                    r->peer, r->g->name, D.timeout_s, ANVIL_EXIT_COLLECTIVE_TIMEOUT);
            anvil_dist_abort(ANVIL_EXIT_COLLECTIVE_TIMEOUT);
        }
        usleep(20);
    }
}

int anvil_wait(anvil_req *r) {
    if (!r) return -1;
    int rc;
    if (r->kind == OP_SEND || r->kind == OP_RECV) {
        double t0 = anvil_trace_begin();
        rc = p2p_wait(r);
        trace_op(r, t0, "comm_wait");
        if (rc)
            anvil_fail("dist: %s '%s' in group '%s' failed on rank %d: %s", op_name(r->kind), r->what, r->g->name,
                       anvil_dist_rank(), r->err);
    } else {
        rc = wait_done(r);
    }
    req_free(r);
    return rc;
}

anvil_req *anvil_iallreduce(anvil_group *g, void *buf, size_t n, anvil_dtype t, const char *what) {
    struct anvil_req *r = req_new(OP_ALLREDUCE, g, t, what);
    if (r) {
        r->buf = buf;
        r->n = n;
    }
    return submit(r);
}

/* Reduce-scatter and all-gather: a send buffer, a receive buffer and a block per rank. */
static anvil_req *vector_op(dist_op_kind kind, anvil_group *g, const void *send, void *recv, const size_t *counts,
                            anvil_dtype t, const char *what) {
    struct anvil_req *r = req_new(kind, g, t, what);
    if (!r) return NULL;
    if (copy_counts(r, counts)) {
        free(r);
        return NULL;
    }
    r->send = send;
    r->recv = recv;
    return submit(r);
}

anvil_req *anvil_ireduce_scatter(anvil_group *g, const void *send, void *recv, const size_t *counts, anvil_dtype t,
                                 const char *what) {
    return vector_op(OP_REDUCE_SCATTER, g, send, recv, counts, t, what);
}

anvil_req *anvil_iallgather(anvil_group *g, const void *send, void *recv, const size_t *counts, anvil_dtype t,
                            const char *what) {
    return vector_op(OP_ALLGATHER, g, send, recv, counts, t, what);
}

anvil_req *anvil_ibroadcast(anvil_group *g, void *buf, size_t n, anvil_dtype t, int root, const char *what) {
    struct anvil_req *r = req_new(OP_BROADCAST, g, t, what);
    if (r) {
        r->buf = buf;
        r->n = n;
        r->root = root;
    }
    return submit(r);
}

/* Point to point is posted at once from the caller's thread rather than queued: a pipeline stage's
 * sends and receives must not wait behind collectives of other groups, nor hold them up. */
static anvil_req *p2p(dist_op_kind kind, anvil_group *g, void *buf, size_t n, anvil_dtype t, int peer, int tag,
                      const char *what) {
    struct anvil_req *r = req_new(kind, g, t, what);
    if (!r) return NULL;
    r->buf = buf;
    r->n = n;
    r->peer = peer;
    r->tag = tag;
    if (peer < 0 || peer >= g->size || peer == g->rank) {
        anvil_fail("dist: %s '%s' in group '%s' to or from rank %d of %d", op_name(kind), r->what, g->name, peer,
                   g->size);
        free(r);
        return NULL;
    }
    if (g->be->p2p_start(r)) {
        anvil_fail("dist: %s '%s' in group '%s' failed on rank %d: %s", op_name(kind), r->what, g->name,
                   anvil_dist_rank(), r->err);
        free(r->handle);
        free(r);
        return NULL;
    }
    return r;
}

anvil_req *anvil_isend(anvil_group *g, const void *buf, size_t n, anvil_dtype t, int dest, int tag, const char *what) {
    return p2p(OP_SEND, g, (void *)buf, n, t, dest, tag, what);
}

anvil_req *anvil_irecv(anvil_group *g, void *buf, size_t n, anvil_dtype t, int src, int tag, const char *what) {
    return p2p(OP_RECV, g, buf, n, t, src, tag, what);
}

anvil_req *anvil_ibarrier(anvil_group *g, const char *what) { return submit(req_new(OP_BARRIER, g, ANVIL_U8, what)); }

int anvil_allreduce(anvil_group *g, void *buf, size_t n, anvil_dtype t, const char *what) {
    return anvil_wait(anvil_iallreduce(g, buf, n, t, what));
}
int anvil_reduce_scatter(anvil_group *g, const void *send, void *recv, const size_t *counts, anvil_dtype t,
                         const char *what) {
    return anvil_wait(anvil_ireduce_scatter(g, send, recv, counts, t, what));
}
int anvil_allgather(anvil_group *g, const void *send, void *recv, const size_t *counts, anvil_dtype t,
                    const char *what) {
    return anvil_wait(anvil_iallgather(g, send, recv, counts, t, what));
}
int anvil_broadcast(anvil_group *g, void *buf, size_t n, anvil_dtype t, int root, const char *what) {
    return anvil_wait(anvil_ibroadcast(g, buf, n, t, root, what));
}
int anvil_barrier(anvil_group *g, const char *what) { return anvil_wait(anvil_ibarrier(g, what)); }

anvil_group *anvil_group_split(anvil_group *parent, int color, int key, const char *name) {
    struct anvil_req *r = req_new(OP_SPLIT, parent, ANVIL_U8, name);
    if (!r) return NULL;
    r->color = color;
    r->key = key;
    submit(r);
    int rc = wait_done(r);
    anvil_group *result = r->result;
    req_free(r);
    if (rc) return NULL;
    result->be = parent->be;
    snprintf(result->name, sizeof result->name, "%s", name);
    return result;
}

void anvil_group_free(anvil_group *g) {
    if (!g || g == D.world) return;
    if (D.be) g->be->group_free(g);
    free(g);
}
