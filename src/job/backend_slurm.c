/* The Slurm backend (job/backend.h): each attempt is one Slurm batch job. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "core/strbuf.h"
#include "job/backend.h"

extern char **environ;

/* How often poll asks slurmctld about an attempt it last found running. The exit file is read on every
 * poll, so an attempt's end is seen at once; only a job Slurm ends or requeues waits up to this long. */
#define ASK_EVERY_S 2.0
#define RECENT_MAX 64
/* The exit status the batch script writes when a node failed the pre-flight check (no anvil command
 * exits with it); poll turns it into ANVIL_ATTEMPT_UNHEALTHY. */
#define HEALTH_EXIT 79

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
    } recent[RECENT_MAX];
} slurm_backend;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The cache slot of an attempt: its own, else the oldest. */
static int recent_slot(const slurm_backend *sb, const anvil_attempt_ref *a) {
    int oldest = 0;
    for (int i = 0; i < RECENT_MAX; i++) {
        if (sb->recent[i].job_id == a->job_id && sb->recent[i].attempt == a->attempt) return i;
        if (sb->recent[i].at < sb->recent[oldest].at) oldest = i;
    }
    return oldest;
}

static slurm_backend *slurm_of(anvil_backend *b) { return (slurm_backend *)b; }

/* s in single quotes for the shell. */
static void put_quoted(anvil_strbuf *t, const char *s) {
    anvil_strbuf_puts(t, "'");
    for (const char *q; (q = strchr(s, '\'')); s = q + 1) {
        anvil_strbuf_put(t, s, (size_t)(q - s));
        anvil_strbuf_puts(t, "'\\''");
    }
    anvil_strbuf_puts(t, s);
    anvil_strbuf_puts(t, "'");
}

/* A shell line that writes what command prints to path atomically: a temporary file, fsync'd, renamed. */
static void put_atomic_write(anvil_strbuf *t, const char *command, const char *path) {
    anvil_strbuf_printf(t, "%s > ", command);
    put_quoted(t, path);
    anvil_strbuf_puts(t, ".tmp && sync ");
    put_quoted(t, path);
    anvil_strbuf_puts(t, ".tmp && mv -f ");
    put_quoted(t, path);
    anvil_strbuf_puts(t, ".tmp ");
    put_quoted(t, path);
    anvil_strbuf_puts(t, "\n");
}

/* Runs a Slurm client (argv[0] looked up in PATH) with env, its stdout and stderr together in *out
 * (malloc'd, at most 64 KiB kept). Its exit status, or -1 after anvil_fail when it could not run. */
