/* The Slurm backend (job/backend.h): each attempt is one Slurm batch job. This file holds an attempt's
 * course: its batch script, start, poll, stop, kill, fence, and what describe shows of it; its bad
 * nodes are slurm_nodes.c's, warm pools warm_pool_slurm.c's (slurm_internal.h). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "core/strbuf.h"
#include "job/backend.h"
#include "job/slurm_internal.h"

extern char **environ;

/* How often poll asks slurmctld about an attempt it last found running. The exit file is read on every
 * poll, so an attempt's end is seen at once; only a job Slurm ends or requeues waits up to this long. */
#define ASK_EVERY_S 2.0
/* How long after its exit file an attempt's batch job may take to reach a final state in Slurm before
 * poll stops waiting for Slurm's word on how it ended. */
#define FINAL_WAIT_S 30.0
/* How long the fence asks again a Slurm that does not answer it, or does not take its cancel, before it
 * fails the job: a slurmctld that restarts (a failover, an upgrade) is back within a few minutes. */
#define UNANSWERED_S 300.0

static slurm_backend *slurm_of(anvil_backend *b) { return (slurm_backend *)b; }

/* The cache slot of an attempt: its own, else the oldest. */
static int recent_slot(const slurm_backend *sb, const anvil_attempt_ref *a) {
    int oldest = 0;
    for (int i = 0; i < SLURM_RECENT_MAX; i++) {
        if (sb->recent[i].job_id == a->job_id && sb->recent[i].attempt == a->attempt) return i;
        if (sb->recent[i].at < sb->recent[oldest].at) oldest = i;
    }
    return oldest;
}

/* srun passes SIGUSR1 on to every rank; the wait it interrupts is taken up again. */
void anvil_slurm_put_step(anvil_strbuf *t, const slurm_backend *sb, const anvil_attempt_spec *a, const char *jobid) {
    anvil_strbuf_puts(t, "stopping=\ntrap 'stopping=1; kill -USR1 \"$step\" 2> /dev/null' USR1\nsrun ");
    /* A warm step is named, so that a kill can end it alone (slurm_kill), not the holder's allocation. */
    if (jobid)
        anvil_strbuf_printf(t, "--jobid=%s --job-name=anvil-%lld.%d ", jobid, (long long)a->ref.job_id, a->ref.attempt);
    anvil_strbuf_printf(t, "--mpi=pmix --kill-on-bad-exit=1 --nodes=%d --ntasks-per-node=%d ", a->hosts,
                        a->procs_per_host);
    anvil_slurm_put_quoted(t, sb->self);
    for (int i = 0; i < a->argc; i++) {
        anvil_strbuf_puts(t, " ");
        anvil_slurm_put_quoted(t, a->argv[i]);
    }
    anvil_strbuf_puts(
        t, " &\nstep=$!\nwhile :; do\n  wait \"$step\"\n  rc=$?\n  [ -n \"$stopping\" ] || break\n  stopping=\ndone\n");
}

/* The pre-flight check (job/backend.h): anvil health --quick on every node of the allocation at once, one
 * process on each, each judged alone (--mpi=none: no MPI world), its report and its error lines in
 * STATE/jobs/<id>/health_<n>/<node>.json and .err. When a node fails it, the attempt ends there with
 * SLURM_HEALTH_EXIT in its exit file, before the training starts. */
static void put_health(anvil_strbuf *t, const slurm_backend *sb, const anvil_attempt_spec *a, const char *dir) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/health_%d", dir, a->ref.attempt);
    anvil_strbuf_puts(t, "hd=");
    anvil_slurm_put_quoted(t, path);
    /* Without ANVIL_ATTEMPT: the check is not the job's command, and must leave no completion record. */
    anvil_strbuf_printf(t, "\nmkdir -p \"$hd\"\nif ! srun --mpi=none --nodes=%d --ntasks-per-node=1 bash -c "
            "'unset ANVIL_ATTEMPT; exec \"$0\" health --quick --json > \"$1/$SLURMD_NODENAME.json\" "
            "2> \"$1/$SLURMD_NODENAME.err\"' ",
         a->hosts);
    anvil_slurm_put_quoted(t, sb->self);
    anvil_strbuf_puts(
        t, " \"$hd\"; then\n  echo \"anvil: error: a node failed the pre-flight health check: $(cat \"$hd\"/*.err "
           "2> /dev/null | head -n 1)\"\n");
    anvil_attempt_exit_path(sb->state_dir, &a->ref, path, sizeof path);
    anvil_strbuf_printf(t, "  rc=%d\n  ", SLURM_HEALTH_EXIT);
    anvil_slurm_put_atomic_write(t, "printf '%d\\n' \"$rc\"", path);
    anvil_strbuf_puts(t, "  exit \"$rc\"\nfi\n");
}

static bool has_arg(const anvil_attempt_spec *a, const char *arg) {
    for (int i = 0; i < a->argc; i++)
        if (!strcmp(a->argv[i], arg)) return true;
    return false;
}

