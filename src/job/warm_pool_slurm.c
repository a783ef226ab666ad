/* Warm pools of the Slurm backend (slurm_internal.h): a job with keep_alive_s whose step exited 0 leaves
 * its allocation held by its batch script, STATE/pools/<Slurm job ID>, and the next job of the same
 * owner and shape runs its step in it (srun --jobid) instead of a new sbatch. Who holds a pool is
 * decided by one file, <id>.claim, created O_EXCL, by a job's start or by the holder itself as it
 * leaves. */
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "job/slurm_internal.h"

extern char **environ;

static int add_string(cJSON *o, const char *key, const char *value) {
    return value && !cJSON_AddStringToObject(o, key, value) ? anvil_fail("out of memory") : 0;
}

pid_t anvil_slurm_warm_pid(const anvil_attempt_ref *a) {
    const char *colon = strchr(a->handle, ':');
    if (!colon) return 0;
    char *end;
    long v = strtol(colon + 1, &end, 10);
    return end != colon + 1 && !*end && v > 1 && v <= INT_MAX ? (pid_t)v : 0;
}

anvil_attempt_ref anvil_slurm_ref(const anvil_attempt_ref *a, char *buf, size_t cap) {
    anvil_attempt_ref r = *a;
    snprintf(buf, cap, "%.*s", (int)strcspn(a->handle, ":"), a->handle);
    r.handle = buf;
    return r;
}

static void pool_path(const slurm_backend *sb, const char *id, const char *suffix, char *path, size_t cap) {
    snprintf(path, cap, "%s/pools/%s%s", sb->state_dir, id, suffix);
}

/* The pool's file, malloc'd; NULL when it has none. */
static char *pool_text(const slurm_backend *sb, const char *id) {
    char path[PATH_MAX + 64], *data;
    size_t len;
    pool_path(sb, id, "", path, sizeof path);
    return anvil_read_file_max(path, 65536, &data, &len) ? NULL : data;
}

/* The pool's status as SageMaker names it. The claim file decides, not the holder's word, which lags
 * by up to its 1 s poll: a pool is InUse while claimed, Available again once the claim is gone. */
static const char *pool_status(const slurm_backend *sb, const char *id, const char *info) {
    char claim[PATH_MAX + 64];
    pool_path(sb, id, ".claim", claim, sizeof claim);
    if (anvil_slurm_field_is(info, "status", "Terminated")) return "Terminated";
    return access(claim, F_OK) ? "Available" : "InUse";
}

/* The pools under STATE/pools, each given to fn with its file's text until fn returns nonzero. */
static int each_pool(const slurm_backend *sb, int (*fn)(const slurm_backend *, const char *, const char *, void *),
                     void *ctx) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/pools", sb->state_dir);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (!e->d_name[0] || e->d_name[strspn(e->d_name, "0123456789")]) continue;
        char *info = pool_text(sb, e->d_name);
        if (info) rc = fn(sb, e->d_name, info, ctx);
        free(info);
    }
    closedir(d);
    return rc;
}

/* Claims an Available pool that fits the attempt (owner, hosts, processes per host; the partition is the
 * daemon's), its holder's Slurm job ID into holder and its nodes into nodes: true when one was claimed.
 * The claim file, created O_EXCL, is what makes it the attempt's: the holder and other daemons respect it. */