static int run_client(char *const *argv, char *const *env, char **out) {
    *out = NULL;
    int fd[2];
    if (pipe2(fd, O_CLOEXEC)) return anvil_fail("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return anvil_fail("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        if (in < 0 || dup2(in, STDIN_FILENO) < 0 || dup2(fd[1], STDOUT_FILENO) < 0 || dup2(fd[1], STDERR_FILENO) < 0)
            _exit(127);
        execvpe(argv[0], argv, env);
        _exit(127);
    }
    close(fd[1]);
    anvil_strbuf t = {0};
    anvil_strbuf_puts(&t, "");
    char buf[4096];
    ssize_t n;
    while ((n = read(fd[0], buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        if (t.len < 65536) anvil_strbuf_put(&t, buf, (size_t)n);
    }
    close(fd[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (t.oom) {
        free(t.s);
        return anvil_fail("out of memory");
    }
    *out = t.s;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !t.len)
        return anvil_fail("%s: cannot run it (not in PATH?)", argv[0]);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The first line of a client's output, for an error message. */
static const char *first_line(char *out) {
    out[strcspn(out, "\n")] = 0;
    return out;
}

/* Runs a client whose output does not matter; 0, or -1 after anvil_fail naming what it said. */
static int run_quiet(char *const *argv) {
    char *out;
    int rc = run_client(argv, environ, &out);
    if (rc > 0) anvil_fail("%s %s: %s", argv[0], argv[1], first_line(out));
    free(out);
    return rc ? -1 : 0;
}

static void job_dir(const slurm_backend *sb, int64_t id, char *path, size_t cap) {
    snprintf(path, cap, "%s/jobs/%lld", sb->state_dir, (long long)id);
}

/* The value of KEY=VALUE in scontrol's one-line output, malloc'd; NULL when absent or out of memory.
 * Values end at a space, except with rest, for the free text scontrol puts last (a node's Reason). */
static char *field_to(const char *line, const char *key, bool rest) {
    size_t klen = strlen(key);
    for (const char *p = line; (p = strstr(p, key)); p += klen) {
        if ((p == line || isspace((unsigned char)p[-1])) && p[klen] == '=') {
            const char *v = p + klen + 1;
            return strndup(v, strcspn(v, rest ? "\n" : " \n"));
        }
    }
    return NULL;
}

static char *field_of(const char *line, const char *key) { return field_to(line, key, false); }

/* The bad nodes of a job: "node\twhy" lines of STATE/jobs/<id>/excluded; "" when none (malloc'd). */
static char *excluded_text(const slurm_backend *sb, int64_t id) {
    char path[PATH_MAX + 16], *data;
    size_t len;
    job_dir(sb, id, path, sizeof path);
    strcat(path, "/excluded");
    if (anvil_read_file_max(path, 1 << 20, &data, &len)) return strdup("");
    return data;
}

/* Adds node to the job's bad nodes, unless it is there already. */
static int exclude_node(const slurm_backend *sb, int64_t id, const char *node, const char *why) {
    char *old = excluded_text(sb, id);
    if (!old) return anvil_fail("out of memory");
    for (char *line = old; *line; line += strcspn(line, "\n") + (line[strcspn(line, "\n")] != 0)) {
        size_t n = strcspn(line, "\t\n");
        if (n == strlen(node) && !strncmp(line, node, n)) {
            free(old);
            return 0;
        }
    }
    anvil_strbuf t = {0};
    anvil_strbuf_puts(&t, old);
    free(old);
    anvil_strbuf_printf(&t, "%s\t%.900s\n", node, why);
    char path[PATH_MAX + 16];
    job_dir(sb, id, path, sizeof path);
    strcat(path, "/excluded");
    int rc = t.oom ? anvil_fail("out of memory") : anvil_write_file_atomic(path, t.s, t.len);
    free(t.s);
    return rc;
}

/* --output of an attempt's batch script: the run's launcher.log; 0 with path, or -1 when unknown. */
static int attempt_log(const slurm_backend *sb, const anvil_attempt_ref *a, char *path, size_t cap) {
    char file[PATH_MAX + 32], *script;
    size_t len;
    job_dir(sb, a->job_id, file, sizeof file);
    snprintf(file + strlen(file), sizeof file - strlen(file), "/slurm_%d.sh", a->attempt);
    if (anvil_read_file_max(file, 1 << 20, &script, &len)) return -1;
    char *p = strstr(script, "\n#SBATCH --output=");
    int rc = -1;
    if (p) {
        p += strlen("\n#SBATCH --output=");
        size_t n = strcspn(p, "\n");
        if (n < cap) {
            memcpy(path, p, n);
            path[n] = 0;
            rc = 0;
        }
    }
    free(script);
    return rc;
}

/* Where srun saw this attempt's first rank killed by a signal: its "srun: error: NODE: task N: Killed"
 * line after the attempt's own first line in the log. node and why ("task N ... ended by a signal there:
 * Killed") are "" when there is none. Only the first counts: with --kill-on-bad-exit srun itself then kills
 * the ranks on the other nodes, and says so in the same words. */
static void first_killed_rank(const slurm_backend *sb, const anvil_attempt_ref *a, char *node, size_t ncap,
                              char *why, size_t wcap) {
    char path[PATH_MAX], marker[96];
    node[0] = why[0] = 0;
    if (attempt_log(sb, a, path, sizeof path)) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    /* The attempts' logs follow one another in the file; only the last 4 MiB can hold this one's end. */
    if (fseek(f, -(4L << 20), SEEK_END)) rewind(f);
    snprintf(marker, sizeof marker, "anvil: job %lld attempt %d:", (long long)a->job_id, a->attempt);
    char line[2048], name[128] = "";
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!strncmp(line, marker, strlen(marker))) name[0] = 0;
        const char *p = strstr(line, "srun: error: ");
        if (!p || name[0]) continue;
        p += strlen("srun: error: ");
        char task[64];
        int used = 0;
        /* "NODE: task 1: Killed", "NODE: tasks 0-1: Terminated"; an exit code is the program's own. */
        if (sscanf(p, "%127[^: ]: %63[^:]:%n", name, task, &used) != 2 || strncmp(task, "task", 4) ||
            !strncmp(p + used, " Exited with exit code", 22)) {
            name[0] = 0;
            continue;
        }
        snprintf(why, wcap, "%s of attempt %d (Slurm job %s) was ended by a signal there:%.500s", task, a->attempt,
                 a->handle, p + used);
    }
    fclose(f);
    snprintf(node, ncap, "%s", name);
    if (!name[0]) why[0] = 0;
}

static int exclude_killed_rank(const slurm_backend *sb, const anvil_attempt_ref *a) {
    char node[128], why[1024];
    first_killed_rank(sb, a, node, sizeof node, why, sizeof why);
    return node[0] ? exclude_node(sb, a->job_id, node, why) : 0;
}

/* The nodes of this attempt, one a line (malloc'd), from the node list its script wrote: 0, 1 when it
 * has none (it never ran) or scontrol cannot expand it, -1 after anvil_fail. */
static int attempt_nodes(const slurm_backend *sb, const anvil_attempt_ref *a, char **names) {
    char path[PATH_MAX + 32], *list;
    size_t len;
    *names = NULL;
    job_dir(sb, a->job_id, path, sizeof path);
    snprintf(path + strlen(path), sizeof path - strlen(path), "/nodes_%d", a->attempt);
    if (anvil_read_file_max(path, 65536, &list, &len)) return 1;
    list[strcspn(list, "\n")] = 0;
    int rc = run_client((char *[]){"scontrol", "show", "hostnames", list, NULL}, environ, names);
    free(list);
    if (rc) {
        free(*names);
        *names = NULL;
    }
    return rc < 0 ? -1 : rc ? 1 : 0;
}

/* The nodes of this attempt that Slurm now reports down, not responding, drained or failed, marked bad. */
static int exclude_down_nodes(const slurm_backend *sb, const anvil_attempt_ref *a) {
    char *names;
    int rc = attempt_nodes(sb, a, &names);
    if (rc) return rc < 0 ? -1 : 0;
    for (char *save, *node = strtok_r(names, "\n", &save); node && !rc; node = strtok_r(NULL, "\n", &save)) {
        char *info;
        if (run_client((char *[]){"scontrol", "-o", "show", "node", node, NULL}, environ, &info)) {
            free(info);
            continue;
        }
        char *state = field_of(info, "State"), *reason = field_to(info, "Reason", true);
        if (state && (strstr(state, "DOWN") || strstr(state, "NOT_RESPONDING") || strstr(state, "DRAIN") ||
                      strstr(state, "FAIL"))) {
            char why[1024];
            snprintf(why, sizeof why, "Slurm reported it %s%s%s after attempt %d (Slurm job %s)", state,
                     reason ? ", reason: " : "", reason ? reason : "", a->attempt, a->handle);
            rc = exclude_node(sb, a->job_id, node, why);
        }
        free(state);
        free(reason);
        free(info);
    }
    free(names);
    return rc;
}

/* The nodes that failed the attempt's pre-flight check (put_health), marked bad with the first line anvil
 * health wrote there: how many, or -1 after anvil_fail. A node with no report fails it too, unless no node
 * has one: then srun could not run the check at all, which says nothing of any node. */
static int exclude_unhealthy(const slurm_backend *sb, const anvil_attempt_ref *a) {
    char *names;
    int rc = attempt_nodes(sb, a, &names);
    if (rc) return rc < 0 ? -1 : 0;
    char dir[PATH_MAX + 64], path[PATH_MAX + 256];
    job_dir(sb, a->job_id, dir, sizeof dir);
    snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/health_%d", a->attempt);
    int reports = 0, bad = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        for (char *node = names; *node && !rc; node += strcspn(node, "\n") + (node[strcspn(node, "\n")] != 0)) {
            int n = (int)strcspn(node, "\n");
            char *report = NULL, *err = NULL, why[700];
            size_t len;
            snprintf(path, sizeof path, "%s/%.*s.json", dir, n, node);
            bool has = !anvil_read_file_max(path, 1 << 20, &report, &len);
            bool healthy = has && strstr(report, "\"healthy\":true");
            free(report);
            if (!pass) {
                reports += has;
                continue;
            }
            if (healthy || !reports) continue;
            snprintf(path, sizeof path, "%s/%.*s.err", dir, n, node);
            const char *said = "no report from anvil health there";
            if (!anvil_read_file_max(path, 1 << 20, &err, &len) && err[strspn(err, " \n")]) {
                said = err + strspn(err, " \n");
                err[strcspn(err, "\n")] = 0;
                if (!strncmp(said, "anvil health: ", 14)) said += 14;
            }
            snprintf(why, sizeof why, "health: %.600s (attempt %d, before training)", said, a->attempt);
            char *name = strndup(node, (size_t)n);
            rc = name ? exclude_node(sb, a->job_id, name, why) : anvil_fail("out of memory");
            free(name);
            free(err);
            bad++;
        }
    }
    free(names);
    return rc ? -1 : bad;
}

static int exclude_bad_nodes(const slurm_backend *sb, const anvil_attempt_ref *a) {
    return exclude_killed_rank(sb, a) || exclude_down_nodes(sb, a) ? -1 : 0;
}

/* The step: srun of the attempt's command in the background (in the allocation of Slurm job `jobid`
 * when not NULL, else the script's own), its exit status in $rc. srun passes SIGUSR1 on to every rank;
 * the wait it interrupts is taken up again. */
static void put_step(anvil_strbuf *t, const slurm_backend *sb, const anvil_attempt_spec *a, const char *jobid) {
    anvil_strbuf_puts(t, "stopping=\ntrap 'stopping=1; kill -USR1 \"$step\" 2> /dev/null' USR1\nsrun ");
    /* A warm step is named, so that a kill can end it alone (slurm_kill), not the holder's allocation. */
    if (jobid)
        anvil_strbuf_printf(t, "--jobid=%s --job-name=anvil-%lld.%d ", jobid, (long long)a->ref.job_id, a->ref.attempt);
    anvil_strbuf_printf(t, "--mpi=pmix --kill-on-bad-exit=1 --nodes=%d --ntasks-per-node=%d ", a->hosts,
                        a->procs_per_host);
    put_quoted(t, sb->self);
    for (int i = 0; i < a->argc; i++) {
        anvil_strbuf_puts(t, " ");
        put_quoted(t, a->argv[i]);
    }
    anvil_strbuf_puts(
        t, " &\nstep=$!\nwhile :; do\n  wait \"$step\"\n  rc=$?\n  [ -n \"$stopping\" ] || break\n  stopping=\ndone\n");
}

/* The pre-flight check (job/backend.h): anvil health --quick on every node of the allocation at once, one
 * process on each, each judged alone (--mpi=none: no MPI world), its report and its error lines in
 * STATE/jobs/<id>/health_<n>/<node>.json and .err. When a node fails it, the attempt ends there with
 * HEALTH_EXIT in its exit file, before the training starts. */
static void put_health(anvil_strbuf *t, const slurm_backend *sb, const anvil_attempt_spec *a, const char *dir) {
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/health_%d", dir, a->ref.attempt);
    anvil_strbuf_puts(t, "hd=");
    put_quoted(t, path);
    anvil_strbuf_printf(t, "\nmkdir -p \"$hd\"\nif ! srun --mpi=none --nodes=%d --ntasks-per-node=1 bash -c "
            "'exec \"$0\" health --quick --json > \"$1/$SLURMD_NODENAME.json\" 2> \"$1/$SLURMD_NODENAME.err\"' ",
         a->hosts);
    put_quoted(t, sb->self);
    anvil_strbuf_puts(
        t, " \"$hd\"; then\n  echo \"anvil: error: a node failed the pre-flight health check: $(cat \"$hd\"/*.err "
           "2> /dev/null | head -n 1)\"\n");
    anvil_attempt_exit_path(sb->state_dir, &a->ref, path, sizeof path);
    anvil_strbuf_printf(t, "  rc=%d\n  ", HEALTH_EXIT);
    put_atomic_write(t, "printf '%d\\n' \"$rc\"", path);
    anvil_strbuf_puts(t, "  exit \"$rc\"\nfi\n");
}

static bool has_arg(const anvil_attempt_spec *a, const char *arg) {
    for (int i = 0; i < a->argc; i++)
        if (!strcmp(a->argv[i], arg)) return true;
    return false;
}

/* The warm pool's parts of the batch script (job/backend.h). The first, before the exit file is written,
 * records the pool Available after a step that exited 0, so that it is there once the job has completed.
 * The second holds the allocation: InUse while a job's claim file is there, the TTL counted again from
 * the claim's end; at the TTL or on the release file the script takes the claim itself (O_EXCL, as a
 * job does), so that no job can claim a pool whose holder is leaving. A claim lost to a job at that
 * moment is seen as InUse a second later; a state folder that is gone ends the hold. */
static void put_pool_open(anvil_strbuf *t, const slurm_backend *sb, const anvil_attempt_spec *a) {
    char pools[PATH_MAX];
    snprintf(pools, sizeof pools, "%s/pools", sb->state_dir);
    anvil_strbuf_puts(t, "pools=");
    put_quoted(t, pools);
    anvil_strbuf_puts(t, "\npf=$pools/$SLURM_JOB_ID\npartition=");
    put_quoted(t, sb->partition ? sb->partition : "");
    anvil_strbuf_puts(t, "\nowner=");
    put_quoted(t, a->owner ? a->owner : "");
    anvil_strbuf_puts(t, "\nuser=");
    put_quoted(t, a->user ? a->user : "");
    anvil_strbuf_printf(t, "\nttl=%ld\nend=$(( $(date +%%s) + ttl ))\n", (long)ceil(a->keep_alive_s));
    anvil_strbuf_printf(t,
         "pool() {\n  printf 'status=%%s\\njob=%lld\\nowner=%%s\\nuser=%%s\\npartition=%%s\\nhosts=%d\\nprocs_per_host=%d\\n"
         "nodes=%%s\\nexpires=%%s\\n' \"$1\" \"$owner\" \"$user\" \"$partition\" \"$SLURM_JOB_NODELIST\" \"$end\" > \"$pf.tmp\" && "
         "sync \"$pf.tmp\" && mv -f \"$pf.tmp\" \"$pf\"\n}\n",
         (long long)a->ref.job_id, a->hosts, a->procs_per_host);
    anvil_strbuf_puts(t, "[ \"$rc\" = 0 ] && mkdir -p \"$pools\" && pool Available\n");
}

static void put_pool_hold(anvil_strbuf *t) {
    anvil_strbuf_puts(t, "if [ \"$rc\" = 0 ]; then\n  used=\n  while [ -d \"$pools\" ]; do\n"
             "    if [ -e \"$pf.claim\" ]; then\n"
             "      [ -n \"$used\" ] || { used=1; pool InUse; }\n"
             "    elif [ -n \"$used\" ]; then\n"
             "      used=\n      end=$(( $(date +%s) + ttl ))\n      pool Available\n"
             "    elif [ \"$(date +%s)\" -ge \"$end\" ] || [ -e \"$pf.release\" ]; then\n"
             "      (set -o noclobber; echo holder > \"$pf.claim\") 2> /dev/null && break\n"
             "    fi\n    sleep 1\n  done\n  pool Terminated\nfi\n");
}

/* The batch script of an attempt: the sbatch options as #SBATCH lines, so that the file alone shows
 * what was asked of Slurm. */
static char *batch_script(const slurm_backend *sb, const anvil_attempt_spec *a) {
    char dir[PATH_MAX], base[PATH_MAX + 32];
    job_dir(sb, a->ref.job_id, dir, sizeof dir);
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
    anvil_strbuf_printf(&t, "#SBATCH --chdir=%s\n#SBATCH --output=%s/logs/launcher.log\n", a->run_dir, a->run_dir);
    char *bad = excluded_text(sb, a->ref.job_id);
    if (bad && *bad) {
        anvil_strbuf_puts(&t, "#SBATCH --exclude=");
        for (char *line = bad, *sep = ""; *line; sep = ",") {
            size_t n = strcspn(line, "\t\n"), end = strcspn(line, "\n");
            anvil_strbuf_puts(&t, sep);
            anvil_strbuf_put(&t, line, n);
            line += end + (line[end] != 0);
        }
        anvil_strbuf_puts(&t, "\n");
    }
    free(bad);
    if (!bad) t.oom = true;
    /* The first line of the attempt in the log (exclude_killed_rank reads from it on). */
    anvil_strbuf_printf(&t, "echo \"anvil: job %lld attempt %d: Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST\"\n",
         (long long)a->ref.job_id, a->ref.attempt);
    snprintf(base, sizeof base, "%s/nodes_%d", dir, a->ref.attempt);
    put_atomic_write(&t, "printf '%s\\n' \"$SLURM_JOB_NODELIST\"", base);
    /* A training that skips its own check skips this one too. */
    if (!has_arg(a, "--no-health")) put_health(&t, sb, a, dir);
    put_step(&t, sb, a, NULL);
    if (a->keep_alive_s > 0) put_pool_open(&t, sb, a);
    anvil_attempt_exit_path(sb->state_dir, &a->ref, base, sizeof base);
    put_atomic_write(&t, "printf '%d\\n' \"$rc\"", base);
    if (a->keep_alive_s > 0) put_pool_hold(&t);
    anvil_strbuf_puts(&t, "exit \"$rc\"\n");
    if (t.oom) {
        free(t.s);
        anvil_fail("out of memory");
        return NULL;
    }
    return t.s;
}

/* sbatch's environment: the attempt's, which the job inherits (sbatch exports it all), and the
 * daemon's SLURM_CONF, through which sbatch finds the cluster. NULL-ended; only the array is malloc'd. */
static char **submit_env(const anvil_attempt_spec *a) {
    size_t n = 0;
    while (a->envp[n]) n++;
    char **env = calloc(n + 2, sizeof *env);
    if (!env) return NULL;
    memcpy(env, a->envp, n * sizeof *env);
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "SLURM_CONF=", 11)) env[n] = *e;
    return env;
}