/* --exclude of the job's bad nodes, when it has any. */
static void put_exclude(anvil_strbuf *t, const slurm_backend *sb, const anvil_attempt_spec *a) {
    char *bad = anvil_slurm_excluded_text(sb, a->ref.job_id);
    if (!bad) {
        t->oom = true;
        return;
    }
    if (*bad) {
        anvil_strbuf_puts(t, "#SBATCH --exclude=");
        for (char *line = bad, *sep = ""; *line; sep = ",") {
            size_t n = strcspn(line, "\t\n"), end = strcspn(line, "\n");
            anvil_strbuf_puts(t, sep);
            anvil_strbuf_put(t, line, n);
            line += end + (line[end] != 0);
        }
        anvil_strbuf_puts(t, "\n");
    }
    free(bad);
}

/* The batch script of an attempt: the sbatch options as #SBATCH lines, so that the file alone shows
 * what was asked of Slurm, but for the run folder's (submit_held). */
static char *batch_script(const slurm_backend *sb, const anvil_attempt_spec *a) {
    char dir[PATH_MAX], base[PATH_MAX + 32];
    anvil_slurm_job_dir(sb, a->ref.job_id, dir, sizeof dir);
    anvil_strbuf t = {0};
    long grace = (long)ceil(sb->grace_s);
    grace = grace < 1 ? 1 : grace > 65535 ? 65535 : grace;
    anvil_strbuf_printf(&t, "#!/bin/bash\n# anvil job %lld, attempt %d, written by anvil serve's Slurm backend.\n",
         (long long)a->ref.job_id, a->ref.attempt);
    anvil_strbuf_printf(&t, "#SBATCH --job-name=anvil-%lld.%d\n", (long long)a->ref.job_id, a->ref.attempt);
    if (sb->partition) anvil_strbuf_printf(&t, "#SBATCH --partition=%s\n", sb->partition);
    if (sb->account) anvil_strbuf_printf(&t, "#SBATCH --account=%s\n", sb->account);
    anvil_strbuf_printf(&t, "#SBATCH --nodes=%d\n#SBATCH --ntasks-per-node=%d\n", a->hosts, a->procs_per_host);
    /* The USR1 comes grace seconds before the limit, which leaves the checkpoint its time. */
    if (a->time_left_s > 0)
        anvil_strbuf_printf(&t, "#SBATCH --time=%ld\n",
                            (long)ceil((a->time_left_s + a->keep_alive_s + (double)grace) / 60));
    anvil_strbuf_printf(&t, "#SBATCH --signal=B:USR1@%ld\n#SBATCH --open-mode=append\n#SBATCH --requeue\n", grace);
    /* A folder's name can hold what an #SBATCH line cannot carry (sbatch ends it at a blank, a '#' or a
     * newline, and 22.05 honours no escape of a blank): the run folder goes on sbatch's command line. */
    anvil_strbuf_puts(&t, "# --chdir and --output (the run folder, and logs/launcher.log in it): on sbatch's command "
                          "line\n");
    /* Where the backend reads the attempt's srun lines; a path holds no newline. */
    anvil_slurm_put_output_line(&t, a->run_dir);
    put_exclude(&t, sb, a);
    /* The first line of the attempt in the log (anvil_slurm_scan_log reads from it on). */
    anvil_strbuf_printf(&t, "echo \"anvil: job %lld attempt %d: Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST\"\n",
         (long long)a->ref.job_id, a->ref.attempt);
    snprintf(base, sizeof base, "%s/nodes_%d", dir, a->ref.attempt);
    anvil_slurm_put_atomic_write(&t, "printf '%s\\n' \"$SLURM_JOB_NODELIST\"", base);
    /* A training that skips its own check skips this one too. */
    if (!has_arg(a, "--no-health")) put_health(&t, sb, a, dir);
    anvil_slurm_put_step(&t, sb, a, NULL);
    if (a->keep_alive_s > 0) anvil_slurm_put_pool_open(&t, sb, a);
    anvil_attempt_exit_path(sb->state_dir, &a->ref, base, sizeof base);
    anvil_slurm_put_atomic_write(&t, "printf '%d\\n' \"$rc\"", base);
    if (a->keep_alive_s > 0) anvil_slurm_put_pool_hold(&t);
    anvil_strbuf_puts(&t, "exit \"$rc\"\n");
    if (t.oom) {
        free(t.s);
        anvil_fail("out of memory");
        return NULL;
    }
    return t.s;
}

