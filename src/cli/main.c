/* anvil: one binary, one subcommand per task. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/completion.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/exit.h"
#include "kernels/isa.h"
#include "opts/tables.h"

/* record: the command may do a job's work (opts/jobs.c lists what a job runs) and gets its completion
 * record here, when it returns 0 inside an attempt. train writes its own, richer one (its steps, its model), and the
 * wrappers (launch, job-run) and the service's own commands are no job's work. */
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    bool record;
} commands[] = {
    {"tokenizer", cmd_tokenizer, "train, encode and decode byte-level BPE (tiktoken files)", true},
    {"prep", cmd_prep, "turn a text corpus into llm.c token shards", true},
    {"train", cmd_train, "train a model of any family (anvil info lists the presets) on token shards", false},
    {"sample", cmd_sample, "generate text from a trained model", true},
    {"ckpt", cmd_ckpt, "inspect and verify training checkpoints", true},
    {"export", cmd_export, "write a model as a Hugging Face folder of its family's architecture", true},
    {"import", cmd_import, "read a Hugging Face folder of any family anvil knows into a model file", true},
    {"s3", cmd_s3, "copy, list and remove objects on S3 (s3:// paths)", false},
    {"info", cmd_info, "show model presets, sizes and the kernels in use", true},
    {"launch", cmd_launch, "run N ranks of a command through mpirun, output merged", false},
    {"profile", cmd_profile, "summarize a trace that train --profile wrote: where the time goes", false},
    {"plot", cmd_plot, "draw runs' metrics, or a job's goodput timeline, into an SVG or PNG", false},
    {"health", cmd_health, "check each rank's GEMM and memory and the all-reduce between them", true},
    {"serve", cmd_serve, "run the job service: HTTP API, job statuses, retries, limits", false},
    {"job", cmd_job, "submit, list, describe, follow, stop and wait for service jobs; the audit trail", false},
    {"user", cmd_user, "add and list the job service's users (admins)", false},
    {"token", cmd_token, "make and revoke the job service's API tokens (admins)", false},
    {"role", cmd_role, "add, grant and list the job service's roles", false},
    {"quota", cmd_quota, "set and show the job service's quotas, with their usage", false},
    {"pool", cmd_pool, "list and release the job service's warm pools (Slurm allocations kept after a job)", false},
    {"chaos", cmd_chaos, "strike a service job with faults on a schedule (ranks, attempts, the daemon, the disk)", false},
    {"job-run", cmd_job_run, "(internal) the wrapper anvil serve runs each job attempt through", false},
    {"sim-host-rsh", cmd_sim_host_rsh, "(internal) mpirun's way into anvil serve's simulated hosts (--sim-hosts)", false},
};

/* Inside a job's attempt (ANVIL_ATTEMPT), the command's word that it finished, in ANVIL_RUN_DIR
 * (ckpt/completion.h), written by its first rank alone (the others' exits reach the attempt's status
 * through the launcher). 0, or 1 with the error said. */
static int record_completion(const char *name) {
    const char *attempt = getenv("ANVIL_ATTEMPT"), *dir = getenv("ANVIL_RUN_DIR");
    const char *rank = getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK")
                       : getenv("PMIX_RANK")          ? getenv("PMIX_RANK")
                                                      : getenv("SLURM_PROCID");
    if (!attempt || !dir || (rank && strcmp(rank, "0"))) return ANVIL_EXIT_OK;
    if (!anvil_completion_write(dir, name, -1, -1, NULL, 0)) return ANVIL_EXIT_OK;
    fprintf(stderr, "anvil %s: error: %s\n", name, anvil_errmsg());
    return ANVIL_EXIT_ERROR;
}

/* For tests only (tests/cli_slurm.sh): with ANVIL_TEST_HOLD_START_S=S a command a job runs (opts/jobs.c)
 * waits S seconds before anything else, its signal handlers and its first heartbeat included, which holds
 * its job in Launching; a stop's SIGUSR1 then ends it as it would a rank that has not set them yet. */
static void test_hold_start(const char *name) {
    const char *v = getenv("ANVIL_TEST_HOLD_START_S");
    if (v && anvil_opts_job_command(name)) sleep((unsigned)atoi(v));
}

static void usage(FILE *out) {
    fprintf(out, "usage: anvil <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nRun 'anvil <command> --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return ANVIL_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return ANVIL_EXIT_OK;
    }
    /* A path this CPU cannot run would fall back silently: refuse it up front. */
    if (anvil_isa_check()) {
        fprintf(stderr, "anvil: error: %s\n", anvil_errmsg());
        return ANVIL_EXIT_ERROR;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            test_hold_start(argv[1]);
            int rc = commands[i].run(argc - 1, argv + 1);
            return rc == ANVIL_EXIT_OK && commands[i].record ? record_completion(commands[i].name) : rc;
        }
    fprintf(stderr, "anvil: error: unknown command '%s' (try 'anvil --help')\n", argv[1]);
    return ANVIL_EXIT_USAGE;
}
