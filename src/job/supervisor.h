/* The supervisor: moves each job through its statuses, deciding what its attempts' ends mean,
 * when to retry, stop or give up; a backend (job/backend.h) carries the attempts out.
 *
 *   Pending -> Starting -> Running -> Completed | Failed | Stopped
 *                 ^           |  \-> Stopping -> Stopped | (HangDetected) Starting
 *                 \-----------/  a retryable failure, attempts left: Starting "Retrying (k/n)"
 *
 * It keeps nothing in memory: each tick reads the jobs that have not ended from the store and asks
 * the backend about their attempts by the handles stored, so a restarted daemon re-attaches to every
 * job by the same rule.
 *
 * A stop (a request, max_runtime_s, a hang) is the backend's graceful stop, which gives the trainer
 * its checkpoint-and-stop; the SIGKILL deadline is stored, and past it the backend kills the attempt.
 *
 * Progress is the heartbeat (obs/heartbeat.h) that rank 0 of `anvil train` keeps in RUN: none for
 * hang_timeout_s since the attempt started or since the last one is a hang. A job that gives no
 * hang_timeout_s gets one derived from its run: ANVIL_HANG_FACTOR times what the heartbeat says its
 * current phase may take (expect_s: the longest it has measured, or before that an allowance for the
 * bytes the phase moves), at least ANVIL_HANG_FLOOR_S. Its phase is the
 * running job's secondary status: HealthCheck, Preparing, Training, Checkpointing, Saving.
 *
 * max_runtime_s counts from the first attempt's start, so retries do not extend it. At most
 * max_running jobs have attempts at once; the others stay Pending (Queued), first in first out.
 *
 * An attempt's end: exit 0 with the command's own word that it finished, its completion record
 * (ckpt/completion.h), which names this attempt and whose files still have their sizes and checksums,
 * Completed; 75 Stopped (resumable); 2 (usage) and 78 (configuration or input) Failed at once; anything
 * else (exit 0 without the record included), a lost attempt or a hang is retried up to max_retries
 * times, its cause named.
 *
 * A retry starts only once the attempt before it is fenced: its backend has ended what was left of it
 * and the run folder's lock is free (fence_previous in supervisor.c); until then the job waits Starting
 * (Fencing). Every attempt is kept in the store with what its backend knew of it at its end. */
#ifndef ANVIL_JOB_SUPERVISOR_H
#define ANVIL_JOB_SUPERVISOR_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "job/backend.h"
#include "job/objstore.h"
#include "job/store.h"

#define ANVIL_HANG_FACTOR 3.0
#define ANVIL_HANG_FLOOR_S 10.0

typedef struct anvil_supervisor anvil_supervisor;

typedef struct {
    double grace_s;  /* between a stop signal and SIGKILL */
    int max_running; /* jobs with an attempt at once; 0: no limit */
    /* Each role's S3 endpoint and credentials, for its jobs' environment (job/objstore.h); NULL:
     * none, the jobs get no AWS credentials at all. The caller's, kept for the supervisor's life. */
    const anvil_objstore *objstore;
} anvil_supervisor_options;

/* Runs attempts through backends[0], the daemon's own, or through another of the n backends (which stay
 * the caller's, each of another name) for a job whose spec names it ("backend"). Refused while the store
 * has an attempt running on a backend not among them. NULL after anvil_fail. */
anvil_supervisor *anvil_supervisor_new(anvil_store *st, anvil_backend *const *backends, int n,
                                       const anvil_supervisor_options *o);
void anvil_supervisor_free(anvil_supervisor *sup);

/* Reaps finished children and advances every job that is not final: starts, notices ends, applies
 * limits, stops and retries. Each change is one store update. */
int anvil_supervisor_tick(anvil_supervisor *sup);

/* A stop request: a job not started yet is Stopped at once, a running one goes to Stopping (the
 * next tick signals it), with the audit entry (NULL: none) in the same transaction. 0 with *job its
 * new state, 1 when there is no such job, 2 when it had already ended (*job as it is; the entry is
 * not recorded), -1 on error. */
int anvil_supervisor_stop(anvil_supervisor *sup, int64_t id, const anvil_audit_entry *audit, anvil_job *job);

/* The daemon's own backend: for its warm pools (job/backend.h). */
anvil_backend *anvil_supervisor_backend(anvil_supervisor *sup);
/* The backend called name, NULL when the daemon has none such. */
anvil_backend *anvil_supervisor_backend_named(anvil_supervisor *sup, const char *name);

/* describe's "backend" object of job: the backend's name, what the backend keeps of the job between
 * attempts, and the facts of its running attempt (live) or else of its last one (as it ended). NULL
 * after anvil_fail. */
cJSON *anvil_supervisor_describe(anvil_supervisor *sup, const anvil_job *job);
/* describe's "attempts": every attempt of job, the first first: its number, backend, handle, start, end
 * (0 while it runs), exit code (-1: none), outcome (how its end was judged) and the backend's facts of it
 * (the Slurm job ID, node list, final state, the nodes it got excluded and why, ...), kept from its
 * end, live while it runs. NULL after anvil_fail. */
cJSON *anvil_supervisor_attempts(anvil_supervisor *sup, const anvil_job *job);

#endif
