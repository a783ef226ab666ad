/* anvil serve: the job service daemon (HTTP/JSON on 127.0.0.1, state in SQLite). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/exit.h"
#include "core/fsutil.h"
#include "job/auth.h"
#include "job/daemon.h"
#include "job/hooks.h"
#include "job/store.h"
#include "launch/simhosts.h"

static const char *usage =
    "usage: anvil serve [--state DIR] [--port P] [--stop-grace S] [--max-running N]\n"
    "                   [--backend local|slurm] [--partition P] [--account A] [--s3-config FILE]\n"
    "                   [--hook-command CMD] [--hook-url URL] [--hook-attempts N] [--hook-timeout S]\n"
    "                   [--sim-hosts N]\n"
    "       anvil serve --init [--state DIR]\n"
    "       anvil serve --backup FILE [--state DIR]\n"
    "\n"
    "Runs the job service: an HTTP/JSON API on 127.0.0.1 (see README: 'The job service'), a\n"
    "dashboard page at http://127.0.0.1:P/ and Prometheus metrics at /metrics, and a supervisor\n"
    "that runs each job through `anvil launch`, retries it, stops it at its limits.\n"
    "Every request needs an API token; a state folder without users is refused, and so is one\n"
    "whose state.db PRAGMA quick_check finds damaged (README: 'Restoring the state').\n"
    "  --init            make the state folder's first user, 'admin', and print its token on\n"
    "                    stdout, once (only its hash is kept), then exit; refused (exit 4) when\n"
    "                    the folder has users already\n"
    "  --backup FILE     write a consistent copy of the state folder's state.db to FILE (atomically;\n"
    "                    SQLite's online backup, so a daemon may be running), then exit\n"
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
    "  --s3-config FILE  each role's S3 endpoint, region and credentials, for the jobs of the roles\n"
    "                    whose prefixes name s3:// ones: an INI file of [ROLE] sections with\n"
    "                    endpoint_url, region, aws_access_key_id, aws_secret_access_key and\n"
    "                    aws_session_token (mode 600: it holds secrets). Jobs get S3 credentials\n"
    "                    from here only, never from a spec or from this daemon's own environment\n"
    "  --hook-command CMD  on every change of a job's status, run CMD with /bin/sh, the event's JSON\n"
    "                    on its standard input (its output goes to DIR/hooks.log)\n"
    "  --hook-url URL    on every change of a job's status, POST the event's JSON to URL (http:// on\n"
    "                    127.0.0.1, localhost or [::1], without a user or password)\n"
    "  --hook-attempts N attempts per event and hook before it is given up (default 8), the waits\n"
    "                    between them 1, 2, 4, ... s, at most 60\n"
    "  --hook-timeout S  a hook command or POST still running after S seconds has failed (default 30)\n"
    "  --sim-hosts N     (local; root) N simulated hosts: network namespaces joined by veth pairs to a\n"
    "                    bridge, that a job of resources.hosts H (2 <= H <= N) runs on, H x\n"
    "                    procs_per_host ranks, Open MPI over TCP between them (anvil chaos net-cut\n"
    "                    cuts one off); a job of 1 host runs as without. Made at the start (those a\n"
    "                    killed daemon of this folder left are kept), removed at the stop\n"
    "\n"
    "SIGTERM or SIGINT stops the daemon, not the jobs: a restarted daemon finds them again. One daemon\n"
    "per state folder.\n";

static volatile sig_atomic_t quit;

static void on_quit(int sig) {
    (void)sig;
    quit = 1;
}

/* The state folder given or the default one, malloc'd. */
char *cli_state_dir(const char *given) {
    if (given) return strdup(given);
    const char *home = getenv("HOME");
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s/.local/share/anvil", home && *home ? home : ".");
    return strdup(buf);
}

static void print_report(void *ctx, const char *line) {
    (void)ctx;
    fprintf(stderr, "anvil serve: %s\n", line);
}

/* What the options say: the daemon's, and the two commands that do something else and exit. */
typedef struct {
    anvil_daemon_options d;
    const char *state, *backup;
    bool init;
    anvil_hook hooks[2];
} serve_args;

