/* anvil chaos: faults on a schedule (job/chaos.h) against a running job of the job service. The
 * daemon's backend strikes the job's ranks and attempts (POST /v1/jobs/ID/faults); the daemon itself
 * and the run folder's disk are struck from here, on the daemon's machine, and so are the job's S3
 * requests, through a fault proxy in front of its S3 endpoint (tools/s3_faultproxy.py); each of
 * these is recorded the same way after. Each fault lands in the job's history, and the goodput
 * accounting (job goodput) prices it. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/exit.h"
#include "core/fsutil.h"
#include "core/json.h"
#include "core/proc_image.h"
#include "core/rng.h"
#include "job/chaos.h"
#include "obs/heartbeat.h"

static const char *usage =
    "usage: anvil chaos [--state DIR | --url URL] [--token-file F] ID\n"
    "                   (--schedule TEXT | --mtbf S [--duration S] [--kinds K,K,...]) [--seed N]\n"
    "                   [--fill-max BYTES] [--s3-proxy URL] [--no-wait]\n"
    "\n"
    "Strikes job ID of the job service with faults on a schedule, records each in the job's history,\n"
    "waits for the job to end and prints its goodput (anvil job goodput). Admins only; run it on the\n"
    "daemon's machine (the daemon and the run folder's disk are struck from here).\n"
    "\n"
    "  --schedule TEXT  events 'WHEN KIND[:TARGET]', comma-separated: WHEN is 30s, 2m or step:N (a\n"
    "                   step the attempt then running trained: one resumed past N, its first);\n"
    "                   KIND kill-rank, stop-rank (SIGKILL, SIGSTOP of a rank), kill-attempt,\n"
    "                   host-lost (every rank of a host), net-cut (a host's link down until the\n"
    "                   attempt ends: a job on anvil serve --sim-hosts), disk-full (the run\n"
    "                   folder's file system filled when the next checkpoint is written, until the\n"
    "                   attempt ends), daemon-kill (SIGKILL, then started again as it was), s3-503\n"
    "                   (the job's next S3 requests answered 503 SlowDown), s3-reset (its next S3\n"
    "                   transfers, GET bodies and PUT or part uploads, cut halfway by a TCP RST);\n"
    "                   TARGET a rank or host (host-lost, net-cut), or for s3-503 and s3-reset how\n"
    "                   many requests (default 5, 2)\n"
    "                   e.g. '20s kill-rank:1, step:300 stop-rank, 90s daemon-kill, step:500 s3-503:20'\n"
    "  --mtbf S         a random schedule instead: faults at exponential gaps of mean S seconds\n"
    "  --duration S     ... over S seconds (default 600)\n"
    "  --kinds LIST     ... of these kinds (default kill-rank,stop-rank,kill-attempt)\n"
    "  --seed N         draws the random schedule and every target not named (default 1)\n"
    "  --fill-max B     disk-full refuses a file system with more than B bytes free (default 8 GiB)\n"
    "  --s3-proxy URL   the S3 faults' proxy (tools/s3_faultproxy.py, steered by URL/__ctl/), in\n"
    "                   front of the job's S3 endpoint; needed by s3-503 and s3-reset, which each\n"
    "                   last until that many requests were struck or the attempt ends\n"
    "  --no-wait        return once the schedule is done, without waiting for the job\n"
    "\n"
    "A rank or attempt fault that finds nothing to strike (the job between attempts) is tried again\n"
    "every 0.2 s. On the Slurm backend the daemon signals ranks through a step on their node (srun\n"
    "--overlap); host-lost also kills the node's slurmd and starts it again once the job has left the\n"
    "node out: only where that slurmd runs on the daemon's machine (a test cluster), else refused.\n"
    "Exit status: 0 the job Completed, 3 it ended otherwise, 1 error, 2 bad usage, 4 the daemon\n"
    "refused a fault (one line says why: a net-cut of a job not on simulated hosts, a refused host-lost).\n";

typedef struct {
    client cl;
    int struck; /* the attempt that the last fault which ends attempts struck (0: none yet) */
    char path[64]; /* /v1/jobs/ID */
    int64_t id;
    int ranks, hosts;
    char run_dir[PATH_MAX];
    anvil_rng rng;
    double fill_max;
    const char *s3_proxy_arg; /* --s3-proxy, NULL when not given */
    char *s3_proxy;           /* its base URL without a trailing '/' (malloc'd) */
} chaos;

