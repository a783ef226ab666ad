/* Option parsing shared by the subcommands: "--name value" and "--flag",
 * with typed, range-checked conversions whose errors name the option. */
#ifndef ANVIL_CLI_ARGS_H
#define ANVIL_CLI_ARGS_H

#include <stdint.h>

/* Each returns 0, or prints "anvil <cmd>: error: ..." and returns -1. */
int arg_int(const char *cmd, const char *opt, const char *val, long lo, long hi, int *out);
int arg_i64(const char *cmd, const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out);
int arg_float(const char *cmd, const char *opt, const char *val, float *out);
int arg_double(const char *cmd, const char *opt, const char *val, double *out);
/* The value after argv[*i] (advancing *i), or an error when the option is last. */
const char *arg_value(const char *cmd, int argc, char **argv, int *i);
/* Prints the library's last error as the command's one-line error; returns exit status 1. */
int cli_fail(const char *cmd);
/* cli_fail for an error of the configuration or input, which a retry cannot mend: returns 78. */
int cli_config_fail(const char *cmd);
/* Prints a usage error; returns exit status 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...);
/* Sets the OpenMP thread count: `threads` when given (> 0); else, for a rank
 * of a multi-process job without OMP_NUM_THREADS, this machine's cores split
 * among the ranks on it (threads that outnumber the cores spin against each
 * other); else OpenMP's own default. */
void cli_set_threads(int threads);

#endif
