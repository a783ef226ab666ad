#include "job/store.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/json.h"
#include "job/audit.h"
#include "job/store_internal.h"

static const char *const status_names[ANVIL_JOB_NSTATUS] = {"Pending", "Starting", "Running", "Stopping",
                                                            "Completed", "Failed", "Stopped"};
static const char *const stop_names[] = {"", "requested", "runtime", "hang"};

const char *anvil_job_status_name(anvil_job_status s) { return status_names[s]; }

int anvil_job_status_parse(const char *s) {
    for (int i = 0; i < ANVIL_JOB_NSTATUS; i++)
        if (!strcmp(s, status_names[i])) return i;
    return -1;
}

bool anvil_job_status_final(anvil_job_status s) { return s >= ANVIL_JOB_COMPLETED; }

double anvil_store_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS jobs ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, spec TEXT NOT NULL, run_dir TEXT NOT NULL,"
    " status TEXT NOT NULL, secondary TEXT NOT NULL DEFAULT '', failure_reason TEXT NOT NULL DEFAULT '',"
    " attempt INTEGER NOT NULL DEFAULT 0, handle TEXT NOT NULL DEFAULT '', exit_code INTEGER NOT NULL DEFAULT -1,"
    " stop TEXT NOT NULL DEFAULT '', stop_deadline REAL NOT NULL DEFAULT 0, submitted_at REAL NOT NULL,"
    " started_at REAL NOT NULL DEFAULT 0, ended_at REAL NOT NULL DEFAULT 0, owner TEXT NOT NULL DEFAULT '',"
    " role TEXT NOT NULL DEFAULT '', backend TEXT NOT NULL DEFAULT '', first_started_at REAL NOT NULL DEFAULT 0);"
    "CREATE TABLE IF NOT EXISTS history ("
    " job_id INTEGER NOT NULL REFERENCES jobs(id), seq INTEGER NOT NULL, at REAL NOT NULL, status TEXT NOT NULL,"
    " secondary TEXT NOT NULL, message TEXT NOT NULL, PRIMARY KEY (job_id, seq));"
    "CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status);"
    "CREATE TABLE IF NOT EXISTS attempts ("
    " job_id INTEGER NOT NULL REFERENCES jobs(id), attempt INTEGER NOT NULL, backend TEXT NOT NULL,"
    " handle TEXT NOT NULL, started_at REAL NOT NULL, ended_at REAL NOT NULL DEFAULT 0,"
    " exit_code INTEGER NOT NULL DEFAULT -1, outcome TEXT NOT NULL DEFAULT '', facts TEXT NOT NULL DEFAULT '{}',"
    " PRIMARY KEY (job_id, attempt));"
    "CREATE TABLE IF NOT EXISTS faults ("
    " job_id INTEGER NOT NULL REFERENCES jobs(id), seq INTEGER NOT NULL, at REAL NOT NULL, attempt INTEGER NOT NULL,"
    " kind TEXT NOT NULL, target TEXT NOT NULL, detail TEXT NOT NULL, PRIMARY KEY (job_id, seq));"
    "CREATE TABLE IF NOT EXISTS hook_outbox (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " job_id INTEGER NOT NULL REFERENCES jobs(id), at REAL NOT NULL, status TEXT NOT NULL, secondary TEXT NOT NULL,"
    " message TEXT NOT NULL, kind TEXT NOT NULL, target TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,"
    " next_at REAL NOT NULL, delivered_at REAL NOT NULL DEFAULT 0, given_up_at REAL NOT NULL DEFAULT 0,"
    " last_error TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX IF NOT EXISTS hook_outbox_due ON hook_outbox(next_at) WHERE delivered_at = 0 AND given_up_at = 0;"
    "CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, admin INTEGER NOT NULL, created_at REAL NOT NULL);"
    "CREATE TABLE IF NOT EXISTS tokens (id TEXT PRIMARY KEY, user TEXT NOT NULL REFERENCES users(name),"
    " hash BLOB NOT NULL, created_at REAL NOT NULL, revoked_at REAL NOT NULL DEFAULT 0);"
    "CREATE TABLE IF NOT EXISTS roles (name TEXT PRIMARY KEY, policy TEXT NOT NULL, created_at REAL NOT NULL);"
    "CREATE TABLE IF NOT EXISTS grants (role TEXT NOT NULL REFERENCES roles(name),"
    " user TEXT NOT NULL REFERENCES users(name), granted_at REAL NOT NULL, PRIMARY KEY (role, user));"
    "CREATE TABLE IF NOT EXISTS audit (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, user TEXT NOT NULL,"
    " token_id TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL, result INTEGER NOT NULL,"
    " detail TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS quotas (kind TEXT NOT NULL, name TEXT NOT NULL, running_jobs REAL NOT NULL,"
    " hosts REAL NOT NULL, procs REAL NOT NULL, max_runtime_s REAL NOT NULL, set_at REAL NOT NULL,"
    " PRIMARY KEY (kind, name));"
    "CREATE TRIGGER IF NOT EXISTS audit_append_only_update BEFORE UPDATE ON audit"
    " BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;"
    "CREATE TRIGGER IF NOT EXISTS audit_append_only_delete BEFORE DELETE ON audit"
    " BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;";

