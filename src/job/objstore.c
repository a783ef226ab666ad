#include "job/objstore.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "job/spec.h"
#include "s3/s3.h"

#define MAX_FILE (1u << 20)

struct anvil_objstore {
    char *text;
    size_t len;
};

/* What each section's key becomes in a job's environment; the first two are required. */
static const char *const keys[][2] = {{"aws_access_key_id", "AWS_ACCESS_KEY_ID"},
                                      {"aws_secret_access_key", "AWS_SECRET_ACCESS_KEY"},
                                      {"aws_session_token", "AWS_SESSION_TOKEN"},
                                      {"region", "AWS_REGION"},
                                      {"endpoint_url", "AWS_ENDPOINT_URL"}};
#define NKEYS (sizeof keys / sizeof *keys)

/* Every section of the text, checked: a role's name, with the two keys a signature needs. */
static int check_sections(const char *path, const char *text, size_t len) {
    int line = 1;
    for (const char *p = text, *end = text + len; p < end; line++) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        while (p < eol && (*p == ' ' || *p == '\t')) p++;
        if (p < eol && *p == '[') {
            const char *close = memchr(p, ']', (size_t)(eol - p));
            char name[80];
            if (!close || close - p - 1 >= (long)sizeof name)
                return anvil_fail("%s:%d: a section header must be [ROLE]", path, line);
            snprintf(name, sizeof name, "%.*s", (int)(close - p - 1), p + 1);
            if (!anvil_job_name_valid(name, 64))
                return anvil_fail("%s:%d: [%s]: not a role name (1 to 64 letters, digits, '.', '_' or '-')", path, line,
                                  name);
            char v[2048];
            for (size_t k = 0; k < 2; k++)
                if (!anvil_s3_ini_get(text, len, name, keys[k][0], v, sizeof v) || !v[0])
                    return anvil_fail("%s: [%s]: %s missing", path, name, keys[k][0]);
        }
        p = eol + 1;
    }
    return 0;
}

anvil_objstore *anvil_objstore_load(const char *path) {
    struct stat sb;
    if (stat(path, &sb)) {
        anvil_fail("--s3-config %s: cannot be read", path);
        return NULL;
    }
    /* Secrets in a file others can read are secrets no more. */
    if (sb.st_mode & 077) {
        anvil_fail("--s3-config %s: holds credentials, so others may not read it (chmod 600 %s)", path, path);
        return NULL;
    }
    anvil_objstore *o = calloc(1, sizeof *o);
    if (!o) {
        anvil_fail("out of memory");
        return NULL;
    }
    if (anvil_read_file_max(path, MAX_FILE, &o->text, &o->len) || check_sections(path, o->text, o->len)) {
        anvil_objstore_free(o);
        return NULL;
    }
    return o;
}

void anvil_objstore_free(anvil_objstore *o) {
    if (!o) return;
    if (o->text) memset(o->text, 0, o->len);
    free(o->text);
    free(o);
}

void anvil_objstore_env_free(char **env) {
    for (size_t i = 0; env && env[i]; i++) {
        memset(env[i], 0, strlen(env[i]));
        free(env[i]);
    }
    free(env);
}

char **anvil_objstore_env(const anvil_objstore *o, const char *role) {
    char **env = calloc(NKEYS + 3, sizeof *env);
    if (!env) return NULL;
    size_t n = 0;
    bool oom = !(env[n++] = strdup("AWS_SHARED_CREDENTIALS_FILE=/dev/null")) ||
               !(env[n++] = strdup("AWS_CONFIG_FILE=/dev/null"));
    char v[2048];
    for (size_t k = 0; o && role && role[0] && !oom && k < NKEYS; k++) {
        if (!anvil_s3_ini_get(o->text, o->len, role, keys[k][0], v, sizeof v) || !v[0]) continue;
        size_t len = strlen(keys[k][1]) + strlen(v) + 2;
        if (!(env[n] = malloc(len))) oom = true;
        else snprintf(env[n++], len, "%s=%s", keys[k][1], v);
    }
    memset(v, 0, sizeof v);
    if (oom) {
        anvil_objstore_env_free(env);
        return NULL;
    }
    return env;
}
