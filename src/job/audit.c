#include "job/audit.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "job/store_internal.h"

static const char *or_empty(const char *s) { return s ? s : ""; }

int anvil_audit_insert(anvil_store *st, const anvil_audit_entry *e) {
    if (!e) return 0;
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db,
                                "INSERT INTO audit (at, user, token_id, action, target, result, detail)"
                                " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                                -1, &s, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_double(s, 1, anvil_store_now());
        sqlite3_bind_text(s, 2, or_empty(e->user), -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, or_empty(e->token_id), -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, or_empty(e->action), -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 5, or_empty(e->target), -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 6, e->result);
        sqlite3_bind_text(s, 7, or_empty(e->detail), -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : anvil_store_db_fail(st, "audit");
}

int anvil_audit_add(anvil_store *st, const anvil_audit_entry *e) {
    if (!e) return 0;
    int rc;
    IN_TRANSACTION(st, rc, rc = anvil_audit_insert(st, e));
    return rc;
}

cJSON *anvil_audit_list(anvil_store *st, const char *user, int limit) {
    cJSON *o = cJSON_CreateObject(), *arr = o ? cJSON_AddArrayToObject(o, "audit") : NULL;
    if (!arr) {
        cJSON_Delete(o);
        anvil_fail("out of memory");
        return NULL;
    }
    sqlite3_stmt *s = NULL;
    int rc = 0, step = SQLITE_DONE;
    pthread_mutex_lock(&st->lock);
    /* The newest `limit` rows, turned back into time order. */
    if (sqlite3_prepare_v2(st->db,
                           "SELECT id, at, user, token_id, action, target, result, detail FROM"
                           " (SELECT * FROM audit WHERE ?1 IS NULL OR user = ?1 ORDER BY id DESC LIMIT ?2)"
                           " ORDER BY id",
                           -1, &s, NULL) != SQLITE_OK)
        rc = anvil_store_db_fail(st, "audit");
    else {
        if (user) sqlite3_bind_text(s, 1, user, -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 2, limit);
    }
    static const char *const text[] = {"user", "token_id", "action", "target"};
    while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            rc = anvil_fail("out of memory");
            break;
        }
        cJSON_AddNumberToObject(e, "id", (double)sqlite3_column_int64(s, 0));
        cJSON_AddNumberToObject(e, "at", sqlite3_column_double(s, 1));
        for (int k = 0; k < 4; k++)
            cJSON_AddStringToObject(e, text[k], (const char *)sqlite3_column_text(s, 2 + k));
        cJSON_AddNumberToObject(e, "result", sqlite3_column_int(s, 6));
        cJSON_AddStringToObject(e, "detail", (const char *)sqlite3_column_text(s, 7));
    }
    if (!rc && step != SQLITE_DONE) rc = anvil_store_db_fail(st, "audit");
    sqlite3_finalize(s);
    pthread_mutex_unlock(&st->lock);
    if (rc) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* One address's window: its start, the rows written in it, those counted instead and the last of
 * them. In use while rows > 0. */
typedef struct {
    char addr[64];
    double start;
    int rows;
    long suppressed;
    char last[256];
} unauth_window;

struct anvil_audit_limiter {
    pthread_mutex_t mu;
    unauth_window w[ANVIL_AUDIT_UNAUTH_ADDRS + 1]; /* the last: every address beyond the others */
};

anvil_audit_limiter *anvil_audit_limiter_new(void) {
    anvil_audit_limiter *l = calloc(1, sizeof *l);
    if (l) pthread_mutex_init(&l->mu, NULL);
    else anvil_fail("out of memory");
    return l;
}

void anvil_audit_limiter_free(anvil_audit_limiter *l) {
    if (!l) return;
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* addr's window, a free one, or the shared last one. */
static unauth_window *window_of(anvil_audit_limiter *l, const char *addr) {
    unauth_window *free_one = NULL;
    for (int i = 0; i < ANVIL_AUDIT_UNAUTH_ADDRS; i++) {
        if (l->w[i].rows && !strcmp(l->w[i].addr, addr)) return &l->w[i];
        if (!l->w[i].rows && !free_one) free_one = &l->w[i];
    }
    unauth_window *w = free_one ? free_one : &l->w[ANVIL_AUDIT_UNAUTH_ADDRS];
    if (!w->rows) snprintf(w->addr, sizeof w->addr, "%s", free_one ? addr : "other addresses");
    return w;
}

bool anvil_audit_limiter_take(anvil_audit_limiter *l, const char *addr, const char *detail, double now) {
    pthread_mutex_lock(&l->mu);
    unauth_window *w = window_of(l, addr && *addr ? addr : "unknown");
    /* A window that ended with nothing held back is over: this 401 opens the next. */
    if (w->rows && !w->suppressed && now - w->start >= ANVIL_AUDIT_UNAUTH_WINDOW_S) w->rows = 0;
    if (!w->rows) w->start = now;
    bool record = w->rows < ANVIL_AUDIT_UNAUTH_ROWS;
    if (record) w->rows++;
    else {
        w->suppressed++;
        snprintf(w->last, sizeof w->last, "%s", detail ? detail : "");
    }
    pthread_mutex_unlock(&l->mu);
    return record;
}

/* The summary row of a window that ended; 0, or -1 after anvil_fail. */
static int write_summary(anvil_store *st, const unauth_window *w, double now) {
    char detail[512];
    double span = isfinite(now) ? now - w->start : ANVIL_AUDIT_UNAUTH_WINDOW_S;
    snprintf(detail, sizeof detail,
             "%ld more unauthenticated requests from %s in %.0f s not recorded one by one (at most %d a %.0f s "
             "window); the last: %s",
             w->suppressed, w->addr, span < ANVIL_AUDIT_UNAUTH_WINDOW_S ? ANVIL_AUDIT_UNAUTH_WINDOW_S : span,
             ANVIL_AUDIT_UNAUTH_ROWS, ANVIL_AUDIT_UNAUTH_WINDOW_S, w->last);
    anvil_audit_entry e = {.user = "", .token_id = "", .action = "auth", .target = w->addr, .result = 401,
                           .detail = detail};
    return anvil_audit_add(st, &e);
}

int anvil_audit_limiter_flush(anvil_audit_limiter *l, anvil_store *st, double now) {
    if (!l) return 0;
    int written = 0;
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i <= ANVIL_AUDIT_UNAUTH_ADDRS; i++) {
        unauth_window *w = &l->w[i];
        if (!w->rows || !(now - w->start >= ANVIL_AUDIT_UNAUTH_WINDOW_S)) continue;
        if (w->suppressed && write_summary(st, w, now)) {
            written = -1;
            break;
        }
        written += w->suppressed > 0;
        *w = (unauth_window){0};
    }
    pthread_mutex_unlock(&l->mu);
    return written;
}
