/* The local backend: runs each job's attempts and moves the job through
 * its statuses.
 *
 *   Pending -> Starting -> Running -> Completed | Failed | Stopped
 *                 ^           |  \-> Stopping -> Stopped | (HangDetected) Starting
 *                 \-----------/  a retryable failure, attempts left: Starting "Retrying (k/n)"
 *
 * An attempt is `anvil job-run --exit-file F -- launch -n P --log-dir RUN/logs -- <command> --out RUN
 * [--resume auto]`, started in a session of its own (setsid), so the wrapper, the launcher, mpirun
 * and the ranks all carry the session id = the wrapper's pid, which the store keeps. The wrapper
 * ignores stop signals and writes the launcher's exit status into F atomically before it exits.
 * So the supervisor needs nothing in memory: an attempt has ended when F exists, or when no
 * process of its session is left (then it was lost, e.g. killed with the daemon down). A restarted
 * daemon therefore re-attaches to every job by the same rule.
 *
 * A stop signals the wrapper's process group (the wrapper and the launcher; mpirun and the ranks
 * have groups of their own): the launcher turns SIGTERM into the trainer's checkpoint-and-stop
 * (SIGUSR1). Past the grace period every process of the session gets SIGKILL.
 *
 * Progress is the mtime of RUN/metrics.jsonl, which rank 0 of `anvil train` appends to after every
 * step: no change for hang_timeout_s since the attempt started or the last step is a hang. */
#ifndef ANVIL_JOB_SUPERVISOR_H
#define ANVIL_JOB_SUPERVISOR_H

#include <stdint.h>

#include "job/store.h"

typedef struct anvil_supervisor anvil_supervisor;

/* state_dir holds jobs/<id>/ (the attempts' exit files); self is the anvil binary the attempts run;
 * grace_s the time between a stop signal and SIGKILL. NULL after anvil_fail. */
anvil_supervisor *anvil_supervisor_new(anvil_store *st, const char *state_dir, const char *self, double grace_s);
void anvil_supervisor_free(anvil_supervisor *sup);

/* Reaps finished children and advances every job that is not final: starts, notices ends, applies
 * limits, stops and retries. Each change is one store update. */
int anvil_supervisor_tick(anvil_supervisor *sup);

/* A stop request: a job not started yet is Stopped at once, a running one goes to Stopping (the
 * next tick signals it), with the audit entry (NULL: none) in the same transaction. 0 with *job its
 * new state, 1 when there is no such job, 2 when it had already ended (*job as it is; the entry is
 * not recorded), -1 on error. */
int anvil_supervisor_stop(anvil_supervisor *sup, int64_t id, const anvil_audit_entry *audit, anvil_job *job);

#endif