static int has_column(anvil_store *st, const char *table, const char *column, bool *has) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2", -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(s, 1, table, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, column, -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
        *has = rc == SQLITE_ROW;
    }
    sqlite3_finalize(s);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : anvil_store_db_fail(st, table);
}

/* A state folder from an older daemon gets the columns added since, with their defaults: jobs from
 * before users have no owner (visible to admins only); the pid of an attempt from before backends
 * becomes its local backend's handle; a job's first start is taken to be its current attempt's. */
static int add_new_columns(anvil_store *st) {
    static const char *const added[][2] = {
        {"owner", "ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT ''"},
        {"role", "ALTER TABLE jobs ADD COLUMN role TEXT NOT NULL DEFAULT ''"},
        {"backend", "ALTER TABLE jobs ADD COLUMN backend TEXT NOT NULL DEFAULT ''"},
        {"handle", "ALTER TABLE jobs ADD COLUMN handle TEXT NOT NULL DEFAULT '';"
                   "UPDATE jobs SET handle = CAST(pid AS TEXT), backend = 'local' WHERE pid != 0"},
        {"first_started_at", "ALTER TABLE jobs ADD COLUMN first_started_at REAL NOT NULL DEFAULT 0;"
                             "UPDATE jobs SET first_started_at = started_at"},
    };
    for (size_t i = 0; i < sizeof added / sizeof *added; i++) {
        bool has = false;
        if (has_column(st, "jobs", added[i][0], &has)) return -1;
        if (!has && anvil_store_exec(st, added[i][1])) return -1;
    }
    return 0;
}

int anvil_store_db_fail(anvil_store *st, const char *what) {
    return anvil_fail("state database: %s: %s", what, sqlite3_errmsg(st->db));
}

int anvil_store_exec(anvil_store *st, const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(st->db, sql, NULL, NULL, &err) == SQLITE_OK) return 0;
    anvil_fail("state database: %s", err ? err : sqlite3_errmsg(st->db));
    sqlite3_free(err);
    return -1;
}

