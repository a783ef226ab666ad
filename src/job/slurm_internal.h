/* The Slurm backend's insides (job/backend.h), shared by its files:
 *   backend_slurm.c    an attempt's batch script, start, poll, stop, kill, fence and facts;
 *   slurm_nodes.c      the job's bad nodes: which node an attempt's end blames, and why;
 *   warm_pool_slurm.c  warm pools: allocations a completed job keeps for the next one;
 *   slurm_client.c     running Slurm's clients, reading their answers, writing shell;
 *   slurm_chaos.c      the faults of anvil chaos (inject).
 * Everything it knows lives in files under STATE/jobs/<id>/ and STATE/pools/, and in Slurm. */
#ifndef ANVIL_JOB_SLURM_INTERNAL_H
#define ANVIL_JOB_SLURM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "core/strbuf.h"
#include "job/backend.h"

#define SLURM_RECENT_MAX 64
/* The exit status the batch script writes when a node failed the pre-flight check (no anvil command
 * exits with it); poll turns it into ANVIL_ATTEMPT_UNHEALTHY. */
#define SLURM_HEALTH_EXIT 79

typedef struct {
    anvil_backend base;
    char *state_dir, *self, *partition, *account;
    double grace_s;
    /* When scontrol last said these attempts run: a cache that only spares slurmctld (a restarted
     * daemon asks at once). Used by poll alone, which the supervisor calls from one thread. */
    struct {
        int64_t job_id;
        int attempt;
        double at;
    } recent[SLURM_RECENT_MAX];
} slurm_backend;

/* ---- slurm_client.c ---- */

/* Runs a Slurm client (argv[0] looked up in PATH) with env, its stdout and stderr together in *out
 * (malloc'd, at most 64 KiB kept). Its exit status, or -1 after anvil_fail when it could not run. */
int anvil_slurm_run(char *const *argv, char *const *env, char **out);
/* Runs a client whose output does not matter; 0, or -1 after anvil_fail naming what it said. */
int anvil_slurm_run_quiet(char *const *argv);
/* scancel (argv, the Slurm job ID last): 0 when Slurm took it, or answered that the job has ended or is
 * ending already ("Invalid job id", "already completing or completed"): what a cancel is for; 1 when it
 * did not (slurmctld unreachable or slow), with scancel's answer in said, to be asked again; -1 after
 * anvil_fail when scancel cannot run. */
int anvil_slurm_cancel(char *const *argv, char *said, size_t cap);
/* The first line of a client's output (cut there), for an error message. */
const char *anvil_slurm_first_line(char *out);
/* The value of KEY=VALUE in scontrol's one-line output, malloc'd; NULL when absent or out of memory.
 * Values end at a space, except with rest, for the free text scontrol puts last (a node's Reason). */
char *anvil_slurm_field(const char *line, const char *key, bool rest);
/* Whether the field key of info is want. */
bool anvil_slurm_field_is(const char *info, const char *key, const char *want);
/* scontrol's one line about Slurm job id: 0 with *out, 1 when Slurm no longer knows the job, -1 after
 * anvil_fail. */
int anvil_slurm_show_job(const char *id, char **out);
/* STATE/jobs/<id>, and its file NAME_<attempt> (name "" : the folder). */
void anvil_slurm_job_dir(const slurm_backend *sb, int64_t id, char *path, size_t cap);
void anvil_slurm_attempt_file(const slurm_backend *sb, const anvil_attempt_ref *a, const char *name, char *path,
                              size_t cap);
/* s in single quotes for the shell. */
void anvil_slurm_put_quoted(anvil_strbuf *t, const char *s);
/* The file name pattern (sbatch --output) that Slurm expands to path then suffix, into out: '%'
 * starts a replacement ("%j") unless doubled, and a backslash turns replacements off and is dropped
 * unless doubled (slurmstepd's fname.c; seen in Slurm 22.05 and its later source alike). So a name
 * with a backslash has each backslash doubled and its '%' left alone, any other its '%' doubled. -1
 * after anvil_fail when it does not fit in cap. */
int anvil_slurm_file_pattern(const char *path, const char *suffix, char *out, size_t cap);
/* A shell line that writes what command prints to path atomically: a temporary file, fsync'd, renamed. */
void anvil_slurm_put_atomic_write(anvil_strbuf *t, const char *command, const char *path);
/* sbatch's and the warm script's environment: the attempt's, and the daemon's SLURM_CONF. NULL-ended;
 * only the array is malloc'd. */
char **anvil_slurm_submit_env(const anvil_attempt_spec *a);
double anvil_slurm_now(void);

/* ---- slurm_nodes.c ---- */

/* The job's bad nodes, STATE/jobs/<id>/excluded: "node<TAB>attempt<TAB>why" lines (older daemons
 * wrote "node<TAB>why"); "" when none (malloc'd; NULL when out of memory). */
char *anvil_slurm_excluded_text(const slurm_backend *sb, int64_t id);
/* The excluded nodes as describe shows them, [{"node", "attempt", "why"}], those of attempt alone
 * unless it is 0, into array. */
