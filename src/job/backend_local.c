/* The local backend (job/backend.h): attempts as process sessions on this machine. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "core/strbuf.h"
#include "job/backend.h"
#include "job/chaos.h"
#include "launch/simhosts.h"

typedef struct {
    anvil_backend base;
    char *state_dir, *self;
    anvil_simhosts sim; /* n 0: none */
} local_backend;

static local_backend *local_of(anvil_backend *b) { return (local_backend *)b; }

/* The session id a handle names, or 0 for a handle that is not one of ours. */
static pid_t session_of(const anvil_attempt_ref *a) {
    char *end;
    long v = strtol(a->handle, &end, 10);
    return end != a->handle && !*end && v > 1 && v <= INT_MAX ? (pid_t)v : 0;
}

/* Calls fn(pid, ctx) for every live process of session sid, and counts them. Zombies do not count:
 * after a daemon restart nobody may be left to reap them. */
static int session_each(pid_t sid, void (*fn)(pid_t pid, void *ctx), void *ctx) {
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
        if (fn) fn((pid_t)atoi(e->d_name), ctx);
    }
    closedir(d);
    return n;
}

static void send_signal(pid_t pid, void *ctx) { kill(pid, *(const int *)ctx); }

/* Signals every live process of session sid (sig 0: only counts them). */
static int session_signal(pid_t sid, int sig) { return session_each(sid, sig ? send_signal : NULL, &sig); }

void anvil_attempt_file(const char *state_dir, const anvil_attempt_ref *a, const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/jobs/%lld/%s_%d", state_dir, (long long)a->job_id, name, a->attempt);
}

void anvil_attempt_exit_path(const char *state_dir, const anvil_attempt_ref *a, char *path, size_t cap) {
    anvil_attempt_file(state_dir, a, "exit", path, cap);
}

int anvil_attempt_read_exit(const char *state_dir, const anvil_attempt_ref *a) {
    char path[PATH_MAX], *text;
    size_t len;
    anvil_attempt_exit_path(state_dir, a, path, sizeof path);
    if (anvil_read_file_max(path, 64, &text, &len)) return -1;
    char *end;
    long code = strtol(text, &end, 10);
    bool ok = end != text && code >= 0 && code <= 255;
    free(text);
    return ok ? (int)code : -1;
}

/* The wrapper's argv, built before fork: the child may only call async-signal-safe functions. hosts: the
 * launcher's --hosts, NULL on one host. */
static char **wrapper_argv(const local_backend *lb, const anvil_attempt_spec *a, const char *hosts) {
    char exitf[PATH_MAX], procs[16], logs[PATH_MAX];
    anvil_attempt_exit_path(lb->state_dir, &a->ref, exitf, sizeof exitf);
    snprintf(procs, sizeof procs, "%d", a->procs_per_host * a->hosts);
    snprintf(logs, sizeof logs, "%s/logs", a->run_dir);
    const char *head[13] = {"anvil", "job-run", "--exit-file", exitf, "--", "launch", "-n", procs, "--log-dir", logs};
    size_t nhead = 10;
    if (hosts) {
        head[nhead++] = "--hosts";
        head[nhead++] = hosts;
    }
    head[nhead++] = "--";
    size_t n = nhead + (size_t)a->argc;
    char **v = calloc(n + 1, sizeof *v);
    for (size_t i = 0; v && i < n; i++)
        if (!(v[i] = strdup(i < nhead ? head[i] : a->argv[i - nhead]))) {
            for (size_t k = 0; k < i; k++) free(v[k]);
            free(v);
            v = NULL;
        }
    return v;
}

static void free_argv(char **v) {
    for (size_t i = 0; v && v[i]; i++) free(v[i]);
    free(v);
}

int anvil_attempt_spawn(const char *path, char *const *argv, char *const *envp, const char *run_dir, const char *log,
                        const char *handle_prefix, anvil_attempt_record_fn record, void *ctx) {
    int go[2];
    if (pipe2(go, O_CLOEXEC)) return anvil_fail("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(go[0]);
        close(go[1]);
        return anvil_fail("fork: %s", strerror(errno));
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
        if (in < 0 || out < 0 || chdir(run_dir)) _exit(127);
        dup2(in, STDIN_FILENO);
        dup2(out, STDOUT_FILENO);
        dup2(out, STDERR_FILENO);
        execve(path, argv, envp);
        _exit(127);
    }
    close(go[0]);
    char handle[96];
    snprintf(handle, sizeof handle, "%s%d", handle_prefix, (int)pid);
    int rc = record(ctx, handle);
    if (!rc && write(go[1], "g", 1) != 1) rc = anvil_fail("cannot start the attempt: %s", strerror(errno));
    /* On failure the child sees the pipe close and exits before running anything. */
    close(go[1]);
    if (rc)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
    return rc;
}