/* The job's status and attempt now; -1 when it cannot be read (its message printed). */
static int job_state(chaos *c, char *status, size_t cap, int *attempt) {
    cJSON *j;
    char path[96];
    snprintf(path, sizeof path, "%s?brief=1", c->path);
    if (client_call(&c->cl, "GET", path, NULL, &j)) return -1;
    snprintf(status, cap, "%s", client_str(j, "status"));
    if (attempt) *attempt = (int)client_num(j, "attempt");
    cJSON_Delete(j);
    return 0;
}

static bool ended(const char *status) {
    return !strcmp(status, "Completed") || !strcmp(status, "Failed") || !strcmp(status, "Stopped");
}

/* Records a fault the client carried out; 0, or the exit status. */
static int record(chaos *c, anvil_fault_kind kind, double at, const char *detail) {
    cJSON *o = cJSON_CreateObject(), *answer;
    cJSON_AddStringToObject(o, "kind", anvil_fault_kind_name(kind));
    cJSON_AddNumberToObject(o, "at", at);
    cJSON_AddStringToObject(o, "detail", detail);
    char *body = cJSON_PrintUnformatted(o), path[96];
    cJSON_Delete(o);
    snprintf(path, sizeof path, "%s/faults", c->path);
    int rc = body ? client_call(&c->cl, "POST", path, body, &answer) : (anvil_fail("out of memory"), cli_fail("chaos"));
    free(body);
    if (!rc) cJSON_Delete(answer);
    return rc;
}

static void say(anvil_fault_kind kind, int target, double at, const char *detail) {
    char t[32];
    time_t s = (time_t)at;
    struct tm tm;
    strftime(t, sizeof t, "%H:%M:%S", localtime_r(&s, &tm));
    if (target >= 0) printf("chaos: %s %s %d: %s\n", t, anvil_fault_kind_name(kind), target, detail);
    else printf("chaos: %s %s: %s\n", t, anvil_fault_kind_name(kind), detail);
    fflush(stdout);
}

/* What the schedule's steps answer when the job ended before them: not an exit status, which an error
 * in a step is. */
#define JOB_ENDED (-2)

/* A fault the daemon's backend carries out, tried until it strikes or the job ends: 0 when it struck,
 * JOB_ENDED when the job ended first, else the exit status. */
static int strike(chaos *c, anvil_fault_kind kind, int target) {
    char body[128], path[96];
    if (target >= 0) snprintf(body, sizeof body, "{\"kind\":\"%s\",\"target\":%d}", anvil_fault_kind_name(kind), target);
    else snprintf(body, sizeof body, "{\"kind\":\"%s\"}", anvil_fault_kind_name(kind));
    snprintf(path, sizeof path, "%s/faults", c->path);
    for (;;) {
        long code = 0;
        client_buffer b = {0};
        if (client_http(&c->cl, "POST", path, body, &code, &b)) {
            free(b.data);
            return cli_fail("chaos");
        }
        cJSON *o = code == 201 ? anvil_json_parse_str(b.data) : NULL;
        if (o) say(kind, target, client_num(o, "at"), client_str(o, "detail"));
        cJSON_Delete(o);
        int rc = code == 201 ? 0 : code == 409 ? -1 : client_refused(&c->cl, code, b.data);
        free(b.data);
        if (rc >= 0) return rc;
        char status[32];
        if (job_state(c, status, sizeof status, NULL)) return ANVIL_EXIT_ERROR;
        if (ended(status)) return JOB_ENDED;
        anvil_sleep(0.2);
    }
}

