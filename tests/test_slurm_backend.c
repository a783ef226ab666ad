/* The Slurm backend (src/job/backend_slurm.c) against fake Slurm clients: scontrol and scancel are shell
 * scripts first in PATH that answer from files the test writes (a job's line, a node's state, scancel's
 * refusal), so that answers a real cluster gives only by chance come on demand:
 *   - a warm attempt whose step exited 0 while a node of its pool was lost: lost, not exited, the node
 *     excluded, the pool's Slurm job cancelled and the pool Terminated, the state kept the one Slurm
 *     ended it in;
 *   - a batch attempt lost while Slurm requeued its job: lost only once its cancel has ended it, its kept
 *     state CANCELLED, not the PENDING of the moment; a scancel Slurm does not take is asked again;
 *   - a rank killed by a signal: the blame on the node where srun saw it first, read from the log the
 *     batch script names;
 *   - the fence: a Slurm that does not answer, or does not take the cancel, is asked again on the next
 *     call, and fails the job with the cause only after a bounded time; "already completing" and
 *     "Invalid job id" are answers, not errors; a kill of a job Slurm has ended is no error;
 *   - anvil chaos's faults (inject): a rank signalled through a step on its node (srun, then scontrol
 *     listpids there), a host elsewhere refused, the attempt killed as the backend's kill does. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "job/backend.h"
#include "job/chaos.h"
#include "testutil.h"

static char dir[64];

static const char *in(const char *fmt, const char *a) {
    static char path[4][512];
    static int next;
    char *p = path[next++ % 4], leaf[256];
    snprintf(leaf, sizeof leaf, fmt, a);
    snprintf(p, sizeof path[0], "%s/%s", dir, leaf);
    return p;
}

static void put(const char *path, const char *text) {
    CHECK(anvil_write_file_atomic(path, text, strlen(text)) == 0);
}

static char *text_of(const char *path) {
    char *t;
    size_t len;
    return anvil_read_file_max(path, 1 << 20, &t, &len) ? strdup("") : t;
}

static bool has(const char *path, const char *needle) {
    char *t = text_of(path);
    bool found = strstr(t, needle) != NULL;
    free(t);
    return found;
}

static const char scontrol[] = "#!/bin/sh\n"
                               "f=$FAKE_SLURM\n"
                               "case \"$1 $2 $3\" in\n"
                               "'-o show job')\n"
                               "  [ -f \"$f/down\" ] && { cat \"$f/down\"; exit 1; }\n"
                               "  [ -f \"$f/job_$4\" ] && exec cat \"$f/job_$4\"\n"
                               "  echo 'slurm_load_jobs error: Invalid job id specified'; exit 1;;\n"
                               "'-o show node')\n"
                               "  [ -f \"$f/node_$4\" ] && exec cat \"$f/node_$4\"\n"
                               "  echo \"NodeName=$4 State=IDLE\";;\n"
                               "'show hostnames '*) exec cat \"$f/hostnames\";;\n"
                               "'listpids '*) exec cat \"$f/listpids\";;\n"
                               "'show config ') echo 'SlurmdPidFile           = /nonexistent/slurmd.%n.pid';;\n"
                               "*) echo \"fake scontrol: $*\"; exit 1;;\n"
                               "esac\n";

/* A cancel of a job ends it, as Slurm's does (a signal alone does not); scancel_answer is a refusal. */
static const char scancel[] = "#!/bin/sh\n"
                              "f=$FAKE_SLURM\n"
                              "echo \"$*\" >> \"$f/scancel.log\"\n"
                              "[ -f \"$f/scancel_answer\" ] && { cat \"$f/scancel_answer\"; exit 1; }\n"
                              "for id; do :; done\n"
                              "case \"$*\" in *--signal*) exit 0;; esac\n"
                              "[ -f \"$f/job_$id\" ] &&\n"
                              "  sed -i 's/JobState=[A-Z_]*/JobState=CANCELLED/' \"$f/job_$id\"\n"
                              "exit 0\n";