/* ---- simulated hosts (launch/simhosts.h) ---- */

/* Whether env entry e sets a variable that one of the n entries of set sets too. */
static bool sets_one_of(const char *e, const char *const *set, size_t n) {
    size_t len = strcspn(e, "=");
    for (size_t i = 0; i < n; i++)
        if (!strncmp(e, set[i], len) && set[i][len] == '=') return true;
    return false;
}

/* The environment of an attempt on simulated hosts: Open MPI's daemons started through the rsh agent,
 * and they and the ranks talking over the hosts' subnet alone (TCP between hosts, shared memory within
 * one); these replace the attempt's own settings of the same names. NULL after anvil_fail. */
static char **sim_envp(const local_backend *lb, char *const *envp) {
    /* Open MPI splits its agent's command line at spaces. */
    if (strchr(lb->self, ' '))
        return anvil_fail("the anvil binary's path '%s' has a space, which Open MPI's rsh agent cannot take",
                          lb->self), NULL;
    char prefix[32], subnet[32], agent[PATH_MAX + 64], tcp[64], oob[64];
    anvil_simhosts_prefix(&lb->sim, prefix, sizeof prefix);
    anvil_simhosts_subnet(&lb->sim, subnet, sizeof subnet);
    snprintf(agent, sizeof agent, "OMPI_MCA_plm_rsh_agent=%s sim-host-rsh %s", lb->self, prefix);
    snprintf(tcp, sizeof tcp, "OMPI_MCA_btl_tcp_if_include=%s", subnet);
    snprintf(oob, sizeof oob, "OMPI_MCA_oob_tcp_if_include=%s", subnet);
    const char *ours[] = {agent, "OMPI_MCA_pml=ob1", "OMPI_MCA_btl=self,vader,tcp", tcp, oob};
    size_t nours = sizeof ours / sizeof *ours, n = 0, k = 0;
    while (envp[n]) n++;
    char **v = calloc(n + nours + 1, sizeof *v);
    bool ok = v != NULL;
    for (size_t i = 0; ok && i < nours; i++) ok = (v[k++] = strdup(ours[i])) != NULL;
    for (size_t i = 0; ok && i < n; i++)
        if (!sets_one_of(envp[i], ours, nours)) ok = (v[k++] = strdup(envp[i])) != NULL;
    if (ok) return v;
    free_argv(v);
    return anvil_fail("out of memory"), NULL;
}

/* For an attempt on simulated hosts 0 to H-1: the launcher's --hosts (each one's address and slots)
 * into hosts, and STATE/jobs/<id>/simhosts_<attempt>, one "NETNS ADDRESS LINK" line a host, which
 * says that the attempt runs on them (inject, describe). 0, or -1 after anvil_fail. */
static int sim_hosts_of(const local_backend *lb, const anvil_attempt_spec *a, anvil_strbuf *hosts) {
    anvil_strbuf file = {0};
    for (int k = 0; k < a->hosts; k++) {
        char netns[32], addr[32], link[32];
        anvil_simhosts_netns(&lb->sim, k, netns, sizeof netns);
        anvil_simhosts_addr(&lb->sim, k, addr, sizeof addr);
        anvil_simhosts_link(&lb->sim, k, link, sizeof link);
        anvil_strbuf_printf(hosts, "%s%s:%d", k ? "," : "", addr, a->procs_per_host);
        anvil_strbuf_printf(&file, "%s %s %s\n", netns, addr, link);
    }
    char path[PATH_MAX];
    anvil_attempt_file(lb->state_dir, &a->ref, "simhosts", path, sizeof path);
    int rc = hosts->oom || file.oom ? -1 : anvil_write_file_atomic(path, file.s, file.len);
    anvil_strbuf_free(&file);
    return rc;
}

/* Host k of attempt a, from its simhosts file: 0 with its namespace, address and link (32 bytes each),
 * 1 when the attempt has no host k, 2 when it does not run on simulated hosts. */