/* scontrol's one line about the attempt's job: 0 with *out, 1 when Slurm no longer knows the job,
 * -1 after anvil_fail. */
static int show_job(const anvil_attempt_ref *a, char **out) {
    int rc = run_client((char *[]){"scontrol", "-o", "show", "job", (char *)a->handle, NULL}, environ, out);
    if (rc > 0 && strstr(*out, "Invalid job id")) rc = 1;
    else if (rc > 0) rc = anvil_fail("scontrol show job %s: %s", a->handle, first_line(*out));
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- Warm pools: an attempt whose step runs in the allocation another job's batch script holds ---- */

/* A warm attempt's handle is "<the holder's Slurm job ID>:<pid of the script that runs the step>". */
static pid_t warm_pid(const anvil_attempt_ref *a) {
    const char *colon = strchr(a->handle, ':');
    if (!colon) return 0;
    char *end;
    long v = strtol(colon + 1, &end, 10);
    return end != colon + 1 && !*end && v > 1 && v <= INT_MAX ? (pid_t)v : 0;
}

/* The attempt with the Slurm job ID alone as its handle (kept in buf). */
static anvil_attempt_ref slurm_ref(const anvil_attempt_ref *a, char *buf, size_t cap) {
    anvil_attempt_ref r = *a;
    snprintf(buf, cap, "%.*s", (int)strcspn(a->handle, ":"), a->handle);
    r.handle = buf;
    return r;
}

static void pool_path(const slurm_backend *sb, const char *id, const char *suffix, char *path, size_t cap) {
    snprintf(path, cap, "%s/pools/%s%s", sb->state_dir, id, suffix);
}

/* The pool's file, malloc'd; NULL when it has none. */
static char *pool_text(const slurm_backend *sb, const char *id) {
    char path[PATH_MAX + 64], *data;
    size_t len;
    pool_path(sb, id, "", path, sizeof path);
    return anvil_read_file_max(path, 65536, &data, &len) ? NULL : data;
}

static bool pool_is(const char *info, const char *key, const char *want) {
    char *v = field_of(info, key);
    bool same = v && !strcmp(v, want);
    free(v);
    return same;
}

/* The pool's status as SageMaker names it. The claim file decides, not the holder's word, which lags
 * by up to its 1 s poll: a pool is InUse while claimed, Available again once the claim is gone. */
static const char *pool_status(const slurm_backend *sb, const char *id, const char *info) {
    char claim[PATH_MAX + 64];
    pool_path(sb, id, ".claim", claim, sizeof claim);
    if (pool_is(info, "status", "Terminated")) return "Terminated";
    return access(claim, F_OK) ? "Available" : "InUse";
}

/* The pools under STATE/pools, each given to fn with its file's text until fn returns nonzero. */
static int each_pool(const slurm_backend *sb, int (*fn)(const slurm_backend *, const char *, const char *, void *),
                     void *ctx) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/pools", sb->state_dir);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (!e->d_name[0] || e->d_name[strspn(e->d_name, "0123456789")]) continue;
        char *info = pool_text(sb, e->d_name);
        if (info) rc = fn(sb, e->d_name, info, ctx);
        free(info);
    }
    closedir(d);
    return rc;
}

