/* The job service's state: one SQLite database (WAL, synchronous=FULL)
 * holding every job and the timestamped history of its statuses.
 *
 * Every change is one transaction, so a daemon killed at any moment leaves
 * each job as it was before or after the change, never in between. The
 * daemon is the only writer; its HTTP thread and its supervisor share one
 * connection, serialized by the store's own lock. */
#ifndef ANVIL_JOB_STORE_H
#define ANVIL_JOB_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

typedef enum {
    ANVIL_JOB_PENDING,
    ANVIL_JOB_STARTING,
    ANVIL_JOB_RUNNING,
    ANVIL_JOB_STOPPING,
    ANVIL_JOB_COMPLETED,
    ANVIL_JOB_FAILED,
    ANVIL_JOB_STOPPED,
} anvil_job_status;

#define ANVIL_JOB_NSTATUS 7

const char *anvil_job_status_name(anvil_job_status s);
/* The status named s (exact case), or -1. */
int anvil_job_status_parse(const char *s);
/* Completed, Failed and Stopped: nothing will change any more. */
bool anvil_job_status_final(anvil_job_status s);

/* Why a job is being stopped; it decides the status it ends with. */
typedef enum {
    ANVIL_STOP_NONE,
    ANVIL_STOP_REQUESTED, /* a stop request: Stopped */
    ANVIL_STOP_RUNTIME,   /* max_runtime_s: Stopped (MaxRuntimeExceeded) */
    ANVIL_STOP_HANG,      /* no progress for hang_timeout_s: HangDetected, then the retry policy */
} anvil_job_stop;

typedef struct {
    int64_t id;
    char *name, *spec; /* spec: the canonical JSON of anvil_job_spec_to_json */
    char *run_dir;
    anvil_job_status status;
    char *secondary;      /* "Training", "Retrying (2/3)", ...; "" when none */
    char *failure_reason; /* one line; "" when none */
    int attempt;          /* attempts started so far */
    char *handle;         /* the running attempt's name in its backend (job/backend.h); "" when none */
    char *backend;        /* the backend that runs (or last ran) it: "local"; "" before the first attempt */
    int exit_code;        /* the last attempt's, -1 when none */
    anvil_job_stop stop;
    double stop_deadline; /* when the stop turns into SIGKILL; 0 until the stop signal is sent */
    double submitted_at, started_at, ended_at; /* seconds since the epoch; started_at: the current attempt */
    double first_started_at;                   /* the first attempt's start: max_runtime_s counts from it */
    char *owner; /* the user who submitted it; "" for jobs from before users */
    char *role;  /* the role it runs under; "" likewise */
} anvil_job;

typedef struct {
    double at;
    anvil_job_status status;
    char *secondary, *message;
} anvil_job_event;

/* One attempt of a job as the store keeps it: recorded in the transaction that stores its handle,
 * and its end in the transaction that ends it, so that describe shows every attempt after the job
 * has ended, and a retry knows which attempt to fence. */
typedef struct {
    int attempt;
    char *backend, *handle;
    double started_at, ended_at; /* ended_at 0 while it runs */
    int exit_code;               /* -1: none (lost, or still running) */
    char *outcome;               /* one line: how its end was judged; "" while it runs */
    char *facts;                 /* what the backend knew of it at its end: a JSON object ("{}" before) */
} anvil_job_attempt;

/* How an attempt ended, for anvil_store_update_ended. */
typedef struct {
    int attempt, exit_code;
    const char *outcome, *facts;
} anvil_attempt_end;

typedef struct anvil_store anvil_store;
/* job/audit.h: what a change records in the audit trail, in the change's transaction. */
typedef struct anvil_audit_entry anvil_audit_entry;

/* Opens (creating) the database at path; NULL after anvil_fail. Before anything is written to it (the
 * journal mode, the schema, the columns added since), PRAGMA quick_check reads the whole database
 * (every page of every table and index): a damaged one is refused with "state database PATH is
 * damaged: <its first problem> (in table T); N more problems; restore it from a backup ...", and
 * left as it was, so that a damaged state is one error at start, not a 500 on every request that
 * happens to read the damaged page, nor a file that the open made worse. */
