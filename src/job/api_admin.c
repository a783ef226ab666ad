/* The API's routes for principals and policies: users, tokens, roles, grants and the audit trail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/api_internal.h"
#include "job/backend.h"
#include "job/quota.h"
#include "job/spec.h"
#include "job/supervisor.h"

/* A string field that must be a name (users, roles); NULL after answering 400. */
static const char *name_field(anvil_api_call *c, const cJSON *o, const char *what, const char *field) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    if (!v) {
        api_reply_error(c, 400, "%s: %s: missing", what, field);
        return NULL;
    }
    if (!cJSON_IsString(v) || !anvil_job_name_valid(v->valuestring, 64)) {
        api_reply_error(c, 400, "%s: %s: must be 1 to 64 letters, digits, '.', '_' or '-'", what, field);
        return NULL;
    }
    return v->valuestring;
}

static cJSON *token_json(const char *user, const char *token) {
    cJSON *o = cJSON_CreateObject();
    char id[ANVIL_TOKEN_ID_LEN + 1];
    memcpy(id, token + 4, ANVIL_TOKEN_ID_LEN);
    id[ANVIL_TOKEN_ID_LEN] = 0;
    if (o && (!cJSON_AddStringToObject(o, "user", user) || !cJSON_AddStringToObject(o, "token_id", id) ||
              !cJSON_AddStringToObject(o, "token", token))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int add_user(anvil_api_call *c, const char *rest) {
    (void)rest;
    static const char *const fields[] = {"name", "admin", NULL};
    cJSON *o = api_body_object(c, "user", fields);
    if (!o) return -1;
    const char *name = name_field(c, o, "user", "name");
    const cJSON *admin = cJSON_GetObjectItemCaseSensitive(o, "admin");
    int rc = name ? 0 : -1;
    if (!rc && admin && !cJSON_IsBool(admin)) rc = api_reply_error(c, 400, "user: admin: must be true or false");
    if (rc) {
        cJSON_Delete(o);
        return -1;
    }
    snprintf(c->target, sizeof c->target, "%s", name);
    bool is_admin = cJSON_IsTrue(admin);
    char token[ANVIL_TOKEN_SIZE];
    anvil_audit_entry e = api_audit(c, 201, NULL);
    rc = anvil_auth_add_user(c->env->st, name, is_admin, &e, token);
    if (rc) c->audited = false;
    cJSON *answer = rc ? NULL : token_json(name, token);
    if (answer) cJSON_AddBoolToObject(answer, "admin", is_admin);
    if (rc == 1) api_reply_error(c, 409, "user %s exists already", name);
    else if (rc) api_internal_error(c, NULL);
    else api_reply_json(c, 201, answer);
    cJSON_Delete(o);
    return rc ? -1 : 0;
}

static int add_token(anvil_api_call *c, const char *rest) {
    (void)rest;
    static const char *const fields[] = {"user", NULL};
    cJSON *o = api_body_object(c, "token", fields);
    const char *user = o ? name_field(c, o, "token", "user") : NULL;
    if (!user) {
        cJSON_Delete(o);
        return -1;
    }
    snprintf(c->target, sizeof c->target, "%s", user);
    char token[ANVIL_TOKEN_SIZE];
    anvil_audit_entry e = api_audit(c, 201, NULL);
    int rc = anvil_auth_add_token(c->env->st, user, &e, token);
    if (rc) c->audited = false;
    if (rc == 1) api_reply_error(c, 404, "no user %s", user);
    else if (rc) api_internal_error(c, NULL);
    else api_reply_json(c, 201, token_json(user, token));
    cJSON_Delete(o);
    return rc ? -1 : 0;
}

static int revoke(anvil_api_call *c, const char *rest) {
    size_t n = strcspn(rest, "/");
    if (strcmp(rest + n, "/revoke") || n != ANVIL_TOKEN_ID_LEN) {
        c->action = "request";
        return api_reply_error(c, 404, "no such endpoint: %.200s", c->rq->path);
    }
    snprintf(c->target, sizeof c->target, "%.*s", (int)n, rest);
    char *user = NULL;
    anvil_audit_entry e = api_audit(c, 200, NULL);
    int rc = anvil_auth_revoke(c->env->st, c->target, &e, &user);
    if (rc) c->audited = false;
    if (rc == 1) return api_reply_error(c, 404, "no token %s", c->target);
    if (rc == 2) return api_reply_error(c, 409, "token %s is revoked already", c->target);
    if (rc == 3)
        return api_reply_error(c, 409, "token %s is the last valid token of an admin: revoking it would leave nobody "
                                       "to manage the service", c->target);
    if (rc) return api_internal_error(c, NULL);
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "token_id", c->target);
        cJSON_AddStringToObject(o, "user", user);
        cJSON_AddBoolToObject(o, "revoked", true);
    }
    free(user);
    return api_reply_json(c, 200, o);
}

