/* The API's HTTP side: libmicrohttpd gathers each request (its body up to the cap, its query and
 * Authorization header) and sends what anvil_api_handle answers. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "job/api.h"
#include "job/spec.h"

struct anvil_api {
    struct MHD_Daemon *d;
    anvil_api_env env;
    char *runs_dir;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A request's body, gathered across calls; too_big once it passes the cap (the rest is dropped). */
typedef struct {
    char *data;
    size_t len;
    bool too_big;
} body;

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

static enum MHD_Result answer(struct MHD_Connection *c, anvil_api *api, const char *url, const char *method,
                              const body *b) {
    arg_list args = {0};
    int n = MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, NULL, NULL);
    if (n > 0 && !(args.args = calloc((size_t)n, sizeof *args.args))) return MHD_NO;
    args.cap = n > 0 ? n : 0;
    if (n > 0) MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_arg, &args);
    anvil_api_request rq = {
        .method = method,
        .path = url,
        .args = args.args,
        .nargs = args.n,
        .authorization = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
        .body = b->data,
        .body_len = b->len,
        .body_too_big = b->too_big,
    };
    anvil_api_response rs;
    double t0 = now_s();
    anvil_api_handle(&api->env, &rq, &rs);
    anvil_api_stats_observe(api->env.stats, rs.action, rs.status, now_s() - t0);
    free(args.args);
    if (!rs.body) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(rs.len, rs.body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(rs.body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", rs.content_type ? rs.content_type : "application/json");
    if (rs.status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result rc = MHD_queue_response(c, rs.status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **state) {
    (void)version;
    body *b = *state;
    if (!b) {
        if (!(b = calloc(1, sizeof *b))) return MHD_NO;
        *state = b;
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
    return answer(c, cls, url, method, b);
}

static void completed(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode why) {
    (void)cls;
    (void)c;
    (void)why;
    body *b = *state;
    if (b) free(b->data);
    free(b);
    *state = NULL;
}

anvil_api *anvil_api_start(anvil_store *st, anvil_supervisor *sup, const char *runs_dir, int port) {
    anvil_api *api = calloc(1, sizeof *api);
    anvil_api_stats *stats = anvil_api_stats_new();
    if (!api || !stats || !(api->runs_dir = strdup(runs_dir))) {
        free(api);
        anvil_api_stats_free(stats);
        anvil_fail("out of memory");
        return NULL;
    }
    api->env = (anvil_api_env){.st = st, .sup = sup, .runs_dir = api->runs_dir, .stats = stats};
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    api->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, (uint16_t)port, NULL, NULL, handle,
                              api, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED,
                              completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_CONNECTION_LIMIT, 256u,
                              MHD_OPTION_END);
    if (!api->d) {
        anvil_fail("cannot listen on 127.0.0.1:%d: %s", port, errno ? strerror(errno) : "libmicrohttpd failed");
        anvil_api_stats_free(stats);
        free(api->runs_dir);
        free(api);
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
    anvil_api_stats_free(api->env.stats);
    free(api->runs_dir);
    free(api);
}
