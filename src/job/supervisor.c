#include "job/supervisor.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "core/exit.h"
#include "core/fsutil.h"
#include "job/audit.h"
#include "job/policy.h"
#include "job/spec.h"

extern char **environ;

struct anvil_supervisor {
    anvil_store *st;
    char *state_dir, *self;
    double grace_s;
    /* Held through a tick and through a stop request, so neither overwrites the other's change. */
    pthread_mutex_t lock;
};

anvil_supervisor *anvil_supervisor_new(anvil_store *st, const char *state_dir, const char *self, double grace_s) {
    anvil_supervisor *sup = calloc(1, sizeof *sup);
    if (!sup || !(sup->state_dir = strdup(state_dir)) || !(sup->self = strdup(self))) {
        anvil_supervisor_free(sup);
        anvil_fail("supervisor: out of memory");
        return NULL;
    }
    sup->st = st;
    sup->grace_s = grace_s;
    pthread_mutex_init(&sup->lock, NULL);
    return sup;
}

void anvil_supervisor_free(anvil_supervisor *sup) {
    if (!sup) return;
    if (sup->self) pthread_mutex_destroy(&sup->lock);
    free(sup->state_dir);
    free(sup->self);
    free(sup);
}

/* Replaces a malloc'd string field; false when out of memory (the field is kept). */
static bool set_text(char **field, const char *value) {
    char *copy = strdup(value);
    if (!copy) return false;
    free(*field);
    *field = copy;
    return true;
}

/* Signals every live process of session sid (sig 0: only counts them). Zombies do not count: after a
 * daemon restart nobody may be left to reap them. */
static int session_signal(int sid, int sig) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t len = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (len <= 0) continue;
        buf[len] = 0;
        /* pid (comm) state ppid pgrp session ...; comm may hold spaces and parentheses. */
        char *p = strrchr(buf, ')'), state;
        int ppid, pgrp, session;
        if (!p || sscanf(p + 1, " %c %d %d %d", &state, &ppid, &pgrp, &session) != 4) continue;
        if (session != sid || state == 'Z' || state == 'X') continue;
        n++;
        if (sig) kill((pid_t)atoi(e->d_name), sig);
    }
    closedir(d);
    return n;
}

static void exit_file(const anvil_supervisor *sup, const anvil_job *j, char *path, size_t cap) {
    snprintf(path, cap, "%s/jobs/%lld/exit_%d", sup->state_dir, (long long)j->id, j->attempt);
}

/* The attempt's exit status from its exit file, or -1 when there is none (yet). */
static int read_exit(const anvil_supervisor *sup, const anvil_job *j) {
    char path[PATH_MAX], *text;
    size_t len;
    exit_file(sup, j, path, sizeof path);
    if (anvil_read_file_max(path, 64, &text, &len)) return -1;
    char *end;
    long code = strtol(text, &end, 10);
    bool ok = end != text && code >= 0 && code <= 255;
    free(text);
    return ok ? (int)code : -1;
}

