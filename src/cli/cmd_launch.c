/* anvil launch: start N ranks of an anvil subcommand (or a program) with mpirun. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/exit.h"
#include "core/strbuf.h"
#include "launch/launch.h"
#include "launch/simhosts.h"
#include "obs/metrics.h"

static const char *usage =
    "usage: anvil launch -n N [options] -- <anvil subcommand and its options>\n"
    "       anvil launch -n N [options] --exec PROGRAM [-- its arguments]\n"
    "\n"
    "Starts N ranks through Open MPI's mpirun (each learns its rank from OMPI_COMM_WORLD_RANK)\n"
    "and merges their output, line by line, into this terminal as '[rank R] ...'.\n"
    "  -n N              number of ranks\n"
    "  --hosts H:S,...   hosts and their slots (H alone is one slot); default: all on this machine\n"
    "  --oversubscribe   allow more ranks than slots (automatic here when N exceeds the cores)\n"
    "  --mca-tcp         force Open MPI onto TCP (pml ob1, btl tcp,self), as between machines\n"
    "  --log-dir DIR     per-rank logs DIR/rank_<R>.log and mpirun's messages DIR/mpirun.log,\n"
    "                    appended (default: <train --out>/logs, else ./anvil-logs/<UTC time>)\n"
    "  --exec PROGRAM    run PROGRAM instead of this anvil binary\n"
    "  --no-progress     no lines on the ranks' start-up (by default one at every tenth of\n"
    "                    the ranks started, or every 10 s, and one when all have started)\n"
    "\n"
    "OMP_*, GOMP_*, OPENBLAS_*, ANVIL_*, PATH and LD_LIBRARY_PATH reach every rank; without --hosts\n"
    "and OMP_NUM_THREADS, each rank gets cores/N OpenMP threads. The exit status is the first\n"
    "failing rank's (75: stopped, resumable), 128+S for a rank killed by signal S, 1 when the job\n"
    "cannot start, 2 for bad usage. The first SIGTERM/SIGINT/SIGHUP is passed to the ranks as\n"
    "SIGUSR1 (anvil train: checkpoint and stop); a second one stops them at once.\n";

/* Lines, not a bar, even on a terminal: the ranks' merged log shares it. */
static void started(void *ctx, int ranks, int nranks) {
    if (ranks < nranks) anvil_meter_update(ctx, ranks, nranks, "");
    else anvil_meter_finish(ctx, ranks, nranks, "");
}

int cmd_launch(int argc, char **argv) {
    anvil_launch_spec spec = {0};
    bool have_n = false, show_progress = true;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(a, "--")) {
            i++;
            break;
        } else if (!strcmp(a, "-n")) {
            if (!(v = arg_value("launch", argc, argv, &i)) || arg_int("launch", a, v, 1, 1 << 20, &spec.nranks))
                return 2;
            have_n = true;
        } else if (!strcmp(a, "--hosts")) {
            if (!(spec.hosts = arg_value("launch", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--log-dir")) {
            if (!(spec.log_dir = arg_value("launch", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--exec")) {
            if (!(spec.exec = arg_value("launch", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--mca-tcp")) {
            spec.tcp = true;
        } else if (!strcmp(a, "--no-progress")) {
            show_progress = false;
        } else if (!strcmp(a, "--oversubscribe")) {
            spec.oversubscribe = true;
        } else if (a[0] != '-') {
            return cli_usage_error("launch", "unexpected '%s': the command goes after '--'", a);
        } else {
            return cli_usage_error("launch", "unknown option '%s'", a);
        }
    }
    if (!have_n) return cli_usage_error("launch", "-n N is required");
    spec.argc = argc - i;
    spec.argv = argv + i;
    if (anvil_launch_check(&spec)) return cli_usage_error("launch", "%s", anvil_errmsg());
    if (anvil_launch_preflight(&spec)) return cli_fail("launch");
    char *log_dir = NULL;
    if (!spec.log_dir) {
        if (!(log_dir = anvil_launch_default_log_dir(&spec))) {
            anvil_fail("out of memory");
            return cli_fail("launch");
        }
        spec.log_dir = log_dir;
    }
    fprintf(stderr, "anvil launch: %d rank%s through mpirun, logs in %s\n", spec.nranks, spec.nranks > 1 ? "s" : "",
            spec.log_dir);
    anvil_meter meter;
    anvil_meter_start(&meter, stderr, show_progress ? ANVIL_METER_LINES : ANVIL_METER_OFF, "anvil launch",
                      "ranks started");
    if (show_progress) {
        spec.started = started;
        spec.started_ctx = &meter;
    }
    char line[512];
    int rc = anvil_launch_run(&spec, line, sizeof line);
    free(log_dir);
    if (rc < 0) return cli_fail("launch");
    if (line[0]) {
        const char *kind = rc == 0 ? "warning: " : rc == ANVIL_EXIT_RESUMABLE ? "" : "error: ";
        fprintf(stderr, "anvil launch: %s%s\n", kind, line);
    }
    return rc;
}

static const char *rsh_usage =
    "usage: anvil sim-host-rsh PREFIX [-o OPTION ...] ADDRESS COMMAND...\n"
    "(internal) mpirun's rsh agent for the job service's simulated hosts (anvil serve --sim-hosts):\n"
    "runs COMMAND, its words joined as ssh joins them, with /bin/sh in the network namespace\n"
    "PREFIX-<K> of the host at ADDRESS 10.X.Y.<K+1>. ssh's -o options (which anvil launch gives\n"
    "mpirun's agent) are taken and ignored.\n";

int cmd_sim_host_rsh(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(rsh_usage, stdout);
        return 0;
    }
    int i = 2;
    while (i < argc && argv[i][0] == '-') i += strcmp(argv[i], "-o") ? 1 : 2;
    if (argc < 2 || i + 1 >= argc) return cli_usage_error("sim-host-rsh", "give PREFIX ADDRESS COMMAND...");
    anvil_strbuf command = {0};
    for (int k = i + 1; k < argc; k++) anvil_strbuf_printf(&command, "%s%s", k > i + 1 ? " " : "", argv[k]);
    if (!command.oom) anvil_simhosts_rsh(argv[1], argv[i], command.s);
    anvil_strbuf_free(&command);
    return cli_fail("sim-host-rsh");
}
