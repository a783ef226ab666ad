/* The job spec: what `anvil job submit` sends and the daemon stores.
 *
 * A JSON object, checked field by field before anything is stored: a field
 * the parser does not know, a wrong type, a negative limit or an oversized
 * text is refused with one line naming the field. Only `name` and `command`
 * are required:
 *   {"name": "small", "command": ["train", "--data", "/d", "--steps", "100"],
 *    "channels": {"train": "/d"}, "output": "/runs/small",
 *    "resources": {"hosts": 1, "procs_per_host": 2},
 *    "max_runtime_s": 3600, "max_retries": 3, "hang_timeout_s": 600, "keep_alive_s": 300,
 *    "env": {"OMP_NUM_THREADS": "2"}, "tags": {"team": "nlp"}, "role": "nlp",
 *    "metric_definitions": {"tok_s": "\\| ([0-9.]+) tok/s"}, "backend": "slurm"} */
#ifndef ANVIL_JOB_SPEC_H
#define ANVIL_JOB_SPEC_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* The largest spec accepted, in bytes: the API's cap on every request body. */
#define ANVIL_JOB_SPEC_MAX_BYTES 65536
/* The longest a finished job's allocation is kept warm: an idle allocation holds a cluster's nodes
 * from everyone else, so a day is the most any spec may ask. */
#define ANVIL_JOB_KEEP_ALIVE_MAX_S 86400

typedef struct {
    char *key, *value;
} anvil_job_kv;

typedef struct {
    char *name; /* letters, digits, '.', '_', '-'; at most 100 */
    /* The anvil subcommand and its arguments; the daemon adds --out (and --resume auto on a retry). */
    int argc;
    char **argv;
    /* Input channels, name to absolute path; each reaches the ranks as ANVIL_CHANNEL_<NAME>. */
    int nchannels;
    anvil_job_kv *channels;
    char *output; /* the run folder (the command's --out), absolute; NULL: the daemon picks one */
    int hosts, procs_per_host;
    double max_runtime_s;  /* 0: no limit */
    double hang_timeout_s; /* 0: no hang detection */
    /* On the Slurm backend, how long the allocation of a job that completed is kept as a warm pool
     * after it (job/backend.h); 0: released at once. The local backend has nothing to keep. */
    double keep_alive_s;
    int max_retries;
    int nenv;
    anvil_job_kv *env;
    int ntags;
    anvil_job_kv *tags;
    /* Metrics pulled from the log by regular expressions (obs/logmetric.h), name to PCRE2 pattern
     * with one capture group, as SageMaker's MetricDefinitions; train only, which gets them as
     * --metric NAME=REGEX. Checked on submission: a pattern that does not compile names its offset. */
    int nmetrics;
    anvil_job_kv *metrics;
    /* The role the job runs under (job/policy.h), which bounds its paths, processes, runtime and
     * environment; NULL: the submitter's only role, chosen by the API, which stores it. */
    char *role;
    /* "local" or "slurm": which of the daemon's backends runs the job (job/backend.h), when it has
     * both; NULL: the daemon's own (anvil serve --backend). */
    char *backend;
} anvil_job_spec;

/* Parses and checks a spec of len bytes (not NUL-terminated); -1 with a one-line message naming the
 * field at fault, leaving nothing to free. */
int anvil_job_spec_parse(const char *text, size_t len, anvil_job_spec *spec);
/* The spec as JSON, every field present (defaults filled in); NULL when out of memory. */
cJSON *anvil_job_spec_to_json(const anvil_job_spec *spec);
void anvil_job_spec_free(anvil_job_spec *spec);
void anvil_job_kv_free(anvil_job_kv *kv, int n);

/* The spec's checks, shared with the other JSON bodies of the API (roles, users): each fails with
 * "<what>: <field>: <reason>" in one line. */

/* The JSON object in len bytes (at most ANVIL_JOB_SPEC_MAX_BYTES, nothing but space after it). */
cJSON *anvil_json_parse_object(const char *text, size_t len, const char *what);
/* A string of at most max bytes without control characters, malloc'd into *out. */
int anvil_json_string(const cJSON *v, const char *what, const char *field, size_t max, char **out);
/* A finite number in [0, hi] (an integer when integral). */
int anvil_json_number(const cJSON *v, const char *what, const char *field, double hi, bool integral, double *out);
int anvil_json_int(const cJSON *v, const char *what, const char *field, int lo, int hi, int *out);
/* An object of strings keyed by environment variable names, as the spec's env. */
int anvil_json_env(const cJSON *v, const char *what, const char *field, anvil_job_kv **out, int *n);
/* 1 to max letters, digits, '.', '_' and '-': job, user and role names. */
bool anvil_job_name_valid(const char *s, size_t max);

#endif
