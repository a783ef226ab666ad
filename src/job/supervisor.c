#include "job/supervisor.h"

#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/completion.h"
#include "core/error.h"
#include "core/exit.h"
#include "core/fsutil.h"
#include "core/json.h"
#include "core/strbuf.h"
#include "job/audit.h"
#include "job/auth.h"
#include "job/policy.h"
#include "job/spec.h"
#include "obs/heartbeat.h"

extern char **environ;

#define MAX_BACKENDS 4

struct anvil_supervisor {
    anvil_store *st;
    anvil_backend *backends[MAX_BACKENDS]; /* the daemon's own first */
    int nbackends;
    anvil_supervisor_options o;
    int active; /* during a tick: jobs Starting, Running or Stopping */
    /* Held through a tick and through a stop request, so neither overwrites the other's change. */
    pthread_mutex_t lock;
};

static const unsigned active_mask = 1u << ANVIL_JOB_PENDING | 1u << ANVIL_JOB_STARTING | 1u << ANVIL_JOB_RUNNING |
                                    1u << ANVIL_JOB_STOPPING;

static anvil_backend *named(anvil_backend *const *backends, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(backends[i]->ops->name, name)) return backends[i];
    return NULL;
}

anvil_supervisor *anvil_supervisor_new(anvil_store *st, anvil_backend *const *backends, int n,
                                       const anvil_supervisor_options *o) {
    if (o->grace_s < 0 || o->max_running < 0) {
        anvil_fail("supervisor: the stop grace and the most jobs running must be >= 0");
        return NULL;
    }
    if (n < 1 || n > MAX_BACKENDS) {
        anvil_fail("supervisor: 1 to %d backends, not %d", MAX_BACKENDS, n);
        return NULL;
    }
    anvil_job *jobs;
    int njobs;
    if (anvil_store_list(st, active_mask, &jobs, &njobs)) return NULL;
    for (int i = 0; i < njobs; i++)
        if (jobs[i].handle[0] && !named(backends, n, jobs[i].backend)) {
            anvil_fail("job %lld has an attempt running on the %s backend; this daemon runs the %s backend",
                       (long long)jobs[i].id, jobs[i].backend, backends[0]->ops->name);
            anvil_job_list_free(jobs, njobs);
            return NULL;
        }
    anvil_job_list_free(jobs, njobs);
    anvil_supervisor *sup = calloc(1, sizeof *sup);
    if (!sup) {
        anvil_fail("supervisor: out of memory");
        return NULL;
    }
    sup->st = st;
    memcpy(sup->backends, backends, sizeof *backends * (size_t)n);
    sup->nbackends = n;
    sup->o = *o;
    pthread_mutex_init(&sup->lock, NULL);
    return sup;
}

anvil_backend *anvil_supervisor_backend(anvil_supervisor *sup) { return sup->backends[0]; }

anvil_backend *anvil_supervisor_backend_named(anvil_supervisor *sup, const char *name) {
    return named(sup->backends, sup->nbackends, name);
}

/* The backend of the job's attempts: the one recorded with its last, else the daemon's own. */
static anvil_backend *backend_of(anvil_supervisor *sup, const anvil_job *j) {
    anvil_backend *b = j->backend[0] ? anvil_supervisor_backend_named(sup, j->backend) : NULL;
    return b ? b : sup->backends[0];
}