/* ---- the daemon killed and started again ---- */

/* The daemon's pid from its state folder's serve.pid; 0 after anvil_fail. */
static pid_t daemon_pid(const chaos *c) {
    char *dir = cli_state_dir(c->cl.state), path[PATH_MAX], *text = NULL;
    size_t len;
    if (!dir) return anvil_fail("out of memory"), 0;
    snprintf(path, sizeof path, "%s/serve.pid", dir);
    free(dir);
    if (anvil_read_file_max(path, 32, &text, &len)) return 0;
    long pid = atol(text);
    free(text);
    if (pid <= 1) return anvil_fail("%s: not a pid", path), 0;
    return (pid_t)pid;
}

static int daemon_kill(chaos *c) {
    pid_t pid = daemon_pid(c), again = 0;
    anvil_proc_image d;
    if (!pid || anvil_proc_capture(pid, &d)) return cli_fail("chaos");
    double at = anvil_epoch_now(), t0 = anvil_now();
    int rc = kill(pid, SIGKILL) ? anvil_fail("cannot kill daemon pid %d: %s", (int)pid, strerror(errno)) : 0;
    while (!rc && !anvil_proc_gone(pid) && anvil_now() - t0 < 30) anvil_sleep(0.02);
    if (!rc) rc = anvil_proc_respawn(&d, NULL);
    /* It is back once it answers, on the port its serve.port names now. */
    while (!rc && anvil_now() - t0 < 60) {
        again = daemon_pid(c);
        long code = 0;
        client_buffer b = {0};
        if (again && again != pid && !client_find_daemon(&c->cl) &&
            !client_http(&c->cl, "GET", "/v1/health", NULL, &code, &b) && code == 200) {
            free(b.data);
            break;
        }
        free(b.data);
        anvil_sleep(0.1);
    }
    anvil_proc_image_free(&d);
    if (rc) return cli_fail("chaos");
    if (anvil_now() - t0 >= 60) {
        anvil_fail("the daemon (%s) did not answer within 60 s of being started again", d.exe);
        return cli_fail("chaos");
    }
    char detail[200];
    snprintf(detail, sizeof detail, "daemon pid %d killed (SIGKILL), started again as pid %d, answering after %.1f s",
             (int)pid, (int)again, anvil_now() - t0);
    say(ANVIL_FAULT_DAEMON_KILL, -1, at, detail);
    return record(c, ANVIL_FAULT_DAEMON_KILL, at, detail);
}

/* ---- the disk filled ---- */

/* Waits (at most 20 s) for the heartbeat to say a checkpoint is being written. */
static void await_checkpoint(const chaos *c) {
    double t0 = anvil_now();
    anvil_heartbeat hb;
    while (anvil_now() - t0 < 20) {
        if (!anvil_heartbeat_read(c->run_dir, &hb) && !strcmp(hb.phase, "checkpointing")) return;
        anvil_sleep(0.005);
    }
}

/* Fills the run folder's file system with one file; its size, or -1 after anvil_fail. */
static double fill(const chaos *c, const char *path) {
    struct statvfs fs;
    if (statvfs(c->run_dir, &fs)) return anvil_fail("%s: statvfs: %s", c->run_dir, strerror(errno));
    double free_bytes = (double)fs.f_bavail * (double)fs.f_frsize;
    if (free_bytes > c->fill_max)
        return anvil_fail("disk-full: %s has %.0f bytes free, more than --fill-max %.0f: give the run folder a file "
                          "system of its own", c->run_dir, free_bytes, c->fill_max);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return anvil_fail("%s: cannot create: %s", path, strerror(errno));
    off_t size = (off_t)free_bytes;
    /* fallocate may refuse the last blocks a file system keeps for its own metadata: then write until full. */
    if (posix_fallocate(fd, 0, size)) {
        static char zeros[1 << 16];
        size = 0;
        for (ssize_t put; (put = write(fd, zeros, sizeof zeros)) > 0;) size += put;
    }
    close(fd);
    return (double)size;
}

