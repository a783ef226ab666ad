#include "job/policy.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"

#define MAX_PREFIXES 64
#define MAX_PATH_TEXT 4096
#define MAX_ENV 256
#define MAX_PROCS (1 << 20)
#define MAX_LIMIT 1e9

static void free_strings(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

void anvil_role_free(anvil_role *r) {
    free(r->name);
    free_strings(r->input, r->ninput);
    free_strings(r->output, r->noutput);
    anvil_job_kv_free(r->env, r->nenv);
    memset(r, 0, sizeof *r);
}

static int take_prefixes(const cJSON *v, const char *field, char ***out, int *n) {
    int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (count < 1 || count > MAX_PREFIXES)
        return anvil_fail("role: %s: must be an array of 1 to %d absolute paths", field, MAX_PREFIXES);
    if (!(*out = calloc((size_t)count, sizeof **out))) return anvil_fail("role: out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        char label[40];
        snprintf(label, sizeof label, "%s[%d]", field, *n);
        if (anvil_json_string(e, "role", label, MAX_PATH_TEXT, &(*out)[*n])) return -1;
        if ((*out)[(*n)++][0] != '/') return anvil_fail("role: %s: must be an absolute path", label);
    }
    return 0;
}

static const char *const role_fields[] = {"name", "input_prefixes", "output_prefixes", "max_procs", "max_runtime_s",
                                          "env"};
#define NROLE_FIELDS (sizeof role_fields / sizeof *role_fields)

static int take_role_field(const cJSON *e, size_t f, anvil_role *r) {
    switch (f) {
    case 0:
        if (anvil_json_string(e, "role", "name", 64, &r->name)) return -1;
        return anvil_job_name_valid(r->name, 64) ? 0
                                                 : anvil_fail("role: name: 1 to 64 letters, digits, '.', '_' or '-'");
    case 1:
        return take_prefixes(e, "input_prefixes", &r->input, &r->ninput);
    case 2:
        return take_prefixes(e, "output_prefixes", &r->output, &r->noutput);
    case 3:
        return anvil_json_int(e, "role", "max_procs", 1, MAX_PROCS, &r->max_procs);
    case 4:
        return anvil_json_number(e, "role", "max_runtime_s", MAX_LIMIT, false, &r->max_runtime_s);
    default:
        if (anvil_json_env(e, "role", "env", &r->env, &r->nenv)) return -1;
        for (int i = 0; i < r->nenv; i++)
            if (anvil_job_env_reserved(r->env[i].key, true))
                return anvil_fail("role: env.%s: set by the daemon for each job", r->env[i].key);
        return 0;
    }
}

int anvil_role_parse(const char *text, size_t len, anvil_role *r) {
    memset(r, 0, sizeof *r);
    cJSON *root = anvil_json_parse_object(text, len, "role");
    if (!root) return -1;
    bool seen[NROLE_FIELDS] = {false};
    int rc = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        size_t f = 0;
        while (f < NROLE_FIELDS && strcmp(e->string, role_fields[f])) f++;
        if (f == NROLE_FIELDS) rc = anvil_fail("role: unknown field '%.100s'", e->string);
        else if (seen[f]) rc = anvil_fail("role: %s: given twice", role_fields[f]);
        else seen[f] = true, rc = take_role_field(e, f, r);
        if (rc) break;
    }
    cJSON_Delete(root);
    /* Limits have no default: a role that forgot one would grant more than meant. */
    for (size_t f = 0; !rc && f < NROLE_FIELDS - 1; f++)
        if (!seen[f]) rc = anvil_fail("role: %s: missing", role_fields[f]);
    if (rc) anvil_role_free(r);
    return rc;
}

cJSON *anvil_role_to_json(const anvil_role *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON *in = cJSON_CreateStringArray((const char *const *)r->input, r->ninput);
    cJSON *out = cJSON_CreateStringArray((const char *const *)r->output, r->noutput);
    cJSON *env = cJSON_CreateObject();
    bool ok = o && in && out && env;
    for (int i = 0; ok && i < r->nenv; i++) ok = cJSON_AddStringToObject(env, r->env[i].key, r->env[i].value);
    if (!ok) {
        cJSON_Delete(o);
        cJSON_Delete(in);
        cJSON_Delete(out);
        cJSON_Delete(env);
        return NULL;
    }
    cJSON_AddStringToObject(o, "name", r->name);
    cJSON_AddItemToObject(o, "input_prefixes", in);
    cJSON_AddItemToObject(o, "output_prefixes", out);
    cJSON_AddNumberToObject(o, "max_procs", r->max_procs);
    cJSON_AddNumberToObject(o, "max_runtime_s", r->max_runtime_s);
    cJSON_AddItemToObject(o, "env", env);
    return o;
}