/* sbatch --test-only, then sbatch --hold: the new job's ID into handle. */
static int submit_held(const anvil_attempt_spec *a, const char *path, char *handle, size_t cap) {
    char chdir_arg[PATH_MAX + 16], output_arg[2 * PATH_MAX + 64] = "--output=";
    snprintf(chdir_arg, sizeof chdir_arg, "--chdir=%s", a->run_dir);
    size_t k = strlen(output_arg);
    if (anvil_slurm_file_pattern(a->run_dir, "/logs/launcher.log", output_arg + k, sizeof output_arg - k)) return -1;
    char **env = anvil_slurm_submit_env(a), *out = NULL;
    if (!env) return anvil_fail("out of memory");
    /* Slurm queues a job that no configuration of the cluster can ever run (more nodes than the
     * partition has, or than its bad nodes leave); asked first, it says so, and the job fails now. */
    int rc = anvil_slurm_run((char *[]){"sbatch", "--test-only", chdir_arg, output_arg, (char *)path, NULL}, env, &out);
    if (rc > 0) {
        anvil_fail("sbatch --test-only %s: %s", path, anvil_slurm_first_line(out));
    } else if (!rc) {
        free(out);
        rc = anvil_slurm_run((char *[]){"sbatch", "--parsable", "--hold", chdir_arg, output_arg, (char *)path, NULL},
                             env, &out);
        if (rc > 0) anvil_fail("sbatch %s: %s", path, anvil_slurm_first_line(out));
    }
    free(env);
    /* --parsable: "ID" or "ID;CLUSTER". */
    size_t n = rc ? 0 : strspn(out, "0123456789");
    if (!rc && (!n || n >= cap))
        rc = anvil_fail("sbatch %s: no job ID in its answer '%s'", path, anvil_slurm_first_line(out));
    if (!rc) {
        memcpy(handle, out, n);
        handle[n] = 0;
    }
    free(out);
    return rc ? -1 : 0;
}

/* Submits the attempt held, records its Slurm job ID, then releases it: a daemon killed in between
 * leaves a held job the store knows of (poll releases it) and never one it does not. */
static int slurm_start(anvil_backend *b, const anvil_attempt_spec *a, anvil_attempt_record_fn record, void *ctx) {
    slurm_backend *sb = slurm_of(b);
    char dir[PATH_MAX], logs[PATH_MAX], path[PATH_MAX + 32], handle[32];
    anvil_slurm_job_dir(sb, a->ref.job_id, dir, sizeof dir);
    snprintf(logs, sizeof logs, "%s/logs", a->run_dir);
    snprintf(path, sizeof path, "%s/slurm_%d.sh", dir, a->ref.attempt);
    if (anvil_mkdir_p(dir) || anvil_mkdir_p(logs)) return -1;
    int warm = anvil_slurm_pool_start(sb, a, record, ctx);
    if (warm) return warm < 0 ? -1 : 0;
    char *script = batch_script(sb, a);
    if (!script) return -1;
    int rc = anvil_write_file_atomic(path, script, strlen(script));
    free(script);
    if (rc || submit_held(a, path, handle, sizeof handle)) return -1;
    if (record(ctx, handle)) {
        char *ignored;
        anvil_slurm_run((char *[]){"scancel", handle, NULL}, environ, &ignored);
        free(ignored);
        return -1;
    }
    /* A release that fails is taken up again by poll. */
    anvil_slurm_run_quiet((char *[]){"scontrol", "release", handle, NULL});
    return 0;
}

static bool final_state(const char *s) {
    static const char *const finals[] = {"COMPLETED", "CANCELLED", "FAILED",    "TIMEOUT",      "NODE_FAIL",
                                         "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"};
    for (size_t i = 0; i < sizeof finals / sizeof *finals; i++)
        if (!strcmp(s, finals[i])) return true;
    return false;
}

/* What Slurm says of an attempt's batch job: its state ("" when Slurm no longer knows it), reason and
 * restarts (a requeue counts one). */
typedef struct {
    bool gone;
    char state[64], reason[256];
    int restarts;
} job_view;

static int view_job(const char *id, job_view *v) {
    char *info;
    memset(v, 0, sizeof *v);
    int gone = anvil_slurm_show_job(id, &info);
    if (gone < 0) return -1;
    v->gone = gone;
    if (gone) return 0;
    char *state = anvil_slurm_field(info, "JobState", false), *reason = anvil_slurm_field(info, "Reason", false),
         *restarts = anvil_slurm_field(info, "Restarts", false);
    snprintf(v->state, sizeof v->state, "%s", state ? state : "");
    snprintf(v->reason, sizeof v->reason, "%s", reason ? reason : "");
    v->restarts = restarts ? atoi(restarts) : 0;
    free(state);
    free(reason);
    free(restarts);
    free(info);
    return 0;
}

static bool requeued(const job_view *v) {
    return !v->gone && (v->restarts > 0 || !strncmp(v->state, "REQUEUE", 7) || !strcmp(v->state, "SPECIAL_EXIT"));
}

/* How the attempt ended in Slurm's words, kept in STATE/jobs/<id>/end_<n> (KEY=VALUE lines: state,
 * reason, restarts, lost: a node's failure that makes the attempt's exit status meaningless, or ""),
 * for its failure line, its bad nodes and describe, after Slurm has forgotten the job. A job that runs on
 * after the attempt's step (a warm pool's holder) has no final state yet: its state says why. */
