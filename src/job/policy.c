#include "job/policy.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <glob.h>
#include <sys/stat.h>

#include "core/error.h"
#include "opts/tables.h"

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

/* Whether key (an S3 key, or a prefix of one) holds an empty, '.' or '..' component before its end:
 * S3 takes such keys literally, but a client or proxy on the way may collapse them, so they are
 * never compared as they stand. */
static bool s3_key_odd(const char *key) {
    for (const char *p = key; *p;) {
        size_t c = strcspn(p, "/");
        if ((c == 0 && p[c]) || (c == 1 && p[0] == '.') || (c == 2 && p[0] == '.' && p[1] == '.')) return true;
        p += c + (p[c] == '/');
    }
    return false;
}

/* Whether text is s3://BUCKET[/PREFIX] with a bucket name S3 allows (3 to 63 lowercase letters,
 * digits, '.' and '-') and a key prefix without odd components. */
static bool s3_uri_valid(const char *text) {
    if (strncmp(text, "s3://", 5)) return false;
    const char *b = text + 5;
    size_t n = strcspn(b, "/");
    if (n < 3 || n > 63 || strspn(b, "abcdefghijklmnopqrstuvwxyz0123456789.-") < n) return false;
    return !b[n] || !s3_key_odd(b + n + 1);
}

/* Whether s holds a control character (a newline, a tab, DEL...): such a path could not be written
 * into a batch script's #SBATCH line, whose line ends at a newline whatever the quoting, nor shown on
 * one line. */
static bool has_control(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return true;
    return false;
}