static int add_role(anvil_api_call *c, const char *rest) {
    (void)rest;
    if (c->rq->body_too_big) return api_reply_error(c, 413, "role: larger than %d bytes", ANVIL_JOB_SPEC_MAX_BYTES);
    anvil_role r;
    if (anvil_role_parse(c->rq->body ? c->rq->body : "", c->rq->body_len, &r))
        return api_reply_error(c, 400, "%s", anvil_errmsg());
    snprintf(c->target, sizeof c->target, "%s", r.name);
    char detail[200];
    snprintf(detail, sizeof detail, "max_procs %d, max_runtime_s %g, %d input and %d output prefixes", r.max_procs,
             r.max_runtime_s, r.ninput, r.noutput);
    anvil_audit_entry e = api_audit(c, 201, detail);
    int rc = anvil_auth_add_role(c->env->st, &r, &e);
    if (rc) c->audited = false;
    if (rc == 1) api_reply_error(c, 409, "role %s exists already", r.name);
    else if (rc) api_internal_error(c, NULL);
    else api_reply_json(c, 201, anvil_role_to_json(&r));
    anvil_role_free(&r);
    return rc ? -1 : 0;
}

static int grant(anvil_api_call *c, const char *rest) {
    size_t n = strcspn(rest, "/");
    char role[65];
    if (strcmp(rest + n, "/grant") || n >= sizeof role) {
        c->action = "request";
        return api_reply_error(c, 404, "no such endpoint: %.200s", c->rq->path);
    }
    snprintf(role, sizeof role, "%.*s", (int)n, rest);
    snprintf(c->target, sizeof c->target, "%s", role);
    static const char *const fields[] = {"user", NULL};
    cJSON *o = api_body_object(c, "grant", fields);
    const char *user = o ? name_field(c, o, "grant", "user") : NULL;
    if (!user) {
        cJSON_Delete(o);
        return -1;
    }
    char detail[100];
    snprintf(detail, sizeof detail, "to %s", user);
    anvil_audit_entry e = api_audit(c, 200, detail);
    int rc = anvil_auth_grant(c->env->st, role, user, &e);
    if (rc) c->audited = false;
    if (rc == 1) api_reply_error(c, 404, "no role %s", role);
    else if (rc == 2) api_reply_error(c, 404, "no user %s", user);
    else if (rc) api_internal_error(c, NULL);
    else {
        cJSON *a = cJSON_CreateObject();
        if (a) cJSON_AddStringToObject(a, "role", role), cJSON_AddStringToObject(a, "user", user);
        api_reply_json(c, 200, a);
    }
    cJSON_Delete(o);
    return rc ? -1 : 0;
}

static int audit_list(anvil_api_call *c, const char *rest) {
    (void)rest;
    const char *user = api_arg(c, "user"), *lim = api_arg(c, "limit");
    long limit = 100;
    char *end = NULL;
    if (lim) limit = strtol(lim, &end, 10);
    if (lim && (!*lim || *end || limit < 1 || limit > 1000000))
        return api_reply_error(c, 400, "limit: must be an integer from 1 to 1000000");
    if (user && !anvil_job_name_valid(user, 64)) return api_reply_error(c, 400, "user: not a user name");
    cJSON *o = anvil_audit_list(c->env->st, user, (int)limit);
    return o ? api_reply_json(c, 200, o) : api_internal_error(c, NULL);
}

static int list_users(anvil_api_call *c, const char *rest) {
    (void)rest;
    cJSON *o = anvil_auth_users_json(c->env->st);
    return o ? api_reply_json(c, 200, o) : api_internal_error(c, NULL);
}

static int list_roles(anvil_api_call *c, const char *rest) {
    (void)rest;
    cJSON *o = anvil_auth_roles_json(c->env->st, c->who.admin ? NULL : c->who.user);
    return o ? api_reply_json(c, 200, o) : api_internal_error(c, NULL);
}

/* {"user" | "role": NAME, "running_jobs": N, "hosts": N, "procs": N, "max_runtime_s": S}: a limit
 * left out or null is none, all of them none removes the quota. */
/* anvil_quota_held_fn: the hosts the subject's Available warm pools hold (pool_hosts with no job to spare
 * a pool for: none has 0 hosts). */
static double pool_held(void *ctx, bool is_role, const char *name) {
    anvil_backend *b = ctx;
    return b->ops->pool_hosts ? b->ops->pool_hosts(b, is_role ? NULL : name, is_role ? name : NULL, 0, 0) : 0;
}

