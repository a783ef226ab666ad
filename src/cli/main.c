/* anvil: one binary, one subcommand per task. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/exit.h"
#include "kernels/isa.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"tokenizer", cmd_tokenizer, "train, encode and decode byte-level BPE (tiktoken files)"},
    {"prep", cmd_prep, "turn a text corpus into llm.c token shards"},
    {"train", cmd_train, "train a GPT-2 model on token shards"},
    {"sample", cmd_sample, "generate text from a trained model"},
    {"ckpt", cmd_ckpt, "inspect and verify training checkpoints"},
    {"export", cmd_export, "write a Hugging Face GPT-2 checkpoint"},
    {"import", cmd_import, "read a Hugging Face GPT-2 checkpoint"},
    {"s3", cmd_s3, "copy, list and remove objects on S3 (s3:// paths)"},
    {"info", cmd_info, "show model presets, sizes and the kernels in use"},
    {"launch", cmd_launch, "run N ranks of a command through mpirun, output merged"},
    {"profile", cmd_profile, "summarize a trace that train --profile wrote: where the time goes"},
    {"plot", cmd_plot, "draw runs' loss, learning rate, throughput and log metrics into an SVG or PNG"},
    {"health", cmd_health, "check each rank's GEMM and memory and the all-reduce between them"},
    {"serve", cmd_serve, "run the job service: HTTP API, job statuses, retries, limits"},
    {"job", cmd_job, "submit, list, describe, follow, stop and wait for service jobs; the audit trail"},
    {"user", cmd_user, "add and list the job service's users (admins)"},
    {"token", cmd_token, "make and revoke the job service's API tokens (admins)"},
    {"role", cmd_role, "add, grant and list the job service's roles"},
    {"quota", cmd_quota, "set and show the job service's quotas, with their usage"},
    {"pool", cmd_pool, "list and release the job service's warm pools (Slurm allocations kept after a job)"},
    {"job-run", cmd_job_run, "(internal) the wrapper anvil serve runs each job attempt through"},
};

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
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "anvil: error: unknown command '%s' (try 'anvil --help')\n", argv[1]);
    return ANVIL_EXIT_USAGE;
}
