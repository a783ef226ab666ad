#include "job/spec.h"

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/json.h"
#include "obs/logmetric.h"
#include "opts/tables.h"

#define MAX_ARGS 256
#define MAX_ENTRIES 256
#define MAX_TEXT 4096
#define MAX_LIMIT 1e9

int anvil_json_string(const cJSON *v, const char *what, const char *field, size_t max, char **out) {
    if (!cJSON_IsString(v)) return anvil_fail("%s: %s: must be a string", what, field);
    size_t n = strlen(v->valuestring);
    if (n > max) return anvil_fail("%s: %s: longer than %zu bytes", what, field, max);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v->valuestring[i] < 0x20)
            return anvil_fail("%s: %s: control characters are not allowed", what, field);
    if (!(*out = strdup(v->valuestring))) return anvil_fail("%s: out of memory", what);
    return 0;
}

int anvil_json_number(const cJSON *v, const char *what, const char *field, double hi, bool integral, double *out) {
    if (!cJSON_IsNumber(v)) return anvil_fail("%s: %s: must be a number", what, field);
    double d = v->valuedouble;
    /* cJSON reads a number past the double range (1e999) as infinity. */
    if (!isfinite(d)) return anvil_fail("%s: %s: must be a finite number (this one is past the double range)", what, field);
    if (d < 0) return anvil_fail("%s: %s: must be >= 0 (got %g)", what, field, d);
    if (d > hi) return anvil_fail("%s: %s: must be <= %g (got %g)", what, field, hi, d);
    if (integral && d != floor(d)) return anvil_fail("%s: %s: must be an integer (got %g)", what, field, d);
    *out = d;
    return 0;
}

int anvil_json_int(const cJSON *v, const char *what, const char *field, int lo, int hi, int *out) {
    double d = 0;
    if (anvil_json_number(v, what, field, hi, true, &d)) return -1;
    if (d < lo) return anvil_fail("%s: %s: must be >= %d (got %g)", what, field, lo, d);
    *out = (int)d;
    return 0;
}

bool anvil_job_name_valid(const char *s, size_t max) {
    size_t n = strlen(s);
    if (!n || n > max) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i])) return false;
    return true;
}

static bool is_name(const char *s, size_t max, bool env) {
    size_t n = strlen(s);
    if (!n || n > max || (env && isdigit((unsigned char)s[0]))) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool ok = env ? (isalnum(c) || c == '_') : (isdigit(c) || islower(c) || c == '_');
        if (!ok) return false;
    }
    return true;
}

void anvil_job_kv_free(anvil_job_kv *kv, int n) {
    for (int i = 0; i < n; i++) {
        free(kv[i].key);
        free(kv[i].value);
    }
    free(kv);
}

enum map_kind { MAP_CHANNELS, MAP_ENV, MAP_TAGS, MAP_METRICS };

/* An object of strings: channels (lowercase names to absolute paths), env (variable names) or tags. */
static int take_map(const cJSON *v, const char *what, const char *field, enum map_kind kind, anvil_job_kv **out,
                    int *nout) {
    if (!cJSON_IsObject(v)) return anvil_fail("%s: %s: must be an object of strings", what, field);
    int n = cJSON_GetArraySize(v);
    if (n > MAX_ENTRIES) return anvil_fail("%s: %s: more than %d entries", what, field, MAX_ENTRIES);
    anvil_job_kv *kv = calloc((size_t)n + 1, sizeof *kv);
    if (!kv) return anvil_fail("%s: out of memory", what);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        const char *k = e->string;
        char label[200];
        snprintf(label, sizeof label, "%s.%.100s", field, k);
        /* A metric's name is checked with its pattern, by obs/logmetric.h. */
        bool name_ok = kind == MAP_METRICS || (kind == MAP_TAGS ? (k[0] && strlen(k) <= 128)
                                                                : is_name(k, 64, kind == MAP_ENV));
        if (!name_ok) {
            anvil_job_kv_free(kv, i);
            return anvil_fail("%s: %s: '%.100s' is not a valid name%s", what, field, k,
                              kind == MAP_CHANNELS ? " (lowercase letters, digits, '_')"
                              : kind == MAP_ENV    ? " (letters, digits, '_', not starting with a digit)"
                                                   : " (1 to 128 bytes)");
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(kv[j].key, k)) {
                anvil_job_kv_free(kv, i);
                return anvil_fail("%s: %s: given twice", what, label);
            }
        int rc = anvil_json_string(e, what, label, MAX_TEXT, &kv[i].value);
        if (!rc && !(kv[i].key = strdup(k))) rc = anvil_fail("%s: out of memory", what);
        if (!rc && kind == MAP_CHANNELS && kv[i].value[0] != '/')
            rc = anvil_fail("%s: %s: must be an absolute path", what, label);
        i++;
        if (rc) {
            anvil_job_kv_free(kv, i);
            return -1;
        }
    }
    *out = kv;
    *nout = n;
    return 0;
}

