/* Event hooks: every change of a job's primary status, its submission (Pending) included, is
 * delivered to each hook the daemon was started with: a command, run by /bin/sh with the event on
 * its standard input, or an HTTP POST of the event to a URL on this machine.
 *
 * A transactional outbox: the store queues one row per hook (hook_outbox) in the transaction of
 * the change itself, so a daemon killed at any moment neither loses an event nor invents one.
 * A thread of its own delivers the rows, so a slow or failing hook never holds up the API or the
 * supervisor. For each job and hook, events go out in the order they happened: the next waits until
 * the one before is delivered or given up. A failed delivery (a command's nonzero exit, a command
 * still running at the timeout, an answer other than 2xx, no answer) is retried after 1, 2, 4, ...
 * seconds, at most 60, until max_attempts; then it is given up. Every attempt is logged, and
 * describe shows each delivery's attempts, time and last error.
 *
 * Delivery is at least once: a daemon killed after a hook ran but before its success was stored
 * runs it again on restart. event_id is unique, so a receiver can drop the repeat.
 *
 * The event (JSON, one object; the command also gets ANVIL_HOOK_EVENT_ID, ANVIL_JOB_ID and
 * ANVIL_JOB_STATUS in its environment):
 *   {"event_id": N, "job_id": ID, "at": T, "status": S, "secondary_status": S2, "message": M,
 *    "delivery_attempt": K, "job": the job as GET /v1/jobs lists it, as it is at delivery} */
#ifndef ANVIL_JOB_HOOKS_H
#define ANVIL_JOB_HOOKS_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/error.h"
#include "job/store.h"

typedef enum { ANVIL_HOOK_COMMAND, ANVIL_HOOK_URL } anvil_hook_kind;

typedef struct {
    anvil_hook_kind kind;
    const char *target; /* the shell command, or the URL */
} anvil_hook;

/* Refuses an empty command, and a URL hook that is not http:// to a loopback host (127.0.0.0/8,
 * [::1] or localhost: jobs' events stay on this machine) as libcurl's URL parser reads it, or that
 * holds a user name, a password or options (http://localhost:x@elsewhere/ goes elsewhere). */
int anvil_hook_check(const anvil_hook *h);

/* The hooks that every status change from now on is queued for; copied. */
int anvil_store_set_hooks(anvil_store *st, const anvil_hook *hooks, int n);

/* [{"event_id", "hook", "target", "status", "at", "attempts", "delivered_at", "given_up_at",
 *   "last_error"}, ...]: job's deliveries, oldest first. NULL after anvil_fail. */
cJSON *anvil_hooks_of_job(anvil_store *st, int64_t job_id);

typedef struct {
    int max_attempts;  /* >= 1 */
    double timeout_s;  /* a command or a POST still running after this has failed */
    const char *log;   /* the commands' standard output and error are appended to this file */
    /* Each delivery's outcome and each failure of the thread, one line each ("hook URL: job 3
     * Completed (event 9) delivered, attempt 1"); NULL: not told. Called from the delivery thread. */
    anvil_report_fn report;
    void *report_ctx;
} anvil_hooks_options;

typedef struct anvil_hooks anvil_hooks;

/* Starts the delivery thread. NULL after anvil_fail. */
anvil_hooks *anvil_hooks_start(anvil_store *st, const anvil_hooks_options *o);
/* Stops the thread after the delivery under way; undelivered events stay queued for a restart. */
void anvil_hooks_stop(anvil_hooks *h);

#endif