int anvil_slurm_excluded_json(const slurm_backend *sb, int64_t id, int attempt, cJSON *array);
/* The attempt's nodes, one a line (malloc'd), from the node list its script wrote: 0, 1 when it has
 * none (it never ran) or scontrol cannot expand it, -1 after anvil_fail. */
int anvil_slurm_attempt_nodes(const slurm_backend *sb, const anvil_attempt_ref *a, char **names);
/* Whether Slurm reports node's State as not answering it (NOT_RESPONDING, DOWN, FAIL): 1 with the state
 * and reason in why, 0 when it answers, -1 after anvil_fail. */
int anvil_slurm_node_lost(const char *node, char *why, size_t cap);
/* What the attempt's part of the log (from its first line, "anvil: job J attempt N: ...") says of its
 * end: where srun saw the first rank ended by a signal that is not one anvil or Slurm send on their
 * own (a stop's USR1, a relayed TERM, the KILL of a kill the daemon asked for), and the nodes srun
 * reported failed ("Node failure on n1") or unable to start the step's tasks. */
typedef struct {
    char killed_node[128], killed_why[1024]; /* "" when none counts */
    char failed_nodes[512];                  /* comma-separated; "" when none */
    char failed_why[700];                    /* srun's line on the first of them */
} anvil_slurm_log_facts;
void anvil_slurm_scan_log(const slurm_backend *sb, const anvil_attempt_ref *a, anvil_slurm_log_facts *f);
/* The script's comment line naming where its output goes (run_dir/logs/launcher.log), which
 * anvil_slurm_scan_log reads: every batch and warm script has one. */
void anvil_slurm_put_output_line(anvil_strbuf *t, const char *run_dir);
/* The nodes that failed the attempt's pre-flight check, marked bad: how many, or -1 after anvil_fail. */
int anvil_slurm_exclude_unhealthy(const slurm_backend *sb, const anvil_attempt_ref *a);
/* The bad nodes of an attempt that failed or was lost, marked: the node of its first rank killed by a
 * signal that counts, the nodes srun reported failed, and those of its nodes that Slurm reports down,
 * not responding, drained or failed. 0, or -1 after anvil_fail. */
int anvil_slurm_exclude_bad_nodes(const slurm_backend *sb, const anvil_attempt_ref *a);

/* ---- slurm_chaos.c ---- */

/* The backend's inject (job/backend.h). */
int anvil_slurm_inject(anvil_backend *b, const anvil_attempt_ref *a, int kind, int target, int per_host, char *done,
                       size_t cap);

/* ---- warm_pool_slurm.c ---- */

/* A warm attempt's handle is "<the holder's Slurm job ID>:<pid of the script that runs the step>": the
 * pid, or 0 for a batch attempt. */
pid_t anvil_slurm_warm_pid(const anvil_attempt_ref *a);
/* The attempt with the Slurm job ID alone as its handle (kept in buf). */
anvil_attempt_ref anvil_slurm_ref(const anvil_attempt_ref *a, char *buf, size_t cap);
/* Starts the attempt in an Available pool that fits it, if one does: 1 when it did (record called), 0
 * when none fits (nothing done), -1 after anvil_fail (the claim given back). */
int anvil_slurm_pool_start(slurm_backend *sb, const anvil_attempt_spec *a, anvil_attempt_record_fn record, void *ctx);
/* The batch script's parts that open the pool (before the exit file) and hold it (after). */
void anvil_slurm_put_pool_open(anvil_strbuf *t, const slurm_backend *sb, const anvil_attempt_spec *a);
void anvil_slurm_put_pool_hold(anvil_strbuf *t);
/* Whether Slurm job id holds a pool it has not given up (Available or InUse): its batch job then runs on
 * after its attempt's exit file. */
bool anvil_slurm_pool_held(const slurm_backend *sb, const char *id);
/* Marks holder's pool Terminated: its Slurm job ended without a word of its own (cancelled, a node lost). */
void anvil_slurm_pool_ended(const slurm_backend *sb, const char *holder);
/* Removes the claim on holder's pool when it is this attempt's. */
void anvil_slurm_pool_drop_claim(const slurm_backend *sb, const anvil_attempt_ref *a, const char *holder);
/* The steps of holder's allocation named as attempt a's, each ended with SIGKILL: how many, or -1. */
int anvil_slurm_kill_warm_steps(const anvil_attempt_ref *a, const char *holder);
/* warm_pool_status and warm_pool_id of attempt a into o. */
int anvil_slurm_describe_pool(const slurm_backend *sb, const anvil_attempt_ref *a, cJSON *o);
/* The backend's pool calls (job/backend.h). */
cJSON *anvil_slurm_pools(anvil_backend *b, const char *user);
int anvil_slurm_release_pool(anvil_backend *b, const char *id, const char *user);
double anvil_slurm_pool_hosts(anvil_backend *b, const char *user, const char *owner, int hosts, int procs_per_host);
/* The step of an attempt (backend_slurm.c): srun of its command in the background, in the allocation
 * of Slurm job jobid when not NULL (a warm one), its exit status in $rc, SIGUSR1 passed on. */
void anvil_slurm_put_step(anvil_strbuf *t, const slurm_backend *sb, const anvil_attempt_spec *a, const char *jobid);

#endif