static int write_end(const slurm_backend *sb, const anvil_attempt_ref *a, const job_view *v, const char *lost,
                     bool runs_on) {
    char path[PATH_MAX + 64];
    anvil_strbuf t = {0};
    anvil_strbuf_printf(&t, "state=%s%s\nreason=%s\nrestarts=%d\nlost=%s\n",
                        v->gone ? "unknown to Slurm (ended)" : v->state,
                        runs_on ? ", holding the warm pool (the attempt's step ended)" : "", v->reason, v->restarts,
                        lost);
    anvil_slurm_attempt_file(sb, a, "end", path, sizeof path);
    int rc = t.oom ? -1 : anvil_write_file_atomic(path, t.s, t.len);
    anvil_strbuf_free(&t);
    return rc;
}

/* Whether a node failed under the attempt, which makes whatever exit status it left meaningless (srun
 * says "Node failure on n1" and exits, even with 0, while that node's ranks run on): Slurm ended the
 * job NODE_FAIL or requeued it, srun reported a node failed or unable to start the step, or one of its
 * nodes no longer answers Slurm. 1 with the evidence in why, 0, or -1 after anvil_fail. */
static int node_failed(const slurm_backend *sb, const anvil_attempt_ref *a, const job_view *v, char *why, size_t cap) {
    anvil_slurm_log_facts f;
    anvil_slurm_scan_log(sb, a, &f);
    /* The nodes' states now say something of the attempt only while Slurm still has its job and did not
     * see it through to its end on its own: a node lost after that has nothing to do with it. */
    bool nodes_matter = !v->gone && !(!strcmp(v->state, "COMPLETED") && !v->restarts);
    char lost[512] = "", *names = NULL;
    int rc = nodes_matter ? anvil_slurm_attempt_nodes(sb, a, &names) : 1;
    if (rc < 0) return -1;
    for (char *save, *node = rc ? NULL : strtok_r(names, "\n", &save); node && !lost[0];
         node = strtok_r(NULL, "\n", &save)) {
        char state[400];
        if (anvil_slurm_node_lost(node, state, sizeof state) > 0) snprintf(lost, sizeof lost, "%s is %s", node, state);
    }
    free(names);
    bool failed = !strcmp(v->state, "NODE_FAIL") || requeued(v) || f.failed_nodes[0] || lost[0];
    if (!failed) return 0;
    snprintf(why, cap, "node failure: Slurm job %s %s%s%s%s%s", a->handle,
             requeued(v) ? "was requeued by Slurm" : v->gone ? "is no longer known to Slurm" : v->state,
             lost[0] ? "; " : "", lost, f.failed_nodes[0] ? "; " : "", f.failed_nodes[0] ? f.failed_why : "");
    return 1;
}

static int exited(slurm_backend *sb, const anvil_attempt_ref *a, int code, int *out) {
    *out = code;
    if (code == SLURM_HEALTH_EXIT) {
        int bad = anvil_slurm_exclude_unhealthy(sb, a);
        if (bad) return bad < 0 ? -1 : ANVIL_ATTEMPT_UNHEALTHY;
    }
    if (code != 0 && code != 75 && anvil_slurm_exclude_bad_nodes(sb, a)) return -1;
    return ANVIL_ATTEMPT_EXITED;
}

/* Seconds since the attempt's file NAME_<n> was written; -1 when there is none. */
static double file_age(const slurm_backend *sb, const anvil_attempt_ref *a, const char *name) {
    char path[PATH_MAX + 64];
    struct stat st;
    anvil_slurm_attempt_file(sb, a, name, path, sizeof path);
    return stat(path, &st) ? -1 : difftime(time(NULL), st.st_mtime);
}

/* The value of key in the attempt's end file, malloc'd; NULL when it has none. */
static char *end_field(const slurm_backend *sb, const anvil_attempt_ref *a, const char *key) {
    char path[PATH_MAX + 64], *text;
    size_t len;
    anvil_slurm_attempt_file(sb, a, "end", path, sizeof path);
    if (anvil_read_file_max(path, 1 << 16, &text, &len)) return NULL;
    char *v = anvil_slurm_field(text, key, true);
    free(text);
    return v;
}

/* The verdict of an earlier poll that the attempt was lost (its end file's lost), into why: a node that
 * answers Slurm again since, or a job Slurm has forgotten, does not undo it. */
static bool judged_lost(const slurm_backend *sb, const anvil_attempt_ref *a, char *why, size_t cap) {
    char *lost = end_field(sb, a, "lost");
    bool judged = lost && lost[0];
    if (judged) snprintf(why, cap, "%s", lost);
    free(lost);
    return judged;
}

/* A lost attempt's Slurm job that Slurm has not ended: cancelled (a requeued one would run again), and
 * waited for until Slurm has ended it, so that the state kept is how it ended. The verdict is kept at once
 * (the end file, whose time is the verdict's), and the cancel asked again on each poll until Slurm takes it.
 * 1 while waiting, 0 once FINAL_WAIT_S have passed since the verdict (the fence cancels what is left), -1
 * after anvil_fail. */
static int cancel_lost(const slurm_backend *sb, const anvil_attempt_ref *a, const job_view *v, const char *lost,
                       bool judged) {
    char said[512];
    if (!judged && write_end(sb, a, v, lost, false)) return -1;
    if (anvil_slurm_cancel((char *[]){"scancel", (char *)a->handle, NULL}, said, sizeof said) < 0) return -1;
    return file_age(sb, a, "end") < FINAL_WAIT_S;
}

