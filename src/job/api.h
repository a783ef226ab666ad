/* The job service's HTTP/JSON API on 127.0.0.1 (libmicrohttpd, one thread).
 *
 * Every request carries `Authorization: Bearer <token>` (job/auth.h). Without a valid token the
 * answer is 401 and nothing else happens. Users see and act on their own jobs only (another's is
 * answered 404, as if it did not exist); admins on every job, and they alone manage users, tokens,
 * roles and read the audit trail (others get 403).
 *
 *   GET  /v1/health                          {"status": "ok", "pid": P, "user": U, "admin": B}
 *   POST /v1/jobs                            a spec (job/spec.h), checked against its role
 *                                            (job/policy.h) -> 201 and the job
 *   GET  /v1/jobs[?status=S]                 {"jobs": [...]}, by id
 *   GET  /v1/jobs/ID                         the job with its spec and history
 *   POST /v1/jobs/ID/stop                    202 and the job (409 when it had already ended)
 *   GET  /v1/jobs/ID/logs[?rank=R][&offset=N | &tail=N]
 *                                            text from byte N (or the last N bytes) of the launcher's
 *                                            log (all ranks, prefixed) or of rank R's; 1 MiB at most
 *   POST /v1/users {"name": N[, "admin": B]} 201 {"user", "token_id", "token", "admin"}     (admin)
 *   GET  /v1/users                           {"users": [...]} with roles and token IDs      (admin)
 *   POST /v1/tokens {"user": U}              201 {"user", "token_id", "token"}               (admin)
 *   POST /v1/tokens/ID/revoke                200 {"token_id", "user", "revoked": true}       (admin)
 *   POST /v1/roles                           a role (job/policy.h) -> 201 and the role      (admin)
 *   GET  /v1/roles                           {"roles": [...]}: all for admins, else the caller's
 *   POST /v1/roles/NAME/grant {"user": U}    200 {"role", "user"}                            (admin)
 *   GET  /v1/audit[?user=U][&limit=N]        {"audit": [...]}: the last N entries (100)      (admin)
 *   POST /v1/quotas {"user"|"role", limits}  200 {"quotas": [...]} (job/quota.h)              (admin)
 *   GET  /v1/quotas                          {"quotas": [...]} with usage: all, or the caller's and roles'
 *   GET  /v1/jobs/ID/plot.svg                its curves, drawn as anvil plot draws them (404: no step yet)
 *   GET  /v1/jobs/ID/profile[?rank=R]        the trace file of its --profile (Chrome Trace Event Format)
 *   GET  /                                   the dashboard page (no token: it holds no data, and asks the
 *                                            API with the user's)
 *   GET  /metrics                            Prometheus text (0.0.4): jobs by status, each job that
 *                                            runs or ended within the hour with its status, attempt,
 *                                            runtime, step and last loss and throughput; submissions,
 *                                            retries, hangs and hook deliveries; requests and their
 *                                            latency per action                              (admin)
 *
 * A refused request gets a 4xx and {"error": "one line"}, and changes nothing: malformed or
 * oversized bodies (ANVIL_JOB_SPEC_MAX_BYTES), JSON that is not strict (core/json.h: a \u0000, bytes
 * that are not UTF-8, a key given twice), unknown fields or query parameters (more than 64 of them
 * at all), bad values, paths outside the role, unknown jobs or paths; a submission over a quota gets
 * 429. What fails on the daemon's side is a 500 that says no more than that: the detail, which may
 * name the daemon's files, goes to its log and the audit trail. Every request gets an answer, and
 * every change and every refusal is recorded in the audit trail (job/audit.h). */
#ifndef ANVIL_JOB_API_H
#define ANVIL_JOB_API_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "job/audit.h"
#include "job/goodput.h"
#include "job/store.h"
#include "job/supervisor.h"

typedef struct {
    const char *key, *value; /* decoded; value NULL when the parameter has no '=' */
} anvil_api_arg;

/* One request, as the HTTP layer hands it over. */
typedef struct {
    const char *method, *path; /* path: without the query */
    const anvil_api_arg *args; /* the query's parameters */
    int nargs;
    int query_args; /* > 0: the query had this many parameters, too many to be parsed (args is empty) */
    const char *authorization; /* the Authorization header; NULL when absent */
    const char *body;
    size_t body_len;
    bool body_too_big; /* the body passed ANVIL_JOB_SPEC_MAX_BYTES and was dropped */
    const char *peer;  /* the client's address ("127.0.0.1"); NULL when unknown */
} anvil_api_request;

typedef struct {
    unsigned status;
    char *body; /* malloc'd; NULL only when out of memory (status 500) */
    size_t len;
    const char *content_type; /* NULL: application/json */
    const char *action;       /* what was asked, as the audit trail names it ("job.submit", ...) */
} anvil_api_response;

/* The API's own figures for GET /metrics: requests and their latency, per action and status.
 * Thread-safe. */
typedef struct anvil_api_stats anvil_api_stats;
anvil_api_stats *anvil_api_stats_new(void);
void anvil_api_stats_free(anvil_api_stats *s);
void anvil_api_stats_observe(anvil_api_stats *s, const char *action, unsigned status, double seconds);

typedef struct {
    anvil_store *st;
    anvil_supervisor *sup;
    const char *runs_dir;   /* where jobs without an output get their run folder */
    anvil_api_stats *stats; /* NULL: /metrics has no request figures */
    anvil_goodput_cache *goodput; /* the jobs' metrics records, parsed once (NULL: parsed at each call) */
    /* The rate limit of the audit rows of 401s, per client address (job/audit.h); NULL: every 401
     * is recorded. */
    anvil_audit_limiter *limiter;
    /* What went wrong beside the answers (a 500's detail, an audit row not written), one line
     * each; NULL: not told. Called from the API's thread. */
    anvil_report_fn report;
    void *report_ctx;
} anvil_api_env;

/* Answers one request: no socket, so that tests and the fuzzer can call it. */
void anvil_api_handle(const anvil_api_env *env, const anvil_api_request *rq, anvil_api_response *rs);

typedef struct anvil_api anvil_api;

/* Listens on 127.0.0.1:port (0: a free port, see anvil_api_port) and answers through
 * anvil_api_handle with env (copied; its stats and its audit limiter are the API's own). At most 256
 * connections, 128 per address, 64 of them without a valid token (a new one evicts the oldest of
 * those), 64 waiting on their clients (a new one evicts the oldest of those); a
 * whole request, head and body, must arrive within 10 s of the connection or of the last answer, and
 * an idle connection closes after 30 s. NULL after anvil_fail. */
anvil_api *anvil_api_start(const anvil_api_env *env, int port);
int anvil_api_port(const anvil_api *api);
void anvil_api_stop(anvil_api *api);

#endif
