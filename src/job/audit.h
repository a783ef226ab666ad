/* The job service's audit trail: who did what, when, with which token, and how it ended.
 *
 * A table of the state database (audit), appended to and never changed: the code has no UPDATE or
 * DELETE of it, and triggers make SQLite refuse both. Every call that changes state is recorded in
 * the same transaction as its change (the functions of store.h and auth.h that take an entry), and
 * every refused call (401, 403, any 4xx) is recorded on its own; the 401s through a rate limit per
 * client address (anvil_audit_limiter), which records the ones beyond it as a count. */
#ifndef ANVIL_JOB_AUDIT_H
#define ANVIL_JOB_AUDIT_H

#include <stdbool.h>

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
/* The rate limit of the rows for unauthenticated requests (401s), per client address: a flood of bad
 * tokens would otherwise be a synchronous write per request, and a table that grows without bound.
 * At most ANVIL_AUDIT_UNAUTH_ROWS rows per address in a window of ANVIL_AUDIT_UNAUTH_WINDOW_S from its
 * first; the rest are counted, and when the window has ended one row (action "auth", target the
 * address, result 401) says how many were not recorded one by one and what the last one was. At
 * most ANVIL_AUDIT_UNAUTH_ADDRS addresses are told apart; beyond them, the others share one count
 * (target "other addresses"). Thread-safe; times are the caller's clock, in seconds. */
#define ANVIL_AUDIT_UNAUTH_ROWS 10
#define ANVIL_AUDIT_UNAUTH_WINDOW_S 10.0
#define ANVIL_AUDIT_UNAUTH_ADDRS 64
typedef struct anvil_audit_limiter anvil_audit_limiter;
anvil_audit_limiter *anvil_audit_limiter_new(void);
void anvil_audit_limiter_free(anvil_audit_limiter *l);
/* Whether the row of a 401 from addr (NULL or "": unknown, one address of its own), described by
 * detail, is to be written now; false: counted for its window's summary. */
bool anvil_audit_limiter_take(anvil_audit_limiter *l, const char *addr, const char *detail, double now);
/* Writes the summary rows of the windows that ended by now (every window: now INFINITY); l NULL:
 * nothing. How many were written, or -1 after anvil_fail (the counts are kept for the next try). */
int anvil_audit_limiter_flush(anvil_audit_limiter *l, anvil_store *st, double now);

/* {"audit": [{"id", "at", "user", "token_id", "action", "target", "result", "detail"}, ...]}: the
 * last `limit` entries (of `user` when not NULL), oldest first. NULL after anvil_fail. */
cJSON *anvil_audit_list(anvil_store *st, const char *user, int limit);

#endif