static int sim_host(const local_backend *lb, const anvil_attempt_ref *a, int k, char *netns, char *addr,
                    char *link) {
    char path[PATH_MAX], *text;
    size_t len;
    anvil_attempt_file(lb->state_dir, a, "simhosts", path, sizeof path);
    if (anvil_read_file_max(path, 1 << 16, &text, &len)) return 2;
    int rc = 1;
    char *save, *line = strtok_r(text, "\n", &save);
    for (int i = 0; line && rc; i++, line = strtok_r(NULL, "\n", &save))
        if (i == k && sscanf(line, "%31s %31s %31s", netns, addr, link) == 3) rc = 0;
    free(text);
    return rc;
}

static int local_start(anvil_backend *b, const anvil_attempt_spec *a, anvil_attempt_record_fn record, void *ctx) {
    local_backend *lb = local_of(b);
    if (a->hosts != 1 && !lb->sim.n)
        return anvil_fail("the local backend runs jobs on 1 host (resources.hosts is %d): run anvil serve --backend slurm "
                          "for more, or --sim-hosts N to simulate them", a->hosts);
    if (a->hosts > lb->sim.n && a->hosts != 1)
        return anvil_fail("resources.hosts is %d, more than the %d simulated hosts of this daemon (anvil serve "
                          "--sim-hosts)", a->hosts, lb->sim.n);
    /* One host needs no network: it runs as on a daemon without simulated hosts. */
    bool sim = a->hosts > 1;
    char dir[PATH_MAX], logs[PATH_MAX], log[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/jobs/%lld", lb->state_dir, (long long)a->ref.job_id);
    snprintf(logs, sizeof logs, "%s/logs", a->run_dir);
    snprintf(log, sizeof log, "%s/launcher.log", logs);
    anvil_strbuf hosts = {0};
    char **envp = NULL, **argv = NULL;
    int rc = anvil_mkdir_p(dir) || anvil_mkdir_p(logs) ? -1 : 0;
    if (!rc && sim) rc = sim_hosts_of(lb, a, &hosts) || !(envp = sim_envp(lb, a->envp)) ? -1 : 0;
    if (!rc && !(argv = wrapper_argv(lb, a, sim ? hosts.s : NULL))) rc = anvil_fail("out of memory");
    if (!rc) rc = anvil_attempt_spawn(lb->self, argv, envp ? envp : a->envp, a->run_dir, log, "", record, ctx);
    free_argv(argv);
    free_argv(envp);
    anvil_strbuf_free(&hosts);
    return rc;
}

/* Whether the wrapper, sid, is this daemon's child and still running; one that has ended is reaped
 * (its word is the exit file). It is this daemon's child unless an earlier daemon started it, and it
 * is reaped by pid, so no other child of the daemon (a hook's command) is reaped by mistake. A child
 * not yet reaped counts even before it has run setsid() (on a loaded machine it may not have run since
 * the fork), when its session has no process yet; its pid cannot have been reused. */
static bool child_running(pid_t sid) { return sid && waitpid(sid, NULL, WNOHANG) == 0; }

/* Once attempt a has ended: the links that net-cut took down in it up again, before the supervisor may
 * start a retry. 0, or -1 after anvil_fail (the next poll tries again). */
static int restore_links(const local_backend *lb, const anvil_attempt_ref *a) {
    char path[PATH_MAX], *text;
    size_t len;
    anvil_attempt_file(lb->state_dir, a, "netcut", path, sizeof path);
    if (access(path, F_OK)) return 0;
    if (anvil_read_file_max(path, 1 << 16, &text, &len)) return -1;
    int rc = 0;
    char *save;
    /* A link that is gone (its hosts removed with the daemon that made them) has nothing to bring back. */
    for (char *link = strtok_r(text, "\n", &save); link && !rc; link = strtok_r(NULL, "\n", &save))
        rc = anvil_simhosts_set_link(link, true) < 0 ? -1 : 0;
    free(text);
    if (!rc && unlink(path)) rc = anvil_fail("%s: %s", path, strerror(errno));
    return rc;
}

static int local_poll(anvil_backend *b, const anvil_attempt_ref *a, int *code) {
    pid_t sid = session_of(a);
    bool child = child_running(sid);
    /* The session first, then the exit file, which the wrapper writes before it exits; the other
     * order could take an attempt ending between the two looks for a lost one. */
    bool alive = child || (sid && session_signal(sid, 0) > 0);
    *code = anvil_attempt_read_exit(local_of(b)->state_dir, a);
    int state = *code >= 0 ? ANVIL_ATTEMPT_EXITED : alive ? ANVIL_ATTEMPT_RUNNING : ANVIL_ATTEMPT_LOST;
    return state != ANVIL_ATTEMPT_RUNNING && restore_links(local_of(b), a) ? -1 : state;
}

/* SIGTERM to the wrapper's process group (the wrapper and the launcher; mpirun and the ranks have
 * groups of their own): the wrapper ignores it and the launcher turns it into SIGUSR1 for the ranks. */
static int local_stop(anvil_backend *b, const anvil_attempt_ref *a) {
    (void)b;
    pid_t sid = session_of(a);
    if (sid && kill(-sid, SIGTERM) && errno != ESRCH)
        return anvil_fail("job %lld: cannot signal process group %d: %s", (long long)a->job_id, (int)sid,
                          strerror(errno));
    return 0;
}

static int local_kill(anvil_backend *b, const anvil_attempt_ref *a) {
    (void)b;
    pid_t sid = session_of(a);
    if (child_running(sid)) kill(sid, SIGKILL);
    if (sid) session_signal(sid, SIGKILL);
    return 0;
}

/* Nothing is kept between attempts on this machine. */
static int local_describe(anvil_backend *b, const anvil_attempt_ref *a, cJSON *o) {
    (void)b;
    (void)a;
    (void)o;
    return 0;
}

/* The session and its live processes, and the simulated hosts of an attempt that runs on them. */
static int local_attempt_facts(anvil_backend *b, const anvil_attempt_ref *a, cJSON *o) {
    pid_t sid = session_of(a);
    if (!sid) return 0;
    if (!cJSON_AddNumberToObject(o, "session", sid) || !cJSON_AddNumberToObject(o, "processes", session_signal(sid, 0)))
        return anvil_fail("out of memory");
    char netns[32], addr[32], link[32];
    cJSON *hosts = NULL;
    for (int k = 0; !sim_host(local_of(b), a, k, netns, addr, link); k++) {
        cJSON *h = cJSON_CreateObject();
        if (!hosts && !(hosts = cJSON_AddArrayToObject(o, "sim_hosts"))) return anvil_fail("out of memory");
        if (!h || !cJSON_AddItemToArray(hosts, h) || !cJSON_AddStringToObject(h, "netns", netns) ||
            !cJSON_AddStringToObject(h, "address", addr) || !cJSON_AddStringToObject(h, "link", link)) {
            cJSON_Delete(h);
            return anvil_fail("out of memory");
        }
    }
    return 0;
}

/* Every process of the attempt's session is this machine's to see and to end: SIGKILL to whatever is
 * left of it (a rank that outlived its launcher), until none is alive. */
static int local_fence(anvil_backend *b, const anvil_attempt_ref *a, double ended_at, char *why, size_t cap) {
    (void)b;
    (void)ended_at;
    why[0] = 0;
    pid_t sid = session_of(a);
    int left = sid ? session_signal(sid, SIGKILL) : 0;
    if (!left && child_running(sid) && !kill(sid, SIGKILL)) left = 1;
    if (left) snprintf(why, cap, "%d process(es) of its session %d are still alive (killed)", left, (int)sid);
    return left > 0;
}

/* The rank a process of an attempt is, from the OMPI_COMM_WORLD_RANK that mpirun gave it; -1 for the
 * wrapper, the launcher and mpirun's own processes. */
static int rank_of(pid_t pid) {
    enum { CAP = 1 << 20 }; /* the kernel's limit on an environment is larger, but no rank's is near it */
    char path[64], *env = malloc(CAP);
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    int fd = env ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    size_t len = 0;
    for (ssize_t got = 1; fd >= 0 && got > 0 && len < CAP - 1; len += got > 0 ? (size_t)got : 0)
        got = read(fd, env + len, CAP - 1 - len);
    if (fd >= 0) close(fd);
    if (env) env[len] = 0;
    int rank = -1;
    static const char key[] = "OMPI_COMM_WORLD_RANK=";
    for (char *p = env; env && p < env + len && rank < 0; p += strlen(p) + 1)
        if (!strncmp(p, key, sizeof key - 1)) rank = atoi(p + sizeof key - 1);
    free(env);
    return rank;
}

typedef struct {
    int first, last, sig, hit;
} rank_signal;

static void signal_rank(pid_t pid, void *ctx) {
    rank_signal *r = ctx;
    int rank = rank_of(pid);
    if (rank >= r->first && rank <= r->last && !kill(pid, r->sig)) r->hit++;
}

/* Sends sig to every live rank of session sid in [first, last]; the number signalled. */
static int signal_ranks(pid_t sid, int first, int last, int sig) {
    rank_signal r = {first, last, sig, 0};
    session_each(sid, signal_rank, &r);
    return r.hit;
}

/* net-cut: host target of an attempt on simulated hosts cut off the network until the attempt ends (poll
 * brings it back). Its link is named in STATE/jobs/<id>/netcut_<attempt> before it goes down, so that a
 * daemon killed in between still brings it back up. */
static int cut_host(const local_backend *lb, const anvil_attempt_ref *a, int target, char *done, size_t cap) {
    char netns[32], addr[32], link[32], path[PATH_MAX], line[40];
    int rc = sim_host(lb, a, target, netns, addr, link);
    if (rc) {
        if (rc == 2) snprintf(done, cap, "attempt %d does not run on simulated hosts (anvil serve --sim-hosts N, "
                                         "resources.hosts 2 or more)", a->attempt);
        else snprintf(done, cap, "attempt %d has no host %d", a->attempt, target);
        return rc;
    }
    anvil_attempt_file(lb->state_dir, a, "netcut", path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644), n = snprintf(line, sizeof line, "%s\n", link);
    if (fd < 0) return anvil_fail("%s: %s", path, strerror(errno));
    rc = anvil_write_all(fd, line, (size_t)n, path);
    close(fd);
    if (!rc && (rc = anvil_simhosts_set_link(link, false)) > 0) {
        snprintf(done, cap, "host %d's link %s is gone (its simulated hosts were removed)", target, link);
        return 1;
    }
    if (rc) return -1;
    snprintf(done, cap, "host %d (%s, namespace %s) cut off the network: link %s down until the attempt ends", target,
             addr, netns, link);
    return 0;
}

/* On this machine every process of the attempt is in its session: a rank is found by its rank number,
 * and a host is the ranks of its slice of the launch (its namespace's, on simulated hosts). */
static int local_inject(anvil_backend *b, const anvil_attempt_ref *a, int kind, int target, int per_host, char *done,
                        size_t cap) {
    pid_t sid = session_of(a);
    if (!sid || session_signal(sid, 0) == 0) {
        snprintf(done, cap, "the attempt has no process left");
        return 1;
    }
    if (kind == ANVIL_FAULT_NET_CUT) return cut_host(local_of(b), a, target, done, cap);
    if (kind == ANVIL_FAULT_KILL_ATTEMPT) {
        local_kill(b, a);
        snprintf(done, cap, "every process of session %d killed (SIGKILL)", (int)sid);
        return 0;
    }
    bool host = kind == ANVIL_FAULT_HOST_LOST;
    int first = host ? target * per_host : target, last = host ? first + per_host - 1 : target;
    int sig = kind == ANVIL_FAULT_STOP_RANK ? SIGSTOP : SIGKILL;
    int n = signal_ranks(sid, first, last, sig);
    if (!n) {
        snprintf(done, cap, "no %s %d is running in session %d", host ? "host" : "rank", target, (int)sid);
        return 1;
    }
    if (host) snprintf(done, cap, "host %d lost: its %d rank(s), %d to %d, killed (SIGKILL)", target, n, first, last);
    else snprintf(done, cap, "rank %d %s (%s)", target, sig == SIGSTOP ? "frozen" : "killed",
                  sig == SIGSTOP ? "SIGSTOP" : "SIGKILL");
    return 0;
}

static void local_free(anvil_backend *b) {
    local_backend *lb = local_of(b);
    if (!lb) return;
    free(lb->state_dir);
    free(lb->self);
    free(lb);
}

static const anvil_backend_ops local_ops = {
    .name = "local",
    .start = local_start,
    .poll = local_poll,
    .stop = local_stop,
    .kill = local_kill,
    .describe = local_describe,
    .attempt_facts = local_attempt_facts,
    .fence = local_fence,
    .inject = local_inject,
    .free = local_free,
};

anvil_backend *anvil_backend_local_new(const char *state_dir, const char *self, const anvil_simhosts *sim) {
    local_backend *lb = calloc(1, sizeof *lb);
    if (!lb || !(lb->state_dir = strdup(state_dir)) || !(lb->self = strdup(self))) {
        if (lb) local_free(&lb->base);
        anvil_fail("local backend: out of memory");
        return NULL;
    }
    if (sim) lb->sim = *sim;
    lb->base.ops = &local_ops;
    return &lb->base;
}