static int take_command(const cJSON *v, anvil_job_spec *s) {
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (n < 1 || n > MAX_ARGS)
        return anvil_fail("spec: command: must be an array of 1 to %d strings (the anvil subcommand first)", MAX_ARGS);
    if (!(s->argv = calloc((size_t)n + 1, sizeof *s->argv))) return anvil_fail("spec: out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        char label[32];
        snprintf(label, sizeof label, "command[%d]", s->argc);
        if (anvil_json_string(e, "spec", label, MAX_TEXT, &s->argv[s->argc])) return -1;
        s->argc++;
        if (!strcmp(s->argv[s->argc - 1], "--out"))
            return anvil_fail("spec: command: --out is not allowed: the run folder is the spec's output");
    }
    /* The daemon runs a job's command with --out RUN_DIR appended, which only these take as a folder
     * (opts/tables.h); the service's own commands have no business inside a job. */
    const anvil_optset *set = anvil_opts_job_command(s->argv[0]);
    if (!set) {
        char names[128];
        anvil_opts_job_commands(names, sizeof names);
        return anvil_fail("spec: command: '%.100s' is not an anvil subcommand a job can run (%s)", s->argv[0], names);
    }
    anvil_opt_arg *args;
    int nargs;
    int rc = anvil_opts_collect(set, s->argc, s->argv, &args, &nargs);
    if (rc == 1) return anvil_fail("spec: command: --help asks for the usage text; a job's command does work");
    if (rc) {
        char why[512];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        return anvil_fail("spec: command: %s (as 'anvil %s' parses it)", why, s->argv[0]);
    }
    free(args);
    return 0;
}

static int take_resources(const cJSON *v, anvil_job_spec *s) {
    if (!cJSON_IsObject(v)) return anvil_fail("spec: resources: must be an object");
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        int rc;
        if (!strcmp(e->string, "hosts")) {
            rc = anvil_json_int(e, "spec", "resources.hosts", 1, 1024, &s->hosts);
        } else if (!strcmp(e->string, "procs_per_host")) {
            rc = anvil_json_int(e, "spec", "resources.procs_per_host", 1, 1024, &s->procs_per_host);
        } else {
            rc = anvil_fail("spec: resources: unknown field '%.100s'", e->string);
        }
        if (rc) return -1;
    }
    return 0;
}

/* metric_definitions: each name and pattern as train's --metric takes them, the set as a whole too. */
static int take_metrics(const cJSON *v, anvil_job_spec *s) {
    if (take_map(v, "spec", "metric_definitions", MAP_METRICS, &s->metrics, &s->nmetrics)) return -1;
    const char *names[ANVIL_LOGMETRIC_MAX], *regexes[ANVIL_LOGMETRIC_MAX];
    if (s->nmetrics > ANVIL_LOGMETRIC_MAX)
        return anvil_fail("spec: metric_definitions: more than %d metrics", ANVIL_LOGMETRIC_MAX);
    for (int i = 0; i < s->nmetrics; i++) {
        names[i] = s->metrics[i].key;
        regexes[i] = s->metrics[i].value;
    }
    if (!anvil_logmetric_check_all(names, regexes, s->nmetrics)) return 0;
    char why[512];
    snprintf(why, sizeof why, "%s", anvil_errmsg());
    return anvil_fail("spec: metric_definitions: %s", why);
}