anvil_store *anvil_store_open(const char *path) {
    anvil_store *st = calloc(1, sizeof *st);
    if (!st) {
        anvil_fail("state database: out of memory");
        return NULL;
    }
    pthread_mutex_init(&st->lock, NULL);
    if (sqlite3_open_v2(path, &st->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) !=
        SQLITE_OK) {
        anvil_fail("state database %s: %s", path, st->db ? sqlite3_errmsg(st->db) : "out of memory");
        anvil_store_close(st);
        return NULL;
    }
    sqlite3_busy_timeout(st->db, 5000);
    /* Checked before the first write: the journal mode and the schema below would otherwise write to
     * a damaged file before the check could refuse it. */
    if (anvil_store_quick_check(st->db)) {
        char why[700];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        anvil_fail("state database %s is %s; restore it from a backup (README: 'Restoring the state')", path, why);
        anvil_store_close(st);
        return NULL;
    }
    /* FULL: a transaction is on disk when its commit returns, also in WAL mode. */
    if (anvil_store_exec(st, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;") ||
        anvil_store_exec(st, "BEGIN IMMEDIATE") || anvil_store_exec(st, schema) || add_new_columns(st) ||
        anvil_store_exec(st, "COMMIT")) {
        anvil_store_close(st);
        return NULL;
    }
    return st;
}

void anvil_store_close(anvil_store *st) {
    if (!st) return;
    anvil_outbox_clear(st);
    sqlite3_close(st->db);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

char *anvil_store_column_text(sqlite3_stmt *s, int col) {
    const unsigned char *t = sqlite3_column_text(s, col);
    return strdup(t ? (const char *)t : "");
}

#define JOB_COLUMNS                                                                                             \
    "id, name, spec, run_dir, status, secondary, failure_reason, attempt, handle, exit_code, stop,"       \
    " stop_deadline, submitted_at, started_at, ended_at, owner, role, backend, first_started_at"

static int read_job(sqlite3_stmt *s, anvil_job *j) {
    memset(j, 0, sizeof *j);
    j->id = sqlite3_column_int64(s, 0);
    j->name = anvil_store_column_text(s, 1);
    j->spec = anvil_store_column_text(s, 2);
    j->run_dir = anvil_store_column_text(s, 3);
    int status = anvil_job_status_parse((const char *)sqlite3_column_text(s, 4));
    j->secondary = anvil_store_column_text(s, 5);
    j->failure_reason = anvil_store_column_text(s, 6);
    j->attempt = sqlite3_column_int(s, 7);
    j->handle = anvil_store_column_text(s, 8);
    j->exit_code = sqlite3_column_int(s, 9);
    const char *stop = (const char *)sqlite3_column_text(s, 10);
    for (size_t k = 0; stop && k < sizeof stop_names / sizeof *stop_names; k++)
        if (!strcmp(stop, stop_names[k])) j->stop = (anvil_job_stop)k;
    j->stop_deadline = sqlite3_column_double(s, 11);
    j->submitted_at = sqlite3_column_double(s, 12);
    j->started_at = sqlite3_column_double(s, 13);
    j->ended_at = sqlite3_column_double(s, 14);
    j->owner = anvil_store_column_text(s, 15);
    j->role = anvil_store_column_text(s, 16);
    j->backend = anvil_store_column_text(s, 17);
    j->first_started_at = sqlite3_column_double(s, 18);
    if (!j->name || !j->spec || !j->run_dir || !j->secondary || !j->failure_reason || !j->owner || !j->role ||
        !j->handle || !j->backend) {
        anvil_job_free(j);
        return anvil_fail("state database: out of memory");
    }
    if (status < 0) {
        anvil_job_free(j);
        return anvil_fail("state database: job %lld has an unknown status", (long long)sqlite3_column_int64(s, 0));
    }
    j->status = (anvil_job_status)status;
    return 0;
}

int anvil_store_add_event(anvil_store *st, int64_t id, double at, const char *status, const char *secondary,
                          const char *message, bool primary) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db,
                                "INSERT INTO history (job_id, seq, at, status, secondary, message) VALUES (?1,"
                                " (SELECT COALESCE(MAX(seq), 0) + 1 FROM history WHERE job_id = ?1), ?2, ?3, ?4, ?5)",
                                -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_double(s, 2, at);
        sqlite3_bind_text(s, 3, status, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, secondary, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 5, message ? message : "", -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) return anvil_store_db_fail(st, "history");
    return primary ? anvil_outbox_enqueue(st, id, at, status, secondary, message ? message : "") : 0;
}

static int insert_job(anvil_store *st, const anvil_job_new *job, const char *default_runs,
                      const anvil_audit_entry *audit, int64_t *id) {
    sqlite3_stmt *s = NULL;
    double now = anvil_store_now();
    const char *run_dir = job->run_dir;
    int rc = sqlite3_prepare_v2(st->db,
                                "INSERT INTO jobs (name, spec, run_dir, status, submitted_at, owner, role)"
                                " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                                -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(s, 1, job->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, job->spec, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, run_dir ? run_dir : "", -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, status_names[ANVIL_JOB_PENDING], -1, SQLITE_STATIC);
        sqlite3_bind_double(s, 5, now);
        sqlite3_bind_text(s, 6, job->owner, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 7, job->role, -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) return anvil_store_db_fail(st, "insert");
    *id = sqlite3_last_insert_rowid(st->db);
    if (!run_dir) {
        char *sql = sqlite3_mprintf("UPDATE jobs SET run_dir = '%q/%lld' WHERE id = %lld", default_runs,
                                    (long long)*id, (long long)*id);
        rc = sql ? anvil_store_exec(st, sql) : anvil_fail("state database: out of memory");
        sqlite3_free(sql);
        if (rc) return -1;
    }
    if (anvil_store_add_event(st, *id, now, status_names[ANVIL_JOB_PENDING], "", "submitted", true)) return -1;
    if (!audit) return 0;
    anvil_audit_entry e = *audit;
    char target[32];
    snprintf(target, sizeof target, "job %lld", (long long)*id);
    e.target = target;
    return anvil_audit_insert(st, &e);
}

int anvil_store_submit(anvil_store *st, const anvil_job_new *job, const char *default_runs,
                       const anvil_audit_entry *audit, int64_t *id) {
    int rc;
    IN_TRANSACTION(st, rc, rc = insert_job(st, job, default_runs, audit, id));
    return rc;
}

int anvil_store_get(anvil_store *st, int64_t id, anvil_job *job) {
    sqlite3_stmt *s = NULL;
    pthread_mutex_lock(&st->lock);
    int rc = sqlite3_prepare_v2(st->db, "SELECT " JOB_COLUMNS " FROM jobs WHERE id = ?1", -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, id);
        rc = sqlite3_step(s);
    }
    int out = rc == SQLITE_ROW ? read_job(s, job) : rc == SQLITE_DONE ? 1 : anvil_store_db_fail(st, "get");
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    return out;
}

int anvil_store_rows(anvil_store *st, const char *sql, const anvil_store_query *q, const void *ctx, void **rows,
                     int *n) {
    *rows = NULL;
    *n = 0;
    sqlite3_stmt *s = NULL;
    int cap = 0, rc = 0, step = SQLITE_DONE;
    char *elems = NULL;
    pthread_mutex_lock(&st->lock);
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK) rc = anvil_store_db_fail(st, q->what);
    else if (q->bind) q->bind(s, ctx);
    while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
        if (*n == cap) {
            char *grown = realloc(elems, q->size * (size_t)(cap = cap ? 2 * cap : 16));
            if (!grown) {
                rc = anvil_fail("state database: out of memory");
                break;
            }
            elems = grown;
        }
        void *elem = elems + q->size * (size_t)*n;
        memset(elem, 0, q->size);
        int got = q->read(s, elem, ctx);
        if (got < 0) rc = -1;
        else if (!got) (*n)++;
    }
    if (!rc && step != SQLITE_DONE) rc = anvil_store_db_fail(st, q->what);
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    if (rc) {
        q->free_all(elems, *n);
        *n = 0;
        return -1;
    }
    *rows = elems;
    return 0;
}

