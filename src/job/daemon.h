/* The job service's daemon: its state folder held, its state checked, its parts started (backends,
 * supervisor, hooks, the API), the supervisor ticked until the caller says stop, and everything
 * stopped again. `anvil serve` parses its options into anvil_daemon_options and prints what the
 * daemon reports.
 *
 * The state folder DIR holds serve.lock (flock: one daemon per folder), state.db (job/store.h),
 * serve.pid and serve.port (written atomically once the API listens; both removed at a clean stop),
 * hooks.log, jobs/ and runs/. */
#ifndef ANVIL_JOB_DAEMON_H
#define ANVIL_JOB_DAEMON_H

#include <signal.h>

#include "core/error.h"
#include "job/auth.h"
#include "job/hooks.h"

typedef struct {
    const char *state_dir; /* created when missing */
    const char *self;      /* the anvil binary that the attempts run */
    int port;              /* on 127.0.0.1; 0: a free one */
    double grace_s;        /* between a job's stop signal and SIGKILL */
    int max_running;       /* 0: no limit */
    const char *backend;   /* "local" or "slurm" (which also runs the jobs that ask for local) */
    const char *partition, *account; /* slurm; NULL: the cluster's and the user's defaults */
    const anvil_hook *hooks;
    int nhooks;
    int hook_attempts;
    double hook_timeout_s;
    const char *s3_config; /* each role's S3 endpoint and credentials (job/objstore.h); NULL: none */
    /* Simulated hosts (launch/simhosts.h) that the local backend runs multi-host jobs on; 0: none. Made
     * at the start (root only), removed at the stop: a job still running on them loses its network. */
    int sim_hosts;
    /* What the daemon does and what goes wrong while it runs, one line each ("listening on ...",
     * "hook URL: ...", "warning: ..."), from its threads; NULL: not told. */
    anvil_report_fn report;
    void *report_ctx;
    /* Set (by a signal handler) to stop the daemon; the jobs go on, and a restart finds them. */
    volatile sig_atomic_t *quit;
} anvil_daemon_options;

/* Runs the service until *o->quit: refused while another daemon holds the folder, while its state
 * has no users (anvil_daemon_init makes the first), and while PRAGMA quick_check finds its state
 * damaged (the error names the damage). 0 after a clean stop; -1 after anvil_fail. */
int anvil_daemon_run(const anvil_daemon_options *o);

/* Makes the state folder's first user, "admin", with its token (under the folder's lock): 0, 1 when
 * the folder has users already, -1 after anvil_fail. */
int anvil_daemon_init(const char *state_dir, char token[ANVIL_TOKEN_SIZE]);

#endif
