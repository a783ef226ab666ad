/* The Slurm backend's clients and shell (slurm_internal.h): sbatch, scontrol, squeue and scancel run as
 * child processes, their one-line answers read by key, and the quoting of what its scripts run. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "job/slurm_internal.h"

extern char **environ;

double anvil_slurm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void anvil_slurm_put_quoted(anvil_strbuf *t, const char *s) {
    anvil_strbuf_puts(t, "'");
    for (const char *q; (q = strchr(s, '\'')); s = q + 1) {
        anvil_strbuf_put(t, s, (size_t)(q - s));
        anvil_strbuf_puts(t, "'\\''");
    }
    anvil_strbuf_puts(t, s);
    anvil_strbuf_puts(t, "'");
}

int anvil_slurm_file_pattern(const char *path, const char *suffix, char *out, size_t cap) {
    char text[8192];
    if ((size_t)snprintf(text, sizeof text, "%s%s", path, suffix) >= sizeof text)
        return anvil_fail("%s: too long for a file name pattern", path);
    bool escaped = strchr(text, '\\') != NULL;
    size_t n = 0;
    for (const char *p = text; *p; p++) {
        bool twice = escaped ? *p == '\\' : *p == '%';
        if (n + 2 + twice > cap) return anvil_fail("%s: too long for a file name pattern", path);
        if (twice) out[n++] = *p;
        out[n++] = *p;
    }
    out[n] = 0;
    return 0;
}

void anvil_slurm_put_atomic_write(anvil_strbuf *t, const char *command, const char *path) {
    anvil_strbuf_printf(t, "%s > ", command);
    anvil_slurm_put_quoted(t, path);
    anvil_strbuf_puts(t, ".tmp && sync ");
    anvil_slurm_put_quoted(t, path);
    anvil_strbuf_puts(t, ".tmp && mv -f ");
    anvil_slurm_put_quoted(t, path);
    anvil_strbuf_puts(t, ".tmp ");
    anvil_slurm_put_quoted(t, path);
    anvil_strbuf_puts(t, "\n");
}

int anvil_slurm_run(char *const *argv, char *const *env, char **out) {
    *out = NULL;
    int fd[2];
    if (pipe2(fd, O_CLOEXEC)) return anvil_fail("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return anvil_fail("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        if (in < 0 || dup2(in, STDIN_FILENO) < 0 || dup2(fd[1], STDOUT_FILENO) < 0 || dup2(fd[1], STDERR_FILENO) < 0)
            _exit(127);
        execvpe(argv[0], argv, env);
        _exit(127);
    }
    close(fd[1]);
    anvil_strbuf t = {0};
    anvil_strbuf_puts(&t, "");
    char buf[4096];
    ssize_t n;
    while ((n = read(fd[0], buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        if (t.len < 65536) anvil_strbuf_put(&t, buf, (size_t)n);
    }
    close(fd[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (t.oom) {
        free(t.s);
        return anvil_fail("out of memory");
    }
    *out = t.s;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !t.len)
        return anvil_fail("%s: cannot run it (not in PATH?)", argv[0]);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

const char *anvil_slurm_first_line(char *out) {
    out[strcspn(out, "\n")] = 0;
    return out;
}

int anvil_slurm_run_quiet(char *const *argv) {
    char *out;
    int rc = anvil_slurm_run(argv, environ, &out);
    if (rc > 0) anvil_fail("%s %s: %s", argv[0], argv[1], anvil_slurm_first_line(out));
    free(out);
    return rc ? -1 : 0;
}

int anvil_slurm_cancel(char *const *argv, char *said, size_t cap) {
    char *out;
    said[0] = 0;
    int rc = anvil_slurm_run(argv, environ, &out);
    if (rc < 0) return -1;
    /* Slurm's answers for a job it has ended already, or is ending: what the cancel was for. */
    bool ended = rc > 0 && (strstr(out, "Invalid job id") || strstr(out, "already completing or completed"));
    /* Its errors name it ("scancel: error: ..."). */
    if (rc > 0 && !ended && out[0]) snprintf(said, cap, "%s", anvil_slurm_first_line(out));
    else if (rc > 0 && !ended) snprintf(said, cap, "%s exited %d without a word", argv[0], rc);
    free(out);
    return rc > 0 && !ended ? 1 : 0;
}

void anvil_slurm_job_dir(const slurm_backend *sb, int64_t id, char *path, size_t cap) {
    snprintf(path, cap, "%s/jobs/%lld", sb->state_dir, (long long)id);
}

void anvil_slurm_attempt_file(const slurm_backend *sb, const anvil_attempt_ref *a, const char *name, char *path,
                              size_t cap) {
    anvil_attempt_file(sb->state_dir, a, name, path, cap);
}

char *anvil_slurm_field(const char *line, const char *key, bool rest) {
    size_t klen = strlen(key);
    for (const char *p = line; (p = strstr(p, key)); p += klen) {
        if ((p == line || isspace((unsigned char)p[-1])) && p[klen] == '=') {
            const char *v = p + klen + 1;
            return strndup(v, strcspn(v, rest ? "\n" : " \n"));
        }
    }
    return NULL;
}

bool anvil_slurm_field_is(const char *info, const char *key, const char *want) {
    char *v = anvil_slurm_field(info, key, false);
    bool same = v && !strcmp(v, want);
    free(v);
    return same;
}

int anvil_slurm_show_job(const char *id, char **out) {
    int rc = anvil_slurm_run((char *[]){"scontrol", "-o", "show", "job", (char *)id, NULL}, environ, out);
    if (rc > 0 && strstr(*out, "Invalid job id")) rc = 1;
    else if (rc > 0) rc = anvil_fail("scontrol show job %s: %s", id, anvil_slurm_first_line(*out));
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

char **anvil_slurm_submit_env(const anvil_attempt_spec *a) {
    size_t n = 0;
    while (a->envp[n]) n++;
    char **env = calloc(n + 2, sizeof *env);
    if (!env) return NULL;
    memcpy(env, a->envp, n * sizeof *env);
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "SLURM_CONF=", 11)) env[n] = *e;
    return env;
}