static int disk_full(chaos *c) {
    char path[PATH_MAX + 32], status[32], detail[300];
    int attempt, now_attempt;
    snprintf(path, sizeof path, "%s/.anvil-chaos-fill", c->run_dir);
    if (job_state(c, status, sizeof status, &attempt)) return ANVIL_EXIT_ERROR;
    await_checkpoint(c);
    double at = anvil_epoch_now(), bytes = fill(c, path);
    if (bytes < 0) {
        unlink(path);
        return cli_fail("chaos");
    }
    /* Held until the attempt it hit has ended (the job retries, or ends), at most a minute. */
    double t0 = anvil_now();
    while (anvil_now() - t0 < 60 && !job_state(c, status, sizeof status, &now_attempt) && now_attempt == attempt &&
           !strcmp(status, "Running"))
        anvil_sleep(0.05);
    unlink(path);
    snprintf(detail, sizeof detail, "%.200s filled (%.0f bytes) while a checkpoint was written, for %.1f s", c->run_dir,
             bytes, anvil_now() - t0);
    say(ANVIL_FAULT_DISK_FULL, -1, at, detail);
    return record(c, ANVIL_FAULT_DISK_FULL, at, detail);
}

/* ---- S3 requests struck through the fault proxy ---- */

/* The proxy's answer to GET /__ctl/WHAT, or NULL after anvil_fail. */
static cJSON *proxy_ctl(const chaos *c, const char *what) {
    char url[1024];
    snprintf(url, sizeof url, "%s/__ctl/%s", c->s3_proxy, what);
    long code = 0;
    client_buffer b = {0};
    cJSON *o = NULL;
    if (client_get_url(url, &code, &b)) {
        char why[600];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        anvil_fail("--s3-proxy: %s", why);
    } else if (!(o = code == 200 ? anvil_json_parse_str(b.data) : NULL)) {
        anvil_fail("--s3-proxy: %s answered HTTP %ld, not a fault proxy's JSON", url, code);
    }
    free(b.data);
    return o;
}

/* An S3 kind in the schedule needs the proxy, and one that answers; 0, or the exit status. */
static int check_proxy(chaos *c, const anvil_chaos_schedule *s) {
    bool s3 = false;
    for (int i = 0; i < s->n; i++) s3 = s3 || anvil_fault_kind_s3(s->ev[i].kind);
    if (!s3) return 0;
    if (!c->s3_proxy_arg)
        return cli_usage_error("chaos", "--s3-proxy: the schedule has S3 faults (s3-503, s3-reset), which strike "
                                        "through a fault proxy: give its URL");
    size_t n = strlen(c->s3_proxy_arg);
    while (n && c->s3_proxy_arg[n - 1] == '/') n--;
    if (!(c->s3_proxy = strndup(c->s3_proxy_arg, n))) return anvil_fail("out of memory"), cli_fail("chaos");
    cJSON *o = proxy_ctl(c, "stats");
    cJSON_Delete(o);
    return o ? 0 : cli_fail("chaos");
}

/* "GET 3, PUT 1": the requests a proxy fault struck, by type, from its "struck" object. */
static void by_type(const cJSON *fault, char *out, size_t cap) {
    const cJSON *t;
    size_t at = 0;
    out[0] = 0;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(fault, "struck")) {
        if (at < cap) at += (size_t)snprintf(out + at, cap - at, "%s%.10s %.0f", at ? ", " : "", t->string,
                                             t->valuedouble);
    }
}

