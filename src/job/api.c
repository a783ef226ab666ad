#include "job/api.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/json.h"
#include "job/api_internal.h"
#include "job/hooks.h"
#include "job/policy.h"
#include "job/quota.h"
#include "job/spec.h"

#define MAX_LOG_CHUNK (1 << 20)

static cJSON *job_json(const anvil_api_env *env, const anvil_job *j, bool full) {
    cJSON *o = anvil_job_json(j);
    if (!o) return NULL;
    if (!full) return o;
    cJSON *backend = anvil_supervisor_describe(env->sup, j), *hooks = anvil_hooks_of_job(env->st, j->id),
          *attempts = anvil_supervisor_attempts(env->sup, j), *goodput = api_goodput_json(env, j, false);
    if (backend) cJSON_AddItemToObject(o, "backend", backend);
    if (attempts) cJSON_AddItemToObject(o, "attempts", attempts);
    if (hooks) cJSON_AddItemToObject(o, "hooks", hooks);
    if (goodput) cJSON_AddItemToObject(o, "goodput", goodput);
    anvil_job_event *ev;
    int n;
    cJSON *h = cJSON_AddArrayToObject(o, "history");
    if (!backend || !attempts || !hooks || !goodput || !h || anvil_store_history(env->st, j->id, &ev, &n)) {
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

static int reply_job(anvil_api_call *c, unsigned code, anvil_job *j, bool full) {
    cJSON *o = job_json(c->env, j, full);
    anvil_job_free(j);
    return o ? api_reply_json(c, code, o) : api_internal_error(c, NULL);
}

static bool visible(const anvil_api_call *c, const anvil_job *j) {
    return c->who.admin || !strcmp(j->owner, c->who.user);
}

/* The role a spec runs under: the one it names, if granted to the caller, else the caller's only
 * one. 0 with *role filled and spec->role set; else answered. */
static int spec_role(anvil_api_call *c, anvil_job_spec *s, anvil_role *role) {
    if (!s->role) {
        char *names;
        int n;
        if (anvil_auth_user_roles(c->env->st, c->who.user, &names, &n)) {
            api_internal_error(c, NULL);
            return -1;
        }
        if (n != 1) {
            if (n) api_reply_error(c, 400, "spec: role: missing; %s has several, name one of: %s", c->who.user, names);
            else
                api_reply_error(c, 403, "spec: %s has no role to run jobs under (an admin grants one: anvil role grant "
                                        "ROLE %s)", c->who.user, c->who.user);
            free(names);
            return -1;
        }
        s->role = names;
    }
    int rc = anvil_auth_get_role(c->env->st, s->role, c->who.user, role);
    if (rc == 1) api_reply_error(c, 403, "spec: role: %s is not granted to %s", s->role, c->who.user);
    else if (rc) api_internal_error(c, NULL);
    return rc ? -1 : 0;
}

/* Refuses a spec whose channels are missing or whose output another unfinished job writes to. */
static int spec_conflicts(anvil_api_call *c, const anvil_job_spec *s) {
    for (int i = 0; i < s->nchannels; i++) {
        struct stat sb;
        if (stat(s->channels[i].value, &sb)) {
            api_reply_error(c, 400, "spec: channels.%s: %s: %s", s->channels[i].key, s->channels[i].value,
                            strerror(errno));
            return -1;
        }
    }
    if (!s->output) return 0;
    anvil_job *active = NULL;
    int nactive = 0;
    unsigned mask = 1u << ANVIL_JOB_PENDING | 1u << ANVIL_JOB_STARTING | 1u << ANVIL_JOB_RUNNING |
                    1u << ANVIL_JOB_STOPPING;
    if (anvil_store_list(c->env->st, mask, &active, &nactive)) {
        api_internal_error(c, NULL);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < nactive && !rc; i++)
        if (!strcmp(active[i].run_dir, s->output)) {
            /* Another user's job is not named: a user sees only their own (as GET answers 404). */
            if (visible(c, &active[i]))
                api_reply_error(c, 409, "spec: output: %s is the run folder of job %lld, which has not ended",
                                s->output, (long long)active[i].id);
            else
                api_reply_error(c, 409, "spec: output: %s is the run folder of another user's job, which has not "
                                        "ended", s->output);
            rc = -1;
        }
    anvil_job_list_free(active, nactive);
    return rc;
}

static int submit(anvil_api_call *c) {
    c->mutating = true;
    if (c->rq->body_too_big) return api_reply_error(c, 413, "spec: larger than %d bytes", ANVIL_JOB_SPEC_MAX_BYTES);
    anvil_job_spec s;
    if (anvil_job_spec_parse(c->rq->body ? c->rq->body : "", c->rq->body_len, &s))
        return api_reply_error(c, 400, "%s", anvil_errmsg());
    anvil_role role = {0};
    char why[2048];
    int rc = spec_role(c, &s, &role);
    if (!rc && (rc = anvil_policy_check(&role, &s, why, sizeof why))) {
        if (rc > 0) api_reply_error(c, 403, "spec: %s", why);
        else api_internal_error(c, NULL);
    }
    if (!rc) rc = spec_conflicts(c, &s);
    if (!rc && s.backend && !anvil_supervisor_backend_named(c->env->sup, s.backend)) {
        rc = -1;
        api_reply_error(c, 400, "spec: backend: this daemon has no %s backend (it runs %s)", s.backend,
                        anvil_supervisor_backend(c->env->sup)->ops->name);
    }
    double held[2] = {0, 0};
    anvil_backend *b = anvil_supervisor_backend(c->env->sup);
    if (b->ops->pool_hosts) {
        held[0] = b->ops->pool_hosts(b, c->who.user, NULL, s.hosts, s.procs_per_host);
        held[1] = s.role ? b->ops->pool_hosts(b, NULL, s.role, s.hosts, s.procs_per_host) : 0;
    }
    if (!rc && (rc = anvil_quota_check(c->env->st, c->who.user, s.role, &s, held, why, sizeof why))) {
        if (rc > 0) api_reply_error(c, 429, "%s", why);
        else api_internal_error(c, NULL);
    }
    cJSON *canon = rc ? NULL : anvil_job_spec_to_json(&s);
    char *text = canon ? cJSON_PrintUnformatted(canon) : NULL;
    cJSON_Delete(canon);
    int64_t id = 0;
    if (!rc && !text) {
        rc = -1;
        api_internal_error(c, "out of memory");
    }
    if (!rc) {
        char detail[300];
        snprintf(detail, sizeof detail, "name %s, role %s, procs %d", s.name, s.role, s.hosts * s.procs_per_host);
        anvil_job_new j = {.name = s.name, .spec = text, .run_dir = s.output, .owner = c->who.user, .role = s.role};
        anvil_audit_entry e = api_audit(c, 201, detail);
        if ((rc = anvil_store_submit(c->env->st, &j, c->env->runs_dir, &e, &id))) {
            c->audited = false;
            api_internal_error(c, NULL);
        }
    }
    free(text);
    anvil_job_spec_free(&s);
    anvil_role_free(&role);
    if (rc) return -1;
    anvil_job j;
    return anvil_store_get(c->env->st, id, &j) ? api_internal_error(c, NULL)
                                               : reply_job(c, 201, &j, false);
}

static int list(anvil_api_call *c) {
    static const char *const known[] = {"status", NULL};
    if (!api_known_args(c, known)) return -1;
    const char *want = api_arg(c, "status");
    unsigned mask = ~0u;
    if (want) {
        int s = anvil_job_status_parse(want);
        if (s < 0) return api_reply_error(c, 400, "unknown status '%.60s'", want);
        mask = 1u << s;
    }
    anvil_job *jobs;
    int n;
    if (anvil_store_list(c->env->st, mask, &jobs, &n)) return api_internal_error(c, NULL);
    cJSON *o = cJSON_CreateObject(), *arr = o ? cJSON_AddArrayToObject(o, "jobs") : NULL;
    for (int i = 0; arr && i < n; i++) {
        if (!visible(c, &jobs[i])) continue;
        cJSON *j = job_json(c->env, &jobs[i], false);
        if (j) cJSON_AddItemToArray(arr, j);
    }
    anvil_job_list_free(jobs, n);
    return api_reply_json(c, 200, o);
}

static int logs(anvil_api_call *c, const char *run_dir) {
    static const char *const known[] = {"rank", "offset", "tail", NULL};
    if (!api_known_args(c, known)) return -1;
    const char *rank = api_arg(c, "rank"), *off = api_arg(c, "offset"), *tail = api_arg(c, "tail");
    long r = -1, offset = 0, last = -1;
    if (rank && !api_parse_count(rank, 1 << 20, &r)) return api_reply_error(c, 400, "rank: not a rank number");
    if (off && !api_parse_count(off, LONG_MAX, &offset)) return api_reply_error(c, 400, "offset: not a byte offset");
    if (tail && !api_parse_count(tail, MAX_LOG_CHUNK, &last)) return api_reply_error(c, 400, "tail: not a byte count");
    if (off && tail) return api_reply_error(c, 400, "tail: give offset or tail, not both");
    char path[PATH_MAX];
    if (r >= 0) snprintf(path, sizeof path, "%s/logs/rank_%ld.log", run_dir, r);
    else snprintf(path, sizeof path, "%s/logs/launcher.log", run_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    /* No log yet is an empty log: the job may not have started. */
    if (fd < 0 && errno != ENOENT) {
        anvil_fail("%s: %s", path, strerror(errno));
        return api_internal_error(c, NULL);
    }
    struct stat sb;
    off_t size = fd >= 0 && !fstat(fd, &sb) ? sb.st_size : 0;
    if (last >= 0) offset = size > last ? (long)(size - last) : 0;
    /* An offset at or past the end has nothing yet: a follower asks again later. */
    size_t want = offset >= size ? 0 : (size_t)(size - offset) < MAX_LOG_CHUNK ? (size_t)(size - offset) : MAX_LOG_CHUNK;
    char *buf = malloc(MAX_LOG_CHUNK);
    ssize_t got = 0;
    if (buf && fd >= 0 && want) got = pread(fd, buf, want, (off_t)offset);
    int e = errno;
    if (fd >= 0) close(fd);
    if (!buf || got < 0) {
        free(buf);
        anvil_fail("%s: cannot read: %s", path, buf ? strerror(e) : "out of memory");
        return api_internal_error(c, NULL);
    }
    c->rs->status = 200;
    c->rs->body = buf;
    c->rs->len = (size_t)got;
    c->rs->content_type = "text/plain; charset=utf-8";
    return 0;
}

/* /v1/jobs/ID[/stop|/logs|/plot.svg|/profile|/goodput|/faults]. */
static int one_job(anvil_api_call *c, const char *rest, bool get, bool post) {
    static const char *const parts[][2] = {{"", "job.get"},           {"/stop", "job.stop"},
                                           {"/logs", "job.logs"},     {"/plot.svg", "job.plot"},
                                           {"/profile", "job.profile"}, {"/goodput", "job.goodput"},
                                           {"/faults", "job.fault"}};
    char *end;
    errno = 0;
    long long id = strtoll(rest, &end, 10);
    size_t part = 0;
    while (part < sizeof parts / sizeof *parts && strcmp(end, parts[part][0])) part++;
    if (!isdigit((unsigned char)rest[0]) || errno || id <= 0 || part == sizeof parts / sizeof *parts) {
        c->action = "request";
        return api_reply_error(c, 404, "no such endpoint: %.200s", c->rq->path);
    }
    bool stop = part == 1, fault = part == 6;
    c->action = parts[part][1];
    c->mutating = stop || fault;
    snprintf(c->target, sizeof c->target, "job %lld", id);
    if (stop || fault ? !post : !get) return api_reply_error(c, 405, "use %s", stop || fault ? "POST" : "GET");
    /* ?brief=1: the job's own record alone (status, attempt, ...), without its backend, attempts, hooks,
     * goodput and history: what a client that polls for a status asks, many times a second. */
    static const char *const none[] = {NULL}, *const brief_only[] = {"brief", NULL};
    if (part != 2 && part != 4 && !api_known_args(c, part == 0 ? brief_only : none)) return -1;
    const char *brief = part == 0 ? api_arg(c, "brief") : NULL;
    if (brief && strcmp(brief, "1") && strcmp(brief, "0"))
        return api_reply_error(c, 400, "brief: expected 0 or 1, got '%.40s'", brief);
    anvil_job j;
    int rc = anvil_store_get(c->env->st, id, &j);
    if (rc < 0) return api_internal_error(c, NULL);
    if (!rc && !visible(c, &j)) {
        anvil_job_free(&j);
        rc = 1;
    }
    if (rc == 1) return api_reply_error(c, 404, "no job %lld", id);
    if (part == 0) return reply_job(c, 200, &j, !brief || !strcmp(brief, "0"));
    if (!stop) {
        rc = part == 2   ? logs(c, j.run_dir)
             : part == 3 ? api_job_plot(c, &j)
             : part == 4 ? api_job_profile(c, &j)
             : part == 5 ? api_job_goodput(c, &j)
                         : api_job_fault(c, &j);
        anvil_job_free(&j);
        return rc;
    }
    anvil_job_free(&j);
    anvil_audit_entry e = api_audit(c, 202, "stop requested");
    rc = anvil_supervisor_stop(c->env->sup, id, &e, &j);
    if (rc) c->audited = false;
    if (rc == 1) return api_reply_error(c, 404, "no job %lld", id);
    if (rc < 0) return api_internal_error(c, NULL);
    if (rc == 2) {
        api_reply_error(c, 409, "job %lld has already ended: %s", id, anvil_job_status_name(j.status));
        anvil_job_free(&j);
        return -1;
    }
    return reply_job(c, 202, &j, false);
}

/* GET /v1/pools and POST /v1/pools/ID/release: the backend's warm pools, a user's own (admins: all). */
static int pools(anvil_api_call *c, const char *rest, bool get, bool post) {
    static const char *const none[] = {NULL};
    anvil_backend *b = anvil_supervisor_backend(c->env->sup);
    const char *user = c->who.admin ? NULL : c->who.user;
    if (!*rest) {
        c->action = "pool.list";
        if (!get) return api_reply_error(c, 405, "use GET");
        if (!api_known_args(c, none)) return -1;
        cJSON *o = cJSON_CreateObject(), *arr = b->ops->pools ? b->ops->pools(b, user) : cJSON_CreateArray();
        if (!o || !arr) {
            cJSON_Delete(o);
            cJSON_Delete(arr);
            return api_internal_error(c, arr ? "out of memory" : NULL);
        }
        cJSON_AddItemToObject(o, "pools", arr);
        return api_reply_json(c, 200, o);
    }
    size_t n = *rest == '/' ? strspn(rest + 1, "0123456789") : 0;
    if (!n || n > 20 || strcmp(rest + 1 + n, "/release")) {
        c->action = "request";
        return api_reply_error(c, 404, "no such endpoint: %.200s", c->rq->path);
    }
    char id[24];
    snprintf(id, sizeof id, "%.*s", (int)n, rest + 1);
    c->action = "pool.release";
    c->mutating = true;
    snprintf(c->target, sizeof c->target, "pool %s", id);
    if (!post) return api_reply_error(c, 405, "use POST");
    if (!api_known_args(c, none)) return -1;
    int rc = b->ops->release_pool ? b->ops->release_pool(b, id, user) : 1;
    if (rc == 1) return api_reply_error(c, 404, "no warm pool %s", id);
    if (rc == 2) return api_reply_error(c, 409, "warm pool %s has ended already", id);
    if (rc < 0) return api_internal_error(c, NULL);
    cJSON *o = cJSON_CreateObject();
    if (o && (!cJSON_AddStringToObject(o, "id", id) || !cJSON_AddStringToObject(o, "status", "Releasing"))) {
        cJSON_Delete(o);
        o = NULL;
    }
    return api_reply_json(c, 202, o);
}

static int health(anvil_api_call *c) {
    static const char *const none[] = {NULL};
    if (!api_known_args(c, none)) return -1;
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "status", "ok");
        cJSON_AddNumberToObject(o, "pid", getpid());
        cJSON_AddStringToObject(o, "user", c->who.user);
        cJSON_AddBoolToObject(o, "admin", c->who.admin);
    }
    return api_reply_json(c, 200, o);
}

static int route(anvil_api_call *c) {
    const char *path = c->rq->path, *m = c->rq->method;
    bool get = !strcmp(m, "GET"), post = !strcmp(m, "POST");
    if (!strcmp(path, "/v1/health")) {
        c->action = "health";
        return get ? health(c) : api_reply_error(c, 405, "use GET");
    }
    if (!strcmp(path, "/v1/jobs")) {
        c->action = post ? "job.submit" : "job.list";
        if (post) return submit(c);
        return get ? list(c) : api_reply_error(c, 405, "use GET or POST");
    }
    if (!strncmp(path, "/v1/jobs/", 9)) return one_job(c, path + 9, get, post);
    if (!strncmp(path, "/v1/pools", 9) && (!path[9] || path[9] == '/')) return pools(c, path + 9, get, post);
    if (!strcmp(path, "/metrics")) {
        c->action = "metrics";
        if (!get) return api_reply_error(c, 405, "use GET");
        return api_need_admin(c) ? api_metrics(c) : -1;
    }
    int rc;
    if (api_route_admin(c, path, &rc)) return rc;
    c->action = "request";
    return api_reply_error(c, 404, "no such endpoint: %.200s", path);
}

void anvil_api_handle(const anvil_api_env *env, const anvil_api_request *rq, anvil_api_response *rs) {
    anvil_api_call c = {.env = env, .rq = rq, .rs = rs, .action = "request"};
    memset(rs, 0, sizeof *rs);
    /* The dashboard page holds no data (it asks the API with the user's token), so it needs none;
     * whatever the query (a browser's /?token=..., which the page then points to #token=). */
    if (!strcmp(rq->path, "/") && !strcmp(rq->method, "GET")) {
        api_dashboard_page(&c);
        rs->action = "dashboard";
        return;
    }
    snprintf(c.target, sizeof c.target, "%.150s", rq->path);
    char why[256];
    int rc = anvil_auth_check(env->st, rq->authorization, &c.who, why, sizeof why);
    if (rc) {
        c.action = "auth";
        if (rc > 0) api_reply_error(&c, 401, "unauthorized: a valid 'Authorization: Bearer <token>' is required");
        else api_internal_error(&c, NULL);
        snprintf(c.error, sizeof c.error, "%.20s %.150s: %s", rq->method, rq->path, rc > 0 ? why : anvil_errmsg());
        anvil_utf8_sanitize(c.error);
        /* A flood of bad tokens is recorded as a count past the first few rows (job/audit.h). */
        if (rc > 0 && env->limiter && !anvil_audit_limiter_take(env->limiter, rq->peer, c.error, anvil_now()))
            c.audited = true;
    } else if (rq->query_args) {
        api_reply_error(&c, 400, "query: %d parameters, more than any endpoint takes", rq->query_args);
    } else {
        route(&c);
    }
    rs->action = c.action;
    /* Changes are recorded with their change; refusals and failed changes here, on their own. */
    if (!c.audited && (c.mutating || rs->status >= 400)) {
        anvil_audit_entry e = api_audit(&c, (int)rs->status, rs->status < 400 ? "" : c.error);
        if (anvil_audit_add(env->st, &e)) api_report(env, "warning: audit: %s", anvil_errmsg());
    }
}