/* Claims an Available pool that fits the attempt (owner, hosts, processes per host; the partition is the
 * daemon's), its holder's Slurm job ID into holder and its nodes into nodes: true when one was claimed.
 * The claim file, created O_EXCL, is what makes it the attempt's: the holder and other daemons respect it. */
static bool claim_pool(const slurm_backend *sb, const anvil_attempt_spec *a, char *holder, size_t hcap, char *nodes,
                       size_t ncap) {
    char dir[PATH_MAX], want[32];
    snprintf(dir, sizeof dir, "%s/pools", sb->state_dir);
    DIR *d = opendir(dir);
    if (!d) return false;
    bool got = false;
    for (struct dirent *e; !got && (e = readdir(d));) {
        const char *id = e->d_name;
        if (!*id || id[strspn(id, "0123456789")] || strlen(id) >= hcap) continue;
        char *info = pool_text(sb, id), *expires = info ? field_of(info, "expires") : NULL, *where = NULL;
        bool fits = info && expires && !strcmp(pool_status(sb, id, info), "Available") &&
                    pool_is(info, "owner", a->owner ? a->owner : "") &&
                    (snprintf(want, sizeof want, "%d", a->hosts), pool_is(info, "hosts", want)) &&
                    (snprintf(want, sizeof want, "%d", a->procs_per_host), pool_is(info, "procs_per_host", want)) &&
                    atoll(expires) > (long long)time(NULL) + 1 && (where = field_of(info, "nodes")) &&
                    strlen(where) < ncap;
        char path[PATH_MAX + 64], mine[64];
        pool_path(sb, id, ".release", path, sizeof path);
        fits = fits && access(path, F_OK);
        pool_path(sb, id, ".claim", path, sizeof path);
        snprintf(mine, sizeof mine, "job %lld attempt %d\n", (long long)a->ref.job_id, a->ref.attempt);
        if (fits && !anvil_write_new_file(path, mine, strlen(mine))) {
            /* The holder may have been ended by Slurm (scancel, a node's failure) without a word. */
            anvil_attempt_ref r = {.job_id = a->ref.job_id, .attempt = a->ref.attempt, .handle = id};
            char *job;
            if (!show_job(&r, &job) && pool_is(job, "JobState", "RUNNING")) {
                memcpy(holder, id, strlen(id) + 1);
                snprintf(nodes, ncap, "%s", where);
                got = true;
            } else if (info) {
                /* Ours now, and dead: marked so, the claim left in place so nobody tries it again. */
                char *dead = strdup(info);
                if (dead && !strncmp(dead, "status=", 7)) {
                    anvil_strbuf t = {0};
                    anvil_strbuf_puts(&t, "status=Terminated");
                    anvil_strbuf_puts(&t, dead + strcspn(dead, "\n"));
                    pool_path(sb, id, "", path, sizeof path);
                    if (!t.oom) anvil_write_file_atomic(path, t.s, t.len);
                    free(t.s);
                }
                free(dead);
            }
            free(job);
        }
        free(where);
        free(expires);
        free(info);
    }
    closedir(d);
    return got;
}