static int set_quota(anvil_api_call *c, const char *rest) {
    (void)rest;
    static const char *const fields[] = {"user", "role", "running_jobs", "hosts", "procs", "max_runtime_s", NULL};
    cJSON *o = api_body_object(c, "quota", fields);
    if (!o) return -1;
    const cJSON *user = cJSON_GetObjectItemCaseSensitive(o, "user"), *role = cJSON_GetObjectItemCaseSensitive(o, "role");
    anvil_quota_limits q = {-1, -1, -1, -1};
    double *v[] = {&q.running_jobs, &q.hosts, &q.procs, &q.max_runtime_s};
    int rc = (user != NULL) == (role != NULL) ? anvil_fail("quota: give one of user and role") : 0;
    char *name = NULL;
    if (!rc) rc = anvil_json_string(user ? user : role, "quota", user ? "user" : "role", 64, &name);
    for (int i = 0; i < 4 && !rc; i++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, fields[2 + i]);
        if (e && !cJSON_IsNull(e)) rc = anvil_json_number(e, "quota", fields[2 + i], 1e9, i < 3, v[i]);
    }
    cJSON_Delete(o);
    if (rc) {
        free(name);
        return api_reply_error(c, 400, "%s", anvil_errmsg());
    }
    snprintf(c->target, sizeof c->target, "%s %s", user ? "user" : "role", name);
    char detail[200];
    snprintf(detail, sizeof detail, "running_jobs %g, hosts %g, procs %g, max_runtime_s %g (-1: none)", q.running_jobs,
             q.hosts, q.procs, q.max_runtime_s);
    anvil_audit_entry e = api_audit(c, 200, detail);
    rc = anvil_quota_set(c->env->st, role != NULL, name, &q, &e);
    if (rc) c->audited = false;
    if (rc == 1) rc = api_reply_error(c, 404, "quota: no %s %s", role ? "role" : "user", name);
    else if (rc) rc = api_internal_error(c, NULL);
    free(name);
    if (rc) return rc;
    cJSON *all = anvil_quota_json(c->env->st, NULL, pool_held, anvil_supervisor_backend(c->env->sup));
    return all ? api_reply_json(c, 200, all) : api_internal_error(c, NULL);
}

static int list_quotas(anvil_api_call *c, const char *rest) {
    (void)rest;
    cJSON *o = anvil_quota_json(c->env->st, c->who.admin ? NULL : c->who.user, pool_held,
                                anvil_supervisor_backend(c->env->sup));
    return o ? api_reply_json(c, 200, o) : api_internal_error(c, NULL);
}

static const char *const audit_args[] = {"user", "limit", NULL};

static const struct {
    const char *path; /* ending in '/': a prefix, the rest handed to the handler */
    const char *method, *action;
    bool mutating, admin;
    const char *const *args; /* the query parameters it takes; NULL: none */
    int (*run)(anvil_api_call *c, const char *rest);
} routes[] = {
    {"/v1/users", "POST", "user.add", true, true, NULL, add_user},
    {"/v1/users", "GET", "user.list", false, true, NULL, list_users},
    {"/v1/tokens", "POST", "token.add", true, true, NULL, add_token},
    {"/v1/tokens/", "POST", "token.revoke", true, true, NULL, revoke},
    {"/v1/roles", "POST", "role.add", true, true, NULL, add_role},
    {"/v1/roles", "GET", "role.list", false, false, NULL, list_roles},
    {"/v1/roles/", "POST", "role.grant", true, true, NULL, grant},
    {"/v1/audit", "GET", "audit.list", false, true, audit_args, audit_list},
    {"/v1/quotas", "POST", "quota.set", true, true, NULL, set_quota},
    {"/v1/quotas", "GET", "quota.list", false, false, NULL, list_quotas},
};
#define NROUTES (sizeof routes / sizeof *routes)

bool api_route_admin(anvil_api_call *c, const char *path, int *rc) {
    static const char *const none[] = {NULL};
    size_t match = NROUTES, other = NROUTES;
    for (size_t i = 0; i < NROUTES && match == NROUTES; i++) {
        size_t n = strlen(routes[i].path);
        bool prefix = routes[i].path[n - 1] == '/';
        if (prefix ? strncmp(path, routes[i].path, n) : strcmp(path, routes[i].path)) continue;
        if (!strcmp(c->rq->method, routes[i].method)) match = i;
        else if (other == NROUTES) other = i;
    }
    if (match == NROUTES && other == NROUTES) return false;
    if (match == NROUTES) {
        c->action = routes[other].action;
        bool both = other + 1 < NROUTES && !strcmp(routes[other + 1].path, routes[other].path);
        *rc = api_reply_error(c, 405, "use %s%s%s", routes[other].method, both ? " or " : "",
                              both ? routes[other + 1].method : "");
        return true;
    }
    c->action = routes[match].action;
    c->mutating = routes[match].mutating;
    if (routes[match].admin && !api_need_admin(c)) *rc = -1;
    else if (!api_known_args(c, routes[match].args ? routes[match].args : none)) *rc = -1;
    else *rc = routes[match].run(c, path + strlen(routes[match].path));
    return true;
}