/* A step on the node it names: what follows "sh" in its arguments runs here, as the step's task would. */
static const char srun[] = "#!/bin/sh\n"
                           "echo \"$*\" >> \"$FAKE_SLURM/srun.log\"\n"
                           "for a; do case $a in --nodelist=*) node=${a#--nodelist=};; esac; done\n"
                           "while [ \"$1\" != sh ]; do shift; done\n"
                           "SLURMD_NODENAME=$node SLURM_STEP_ID=3 exec \"$@\"\n";

static const char unreachable[] = "scancel: error: Kill job error on job id 7: Unable to contact slurm controller "
                                  "(connect failure)\n";

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/anvil_slurm_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    CHECK(anvil_mkdir_p(in("bin", "")) == 0 && anvil_mkdir_p(in("fake", "")) == 0);
    put(in("bin/scontrol", ""), scontrol);
    put(in("bin/scancel", ""), scancel);
    put(in("bin/srun", ""), srun);
    CHECK(chmod(in("bin/scontrol", ""), 0755) == 0 && chmod(in("bin/scancel", ""), 0755) == 0 &&
          chmod(in("bin/srun", ""), 0755) == 0);
    char path[4096];
    snprintf(path, sizeof path, "%s/bin:%s", dir, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    setenv("PATH", path, 1);
    setenv("FAKE_SLURM", in("fake", ""), 1);
    put(in("fake/hostnames", ""), "n1\nn2\n");
    for (int id = 1; id <= 5; id++) {
        char job[32];
        snprintf(job, sizeof job, "%d", id);
        CHECK(anvil_mkdir_p(in("state/jobs/%s", job)) == 0);
    }
}

/* The pid of a process that has ended. */
static pid_t dead_pid(void) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    waitpid(pid, NULL, 0);
    return pid;
}

/* A warm attempt (job 1, in the pool of Slurm job 5) whose step's srun said a node failed and exited 0, as
 * srun does, while Slurm still runs the pool's job and reports the node down. */
static void test_warm_lost_node(anvil_backend *b) {
    char handle[32];
    snprintf(handle, sizeof handle, "5:%d", (int)dead_pid());
    anvil_attempt_ref a = {.job_id = 1, .attempt = 1, .handle = handle};
    char script[600];
    snprintf(script, sizeof script, "#!/bin/bash\n# anvil job 1, attempt 1, in the warm pool of Slurm job 5.\n"
                                    "# output=%s\n", in("run1.log", ""));
    put(in("state/jobs/1/warm_1.sh", ""), script);
    put(in("run1.log", ""), "anvil: job 1 attempt 1: Slurm job 5 on n[1-2] (warm pool)\n"
                            "srun: error: Node failure on n1\n");
    put(in("state/jobs/1/nodes_1", ""), "n[1-2]\n");
    put(in("state/jobs/1/exit_1", ""), "0\n");
    put(in("fake/job_5", ""), "JobId=5 JobName=anvil-9.1 JobState=RUNNING Reason=None Restarts=0\n");
    put(in("fake/node_n1", ""), "NodeName=n1 State=DOWN+NOT_RESPONDING Reason=Not responding\n");
    CHECK(anvil_mkdir_p(in("state/pools", "")) == 0);
    put(in("state/pools/5", ""), "status=InUse\njob=9\nowner=all\nhosts=2\nprocs_per_host=1\nnodes=n[1-2]\n");
    int code = -7;
    int state = b->ops->poll(b, &a, &code);
    CHECK(state == ANVIL_ATTEMPT_RUNNING);
    CHECK(has(in("fake/scancel.log", ""), "5\n"));
    state = b->ops->poll(b, &a, &code);
    CHECK(state == ANVIL_ATTEMPT_LOST);
    CHECK(has(in("state/jobs/1/excluded", ""), "n1\t1\t"));
    CHECK(has(in("state/pools/5", ""), "status=Terminated\njob=9\n"));
    CHECK(has(in("state/jobs/1/end_1", ""), "state=CANCELLED\n"));
    CHECK(has(in("state/jobs/1/end_1", ""), "lost=node failure: Slurm job 5 RUNNING; n1 is DOWN+NOT_RESPONDING"));
    char line[700];
    b->ops->failure_line(b, &a, line, sizeof line);
    CHECK(strstr(line, "node failure: Slurm job 5") && strstr(line, "Node failure on n1"));
    unlink(in("fake/node_n1", ""));
}

