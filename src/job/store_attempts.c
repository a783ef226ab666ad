/* Each job's attempts in the state database (job/store.h): their backend, handle, start, end and
 * the facts the backend knew of them at their end. */
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "job/store.h"
#include "job/store_internal.h"

int anvil_store_attempt_begin(anvil_store *st, const anvil_job *j) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db,
                                "INSERT OR IGNORE INTO attempts (job_id, attempt, backend, handle, started_at)"
                                " VALUES (?1, ?2, ?3, ?4, ?5)",
                                -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, j->id);
        sqlite3_bind_int(s, 2, j->attempt);
        sqlite3_bind_text(s, 3, j->backend, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, j->handle, -1, SQLITE_STATIC);
        sqlite3_bind_double(s, 5, j->started_at);
        rc = sqlite3_step(s);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : anvil_store_db_fail(st, "attempts");
}

int anvil_store_attempt_end(anvil_store *st, int64_t job_id, const anvil_attempt_end *e) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db,
                                "UPDATE attempts SET ended_at = ?3, exit_code = ?4, outcome = ?5, facts = ?6"
                                " WHERE job_id = ?1 AND attempt = ?2",
                                -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, job_id);
        sqlite3_bind_int(s, 2, e->attempt);
        sqlite3_bind_double(s, 3, anvil_store_now());
        sqlite3_bind_int(s, 4, e->exit_code);
        sqlite3_bind_text(s, 5, e->outcome ? e->outcome : "", -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 6, e->facts ? e->facts : "{}", -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : anvil_store_db_fail(st, "attempts");
}

static int set_facts(anvil_store *st, int64_t id, int attempt, const char *facts) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, "UPDATE attempts SET facts = ?3 WHERE job_id = ?1 AND attempt = ?2", -1, &s,
                                NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_int(s, 2, attempt);
        sqlite3_bind_text(s, 3, facts, -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : anvil_store_db_fail(st, "attempts");
}

int anvil_store_attempt_facts(anvil_store *st, int64_t id, int attempt, const char *facts) {
    int rc;
    IN_TRANSACTION(st, rc, rc = set_facts(st, id, attempt, facts));
    return rc;
}

static int read_attempt(sqlite3_stmt *s, void *elem, const void *ctx) {
    (void)ctx;
    anvil_job_attempt *a = elem;
    a->attempt = sqlite3_column_int(s, 0);
    a->backend = anvil_store_column_text(s, 1);
    a->handle = anvil_store_column_text(s, 2);
    a->started_at = sqlite3_column_double(s, 3);
    a->ended_at = sqlite3_column_double(s, 4);
    a->exit_code = sqlite3_column_int(s, 5);
    a->outcome = anvil_store_column_text(s, 6);
    a->facts = anvil_store_column_text(s, 7);
    if (a->backend && a->handle && a->outcome && a->facts) return 0;
    free(a->backend);
    free(a->handle);
    free(a->outcome);
    free(a->facts);
    return anvil_fail("state database: out of memory");
}

static void free_attempts(void *rows, int n) { anvil_job_attempts_free(rows, n); }

int anvil_store_attempts(anvil_store *st, int64_t id, anvil_job_attempt **attempts, int *n) {
    static const anvil_store_query q = {"attempts", sizeof(anvil_job_attempt), anvil_store_bind_id, read_attempt,
                                        free_attempts};
    return anvil_store_rows(st,
                            "SELECT attempt, backend, handle, started_at, ended_at, exit_code, outcome, facts"
                            " FROM attempts WHERE job_id = ?1 ORDER BY attempt",
                            &q, &id, (void **)attempts, n);
}

void anvil_job_attempts_free(anvil_job_attempt *attempts, int n) {
    for (int i = 0; i < n; i++) {
        free(attempts[i].backend);
        free(attempts[i].handle);
        free(attempts[i].outcome);
        free(attempts[i].facts);
    }
    free(attempts);
}