/* An attempt that ended or may have (its exit file is there, its script or Slurm job has ended): Slurm is
 * asked before the exit file is believed. A node that failed under it makes it lost, whatever the exit
 * file says, its Slurm job cancelled; an exit file is taken once Slurm has ended the job (or the job runs
 * on by design: a warm attempt's, or one that holds a warm pool; or Slurm has been slow to end it for
 * FINAL_WAIT_S); a job Slurm ended without one is lost. a's handle is the Slurm job ID. */
static int judge_end(slurm_backend *sb, const anvil_attempt_ref *a, const job_view *v, int exit, bool warm,
                     int *code) {
    char lost[1600] = "";
    bool judged = judged_lost(sb, a, lost, sizeof lost);
    int failed = judged ? 1 : node_failed(sb, a, v, lost, sizeof lost);
    if (failed < 0) return -1;
    bool ended = v->gone || final_state(v->state);
    bool runs_on = !ended && (warm || anvil_slurm_pool_held(sb, a->handle));
    if (!failed && exit >= 0 && !ended && !runs_on && file_age(sb, a, "exit") < FINAL_WAIT_S)
        return ANVIL_ATTEMPT_RUNNING;
    if (failed && !ended) {
        int waiting = cancel_lost(sb, a, v, lost, judged);
        if (waiting) return waiting < 0 ? -1 : ANVIL_ATTEMPT_RUNNING;
    }
    if (write_end(sb, a, v, lost, runs_on && !failed)) return -1;
    if (!failed && exit >= 0) return exited(sb, a, exit, code);
    /* A pool that lost a node is no pool: its job is cancelled, and nobody may claim it. */
    if (warm && failed) anvil_slurm_pool_ended(sb, a->handle);
    return anvil_slurm_exclude_bad_nodes(sb, a) ? -1 : ANVIL_ATTEMPT_LOST;
}

/* A warm attempt runs while its script does; the script writes the exit file and gives the claim back
 * before it exits. Its end is judged as a batch attempt's, against the pool's Slurm job: a node lost under
 * the pool makes the attempt lost and that job cancelled (its allocation is no longer whole). A script
 * killed before it gave the claim back leaves it, which is given back here. */
static int warm_poll(slurm_backend *sb, const anvil_attempt_ref *a, pid_t pid, int *code) {
    waitpid(pid, NULL, WNOHANG);
    bool alive = !kill(pid, 0);
    int exit = anvil_attempt_read_exit(sb->state_dir, a);
    if (exit < 0 && alive) return ANVIL_ATTEMPT_RUNNING;
    char id[32];
    anvil_attempt_ref r = anvil_slurm_ref(a, id, sizeof id);
    job_view v;
    if (view_job(r.handle, &v)) return -1;
    int rc = judge_end(sb, &r, &v, exit, true, code);
    if (!alive && rc != ANVIL_ATTEMPT_RUNNING) anvil_slurm_pool_drop_claim(sb, a, r.handle);
    return rc;
}

static int slurm_poll(anvil_backend *b, const anvil_attempt_ref *a, int *code) {
    slurm_backend *sb = slurm_of(b);
    pid_t pid = anvil_slurm_warm_pid(a);
    if (pid) return warm_poll(sb, a, pid, code);
    int exit = anvil_attempt_read_exit(sb->state_dir, a);
    int slot = recent_slot(sb, a);
    bool mine = sb->recent[slot].job_id == a->job_id && sb->recent[slot].attempt == a->attempt;
    if (exit < 0 && mine && anvil_slurm_now() - sb->recent[slot].at < ASK_EVERY_S) return ANVIL_ATTEMPT_RUNNING;
    job_view v;
    if (view_job(a->handle, &v)) return -1;
    /* The script writes the exit file before its job ends: read again after Slurm's answer. */
    if (exit < 0) exit = anvil_attempt_read_exit(sb->state_dir, a);
    int rc = ANVIL_ATTEMPT_RUNNING;
    if (exit >= 0 || v.gone || final_state(v.state) || requeued(&v) || !strcmp(v.state, "NODE_FAIL"))
        rc = judge_end(sb, a, &v, exit, false, code);
    else if (!strcmp(v.state, "PENDING") && !strcmp(v.reason, "JobHeldUser"))
        /* Submitted and recorded by a daemon that stopped before releasing it. */
        rc = anvil_slurm_run_quiet((char *[]){"scontrol", "release", (char *)a->handle, NULL}) ? -1
                                                                                               : ANVIL_ATTEMPT_RUNNING;
    if (rc == ANVIL_ATTEMPT_RUNNING) {
        sb->recent[slot].job_id = a->job_id;
        sb->recent[slot].attempt = a->attempt;
        sb->recent[slot].at = anvil_slurm_now();
    }
    return rc;
}

