/* The job service's principals and policies without a daemon: path normalization (symbolic links
 * resolved before '..', the missing rest taken lexically, dangling links refused), prefixes at
 * component boundaries, a spec checked against a role (what is refused, what is filled in),
 * the environment a job inherits, and tokens (made, checked, wrong, revoked, the last admin's). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "job/auth.h"
#include "job/policy.h"
#include "testutil.h"

static char dir[64];

static const char *in(const char *leaf) {
    static char path[4][256];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s%s", dir, leaf);
    return p;
}

/* Whether path resolves to dir + want. */
static int resolves(const char *path, const char *want) {
    char out[PATH_MAX];
    if (anvil_path_resolve(path, out, sizeof out)) return 0;
    if (strcmp(out, in(want))) fprintf(stderr, "  %s -> %s, not %s\n", path, out, in(want));
    return !strcmp(out, in(want));
}

static void test_resolve(void) {
    char out[PATH_MAX];
    CHECK(resolves(in("/data/a"), "/data/a"));
    CHECK(resolves(in("/data//a/./"), "/data/a"));
    CHECK(resolves(in("/data/a/../ab"), "/data/ab"));
    CHECK(resolves(in("/data/a/new/deeper"), "/data/a/new/deeper"));
    CHECK(resolves(in("/data/a/new/../../ab/x"), "/data/ab/x"));
    /* The link is followed before '..': out/.. is dir, not data/a. */
    CHECK(resolves(in("/data/a/out"), "/secret"));
    CHECK(resolves(in("/data/a/out/../data"), "/data"));
    CHECK(resolves(in("/data/a/out/../nothing/x"), "/nothing/x"));
    CHECK(anvil_path_resolve("/", out, sizeof out) == 0 && !strcmp(out, "/"));
    CHECK(anvil_path_resolve("/../../etc/./", out, sizeof out) == 0 && !strcmp(out, "/etc"));
    CHECK(anvil_path_resolve("data/a", out, sizeof out) == -1 && strstr(anvil_errmsg(), "not an absolute path"));
    CHECK(anvil_path_resolve(in("/data/a/dangling/x"), out, sizeof out) == -1 &&
          strstr(anvil_errmsg(), "cannot be resolved"));
    CHECK(anvil_path_resolve(in("/data/a/loop"), out, sizeof out) == -1);
    CHECK(anvil_path_under("/data/a", "/data/a") && anvil_path_under("/data/a/x", "/data/a"));
    CHECK(!anvil_path_under("/data/ab", "/data/a") && !anvil_path_under("/data", "/data/a"));
    CHECK(anvil_path_under("/anything", "/"));
}

static int role_of(const char *json, anvil_role *r) { return anvil_role_parse(json, strlen(json), r); }

/* 1 when spec (JSON) is refused under role r with a message holding want, 0 when allowed; the
 * checked spec is left in *s when s is not NULL. */
static int refused(const anvil_role *r, const char *json, const char *want, anvil_job_spec *s) {
    anvil_job_spec local;
    anvil_job_spec *sp = s ? s : &local;
    if (anvil_job_spec_parse(json, strlen(json), sp)) {
        fprintf(stderr, "  spec: %s\n", anvil_errmsg());
        return -1;
    }
    char why[2048] = "";
    int rc = anvil_policy_check(r, sp, why, sizeof why);
    if (rc == 1 && want && !strstr(why, want)) fprintf(stderr, "  refused, but: %s\n", why);
    int out = rc == 1 && (!want || strstr(why, want)) ? 1 : rc == 0 ? 0 : -1;
    if (!s) anvil_job_spec_free(&local);
    return out;
}

static char spec[4096];

/* A spec running train with more arguments (each ", \"arg\"") and more fields (", \"f\": v"). */
static const char *spec_of(const char *args, const char *fields) {
    snprintf(spec, sizeof spec, "{\"name\": \"j\", \"command\": [\"train\"%s]%s}", args, fields);
    return spec;
}

