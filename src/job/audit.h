/* The job service's audit trail: who did what, when, with which token, and how it ended.
 *
 * A table of the state database (audit), appended to and never changed: the code has no UPDATE or
 * DELETE of it, and triggers make SQLite refuse both. Every call that changes state is recorded in
 * the same transaction as its change (the functions of store.h and auth.h that take an entry), and
 * every refused call (401, 403, any 4xx) is recorded on its own. */
#ifndef ANVIL_JOB_AUDIT_H
#define ANVIL_JOB_AUDIT_H

#include <cjson/cJSON.h>

#include "job/store.h"

struct anvil_audit_entry {
    const char *user;     /* "" when the caller could not be identified */
    const char *token_id; /* the token's public ID; "" when none was given or it is malformed */
    const char *action;   /* "job.submit", "token.revoke", "auth", ... */
    const char *target;   /* the job ID, user, token ID or role acted on; or the path */
    int result;           /* the HTTP status of the answer */
    const char *detail;   /* one line: the refusal's reason, or what was done */
};

/* Appends e (NULL: nothing) in a transaction of its own. */
int anvil_audit_add(anvil_store *st, const anvil_audit_entry *e);
/* Appends e inside the caller's transaction (store_internal.h's IN_TRANSACTION); NULL: nothing. */
int anvil_audit_insert(anvil_store *st, const anvil_audit_entry *e);
/* {"audit": [{"id", "at", "user", "token_id", "action", "target", "result", "detail"}, ...]}: the
 * last `limit` entries (of `user` when not NULL), oldest first. NULL after anvil_fail. */
cJSON *anvil_audit_list(anvil_store *st, const char *user, int limit);

#endif