void anvil_supervisor_free(anvil_supervisor *sup) {
    if (!sup) return;
    pthread_mutex_destroy(&sup->lock);
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

/* The current attempt's last heartbeat (obs/heartbeat.h): 0 with *hb, or 1 when it has written
 * none (one left by an earlier attempt does not count). */
static int heartbeat_of(const anvil_job *j, anvil_heartbeat *hb) {
    int rc = anvil_heartbeat_read(j->run_dir, hb);
    /* A heartbeat caught mid-rename or damaged is no beat; the next one will be read. */
    return rc == 0 && hb->time > j->started_at ? 0 : 1;
}

/* A job without hang_timeout_s gets one from what its run expects of the phase it is in (the heartbeat's
 * expect_s: the slowest so far, or an allowance before that): a few times that, never below a floor
 * that a loaded machine's stalls stay under; none for a writer that says nothing. why: how it was
 * derived. */
static double derived_hang_timeout(const anvil_heartbeat *hb, char *why, size_t cap) {
    if (!(hb->expect_s > 0)) return 0;
    double t = ANVIL_HANG_FACTOR * hb->expect_s;
    if (t < ANVIL_HANG_FLOOR_S) t = ANVIL_HANG_FLOOR_S;
    snprintf(why, cap, "%g x the %.1f s its %s phase may take, at least %g s", ANVIL_HANG_FACTOR, hb->expect_s,
             hb->phase, ANVIL_HANG_FLOOR_S);
    return t;
}

/* The secondary status a running attempt's heartbeat phase stands for. */
static const char *phase_status(const char *phase) {
    static const char *const map[][2] = {{"health", "HealthCheck"},          {"loading", "Preparing"},
                                         {"training", "Training"},           {"checkpointing", "Checkpointing"},
                                         {"finishing", "Saving"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(phase, map[i][0])) return map[i][1];
    return NULL;
}

/* The reason of a failure from the attempt's launcher log: the last error line of a rank (it names
 * the cause: a file, a field), else the launcher's own last one (a signal, a host). */
static void last_error_line(const anvil_job *j, char *line, size_t cap) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/logs/launcher.log", j->run_dir);
    line[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    /* Only the tail matters: a long log is read from its last 64 KiB. */
    if (fseek(f, -65536, SEEK_END)) rewind(f);
    char buf[4096];
    bool from_rank = false;
    while (fgets(buf, sizeof buf, f)) {
        bool rank = !strncmp(buf, "[rank ", 6);
        if (!strstr(buf, "error:") || (from_rank && !rank)) continue;
        buf[strcspn(buf, "\r\n")] = 0;
        snprintf(line, cap, "%.500s", buf);
        from_rank = rank;
    }
    fclose(f);
}

static int save(anvil_supervisor *sup, const anvil_job *j, const char *message) {
    return anvil_store_update(sup->st, j, message);
}

static anvil_attempt_ref attempt_of(const anvil_job *j) {
    return (anvil_attempt_ref){.job_id = j->id, .attempt = j->attempt, .handle = j->handle};
}

/* Attempt n of job j as ANVIL_ATTEMPT names it to the attempt, and its completion record to the daemon. */
static void attempt_name(const anvil_job *j, int n, char *buf, size_t cap) {
    snprintf(buf, cap, "%lld.%d", (long long)j->id, n);
}

/* The attempt's command line and environment. */
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

/* skip_health: the attempt before passed the pre-flight health check on the same hosts moments ago. */
static void build_cmdline(const anvil_supervisor *sup, const anvil_job *j, const anvil_job_spec *s, bool skip_health,
                          cmdline *c) {
    char id[32], attempt[48];
    snprintf(id, sizeof id, "%lld", (long long)j->id);
    attempt_name(j, j->attempt, attempt, sizeof attempt);
    for (int i = 0; i < s->argc; i++) push(&c->argv, &c->argc, s->argv[i], &c->oom);
    push(&c->argv, &c->argc, "--out", &c->oom);
    push(&c->argv, &c->argc, j->run_dir, &c->oom);
    /* A retry continues from the last checkpoint; a command that names its own --resume keeps it. */
    if (j->attempt > 1 && !strcmp(s->argv[0], "train") && !has_arg(s, "--resume")) {
        push(&c->argv, &c->argc, "--resume", &c->oom);
        push(&c->argv, &c->argc, "auto", &c->oom);
    }
    if (skip_health && !strcmp(s->argv[0], "train") && !has_arg(s, "--no-health"))
        push(&c->argv, &c->argc, "--no-health", &c->oom);
    for (int i = 0; i < s->nmetrics; i++) {
        push(&c->argv, &c->argc, "--metric", &c->oom);
        pushf(&c->argv, &c->argc, &c->oom, "%s=%s", s->metrics[i].key, s->metrics[i].value);
    }
    /* What the job inherits of the daemon's environment, its role's object storage, then the spec's
     * (which wins, and holds the role's variables), the channels and the job's id. */
    for (char **e = environ; *e; e++) {
        bool dropped = !anvil_job_env_inherited(*e);
        size_t klen = strcspn(*e, "=");
        for (int i = 0; i < s->nenv && !dropped; i++)
            dropped = strlen(s->env[i].key) == klen && !strncmp(*e, s->env[i].key, klen);
        if (!dropped) push(&c->envp, &c->envc, *e, &c->oom);
    }
    char **s3 = anvil_objstore_env(sup->o.objstore, j->role);
    for (size_t i = 0; s3 && s3[i]; i++) push(&c->envp, &c->envc, s3[i], &c->oom);
    if (!s3) c->oom = true;
    anvil_objstore_env_free(s3);
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
    /* Whose completion record counts (ckpt/completion.h), and where a command without --out writes it. */
    pushf(&c->envp, &c->envc, &c->oom, "ANVIL_ATTEMPT=%s%s", attempt, "");
    pushf(&c->envp, &c->envc, &c->oom, "ANVIL_RUN_DIR=%s%s", j->run_dir, "");
    /* A retry's --ckpt-every auto plans for the failures the job has seen: its time since its first
     * start over the attempts that ended before this one (train/ckpt_auto.h). */
    if (j->attempt > 1 && j->first_started_at > 0) {
        char mtbf[32];
        snprintf(mtbf, sizeof mtbf, "%.3f", (anvil_store_now() - j->first_started_at) / (j->attempt - 1));
        pushf(&c->envp, &c->envc, &c->oom, "ANVIL_MTBF_S=%s%s", mtbf, "");
    }
}

/* ANVIL_JOB_PREFIXES: the role's local prefixes, one a line, with which the job checks the files it
 * reads inside them (core/confine.h); none when the role is gone (the run folder alone then). A job
 * from before roles is not confined. 0, or -1 after anvil_fail. */
static int push_prefixes(const anvil_supervisor *sup, const anvil_job *j, cmdline *c) {
    if (!j->role[0]) return 0;
    anvil_role r;
    int rc = anvil_auth_get_role(sup->st, j->role, NULL, &r);
    if (rc < 0) return -1;
    anvil_strbuf t = {0};
    anvil_strbuf_puts(&t, "ANVIL_JOB_PREFIXES=");
    const char *sep = "";
    for (int k = 0; !rc && k < r.ninput + r.noutput; k++) {
        const char *p = k < r.ninput ? r.input[k] : r.output[k - r.ninput];
        if (strncmp(p, "s3://", 5)) anvil_strbuf_printf(&t, "%s%s", sep, p), sep = "\n";
    }
    if (!rc) anvil_role_free(&r);
    if (!t.oom) push(&c->envp, &c->envc, t.s, &c->oom);
    bool oom = t.oom || c->oom;
    anvil_strbuf_free(&t);
    return oom ? anvil_fail("out of memory") : 0;
}

typedef struct {
    anvil_supervisor *sup;
    anvil_backend *backend;
    anvil_job *job;
    const char *note; /* for the history: what the fence of the attempt before gave up on, or NULL */
} started;

/* The backend's record callback: the attempt is Running under its handle before it runs anything. */
static int record_start(void *ctx, const char *handle) {
    started *s = ctx;
    anvil_job *j = s->job;
    if (!set_text(&j->handle, handle) || !set_text(&j->backend, s->backend->ops->name) ||
        !set_text(&j->secondary, "Launching"))
        return anvil_fail("out of memory");
    j->started_at = anvil_store_now();
    if (!j->first_started_at) j->first_started_at = j->started_at;
    j->status = ANVIL_JOB_RUNNING;
    if (!save(s->sup, j, s->note)) return 0;
    /* Not stored: the job is as before, and the tick that failed it must see no attempt. */
    set_text(&j->handle, "");
    j->status = ANVIL_JOB_STARTING;
    return -1;
}

/* What backend b knows of attempt a as it ends, as JSON text to keep with it (malloc'd; NULL: none).
 * Facts are for people: one the backend cannot get now is left out, and the job goes on. */
static char *facts_text(anvil_backend *b, const anvil_attempt_ref *a) {
    cJSON *o = cJSON_CreateObject();
    if (o && b->ops->attempt_facts) b->ops->attempt_facts(b, a, o);
    char *text = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return text;
}

/* The secondary status of a retry that waits until the attempt before it is fenced. */
static const char fencing[] = "Fencing";

/* Before a retry starts: the attempt before it fenced, so that no process of it can write the run folder
 * once the retry runs. The backend ends what is left of it and says when none of it can run any more (or
 * what it gave up waiting on, into note); then the run folder's locks must be free: the holder of RUN/lock,
 * the one process of an attempt that writes what a retry reads, and every rank, each of which holds
 * RUN/ranks.lock shared (its checkpoint shards), are gone, however they ended (the kernel, or a shared
 * filesystem's lock manager, drops a lock with its holder), and no lock is ever taken over. 0 when
 * fenced; 1 while the job waits (secondary Fencing, the reason in its history once); -1 after anvil_fail. */
static int fence_previous(anvil_supervisor *sup, anvil_job *j, char *note, size_t cap) {
    anvil_job_attempt *at;
    int n, rc = 0;
    char why[800] = "";
    note[0] = 0;
    if (anvil_store_attempts(sup->st, j->id, &at, &n)) return -1;
    const anvil_job_attempt *prev = NULL;
    for (int i = 0; i < n; i++)
        if (at[i].attempt < j->attempt) prev = &at[i];
    anvil_backend *b = prev ? anvil_supervisor_backend_named(sup, prev->backend) : NULL;
    if (b && b->ops->fence) {
        anvil_attempt_ref a = {.job_id = j->id, .attempt = prev->attempt, .handle = prev->handle};
        rc = b->ops->fence(b, &a, prev->ended_at, why, sizeof why);
        if (!rc && why[0]) snprintf(note, cap, "attempt %d fenced, but: %s", prev->attempt, why);
        /* The backend has the attempt's last word now (Slurm's final state of its job). */
        char *facts = rc ? NULL : facts_text(b, &a);
        if (facts && anvil_store_attempt_facts(sup->st, j->id, prev->attempt, facts)) rc = -1;
        free(facts);
    }
    int before = prev ? prev->attempt : j->attempt - 1;
    anvil_job_attempts_free(at, n);
    char holder[256];
    int held = rc ? 0 : anvil_lock_probe(j->run_dir, holder, sizeof holder);
    if (held > 0)
        snprintf(why, sizeof why, "%s/lock is held by %s", j->run_dir, holder);
    /* Every rank holds the shared lock: one other than rank 0 (on a lost node, say) may outlive it. */
    else if (!held && !rc && (held = anvil_lock_probe_shared(j->run_dir)) > 0)
        snprintf(why, sizeof why, "%s/ranks.lock is held by a rank of attempt %d", j->run_dir, before);
    if (held < 0) return -1;
    if (held) rc = 1;
    if (rc != 1 || !strcmp(j->secondary, fencing)) return rc;
    char message[1000];
    snprintf(message, sizeof message, "attempt %d waits until no process of attempt %d can write the run folder: %s",
             j->attempt, before, why);
    if (!set_text(&j->secondary, fencing)) return anvil_fail("out of memory");
    return save(sup, j, message) ? -1 : 1;
}

/* Seconds since the attempt before j's current one ended having passed the pre-flight health check
 * (its heartbeat reached the training phase, which comes after the check), or -1. */
static double healthy_before(anvil_supervisor *sup, const anvil_job *j) {
    anvil_job_attempt *at;
    anvil_job_event *ev;
    int na, ne;
    double ago = -1;
    if (j->attempt < 2 || anvil_store_attempts(sup->st, j->id, &at, &na)) return -1;
    const anvil_job_attempt *prev = NULL;
    for (int i = 0; i < na; i++)
        if (at[i].attempt == j->attempt - 1) prev = &at[i];
    if (prev && prev->ended_at > 0 && !anvil_store_history(sup->st, j->id, &ev, &ne)) {
        for (int i = 0; i < ne && ago < 0; i++)
            if (!strcmp(ev[i].secondary, "Training") && ev[i].at >= prev->started_at && ev[i].at <= prev->ended_at)
                ago = anvil_store_now() - prev->ended_at;
        anvil_job_events_free(ev, ne);
    }
    anvil_job_attempts_free(at, na);
    return ago;
}

/* A retry on this machine skips the pre-flight health check its attempt before passed this long ago:
 * a restart repeats only what it must. On Slurm the retry may run on other nodes, which are checked. */
#define HEALTH_FRESH_S 600.0

static int start_attempt(anvil_supervisor *sup, anvil_job *j) {
    char note[900] = "";
    if (j->attempt > 1) {
        int fenced = fence_previous(sup, j, note, sizeof note);
        if (fenced) return fenced < 0 ? -1 : 0;
    }
    /* A record left by an earlier attempt or job is not this attempt's word (it is refused by its name too). */
    if (anvil_completion_clear(j->run_dir)) return -1;
    anvil_job_spec spec;
    if (anvil_job_spec_parse(j->spec, strlen(j->spec), &spec)) return -1;
    anvil_backend *backend = spec.backend ? anvil_supervisor_backend_named(sup, spec.backend) : sup->backends[0];
    double healthy = backend && !strcmp(backend->ops->name, "local") ? healthy_before(sup, j) : -1;
    bool skip_health = healthy >= 0 && healthy < HEALTH_FRESH_S;
    if (skip_health)
        snprintf(note + strlen(note), sizeof note - strlen(note), "%sthe pre-flight health check skipped: attempt %d "
                 "passed it on this machine %.0f s ago", note[0] ? "; " : "", j->attempt - 1, healthy);
    cmdline c = {0};
    build_cmdline(sup, j, &spec, skip_health, &c);
    int rc = c.oom ? anvil_fail("out of memory") : push_prefixes(sup, j, &c);
    if (!rc) {
        /* Retries share max_runtime_s, counted from the first attempt's start (see advance). */
        double left = 0;
        if (spec.max_runtime_s > 0) {
            left = spec.max_runtime_s - (j->first_started_at ? anvil_store_now() - j->first_started_at : 0);
            if (left < 1) left = 1;
        }
        anvil_attempt_spec a = {.ref = attempt_of(j), .run_dir = j->run_dir, .hosts = spec.hosts,
                                .procs_per_host = spec.procs_per_host, .time_left_s = left,
                                .keep_alive_s = spec.keep_alive_s, .owner = j->role[0] ? j->role : j->owner,
                                .user = j->owner,
                                .argc = c.argc, .argv = c.argv, .envp = c.envp};
        started ctx = {sup, backend, j, note[0] ? note : NULL};
        rc = ctx.backend ? ctx.backend->ops->start(ctx.backend, &a, record_start, &ctx)
                         : anvil_fail("spec: backend: this daemon has no %s backend", spec.backend);
    }
    anvil_job_spec_free(&spec);
    free_strings(c.argv, c.argc);
    free_strings(c.envp, c.envc);
    return rc;
}

/* The secondary status of a retry after nodes failed the pre-flight check (ANVIL_ATTEMPT_UNHEALTHY). */
static const char health_retry[] = "Retrying (node health)";

/* The job's attempts that ended before the training because nodes failed the check: its history's
 * health retries. -1 after anvil_fail. */
static int health_retries(anvil_supervisor *sup, const anvil_job *j) {
    anvil_job_event *events;
    int n;
    if (anvil_store_history(sup->st, j->id, &events, &n)) return -1;
    int count = 0;
    for (int i = 0; i < n; i++) count += !strcmp(events[i].secondary, health_retry);
    anvil_job_events_free(events, n);
    return count;
}

/* facts_text of the job's current attempt. */
static char *attempt_facts_text(anvil_supervisor *sup, const anvil_job *j) {
    anvil_attempt_ref a = attempt_of(j);
    return facts_text(backend_of(sup, j), &a);
}

/* Stores the job's change with the end of its attempt `ended` (exit code, -1: none), judged as message. */
static int save_ended(anvil_supervisor *sup, const anvil_job *j, int ended, int code, const char *message,
                      const char *facts) {
    anvil_attempt_end e = {.attempt = ended, .exit_code = code, .outcome = message, .facts = facts};
    return anvil_store_update_ended(sup->st, j, message, &e);
}

/* An attempt that ran nothing of the job because nodes failed the pre-flight check: a new one, which
 * the backend starts without those nodes, however many retries max_retries allows, since no part of
 * the job failed. Each such attempt leaves at least one more node out, so there are no more of them than
 * the cluster has nodes; when too few are left, the next start fails the job with the backend's reason. */
static int retry_unhealthy(anvil_supervisor *sup, anvil_job *j, int code) {
    char *facts = attempt_facts_text(sup, j);
    int ended = j->attempt;
    j->exit_code = code;
    j->stop_deadline = 0;
    const char *message;
    if (!set_text(&j->handle, "")) {
        free(facts);
        return anvil_fail("out of memory");
    }
    if (j->stop != ANVIL_STOP_NONE) {
        j->status = ANVIL_JOB_STOPPED;
        j->ended_at = anvil_store_now();
        message = "stopped before the training began (nodes failed the pre-flight health check)";
    } else {
        j->status = ANVIL_JOB_STARTING;
        j->attempt++;
        message = "nodes failed the pre-flight health check and are left out (describe: backend excluded_nodes): "
                  "a new attempt, not counted in max_retries";
    }
    const char *secondary = j->stop == ANVIL_STOP_NONE      ? health_retry
                            : j->stop == ANVIL_STOP_RUNTIME ? "MaxRuntimeExceeded"
                                                            : "";
    j->stop = ANVIL_STOP_NONE;
    int rc = set_text(&j->secondary, secondary) ? save_ended(sup, j, ended, code, message, facts)
                                                : anvil_fail("out of memory");
    free(facts);
    return rc;
}

/* Why the attempt ended as it did: its exit status, or that it was lost, and the backend's line on it
 * (where a rank was first killed, a node's failure) or else the launcher log's last error line. */
static void attempt_cause(anvil_supervisor *sup, const anvil_job *j, int code, char *why, size_t cap) {
    char line[700];
    anvil_attempt_ref a = attempt_of(j);
    line[0] = 0;
    anvil_backend *b = backend_of(sup, j);
    if (b->ops->failure_line) b->ops->failure_line(b, &a, line, sizeof line);
    bool backend_knew = line[0] != 0;
    if (!line[0]) last_error_line(j, line, sizeof line);
    if (code < 0) snprintf(why, cap, "lost: no exit status of it counts (it ended while the daemon was down, was "
                                     "killed, or its backend saw a node fail)");
    else if (code > 128 && code < 160) snprintf(why, cap, "exit %d (signal %d)", code, code - 128);
    /* The trainer's checkpoint-and-stop answers a signal; one the service sent is a stop it asked for. */
    else if (code == ANVIL_EXIT_RESUMABLE && j->stop == ANVIL_STOP_NONE)
        snprintf(why, cap, "exit 75: stopped by a signal the service did not send (a preemption, a signal from "
                           "outside), after a checkpoint");
    else snprintf(why, cap, "exit %d", code);
    if (line[0]) snprintf(why + strlen(why), cap - strlen(why), ": %s", line);
    /* A lost node stops the heartbeat too, and the hang timeout may fire before Slurm declares the node
     * down: the loss the backend found is the cause, and what the node's exclusion follows. (A hang's own
     * kill leaves an attempt without an exit status too, which is no loss of the backend's finding.) */
    if (j->stop == ANVIL_STOP_HANG && code < 0 && backend_knew)
        snprintf(why + strlen(why), cap - strlen(why), " (the hang timeout had fired first: no heartbeat in %s/heartbeat.json)",
                 j->run_dir);
    else if (j->stop == ANVIL_STOP_HANG)
        snprintf(why, cap, "HangDetected: no heartbeat in %s/heartbeat.json within the hang timeout", j->run_dir);
}

/* The attempt's command's word that it finished (ckpt/completion.h): 0 with what the record says in text,
 * else -1 with why there is none to go by. */
static int completion_of(const anvil_job *j, char *text, size_t cap) {
    char name[48];
    anvil_completion r;
    anvil_job_spec spec;
    attempt_name(j, j->attempt, name, sizeof name);
    int rc = anvil_job_spec_parse(j->spec, strlen(j->spec), &spec);
    if (!rc) {
        rc = anvil_completion_verify(j->run_dir, name, spec.argv[0], &r);
        anvil_job_spec_free(&spec);
    }
    if (rc) {
        snprintf(text, cap, "%s", anvil_errmsg());
        return -1;
    }
    anvil_strbuf t = {0};
    anvil_strbuf_printf(&t, "%s finished (its completion record verified", r.command);
    if (r.step >= 0) anvil_strbuf_printf(&t, ": step %lld of %lld", r.step, r.target_steps);
    for (int i = 0; i < r.nfiles; i++)
        anvil_strbuf_printf(&t, "%s %s %llu bytes, CRC-32C %08x", i || r.step >= 0 ? "," : ":", r.files[i].name,
                            (unsigned long long)r.files[i].size, r.files[i].crc32c);
    anvil_strbuf_puts(&t, ")");
    snprintf(text, cap, "%s", t.oom ? "finished (its completion record verified)" : anvil_strbuf_text(&t));
    anvil_strbuf_free(&t);
    return 0;
}

/* The job's final status or its next attempt, once an attempt has ended with code (-1: lost). An exit
 * status says how its processes ended; Completed takes exit 0 and the command's own word, its completion
 * record, verified. Stopped takes a stop the service asked for (a user's, max_runtime_s), whatever the
 * exit. A usage or configuration error (exit 2, 78) is Failed at once: a retry runs the same command on
 * the same input, which cannot fix it. Anything else is a failure with its cause, retried by the job's policy: exit 75
 * without a stop request too, a stop someone else asked for. */
static int finish_attempt(anvil_supervisor *sup, anvil_job *j, int code) {
    anvil_job_spec spec;
    if (anvil_job_spec_parse(j->spec, strlen(j->spec), &spec)) return -1;
    int max_retries = spec.max_retries;
    anvil_job_spec_free(&spec);
    /* Retries after a failed health check are not the job's: max_retries counts the others. */
    int spared = health_retries(sup, j);
    if (spared < 0) return -1;
    int failures = j->attempt - spared, ended = j->attempt;
    char why[1000], done[700], verdict[1100], retrying[64];
    attempt_cause(sup, j, code, why, sizeof why);
    bool asked_stop = j->stop == ANVIL_STOP_REQUESTED || j->stop == ANVIL_STOP_RUNTIME;
    bool completed = j->stop == ANVIL_STOP_NONE && code == 0 && !completion_of(j, done, sizeof done);
    if (j->stop == ANVIL_STOP_NONE && code == 0 && !completed)
        snprintf(why, sizeof why, "exit 0, but not the command's word that it finished: %s", done);
    char *facts = attempt_facts_text(sup, j);
    j->exit_code = code;
    j->stop_deadline = 0;
    const char *secondary = "", *message = why;
    bool retry = false;
    if (asked_stop) {
        j->status = ANVIL_JOB_STOPPED;
        secondary = j->stop == ANVIL_STOP_RUNTIME ? "MaxRuntimeExceeded" : "";
        message = code == ANVIL_EXIT_RESUMABLE ? "stopped after writing a checkpoint (exit 75): resumable"
                                               : "stopped without a checkpoint";
    } else if (completed) {
        j->status = ANVIL_JOB_COMPLETED;
        snprintf(verdict, sizeof verdict, "exit 0: %s", done);
        message = verdict;
    } else if (j->stop == ANVIL_STOP_NONE && (code == ANVIL_EXIT_USAGE || code == ANVIL_EXIT_CONFIG)) {
        j->status = ANVIL_JOB_FAILED;
        snprintf(verdict, sizeof verdict, "%s, not retried (a retry cannot fix it): %s",
                 code == ANVIL_EXIT_USAGE ? "usage error" : "configuration or input error", why);
        message = verdict;
    } else if (failures <= max_retries) {
        retry = true;
        j->status = ANVIL_JOB_STARTING;
        snprintf(retrying, sizeof retrying, "Retrying (%d/%d)", failures, max_retries);
        secondary = retrying;
        j->attempt++;
    } else {
        j->status = ANVIL_JOB_FAILED;
        snprintf(verdict, sizeof verdict, "attempt %d of %d failed: %s", failures, max_retries + 1, why);
        message = verdict;
    }
    j->stop = ANVIL_STOP_NONE;
    if (!retry) j->ended_at = anvil_store_now();
    int rc = set_text(&j->handle, "") && set_text(&j->secondary, secondary) &&
                     (j->status != ANVIL_JOB_FAILED || set_text(&j->failure_reason, message))
                 ? save_ended(sup, j, ended, code, message, facts)
                 : anvil_fail("out of memory");
    free(facts);
    return rc;
}

/* Starts a stop: records the deadline of the SIGKILL, then sends the launcher SIGTERM. */
static int begin_stop(anvil_supervisor *sup, anvil_job *j, anvil_job_stop why, const char *secondary,
                      const char *message) {
    j->stop = why;
    j->status = ANVIL_JOB_STOPPING;
    j->stop_deadline = anvil_store_now() + sup->o.grace_s;
    if (!set_text(&j->secondary, secondary)) return anvil_fail("out of memory");
    if (save(sup, j, message)) return -1;
    anvil_attempt_ref a = attempt_of(j);
    anvil_backend *b = backend_of(sup, j);
    return b->ops->stop(b, &a);
}

/* A pending job waits while max_running jobs have attempts; it says so once. */
static int queued(anvil_supervisor *sup, anvil_job *j) {
    if (!sup->o.max_running || sup->active < sup->o.max_running) return 0;
    if (!strcmp(j->secondary, "Queued")) return 1;
    char message[128];
    snprintf(message, sizeof message, "waiting: %d jobs running, the most this daemon runs at once (--max-running)",
             sup->active);
    if (!set_text(&j->secondary, "Queued")) return anvil_fail("out of memory");
    return save(sup, j, message) ? -1 : 1;
}

/* The running attempt's secondary status, from the phase of its heartbeat. */
static int follow_phase(anvil_supervisor *sup, anvil_job *j, const anvil_heartbeat *hb) {
    const char *secondary = phase_status(hb->phase);
    if (!secondary || !strcmp(secondary, j->secondary)) return 0;
    char message[96];
    snprintf(message, sizeof message, "step %lld", (long long)hb->step);
    if (!set_text(&j->secondary, secondary)) return anvil_fail("out of memory");
    return save(sup, j, message);
}

static int advance(anvil_supervisor *sup, anvil_job *j) {
    if (j->status == ANVIL_JOB_PENDING) {
        int wait = queued(sup, j);
        if (wait) return wait < 0 ? -1 : 0;
        j->status = ANVIL_JOB_STARTING;
        j->attempt = 1;
        sup->active++;
        if (!set_text(&j->secondary, "Preparing")) return anvil_fail("out of memory");
        if (save(sup, j, "attempt 1")) return -1;
    }
    if (j->status == ANVIL_JOB_STARTING) return start_attempt(sup, j);
    anvil_attempt_ref a = attempt_of(j);
    anvil_backend *b = backend_of(sup, j);
    int code, state = b->ops->poll(b, &a, &code);
    if (state < 0) return -1;
    if (state == ANVIL_ATTEMPT_UNHEALTHY) return retry_unhealthy(sup, j, code);
    if (state != ANVIL_ATTEMPT_RUNNING) return finish_attempt(sup, j, state == ANVIL_ATTEMPT_EXITED ? code : -1);
    double now = anvil_store_now();
    anvil_job_spec spec;
    if (anvil_job_spec_parse(j->spec, strlen(j->spec), &spec)) return -1;
    double max_runtime = spec.max_runtime_s, hang = spec.hang_timeout_s;
    anvil_job_spec_free(&spec);
    if (j->stop != ANVIL_STOP_NONE) {
        if (j->stop_deadline == 0) {
            j->stop_deadline = now + sup->o.grace_s;
            if (save(sup, j, NULL)) return -1;
            return b->ops->stop(b, &a);
        }
        return now >= j->stop_deadline ? b->ops->kill(b, &a) : 0;
    }
    anvil_heartbeat hb;
    bool beating = heartbeat_of(j, &hb) == 0;
    char message[256];
    /* The limit covers the job, retries included, as SageMaker's MaxRuntimeInSeconds does. */
    double first = j->first_started_at ? j->first_started_at : j->started_at;
    if (max_runtime > 0 && now - first > max_runtime) {
        snprintf(message, sizeof message, "max_runtime_s (%g s) reached: checkpoint and stop", max_runtime);
        return begin_stop(sup, j, ANVIL_STOP_RUNTIME, "MaxRuntimeExceeded", message);
    }
    if (hang > 0 && now - (beating ? hb.time : j->started_at) > hang) {
        snprintf(message, sizeof message, "no progress for %g s: stopping for a retry", hang);
        return begin_stop(sup, j, ANVIL_STOP_HANG, "HangDetected", message);
    }
    char why[160];
    double derived = hang > 0 || !beating ? 0 : derived_hang_timeout(&hb, why, sizeof why);
    if (derived > 0 && now - hb.time > derived) {
        snprintf(message, sizeof message, "no progress for %.1f s (the hang timeout derived from the run: %s): stopping "
                 "for a retry", now - hb.time, why);
        return begin_stop(sup, j, ANVIL_STOP_HANG, "HangDetected", message);
    }
    return beating ? follow_phase(sup, j, &hb) : 0;
}

int anvil_supervisor_tick(anvil_supervisor *sup) {
    pthread_mutex_lock(&sup->lock);
    anvil_job *jobs;
    int n, rc = anvil_store_list(sup->st, active_mask, &jobs, &n);
    sup->active = 0;
    for (int i = 0; !rc && i < n; i++) sup->active += jobs[i].status != ANVIL_JOB_PENDING;
    for (int i = 0; !rc && i < n; i++) {
        anvil_job *j = &jobs[i];
        /* An attempt that could not be started fails the job, with the reason; trouble with a running
         * one (the store, the file system) is left for the next tick. */
        if (!advance(sup, j) || j->handle[0]) continue;
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
        if (j->status == ANVIL_JOB_PENDING || (j->status == ANVIL_JOB_STARTING && !j->handle[0])) {
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

/* Adds to o the items of the object facts whose keys o lacks (the job's own excluded_nodes stay the job's). */
static int merge_facts(cJSON *o, const cJSON *facts) {
    for (const cJSON *f = cJSON_IsObject(facts) ? facts->child : NULL; f; f = f->next) {
        if (cJSON_GetObjectItemCaseSensitive(o, f->string)) continue;
        cJSON *copy = cJSON_Duplicate(f, 1);
        if (!copy || !cJSON_AddItemToObject(o, f->string, copy)) {
            cJSON_Delete(copy);
            return anvil_fail("out of memory");
        }
    }
    return 0;
}

/* merge_facts of stored facts (JSON text; text that is no object adds nothing). */
static int add_facts(cJSON *o, const char *text) {
    cJSON *facts = anvil_json_parse_str(text);
    int rc = merge_facts(o, facts);
    cJSON_Delete(facts);
    return rc;
}

/* merge_facts of the running attempt's live facts. */
static int add_live_facts(anvil_backend *b, const anvil_attempt_ref *a, cJSON *o) {
    cJSON *facts = cJSON_CreateObject();
    int rc = facts ? b->ops->attempt_facts(b, a, facts) : anvil_fail("out of memory");
    if (!rc) rc = merge_facts(o, facts);
    cJSON_Delete(facts);
    return rc;
}

/* One attempt for describe: what the store keeps of it, and its facts (live while it runs). */
static cJSON *attempt_json(anvil_supervisor *sup, const anvil_job *j, const anvil_job_attempt *at) {
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddNumberToObject(o, "attempt", at->attempt) &&
              cJSON_AddStringToObject(o, "backend", at->backend) && cJSON_AddStringToObject(o, "handle", at->handle) &&
              cJSON_AddNumberToObject(o, "started_at", at->started_at) &&
              cJSON_AddNumberToObject(o, "ended_at", at->ended_at) &&
              cJSON_AddNumberToObject(o, "exit_code", at->exit_code) &&
              cJSON_AddStringToObject(o, "outcome", at->outcome);
    anvil_backend *b = anvil_supervisor_backend_named(sup, at->backend);
    bool live = !at->ended_at && at->attempt == j->attempt && j->handle[0];
    int rc = ok ? 0 : anvil_fail("out of memory");
    if (!rc && live && b && b->ops->attempt_facts) {
        anvil_attempt_ref a = attempt_of(j);
        rc = add_live_facts(b, &a, o);
    } else if (!rc) {
        rc = add_facts(o, at->facts);
    }
    if (rc) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *anvil_supervisor_attempts(anvil_supervisor *sup, const anvil_job *j) {
    anvil_job_attempt *at;
    int n;
    if (anvil_store_attempts(sup->st, j->id, &at, &n)) return NULL;
    cJSON *list = cJSON_CreateArray();
    int rc = list ? 0 : anvil_fail("out of memory");
    for (int i = 0; i < n && !rc; i++) {
        cJSON *e = attempt_json(sup, j, &at[i]);
        if (!e || !cJSON_AddItemToArray(list, e)) rc = -1;
    }
    anvil_job_attempts_free(at, n);
    if (rc) {
        cJSON_Delete(list);
        return NULL;
    }
    return list;
}

cJSON *anvil_supervisor_describe(anvil_supervisor *sup, const anvil_job *j) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "name", j->backend[0] ? j->backend : sup->backends[0]->ops->name)) {
        cJSON_Delete(o);
        anvil_fail("out of memory");
        return NULL;
    }
    anvil_attempt_ref a = attempt_of(j);
    anvil_backend *b = j->backend[0] ? anvil_supervisor_backend_named(sup, j->backend) : NULL;
    int rc = b ? b->ops->describe(b, &a, o) : 0;
    /* The attempt running now, live; else the last one as it ended, so that the job's end forgets nothing. */
    if (!rc && b && j->handle[0] && b->ops->attempt_facts) {
        rc = add_live_facts(b, &a, o);
    } else if (!rc && j->attempt > 0) {
        anvil_job_attempt *at;
        int n;
        rc = anvil_store_attempts(sup->st, j->id, &at, &n);
        if (!rc && n) rc = add_facts(o, at[n - 1].facts);
        if (!rc) anvil_job_attempts_free(at, n);
    }
    if (rc) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