static bool claim_pool(const slurm_backend *sb, const anvil_attempt_spec *a, char *holder, size_t hcap, char *nodes,
                       size_t ncap) {
    char dir[PATH_MAX], want[32];
    snprintf(dir, sizeof dir, "%s/pools", sb->state_dir);
    DIR *d = opendir(dir);
    if (!d) return false;
    bool got = false;
    for (struct dirent *e; !got && (e = readdir(d));) {
        const char *id = e->d_name;
        if (!*id || id[strspn(id, "0123456789")] || strlen(id) >= hcap) continue;
        char *info = pool_text(sb, id), *where = NULL;
        char *expires = info ? anvil_slurm_field(info, "expires", false) : NULL;
        bool fits = info && expires && !strcmp(pool_status(sb, id, info), "Available") &&
                    anvil_slurm_field_is(info, "owner", a->owner ? a->owner : "") &&
                    (snprintf(want, sizeof want, "%d", a->hosts), anvil_slurm_field_is(info, "hosts", want)) &&
                    (snprintf(want, sizeof want, "%d", a->procs_per_host),
                     anvil_slurm_field_is(info, "procs_per_host", want)) &&
                    atoll(expires) > (long long)time(NULL) + 1 && (where = anvil_slurm_field(info, "nodes", false)) &&
                    strlen(where) < ncap;
        char path[PATH_MAX + 64], mine[64];
        pool_path(sb, id, ".release", path, sizeof path);
        fits = fits && access(path, F_OK);
        pool_path(sb, id, ".claim", path, sizeof path);
        snprintf(mine, sizeof mine, "job %lld attempt %d\n", (long long)a->ref.job_id, a->ref.attempt);
        if (fits && !anvil_write_new_file(path, mine, strlen(mine))) {
            /* The holder may have been ended by Slurm (scancel, a node's failure) without a word. */
            char *job;
            if (!anvil_slurm_show_job(id, &job) && anvil_slurm_field_is(job, "JobState", "RUNNING")) {
                memcpy(holder, id, strlen(id) + 1);
                snprintf(nodes, ncap, "%s", where);
                got = true;
            } else {
                /* Ours now, and dead: marked so, the claim left in place so nobody tries it again. */
                anvil_slurm_pool_ended(sb, id);
            }
            free(job);
        }
        free(where);
        free(expires);
        free(info);
    }
    closedir(d);
    return got;
}

void anvil_slurm_pool_ended(const slurm_backend *sb, const char *holder) {
    char *info = pool_text(sb, holder), path[PATH_MAX + 64];
    if (!info || strncmp(info, "status=", 7)) {
        free(info);
        return;
    }
    anvil_strbuf t = {0};
    anvil_strbuf_puts(&t, "status=Terminated");
    anvil_strbuf_puts(&t, info + strcspn(info, "\n"));
    pool_path(sb, holder, "", path, sizeof path);
    if (!t.oom) anvil_write_file_atomic(path, t.s, t.len);
    free(t.s);
    free(info);
}

/* The script that runs a warm attempt's step in the holder's allocation, as the batch script would
 * (the same first log line, node list, SIGUSR1 forwarding and exit file), then gives the pool back. */
static char *warm_script(const slurm_backend *sb, const anvil_attempt_spec *a, const char *holder, const char *nodes) {
    char dir[PATH_MAX], path[PATH_MAX + 64];
    anvil_slurm_job_dir(sb, a->ref.job_id, dir, sizeof dir);
    anvil_strbuf t = {0};
    anvil_strbuf_printf(&t, "#!/bin/bash\n# anvil job %lld, attempt %d, in the warm pool of Slurm job %s.\n",
                        (long long)a->ref.job_id, a->ref.attempt, holder);
    /* Where its output goes (start_warm), for the log's word on how the step ended (anvil_slurm_scan_log). */
    anvil_slurm_put_output_line(&t, a->run_dir);
    anvil_strbuf_printf(&t, "echo \"anvil: job %lld attempt %d: Slurm job %s on %s (warm pool)\"\n",
                        (long long)a->ref.job_id, a->ref.attempt, holder, nodes);
    /* The holder's node list, for exclude_down_nodes after a failure. */
    anvil_strbuf_puts(&t, "nodes=");
    anvil_slurm_put_quoted(&t, nodes);
    anvil_strbuf_puts(&t, "\n");
    snprintf(path, sizeof path, "%s/nodes_%d", dir, a->ref.attempt);
    anvil_slurm_put_atomic_write(&t, "printf '%s\\n' \"$nodes\"", path);
    anvil_slurm_put_step(&t, sb, a, holder);
    anvil_attempt_exit_path(sb->state_dir, &a->ref, path, sizeof path);
    anvil_slurm_put_atomic_write(&t, "printf '%d\\n' \"$rc\"", path);
    pool_path(sb, holder, ".claim", path, sizeof path);
    anvil_strbuf_puts(&t, "rm -f ");
    anvil_slurm_put_quoted(&t, path);
    anvil_strbuf_puts(&t, "\nexit \"$rc\"\n");
    if (t.oom) {
        free(t.s);
        anvil_fail("out of memory");
        return NULL;
    }
    return t.s;
}

/* Starts the attempt in the claimed pool: its script forked into a session of its own, which waits until
 * the handle is recorded (as the local backend's wrapper does), its output appended to the run's log.
 * The pool's claim is given back when this fails. */
