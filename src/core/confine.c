#include "core/confine.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define MAX_ALLOWED 16

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char allowed[MAX_ALLOWED][PATH_MAX];
static int nallowed;

/* Whether real (a real path) lies at or under prefix, once prefix is resolved (one that does not
 * exist admits nothing), at a component boundary. */
static bool under(const char *real, const char *prefix, size_t len) {
    char given[PATH_MAX], p[PATH_MAX];
    if (!len || len >= sizeof given) return false;
    memcpy(given, prefix, len);
    given[len] = 0;
    if (!realpath(given, p)) return false;
    size_t n = strlen(p);
    if (n == 1) return real[0] == '/';
    return !strncmp(real, p, n) && (real[n] == 0 || real[n] == '/');
}

static bool under_list(const char *real, const char *list) {
    for (const char *p = list; p && *p;) {
        size_t n = strcspn(p, "\n");
        if (under(real, p, n)) return true;
        p += n + (p[n] == '\n');
    }
    return false;
}

int anvil_confined(const char *path, const char *what) {
    const char *prefixes = getenv("ANVIL_JOB_PREFIXES"), *run = getenv("ANVIL_RUN_DIR");
    char real[PATH_MAX];
    if (!prefixes || !realpath(path, real)) return 0;
    if (under_list(real, prefixes) || (run && under(real, run, strlen(run)))) return 0;
    pthread_mutex_lock(&mu);
    bool ok = false;
    for (int i = 0; i < nallowed && !ok; i++) ok = under(real, allowed[i], strlen(allowed[i]));
    pthread_mutex_unlock(&mu);
    /* Where it leads is not said: the job's log is its submitter's to read. */
    return ok ? 0
              : anvil_fail("%s %s: leads outside the job's role (a symbolic link to a place its prefixes do not "
                           "hold)",
                           what, path);
}

int anvil_confine_allow(const char *dir) {
    pthread_mutex_lock(&mu);
    int rc = 0;
    if (nallowed == MAX_ALLOWED) rc = -1;
    else snprintf(allowed[nallowed++], PATH_MAX, "%s", dir);
    pthread_mutex_unlock(&mu);
    return rc ? anvil_fail("%s: more than %d staging folders in one process", dir, MAX_ALLOWED) : 0;
}