/* The script that runs a warm attempt's step in the holder's allocation, as the batch script would
 * (the same first log line, node list, SIGUSR1 forwarding and exit file), then gives the pool back. */
static char *warm_script(const slurm_backend *sb, const anvil_attempt_spec *a, const char *holder, const char *nodes) {
    char dir[PATH_MAX], path[PATH_MAX + 64];
    job_dir(sb, a->ref.job_id, dir, sizeof dir);
    anvil_strbuf t = {0};
    anvil_strbuf_printf(&t, "#!/bin/bash\n# anvil job %lld, attempt %d, in the warm pool of Slurm job %s.\n",
                        (long long)a->ref.job_id, a->ref.attempt, holder);
    anvil_strbuf_printf(&t, "echo \"anvil: job %lld attempt %d: Slurm job %s on %s (warm pool)\"\n",
                        (long long)a->ref.job_id, a->ref.attempt, holder, nodes);
    /* The holder's node list, for exclude_down_nodes after a failure. */
    anvil_strbuf_puts(&t, "nodes=");
    put_quoted(&t, nodes);
    anvil_strbuf_puts(&t, "\n");
    snprintf(path, sizeof path, "%s/nodes_%d", dir, a->ref.attempt);
    put_atomic_write(&t, "printf '%s\\n' \"$nodes\"", path);
    put_step(&t, sb, a, holder);
    anvil_attempt_exit_path(sb->state_dir, &a->ref, path, sizeof path);
    put_atomic_write(&t, "printf '%d\\n' \"$rc\"", path);
    pool_path(sb, holder, ".claim", path, sizeof path);
    anvil_strbuf_puts(&t, "rm -f ");
    put_quoted(&t, path);
    anvil_strbuf_puts(&t, "\nexit \"$rc\"\n");
    if (t.oom) {
        free(t.s);
        anvil_fail("out of memory");
        return NULL;
    }
    return t.s;
}

/* Starts the attempt in the claimed pool: its script forked into a session of its own, which waits until
 * the handle is recorded (as the local backend's wrapper does), its output appended to the run's log.
 * The pool's claim is given back when this fails. */
static int start_warm(slurm_backend *sb, const anvil_attempt_spec *a, const char *holder, const char *nodes,
                      anvil_attempt_record_fn record, void *ctx) {
    char dir[PATH_MAX], script_path[PATH_MAX + 32], log[PATH_MAX + 32], claim[PATH_MAX + 64], pool[PATH_MAX + 64];
    job_dir(sb, a->ref.job_id, dir, sizeof dir);
    snprintf(script_path, sizeof script_path, "%s/warm_%d.sh", dir, a->ref.attempt);
    snprintf(log, sizeof log, "%s/logs/launcher.log", a->run_dir);
    snprintf(pool, sizeof pool, "%s/pool_%d", dir, a->ref.attempt);
    pool_path(sb, holder, ".claim", claim, sizeof claim);
    char *script = warm_script(sb, a, holder, nodes), **env = submit_env(a);
    int rc = -1;
    if (!script || !env) {
        if (script) anvil_fail("out of memory");
        goto done;
    }
    if (anvil_write_file_atomic(script_path, script, strlen(script)) ||
        anvil_write_file_atomic(pool, holder, strlen(holder)))
        goto done;
    char prefix[40];
    snprintf(prefix, sizeof prefix, "%s:", holder);
    rc = anvil_attempt_spawn("/bin/bash", (char *[]){"bash", script_path, NULL}, env, a->run_dir, log, prefix, record,
                             ctx);
done:
    if (rc) unlink(claim);
    free(script);
    free(env);
    return rc;
}