/* Seconds since the epoch of the last step written by the current attempt, or 0 when none. */
static double last_progress(const anvil_job *j) {
    char path[PATH_MAX];
    struct stat sb;
    snprintf(path, sizeof path, "%s/metrics.jsonl", j->run_dir);
    if (stat(path, &sb)) return 0;
    double t = (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec * 1e-9;
    return t > j->started_at ? t : 0;
}

/* The last line of the attempt's launcher log holding "error:", as the reason of a failure. */
static void last_error_line(const anvil_job *j, char *line, size_t cap) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/logs/launcher.log", j->run_dir);
    line[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    /* Only the tail matters: a long log is read from its last 64 KiB. */
    if (fseek(f, -65536, SEEK_END)) rewind(f);
    char buf[4096];
    while (fgets(buf, sizeof buf, f))
        if (strstr(buf, "error:")) {
            buf[strcspn(buf, "\r\n")] = 0;
            snprintf(line, cap, "%.500s", buf);
        }
    fclose(f);
}

static int save(anvil_supervisor *sup, const anvil_job *j, const char *message) {
    return anvil_store_update(sup->st, j, message);
}

/* The attempt's argv and environment, built before fork: the child may only call async-signal-safe
 * functions. */
typedef struct {
    char **argv, **envp;
    int argc, envc;
    bool oom;
} cmdline;

static void push(char ***v, int *n, const char *s, bool *oom) {
    char **grown = realloc(*v, sizeof **v * (size_t)(*n + 2));
    char *copy = strdup(s);
    if (!grown || !copy) {
        if (grown) *v = grown;
        free(copy);
        *oom = true;
        return;
    }
    *v = grown;
    (*v)[(*n)++] = copy;
    (*v)[*n] = NULL;
}

static void pushf(char ***v, int *n, bool *oom, const char *fmt, const char *a, const char *b) {
    char buf[8192];
    snprintf(buf, sizeof buf, fmt, a, b);
    push(v, n, buf, oom);
}

static void free_strings(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static bool has_arg(const anvil_job_spec *s, const char *arg) {
    for (int i = 0; i < s->argc; i++)
        if (!strcmp(s->argv[i], arg)) return true;
    return false;
}

static void build_cmdline(const anvil_supervisor *sup, const anvil_job *j, const anvil_job_spec *s, cmdline *c) {
    char exitf[PATH_MAX], procs[16], id[32];
    exit_file(sup, j, exitf, sizeof exitf);
    snprintf(procs, sizeof procs, "%d", s->procs_per_host * s->hosts);
    snprintf(id, sizeof id, "%lld", (long long)j->id);
    const char *head[] = {"anvil", "job-run", "--exit-file", exitf, "--", "launch", "-n", procs, "--log-dir"};
    for (size_t i = 0; i < sizeof head / sizeof *head; i++) push(&c->argv, &c->argc, head[i], &c->oom);
    pushf(&c->argv, &c->argc, &c->oom, "%s/logs%s", j->run_dir, "");
    push(&c->argv, &c->argc, "--", &c->oom);
    for (int i = 0; i < s->argc; i++) push(&c->argv, &c->argc, s->argv[i], &c->oom);
    push(&c->argv, &c->argc, "--out", &c->oom);
    push(&c->argv, &c->argc, j->run_dir, &c->oom);
    /* A retry continues from the last checkpoint; a command that names its own --resume keeps it. */
    if (j->attempt > 1 && !strcmp(s->argv[0], "train") && !has_arg(s, "--resume")) {
        push(&c->argv, &c->argc, "--resume", &c->oom);
        push(&c->argv, &c->argc, "auto", &c->oom);
    }
    /* What the job inherits of the daemon's environment, then the spec's (which wins, and holds the
     * role's variables), the channels and the job's id. */
    for (char **e = environ; *e; e++) {
        bool dropped = !anvil_job_env_inherited(*e);
        size_t klen = strcspn(*e, "=");
        for (int i = 0; i < s->nenv && !dropped; i++)
            dropped = strlen(s->env[i].key) == klen && !strncmp(*e, s->env[i].key, klen);
        if (!dropped) push(&c->envp, &c->envc, *e, &c->oom);
    }
    for (int i = 0; i < s->nenv; i++) pushf(&c->envp, &c->envc, &c->oom, "%s=%s", s->env[i].key, s->env[i].value);
    for (int i = 0; i < s->nchannels; i++) {
        char name[80];
        size_t k = 0;
        for (; s->channels[i].key[k] && k < sizeof name - 1; k++)
            name[k] = (char)toupper((unsigned char)s->channels[i].key[k]);
        name[k] = 0;
        pushf(&c->envp, &c->envc, &c->oom, "ANVIL_CHANNEL_%s=%s", name, s->channels[i].value);
    }
    pushf(&c->envp, &c->envc, &c->oom, "ANVIL_JOB_ID=%s%s", id, "");
}

/* Forks the attempt into its own session. The child waits until the store records its pid, so a
 * daemon killed in between leaves no attempt the store does not know of. */
static int start_attempt(anvil_supervisor *sup, anvil_job *j) {
    anvil_job_spec spec;
    if (anvil_job_spec_parse(j->spec, strlen(j->spec), &spec)) return -1;
    char dir[PATH_MAX], logs[PATH_MAX], log[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/jobs/%lld", sup->state_dir, (long long)j->id);
    snprintf(logs, sizeof logs, "%s/logs", j->run_dir);
    snprintf(log, sizeof log, "%s/launcher.log", logs);
    cmdline c = {0};
    build_cmdline(sup, j, &spec, &c);
    anvil_job_spec_free(&spec);
    int go[2] = {-1, -1}, rc = -1;
    if (c.oom) {
        anvil_fail("out of memory");
        goto done;
    }
    if (anvil_mkdir_p(dir) || anvil_mkdir_p(logs)) goto done;
    if (pipe2(go, O_CLOEXEC)) {
        anvil_fail("pipe: %s", strerror(errno));
        goto done;
    }
    pid_t pid = fork();
    if (pid < 0) {
        anvil_fail("fork: %s", strerror(errno));
        goto done;
    }
    if (pid == 0) {
        close(go[1]);
        setsid();
        char byte;
        if (read(go[0], &byte, 1) != 1) _exit(127);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        int in = open("/dev/null", O_RDONLY), out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (in < 0 || out < 0 || chdir(j->run_dir)) _exit(127);
        dup2(in, STDIN_FILENO);
        dup2(out, STDOUT_FILENO);
        dup2(out, STDERR_FILENO);
        execve(sup->self, c.argv, c.envp);
        _exit(127);
    }
    close(go[0]);
    go[0] = -1;
    j->pid = (int)pid;
    j->started_at = anvil_store_now();
    j->status = ANVIL_JOB_RUNNING;
    rc = set_text(&j->secondary, "Launching") ? save(sup, j, NULL) : anvil_fail("out of memory");
    if (!rc && write(go[1], "g", 1) != 1) rc = anvil_fail("cannot start the attempt: %s", strerror(errno));
done:
    if (go[0] >= 0) close(go[0]);
    if (go[1] >= 0) close(go[1]);
    free_strings(c.argv, c.argc);
    free_strings(c.envp, c.envc);
    return rc;
}

/* The job's final status or its next attempt, once an attempt has ended with code (-1: lost). */
static int finish_attempt(anvil_supervisor *sup, anvil_job *j, int code) {
    anvil_job_spec spec;
    if (anvil_job_spec_parse(j->spec, strlen(j->spec), &spec)) return -1;
    int max_retries = spec.max_retries;
    anvil_job_spec_free(&spec);
    char line[600], why[900], verdict[1000];
    last_error_line(j, line, sizeof line);
    bool progressed = last_progress(j) > 0;
    if (code < 0) snprintf(why, sizeof why, "its processes ended without an exit status (lost while the daemon "
                                            "was down, or killed)");
    else if (code > 128 && code < 160) snprintf(why, sizeof why, "exit %d (signal %d)", code, code - 128);
    else snprintf(why, sizeof why, "exit %d", code);
    if (line[0]) snprintf(why + strlen(why), sizeof why - strlen(why), ": %s", line);
    if (j->stop == ANVIL_STOP_HANG)
        snprintf(why, sizeof why, "HangDetected: no progress in %s/metrics.jsonl within the hang timeout", j->run_dir);
    j->exit_code = code;
    j->pid = 0;
    j->stop_deadline = 0;
    const char *secondary = "", *message = why;
    bool retry = false;
    char retrying[64];
    if (j->stop == ANVIL_STOP_REQUESTED || j->stop == ANVIL_STOP_RUNTIME ||
        (j->stop == ANVIL_STOP_NONE && code == ANVIL_EXIT_RESUMABLE)) {
        j->status = ANVIL_JOB_STOPPED;
        secondary = j->stop == ANVIL_STOP_RUNTIME ? "MaxRuntimeExceeded" : "";
        message = code == ANVIL_EXIT_RESUMABLE ? "stopped after writing a checkpoint (exit 75): resumable"
                                               : "stopped without a checkpoint";
    } else if (j->stop == ANVIL_STOP_NONE && code == 0) {
        j->status = ANVIL_JOB_COMPLETED;
        message = "exit 0";
    } else if (j->stop == ANVIL_STOP_NONE && code == ANVIL_EXIT_USAGE) {
        j->status = ANVIL_JOB_FAILED;
        snprintf(verdict, sizeof verdict, "usage error, not retried: %s", why);
        message = verdict;
    } else if (j->stop == ANVIL_STOP_NONE && code == ANVIL_EXIT_ERROR && !progressed) {
        j->status = ANVIL_JOB_FAILED;
        snprintf(verdict, sizeof verdict, "configuration or input error before the first step, not retried: %s",
                 why);
        message = verdict;
    } else if (j->attempt <= max_retries) {
        retry = true;
        j->status = ANVIL_JOB_STARTING;
        snprintf(retrying, sizeof retrying, "Retrying (%d/%d)", j->attempt, max_retries);
        secondary = retrying;
        j->attempt++;
    } else {
        j->status = ANVIL_JOB_FAILED;
        snprintf(verdict, sizeof verdict, "attempt %d of %d failed: %s", j->attempt, max_retries + 1, why);
        message = verdict;
    }
    j->stop = ANVIL_STOP_NONE;
    if (!retry) j->ended_at = anvil_store_now();
    if (!set_text(&j->secondary, secondary) ||
        (j->status == ANVIL_JOB_FAILED && !set_text(&j->failure_reason, message)))
        return anvil_fail("out of memory");
    return save(sup, j, message);
}

/* Starts a stop: records the deadline of the SIGKILL, then sends the launcher SIGTERM. */
static int begin_stop(anvil_supervisor *sup, anvil_job *j, anvil_job_stop why, const char *secondary,
                      const char *message) {
    j->stop = why;
    j->status = ANVIL_JOB_STOPPING;
    j->stop_deadline = anvil_store_now() + sup->grace_s;
    if (!set_text(&j->secondary, secondary)) return anvil_fail("out of memory");
    if (save(sup, j, message)) return -1;
    kill(-j->pid, SIGTERM);
    return 0;
}

static int advance(anvil_supervisor *sup, anvil_job *j) {
    if (j->status == ANVIL_JOB_PENDING) {
        j->status = ANVIL_JOB_STARTING;
        j->attempt = 1;
        if (!set_text(&j->secondary, "Preparing")) return anvil_fail("out of memory");
        if (save(sup, j, "attempt 1")) return -1;
    }
    if (j->status == ANVIL_JOB_STARTING) return start_attempt(sup, j);
    /* Running or Stopping: the session first, then the exit file, which the wrapper writes before it
     * exits; the other order could take an attempt ending between the two looks for a lost one. */
    bool alive = session_signal(j->pid, 0) > 0;
    int code = read_exit(sup, j);
    if (code >= 0 || !alive) return finish_attempt(sup, j, code);
    double now = anvil_store_now();
    anvil_job_spec spec;
    if (anvil_job_spec_parse(j->spec, strlen(j->spec), &spec)) return -1;
    double max_runtime = spec.max_runtime_s, hang = spec.hang_timeout_s;
    anvil_job_spec_free(&spec);
    if (j->stop != ANVIL_STOP_NONE) {
        if (j->stop_deadline == 0) {
            j->stop_deadline = now + sup->grace_s;
            if (save(sup, j, NULL)) return -1;
            kill(-j->pid, SIGTERM);
        } else if (now >= j->stop_deadline) {
            session_signal(j->pid, SIGKILL);
        }
        return 0;
    }
    double progress = last_progress(j);
    char message[128];
    if (max_runtime > 0 && now - j->started_at > max_runtime) {
        snprintf(message, sizeof message, "max_runtime_s (%g s) reached: checkpoint and stop", max_runtime);
        return begin_stop(sup, j, ANVIL_STOP_RUNTIME, "MaxRuntimeExceeded", message);
    }
    if (hang > 0 && now - (progress > 0 ? progress : j->started_at) > hang) {
        snprintf(message, sizeof message, "no progress for %g s: stopping for a retry", hang);
        return begin_stop(sup, j, ANVIL_STOP_HANG, "HangDetected", message);
    }
    if (progress > 0 && !strcmp(j->secondary, "Launching")) {
        if (!set_text(&j->secondary, "Training")) return anvil_fail("out of memory");
        return save(sup, j, "first step written");
    }
    return 0;
}

int anvil_supervisor_tick(anvil_supervisor *sup) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    unsigned active = 1u << ANVIL_JOB_PENDING | 1u << ANVIL_JOB_STARTING | 1u << ANVIL_JOB_RUNNING |
                      1u << ANVIL_JOB_STOPPING;
    pthread_mutex_lock(&sup->lock);
    anvil_job *jobs;
    int n, rc = anvil_store_list(sup->st, active, &jobs, &n);
    for (int i = 0; !rc && i < n; i++) {
        anvil_job *j = &jobs[i];
        /* An attempt that could not be started fails the job, with the reason; trouble with a running
         * one (the store, the file system) is left for the next tick. */
        if (!advance(sup, j) || j->pid) continue;
        char why[512];
        snprintf(why, sizeof why, "the daemon could not start it: %s", anvil_errmsg());
        j->status = ANVIL_JOB_FAILED;
        j->ended_at = anvil_store_now();
        rc = set_text(&j->failure_reason, why) && set_text(&j->secondary, "") ? save(sup, j, why)
                                                                               : anvil_fail("out of memory");
    }
    anvil_job_list_free(jobs, n);
    pthread_mutex_unlock(&sup->lock);
    return rc;
}

int anvil_supervisor_stop(anvil_supervisor *sup, int64_t id, const anvil_audit_entry *audit, anvil_job *j) {
    pthread_mutex_lock(&sup->lock);
    int rc = anvil_store_get(sup->st, id, j);
    if (!rc && anvil_job_status_final(j->status)) rc = 2;
    if (!rc && j->stop != ANVIL_STOP_REQUESTED) {
        if (j->status == ANVIL_JOB_PENDING || (j->status == ANVIL_JOB_STARTING && !j->pid)) {
            j->status = ANVIL_JOB_STOPPED;
            j->ended_at = anvil_store_now();
        } else {
            /* A stop already under way (hang, runtime) keeps its deadline, but is no longer retried. */
            j->stop = ANVIL_STOP_REQUESTED;
            j->status = ANVIL_JOB_STOPPING;
        }
        rc = set_text(&j->secondary, "") ? anvil_store_update_audited(sup->st, j, "stop requested", audit)
                                         : anvil_fail("out of memory");
    } else if (!rc) {
        rc = anvil_audit_add(sup->st, audit);
    }
    pthread_mutex_unlock(&sup->lock);
    return rc;
}