int anvil_path_resolve(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    if (path[0] != '/') return anvil_fail("%.200s: not an absolute path", path);
    if (n >= PATH_MAX) return anvil_fail("%.200s...: longer than %d bytes", path, PATH_MAX - 1);
    char buf[PATH_MAX], real[PATH_MAX];
    memcpy(buf, path, n + 1);
    /* The longest prefix the kernel resolves, cut back a component at a time. */
    size_t end = n;
    for (;;) {
        char keep = buf[end];
        buf[end] = 0;
        bool found = realpath(end ? buf : "/", real) != NULL;
        int err = errno;
        buf[end] = keep;
        if (found) break;
        if (err != ENOENT && err != ENOTDIR) return anvil_fail("%.200s: %s", path, strerror(err));
        while (end > 0 && buf[end - 1] != '/') end--;
        while (end > 0 && buf[end - 1] == '/') end--;
    }
    size_t len = strlen(real);
    if (len >= cap) return anvil_fail("%.200s: longer than %zu bytes once resolved", path, cap - 1);
    memcpy(out, real, len + 1);
    bool first = true;
    for (char *p = buf + end; *p;) {
        while (*p == '/') p++;
        size_t c = strcspn(p, "/");
        if (!c) break;
        char comp[NAME_MAX + 1];
        if (c > NAME_MAX) return anvil_fail("%.200s: a component is longer than %d bytes", path, NAME_MAX);
        memcpy(comp, p, c);
        comp[c] = 0;
        p += c;
        if (!strcmp(comp, ".")) continue;
        if (first) {
            /* realpath stopped before it, so it must not exist: if it does, it is a link that leads
             * nowhere (yet) or cannot be followed, and whatever it will name is unknown. */
            struct stat sb;
            char probe[PATH_MAX + NAME_MAX + 2];
            snprintf(probe, sizeof probe, "%s/%s", strcmp(out, "/") ? out : "", comp);
            if (!lstat(probe, &sb))
                return anvil_fail("%.200s: %s cannot be resolved (a dangling or looping symbolic link, or a folder "
                                  "that cannot be searched)",
                                  path, probe);
            first = false;
        }
        if (!strcmp(comp, "..")) {
            char *slash = strrchr(out, '/');
            if (slash == out) out[1] = 0;
            else *slash = 0;
            continue;
        }
        len = strlen(out);
        bool root = len == 1;
        if (len + c + (root ? 0 : 1) >= cap)
            return anvil_fail("%.200s: longer than %zu bytes once resolved", path, cap - 1);
        snprintf(out + len, cap - len, "%s%s", root ? "" : "/", comp);
    }
    return 0;
}

bool anvil_path_under(const char *path, const char *prefix) {
    size_t n = strlen(prefix);
    if (n == 1 && prefix[0] == '/') return path[0] == '/';
    return !strncmp(path, prefix, n) && (path[n] == 0 || path[n] == '/');
}

static int refuse(char *why, size_t cap, const char *fmt, ...) ANVIL_PRINTF(3, 4);
static int refuse(char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    why[strcspn(why, "\r\n")] = 0;
    return 1;
}

/* Whether the normalized path lies under one of the prefixes (normalized here, so that a prefix
 * reached through a symbolic link still admits the paths it names; one that cannot be resolved
 * admits nothing). */
static bool under_any(const char *path, char *const *prefixes, int n) {
    for (int i = 0; i < n; i++) {
        char p[PATH_MAX];
        if (!anvil_path_resolve(prefixes[i], p, sizeof p) && anvil_path_under(path, p)) return true;
    }
    return false;
}

static void list_prefixes(char *const *a, int na, char *const *b, int nb, char *buf, size_t cap) {
    buf[0] = 0;
    for (int i = 0; i < na + nb; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", i < na ? a[i] : b[i - na]);
    }
}

/* Checks one path of the spec (field names it) against the prefixes; 0 with *resolved malloc'd. */
static int check_path(const anvil_role *r, const char *field, const char *path, bool input, bool output,
                      char **resolved, char *why, size_t cap) {
    char real[PATH_MAX], list[1024];
    if (anvil_path_resolve(path, real, sizeof real))
        return refuse(why, cap, "%s: %s", field, anvil_errmsg());
    if ((input && under_any(real, r->input, r->ninput)) || (output && under_any(real, r->output, r->noutput))) {
        if (resolved && !(*resolved = strdup(real))) return anvil_fail("out of memory");
        return 0;
    }
    list_prefixes(input ? r->input : NULL, input ? r->ninput : 0, output ? r->output : NULL, output ? r->noutput : 0,
                  list, sizeof list);
    char shown[PATH_MAX + 32] = "";
    if (strcmp(real, path)) snprintf(shown, sizeof shown, " (resolved: %s)", real);
    return refuse(why, cap, "%s: %.1000s%s is outside role %s's %s prefixes (%s)", field, path, shown, r->name,
                  input && output ? "input and output" : input ? "input" : "output", list);
}

static bool has_dotdot(const char *path) {
    for (const char *p = path; *p;) {
        size_t c = strcspn(p, "/");
        if (c == 2 && p[0] == '.' && p[1] == '.') return true;
        p += c;
        while (*p == '/') p++;
    }
    return false;
}