/* Submits the attempt held, records its Slurm job ID, then releases it: a daemon killed in between
 * leaves a held job the store knows of (poll releases it) and never one it does not. */
static int slurm_start(anvil_backend *b, const anvil_attempt_spec *a, anvil_attempt_record_fn record, void *ctx) {
    slurm_backend *sb = slurm_of(b);
    char dir[PATH_MAX], logs[PATH_MAX], path[PATH_MAX + 32], holder[32], nodes[4096];
    job_dir(sb, a->ref.job_id, dir, sizeof dir);
    snprintf(logs, sizeof logs, "%s/logs", a->run_dir);
    snprintf(path, sizeof path, "%s/slurm_%d.sh", dir, a->ref.attempt);
    if (anvil_mkdir_p(dir) || anvil_mkdir_p(logs)) return -1;
    if (claim_pool(sb, a, holder, sizeof holder, nodes, sizeof nodes))
        return start_warm(sb, a, holder, nodes, record, ctx);
    char *script = batch_script(sb, a);
    if (!script) return -1;
    int rc = anvil_write_file_atomic(path, script, strlen(script));
    free(script);
    if (rc) return -1;
    char **env = submit_env(a), *out = NULL;
    if (!env) return anvil_fail("out of memory");
    /* Slurm queues a job that no configuration of the cluster can ever run (more nodes than the
     * partition has, or than its bad nodes leave); asked first, it says so, and the job fails now. */
    rc = run_client((char *[]){"sbatch", "--test-only", path, NULL}, env, &out);
    if (rc > 0) {
        anvil_fail("sbatch --test-only %s: %s", path, first_line(out));
    } else if (!rc) {
        free(out);
        rc = run_client((char *[]){"sbatch", "--parsable", "--hold", path, NULL}, env, &out);
        if (rc > 0) anvil_fail("sbatch %s: %s", path, first_line(out));
    }
    free(env);
    if (rc) {
        free(out);
        return -1;
    }
    /* --parsable: "ID" or "ID;CLUSTER". */
    char handle[32];
    size_t n = strspn(out, "0123456789");
    if (!n || n >= sizeof handle) {
        anvil_fail("sbatch %s: no job ID in its answer '%s'", path, first_line(out));
        free(out);
        return -1;
    }
    memcpy(handle, out, n);
    handle[n] = 0;
    free(out);
    if (record(ctx, handle)) {
        char *ignored;
        run_client((char *[]){"scancel", handle, NULL}, environ, &ignored);
        free(ignored);
        return -1;
    }
    /* A release that fails is taken up again by poll. */
    run_quiet((char *[]){"scontrol", "release", handle, NULL});
    return 0;
}

static bool final_state(const char *s) {
    static const char *const finals[] = {"COMPLETED", "CANCELLED", "FAILED",    "TIMEOUT",      "NODE_FAIL",
                                         "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"};
    for (size_t i = 0; i < sizeof finals / sizeof *finals; i++)
        if (!strcmp(s, finals[i])) return true;
    return false;
}

static int exited(slurm_backend *sb, const anvil_attempt_ref *a, int code, int *out) {
    *out = code;
    if (code == HEALTH_EXIT) {
        int bad = exclude_unhealthy(sb, a);
        if (bad) return bad < 0 ? -1 : ANVIL_ATTEMPT_UNHEALTHY;
    }
    if (code != 0 && code != 75 && exclude_bad_nodes(sb, a)) return -1;
    return ANVIL_ATTEMPT_EXITED;
}

/* Removes the claim on holder's pool when it is this attempt's (a job's claim says whose it is). */
static void drop_claim(const slurm_backend *sb, const anvil_attempt_ref *a, const char *holder) {
    char path[PATH_MAX + 64], mine[64], *claim;
    size_t len;
    pool_path(sb, holder, ".claim", path, sizeof path);
    snprintf(mine, sizeof mine, "job %lld attempt %d\n", (long long)a->job_id, a->attempt);
    if (anvil_read_file_max(path, 256, &claim, &len)) return;
    if (!strcmp(claim, mine)) unlink(path);
    free(claim);
}

/* A warm attempt runs while its script does; the script writes the exit file and gives the claim back
 * before it exits. A script killed before that leaves the claim, which is given back here. */
static int warm_poll(slurm_backend *sb, const anvil_attempt_ref *a, pid_t pid, int *code) {
    waitpid(pid, NULL, WNOHANG);
    bool alive = !kill(pid, 0);
    *code = anvil_attempt_read_exit(sb->state_dir, a);
    if (*code >= 0) return exited(sb, a, *code, code);
    if (alive) return ANVIL_ATTEMPT_RUNNING;
    char id[32];
    drop_claim(sb, a, slurm_ref(a, id, sizeof id).handle);
    return ANVIL_ATTEMPT_LOST;
}