static int start_warm(slurm_backend *sb, const anvil_attempt_spec *a, const char *holder, const char *nodes,
                      anvil_attempt_record_fn record, void *ctx) {
    char dir[PATH_MAX], script_path[PATH_MAX + 32], log[PATH_MAX + 32], claim[PATH_MAX + 64], pool[PATH_MAX + 64];
    anvil_slurm_job_dir(sb, a->ref.job_id, dir, sizeof dir);
    snprintf(script_path, sizeof script_path, "%s/warm_%d.sh", dir, a->ref.attempt);
    snprintf(log, sizeof log, "%s/logs/launcher.log", a->run_dir);
    snprintf(pool, sizeof pool, "%s/pool_%d", dir, a->ref.attempt);
    pool_path(sb, holder, ".claim", claim, sizeof claim);
    char *script = warm_script(sb, a, holder, nodes), **env = anvil_slurm_submit_env(a);
    int rc = -1;
    if (!script || !env) {
        if (script) anvil_fail("out of memory");
        goto done;
    }
    if (anvil_write_file_atomic(script_path, script, strlen(script)) ||
        anvil_write_file_atomic(pool, holder, strlen(holder)))
        goto done;
    char prefix[40];
    snprintf(prefix, sizeof prefix, "%s:", holder);
    rc = anvil_attempt_spawn("/bin/bash", (char *[]){"bash", script_path, NULL}, env, a->run_dir, log, prefix, record,
                             ctx);
done:
    if (rc) unlink(claim);
    free(script);
    free(env);
    return rc;
}

int anvil_slurm_pool_start(slurm_backend *sb, const anvil_attempt_spec *a, anvil_attempt_record_fn record, void *ctx) {
    char holder[32], nodes[4096];
    if (!claim_pool(sb, a, holder, sizeof holder, nodes, sizeof nodes)) return 0;
    return start_warm(sb, a, holder, nodes, record, ctx) ? -1 : 1;
}

bool anvil_slurm_pool_held(const slurm_backend *sb, const char *id) {
    char *info = pool_text(sb, id);
    bool held = info && strcmp(pool_status(sb, id, info), "Terminated");
    free(info);
    return held;
}

/* The warm pool's parts of the batch script (job/backend.h). The first, before the exit file is written,
 * records the pool Available after a step that finished, so that it is there once the job has completed.
 * The second holds the allocation: InUse while a job's claim file is there, the TTL counted again from
 * the claim's end; at the TTL or on the release file the script takes the claim itself (O_EXCL, as a
 * job does), so that no job can claim a pool whose holder is leaving. A claim lost to a job at that
 * moment is seen as InUse a second later; a state folder that is gone ends the hold. */
void anvil_slurm_put_pool_open(anvil_strbuf *t, const slurm_backend *sb, const anvil_attempt_spec *a) {
    char pools[PATH_MAX];
    snprintf(pools, sizeof pools, "%s/pools", sb->state_dir);
    anvil_strbuf_puts(t, "pools=");
    anvil_slurm_put_quoted(t, pools);
    anvil_strbuf_puts(t, "\npf=$pools/$SLURM_JOB_ID\npartition=");
    anvil_slurm_put_quoted(t, sb->partition ? sb->partition : "");
    anvil_strbuf_puts(t, "\nowner=");
    anvil_slurm_put_quoted(t, a->owner ? a->owner : "");
    anvil_strbuf_puts(t, "\nuser=");
    anvil_slurm_put_quoted(t, a->user ? a->user : "");
    anvil_strbuf_printf(t, "\nttl=%ld\nend=$(( $(date +%%s) + ttl ))\n", (long)ceil(a->keep_alive_s));
    anvil_strbuf_printf(t,
         "pool() {\n  printf 'status=%%s\\njob=%lld\\nowner=%%s\\nuser=%%s\\npartition=%%s\\nhosts=%d\\nprocs_per_host=%d\\n"
         "nodes=%%s\\nexpires=%%s\\n' \"$1\" \"$owner\" \"$user\" \"$partition\" \"$SLURM_JOB_NODELIST\" \"$end\" > \"$pf.tmp\" && "
         "sync \"$pf.tmp\" && mv -f \"$pf.tmp\" \"$pf\"\n}\n",
         (long long)a->ref.job_id, a->hosts, a->procs_per_host);
    /* Only a step that finished leaves its allocation: exit 0 with its command's completion record, verified
     * as the supervisor does (a step that lost a node may exit 0 without it, on an allocation Slurm is
     * ending; a record that is another attempt's or whose files changed is none). */
    char attempt[48];
    snprintf(attempt, sizeof attempt, "%lld.%d", (long long)a->ref.job_id, a->ref.attempt);
    anvil_strbuf_puts(t, "offered=\n[ \"$rc\" = 0 ] && ");
    anvil_slurm_put_quoted(t, sb->self);
    anvil_strbuf_puts(t, " job-run --verify-completion ");
    anvil_slurm_put_quoted(t, a->run_dir);
    anvil_strbuf_puts(t, " ");
    anvil_slurm_put_quoted(t, attempt);
    anvil_strbuf_puts(t, " ");
    anvil_slurm_put_quoted(t, a->argv[0]);
    anvil_strbuf_puts(t, " && mkdir -p \"$pools\" && pool Available && offered=1\n");
}