static void test_policy(void) {
    char json[2048], fields[2048];
    anvil_role r;
    snprintf(json, sizeof json,
             "{\"name\": \"t\", \"input_prefixes\": [\"%s\"], \"output_prefixes\": [\"%s\"], \"max_procs\": 2,"
             " \"max_runtime_s\": 60, \"env\": {\"ROLE\": \"yes\"}}",
             in("/data/a"), in("/runs"));
    CHECK(role_of("{\"name\": \"t\", \"input_prefixes\": [\"/\"], \"output_prefixes\": [\"/\"], \"max_procs\": 2}",
                  &r) == -1 &&
          strstr(anvil_errmsg(), "role: max_runtime_s: missing"));
    CHECK(role_of("{\"name\": \"t\", \"input_prefixes\": [], \"output_prefixes\": [\"/\"], \"max_procs\": 1,"
                  " \"max_runtime_s\": 0}",
                  &r) == -1 &&
          strstr(anvil_errmsg(), "input_prefixes: must be an array of 1 to"));
    CHECK(role_of("{\"name\": \"t\", \"input_prefixes\": [\"/\"], \"output_prefixes\": [\"/\"], \"max_procs\": 1,"
                  " \"max_runtime_s\": 0, \"env\": {\"ANVIL_JOB_ID\": \"7\"}}",
                  &r) == -1 &&
          strstr(anvil_errmsg(), "env.ANVIL_JOB_ID"));
    CHECK(role_of(json, &r) == 0 && r.max_procs == 2 && r.nenv == 1);
    CHECK(refused(&r, spec_of("", ""), NULL, NULL) == 0);
    snprintf(fields, sizeof fields, ", \"channels\": {\"c\": \"%s\"}", in("/data/ab"));
    CHECK(refused(&r, spec_of("", fields), "channels.c", NULL) == 1);
    snprintf(fields, sizeof fields, ", \"channels\": {\"c\": \"%s\"}", in("/data/a/out/x"));
    CHECK(refused(&r, spec_of("", fields), "(resolved: ", NULL) == 1);
    snprintf(fields, sizeof fields, ", \"output\": \"%s\"", in("/data/a/new"));
    CHECK(refused(&r, spec_of("", fields), "output prefixes", NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--init\", \"/etc/passwd\"", ""), "command[2]: /etc/passwd", NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--init\", \"../x\"", ""), "'..'", NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--preset\", \"tiny\", \"--init\", \"sub/x\"", ""), NULL, NULL) == 0);
    CHECK(refused(&r, spec_of("", ", \"resources\": {\"procs_per_host\": 3}"), "max_procs 2", NULL) == 1);
    CHECK(refused(&r, spec_of("", ", \"max_runtime_s\": 61"), "max_runtime_s 60", NULL) == 1);
    CHECK(refused(&r, spec_of("", ", \"env\": {\"ROLE\": \"no\"}"), "env.ROLE: set by role t", NULL) == 1);
    CHECK(refused(&r, spec_of("", ", \"env\": {\"LD_PRELOAD\": \"x\"}"), "env.LD_PRELOAD", NULL) == 1);
    CHECK(refused(&r, spec_of("", ", \"env\": {\"PATH\": \"/x\"}"), "env.PATH", NULL) == 1);
    /* Allowed: the channel and output stored resolved, the runtime and the variables the role's. */
    anvil_job_spec s;
    snprintf(fields, sizeof fields, ", \"channels\": {\"c\": \"%s\"}, \"output\": \"%s\", \"env\": {\"MINE\": \"1\"}",
             in("/data/a/../a/new"), in("/runs/x/../y"));
    CHECK(refused(&r, spec_of(", \"--init\", \"rel/x\"", fields), NULL, &s) == 0);
    CHECK(s.nchannels == 1 && !strcmp(s.channels[0].value, in("/data/a/new")));
    CHECK(s.output && !strcmp(s.output, in("/runs/y")));
    CHECK(s.max_runtime_s == 60);
    CHECK(s.nenv == 2 && !strcmp(s.env[0].key, "MINE") && !strcmp(s.env[1].key, "ROLE"));
    anvil_job_spec_free(&s);
    anvil_role_free(&r);
    /* A prefix reached through a link admits the paths it names; a role's runtime 0 is no limit. */
    snprintf(json, sizeof json,
             "{\"name\": \"l\", \"input_prefixes\": [\"%s\"], \"output_prefixes\": [\"/nonexistent\"],"
             " \"max_procs\": 1, \"max_runtime_s\": 0}",
             in("/data/a/out"));
    CHECK(role_of(json, &r) == 0);
    snprintf(fields, sizeof fields, ", \"channels\": {\"c\": \"%s\"}", in("/secret/f"));
    CHECK(refused(&r, spec_of("", fields), NULL, NULL) == 0);
    CHECK(refused(&r, spec_of("", ", \"max_runtime_s\": 1e9"), NULL, NULL) == 0);
    anvil_role_free(&r);
}

