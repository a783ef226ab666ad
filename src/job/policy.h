/* Roles: named policies a job runs under, and the check of a spec against its role.
 *
 * A role names the prefixes a job may read (input) and write (output), local paths and S3 prefixes
 * alike, the processes it may start and how long it may run, and variables added to its
 * environment:
 *   {"name": "nlp", "input_prefixes": ["/data/nlp", "s3://corpora/nlp"],
 *    "output_prefixes": ["/runs/nlp", "s3://models/nlp"], "max_procs": 8, "max_runtime_s": 86400,
 *    "env": {"OMP_NUM_THREADS": "4"}}
 * (max_runtime_s 0: no limit). Every path is compared after normalization (anvil_path_resolve),
 * so neither '..' nor a symbolic link leads out of a prefix, and a prefix holds only whole
 * components: /data/a admits /data/a/x, not /data/ab; s3://b/p admits s3://b/p/x, not s3://b/px.
 * The endpoint and the credentials of a role's S3 prefixes are the daemon's (job/objstore.h).
 *
 * This is a policy of the service, not a sandbox: jobs run as the daemon's Unix user, and the
 * checks bound what a spec can name (its channels, its output, the paths in its command, its
 * environment), at submission. */
#ifndef ANVIL_JOB_POLICY_H
#define ANVIL_JOB_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "job/spec.h"

typedef struct {
    char *name;
    int ninput, noutput;
    char **input, **output; /* absolute paths, as given */
    int max_procs;          /* hosts x procs_per_host */
    double max_runtime_s;   /* 0: no limit */
    int nenv;
    anvil_job_kv *env;
} anvil_role;

/* Parses and checks a role (the body of POST /v1/roles, or a stored one); -1 with a one-line
 * message naming the field, leaving nothing to free. Unknown fields are refused. */
int anvil_role_parse(const char *text, size_t len, anvil_role *role);
/* The role as JSON, every field present; NULL when out of memory. */
cJSON *anvil_role_to_json(const anvil_role *role);
void anvil_role_free(anvil_role *role);

/* The normalized form of an absolute path into out: the real path (symbolic links, '.' and '..'
 * resolved by the kernel) of its longest prefix that exists, then the remaining components with
 * '.' and '..' applied lexically. -1 with a message naming the path when it is not absolute, is
 * too long, or its first missing component is there after all (a dangling symbolic link, a loop,
 * a folder that cannot be searched): such a path cannot be vouched for. */
int anvil_path_resolve(const char *path, char *out, size_t cap);
/* Whether the normalized path lies at or under the normalized prefix, at a component boundary. */
bool anvil_path_under(const char *path, const char *prefix);

/* Checks spec against role and fills in what the role decides: 0 when allowed, with the channels
 * and output replaced by their normalized paths, max_runtime_s 0 replaced by the role's limit, and
 * the role's variables added to env; 1 when refused, with why (one line, naming the field and the
 * path or the limit at fault); -1 on error. What is checked:
 *   - hosts x procs_per_host <= max_procs, max_runtime_s <= the role's (when it has a limit);
 *   - each channel under an input prefix, the output under an output prefix;
 *   - the command, parsed with its subcommand's table (opts/tables.h): each argument that the table
 *     says names a file, a folder or an object (an option's value or an operand, however it looks)
 *     is resolved and must lie under an input or output prefix (one the command writes: under an
 *     output prefix), and the stored command holds it resolved; an s3:// one under the role's S3
 *     prefixes, with no empty, '.' or '..' key component; a pattern (train --train GLOB) may have
 *     wildcards in its last component only, and what it matches now must lie inside too; a relative
 *     path is taken from the run folder: the output when given, else a new folder of the daemon's,
 *     where it may not hold a '..' component;
 *   - no path, as given or where its links lead, holds a control character (a batch script's
 *     #SBATCH line could not carry it), nor does a role's prefix;
 *   - train --metrics-port is 0 or at least 1024: the ports below are the host's services';
 *   - env sets only the variables anvil_job_env_allowed lets through, and none the role sets.
 * A refusal names the path as given, never where its links lead: a submitter does not learn the
 * host's links from it. */
int anvil_policy_check(const anvil_role *role, anvil_job_spec *spec, char *why, size_t cap);

/* Whether a variable of the daemon's environment (NAME=VALUE) reaches the jobs: PATH, HOME, LANG,
 * LC_*, TZ, TMPDIR, USER, LOGNAME, LD_LIBRARY_PATH, and those named OMP_*, GOMP_*, OPENBLAS_*,
 * OMPI_*, PMIX_*, ANVIL_* (but ANVIL_TOKEN and those the daemon sets for each attempt: ANVIL_JOB_ID,
 * ANVIL_ATTEMPT, ANVIL_RUN_DIR, ANVIL_JOB_PREFIXES) and the sanitizers' *SAN_OPTIONS: what anvil, Open MPI
 * and the runtime need. Nothing else does: a job's environment is these, then the role's
 * variables and the spec's. */
bool anvil_job_env_inherited(const char *var);
/* Whether a spec may set the variable named name (NAME, no '='): the threads (OMP_NUM_THREADS,
 * OMP_PROC_BIND, OMP_PLACES), the kernels (ANVIL_ISA, ANVIL_BF16), the S3 client's retries and part
 * size (ANVIL_S3_*) and the pre-flight check's fault hook (ANVIL_HEALTH_FAULT). Nothing else: not
 * Open MPI's, OPAL's, PMIx's, Slurm's, the dynamic loader's, the shell's or AWS's, which decide
 * which programs run, with which libraries, or where data goes. */
bool anvil_job_env_allowed(const char *name);
/* Those names, ", "-separated, into buf. */
void anvil_job_env_allowlist(char *buf, size_t cap);
/* Whether a role may not set the variable: those the daemon sets for each job (ANVIL_CHANNEL_*,
 * ANVIL_JOB_ID, ANVIL_ATTEMPT, ANVIL_RUN_DIR, ANVIL_JOB_PREFIXES (core/confine.h), ANVIL_TOKEN, and
 * AWS_*, from its S3 configuration). */
bool anvil_job_env_reserved(const char *name);

#endif
