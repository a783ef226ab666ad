/* The API's HTTP side: libmicrohttpd gathers each request (its body up to the cap, its query and
 * Authorization header) and sends what anvil_api_handle answers.
 *
 * Connections that neither a stranger nor a token holder can exhaust: libmicrohttpd caps them all
 * (CONNECTION_LIMIT), per address below that (PER_IP_CONNECTION_LIMIT), and closes one idle for
 * CONNECTION_TIMEOUT. It has no deadline for a whole request (its timeout restarts with every byte,
 * so a header line or a byte of body every few seconds holds a connection for ever) and no notion
 * of who is authenticated; both are kept here, in a list of the open connections:
 *   - a whole request, head and body, must arrive within REQUEST_DEADLINE_S of the connection's
 *     start or of the last answer (a reaper thread shuts down the late ones);
 *   - the connections without a valid token are at most UNAUTH_POOL: a new one beyond it evicts the
 *     oldest of them;
 *   - the connections that wait on their client (for a request, or the rest of one) are at most
 *     LIVE_POOL, below the per-address cap (every client of a daemon on 127.0.0.1 shares one
 *     address): a new one beyond it evicts the oldest of those. One being answered is never
 *     evicted.
 * A new connection is the youngest, and a client that sends its request at once is answered while
 * any number of slow ones, with a token or without, come and go.
 *
 * Every 401 is recorded in the audit trail through a rate limit per client address
 * (job/audit.h's limiter), whose summaries the reaper writes. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/clock.h"
#include "core/error.h"
#include "job/api_internal.h"
#include "job/audit.h"
#include "job/auth.h"
#include "job/spec.h"

#define CONNECTION_LIMIT 256u
#define PER_IP_CONNECTION_LIMIT 128u
#define UNAUTH_POOL 64
#define LIVE_POOL 64
#define IDLE_TIMEOUT_S 30u
#define REQUEST_DEADLINE_S 10.0
/* More query parameters than any route takes; libmicrohttpd, whose memory for a connection they
 * would exhaust, could then not even answer. */
#define MAX_QUERY_ARGS 64

/* One open connection. */
typedef struct conn {
    struct conn *prev, *next;
    MHD_socket fd;
    double since;   /* its start, or the end of its last answer */
    bool answering; /* its request is in and being answered: the deadline stops, and it is not evicted */
    bool authed;    /* its last request carried a valid token */
    bool shut;      /* shut down already (evicted or late) */
} conn;

struct anvil_api {
    struct MHD_Daemon *d;
    anvil_api_env env;
    char *runs_dir;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    conn *oldest, *newest;
    int unauth, live; /* connections without a valid token; those not shut */
    anvil_audit_limiter *limiter;
    bool quit;
    pthread_t reaper;
    bool reaper_started;
};


/* libmicrohttpd then sees the connection end and closes it; the descriptor stays its own until
 * then, and it tells us (MHD_CONNECTION_NOTIFY_CLOSED, under mu) before it closes it. */
static void shut(anvil_api *api, conn *c) {
    if (c->shut) return;
    shutdown(c->fd, SHUT_RDWR);
    c->shut = true;
    api->live--;
}

/* The oldest connection other than c that waits on its client; NULL: none. By age alone: a new
 * connection is nobody's yet (its head, with its token, has not come), and it must outlive the slow
 * ones that came before it, with a token or without. */
static conn *evictable(anvil_api *api, const conn *c) {
    for (conn *o = api->oldest; o; o = o->next)
        if (o != c && !o->shut && !o->answering) return o;
    return NULL;
}

/* Room for c: a stranger beyond UNAUTH_POOL evicts the oldest stranger, a connection beyond LIVE_POOL
 * the oldest that waits on its client. */
static void make_room(anvil_api *api, conn *c) {
    if (api->unauth > UNAUTH_POOL)
        for (conn *o = api->oldest; o != c; o = o->next)
            if (!o->authed && !o->shut) {
                shut(api, o);
                break;
            }
    conn *o = api->live > LIVE_POOL ? evictable(api, c) : NULL;
    if (o) shut(api, o);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    anvil_api *api = cls;
    pthread_mutex_lock(&api->mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn *c = fd ? calloc(1, sizeof *c) : NULL;
        if (c) {
            *c = (conn){.prev = api->newest, .fd = fd->connect_fd, .since = anvil_now()};
            if (api->newest) api->newest->next = c;
            else api->oldest = c;
            api->newest = c;
            api->unauth++;
            api->live++;
            make_room(api, c);
        }
        *socket_context = c;
    } else if (*socket_context) {
        conn *c = *socket_context;
        if (c->prev) c->prev->next = c->next;
        else api->oldest = c->next;
        if (c->next) c->next->prev = c->prev;
        else api->newest = c->prev;
        if (!c->authed) api->unauth--;
        if (!c->shut) api->live--;
        free(c);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&api->mu);
}