typedef struct {
    unsigned mask;
    double since;
} job_filter;

static void bind_since(sqlite3_stmt *s, const void *ctx) { sqlite3_bind_double(s, 1, ((const job_filter *)ctx)->since); }

static int read_listed(sqlite3_stmt *s, void *elem, const void *ctx) {
    int status = anvil_job_status_parse((const char *)sqlite3_column_text(s, 4));
    if (status >= 0 && !(((const job_filter *)ctx)->mask & (1u << status))) return 1;
    return read_job(s, elem);
}

static void free_jobs(void *rows, int n) { anvil_job_list_free(rows, n); }

/* The jobs whose status is in mask and that have not ended or ended at or after since. */
static int list_jobs(anvil_store *st, unsigned mask, double since, anvil_job **jobs, int *n) {
    static const anvil_store_query q = {"list", sizeof(anvil_job), bind_since, read_listed, free_jobs};
    job_filter f = {mask, since};
    return anvil_store_rows(st, "SELECT " JOB_COLUMNS " FROM jobs WHERE ended_at = 0 OR ended_at >= ?1 ORDER BY id", &q,
                            &f, (void **)jobs, n);
}

int anvil_store_list(anvil_store *st, unsigned mask, anvil_job **jobs, int *n) {
    return list_jobs(st, mask, 0, jobs, n);
}

int anvil_store_list_recent(anvil_store *st, double since, anvil_job **jobs, int *n) {
    return list_jobs(st, ~0u, since, jobs, n);
}

