/* The job service's backends: how an attempt is started, observed, signalled and found again.
 *
 * The supervisor (job/supervisor.h) decides: statuses, retries, limits, hangs, stops. A backend
 * carries out: it starts an attempt of a job, says whether it still runs or how it ended, passes
 * it the graceful stop or kills it, and describes it. It keeps nothing in memory that the store
 * does not hold: start names the attempt by a handle (text), which the store keeps with the job
 * before the attempt runs anything, and every other call works from (job, attempt, handle)
 * alone, so a daemon started after the one that started the attempt finds it again.
 *
 * The local backend (backend_local.c) runs each attempt on this machine as
 *   anvil job-run --exit-file STATE/jobs/<id>/exit_<attempt> --
 *       launch -n P --log-dir RUN/logs -- <command>
 * forked into a session of its own (setsid), its output appended to RUN/logs/launcher.log. The
 * handle is the wrapper's pid, which is also the session's id and its process group's: the
 * launcher, mpirun and the ranks all carry that session id. The wrapper ignores stop signals and
 * writes the launcher's exit status into the exit file atomically before it exits, so the attempt
 * has ended when that file exists, or when no live process of the session is left (then it was
 * lost: killed along with everything, or ended while no daemon was there to reap it). */
#ifndef ANVIL_JOB_BACKEND_H
#define ANVIL_JOB_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "launch/simhosts.h"

/* One attempt of a job, as the store knows it. */
typedef struct {
    int64_t job_id;
    int attempt;        /* 1 for the first */
    const char *handle; /* what start recorded; "" before */
} anvil_attempt_ref;

/* What an attempt runs. */
typedef struct {
    anvil_attempt_ref ref;
    const char *run_dir; /* the job's run folder: the attempt's working folder, its logs in RUN/logs */
    int hosts, procs_per_host;
    double time_left_s; /* what max_runtime_s leaves the attempt (retries share it); 0: no limit */
    double keep_alive_s; /* the spec's: how long a backend that can may hold the attempt's hosts after it completed */
    const char *owner;   /* whose warm pools the attempt may use and leaves: the job's role, else its user */
    const char *user;    /* who submitted the job: who, with the admins, may see and release its pool */
    int argc;
    char *const *argv; /* the anvil subcommand with its options (--out RUN, --resume auto), NULL-ended */
    char *const *envp; /* the whole environment of the attempt, NULL-ended */
} anvil_attempt_spec;

typedef enum {
    ANVIL_ATTEMPT_RUNNING,
    ANVIL_ATTEMPT_EXITED, /* with its exit status (128 + S for a signal S) */
    ANVIL_ATTEMPT_LOST,   /* no exit status and nothing of it left */
    /* It ran nothing of the job: a check before it found nodes unfit, and the backend left them out of
     * the job's next attempts (its describe names them). */
    ANVIL_ATTEMPT_UNHEALTHY,
} anvil_attempt_state;

/* Stores the handle of an attempt that exists but has not run anything yet: 0, or -1 after
 * anvil_fail, and then start undoes the attempt. */
typedef int (*anvil_attempt_record_fn)(void *ctx, const char *handle);

typedef struct anvil_backend anvil_backend;