static conn *conn_of(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

/* The request head is in: the connection counts as authenticated while its requests carry a valid
 * token. Its deadline runs on until the whole request is in. */
static void head_done(anvil_api *api, struct MHD_Connection *mc, bool authed) {
    pthread_mutex_lock(&api->mu);
    conn *c = conn_of(mc);
    if (c) {
        if (authed != c->authed) api->unauth += authed ? -1 : 1;
        c->authed = authed;
    }
    pthread_mutex_unlock(&api->mu);
}

/* Shuts down the connections whose request is late and writes the audit trail's summaries of the
 * 401s it did not record one by one, four times a second. */
static void *reap(void *arg) {
    anvil_api *api = arg;
    pthread_mutex_lock(&api->mu);
    while (!api->quit) {
        double now = anvil_now();
        for (conn *c = api->oldest; c; c = c->next)
            if (!c->answering && now - c->since > REQUEST_DEADLINE_S) shut(api, c);
        pthread_mutex_unlock(&api->mu);
        if (anvil_audit_limiter_flush(api->limiter, api->env.st, now) < 0)
            api_report(&api->env, "warning: audit: %s", anvil_errmsg());
        pthread_mutex_lock(&api->mu);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 250 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&api->cv, &api->mu, &until);
    }
    pthread_mutex_unlock(&api->mu);
    return NULL;
}

/* A request's state: its body, gathered across calls (too_big once it passes the cap, the rest
 * dropped), and what was seen of it before. */
typedef struct {
    char *data;
    size_t len;
    bool too_big, started;
    int query_args; /* > MAX_QUERY_ARGS: refused, the query cut off before libmicrohttpd parsed it */
} body;

/* Called with the request line, before libmicrohttpd splits the query into parameters (in place,
 * in this very buffer, right after this returns: libmicrohttpd 0.9.75, connection.c,
 * parse_initial_message_line). A query with more parameters than any route takes is cut off here
 * and refused by the handler: parsed, it could exhaust the connection's memory, and then no answer
 * could be sent. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *mc) {
    (void)cls;
    (void)mc;
    body *b = calloc(1, sizeof *b);
    char *q = strchr(uri, '?');
    if (!b || !q) return b;
    b->query_args = 1;
    for (const char *p = q; *p; p++) b->query_args += *p == '&';
    if (b->query_args > MAX_QUERY_ARGS) q[1] = 0;
    return b;
}

typedef struct {
    anvil_api_arg *args;
    int n, cap;
} arg_list;

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    arg_list *l = cls;
    if (l->n < l->cap) l->args[l->n++] = (anvil_api_arg){key, value};
    return MHD_YES;
}

static const char oom_text[] = "{\"error\":\"out of memory\"}\n";

/* Sends the answer; out of memory, a static 500 rather than no answer. */
static enum MHD_Result send_answer(struct MHD_Connection *c, anvil_api_response *rs, bool close) {
    struct MHD_Response *r = rs->body ? MHD_create_response_from_buffer(rs->len, rs->body, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!r) {
        free(rs->body);
        r = MHD_create_response_from_buffer(sizeof oom_text - 1, (void *)oom_text, MHD_RESPMEM_PERSISTENT);
        rs->status = 500;
        rs->content_type = NULL;
        if (!r) return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", rs->content_type ? rs->content_type : "application/json");
    if (rs->status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    /* A connection without a valid token gets no second request. */
    if (close) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(c, rs->status, r);
    MHD_destroy_response(r);
    return rc;
}

/* The client's address as text ("" when unknown). */
static void peer_of(struct MHD_Connection *c, char *out, size_t cap) {
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = i ? i->client_addr : NULL;
    out[0] = 0;
    if (sa && sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)cap);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)cap);
}

/* The request is in: it is answered, out of the deadline's and the evictions' reach. */
static enum MHD_Result answer(struct MHD_Connection *c, anvil_api *api, const char *url, const char *method,
                              const body *b, bool authed) {
    pthread_mutex_lock(&api->mu);
    conn *k = conn_of(c);
    if (k) k->answering = true;
    pthread_mutex_unlock(&api->mu);
    char peer[INET6_ADDRSTRLEN];
    peer_of(c, peer, sizeof peer);
    arg_list args = {0};
    int n = MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, NULL, NULL);
    if (n > 0 && (args.args = calloc((size_t)n, sizeof *args.args))) args.cap = n;
    if (args.cap) MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_arg, &args);
    anvil_api_request rq = {
        .method = method,
        .path = url,
        .args = args.args,
        .nargs = args.n,
        .query_args = b->query_args > MAX_QUERY_ARGS ? b->query_args : 0,
        .authorization = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
        .body = b->data,
        .body_len = b->len,
        .body_too_big = b->too_big,
        .peer = peer,
    };
    anvil_api_response rs;
    double t0 = anvil_now();
    if (n > 0 && !args.cap) {
        rs = (anvil_api_response){.status = 500, .action = "request"};
    } else {
        anvil_api_handle(&api->env, &rq, &rs);
    }
    anvil_api_stats_observe(api->env.stats, rs.action, rs.status, anvil_now() - t0);
    free(args.args);
    return send_answer(c, &rs, !authed);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **state) {
    (void)version;
    anvil_api *api = cls;
    body *b = *state;
    if (!b && !(b = *state = calloc(1, sizeof *b))) return MHD_NO;
    if (!b->started) {
        b->started = true;
        anvil_principal who;
        char why[256];
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        bool authed = anvil_auth_check(api->env.st, auth, &who, why, sizeof why) == 0;
        head_done(api, c, authed);
        /* Without a valid token the answer is 401 whatever the body: it is not read. The dashboard
         * page alone needs none. */
        bool page = !strcmp(url, "/") && !strcmp(method, "GET");
        if (!authed && !page) return answer(c, api, url, method, b, false);
        /* A declared length past the cap is refused before the body is read. */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > ANVIL_JOB_SPEC_MAX_BYTES) b->too_big = true;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!b->too_big && b->len + *upload_size <= ANVIL_JOB_SPEC_MAX_BYTES) {
            char *grown = realloc(b->data, b->len + *upload_size + 1);
            if (!grown) return MHD_NO;
            memcpy(grown + b->len, upload, *upload_size);
            b->data = grown;
            b->len += *upload_size;
        } else {
            b->too_big = true;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    pthread_mutex_lock(&api->mu);
    conn *k = conn_of(c);
    bool authed = k && k->authed;
    pthread_mutex_unlock(&api->mu);
    return answer(c, api, url, method, b, authed);
}