/* Marks that the daemon itself ended (or began to end) the attempt: its signals then blame no node. */
static void mark(const slurm_backend *sb, const anvil_attempt_ref *a, const char *what) {
    char path[PATH_MAX + 64];
    anvil_slurm_attempt_file(sb, a, what, path, sizeof path);
    anvil_write_file_atomic(path, "", 0);
}

/* SIGUSR1 to the batch script, which forwards it to srun and so to every rank. Only a running job gets
 * it: scancel retries a signal to a pending job for about 95 s before it gives up, and a pending job
 * has run nothing that a checkpoint could keep, so it is cancelled at once. */
static int slurm_stop(anvil_backend *b, const anvil_attempt_ref *a) {
    slurm_backend *sb = slurm_of(b);
    mark(sb, a, "stopped");
    /* A warm attempt's script forwards it to its srun as the batch script does. */
    pid_t pid = anvil_slurm_warm_pid(a);
    if (pid) return kill(pid, SIGUSR1) && errno != ESRCH ? anvil_fail("job %lld: cannot signal %d: %s",
                                                                      (long long)a->job_id, (int)pid, strerror(errno))
                                                         : 0;
    char *info;
    int gone = anvil_slurm_show_job(a->handle, &info);
    if (gone) return gone < 0 ? -1 : 0;
    char *state = anvil_slurm_field(info, "JobState", false);
    free(info);
    int rc = 0;
    char said[512];
    /* It may have ended meanwhile: the cancel's answer then says so, which is no error. */
    if (state && !strcmp(state, "PENDING"))
        rc = anvil_slurm_cancel((char *[]){"scancel", (char *)a->handle, NULL}, said, sizeof said);
    else if (state && !strcmp(state, "RUNNING"))
        rc = anvil_slurm_cancel((char *[]){"scancel", "--batch", "--signal=USR1", (char *)a->handle, NULL}, said,
                                sizeof said);
    /* Any other state (configuring, completing, requeued) ends on its own or by the kill after the grace. */
    free(state);
    if (rc > 0) anvil_fail("job %lld: %s", (long long)a->job_id, said);
    return rc ? -1 : 0;
}

/* A warm attempt: its step alone, so that its script records the exit and gives the pool back, which the
 * holder then offers again; a script with no step (yet, or any more) is killed with its session, and
 * poll gives the claim back. Otherwise the attempt's own batch job, whole. */
static int slurm_kill(anvil_backend *b, const anvil_attempt_ref *a) {
    char id[32];
    mark(slurm_of(b), a, "killed");
    anvil_attempt_ref r = anvil_slurm_ref(a, id, sizeof id);
    pid_t pid = anvil_slurm_warm_pid(a);
    if (!pid) {
        char said[512];
        int rc = anvil_slurm_cancel((char *[]){"scancel", "--signal=KILL", "--full", (char *)r.handle, NULL}, said,
                                    sizeof said);
        /* One Slurm did not take is sent again on the next tick. */
        return rc > 0 ? anvil_fail("job %lld: %s", (long long)a->job_id, said) : rc;
    }
    int steps = anvil_slurm_kill_warm_steps(a, r.handle);
    if (steps <= 0) kill(-pid, SIGKILL);
    return steps < 0 ? -1 : 0;
}

/* An attempt lost while Slurm was still ending its job (requeued, completing) ended in a state Slurm
 * reached only later: the end file gets it, so that what is kept of the attempt says how Slurm ended it. */
static int final_state_known(const slurm_backend *sb, const anvil_attempt_ref *a, job_view *v) {
    char path[PATH_MAX + 64], *end, *lost;
    size_t len;
    anvil_slurm_attempt_file(sb, a, "end", path, sizeof path);
    if (anvil_read_file_max(path, 1 << 16, &end, &len)) return 0;
    bool same = anvil_slurm_field_is(end, "state", v->state);
    lost = anvil_slurm_field(end, "lost", true);
    free(end);
    int rc = same ? 0 : write_end(sb, a, v, lost ? lost : "", false);
    free(lost);
    return rc;
}

/* The attempt's nodes that do not answer Slurm (NOT_RESPONDING): what ran there may still run, and ends
 * only when the node answers again, since its slurmd then ends the steps of jobs that have ended. Waited
 * for until ended_at + the grace; past it, 0 with why naming them. */
static int wait_unreachable(const slurm_backend *sb, const anvil_attempt_ref *a, double ended_at, char *why,
                            size_t cap) {
    char *names;
    int rc = anvil_slurm_attempt_nodes(sb, a, &names);
    if (rc) return rc < 0 ? -1 : 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    bool waiting = (double)ts.tv_sec < ended_at + sb->grace_s;
    for (char *save, *node = strtok_r(names, "\n", &save); node && !rc; node = strtok_r(NULL, "\n", &save)) {
        char state[400];
        if (anvil_slurm_node_lost(node, state, sizeof state) <= 0 || !strstr(state, "NOT_RESPONDING")) continue;
        snprintf(why, cap,
                 waiting ? "%s does not answer Slurm (%s): a process of attempt %d may still run there, until the "
                           "node answers again and its slurmd ends it"
                         : "%s has not answered Slurm (%s) within the grace after attempt %d ended: what may still run "
                           "of it there holds no run lock, so it cannot write what a retry reads",
                 node, state, a->attempt);
        rc = waiting;
    }
    free(names);
    return rc;
}

