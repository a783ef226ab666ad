/* anvil serve: the job service daemon (HTTP/JSON on 127.0.0.1, state in SQLite). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/exit.h"
#include "core/fsutil.h"
#include "job/api.h"
#include "job/auth.h"
#include "job/backend.h"
#include "job/hooks.h"
#include "job/store.h"
#include "job/supervisor.h"

static const char *usage =
    "usage: anvil serve [--state DIR] [--port P] [--stop-grace S] [--max-running N]\n"
    "                   [--backend local|slurm] [--partition P] [--account A]\n"
    "                   [--hook-command CMD] [--hook-url URL] [--hook-attempts N] [--hook-timeout S]\n"
    "       anvil serve --init [--state DIR]\n"
    "\n"
    "Runs the job service: an HTTP/JSON API on 127.0.0.1 (see README: 'The job service'), a\n"
    "dashboard page at http://127.0.0.1:P/ and Prometheus metrics at /metrics, and a supervisor\n"
    "that runs each job through `anvil launch`, retries it, stops it at its limits.\n"
    "Every request needs an API token; a state folder without users is refused.\n"
    "  --init            make the state folder's first user, 'admin', and print its token on\n"
    "                    stdout, once (only its hash is kept), then exit; refused (exit 4) when\n"
    "                    the folder has users already\n"
    "  --state DIR       state folder: state.db (SQLite), serve.pid, serve.port, jobs/, runs/\n"
    "                    (default ~/.local/share/anvil)\n"
    "  --port P          TCP port on 127.0.0.1 (default 7878; 0 picks a free one); the port in use is\n"
    "                    written to DIR/serve.port once the API listens\n"
    "  --stop-grace S    seconds between a job's stop signal and SIGKILL (default 120)\n"
    "  --max-running N   run at most N jobs at once; later ones wait, Pending (Queued), first in\n"
    "                    first out (default 0: no limit)\n"
    "  --backend B       where the jobs run: local (this machine, the default) or slurm (one batch\n"
    "                    job per attempt, through sbatch, scontrol and scancel with the SLURM_CONF\n"
    "                    of this daemon; see README: 'Running on a Slurm cluster'); a slurm daemon\n"
    "                    also runs on this machine the jobs whose spec says \"backend\": \"local\"\n"
    "  --partition P     (slurm) the partition the jobs are submitted to (default: the cluster's)\n"
    "  --account A       (slurm) the account the jobs are charged to (default: the user's)\n"
    "  --hook-command CMD  on every change of a job's status, run CMD with /bin/sh, the event's JSON\n"
    "                    on its standard input (its output goes to DIR/hooks.log)\n"
    "  --hook-url URL    on every change of a job's status, POST the event's JSON to URL (http:// on\n"
    "                    127.0.0.1, localhost or [::1])\n"
    "  --hook-attempts N attempts per event and hook before it is given up (default 8), the waits\n"
    "                    between them 1, 2, 4, ... s, at most 60\n"
    "  --hook-timeout S  a hook command or POST still running after S seconds has failed (default 30)\n"
    "\n"
    "SIGTERM or SIGINT stops the daemon, not the jobs: a restarted daemon finds them again. One daemon\n"
    "per state folder.\n";

static volatile sig_atomic_t quit;

static void on_quit(int sig) {
    (void)sig;
    quit = 1;
}

static void print_report(void *ctx, const char *line) {
    (void)ctx;
    fprintf(stderr, "anvil serve: %s\n", line);
}

/* The state folder given or the default one, malloc'd. */
char *cli_state_dir(const char *given) {
    if (given) return strdup(given);
    const char *home = getenv("HOME");
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s/.local/share/anvil", home && *home ? home : ".");
    return strdup(buf);
}

static int write_number(const char *dir, const char *name, long v) {
    char path[PATH_MAX + 32], text[32];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int n = snprintf(text, sizeof text, "%ld\n", v);
    return anvil_write_file_atomic(path, text, (size_t)n);
}