/* Requests of proxy fault id still to strike, from the proxy's stats; -1 after anvil_fail. */
static int proxy_left(const chaos *c, double id) {
    cJSON *st = proxy_ctl(c, "stats");
    const cJSON *f;
    int left = 0;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(st, "faults")) {
        if (client_num(f, "id") == id) left = (int)client_num(f, "n");
    }
    cJSON_Delete(st);
    return st ? left : -1;
}

static int s3_fault(chaos *c, anvil_fault_kind kind, int count) {
    /* The detail stays under the 400 bytes the daemon takes (the types cut at 100); the room past that
     * is the compiler's worst case of the duration. */
    char what[64], status[32], types[160], detail[720];
    int attempt = 0, now;
    snprintf(what, sizeof what, "fault?kind=%s&n=%d", kind == ANVIL_FAULT_S3_503 ? "503" : "reset", count);
    double at = anvil_epoch_now(), t0 = anvil_now();
    cJSON *o = proxy_ctl(c, what);
    if (!o) return cli_fail("chaos");
    double id = client_num(o, "id");
    cJSON_Delete(o);
    /* Held until its requests have come, or the attempt it struck has ended: a retry's requests, or
     * another job's after this one's end, are not what it was meant for. An attempt yet to start when it
     * was armed is the one it strikes. */
    int left = count;
    while (left > 0 && !job_state(c, status, sizeof status, &now) && !ended(status) && (!attempt || now == attempt)) {
        if (!attempt && !strcmp(status, "Running")) attempt = now;
        anvil_sleep(0.05);
        if ((left = proxy_left(c, id)) < 0) return cli_fail("chaos");
    }
    snprintf(what, sizeof what, "cancel?id=%.0f", id);
    if (!(o = proxy_ctl(c, what))) return cli_fail("chaos");
    by_type(o, types, sizeof types);
    int struck = count - (int)client_num(o, "n");
    cJSON_Delete(o);
    snprintf(detail, sizeof detail, "%s %d of %d S3 requests through %.80s%s%.100s%s over %.1f s%s",
             kind == ANVIL_FAULT_S3_503 ? "503 SlowDown answered to" : "connection reset halfway through", struck,
             count, c->s3_proxy, struck ? " (" : "", types, struck ? ")" : "", anvil_now() - t0,
             struck < count ? ", the rest dropped at the attempt's end" : "");
    say(kind, -1, at, detail);
    return record(c, kind, at, detail);
}

/* ---- the schedule ---- */

/* Follows the run's metrics.jsonl as it grows: which attempt of this job trains (its "start" record)
 * and the last step it has trained (its train records). */
typedef struct {
    off_t offset; /* read up to here: whole lines only */
    int attempt;  /* of the last start record, 0 when it is another job's or none yet */
    int64_t step; /* the last train record's after it; -1: none */
} follower;