void anvil_slurm_put_pool_hold(anvil_strbuf *t) {
    anvil_strbuf_puts(t, "if [ -n \"$offered\" ]; then\n  used=\n  while [ -d \"$pools\" ]; do\n"
             "    if [ -e \"$pf.claim\" ]; then\n"
             "      [ -n \"$used\" ] || { used=1; pool InUse; }\n"
             "    elif [ -n \"$used\" ]; then\n"
             "      used=\n      end=$(( $(date +%s) + ttl ))\n      pool Available\n"
             "    elif [ \"$(date +%s)\" -ge \"$end\" ] || [ -e \"$pf.release\" ]; then\n"
             "      (set -o noclobber; echo holder > \"$pf.claim\") 2> /dev/null && break\n"
             "    fi\n    sleep 1\n  done\n  pool Terminated\nfi\n");
}

/* A job's claim says whose it is. */
void anvil_slurm_pool_drop_claim(const slurm_backend *sb, const anvil_attempt_ref *a, const char *holder) {
    char path[PATH_MAX + 64], mine[64], *claim;
    size_t len;
    pool_path(sb, holder, ".claim", path, sizeof path);
    snprintf(mine, sizeof mine, "job %lld attempt %d\n", (long long)a->job_id, a->attempt);
    if (anvil_read_file_max(path, 256, &claim, &len)) return;
    if (!strcmp(claim, mine)) unlink(path);
    free(claim);
}

/* The steps are found by their names (anvil_slurm_put_step). */
int anvil_slurm_kill_warm_steps(const anvil_attempt_ref *a, const char *holder) {
    char *out, name[64];
    snprintf(name, sizeof name, "anvil-%lld.%d", (long long)a->job_id, a->attempt);
    int rc =
        anvil_slurm_run((char *[]){"squeue", "-h", "-s", "-j", (char *)holder, "-o", "%i %j", NULL}, environ, &out);
    if (rc) {
        free(out);
        return rc < 0 ? -1 : 0;
    }
    int killed = 0;
    for (char *save, *line = strtok_r(out, "\n", &save); line && rc >= 0; line = strtok_r(NULL, "\n", &save)) {
        char *sp = strchr(line, ' ');
        if (!sp || strcmp(sp + 1, name)) continue;
        *sp = 0;
        char said[512];
        int cancelled = anvil_slurm_cancel((char *[]){"scancel", "--signal=KILL", line, NULL}, said, sizeof said);
        if (cancelled > 0) anvil_fail("%s", said);
        if (cancelled) rc = -1;
        else killed++;
    }
    free(out);
    return rc < 0 ? -1 : killed;
}

typedef struct {
    const char *job;
    cJSON *o;
} describe_ctx;

static int describe_one(const slurm_backend *sb, const char *id, const char *info, void *ctx) {
    describe_ctx *d = ctx;
    if (!anvil_slurm_field_is(info, "job", d->job)) return 0;
    return add_string(d->o, "warm_pool_status", pool_status(sb, id, info)) || add_string(d->o, "warm_pool_id", id)
               ? -1
               : 0;
}