/* A batch attempt (job 2, Slurm job 6) whose job Slurm requeued after a node failed: lost, but only once
 * the cancel has ended it, so that the state kept is the final one; a cancel Slurm did not take is sent
 * again on the next poll, which is no error. */
static void test_batch_lost_final_state(anvil_backend *b) {
    anvil_attempt_ref a = {.job_id = 2, .attempt = 1, .handle = "6"};
    char script[600];
    snprintf(script, sizeof script, "#!/bin/bash\n# output=%s\n", in("run2.log", ""));
    put(in("state/jobs/2/slurm_1.sh", ""), script);
    put(in("run2.log", ""), "anvil: job 2 attempt 1: Slurm job 6 on n[1-2]\n");
    put(in("state/jobs/2/exit_1", ""), "0\n");
    put(in("fake/job_6", ""), "JobId=6 JobState=PENDING Reason=BeginTime Restarts=1 NodeList=(null)\n");
    put(in("fake/scancel_answer", ""), unreachable);
    int code;
    CHECK(b->ops->poll(b, &a, &code) == ANVIL_ATTEMPT_RUNNING);
    CHECK(has(in("fake/job_6", ""), "JobState=PENDING"));
    unlink(in("fake/scancel_answer", ""));
    CHECK(b->ops->poll(b, &a, &code) == ANVIL_ATTEMPT_RUNNING);
    CHECK(has(in("fake/job_6", ""), "JobState=CANCELLED"));
    CHECK(b->ops->poll(b, &a, &code) == ANVIL_ATTEMPT_LOST);
    cJSON *o = cJSON_CreateObject();
    CHECK(b->ops->attempt_facts(b, &a, o) == 0);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "state"), *lost = cJSON_GetObjectItemCaseSensitive(o, "lost");
    CHECK(cJSON_IsString(s) && !strcmp(s->valuestring, "CANCELLED"));
    CHECK(cJSON_IsString(lost) && strstr(lost->valuestring, "node failure: Slurm job 6 was requeued by Slurm"));
    const cJSON *step_exit = cJSON_GetObjectItemCaseSensitive(o, "step_exit");
    CHECK(cJSON_IsNumber(step_exit) && step_exit->valueint == 0);
    cJSON_Delete(o);
}

/* A batch attempt (job 3, Slurm job 7) one of whose ranks was SIGKILLed on n2, after which srun ended the
 * other (here by a broken pipe): the exit is srun's, the blame the first rank's node, read from the log
 * that the batch script's "# output=" line names (sbatch's --output is on its command line). */
static void test_killed_rank(anvil_backend *b) {
    anvil_attempt_ref a = {.job_id = 3, .attempt = 1, .handle = "7"};
    char script[600];
    snprintf(script, sizeof script, "#!/bin/bash\n# --chdir and --output: on sbatch's command line\n# output=%s\n",
             in("run3.log", ""));
    put(in("state/jobs/3/slurm_1.sh", ""), script);
    put(in("run3.log", ""), "anvil: job 3 attempt 1: Slurm job 7 on n[1-2]\n"
                            "srun: error: n2: task 1: Killed\n"
                            "srun: launch/slurm: _step_signal: Terminating StepId=7.1\n"
                            "srun: error: n1: task 0: Broken pipe\n");
    put(in("state/jobs/3/nodes_1", ""), "n[1-2]\n");
    put(in("state/jobs/3/exit_1", ""), "141\n");
    put(in("fake/job_7", ""), "JobId=7 JobState=FAILED Reason=NonZeroExitCode Restarts=0 NodeList=n[1-2]\n");
    int code = -7;
    CHECK(b->ops->poll(b, &a, &code) == ANVIL_ATTEMPT_EXITED && code == 141);
    char line[700];
    b->ops->failure_line(b, &a, line, sizeof line);
    CHECK(strstr(line, "first on n2: task 1 of attempt 1 (Slurm job 7) was ended by a signal there: Killed") == line);
    CHECK(has(in("state/jobs/3/excluded", ""), "n2\t1\t") && !has(in("state/jobs/3/excluded", ""), "n1\t"));
}