typedef struct {
    const char *name; /* "local": recorded with each job it runs */
    /* Starts the attempt, calling record(ctx, handle) before letting it run. 0, or -1 after anvil_fail
     * (record's own failure included) with nothing left running. */
    int (*start)(anvil_backend *b, const anvil_attempt_spec *a, anvil_attempt_record_fn record, void *ctx);
    /* An anvil_attempt_state, with *code set for EXITED; -1 after anvil_fail. */
    int (*poll)(anvil_backend *b, const anvil_attempt_ref *a, int *code);
    /* The graceful stop: the ranks get the trainer's checkpoint-and-stop (SIGUSR1). */
    int (*stop)(anvil_backend *b, const anvil_attempt_ref *a);
    /* Ends every process of the attempt at once. */
    int (*kill)(anvil_backend *b, const anvil_attempt_ref *a);
    /* Adds what the backend keeps of the job between attempts (a: its current or last attempt) to o,
     * describe's "backend" object. */
    int (*describe)(anvil_backend *b, const anvil_attempt_ref *a, cJSON *o);
    /* Adds what the backend knows of attempt a, running or just ended, to o: describe shows a running
     * attempt's live, and the supervisor stores an ended one's with it, so that they outlive the backend's
     * own memory of it (Slurm forgets a job minutes after its end). */
    int (*attempt_facts)(anvil_backend *b, const anvil_attempt_ref *a, cJSON *o);
    /* Before a retry: makes sure that no process of ended attempt a can still run, ending what is left of
     * it. 0 once none can; 1 while some may, why saying what is waited for; -1 after anvil_fail. A backend
     * may give up waiting on what it cannot reach (a node that does not answer) at ended_at + its grace:
     * then 0 with why saying what it gave up on (else why is ""). The run folder's lock (which the
     * supervisor checks after) stays the fence of what writes the run folder. */
    int (*fence)(anvil_backend *b, const anvil_attempt_ref *a, double ended_at, char *why, size_t cap);
    /* A fault of anvil chaos (job/chaos.h: kill-rank, stop-rank, kill-attempt, host-lost, net-cut) on running
     * attempt a; target: the rank or host index (the caller draws one when the schedule names none);
     * per_host: the attempt's processes per host. 0 with what was done in done; 1 when there is no such
     * target to strike now (why in done); 2 when the backend cannot carry the fault out where the job runs
     * (why in done: a net-cut of an attempt not on simulated hosts); -1 after anvil_fail. NULL on a backend
     * that injects none. */
    int (*inject)(anvil_backend *b, const anvil_attempt_ref *a, int kind, int target, int per_host, char *done,
                  size_t cap);
    void (*free)(anvil_backend *b);
    /* The one line that says how a failed attempt ended, when the backend knows better than the run's
     * launcher log's last error line (which rank failed first, and where); "" when it does not. NULL on a
     * backend that never does. Called after poll said EXITED or LOST. */
    void (*failure_line)(anvil_backend *b, const anvil_attempt_ref *a, char *line, size_t cap);
    /* Warm pools, NULL on a backend that keeps none. pools: an array of {"id", "status", "user", "owner",
     * "partition", "hosts", "procs_per_host", "nodes", "expires", "job"}, those of user alone unless
     * user is NULL; NULL after anvil_fail. release_pool: ends pool id early (its holder sees the release
     * within a second) when user is NULL or its user: 0, 1 when there is no such pool (or not the user's),
     * 2 when it has ended already, -1. pool_hosts: the hosts that the Available pools of user (when not NULL),
     * or else of owner, hold, less one pool that a job of hosts x procs_per_host would run in (that job
     * takes no new hosts). */
    cJSON *(*pools)(anvil_backend *b, const char *user);
    int (*release_pool)(anvil_backend *b, const char *id, const char *user);
    double (*pool_hosts)(anvil_backend *b, const char *user, const char *owner, int hosts, int procs_per_host);
} anvil_backend_ops;

struct anvil_backend {
    const anvil_backend_ops *ops;
};

/* A file of attempt a in its job's folder of the state folder, STATE/jobs/<id>/<name>_<attempt>, into
 * path: where either backend keeps what it knows of one attempt. */
void anvil_attempt_file(const char *state_dir, const anvil_attempt_ref *a, const char *name, char *path, size_t cap);
/* The exit file of an attempt, STATE/jobs/<id>/exit_<attempt>, into path: what runs the attempt writes
 * its exit status there (one number, atomically) before the attempt ends, on either backend, so a
 * daemon that was down meanwhile still learns how it ended. */
void anvil_attempt_exit_path(const char *state_dir, const anvil_attempt_ref *a, char *path, size_t cap);
/* The exit status in an attempt's exit file, or -1 when there is none (yet). */
int anvil_attempt_read_exit(const char *state_dir, const anvil_attempt_ref *a);

/* Forks path (argv, envp) into a session of its own in run_dir, its output appended to log, and holds it
 * on a pipe until record(ctx, handle_prefix followed by its pid, which is also its session's id) has
 * stored the handle, so a daemon killed in between leaves nothing running the store does not know of.
 * 0, or -1 after anvil_fail with nothing left running. Both backends start their wrappers so. */
int anvil_attempt_spawn(const char *path, char *const *argv, char *const *envp, const char *run_dir, const char *log,
                        const char *handle_prefix, anvil_attempt_record_fn record, void *ctx);

/* The local backend: state_dir holds jobs/<id>/exit_<n>; self is the anvil binary the attempts run.
 *
 * sim (NULL: none) are the daemon's simulated hosts (launch/simhosts.h): a job of resources.hosts H >= 2
 * runs on hosts 0 to H-1 (more than sim->n is refused), the launcher given `--hosts ADDR:P,...` (P its
 * procs_per_host) and Open MPI, through the environment, the rsh agent `anvil sim-host-rsh`, pml ob1,
 * btl self,vader,tcp, and the hosts' subnet for btl_tcp_if_include and oob_tcp_if_include. Every process
 * stays in the wrapper's session, so stop, kill, fence and the rank faults work as on one host. The hosts
 * an attempt runs on: STATE/jobs/<id>/simhosts_<n> (describe's "sim_hosts"). net-cut takes one host's
 * link down, naming it in STATE/jobs/<id>/netcut_<n> first; poll brings the links there up again once it
 * finds the attempt ended, before any retry starts. A job of 1 host runs as without sim.
 * NULL after anvil_fail. */
