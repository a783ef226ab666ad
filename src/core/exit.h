/* The exit statuses of every anvil command, in one place: the launcher,
 * the job service and Slurm scripts act on them, not only people. */
#ifndef ANVIL_CORE_EXIT_H
#define ANVIL_CORE_EXIT_H

#define ANVIL_EXIT_OK 0
#define ANVIL_EXIT_ERROR 1 /* one line on stderr says why */
#define ANVIL_EXIT_USAGE 2 /* bad options: retrying cannot help */
/* Stopped by SIGTERM or SIGUSR1 after finishing a step and writing a
 * checkpoint: resumable with --resume auto. */
#define ANVIL_EXIT_RESUMABLE 75
/* The configuration or the input cannot work (sysexits' EX_CONFIG): a
 * bad data path, a model that does not fit, a checkpoint that does not
 * match. Running the same command again fails the same way, so the job
 * service does not retry it. */
#define ANVIL_EXIT_CONFIG 78
/* A collective waited past --collective-timeout: the watchdog aborted the
 * job, naming the ranks that did not answer. */
#define ANVIL_EXIT_COLLECTIVE_TIMEOUT 76

/* anvil job: the job ended Failed or Stopped (wait), or the daemon refused the request (a 4xx). */
#define ANVIL_EXIT_JOB_FAILED 3
#define ANVIL_EXIT_REFUSED 4

#endif
