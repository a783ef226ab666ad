#include "job/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "job/api.h"
#include "job/backend.h"
#include "job/objstore.h"
#include "job/store.h"
#include "job/supervisor.h"
#include "launch/simhosts.h"

/* What a running daemon holds, each part NULL (or -1) until started. */
typedef struct {
    const anvil_daemon_options *o;
    char dir[PATH_MAX];
    int lock;
    anvil_store *st;
    anvil_objstore *objstore;
    anvil_backend *backend, *local;
    anvil_supervisor *sup;
    anvil_hooks *hooks;
    anvil_api *api;
    anvil_simhosts sim; /* n 0 until made */
} daemon_parts;

static void report(const anvil_daemon_options *o, const char *fmt, ...) ANVIL_PRINTF(2, 3);
static void report(const anvil_daemon_options *o, const char *fmt, ...) {
    if (!o->report) return;
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->report(o->report_ctx, line);
}

static int write_number(const char *dir, const char *name, long v) {
    char path[PATH_MAX + 32], text[32];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int n = snprintf(text, sizeof text, "%ld\n", v);
    return anvil_write_file_atomic(path, text, (size_t)n);
}

/* The state folder, made absolute (the jobs run in their own folders), and its lock held. */
static int hold_folder(const char *given, char *dir, int *lock) {
    if (anvil_mkdir_p(given)) return -1;
    if (!realpath(given, dir)) return anvil_fail("%s: %s", given, strerror(errno));
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/serve.lock", dir);
    *lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (*lock < 0 || flock(*lock, LOCK_EX | LOCK_NB)) {
        int e = errno;
        if (*lock >= 0) close(*lock);
        *lock = -1;
        return anvil_fail("%s: %s", path, e == EWOULDBLOCK ? "another anvil serve holds this state folder" : strerror(e));
    }
    return 0;
}

int anvil_daemon_init(const char *state_dir, char token[ANVIL_TOKEN_SIZE]) {
    char dir[PATH_MAX], path[PATH_MAX + 32];
    int lock;
    if (hold_folder(state_dir, dir, &lock)) return -1;
    snprintf(path, sizeof path, "%s/state.db", dir);
    anvil_store *st = anvil_store_open(path);
    int rc = st ? anvil_auth_init(st, "admin", token) : -1;
    anvil_store_close(st);
    close(lock);
    return rc;
}

/* The state: opened (checked page by page first), and with users. */
static int open_state(daemon_parts *d) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/state.db", d->dir);
    if (!(d->st = anvil_store_open(path))) return -1;
    int users = 0;
    if (anvil_auth_user_count(d->st, &users)) return -1;
    if (!users)
        return anvil_fail("%s has no users: run 'anvil serve --init --state %s' first (it prints the first admin's "
                          "token)",
                          d->dir, d->dir);
    return 0;
}

/* The simulated hosts, made or kept from a daemon of this folder that was killed. */
static int start_sim_hosts(daemon_parts *d) {
    anvil_simhosts s;
    anvil_simhosts_init(&s, d->dir, d->o->sim_hosts);
    bool kept;
    if (anvil_simhosts_up(&s, &kept)) return -1;
    d->sim = s;
    char first[32], last[32], subnet[32];
    anvil_simhosts_netns(&s, 0, first, sizeof first);
    anvil_simhosts_netns(&s, s.n - 1, last, sizeof last);
    anvil_simhosts_subnet(&s, subnet, sizeof subnet);
    report(d->o, "%d simulated host(s) %s: network namespaces %s to %s on %s", s.n, kept ? "kept" : "made", first,
           last, subnet);
    return 0;
}

/* Backends, supervisor, hooks and API, in the order each needs the last. */
static int start_parts(daemon_parts *d) {
    const anvil_daemon_options *o = d->o;
    char path[PATH_MAX + 32];
    bool slurm = !strcmp(o->backend, "slurm");
    if (o->s3_config && !(d->objstore = anvil_objstore_load(o->s3_config))) return -1;
    if (o->sim_hosts && start_sim_hosts(d)) return -1;
    const anvil_simhosts *sim = d->sim.n ? &d->sim : NULL;
    /* A Slurm daemon keeps the local backend too, for the jobs whose spec asks for it ("backend"). */
    d->backend = slurm ? anvil_backend_slurm_new(d->dir, o->self, o->partition, o->account, o->grace_s)
                       : anvil_backend_local_new(d->dir, o->self, sim);
    if (!d->backend || (slurm && !(d->local = anvil_backend_local_new(d->dir, o->self, sim)))) return -1;
    anvil_backend *both[] = {d->backend, d->local};
    anvil_supervisor_options so = {.grace_s = o->grace_s, .max_running = o->max_running, .objstore = d->objstore};
    if (!(d->sup = anvil_supervisor_new(d->st, both, d->local ? 2 : 1, &so))) return -1;
    /* Hooks first: every change from here on is queued for them (job/hooks.h). */
    snprintf(path, sizeof path, "%s/hooks.log", d->dir);
    anvil_hooks_options ho = {.max_attempts = o->hook_attempts, .timeout_s = o->hook_timeout_s, .log = path,
                              .report = o->report, .report_ctx = o->report_ctx};
    if (o->nhooks &&
        (anvil_store_set_hooks(d->st, o->hooks, o->nhooks) || !(d->hooks = anvil_hooks_start(d->st, &ho))))
        return -1;
    snprintf(path, sizeof path, "%s/runs", d->dir);
    if (anvil_mkdir_p(path)) return -1;
    anvil_api_env env = {.st = d->st, .sup = d->sup, .runs_dir = path, .report = o->report,
                         .report_ctx = o->report_ctx};
    if (!(d->api = anvil_api_start(&env, o->port))) return -1;
    return write_number(d->dir, "serve.pid", (long)getpid()) || write_number(d->dir, "serve.port", anvil_api_port(d->api));
}

static void stop_parts(daemon_parts *d) {
    anvil_api_stop(d->api);
    anvil_hooks_stop(d->hooks);
    anvil_supervisor_free(d->sup);
    if (d->backend) d->backend->ops->free(d->backend);
    if (d->local) d->local->ops->free(d->local);
    anvil_objstore_free(d->objstore);
    anvil_store_close(d->st);
    if (d->sim.n) anvil_simhosts_down(&d->sim);
}

int anvil_daemon_run(const anvil_daemon_options *o) {
    daemon_parts d = {.o = o, .lock = -1};
    int rc = hold_folder(o->state_dir, d.dir, &d.lock);
    if (!rc) rc = open_state(&d);
    if (!rc) rc = start_parts(&d);
    if (!rc) {
        report(o, "listening on http://127.0.0.1:%d, state in %s", anvil_api_port(d.api), d.dir);
        while (!*o->quit) {
            if (anvil_supervisor_tick(d.sup)) report(o, "warning: %s", anvil_errmsg());
            /* Every fault waits up to two periods: one for its attempt's end to be noticed, one for the
             * retry's start. A tick of a quiet daemon is one indexed query. */
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        report(o, "stopping; running jobs continue and a restart finds them");
    }
    /* The failure's message outlives the teardown, which may record others. */
    char why[1024];
    snprintf(why, sizeof why, "%s", anvil_errmsg());
    stop_parts(&d);
    /* What the folder says of a running daemon goes with it (a killed one leaves both: the lock
     * tells a stale pid from a live one). */
    for (int i = 0; !rc && i < 2; i++) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", d.dir, i ? "serve.pid" : "serve.port");
        unlink(path);
    }
    if (d.lock >= 0) close(d.lock);
    return rc ? anvil_fail("%s", why) : 0;
}
