/* The collective watchdog (MPI only).
 *
 * A thread polls the collective the communication thread is running. When
 * one has run longer than the timeout, the rank asks every other rank, point
 * to point on a private communicator, what it is doing, waits a short grace
 * period for the answers, prints one line naming the collective, its group
 * and the ranks that did not answer or are elsewhere, and aborts the job.
 * Every watchdog also answers such questions at any time, so a healthy rank
 * that has not yet timed out itself still reports its state. A stopped or
 * hung rank cannot answer: that silence is what names it. */
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/error.h"
#include "dist/dist_internal.h"

enum { TAG_QUERY = 1, TAG_REPLY = 2 };

typedef struct {
    int32_t rank, busy, group_size, pad;
    int64_t seq, last_done;
    double waited;
    char what[96];
    char group[32];
    char host[64];
} wd_status;

static struct {
    int running;
    pthread_t thread;
    MPI_Comm comm;
    double timeout;
    int rank, size;
    char host[64];
    char (*hosts)[64]; /* every rank's, gathered at start, to name the silent ones */
    volatile int stop;
    wd_status query_in;
    MPI_Request query_req;
    wd_status reply_out; /* the buffer of the reply being sent */
} W;

static void my_status(wd_status *s) {
    memset(s, 0, sizeof *s);
    s->rank = W.rank;
    snprintf(s->host, sizeof s->host, "%s", W.host);
    double started = 0;
    uint64_t seq = 0;
    int gs = 0;
    s->busy = dist_current_op(&seq, &started, s->what, sizeof s->what, s->group, sizeof s->group, &gs);
    s->seq = (int64_t)seq;
    s->group_size = gs;
    s->waited = s->busy ? anvil_now() - started : 0.0;
    s->last_done = (int64_t)dist_last_done();
}

/* Answers a pending question, if one arrived, and re-arms the receive. */
static void serve_queries(void) {
    int flag = 0;
    MPI_Status st;
    MPI_Test(&W.query_req, &flag, &st);
    if (!flag) return;
    my_status(&W.reply_out);
    MPI_Send(&W.reply_out, sizeof W.reply_out, MPI_BYTE, st.MPI_SOURCE, TAG_REPLY, W.comm);
    MPI_Irecv(&W.query_in, sizeof W.query_in, MPI_BYTE, MPI_ANY_SOURCE, TAG_QUERY, W.comm, &W.query_req);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...) ANVIL_PRINTF(4, 5);
static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    if (*len >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n > 0) *len += (size_t)n;
}

static void diagnose_and_abort(void) {
    wd_status me;
    my_status(&me);
    wd_status *replies = calloc((size_t)W.size, sizeof *replies);
    MPI_Request *rr = calloc((size_t)W.size, sizeof *rr);
    char *answered = calloc((size_t)W.size, 1);
    if (!replies || !rr || !answered) anvil_dist_abort(ANVIL_EXIT_COLLECTIVE_TIMEOUT);
    for (int p = 0; p < W.size; p++) {
        rr[p] = MPI_REQUEST_NULL;
        if (p == W.rank) continue;
        MPI_Request sr;
        MPI_Isend(&me, sizeof me, MPI_BYTE, p, TAG_QUERY, W.comm, &sr);
        MPI_Request_free(&sr);
        MPI_Irecv(&replies[p], sizeof replies[p], MPI_BYTE, p, TAG_REPLY, W.comm, &rr[p]);
    }
    double grace = W.timeout * 0.25;
    grace = grace < 1.0 ? 1.0 : grace > 5.0 ? 5.0 : grace;
    double until = anvil_now() + grace;
    int missing = W.size - 1;
    while (missing > 0 && anvil_now() < until) {
        serve_queries();
        for (int p = 0; p < W.size; p++) {
            if (p == W.rank || answered[p]) continue;
            int flag = 0;
            MPI_Test(&rr[p], &flag, MPI_STATUS_IGNORE);
            if (flag) {
                answered[p] = 1;
                missing--;
            }
        }
        sleep_ms(10);
    }
    char line[4096];
    size_t n = 0;
    append(line, sizeof line, &n,
           "anvil: collective timeout on rank %d (%s): %s #%lld in group '%s' (%d ranks) has not completed after %.1f s",
           W.rank, W.host, me.what, (long long)me.seq, me.group, me.group_size, me.waited);
    if (missing) {
        append(line, sizeof line, &n, "; no answer (hung, stopped or dead) from rank");
        for (int p = 0; p < W.size; p++)
            if (p != W.rank && !answered[p]) append(line, sizeof line, &n, " %d (%s)", p, W.hosts[p]);
    }
    for (int p = 0; p < W.size; p++) {
        if (p == W.rank || !answered[p]) continue;
        wd_status *s = &replies[p];
        if (s->busy && s->seq == me.seq) continue;
        if (s->busy)
            append(line, sizeof line, &n, "; rank %d (%s) is in %s #%lld for %.1f s", p, s->host, s->what,
                   (long long)s->seq, s->waited);
        else
            append(line, sizeof line, &n, "; rank %d (%s) is computing after #%lld", p, s->host,
                   (long long)s->last_done);
    }
    append(line, sizeof line, &n, "; aborting the job (exit %d)", ANVIL_EXIT_COLLECTIVE_TIMEOUT);
    fprintf(stderr, "%s\n", line);
    anvil_dist_abort(ANVIL_EXIT_COLLECTIVE_TIMEOUT);
}

static void *watchdog_thread(void *arg) {
    (void)arg;
    while (!W.stop) {
        serve_queries();
        double started = 0;
        uint64_t seq = 0;
        int gs = 0;
        char what[96], group[32];
        if (dist_current_op(&seq, &started, what, sizeof what, group, sizeof group, &gs) &&
            anvil_now() - started > W.timeout)
            diagnose_and_abort();
        sleep_ms(20);
    }
    return NULL;
}

int dist_watchdog_start(double timeout_s, const char *host) {
    W.timeout = timeout_s;
    snprintf(W.host, sizeof W.host, "%s", host);
    MPI_Comm_dup(MPI_COMM_WORLD, &W.comm);
    MPI_Comm_rank(W.comm, &W.rank);
    MPI_Comm_size(W.comm, &W.size);
    W.hosts = calloc((size_t)W.size, sizeof *W.hosts);
    if (!W.hosts) return anvil_fail("dist: out of memory for the host table");
    MPI_Allgather(W.host, sizeof W.host, MPI_CHAR, W.hosts, sizeof W.host, MPI_CHAR, W.comm);
    MPI_Irecv(&W.query_in, sizeof W.query_in, MPI_BYTE, MPI_ANY_SOURCE, TAG_QUERY, W.comm, &W.query_req);
    W.stop = 0;
    if (pthread_create(&W.thread, NULL, watchdog_thread, NULL)) {
        MPI_Cancel(&W.query_req);
        MPI_Wait(&W.query_req, MPI_STATUS_IGNORE);
        MPI_Comm_free(&W.comm);
        return anvil_fail("dist: cannot start the watchdog thread");
    }
    W.running = 1;
    return 0;
}

void dist_watchdog_stop(void) {
    if (!W.running) return;
    W.stop = 1;
    pthread_join(W.thread, NULL);
    MPI_Cancel(&W.query_req);
    MPI_Wait(&W.query_req, MPI_STATUS_IGNORE);
    MPI_Comm_free(&W.comm);
    free(W.hosts);
    W.hosts = NULL;
    W.running = 0;
}
