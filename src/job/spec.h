/* The job spec: what `anvil job submit` sends and the daemon stores.
 *
 * A JSON object, checked field by field before anything is stored: a field
 * the parser does not know, a wrong type, a negative limit or an oversized
 * text is refused with one line naming the field. Only `name` and `command`
 * are required:
 *   {"name": "small", "command": ["train", "--data", "/d", "--steps", "100"],
 *    "channels": {"train": "/d"}, "output": "/runs/small",
 *    "resources": {"hosts": 1, "procs_per_host": 2},
 *    "max_runtime_s": 3600, "max_retries": 3, "hang_timeout_s": 600,
 *    "env": {"OMP_NUM_THREADS": "2"}, "tags": {"team": "nlp"}} */
#ifndef ANVIL_JOB_SPEC_H
#define ANVIL_JOB_SPEC_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* The largest spec accepted, in bytes: the API's body cap. */
#define ANVIL_JOB_SPEC_MAX_BYTES 65536

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
    int max_retries;
    int nenv;
    anvil_job_kv *env;
    int ntags;
    anvil_job_kv *tags;
    /* Roles (allowed input and output prefixes, process and runtime limits, the environment a job
     * may see) come with principals and tokens; a role field will be checked here, and the role's
     * limits by the API before a spec is accepted. */
} anvil_job_spec;

/* Parses and checks a spec of len bytes (not NUL-terminated); -1 with a one-line message naming the
 * field at fault, leaving nothing to free. */
int anvil_job_spec_parse(const char *text, size_t len, anvil_job_spec *spec);
/* The spec as JSON, every field present (defaults filled in); NULL when out of memory. */
cJSON *anvil_job_spec_to_json(const anvil_job_spec *spec);
void anvil_job_spec_free(anvil_job_spec *spec);

#endif
