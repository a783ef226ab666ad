/* The Slurm backend (job/backend.h): each attempt is one Slurm batch job. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "job/backend.h"

extern char **environ;

/* How often poll asks slurmctld about an attempt it last found running. The exit file is read on every
 * poll, so an attempt's end is seen at once; only a job Slurm ends or requeues waits up to this long. */
#define ASK_EVERY_S 2.0
#define RECENT_MAX 64

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

/* A growable text. */
typedef struct {
    char *s;
    size_t len, cap;
    bool oom;
} text;

static void put(text *t, const char *s, size_t n) {
    if (t->oom) return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *grown = realloc(t->s, cap);
        if (!grown) {
            t->oom = true;
            return;
        }
        t->s = grown;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = 0;
}

static void puts_(text *t, const char *s) { put(t, s, strlen(s)); }

static void putf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(text *t, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    put(t, buf, n < 0 ? 0 : (size_t)n >= sizeof buf ? sizeof buf - 1 : (size_t)n);
}

/* s in single quotes for the shell. */
static void put_quoted(text *t, const char *s) {
    puts_(t, "'");
    for (const char *q; (q = strchr(s, '\'')); s = q + 1) {
        put(t, s, (size_t)(q - s));
        puts_(t, "'\\''");
    }
    puts_(t, s);
    puts_(t, "'");
}