/* --init: the first admin and its token, printed alone on stdout. */
static int init_state(anvil_store *st, const char *dir) {
    char token[ANVIL_TOKEN_SIZE];
    int rc = anvil_auth_init(st, "admin", token);
    if (rc < 0) return cli_fail("serve");
    if (rc > 0) {
        fprintf(stderr, "anvil serve: error: %s has users already; --init only starts a new state folder (an admin "
                        "makes more tokens: anvil token add USER)\n", dir);
        return ANVIL_EXIT_REFUSED;
    }
    printf("%s\n", token);
    fflush(stdout);
    fprintf(stderr, "anvil serve: created user admin (admin) in %s; its token (ID %.*s) is printed above, this once: "
                    "keep it, e.g. in ~/.config/anvil/token (mode 600)\n", dir, ANVIL_TOKEN_ID_LEN, token + 4);
    memset(token, 0, sizeof token);
    return 0;
}

int cmd_serve(int argc, char **argv) {
    const char *state_arg = NULL, *backend_name = "local", *partition = NULL, *account = NULL;
    int port = 7878, max_running = 0, hook_attempts = 8, nhooks = 0;
    double grace = 120, hook_timeout = 30;
    bool init = false;
    anvil_hook hooks[2];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--init")) {
            init = true;
        } else if (!strcmp(a, "--state")) {
            if (!(state_arg = arg_value("serve", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--port")) {
            if (!(v = arg_value("serve", argc, argv, &i)) || arg_int("serve", a, v, 0, 65535, &port)) return 2;
        } else if (!strcmp(a, "--stop-grace")) {
            if (!(v = arg_value("serve", argc, argv, &i)) || arg_double("serve", a, v, &grace)) return 2;
            if (grace < 0) return cli_usage_error("serve", "--stop-grace must be >= 0");
        } else if (!strcmp(a, "--max-running")) {
            if (!(v = arg_value("serve", argc, argv, &i)) || arg_int("serve", a, v, 0, 1 << 20, &max_running)) return 2;
        } else if (!strcmp(a, "--backend")) {
            if (!(backend_name = arg_value("serve", argc, argv, &i))) return 2;
            if (strcmp(backend_name, "local") && strcmp(backend_name, "slurm"))
                return cli_usage_error("serve", "--backend must be local or slurm, not '%s'", backend_name);
        } else if (!strcmp(a, "--partition")) {
            if (!(partition = arg_value("serve", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--account")) {
            if (!(account = arg_value("serve", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--hook-command") || !strcmp(a, "--hook-url")) {
            anvil_hook_kind kind = a[7] == 'c' ? ANVIL_HOOK_COMMAND : ANVIL_HOOK_URL;
            if (!(v = arg_value("serve", argc, argv, &i))) return 2;
            for (int k = 0; k < nhooks; k++)
                if (hooks[k].kind == kind) return cli_usage_error("serve", "%s given twice", a);
            hooks[nhooks] = (anvil_hook){kind, v};
            if (anvil_hook_check(&hooks[nhooks++])) return cli_usage_error("serve", "%s", anvil_errmsg());
        } else if (!strcmp(a, "--hook-attempts")) {
            if (!(v = arg_value("serve", argc, argv, &i)) || arg_int("serve", a, v, 1, 100, &hook_attempts)) return 2;
        } else if (!strcmp(a, "--hook-timeout")) {
            if (!(v = arg_value("serve", argc, argv, &i)) || arg_double("serve", a, v, &hook_timeout)) return 2;
            if (!(hook_timeout > 0)) return cli_usage_error("serve", "--hook-timeout must be > 0");
        } else {
            return cli_usage_error("serve", "unknown option '%s'", a);
        }
    }
    bool slurm = !strcmp(backend_name, "slurm");
    if (!slurm && (partition || account))
        return cli_usage_error("serve", "--partition and --account go with --backend slurm");
    char self[PATH_MAX], path[PATH_MAX + 32];
    ssize_t sn = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sn <= 0) {
        anvil_fail("cannot find the anvil binary (/proc/self/exe): %s", strerror(errno));
        return cli_fail("serve");
    }
    self[sn] = 0;
    char *dir = cli_state_dir(state_arg), real[PATH_MAX];
    if (!dir || anvil_mkdir_p(dir)) return cli_fail("serve");
    /* Absolute, since the jobs run in their own folders. */
    if (!realpath(dir, real)) {
        anvil_fail("%s: %s", dir, strerror(errno));
        free(dir);
        return cli_fail("serve");
    }
    free(dir);
    snprintf(path, sizeof path, "%s/serve.lock", real);
    int lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB)) {
        anvil_fail("%s: %s", path, lock < 0 ? strerror(errno) : "another anvil serve holds this state folder");
        return cli_fail("serve");
    }
    snprintf(path, sizeof path, "%s/state.db", real);
    anvil_store *st = anvil_store_open(path);
    if (st && init) {
        int rc = init_state(st, real);
        anvil_store_close(st);
        close(lock);
        return rc;
    }
    int users = 0;
    if (st && !anvil_auth_user_count(st, &users) && !users) {
        anvil_fail("%s has no users: run 'anvil serve --init --state %s' first (it prints the first admin's token)",
                   real, real);
        anvil_store_close(st);
        st = NULL;
    }
    char runs[PATH_MAX + 8];
    snprintf(runs, sizeof runs, "%s/runs", real);
    /* A Slurm daemon keeps the local backend too, for the jobs whose spec asks for it ("backend"). */
    anvil_backend *backend = !st     ? NULL
                             : slurm ? anvil_backend_slurm_new(real, self, partition, account, grace)
                                     : anvil_backend_local_new(real, self);
    anvil_backend *local = backend && slurm ? anvil_backend_local_new(real, self) : NULL;
    anvil_backend *both[] = {backend, local};
    anvil_supervisor *sup = backend && (!slurm || local)
                                ? anvil_supervisor_new(st, both, local ? 2 : 1,
                                                       &(anvil_supervisor_options){.grace_s = grace, .max_running = max_running})
                                : NULL;
    /* Hooks first: every change from here on is queued for them (job/hooks.h). */
    snprintf(path, sizeof path, "%s/hooks.log", real);
    anvil_hooks *deliverer = NULL;
    if (sup && nhooks &&
        (anvil_store_set_hooks(st, hooks, nhooks) ||
         !(deliverer = anvil_hooks_start(st, &(anvil_hooks_options){.max_attempts = hook_attempts,
                                                                    .timeout_s = hook_timeout,
                                                                    .log = path,
                                                                    .report = print_report})))) {
        anvil_supervisor_free(sup);
        sup = NULL;
    }
    /* A client that disconnects mid-answer must not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    anvil_api_env env = {.st = st, .sup = sup, .runs_dir = runs, .report = print_report};
    anvil_api *api = sup && !anvil_mkdir_p(runs) ? anvil_api_start(&env, port) : NULL;
    int rc = ANVIL_EXIT_ERROR;
    if (api && !write_number(real, "serve.pid", (long)getpid()) &&
        !write_number(real, "serve.port", anvil_api_port(api))) {
        struct sigaction sa = {0};
        sa.sa_handler = on_quit;
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        fprintf(stderr, "anvil serve: listening on http://127.0.0.1:%d, state in %s\n", anvil_api_port(api), real);
        rc = ANVIL_EXIT_OK;
        while (!quit) {
            if (anvil_supervisor_tick(sup)) fprintf(stderr, "anvil serve: warning: %s\n", anvil_errmsg());
            struct timespec ts = {0, 200 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        fprintf(stderr, "anvil serve: stopping; running jobs continue and a restart finds them\n");
    }
    if (rc) cli_fail("serve");
    anvil_api_stop(api);
    anvil_hooks_stop(deliverer);
    anvil_supervisor_free(sup);
    if (backend) backend->ops->free(backend);
    if (local) local->ops->free(local);
    anvil_store_close(st);
    if (!rc) {
        snprintf(path, sizeof path, "%s/serve.port", real);
        unlink(path);
    }
    close(lock);
    return rc;
}
