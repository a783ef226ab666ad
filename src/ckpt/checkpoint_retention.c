/* Retention: listing the step folders, finding the newest that verifies, pruning. */
#include "ckpt/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/checkpoint_internal.h"
#include "core/error.h"
#include "core/fsutil.h"

/* ---- finding and pruning ---- */

/* The step of a folder named exactly step_<digits>, or -1. */
static int64_t step_of(const char *name) {
    if (strncmp(name, "step_", 5) || !name[5] || strlen(name + 5) > 15) return -1;
    for (const char *p = name + 5; *p; p++)
        if (*p < '0' || *p > '9') return -1;
    return strtoll(name + 5, NULL, 10);
}

typedef struct {
    int64_t step;
    char name[64];
} entry;

static int cmp_desc(const void *a, const void *b) {
    int64_t x = ((const entry *)a)->step, y = ((const entry *)b)->step;
    return (x < y) - (x > y);
}

/* The step folders of ckdir, newest first. *n = -1 and 0 returned when ckdir does not exist. */
static entry *list_steps(const char *ckdir, int *n) {
    *n = 0;
    DIR *d = opendir(ckdir);
    if (!d) {
        if (errno == ENOENT) {
            *n = -1;
            return NULL;
        }
        anvil_fail("%s: cannot list: %s", ckdir, strerror(errno));
        return NULL;
    }
    entry *v = NULL;
    int cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t s = step_of(e->d_name);
        if (s < 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            entry *nv = realloc(v, sizeof *v * (size_t)cap);
            if (!nv) {
                free(v);
                closedir(d);
                anvil_fail("%s: out of memory", ckdir);
                *n = 0;
                return NULL;
            }
            v = nv;
        }
        v[*n].step = s;
        memcpy(v[*n].name, e->d_name, strlen(e->d_name) + 1); /* step_of bounds the length */
        (*n)++;
    }
    closedir(d);
    if (!v) v = malloc(sizeof *v);
    if (!v)
        anvil_fail("%s: out of memory", ckdir);
    else
        qsort(v, (size_t)*n, sizeof *v, cmp_desc);
    return v;
}

int anvil_ckpt_list(const char *run_dir, char (**names)[64]) {
    char ckdir[PATH_MAX];
    *names = NULL;
    if (ckpt_join(ckdir, sizeof ckdir, run_dir, "ckpt")) return -1;
    int n;
    entry *v = list_steps(ckdir, &n);
    if (n < 0) return 0;
    if (!v) return -1;
    if (n && !(*names = malloc(sizeof **names * (size_t)n))) n = anvil_fail("%s: out of memory", ckdir);
    for (int i = 0; i < n; i++) memcpy((*names)[i], v[i].name, sizeof v[i].name);
    free(v);
    return n;
}

static void append(char *buf, size_t cap, const char *fmt, const char *a, const char *b) {
    if (!buf || !cap) return;
    size_t len = strlen(buf);
    if (len < cap) snprintf(buf + len, cap - len, fmt, a, b);
}

int anvil_ckpt_find_latest_checked(const char *run_dir, char *out, size_t cap, char *warn, size_t warn_cap,
                                   anvil_ckpt_check_fn check, void *ctx) {
    if (warn && warn_cap) warn[0] = '\0';
    char ckdir[PATH_MAX];
    if (ckpt_join(ckdir, sizeof ckdir, run_dir, "ckpt")) return -1;
    int n;
    entry *v = list_steps(ckdir, &n);
    if (n < 0) return 0;
    if (!v) return -1;
    int found = n == 0 ? 0 : -1, gave_up = 0;
    char first_err[1024] = "";
    for (int i = 0; i < n && found < 0 && !gave_up; i++) {
        char dir[PATH_MAX];
        if (ckpt_join(dir, sizeof dir, ckdir, v[i].name)) break;
        int rc = check(ctx, dir, v[i].step);
        if (rc == 0) {
            snprintf(out, cap, "%s", dir);
            found = 1;
        } else if (rc == -2) {
            gave_up = 1;
        } else {
            if (!first_err[0]) snprintf(first_err, sizeof first_err, "%s", anvil_errmsg());
            append(warn, warn_cap, "skipping corrupt checkpoint %s: %s\n", v[i].name, anvil_errmsg());
        }
    }
    free(v);
    if (found < 0 && !gave_up) anvil_fail("%s: no checkpoint verifies (newest: %s)", ckdir, first_err);
    return found;
}