anvil_backend *anvil_backend_local_new(const char *state_dir, const char *self, const anvil_simhosts *sim);

/* The Slurm backend (backend_slurm.c): each attempt is one batch job of the cluster that sbatch, scontrol
 * and scancel (in PATH, SLURM_CONF as the daemon has it) reach, its handle the Slurm job ID.
 *   - start writes STATE/jobs/<id>/slurm_<n>.sh, a batch script that runs `srun --mpi=pmix` with the
 *     spec's hosts and processes per host in the background, forwards SIGUSR1 to it (srun passes it
 *     on to the ranks: the trainer's checkpoint-and-stop), and writes srun's exit status to the exit
 *     file; it is submitted held (sbatch --hold), recorded, then released. Its options:
 *     --signal=B:USR1@<grace> and --time from time_left_s (a time limit checkpoints first),
 *     --open-mode=append (RUN/logs/launcher.log gathers every attempt), --requeue, and --exclude
 *     of the job's bad nodes.
 *   - keep_alive_s > 0: once the step has exited 0 with its command's completion record, verified
 *     (ckpt/completion.h, anvil job-run --verify-completion) and the exit file is written (the attempt has ended
 *     for the supervisor), the batch script does not exit but holds the allocation as a warm pool,
 *     STATE/pools/<Slurm job ID> (KEY=VALUE lines: status Available, partition, hosts,
 *     procs_per_host, expires as Unix time), for up to keep_alive_s; it ends early when
 *     STATE/pools/<Slurm job ID>.release appears, and marks the pool Terminated as it exits. --time
 *     includes the TTL, so Slurm's limit never cuts a pool short.
 *   - poll asks Slurm before it believes the exit file: once the exit file is there or Slurm has
 *     ended or requeued the job, a node failure under the attempt (the job NODE_FAIL or requeued,
 *     srun's "Node failure on NODE" in its log, one of its nodes no longer answering Slurm) makes it
 *     lost whatever the exit file says, and a job still queued is cancelled, so that the
 *     supervisor's retry is a new submission that leaves the node out rather than a wait on Slurm's
 *     requeue delay; the exit file counts once Slurm has ended the job; a job Slurm ended or no
 *     longer knows without one is lost too; a lost attempt's cancelled job is waited for (30 s at most)
 *     until Slurm has ended it. How it ended in Slurm's words: STATE/jobs/<id>/end_<n>. A warm
 *     attempt is judged so too, against the pool's job, once its script wrote the exit file or is gone.
 *   - An attempt that failed or was lost marks its bad nodes in STATE/jobs/<id>/excluded (one
 *     "node<TAB>attempt<TAB>why" a line): the node where srun saw the first rank ended by a signal
 *     that is not one anvil or Slurm sent on their own (a stop's USR1, a relayed TERM, the KILL of a
 *     stop or kill the daemon asked for, which mark the attempt stopped_<n>, killed_<n>; what Slurm's
 *     time limit or a cancel sends), the nodes srun reported failed, and any node of the attempt that
 *     Slurm reports DOWN, NOT_RESPONDING, DRAIN or FAIL. A rank's own nonzero exit marks no node:
 *     that is the program's failure, not the machine's.
 *   - fence: the batch job (a warm attempt's pool job only after a node was lost under it) cancelled
 *     until Slurm has it final, and, until the grace after the attempt's end, the attempt's nodes
 *     answering Slurm again (a node that comes back has its slurmd end what is left of the job there;
 *     the ranks' shared lock, which the supervisor probes, says when it has). scancel's "already
 *     ended" answers are no errors; a Slurm that does not answer is asked again for 300 s, then the job
 *     fails.
 *   - Before the step, the script runs the pre-flight check on every node, one process each
 *     (`srun --mpi=none --ntasks-per-node=1 anvil health --quick --json`, skipped when the command
 *     has --no-health), reports in STATE/jobs/<id>/health_<n>/<node>.json and .err; a node that
 *     fails it ends the attempt with exit status 79 before the training, and poll marks the nodes
 *     at fault ("health: <what anvil health said>") and answers ANVIL_ATTEMPT_UNHEALTHY.
 *   - stop: `scancel --batch --signal=USR1` of a running job (the script forwards it); a job still
 *     pending is cancelled. kill: `scancel --signal=KILL --full`; for a warm attempt, its step
 *     alone (named anvil-<id>.<attempt>), so the pool outlives it.
 *   - failure_line: the node failure that lost the attempt, else where srun saw the first rank killed
 *     by a signal that counts.
 * partition and account may be NULL (the cluster's defaults); grace_s is the daemon's stop grace.
 * NULL after anvil_fail. */
anvil_backend *anvil_backend_slurm_new(const char *state_dir, const char *self, const char *partition,
                                       const char *account, double grace_s);

#endif