static int take_prefixes(const cJSON *v, const char *field, char ***out, int *n) {
    int count = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (count < 1 || count > MAX_PREFIXES)
        return anvil_fail("role: %s: must be an array of 1 to %d absolute paths or s3:// prefixes", field,
                          MAX_PREFIXES);
    if (!(*out = calloc((size_t)count, sizeof **out))) return anvil_fail("role: out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        char label[40];
        snprintf(label, sizeof label, "%s[%d]", field, *n);
        if (anvil_json_string(e, "role", label, MAX_PATH_TEXT, &(*out)[*n])) return -1;
        const char *p = (*out)[(*n)++];
        if (has_control(p)) return anvil_fail("role: %s: may not hold a control character", label);
        if (!strncmp(p, "s3://", 5) && !s3_uri_valid(p))
            return anvil_fail("role: %s: must be s3://BUCKET or s3://BUCKET/PREFIX (a bucket of 3 to 63 lowercase "
                              "letters, digits, '.' and '-'; no empty, '.' or '..' component)", label);
        if (strncmp(p, "s3://", 5) && p[0] != '/')
            return anvil_fail("role: %s: must be an absolute path or an s3:// prefix", label);
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
            if (anvil_job_env_reserved(r->env[i].key))
                return anvil_fail("role: env.%s: set by the daemon for each job%s", r->env[i].key,
                                  strncmp(r->env[i].key, "AWS_", 4) ? ""
                                                                    : " (a role's S3 credentials and endpoint are in the "
                                                                      "daemon's --s3-config)");
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
            /* Named as given: the resolved probe would show where the links before it lead. */
            if (!lstat(probe, &sb))
                return anvil_fail("%.200s: %.*s cannot be resolved (a dangling or looping symbolic link, or a "
                                  "folder that cannot be searched)",
                                  path, (int)(p - buf), buf);
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

/* Whether the normalized path lies under one of the local prefixes (normalized here, so that a
 * prefix reached through a symbolic link still admits the paths it names; one that cannot be
 * resolved, and every s3:// one, admits nothing). */
static bool under_any(const char *path, char *const *prefixes, int n) {
    for (int i = 0; i < n; i++) {
        char p[PATH_MAX];
        if (prefixes[i][0] == '/' && !anvil_path_resolve(prefixes[i], p, sizeof p) && anvil_path_under(path, p))
            return true;
    }
    return false;
}

/* Whether s3://bucket/key lies at or under one of the s3:// prefixes, at a component boundary. */
static bool s3_under_any(const char *uri, char *const *prefixes, int n) {
    for (int i = 0; i < n; i++) {
        const char *p = prefixes[i];
        if (strncmp(p, "s3://", 5)) continue;
        size_t len = strlen(p);
        while (len > 5 && p[len - 1] == '/') len--;
        if (!strncmp(uri, p, len) && (uri[len] == 0 || uri[len] == '/')) return true;
    }
    return false;
}

/* The prefixes of a check (local or s3://), listed for a refusal. */
static void list_prefixes(const anvil_role *r, bool input, bool output, bool s3, char *buf, size_t cap) {
    buf[0] = 0;
    for (int k = 0; k < 2; k++) {
        char *const *v = k ? r->output : r->input;
        int n = k ? r->noutput : r->ninput;
        if (k ? !output : !input) continue;
        for (int i = 0; i < n; i++) {
            if ((strncmp(v[i], "s3://", 5) == 0) != s3) continue;
            size_t len = strlen(buf);
            snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", v[i]);
        }
    }
    if (!buf[0]) snprintf(buf, cap, "none");
}

static const char *which(bool input, bool output) {
    return input && output ? "input and output" : input ? "input" : "output";
}

/* Checks one path of the spec (field names it) against the prefixes; 0 with *resolved malloc'd. */
static int check_path(const anvil_role *r, const char *field, const char *path, bool input, bool output,
                      char **resolved, char *why, size_t cap) {
    char real[PATH_MAX], list[1024];
    if (has_control(path)) return refuse(why, cap, "%s: a path may not hold a control character", field);
    if (anvil_path_resolve(path, real, sizeof real))
        return refuse(why, cap, "%s: %s", field, anvil_errmsg());
    /* Through a symbolic link: the path as given names no control character, where it leads does. */
    if (has_control(real))
        return refuse(why, cap, "%s: %.1000s leads to a path with a control character", field, path);
    if ((input && under_any(real, r->input, r->ninput)) || (output && under_any(real, r->output, r->noutput))) {
        if (resolved && !(*resolved = strdup(real))) return anvil_fail("out of memory");
        return 0;
    }
    /* Where the path leads is not said: that would show a submitter where the host's links point. */
    list_prefixes(r, input, output, false, list, sizeof list);
    return refuse(why, cap, "%s: %.1000s is outside role %s's %s prefixes (%s)", field, path, r->name,
                  which(input, output), list);
}

/* An s3:// argument: a valid bucket, no odd key components, under the role's s3:// prefixes. */
static int check_s3(const anvil_role *r, const char *field, const char *uri, bool output, char *why, size_t cap) {
    char list[1024];
    const char *b = uri + 5;
    size_t n = strcspn(b, "/");
    if (n < 1 || strspn(b, "abcdefghijklmnopqrstuvwxyz0123456789.-") < n || (b[n] && s3_key_odd(b + n + 1)))
        return refuse(why, cap, "%s: %.1000s: not an s3://BUCKET/KEY this service vouches for (a bucket of lowercase "
                                "letters, digits, '.' and '-'; no empty, '.' or '..' key component)", field, uri);
    if ((!output && s3_under_any(uri, r->input, r->ninput)) || s3_under_any(uri, r->output, r->noutput)) return 0;
    list_prefixes(r, !output, true, true, list, sizeof list);
    return refuse(why, cap, "%s: %.1000s is outside role %s's S3 %s prefixes (%s)", field, uri, r->name,
                  which(!output, true), list);
}

/* An s3:// argument; a pattern's folder (the key up to the component with the wildcards) is what the
 * role must admit. */
static int check_s3_arg(const anvil_role *r, const char *field, anvil_opt_kind k, const char *arg, char *why,
                        size_t cap) {
    const char *slash = strchr(arg + 5, '/'), *wild = k == ANVIL_OPT_GLOB_IN ? strpbrk(arg, "*?[") : NULL;
    char lit[MAX_PATH_TEXT + 1];
    snprintf(lit, sizeof lit, "%s", arg);
    if (wild) {
        const char *last = strrchr(arg, '/');
        if (!slash || wild <= slash || last > wild)
            return refuse(why, cap, "%s: %.1000s: wildcards are allowed in the key's last component only", field, arg);
        lit[last - arg] = 0;
    }
    return check_s3(r, field, lit, k == ANVIL_OPT_URI_OUT, why, cap);
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

/* The current matches of a local pattern, each resolved and checked like a path: a file that the
 * pattern reaches through a symbolic link must lead into the prefixes too. */
static int check_matches(const anvil_role *r, const char *field, const char *pattern, char *why, size_t cap) {
    glob_t g;
    int rc = 0;
    if (glob(pattern, GLOB_NOSORT, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc && !rc; i++) rc = check_path(r, field, g.gl_pathv[i], true, true, NULL, why, cap);
    globfree(&g);
    return rc;
}

/* A local argument of kind k, absolute or taken from the run folder; *canon gets it resolved (the
 * pattern's folder resolved for a glob), or stays NULL when it is to be left as given. */
static int check_local(const anvil_role *r, const anvil_job_spec *s, const char *field, anvil_opt_kind k,
                       const char *arg, char **canon, char *why, size_t cap) {
    bool output = k == ANVIL_OPT_PATH_OUT || k == ANVIL_OPT_URI_OUT, glob_kind = k == ANVIL_OPT_GLOB_IN;
    const char *last = strrchr(arg, '/');
    if (glob_kind && strpbrk(arg, "*?[") && strpbrk(arg, "*?[") < (last ? last : arg))
        return refuse(why, cap, "%s: %.1000s: wildcards in a folder's name are not allowed (only in the last "
                                "component)", field, arg);
    if (arg[0] != '/' && !s->output) {
        /* The run folder is new and the daemon's: a relative path stays inside it unless it climbs. */
        if (has_dotdot(arg)) return refuse(why, cap, "%s: %.1000s: '..' would leave the job's run folder", field, arg);
        return 0;
    }
    char joined[PATH_MAX * 2];
    snprintf(joined, sizeof joined, "%s%s%s", arg[0] == '/' ? "" : s->output, arg[0] == '/' ? "" : "/", arg);
    if (!glob_kind || !strpbrk(arg, "*?[")) return check_path(r, field, joined, !output, true, canon, why, cap);
    /* A pattern: its folder is checked as a path, and what it matches now as paths too. */
    char *slash = strrchr(joined, '/'), *dir = NULL;
    *slash = 0;
    int rc = check_path(r, field, joined[0] ? joined : "/", true, true, &dir, why, cap);
    *slash = '/';
    if (!rc) rc = check_matches(r, field, joined, why, cap);
    if (!rc && !(*canon = malloc(strlen(dir) + strlen(slash) + 1))) rc = anvil_fail("out of memory");
    if (!rc) sprintf(*canon, "%s%s", strcmp(dir, "/") ? dir : "", slash);
    free(dir);
    return rc;
}

/* One argument of the command that names a file, a folder or an object (o says its kind),
 * canonicalized in place: replaced by its resolved path. */
static int check_arg(const anvil_role *r, anvil_job_spec *s, const anvil_opt *o, int argi, char *why, size_t cap) {
    char field[120], *canon = NULL;
    const char *arg = s->argv[argi];
    if (o->name[0] == '-') snprintf(field, sizeof field, "command[%d] (%s)", argi, o->name);
    else snprintf(field, sizeof field, "command[%d]", argi);
    if (anvil_opt_is_choice(o, arg, NULL)) return 0;
    if (!arg[0]) return refuse(why, cap, "%s: an empty path", field);
    if (has_control(arg)) return refuse(why, cap, "%s: a path may not hold a control character", field);
    bool uri = o->kind == ANVIL_OPT_URI_IN || o->kind == ANVIL_OPT_URI_OUT || o->kind == ANVIL_OPT_GLOB_IN;
    if (uri && !strncmp(arg, "s3://", 5)) return check_s3_arg(r, field, o->kind, arg, why, cap);
    int rc = check_local(r, s, field, o->kind, arg, &canon, why, cap);
    if (!rc && canon) {
        free(s->argv[argi]);
        s->argv[argi] = canon;
    } else {
        free(canon);
    }
    return rc;
}

/* Every argument that the command's table (opts/tables.h) says is a path, a URI or a pattern. */
static int check_command(const anvil_role *r, anvil_job_spec *s, char *why, size_t cap) {
    const anvil_optset *set = anvil_opts_job_command(s->argv[0]);
    anvil_opt_arg *args = NULL;
    int n = 0;
    if (!set || anvil_opts_collect(set, s->argc, s->argv, &args, &n))
        return refuse(why, cap, "command: not a command a job can run: %s", set ? anvil_errmsg() : s->argv[0]);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const anvil_opt *o = args[i].id < 0 ? set->operand : &set->opts[args[i].id];
        if (o->kind >= ANVIL_OPT_PATH_IN) rc = check_arg(r, s, o, args[i].argi, why, cap);
        /* The ports below 1024 are the host's services': a job of a daemon run as root could bind one
         * before its service does. */
        else if (!strcmp(o->name, "--metrics-port") && args[i].i > 0 && args[i].i < 1024)
            rc = refuse(why, cap, "command[%d] (--metrics-port): %lld is a privileged port (1 to 1023); a job may "
                        "use 0 (a free port) or 1024 to 65535", args[i].argi, (long long)args[i].i);
    }
    free(args);
    return rc;
}

static int check_env(const anvil_role *r, anvil_job_spec *s, char *why, size_t cap) {
    for (int i = 0; i < s->nenv; i++) {
        const char *k = s->env[i].key;
        for (int j = 0; j < r->nenv; j++)
            if (!strcmp(k, r->env[j].key)) return refuse(why, cap, "env.%s: set by role %s", k, r->name);
        if (!anvil_job_env_allowed(k)) {
            char list[512];
            anvil_job_env_allowlist(list, sizeof list);
            return refuse(why, cap, "env.%s: not a variable a job may set (it may set %s)", k, list);
        }
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
static const char *const daemon_set[] = {"ANVIL_JOB_ID", "ANVIL_TOKEN", "ANVIL_ATTEMPT", "ANVIL_RUN_DIR",
                                         "ANVIL_JOB_PREFIXES"};
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

/* What a spec's env may set; README ("The job service", env) lists the same. */
static const char *const allowed[] = {"OMP_NUM_THREADS",       "OMP_PROC_BIND",         "OMP_PLACES",
                                      "ANVIL_ISA",             "ANVIL_BF16",            "ANVIL_S3_MAX_ATTEMPTS",
                                      "ANVIL_S3_RETRY_BASE_MS", "ANVIL_S3_RETRY_CAP_MS", "ANVIL_S3_PART_SIZE",
                                      "ANVIL_HEALTH_FAULT",    "ANVIL_TEST_NO_COMPLETION", "ANVIL_TEST_HOLD_START_S"};

bool anvil_job_env_allowed(const char *name) {
    return named(name, strlen(name), allowed, sizeof allowed / sizeof *allowed);
}

void anvil_job_env_allowlist(char *buf, size_t cap) {
    buf[0] = 0;
    for (size_t i = 0; i < sizeof allowed / sizeof *allowed; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", allowed[i]);
    }
}

bool anvil_job_env_reserved(const char *name) {
    return named(name, strlen(name), daemon_set, NDAEMON_SET) || !strncmp(name, "ANVIL_CHANNEL_", 14) ||
           !strncmp(name, "AWS_", 4);
}
