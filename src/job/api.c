#include "job/api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "job/spec.h"

#define MAX_LOG_CHUNK (1 << 20)

struct anvil_api {
    struct MHD_Daemon *d;
    anvil_store *st;
    anvil_supervisor *sup;
    char *runs_dir;
};

/* A request's body, gathered across calls; too_big once it passes the cap (the rest is dropped). */
typedef struct {
    char *data;
    size_t len;
    bool too_big;
} body;

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned code, char *text, size_t len, const char *type) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned code, cJSON *j) {
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!text) return MHD_NO;
    size_t len = strlen(text);
    char *withnl = realloc(text, len + 2);
    if (!withnl) {
        free(text);
        return MHD_NO;
    }
    withnl[len] = '\n';
    withnl[len + 1] = 0;
    return send_text(c, code, withnl, len + 1, "application/json");
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned code, const char *fmt, ...)
    ANVIL_PRINTF(3, 4);
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned code, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    line[strcspn(line, "\r\n")] = 0;
    cJSON *j = cJSON_CreateObject();
    if (j && !cJSON_AddStringToObject(j, "error", line)) {
        cJSON_Delete(j);
        j = NULL;
    }
    return send_json(c, code, j);
}

static cJSON *job_json(anvil_store *st, const anvil_job *j, bool full) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "id", (double)j->id);
    cJSON_AddStringToObject(o, "name", j->name);
    cJSON_AddStringToObject(o, "status", anvil_job_status_name(j->status));
    cJSON_AddStringToObject(o, "secondary_status", j->secondary);
    cJSON_AddStringToObject(o, "failure_reason", j->failure_reason);
    cJSON_AddNumberToObject(o, "attempt", j->attempt);
    cJSON_AddNumberToObject(o, "exit_code", j->exit_code);
    cJSON_AddStringToObject(o, "run_dir", j->run_dir);
    cJSON_AddNumberToObject(o, "submitted_at", j->submitted_at);
    cJSON_AddNumberToObject(o, "started_at", j->started_at);
    cJSON_AddNumberToObject(o, "ended_at", j->ended_at);
    cJSON *spec = cJSON_Parse(j->spec);
    if (spec) cJSON_AddItemToObject(o, "spec", spec);
    if (!full) return o;
    anvil_job_event *ev;
    int n;
    cJSON *h = cJSON_AddArrayToObject(o, "history");
    if (!h || anvil_store_history(st, j->id, &ev, &n)) {
        cJSON_Delete(o);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        if (!e) break;
        cJSON_AddNumberToObject(e, "at", ev[i].at);
        cJSON_AddStringToObject(e, "status", anvil_job_status_name(ev[i].status));
        cJSON_AddStringToObject(e, "secondary_status", ev[i].secondary);
        cJSON_AddStringToObject(e, "message", ev[i].message);
        cJSON_AddItemToArray(h, e);
    }
    anvil_job_events_free(ev, n);
    return o;
}

static enum MHD_Result send_job(struct MHD_Connection *c, anvil_api *api, unsigned code, anvil_job *j, bool full) {
    cJSON *o = job_json(api->st, j, full);
    anvil_job_free(j);
    return o ? send_json(c, code, o) : send_error(c, 500, "%s", anvil_errmsg());
}

/* A spec that parses and whose paths make sense here: channels exist, the output is no other
 * running job's. */
static enum MHD_Result submit(struct MHD_Connection *c, anvil_api *api, const body *b) {
    if (b->too_big) return send_error(c, 413, "spec: larger than %d bytes", ANVIL_JOB_SPEC_MAX_BYTES);
    anvil_job_spec s;
    if (anvil_job_spec_parse(b->data ? b->data : "", b->len, &s)) return send_error(c, 400, "%s", anvil_errmsg());
    unsigned code = 0;
    char why[1200] = "";
    for (int i = 0; i < s.nchannels && !code; i++) {
        struct stat sb;
        if (stat(s.channels[i].value, &sb)) {
            code = 400;
            snprintf(why, sizeof why, "spec: channels.%s: %s: %s", s.channels[i].key, s.channels[i].value,
                     strerror(errno));
        }
    }
    anvil_job *active = NULL;
    int nactive = 0;
    unsigned mask = 1u << ANVIL_JOB_PENDING | 1u << ANVIL_JOB_STARTING | 1u << ANVIL_JOB_RUNNING |
                    1u << ANVIL_JOB_STOPPING;
    if (!code && s.output && anvil_store_list(api->st, mask, &active, &nactive)) {
        code = 500;
        snprintf(why, sizeof why, "%s", anvil_errmsg());
    }
    for (int i = 0; i < nactive && !code; i++)
        if (!strcmp(active[i].run_dir, s.output)) {
            code = 409;
            snprintf(why, sizeof why, "spec: output: %s is the run folder of job %lld, which has not ended", s.output,
                     (long long)active[i].id);
        }
    anvil_job_list_free(active, nactive);
    cJSON *canon = code ? NULL : anvil_job_spec_to_json(&s);
    char *text = canon ? cJSON_PrintUnformatted(canon) : NULL;
    cJSON_Delete(canon);
    int64_t id = 0;
    if (!code && (!text || anvil_store_submit(api->st, s.name, text, s.output, api->runs_dir, &id))) {
        code = 500;
        snprintf(why, sizeof why, "%s", text ? anvil_errmsg() : "out of memory");
    }
    free(text);
    anvil_job_spec_free(&s);
    if (code) return send_error(c, code, "%s", why);
    anvil_job j;
    if (anvil_store_get(api->st, id, &j)) return send_error(c, 500, "%s", anvil_errmsg());
    return send_job(c, api, 201, &j, false);
}