/* Sets the time of the attempt's file back by seconds. */
static void age(const char *path, int seconds) {
    struct timeval now, t[2];
    gettimeofday(&now, NULL);
    t[0] = t[1] = (struct timeval){.tv_sec = now.tv_sec - seconds};
    CHECK(utimes(path, t) == 0);
}

/* The fence of attempt 1 of job 3 (Slurm job 7, requeued, not final) through answers a cluster gives now
 * and then. */
static void test_fence(anvil_backend *b) {
    anvil_attempt_ref a = {.job_id = 3, .attempt = 1, .handle = "7"};
    double now = (double)time(NULL);
    char why[800];
    put(in("fake/job_7", ""), "JobId=7 JobState=PENDING Reason=BeginTime Restarts=1\n");
    put(in("fake/scancel_answer", ""), unreachable);
    CHECK(b->ops->fence(b, &a, now, why, sizeof why) == 1);
    CHECK(strstr(why, "Slurm did not answer (scancel: error: Kill job error on job id 7: Unable to contact"));
    CHECK(b->ops->fence(b, &a, now, why, sizeof why) == 1);
    age(in("state/jobs/3/unanswered_1", ""), 400);
    CHECK(b->ops->fence(b, &a, now, why, sizeof why) == -1);
    CHECK(strstr(anvil_errmsg(), "attempt 1 could not be fenced: Slurm has not answered for 40") &&
          strstr(anvil_errmsg(), "so Slurm job 7 may still run"));
    /* An answer that the job is ending already is what the cancel is for: it is waited for. */
    put(in("fake/scancel_answer", ""), "scancel: error: Kill job error on job id 7: Job/step already completing or "
                                       "completed\n");
    CHECK(b->ops->fence(b, &a, now, why, sizeof why) == 1);
    CHECK(strstr(why, "Slurm job 7 is PENDING: cancelled"));
    CHECK(access(in("state/jobs/3/unanswered_1", ""), F_OK) != 0);
    unlink(in("fake/scancel_answer", ""));
    put(in("fake/down", ""), "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n");
    CHECK(b->ops->fence(b, &a, now, why, sizeof why) == 1);
    CHECK(strstr(why, "Slurm did not answer (scontrol show job 7: slurm_load_jobs error: Unable to contact"));
    unlink(in("fake/down", ""));
    CHECK(b->ops->fence(b, &a, now, why, sizeof why) == 1);
    CHECK(has(in("fake/job_7", ""), "JobState=CANCELLED"));
    CHECK(b->ops->fence(b, &a, now, why, sizeof why) == 0 && !why[0]);
}

/* A kill or stop of a job that Slurm has ended meanwhile: its answer says so, which is no error. */
static void test_kill_ended(anvil_backend *b) {
    anvil_attempt_ref a = {.job_id = 4, .attempt = 1, .handle = "8"};
    put(in("fake/scancel_answer", ""), "scancel: error: Kill job error on job id 8: Invalid job id specified\n");
    CHECK(b->ops->kill(b, &a) == 0);
    put(in("fake/scancel_answer", ""), unreachable);
    CHECK(b->ops->kill(b, &a) == -1 && strstr(anvil_errmsg(), "Unable to contact slurm controller"));
    unlink(in("fake/scancel_answer", ""));
}

/* A child that waits to be signalled. */
static pid_t sleeper(void) {
    pid_t pid = fork();
    if (pid == 0) {
        pause();
        _exit(0);
    }
    return pid;
}

