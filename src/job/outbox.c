/* The hooks' outbox table: rows queued with each status change, read and updated by the delivery
 * thread (hooks.c), listed by describe. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "job/hooks.h"
#include "job/outbox.h"
#include "job/store_internal.h"

static const char *const kind_names[] = {"command", "url"};

void anvil_outbox_clear(anvil_store *st) {
    for (int i = 0; i < st->nhooks; i++) free((char *)st->hooks[i].target);
    free(st->hooks);
    st->hooks = NULL;
    st->nhooks = 0;
}

int anvil_store_set_hooks(anvil_store *st, const anvil_hook *hooks, int n) {
    anvil_hook *copy = calloc((size_t)(n > 0 ? n : 1), sizeof *copy);
    if (!copy) return anvil_fail("out of memory");
    for (int i = 0; i < n; i++) {
        copy[i].kind = hooks[i].kind;
        if (!(copy[i].target = strdup(hooks[i].target))) {
            for (int k = 0; k < i; k++) free((char *)copy[k].target);
            free(copy);
            return anvil_fail("out of memory");
        }
    }
    pthread_mutex_lock(&st->lock);
    anvil_outbox_clear(st);
    st->hooks = copy;
    st->nhooks = n;
    pthread_mutex_unlock(&st->lock);
    return 0;
}

int anvil_outbox_enqueue(anvil_store *st, int64_t job_id, double at, const char *status, const char *secondary,
                         const char *message) {
    for (int i = 0; i < st->nhooks; i++) {
        sqlite3_stmt *s = NULL;
        int rc = sqlite3_prepare_v2(st->db,
                                    "INSERT INTO hook_outbox (job_id, at, status, secondary, message, kind, target,"
                                    " next_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?2)",
                                    -1, &s, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_int64(s, 1, job_id);
            sqlite3_bind_double(s, 2, at);
            sqlite3_bind_text(s, 3, status, -1, SQLITE_STATIC);
            sqlite3_bind_text(s, 4, secondary, -1, SQLITE_STATIC);
            sqlite3_bind_text(s, 5, message, -1, SQLITE_STATIC);
            sqlite3_bind_text(s, 6, kind_names[st->hooks[i].kind], -1, SQLITE_STATIC);
            sqlite3_bind_text(s, 7, st->hooks[i].target, -1, SQLITE_STATIC);
            rc = sqlite3_step(s);
        }
        sqlite3_finalize(s);
        if (rc != SQLITE_DONE) return anvil_store_db_fail(st, "hook outbox");
    }
    return 0;
}

#define ROW_COLUMNS                                                                                       \
    "id, job_id, at, status, secondary, message, kind, target, attempts, next_at, delivered_at, given_up_at," \
    " last_error"

static int read_row(sqlite3_stmt *s, anvil_outbox_row *r) {
    memset(r, 0, sizeof *r);
    r->id = sqlite3_column_int64(s, 0);
    r->job_id = sqlite3_column_int64(s, 1);
    r->at = sqlite3_column_double(s, 2);
    r->status = anvil_store_column_text(s, 3);
    r->secondary = anvil_store_column_text(s, 4);
    r->message = anvil_store_column_text(s, 5);
    const char *kind = (const char *)sqlite3_column_text(s, 6);
    r->kind = kind && !strcmp(kind, kind_names[ANVIL_HOOK_URL]) ? ANVIL_HOOK_URL : ANVIL_HOOK_COMMAND;
    r->target = anvil_store_column_text(s, 7);
    r->attempts = sqlite3_column_int(s, 8);
    r->next_at = sqlite3_column_double(s, 9);
    r->delivered_at = sqlite3_column_double(s, 10);
    r->given_up_at = sqlite3_column_double(s, 11);
    r->last_error = anvil_store_column_text(s, 12);
    if (r->status && r->secondary && r->message && r->target && r->last_error) return 0;
    anvil_outbox_rows_free(r, 1);
    return anvil_fail("out of memory");
}

static void bind_number(sqlite3_stmt *s, const void *ctx) { sqlite3_bind_double(s, 1, *(const double *)ctx); }

static int read_elem(sqlite3_stmt *s, void *elem, const void *ctx) {
    (void)ctx;
    return read_row(s, elem);
}

static void free_rows(void *rows, int n) {
    anvil_outbox_rows_free(rows, n);
    free(rows);
}

/* Runs a query of rows with ?1 bound to a number; *rows malloc'd. */
static int query_rows(anvil_store *st, const char *sql, double arg, anvil_outbox_row **rows, int *n) {
    static const anvil_store_query q = {"hook outbox", sizeof(anvil_outbox_row), bind_number, read_elem, free_rows};
    return anvil_store_rows(st, sql, &q, &arg, (void **)rows, n);
}

