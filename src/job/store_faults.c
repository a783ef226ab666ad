/* The faults injected into jobs (anvil chaos) in the state database (job/store.h), each with a
 * history entry, so that describe names it and the goodput accounting (job/goodput.h) knows when
 * the attempt it hit went wrong. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "job/store.h"
#include "job/store_internal.h"

static int insert_fault(anvil_store *st, int64_t id, const anvil_job_fault *f) {
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db,
                                "INSERT INTO faults (job_id, seq, at, attempt, kind, target, detail) VALUES (?1,"
                                " (SELECT COALESCE(MAX(seq), 0) + 1 FROM faults WHERE job_id = ?1), ?2, ?3, ?4, ?5, ?6)",
                                -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_double(s, 2, f->at);
        sqlite3_bind_int(s, 3, f->attempt);
        sqlite3_bind_text(s, 4, f->kind, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 5, f->target, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 6, f->detail, -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : anvil_store_db_fail(st, "faults");
}

/* The history entry of a fault: the job's status as it is, with secondary "Fault". */
static int fault_event(anvil_store *st, int64_t id, const anvil_job_fault *f) {
    sqlite3_stmt *s = NULL;
    char *status = NULL;
    int rc = sqlite3_prepare_v2(st->db, "SELECT status FROM jobs WHERE id = ?1", -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, id);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) status = anvil_store_column_text(s, 0);
    }
    sqlite3_finalize(s);
    if (rc == SQLITE_DONE) return anvil_fail("no job %lld", (long long)id);
    if (!status) return rc == SQLITE_ROW ? anvil_fail("state database: out of memory") : anvil_store_db_fail(st, "jobs");
    char message[700];
    snprintf(message, sizeof message, "fault injected: %s%s%s (attempt %d): %s", f->kind, f->target[0] ? " " : "",
             f->target, f->attempt, f->detail);
    rc = anvil_store_add_event(st, id, f->at, status, "Fault", message, false);
    free(status);
    return rc;
}

int anvil_store_fault_add(anvil_store *st, int64_t id, const anvil_job_fault *f) {
    int rc;
    IN_TRANSACTION(st, rc, rc = insert_fault(st, id, f); if (!rc) rc = fault_event(st, id, f));
    return rc;
}

static int read_fault(sqlite3_stmt *s, void *elem, const void *ctx) {
    (void)ctx;
    anvil_job_fault *f = elem;
    f->at = sqlite3_column_double(s, 0);
    f->attempt = sqlite3_column_int(s, 1);
    f->kind = anvil_store_column_text(s, 2);
    f->target = anvil_store_column_text(s, 3);
    f->detail = anvil_store_column_text(s, 4);
    if (f->kind && f->target && f->detail) return 0;
    free(f->kind);
    free(f->target);
    free(f->detail);
    return anvil_fail("state database: out of memory");
}

static void free_faults(void *rows, int n) { anvil_job_faults_free(rows, n); }

int anvil_store_faults(anvil_store *st, int64_t id, anvil_job_fault **faults, int *n) {
    static const anvil_store_query q = {"faults", sizeof(anvil_job_fault), anvil_store_bind_id, read_fault,
                                        free_faults};
    return anvil_store_rows(st, "SELECT at, attempt, kind, target, detail FROM faults WHERE job_id = ?1 ORDER BY seq",
                            &q, &id, (void **)faults, n);
}

void anvil_job_faults_free(anvil_job_fault *faults, int n) {
    for (int i = 0; i < n; i++) {
        free(faults[i].kind);
        free(faults[i].target);
        free(faults[i].detail);
    }
    free(faults);
}