int anvil_store_counts_read(anvil_store *st, anvil_store_counts *c) {
    memset(c, 0, sizeof *c);
    static const char *const sql[] = {
        "SELECT status, COUNT(*) FROM jobs GROUP BY status",
        "SELECT 'submitted', COUNT(*) FROM jobs UNION ALL"
        " SELECT 'retries', COUNT(*) FROM history WHERE secondary LIKE 'Retrying (%' UNION ALL"
        " SELECT 'hangs', COUNT(*) FROM history WHERE secondary = 'HangDetected' AND status = 'Stopping' UNION ALL"
        " SELECT 'delivered', COUNT(*) FROM hook_outbox WHERE delivered_at > 0 UNION ALL"
        " SELECT 'failed', COALESCE(SUM(attempts - (delivered_at > 0)), 0) FROM hook_outbox UNION ALL"
        " SELECT 'given_up', COUNT(*) FROM hook_outbox WHERE given_up_at > 0"};
    int64_t *named[] = {&c->submitted, &c->retries, &c->hangs, &c->hook_delivered, &c->hook_failed, &c->hook_given_up};
    static const char *const names[] = {"submitted", "retries", "hangs", "delivered", "failed", "given_up"};
    int rc = 0;
    pthread_mutex_lock(&st->lock);
    for (int q = 0; q < 2 && !rc; q++) {
        sqlite3_stmt *s = NULL;
        int step = SQLITE_DONE;
        if (sqlite3_prepare_v2(st->db, sql[q], -1, &s, NULL) != SQLITE_OK) rc = anvil_store_db_fail(st, "counts");
        while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
            const char *key = (const char *)sqlite3_column_text(s, 0);
            int64_t v = sqlite3_column_int64(s, 1);
            if (!key) continue;
            if (q == 0) {
                int status = anvil_job_status_parse(key);
                if (status >= 0) c->by_status[status] = v;
            } else {
                for (size_t k = 0; k < sizeof names / sizeof *names; k++)
                    if (!strcmp(key, names[k])) *named[k] = v;
            }
        }
        if (!rc && step != SQLITE_DONE) rc = anvil_store_db_fail(st, "counts");
        sqlite3_finalize(s);
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

static int update_job(anvil_store *st, const anvil_job *j, const char *message) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, "SELECT status, secondary FROM jobs WHERE id = ?1", -1, &s, NULL);
    bool primary = false, changed = false;
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, j->id);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            primary = strcmp((const char *)sqlite3_column_text(s, 0), status_names[j->status]) != 0;
            changed = primary || strcmp((const char *)sqlite3_column_text(s, 1), j->secondary);
        }
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW) return rc == SQLITE_DONE ? anvil_fail("job %lld: no such job", (long long)j->id)
                                                   : anvil_store_db_fail(st, "update");
    rc = sqlite3_prepare_v2(st->db,
                            "UPDATE jobs SET status = ?2, secondary = ?3, failure_reason = ?4, attempt = ?5, handle = ?6,"
                            " exit_code = ?7, stop = ?8, stop_deadline = ?9, started_at = ?10, ended_at = ?11,"
                            " backend = ?12, first_started_at = ?13 WHERE id = ?1",
                            -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, j->id);
        sqlite3_bind_text(s, 2, status_names[j->status], -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, j->secondary, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, j->failure_reason, -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 5, j->attempt);
        sqlite3_bind_text(s, 6, j->handle, -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 7, j->exit_code);
        sqlite3_bind_text(s, 8, stop_names[j->stop], -1, SQLITE_STATIC);
        sqlite3_bind_double(s, 9, j->stop_deadline);
        sqlite3_bind_double(s, 10, j->started_at);
        sqlite3_bind_double(s, 11, j->ended_at);
        sqlite3_bind_text(s, 12, j->backend, -1, SQLITE_STATIC);
        sqlite3_bind_double(s, 13, j->first_started_at);
        rc = sqlite3_step(s);
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) return anvil_store_db_fail(st, "update");
    if (j->handle[0] && anvil_store_attempt_begin(st, j)) return -1;
    if (!changed) return 0;
    return anvil_store_add_event(st, j->id, anvil_store_now(), status_names[j->status], j->secondary, message, primary);
}

int anvil_store_update(anvil_store *st, const anvil_job *job, const char *message) {
    return anvil_store_update_audited(st, job, message, NULL);
}