int anvil_outbox_due(anvil_store *st, double now, anvil_outbox_row **rows, int *n) {
    /* Per job and hook only the oldest open row: a job's events go out in order. */
    return query_rows(st,
                      "SELECT " ROW_COLUMNS " FROM hook_outbox o WHERE delivered_at = 0 AND given_up_at = 0"
                      " AND next_at <= ?1 AND id = (SELECT MIN(id) FROM hook_outbox p WHERE p.job_id = o.job_id"
                      " AND p.kind = o.kind AND p.target = o.target AND delivered_at = 0 AND given_up_at = 0)"
                      " ORDER BY id LIMIT 64",
                      now, rows, n);
}

int anvil_outbox_record(anvil_store *st, const anvil_outbox_row *r) {
    int rc;
    IN_TRANSACTION(st, rc, {
        sqlite3_stmt *s = NULL;
        rc = sqlite3_prepare_v2(st->db,
                                "UPDATE hook_outbox SET attempts = ?2, next_at = ?3, delivered_at = ?4, given_up_at = ?5,"
                                " last_error = ?6 WHERE id = ?1",
                                -1, &s, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_int64(s, 1, r->id);
            sqlite3_bind_int(s, 2, r->attempts);
            sqlite3_bind_double(s, 3, r->next_at);
            sqlite3_bind_double(s, 4, r->delivered_at);
            sqlite3_bind_double(s, 5, r->given_up_at);
            sqlite3_bind_text(s, 6, r->last_error, -1, SQLITE_STATIC);
            rc = sqlite3_step(s);
        }
        sqlite3_finalize(s);
        rc = rc == SQLITE_DONE ? 0 : anvil_store_db_fail(st, "hook outbox");
    });
    return rc;
}

void anvil_outbox_rows_free(anvil_outbox_row *rows, int n) {
    for (int i = 0; i < n; i++) {
        free(rows[i].status);
        free(rows[i].secondary);
        free(rows[i].message);
        free(rows[i].target);
        free(rows[i].last_error);
        memset(&rows[i], 0, sizeof rows[i]);
    }
}

cJSON *anvil_hooks_of_job(anvil_store *st, int64_t job_id) {
    anvil_outbox_row *rows;
    int n;
    if (query_rows(st, "SELECT " ROW_COLUMNS " FROM hook_outbox WHERE job_id = ?1 ORDER BY id", (double)job_id, &rows,
                   &n))
        return NULL;
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        const anvil_outbox_row *r = &rows[i];
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(a, e)) {
            cJSON_Delete(e);
            cJSON_Delete(a);
            a = NULL;
            break;
        }
        cJSON_AddNumberToObject(e, "event_id", (double)r->id);
        cJSON_AddStringToObject(e, "hook", kind_names[r->kind]);
        cJSON_AddStringToObject(e, "target", r->target);
        cJSON_AddStringToObject(e, "status", r->status);
        cJSON_AddNumberToObject(e, "at", r->at);
        cJSON_AddNumberToObject(e, "attempts", r->attempts);
        cJSON_AddNumberToObject(e, "delivered_at", r->delivered_at);
        cJSON_AddNumberToObject(e, "given_up_at", r->given_up_at);
        cJSON_AddStringToObject(e, "last_error", r->last_error);
    }
    anvil_outbox_rows_free(rows, n);
    free(rows);
    if (!a) anvil_fail("out of memory");
    return a;
}
