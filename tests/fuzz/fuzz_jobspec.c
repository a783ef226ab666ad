/* libFuzzer entry point for the job spec parser (the body of POST /v1/jobs): any byte string must be
 * either accepted as a spec within its limits or refused with a message, never crash, leak or read
 * out of bounds; an accepted spec must survive the round trip through its canonical JSON unchanged,
 * and its command is one the job service runs, which that subcommand's option table parses.
 * Built and run by tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and scripts/fuzz.sh. */
#include "core/error.h"
#include "job/spec.h"
#include "opts/tables.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    anvil_fail("%s", "");
    anvil_job_spec s;
    if (anvil_job_spec_parse((const char *)data, size, &s)) {
        if (anvil_errmsg()[0] == '\0' || s.name || s.argv) __builtin_trap();
        return 0;
    }
    if (!s.name || !s.name[0] || s.argc < 1 || !s.argv || s.argv[s.argc] || s.hosts < 1 || s.hosts > 1024 ||
        s.procs_per_host < 1 || s.max_retries < 0 || s.max_runtime_s < 0 || s.hang_timeout_s < 0 ||
        s.keep_alive_s < 0 || s.keep_alive_s > ANVIL_JOB_KEEP_ALIVE_MAX_S)
        __builtin_trap();
    for (int i = 0; i < s.nchannels; i++)
        if (s.channels[i].value[0] != '/') __builtin_trap();
    if (s.backend && strcmp(s.backend, "local") && strcmp(s.backend, "slurm")) __builtin_trap();
    const anvil_optset *set = anvil_opts_job_command(s.argv[0]);
    anvil_opt_arg *args;
    int nargs;
    if (!set || anvil_opts_collect(set, s.argc, s.argv, &args, &nargs)) __builtin_trap();
    for (int i = 0; i < nargs; i++)
        if (args[i].id >= 0 && set->opts[args[i].id].run_folder) __builtin_trap();
    free(args);
    cJSON *j = anvil_job_spec_to_json(&s);
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!text) __builtin_trap();
    anvil_job_spec again;
    if (anvil_job_spec_parse(text, strlen(text), &again)) __builtin_trap();
    cJSON *j2 = anvil_job_spec_to_json(&again);
    char *text2 = j2 ? cJSON_PrintUnformatted(j2) : NULL;
    cJSON_Delete(j2);
    if (!text2 || strcmp(text, text2)) __builtin_trap();
    free(text);
    free(text2);
    anvil_job_spec_free(&again);
    anvil_job_spec_free(&s);
    return 0;
}
