/* Quotas: what a user, or all the jobs of a role together, may hold at once.
 *
 *   running_jobs   jobs not ended (Pending, Starting, Running, Stopping)
 *   hosts          hosts those jobs hold, and the warm pools the subject's jobs left (Slurm)
 *   procs          processes those jobs run (hosts x processes per host)
 *   max_runtime_s  the largest max_runtime_s one job may ask for (a job without one is refused)
 *
 * A limit below 0 is none. A submission that would pass a limit of its user or of its role is
 * refused at once (HTTP 429) with the quota's name and figures, e.g.
 *   ResourceLimitExceeded: role nlp: hosts 4 in use + 2 requested > 4
 * rather than held in the queue: a job that is accepted can run once the queue reaches it. The API
 * answers on one thread, so a check and the insert that follows it are not interleaved with
 * another submission. Quotas are a table of the state database; setting one is audited. */
#ifndef ANVIL_JOB_QUOTA_H
#define ANVIL_JOB_QUOTA_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "job/audit.h"
#include "job/spec.h"
#include "job/store.h"

typedef struct {
    double running_jobs, hosts, procs, max_runtime_s; /* < 0: no limit */
} anvil_quota_limits;

/* Replaces the quota of a user (is_role false) or a role; all limits < 0 remove it. The subject
 * must exist: 1 when it does not, 0, or -1. */
int anvil_quota_set(anvil_store *st, bool is_role, const char *name, const anvil_quota_limits *q,
                    const anvil_audit_entry *audit);
/* Whether the job s of owner under role fits both quotas: 0; 1 with why (one line); -1. held: the hosts
 * that warm pools (job/backend.h) of owner and of role hold besides their jobs, which count as in use. */
int anvil_quota_check(anvil_store *st, const char *owner, const char *role, const anvil_job_spec *s,
                      const double held[2], char *why, size_t cap);
/* The hosts that warm pools of a user (is_role false) or a role hold besides their jobs. */
typedef double (*anvil_quota_held_fn)(void *ctx, bool is_role, const char *name);
/* {"quotas": [{"user" | "role": NAME, "limits": {...}, "usage": {"running_jobs", "hosts",
 * "warm_pool_hosts", "procs"}}]}: every quota, or those of user and of the roles granted to user. hosts
 * counts what held (NULL: nothing) says the subject's warm pools hold, as the check does; warm_pool_hosts
 * is that part of it. NULL after anvil_fail. */
cJSON *anvil_quota_json(anvil_store *st, const char *user, anvil_quota_held_fn held, void *ctx);

#endif