static int slurm_poll(anvil_backend *b, const anvil_attempt_ref *a, int *code) {
    slurm_backend *sb = slurm_of(b);
    pid_t pid = warm_pid(a);
    if (pid) return warm_poll(sb, a, pid, code);
    *code = anvil_attempt_read_exit(sb->state_dir, a);
    if (*code >= 0) return exited(sb, a, *code, code);
    int slot = recent_slot(sb, a);
    bool mine = sb->recent[slot].job_id == a->job_id && sb->recent[slot].attempt == a->attempt;
    if (mine && now_s() - sb->recent[slot].at < ASK_EVERY_S) return ANVIL_ATTEMPT_RUNNING;
    char *info;
    int gone = show_job(a, &info);
    if (gone < 0) return -1;
    /* The script writes the exit file before its job ends: read again after Slurm's answer. */
    int late = anvil_attempt_read_exit(sb->state_dir, a);
    if (late >= 0) {
        free(info);
        return exited(sb, a, late, code);
    }
    char *state = gone ? NULL : field_of(info, "JobState"), *restarts = gone ? NULL : field_of(info, "Restarts"),
         *reason = gone ? NULL : field_of(info, "Reason");
    free(info);
    int rc = ANVIL_ATTEMPT_RUNNING;
    bool ended = gone || !state || final_state(state);
    /* Slurm requeued it after a node failed: the retry is the supervisor's, a new submission without
     * that node, rather than this job after Slurm's requeue delay on whatever nodes it gets. */
    bool requeued = !ended && ((restarts && atoi(restarts) > 0) || !strcmp(state, "REQUEUE_HOLD") ||
                               !strcmp(state, "SPECIAL_EXIT"));
    if (requeued && run_quiet((char *[]){"scancel", (char *)a->handle, NULL})) rc = -1;
    else if (ended || requeued) rc = exclude_bad_nodes(sb, a) ? -1 : ANVIL_ATTEMPT_LOST;
    else if (!strcmp(state, "PENDING") && reason && !strcmp(reason, "JobHeldUser"))
        /* Submitted and recorded by a daemon that stopped before releasing it. */
        rc = run_quiet((char *[]){"scontrol", "release", (char *)a->handle, NULL}) ? -1 : ANVIL_ATTEMPT_RUNNING;
    if (rc == ANVIL_ATTEMPT_RUNNING) {
        sb->recent[slot].job_id = a->job_id;
        sb->recent[slot].attempt = a->attempt;
        sb->recent[slot].at = now_s();
    }
    free(state);
    free(restarts);
    free(reason);
    return rc;
}

/* SIGUSR1 to the batch script, which forwards it to srun and so to every rank. Only a running job gets
 * it: scancel retries a signal to a pending job for about 95 s before it gives up, and a pending job
 * has run nothing that a checkpoint could keep, so it is cancelled at once. */
static int slurm_stop(anvil_backend *b, const anvil_attempt_ref *a) {
    (void)b;
    /* A warm attempt's script forwards it to its srun as the batch script does. */
    pid_t pid = warm_pid(a);
    if (pid) return kill(pid, SIGUSR1) && errno != ESRCH ? anvil_fail("job %lld: cannot signal %d: %s",
                                                                      (long long)a->job_id, (int)pid, strerror(errno))
                                                         : 0;
    char *info;
    int gone = show_job(a, &info);
    if (gone) return gone < 0 ? -1 : 0;
    char *state = field_of(info, "JobState");
    free(info);
    int rc = 0;
    if (state && !strcmp(state, "PENDING")) {
        rc = run_quiet((char *[]){"scancel", (char *)a->handle, NULL});
    } else if (state && !strcmp(state, "RUNNING")) {
        char *out;
        rc = run_client((char *[]){"scancel", "--batch", "--signal=USR1", (char *)a->handle, NULL}, environ, &out);
        /* It may have ended meanwhile. */
        if (rc > 0 && !strstr(out, "Invalid job id") && !strstr(out, "already completing"))
            anvil_fail("job %lld: scancel --batch --signal=USR1 %s: %s", (long long)a->job_id, a->handle,
                       first_line(out));
        else if (rc > 0) rc = 0;
        free(out);
    }
    /* Any other state (configuring, completing, requeued) ends on its own or by the kill after the grace. */
    free(state);
    return rc ? -1 : 0;
}

/* The steps of holder's allocation named as attempt a's (put_step), each ended with SIGKILL: how many,
 * or -1 after anvil_fail. */
static int kill_warm_steps(const anvil_attempt_ref *a, const char *holder) {
    char *out, name[64];
    snprintf(name, sizeof name, "anvil-%lld.%d", (long long)a->job_id, a->attempt);
    int rc = run_client((char *[]){"squeue", "-h", "-s", "-j", (char *)holder, "-o", "%i %j", NULL}, environ, &out);
    if (rc) {
        free(out);
        return rc < 0 ? -1 : 0;
    }
    int killed = 0;
    for (char *save, *line = strtok_r(out, "\n", &save); line && rc >= 0; line = strtok_r(NULL, "\n", &save)) {
        char *sp = strchr(line, ' ');
        if (!sp || strcmp(sp + 1, name)) continue;
        *sp = 0;
        if (run_quiet((char *[]){"scancel", "--signal=KILL", line, NULL})) rc = -1;
        else killed++;
    }
    free(out);
    return rc < 0 ? -1 : killed;
}

/* A warm attempt: its step alone, so that its script records the exit and gives the pool back, which the
 * holder then offers again; a script with no step (yet, or any more) is killed with its session, and
 * poll gives the claim back. Otherwise the attempt's own batch job, whole. */
static int slurm_kill(anvil_backend *b, const anvil_attempt_ref *a) {
    (void)b;
    char id[32];
    anvil_attempt_ref r = slurm_ref(a, id, sizeof id);
    pid_t pid = warm_pid(a);
    if (!pid) return run_quiet((char *[]){"scancel", "--signal=KILL", "--full", (char *)r.handle, NULL});
    int steps = kill_warm_steps(a, r.handle);
    if (steps <= 0) kill(-pid, SIGKILL);
    return steps < 0 ? -1 : 0;
}

/* backend.h: where srun saw the first rank killed by a signal, which is the cause; the log's last error
 * line is srun's word on the ranks that --kill-on-bad-exit ended after it. */
static void slurm_failure_line(anvil_backend *b, const anvil_attempt_ref *a, char *line, size_t cap) {
    char node[128], why[1024];
    first_killed_rank(slurm_of(b), a, node, sizeof node, why, sizeof why);
    if (node[0]) snprintf(line, cap, "first on %s: %s", node, why);
    else line[0] = 0;
}

static int add_string(cJSON *o, const char *key, const char *value) {
    return value && !cJSON_AddStringToObject(o, key, value) ? anvil_fail("out of memory") : 0;
}

typedef struct {
    const char *job;
    cJSON *o;
} describe_ctx;

static int describe_one(const slurm_backend *sb, const char *id, const char *info, void *ctx) {
    describe_ctx *d = ctx;
    if (!pool_is(info, "job", d->job)) return 0;
    return add_string(d->o, "warm_pool_status", pool_status(sb, id, info)) || add_string(d->o, "warm_pool_id", id)
               ? -1
               : 0;
}

/* warm_pool_status and warm_pool_id: Reused for an attempt that ran in another job's pool, else the
 * status of the pool this job left, if any. */
