/* A job's data files kept inside its role (README: "The job service", and ARCHITECTURE.md's threat
 * model).
 *
 * The job service checks the paths a job's command names against its role at submission
 * (job/policy.h), but a file inside a checked folder (a shard a pattern matches, a prep folder's
 * manifest.json or tokenizer, a checkpoint's files) may be a symbolic link that leads out of the
 * role, made by anyone who can write there, before or after the check. So the daemon names the role's
 * local prefixes in each job's environment (ANVIL_JOB_PREFIXES, one a line), and the readers of such
 * files ask anvil_confined before they open one: its real path must lie under one of those prefixes,
 * under the job's run folder (ANVIL_RUN_DIR), or under a staging folder the process made itself
 * (anvil_confine_allow). Outside a job of the service (no ANVIL_JOB_PREFIXES) every path passes. */
#ifndef ANVIL_CORE_CONFINE_H
#define ANVIL_CORE_CONFINE_H

/* 0 when path may be read; -1 after anvil_fail naming what (a "shard", a "manifest") and path, and
 * saying that it leads outside the job's role. A path that does not resolve passes: its open says
 * what is wrong with it. */
int anvil_confined(const char *path, const char *what);
/* Admits dir (a folder this process made, such as an S3 staging folder) for the rest of the process;
 * -1 after anvil_fail when too many are admitted already. */
int anvil_confine_allow(const char *dir);

#endif