/* Slurm did not answer the fence, or did not take its cancel (slurmctld unreachable or slow): 1, with why
 * saying so, and the fence asked again on the next tick, until UNANSWERED_S after the first such answer
 * (the time of the attempt's file unanswered_<n>); then -1 after anvil_fail naming it, which fails the job. */
static int unanswered(const slurm_backend *sb, const anvil_attempt_ref *a, const char *said, char *why, size_t cap) {
    char path[PATH_MAX + 64];
    double waited = file_age(sb, a, "unanswered");
    anvil_slurm_attempt_file(sb, a, "unanswered", path, sizeof path);
    if (waited < 0 && anvil_write_file_atomic(path, said, strlen(said))) return -1;
    if (waited >= UNANSWERED_S)
        return anvil_fail("attempt %d could not be fenced: Slurm has not answered for %.0f s (%s), so Slurm job %s "
                          "may still run",
                          a->attempt, waited, said, a->handle);
    snprintf(why, cap, "Slurm did not answer (%s): asked again", said);
    return 1;
}

/* The Slurm job of a fenced attempt: 0 once Slurm has ended it (its final state kept in the end file) or
 * forgotten it; else cancelled (every process of a running one sent SIGKILL first) and 1 until it has
 * ended; what unanswered says while Slurm does not answer or take the cancel. */
static int fence_job(const slurm_backend *sb, const anvil_attempt_ref *r, char *why, size_t cap) {
    job_view v;
    char said[600], path[PATH_MAX + 64];
    if (view_job(r->handle, &v)) {
        snprintf(said, sizeof said, "%s", anvil_errmsg());
        return unanswered(sb, r, said, why, cap);
    }
    int rc = 0;
    if (!v.gone && !final_state(v.state)) {
        if (strcmp(v.state, "PENDING"))
            rc = anvil_slurm_cancel((char *[]){"scancel", "--signal=KILL", "--full", (char *)r->handle, NULL}, said,
                                    sizeof said);
        if (!rc) rc = anvil_slurm_cancel((char *[]){"scancel", (char *)r->handle, NULL}, said, sizeof said);
        if (rc) return rc < 0 ? -1 : unanswered(sb, r, said, why, cap);
        snprintf(why, cap, "Slurm job %s is %s: cancelled", r->handle, v.state);
        rc = 1;
    } else if (!v.gone && final_state_known(sb, r, &v)) {
        return -1;
    }
    anvil_slurm_attempt_file(sb, r, "unanswered", path, sizeof path);
    unlink(path);
    return rc;
}

/* backend.h: the attempt's Slurm job ended (a warm attempt's, the pool's, only when the attempt was lost
 * under it: otherwise the pool runs on), a warm attempt's script gone, and the attempt's nodes answering
 * Slurm (or given up on after the grace). */
static int slurm_fence(anvil_backend *b, const anvil_attempt_ref *a, double ended_at, char *why, size_t cap) {
    slurm_backend *sb = slurm_of(b);
    why[0] = 0;
    char id[32], lost[8];
    anvil_attempt_ref r = anvil_slurm_ref(a, id, sizeof id);
    pid_t pid = anvil_slurm_warm_pid(a);
    if (pid) {
        waitpid(pid, NULL, WNOHANG);
        if (!kill(pid, 0)) {
            snprintf(why, cap, "its warm step's script (pid %d) still runs: killed", (int)pid);
            return slurm_kill(b, a) ? -1 : 1;
        }
    }
    if (!pid || judged_lost(sb, &r, lost, sizeof lost)) {
        int rc = fence_job(sb, &r, why, cap);
        if (rc) return rc;
    }
    int waiting = wait_unreachable(sb, &r, ended_at, why, cap);
    /* Nodes Slurm found down since the attempt ended are left out of the retry too. */
    return waiting < 0 || (!waiting && anvil_slurm_exclude_bad_nodes(sb, &r)) ? -1 : waiting;
}

/* backend.h: the node failure that made the attempt lost, else where srun saw the first rank killed by
 * a signal that counts, which is the cause; the log's last error line is srun's word on the ranks that
 * --kill-on-bad-exit ended after it. */
static void slurm_failure_line(anvil_backend *b, const anvil_attempt_ref *a, char *line, size_t cap) {
    char id[32];
    anvil_attempt_ref r = anvil_slurm_ref(a, id, sizeof id);
    char *lost = end_field(slurm_of(b), &r, "lost");
    line[0] = 0;
    if (lost && lost[0]) snprintf(line, cap, "%s", lost);
    free(lost);
    if (line[0]) return;
    anvil_slurm_log_facts f;
    anvil_slurm_scan_log(slurm_of(b), &r, &f);
    if (f.killed_node[0]) snprintf(line, cap, "first on %s: %s", f.killed_node, f.killed_why);
}

