#include "cli/args.h"

#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/error.h"
#include "core/exit.h"
#include "opts/opts.h"

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "anvil %s: error: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'anvil %s --help')\n", cmd);
    return ANVIL_EXIT_USAGE;
}

int cli_fail(const char *cmd) {
    fprintf(stderr, "anvil %s: error: %s\n", cmd, anvil_errmsg());
    return ANVIL_EXIT_ERROR;
}

int cli_config_fail(const char *cmd) {
    cli_fail(cmd);
    return ANVIL_EXIT_CONFIG;
}

const char *arg_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int arg_i64(const char *cmd, const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out) {
    if (!anvil_opt_i64(opt, val, lo, hi, out)) return 0;
    cli_usage_error(cmd, "%s", anvil_errmsg());
    return -1;
}

int arg_int(const char *cmd, const char *opt, const char *val, long lo, long hi, int *out) {
    int64_t v;
    if (arg_i64(cmd, opt, val, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}

int arg_double(const char *cmd, const char *opt, const char *val, double *out) {
    if (!anvil_opt_double(opt, val, out)) return 0;
    cli_usage_error(cmd, "%s", anvil_errmsg());
    return -1;
}

int arg_float(const char *cmd, const char *opt, const char *val, float *out) {
    if (!anvil_opt_float(opt, val, out)) return 0;
    cli_usage_error(cmd, "%s", anvil_errmsg());
    return -1;
}

void cli_set_threads(int threads) {
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!threads && !getenv("OMP_NUM_THREADS") && local && atoi(local) > 1) {
        threads = (int)sysconf(_SC_NPROCESSORS_ONLN) / atoi(local);
        if (threads < 1) threads = 1;
    }
    if (threads) omp_set_num_threads(threads);
}
