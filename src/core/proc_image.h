/* A running process captured so that it can be started again as it was: its program, arguments,
 * environment, folder and where its output went, read from /proc/PID. anvil chaos kills a process
 * (the job daemon, a Slurm node's slurmd) and starts it again from what was captured just before. */
#ifndef ANVIL_CORE_PROC_IMAGE_H
#define ANVIL_CORE_PROC_IMAGE_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    char exe[PATH_MAX], cwd[PATH_MAX], out[PATH_MAX], err[PATH_MAX];
    char *argv_text, *env_text; /* NUL-separated, as /proc has them */
    size_t argv_len, env_len;
} anvil_proc_image;

/* Reads pid's image; 0, or -1 after anvil_fail (the caller may not read the process's /proc). Its
 * output files are those of its stdout and stderr, or /dev/null when they are not files (a terminal,
 * a pipe). A program replaced since it started (a rebuild) is started again from its path. */
int anvil_proc_capture(pid_t pid, anvil_proc_image *img);
/* Starts the image again, detached (a grandchild in a session of its own: nobody need reap it). With
 * wait_script not NULL, /bin/sh runs it first and the program replaces the shell once it has ended
 * (e.g. a loop that waits for a condition). 0, or -1 after anvil_fail. */
int anvil_proc_respawn(const anvil_proc_image *img, const char *wait_script);
void anvil_proc_image_free(anvil_proc_image *img);
/* Whether pid is gone (or only a zombie waiting for its parent). */
int anvil_proc_gone(pid_t pid);

#endif
