#include "job/quota.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "job/auth.h"
#include "job/store_internal.h"

static const char *const limit_names[] = {"running_jobs", "hosts", "procs", "max_runtime_s"};

static double *limit_at(anvil_quota_limits *q, int i) {
    double *v[] = {&q->running_jobs, &q->hosts, &q->procs, &q->max_runtime_s};
    return v[i];
}

static int exists(anvil_store *st, bool is_role, const char *name, bool *found) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, is_role ? "SELECT 1 FROM roles WHERE name = ?1" : "SELECT 1 FROM users WHERE name = ?1",
                                -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
        *found = rc == SQLITE_ROW;
    }
    sqlite3_finalize(s);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : anvil_store_db_fail(st, "quota");
}

static int set_quota(anvil_store *st, bool is_role, const char *name, const anvil_quota_limits *q, int *result) {
    bool found = false;
    if (exists(st, is_role, name, &found)) return -1;
    if (!found) {
        *result = 1;
        return 0;
    }
    bool none = q->running_jobs < 0 && q->hosts < 0 && q->procs < 0 && q->max_runtime_s < 0;
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db,
                                none ? "DELETE FROM quotas WHERE kind = ?1 AND name = ?2"
                                     : "INSERT OR REPLACE INTO quotas (kind, name, running_jobs, hosts, procs,"
                                       " max_runtime_s, set_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                                -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(s, 1, is_role ? "role" : "user", -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
        if (!none) {
            anvil_quota_limits l = *q;
            for (int i = 0; i < 4; i++) sqlite3_bind_double(s, 3 + i, *limit_at(&l, i));
            sqlite3_bind_double(s, 7, anvil_store_now());
        }
        rc = sqlite3_step(s);
    }
    sqlite3_finalize(s);
    *result = 0;
    return rc == SQLITE_DONE ? 0 : anvil_store_db_fail(st, "quota");
}

int anvil_quota_set(anvil_store *st, bool is_role, const char *name, const anvil_quota_limits *q,
                    const anvil_audit_entry *audit) {
    int rc, result = 0;
    IN_TRANSACTION(st, rc, rc = set_quota(st, is_role, name, q, &result); if (!rc && !result) rc = anvil_audit_insert(st, audit));
    return rc ? -1 : result;
}

/* The quota of a subject: 0 with *q, 1 when it has none. */
static int get_quota(anvil_store *st, bool is_role, const char *name, anvil_quota_limits *q) {
    sqlite3_stmt *s = NULL;
    pthread_mutex_lock(&st->lock);
    int rc = sqlite3_prepare_v2(st->db,
                                "SELECT running_jobs, hosts, procs, max_runtime_s FROM quotas WHERE kind = ?1 AND name = ?2",
                                -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(s, 1, is_role ? "role" : "user", -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
        for (int i = 0; rc == SQLITE_ROW && i < 4; i++) *limit_at(q, i) = sqlite3_column_double(s, i);
    }
    sqlite3_finalize(s);
    int out = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? 1 : anvil_store_db_fail(st, "quota");
    pthread_mutex_unlock(&st->lock);
    return out;
}

typedef struct {
    double running_jobs, hosts, procs;
} usage;

static const unsigned active_mask = 1u << ANVIL_JOB_PENDING | 1u << ANVIL_JOB_STARTING | 1u << ANVIL_JOB_RUNNING |
                                    1u << ANVIL_JOB_STOPPING;

/* What the jobs not ended of a user (is_role false) or a role hold. */
static int usage_of(anvil_store *st, bool is_role, const char *name, usage *u) {
    memset(u, 0, sizeof *u);
    anvil_job *jobs;
    int n;
    if (anvil_store_list(st, active_mask, &jobs, &n)) return -1;
    for (int i = 0; i < n; i++) {
        if (strcmp(is_role ? jobs[i].role : jobs[i].owner, name)) continue;
        anvil_job_spec s;
        if (anvil_job_spec_parse(jobs[i].spec, strlen(jobs[i].spec), &s)) continue;
        u->running_jobs++;
        u->hosts += s.hosts;
        u->procs += (double)s.hosts * s.procs_per_host;
        anvil_job_spec_free(&s);
    }
    anvil_job_list_free(jobs, n);
    return 0;
}

/* One subject's check: 0, 1 with why, -1. */
static int check_one(anvil_store *st, bool is_role, const char *name, const anvil_job_spec *s, double held,
                     char *why, size_t cap) {
    anvil_quota_limits q;
    int rc = get_quota(st, is_role, name, &q);
    if (rc) return rc < 0 ? -1 : 0;
    usage u;
    if (usage_of(st, is_role, name, &u)) return -1;
    u.hosts += held;
    const char *who = is_role ? "role" : "user";
    double want[] = {1, s->hosts, (double)s->hosts * s->procs_per_host};
    double have[] = {u.running_jobs, u.hosts, u.procs};
    for (int i = 0; i < 3; i++)
        if (*limit_at(&q, i) >= 0 && have[i] + want[i] > *limit_at(&q, i)) {
            snprintf(why, cap, "ResourceLimitExceeded: %s %s: %s %g in use%s + %g requested > %g", who, name,
                     limit_names[i], have[i], i == 1 && held > 0 ? " (warm pools included)" : "", want[i],
                     *limit_at(&q, i));
            return 1;
        }
    if (q.max_runtime_s >= 0 && (s->max_runtime_s <= 0 || s->max_runtime_s > q.max_runtime_s)) {
        if (s->max_runtime_s <= 0)
            snprintf(why, cap, "ResourceLimitExceeded: %s %s: max_runtime_s unlimited requested > %g (set one)", who,
                     name, q.max_runtime_s);
        else
            snprintf(why, cap, "ResourceLimitExceeded: %s %s: max_runtime_s %g requested > %g", who, name,
                     s->max_runtime_s, q.max_runtime_s);
        return 1;
    }
    return 0;
}

int anvil_quota_check(anvil_store *st, const char *owner, const char *role, const anvil_job_spec *s,
                      const double held[2], char *why, size_t cap) {
    int rc = check_one(st, false, owner, s, held[0], why, cap);
    return rc ? rc : role && role[0] ? check_one(st, true, role, s, held[1], why, cap) : 0;
}

/* Whether name is one of the roles of anvil_auth_user_roles's list ("a, b"). */
static bool in_list(const char *names, const char *name) {
    size_t n = strlen(name);
    for (const char *p = names; p && *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && !strncmp(p, name, n)) return true;
        p += len;
        while (*p == ',' || *p == ' ') p++;
    }
    return false;
}