static void follow(const chaos *c, follower *f) {
    char path[PATH_MAX + 16], buf[65536];
    snprintf(path, sizeof path, "%s/metrics.jsonl", c->run_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n;
    while ((n = pread(fd, buf, sizeof buf - 1, f->offset)) > 0) {
        buf[n] = 0;
        char *end = strrchr(buf, '\n');
        if (!end) break;
        *end = 0;
        f->offset += end + 1 - buf;
        for (char *line = buf, *next; line; line = next) {
            next = strchr(line, '\n');
            if (next) *next++ = 0;
            cJSON *o = anvil_json_parse_str(line);
            const char *kind = client_str(o, "kind");
            if (!strcmp(kind, "start")) {
                f->attempt = client_num(o, "job") == (double)c->id ? (int)client_num(o, "attempt") : 0;
                /* The step it resumed from is not trained: an event past it strikes at its first step, in
                 * training, not while it loads (whose hang timeout is minutes). */
                f->step = -1;
            } else if (!strcmp(kind, "train") && f->attempt) {
                f->step = (int64_t)client_num(o, "step");
            }
            cJSON_Delete(o);
        }
    }
    close(fd);
}

/* Waits for event e's moment (a time after t0, or a step that the job's current attempt has trained: a
 * step of an attempt before it does not count, however high, nor does the attempt the last fault ended),
 * or for the job's end (JOB_ENDED). */
static int await_event(chaos *c, follower *f, const anvil_chaos_event *e, double t0) {
    for (;;) {
        char status[32];
        int attempt;
        if (job_state(c, status, sizeof status, &attempt)) return ANVIL_EXIT_ERROR;
        if (ended(status)) return JOB_ENDED;
        follow(c, f);
        if (e->at_s >= 0 ? anvil_now() - t0 >= e->at_s
                         : attempt > c->struck && f->attempt == attempt && f->step >= e->at_step)
            return 0;
        anvil_sleep(0.02);
    }
}

/* Whether the kind ends the attempt it strikes: the daemon's restart does not, nor does an S3 fault
 * as long as the job's retries absorb it. */
static bool ends_attempt(anvil_fault_kind k) { return k != ANVIL_FAULT_DAEMON_KILL && !anvil_fault_kind_s3(k); }

static int run_event(chaos *c, const anvil_chaos_event *e) {
    int target = e->target;
    /* Drawn whether used or not, so that one event's target does not depend on the kinds before it. */
    uint64_t draw = anvil_rng_u64(&c->rng);
    if (target < 0 && anvil_fault_kind_targeted(e->kind))
        target = (int)(draw % (uint64_t)(anvil_fault_kind_on_host(e->kind) ? c->hosts : c->ranks));
    if (e->kind == ANVIL_FAULT_DAEMON_KILL) return daemon_kill(c);
    char status[32];
    int attempt;
    if (ends_attempt(e->kind) && !job_state(c, status, sizeof status, &attempt)) c->struck = attempt;
    if (e->kind == ANVIL_FAULT_DISK_FULL) return disk_full(c);
    if (anvil_fault_kind_s3(e->kind)) return s3_fault(c, e->kind, e->count);
    return strike(c, e->kind, anvil_fault_kind_targeted(e->kind) ? target : -1);
}

/* The schedule from the options; 0, or the exit status. */
static int schedule_of(int argc, char **argv, int *i_job, anvil_chaos_schedule *s, chaos *c, bool *wait) {
    const char *text = NULL, *kinds = "kill-rank,stop-rank,kill-attempt";
    double mtbf = 0, duration = 600;
    int64_t seed = 1;
    *i_job = -1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--no-wait")) {
            *wait = false;
            continue;
        }
        if (a[0] != '-') {
            if (*i_job >= 0) return cli_usage_error("chaos", "one job ID, not '%s' too", a);
            *i_job = i;
            continue;
        }
        if (!(v = arg_value("chaos", argc, argv, &i))) return ANVIL_EXIT_USAGE;
        int bad = 0;
        if (!strcmp(a, "--schedule")) text = v;
        else if (!strcmp(a, "--kinds")) kinds = v;
        else if (!strcmp(a, "--mtbf")) bad = arg_double("chaos", a, v, &mtbf);
        else if (!strcmp(a, "--duration")) bad = arg_double("chaos", a, v, &duration);
        else if (!strcmp(a, "--fill-max")) bad = arg_double("chaos", a, v, &c->fill_max);
        else if (!strcmp(a, "--s3-proxy")) c->s3_proxy_arg = v;
        else if (!strcmp(a, "--seed")) bad = arg_i64("chaos", a, v, 0, INT64_MAX, &seed);
        else return cli_usage_error("chaos", "unknown option '%s'", a);
        if (bad) return ANVIL_EXIT_USAGE;
    }
    if (*i_job < 0) return cli_usage_error("chaos", "which job? give its ID");
    if (!text == !(mtbf > 0)) return cli_usage_error("chaos", "give --schedule, or --mtbf (not both)");
    anvil_rng_seed(&c->rng, (uint64_t)seed);
    if (text) return anvil_chaos_parse(text, s) ? cli_usage_error("chaos", "%s", anvil_errmsg()) : 0;
    anvil_fault_kind list[ANVIL_FAULT_NKINDS];
    int n = 0;
    char *copy = strdup(kinds), *save = NULL;
    for (char *k = copy ? strtok_r(copy, ",", &save) : NULL; k; k = strtok_r(NULL, ",", &save)) {
        int kind = anvil_fault_kind_parse(k);
        if (kind < 0 || n == ANVIL_FAULT_NKINDS) {
            int rc = cli_usage_error("chaos", "--kinds: unknown fault '%s' (or one named twice)", k);
            free(copy);
            return rc;
        }
        list[n++] = (anvil_fault_kind)kind;
    }
    free(copy);
    return anvil_chaos_random((uint64_t)seed, mtbf, duration, list, n, s) ? cli_usage_error("chaos", "%s", anvil_errmsg())
                                                                         : 0;
}