/* Whether pid (a child) was ended by SIGKILL, or stopped, as the wait for it says. */
static bool killed(pid_t pid) {
    int status;
    return waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

static bool stopped(pid_t pid) {
    int status;
    return waitpid(pid, &status, WUNTRACED) == pid && WIFSTOPPED(status);
}

/* Faults of anvil chaos on a batch attempt (job 5, Slurm job 9 on n[1-2]): a rank is found in the listing of
 * its node's processes by its task number, not in the signalling step's own (3) nor among a task's
 * children; rank 0's node has none; a host whose slurmd is elsewhere is refused; the attempt is killed as the
 * backend's kill does it, marked so that no node is blamed. */
static void test_inject(anvil_backend *b) {
    anvil_attempt_ref a = {.job_id = 5, .attempt = 1, .handle = "9"};
    put(in("state/jobs/5/nodes_1", ""), "n[1-2]\n");
    pid_t own = sleeper(), child = sleeper(), rank = sleeper(), frozen = sleeper();
    char list[300], done[600];
    snprintf(list, sizeof list, "PID      JOBID    STEPID   LOCALID GLOBALID\n%d 9 3 0 1\n%d 9 1 - -\n%d 9 1 0 1\n",
             (int)own, (int)child, (int)rank);
    put(in("fake/listpids", ""), list);
    CHECK(b->ops->inject(b, &a, ANVIL_FAULT_KILL_RANK, 1, 1, done, sizeof done) == 0);
    char want[200];
    snprintf(want, sizeof want, "rank 1 killed (SIGKILL, pid %d on n2)", (int)rank);
    CHECK(!strcmp(done, want) && killed(rank));
    CHECK(has(in("fake/srun.log", ""), "--jobid=9 --overlap --nodelist=n2 --nodes=1 --ntasks=1 --mpi=none"));
    snprintf(list, sizeof list, "PID JOBID STEPID LOCALID GLOBALID\n%d 9 1 0 1\n", (int)frozen);
    put(in("fake/listpids", ""), list);
    CHECK(b->ops->inject(b, &a, ANVIL_FAULT_STOP_RANK, 1, 1, done, sizeof done) == 0 && stopped(frozen));
    CHECK(b->ops->inject(b, &a, ANVIL_FAULT_KILL_RANK, 0, 1, done, sizeof done) == 1);
    CHECK(!strcmp(done, "no rank 0 to 0 of Slurm job 9 runs on n1"));
    put(in("fake/node_n2", ""), "NodeName=n2 NodeHostName=elsewhere State=ALLOCATED\n");
    CHECK(b->ops->inject(b, &a, ANVIL_FAULT_HOST_LOST, 1, 1, done, sizeof done) == 2);
    CHECK(strstr(done, "only where that runs on the daemon's machine (a test cluster): n2 is on elsewhere"));
    /* A net-cut is refused outright (no rank signalled in its stead): a cluster's nodes are not simulated hosts. */
    CHECK(b->ops->inject(b, &a, ANVIL_FAULT_NET_CUT, 1, 1, done, sizeof done) == 2 && strstr(done, "simulated hosts"));
    put(in("fake/job_9", ""), "JobId=9 JobState=PENDING Reason=Priority Restarts=0\n");
    CHECK(b->ops->inject(b, &a, ANVIL_FAULT_KILL_ATTEMPT, -1, 1, done, sizeof done) == 1);
    put(in("fake/job_9", ""), "JobId=9 JobState=RUNNING Reason=None Restarts=0\n");
    CHECK(b->ops->inject(b, &a, ANVIL_FAULT_KILL_ATTEMPT, -1, 1, done, sizeof done) == 0);
    CHECK(!strcmp(done, "every process of Slurm job 9 killed (scancel --signal=KILL --full)"));
    CHECK(has(in("fake/scancel.log", ""), "--signal=KILL --full 9\n") && access(in("state/jobs/5/killed_1", ""), F_OK) == 0);
    for (pid_t *p = (pid_t[]){own, child, frozen, 0}; *p; p++) {
        CHECK(kill(*p, 0) == 0);
        kill(*p, SIGKILL);
        waitpid(*p, NULL, 0);
    }
    unlink(in("fake/node_n2", ""));
}

int main(void) {
    setup();
    anvil_backend *b = anvil_backend_slurm_new(in("state", ""), "/bin/true", "test", NULL, 20);
    CHECK(b != NULL);
    if (b) {
        test_warm_lost_node(b);
        test_batch_lost_final_state(b);
        test_killed_rank(b);
        test_fence(b);
        test_kill_ended(b);
        test_inject(b);
        b->ops->free(b);
    }
    CHECK(anvil_remove_tree(dir) == 0);
    return t_done("test_slurm_backend");
}