static void test_env(void) {
    CHECK(anvil_job_env_inherited("PATH=/bin") && anvil_job_env_inherited("OMPI_MCA_x=1"));
    CHECK(anvil_job_env_inherited("ANVIL_ISA=avx2") && !anvil_job_env_inherited("ANVIL_TOKEN=anv_x"));
    CHECK(!anvil_job_env_inherited("SECRET=1") && !anvil_job_env_inherited("OMP_") &&
          !anvil_job_env_inherited("PATHS=1"));
    CHECK(anvil_job_env_reserved("LD_PRELOAD", false) && !anvil_job_env_reserved("LD_PRELOAD", true));
    CHECK(anvil_job_env_reserved("ANVIL_CHANNEL_X", true) && !anvil_job_env_reserved("OMP_NUM_THREADS", false));
}

static void test_tokens(void) {
    char path[128], admin[ANVIL_TOKEN_SIZE], alice[ANVIL_TOKEN_SIZE], again[ANVIL_TOKEN_SIZE], header[128];
    snprintf(path, sizeof path, "%s/state.db", dir);
    anvil_store *st = anvil_store_open(path);
    CHECK(st != NULL);
    if (!st) return;
    anvil_audit_entry e = {.user = "test", .action = "test", .result = 201};
    anvil_principal who;
    char why[256];
    int n = -1;
    CHECK(anvil_auth_user_count(st, &n) == 0 && n == 0);
    CHECK(anvil_auth_init(st, "admin", admin) == 0 && strlen(admin) == ANVIL_TOKEN_SIZE - 1);
    CHECK(anvil_auth_init(st, "admin", again) == 1);
    CHECK(anvil_auth_add_user(st, "alice", false, &e, alice) == 0 && strcmp(admin, alice));
    CHECK(anvil_auth_add_user(st, "alice", true, &e, again) == 1);
    snprintf(header, sizeof header, "Bearer %s", alice);
    CHECK(anvil_auth_check(st, header, &who, why, sizeof why) == 0 && !strcmp(who.user, "alice") && !who.admin &&
          !strncmp(who.token_id, alice + 4, ANVIL_TOKEN_ID_LEN));
    snprintf(header, sizeof header, "bearer   %s ", admin);
    CHECK(anvil_auth_check(st, header, &who, why, sizeof why) == 0 && !strcmp(who.user, "admin") && who.admin);
    snprintf(header, sizeof header, "Bearer %s", alice);
    char *last = header + strlen(header) - 1;
    *last = *last == '0' ? '1' : '0';
    CHECK(anvil_auth_check(st, header, &who, why, sizeof why) == 1 && strstr(why, "wrong secret") &&
          !who.user[0] && who.token_id[0]);
    CHECK(anvil_auth_check(st, NULL, &who, why, sizeof why) == 1 && strstr(why, "no Authorization"));
    CHECK(anvil_auth_check(st, "Basic YTpi", &who, why, sizeof why) == 1);
    CHECK(anvil_auth_check(st, "Bearer anv_zz", &who, why, sizeof why) == 1 && strstr(why, "not an anvil token"));
    char id[ANVIL_TOKEN_ID_LEN + 1], *user = NULL;
    snprintf(id, sizeof id, "%.16s", alice + 4);
    CHECK(anvil_auth_revoke(st, id, &e, &user) == 0 && user && !strcmp(user, "alice"));
    free(user);
    CHECK(anvil_auth_revoke(st, id, &e, &user) == 2 && !user);
    snprintf(header, sizeof header, "Bearer %s", alice);
    CHECK(anvil_auth_check(st, header, &who, why, sizeof why) == 1 && strstr(why, "revoked"));
    snprintf(id, sizeof id, "%.16s", admin + 4);
    CHECK(anvil_auth_revoke(st, id, &e, &user) == 3);
    CHECK(anvil_auth_add_token(st, "admin", &e, again) == 0 && anvil_auth_revoke(st, id, &e, &user) == 0);
    free(user);
    CHECK(anvil_auth_add_token(st, "nobody", &e, again) == 1);
    CHECK(anvil_auth_revoke(st, "0000000000000000", &e, &user) == 1);
    anvil_store_close(st);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/anvil-test-policy-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char target[300];
    static const char *const dirs[] = {"/data", "/data/a", "/data/ab", "/secret", "/runs"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) CHECK(mkdir(in(dirs[i]), 0755) == 0);
    snprintf(target, sizeof target, "%s", in("/secret"));
    CHECK(symlink(target, in("/data/a/out")) == 0);
    CHECK(symlink(in("/nowhere/file"), in("/data/a/dangling")) == 0);
    CHECK(symlink(in("/data/a/loop"), in("/data/a/loop")) == 0);
    test_resolve();
    test_policy();
    test_env();
    test_tokens();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return t_done("test_policy");
}