static int describe_pool(const slurm_backend *sb, const anvil_attempt_ref *a, cJSON *o) {
    char path[PATH_MAX + 32], *holder;
    size_t len;
    job_dir(sb, a->job_id, path, sizeof path);
    snprintf(path + strlen(path), sizeof path - strlen(path), "/pool_%d", a->attempt);
    if (!anvil_read_file_max(path, 64, &holder, &len)) {
        int rc = add_string(o, "warm_pool_status", "Reused") || add_string(o, "warm_pool_id", holder) ? -1 : 0;
        free(holder);
        return rc;
    }
    char job[32];
    snprintf(job, sizeof job, "%lld", (long long)a->job_id);
    describe_ctx ctx = {job, o};
    return each_pool(sb, describe_one, &ctx);
}

static int slurm_describe(anvil_backend *b, const anvil_attempt_ref *a, cJSON *o) {
    slurm_backend *sb = slurm_of(b);
    int rc = add_string(o, "partition", sb->partition);
    char *bad = excluded_text(sb, a->job_id);
    cJSON *list = cJSON_AddArrayToObject(o, "excluded_nodes");
    if (!bad || !list) rc = anvil_fail("out of memory");
    for (char *line = bad; !rc && line && *line;) {
        size_t n = strcspn(line, "\t\n"), end = strcspn(line, "\n");
        cJSON *e = cJSON_CreateObject();
        char *node = strndup(line, n), *why = strndup(line + n + (line[n] == '\t'), end - n - (line[n] == '\t'));
        if (!e || !node || !why || !cJSON_AddStringToObject(e, "node", node) || !cJSON_AddStringToObject(e, "why", why))
            rc = anvil_fail("out of memory");
        if (e) cJSON_AddItemToArray(list, e);
        free(node);
        free(why);
        line += end + (line[end] != 0);
    }
    free(bad);
    if (!rc) rc = describe_pool(sb, a, o);
    if (rc || !a->handle[0]) return rc;
    char id[32];
    anvil_attempt_ref r = slurm_ref(a, id, sizeof id);
    char *info;
    int gone = show_job(&r, &info);
    if (gone < 0) return -1;
    if (add_string(o, "slurm_job_id", r.handle)) rc = -1;
    if (!rc && gone) rc = add_string(o, "state", "unknown to Slurm (ended)");
    static const char *const fields[][2] = {
        {"JobState", "state"}, {"Reason", "reason"}, {"NodeList", "node_list"}, {"Restarts", "restarts"}};
    for (size_t i = 0; !rc && !gone && i < sizeof fields / sizeof *fields; i++) {
        char *v = field_of(info, fields[i][0]);
        rc = add_string(o, fields[i][1], v);
        free(v);
    }
    free(info);
    return rc;
}

typedef struct {
    const char *user;
    cJSON *arr;
} pool_list;

static int list_one(const slurm_backend *sb, const char *id, const char *info, void *ctx) {
    pool_list *l = ctx;
    if (l->user && !pool_is(info, "user", l->user)) return 0;
    cJSON *o = cJSON_CreateObject();
    if (!o) return anvil_fail("out of memory");
    cJSON_AddItemToArray(l->arr, o);
    int rc = add_string(o, "id", id) || add_string(o, "status", pool_status(sb, id, info)) ? -1 : 0;
    static const char *const text_keys[] = {"user", "owner", "partition", "nodes"};
    static const char *const number_keys[] = {"hosts", "procs_per_host", "expires", "job"};
    for (size_t i = 0; !rc && i < sizeof text_keys / sizeof *text_keys; i++) {
        char *v = field_of(info, text_keys[i]);
        rc = add_string(o, text_keys[i], v ? v : "");
        free(v);
    }
    for (size_t i = 0; !rc && i < sizeof number_keys / sizeof *number_keys; i++) {
        char *v = field_of(info, number_keys[i]);
        if (!cJSON_AddNumberToObject(o, number_keys[i], v ? atof(v) : 0)) rc = anvil_fail("out of memory");
        free(v);
    }
    return rc;
}

static cJSON *slurm_pools(anvil_backend *b, const char *user) {
    pool_list l = {user, cJSON_CreateArray()};
    if (!l.arr) anvil_fail("out of memory");
    if (l.arr && each_pool(slurm_of(b), list_one, &l)) {
        cJSON_Delete(l.arr);
        return NULL;
    }
    return l.arr;
}

static int slurm_release_pool(anvil_backend *b, const char *id, const char *user) {
    slurm_backend *sb = slurm_of(b);
    if (!*id || id[strspn(id, "0123456789")] || strlen(id) > 20) return 1;
    char *info = pool_text(sb, id);
    if (!info || (user && !pool_is(info, "user", user))) {
        free(info);
        return 1;
    }
    bool ended = !strcmp(pool_status(sb, id, info), "Terminated");
    free(info);
    if (ended) return 2;
    char path[PATH_MAX + 64];
    pool_path(sb, id, ".release", path, sizeof path);
    return anvil_write_file_atomic(path, "", 0) ? -1 : 0;
}

typedef struct {
    const char *key, *value;
    char hosts[16], procs[16];
    double held;
    bool spared;
} pool_count;

static int count_one(const slurm_backend *sb, const char *id, const char *info, void *ctx) {
    pool_count *c = ctx;
    if (!pool_is(info, c->key, c->value) || strcmp(pool_status(sb, id, info), "Available")) return 0;
    if (!c->spared && pool_is(info, "hosts", c->hosts) && pool_is(info, "procs_per_host", c->procs)) {
        c->spared = true;
        return 0;
    }
    char *hosts = field_of(info, "hosts");
    c->held += hosts ? atof(hosts) : 0;
    free(hosts);
    return 0;
}

static double slurm_pool_hosts(anvil_backend *b, const char *user, const char *owner, int hosts, int procs_per_host) {
    pool_count c = {.key = user ? "user" : "owner", .value = user ? user : owner};
    snprintf(c.hosts, sizeof c.hosts, "%d", hosts);
    snprintf(c.procs, sizeof c.procs, "%d", procs_per_host);
    each_pool(slurm_of(b), count_one, &c);
    return c.held;
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
    .free = slurm_free,
    .failure_line = slurm_failure_line,
    .pools = slurm_pools,
    .release_pool = slurm_release_pool,
    .pool_hosts = slurm_pool_hosts,
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