cJSON *anvil_quota_json(anvil_store *st, const char *user, anvil_quota_held_fn held, void *ctx) {
    cJSON *o = cJSON_CreateObject(), *arr = o ? cJSON_AddArrayToObject(o, "quotas") : NULL;
    char *roles = NULL;
    int nroles = 0;
    if (!arr) {
        cJSON_Delete(o);
        anvil_fail("out of memory");
        return NULL;
    }
    if (user && anvil_auth_user_roles(st, user, &roles, &nroles)) {
        cJSON_Delete(o);
        return NULL;
    }
    sqlite3_stmt *s = NULL;
    int rc = 0, step = SQLITE_DONE;
    typedef struct {
        bool is_role;
        char name[65];
        anvil_quota_limits q;
    } row;
    row *rows = NULL;
    int n = 0, cap = 0;
    pthread_mutex_lock(&st->lock);
    if (sqlite3_prepare_v2(st->db, "SELECT kind, name, running_jobs, hosts, procs, max_runtime_s FROM quotas"
                                   " ORDER BY kind DESC, name",
                           -1, &s, NULL) != SQLITE_OK)
        rc = anvil_store_db_fail(st, "quota");
    while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) {
            row *grown = realloc(rows, sizeof *rows * (size_t)(cap = cap ? 2 * cap : 8));
            if (!grown) {
                rc = anvil_fail("out of memory");
                break;
            }
            rows = grown;
        }
        row *r = &rows[n++];
        r->is_role = !strcmp((const char *)sqlite3_column_text(s, 0), "role");
        snprintf(r->name, sizeof r->name, "%s", (const char *)sqlite3_column_text(s, 1));
        for (int i = 0; i < 4; i++) *limit_at(&r->q, i) = sqlite3_column_double(s, 2 + i);
    }
    if (!rc && step != SQLITE_DONE) rc = anvil_store_db_fail(st, "quota");
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    for (int i = 0; i < n && !rc; i++) {
        row *r = &rows[i];
        bool mine = !user || (!r->is_role && !strcmp(r->name, user));
        if (!mine && r->is_role) mine = in_list(roles, r->name);
        if (!mine) continue;
        usage u;
        if (usage_of(st, r->is_role, r->name, &u)) {
            rc = -1;
            break;
        }
        cJSON *e = cJSON_CreateObject(), *lim = cJSON_AddObjectToObject(e, "limits"),
              *use = cJSON_AddObjectToObject(e, "usage");
        if (!e || !lim || !use || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            rc = anvil_fail("out of memory");
            break;
        }
        cJSON_AddStringToObject(e, r->is_role ? "role" : "user", r->name);
        for (int k = 0; k < 4; k++) {
            double v = *limit_at(&r->q, k);
            if (v >= 0) cJSON_AddNumberToObject(lim, limit_names[k], v);
            else cJSON_AddNullToObject(lim, limit_names[k]);
        }
        cJSON_AddNumberToObject(use, "running_jobs", u.running_jobs);
        double pooled = held ? held(ctx, r->is_role, r->name) : 0;
        cJSON_AddNumberToObject(use, "hosts", u.hosts + pooled);
        cJSON_AddNumberToObject(use, "warm_pool_hosts", pooled);
        cJSON_AddNumberToObject(use, "procs", u.procs);
    }
    free(rows);
    free(roles);
    if (rc) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