static int check_command(const anvil_role *r, const anvil_job_spec *s, char *why, size_t cap) {
    for (int i = 1; i < s->argc; i++) {
        const char *a = s->argv[i];
        if (!strchr(a, '/')) continue;
        char field[32], joined[PATH_MAX * 2];
        snprintf(field, sizeof field, "command[%d]", i);
        if (a[0] != '/' && !s->output) {
            if (has_dotdot(a))
                return refuse(why, cap, "%s: %.1000s: '..' would leave the job's run folder", field, a);
            continue;
        }
        snprintf(joined, sizeof joined, "%s%s%s", a[0] == '/' ? "" : s->output, a[0] == '/' ? "" : "/", a);
        int rc = check_path(r, field, joined, true, true, NULL, why, cap);
        if (rc) return rc;
    }
    return 0;
}

static int check_env(const anvil_role *r, anvil_job_spec *s, char *why, size_t cap) {
    for (int i = 0; i < s->nenv; i++) {
        const char *k = s->env[i].key;
        if (anvil_job_env_reserved(k, false))
            return refuse(why, cap, "env.%s: a job may not set it (it decides which programs run, or the daemon "
                                    "sets it)", k);
        for (int j = 0; j < r->nenv; j++)
            if (!strcmp(k, r->env[j].key)) return refuse(why, cap, "env.%s: set by role %s", k, r->name);
    }
    if (s->nenv + r->nenv > MAX_ENV)
        return refuse(why, cap, "env: more than %d variables with role %s's", MAX_ENV, r->name);
    if (!r->nenv) return 0;
    anvil_job_kv *env = realloc(s->env, sizeof *env * (size_t)(s->nenv + r->nenv + 1));
    if (!env) return anvil_fail("out of memory");
    s->env = env;
    for (int j = 0; j < r->nenv; j++) {
        anvil_job_kv *kv = &s->env[s->nenv];
        kv->key = strdup(r->env[j].key);
        kv->value = strdup(r->env[j].value);
        s->nenv++;
        if (!kv->key || !kv->value) return anvil_fail("out of memory");
    }
    return 0;
}

int anvil_policy_check(const anvil_role *r, anvil_job_spec *s, char *why, size_t cap) {
    long procs = (long)s->hosts * s->procs_per_host;
    if (procs > r->max_procs)
        return refuse(why, cap, "resources: %ld processes (hosts x procs_per_host) exceed role %s's max_procs %d", procs,
                      r->name, r->max_procs);
    if (r->max_runtime_s > 0 && s->max_runtime_s > r->max_runtime_s)
        return refuse(why, cap, "max_runtime_s: %g exceeds role %s's max_runtime_s %g", s->max_runtime_s, r->name,
                      r->max_runtime_s);
    if (s->max_runtime_s == 0) s->max_runtime_s = r->max_runtime_s;
    int rc = check_env(r, s, why, cap);
    for (int i = 0; !rc && i < s->nchannels; i++) {
        char field[100], *real = NULL;
        snprintf(field, sizeof field, "channels.%.80s", s->channels[i].key);
        rc = check_path(r, field, s->channels[i].value, true, false, &real, why, cap);
        if (!rc) {
            free(s->channels[i].value);
            s->channels[i].value = real;
        }
    }
    if (!rc && s->output) {
        char *real = NULL;
        rc = check_path(r, "output", s->output, false, true, &real, why, cap);
        if (!rc) {
            free(s->output);
            s->output = real;
        }
    }
    return rc ? rc : check_command(r, s, why, cap);
}

static bool named(const char *var, size_t len, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strlen(names[i]) == len && !strncmp(var, names[i], len)) return true;
    return false;
}

static bool prefixed(const char *var, size_t len, const char *const *prefixes, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (len > strlen(prefixes[i]) && !strncmp(var, prefixes[i], strlen(prefixes[i]))) return true;
    return false;
}

/* What the daemon itself sets for each attempt (or keeps from it): never a spec's or a role's, and never
 * the daemon's own inherited (a daemon run inside a job would pass on its job's). */
static const char *const daemon_set[] = {"ANVIL_JOB_ID", "ANVIL_TOKEN", "ANVIL_ATTEMPT", "ANVIL_RUN_DIR"};
#define NDAEMON_SET (sizeof daemon_set / sizeof *daemon_set)

bool anvil_job_env_inherited(const char *var) {
    static const char *const names[] = {"PATH", "HOME", "LANG", "TZ", "TMPDIR", "USER", "LOGNAME", "LD_LIBRARY_PATH",
                                        "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
    static const char *const prefixes[] = {"LC_", "OMP_", "GOMP_", "OPENBLAS_", "OMPI_", "PMIX_", "ANVIL_"};
    size_t len = strcspn(var, "=");
    if (named(var, len, daemon_set, NDAEMON_SET)) return false;
    return named(var, len, names, sizeof names / sizeof *names) ||
           prefixed(var, len, prefixes, sizeof prefixes / sizeof *prefixes);
}

bool anvil_job_env_reserved(const char *name, bool by_role) {
    static const char *const code[] = {"PATH"};
    size_t len = strlen(name);
    if (named(name, len, daemon_set, NDAEMON_SET) || !strncmp(name, "ANVIL_CHANNEL_", 14)) return true;
    return !by_role && (named(name, len, code, 1) || !strncmp(name, "LD_", 3));
}
