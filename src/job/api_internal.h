/* What the API's handlers share (api_call.c: answering, auditing, the query and the body; api.c:
 * the dispatcher and the jobs; api_admin.c: users, tokens, roles and the audit trail;
 * api_metrics.c: the Prometheus page; api_dashboard.c: the page, plots and profiles). */
#ifndef ANVIL_JOB_API_INTERNAL_H
#define ANVIL_JOB_API_INTERNAL_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "core/error.h"
#include "job/api.h"
#include "job/audit.h"
#include "job/auth.h"

/* One request being answered. */
typedef struct {
    const anvil_api_env *env;
    const anvil_api_request *rq;
    anvil_api_response *rs;
    anvil_principal who;
    const char *action; /* the audit trail's name for what was asked */
    char target[160];
    bool mutating; /* recorded in the audit trail whatever the answer */
    bool audited;  /* recorded already, in the change's transaction */
    char error[1024];
} anvil_api_call;

/* Answers with j (taken over; NULL: 500 out of memory). 0, or -1 for a code >= 400. */
int api_reply_json(anvil_api_call *c, unsigned code, cJSON *j);
/* Answers {"error": "<one line>"}; returns -1. */
int api_reply_error(anvil_api_call *c, unsigned code, const char *fmt, ...) ANVIL_PRINTF(3, 4);
/* Answers 500 without detail, which (detail, else the library's last message) goes to the daemon's
 * report and the audit trail; returns -1. */
int api_internal_error(anvil_api_call *c, const char *detail);
/* One line through the environment's report function. */
void api_report(const anvil_api_env *env, const char *fmt, ...) ANVIL_PRINTF(2, 3);
/* The audit entry of this call with result and detail; marks the call recorded. */
anvil_audit_entry api_audit(anvil_api_call *c, int result, const char *detail);
/* False after answering 403 when the caller is not an admin. */
bool api_need_admin(anvil_api_call *c);
/* False after answering 400 when the query has a parameter not in names (NULL-terminated). */
bool api_known_args(anvil_api_call *c, const char *const *names);
/* The query parameter key's value, NULL when absent. */
const char *api_arg(const anvil_api_call *c, const char *key);
/* The body as a JSON object whose fields are all in names (NULL-terminated); NULL after answering
 * 413 or 400. */
cJSON *api_body_object(anvil_api_call *c, const char *what, const char *const *names);

/* GET /metrics (api_metrics.c). */
int api_metrics(anvil_api_call *c);
/* api_dashboard.c: GET / (the page, static), /v1/jobs/ID/plot.svg (the job's curves, drawn by
 * obs/plot.h from its metrics.jsonl) and /v1/jobs/ID/profile?rank=R (its trace file). */
int api_dashboard_page(anvil_api_call *c);
int api_job_plot(anvil_api_call *c, const anvil_job *j);
int api_job_profile(anvil_api_call *c, const anvil_job *j);
/* Whether s is a decimal count in [0, max]; *out gets it. */
bool api_parse_count(const char *s, long max, long *out);

/* api_goodput.c: GET /v1/jobs/ID/goodput, the job's goodput accounting with its timeline (job/goodput.h),
 * and POST /v1/jobs/ID/faults (admins), a fault of anvil chaos injected by the backend or recorded after
 * the chaos client carried it out (job/chaos.h); api_goodput_json: the accounting (for describe, without
 * the timeline), NULL after anvil_fail. */
cJSON *api_goodput_json(const anvil_api_env *env, const anvil_job *j, bool timeline);
int api_job_goodput(anvil_api_call *c, const anvil_job *j);
int api_job_fault(anvil_api_call *c, const anvil_job *j);

/* api_admin.c's routes: true with *rc the handler's result when path is one of theirs. */
bool api_route_admin(anvil_api_call *c, const char *path, int *rc);

#endif