/* The answer is out: the connection waits for its next request, within the deadline. */
static void completed(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode why) {
    anvil_api *api = cls;
    (void)why;
    body *b = *state;
    if (b) free(b->data);
    free(b);
    *state = NULL;
    pthread_mutex_lock(&api->mu);
    conn *k = conn_of(c);
    if (k) {
        k->answering = false;
        k->since = anvil_now();
    }
    pthread_mutex_unlock(&api->mu);
}

static void api_free(anvil_api *api) {
    if (api->reaper_started) {
        pthread_mutex_lock(&api->mu);
        api->quit = true;
        pthread_cond_signal(&api->cv);
        pthread_mutex_unlock(&api->mu);
        pthread_join(api->reaper, NULL);
    }
    /* What the limiter held back is recorded before the daemon goes. */
    if (anvil_audit_limiter_flush(api->limiter, api->env.st, INFINITY) < 0)
        api_report(&api->env, "warning: audit: %s", anvil_errmsg());
    anvil_audit_limiter_free(api->limiter);
    pthread_mutex_destroy(&api->mu);
    pthread_cond_destroy(&api->cv);
    anvil_api_stats_free(api->env.stats);
    anvil_goodput_cache_free(api->env.goodput);
    free(api->runs_dir);
    free(api);
}

anvil_api *anvil_api_start(const anvil_api_env *env, int port) {
    anvil_api *api = calloc(1, sizeof *api);
    anvil_api_stats *stats = anvil_api_stats_new();
    anvil_audit_limiter *limiter = anvil_audit_limiter_new();
    anvil_goodput_cache *goodput = anvil_goodput_cache_new();
    if (!api || !stats || !limiter || !goodput || !(api->runs_dir = strdup(env->runs_dir))) {
        free(api);
        anvil_api_stats_free(stats);
        anvil_audit_limiter_free(limiter);
        anvil_goodput_cache_free(goodput);
        anvil_fail("out of memory");
        return NULL;
    }
    api->env = *env;
    api->env.runs_dir = api->runs_dir;
    api->env.stats = stats;
    api->env.goodput = goodput;
    api->env.limiter = api->limiter = limiter;
    pthread_mutex_init(&api->mu, NULL);
    pthread_cond_init(&api->cv, NULL);
    int e = pthread_create(&api->reaper, NULL, reap, api);
    if (e) {
        anvil_fail("cannot start the API's connection reaper: %s", strerror(e));
        api_free(api);
        return NULL;
    }
    api->reaper_started = true;
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    api->d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, (uint16_t)port, NULL, NULL, handle, api, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&addr, MHD_OPTION_URI_LOG_CALLBACK, on_uri, api, MHD_OPTION_NOTIFY_COMPLETED, completed,
        api, MHD_OPTION_NOTIFY_CONNECTION, on_connection, api, MHD_OPTION_CONNECTION_TIMEOUT, IDLE_TIMEOUT_S,
        MHD_OPTION_CONNECTION_LIMIT, CONNECTION_LIMIT, MHD_OPTION_PER_IP_CONNECTION_LIMIT, PER_IP_CONNECTION_LIMIT,
        MHD_OPTION_END);
    if (!api->d) {
        anvil_fail("cannot listen on 127.0.0.1:%d: %s", port, errno ? strerror(errno) : "libmicrohttpd failed");
        api_free(api);
        return NULL;
    }
    return api;
}

int anvil_api_port(const anvil_api *api) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(api->d, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : -1;
}

void anvil_api_stop(anvil_api *api) {
    if (!api) return;
    MHD_stop_daemon(api->d);
    api_free(api);
}