/* Reused for an attempt that ran in another job's pool, else the status of the pool this job left, if any. */
int anvil_slurm_describe_pool(const slurm_backend *sb, const anvil_attempt_ref *a, cJSON *o) {
    char path[PATH_MAX + 32], *holder;
    size_t len;
    anvil_slurm_job_dir(sb, a->job_id, path, sizeof path);
    snprintf(path + strlen(path), sizeof path - strlen(path), "/pool_%d", a->attempt);
    if (!anvil_read_file_max(path, 64, &holder, &len)) {
        int rc = add_string(o, "warm_pool_status", "Reused") || add_string(o, "warm_pool_id", holder) ? -1 : 0;
        free(holder);
        return rc;
    }
    char job[32];
    snprintf(job, sizeof job, "%lld", (long long)a->job_id);
    describe_ctx ctx = {job, o};
    return each_pool(sb, describe_one, &ctx);
}

typedef struct {
    const char *user;
    cJSON *arr;
} pool_list;

static int list_one(const slurm_backend *sb, const char *id, const char *info, void *ctx) {
    pool_list *l = ctx;
    if (l->user && !anvil_slurm_field_is(info, "user", l->user)) return 0;
    cJSON *o = cJSON_CreateObject();
    if (!o) return anvil_fail("out of memory");
    cJSON_AddItemToArray(l->arr, o);
    int rc = add_string(o, "id", id) || add_string(o, "status", pool_status(sb, id, info)) ? -1 : 0;
    static const char *const text_keys[] = {"user", "owner", "partition", "nodes"};
    static const char *const number_keys[] = {"hosts", "procs_per_host", "expires", "job"};
    for (size_t i = 0; !rc && i < sizeof text_keys / sizeof *text_keys; i++) {
        char *v = anvil_slurm_field(info, text_keys[i], false);
        rc = add_string(o, text_keys[i], v ? v : "");
        free(v);
    }
    for (size_t i = 0; !rc && i < sizeof number_keys / sizeof *number_keys; i++) {
        char *v = anvil_slurm_field(info, number_keys[i], false);
        if (!cJSON_AddNumberToObject(o, number_keys[i], v ? atof(v) : 0)) rc = anvil_fail("out of memory");
        free(v);
    }
    return rc;
}

cJSON *anvil_slurm_pools(anvil_backend *b, const char *user) {
    pool_list l = {user, cJSON_CreateArray()};
    if (!l.arr) anvil_fail("out of memory");
    if (l.arr && each_pool((slurm_backend *)(b), list_one, &l)) {
        cJSON_Delete(l.arr);
        return NULL;
    }
    return l.arr;
}

int anvil_slurm_release_pool(anvil_backend *b, const char *id, const char *user) {
    slurm_backend *sb = (slurm_backend *)(b);
    if (!*id || id[strspn(id, "0123456789")] || strlen(id) > 20) return 1;
    char *info = pool_text(sb, id);
    if (!info || (user && !anvil_slurm_field_is(info, "user", user))) {
        free(info);
        return 1;
    }
    bool ended = !strcmp(pool_status(sb, id, info), "Terminated");
    free(info);
    if (ended) return 2;
    char path[PATH_MAX + 64];
    pool_path(sb, id, ".release", path, sizeof path);
    return anvil_write_file_atomic(path, "", 0) ? -1 : 0;
}

typedef struct {
    const char *key, *value;
    char hosts[16], procs[16];
    double held;
    bool spared;
} pool_count;

static int count_one(const slurm_backend *sb, const char *id, const char *info, void *ctx) {
    pool_count *c = ctx;
    if (!anvil_slurm_field_is(info, c->key, c->value) || strcmp(pool_status(sb, id, info), "Available")) return 0;
    if (!c->spared && anvil_slurm_field_is(info, "hosts", c->hosts) &&
        anvil_slurm_field_is(info, "procs_per_host", c->procs)) {
        c->spared = true;
        return 0;
    }
    char *hosts = anvil_slurm_field(info, "hosts", false);
    c->held += hosts ? atof(hosts) : 0;
    free(hosts);
    return 0;
}

double anvil_slurm_pool_hosts(anvil_backend *b, const char *user, const char *owner, int hosts, int procs_per_host) {
    pool_count c = {.key = user ? "user" : "owner", .value = user ? user : owner};
    snprintf(c.hosts, sizeof c.hosts, "%d", hosts);
    snprintf(c.procs, sizeof c.procs, "%d", procs_per_host);
    each_pool((slurm_backend *)(b), count_one, &c);
    return c.held;
}