/* A shell line that writes what command prints to path atomically: a temporary file, fsync'd, renamed. */
static void put_atomic_write(text *t, const char *command, const char *path) {
    putf(t, "%s > ", command);
    put_quoted(t, path);
    puts_(t, ".tmp && sync ");
    put_quoted(t, path);
    puts_(t, ".tmp && mv -f ");
    put_quoted(t, path);
    puts_(t, ".tmp ");
    put_quoted(t, path);
    puts_(t, "\n");
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
    text t = {0};
    puts_(&t, "");
    char buf[4096];
    ssize_t n;
    while ((n = read(fd[0], buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        if (t.len < 65536) put(&t, buf, (size_t)n);
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
    text t = {0};
    puts_(&t, old);
    free(old);
    putf(&t, "%s\t%.900s\n", node, why);
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

/* The node where srun saw this attempt's first rank killed by a signal (its "srun: error: NODE: task N:
 * Killed" line after the attempt's own first line in the log), marked bad. Only the first: with
 * --kill-on-bad-exit srun itself then kills the ranks on the other nodes. */
static int exclude_killed_rank(const slurm_backend *sb, const anvil_attempt_ref *a) {
    char path[PATH_MAX], marker[96];
    if (attempt_log(sb, a, path, sizeof path)) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    /* The attempts' logs follow one another in the file; only the last 4 MiB can hold this one's end. */
    if (fseek(f, -(4L << 20), SEEK_END)) rewind(f);
    snprintf(marker, sizeof marker, "anvil: job %lld attempt %d:", (long long)a->job_id, a->attempt);
    char line[2048], node[128] = "", why[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!strncmp(line, marker, strlen(marker))) node[0] = 0;
        const char *p = strstr(line, "srun: error: ");
        if (!p || node[0]) continue;
        p += strlen("srun: error: ");
        char task[64];
        int used = 0;
        /* "NODE: task 1: Killed", "NODE: tasks 0-1: Terminated"; an exit code is the program's own. */
        if (sscanf(p, "%127[^: ]: %63[^:]:%n", node, task, &used) != 2 || strncmp(task, "task", 4) ||
            !strncmp(p + used, " Exited with exit code", 22)) {
            node[0] = 0;
            continue;
        }
        snprintf(why, sizeof why, "%s of attempt %d (Slurm job %s) was ended by a signal there:%.500s", task,
                 a->attempt, a->handle, p + used);
    }
    fclose(f);
    return node[0] ? exclude_node(sb, a->job_id, node, why) : 0;
}

/* The nodes of this attempt (its batch script wrote Slurm's node list) that Slurm now reports down,
 * not responding, drained or failed, marked bad. */
static int exclude_down_nodes(const slurm_backend *sb, const anvil_attempt_ref *a) {
    char path[PATH_MAX + 32], *list;
    size_t len;
    job_dir(sb, a->job_id, path, sizeof path);
    snprintf(path + strlen(path), sizeof path - strlen(path), "/nodes_%d", a->attempt);
    if (anvil_read_file_max(path, 65536, &list, &len)) return 0;
    list[strcspn(list, "\n")] = 0;
    char *names;
    int rc = run_client((char *[]){"scontrol", "show", "hostnames", list, NULL}, environ, &names);
    free(list);
    if (rc) {
        free(names);
        return rc < 0 ? -1 : 0;
    }
    rc = 0;
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

static int exclude_bad_nodes(const slurm_backend *sb, const anvil_attempt_ref *a) {
    return exclude_killed_rank(sb, a) || exclude_down_nodes(sb, a) ? -1 : 0;
}

/* The warm pool's parts of the batch script (job/backend.h). The first, before the exit file is written,
 * records the pool Available after a step that exited 0, so that it is there once the job has completed;
 * the second keeps the allocation for keep_alive_s, polling once a second for the release file. */
static void put_pool_open(text *t, const slurm_backend *sb, const anvil_attempt_spec *a) {
    char pools[PATH_MAX];
    snprintf(pools, sizeof pools, "%s/pools", sb->state_dir);
    puts_(t, "pools=");
    put_quoted(t, pools);
    puts_(t, "\npf=$pools/$SLURM_JOB_ID\npartition=");
    put_quoted(t, sb->partition ? sb->partition : "");
    putf(t, "\nend=$(( $(date +%%s) + %ld ))\n", (long)ceil(a->keep_alive_s));
    putf(t, "pool() {\n  printf 'status=%%s\\npartition=%%s\\nhosts=%d\\nprocs_per_host=%d\\nexpires=%%s\\n' "
            "\"$1\" \"$partition\" \"$end\" > \"$pf.tmp\" && sync \"$pf.tmp\" && mv -f \"$pf.tmp\" \"$pf\"\n}\n",
         a->hosts, a->procs_per_host);
    puts_(t, "[ \"$rc\" = 0 ] && mkdir -p \"$pools\" && pool Available\n");
}

static void put_pool_hold(text *t) {
    puts_(t, "if [ \"$rc\" = 0 ]; then\n");
    puts_(t, "  while [ \"$(date +%s)\" -lt \"$end\" ] && [ ! -e \"$pf.release\" ]; do sleep 1; done\n");
    puts_(t, "  pool Terminated\nfi\n");
}

/* The batch script of an attempt: the sbatch options as #SBATCH lines, so that the file alone shows
 * what was asked of Slurm. */
static char *batch_script(const slurm_backend *sb, const anvil_attempt_spec *a) {
    char dir[PATH_MAX], base[PATH_MAX + 32];
    job_dir(sb, a->ref.job_id, dir, sizeof dir);
    text t = {0};
    long grace = (long)ceil(sb->grace_s);
    grace = grace < 1 ? 1 : grace > 65535 ? 65535 : grace;
    putf(&t, "#!/bin/bash\n# anvil job %lld, attempt %d, written by anvil serve's Slurm backend.\n",
         (long long)a->ref.job_id, a->ref.attempt);
    putf(&t, "#SBATCH --job-name=anvil-%lld.%d\n", (long long)a->ref.job_id, a->ref.attempt);
    if (sb->partition) putf(&t, "#SBATCH --partition=%s\n", sb->partition);
    if (sb->account) putf(&t, "#SBATCH --account=%s\n", sb->account);
    putf(&t, "#SBATCH --nodes=%d\n#SBATCH --ntasks-per-node=%d\n", a->hosts, a->procs_per_host);
    /* The USR1 comes grace seconds before the limit, which leaves the checkpoint its time. */
    if (a->time_left_s > 0)
        putf(&t, "#SBATCH --time=%ld\n", (long)ceil((a->time_left_s + a->keep_alive_s + (double)grace) / 60));
    putf(&t, "#SBATCH --signal=B:USR1@%ld\n#SBATCH --open-mode=append\n#SBATCH --requeue\n", grace);
    putf(&t, "#SBATCH --chdir=%s\n#SBATCH --output=%s/logs/launcher.log\n", a->run_dir, a->run_dir);
    char *bad = excluded_text(sb, a->ref.job_id);
    if (bad && *bad) {
        puts_(&t, "#SBATCH --exclude=");
        for (char *line = bad, *sep = ""; *line; sep = ",") {
            size_t n = strcspn(line, "\t\n"), end = strcspn(line, "\n");
            puts_(&t, sep);
            put(&t, line, n);
            line += end + (line[end] != 0);
        }
        puts_(&t, "\n");
    }
    free(bad);
    if (!bad) t.oom = true;
    /* The first line of the attempt in the log (exclude_killed_rank reads from it on). */
    putf(&t, "echo \"anvil: job %lld attempt %d: Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST\"\n",
         (long long)a->ref.job_id, a->ref.attempt);
    snprintf(base, sizeof base, "%s/nodes_%d", dir, a->ref.attempt);
    put_atomic_write(&t, "printf '%s\\n' \"$SLURM_JOB_NODELIST\"", base);
    /* srun passes SIGUSR1 on to every rank; the wait it interrupts is taken up again. */
    puts_(&t, "stopping=\ntrap 'stopping=1; kill -USR1 \"$step\" 2> /dev/null' USR1\n");
    putf(&t, "srun --mpi=pmix --kill-on-bad-exit=1 --nodes=%d --ntasks-per-node=%d ", a->hosts, a->procs_per_host);
    put_quoted(&t, sb->self);
    for (int i = 0; i < a->argc; i++) {
        puts_(&t, " ");
        put_quoted(&t, a->argv[i]);
    }
    puts_(&t, " &\nstep=$!\nwhile :; do\n  wait \"$step\"\n  rc=$?\n  [ -n \"$stopping\" ] || break\n  stopping=\ndone\n");
    if (a->keep_alive_s > 0) put_pool_open(&t, sb, a);
    anvil_attempt_exit_path(sb->state_dir, &a->ref, base, sizeof base);
    put_atomic_write(&t, "printf '%d\\n' \"$rc\"", base);
    if (a->keep_alive_s > 0) put_pool_hold(&t);
    puts_(&t, "exit \"$rc\"\n");
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

/* Submits the attempt held, records its Slurm job ID, then releases it: a daemon killed in between
 * leaves a held job the store knows of (poll releases it) and never one it does not. */
static int slurm_start(anvil_backend *b, const anvil_attempt_spec *a, anvil_attempt_record_fn record, void *ctx) {
    slurm_backend *sb = slurm_of(b);
    char dir[PATH_MAX], logs[PATH_MAX], path[PATH_MAX + 32];
    job_dir(sb, a->ref.job_id, dir, sizeof dir);
    snprintf(logs, sizeof logs, "%s/logs", a->run_dir);
    snprintf(path, sizeof path, "%s/slurm_%d.sh", dir, a->ref.attempt);
    if (anvil_mkdir_p(dir) || anvil_mkdir_p(logs)) return -1;
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

static int exited(slurm_backend *sb, const anvil_attempt_ref *a, int code, int *out) {
    *out = code;
    if (code != 0 && code != 75 && exclude_bad_nodes(sb, a)) return -1;
    return ANVIL_ATTEMPT_EXITED;
}

static int slurm_poll(anvil_backend *b, const anvil_attempt_ref *a, int *code) {
    slurm_backend *sb = slurm_of(b);
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

static int slurm_kill(anvil_backend *b, const anvil_attempt_ref *a) {
    (void)b;
    return run_quiet((char *[]){"scancel", "--signal=KILL", "--full", (char *)a->handle, NULL});
}

static int add_string(cJSON *o, const char *key, const char *value) {
    return value && !cJSON_AddStringToObject(o, key, value) ? anvil_fail("out of memory") : 0;
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
    if (rc || !a->handle[0]) return rc;
    char *info;
    int gone = show_job(a, &info);
    if (gone < 0) return -1;
    if (add_string(o, "slurm_job_id", a->handle)) rc = -1;
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