static const char *const fields[] = {"name",    "command", "channels", "output", "resources",         "max_runtime_s",
                                     "max_retries", "hang_timeout_s", "env", "tags", "role", "metric_definitions",
                                     "keep_alive_s", "backend"};
#define NFIELDS (sizeof fields / sizeof *fields)

static int take_field(const cJSON *e, size_t f, anvil_job_spec *s) {
    switch (f) {
    case 0:
        if (anvil_json_string(e, "spec", "name", 100, &s->name)) return -1;
        if (!s->name[0]) return anvil_fail("spec: name: must not be empty");
        return anvil_job_name_valid(s->name, 100)
                   ? 0
                   : anvil_fail("spec: name: only letters, digits, '.', '_' and '-' are allowed");
    case 1:
        return take_command(e, s);
    case 2:
        return take_map(e, "spec", "channels", MAP_CHANNELS, &s->channels, &s->nchannels);
    case 3:
        if (anvil_json_string(e, "spec", "output", MAX_TEXT, &s->output)) return -1;
        return s->output[0] == '/' ? 0 : anvil_fail("spec: output: must be an absolute path");
    case 4:
        return take_resources(e, s);
    case 5:
        return anvil_json_number(e, "spec", "max_runtime_s", MAX_LIMIT, false, &s->max_runtime_s);
    case 6:
        return anvil_json_int(e, "spec", "max_retries", 0, 100, &s->max_retries);
    case 7:
        return anvil_json_number(e, "spec", "hang_timeout_s", MAX_LIMIT, false, &s->hang_timeout_s);
    case 8:
        return anvil_json_env(e, "spec", "env", &s->env, &s->nenv);
    case 9:
        return take_map(e, "spec", "tags", MAP_TAGS, &s->tags, &s->ntags);
    case 11:
        return take_metrics(e, s);
    case 12:
        return anvil_json_number(e, "spec", "keep_alive_s", ANVIL_JOB_KEEP_ALIVE_MAX_S, false, &s->keep_alive_s);
    case 13:
        if (anvil_json_string(e, "spec", "backend", 16, &s->backend)) return -1;
        return !strcmp(s->backend, "local") || !strcmp(s->backend, "slurm")
                   ? 0
                   : anvil_fail("spec: backend: '%s' is neither local nor slurm", s->backend);
    default:
        if (anvil_json_string(e, "spec", "role", 64, &s->role)) return -1;
        return anvil_job_name_valid(s->role, 64)
                   ? 0
                   : anvil_fail("spec: role: 1 to 64 letters, digits, '.', '_' or '-'");
    }
}

int anvil_json_env(const cJSON *v, const char *what, const char *field, anvil_job_kv **out, int *n) {
    return take_map(v, what, field, MAP_ENV, out, n);
}

