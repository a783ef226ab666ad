/* The anvil subcommands. Each takes the arguments after its own name,
 * prints its usage on --help, and returns the process exit status. */
#ifndef ANVIL_CLI_COMMANDS_H
#define ANVIL_CLI_COMMANDS_H

#include <cjson/cJSON.h>

int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_prep(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_health(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_job(int argc, char **argv);
int cmd_job_run(int argc, char **argv);
int cmd_sim_host_rsh(int argc, char **argv);
int cmd_user(int argc, char **argv);
int cmd_token(int argc, char **argv);
int cmd_role(int argc, char **argv);
int cmd_quota(int argc, char **argv);
int cmd_pool(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_s3(int argc, char **argv);
int cmd_chaos(int argc, char **argv);

/* The quick health check anvil train runs on more than one rank, between
 * anvil_dist_init and training; collective. Prints on rank 0 and returns 0
 * when healthy, else the exit status (every rank returns the same). */
int cli_health_before_training(const char *cmd);

/* A goodput answer of the job service (GET /v1/jobs/ID/goodput) as `anvil job goodput` prints it. */
void cli_print_goodput(const cJSON *g, double id);

/* The job service's state folder: given, else ~/.local/share/anvil. malloc'd. */
char *cli_state_dir(const char *given);

#endif