/* The job's shape and run folder; 0, or the exit status. */
static int open_job(chaos *c, const char *id_text) {
    char *end;
    c->id = strtoll(id_text, &end, 10);
    if (c->id <= 0 || *end) return cli_usage_error("chaos", "'%s' is not a job ID", id_text);
    snprintf(c->path, sizeof c->path, "/v1/jobs/%lld", (long long)c->id);
    cJSON *j;
    int rc = client_call(&c->cl, "GET", c->path, NULL, &j);
    if (rc) return rc;
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "spec"), "resources");
    c->hosts = client_num(res, "hosts") > 0 ? (int)client_num(res, "hosts") : 1;
    c->ranks = c->hosts * (client_num(res, "procs_per_host") > 0 ? (int)client_num(res, "procs_per_host") : 1);
    snprintf(c->run_dir, sizeof c->run_dir, "%s", client_str(j, "run_dir"));
    cJSON_Delete(j);
    return 0;
}

/* After the schedule: the job's end, and its goodput. */
static int finish(chaos *c) {
    char status[32], path[96];
    for (;;) {
        if (job_state(c, status, sizeof status, NULL)) return ANVIL_EXIT_ERROR;
        if (ended(status)) break;
        anvil_sleep(0.3);
    }
    snprintf(path, sizeof path, "%s/goodput", c->path);
    cJSON *g;
    int rc = client_call(&c->cl, "GET", path, NULL, &g);
    if (rc) return rc;
    printf("job %lld: %s\n", (long long)c->id, status);
    if (c->cl.json) client_print_json(g);
    else cli_print_goodput(g, (double)c->id);
    cJSON_Delete(g);
    return strcmp(status, "Completed") ? ANVIL_EXIT_JOB_FAILED : 0;
}

int cmd_chaos(int argc, char **argv) {
    chaos c = {.fill_max = 8.0 * (1 << 30)};
    int n, rc = client_open(&c.cl, "chaos", usage, argc, argv, &n);
    if (rc >= 0) return rc;
    anvil_chaos_schedule s = {0};
    bool wait = true;
    int i_job;
    /* client_open left the other arguments in argv[0..n). */
    rc = schedule_of(n, argv, &i_job, &s, &c, &wait);
    if (!rc) rc = check_proxy(&c, &s);
    if (!rc) rc = open_job(&c, argv[i_job]);
    double t0 = anvil_now();
    follower f = {.step = -1};
    for (int i = 0; !rc && i < s.n; i++) {
        rc = await_event(&c, &f, &s.ev[i], t0);
        if (rc == JOB_ENDED) printf("chaos: the job ended before event %d of %d\n", i + 1, s.n);
        if (!rc) rc = run_event(&c, &s.ev[i]);
    }
    if (rc == JOB_ENDED) rc = 0;
    if (!rc && wait) rc = finish(&c);
    anvil_chaos_free(&s);
    free(c.s3_proxy);
    client_close(&c.cl);
    return rc;
}