static int update_audited(anvil_store *st, const anvil_job *job, const char *message, const anvil_audit_entry *audit) {
    return update_job(st, job, message) ? -1 : anvil_audit_insert(st, audit);
}

int anvil_store_update_audited(anvil_store *st, const anvil_job *job, const char *message,
                               const anvil_audit_entry *audit) {
    int rc;
    IN_TRANSACTION(st, rc, rc = update_audited(st, job, message, audit));
    return rc;
}

static int update_ended(anvil_store *st, const anvil_job *job, const char *message, const anvil_attempt_end *end) {
    return update_job(st, job, message) ? -1 : anvil_store_attempt_end(st, job->id, end);
}

int anvil_store_update_ended(anvil_store *st, const anvil_job *job, const char *message, const anvil_attempt_end *end) {
    int rc;
    IN_TRANSACTION(st, rc, rc = update_ended(st, job, message, end));
    return rc;
}

void anvil_store_bind_id(sqlite3_stmt *s, const void *ctx) { sqlite3_bind_int64(s, 1, *(const int64_t *)ctx); }

static int read_event(sqlite3_stmt *s, void *elem, const void *ctx) {
    (void)ctx;
    anvil_job_event *e = elem;
    int status = anvil_job_status_parse((const char *)sqlite3_column_text(s, 1));
    e->at = sqlite3_column_double(s, 0);
    e->status = status < 0 ? ANVIL_JOB_PENDING : (anvil_job_status)status;
    e->secondary = anvil_store_column_text(s, 2);
    e->message = anvil_store_column_text(s, 3);
    if (e->secondary && e->message) return 0;
    free(e->secondary);
    free(e->message);
    return anvil_fail("state database: out of memory");
}

static void free_events(void *rows, int n) { anvil_job_events_free(rows, n); }

int anvil_store_history(anvil_store *st, int64_t id, anvil_job_event **events, int *n) {
    static const anvil_store_query q = {"history", sizeof(anvil_job_event), anvil_store_bind_id, read_event,
                                        free_events};
    return anvil_store_rows(st, "SELECT at, status, secondary, message FROM history WHERE job_id = ?1 ORDER BY seq", &q,
                            &id, (void **)events, n);
}

cJSON *anvil_job_json(const anvil_job *j) {
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        anvil_fail("out of memory");
        return NULL;
    }
    cJSON_AddNumberToObject(o, "id", (double)j->id);
    cJSON_AddStringToObject(o, "name", j->name);
    cJSON_AddStringToObject(o, "owner", j->owner);
    cJSON_AddStringToObject(o, "role", j->role);
    cJSON_AddStringToObject(o, "status", anvil_job_status_name(j->status));
    cJSON_AddStringToObject(o, "secondary_status", j->secondary);
    cJSON_AddStringToObject(o, "failure_reason", j->failure_reason);
    cJSON_AddNumberToObject(o, "attempt", j->attempt);
    cJSON_AddNumberToObject(o, "exit_code", j->exit_code);
    cJSON_AddStringToObject(o, "run_dir", j->run_dir);
    cJSON_AddNumberToObject(o, "submitted_at", j->submitted_at);
    cJSON_AddNumberToObject(o, "first_started_at", j->first_started_at);
    cJSON_AddNumberToObject(o, "started_at", j->started_at);
    cJSON_AddNumberToObject(o, "ended_at", j->ended_at);
    cJSON *spec = anvil_json_parse_str(j->spec);
    if (spec) cJSON_AddItemToObject(o, "spec", spec);
    return o;
}

void anvil_job_free(anvil_job *j) {
    free(j->name);
    free(j->spec);
    free(j->run_dir);
    free(j->secondary);
    free(j->failure_reason);
    free(j->owner);
    free(j->role);
    free(j->handle);
    free(j->backend);
    memset(j, 0, sizeof *j);
}

void anvil_job_list_free(anvil_job *jobs, int n) {
    for (int i = 0; i < n; i++) anvil_job_free(&jobs[i]);
    free(jobs);
}

void anvil_job_events_free(anvil_job_event *events, int n) {
    for (int i = 0; i < n; i++) {
        free(events[i].secondary);
        free(events[i].message);
    }
    free(events);
}