/* One option at argv[*i]; 0, or the exit status of a usage error. */
static int take(serve_args *a, int argc, char **argv, int *i) {
    anvil_daemon_options *d = &a->d;
    const char *o = argv[*i], *v = NULL;
    if (!strcmp(o, "--init")) {
        a->init = true;
        return 0;
    }
    static const char *const valued[] = {"--state", "--port", "--stop-grace", "--max-running", "--backend",
                                         "--partition", "--account", "--hook-command", "--hook-url",
                                         "--hook-attempts", "--hook-timeout", "--backup", "--s3-config",
                                         "--sim-hosts"};
    size_t k = 0;
    while (k < sizeof valued / sizeof *valued && strcmp(o, valued[k])) k++;
    if (k == sizeof valued / sizeof *valued) return cli_usage_error("serve", "unknown option '%s'", o);
    if (!(v = arg_value("serve", argc, argv, i))) return ANVIL_EXIT_USAGE;
    int bad = 0;
    if (!strcmp(o, "--state")) a->state = v;
    else if (!strcmp(o, "--port")) bad = arg_int("serve", o, v, 0, 65535, &d->port);
    else if (!strcmp(o, "--stop-grace")) {
        if (!(bad = arg_double("serve", o, v, &d->grace_s)) && d->grace_s < 0)
            return cli_usage_error("serve", "--stop-grace must be >= 0");
    } else if (!strcmp(o, "--max-running")) bad = arg_int("serve", o, v, 0, 1 << 20, &d->max_running);
    else if (!strcmp(o, "--backend")) {
        if (strcmp(v, "local") && strcmp(v, "slurm"))
            return cli_usage_error("serve", "--backend must be local or slurm, not '%s'", v);
        d->backend = v;
    } else if (!strcmp(o, "--partition")) d->partition = v;
    else if (!strcmp(o, "--account")) d->account = v;
    else if (!strcmp(o, "--hook-command") || !strcmp(o, "--hook-url")) {
        anvil_hook_kind kind = o[7] == 'c' ? ANVIL_HOOK_COMMAND : ANVIL_HOOK_URL;
        for (int h = 0; h < d->nhooks; h++)
            if (a->hooks[h].kind == kind) return cli_usage_error("serve", "%s given twice", o);
        a->hooks[d->nhooks] = (anvil_hook){.kind = kind, .target = v};
        if (anvil_hook_check(&a->hooks[d->nhooks++])) return cli_usage_error("serve", "%s", anvil_errmsg());
    } else if (!strcmp(o, "--hook-attempts")) bad = arg_int("serve", o, v, 1, 100, &d->hook_attempts);
    else if (!strcmp(o, "--hook-timeout")) {
        if (!(bad = arg_double("serve", o, v, &d->hook_timeout_s)) && !(d->hook_timeout_s > 0))
            return cli_usage_error("serve", "--hook-timeout must be > 0");
    } else if (!strcmp(o, "--sim-hosts")) bad = arg_int("serve", o, v, 1, ANVIL_SIMHOSTS_MAX, &d->sim_hosts);
    else if (!strcmp(o, "--backup")) a->backup = v;
    else d->s3_config = v;
    return bad ? ANVIL_EXIT_USAGE : 0;
}

/* --init: the first admin and its token, printed alone on stdout. */
static int init_state(const char *dir) {
    char token[ANVIL_TOKEN_SIZE];
    int rc = anvil_daemon_init(dir, token);
    if (rc < 0) return cli_fail("serve");
    if (rc > 0) {
        fprintf(stderr, "anvil serve: error: %s has users already; --init only starts a new state folder (an admin "
                        "makes more tokens: anvil token add USER)\n", dir);
        return ANVIL_EXIT_REFUSED;
    }
    printf("%s\n", token);
    fflush(stdout);
    char real[PATH_MAX];
    fprintf(stderr, "anvil serve: created user admin (admin) in %s; its token (ID %.*s) is printed above, this once: "
                    "keep it, e.g. in ~/.config/anvil/token (mode 600)\n", realpath(dir, real) ? real : dir,
            ANVIL_TOKEN_ID_LEN, token + 4);
    memset(token, 0, sizeof token);
    return 0;
}

/* --backup FILE: the state's consistent copy. */
static int backup_state(const char *dir, const char *file) {
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/state.db", dir);
    if (anvil_mkdir_parent(file) || anvil_store_backup(path, file)) return cli_fail("serve");
    fprintf(stderr, "anvil serve: backed up %s to %s (checked with PRAGMA quick_check first)\n", path, file);
    return 0;
}

static int run_daemon(anvil_daemon_options *d) {
    char self[PATH_MAX];
    ssize_t sn = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sn <= 0) {
        anvil_fail("cannot find the anvil binary (/proc/self/exe): %s", strerror(errno));
        return cli_fail("serve");
    }
    self[sn] = 0;
    d->self = self;
    /* A client that disconnects mid-answer must not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {0};
    sa.sa_handler = on_quit;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    return anvil_daemon_run(d) ? cli_fail("serve") : ANVIL_EXIT_OK;
}

int cmd_serve(int argc, char **argv) {
    serve_args a = {.d = {.port = 7878, .grace_s = 120, .backend = "local", .hook_attempts = 8,
                          .hook_timeout_s = 30, .report = print_report, .quit = &quit}};
    a.d.hooks = a.hooks;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        int rc = take(&a, argc, argv, &i);
        if (rc) return rc;
    }
    if (strcmp(a.d.backend, "slurm") && (a.d.partition || a.d.account))
        return cli_usage_error("serve", "--partition and --account go with --backend slurm");
    if (a.init && a.backup) return cli_usage_error("serve", "--init and --backup cannot be combined");
    if (a.d.sim_hosts && strcmp(a.d.backend, "local"))
        return cli_usage_error("serve", "--sim-hosts goes with --backend local");
    if (a.d.sim_hosts && !a.init && !a.backup && geteuid() != 0) {
        fprintf(stderr, "anvil serve: error: --sim-hosts needs root: it makes network namespaces and links\n");
        return ANVIL_EXIT_ERROR;
    }
    char *dir = cli_state_dir(a.state);
    if (!dir) {
        fprintf(stderr, "anvil serve: error: out of memory\n");
        return ANVIL_EXIT_ERROR;
    }
    a.d.state_dir = dir;
    int rc = a.init ? init_state(dir) : a.backup ? backup_state(dir, a.backup) : run_daemon(&a.d);
    free(dir);
    return rc;
}
