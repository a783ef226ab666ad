/* Processes captured and started again (core/proc_image.h). */
#include "core/proc_image.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"

static int read_proc(pid_t pid, const char *what, char **text, size_t *len) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, what);
    FILE *f = fopen(path, "r");
    if (!f) return anvil_fail("%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096;
    *text = malloc(cap);
    *len = 0;
    size_t got;
    while (*text && (got = fread(*text + *len, 1, cap - *len - 1, f)) > 0) {
        *len += got;
        if (*len + 1 == cap) *text = realloc(*text, cap *= 2);
    }
    fclose(f);
    if (!*text) return anvil_fail("out of memory");
    (*text)[*len] = 0;
    return 0;
}

/* fd's target when it is a file a new process can append to, else /dev/null. */
static void output_of(pid_t pid, int fd, char *out, size_t cap) {
    char link[64];
    snprintf(link, sizeof link, "/proc/%d/fd/%d", (int)pid, fd);
    ssize_t n = readlink(link, out, cap - 1);
    out[n > 0 ? n : 0] = 0;
    if (out[0] != '/' || !strncmp(out, "/dev/pts", 8)) snprintf(out, cap, "/dev/null");
}

int anvil_proc_capture(pid_t pid, anvil_proc_image *img) {
    char link[64];
    memset(img, 0, sizeof *img);
    snprintf(link, sizeof link, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(link, img->exe, sizeof img->exe - 1);
    snprintf(link, sizeof link, "/proc/%d/cwd", (int)pid);
    ssize_t m = readlink(link, img->cwd, sizeof img->cwd - 1);
    if (n <= 0 || m <= 0) return anvil_fail("pid %d: cannot read its program or folder (run as its user)", (int)pid);
    img->exe[n] = img->cwd[m] = 0;
    static const char deleted[] = " (deleted)";
    if ((size_t)n > sizeof deleted && !strcmp(img->exe + n - (sizeof deleted - 1), deleted))
        img->exe[n - (sizeof deleted - 1)] = 0;
    output_of(pid, 1, img->out, sizeof img->out);
    output_of(pid, 2, img->err, sizeof img->err);
    if (read_proc(pid, "cmdline", &img->argv_text, &img->argv_len) ||
        read_proc(pid, "environ", &img->env_text, &img->env_len)) {
        anvil_proc_image_free(img);
        return -1;
    }
    return 0;
}

/* NUL-separated strings as a NULL-ended vector (pointing into text), after `extra` free slots at its head. */
static char **split_nul(char *text, size_t len, size_t extra) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += text[i] == 0;
    char **v = calloc(n + extra + 2, sizeof *v);
    size_t k = extra;
    for (char *p = text; v && p < text + len; p += strlen(p) + 1) v[k++] = p;
    return v;
}

int anvil_proc_respawn(const anvil_proc_image *img, const char *wait_script) {
    /* Behind a wait: sh -c 'SCRIPT; exec "$0" "$@"' EXE ARG1 ..., the program's own argv[0] giving way to
     * its path. */
    char **argv = split_nul(img->argv_text, img->argv_len, wait_script ? 3 : 0),
         **envp = split_nul(img->env_text, img->env_len, 0);
    char *script = NULL, sh[] = "sh", dash_c[] = "-c", exe[PATH_MAX];
    const char *path = img->exe;
    snprintf(exe, sizeof exe, "%s", img->exe);
    if (argv && wait_script && asprintf(&script, "%s\nexec \"$0\" \"$@\"", wait_script) >= 0) {
        argv[0] = sh;
        argv[1] = dash_c;
        argv[2] = script;
        argv[3] = exe;
        path = "/bin/sh";
    }
    pid_t pid = argv && envp && (!wait_script || script) ? fork() : -1;
    if (pid == 0) {
        setsid();
        if (fork() != 0) _exit(0);
        int in = open("/dev/null", O_RDONLY), out = open(img->out, O_WRONLY | O_APPEND | O_CREAT, 0644),
            err = open(img->err, O_WRONLY | O_APPEND | O_CREAT, 0644);
        if (in < 0 || out < 0 || err < 0 || chdir(img->cwd)) _exit(127);
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        execve(path, argv, envp);
        _exit(127);
    }
    free(argv);
    free(envp);
    free(script);
    if (pid < 0) return anvil_fail("cannot start %s again: %s", img->exe, strerror(errno ? errno : ENOMEM));
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    return 0;
}

void anvil_proc_image_free(anvil_proc_image *img) {
    free(img->argv_text);
    free(img->env_text);
    img->argv_text = img->env_text = NULL;
}

int anvil_proc_gone(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    return p && (p[2] == 'Z' || p[2] == 'X');
}