cJSON *anvil_json_parse_object(const char *text, size_t len, const char *what) {
    if (len > ANVIL_JOB_SPEC_MAX_BYTES) {
        anvil_fail("%s: larger than %d bytes", what, ANVIL_JOB_SPEC_MAX_BYTES);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = anvil_json_parse(text, len, &end);
    if (!root) {
        char why[512];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        anvil_fail("%s: %s", what, why);
        return NULL;
    }
    size_t used = (size_t)(end - text);
    while (used < len && isspace((unsigned char)text[used])) used++;
    int rc = 0;
    if (used < len) rc = anvil_fail("%s: unexpected text after the JSON object at byte %zu", what, used);
    else if (!cJSON_IsObject(root)) rc = anvil_fail("%s: must be a JSON object", what);
    if (rc) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int anvil_job_spec_parse(const char *text, size_t len, anvil_job_spec *s) {
    memset(s, 0, sizeof *s);
    s->hosts = s->procs_per_host = 1;
    cJSON *root = anvil_json_parse_object(text, len, "spec");
    if (!root) return -1;
    int rc = 0;
    bool seen[NFIELDS] = {false};
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        size_t f = 0;
        while (f < NFIELDS && strcmp(e->string, fields[f])) f++;
        if (f == NFIELDS) rc = anvil_fail("spec: unknown field '%.100s'", e->string);
        else if (seen[f]) rc = anvil_fail("spec: %s: given twice", fields[f]);
        else seen[f] = true, rc = take_field(e, f, s);
        if (rc) break;
    }
    cJSON_Delete(root);
    if (!rc && !s->name) rc = anvil_fail("spec: name: missing");
    if (!rc && !s->argv) rc = anvil_fail("spec: command: missing");
    if (!rc && s->nmetrics && strcmp(s->argv[0], "train"))
        rc = anvil_fail("spec: metric_definitions: only a train command logs metrics (this one is %.60s)", s->argv[0]);
    if (rc) anvil_job_spec_free(s);
    return rc;
}

static cJSON *map_json(const anvil_job_kv *kv, int n) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; o && i < n; i++)
        if (!cJSON_AddStringToObject(o, kv[i].key, kv[i].value)) {
            cJSON_Delete(o);
            return NULL;
        }
    return o;
}

cJSON *anvil_job_spec_to_json(const anvil_job_spec *s) {
    cJSON *o = cJSON_CreateObject(), *res = cJSON_CreateObject();
    cJSON *cmd = cJSON_CreateStringArray((const char *const *)s->argv, s->argc);
    cJSON *ch = map_json(s->channels, s->nchannels), *env = map_json(s->env, s->nenv);
    cJSON *tags = map_json(s->tags, s->ntags), *metrics = map_json(s->metrics, s->nmetrics);
    bool ok = o && res && cmd && ch && env && tags && metrics;
    if (ok) {
        cJSON_AddNumberToObject(res, "hosts", s->hosts);
        cJSON_AddNumberToObject(res, "procs_per_host", s->procs_per_host);
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddItemToObject(o, "command", cmd);
        cJSON_AddItemToObject(o, "channels", ch);
        if (s->output) cJSON_AddStringToObject(o, "output", s->output);
        if (s->role) cJSON_AddStringToObject(o, "role", s->role);
        if (s->backend) cJSON_AddStringToObject(o, "backend", s->backend);
        cJSON_AddItemToObject(o, "resources", res);
        cJSON_AddNumberToObject(o, "max_runtime_s", s->max_runtime_s);
        cJSON_AddNumberToObject(o, "max_retries", s->max_retries);
        cJSON_AddNumberToObject(o, "hang_timeout_s", s->hang_timeout_s);
        cJSON_AddNumberToObject(o, "keep_alive_s", s->keep_alive_s);
        cJSON_AddItemToObject(o, "env", env);
        cJSON_AddItemToObject(o, "tags", tags);
        cJSON_AddItemToObject(o, "metric_definitions", metrics);
        return o;
    }
    cJSON_Delete(o);
    cJSON_Delete(res);
    cJSON_Delete(cmd);
    cJSON_Delete(ch);
    cJSON_Delete(env);
    cJSON_Delete(tags);
    cJSON_Delete(metrics);
    return NULL;
}

void anvil_job_spec_free(anvil_job_spec *s) {
    free(s->name);
    for (int i = 0; i < s->argc; i++) free(s->argv[i]);
    free(s->argv);
    anvil_job_kv_free(s->channels, s->nchannels);
    free(s->output);
    free(s->role);
    free(s->backend);
    anvil_job_kv_free(s->env, s->nenv);
    anvil_job_kv_free(s->tags, s->ntags);
    anvil_job_kv_free(s->metrics, s->nmetrics);
    memset(s, 0, sizeof *s);
}