static enum MHD_Result list(struct MHD_Connection *c, anvil_api *api) {
    const char *want = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "status");
    unsigned mask = ~0u;
    if (want) {
        int s = anvil_job_status_parse(want);
        if (s < 0) return send_error(c, 400, "unknown status '%.60s'", want);
        mask = 1u << s;
    }
    anvil_job *jobs;
    int n;
    if (anvil_store_list(api->st, mask, &jobs, &n)) return send_error(c, 500, "%s", anvil_errmsg());
    cJSON *o = cJSON_CreateObject(), *arr = o ? cJSON_AddArrayToObject(o, "jobs") : NULL;
    for (int i = 0; arr && i < n; i++) {
        cJSON *j = job_json(api->st, &jobs[i], false);
        if (j) cJSON_AddItemToArray(arr, j);
    }
    anvil_job_list_free(jobs, n);
    return send_json(c, 200, o);
}

static bool parse_count(const char *s, long max, long *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : -1;
    if (!s || !*s || *end || errno || v < 0 || v > max) return false;
    *out = v;
    return true;
}

static enum MHD_Result logs(struct MHD_Connection *c, const char *run_dir) {
    const char *rank = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "rank");
    const char *off = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "offset");
    long r = -1, offset = 0;
    if (rank && !parse_count(rank, 1 << 20, &r)) return send_error(c, 400, "rank: not a rank number");
    if (off && !parse_count(off, LONG_MAX, &offset)) return send_error(c, 400, "offset: not a byte offset");
    char path[PATH_MAX];
    if (r >= 0) snprintf(path, sizeof path, "%s/logs/rank_%ld.log", run_dir, r);
    else snprintf(path, sizeof path, "%s/logs/launcher.log", run_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    /* No log yet is an empty log: the job may not have started. */
    if (fd < 0 && errno != ENOENT) return send_error(c, 500, "%s: %s", path, strerror(errno));
    char *buf = malloc(MAX_LOG_CHUNK);
    ssize_t got = 0;
    if (buf && fd >= 0) got = pread(fd, buf, MAX_LOG_CHUNK, (off_t)offset);
    if (fd >= 0) close(fd);
    if (!buf || got < 0) {
        free(buf);
        return send_error(c, 500, "%s: cannot read", path);
    }
    return send_text(c, 200, buf, (size_t)got, "text/plain; charset=utf-8");
}

static enum MHD_Result route(struct MHD_Connection *c, anvil_api *api, const char *url, const char *method,
                             const body *b) {
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/v1/health")) {
        if (!get) return send_error(c, 405, "use GET");
        cJSON *o = cJSON_CreateObject();
        if (o) cJSON_AddStringToObject(o, "status", "ok"), cJSON_AddNumberToObject(o, "pid", getpid());
        return send_json(c, 200, o);
    }
    if (!strcmp(url, "/v1/jobs")) {
        if (post) return submit(c, api, b);
        return get ? list(c, api) : send_error(c, 405, "use GET or POST");
    }
    if (strncmp(url, "/v1/jobs/", 9)) return send_error(c, 404, "no such endpoint: %.200s", url);
    char *end;
    errno = 0;
    long long id = strtoll(url + 9, &end, 10);
    if (end == url + 9 || errno || id <= 0 || (*end && strcmp(end, "/stop") && strcmp(end, "/logs")))
        return send_error(c, 404, "no such endpoint: %.200s", url);
    bool stop = !strcmp(end, "/stop");
    if (stop ? !post : !get) return send_error(c, 405, "use %s", stop ? "POST" : "GET");
    anvil_job j;
    int rc = stop ? anvil_supervisor_stop(api->sup, id, &j) : anvil_store_get(api->st, id, &j);
    if (rc < 0) return send_error(c, 500, "%s", anvil_errmsg());
    if (rc == 1) return send_error(c, 404, "no job %lld", id);
    if (rc == 2) {
        enum MHD_Result r =
            send_error(c, 409, "job %lld has already ended: %s", id, anvil_job_status_name(j.status));
        anvil_job_free(&j);
        return r;
    }
    if (stop || !*end) return send_job(c, api, stop ? 202 : 200, &j, !stop);
    enum MHD_Result r = logs(c, j.run_dir);
    anvil_job_free(&j);
    return r;
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
    return route(c, cls, url, method, b);
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
    if (!api || !(api->runs_dir = strdup(runs_dir))) {
        free(api);
        anvil_fail("out of memory");
        return NULL;
    }
    api->st = st;
    api->sup = sup;
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
    free(api->runs_dir);
    free(api);
}
