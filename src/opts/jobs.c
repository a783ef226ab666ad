/* Which subcommands a job of the service runs: those whose --out is a run folder. The daemon
 * appends --out RUN_DIR to every job's command; the other subcommands take no --out (sample, info,
 * health, ckpt) or write a file there (tokenizer train, import), so as jobs they could only fail. */
#include <stdio.h>
#include <string.h>

#include "opts/tables.h"

static const anvil_optset *const job_commands[] = {&anvil_train_cmdline, &anvil_prep_cmdline, &anvil_export_cmdline};

const anvil_optset *anvil_opts_job_command(const char *name) {
    for (size_t i = 0; i < sizeof job_commands / sizeof *job_commands; i++)
        if (!strcmp(name, job_commands[i]->command)) return job_commands[i];
    return NULL;
}

void anvil_opts_job_commands(char *buf, size_t cap) {
    buf[0] = 0;
    for (size_t i = 0; i < sizeof job_commands / sizeof *job_commands; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", job_commands[i]->command);
    }
}