static int add_text(cJSON *o, const char *key, const char *value) {
    return value && !cJSON_AddStringToObject(o, key, value) ? anvil_fail("out of memory") : 0;
}

/* The state, reason, restarts and node list Slurm has for the attempt's job now. */
static int live_facts(const char *id, cJSON *o) {
    char *info;
    int gone = anvil_slurm_show_job(id, &info);
    if (gone) return gone < 0 ? -1 : add_text(o, "state", "unknown to Slurm (ended)");
    static const char *const keys[][2] = {
        {"JobState", "state"}, {"Reason", "reason"}, {"Restarts", "restarts"}, {"NodeList", "node_list"}};
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof keys / sizeof *keys; i++) {
        char *v = cJSON_GetObjectItemCaseSensitive(o, keys[i][1]) ? NULL : anvil_slurm_field(info, keys[i][0], false);
        rc = add_text(o, keys[i][1], v);
        free(v);
    }
    free(info);
    return rc;
}

/* backend.h: its Slurm job ID and node list, its state, reason and restarts (as it ended, else live), the
 * node failure that made it lost, the exit status its script wrote, and the nodes it got excluded and why. */
static int slurm_attempt_facts(anvil_backend *b, const anvil_attempt_ref *a, cJSON *o) {
    slurm_backend *sb = slurm_of(b);
    char id[32], path[PATH_MAX + 64], *nodes = NULL, *end = NULL;
    size_t len;
    anvil_attempt_ref r = anvil_slurm_ref(a, id, sizeof id);
    anvil_slurm_attempt_file(sb, &r, "nodes", path, sizeof path);
    if (!anvil_read_file_max(path, 65536, &nodes, &len)) nodes[strcspn(nodes, "\n")] = 0;
    int rc = add_text(o, "slurm_job_id", r.handle) || add_text(o, "node_list", nodes) ? -1 : 0;
    free(nodes);
    anvil_slurm_attempt_file(sb, &r, "end", path, sizeof path);
    if (!rc && anvil_read_file_max(path, 1 << 16, &end, &len)) {
        rc = live_facts(r.handle, o);
    } else if (!rc) {
        static const char *const keys[] = {"state", "reason", "restarts", "lost"};
        for (size_t i = 0; !rc && i < sizeof keys / sizeof *keys; i++) {
            char *v = anvil_slurm_field(end, keys[i], true);
            rc = v && v[0] ? add_text(o, keys[i], v) : 0;
            free(v);
        }
    }
    free(end);
    int code = anvil_attempt_read_exit(sb->state_dir, &r);
    if (!rc && code >= 0 && !cJSON_AddNumberToObject(o, "step_exit", code)) rc = anvil_fail("out of memory");
    cJSON *excluded = rc ? NULL : cJSON_AddArrayToObject(o, "excluded_nodes");
    if (!rc) rc = excluded ? anvil_slurm_excluded_json(sb, r.job_id, r.attempt, excluded) : anvil_fail("out of memory");
    return rc;
}

/* backend.h: the partition, every bad node of the job and why, and its warm pool. */
static int slurm_describe(anvil_backend *b, const anvil_attempt_ref *a, cJSON *o) {
    slurm_backend *sb = slurm_of(b);
    int rc = add_text(o, "partition", sb->partition);
    cJSON *list = rc ? NULL : cJSON_AddArrayToObject(o, "excluded_nodes");
    if (!rc) rc = list ? anvil_slurm_excluded_json(sb, a->job_id, 0, list) : anvil_fail("out of memory");
    return rc ? rc : anvil_slurm_describe_pool(sb, a, o);
}

static void slurm_free(anvil_backend *b) {
    slurm_backend *sb = slurm_of(b);
    if (!sb) return;
    free(sb->state_dir);
    free(sb->self);
    free(sb->partition);
    free(sb->account);
    free(sb);
}

static const anvil_backend_ops slurm_ops = {
    .name = "slurm",
    .start = slurm_start,
    .poll = slurm_poll,
    .stop = slurm_stop,
    .kill = slurm_kill,
    .describe = slurm_describe,
    .attempt_facts = slurm_attempt_facts,
    .fence = slurm_fence,
    .inject = anvil_slurm_inject,
    .free = slurm_free,
    .failure_line = slurm_failure_line,
    .pools = anvil_slurm_pools,
    .release_pool = anvil_slurm_release_pool,
    .pool_hosts = anvil_slurm_pool_hosts,
};

anvil_backend *anvil_backend_slurm_new(const char *state_dir, const char *self, const char *partition,
                                       const char *account, double grace_s) {
    slurm_backend *sb = calloc(1, sizeof *sb);
    if (!sb || !(sb->state_dir = strdup(state_dir)) || !(sb->self = strdup(self)) ||
        (partition && !(sb->partition = strdup(partition))) || (account && !(sb->account = strdup(account)))) {
        if (sb) slurm_free(&sb->base);
        anvil_fail("slurm backend: out of memory");
        return NULL;
    }
    sb->grace_s = grace_s;
    sb->base.ops = &slurm_ops;
    return &sb->base;
}
