/* anvil job-run: the wrapper the job service starts each attempt through. It runs the command (an
 * anvil subcommand, normally launch), ignoring stop signals itself so that only the command reacts
 * to them, and records the command's exit status in a file, atomically, before it exits: a daemon
 * that was down when the attempt ended still learns how it ended. With --verify-completion it checks
 * an attempt's completion record instead (ckpt/completion.h), for the Slurm backend's batch script,
 * which keeps a warm pool only after a step that finished. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/completion.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/exit.h"
#include "core/fsutil.h"

static const int ignored[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};
#define NIGNORED (sizeof ignored / sizeof *ignored)

/* --verify-completion DIR ATTEMPT COMMAND: 0 when DIR holds COMMAND's finished record of ATTEMPT, else
 * 1 with what is wrong on stderr. */
static int verify_completion(int argc, char **argv) {
    if (argc != 5) return cli_usage_error("job-run", "--verify-completion takes DIR ATTEMPT COMMAND");
    return anvil_completion_verify(argv[2], argv[3], argv[4], NULL) ? cli_fail("job-run") : ANVIL_EXIT_OK;
}

int cmd_job_run(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--verify-completion")) return verify_completion(argc, argv);
    if (argc < 4 || strcmp(argv[1], "--exit-file") || strcmp(argv[3], "--") || argc < 5) {
        fputs("usage: anvil job-run --exit-file FILE -- <anvil subcommand and its options>\n"
              "       anvil job-run --verify-completion DIR ATTEMPT COMMAND\n"
              "(used by anvil serve)\n", argc > 1 && !strcmp(argv[1], "--help") ? stdout : stderr);
        return argc > 1 && !strcmp(argv[1], "--help") ? 0 : ANVIL_EXIT_USAGE;
    }
    char self[PATH_MAX];
    ssize_t sn = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sn <= 0) {
        anvil_fail("cannot find the anvil binary (/proc/self/exe): %s", strerror(errno));
        return cli_fail("job-run");
    }
    self[sn] = 0;
    struct sigaction ign = {0}, old[NIGNORED];
    ign.sa_handler = SIG_IGN;
    for (size_t i = 0; i < NIGNORED; i++) sigaction(ignored[i], &ign, &old[i]);
    pid_t pid = fork();
    if (pid < 0) {
        anvil_fail("fork: %s", strerror(errno));
        return cli_fail("job-run");
    }
    if (pid == 0) {
        for (size_t i = 0; i < NIGNORED; i++) sigaction(ignored[i], &old[i], NULL);
        argv[3] = "anvil";
        execv(self, argv + 3);
        _exit(127);
    }
    int status, code;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    char text[16];
    int n = snprintf(text, sizeof text, "%d\n", code);
    if (anvil_write_file_atomic(argv[2], text, (size_t)n)) return cli_fail("job-run");
    return code;
}
