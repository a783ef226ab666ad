/* Multi-process launching through Open MPI's mpirun.
 *
 * anvil_launch_run starts N ranks of one program (the anvil binary itself,
 * or any executable) with mpirun, and merges what every rank writes into
 * the caller's stdout and stderr, one `[rank R] ` prefixed line at a time,
 * while copying each rank's lines into LOG_DIR/rank_<R>.log.
 *
 * The ranks' output comes from the files of `mpirun --output-filename
 * DIR:nocopy`, one per rank and stream, read as they grow. Open MPI 4.1.4's
 * tagged streams cannot carry it: each chunk it reads is tagged into a
 * fixed buffer, so --tag-output silently drops the rest of a chunk of many
 * short lines (546 of 1000 newlines written at once arrive) and --xml
 * segfaults mpirun, killing the job, once one write holds 250 newlines. The
 * files are written on the host where the rank runs, so with --hosts the
 * log folder must be on a filesystem the hosts share.
 *
 * Exit status, as observed with Open MPI 4.1.4: mpirun exits with the first
 * failing rank's code and kills the other ranks (SIGCONT, SIGTERM, SIGKILL a
 * second later), also when that code is 75, "stopped, resumable": ranks
 * must finish their checkpoint together before any of them exits. A rank
 * killed by signal S gives 128+S. On SIGTERM or SIGINT mpirun sends the
 * ranks SIGTERM and SIGKILLs them about two seconds later, too soon for a
 * checkpoint, but it forwards SIGUSR1 as is. So the launcher turns the
 * first SIGTERM/SIGINT/SIGHUP it gets into a SIGUSR1 for the job (the
 * trainer's "stop after this step"), and a second one into SIGTERM. */
#ifndef ANVIL_LAUNCH_LAUNCH_H
#define ANVIL_LAUNCH_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *name;
    int slots;
} anvil_launch_host;

typedef struct {
    int nranks;
    /* "h1:4,h2:4" (a bare name means one slot); NULL runs every rank here. */
    const char *hosts;
    /* Forces the TCP transport (pml ob1, btl tcp,self), standing in for separate machines. */
    bool tcp;
    /* Lets ranks outnumber the slots; implied on this machine when nranks exceeds its cores. */
    bool oversubscribe;
    /* Where rank_<R>.log and mpirun.log go; NULL: anvil_launch_default_log_dir. */
    const char *log_dir;
    /* The program each rank runs; NULL: this anvil binary, with argv an anvil subcommand. */
    const char *exec;
    int argc;
    char **argv;
    /* Told (may be NULL) each time more ranks have started, as far as the
     * launcher can see: a rank counts once mpirun has made its output files,
     * which it does when it starts the rank. */
    void (*started)(void *ctx, int ranks_started, int nranks);
    void *started_ctx;
} anvil_launch_spec;

/* Parses a --hosts value into a malloc'd array; -1 with a message naming the bad entry. */
int anvil_launch_parse_hosts(const char *spec, anvil_launch_host **hosts, int *nhosts);
void anvil_launch_free_hosts(anvil_launch_host *hosts, int nhosts);

/* Physical cores available to this process (distinct core ids among the CPUs it may run on). */
int anvil_launch_local_cores(void);

/* The log folder when none is given: `<train --out>/logs` when the command is
 * `train ... --out DIR`, else ./anvil-logs/<UTC yyyymmdd-hhmmss>. malloc'd. */
char *anvil_launch_default_log_dir(const anvil_launch_spec *spec);

/* Checks what the user asked for, before anything starts: -1 with a
 * message when nranks < 1, the hosts are malformed or have fewer slots than
 * nranks (without oversubscribe), there is no command, or a given log
 * folder or program name is empty. */
int anvil_launch_check(const anvil_launch_spec *spec);

/* The mpirun command line for spec (NULL-terminated, malloc'd strings),
 * where self is the anvil binary, output_dir mpirun's --output-filename
 * folder, local_cores the core count used to decide on --oversubscribe and
 * root whether to add --allow-run-as-root. Every
 * variable of env named OMP_*, GOMP_*, OPENBLAS_*, ANVIL_*, PATH or
 * LD_LIBRARY_PATH is exported to the ranks with -x; without --hosts and
 * without OMP_NUM_THREADS, each rank gets local_cores / nranks threads (at
 * least 1). -1 with a message when anvil_launch_check fails. */
int anvil_launch_build_argv(const anvil_launch_spec *spec, const char *self, const char *output_dir, int local_cores,
                            bool root, char *const *env, char ***argv_out);
void anvil_launch_free_argv(char **argv);

/* Turns the ranks' output, arriving in pieces, into whole prefixed lines. */
typedef struct anvil_launch_merger anvil_launch_merger;

/* Rank lines go to out_fd / err_fd prefixed with "[rank R] " and, unprefixed,
 * to log_dir/rank_<R>.log (both streams, appended). What mpirun itself says
 * is kept (see anvil_launch_merger_mpirun_text) and appended to
 * log_dir/mpirun.log. log_dir NULL keeps no files. NULL on error. */
anvil_launch_merger *anvil_launch_merger_new(int nranks, const char *log_dir, int out_fd, int err_fd);
/* Bytes from one rank's stdout (err false) or stderr, cut anywhere. A line
 * longer than 64 KiB is passed on in 64 KiB pieces. */
int anvil_launch_merger_feed_rank(anvil_launch_merger *m, int rank, bool err, const char *buf, size_t n);
/* Bytes from mpirun's own stdout or stderr (its reports, ssh's errors), cut anywhere. */
int anvil_launch_merger_feed_mpirun(anvil_launch_merger *m, bool err, const char *buf, size_t n);
/* Writes out unterminated last lines (a newline is added) and closes the logs. */
int anvil_launch_merger_finish(anvil_launch_merger *m);
/* Everything mpirun said about the job itself, decoded, lines joined by '\n'. */
const char *anvil_launch_merger_mpirun_text(const anvil_launch_merger *m);
void anvil_launch_merger_free(anvil_launch_merger *m);

/* The launcher's exit status from mpirun's wait status and its messages,
 * with a one-line explanation in line ("" on success): the failing rank and
 * its code; the rank, host and signal of a rank killed by a signal; the
 * rank that called MPI_Abort; the daemons that could not be started. A rank's 75 stays 75; failures to
 * start the job exit 1. */
int anvil_launch_decode_exit(int wait_status, const char *mpirun_text, char *line, size_t cap);

/* anvil_launch_check, then that mpirun is in PATH and every host resolves
 * (a name that does not would otherwise surface as ssh's error, with the
 * domain cut off, inside a page about daemons). */
int anvil_launch_preflight(const anvil_launch_spec *spec);

/* anvil_launch_preflight, then starts the job, merges its output and
 * waits for it. Returns the exit status to use, with line the one-line
 * explanation of a failure ("" on success); -1 with a message when nothing
 * could be started. */
int anvil_launch_run(const anvil_launch_spec *spec, char *line, size_t cap);

#endif
