/* Object storage belongs to the role: the endpoint, region and credentials that the jobs of each
 * role get for the s3:// prefixes the role names (job/policy.h). They come from a file of the
 * admin's, `anvil serve --s3-config FILE`, an INI text with one section per role:
 *   [nlp]
 *   endpoint_url = http://127.0.0.1:7480
 *   region = us-east-1
 *   aws_access_key_id = ...
 *   aws_secret_access_key = ...
 *   aws_session_token = ...      (optional)
 * It holds secrets, so it must be the daemon user's and readable by nobody else (mode 600 or
 * stricter). A job's AWS_* variables come from here and nowhere else: the daemon's own are not
 * inherited (job/policy.h), a role may not set any, a spec none; and AWS_SHARED_CREDENTIALS_FILE
 * and AWS_CONFIG_FILE are /dev/null, so the daemon user's ~/.aws files are not read either. The
 * secrets reach the attempt's environment only: they are stored in no spec and shown by no answer. */
#ifndef ANVIL_JOB_OBJSTORE_H
#define ANVIL_JOB_OBJSTORE_H

typedef struct anvil_objstore anvil_objstore;

/* Reads and checks the file: each section a role name with aws_access_key_id and
 * aws_secret_access_key; NULL after anvil_fail naming the file and the section or line at fault. */
anvil_objstore *anvil_objstore_load(const char *path);
void anvil_objstore_free(anvil_objstore *o);

/* The variables (NAME=VALUE, malloc'd, the array NULL-terminated) that an attempt of a job of role
 * gets: the role's section as AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
 * AWS_REGION and AWS_ENDPOINT_URL, and always the two files on /dev/null (o NULL, or a role without
 * a section: those alone). NULL when out of memory. */
char **anvil_objstore_env(const anvil_objstore *o, const char *role);
void anvil_objstore_env_free(char **env);

#endif