static int verify_whole(void *ctx, const char *ckpt_dir, int64_t step) {
    (void)ctx;
    return anvil_ckpt_verify_part(ckpt_dir, step, 0, 1);
}

int anvil_ckpt_find_latest_valid(const char *run_dir, char *out, size_t cap, char *warn, size_t warn_cap) {
    return anvil_ckpt_find_latest_checked(run_dir, out, cap, warn, warn_cap, verify_whole, NULL);
}

int anvil_ckpt_resolve(const char *path, char *out, size_t cap, char *warn, size_t warn_cap) {
    char probe[PATH_MAX];
    struct stat sb;
    if (warn_cap) warn[0] = 0;
    snprintf(probe, sizeof probe, "%s/manifest.json", path);
    int is_ckpt = stat(probe, &sb) == 0;
    snprintf(probe, sizeof probe, "%s/ckpt", path);
    if (!is_ckpt && stat(probe, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        int rc = anvil_ckpt_find_latest_valid(path, out, cap, warn, warn_cap);
        if (rc == 0) anvil_fail("%s: the run has no checkpoint", path);
        return rc == 1 ? 0 : -1;
    }
    snprintf(out, cap, "%s", path);
    return 0;
}

/* Whether a .tmp- name is another process's leftover. The caller holds the run
 * folder's lock, so no other process can be writing there: whoever left it has
 * died, even if its pid is still taken (by a zombie that PID 1 has not reaped,
 * or by an unrelated process that reused it) or names a process on another host. */
static int stale_tmp(const char *name) {
    const char *t = strstr(name, ".tmp-");
    if (!t || t[5] < '0' || t[5] > '9') return 0;
    return strtol(t + 5, NULL, 10) != (long)getpid();
}

int anvil_ckpt_prune(const char *run_dir, int keep_last, int64_t keep_every) {
    if (keep_last < 1 || keep_every < 0)
        return anvil_fail("checkpoint prune: keep_last must be >= 1 and keep_every >= 0");
    char ckdir[PATH_MAX], path[PATH_MAX];
    if (ckpt_join(ckdir, sizeof ckdir, run_dir, "ckpt")) return -1;
    int n;
    entry *v = list_steps(ckdir, &n);
    if (n < 0) return 0;
    if (!v) return -1;
    char latest[64] = "";
    if (!ckpt_join(path, sizeof path, ckdir, "latest")) {
        size_t len;
        char *text;
        if (!anvil_read_file_max(path, 4096, &text, &len)) {
            text[strcspn(text, "\n")] = '\0';
            snprintf(latest, sizeof latest, "%s", text);
            free(text);
        }
    }
    int removed = 0, rc = 0;
    for (int i = keep_last; i < n && !rc; i++) {
        if ((keep_every > 0 && v[i].step % keep_every == 0) || !strcmp(v[i].name, latest)) continue;
        char doomed[PATH_MAX + 48];
        /* Out of the step_<digits> namespace first, so a crash mid-delete leaves only a .tmp- leftover. */
        if (ckpt_join(path, sizeof path, ckdir, v[i].name)) break;
        snprintf(doomed, sizeof doomed, "%s.tmp-%ld.del", path, (long)getpid());
        if (rename(path, doomed)) {
            rc = anvil_fail("%s: cannot rename for deletion: %s", path, strerror(errno));
            break;
        }
        rc = anvil_remove_tree(doomed);
        removed += !rc;
    }
    free(v);
    DIR *d = rc ? NULL : opendir(ckdir);
    for (struct dirent *e; d && !rc && (e = readdir(d));) {
        if ((strncmp(e->d_name, "step_", 5) && strncmp(e->d_name, "latest.tmp-", 11)) || !stale_tmp(e->d_name))
            continue;
        if (ckpt_join(path, sizeof path, ckdir, e->d_name) || anvil_remove_tree(path))
            rc = -1;
        else
            removed++;
    }
    if (d) closedir(d);
    return rc ? -1 : removed;
}