anvil_store *anvil_store_open(const char *path);
void anvil_store_close(anvil_store *st);
/* A consistent copy of the state database at path (which a running daemon may be writing: SQLite's
 * online backup API) into dest: checked first (a damaged one is not copied), written beside dest
 * under a temporary name, synced, renamed into place. -1 after anvil_fail. */
int anvil_store_backup(const char *path, const char *dest);

/* Seconds since the epoch: the clock of every timestamp in the store. */
double anvil_store_now(void);

typedef struct {
    const char *name, *spec; /* spec: canonical JSON */
    const char *run_dir;     /* NULL: default_runs/<id> */
    const char *owner, *role;
} anvil_job_new;

/* Adds a Pending job with its first history entry and the audit entry (NULL: none), whose target
 * becomes the new job's ID. */
int anvil_store_submit(anvil_store *st, const anvil_job_new *job, const char *default_runs,
                       const anvil_audit_entry *audit, int64_t *id);
/* 0 and *job filled, 1 when there is no such job, -1 on error. */
int anvil_store_get(anvil_store *st, int64_t id, anvil_job *job);
/* The jobs whose status is in the mask (bit 1 << status), by id. */
int anvil_store_list(anvil_store *st, unsigned mask, anvil_job **jobs, int *n);
/* The jobs that have not ended or ended at or after `since`, by id. */
int anvil_store_list_recent(anvil_store *st, double since, anvil_job **jobs, int *n);

/* Figures of the whole state for /metrics: jobs per status, and counts that only grow. */
typedef struct {
    int64_t by_status[ANVIL_JOB_NSTATUS];
    int64_t submitted;                              /* jobs ever submitted */
    int64_t retries;                                /* attempts started as a retry */
    int64_t hangs;                                  /* hangs detected */
    int64_t hook_delivered, hook_failed, hook_given_up; /* deliveries, failed attempts, events given up */
} anvil_store_counts;
int anvil_store_counts_read(anvil_store *st, anvil_store_counts *c);

/* Writes every mutable field of job; when its status or secondary status differ from the stored
 * ones, also appends a history entry carrying message (NULL: ""). One transaction. */
int anvil_store_update(anvil_store *st, const anvil_job *job, const char *message);
/* anvil_store_update, appending the audit entry (NULL: none) in the same transaction. */
int anvil_store_update_audited(anvil_store *st, const anvil_job *job, const char *message,
                               const anvil_audit_entry *audit);
int anvil_store_history(anvil_store *st, int64_t id, anvil_job_event **events, int *n);
/* anvil_store_update, and the end of attempt end->attempt, in one transaction. */
int anvil_store_update_ended(anvil_store *st, const anvil_job *job, const char *message, const anvil_attempt_end *end);
/* Replaces what is kept of the backend's facts of an ended attempt (its backend learned more since). */
int anvil_store_attempt_facts(anvil_store *st, int64_t id, int attempt, const char *facts);
/* The job's attempts, the first first. */
int anvil_store_attempts(anvil_store *st, int64_t id, anvil_job_attempt **attempts, int *n);
void anvil_job_attempts_free(anvil_job_attempt *attempts, int n);

/* A fault injected into a job (anvil chaos): when, into which attempt, of which kind ("kill-rank",
 * "stop-rank", "kill-attempt", "host-lost", "disk-full", "daemon-kill", "s3-503", "s3-reset"), at
 * what ("rank 1", "host 0", "" for the whole attempt, the daemon or the S3 endpoint) and what was
 * done. */
typedef struct {
    double at;
    int attempt;
    char *kind, *target, *detail;
} anvil_job_fault;

/* Records fault f of job id, and its history entry (the job's status kept, secondary "Fault"), in one
 * transaction. */
int anvil_store_fault_add(anvil_store *st, int64_t id, const anvil_job_fault *f);
/* The job's faults, the first first. */
int anvil_store_faults(anvil_store *st, int64_t id, anvil_job_fault **faults, int *n);
void anvil_job_faults_free(anvil_job_fault *faults, int n);

/* The job as the API lists it: its fields and spec, without history. NULL after anvil_fail. */
cJSON *anvil_job_json(const anvil_job *job);

void anvil_job_free(anvil_job *job);
void anvil_job_list_free(anvil_job *jobs, int n);
void anvil_job_events_free(anvil_job_event *events, int n);

#endif
