/* The state database's insides, shared by the files of src/job that keep tables in it (store.c:
 * jobs and history; store_attempts.c: each job's attempts; store_faults.c: the faults injected into
 * them; auth.c: users, tokens, roles; audit.c:
 * the audit trail; outbox.c: the hooks' deliveries), so that a change, its audit record and its
 * events are one transaction. */
#ifndef ANVIL_JOB_STORE_INTERNAL_H
#define ANVIL_JOB_STORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <sqlite3.h>

#include "job/hooks.h"
#include "job/store.h"

struct anvil_store {
    sqlite3 *db;
    pthread_mutex_t lock;
    anvil_hook *hooks; /* what status changes are queued for (job/hooks.h); strings owned */
    int nhooks;
};

/* Runs sql (statements without results); -1 with the database's message. */
int anvil_store_exec(anvil_store *st, const char *sql);
/* Fails with "state database: what: <the database's last message>"; returns -1. */
int anvil_store_db_fail(anvil_store *st, const char *what);
/* A malloc'd copy of a text column ("" for NULL). */
char *anvil_store_column_text(sqlite3_stmt *s, int col);
/* PRAGMA quick_check of db (store_check.c): 0 when it says "ok", else -1 after anvil_fail("damaged:
 * <its first problem> (in table T); N more problems"), the table named when the problem names a
 * page. */
int anvil_store_quick_check(sqlite3 *db);

/* A query whose rows become an array: bind sets its parameters from ctx; read fills the zeroed
 * element elem from the current row and returns 0, 1 to leave the row out, or -1 after anvil_fail;
 * free_all frees n elements and the array. */
typedef struct {
    const char *what; /* names the table in messages */
    size_t size;      /* of an element */
    void (*bind)(sqlite3_stmt *s, const void *ctx);
    int (*read)(sqlite3_stmt *s, void *elem, const void *ctx);
    void (*free_all)(void *rows, int n);
} anvil_store_query;

/* A bind of anvil_store_query: ctx is an int64_t, the job's id, bound to ?1. */
void anvil_store_bind_id(sqlite3_stmt *s, const void *ctx);

/* Runs sql under the store's lock and collects its rows into *rows (malloc'd, *n of them); on
 * failure frees what it read and leaves *rows NULL. */
int anvil_store_rows(anvil_store *st, const char *sql, const anvil_store_query *q, const void *ctx, void **rows,
                     int *n);

/* Records job's running attempt (its number, backend, handle and start) unless recorded already,
 * inside the caller's transaction (store_attempts.c). */
int anvil_store_attempt_begin(anvil_store *st, const anvil_job *job);
/* Records the end of an attempt, inside the caller's transaction. */
int anvil_store_attempt_end(anvil_store *st, int64_t job_id, const anvil_attempt_end *end);

/* A history entry, inside the caller's transaction; a new primary status also goes to the hooks. */
int anvil_store_add_event(anvil_store *st, int64_t id, double at, const char *status, const char *secondary,
                          const char *message, bool primary);

/* Queues the event of a job's new primary status for every hook, inside the caller's transaction. */
int anvil_outbox_enqueue(anvil_store *st, int64_t job_id, double at, const char *status, const char *secondary,
                         const char *message);
/* Forgets the hooks (anvil_store_close). */
void anvil_outbox_clear(anvil_store *st);

/* Runs body inside BEGIN IMMEDIATE ... COMMIT under the lock, rolling back when it fails. */
#define IN_TRANSACTION(st, rc, body)                                                        \
    do {                                                                                    \
        pthread_mutex_lock(&(st)->lock);                                                    \
        rc = anvil_store_exec(st, "BEGIN IMMEDIATE");                                       \
        if (!rc) {                                                                          \
            body;                                                                           \
            if (!rc) rc = anvil_store_exec(st, "COMMIT");                                   \
            if (rc) sqlite3_exec((st)->db, "ROLLBACK", NULL, NULL, NULL);                   \
        }                                                                                   \
        pthread_mutex_unlock(&(st)->lock);                                                  \
    } while (0)

#endif
