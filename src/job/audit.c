#include "job/audit.h"


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
